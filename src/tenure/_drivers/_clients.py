"""Client libraries: which one a client comes from, and whether a primitive accepts it.

tenure drives the clients of two libraries, with the same driver code:

- redis-py (``redis``): ``redis.Redis`` and ``redis.asyncio.Redis``, and their
  subclasses (a Sentinel ``master_for()`` client is a ``redis.Redis``);
- valkey-py (``valkey``), the Valkey project's fork of redis-py:
  ``valkey.Valkey`` and ``valkey.asyncio.Valkey``. Its classes have other module
  and class names, its own exceptions (``valkey.exceptions.*``, unrelated to
  ``redis.exceptions.*``) and a few other signatures, so a driver must never
  mix one library's pub/sub, client or exception classes with the other's
  connection pool or replies.

Each driver asks :func:`library_of` once per client class and uses that
library's classes. :func:`check` is what every primitive's constructor runs
on its ``client`` argument, before anything is sent: it refuses, with an
:class:`~tenure.InvalidArgument` naming what was passed and what is expected,
a URL (a ``str``), ``None``, a client of the other API (an asyncio client
given to a synchronous class, or the reverse), a pipeline (a ``Pipeline`` is a
subclass of its client class), a cluster client given to a Redlock, and any
other object. valkey-py is looked at only if the program imported it: a
valkey-py client cannot exist otherwise.

Redis Cluster clients of both libraries (redis-py's ``RedisCluster``,
valkey-py's ``ValkeyCluster``, sync and asyncio) are driven alike: routed by
``get_node_from_key``, each node's own client from :func:`node_client`.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from functools import cache
from typing import Any, Literal

from .._errors import InvalidArgument
from .._protocol import Command, Eval, Pipeline, client_error, text
from .._scripts import sharded as sharded  # the drivers call it as _clients.sharded
from . import _internals

Library = Literal["redis", "valkey"]


def library_of(cls: type) -> Library:
    """The library a client class comes from: the first of its classes (itself,
    then its bases) defined in ``redis`` or ``valkey``. ``"redis"`` when none is
    (the facade accepts no such client)."""
    for base in cls.__mro__:
        root = base.__module__.partition(".")[0]
        if root == "valkey":
            return "valkey"
        if root == "redis":
            return "redis"
    return "redis"


_Classes = tuple[type, ...]


@cache
def _classes(with_valkey: bool) -> tuple[_Classes, _Classes, _Classes, _Classes, _Classes]:
    """(sync clients, asyncio clients, pipelines, cluster clients, Sentinel
    managers). Both libraries name their classes alike (``redis.Redis``,
    ``redis.cluster.RedisCluster``; ``valkey.Valkey``,
    ``valkey.cluster.ValkeyCluster``), in the same modules, sync and
    ``.asyncio``; the cluster clients come as (sync, asyncio) per library."""
    sync: list[type] = []
    aio: list[type] = []
    pipelines: list[type] = []
    clusters: list[type] = []
    sentinels: list[type] = []
    for library in ("redis", "valkey") if with_valkey else ("redis",):
        name = library.capitalize()
        for clients, package in ((sync, library), (aio, library + ".asyncio")):
            client = importlib.import_module(package + ".client")
            cluster = importlib.import_module(package + ".cluster")
            clients.append(getattr(importlib.import_module(package), name))
            pipelines += [client.Pipeline, cluster.ClusterPipeline]
            clusters.append(getattr(cluster, name + "Cluster"))
            sentinels.append(importlib.import_module(package + ".sentinel").Sentinel)
    return tuple(sync), tuple(aio), tuple(pipelines), tuple(clusters), tuple(sentinels)


def _described(value: object) -> str:
    """``value`` as an error message names it: its class, with its module unless
    it is a builtin (then with its ``repr``, cut to 60 characters)."""
    cls = type(value)
    if cls.__module__ != "builtins":
        return f"a {cls.__module__}.{cls.__qualname__}"
    shown = repr(value)
    return f"the {cls.__qualname__} {shown if len(shown) <= 60 else shown[:56] + ' ...'}"


def _twin(owner: str) -> str:
    return owner.removeprefix("Async") if owner.startswith("Async") else "Async" + owner


def check(client: object, owner: str, *, asyncio: bool) -> None:
    """Refuse a ``client`` that the primitive class ``owner`` (its name, e.g.
    ``"Lock"``) cannot use; ``asyncio``: whether ``owner`` is an asyncio class.
    Sends nothing and keeps no reference to ``client``.

    Raises:
        InvalidArgument: ``client`` is not a client of the API ``owner`` needs
            (``redis.Redis`` / ``valkey.Valkey`` or a subclass for a synchronous
            class, ``redis.asyncio.Redis`` / ``valkey.asyncio.Valkey`` for an
            asyncio one, or a ``RedisCluster`` / ``ValkeyCluster`` of that API,
            except for a Redlock); the message names what was passed and what
            is expected.
    """
    sync, aio, pipelines, clusters, sentinels = _classes("valkey" in sys.modules)
    wanted, other = (aio, sync) if asyncio else (sync, aio)
    if isinstance(client, wanted) and not isinstance(client, pipelines):
        return
    if isinstance(client, _cluster_classes(asyncio)):
        if owner.endswith("Redlock"):
            raise InvalidArgument(
                f"{owner} needs independent masters, one client each, not "
                f"{_described(client)} (a Redis Cluster client): use Lock with it"
            )
        return
    module = "redis.asyncio" if asyncio else "redis"
    expected = (
        "a redis.asyncio.Redis or valkey.asyncio.Valkey client"
        if asyncio
        else "a redis.Redis or valkey.Valkey client"
    )
    needs = f"{owner} needs {expected}"
    if client is None:
        raise InvalidArgument(f"{needs}, not None")
    what = _described(client)
    if isinstance(client, str | bytes):
        raise InvalidArgument(
            f"{needs}, not {what}: make a client from a URL with {module}.Redis.from_url(url)"
        )
    if isinstance(client, pipelines):
        raise InvalidArgument(
            f"{needs}, not {what}: a pipeline can't hold a lock: pass the client itself"
        )
    if isinstance(client, (*clusters, *other)):
        kind = "a synchronous" if asyncio else "an asyncio"
        cluster = " cluster" if isinstance(client, clusters) else ""
        raise InvalidArgument(
            f"{needs}, not {what} ({kind}{cluster} client): use {_twin(owner)} with this client"
        )
    if isinstance(client, sentinels):
        raise InvalidArgument(
            f"{needs}, not {what}: pass the client of the master, sentinel.master_for(service_name)"
        )
    if isinstance(client, type):
        raise InvalidArgument(f"{needs}, not the class {client.__module__}.{client.__qualname__}")
    raise InvalidArgument(f"{needs}, not {what}")


def _cluster_classes(asyncio: bool | None = None) -> tuple[type, ...]:
    """The Redis Cluster client classes: redis-py's ``RedisCluster`` and (if the
    program imported valkey-py) valkey-py's ``ValkeyCluster``, the synchronous
    ones (``asyncio=False``), the asyncio ones (``True``) or all (``None``)."""
    clusters = _classes("valkey" in sys.modules)[3]  # (sync, asyncio) per library
    if asyncio is None:
        return clusters
    return clusters[1::2] if asyncio else clusters[::2]


#: :func:`is_cluster`'s answers, by client class (asked on every script call).
_IS_CLUSTER: dict[type, bool] = {}


def is_cluster(cls: type) -> bool:
    """Whether ``cls`` is a Redis Cluster client class of either library (sync or
    asyncio), which the drivers drive per node (see the module docstring)."""
    known = _IS_CLUSTER.get(cls)
    if known is None:  # (a class's answer never changes: valkey-py's exist once imported)
        known = _IS_CLUSTER[cls] = issubclass(cls, _cluster_classes())
    return known


#: Sharded pub/sub (SSUBSCRIBE / SPUBLISH): Redis >= 7.0, any supported Valkey.
SHARDED_MINIMUM = {"redis": (7, 0), "valkey": (7, 2)}


def sharded_pubsub(name: str, version: tuple[int, ...]) -> bool:
    """Whether a cluster of ``name`` (``"redis"`` / ``"valkey"``) servers of
    ``version`` has sharded pub/sub. Without it (a Redis 6.2 cluster) the
    drivers fall back to the scripts' plain variants, whose ``PUBLISH`` the
    cluster bus copies to every node, and to hubs that ``SUBSCRIBE``: one
    connection per master waited on, as with sharded pub/sub, though any node
    would do (docs/topologies.md says what the fallback costs)."""
    return version[:2] >= SHARDED_MINIMUM.get(name, SHARDED_MINIMUM["redis"])


def on_one_connection(step: Pipeline) -> bool:
    """Whether a pipeline must be sent on one connection, to the master of its
    first script's slot, rather than step by step through a Redis Cluster
    client: it has a command that acts on its connection's writes (``WAIT`` /
    ``WAITAOF``, what ``min_replicas`` sends), which must follow the write on
    that master's connection."""
    return any(
        isinstance(part, Command) and str(part.args[0]).upper() in ("WAIT", "WAITAOF")
        for part in step.steps
    )


