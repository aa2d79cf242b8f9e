"""What a hand-off costs after it: a lease that a release handed over with a
claim window spends no claim extend when its holder releases it within
``CLAIM_GRACE`` (the common short critical section); a longer hold is extended
as before (``tests/test_stalled_waiter.py``)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
import redis.asyncio

from tenure import AsyncLock, Lock
from tenure._drivers import _async, _sync
from tenure._drivers._watchbook import CLAIM_GRACE, WatchBook
from tenure._keys import lock_keys
from tenure._plans.waiting import HANDOFF_CLAIM, validity

TTL = 10.0


class _Fake:
    ttl = TTL
    _given_up = False

    def __init__(self, expires_at: float, claim: float) -> None:
        self.expires_at, self._claim = expires_at, claim

    def _renewal(self) -> Any:
        return None

    def _renewed(self, expires_at: float) -> None:
        self.expires_at = expires_at

    def _lose(self, reason: str) -> None:
        pass


def test_a_claim_extend_waits_for_the_grace_and_is_never_sent_after_a_release() -> None:
    book = WatchBook()
    short = book.add(_Fake(100.0 + validity(HANDOFF_CLAIM), HANDOFF_CLAIM), False, 100.0, 0.05)
    long = book.add(_Fake(100.0 + validity(HANDOFF_CLAIM), HANDOFF_CLAIM), False, 100.0, 0.05)
    assert book.first_due(short) == pytest.approx(100.05)
    assert book.take_due(100.04) == []
    book.stop_renewing(short)  # released within the grace
    book.discard(short, 100.04)
    assert book.take_due(100.05) == [long]  # held on: extended then


def _wait_queued(r: redis.Redis, name: str) -> None:
    deadline = time.monotonic() + 10
    while r.zcard(lock_keys(name, key=None, prefix="tenure:").waiters) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.002)


def test_a_short_hold_handed_over_sends_no_claim_extend(
    r: redis.Redis, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[int] = []
    renew = _sync._Watchdog._renew

    def counting(self: Any, batch: list[Any]) -> None:
        sent.append(len(batch))
        renew(self, batch)

    monkeypatch.setattr(_sync._Watchdog, "_renew", counting)
    other = redis.Redis.from_url(url)
    try:
        holder = Lock(r, "short-hold", ttl=TTL).acquire()
        assert holder is not None
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(Lock(other, "short-hold", ttl=TTL).acquire, timeout=10)
            _wait_queued(r, "short-hold")
            holder.release()
            lease = waiting.result(timeout=10)
        assert lease is not None and lease.fence > holder.fence
        assert lease.remaining <= HANDOFF_CLAIM  # handed over for the claim window
        lease.release()
        time.sleep(CLAIM_GRACE + 0.2)
        assert sent == []
    finally:
        other.close()


def test_an_async_short_hold_handed_over_sends_no_claim_extend(
    r: redis.Redis, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[int] = []
    renew = _async._Watchdog._renew

    async def counting(self: Any, batch: list[Any]) -> None:
        sent.append(len(batch))
        await renew(self, batch)

    monkeypatch.setattr(_async._Watchdog, "_renew", counting)

    async def main() -> None:
        a, b = redis.asyncio.Redis.from_url(url), redis.asyncio.Redis.from_url(url)
        try:
            holder = await AsyncLock(a, "short-hold-async", ttl=TTL).acquire()
            assert holder is not None
            lock = AsyncLock(b, "short-hold-async", ttl=TTL)
            waiting = asyncio.create_task(lock.acquire(timeout=10))
            await asyncio.to_thread(_wait_queued, r, "short-hold-async")
            await holder.release()
            lease = await waiting
            assert lease is not None and lease.fence > holder.fence
            assert lease.remaining <= HANDOFF_CLAIM  # handed over for the claim window
            await lease.release()
            await asyncio.sleep(CLAIM_GRACE + 0.2)
        finally:
            await a.aclose()
            await b.aclose()

    asyncio.run(main())
    assert sent == []
