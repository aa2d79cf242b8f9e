"""The watchdog: one task per client, process and event loop that renews the
client's leases and fires the lost signal, and the public calls that give it
a lease.

Written by hand for the asyncio flavour; ``_sync/watchdog.py`` is the
synchronous one (threads and a condition variable, never in the main
thread). The decisions of both are :class:`.._watchbook.WatchBook`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from ..._errors import WrongTypeError
from ..._protocol import Pipeline, Status, parse_reply
from .. import _clients
from .._watchbook import CLAIM_GRACE, Watch, Watchable, WatchBook, lose, renewal_reply

if TYPE_CHECKING:
    from .hub import _Library
    from .state import Client

_log = logging.getLogger("tenure")


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
        from .send import _pipeline  # (above this module: imported when used)

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


async def _renew_each(ref: Callable[[], Client | None], leases: list[Any]) -> list[Any]:
    """A Redis Cluster client's watchdog renewals, grouped by node: one cluster
    pipeline, which sends one round trip to each master owning some of the
    leases' slots. A renewal that fails there (``NOSCRIPT``, ``MOVED`` / ``ASK``
    while its slot moves, a node down) is sent once more on its own through the
    cluster client, which loads the script and follows redirections. Returns
    one reply per lease (``None`` for a lease to retry)."""
    from .send import _one  # (above this module: imported when used)
    from .state import _state

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