def first_key(step: Pipeline) -> str | None:
    """The first key of the pipeline's first script with keys (``None``: none has)."""
    for part in step.steps:
        if isinstance(part, Eval) and part.keys:
            return str(part.keys[0])
    return None


#: The error replies of a Redis Cluster node that mean "not here (now)": the
#: slot moved (``MOVED``), is moving (``ASK``), or is split between two nodes
#: mid-migration (``TRYAGAIN``); redis-py's exception class names.
REDIRECTS = ("MovedError", "AskError", "TryAgainError")


#: How long a script call on a Redis Cluster keeps trying, at the most, while
#: its slot is split mid-migration (seconds): from ``CLUSTER SETSLOT ...
#: MIGRATING`` until ``SETSLOT ... NODE`` the slot's nodes refuse every script
#: of it (``TRYAGAIN``: its keys are not all on one node), and the client
#: library gives up after its own few retries (about 0.4 s).
SPLIT_PATIENCE = 5.0


def split_slot(exc: BaseException) -> bool:
    """Whether ``exc`` says that a call did not run because its slot is split
    mid-migration: ``TRYAGAIN``, or the ``ClusterError('TTL exhausted.')``
    that redis-py and valkey-py raise once their own retries of ``MOVED`` /
    ``ASK`` / ``TRYAGAIN`` (none of which runs the call) are used up. Safe to
    send again."""
    name = type(exc).__name__
    return name == "TryAgainError" or (name == "ClusterError" and "TTL exhausted" in str(exc))


