"""The wake hub: one pub/sub connection per client, process and event loop
(per node waited on, on a Redis Cluster) that wakes the waiting plans, and the
client library's classes it uses.

Written by hand for the asyncio flavour (a reader task; SUBSCRIBEs sent by
tasks of their own); ``_sync/hub.py`` is the synchronous one (a reader
thread, a mutex around the book). The bookkeeping of both is
:class:`.._hubbook.HubBook`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, cast

from ..._keys import LockKeys
from .. import _clients, _internals
from .._hubbook import LINGER, is_noperm
from .hubbase import _Channel, _HubBase, _text, _wake_all_of

if TYPE_CHECKING:
    pass


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


class _Hub(_HubBase):
    """One pub/sub connection per client, process and event loop; wakes waiting tasks.

    The bookkeeping is :class:`._hubbook.HubBook`'s; this class does the I/O:
    SUBSCRIBE / UNSUBSCRIBE, and a reader task that routes messages. After a
    reconnection (see the book's module docstring) the confirmations of the new
    SUBSCRIBEs wake every waiter.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # (_HubBase's arguments)
        super().__init__(*args, **kwargs)
        self._reader: asyncio.Task[None] | None = None
        # one SUBSCRIBE at a time: the library's asyncio PubSub takes its
        # connection from the pool on first use without a lock, so concurrent
        # first SUBSCRIBEs would each take one, and every channel subscribed on
        # a connection other than the last would be read by nobody (its wakes
        # lost while PUBLISH still counts a subscriber) and hold a pool slot
        self._sending = asyncio.Lock()
        # the SUBSCRIBEs on their way (see _subscribe), referenced until done
        self._opening: set[asyncio.Future[None]] = set()

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

    def reconnected(self) -> None:
        """The connection is being made again: see :meth:`._hubbook.HubBook.reconnected`."""
        self._book.reconnected()

    def strays(self, resubscribed: Iterable[str]) -> list[str]:
        """The channels to unsubscribe again: see :meth:`._hubbook.HubBook.strays`."""
        return self._book.strays(resubscribed)

    def _listen(self) -> _HubPubSub:
        pubsub: _HubPubSub | None = self._pubsub
        if pubsub is None:
            pubsub = self._library.pubsub(connection_pool=self._pool)
            pubsub.hub = self
            self._pubsub = pubsub
        return pubsub

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
            if is_noperm(exc):  # a SUBSCRIBE refused by the ACL
                await self._refuse(pubsub)
                return None
            if self._cluster is None and not self._book.drop_idle():
                self._book.wake_all()
                await asyncio.sleep(self._backoff.compute(failures + 1))
            return False
