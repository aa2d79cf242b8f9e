# GENERATED from _async/statebase.py by scripts/unasync.py: do not edit.
"""Per-client state, the part both flavours share: what the driver keeps for
each client (:class:`_State`), the fan-out's connections of a pool
(:class:`_Fan`), and the table of states by client.

Part of the driver's single source: ``_sync/statebase.py`` is generated from
this file by ``scripts/unasync.py``. How a state is found and made (per
event loop, or under a mutex) is :mod:`.state`'s.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..._plans import server as server_plans
from .._runtime_sync import Lock, new_lock

if TYPE_CHECKING:
    from .hub import _Hub
    from .reserve import _Reserve
    from .watchdog import _Watchdog


@dataclass(eq=False)
class _State:
    generation: int
    hub: _Hub
    watchdog: _Watchdog
    #: the event loop it belongs to (asyncio: one state per client and loop;
    #: None in the synchronous flavour)
    loop: Any = None
    server: server_plans.ServerInfo | None = None
    #: a Redis Cluster client's hubs, one per node it waits on, by (host, port)
    nodes: dict[tuple[str, int], _Hub] = field(default_factory=dict)
    #: a Redis Cluster client's connection pools to the masters it sent a
    #: pipeline with WAIT, by (host, port), where the flavour keeps its own
    #: (see ``state._master_client``)
    pools: dict[tuple[str, int], Any] = field(default_factory=dict)
    #: whether a Redis Cluster client's servers have sharded pub/sub (set by
    #: the probe; False on Redis 6.2: plain PUBLISH / SUBSCRIBE)
    sharded: bool = True
    #: the client's weak reference (the entry goes with the client)
    client: Callable[[], Any] = lambda: None
    #: held by the call that probes the server (the first)
    probing: Lock = field(default_factory=new_lock)
    #: the reserve of its scripts' quick path, that of the client's pool (in
    #: this loop) (None: it takes none; see :mod:`.reserve`)
    reserve: _Reserve | None = None
    #: the connections run_each's quick path keeps, those of the client's
    #: pool (in this loop) (None: it takes none; see :class:`_Fan`)
    fan: _Fan | None = None
    #: whether its retry policy sends a command again after a connection error
    retries: bool = True


#: The most connections run_each's quick path keeps checked out of a pool
#: (in a loop) (idle, owing replies or in use; at most a quarter of the
#: pool: see ``state._fan_for``).
SPARE_CONNECTIONS = 8


@dataclass(eq=False)
class _Fan:
    """The connections that run_each's quick path (Redlock's calls in one
    task or on one thread, see the fan-out modules) keeps checked out of one
    pool (in one event loop), shared by every client on the pool: a client
    made per request on a shared pool and dropped leaves them to the next one
    (held by each client, they would be lost with it, slots of the pool never
    given back). Kept on the pool itself (see :func:`.._clients.store_on`);
    in the synchronous flavour guarded by ``_fanout_sync._spare_mutex``."""

    generation: int
    #: how many it may keep checked out (see _clients.pool_share)
    most: int
    #: the event loop it belongs to (None in the synchronous flavour)
    loop: Any = None
    #: idle connected ones (kept until dropped: then given back to the pool)
    spare: list[Any] = field(default_factory=list)
    #: those left with replies still due (a round that stopped once it had
    #: enough): ``(connection, replies due)``, taken first, the next call's
    #: commands written after the due ones
    owed: list[tuple[Any, int]] = field(default_factory=list)
    #: whether one is being checked out in the background
    connecting: bool = False
    #: how many it has checked out of the pool (idle, owing replies, in use
    #: or being checked out)
    open: int = 0


#: The state of each client, by its id(), dropped with the client (looked up on
#: every call: an id and a weak reference are cheaper than a WeakKeyDictionary).
_states: dict[int, _State] = {}


def _forget_state(key: int, ref: Any) -> None:
    if (state := _states.get(key)) is not None and state.client is ref:
        del _states[key]


def _remember(client: Any, state: _State) -> None:
    """Keep ``state`` as ``client``'s in :data:`_states`, until the client goes."""
    key = id(client)
    state.client = weakref.ref(client, lambda ref: _forget_state(key, ref))
    _states[key] = state