def master_unreached(client: Any, exc: BaseException) -> bool:
    """Whether ``exc``, raised by a Redis Cluster ``client``, says that the
    master of the call's slot could not be reached: one of the errors its
    class retries itself after refreshing its slot map (``ERRORS_ALLOW_RETRY``:
    a connection error or timeout, ``CLUSTERDOWN``, a slot no node serves),
    raised once those retries ran out (a master down until its replica is
    promoted). Matched by exact class, as the client does (a subclass such
    as ``AuthenticationError`` is not one)."""
    return type(exc) in getattr(type(client), "ERRORS_ALLOW_RETRY", ())


class Fallback(Exception):
    """A call or reply a quick path leaves to the ordinary one, which says it
    right or sends it again: an error reply (NOSCRIPT, NOPERM, ...), a
    connection fault under a retry policy, no connection free in time."""


def connection_fault(exc: BaseException) -> bool:
    """Whether ``exc`` is an error of the client library (redis-py's
    ``RedisError``, valkey-py's ``ValkeyError``) or of the socket (``OSError``,
    timeouts included): a failed call, which the quick path leaves to the
    client's ordinary path and its retry policy. Anything else, of any
    exception class (an interrupt: a signal handler's exception), is not: the
    call is not sent again, and the exception goes on as it is."""
    return client_error(exc)


def redirected(reply: object) -> bool:
    """Whether ``reply`` is one of :data:`REDIRECTS`."""
    return type(reply).__name__ in REDIRECTS


def node_client(client: Any, node: Any) -> Any:
    """The client (of the cluster client's library, on that node's own connection
    pool) that a Redis Cluster ``client`` keeps for its ``node``."""
    if library_of(type(client)) == "valkey":
        return client.get_valkey_connection(node)
    return client.get_redis_connection(node)


