"""The synchronous driver: ``redis.Redis`` / ``valkey.Valkey`` clients, threads,
``threading`` waits.

A client of either library is driven by the same code: the classes the driver
makes itself on the client's connection pool (the wake hub's ``PubSub``, the
clients of the watchdog's renewals and of the hub's hand-offs) and the
``NoScriptError`` it catches are those of the client's own library, found once
per client class (see :mod:`._clients`).

A Redis Cluster client (``redis.cluster.RedisCluster``,
``valkey.cluster.ValkeyCluster``) is driven through itself for scripts and
commands (it sends each to the node owning its keys' slot; a script a node
lacks is loaded on that node only, not on every master), with the
:func:`._clients.sharded` variant of every script; it gets one wake hub per
node it waits on, each a sharded pub/sub connection (``SSUBSCRIBE``) on that
node's connection pool, and its watchdog renews one pipelined round trip per
node. On a cluster without sharded pub/sub (Redis 6.2, found by the first
call's server probe) it falls back to the scripts' plain variants (``PUBLISH``,
which the cluster bus copies to every node) and hubs that ``SUBSCRIBE``, still
one per node waited on. When a slot moves or its master fails over, a node's
hub hands the slot's channels to the hub of the new owner (see
:mod:`._hubbook`). A pipeline with ``WAIT`` (``min_replicas``) is sent on the
connection of the slot's master, in one round trip. On any other client it
is sent on the connection that made the grant (see :func:`one_connection`).
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import itertools
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

import redis
import redis.client
import redis.exceptions
from redis.backoff import ExponentialWithJitterBackoff

from .._errors import PermissionDenied, WrongTypeError
from .._keys import LockKeys
from .._plans import server as server_plans
from .._protocol import (
    Command,
    Contend,
    Eval,
    HandedOff,
    Listening,
    Pipeline,
    Plan,
    Recheck,
    Status,
    Step,
    Subscribe,
    WaitWake,
    command_refusal,
    key_refusal,
    mark_masterless,
    parse_reply,
)
from .._scripts import ACL_KEYS
from . import _clients, _identity, _internals
from ._hubbook import (
    Dropped,
    HubBook,
    PassOn,
    Settable,
    confirm_wait,
    is_noperm,
    refusal,
    wake_refused,
)
from ._watchbook import CLAIM_GRACE, Watch, Watchable, WatchBook, lose, renewal_reply

_log = logging.getLogger("tenure")

#: How often a hub's reader thread looks up from its pub/sub connection (to
#: unsubscribe idle channels, and to stop at exit), seconds.
READ_POLL = 0.25

# Set at interpreter exit: background threads stop, so that none is frozen
# holding a connection pool's lock while the interpreter tears the pool down
# (which would hang the exit).
_exiting = threading.Event()
_threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def _stop_background_threads() -> None:
    _exiting.set()
    deadline = time.monotonic() + READ_POLL + 1.0
    for thread in list(_threads):
        thread.join(max(0.0, deadline - time.monotonic()))


atexit.register(_stop_background_threads)


def _start(
    target: Callable[..., None], name: str, *args: Any, uses_pool: bool = True
) -> threading.Thread:
    """Start a daemon thread; one that ``uses_pool`` is waited for at exit."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    if uses_pool:
        _threads.add(thread)
    thread.start()
    return thread


if TYPE_CHECKING:
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


class _Wake:
    """A channel's wake-up for the one thread that waits on it (its process's
    contender, or the plan of a channel of its own): set by the hub's reader,
    or by any thread; a wait returns at once, consuming it, if it is set.

    A bare lock, held while not set: setting it is one release, which the
    waiting thread's acquire returns from, without ``threading.Event``'s
    condition variable (whose own lock the waking thread holds while it
    notifies, so the woken thread may block a second time on it)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def set(self) -> None:
        """Wake the waiter (or its next wait); idempotent."""
        with contextlib.suppress(RuntimeError):  # set already
            self._lock.release()

    def wait(self, timeout: float | None) -> bool:
        """Wait until set or ``timeout`` seconds pass (``None``: no limit); return
        whether it was set, and unset it."""
        if timeout is None:
            return self._lock.acquire()
        return self._lock.acquire(timeout=min(max(0.0, timeout), threading.TIMEOUT_MAX))


#: How often a thread waiting on a :class:`SafeEvent` reads its flag again
#: (in case the ``set`` that raised it was interrupted before it woke the
#: thread), seconds.
EVENT_RECHECK = 1.0


class SafeEvent(threading.Event):
    """A ``threading.Event`` that no interrupt leaves locked: any thread may set
    or clear it, several may wait on it.

    ``threading.Event`` guards its flag with a ``Condition`` that Python code
    enters by calling its lock's acquire; a signal handler that raises as that
    call returns (Python runs handlers there) leaves the lock held with no
    ``with`` block to give it back, and every later ``set``, ``clear`` or
    ``wait`` then blocks for good. Here no lock is held between two calls:
    the flag is one attribute, and each waiting thread waits on a
    :class:`_Wake` of its own, registered before it reads the flag again,
    which :meth:`set` sets after it sets the flag (so no wake is missed). An
    interrupt leaves at most a stale registration, which a later ``set`` sets
    to no effect; a ``set`` cut short by one before it woke every waiter
    still wakes them within :data:`EVENT_RECHECK` (they read the flag again
    that often)."""

    def __init__(self) -> None:  # (no Condition: see the class)
        self._flag = False
        self._waiters: list[_Wake] = []

    def _at_fork_reinit(self) -> None:
        self._waiters = []

    def is_set(self) -> bool:
        """Whether it is set."""
        return self._flag

    def set(self) -> None:
        """Set it and wake every thread waiting."""
        self._flag = True
        for wake in self._waiters.copy():
            wake.set()

    def clear(self) -> None:
        """Unset it."""
        self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until it is set or ``timeout`` seconds pass (``None``: no limit);
        return whether it was set (it stays set)."""
        if self._flag:
            return True
        wake = _Wake()
        waiters = self._waiters
        waiters.append(wake)
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._flag:
                left = EVENT_RECHECK if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return False
                if wake.wait(min(left, EVENT_RECHECK)):
                    return True
            return True
        finally:
            with contextlib.suppress(ValueError):
                waiters.remove(wake)


def new_event() -> threading.Event:
    """An event for the facade (a lease's ``lost``, a Redlock waiter's wake):
    a :class:`SafeEvent`, which no interrupt leaves locked."""
    return SafeEvent()


@dataclass(eq=False)
class _Channel:
    keys: LockKeys | None
    #: its name (set by the book)
    name: str = ""
    refs: int = 0
    idle_since: float | None = None
    tokens: set[str] = field(default_factory=set)
    handoffs: dict[str, int] = field(default_factory=dict)
    recheck: float | None = None
    #: when the wait in progress ends anyway (see HubBook.route)
    wait_until: float | None = None
    listeners: set[Settable] = field(default_factory=set)
    refused: str = ""
    ready: threading.Event = field(default_factory=SafeEvent)
    wake: _Wake = field(default_factory=_Wake)
    #: the process's contender (see _Contention.owned_before): reentrant only
    #: so that an interrupted acquire can tell whether its thread holds it
    gate: Any = field(default_factory=threading.RLock)
    #: the hub whose book holds the channel (on a Redis Cluster it moves to the
    #: hub of the slot's new owner: see _Hub.adopt)
    home: Any = None


