"""The wake hub: one pub/sub connection per client and process (per node
waited on, on a Redis Cluster) that wakes the waiting plans, and the client
library's classes it uses.

Written by hand for the synchronous flavour (a daemon reader thread, a mutex
around the book, SUBSCRIBEs sent by the waiting thread);
``_async/hub.py`` is the asyncio one (a reader task). The bookkeeping of both
is :class:`.._hubbook.HubBook`'s.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from ..._keys import LockKeys
from .. import _clients
from .._hubbook import is_noperm
from .._runtime_sync import READ_POLL, SafeEvent, _exiting, _start
from .hubbase import _Channel, _HubBase, _text, _wake_all_of

if TYPE_CHECKING:
    pass


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


class _ShardedPubSub:
    """Nothing to add: valkey-py's synchronous PubSub has sharded pub/sub
    (its asyncio one lacks it: see the asyncio flavour's twin)."""


class _Hub(_HubBase):
    """One pub/sub connection per client and process; wakes waiting threads.

    The bookkeeping is :class:`._hubbook.HubBook`'s; this class does the I/O:
    SUBSCRIBE / UNSUBSCRIBE, and a daemon reader thread that routes messages.
    After a reconnection (see the book's module docstring) the reader tells the
    book before it routes the next message, so the confirmations of the new
    SUBSCRIBEs wake every waiter.
    """

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

    def _subscribe(self, channel: str, new: bool) -> None:
        if new:
            try:
                self._send_subscribe(channel)
            except BaseException:
                self._book.abort(channel)
                raise

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

    def _listen(self) -> _HubPubSub:
        pubsub: _HubPubSub | None = self._pubsub
        if pubsub is None:
            pubsub = self._library.pubsub(connection_pool=self._pool)
            pubsub.reconnected = SafeEvent()
            self._pubsub = pubsub
            _start(self._read, "tenure-wake-hub")
        return pubsub

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
