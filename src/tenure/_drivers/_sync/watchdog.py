# GENERATED from _async/watchdog.py by scripts/unasync.py: do not edit.
"""The watchdog: one background runner (a task, or a thread) per connection
pool and process (and event loop) that renews its clients' leases and fires
the lost signal.

Part of the driver's single source: ``_sync/watchdog.py`` is generated from
this file by ``scripts/unasync.py``. The decisions are
:class:`.._watchbook.WatchBook`'s; a Redis Cluster client's renewals are sent
by ``state._renew_each`` (its ``send``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from ... import _telemetry
from ..._protocol import Pipeline, Status
from .._runtime_sync import exiting, new_mutex, new_wake, spawn, wait_wake, wake_from_anywhere
from .._watchbook import CLAIM_GRACE, Watch, Watchable, WatchBook, lose, renewal_reply
from . import late

if TYPE_CHECKING:
    from .library import _Library

_log = _telemetry.WATCHDOG

#: What a watchdog that does not renew on one client's pipeline calls instead
#: (a Redlock's, see ``watch_shared``; a Redis Cluster client's): the leases
#: due, in order, to a list of one renewal reply each (``(Status, value)``, or
#: ``None`` to retry).
_SendRenewals: TypeAlias = Callable[[list[Any]], list[tuple[Status, Any] | None]]


class _Watchdog:
    """One runner per connection pool and process (and event loop) that renews
    its clients' leases and fires the lost signal (the decisions are
    :class:`.._watchbook.WatchBook`'s).

    Renewals run in a second runner, one batch at a time, so that a call that
    hangs (a paused server) never delays a deadline: a lease whose deadline
    passes is lost then, whatever its renewal is doing.

    The book is read and written under ``_mutex`` (a bare lock in the
    synchronous flavour, entered only by ``with``: :meth:`watch` runs in the
    caller's thread, maybe the main one). The runner sleeps on ``_wake``
    outside the mutex; a wake-up set while it does not wait yet is kept for
    its next wait, so none is lost. A lost lease's signal fires outside the
    mutex.
    """

    def __init__(self, pool: Any, library: _Library, send: _SendRenewals | None = None) -> None:
        self._pool = pool
        self._library = library
        self._send = send
        self._book = WatchBook()
        self._mutex = new_mutex()
        self._wake = new_wake()
        #: the runner of :meth:`_run` (None: none runs), and of the last batch's renewal
        self._runner: Any = None
        self._renewal: Any = None
        self._renewing = False
        self._sleep_until = 0.0
        #: how many clients' states use it (those of a pool's clients), and
        #: whether they are all gone: no lease can come to it any more, so it
        #: ends as soon as it watches none, without lingering
        self.users = 0
        self._orphaned = False

    def watch(self, lease: Watchable, renew: bool) -> Watch:
        self._orphaned = False  # (a client uses it: a count that missed one)
        with self._mutex:
            watch = self._book.add(lease, renew, time.monotonic(), CLAIM_GRACE)
            watch.dog = self
            if self._runner is None:
                # its renewal runners use the pool; it only schedules them
                self._runner = spawn(self._run, "tenure-watchdog", uses_pool=False)
            elif self._book.first_due(watch) < self._sleep_until:
                self._wake.set()
        return watch

    def left(self) -> None:
        """A client that used it is gone (its weak reference's callback: any
        thread, no lock held). The last one gone: end once nothing is
        watched, at once if nothing is."""
        self.users -= 1
        if self.users <= 0:
            self._orphaned = True
            wake_from_anywhere(self._wake)

    def stop_renewing(self, watch: Watch) -> None:
        with self._mutex:  # (no wait or notify here)
            self._book.stop_renewing(watch)

    def unwatch(self, watch: Watch) -> None:
        with self._mutex:  # no wake-up: the watchdog notices within MAX_SLEEP
            self._book.discard(watch, time.monotonic())

    def _run(self) -> None:
        try:
            while True:
                with self._mutex:
                    if exiting():
                        self._runner = None
                        return
                    now = time.monotonic()
                    lost = self._book.expired(now)
                    batch = [] if self._renewing else self._book.take_due(now)
                    if batch:
                        self._renewing = True
                    elif not lost:
                        if self._book.finished(now) or (self._orphaned and not self._book.watches):
                            self._runner = None  # (under the mutex: a new watch starts another)
                            return
                        sleep = self._book.sleep(now)
                        self._sleep_until = now + sleep
                if not batch and not lost:
                    wait_wake(self._wake, sleep)
                    continue
                for watch in lost:
                    lose(watch.lease, watch.why)
                if batch:
                    self._renewal = spawn(self._renew, "tenure-renewal", batch)
        except BaseException:
            self._runner = None  # (cancelled with its loop)
            raise

    def _renew(self, batch: list[Watch]) -> None:
        sent_at = time.monotonic()
        replies: list[tuple[Status, Any] | None] = [None] * len(batch)
        lost: list[tuple[Watch, str]] = []
        try:
            if self._send is not None:
                replies = list(self._send([w.lease for w in batch]))
            else:
                client = self._library.client(connection_pool=self._pool)
                step = Pipeline(tuple(w.lease._renewal() for w in batch))
                replies = [renewal_reply(reply) for reply in late.pipeline(client, step)]
        except Exception:
            _log.warning("tenure watchdog: renewal failed; retrying", exc_info=True)
        finally:  # (even cancelled: the next batch may go)
            with self._mutex:
                now = time.monotonic()
                for watch, reply in zip(batch, replies, strict=True):
                    reason = self._book.settle(watch, reply, sent_at, now)
                    if reason is not None:
                        lost.append((watch, reason))
                self._renewing = False
                self._wake.set()
        try:
            _telemetry.renewals(batch, replies)
        except Exception:  # (a meter's: the renewals went on all the same)
            _log.warning("tenure watchdog: recording the renewals failed", exc_info=True)
        finally:  # (a lease found lost is no longer watched: signalled here or never)
            for watch, reason in lost:
                lose(watch.lease, reason)