class _HubPubSub(Protocol):
    """What the hub uses of a library's PubSub (with :class:`_Reconnects` mixed in)."""

    reconnected: threading.Event
    channels: dict[Any, Any]
    connection: Any

    def subscribe(self, *args: Any, **kwargs: Any) -> Any: ...
    def unsubscribe(self, *args: Any) -> Any: ...
    def ssubscribe(self, *args: Any, **kwargs: Any) -> Any: ...
    def sunsubscribe(self, *args: Any) -> Any: ...
    def get_message(self, ignore_subscribe_messages: bool = ..., timeout: float = ...) -> Any: ...
    def close(self) -> None: ...


class _Reconnects:
    """Mixed into a library's PubSub class: tells its hub when the connection
    is made again."""

    # Set when the library made the connection again and re-sent SUBSCRIBE;
    # the reader thread handles it before it routes the next message.
    reconnected: threading.Event

    def on_connect(self, connection: Any) -> None:
        # redis-py registers this callback after the pool's first connect, so it
        # runs on reconnections only, in whichever thread found the connection
        # broken: the reader (inside get_message or an UNSUBSCRIBE) or a waiter
        # (inside a SUBSCRIBE, holding the hub's mutex). It only raises a flag,
        # before the SUBSCRIBEs go out, so the reader sees it before it reads
        # any confirmation; it handles it holding the mutex, so after they went.
        self.reconnected.set()
        super().on_connect(connection)  # type: ignore[misc]  # SUBSCRIBE again


@dataclass(frozen=True, slots=True)
class _Library:
    """The classes of one client library (redis-py or valkey-py) the driver uses."""

    #: makes a client of the library: ``client(connection_pool=pool)``
    client: Callable[..., Client]
    #: the hub's PubSub: ``pubsub(connection_pool=pool)``
    pubsub: Callable[..., _HubPubSub]
    #: what ``EVALSHA`` raises for a script the server does not have
    no_script: type[Exception]
    #: what reading an error reply raises
    response_error: type[Exception]


class _RedisHubPubSub(_Reconnects, redis.client.PubSub):
    """redis-py's PubSub, telling its hub when the connection is made again."""


_REDIS = _Library(
    redis.Redis, _RedisHubPubSub, redis.exceptions.NoScriptError, redis.exceptions.ResponseError
)


@cache
def _library_named(name: _clients.Library) -> _Library:
    if name == "redis":
        return _REDIS
    import valkey
    import valkey.client
    import valkey.exceptions

    class _ValkeyHubPubSub(_Reconnects, valkey.client.PubSub):
        """valkey-py's PubSub, telling its hub when the connection is made again."""

    return _Library(
        valkey.Valkey,
        _ValkeyHubPubSub,
        valkey.exceptions.NoScriptError,
        valkey.exceptions.ResponseError,
    )


@cache
def _library(cls: type) -> _Library:
    """The classes of the library that the client class ``cls`` belongs to."""
    return _library_named(_clients.library_of(cls))


class _Hub:
    """One pub/sub connection per client and process; wakes waiting threads.

    The bookkeeping is :class:`._hubbook.HubBook`'s; this class does the I/O:
    SUBSCRIBE / UNSUBSCRIBE, and a daemon reader thread that routes messages.
    After a reconnection (see the book's module docstring) the reader tells the
    book before it routes the next message, so the confirmations of the new
    SUBSCRIBEs wake every waiter.
    """

    def __init__(
        self,
        pool: Any,
        library: _Library,
        *,
        waiter: str | None = None,
        cluster: Callable[[], Client | None] | None = None,
        sharded: bool = True,
    ) -> None:
        self.waiter = waiter or _identity.process_id()[:8] + "-" + os.urandom(4).hex()
        self._numbers = itertools.count(1)
        self._pool = pool
        self._library = library
        # a Redis Cluster node's hub: the cluster client (or None once it is
        # gone), which runs hand-offs; the hub subscribes by SSUBSCRIBE, or by
        # SUBSCRIBE on a cluster without sharded pub/sub (Redis 6.2)
        self._cluster = cluster
        self._sharded = cluster is not None and sharded
        self._mutex = threading.Lock()
        self._book = HubBook(_Channel)
        self._pubsub: _HubPubSub | None = None
        self._backoff = ExponentialWithJitterBackoff(base=0.05, cap=2.0)
        # a cluster node's channels that its server dropped (slot moved, node
        # gone), waiting to be adopted by the hub of their slot's owner
        self._orphans: dict[str, _Channel] = {}
        self._orphan_failures = 0
        self._rehome_at = 0.0

    def enter(self, keys: LockKeys | None, channel: str, token: str) -> _Channel:
        with self._mutex:
            ch, subscribe = self._book.enter(channel, keys, token)
            ch.home = self
            self._subscribe(channel, subscribe)
        return ch

    def listen(self, channel: str, event: threading.Event) -> _Channel:
        with self._mutex:
            ch, subscribe = self._book.listen(channel, event)
            ch.home = self
            self._subscribe(channel, subscribe)
        return ch

    def adopt(self, channel: str, ch: _Channel) -> None:
        """Listen on ``channel`` with the record another node's hub dropped (a
        Redis Cluster slot now served by this hub's node, or a node gone):
        SSUBSCRIBE (SUBSCRIBE on Redis 6.2), whose confirmation wakes its
        plans. Raises the library's error if it can't be sent (the record is
        then not adopted)."""
        with self._mutex:
            if not self._book.adopt(channel, ch):
                _wake_all_of(ch)
                return
            ch.home = self
            try:
                self._send_subscribe(channel)
            except BaseException:
                self._book.forget(channel)
                raise

    def _send_subscribe(self, channel: str) -> None:
        """Subscribe the hub's connection to ``channel`` (``SSUBSCRIBE`` on a
        cluster with sharded pub/sub, else ``SUBSCRIBE``)."""
        pubsub = self._listen()
        if self._sharded:
            pubsub.ssubscribe(channel)
        else:
            pubsub.subscribe(channel)
        _clients.numbers_as_text(pubsub.connection)  # (its handshake, when a waiter reconnects it)

    def _orphan(self, orphans: dict[str, _Channel]) -> None:
        """Keep channels the server dropped until a hub adopts them (the reader
        calls :meth:`_rehome`)."""
        with self._mutex:
            self._orphans.update(orphans)
            self._orphan_failures = 0
            self._rehome_at = 0.0

    def _rehome(self) -> None:
        """Give each orphaned channel to the hub of the node that owns its slot
        now, after refreshing the cluster client's slot map; those that no hub
        can take yet (the slot's new master is not known yet, or does not
        answer) are tried again after a backoff. A channel nobody waits on any
        more is just dropped."""
        client = self._cluster() if self._cluster is not None else None
        with self._mutex:
            orphans = dict(self._orphans)
            if client is None or time.monotonic() < self._rehome_at:
                if client is None:
                    self._orphans.clear()
                return
        with contextlib.suppress(Exception):
            client.nodes_manager.initialize()  # type: ignore[union-attr]
        for name, ch in orphans.items():
            adopted = ch.refs == 0
            if not adopted:
                with contextlib.suppress(Exception):
                    hub = _hub(client, name)
                    if hub is not self or self._pubsub is None:
                        hub.adopt(name, ch)
                        adopted = True
            if adopted:
                with self._mutex:
                    self._orphans.pop(name, None)
        with self._mutex:
            if self._orphans:
                self._orphan_failures += 1
                self._rehome_at = time.monotonic() + self._backoff.compute(self._orphan_failures)

    def _subscribe(self, channel: str, new: bool) -> None:
        if new:
            try:
                self._send_subscribe(channel)
            except BaseException:
                self._book.abort(channel)
                raise

    def leave(self, ch: _Channel, token: str, kept: bool = False) -> None:
        with self._mutex:
            self._book.leave(ch, token, time.monotonic(), kept)

    def woken(self, ch: _Channel, token: str, woken: bool) -> bool | HandedOff | Recheck:
        """The reply to a wait of the plan waiting with ``token`` on ``ch``."""
        with self._mutex:
            return self._book.woken(ch, token, woken)

    def unlisten(self, ch: _Channel, event: threading.Event) -> None:
        with self._mutex:
            self._book.unlisten(ch, event, time.monotonic())

    def own_waiter(self) -> str:
        """A waiter id new for one plan that waits on a channel of its own."""
        return f"{self.waiter}.{next(self._numbers)}"

    def listening(self, wake_prefix: str) -> bool:
        """Whether this hub listens (or lingers) on the lock with this wake prefix."""
        return (wake_prefix + self.waiter) in self._book.channels

    def _resubscribed(self, pubsub: _HubPubSub) -> None:
        """The connection was made again: let the confirmations of the channels
        subscribed again wake every waiter, and unsubscribe again the channels
        redis-py subscribed again that the book no longer listens on. Called by
        the reader, holding the mutex."""
        pubsub.reconnected.clear()
        self._book.reconnected()
        subscribed = [*pubsub.channels, *getattr(pubsub, "shard_channels", ())]
        for name in self._book.strays([_text(name) for name in subscribed]):
            self._unsubscribe(pubsub, name)

    def _unsubscribe(self, pubsub: _HubPubSub, name: str) -> None:
        if self._sharded:
            pubsub.sunsubscribe(name)
        else:
            pubsub.unsubscribe(name)

    def _listen(self) -> _HubPubSub:
        if self._pubsub is None:
            pubsub = self._library.pubsub(connection_pool=self._pool)
            pubsub.reconnected = SafeEvent()
            self._pubsub = pubsub
            _start(self._read, "tenure-wake-hub")
        return self._pubsub

    def _read(self) -> None:
        pubsub = self._pubsub
        assert pubsub is not None
        failures = 0
        while not _exiting.is_set():
            if self._orphans:
                self._rehome()
            try:
                message = pubsub.get_message(timeout=READ_POLL)
                failures = 0
                with self._mutex:
                    if pubsub.reconnected.is_set():
                        self._resubscribed(pubsub)
                    for name in self._book.stale(time.monotonic()):
                        self._unsubscribe(pubsub, name)
                    if message is None and self._book.empty() and not self._orphans:
                        self._pubsub = None  # the next wait starts a new reader
                        break
                    if _clients.left_master(self._pool, pubsub.connection):
                        # a Sentinel failover that this connection did not
                        # notice: the next read reconnects to the new master
                        pubsub.connection.disconnect()
            except Exception as exc:
                if is_noperm(exc):  # a SUBSCRIBE refused by the ACL
                    self._refuse(pubsub)
                    continue
                if self._cluster is not None:
                    # a cluster node gone (failover) or no longer serving a
                    # channel (MOVED): its channels go to their slots' owners
                    with self._mutex:
                        orphans = self._book.drop_all()
                        self._pubsub = None  # an adoption here starts a new reader
                    self._orphan(orphans)
                    self._rehome_all()
                    break
                with self._mutex:
                    if self._book.drop_idle():
                        self._pubsub = None  # nobody waits: don't reconnect
                        break
                self._book.wake_all()
                failures += 1
                threading.Event().wait(self._backoff.compute(failures))
                continue
            if message is not None:
                self._dispatch(message, pubsub)
        with contextlib.suppress(Exception):
            pubsub.close()

    def _rehome_all(self) -> None:
        """After this node's connection failed: rehome its orphans until none is left."""
        while self._orphans and not _exiting.is_set():
            self._rehome()
            if self._orphans:
                threading.Event().wait(max(0.0, min(READ_POLL, self._rehome_at - time.monotonic())))

    def _refuse(self, pubsub: _HubPubSub) -> None:
        """The server refused a SUBSCRIBE: fail that channel's plans now."""
        with self._mutex:
            name, ch = self._book.refused()
            if name:
                with contextlib.suppress(Exception):
                    self._unsubscribe(pubsub, name)
        if ch is not None:
            wake_refused(ch)

    def _dispatch(self, message: dict[str, Any], pubsub: _HubPubSub) -> None:
        channel, data = _text(message["channel"]), _text(message["data"])
        kind = _clients.SHARDED_TYPES.get(message["type"], message["type"])
        with self._mutex:
            route = self._book.route(kind, channel, data, time.monotonic())
        if isinstance(route, Dropped):
            # redis-py forgets only the channels it was asked to unsubscribe
            _clients.forget_shard_channel(pubsub, message["channel"])
            self._orphan({route.channel: route.record})
        elif isinstance(route, PassOn):
            # On failure the lease runs out and the waiters' timers fire.
            with contextlib.suppress(Exception):
                client = (
                    self._library.client(connection_pool=self._pool)
                    if self._cluster is None
                    else self._cluster()
                )
                if client is not None:
                    _drive(client, route.plan())
        elif route is not None:
            route.set()


