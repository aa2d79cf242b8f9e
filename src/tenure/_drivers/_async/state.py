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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from ..._errors import WrongTypeError
from ..._plans import server as server_plans
from ..._protocol import parse_reply
from .. import _clients, _identity
from .._watchbook import renewal_reply
from .hub import _Hub, _library
from .reserve import _forsake, _Reserve, _reserve_for
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


@dataclass(eq=False)
class _State:
    generation: int
    loop: asyncio.AbstractEventLoop
    hub: _Hub
    watchdog: _Watchdog
    server: server_plans.ServerInfo | None = None
    #: a Redis Cluster client's hubs, one per node it waits on, by (host, port)
    nodes: dict[tuple[str, int], _Hub] = field(default_factory=dict)
    #: a Redis Cluster client's connection pools to the masters it sent a
    #: pipeline with WAIT, by (host, port) (see _on_master)
    pools: dict[tuple[str, int], Any] = field(default_factory=dict)
    #: whether a Redis Cluster client's servers have sharded pub/sub (set by
    #: the probe; False on Redis 6.2: plain PUBLISH / SUBSCRIBE)
    sharded: bool = True
    #: the client's weak reference (the entry goes with the client)
    client: Callable[[], Any] = lambda: None
    #: held by the call that probes the server (the first)
    probing: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: the reserve of its scripts' quick path, that of the client's pool in
    #: this loop (None: it takes none; see :mod:`.reserve`)
    reserve: _Reserve | None = None
    #: the connections run_each's quick path keeps, those of the client's
    #: pool in this loop (None: it takes none; see :class:`_Fan`)
    fan: _Fan | None = None
    #: whether its retry policy sends a command again after a connection error
    retries: bool = True


#: The most connections run_each's quick path keeps checked out of a pool
#: in a loop (idle, owing replies or in use; at most a quarter of the pool:
#: see :func:`_fan_for`).
SPARE_CONNECTIONS = 8


@dataclass(eq=False)
class _Fan:
    """The connections that run_each's quick path (Redlock's calls in one
    task, see :mod:`._fanout_async`) keeps checked out of one pool in one
    event loop, shared by every client on the pool: a client made per
    request on a shared pool and dropped leaves them to the next one (kept
    by each client, they would be lost with it, slots of the pool never
    given back).
    Kept on the pool itself (see :func:`_clients.store_on`)."""

    generation: int
    loop: asyncio.AbstractEventLoop
    #: how many it may keep checked out (see _clients.pool_share)
    most: int
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


def _fan_for(client: Client, loop: asyncio.AbstractEventLoop) -> _Fan | None:
    """run_each's quick-path connections of ``client``'s pool in ``loop``, or
    ``None`` when the client may keep none: :data:`SPARE_CONNECTIONS`, at
    most a quarter of the pool (see :func:`_clients.pool_share`); none for a
    ``BlockingConnectionPool`` or a single-connection client (their calls all
    take the ordinary path, in tasks of their own). Those the pool's kept in
    another loop are given back to it (see :func:`_forsake`)."""
    most = _clients.pool_share(client, SPARE_CONNECTIONS)
    if not most:
        return None
    pool = client.connection_pool  # type: ignore[union-attr]
    fan: _Fan | None = _clients.stored_on(pool, "fan")
    if fan is None or fan.generation != _identity.generation() or fan.loop is not loop:
        if fan is not None and fan.generation == _identity.generation():
            _forsake([*fan.spare, *(conn for conn, _ in fan.owed)], pool)
            fan.spare = []
            fan.owed = []
        fan = _Fan(_identity.generation(), loop, most)
        if not _clients.store_on(pool, "fan", fan):  # (made by the first client, in its loop)
            return None
    return fan


#: The state of each client, by its id(), dropped with the client (looked up on
#: every call: an id and a weak reference are cheaper than a WeakKeyDictionary).
_states: dict[int, _State] = {}


def _forget_state(key: int, ref: Any) -> None:
    if (state := _states.get(key)) is not None and state.client is ref:
        del _states[key]


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
            state = _State(_identity.generation(), loop, hub, _Watchdog(None, library, send=renew))
        else:
            pool = client.connection_pool  # type: ignore[union-attr]
            state = _State(
                _identity.generation(), loop, _Hub(pool, library), _Watchdog(pool, library)
            )
            state.reserve = _reserve_for(client, loop)
            state.fan = _fan_for(client, loop)
            state.retries = _clients.retries_allowed(client)
        key = id(client)
        state.client = weakref.ref(client, lambda ref: _forget_state(key, ref))
        _states[key] = state
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
    from .send import _one  # (above this module: imported when used)

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
            raw = await _one(client, step)
        replies.append(renewal_reply(raw))
    return replies