def by_node(client: Any, steps: Sequence[Eval | Command]) -> list[tuple[Any, list[int]]]:
    """The indexes of ``steps`` grouped by the Redis Cluster node (a redis-py
    ``ClusterNode``) that owns each one's first key's slot, in the order the
    nodes are first met. A step with no key is left out (the caller sends it
    through the cluster client)."""
    groups: dict[tuple[str, int], tuple[Any, list[int]]] = {}
    for i, step in enumerate(steps):
        if not isinstance(step, Eval) or not step.keys:
            continue
        node = client.get_node_from_key(step.keys[0])
        groups.setdefault((node.host, node.port), (node, []))[1].append(i)
    return list(groups.values())


def left_master(pool: Any, connection: Any) -> bool:
    """Whether ``connection``, taken from a Sentinel master pool (redis-py's or
    valkey-py's ``SentinelConnectionPool``), talks to another server than the
    master the pool last learned from the Sentinels: a failover this connection
    has not noticed, because its server went silent (paused, cut off) or was
    made a replica without closing it. ``False`` for any other pool, and
    until the pool has learned a master."""
    if connection is None or not getattr(pool, "is_master", False):
        return False
    master = getattr(pool, "master_address", None)
    if not master:
        return False
    where = (getattr(connection, "host", None), getattr(connection, "port", None))
    return where != tuple(master)


def evalsha_args(step: Eval, shard: bool = False) -> tuple[Any, ...]:
    """The arguments of ``evalsha`` (of either library, client or pipeline) for ``step``:
    sha1, number of keys, keys, then arguments; with ``shard`` (a cluster with
    sharded pub/sub), the SHA-1 of the script's :func:`sharded` variant.

    Every argument is ``str`` or ``bytes``, numbers in decimal (the bytes any
    packer writes for them): hiredis (3.5) packs a number through
    ``PyObject_Repr``, which runs a pending signal handler first, and
    dereferences the NULL it returns when the handler raised
    (``KeyboardInterrupt``, a timeout alarm): the process dies of SIGSEGV.
    Text and bytes it copies without running any Python code. Every script
    call tenure sends goes through here."""
    spec = sharded(step.script) if shard else step.script
    return (
        spec.sha1,
        str(len(step.keys)),
        *step.keys,
        *[str(a) if type(a) is int else a for a in step.args],
    )


def commands(step: Any) -> list[tuple[Any, ...]]:
    """The commands ``step`` sends: ``EVALSHA`` of a script call (see
    :func:`evalsha_args`), a command as it is, a pipeline's in order."""
    if isinstance(step, Eval):
        return [("EVALSHA", *evalsha_args(step))]
    if isinstance(step, Command):
        return [step.args]
    if isinstance(step, Pipeline):
        return [c for part in step.steps for c in commands(part)]
    raise TypeError(f"run_each can't send {step!r}")


def source_of(step: Eval, shard: bool = False) -> bytes:
    """The source to ``SCRIPT LOAD`` for ``step`` (its :func:`sharded` variant with ``shard``)."""
    return (sharded(step.script) if shard else step.script).source


#: The types of sharded pub/sub messages (``SSUBSCRIBE`` / ``SPUBLISH``), as
#: the hub book names their plain counterparts.
SHARDED_TYPES = {"smessage": "message", "ssubscribe": "subscribe", "sunsubscribe": "unsubscribe"}


def forget_shard_channel(pubsub: Any, channel: Any) -> None:
    """Remove ``channel`` (``str`` or ``bytes``) from a PubSub's sharded
    subscriptions (redis-py's or valkey-py's, sync or asyncio), which it would
    subscribe again on a reconnection: the server dropped it (the slot moved)."""
    channels = getattr(pubsub, "shard_channels", {})
    name = text(channel)
    for key in (channel, name, name.encode()):
        channels.pop(key, None)


#: The most pool connections the drivers' quick path keeps per client (see
#: :func:`quick_connections`).
QUICK_CONNECTIONS = 8


