"""The asyncio driver: ``redis.asyncio.Redis`` / ``valkey.asyncio.Valkey``
clients, tasks, ``asyncio`` waits. The synchronous driver (``_sync/``) is
generated from this package's shared modules.

A client of either library is driven by the same code: the classes the driver
makes itself on the client's connection pool (the wake hub's ``PubSub``, the
clients of the watchdog's renewals and of the hub's hand-offs) and the
``NoScriptError`` it catches are those of the client's own library, found once
per client class (see :mod:`.._clients`).

A Redis Cluster client is driven through itself for scripts and commands
(routed by their keys' slot), with the :func:`.._clients.sharded` variant of
every script; it gets one wake hub per node it waits on (sharded pub/sub on a
connection pool of its own to that node, handing its channels to the new
owner's hub when a slot moves or its master fails over), watchdog renewals in
one round trip per node, and a pipeline with ``WAIT`` (``min_replicas``) on a
connection of the slot's master (on any other client: on the connection that
made the grant, see :func:`one_connection`). On a cluster without sharded
pub/sub (Redis 6.2, found by the first call's server probe) it falls back to
the scripts' plain variants (``PUBLISH``, which the cluster bus copies to
every node) and hubs that ``SUBSCRIBE``, still one per node waited on.

The modules, one concern each (``docs/architecture.md``, "The drivers"):
:mod:`.state` (per-client state; :mod:`.flavour`, owner ids and a
cluster client's renewals), :mod:`.reserve` (the quick path's connections),
:mod:`.hub` (the wake hub), :mod:`.watchdog`, :mod:`.pins` (blocks on one
connection), :mod:`.send` (script sending, cluster routing), :mod:`.drive`
(plan driving), :mod:`.fanout` (calls on several servers at once, a
Redlock's; :mod:`.calls`, how each flavour runs them). This package
re-exports what the rest of tenure uses but the fan-out, which the facade
imports as a module.
"""

from .._runtime_async import *  # noqa: F403  (the flavour's own names, its __all__)
from . import late
from .drive import (
    _Contention,
    _drive,
    _perform,
    _send_together,
    batch_key,
    run,
    run_together,
    server_name,
    stop_renewing,
    unwatch,
    watch,
)
from .hub import _Hub
from .hubbase import _Channel, wait_event
from .library import _REDIS, _Library, _library
from .pins import (
    one_connection,
)
from .reserve import (
    QUICK_PATIENCE,
    SPARE_CONNECTIONS,
    _Reserve,
    _take,
)
from .send import (
    _evalsha,
    _one,
    _pipeline,
    _quick,
)
from .state import (
    Client,
    T,
    _hub,
    _renew_each,
    _state,
    check_client,
    current_owner,
)
from .statebase import _State
from .watchdog import (
    _SendRenewals,
    _Watchdog,
)

late.bind(drive=_drive, hub=_hub, one=_one, pipeline=_pipeline, state=_state)

__all__ = [
    "Client",
    "QUICK_PATIENCE",
    "SPARE_CONNECTIONS",
    "T",
    "_Channel",
    "_Contention",
    "_Hub",
    "_Library",
    "_REDIS",
    "_Reserve",
    "_SendRenewals",
    "_State",
    "_Watchdog",
    "_drive",
    "_evalsha",
    "_hub",
    "_library",
    "_perform",
    "_pipeline",
    "_quick",
    "_renew_each",
    "_send_together",
    "_state",
    "_take",
    "batch_key",
    "check_client",
    "current_owner",
    "one_connection",
    "run",
    "run_together",
    "server_name",
    "stop_renewing",
    "unwatch",
    "wait_event",
    "watch",
]
