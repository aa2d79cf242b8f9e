"""The wake hub: one pub/sub connection per client and process (and event
loop, in asyncio; per node waited on, on a Redis Cluster) that wakes the
waiting plans, and the client library's classes it uses.

Part of the driver's single source: ``_sync/hub.py`` is generated from this
file by ``scripts/unasync.py``. What differs, the runtime gives: the reader
(a daemon thread, or a task: ``spawn``), the SUBSCRIBE sent in the waiting
thread or in a task of its own that the waiter's cancellation does not stop
(``finish``), the mutex around the book (a bare lock, or nothing). The
bookkeeping of both is :class:`.._hubbook.HubBook`'s.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Protocol, cast

from ..._keys import LockKeys
from .. import _clients
from .._hubbook import is_noperm
from .._runtime_async import (
    READ_POLL,
    Event,
    cancel_requests,
    close_pubsub,
    exiting,
    finish,
    new_event,
    new_lock,
    numbers_as_text,
    sleep,
    spawn,
)
from .hubbase import _Channel, _HubBase, _text, _wake_all_of


class _HubPubSub(Protocol):
    """What the hub uses of a library's PubSub (with :class:`_Reconnects` mixed in)."""

    reconnected: Event
    channels: dict[Any, Any]
    connection: Any

    async def subscribe(self, *args: Any, **kwargs: Any) -> Any: ...
    def unsubscribe(self, *args: Any) -> Any: ...
    async def get_message(
        self, ignore_subscribe_messages: bool = ..., timeout: float = ...
    ) -> Any: ...


class _Reconnects:
    """Mixed into a library's PubSub class: tells its hub when the connection
    is made again."""

    # Set when the library makes the connection again, before it sends the
    # SUBSCRIBEs again; the reader handles it before it routes the next message.
    reconnected: Event

    async def on_connect(self, connection: Any) -> None:
        # The library registers this callback after the pool's first connect, so
        # it runs on reconnections only, in whichever runner found the connection
        # broken: the reader (inside get_message or an UNSUBSCRIBE) or a waiter
        # (inside a SUBSCRIBE, holding the hub's ``_sending``). It only raises a
        # flag, before the SUBSCRIBEs go out, so the reader sees it before it
        # reads any confirmation; it handles it holding ``_sending``, so after
        # they went.
        self.reconnected.set()
        await super().on_connect(connection)  # type: ignore[misc]  # SUBSCRIBE again


class _Hub(_HubBase):
    """One pub/sub connection per client and process (and event loop); wakes
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
        return ch

    async def adopt(self, channel: str, ch: _Channel) -> None:
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
                _wake_all_of(ch)
            raise
        self._start_reader()

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
            subscribed = [*pubsub.channels, *getattr(pubsub, "shard_channels", ())]
            for name in self._book.strays([_text(name) for name in subscribed]):
                await self._unsubscribe(pubsub, name)

    def _listen(self) -> _HubPubSub:
        pubsub: _HubPubSub | None = self._pubsub
        if pubsub is None:
            pubsub = self._library.pubsub(connection_pool=self._pool)
            pubsub.reconnected = new_event()
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
                message = await self._next(pubsub, failures)
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
                elif isinstance(message, dict):
                    await self._dispatch(message, pubsub)
        finally:
            with self._mutex:
                self._stop(pubsub)
            with contextlib.suppress(Exception):
                await close_pubsub(pubsub)

    async def _next(self, pubsub: _HubPubSub, failures: int) -> dict[str, Any] | bool | None:
        """The next message (``None`` when idle), or ``False`` after an error.
        Stops the reader (see :meth:`_stop`) when nobody waits any more."""
        try:
            message: dict[str, Any] | None = await pubsub.get_message(timeout=READ_POLL)
            with self._mutex:
                if pubsub.reconnected.is_set():
                    await self._resubscribed(pubsub)
                for name in self._book.stale(time.monotonic()):
                    await self._unsubscribe(pubsub, name)
                if message is None and self._book.empty() and not self._orphans:
                    self._stop(pubsub)
                elif _clients.left_master(self._pool, pubsub.connection):
                    # a Sentinel failover that this connection did not notice:
                    # the next read reconnects to the new master
                    await pubsub.connection.disconnect()
            return message
        except Exception as exc:
            if is_noperm(exc):  # a SUBSCRIBE refused by the ACL
                await self._refuse(pubsub)
                return None
            if self._cluster is None:
                with self._mutex:
                    if self._book.drop_idle():
                        self._stop(pubsub)  # nobody waits: don't reconnect
                        return False
                self._book.wake_all()
                await sleep(self._backoff.compute(failures + 1))
            return False

    async def _rehome_all(self) -> None:
        """After this node's connection failed: rehome its orphans until none is left."""
        while self._orphans and not exiting():
            await self._rehome()
            if self._orphans:
                await sleep(max(0.0, min(READ_POLL, self._rehome_at - time.monotonic())))
