"""The asyncio driver: ``redis.asyncio.Redis`` / ``valkey.asyncio.Valkey`` clients,
tasks, ``asyncio`` waits.

A client of either library is driven by the same code: the classes the driver
makes itself on the client's connection pool (the wake hub's ``PubSub``, the
clients of the watchdog's renewals and of the hub's hand-offs) and the
``NoScriptError`` it catches are those of the client's own library, found once
per client class (see :mod:`._clients`).

A Redis Cluster client (``redis.asyncio.cluster.RedisCluster``,
``valkey.asyncio.cluster.ValkeyCluster``) is driven as the synchronous driver
drives a synchronous one: scripts and commands through the client (routed by
their keys' slot), the :func:`._clients.sharded` variant of every script, one
wake hub per node it waits on (sharded pub/sub, on a connection pool of its
own to that node, handing its channels to the new owner's hub when a slot
moves or its master fails over), watchdog renewals in one cluster pipeline,
and a pipeline with ``WAIT`` (``min_replicas``) on a connection of the slot's
master (on any other client: on the connection that made the grant, see
:func:`one_connection`). On a cluster without sharded pub/sub (Redis 6.2,
found by the first call's server probe) it falls back to the scripts' plain
variants (``PUBLISH``, which the cluster bus copies to every node) and hubs
that ``SUBSCRIBE``, still one per node waited on.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import itertools
import logging
import math
import os
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, cast

import redis.asyncio
import redis.asyncio.client
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
    LINGER,
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

if TYPE_CHECKING:
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
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: the hub whose book holds the channel (on a Redis Cluster it moves to the
    #: hub of the slot's new owner: see _Hub.adopt)
    home: Any = None


class _HubPubSub(Protocol):
    """What the hub uses of a library's PubSub (with :class:`_Reconnects` mixed in)."""

    hub: _Hub
    channels: dict[Any, Any]
    connection: Any

    async def subscribe(self, *args: Any, **kwargs: Any) -> Any: ...
    def unsubscribe(self, *args: Any) -> Any: ...
    async def get_message(
        self, ignore_subscribe_messages: bool = ..., timeout: float | None = ...
    ) -> Any: ...
    def aclose(self) -> Any: ...


class _Reconnects:
    """Mixed into a library's PubSub class: tells its hub when the connection
    is made again."""

    hub: _Hub

    async def on_connect(self, connection: Any) -> None:
        # The library registers this callback after the pool's first connect, so
        # it runs on reconnections only (inside get_message, or inside a waiter's
        # SUBSCRIBE), before any reply of the new connection is read.
        self.hub.reconnected()  # before the SUBSCRIBEs: no confirmation comes first
        await super().on_connect(connection)  # type: ignore[misc]  # SUBSCRIBE again
        pubsub = cast(_HubPubSub, self)
        shard = getattr(pubsub, "shard_channels", {})
        strays = self.hub.strays(_text(name) for name in [*pubsub.channels, *shard])
        for name in strays:
            await self.hub._unsubscribe(pubsub, name)


