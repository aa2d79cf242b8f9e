# GENERATED from _async/statebase.py by scripts/unasync.py: do not edit.
"""Per-client state, the part both flavours share: what the driver keeps for
each client (:class:`_State`), and the table of states by client.

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
    #: the reserve of run_each's quick path, that of the client's pool (in
    #: this loop) (None: it takes none; see :mod:`.fanout`)
    fan: _Reserve | None = None
    #: whether its retry policy sends a command again after a connection error
    retries: bool = True


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
