"""The watchdog: one thread per client and process that renews the client's
leases and fires the lost signal.

Written by hand for the synchronous flavour (a background thread waiting on
a condition variable: never the main thread, so no interrupt can leave it
held); ``_async/watchdog.py`` is the asyncio one (tasks). The decisions of
both are :class:`.._watchbook.WatchBook`'s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from ..._errors import WrongTypeError
from ..._protocol import Pipeline, Status
from .. import _clients
from .._runtime_sync import _exiting, _start
from .._watchbook import CLAIM_GRACE, Watch, Watchable, WatchBook, lose, renewal_reply

if TYPE_CHECKING:
    from .hub import _Library
    from .state import Client

_log = logging.getLogger("tenure")


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
        from .send import _pipeline  # (above this module: imported when used)

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


def _renew_each(ref: Callable[[], Client | None], leases: list[Any]) -> list[Any]:
    """A Redis Cluster client's watchdog renewals, grouped by node: one pipelined
    round trip per master owning some of the leases' slots. A renewal that fails
    there (``MOVED`` / ``ASK`` while its slot moves, a node down) is sent once
    more on its own through the cluster client, which follows redirections.
    Returns one reply per lease (``None`` for a lease to retry)."""
    from .send import _one, _pipeline  # (above this module: imported when used)
    from .state import _state

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