def _wake_all_of(ch: _Channel) -> None:
    """Wake every plan of ``ch`` to check Redis again."""
    ch.ready.set()
    ch.wake.set()
    for event in list(ch.listeners):
        event.set()


def _text(value: Any) -> str:
    """A channel name or message payload as ``str`` (redis-py gives ``bytes``
    unless the client decodes responses)."""
    return value.decode() if isinstance(value, bytes) else str(value)


#: What a watchdog that does not renew on one client's pipeline calls instead
#: (a Redlock's, see ``watch_shared``): the leases due, in order, to a list
#: of one renewal reply each (``(Status, value)``, or ``None`` to retry).
_SendRenewals: TypeAlias = Callable[[list[Any]], list[tuple[Status, Any] | None]]


class _Watchdog:
    """One thread per client and process that renews the client's leases and
    fires the lost signal (the decisions are :class:`._watchbook.WatchBook`'s).

    Renewals run on a second, short-lived thread, one batch at a time, so that a
    call that hangs (a paused server) never delays a deadline: a lease whose
    deadline passes is lost then, whatever its renewal is doing.
    """

    def __init__(self, pool: Any, library: _Library, send: _SendRenewals | None = None) -> None:
        self._pool = pool
        self._library = library
        self._send = send
        self._book = WatchBook()
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._thread: threading.Thread | None = None
        self._renewing = False
        self._sleep_until = 0.0

    def watch(self, lease: Watchable, renew: bool) -> Watch:
        with self._mutex:  # (the condition's lock, cheaper to enter than the condition)
            watch = self._book.add(lease, renew, time.monotonic(), CLAIM_GRACE)
            watch.dog = self
            if self._thread is None:
                # its renewal threads use the pool; it only schedules them
                self._thread = _start(self._run, "tenure-watchdog", uses_pool=False)
            elif self._book.first_due(watch) < self._sleep_until:
                self._cond.notify()
        return watch

    def stop_renewing(self, watch: Watch) -> None:
        with self._mutex:  # (the condition's lock: no wait or notify here)
            self._book.stop_renewing(watch)

    def unwatch(self, watch: Watch) -> None:
        with self._mutex:  # no wake-up: the watchdog notices within MAX_SLEEP
            self._book.discard(watch, time.monotonic())

    def _run(self) -> None:
        while True:
            with self._cond:
                if _exiting.is_set():
                    self._thread = None
                    return
                now = time.monotonic()
                lost = self._book.expired(now)
                batch = [] if self._renewing else self._book.take_due(now)
                if batch:
                    self._renewing = True
                elif not lost:
                    if self._book.finished(now):
                        self._thread = None
                        return
                    sleep = self._book.sleep(now)
                    self._sleep_until = now + sleep
                    self._cond.wait(sleep)
                    continue
            for watch in lost:
                lose(watch.lease, watch.why)
            if batch:
                _start(self._renew, "tenure-renewal", batch)

    def _renew(self, batch: list[Watch]) -> None:
        sent_at = time.monotonic()
        replies: list[tuple[Status, Any] | None]
        try:
            if self._send is not None:
                replies = list(self._send([w.lease for w in batch]))
            else:
                client = self._library.client(connection_pool=self._pool)
                step = Pipeline(tuple(w.lease._renewal() for w in batch))
                replies = [renewal_reply(reply) for reply in _pipeline(client, step)]
        except Exception:
            _log.warning("tenure watchdog: renewal failed; retrying", exc_info=True)
            replies = [None] * len(batch)
        lost: list[tuple[Watch, str]] = []
        with self._cond:
            now = time.monotonic()
            for watch, reply in zip(batch, replies, strict=True):
                reason = self._book.settle(watch, reply, sent_at, now)
                if reason is not None:
                    lost.append((watch, reason))
            self._renewing = False
            self._cond.notify()
        for watch, reason in lost:
            lose(watch.lease, reason)


