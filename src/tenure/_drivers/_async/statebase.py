"""Per-client state, the part both flavours share: what the driver keeps for
each client (:class:`_State`), and the table of states by client.

Part of the driver's single source: ``_sync/statebase.py`` is generated from
this file by ``scripts/unasync.py``. How a state is found and made (per
event loop, or under a mutex) is :mod:`.state`'s.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._plans import server as server_plans
from .. import _identity
from .._runtime_async import Lock, ended, new_lock

if TYPE_CHECKING:
    from .hub import _Hub
    from .reserve import _Reserve
    from .watchdog import _Watchdog


class _State:
    """What the driver keeps for one client (in one event loop)."""

    def __init__(self, generation: int, hub: _Hub, watchdog: _Watchdog, loop: Any = None) -> None:
        self.generation = generation
        self.hub = hub
        self.watchdog = watchdog
        #: the event loop it belongs to (asyncio: one state per client and loop;
        #: None in the synchronous flavour)
        self.loop = loop
        self.server: server_plans.ServerInfo | None = None
        #: a Redis Cluster client's hubs, one per node it waits on, by (host, port)
        self.nodes: dict[tuple[str, int], _Hub] = {}
        #: a Redis Cluster client's connection pools to the masters it sent a
        #: pipeline with WAIT, by (host, port), where the flavour keeps its own
        #: (see ``state._master_client``)
        self.pools: dict[tuple[str, int], Any] = {}
        #: whether a Redis Cluster client's servers have sharded pub/sub (set by
        #: the probe; False on Redis 6.2: plain PUBLISH / SUBSCRIBE)
        self.sharded = True
        #: the client's weak reference (the entry goes with the client)
        self.client: Callable[[], Any] = _no_client
        #: held by the call that probes the server (the first)
        self.probing: Lock = new_lock()
        #: the reserve of its scripts' quick path, that of the client's pool (in
        #: this loop) (None: it takes none; see :mod:`.reserve`)
        self.reserve: _Reserve | None = None
        #: the reserve of run_each's quick path, that of the client's pool (in
        #: this loop) (None: it takes none; see :mod:`.fanout`)
        self.fan: _Reserve | None = None
        #: whether its retry policy sends a command again after a connection error
        self.retries = True


def _no_client() -> Any:
    """The client of a state not in the table yet: none."""
    return None


#: The state of each client, by its id(), dropped with the client (looked up on
#: every call: an id and a weak reference are cheaper than a WeakKeyDictionary).
_states: dict[int, _State] = {}


def _forget_state(key: int, ref: Any) -> None:
    if (state := _states.get(key)) is not None and state.client is ref:
        del _states[key]
        state.watchdog.left()


#: How many states :data:`_states` held after its last sweep (see :func:`_sweep`).
_kept = [0]


def _remember(client: Any, state: _State) -> None:
    """Keep ``state`` as ``client``'s in :data:`_states`, until the client goes
    (or its home does: see :func:`_sweep`). Called with ``states_mutex`` held."""
    if len(_states) >= 2 * _kept[0] + 8:
        _sweep()
    key = id(client)
    state.client = weakref.ref(client, lambda ref: _forget_state(key, ref))
    state.watchdog.users += 1
    _states[key] = state


def _sweep() -> None:
    """Drop the states no call can use again: those of a closed event loop, or
    of a forked parent. Such a state may hold its own client (its watchdog's
    book holds the leases left held, which hold their locks and client), so
    its entry would otherwise keep it, its pool and its connections for good.
    Run as the table has doubled since the last sweep: amortized, a constant
    cost per state made."""
    generation = _identity.generation()
    for key, state in list(_states.items()):
        if (state.generation != generation or ended(state.loop)) and _states.get(key) is state:
            _states.pop(key, None)
    _kept[0] = len(_states)
