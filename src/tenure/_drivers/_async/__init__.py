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
:mod:`.state` (per-client state), :mod:`.reserve` (the quick path's
connections), :mod:`.hub` (the wake hub), :mod:`.watchdog`, :mod:`.pins`
(blocks on one connection), :mod:`.send` (script sending, cluster routing),
:mod:`.drive` (plan driving). This package re-exports what the rest of
tenure uses.
"""

from .._runtime_async import *  # noqa: F403  (the flavour's own names)
from .drive import (
    _Contention as _Contention,
)
from .drive import (
    _drive as _drive,
)
from .drive import (
    _perform as _perform,
)
from .drive import (
    _send_together as _send_together,
)
from .drive import (
    batch_key as batch_key,
)
from .drive import (
    run as run,
)
from .drive import (
    run_together as run_together,
)
from .hub import (
    _REDIS as _REDIS,
)
from .hub import (
    _Channel as _Channel,
)
from .hub import (
    _Hub as _Hub,
)
from .hub import (
    _Library as _Library,
)
from .hub import (
    _library as _library,
)
from .pins import one_connection as one_connection
from .reserve import (
    QUICK_PATIENCE as QUICK_PATIENCE,
)
from .reserve import (
    _Fallback as _Fallback,
)
from .reserve import (
    _Reserve as _Reserve,
)
from .reserve import (
    _take as _take,
)
from .send import _evalsha as _evalsha
from .send import _pipeline as _pipeline
from .send import _quick as _quick
from .state import (
    SPARE_CONNECTIONS as SPARE_CONNECTIONS,
)
from .state import (
    Client as Client,
)
from .state import (
    T as T,
)
from .state import (
    _Fan as _Fan,
)
from .state import (
    _fan_for as _fan_for,
)
from .state import (
    _hub as _hub,
)
from .state import (
    _State as _State,
)
from .state import (
    _state as _state,
)
from .state import (
    check_client as check_client,
)
from .state import (
    current_owner as current_owner,
)
from .state import (
    stop_renewing as stop_renewing,
)
from .state import (
    unwatch as unwatch,
)
from .state import (
    watch as watch,
)
from .watchdog import (
    _renew_each as _renew_each,
)
from .watchdog import (
    _SendRenewals as _SendRenewals,
)
from .watchdog import (
    _Watchdog as _Watchdog,
)