@dataclass(eq=False)
class _State:
    generation: int
    hub: _Hub
    watchdog: _Watchdog
    server: server_plans.ServerInfo | None = None
    #: a Redis Cluster client's hubs, one per node it waits on, by (host, port)
    nodes: dict[tuple[str, int], _Hub] = field(default_factory=dict)
    #: whether a Redis Cluster client's servers have sharded pub/sub (set by
    #: the probe; False on Redis 6.2: plain PUBLISH / SUBSCRIBE)
    sharded: bool = True
    #: the client's weak reference (the entry goes with the client)
    client: Callable[[], Any] = lambda: None
    #: held by the call that probes the server (the first)
    probing: threading.Lock = field(default_factory=threading.Lock)
    #: the connections its scripts' quick path keeps, those of the client's
    #: pool (None: it takes none; see :func:`_quick`)
    kept: _Kept | None = None
    #: the connections run_each's quick path keeps, those of the client's
    #: pool (None: it takes none; see :class:`_Fan`)
    fan: _Fan | None = None
    #: whether its retry policy sends a command again after a connection error
    retries: bool = True


@dataclass(eq=False)
class _Kept:
    """The connections the scripts' quick path keeps checked out of one pool
    (see :func:`_quick`), shared by every client on the pool: a client made
    per request on a shared pool and dropped leaves them to the next one
    (kept by each client, they would be lost with it, slots of the pool
    never given back).
    Kept on the pool itself (see :func:`_clients.keep_on`)."""

    generation: int
    #: how many it may keep (see _clients.quick_connections)
    most: int
    #: the idle ones, and how many it keeps in all
    idle: list[Any] = field(default_factory=list)
    open: int = 0
    #: guards ``open`` and ``waiting``: a bare lock, entered only by ``with``
    #: (which no interrupt leaves held; a ``threading.Condition`` may be)
    mutex: threading.Lock = field(default_factory=threading.Lock)
    #: the wakes of the calls waiting for an idle one, first come first
    waiting: list[_Wake] = field(default_factory=list)


def _kept_for(client: Client) -> _Kept | None:
    """The quick path's connections of ``client``'s pool, or ``None`` when
    the client may take none (see :func:`_clients.quick_connections`).
    Called with ``_states_mutex`` held."""
    most = _clients.quick_connections(client)
    if not most:
        return None
    pool = client.connection_pool  # type: ignore[union-attr]
    kept: _Kept | None = _clients.kept_on(pool, "kept")
    if kept is None or kept.generation != _identity.generation():  # (a fork's pool starts afresh)
        kept = _Kept(_identity.generation(), most)
        if not _clients.keep_on(pool, "kept", kept):  # (made by the first client)
            return None
    return kept


@dataclass(eq=False)
class _Fan:
    """The connections that run_each's quick path (Redlock's calls on one
    thread, see :mod:`._fanout_sync`) keeps checked out of one pool, shared
    by every client on the pool: a client made per request on a shared pool
    and dropped leaves them to the next one (kept by each client, they would
    be lost with it, slots of the pool never given back). Guarded by
    ``_fanout_sync._spare_mutex``.
    Kept on the pool itself (see :func:`_clients.keep_on`)."""

    generation: int
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


#: The most connections run_each's quick path keeps checked out of a pool
#: (idle, owing replies or in use; at most a quarter of the pool: see
#: :func:`_fan_for`).
SPARE_CONNECTIONS = 8


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
    fan: _Fan | None = _clients.kept_on(pool, "fan")
    if fan is None or fan.generation != _identity.generation():  # (a fork's pool starts afresh)
        fan = _Fan(_identity.generation(), most)
        if not _clients.keep_on(pool, "fan", fan):  # (made by the first client)
            return None
    return fan


#: The state of each client, by its id(), dropped with the client (looked up on
#: every call: an id and a weak reference are cheaper than a WeakKeyDictionary).
_states: dict[int, _State] = {}
_states_mutex = threading.Lock()