def quick_connections(client: Any) -> int:
    """How many connections a (non-cluster) client's ``EVALSHA`` calls may
    keep for the drivers' quick path (0: none, every call takes the ordinary
    one). The quick path checks a connection out of the client's pool once and
    keeps it, idle between its calls (no checkout per call, none of the
    client's per-command wrappers); the command is packed by hiredis when the
    connection uses it. As many calls at once take it as it keeps connections:
    :data:`QUICK_CONNECTIONS`, at most :func:`pool_share` of the pool."""
    return pool_share(client, QUICK_CONNECTIONS)


def pool_share(client: Any, most: int) -> int:
    """How many connections tenure may keep checked out of a (non-cluster,
    sync or asyncio) client's pool for one of its quick paths: ``most``, at
    most a quarter of the pool's ``max_connections`` (a smaller pool keeps its
    connections for its user). None (0) for a client with one connection of
    its own (``single_connection_client``), nor for a
    ``BlockingConnectionPool`` (its user waits for connections: tenure keeps
    none out), nor for a pool without a ``max_connections``."""
    if getattr(client, "connection", None) is not None:
        return 0
    if getattr(client, "single_connection_client", False) is True:
        return 0  # (an asyncio client takes its connection at its first command)
    pool = getattr(client, "connection_pool", None)
    if pool is None or any(cls.__name__ == "BlockingConnectionPool" for cls in type(pool).__mro__):
        return 0
    limit = getattr(pool, "max_connections", None)
    if not isinstance(limit, int):
        return 0
    return max(0, min(most, limit // 4))


def stored_on(pool: Any, kind: str) -> Any:
    """What tenure stored on ``pool`` under ``kind`` (see :func:`store_on`), or ``None``."""
    return getattr(pool, f"_tenure_{kind}", None)


def store_on(pool: Any, kind: str, value: Any) -> bool:
    """Store ``value`` (connections a quick path keeps checked out of ``pool``)
    on the pool itself, an attribute: it goes with the pool. (A table with the
    pool as a weak key would keep it for good: a redis-py connection holds its
    pool, through its maintenance-notification handler, and the value holds
    connections.) ``False`` for a pool that takes no attribute: nothing is stored."""
    try:
        setattr(pool, f"_tenure_{kind}", value)
    except (AttributeError, TypeError):
        return False
    return True


def checkout(pool: Any, library: Library) -> Any:
    """A connection of a (sync or asyncio) pool, as its library asks for it
    (valkey-py still wants a command name, redis-py warns when given one):
    the connection, or for an asyncio pool the awaitable of it. A sync
    connection packs numbers as text from then on (:func:`numbers_as_text`):
    tenure keeps it, and connects it again after an interrupt."""
    conn = pool.get_connection("EVALSHA") if library == "valkey" else pool.get_connection()
    numbers_as_text(conn)
    _pool_numbers_as_text(pool, conn)
    return conn


def _pool_numbers_as_text(pool: Any, conn: Any) -> None:
    """From now on, the connections ``pool`` makes pack numbers as text (see
    :class:`_TextNumbers`) from their first handshake on: the packer of
    ``conn``, a sync connection of it, given to the pool's connection
    arguments (``command_packer``, which both libraries' connections take).
    So no connection of a pool tenure uses, whether tenure's or the
    client's own, hands the C packer a number: not the handshake of a
    connection that redis-py's ordinary path makes for tenure's call, nor
    the commands the program sends itself (the same bytes either way)."""
    packer = _internals.command_packer(conn)
    kwargs = getattr(pool, "connection_kwargs", None)
    if isinstance(packer, _TextNumbers) and isinstance(kwargs, dict):
        kwargs.setdefault("command_packer", packer)
        then = kwargs.get("redis_connect_func")
        if not isinstance(then, _WholeHandshake):
            kwargs["redis_connect_func"] = _WholeHandshake(then)


class _WholeHandshake:
    """A sync connection's handshake (``redis_connect_func``, which both
    libraries' connections take: ``then``, or the connection's own), made
    whole or not at all: whatever cuts it off (an interrupt of any class)
    disconnects the connection before it goes on. The libraries keep a
    connection's socket when its handshake is cut off by anything but their
    own errors, and their pools take the connection back: every later call
    on it then fails (its reply parser was never set up)."""

    __slots__ = ("_then",)

    def __init__(self, then: Any) -> None:
        self._then = then

    def __call__(self, conn: Any) -> Any:
        try:
            if self._then is not None:
                return self._then(conn)
            handshake = getattr(conn, "on_connect_check_health", None)
            return handshake() if handshake is not None else conn.on_connect()
        except BaseException:
            conn.disconnect()
            raise


def pool_numbers_as_text(pool: Any) -> None:
    """:func:`_pool_numbers_as_text` before ``pool`` made any connection for
    tenure: its connection class is asked which packer it would use (a
    connection object made and dropped, never connected). Nothing for a pool
    whose connections pack in Python, or that was given a packer."""
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict) or kwargs.get("command_packer") is not None:
        return
    try:
        sample = pool.connection_class(**kwargs)
    except Exception:  # (a pool of another shape: its connections are wrapped one by one)
        return
    numbers_as_text(sample)
    _pool_numbers_as_text(pool, sample)


#: The packers (redis-py's, valkey-py's) of a sync connection that packs with
#: hiredis (libvalkey): numbers given to them go through ``PyObject_Repr``.
_C_PACKERS = frozenset({"HiredisRespSerializer", "LibvalkeyRespSerializer"})


class _TextNumbers:
    """A connection's C packer, given every ``int`` and ``float`` as its
    decimal text: the same bytes, without the packer running Python code.
    hiredis (3.5) and libvalkey format a number with ``PyObject_Repr``, which
    runs a pending signal handler first, and then read the NULL it returns
    when the handler raised (``KeyboardInterrupt``): a segmentation fault.
    What the connection itself sends is packed here too: the handshake of
    each reconnection (``HELLO 3``, ``SELECT`` of the client's ``db``)."""

    __slots__ = ("inner",)

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def pack(self, *args: Any) -> Any:
        if not _NUMBERS.isdisjoint(map(type, args)):  # (tenure's own are text already)
            args = tuple(str(a) if type(a) in _NUMBERS else a for a in args)
        return self.inner.pack(*args)


_NUMBERS = frozenset({int, float})


def numbers_as_text(conn: Any) -> None:
    """Make a sync connection that packs with hiredis (libvalkey) give it
    numbers as text (see :class:`_TextNumbers`), for good: a connection
    tenure keeps is connected again after each interrupt of its call, and
    each time sends its handshake, numbers in it. Nothing for another
    connection (an asyncio one packs in Python), nor if done already."""
    packer = _internals.command_packer(conn)
    if type(packer).__name__ in _C_PACKERS:
        _internals.set_command_packer(conn, _TextNumbers(packer))


def retries_allowed(client: Any) -> bool:
    """Whether the client's retry policy sends a command again after a
    connection error (redis-py's and valkey-py's default does, 3 times): the
    quick path then leaves a failed call to the ordinary path, which retries."""
    get_retry = getattr(client, "get_retry", None)
    retry = get_retry() if get_retry is not None else None
    return retry is None or _internals.retries_of(retry) != 0


def packed_evalsha(conn: Any, step: Eval, shard: bool = False) -> Any:
    """``EVALSHA`` of ``step`` in the protocol, for ``conn.send_packed_command``
    (a list of byte strings): by hiredis directly when the connection would
    encode alike (it packs with hiredis, as redis-py does, or its encoder is
    strict UTF-8), else by the connection's own packer. ``shard``: the
    script's :func:`sharded` variant (a cluster node with sharded pub/sub)."""
    args = evalsha_args(step, shard)  # (text only: see there)
    if _HIREDIS is not None and _utf8_packer(conn):
        return [_HIREDIS(("EVALSHA", *args))]
    return conn.pack_command("EVALSHA", *args)


def _utf8_packer(conn: Any) -> bool:
    packer = _internals.command_packer(conn)
    if isinstance(packer, _TextNumbers):
        packer = packer.inner
    if type(packer).__name__ == "HiredisRespSerializer":
        return True
    encoder = getattr(conn, "encoder", None)
    return (
        getattr(encoder, "encoding", None) in ("utf-8", "utf8")
        and getattr(encoder, "encoding_errors", None) == "strict"
    )


def _hiredis_pack() -> Any:
    try:
        from hiredis import pack_command
    except ImportError:  # (hiredis is an optional extra)
        return None
    return pack_command


_HIREDIS = _hiredis_pack()
