"""Per-client state: the client type, the owner id of the calling thread,
and what the driver keeps for each client (its hub, its watchdog, its quick
path's reserve, its server's facts), made on first use.

Written by hand for the synchronous flavour (made under ``_states_mutex``);
``_async/state.py`` is the asyncio one (one state per client and event loop).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from ..._errors import WrongTypeError
from ..._protocol import Pipeline
from .. import _clients, _identity
from .._runtime_sync import _states_mutex
from .._watchbook import renewal_reply
from . import late
from .hub import _Hub
from .library import _library
from .reserve import _reserve_for
from .statebase import SPARE_CONNECTIONS, _Fan, _remember, _State, _states
from .watchdog import _Watchdog

if TYPE_CHECKING:
    import redis
    import redis.cluster
    import valkey


Client: TypeAlias = "redis.Redis | valkey.Valkey | redis.cluster.RedisCluster"


T = TypeVar("T")


def check_client(client: object, owner: str) -> Client:
    """``client``, if the synchronous class named ``owner`` can use it (a
    ``redis.Redis`` or ``valkey.Valkey``, or a subclass). Sends nothing.

    Raises:
        InvalidArgument: anything else (a URL, an asyncio client, a pipeline,
            a cluster client, ``None``, ...), naming what was passed.
    """
    _clients.check(client, owner, asyncio=False)
    return client  # type: ignore[return-value]


_local = threading.local()


def current_owner() -> str:
    """The calling thread's owner id (stable for the thread's life, new after fork)."""
    number = getattr(_local, "number", None)
    if number is None:
        number = _local.number = _identity.next_number()
    return _identity.owner_of(number)


def _fan_for(client: Client) -> _Fan | None:
    """run_each's quick-path connections of ``client``'s pool, or ``None``
    when the client may keep none: :data:`SPARE_CONNECTIONS`, at most a
    quarter of the pool (see :func:`_clients.pool_share`); none for a
    ``BlockingConnectionPool`` or a single-connection client (their calls all
    take the ordinary path, on worker threads). Called with ``_states_mutex``
    held."""
    most = _clients.pool_share(client, SPARE_CONNECTIONS)
    if not most:
        return None
    pool = client.connection_pool  # type: ignore[union-attr]
    fan: _Fan | None = _clients.stored_on(pool, "fan")
    if fan is None or fan.generation != _identity.generation():  # (a fork's pool starts afresh)
        fan = _Fan(_identity.generation(), most)
        if not _clients.store_on(pool, "fan", fan):  # (made by the first client)
            return None
    return fan


def _state(client: Client) -> _State:
    state = _states.get(id(client))
    if state is None or state.client() is not client or state.generation != _identity.generation():
        with _states_mutex:
            state = _states.get(id(client))
            if (
                state is None
                or state.client() is not client
                or state.generation != _identity.generation()
            ):
                library = _library(type(client))
                if _clients.is_cluster(type(client)):
                    ref = weakref.ref(client)
                    state = _State(
                        _identity.generation(),
                        _Hub(None, library),  # never listens: see _hub
                        _Watchdog(None, library, send=lambda leases: _renew_each(ref, leases)),
                    )
                else:
                    pool = client.connection_pool  # type: ignore[union-attr]
                    _clients.pool_numbers_as_text(pool)  # (before its first connection)
                    if (single := getattr(client, "connection", None)) is not None:
                        _clients.numbers_as_text(single)  # (a single_connection_client's)
                    state = _State(
                        _identity.generation(), _Hub(pool, library), _Watchdog(pool, library)
                    )
                    state.reserve = _reserve_for(client)
                    state.fan = _fan_for(client)
                    state.retries = _clients.retries_allowed(client)
                _remember(client, state)
    return state


def _hub(client: Client, channel: str) -> _Hub:
    """The hub that listens on ``channel``: the client's, or on a Redis Cluster
    the hub of the node that owns the channel's slot (made on first use)."""
    state = _state(client)
    if not _clients.is_cluster(type(client)):
        return state.hub
    node = client.get_node_from_key(channel)  # type: ignore[union-attr]
    where = (node.host, node.port)
    hub = state.nodes.get(where)
    if hub is None:
        with _states_mutex:
            hub = state.nodes.get(where)
            if hub is None:
                ref = weakref.ref(client)
                hub = _Hub(
                    _clients.node_client(client, node).connection_pool,
                    state.hub._library,
                    waiter=state.hub.waiter,
                    cluster=ref,
                    sharded=state.sharded,
                )
                state.nodes[where] = hub
    return hub


def _master_client(client: Client, state: _State, node: Any) -> Any:
    """The client of the cluster node ``node`` (a slot's master; see
    :func:`.send._on_master`)."""
    return _clients.node_client(client, node)


def _renew_each(ref: Callable[[], Client | None], leases: list[Any]) -> list[Any]:
    """A Redis Cluster client's watchdog renewals, grouped by node: one pipelined
    round trip per master owning some of the leases' slots. A renewal that fails
    there (``MOVED`` / ``ASK`` while its slot moves, a node down) is sent once
    more on its own through the cluster client, which follows redirections.
    Returns one reply per lease (``None`` for a lease to retry)."""
    client = ref()
    if client is None:
        return [None] * len(leases)
    steps = [lease._renewal() for lease in leases]
    raws: list[Any] = [None] * len(steps)
    shard = _state(client).sharded
    for node, indexes in _clients.by_node(client, steps):
        try:
            sent = late.pipeline(
                _clients.node_client(client, node),
                Pipeline(tuple(steps[i] for i in indexes)),
                shard=shard,
            )
        except Exception as exc:
            sent = [exc] * len(indexes)
        for i, raw in zip(indexes, sent, strict=True):
            raws[i] = raw
    for i, raw in enumerate(raws):
        if raw is None or (isinstance(raw, Exception) and not isinstance(raw, WrongTypeError)):
            raws[i] = late.one(client, steps[i])
    return [renewal_reply(raw) for raw in raws]