def _forget_state(key: int, ref: Any) -> None:
    if (state := _states.get(key)) is not None and state.client is ref:
        del _states[key]


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
                    state.kept = _kept_for(client)
                    state.fan = _fan_for(client)
                    state.retries = _clients.retries_allowed(client)
                key = id(client)
                state.client = weakref.ref(client, lambda ref: _forget_state(key, ref))
                _states[key] = state
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
            sent = _pipeline(
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
            raws[i] = _one(client, steps[i])
    return [renewal_reply(raw) for raw in raws]


def watch(client: Client, lease: Watchable, renew: bool) -> Watch:
    """Watch ``lease`` with the client's watchdog (renewing it if ``renew``) until
    :func:`unwatch`; its ``_lose`` is called when it is lost."""
    return _state(client).watchdog.watch(lease, renew)


def stop_renewing(client: Client, watch: Watch) -> None:
    """Never renew ``watch``'s lease again (its release was attempted); its
    deadline is still watched."""
    if watch.renewable:  # (else there is nothing to stop)
        (watch.dog or _state(client).watchdog).stop_renewing(watch)


def unwatch(client: Client, watch: Watch) -> None:
    """Stop watching a lease (released or lost)."""
    (watch.dog or _state(client).watchdog).unwatch(watch)


def run(client: Client, plan: Plan[T]) -> T:
    """Drive ``plan`` to its result with ``client``; the first call probes the server.

    Raises whatever the plan raises, and the client library's connection errors.
    """
    state = _state(client)
    if state.server is None:
        with state.probing:  # (calls made at once share one probe)
            if state.server is None:
                _probe(client, state)
    return _drive(client, plan)


def batch_key(client: Client) -> object | None:
    """What :func:`run_together` shares among clients: their connection pool
    (plans of clients with the same pool may be run together, on a client
    of any of them); ``None`` for a Redis Cluster client (its calls go to
    the node of each key's slot)."""
    if _clients.is_cluster(type(client)):
        return None
    return getattr(client, "connection_pool", None)


def run_together(client: Client, plans: list[Plan[Any]]) -> list[Any]:
    """Drive ``plans`` side by side with ``client``: each round, the script
    calls the plans yield (one each) are written back to back on one
    connection and their replies read in order, one round trip for them all
    (the quick path's connection, else a pipeline of the client's). Return,
    in order, each plan's result or the exception it raised; each plan runs
    to its end whatever the others do (a cancellation is thrown into every
    plan whose call was in flight, which then cleans up as it would alone,
    its clean-up calls sent together in the next round).

    The plans may yield :class:`Eval`, :class:`Command`, :class:`Pipeline`
    and :class:`Listening` steps (the others are thrown back as a
    ``TypeError``). On a Redis Cluster client, or for one plan, the plans
    run one after the other (an interruption then closes those not started).
    """
    state = _state(client)
    if state.server is None:
        with state.probing:
            if state.server is None:
                _probe(client, state)
    results: list[Any] = [None] * len(plans)
    if len(plans) == 1 or _clients.is_cluster(type(client)):
        try:
            for i, plan in enumerate(plans):
                try:
                    results[i] = _drive(client, plan)
                except Exception as exc:
                    results[i] = exc
                except BaseException as exc:
                    results[i] = exc
                    for j in range(i + 1, len(plans)):
                        plans[j].close()
                        results[j] = exc
                    break
        except BaseException as exc:
            # cut off at the loop's jump back (where Python runs signal
            # handlers): the results so far go with the error
            _clients.note_result(exc, list(results))
            raise
        return results
    replies: list[Any] = [None] * len(plans)
    errors: list[BaseException | None] = [None] * len(plans)
    live: list[int] = list(range(len(plans)))
    try:
        try:
            while live:
                going: list[int] = []
                due: list[int] = []
                steps: list[Eval] = []
                for i in live:
                    plan, error = plans[i], errors[i]
                    try:
                        if error is None:
                            step = plan.send(replies[i])
                        else:
                            errors[i] = None
                            step = plan.throw(error)
                    except StopIteration as stop:
                        results[i] = stop.value
                        continue
                    except BaseException as exc:
                        results[i] = exc
                        continue
                    going.append(i)
                    if type(step) is Eval:
                        due.append(i)
                        steps.append(step)
                        continue
                    try:
                        if not isinstance(step, Command | Pipeline | Listening):
                            raise TypeError(f"run_together runs no {type(step).__name__} step")
                        replies[i] = _perform(client, step, [])
                    except BaseException as exc:
                        errors[i] = exc
                live = going
                if not steps:
                    continue
                try:
                    answers = _send_together(client, state, steps)
                except BaseException as exc:
                    for i in due:
                        errors[i] = exc
                    continue
                for i, answer in zip(due, answers, strict=True):
                    if isinstance(answer, BaseException):
                        errors[i] = answer
                    else:
                        replies[i] = answer
        finally:
            for plan in plans:
                plan.close()
    except BaseException as exc:
        # cut off (an interrupt between rounds, or in the plans' close): the
        # results the plans returned go with the error (see note_result)
        _clients.note_result(exc, list(results))
        raise
    return results


def _send_together(client: Client, state: _State, steps: list[Eval]) -> list[Any]:
    """The script calls ``steps`` in one round trip, on one connection: each
    one's parsed reply, or the exception it raised (its error reply, a
    ``WrongTypeError``, a ``PermissionDenied``). On the quick path (see
    :func:`_quick`): written back to back on one of its connections, the
    replies read in order; after NOSCRIPT (every reply read first), a failed
    connection or a full quick path, a pipeline of the client's (which loads
    the scripts and sends them all again, as a retry would)."""
    kept = state.kept
    if kept is not None:
        pin = _pin_for(client)
        raws: list[Any] | None = None
        try:
            raws = _quick_together(client, kept, state.retries, steps, pin)
        except _Fallback:
            if pin is not None and pin.conn is not None:  # (NOSCRIPT: loaded there, sent again)
                with contextlib.suppress(_Fallback):
                    for spec in {step.script for step in steps}:
                        _load_on_pin(client, pin, spec.source)
                    raws = _quick_together(client, kept, state.retries, steps, pin)
        if raws is not None:
            answers: list[Any] = []
            for step, raw in zip(steps, raws, strict=True):
                if isinstance(raw, Exception):
                    answers.append(_refusal(client, step, raw) or raw)
                    continue
                # one answer per step, appended once: an interrupt (of any
                # class) after the append goes to the caller, not in the list
                try:
                    answer: Any = parse_reply(step.script, raw)
                except Exception as exc:
                    answer = exc
                answers.append(answer)
            return answers
    return _pipeline(client, Pipeline(tuple(steps)))


def _quick_together(
    client: Client, kept: _Kept, retries: bool, steps: list[Eval], pin: _Pin | None = None
) -> list[Any]:
    """The replies of ``steps`` written back to back on a connection of the
    quick path, read in order (an error reply in its place). Raises
    :class:`_Fallback` as :func:`_quick` does, and on a NOSCRIPT reply.
    With a ``pin``, on the pinned connection, as :func:`_quick` does."""
    library = _library(type(client))
    raws: list[Any] = []
    missing = False
    sound = False  # every reply was read: the connection may be used again as it is
    if pin is not None and pin.conn is not None:
        conn, pin.conn = pin.conn, None  # (no call: see below)
    else:
        conn = _take(client, kept, retries)
    try:  # (at once: no call between, where an interrupt could lose the connection)
        packed = [part for step in steps for part in _clients.packed_evalsha(conn, step)]
        conn.send_packed_command([b"".join(packed)])  # (one write, not one per part)
        for _ in steps:
            try:
                raws.append(conn.read_response())
            except library.response_error as exc:  # a whole reply was read
                raws.append(exc)
                missing = missing or isinstance(exc, library.no_script)
        sound = True
    except Exception as exc:
        if retries and _clients.connection_fault(exc):
            raise _Fallback from exc
        raise
    finally:  # (whatever interrupts what: the connection is given back or let go)
        if sound:
            if pin is None:
                kept.idle.append(conn)  # (no call before it, where an interrupt could lose it)
                _wake_one(kept)
            else:
                _keep(kept, conn, pin)
        else:
            _discard(client, kept, conn)
    if missing:
        raise _Fallback
    return raws


def _probe(client: Client, state: _State) -> None:
    try:
        server = _drive(client, server_plans.probe())
    except Exception as exc:
        denied = command_refusal(exc, "the server probe") if is_noperm(exc) else None
        if denied is not None:
            raise denied from exc
        raise
    if _clients.is_cluster(type(client)):
        state.sharded = _clients.sharded_pubsub(server.name, server.version)
    state.server = server


@dataclass(eq=False)
class _Contention:
    ch: _Channel
    token: str
    entered: bool = False
    #: whether the thread held the channel's gate before this contention asked
    #: for it (True until that was read: nothing to give back before). An
    #: interrupt (a signal handler's KeyboardInterrupt) between the gate's
    #: acquire and ``entered``'s store leaves ``entered`` False while the thread
    #: holds the gate: the clean-up gives it back when the thread holds it and
    #: did not before, or the process's other waiters would stall on it.
    owned_before: bool = True
    listener: threading.Event | None = None  # set for a Subscribe: its own wake event

    @property
    def hub(self) -> _Hub:
        """The hub that holds the channel now (see ``_Channel.home``)."""
        return self.ch.home  # type: ignore[no-any-return]


def _drive(client: Client, plan: Plan[T]) -> T:
    held: list[_Contention] = []
    reply: Any = None
    error: BaseException | None = None
    sending = False  # (for a plan that is not a generator: its send is running)
    kept = False  # the plan ended holding what it waited for
    result: Any = None
    try:
        while True:
            try:
                # One try around the whole loop, its jump back included (where
                # Python runs signal handlers): an interrupt anywhere between a
                # reply and the plan's next step is thrown into the plan, which
                # cleans up. The handlers make no calls (a call is where a
                # signal handler may run again).
                while True:
                    sending = True
                    step = plan.send(reply) if error is None else plan.throw(error)
                    sending = False
                    error = None
                    if type(step) is Eval:  # (the common step, without _perform's dispatch)
                        reply = parse_reply(step.script, _evalsha(client, step))
                    else:
                        reply = _perform(client, step, held)
            except StopIteration as stop:
                try:
                    ended = plan.gi_frame is None  # type: ignore[attr-defined]
                except AttributeError:
                    ended = sending
                if ended:  # the plan returned
                    kept, result = stop.value is not None, stop.value
                    return stop.value  # type: ignore[no-any-return]
                reply, error = None, stop
            except BaseException as exc:
                try:
                    ended = plan.gi_frame is None  # type: ignore[attr-defined]
                except AttributeError:
                    ended = sending
                if ended:
                    raise  # the plan raised it, after its own clean-up
                reply, error = None, exc  # from the driver: the plan has not seen it
    finally:
        try:
            try:
                for c in reversed(held):
                    if c.listener is not None:
                        c.hub.unlisten(c.ch, c.listener)
                        continue
                    if c.entered or (not c.owned_before and c.ch.gate._is_owned()):
                        c.ch.gate.release()
                    c.hub.leave(c.ch, c.token, kept)
            finally:
                plan.close()
        except BaseException as exc:
            # (an interrupt here, even as plan.close() returns, where Python
            # runs signal handlers): the caller may still give the result back
            if kept:
                _clients.note_result(exc, result)
            raise


def _perform(client: Client, step: Step, held: list[_Contention]) -> Any:
    if isinstance(step, Eval):
        return parse_reply(step.script, _evalsha(client, step))
    if type(step) in _WAITS:
        _let_pin_go()  # (a wait keeps no connection checked out)
    if isinstance(step, WaitWake):
        c = held[-1]
        if c.listener is None:
            ch = c.ch
            ch.wait_until = math.inf if step.timeout is None else time.monotonic() + step.timeout
            try:
                woken = ch.wake.wait(step.timeout)
            finally:
                ch.wait_until = None
        else:
            woken = c.listener.wait(step.timeout)
            c.listener.clear()
        refusal(c.ch)
        return c.hub.woken(c.ch, c.token, woken)
    if isinstance(step, Listening):
        return _hub(client, step.keys.wake_prefix).listening(step.keys.wake_prefix)
    if isinstance(step, Contend):
        hub = _hub(client, step.keys.wake_prefix)
        keys = step.keys if step.pass_on else None
        waiter = hub.own_waiter() if step.own_channel else hub.waiter
        ch = hub.enter(keys, step.keys.wake_prefix + waiter, step.token)
        c = _Contention(ch, step.token)
        held.append(c)
        started = time.monotonic()
        ch.ready.wait(confirm_wait(step.timeout))
        refusal(ch)
        c.owned_before = ch.gate._is_owned()
        if step.timeout is None:
            c.entered = ch.gate.acquire()
        else:
            left = max(0.0, step.timeout - (time.monotonic() - started))
            c.entered = ch.gate.acquire(timeout=left)
        return waiter if c.entered else None
    if isinstance(step, Subscribe):
        hub = _hub(client, step.channel)
        event = SafeEvent()
        ch = hub.listen(step.channel, event)
        held.append(_Contention(ch, "", listener=event))
        confirmed = ch.ready.wait(step.timeout)
        refusal(ch)
        return confirmed
    if isinstance(step, Command):
        return client.execute_command(*step.args)  # type: ignore[no-untyped-call]
    if isinstance(step, Pipeline):
        return _pipeline(client, step)
    raise TypeError(f"unknown step {step!r}")


def _pipeline(client: Client, step: Pipeline, *, shard: bool = False) -> list[Any]:
    """Send a :class:`Pipeline` step's steps in one round trip, on one connection.
    After NOSCRIPT the scripts are loaded and the whole pipeline is sent again
    (the steps of a pipeline are idempotent: lease rewrites and waits).
    On a Redis Cluster client each step is sent on its own (to its slot's node),
    its error in its place, except a pipeline with ``WAIT`` (``min_replicas``):
    see :func:`_on_master`. ``shard``: ``client`` is one master of a cluster
    with sharded pub/sub (every step's keys in its slots), sent the scripts'
    sharded variants."""
    if _clients.is_cluster(type(client)):
        if _clients.on_one_connection(step):
            return _on_master(client, step)
        return [_one(client, part) for part in step.steps]
    pin = None if shard else _pin_for(client)
    if pin is not None and not _clients.on_one_connection(step):
        pin = None  # (only what WAITs must follow the writes on their connection)

    def send() -> list[Any]:
        nonlocal pin
        if pin is not None:
            try:
                return _on_pin(client, pin, [_args(part) for part in step.steps])
            except _Fallback:  # (its connection failed: the client's own way)
                pin = None
        with client.pipeline(transaction=False) as pipe:
            for part in step.steps:
                if isinstance(part, Eval):
                    pipe.evalsha(*_clients.evalsha_args(part, shard))
                else:
                    pipe.execute_command(*part.args)
            return pipe.execute(raise_on_error=False)

    raws = send()
    if any(isinstance(raw, _library(type(client)).no_script) for raw in raws):
        for spec in {part.script for part in step.steps if isinstance(part, Eval)}:
            source = (_clients.sharded(spec) if shard else spec).source
            if pin is not None:
                try:
                    _load_on_pin(client, pin, source)
                    continue
                except _Fallback:  # (its connection failed: the client's own way)
                    pin = None
            client.script_load(source)
        raws = send()
    replies: list[Any] = []
    for part, raw in zip(step.steps, raws, strict=True):
        if isinstance(part, Eval) and isinstance(raw, Exception):
            raw = _refusal(client, part, raw) or raw
        if isinstance(part, Eval) and not isinstance(raw, Exception):
            try:
                raw = parse_reply(part.script, raw)
            except Exception as exc:
                raw = exc
        replies.append(raw)
    return replies


#: How many times a pipeline sent to a slot's master is sent again after the
#: node answered that it does not serve the slot (the slot map is refreshed
#: in between).
REDIRECTED_TRIES = 3


def _on_master(client: Any, step: Pipeline) -> list[Any]:
    """Send a pipeline that must share one connection (a write, then ``WAIT``)
    to the master of its first script's slot, on that master's own client,
    in one round trip. If the node answers that the slot is not (or no longer
    entirely) its own (``MOVED``, ``ASK``, ``TRYAGAIN``: a migration, a
    failover), the cluster client's slot map is refreshed and the whole
    pipeline sent again (its steps are idempotent), up to
    :data:`REDIRECTED_TRIES` times in all."""
    key = _clients.first_key(step)
    shard = _state(client).sharded
    replies: list[Any] = []
    for attempt in range(REDIRECTED_TRIES):
        node = client.get_node_from_key(key) if key is not None else client.get_default_node()
        replies = _pipeline(_clients.node_client(client, node), step, shard=shard)
        if not any(_clients.redirected(reply) for reply in replies):
            break
        if attempt + 1 < REDIRECTED_TRIES:
            time.sleep(0.05 * (attempt + 1))
            client.nodes_manager.initialize()
    return replies


def _one(client: Client, part: Eval | Command) -> Any:
    """One step of a pipeline sent on its own: its parsed reply, or its error."""
    try:
        if isinstance(part, Eval):
            return parse_reply(part.script, _evalsha(client, part))
        return client.execute_command(*part.args)  # type: ignore[no-untyped-call]
    except Exception as exc:
        return exc


def _send(client: Client, step: Eval) -> Any:
    """EVALSHA of ``step``; on NOSCRIPT, load the script and send it once more.
    On a Redis Cluster whose slot is split mid-migration, send it again, with a
    growing random pause, for up to :data:`_clients.SPLIT_PATIENCE` seconds."""
    if not _clients.is_cluster(type(client)):
        state = _state(client)
        if state.kept is not None and state.server is not None:
            pin = _pin_for(client)
            try:
                return _quick(client, state.kept, state.retries, step, pin=pin)
            except _Fallback as fallback:
                if isinstance(fallback.__cause__, _library(type(client)).no_script):
                    # (the server lost its scripts: loaded first, not asked again)
                    if pin is not None and pin.conn is not None:
                        with contextlib.suppress(_Fallback):
                            _load_on_pin(client, pin, _clients.source_of(step, False))
                            return _quick(client, state.kept, state.retries, step, pin=pin)
                    client.script_load(_clients.source_of(step, False))
        try:  # (what evalsha sends, without its wrappers)
            return client.execute_command("EVALSHA", *_clients.evalsha_args(step))  # type: ignore[no-untyped-call]
        except _library(type(client)).no_script:
            client.script_load(_clients.source_of(step, False))
            return client.evalsha(*_clients.evalsha_args(step, False))
    deadline = time.monotonic() + _clients.SPLIT_PATIENCE
    backoff = ExponentialWithJitterBackoff(base=0.02, cap=0.5)
    for failures in itertools.count(1):
        try:
            return _send_once(client, step, _state(client).sharded)
        except Exception as exc:
            if _clients.master_unreached(client, exc):
                mark_masterless(exc)  # (a waiting acquire tries again: see _plans.waiting)
            pause = backoff.compute(failures)
            if not _clients.split_slot(exc) or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover


class _Fallback(Exception):
    """A call the quick path leaves to the ordinary one (see :func:`_quick`)."""


def _quick(
    client: Client,
    kept: _Kept,
    retries: bool,
    step: Eval,
    shard: bool = False,
    pin: _Pin | None = None,
) -> Any:
    """``EVALSHA`` of ``step`` written and read on a connection of the quick
    path (see :func:`_clients.quick_connections`): checked out of the client's
    pool the first time, then ``kept`` for the pool, idle between calls.
    When all it may keep are busy, the call waits for one (so tenure's calls
    never use more of the pool than that; the pool's checkout and the
    client's per-command wrappers cost more than the script itself).

    Raises:
        _Fallback: the server does not have the script (NOSCRIPT), or a
            connection could not be made or failed (it is closed, to connect
            again at its next use; see :func:`_clients.connection_fault`) and
            the client's retry policy retries: the ordinary path sends it
            (again: tenure's scripts are safe to run twice, as a retry after a
            lost reply already runs them).
        The reply's error (a ``ResponseError``), as the ordinary path raises
        it; a connection error when the client does not retry.
        Any other exception (an interrupt, of any class) closes the connection
        (a reply may still be due on it) and goes on as it is.

    With a ``pin`` (see :func:`one_connection`), it is sent on the pinned
    connection, and the connection stays pinned after a whole reply.
    """
    library = _library(type(client))
    sound = False  # a whole reply was read: the connection may be used again as it is
    if pin is not None and pin.conn is not None:
        conn, pin.conn = pin.conn, None  # (no call: see below)
    else:
        conn = _take(client, kept, retries)
    try:  # (at once: no call between, where an interrupt could lose the connection)
        conn.send_packed_command(_clients.packed_evalsha(conn, step, shard))
        raw = conn.read_response()
        sound = True
    except library.response_error as exc:
        sound = True
        if isinstance(exc, library.no_script):
            raise _Fallback from exc
        raise
    except Exception as exc:
        if retries and _clients.connection_fault(exc):
            raise _Fallback from exc
        raise  # (an interrupt of any class: never swallowed by a second send)
    finally:  # (whatever interrupts what: the connection is given back or let go)
        if sound:
            if pin is None:
                kept.idle.append(conn)  # (no call before it, where an interrupt could lose it)
                _wake_one(kept)
            else:
                _keep(kept, conn, pin)
        else:
            _discard(client, kept, conn)
    return raw


def _discard(client: Client, kept: _Kept, conn: Any) -> None:
    """A connection of the quick path whose call failed or was interrupted:
    closed (a reply may still be due on it) and kept; if the close itself is
    interrupted, given back to the pool instead (whose checkout tests a
    connection for unread data) and one fewer kept."""
    try:
        conn.disconnect()
    finally:
        if _internals.sock_of(conn) is None:
            _give(kept, conn)
        else:
            with contextlib.suppress(Exception):
                client.connection_pool.release(conn)  # type: ignore[union-attr]
            with kept.mutex:
                kept.open -= 1
                _notify(kept)


#: The longest a script call waits for a connection of the quick path when
#: all it may keep are busy (a stalled server, say), in seconds: it then
#: takes the ordinary path, through the client.
QUICK_PATIENCE = 1.0


def _take(client: Client, kept: _Kept, retries: bool) -> Any:
    """An idle connection of the quick path; a new one from the pool while
    fewer than it may keep are open; else the first one given back within
    :data:`QUICK_PATIENCE` (:class:`_Fallback` after it)."""
    try:
        return kept.idle.pop()
    except IndexError:
        pass
    waited = False
    while True:
        with kept.mutex:
            if kept.idle:
                return kept.idle.pop()
            if kept.open < kept.most:
                kept.open += 1
                break
            if waited:  # (QUICK_PATIENCE passed)
                raise _Fallback
            wake = _Wake()
            kept.waiting.append(wake)
        woken = False
        try:
            woken = wake.wait(QUICK_PATIENCE)
        finally:
            with kept.mutex:
                if wake in kept.waiting:
                    kept.waiting.remove(wake)
                elif not woken:  # woken as its wait ended otherwise (a timeout,
                    _notify(kept)  # an interrupt): the wake goes to the next one
        waited = not woken
    try:
        return _clients.checkout(client.connection_pool, _clients.library_of(type(client)))  # type: ignore[union-attr]
    except BaseException as exc:
        with kept.mutex:
            kept.open -= 1
            _notify(kept)
        if retries and _clients.connection_fault(exc):
            raise _Fallback from exc
        raise


def _give(kept: _Kept, conn: Any) -> None:
    """Give a connection of the quick path back (to a waiting call, if any).
    (A call whose connection is sound appends it itself, with no call before
    the append: an interrupt at this function's entry would leave the
    connection counted as open and never given back, one fewer for every
    later call, until all were gone and each call waited QUICK_PATIENCE.)"""
    kept.idle.append(conn)
    _wake_one(kept)


def _wake_one(kept: _Kept) -> None:
    """A connection was given back: wake a call that waits for one, if any (a
    wake-up lost to an interrupt costs that call at most QUICK_PATIENCE: it
    looks at the idle connections again then)."""
    if kept.waiting:
        with kept.mutex:
            _notify(kept)


def _notify(kept: _Kept) -> None:
    """Wake the first call waiting for a connection of the quick path, if
    any. Called holding ``kept.mutex``."""
    if kept.waiting:
        kept.waiting.pop(0).set()


@dataclass(eq=False)
class _Pin:
    """The connection of the quick path (``kept``'s) that one thread's block of
    calls (see :func:`one_connection`) keeps checked out between its calls:
    the one that answered the block's last call, if any."""

    kept: _Kept
    thread: int
    conn: Any = None


#: The pin of the running block of :func:`one_connection`, if any.
_pins: contextvars.ContextVar[_Pin | None] = contextvars.ContextVar("tenure_pin", default=None)

#: The steps that wait (for a wake, a contention, a subscription): a block of
#: :func:`one_connection` keeps no connection through them.
_WAITS = (WaitWake, Contend, Subscribe)


@contextlib.contextmanager
def one_connection(client: Client, wanted: bool = True) -> Iterator[None]:
    """Send this thread's script calls on ``client`` inside the block, and its
    pipelines with ``WAIT``, on one connection: the one that answered the
    block's previous call. So a grant, the ``WAIT`` for its replicas (which
    counts the acknowledgements of *this connection's* writes) and its
    give-back all reach the server that made the grant, even if the client's
    pool has meanwhile learned of another master (a Sentinel failover; the
    old master, still reachable, is then a master no replica follows).

    The connection is one of the quick path's (see :func:`_quick`), kept
    checked out between the block's calls and given back before a step that
    waits (a wake, a contention, a subscription: the next call after it may
    take another) and when the block ends. If it fails, the next call takes
    another. No effect on a cluster client (its pipelines with ``WAIT`` go to
    the master of their slot: see :func:`_on_master`), nor on a client without
    a quick path (each call takes a connection of the pool), nor unless
    ``wanted``.
    """
    kept = None if not wanted or _clients.is_cluster(type(client)) else _state(client).kept
    if kept is None:
        yield
        return
    pin = _Pin(kept, threading.get_ident())
    token = _pins.set(pin)
    try:
        yield
    finally:
        _pins.reset(token)
        if pin.conn is not None:
            _give(kept, _unpin(pin))


def _pin_for(client: Client) -> _Pin | None:
    """The pin of this thread's block of :func:`one_connection` on ``client``'s
    pool, if one runs."""
    pin = _pins.get()
    if pin is None or pin.thread != threading.get_ident():
        return None
    kept = _state(client).kept
    return pin if kept is pin.kept else None


def _unpin(pin: _Pin) -> Any:
    """The pinned connection, no longer pinned (the caller gives it back or keeps it)."""
    conn, pin.conn = pin.conn, None
    return conn


def _keep(kept: _Kept, conn: Any, pin: _Pin | None) -> None:
    """A connection of the quick path whose call is done: pinned (the block's
    next call goes on it), or given back."""
    if pin is None:
        _give(kept, conn)
    else:
        if pin.conn is not None:  # (not expected: one call at a time)
            _give(kept, _unpin(pin))
        pin.conn = conn


def _let_pin_go() -> None:
    """Give back the connection pinned by this thread's block of
    :func:`one_connection`, if any (the block waits: it keeps none meanwhile)."""
    pin = _pins.get()
    if pin is not None and pin.conn is not None and pin.thread == threading.get_ident():
        _give(pin.kept, _unpin(pin))


def _args(part: Eval | Command) -> tuple[Any, ...]:
    """The command of a pipeline's step: ``EVALSHA`` of a script call, or the command."""
    if isinstance(part, Eval):
        return ("EVALSHA", *_clients.evalsha_args(part))
    return part.args


def _on_pin(client: Client, pin: _Pin, commands: list[tuple[Any, ...]]) -> list[Any]:
    """``commands`` written at once on the pinned connection (if none is, on one
    the quick path takes, then pinned), their raw replies read in order (an
    error reply in its place). Raises :class:`_Fallback` as :func:`_quick` does."""
    kept, retries = pin.kept, _state(client).retries
    library = _library(type(client))
    raws: list[Any] = []
    sound = False  # every reply was read: the connection may be used again as it is
    if pin.conn is not None:
        conn, pin.conn = pin.conn, None  # (no call: see _quick)
    else:
        conn = _take(client, kept, retries)
    try:  # (at once: no call between, where an interrupt could lose the connection)
        conn.send_packed_command(conn.pack_commands(commands))
        for _ in commands:
            try:
                raws.append(conn.read_response())
            except library.response_error as exc:  # a whole reply was read
                raws.append(exc)
        sound = True
    except Exception as exc:
        if retries and _clients.connection_fault(exc):
            raise _Fallback from exc
        raise
    finally:  # (whatever interrupts what: the connection is pinned or let go)
        if sound:
            _keep(kept, conn, pin)
        else:
            _discard(client, kept, conn)
    return raws


def _load_on_pin(client: Client, pin: _Pin, source: bytes) -> None:
    """``SCRIPT LOAD`` of ``source`` on the pinned connection's server (its
    error reply raised)."""
    (raw,) = _on_pin(client, pin, [("SCRIPT", "LOAD", source)])
    if isinstance(raw, Exception):
        raise raw


def _send_once(client: Client, step: Eval, shard: bool) -> Any:
    """EVALSHA of ``step`` on a cluster client: on the quick path of the node
    owning its keys (see :func:`_node_quick`), else through the cluster
    client; on NOSCRIPT, load the script on the node owning its keys only
    (the client's ``SCRIPT LOAD`` goes to every master, and fails on a dead
    one) and send it once more."""
    if step.keys:
        reply = _node_quick(client, step, shard)
        if reply is not _NOT_SENT:
            return reply
    try:
        return client.evalsha(*_clients.evalsha_args(step, shard))
    except _library(type(client)).no_script:
        source = _clients.source_of(step, shard)
        if step.keys:
            cluster: Any = client
            node = cluster.get_node_from_key(step.keys[0])
            cluster.execute_command("SCRIPT LOAD", source, target_nodes=node)
        else:  # sent to any node: loaded on every one
            client.script_load(source)
        return client.evalsha(*_clients.evalsha_args(step, shard))


_NOT_SENT = object()


def _node_quick(client: Client, step: Eval, shard: bool) -> Any:
    """``EVALSHA`` of ``step`` on the quick path of the cluster node that owns
    its first key's slot (in the cluster client's slot map), on connections
    kept of that node's own pool (see :func:`_quick`); :data:`_NOT_SENT` when
    it takes none, or when the node answered that the slot is not (or no
    longer entirely) its own, did not have the script, or failed: the cluster
    client then sends it (and follows the redirect, loads the script,
    refreshes its map)."""
    cluster: Any = client
    try:
        node_client = _clients.node_client(cluster, cluster.get_node_from_key(step.keys[0]))
        pool = node_client.connection_pool
    except Exception as exc:
        if _clients.connection_fault(exc):
            return _NOT_SENT
        raise  # (an interrupt of any class: never swallowed)
    kept: _Kept | None = _clients.kept_on(pool, "kept")
    if kept is None or kept.generation != _identity.generation():
        with _states_mutex:
            kept = _kept_for(node_client)
    if kept is None:
        return _NOT_SENT
    try:
        return _quick(node_client, kept, True, step, shard)
    except _Fallback:
        return _NOT_SENT
    except Exception as exc:
        if _clients.redirected(exc) or "CLUSTERDOWN" in str(exc):
            return _NOT_SENT
        raise


def _evalsha(client: Client, step: Eval) -> Any:
    try:
        return _send(client, step)
    except Exception as exc:
        denied = _refusal(client, step, exc)
        if denied is not None:
            raise denied from exc
        raise


def _refusal(client: Client, step: Eval, exc: BaseException) -> PermissionDenied | None:
    """The error naming what the user lacks when the server refused ``step``
    with ``NOPERM`` (``None`` for any other error): the first key it may not
    use, found by :data:`ACL_KEYS` (sent with no KEYS, so it needs no
    permission but EVALSHA's), else the command the refusal names."""
    if not is_noperm(exc):
        return None
    try:
        raw = _send(client, Eval(ACL_KEYS, (), tuple(str(k) for k in step.keys)))
    except Exception:
        raw = None
    denied = None if raw is None else key_refusal(step.script, raw)
    return denied or command_refusal(exc, step.script.name)


def wait_event(event: threading.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass (``None``: no limit);
    clear it and return whether it was set."""
    woken = event.wait(timeout)
    event.clear()
    return woken


def sleep(seconds: float) -> None:
    """Sleep ``seconds``."""
    time.sleep(seconds)


# -- names for the fan-out (:mod:`._fanout_sync`): public aliases, nothing else --
Fan = _Fan
SendRenewals: TypeAlias = _SendRenewals
Watchdog = _Watchdog
REDIS = _REDIS
library_of = _library
perform = _perform
state_of = _state
start_thread = _start
exiting = _exiting
