# GENERATED from _async/hubbase.py by scripts/unasync.py: do not edit.
"""The wake hub's part that both flavours share: a channel's record, and the
hub's calls that only read and write its book (under the hub's mutex, a bare
lock in the synchronous flavour, nothing in asyncio), route a message, and
give a Redis Cluster node's dropped channels to their slots' new owners;
and :func:`wait_event`, the wait on an event (a channel's listener, the
facade's) that clears it.

Part of the driver's single source: ``_sync/hubbase.py`` is generated from
this file by ``scripts/unasync.py``; the reading and subscribing are
:mod:`.hub`'s.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Callable
from typing import Any

from redis.backoff import ExponentialWithJitterBackoff

from ..._keys import LockKeys
from ..._protocol import HandedOff, Recheck, text
from .. import _clients, _identity
from .._hubbook import Channel, Dropped, HubBook, PassOn, Settable, wake_all_of
from .._runtime_sync import Event, new_event, new_gate, new_mutex, new_wake, wait_set
from . import late


def wait_event(event: Event, timeout: float | None) -> bool:
    """Wait until ``event`` (the runtime's ``new_event``) is set or ``timeout``
    seconds pass (``None``: no limit); clear it and return whether it was set."""
    woken = wait_set(event, timeout)
    event.clear()
    return woken


class _Channel(Channel):
    """A wake channel's record (see :class:`.._hubbook.Channel`) with this
    flavour's events."""

    def __init__(self, keys: LockKeys | None) -> None:
        super().__init__(keys)
        #: set when the server confirmed the subscription (see the runtime's events)
        self.ready: Event = new_event()
        #: the wake-up of the one plan that waits on it (see the runtime's ``new_wake``)
        self.wake: Any = new_wake()
        #: the process's contender (see _Contention.owned_before and the
        #: runtime's ``new_gate``)
        self.gate: Any = new_gate()
        #: the hub whose book holds the channel (on a Redis Cluster it moves to the
        #: hub of the slot's new owner: see _Hub.adopt)
        self.home: Any = None


class _HubBase:
    """What :class:`.hub._Hub` builds on: the book and the calls that only use it."""

    def __init__(
        self,
        pool: Any,
        library: Any,
        *,
        waiter: str | None = None,
        cluster: Callable[[], Any] | None = None,
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
        #: guards the book, ``_orphans`` and ``_pubsub`` (see the runtime's ``new_mutex``)
        self._mutex = new_mutex()
        self._book = HubBook(_Channel)
        self._pubsub: Any = None
        self._backoff = ExponentialWithJitterBackoff(base=0.05, cap=2.0)
        # a cluster node's channels that its server dropped (slot moved, node
        # gone), waiting to be adopted by the hub of their slot's owner
        self._orphans: dict[str, _Channel] = {}
        self._orphan_failures = 0
        self._rehome_at = 0.0
        #: the listeners of broadcast channels (see :meth:`.hub._Hub.wait`)
        self._listening = 0

    def adopt(self, channel: str, ch: _Channel) -> None:
        raise NotImplementedError

    def leave(self, ch: _Channel, token: str, granted: bool = False) -> None:
        with self._mutex:
            self._book.leave(ch, token, time.monotonic(), granted)

    def woken(self, ch: _Channel, token: str, woken: bool) -> bool | HandedOff | Recheck:
        """The reply to a wait of the plan waiting with ``token`` on ``ch``."""
        with self._mutex:
            return self._book.woken(ch, token, woken)

    def unlisten(self, ch: _Channel, event: Event) -> None:
        with self._mutex:
            self._book.unlisten(ch, event, time.monotonic())
            self._listening -= 1

    def own_waiter(self) -> str:
        """A waiter id new for one plan that waits on a channel of its own."""
        return f"{self.waiter}.{next(self._numbers)}"

    def listening(self, wake_prefix: str) -> bool:
        """Whether this hub listens (or lingers) on the lock with this wake prefix."""
        return (wake_prefix + self.waiter) in self._book.channels

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
            client.nodes_manager.initialize()
        for name, ch in orphans.items():
            adopted = ch.refs == 0
            if not adopted:
                with contextlib.suppress(Exception):
                    hub = late.hub(client, name)
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

    def _refuse(self, pubsub: Any) -> None:
        """The server refused a SUBSCRIBE (the ACL): fail that channel's plans now."""
        with self._mutex:
            name, ch = self._book.refused()
            if name:
                with contextlib.suppress(Exception):
                    self._unsubscribe(pubsub, name)
        if ch is not None:
            wake_all_of(ch)

    def _unsubscribe(self, pubsub: Any, name: str) -> None:
        if self._sharded:
            pubsub.sunsubscribe(name)
        else:
            pubsub.unsubscribe(name)

    def _dispatch(self, message: dict[str, Any], pubsub: Any) -> None:
        self._act(self._route(message), message["channel"], pubsub)

    def _route(self, message: dict[str, Any]) -> Settable | PassOn | Dropped[_Channel] | None:
        """What ``message`` asks for (see :meth:`._hubbook.HubBook.route`)."""
        channel, data = text(message["channel"]), text(message["data"])
        kind = _clients.SHARDED_TYPES.get(message["type"], message["type"])
        with self._mutex:
            return self._book.route(kind, channel, data, time.monotonic())

    def _act(self, route: Any, channel: Any, pubsub: Any) -> None:
        """Do what :meth:`_route` found for a message on ``channel`` (its name as
        the library gave it)."""
        if isinstance(route, Dropped):
            # redis-py forgets only the channels it was asked to unsubscribe
            _clients.forget_shard_channel(pubsub, channel)
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
                    late.drive(client, route.plan())
        elif route is not None:
            route.set()
