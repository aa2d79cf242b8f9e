"""A stalled waiter: a process stopped (SIGSTOP) while it waits, its wake
connection still open, so that a release's PUBLISH counts it and hands it the
lock as if it were live. It must keep the others out for at most the hand-off's
claim window (``HANDOFF_CLAIM``, 1 s), not for its whole ttl (10 s here): the
lease it is handed lasts only that window unless it extends it, and the next
waiter is told to try again when the window ends. A live waiter's hand-off still
yields a lease of its full ttl in Redis (the watchdog extends the claim at once).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import redis.asyncio
from _workers import STALL_KINDS, Hold, check_history, stall_acquirer, stalled_waiter

from tenure import AsyncLock, FairLock, Lock, ReadWriteLock, RLock, Semaphore
from tenure._drivers._watchbook import WatchBook, retry_after
from tenure._keys import fair_keys, lock_keys, rlock_keys, rwlock_keys, semaphore_keys
from tenure._plans.waiting import HANDOFF_CLAIM, validity
from tenure._protocol import Status

SPAWN = multiprocessing.get_context("spawn")
TTL = 10.0
PREFIX = "tenure:"

#: How long after the release the live waiter may get the lock: the claim window,
#: and a margin for a loaded machine.
BOUND = HANDOFF_CLAIM + 1.5


def waiters_key(kind: str, name: str) -> str:
    if kind == "lock":
        return lock_keys(name, key=None, prefix=PREFIX).waiters
    if kind == "rlock":
        return rlock_keys(name, prefix=PREFIX).waiters
    if kind == "fair":
        return fair_keys(name, prefix=PREFIX).waiters
    if kind == "semaphore":
        return semaphore_keys(name, prefix=PREFIX).waiters
    return rwlock_keys(name, prefix=PREFIX).waiters


def claimed(lease: Any, within: float = 0.7) -> None:
    """Wait, at most ``within`` seconds (less than the window's trusted part),
    for the watchdog's claim extend: the lease's deadline moves past the window."""
    deadline = time.monotonic() + within
    while lease.remaining <= HANDOFF_CLAIM and time.monotonic() < deadline:
        time.sleep(0.005)


def wait_for_queue(r: redis.Redis, key: str, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while r.zcard(key) < n:
        assert time.monotonic() < deadline, f"{key}: fewer than {n} waiters queued"
        time.sleep(0.005)


@pytest.mark.parametrize("kind", list(STALL_KINDS))
def test_a_stalled_waiter_keeps_the_next_out_for_the_claim_window_only(
    r: redis.Redis, url: str, kind: str
) -> None:
    """Holder, then a waiter process that is stopped while it waits, then a live
    waiter; the holder releases: the live waiter gets the lock within the claim
    window (+ margin), and when the stopped process resumes it does not hold the
    lock while the live waiter does (no overlap, fences increase)."""
    name = f"stall-{kind}"
    key = waiters_key(kind, name)
    holder = stall_acquirer(kind, 0, r, name, TTL)()
    assert holder is not None
    held_from = time.monotonic()
    out = SPAWN.Queue()
    stalled = SPAWN.Process(target=stalled_waiter, args=(url, kind, name, 30.0, out))
    stalled.start()
    got, resume = threading.Event(), threading.Event()

    def live() -> Hold | None:
        lease = stall_acquirer(kind, 2, redis.Redis.from_url(url), name, TTL)(timeout=BOUND)
        got.set()
        if lease is None:
            return None
        acquired = time.monotonic()
        resume.wait(10)
        released = time.monotonic()
        lease.release()
        return (acquired, released, lease.fence)

    try:
        wait_for_queue(r, key, 1)
        assert stalled.pid is not None
        os.kill(stalled.pid, signal.SIGSTOP)
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(live)
            wait_for_queue(r, key, 2)
            released_at = time.monotonic()
            holder.release()  # handed to the stopped process: it hears the PUBLISH
            got.wait(BOUND + 1)
            waited = time.monotonic() - released_at
            # the stopped process resumes while the live waiter holds; it finds the
            # lease it was handed gone and waits (until the live one releases)
            os.kill(stalled.pid, signal.SIGCONT)
            time.sleep(0.3)
            resume.set()
            hold = waiting.result(timeout=10)
        assert hold is not None, f"the live waiter was kept out for {waited:.2f} s"
        assert hold[0] - released_at < BOUND, waited
        late = out.get(timeout=30)
    finally:
        if stalled.pid is not None:
            os.kill(stalled.pid, signal.SIGCONT)
        stalled.join(timeout=30)
        if stalled.is_alive():
            stalled.kill()
    assert late is not None  # it got the lock after the live waiter gave it back
    holds = [(held_from, released_at, holder.fence), hold, late]
    if kind != "rw-read":  # a read hold shares the last writer's fence
        check_history(holds)
    else:
        assert hold[0] >= released_at and late[0] >= hold[1]
        assert hold[2] > holder.fence


def _redis_ttl(kind: str, lock: Any) -> float:
    """Seconds Redis still holds the lock's one holder for."""
    info = lock.info()
    if kind in ("lock", "rlock", "fair"):
        assert info.holder is not None
        return float(info.ttl)
    (held,) = info.holders
    return float(held.ttl)


@pytest.mark.parametrize("kind", list(STALL_KINDS))
def test_a_live_waiter_handed_the_lock_holds_it_for_its_full_ttl(r: redis.Redis, kind: str) -> None:
    """A fixed-ttl lease (not renewed) handed to a live waiter starts with the
    claim window in Redis; the watchdog extends it to the full ttl at once, and
    the lease's ``expires_at`` follows."""
    name = f"full-{kind}"
    key = waiters_key(kind, name)
    lock: Any
    holder: Any
    if kind == "lock":
        lock, holder = Lock(r, name, ttl=TTL), Lock(r, name, ttl=TTL).acquire()
    elif kind == "rlock":
        lock, holder = RLock(r, name, ttl=TTL), RLock(r, name, ttl=TTL).acquire()
    elif kind == "fair":
        lock, holder = FairLock(r, name, ttl=TTL), FairLock(r, name, ttl=TTL).acquire()
    elif kind == "semaphore":
        lock, holder = Semaphore(r, name, 1, ttl=TTL), Semaphore(r, name, 1, ttl=TTL).acquire()
    else:
        lock = ReadWriteLock(r, name, ttl=TTL)
        holder = ReadWriteLock(r, name, ttl=TTL).write.acquire()
    assert holder is not None
    with ThreadPoolExecutor(1) as pool:
        if kind.startswith("rw"):
            view = lock.read if STALL_KINDS[kind][2] == "read" else lock.write
            waiting = pool.submit(view.acquire, timeout=10)
        else:
            waiting = pool.submit(lock.acquire, timeout=10)
        wait_for_queue(r, key, 1)
        holder.release()
        lease = waiting.result(timeout=10)
    assert lease is not None
    returned = time.monotonic()
    assert lease.expires_at <= returned + TTL
    claimed(lease)  # the watchdog's claim extend
    left = _redis_ttl(kind, lock)
    assert TTL - 1.0 < left <= TTL, left
    # the client's deadline moved on too, and never beyond what Redis holds
    assert validity(TTL) - 1.3 < lease.remaining <= left + 0.05, (lease.remaining, left)
    if kind == "lock":  # (once is enough: the deadline moved on above)
        time.sleep(HANDOFF_CLAIM)  # past the claim window: still held, not lost
    assert lease.valid and not lease.lost.is_set()
    lease.release()


# --- the watch book's part, pure -------------------------------------------------


@dataclass
class FakeLease:
    ttl: float
    expires_at: float
    _claim: float = 0.0
    _given_up: bool = False
    renewed_until: float | None = None

    def _renewal(self) -> Any:
        return None

    def _renewed(self, expires_at: float) -> None:
        self.renewed_until = self.expires_at = expires_at

    def _lose(self, reason: str) -> None:
        pass


def test_a_claimed_lease_is_extended_once_at_once_even_when_not_renewed() -> None:
    book = WatchBook()
    lease = FakeLease(TTL, 100.0 + validity(HANDOFF_CLAIM), _claim=HANDOFF_CLAIM)
    watch = book.add(lease, False, 100.0)
    assert book.first_due(watch) == 100.0 and book.next_wake(100.0) == 100.0
    assert book.take_due(100.0) == [watch]
    # a network failure: tried again soon, well within the window
    assert book.settle(watch, None, 100.0, 100.01) is None
    assert watch.due == pytest.approx(100.01 + retry_after(HANDOFF_CLAIM, 1))
    assert book.take_due(watch.due) == [watch]
    assert book.settle(watch, (Status.OK, 0), 100.1, 100.11) is None
    assert lease.renewed_until == pytest.approx(100.1 + validity(TTL))
    # not renewed: nothing is due any more, only its deadline is watched
    assert book.take_due(105.0) == [] and book.first_due(watch) == lease.expires_at


def test_a_claim_extend_that_finds_the_lease_gone_loses_it_at_its_deadline() -> None:
    """Not at once: a release sent while the extend was in flight comes first in
    Redis, and ends the watch before the deadline (no false loss)."""
    book = WatchBook()
    deadline = 100.0 + validity(HANDOFF_CLAIM)
    gone = book.add(FakeLease(TTL, deadline, _claim=HANDOFF_CLAIM), True, 100.0)
    released = book.add(FakeLease(TTL, deadline, _claim=HANDOFF_CLAIM), True, 100.0)
    assert book.take_due(100.0) == [gone, released]
    for watch in (gone, released):
        assert book.settle(watch, (Status.NOT_OWNED, 0), 100.0, 100.1) is None
    assert book.take_due(100.2) == []  # never extended or renewed again
    book.discard(released, 100.2)  # its holder's release returned
    assert book.expired(deadline - 0.001) == []
    assert book.expired(deadline) == [gone]
    assert gone.why == "the claim extend found the lease gone from Redis"
    assert not book.watches
    # too little left: lost at once, as any renewal
    late = book.add(FakeLease(TTL, deadline, _claim=HANDOFF_CLAIM), False, 100.0)
    assert book.take_due(100.0) == [late]
    assert book.settle(late, (Status.NOT_OWNED, 1), 100.0, 100.1) is not None


def test_an_unclaimed_lease_is_not_extended_early() -> None:
    book = WatchBook()
    fixed = book.add(FakeLease(TTL, 100.0 + validity(TTL)), False, 100.0)
    renewed = book.add(FakeLease(TTL, 100.0 + validity(TTL)), True, 100.0)
    assert book.take_due(100.0) == []
    assert book.take_due(100.0 + TTL / 3) == [renewed]
    assert fixed not in book.take_due(200.0)


def test_async_waiters_get_past_a_stalled_one_and_keep_their_full_ttl(
    r: redis.Redis, url: str
) -> None:
    """The asyncio driver: a recheck wakes the live waiter when the stalled one's
    claim window ends, and the watchdog task extends a claimed lease at once."""
    name = "stall-async"
    key = waiters_key("lock", name)

    async def main() -> tuple[float, float, float]:
        client = redis.asyncio.Redis.from_url(url)
        holder = await AsyncLock(client, name, ttl=TTL).acquire()
        assert holder is not None
        out = SPAWN.Queue()
        stalled = SPAWN.Process(target=stalled_waiter, args=(url, "lock", name, 30.0, out))
        stalled.start()
        try:
            await asyncio.to_thread(wait_for_queue, r, key, 1)
            assert stalled.pid is not None
            os.kill(stalled.pid, signal.SIGSTOP)
            live = asyncio.create_task(AsyncLock(client, name, ttl=TTL).acquire(timeout=BOUND))
            await asyncio.to_thread(wait_for_queue, r, key, 2)
            released_at = time.monotonic()
            await holder.release()
            lease = await live
            assert lease is not None, "the live waiter waited out the stalled one's ttl"
            waited = time.monotonic() - released_at
            os.kill(stalled.pid, signal.SIGCONT)
            await asyncio.sleep(0.3)  # it finds the lease it was handed gone, and waits
            await lease.release()
            late = await asyncio.to_thread(out.get, True, 30)
            assert late is not None and late[0] >= released_at + waited and late[2] > lease.fence
            # a hand-off to a live task: its claim is extended by the watchdog task
            holder = await AsyncLock(client, name, ttl=TTL).acquire()
            assert holder is not None
            again = asyncio.create_task(AsyncLock(client, name, ttl=TTL).acquire(timeout=10))
            await asyncio.to_thread(wait_for_queue, r, key, 1)
            await holder.release()
            last = await again
            assert last is not None
            deadline = time.monotonic() + 0.7  # the watchdog task's claim extend
            while last.remaining <= HANDOFF_CLAIM and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            left = await client.pttl(lock_keys(name, key=None, prefix=PREFIX).lock) / 1000
            remaining = last.remaining
            await last.release()
        finally:
            if stalled.pid is not None:
                os.kill(stalled.pid, signal.SIGCONT)
            await asyncio.to_thread(stalled.join, 30)
            await client.aclose()
        return waited, left, remaining

    waited, left, remaining = asyncio.run(main())
    assert waited < BOUND
    assert TTL - 1.0 < left <= TTL and validity(TTL) - 1.3 < remaining <= left + 0.05, (
        left,
        remaining,
    )


@pytest.mark.parametrize("kind", ["lock", "rw-read"])
def test_a_long_lease_handed_over_is_claimed_not_refused(r: redis.Redis, kind: str) -> None:
    """A lease of 200 s has a drift allowance (2 s) longer than the claim window:
    the claim extend is checked against the window's allowance, which the client
    trusts, so it is not refused as too late (which would lose the lease)."""
    name, ttl = f"long-{kind}", 200.0
    key = waiters_key(kind, name)
    lock: Any = Lock(r, name, ttl=ttl) if kind == "lock" else ReadWriteLock(r, name, ttl=ttl).write
    holder = lock.acquire()
    assert holder is not None
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(lock.acquire, timeout=10)
        wait_for_queue(r, key, 1)
        holder.release()
        lease = waiting.result(timeout=10)
    assert lease is not None
    claimed(lease)
    assert lease.valid and not lease.lost.is_set(), lease.lost_reason
    assert validity(ttl) - 1.3 < lease.remaining <= ttl
    left = _redis_ttl(
        "lock" if kind == "lock" else kind,
        Lock(r, name) if kind == "lock" else ReadWriteLock(r, name),
    )
    assert ttl - 1 < left <= ttl
    lease.release()


def test_readers_handed_the_lock_together_each_claim_their_own_hold(
    r: redis.Redis, url: str
) -> None:
    """A release hands the read lock to three queued readers at once, the middle
    one a stopped process: the two live readers extend their holds to the full
    ttl, the stopped one's hold ends with its claim window, and the writer queued
    behind them gets in soon after the live readers leave, not a ttl later."""
    name = "stall-readers"
    key = waiters_key("rw-read", name)
    holder = ReadWriteLock(r, name, ttl=TTL).write.acquire()
    assert holder is not None
    clients = [redis.Redis.from_url(url) for _ in range(3)]
    leave = threading.Event()

    def read(client: redis.Redis) -> Any:
        lease = ReadWriteLock(client, name, ttl=TTL).read.acquire(timeout=10)
        assert lease is not None
        leave.wait(10)
        lease.release()
        return lease

    def write(client: redis.Redis) -> tuple[float, Any]:
        lease = ReadWriteLock(client, name, ttl=TTL).write.acquire(timeout=BOUND + 1)
        got = time.monotonic()
        if lease is not None:
            lease.release()
        return got, lease

    out = SPAWN.Queue()
    stalled = SPAWN.Process(target=stalled_waiter, args=(url, "rw-read", name, 30.0, out))
    try:
        with ThreadPoolExecutor(3) as pool:
            first = pool.submit(read, clients[0])
            wait_for_queue(r, key, 1)
            stalled.start()
            wait_for_queue(r, key, 2)
            assert stalled.pid is not None
            os.kill(stalled.pid, signal.SIGSTOP)
            second = pool.submit(read, clients[1])
            wait_for_queue(r, key, 3)
            writer = pool.submit(write, clients[2])
            wait_for_queue(r, key, 4)
            released_at = time.monotonic()
            holder.release()
            deadline = time.monotonic() + 0.7  # the live readers' claim extends
            while True:
                holds = {h.owner: h for h in ReadWriteLock(r, name).info().holders}
                extended = [h for h in holds.values() if h.ttl > HANDOFF_CLAIM]
                if len(extended) >= 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.005)
            assert len(holds) == 3 and all(h.mode == "read" for h in holds.values())
            leave.set()
            readers = [first.result(timeout=10), second.result(timeout=10)]
            got, lease = writer.result(timeout=10)
            os.kill(stalled.pid, signal.SIGCONT)
            late = out.get(timeout=30)
    finally:
        if stalled.pid is not None:
            os.kill(stalled.pid, signal.SIGCONT)
            stalled.join(timeout=30)
        for c in clients:
            c.close()
    # the live readers' holds were extended to the full ttl; the stopped one's not
    for reader in readers:
        assert TTL - 1.0 < holds[reader.owner].ttl <= TTL, holds
    (stopped,) = [h for owner, h in holds.items() if owner not in {x.owner for x in readers}]
    assert stopped.ttl <= HANDOFF_CLAIM, holds
    assert lease is not None, "the writer waited out the stopped reader's ttl"
    assert got - released_at < BOUND and lease.fence > holder.fence
    assert late is not None and late[0] >= got  # it read again after the writer
