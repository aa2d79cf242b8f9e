"""Per-client state: the client type, and what the driver keeps for each
client (its hub, its watchdog, its quick path's reserve, its server's facts),
made on first use in each home (event loop, or process: the runtime's
:func:`home`), under the runtime's ``states_mutex``.

Part of the driver's single source: ``_sync/state.py`` is generated from this
file by ``scripts/unasync.py``. The owner id of the calling task or thread,
and a cluster client's renewals and master clients, are in :mod:`.flavour`.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, TypeAlias, TypeGuard, TypeVar

from .. import _clients, _identity
from .._runtime_async import ASYNCIO, home, node_pool, prepare, states_mutex
from .flavour import _master_client, _renew_each, current_owner
from .hub import _Hub
from .library import _library
from .reserve import SPARE_CONNECTIONS, _reserve_for
from .statebase import _remember, _State, _states
from .watchdog import _Watchdog

if TYPE_CHECKING:
    import redis.asyncio
    import redis.asyncio.cluster
    import valkey.asyncio


Client: TypeAlias = (
    "redis.asyncio.Redis | valkey.asyncio.Valkey | redis.asyncio.cluster.RedisCluster"
)


T = TypeVar("T")

__all__ = [
    "Client",
    "T",
    "_hub",
    "_master_client",
    "_renew_each",
    "_state",
    "check_client",
    "current_owner",
]


def check_client(client: object, owner: str) -> Client:
    """``client``, if the class named ``owner`` (of this flavour) can use it (a
    ``redis.asyncio.Redis`` or ``valkey.asyncio.Valkey``, or a subclass).
    Sends nothing.

    Raises:
        InvalidArgument: anything else (a URL, a client of the other flavour,
            a pipeline, a cluster client, ``None``, ...), naming what was passed.
    """
    _clients.check(client, owner, asyncio=ASYNCIO)
    return client  # type: ignore[return-value]


def _state(client: Client) -> _State:
    """``client``'s state in this process and home, made on first use (at
    most once: looked up again under ``states_mutex``)."""
    here = home()
    state = _states.get(id(client))
    if _current(state, client, here):
        return state
    with states_mutex:
        state = _states.get(id(client))
        if _current(state, client, here):
            return state
        made = _new_state(client, here)
        _remember(client, made)
        return made


def _current(state: _State | None, client: Client, here: Any) -> TypeGuard[_State]:
    """Whether ``state`` is ``client``'s in this process and home (not another
    client's under a reused id, nor a forked parent's, nor another loop's)."""
    return (
        state is not None
        and state.client() is client
        and state.generation == _identity.generation()
        and state.loop is here
    )


def _new_state(client: Client, here: Any) -> _State:
    """A new state for ``client`` in ``here`` (see :func:`_state`)."""
    library = _library(type(client))
    if _clients.is_cluster(type(client)):
        ref = weakref.ref(client)

        async def renew(leases: list[Any]) -> list[Any]:
            return await _renew_each(ref, leases)

        hub = _Hub(None, library)  # never listens: see _hub
        return _State(_identity.generation(), hub, _Watchdog(None, library, send=renew), here)
    pool = client.connection_pool  # type: ignore[union-attr]
    prepare(client, pool)  # (before the pool's first connection)
    hub, watchdog = _runners_for(pool, library, here)
    state = _State(_identity.generation(), hub, watchdog, here)
    state.reserve = _reserve_for(client, "reserve", _clients.quick_connections(client))
    # run_each's: none for a BlockingConnectionPool or a single-connection
    # client (their calls all take the ordinary path)
    state.fan = _reserve_for(client, "fan", _clients.pool_share(client, SPARE_CONNECTIONS))
    state.retries = _clients.retries_allowed(client)
    return state


def _runners_for(pool: Any, library: Any, here: Any) -> tuple[_Hub, _Watchdog]:
    """The wake hub and the watchdog of ``pool`` in ``here``: they use only the
    pool, so every client on it shares them, as the reserves (a client made
    per request on a shared pool and dropped leaves them to the next one;
    each its own, they held a pub/sub connection, a slot of the pool, and a
    thread for a while after it went). Kept on the pool (see
    :func:`_clients.store_on`); a pool that takes no attribute gets new ones
    per client. Called with ``states_mutex`` held."""
    kept = _clients.stored_on(pool, "runners")
    if kept is not None and kept[0] == _identity.generation() and kept[1] is here:
        return kept[2], kept[3]
    runners = (_Hub(pool, library), _Watchdog(pool, library))
    _clients.store_on(pool, "runners", (_identity.generation(), here, *runners))
    return runners


def _hub(client: Client, channel: str) -> _Hub:
    """The hub that listens on ``channel``: the client's, or on a Redis Cluster
    the hub of the node that owns the channel's slot (made on first use; see
    the runtime's ``node_pool``)."""
    state = _state(client)
    if not _clients.is_cluster(type(client)):
        return state.hub
    node: Any = client.get_node_from_key(channel)  # type: ignore[union-attr]
    where = (str(node.host), int(node.port))
    hub = state.nodes.get(where)
    if hub is None:
        with states_mutex:
            hub = state.nodes.get(where)
            if hub is None:
                hub = _Hub(
                    node_pool(client, state.hub._library, node),
                    state.hub._library,
                    waiter=state.hub.waiter,
                    cluster=weakref.ref(client),
                    sharded=state.sharded,
                )
                state.nodes[where] = hub
    return hub
