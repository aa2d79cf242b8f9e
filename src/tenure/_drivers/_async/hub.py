"""The wake hub: one pub/sub connection per connection pool and process (and event
loop, in asyncio; per node waited on, on a Redis Cluster) that wakes the
waiting plans, and the client library's classes it uses.

Part of the driver's single source: ``_sync/hub.py`` is generated from this
file by ``scripts/unasync.py``. What differs, the runtime gives: the reader
(a daemon thread, or a task: ``spawn``), the SUBSCRIBE sent in the waiting
thread or in a task of its own that the waiter's cancellation does not stop
(``finish``), the mutex around the book (a bare lock, or nothing), and
whether a waiting thread reads its own wake in the reader's place
(``READS_ITS_WAKE``: see :meth:`_Hub.wait_wake`). The bookkeeping of both is
:class:`.._hubbook.HubBook`'s.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Protocol, cast

from ... import _telemetry
from ..._keys import LockKeys
from ..._protocol import text
from .. import _clients, _internals
from .._hubbook import Dropped, PassOn, is_noperm, wake_all_of
from .._runtime_async import (
    READ_POLL,
    READS_ITS_WAKE,
    Event,
    cancel_requests,
    close_pubsub,
    exiting,
    finish,
    new_event,
    new_lock,
    new_wake,
    numbers_as_text,
    runner,
    sleep,
    spawn,
    wait_wake,
)
from .hubbase import _Channel, _HubBase

#: a reply a leader leaves to the reader (see _Hub._pushed)
_PUSHED = object()


class _HubPubSub(Protocol):
    """What the hub uses of a library's PubSub (with :class:`_Reconnects` mixed in)."""

    reconnected: Event
    resubscribing: set[Any]
    channels: dict[Any, Any]
    connection: Any

    async def subscribe(self, *args: Any, **kwargs: Any) -> Any: ...
    def unsubscribe(self, *args: Any) -> Any: ...
    async def handle_message(self, response: Any, ignore_subscribe_messages: bool = ...) -> Any: ...
    async def get_message(
        self, ignore_subscribe_messages: bool = ..., timeout: float = ...
    ) -> Any: ...


class _Reconnects:
    """Mixed into a library's PubSub class: tells its hub when the connection
    is made again."""

    # Set when the library makes the connection again, before it sends the
    # SUBSCRIBEs again; the reader handles it before it routes the next message.
    reconnected: Event
    # The channels the library subscribes again then (see _Hub._resubscribed).
    resubscribing: set[Any]

    async def on_connect(self, connection: Any) -> None:
        # The library registers this callback after the pool's first connect, so
        # it runs on reconnections only, in whichever runner found the connection
        # broken: the reader (inside get_message or an UNSUBSCRIBE) or a waiter
        # (inside a SUBSCRIBE, holding the hub's ``_sending``). It only raises a
        # flag, before the SUBSCRIBEs go out, so the reader sees it before it
        # reads any confirmation; it handles it holding ``_sending``, so after
        # they went.
        self.reconnected.set()
        self.resubscribing = set(cast(Any, self).channels)
        await super().on_connect(connection)  # type: ignore[misc]  # SUBSCRIBE again