class _ShardedPubSub:
    """Sharded pub/sub (``SSUBSCRIBE`` / ``SUNSUBSCRIBE``, ``smessage``), mixed into
    valkey-py's asyncio PubSub, which lacks it (valkey-py 6.2; its synchronous
    PubSub has it, as redis-py's both do): what a ``ValkeyCluster`` hub needs,
    with the same attributes as redis-py's (``shard_channels``), subscribed
    again on a new connection."""

    shard_channels: dict[Any, Any]
    pending_unsubscribe_shard_channels: set[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shard_channels = {}
        self.pending_unsubscribe_shard_channels = set()

    async def ssubscribe(self, *channels: Any) -> None:
        pubsub = cast(Any, self)
        await pubsub.execute_command("SSUBSCRIBE", *channels)
        new = _internals.normalize_keys(pubsub, dict.fromkeys(channels))
        self.shard_channels.update(new)
        self.pending_unsubscribe_shard_channels.difference_update(new)

    def sunsubscribe(self, *channels: Any) -> Awaitable[Any]:
        pubsub = cast(Any, self)
        self.pending_unsubscribe_shard_channels.update(
            _internals.normalize_keys(pubsub, dict.fromkeys(channels))
        )
        return cast(Awaitable[Any], pubsub.execute_command("SUNSUBSCRIBE", *channels))

    async def on_connect(self, connection: Any) -> None:
        await cast(Any, super()).on_connect(connection)
        self.pending_unsubscribe_shard_channels.clear()
        if self.shard_channels:
            await cast(Any, self).execute_command("SSUBSCRIBE", *self.shard_channels)

    async def handle_message(self, response: Any, ignore_subscribe_messages: bool = False) -> Any:
        message = await cast(Any, super()).handle_message(response, ignore_subscribe_messages)
        if isinstance(message, dict) and message.get("type") in ("sunsubscribe", b"sunsubscribe"):
            channel = message["channel"]
            if channel in self.pending_unsubscribe_shard_channels:
                self.pending_unsubscribe_shard_channels.discard(channel)
                self.shard_channels.pop(channel, None)
        return message

    @property
    def subscribed(self) -> bool:
        pubsub = cast(Any, self)
        return bool(pubsub.channels or pubsub.patterns or self.shard_channels)


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
    #: the arguments of its pool's ``get_connection`` (valkey-py needs a command name)
    checkout: tuple[str, ...]
    #: its connection pool class (a cluster hub's pool to one node)
    pool: Callable[..., Any]


class _RedisHubPubSub(_Reconnects, redis.asyncio.client.PubSub):
    """redis-py's PubSub, telling its hub when the connection is made again."""


_REDIS = _Library(
    redis.asyncio.Redis,
    _RedisHubPubSub,
    redis.exceptions.NoScriptError,
    redis.exceptions.ResponseError,
    (),
    redis.asyncio.ConnectionPool,
)


@cache
def _library_named(name: _clients.Library) -> _Library:
    if name == "redis":
        return _REDIS
    import valkey.asyncio
    import valkey.asyncio.client
    import valkey.exceptions

    class _ValkeyHubPubSub(_Reconnects, _ShardedPubSub, valkey.asyncio.client.PubSub):
        """valkey-py's PubSub, with sharded pub/sub, telling its hub when the
        connection is made again."""

    return _Library(
        valkey.asyncio.Valkey,
        _ValkeyHubPubSub,
        valkey.exceptions.NoScriptError,
        valkey.exceptions.ResponseError,
        ("EVALSHA",),
        valkey.asyncio.ConnectionPool,
    )


@cache
def _library(cls: type) -> _Library:
    """The classes of the library that the client class ``cls`` belongs to."""
    return _library_named(_clients.library_of(cls))


class _Hub:
    """One pub/sub connection per client, process and event loop; wakes waiting tasks.

    The bookkeeping is :class:`._hubbook.HubBook`'s; this class does the I/O:
    SUBSCRIBE / UNSUBSCRIBE, and a reader task that routes messages. After a
    reconnection (see the book's module docstring) the confirmations of the new
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
        self._book = HubBook(_Channel)
        self._pubsub: _HubPubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        # one SUBSCRIBE at a time: the library's asyncio PubSub takes its
        # connection from the pool on first use without a lock, so concurrent
        # first SUBSCRIBEs would each take one, and every channel subscribed on
        # a connection other than the last would be read by nobody (its wakes
        # lost while PUBLISH still counts a subscriber) and hold a pool slot
        self._sending = asyncio.Lock()
        self._backoff = ExponentialWithJitterBackoff(base=0.05, cap=2.0)
        # a cluster node's channels that its server dropped (slot moved, node
        # gone), waiting to be adopted by the hub of their slot's owner
        self._orphans: dict[str, _Channel] = {}
        # the SUBSCRIBEs on their way (see _subscribe), referenced until done
        self._opening: set[asyncio.Future[None]] = set()
        self._orphan_failures = 0
        self._rehome_at = 0.0

    async def enter(self, keys: LockKeys | None, channel: str, token: str) -> _Channel:
        ch, subscribe = self._book.enter(channel, keys, token)
        ch.home = self
        try:
            await self._subscribe(channel, subscribe)
        except BaseException:
            self._book.leave(ch, token, time.monotonic())
            raise
        return ch

    async def listen(self, channel: str, event: asyncio.Event) -> _Channel:
        ch, subscribe = self._book.listen(channel, event)
        ch.home = self
        try:
            await self._subscribe(channel, subscribe)
        except BaseException:
            self._book.unlisten(ch, event, time.monotonic())
            raise
        return ch

    async def adopt(self, channel: str, ch: _Channel) -> None:
        """Listen on ``channel`` with the record another node's hub dropped (a
        Redis Cluster slot now served by this hub's node, or a node gone):
        SSUBSCRIBE (SUBSCRIBE on Redis 6.2), whose confirmation wakes its
        plans. Raises the library's error if it can't be sent (the record is
        then not adopted)."""
        if not self._book.adopt(channel, ch):
            _wake_all_of(ch)
            return
        ch.home = self
        try:
            await self._send_subscribe(channel)
        except BaseException:
            self._book.forget(channel)
            raise
        if self._reader is None:
            self._reader = asyncio.create_task(self._read(), name="tenure-wake-hub")

    async def _send_subscribe(self, channel: str) -> None:
        """Subscribe the hub's connection to ``channel`` (``SSUBSCRIBE`` on a
        cluster with sharded pub/sub, else ``SUBSCRIBE``), one call at a time
        (see ``_sending``)."""
        async with self._sending:
            pubsub = self._listen()
            if self._sharded:
                await cast(Any, pubsub).ssubscribe(channel)
            else:
                await pubsub.subscribe(channel)

    def _orphan(self, orphans: dict[str, _Channel]) -> None:
        """Keep channels the server dropped until a hub adopts them (the reader
        calls :meth:`_rehome`)."""
        self._orphans.update(orphans)
        self._orphan_failures = 0
        self._rehome_at = 0.0

    async def _rehome(self) -> None:
        """Give each orphaned channel to the hub of the node that owns its slot
        now, after refreshing the cluster client's slot map; those that no hub
        can take yet (the slot's new master is not known yet, or does not
        answer) are tried again after a backoff. A channel nobody waits on any
        more is just dropped."""
        client = self._cluster() if self._cluster is not None else None
        if client is None:
            self._orphans.clear()
            return
        if time.monotonic() < self._rehome_at:
            return
        with contextlib.suppress(Exception):
            await client.nodes_manager.initialize()  # type: ignore[union-attr]
        for name, ch in list(self._orphans.items()):
            adopted = ch.refs == 0
            if not adopted:
                with contextlib.suppress(Exception):
                    hub = _hub(client, name)
                    if hub is not self or self._pubsub is None:
                        await hub.adopt(name, ch)
                        adopted = True
            if adopted:
                self._orphans.pop(name, None)
        if self._orphans:
            self._orphan_failures += 1
            self._rehome_at = time.monotonic() + self._backoff.compute(self._orphan_failures)

    async def _subscribe(self, channel: str, new: bool) -> None:
        """Subscribe to a ``new`` channel (else nothing to do). The SUBSCRIBE
        is sent by a task of its own: other plans of the process may enter
        the channel while it is on its way, and count on its confirmation, so
        a cancellation of the plan that entered first (which the caller then
        counts out) does not stop it."""
        if not new:
            return
        opening = asyncio.ensure_future(self._open(channel))
        self._opening.add(opening)
        opening.add_done_callback(self._opened)
        await asyncio.shield(opening)

    async def _open(self, channel: str) -> None:
        """SUBSCRIBE to ``channel`` and start the reader if it is not running.
        If that fails, the channel is forgotten and every plan that entered
        it is woken (to try again, and meet the error)."""
        try:
            await self._send_subscribe(channel)
        except BaseException:
            ch = self._book.channels.get(channel)
            self._book.abort(channel)
            if ch is not None:
                _wake_all_of(ch)
            raise
        if self._reader is None:
            self._reader = asyncio.create_task(self._read(), name="tenure-wake-hub")

    def _opened(self, opening: asyncio.Future[None]) -> None:
        """A SUBSCRIBE of :meth:`_subscribe` is done: drop its reference and
        retrieve its error (raised to its plan, if that still waited for it)."""
        self._opening.discard(opening)
        if not opening.cancelled():
            opening.exception()

    def leave(self, ch: _Channel, token: str, kept: bool = False) -> None:
        self._book.leave(ch, token, time.monotonic(), kept)

    def woken(self, ch: _Channel, token: str, woken: bool) -> bool | HandedOff | Recheck:
        """The reply to a wait of the plan waiting with ``token`` on ``ch``."""
        return self._book.woken(ch, token, woken)

    def unlisten(self, ch: _Channel, event: asyncio.Event) -> None:
        self._book.unlisten(ch, event, time.monotonic())

    def own_waiter(self) -> str:
        """A waiter id new for one plan that waits on a channel of its own."""
        return f"{self.waiter}.{next(self._numbers)}"

    def listening(self, wake_prefix: str) -> bool:
        """Whether this hub listens (or lingers) on the lock with this wake prefix."""
        return (wake_prefix + self.waiter) in self._book.channels

    def reconnected(self) -> None:
        """The connection is being made again: see :meth:`._hubbook.HubBook.reconnected`."""
        self._book.reconnected()

    def strays(self, resubscribed: Iterable[str]) -> list[str]:
        """The channels to unsubscribe again: see :meth:`._hubbook.HubBook.strays`."""
        return self._book.strays(resubscribed)

    def _listen(self) -> _HubPubSub:
        if self._pubsub is None:
            pubsub = self._library.pubsub(connection_pool=self._pool)
            pubsub.hub = self
            self._pubsub = pubsub
        return self._pubsub

    async def _read(self) -> None:
        pubsub = self._pubsub
        assert pubsub is not None
        task = asyncio.current_task()
        failures = 0
        try:
            while True:
                if self._orphans:
                    await self._rehome()
                message = await self._next(pubsub, failures)
                failures = 0 if message is not False else failures + 1
                # redis-py can swallow a cancellation while it reconnects; a
                # pending one (the loop shutting down) still ends the reader.
                if task is not None and task.cancelling():
                    break
                if message is False and self._cluster is not None:
                    # a cluster node gone (failover) or no longer serving a
                    # channel (MOVED): its channels go to their slots' owners
                    orphans = self._book.drop_all()
                    self._pubsub = None  # an adoption here starts a new reader
                    self._reader = None
                    self._orphan(orphans)
                    while self._orphans:
                        await self._rehome()
                        if self._orphans:
                            wait = min(LINGER, self._rehome_at - time.monotonic())
                            await asyncio.sleep(max(0.0, wait))
                    break
                if isinstance(message, dict):
                    await self._dispatch(message, pubsub)
                elif message is None and self._book.empty() and not self._orphans:
                    break
                elif message is False and self._book.empty():
                    break  # nobody waits: don't reconnect
        finally:
            if self._pubsub is pubsub:
                self._pubsub = None  # the next wait starts a new reader
                self._reader = None
            with contextlib.suppress(Exception):
                await asyncio.shield(pubsub.aclose())

    async def _next(self, pubsub: _HubPubSub, failures: int) -> dict[str, Any] | bool | None:
        """The next message (``None`` when idle), or ``False`` after an error."""
        try:
            message: dict[str, Any] | None = await pubsub.get_message(timeout=LINGER)
            for name in self._book.stale(time.monotonic()):
                await self._unsubscribe(pubsub, name)
            if _clients.left_master(self._pool, pubsub.connection):
                # a Sentinel failover that this connection did not notice:
                # the next read reconnects to the new master
                await pubsub.connection.disconnect()
            return message
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_noperm(exc):  # a SUBSCRIBE refused by the ACL: fail its plans now
                name, ch = self._book.refused()
                if name:
                    with contextlib.suppress(Exception):
                        await self._unsubscribe(pubsub, name)
                if ch is not None:
                    wake_refused(ch)
                return None
            if self._cluster is None and not self._book.drop_idle():
                self._book.wake_all()
                await asyncio.sleep(self._backoff.compute(failures + 1))
            return False

    async def _unsubscribe(self, pubsub: _HubPubSub, name: str) -> None:
        if self._sharded:
            await cast(Any, pubsub).sunsubscribe(name)
        else:
            await pubsub.unsubscribe(name)

    async def _dispatch(self, message: dict[str, Any], pubsub: _HubPubSub) -> None:
        channel, data = _text(message["channel"]), _text(message["data"])
        kind = _clients.SHARDED_TYPES.get(message["type"], message["type"])
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
                    await _drive(client, route.plan())
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
_SendRenewals: TypeAlias = Callable[[list[Any]], Awaitable[list[tuple[Status, Any] | None]]]


class _Watchdog:
    """One task per client, process and event loop that renews the client's
    leases and fires the lost signal (the decisions are
    :class:`._watchbook.WatchBook`'s).

    Renewals run in a second task, one batch at a time, so that a call that
    hangs (a paused server) never delays a deadline: a lease whose deadline
    passes is lost then, whatever its renewal is doing.
    """

    def __init__(self, pool: Any, library: _Library, send: _SendRenewals | None = None) -> None:
        self._pool = pool
        self._library = library
        self._send = send
        self._book = WatchBook()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._renewal: asyncio.Task[None] | None = None
        self._sleep_until = 0.0

    def watch(self, lease: Watchable, renew: bool) -> Watch:
        watch = self._book.add(lease, renew, time.monotonic(), CLAIM_GRACE)
        watch.dog = self
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="tenure-watchdog")
        elif self._book.first_due(watch) < self._sleep_until:
            self._wake.set()
        return watch

    def stop_renewing(self, watch: Watch) -> None:
        self._book.stop_renewing(watch)

    def unwatch(self, watch: Watch) -> None:
        # no wake-up: the watchdog notices within MAX_SLEEP
        self._book.discard(watch, time.monotonic())

    async def _run(self) -> None:
        try:
            while True:
                now = time.monotonic()
                for watch in self._book.expired(now):
                    lose(watch.lease, watch.why)
                batch = [] if self._renewal is not None else self._book.take_due(now)
                if batch:
                    self._renewal = asyncio.create_task(self._renew(batch), name="tenure-renewal")
                    continue
                if self._book.finished(now):
                    return
                sleep = self._book.sleep(now)
                self._sleep_until = now + sleep
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(sleep):
                        await self._wake.wait()
                self._wake.clear()
        finally:
            self._task = None

    async def _renew(self, batch: list[Watch]) -> None:
        sent_at = time.monotonic()
        replies: list[tuple[Status, Any] | None]
        try:
            if self._send is not None:
                replies = list(await self._send([w.lease for w in batch]))
            else:
                client = self._library.client(connection_pool=self._pool)
                step = Pipeline(tuple(w.lease._renewal() for w in batch))
                replies = [renewal_reply(reply) for reply in await _pipeline(client, step)]
        except Exception:
            _log.warning("tenure watchdog: renewal failed; retrying", exc_info=True)
            replies = [None] * len(batch)
        finally:
            self._renewal = None
            self._wake.set()
        now = time.monotonic()
        for watch, reply in zip(batch, replies, strict=True):
            reason = self._book.settle(watch, reply, sent_at, now)
            if reason is not None:
                lose(watch.lease, reason)


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
    #: the connections its scripts' quick path keeps, those of the client's
    #: pool in this loop (None: it takes none; see :func:`_quick`)
    kept: _Kept | None = None
    #: the connections run_each's quick path keeps, those of the client's
    #: pool in this loop (None: it takes none; see :class:`_Fan`)
    fan: _Fan | None = None
    #: whether its retry policy sends a command again after a connection error
    retries: bool = True


@dataclass(eq=False)
class _Kept:
    """The connections the scripts' quick path keeps checked out of one pool
    (see :func:`_quick`) in one event loop, shared by every client on the
    pool: a client made per request on a shared pool and dropped leaves them
    to the next one (kept by each client, they would be lost with it, slots
    of the pool never given back).
    Kept on the pool itself (see :func:`_clients.keep_on`)."""

    generation: int
    loop: asyncio.AbstractEventLoop
    #: how many it may keep (see _clients.quick_connections)
    most: int
    #: the idle ones, and how many it keeps in all
    idle: list[Any] = field(default_factory=list)
    open: int = 0
    #: the calls waiting for one (all it may keep are busy), first come first served
    waiters: collections.deque[asyncio.Future[Any]] = field(default_factory=collections.deque)


def _kept_for(client: Client, loop: asyncio.AbstractEventLoop) -> _Kept | None:
    """The quick path's connections of ``client``'s pool in ``loop``, or
    ``None`` when the client may take none (see
    :func:`_clients.quick_connections`). Those the pool's kept in another
    loop are given back to it (see :func:`_forsake`)."""
    most = _clients.quick_connections(client)
    if not most:
        return None
    pool = client.connection_pool  # type: ignore[union-attr]
    kept: _Kept | None = _clients.kept_on(pool, "kept")
    if kept is None or kept.generation != _identity.generation() or kept.loop is not loop:
        if kept is not None and kept.generation == _identity.generation():
            _forsake(kept.idle, pool)
            kept.idle = []
        kept = _Kept(_identity.generation(), loop, most)
        if not _clients.keep_on(pool, "kept", kept):  # (made by the first client, in its loop)
            return None
    return kept


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
    Kept on the pool itself (see :func:`_clients.keep_on`)."""

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
    fan: _Fan | None = _clients.kept_on(pool, "fan")
    if fan is None or fan.generation != _identity.generation() or fan.loop is not loop:
        if fan is not None and fan.generation == _identity.generation():
            _forsake([*fan.spare, *(conn for conn, _ in fan.owed)], pool)
            fan.spare = []
            fan.owed = []
        fan = _Fan(_identity.generation(), loop, most)
        if not _clients.keep_on(pool, "fan", fan):  # (made by the first client, in its loop)
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
            state.kept = _kept_for(client, loop)
            state.fan = _fan_for(client, loop)
            state.retries = _clients.retries_allowed(client)
        key = id(client)
        state.client = weakref.ref(client, lambda ref: _forget_state(key, ref))
        _states[key] = state
    return state


def _forsake(conns: list[Any], pool: Any) -> None:
    """Give back to ``pool`` idle connections that a quick path (of scripts,
    or of run_each) kept checked out of it in another event loop: they are of
    no use in this one, and each would keep a slot of the pool's
    ``max_connections``. Each is closed (as far as its own loop, maybe
    closed, lets it) and released in a task of this loop."""
    if not conns:
        return
    kept = list(conns)

    async def give_back() -> None:
        for conn in kept:
            with contextlib.suppress(Exception):  # (its loop closed: it is dropped all the same)
                await conn.disconnect(nowait=True)
            with contextlib.suppress(Exception):
                await pool.release(conn)

    task = asyncio.ensure_future(give_back())
    _forsaken.add(task)
    task.add_done_callback(_forsaken.discard)


#: The tasks of :func:`_forsake` (kept referenced until done).
_forsaken: set[asyncio.Task[None]] = set()


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
            raw = await _one(client, step)
        replies.append(renewal_reply(raw))
    return replies


def watch(client: Client, lease: Watchable, renew: bool) -> Watch:
    """Watch ``lease`` with the client's watchdog (renewing it if ``renew``) until
    :func:`unwatch`; its ``_lose`` is called when it is lost. Call from a task."""
    return _state(client).watchdog.watch(lease, renew)


def stop_renewing(client: Client, watch: Watch) -> None:
    """Never renew ``watch``'s lease again (its release was attempted); its
    deadline is still watched."""
    if watch.renewable:  # (else there is nothing to stop)
        (watch.dog or _state(client).watchdog).stop_renewing(watch)


def unwatch(client: Client, watch: Watch) -> None:
    """Stop watching a lease (released or lost)."""
    (watch.dog or _state(client).watchdog).unwatch(watch)


async def run(client: Client, plan: Plan[T]) -> T:
    """Drive ``plan`` to its result with ``client``; the first call probes the server.

    Raises whatever the plan raises, and the client library's connection errors.
    """
    state = _state(client)
    if state.server is None:
        async with state.probing:  # (calls made at once share one probe)
            if state.server is None:
                await _probe(client, state)
    return await _drive(client, plan)


def batch_key(client: Client) -> object | None:
    """What :func:`run_together` shares among clients: their connection pool
    (plans of clients with the same pool may be run together, on a client
    of any of them); ``None`` for a Redis Cluster client (its calls go to
    the node of each key's slot)."""
    if _clients.is_cluster(type(client)):
        return None
    return getattr(client, "connection_pool", None)


async def run_together(client: Client, plans: list[Plan[Any]]) -> list[Any]:
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
        async with state.probing:
            if state.server is None:
                await _probe(client, state)
    results: list[Any] = [None] * len(plans)
    if len(plans) == 1 or _clients.is_cluster(type(client)):
        for i, plan in enumerate(plans):
            try:
                results[i] = await _drive(client, plan)
            except Exception as exc:
                results[i] = exc
            except BaseException as exc:
                results[i] = exc
                for j in range(i + 1, len(plans)):
                    plans[j].close()
                    results[j] = exc
                break
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
                    asked = _cancel_requests()
                    try:
                        if not isinstance(step, Command | Pipeline | Listening):
                            raise TypeError(f"run_together runs no {type(step).__name__} step")
                        replies[i] = await _perform(client, step, [])
                    except BaseException as exc:
                        errors[i] = exc
                    else:
                        errors[i] = _swallowed(asked)
                live = going
                if not steps:
                    continue
                asked = _cancel_requests()
                try:
                    answers = await _send_together(client, state, steps)
                except BaseException as exc:
                    for i in due:
                        errors[i] = exc
                    continue
                if (swallowed := _swallowed(asked)) is not None:
                    for i in due:
                        errors[i] = swallowed
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


async def _send_together(client: Client, state: _State, steps: list[Eval]) -> list[Any]:
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
            raws = await _quick_together(client, kept, state.retries, steps, pin)
        except _Fallback:
            if pin is not None and pin.conn is not None:  # (NOSCRIPT: loaded there, sent again)
                with contextlib.suppress(_Fallback):
                    for spec in {step.script for step in steps}:
                        await _load_on_pin(client, pin, spec.source)
                    raws = await _quick_together(client, kept, state.retries, steps, pin)
        if raws is not None:
            answers: list[Any] = []
            for step, raw in zip(steps, raws, strict=True):
                if isinstance(raw, Exception):
                    answers.append(await _refusal(client, step, raw) or raw)
                    continue
                # one answer per step, appended once: an interrupt (of any
                # class) after the append goes to the caller, not in the list
                try:
                    answer: Any = parse_reply(step.script, raw)
                except Exception as exc:
                    answer = exc
                answers.append(answer)
            return answers
    return await _pipeline(client, Pipeline(tuple(steps)))


async def _quick_together(
    client: Client, kept: _Kept, retries: bool, steps: list[Eval], pin: _Pin | None = None
) -> list[Any]:
    """The replies of ``steps`` written back to back on a connection of the
    quick path, read in order (an error reply in its place). Raises
    :class:`_Fallback` as :func:`_quick` does, and on a NOSCRIPT reply.
    With a ``pin``, on the pinned connection, as :func:`_quick` does."""
    if pin is not None and pin.conn is not None:
        conn = _unpin(pin)
    else:
        conn = await _take(client, kept, retries)
    library = _library(type(client))
    raws: list[Any] = []
    missing = False
    try:
        packed = [part for step in steps for part in _clients.packed_evalsha(conn, step)]
        await conn.send_packed_command([b"".join(packed)])  # (one write, not one per part)
        for _ in steps:
            try:
                raws.append(await conn.read_response())
            except library.response_error as exc:  # a whole reply was read
                raws.append(exc)
                missing = missing or isinstance(exc, library.no_script)
    except Exception as exc:
        await _close(kept, conn)
        if retries and _clients.connection_fault(exc):
            raise _Fallback from exc
        raise  # (an interrupt of any class: never swallowed by a second send)
    except BaseException:
        await _close(kept, conn)
        raise
    if pin is None and not kept.waiters:
        kept.idle.append(conn)  # (no call before it, where an interrupt could lose it)
    else:
        _keep(kept, conn, pin)
    if missing:
        raise _Fallback
    return raws


async def _probe(client: Client, state: _State) -> None:
    try:
        server = await _drive(client, server_plans.probe())
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
    listener: asyncio.Event | None = None  # set for a Subscribe: its own wake event

    @property
    def hub(self) -> _Hub:
        """The hub that holds the channel now (see ``_Channel.home``)."""
        return self.ch.home  # type: ignore[no-any-return]


def _cancel_requests() -> int:
    """How many cancellations of the current task are pending (0 outside a task)."""
    task = asyncio.current_task()
    return 0 if task is None else task.cancelling()


def _swallowed(asked: int) -> asyncio.CancelledError | None:
    """The cancellation that a call begun when :func:`_cancel_requests` was
    ``asked`` returned through without raising, if any: redis-py writes each
    command under ``asyncio.wait_for`` (its socket timeout), which on Python
    3.11 returns the result when the cancellation lands just as the write
    completes, so the caller's cancel (or its ``asyncio.timeout``) would be
    lost and the plan would go on waiting. The plan gets it instead, as if it
    had come during the call (it gives back what the call took)."""
    if _cancel_requests() > asked:
        return asyncio.CancelledError()
    return None


async def _drive(client: Client, plan: Plan[T]) -> T:
    held: list[_Contention] = []
    reply: Any = None
    error: BaseException | None = None
    kept = False  # the plan ended holding what it waited for
    result: Any = None
    try:
        while True:
            try:
                step = plan.send(reply) if error is None else plan.throw(error)
            except StopIteration as stop:
                kept, result = stop.value is not None, stop.value
                return stop.value  # type: ignore[no-any-return]
            error = None
            asked = _cancel_requests()
            try:
                if type(step) is Eval:  # (the common step, without _perform's dispatch)
                    reply = parse_reply(step.script, await _evalsha(client, step))
                else:
                    reply = await _perform(client, step, held)
            except BaseException as exc:
                reply, error = None, exc
            else:
                if (error := _swallowed(asked)) is not None:
                    reply = None
    finally:
        try:
            for c in reversed(held):
                if c.listener is not None:
                    c.hub.unlisten(c.ch, c.listener)
                    continue
                if c.entered:
                    c.ch.gate.release()
                c.hub.leave(c.ch, c.token, kept)
        except BaseException as exc:
            if kept:  # (an interrupt here): the caller may still give the result back
                _clients.note_result(exc, result)
            raise
        finally:
            plan.close()


async def _perform(client: Client, step: Step, held: list[_Contention]) -> Any:
    if isinstance(step, Eval):
        return parse_reply(step.script, await _evalsha(client, step))
    if type(step) in _WAITS:
        _let_pin_go()  # (a wait keeps no connection checked out)
    if isinstance(step, WaitWake):
        c = held[-1]
        wake = c.ch.wake if c.listener is None else c.listener
        if c.listener is None:
            c.ch.wait_until = math.inf if step.timeout is None else time.monotonic() + step.timeout
        try:
            async with asyncio.timeout(step.timeout):
                await wake.wait()
            woken = True
        except TimeoutError:
            woken = False
        finally:
            c.ch.wait_until = None
        wake.clear()
        refusal(c.ch)
        return c.hub.woken(c.ch, c.token, woken)
    if isinstance(step, Listening):
        return _hub(client, step.keys.wake_prefix).listening(step.keys.wake_prefix)
    if isinstance(step, Contend):
        hub = _hub(client, step.keys.wake_prefix)
        started = time.monotonic()
        keys = step.keys if step.pass_on else None
        waiter = hub.own_waiter() if step.own_channel else hub.waiter
        ch = await hub.enter(keys, step.keys.wake_prefix + waiter, step.token)
        c = _Contention(ch, step.token)
        held.append(c)
        try:
            async with asyncio.timeout(confirm_wait(step.timeout)):
                await ch.ready.wait()
        except TimeoutError:
            pass
        refusal(ch)
        try:
            left = None if step.timeout is None else step.timeout - (time.monotonic() - started)
            async with asyncio.timeout(None if left is None else max(0.0, left)):
                await ch.gate.acquire()
            c.entered = True
        except TimeoutError:
            c.entered = False
        return waiter if c.entered else None
    if isinstance(step, Subscribe):
        hub = _hub(client, step.channel)
        event = asyncio.Event()
        ch = await hub.listen(step.channel, event)
        held.append(_Contention(ch, "", listener=event))
        try:
            async with asyncio.timeout(step.timeout):
                await ch.ready.wait()
        except TimeoutError:
            return False
        refusal(ch)
        return True
    if isinstance(step, Command):
        return await client.execute_command(*step.args)  # type: ignore[no-untyped-call,unused-ignore]
    if isinstance(step, Pipeline):
        return await _pipeline(client, step)
    raise TypeError(f"unknown step {step!r}")


async def _pipeline(client: Client, step: Pipeline, *, shard: bool = False) -> list[Any]:
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
            return await _on_master(client, step)
        return [await _one(client, part) for part in step.steps]
    pin = None if shard else _pin_for(client)
    if pin is not None and not _clients.on_one_connection(step):
        pin = None  # (only what WAITs must follow the writes on their connection)

    async def send() -> list[Any]:
        nonlocal pin
        if pin is not None:
            try:
                return await _on_pin(client, pin, [_args(part) for part in step.steps])
            except _Fallback:  # (its connection failed: the client's own way)
                pin = None
        async with client.pipeline(transaction=False) as pipe:
            for part in step.steps:
                if isinstance(part, Eval):
                    pipe.evalsha(*_clients.evalsha_args(part, shard))
                else:
                    pipe.execute_command(*part.args)
            return await pipe.execute(raise_on_error=False)

    raws = await send()
    if any(isinstance(raw, _library(type(client)).no_script) for raw in raws):
        for spec in {part.script for part in step.steps if isinstance(part, Eval)}:
            source = (_clients.sharded(spec) if shard else spec).source
            if pin is not None:
                try:
                    await _load_on_pin(client, pin, source)
                    continue
                except _Fallback:  # (its connection failed: the client's own way)
                    pin = None
            await client.script_load(source)
        raws = await send()
    replies: list[Any] = []
    for part, raw in zip(step.steps, raws, strict=True):
        if isinstance(part, Eval) and isinstance(raw, Exception):
            raw = await _refusal(client, part, raw) or raw
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


async def _on_master(client: Any, step: Pipeline) -> list[Any]:
    """Send a pipeline that must share one connection (a write, then ``WAIT``)
    to the master of its first script's slot, on a client of that master (from
    a connection pool of its own, kept per node), in one round trip. If the
    node answers that the slot is not (or no longer entirely) its own
    (``MOVED``, ``ASK``, ``TRYAGAIN``: a migration, a failover), the cluster
    client's slot map is refreshed and the whole pipeline sent again (its
    steps are idempotent), up to :data:`REDIRECTED_TRIES` times in all."""
    key = _clients.first_key(step)
    state = _state(client)
    replies: list[Any] = []
    for attempt in range(REDIRECTED_TRIES):
        node = client.get_node_from_key(key) if key is not None else client.get_default_node()
        where = (str(node.host), int(node.port))
        pool = state.pools.get(where)
        if pool is None:
            pool = state.pools[where] = state.hub._library.pool(
                connection_class=node.connection_class, **node.connection_kwargs
            )
        master = state.hub._library.client(connection_pool=pool)
        replies = await _pipeline(master, step, shard=state.sharded)
        if not any(_clients.redirected(reply) for reply in replies):
            break
        if attempt + 1 < REDIRECTED_TRIES:
            await asyncio.sleep(0.05 * (attempt + 1))
            await client.nodes_manager.initialize()
    return replies


async def _one(client: Client, part: Eval | Command) -> Any:
    """One step of a pipeline sent on its own: its parsed reply, or its error."""
    try:
        if isinstance(part, Eval):
            return parse_reply(part.script, await _evalsha(client, part))
        return await client.execute_command(*part.args)  # type: ignore[no-untyped-call,unused-ignore]
    except Exception as exc:
        return exc


async def _send(client: Client, step: Eval) -> Any:
    """EVALSHA of ``step``; on NOSCRIPT, load the script and send it once more.
    On a Redis Cluster whose slot is split mid-migration, send it again, with a
    growing random pause, for up to :data:`_clients.SPLIT_PATIENCE` seconds."""
    if not _clients.is_cluster(type(client)):
        state = _state(client)
        if state.kept is not None and state.server is not None:
            pin = _pin_for(client)
            try:
                return await _quick(client, state.kept, state.retries, step, pin)
            except _Fallback as fallback:
                if isinstance(fallback.__cause__, _library(type(client)).no_script):
                    # (the server lost its scripts: loaded first, not asked again)
                    if pin is not None and pin.conn is not None:
                        with contextlib.suppress(_Fallback):
                            await _load_on_pin(client, pin, _clients.source_of(step, False))
                            return await _quick(client, state.kept, state.retries, step, pin)
                    await client.script_load(_clients.source_of(step, False))
        try:  # (what evalsha sends, without its wrappers)
            return await client.execute_command("EVALSHA", *_clients.evalsha_args(step))
        except _library(type(client)).no_script:
            await client.script_load(_clients.source_of(step, False))
            return await cast(Awaitable[Any], client.evalsha(*_clients.evalsha_args(step, False)))
    deadline = time.monotonic() + _clients.SPLIT_PATIENCE
    backoff = ExponentialWithJitterBackoff(base=0.02, cap=0.5)
    for failures in itertools.count(1):
        try:
            return await _send_once(client, step, _state(client).sharded)
        except Exception as exc:
            if _clients.master_unreached(client, exc):
                mark_masterless(exc)  # (a waiting acquire tries again: see _plans.waiting)
            pause = backoff.compute(failures)
            if not _clients.split_slot(exc) or time.monotonic() + pause > deadline:
                raise
            await asyncio.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover


class _Fallback(Exception):
    """A call the quick path leaves to the ordinary one (see :func:`_quick`)."""


async def _quick(
    client: Client, kept: _Kept, retries: bool, step: Eval, pin: _Pin | None = None
) -> Any:
    """``EVALSHA`` of ``step`` written and read on a connection of the quick
    path (see :func:`_clients.quick_connections`): checked out of the client's
    pool the first time, then ``kept`` for the pool (in this event loop),
    idle between calls. When all it may keep are busy, the call waits
    for one, first come first served (so tenure's calls never use more of the
    pool than that). The twin of the sync driver's.

    Raises:
        _Fallback: the server does not have the script (NOSCRIPT), or a
            connection could not be made or failed (it is closed, to connect
            again at its next use; see :func:`_clients.connection_fault`) and
            the client's retry policy ``retries``: the ordinary path sends it
            (again: tenure's scripts are safe to run twice, as a retry after a
            lost reply already runs them).
        The reply's error (a ``ResponseError``), as the ordinary path raises
        it; a connection error when the client does not retry.
        Any other exception (``asyncio.CancelledError``, an interrupt of any
        class) closes the connection (a reply may still be due on it) and
        goes on as it is.

    With a ``pin`` (see :func:`one_connection`), it is sent on the pinned
    connection, and the connection stays pinned after a whole reply.
    """
    if pin is not None and pin.conn is not None:
        conn = _unpin(pin)
    else:
        conn = await _take(client, kept, retries)
    library = _library(type(client))
    try:
        await conn.send_packed_command(_clients.packed_evalsha(conn, step))
        raw = await conn.read_response()
    except library.response_error as exc:  # a whole reply was read: the connection is sound
        if pin is None and not kept.waiters:
            kept.idle.append(conn)  # (no call before it, where an interrupt could lose it)
        else:
            _keep(kept, conn, pin)
        if isinstance(exc, library.no_script):
            raise _Fallback from exc
        raise
    except Exception as exc:
        await _close(kept, conn)
        if retries and _clients.connection_fault(exc):
            raise _Fallback from exc
        raise  # (an interrupt of any class: never swallowed by a second send)
    except BaseException:
        await _close(kept, conn)
        raise
    if pin is None and not kept.waiters:
        kept.idle.append(conn)  # (no call before it, where an interrupt could lose it)
    else:
        _keep(kept, conn, pin)
    return raw


async def _take(client: Client, kept: _Kept, retries: bool) -> Any:
    """An idle connection of the quick path; a new one from the pool while
    fewer than it may keep are open; else the next one given back within
    :data:`QUICK_PATIENCE` (:class:`_Fallback` after it)."""
    if kept.idle:
        return kept.idle.pop()
    if kept.open >= kept.most:
        waiter = kept.loop.create_future()
        kept.waiters.append(waiter)
        try:
            await asyncio.wait((waiter,), timeout=QUICK_PATIENCE)
            if not waiter.done():
                raise _Fallback
            conn = waiter.result()
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                _pass_on(kept, waiter.result())  # given to it as it gave up
            else:
                waiter.cancel()
                if waiter in kept.waiters:
                    kept.waiters.remove(waiter)
            raise
        if conn is not None:
            return conn
        # (None: one was let go, this call may open another)
    kept.open += 1
    try:
        pool: Any = client.connection_pool  # type: ignore[union-attr]
        return await _clients.checkout(pool, _clients.library_of(type(client)))
    except BaseException as exc:
        _let_go(kept)
        if retries and _clients.connection_fault(exc):
            raise _Fallback from exc
        raise


#: The longest a script call waits for a connection of the quick path when
#: all it may keep are busy (a stalled server, say), in seconds: it then
#: takes the ordinary path, through the client.
QUICK_PATIENCE = 1.0


def _give(kept: _Kept, conn: Any) -> None:
    """Give a connection of the quick path back: to the first waiting call, if any."""
    while kept.waiters:
        waiter = kept.waiters.popleft()
        if not waiter.done():
            waiter.set_result(conn)
            return
    kept.idle.append(conn)


@dataclass(eq=False)
class _Pin:
    """The connection of the quick path (``kept``'s) that one task's block of
    calls (see :func:`one_connection`) keeps checked out between its calls:
    the one that answered the block's last call, if any."""

    kept: _Kept
    task: asyncio.Task[Any] | None
    conn: Any = None


#: The pin of the running block of :func:`one_connection`, if any (a task
#: started inside the block sees it too, and does not use it: see :func:`_pin_for`).
_pins: contextvars.ContextVar[_Pin | None] = contextvars.ContextVar("tenure_pin", default=None)

#: The steps that wait (for a wake, a contention, a subscription): a block of
#: :func:`one_connection` keeps no connection through them.
_WAITS = (WaitWake, Contend, Subscribe)


@contextlib.asynccontextmanager
async def one_connection(client: Client, wanted: bool = True) -> AsyncIterator[None]:
    """Send this task's script calls on ``client`` inside the block, and its
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
    ``wanted``. The twin of the sync driver's.
    """
    kept = None if not wanted or _clients.is_cluster(type(client)) else _state(client).kept
    if kept is None:
        yield
        return
    pin = _Pin(kept, asyncio.current_task())
    token = _pins.set(pin)
    try:
        yield
    finally:
        _pins.reset(token)
        if pin.conn is not None:
            _give(kept, _unpin(pin))


def _pin_for(client: Client) -> _Pin | None:
    """The pin of this task's block of :func:`one_connection` on ``client``'s
    pool, if one runs."""
    pin = _pins.get()
    if pin is None or pin.task is not asyncio.current_task():
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
    """Give back the connection pinned by this task's block of
    :func:`one_connection`, if any (the block waits: it keeps none meanwhile)."""
    pin = _pins.get()
    if pin is not None and pin.conn is not None and pin.task is asyncio.current_task():
        _give(pin.kept, _unpin(pin))


def _args(part: Eval | Command) -> tuple[Any, ...]:
    """The command of a pipeline's step: ``EVALSHA`` of a script call, or the command."""
    if isinstance(part, Eval):
        return ("EVALSHA", *_clients.evalsha_args(part))
    return part.args


async def _on_pin(client: Client, pin: _Pin, commands: list[tuple[Any, ...]]) -> list[Any]:
    """``commands`` written at once on the pinned connection (if none is, on one
    the quick path takes, then pinned), their raw replies read in order (an
    error reply in its place). Raises :class:`_Fallback` as :func:`_quick` does."""
    kept, retries = pin.kept, _state(client).retries
    conn = _unpin(pin) if pin.conn is not None else await _take(client, kept, retries)
    library = _library(type(client))
    raws: list[Any] = []
    try:
        await conn.send_packed_command(conn.pack_commands(commands))
        for _ in commands:
            try:
                raws.append(await conn.read_response())
            except library.response_error as exc:  # a whole reply was read
                raws.append(exc)
    except Exception as exc:
        await _close(kept, conn)
        if retries:
            raise _Fallback from exc
        raise
    except BaseException:
        await _close(kept, conn)
        raise
    _keep(kept, conn, pin)
    return raws


async def _load_on_pin(client: Client, pin: _Pin, source: bytes) -> None:
    """``SCRIPT LOAD`` of ``source`` on the pinned connection's server (its
    error reply raised)."""
    (raw,) = await _on_pin(client, pin, [("SCRIPT", "LOAD", source)])
    if isinstance(raw, Exception):
        raise raw


def _pass_on(kept: _Kept, conn: Any | None) -> None:
    """What a cancelled waiter was given: a connection (given back), or the
    leave to open one (passed to the next waiter)."""
    if conn is not None:
        _give(kept, conn)
    else:
        kept.open += 1
        _let_go(kept)


def _let_go(kept: _Kept) -> None:
    """One connection of the quick path fewer: the first waiting call may open one."""
    kept.open -= 1
    while kept.waiters:
        waiter = kept.waiters.popleft()
        if not waiter.done():
            waiter.set_result(None)
            return


async def _close(kept: _Kept, conn: Any) -> None:
    """Close a connection of :func:`_quick` whose call failed or was
    cancelled, and keep it (it connects again at its next use); if the close
    itself is cancelled, the connection is let go instead (it may still have
    a reply due)."""
    try:
        await conn.disconnect(nowait=True)
    finally:
        if getattr(conn, "is_connected", True):
            _let_go(kept)
        else:
            _give(kept, conn)


async def _send_once(client: Client, step: Eval, shard: bool) -> Any:
    """EVALSHA of ``step`` on a cluster client; on NOSCRIPT, load the script on
    the node owning its keys only (the client's ``SCRIPT LOAD`` goes to every
    master, and fails on a dead one) and send it once more."""
    try:
        return await cast(Awaitable[Any], client.evalsha(*_clients.evalsha_args(step, shard)))
    except _library(type(client)).no_script:
        source = _clients.source_of(step, shard)
        if step.keys:
            cluster: Any = client
            node = cluster.get_node_from_key(step.keys[0])
            await cluster.execute_command("SCRIPT LOAD", source, target_nodes=node)
        else:  # sent to any node: loaded on every one
            await client.script_load(source)
        return await cast(Awaitable[Any], client.evalsha(*_clients.evalsha_args(step, shard)))


async def _evalsha(client: Client, step: Eval) -> Any:
    try:
        return await _send(client, step)
    except Exception as exc:
        denied = await _refusal(client, step, exc)
        if denied is not None:
            raise denied from exc
        raise


async def _refusal(client: Client, step: Eval, exc: BaseException) -> PermissionDenied | None:
    """The error naming what the user lacks when the server refused ``step``
    with ``NOPERM`` (``None`` for any other error): the first key it may not
    use, found by :data:`ACL_KEYS` (sent with no KEYS, so it needs no
    permission but EVALSHA's), else the command the refusal names."""
    if not is_noperm(exc):
        return None
    try:
        raw = await _send(client, Eval(ACL_KEYS, (), tuple(str(k) for k in step.keys)))
    except Exception:
        raw = None
    denied = None if raw is None else key_refusal(step.script, raw)
    return denied or command_refusal(exc, step.script.name)


def new_event() -> asyncio.Event:
    """An event for the facade (a lease's ``lost``, a Redlock waiter's wake)."""
    return asyncio.Event()


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass (``None``: no limit);
    clear it and return whether it was set."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
        woken = True
    except TimeoutError:
        woken = False
    event.clear()
    return woken


async def sleep(seconds: float) -> None:
    """Sleep ``seconds``."""
    await asyncio.sleep(seconds)


# -- names for the fan-out (:mod:`._fanout_async`): public aliases, nothing else --
Fan = _Fan
SendRenewals: TypeAlias = _SendRenewals
Watchdog = _Watchdog
REDIS = _REDIS
library_of = _library
perform = _perform
state_of = _state
