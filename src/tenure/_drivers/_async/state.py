"""Per-client state: the client type, the owner id of the calling task, and
what the driver keeps for each client (its hub, its watchdog, its quick path's
reserve, its server's facts), made on first use in each event loop.

Written by hand for the asyncio flavour (one state per client and event
loop); ``_sync/state.py`` is the synchronous one (a mutex, no loop).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from ..._errors import WrongTypeError
from ..._protocol import parse_reply
from .. import _clients, _identity
from .._runtime_async import forsake
from .._watchbook import renewal_reply
from . import late
from .hub import _Hub
from .library import _library
from .reserve import _reserve_for
from .statebase import SPARE_CONNECTIONS, _Fan, _remember, _State, _states
from .watchdog import _Watchdog

if TYPE_CHECKING:
    import redis.asyncio
    import redis.asyncio.cluster
    import valkey.asyncio


Client: TypeAlias = (
    "redis.asyncio.Redis | valkey.asyncio.Valkey | redis.asyncio.cluster.RedisCluster"
)


T = TypeVar("T")


def check_client(client: object, owner: str) -> Client:
    """``client``, if the asyncio class named ``owner`` can use it (a
    ``redis.asyncio.Redis`` or ``valkey.asyncio.Valkey``, or a subclass). Sends
    nothing.

    Raises:
        InvalidArgument: anything else (a URL, a synchronous client, a
            pipeline, a cluster client, ``None``, ...), naming what was passed.
    """
    _clients.check(client, owner, asyncio=True)
    return client  # type: ignore[return-value]


_task_numbers: weakref.WeakKeyDictionary[asyncio.Task[Any], int] = weakref.WeakKeyDictionary()


def current_owner() -> str:
    """The calling task's owner id (stable for the task's life, new after fork).

    Raises:
        RuntimeError: called outside an asyncio task.
    """
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("tenure's async API must be used from inside an asyncio task")
    number = _task_numbers.get(task)
    if number is None:
        number = _task_numbers[task] = _identity.next_number()
    return _identity.owner_of(number)


def _fan_for(client: Client, loop: asyncio.AbstractEventLoop) -> _Fan | None:
    """run_each's quick-path connections of ``client``'s pool in ``loop``, or
    ``None`` when the client may keep none: :data:`SPARE_CONNECTIONS`, at
    most a quarter of the pool (see :func:`_clients.pool_share`); none for a
    ``BlockingConnectionPool`` or a single-connection client (their calls all
    take the ordinary path, in tasks of their own). Those the pool's kept in
    another loop are given back to it (see :func:`forsake`)."""
    most = _clients.pool_share(client, SPARE_CONNECTIONS)
    if not most:
        return None
    pool = client.connection_pool  # type: ignore[union-attr]
    fan: _Fan | None = _clients.stored_on(pool, "fan")
    if fan is None or fan.generation != _identity.generation() or fan.loop is not loop:
        if fan is not None and fan.generation == _identity.generation():
            forsake([*fan.spare, *(conn for conn, _ in fan.owed)], pool)
            fan.spare = []
            fan.owed = []
        fan = _Fan(_identity.generation(), most, loop)
        if not _clients.store_on(pool, "fan", fan):  # (made by the first client, in its loop)
            return None
    return fan


def _state(client: Client) -> _State:
    loop = asyncio.get_running_loop()
    state = _states.get(id(client))
    if (
        state is None
        or state.client() is not client
        or state.generation != _identity.generation()
        or state.loop is not loop
    ):
        library = _library(type(client))
        if _clients.is_cluster(type(client)):
            ref = weakref.ref(client)

            async def renew(leases: list[Any]) -> list[Any]:
                return await _renew_each(ref, leases)

            hub = _Hub(None, library)  # never listens: see _hub
            state = _State(_identity.generation(), hub, _Watchdog(None, library, send=renew), loop)
        else:
            pool = client.connection_pool  # type: ignore[union-attr]
            state = _State(
                _identity.generation(), _Hub(pool, library), _Watchdog(pool, library), loop
            )
            state.reserve = _reserve_for(client)
            state.fan = _fan_for(client, loop)
            state.retries = _clients.retries_allowed(client)
        _remember(client, state)
    return state


def _hub(client: Client, channel: str) -> _Hub:
    """The hub that listens on ``channel``: the client's, or on a Redis Cluster
    the hub of the node that owns the channel's slot (made on first use, with a
    connection pool of its own to that node)."""
    state = _state(client)
    if not _clients.is_cluster(type(client)):
        return state.hub
    node: Any = client.get_node_from_key(channel)  # type: ignore[union-attr]
    where = (str(node.host), int(node.port))
    hub = state.nodes.get(where)
    if hub is None:
        pool = state.hub._library.pool(
            connection_class=node.connection_class, **node.connection_kwargs
        )
        hub = _Hub(
            pool,
            state.hub._library,
            waiter=state.hub.waiter,
            cluster=weakref.ref(client),
            sharded=state.sharded,
        )
        state.nodes[where] = hub
    return hub


def _master_client(client: Client, state: _State, node: Any) -> Any:
    """A client of the cluster node ``node`` (a slot's master), on a connection
    pool of its own kept per node in ``state`` (see :func:`.send._on_master`)."""
    where = (str(node.host), int(node.port))
    pool = state.pools.get(where)
    if pool is None:
        pool = state.pools[where] = state.hub._library.pool(
            connection_class=node.connection_class, **node.connection_kwargs
        )
    return state.hub._library.client(connection_pool=pool)


async def _renew_each(ref: Callable[[], Client | None], leases: list[Any]) -> list[Any]:
    """A Redis Cluster client's watchdog renewals, grouped by node: one cluster
    pipeline, which sends one round trip to each master owning some of the
    leases' slots. A renewal that fails there (``NOSCRIPT``, ``MOVED`` / ``ASK``
    while its slot moves, a node down) is sent once more on its own through the
    cluster client, which loads the script and follows redirections. Returns
    one reply per lease (``None`` for a lease to retry)."""
    client = ref()
    if client is None:
        return [None] * len(leases)
    steps = [lease._renewal() for lease in leases]
    shard = _state(client).sharded
    raws: list[Any]
    try:
        async with client.pipeline() as pipe:
            for step in steps:
                pipe.execute_command("EVALSHA", *_clients.evalsha_args(step, shard))
            raws = list(await pipe.execute(raise_on_error=False))
    except Exception:
        raws = [None] * len(steps)
    replies: list[Any] = []
    for step, raw in zip(steps, raws, strict=True):
        if raw is not None and not isinstance(raw, Exception):
            try:
                raw = parse_reply(step.script, raw)
            except Exception as exc:
                raw = exc
        if raw is None or (isinstance(raw, Exception) and not isinstance(raw, WrongTypeError)):
            raw = await late.one(client, step)
        replies.append(renewal_reply(raw))
    return replies