class _Hub(_HubBase):
    """One pub/sub connection per connection pool and process (and event loop); wakes
    waiting threads or tasks.

    The bookkeeping is :class:`._hubbook.HubBook`'s; this class does the I/O:
    SUBSCRIBE / UNSUBSCRIBE, and a reader (a daemon thread, or a task) that
    routes messages. After a reconnection (see the book's module docstring)
    the reader tells the book before it routes the next message, so the
    confirmations of the new SUBSCRIBEs wake every waiter.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # (_HubBase's arguments)
        super().__init__(*args, **kwargs)
        self._reader: Any = None
        # one SUBSCRIBE at a time: the library's asyncio PubSub takes its
        # connection from the pool on first use without a lock, so concurrent
        # first SUBSCRIBEs would each take one, and every channel subscribed on
        # a connection other than the last would be read by nobody (its wakes
        # lost while PUBLISH still counts a subscriber) and hold a pool slot.
        # Taken under the mutex, never the other way round.
        self._sending = new_lock()
        # The connection's reading (see wait): by the reader, or in its place
        # by a thread that waits on a channel (the leader) while the reader
        # rests; one at a time (held while reading and routing; taken before
        # the mutex, never under it).
        self._reading = new_lock()
        self._leader: Any = None  # the runner reading in the reader's place
        self._led = 0  # bumped by the leader before each read
        self._stale = 0  # the reader's rests that saw the leader read nothing
        self._resting = False  # the reader rests: a waiter may lead
        self._wants = False  # a waiter waited plainly: the reader rests after
        self._plain: set[_Channel] = set()  # the channels waited on plainly
        self._resume = new_wake()  # ends the reader's rest
        # set while a leader reads or routes: left set by an interrupt, it
        # tells the next reader that the connection may hold half a reply
        # and that a wake may be lost (see _mend)
        self._torn = False
        # what a leader's message asked of the reader (a pass-on, a channel dropped)
        self._deferred: list[tuple[Any, Any]] = []

    async def enter(self, keys: LockKeys | None, channel: str, token: str) -> _Channel:
        with self._mutex:
            ch, subscribe = self._book.enter(channel, keys, token)
            ch.home = self
            try:
                await self._subscribe(channel, subscribe)
            except BaseException:
                self._book.leave(ch, token, time.monotonic())
                raise
        return ch

    async def listen(self, channel: str, event: Event) -> _Channel:
        with self._mutex:
            ch, subscribe = self._book.listen(channel, event)
            ch.home = self
            try:
                await self._subscribe(channel, subscribe)
            except BaseException:
                self._book.unlisten(ch, event, time.monotonic())
                raise
            self._listening += 1
        return ch

    async def adopt(self, channel: str, ch: _Channel) -> None:
        """Listen on ``channel`` with the record another node's hub dropped (a
        Redis Cluster slot now served by this hub's node, or a node gone):
        SSUBSCRIBE (SUBSCRIBE on Redis 6.2), whose confirmation wakes its
        plans. Raises the library's error if it can't be sent (the record is
        then not adopted)."""
        with self._mutex:
            if not self._book.adopt(channel, ch):
                wake_all_of(ch)
                return
            ch.home = self
            try:
                await self._send_subscribe(channel)
            except BaseException:
                self._book.forget(channel)
                raise
            self._start_reader()

    async def _send_subscribe(self, channel: str) -> None:
        """Subscribe the hub's connection to ``channel`` (``SSUBSCRIBE`` on a
        cluster with sharded pub/sub, else ``SUBSCRIBE``), one call at a time
        (see ``_sending``)."""
        async with self._sending:
            pubsub = self._listen()
            conn = pubsub.connection
            if (
                not self._sharded
                and self._reader is not None
                and conn is not None
                and not _internals.connected(conn)
            ):
                # The reader connects it again (see _take), and the library
                # then subscribes every channel it has: this one is added.
                # Connected here, its handshake would read the replies while
                # the reader reads or connects too, and either may take the
                # other's reply or close the other's socket.
                pubsub.channels.update(_internals.normalize_keys(pubsub, {channel: None}))
                self._resume.set()
                return
            if self._sharded:
                await cast(Any, pubsub).ssubscribe(channel)
            else:
                await pubsub.subscribe(channel)
            numbers_as_text(pubsub.connection)  # (its handshake, when a waiter reconnects it)

    async def _subscribe(self, channel: str, new: bool) -> None:
        """Subscribe to a ``new`` channel (else nothing to do), to the end
        (see the runtime's ``finish``): other plans of the process may enter
        the channel while it is on its way, and count on its confirmation, so
        a cancellation of the plan that entered first (which the caller then
        counts out) does not stop it."""
        if new:
            await finish(self._open, channel)

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
                wake_all_of(ch)
            raise
        self._start_reader()
        self._resume.set()  # (a resting reader reads the confirmation)

    async def wait_wake(self, ch: _Channel, timeout: float | None) -> bool:
        """Wait until ``ch``'s wake-up is set or ``timeout`` seconds pass
        (``None``: no limit); whether it was set (consumed).

        In the synchronous flavour (the runtime's ``READS_ITS_WAKE``) the
        waiting thread, if the reader rests and no other thread reads in its
        place, reads the connection itself (it leads): its own wake then costs
        no thread hop. It routes the messages for others as the reader would,
        but leaves a pass-on or a dropped channel to the reader. Else it waits
        plainly, and the reader, once every plain waiter's wake is set and
        nobody else needs it, rests so that the next wait leads. The reader
        rests until woken or :data:`READ_POLL` passes, and takes the reading
        back from a leader that read nothing in two rests (one an interrupt
        cut short)."""
        me = runner()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._mutex:
            lead = (
                READS_ITS_WAKE
                and self._resting
                and self._cluster is None
                and self._pubsub is not None
                and (self._leader is None or self._leader == me)
            )
            if lead:
                self._leader = me
        try:
            if lead:
                woken = await self._lead(ch, deadline, me)
                if woken is not None:
                    return woken
            with self._mutex:
                if self._leader == me:
                    self._leader = None
                self._plain.add(ch)
                self._wants = READS_ITS_WAKE
                if self._resting:
                    self._resume.set()  # (the reader reads for it)
            left = None if deadline is None else deadline - time.monotonic()
            return await wait_wake(ch.wake, left)
        finally:
            with self._mutex:
                self._plain.discard(ch)
                if self._leader == me:
                    self._leader = None
                    if self._resting and not self._idle():
                        self._resume.set()  # (the reader reads for the others)

    def _idle(self) -> bool:
        """Whether nobody needs the reader: no plain waiter's wake left to set,
        no listener, no SUBSCRIBE to confirm, nothing deferred. Called
        holding the mutex."""
        return (
            not self._listening
            and not self._book.pending
            and not self._deferred
            and all(ch.wake.is_set() for ch in self._plain)
        )

    async def _lead(self, ch: _Channel, deadline: float | None, me: Any) -> bool | None:
        """Read and route messages until ``ch``'s wake-up is set (``True``)
        or ``deadline`` passes (``False``); ``None`` when the reading goes back
        to the reader (the connection closed, was made again or may hold half
        a reply; a library whose parser it cannot read with). It reads the
        replies off the connection's parser (see :func:`.._internals.pushed_reply`):
        it routes a published message, and leaves any other reply to the
        reader (a confirmation, an error), and what a message asks of the
        reader (a pass-on, a dropped channel)."""
        pubsub = self._pubsub
        async with self._reading:
            while True:
                if await wait_wake(ch.wake, 0):
                    return True
                left = READ_POLL if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return False
                with self._mutex:
                    if self._leader != me or self._pubsub is not pubsub:
                        return None
                    self._led += 1
                parser = _internals.pushed_parser(pubsub.connection)
                if parser is None or self._torn or pubsub.reconnected.is_set():
                    self._resume.set()
                    return None
                try:
                    self._torn = True  # (until the reply read is routed)
                    reply = _internals.pushed_reply(parser)
                    if reply is None:
                        self._torn = False  # (the wait consumes nothing)
                        if not _internals.pushed_due(parser, min(left, READ_POLL)):
                            continue
                        self._torn = True
                        reply = _internals.pushed_feed(parser) and _internals.pushed_reply(parser)
                except self._library.error:  # (a reply it cannot parse)
                    reply = False
                except OSError as exc:  # (the socket's, with an errno: an interrupt goes on)
                    if exc.errno is None:
                        raise
                    reply = False
                if reply is False:
                    self._resume.set()  # (_torn stays set: the reader mends)
                    return None
                if reply is not None:
                    self._pushed(reply)
                self._torn = False

    def _pushed(self, reply: Any) -> None:
        """Route a published message a leader read; leave any other reply,
        and what a message asks of the reader, to the reader."""
        kind = text(reply[0]) if isinstance(reply, list) and len(reply) == 3 else ""
        route: Any = (
            self._route({"type": kind, "channel": reply[1], "data": reply[2]})
            if kind in ("message", "smessage")
            else _PUSHED
        )
        if route is _PUSHED or isinstance(route, (PassOn, Dropped)):
            with self._mutex:
                self._deferred.append((route, reply))
            self._resume.set()
        elif route is not None:
            route.set()

    async def _mend(self, pubsub: _HubPubSub) -> None:
        """A leader's read or routing was cut (``_torn``): close the connection,
        which may hold half a reply (the next read connects again, and the
        confirmations wake every waiter), and wake every waiter now (a wake
        may be lost). Called holding ``_reading``."""
        await pubsub.connection.disconnect()
        self._torn = False
        with self._mutex:
            self._book.wake_all()

    async def _rest(self, pubsub: _HubPubSub) -> bool:
        """Whether the reader rests (see :meth:`wait_wake`): while a leader reads,
        or after a plain waiter's wake if nobody else needs it. It rests
        until woken or :data:`READ_POLL` passes, then unsubscribes the
        channels whose linger ended if a leader still reads."""
        with self._mutex:
            if self._leader is None and not (self._wants and self._idle()):
                return False
            self._wants = False
            self._resting = True
            led = self._led
        try:
            await wait_wake(self._resume, READ_POLL)
        finally:
            with self._mutex:
                self._resting = False
                if self._leader is None or self._led != led:
                    self._stale = 0
                elif self._stale:
                    self._leader = None  # (it read nothing in two rests: cut short)
                    self._stale = 0
                else:
                    self._stale = 1
        with self._mutex:
            if self._leader is not None:
                for name in self._book.stale(time.monotonic()):
                    await self._unsubscribe(pubsub, name)
        return True

    async def _run_deferred(self, pubsub: _HubPubSub) -> None:
        """Do what leaders left to the reader (see :meth:`_pushed`), in order."""
        with self._mutex:
            deferred, self._deferred = self._deferred, []
        for route, reply in deferred:
            if route is not _PUSHED:
                await self._act(route, reply[1], pubsub)
            elif not isinstance(reply, Exception):
                message = await pubsub.handle_message(reply)
                if isinstance(message, dict):
                    await self._dispatch(message, pubsub)
            elif is_noperm(reply):  # a SUBSCRIBE refused by the ACL
                await self._refuse(pubsub)
            else:
                self._book.wake_all()

    def _start_reader(self) -> None:
        if self._reader is None:
            self._reader = spawn(self._read, "tenure-wake-hub")

    def _stop(self, pubsub: _HubPubSub) -> None:
        """The reader of ``pubsub`` ends: the next wait starts a new one (on a
        new connection). Called holding the mutex."""
        if self._pubsub is pubsub:
            self._pubsub = None
            self._reader = None

    async def _resubscribed(self, pubsub: _HubPubSub) -> None:
        """The connection was made again: let the confirmations of the channels
        subscribed again wake every waiter, and unsubscribe again the channels
        the library subscribed again that the book no longer listens on. Called
        by the reader, holding the mutex."""
        async with self._sending:  # (after the SUBSCRIBEs of a waiter's reconnection)
            pubsub.reconnected.clear()
            self._book.reconnected()
            # The library makes the connection again inside the reader's read,
            # handshake and all, without _sending: a waiter that found it
            # connected then may have sent its SUBSCRIBE during the handshake,
            # which read (and dropped) the confirmation, and added its channel
            # to the table after the library took the channels it subscribes
            # again. Each such channel is subscribed again here.
            missed = [name for name in pubsub.channels if name not in pubsub.resubscribing]
            if missed and not self._sharded:
                await pubsub.subscribe(*missed)
            subscribed = [*pubsub.channels, *getattr(pubsub, "shard_channels", ())]
            _telemetry.HUB.warning(
                "pub/sub connection to %s made again: %d channel(s) subscribed again, "
                "every waiter woken to try again",
                _telemetry.address(self._pool),
                len(subscribed),
            )
            for name in self._book.strays([text(name) for name in subscribed]):
                await self._unsubscribe(pubsub, name)

    def _listen(self) -> _HubPubSub:
        pubsub: _HubPubSub | None = self._pubsub
        if pubsub is None:
            pubsub = self._library.pubsub(connection_pool=self._pool)
            pubsub.reconnected = new_event()
            pubsub.resubscribing = set()
            self._pubsub = pubsub
        return pubsub

    async def _read(self) -> None:
        pubsub = self._pubsub
        assert pubsub is not None
        failures = 0
        try:
            while self._pubsub is pubsub and not exiting():
                if self._orphans:
                    await self._rehome()
                if self._deferred:
                    await self._run_deferred(pubsub)
                if await self._rest(pubsub):
                    continue
                async with self._reading:
                    if self._torn:
                        await self._mend(pubsub)
                    message = await self._next(pubsub, failures)
                    if isinstance(message, dict):
                        await self._dispatch(message, pubsub)
                failures = 0 if message is not False else failures + 1
                # redis-py can swallow a cancellation while it reconnects; a
                # pending one (the loop shutting down) still ends the reader.
                if cancel_requests():
                    break
                if message is False and self._cluster is not None:
                    # a cluster node gone (failover) or no longer serving a
                    # channel (MOVED): its channels go to their slots' owners
                    with self._mutex:
                        orphans = self._book.drop_all()
                        self._stop(pubsub)  # an adoption here starts a new reader
                    self._orphan(orphans)
                    await self._rehome_all()
        finally:
            with self._mutex:
                self._stop(pubsub)
            with contextlib.suppress(Exception):
                await close_pubsub(pubsub)

    async def _next(self, pubsub: _HubPubSub, failures: int) -> dict[str, Any] | bool | None:
        """The next message (``None`` when idle), or ``False`` after an error.
        Stops the reader (see :meth:`_stop`) when nobody waits any more."""
        try:
            message = await self._take(pubsub, READ_POLL)
            with self._mutex:
                if message is None and self._book.empty() and not self._orphans:
                    self._stop(pubsub)
            return message
        except Exception as exc:
            if is_noperm(exc):  # a SUBSCRIBE refused by the ACL
                await self._refuse(pubsub)
                return None
            idle = False
            if self._cluster is None:
                with self._mutex:
                    idle = self._book.drop_idle()
                    if idle:
                        self._stop(pubsub)  # nobody waits: don't reconnect
            # the first failure of a run that reconnects at WARNING; its retries,
            # and a connection nobody waits on (its client closed, say), at DEBUG
            _telemetry.HUB.log(
                _telemetry.DEBUG if failures or idle else _telemetry.WARNING,
                "pub/sub connection to %s failed (%s: %s); %s",
                _telemetry.address(self._pool),
                type(exc).__name__,
                exc,
                "nobody waits: closed" if idle else "reconnecting",
            )
            if self._cluster is None and not idle:
                self._book.wake_all()
                await sleep(self._backoff.compute(failures + 1))
            return False

    async def _take(self, pubsub: _HubPubSub, timeout: float) -> dict[str, Any] | None:
        """The next message within ``timeout`` seconds (``None``: none), the
        book kept: a reconnection handled before the message is routed, the
        channels whose linger ended unsubscribed. A connection that is down is
        connected again first, holding ``_sending``: no SUBSCRIBE goes out
        during its handshake, and no waiter connects it meanwhile (see
        :meth:`_send_subscribe`)."""
        conn = pubsub.connection
        if conn is not None and not _internals.connected(conn):
            async with self._sending:
                if not _internals.connected(conn):
                    await conn.connect()
        message: dict[str, Any] | None = await pubsub.get_message(timeout=timeout)
        with self._mutex:
            if pubsub.reconnected.is_set():
                await self._resubscribed(pubsub)
            for name in self._book.stale(time.monotonic()):
                await self._unsubscribe(pubsub, name)
            if _clients.left_master(self._pool, pubsub.connection):
                # a Sentinel failover that this connection did not notice:
                # the next read reconnects to the new master
                await pubsub.connection.disconnect()
        return message

    async def _rehome_all(self) -> None:
        """After this node's connection failed: rehome its orphans until none is left."""
        while self._orphans and not exiting():
            await self._rehome()
            if self._orphans:
                await sleep(max(0.0, min(READ_POLL, self._rehome_at - time.monotonic())))
