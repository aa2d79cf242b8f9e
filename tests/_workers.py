"""Functions run in worker processes (spawned, so they live in an importable module)."""

from __future__ import annotations

import asyncio
import bisect
import itertools
import random
import threading
import time
from multiprocessing.synchronize import Event
from typing import Any

import redis
import redis.asyncio

from tenure import (
    AsyncLock,
    AsyncReadWriteLock,
    AsyncRLock,
    AsyncSemaphore,
    CountDownLatch,
    FairLock,
    FencedKey,
    Lock,
    LockLostError,
    NotOwnedError,
    ReadWriteLock,
    RLock,
    Semaphore,
    StaleFenceError,
)

Hold = tuple[float, float, int]  # (acquired_at, released_at, fence) on time.monotonic()


def check_history(holds: list[Hold]) -> None:
    """Assert no two holds overlap and fences strictly increase in hold order."""
    ordered = sorted(holds)
    for before, after in itertools.pairwise(ordered):
        assert after[0] >= before[1], f"overlapping holds: {before} and {after}"
        assert after[2] > before[2], f"fence went backwards: {before} then {after}"


def mutex_worker(
    url: str, name: str, sections: int, start: threading.Barrier, hold: float = 0.0
) -> list[Hold]:
    """Do ``sections`` read-modify-writes of ``<name>:counter`` under a Lock.

    ``hold`` seconds are slept inside each section (so that waiters pile up).
    """
    client = redis.Redis.from_url(url)
    lock = Lock(client, name, ttl=10)
    holds: list[Hold] = []
    start.wait()
    for _ in range(sections):
        with lock as lease:
            acquired = time.monotonic()
            value = int(client.get(f"{name}:counter") or 0)
            if hold:
                time.sleep(hold)
            client.set(f"{name}:counter", value + 1)
            released = time.monotonic()
        holds.append((acquired, released, lease.fence))
    return holds


def async_mutex_worker(url: str, name: str, tasks: int, sections: int) -> list[Hold]:
    """``tasks`` asyncio tasks, each doing ``sections`` read-modify-writes under an AsyncLock."""

    async def main() -> list[Hold]:
        client = redis.asyncio.Redis.from_url(url, max_connections=tasks + 8)
        lock = AsyncLock(client, name, ttl=10)
        holds: list[Hold] = []

        async def task() -> None:
            for _ in range(sections):
                async with lock as lease:
                    acquired = time.monotonic()
                    value = int(await client.get(f"{name}:counter") or 0)
                    await client.set(f"{name}:counter", value + 1)
                    released = time.monotonic()
                holds.append((acquired, released, lease.fence))

        await asyncio.gather(*(task() for _ in range(tasks)))
        await client.aclose()
        return holds

    return asyncio.run(main())


def paused_holder(url: str, name: str, ttl: float, acquired: Any, go: Event) -> None:
    """Acquire with the watchdog renewing, put the fence on ``acquired``, wait for
    ``go`` (the test pauses us meanwhile), make the write it was about to make,
    release, and put the outcome on ``acquired``."""
    acquired.put(_pause_and_release(url, name, ttl, acquired, go))


def _pause_and_release(url: str, name: str, ttl: float, acquired: Any, go: Event) -> str:
    client = redis.Redis.from_url(url)
    lease = Lock(client, name, ttl=ttl, auto_renew=True).acquire()
    assert lease is not None
    acquired.put(lease.fence)
    go.wait()
    # resumed: the watchdog must see the deadline passed within a renewal interval
    lost_in_time = lease.lost.wait(ttl / 3)
    valid_before = lease.valid
    try:  # the write it was about to make when it was paused
        FencedKey(client, f"{name}:resource").set("stale holder", fence=lease.fence)
        wrote = "written"
    except StaleFenceError:
        wrote = "refused"
    try:
        lease.release()
    except LockLostError as exc:
        return f"LockLostError lost={lost_in_time} valid={valid_before} write={wrote}: {exc}"
    except NotOwnedError as exc:
        return f"NotOwnedError valid={valid_before} write={wrote}: {exc}"
    return f"released write={wrote}"


def renewing_holder(url: str, name: str, ttl: float, acquired: Any) -> None:
    """Acquire with the watchdog renewing, put the fence on ``acquired``, and hold
    until killed."""
    lease = Lock(redis.Redis.from_url(url), name, ttl=ttl, auto_renew=True).acquire()
    assert lease is not None
    acquired.put(lease.fence)
    time.sleep(3600)


def renewing_rlock_holder(url: str, name: str, ttl: float, acquired: Any) -> None:
    """Take an RLock two levels deep with the watchdog renewing, put the fence on
    ``acquired``, and hold until killed."""
    lock = RLock(redis.Redis.from_url(url), name, ttl=ttl, auto_renew=True)
    lease = lock.acquire()
    assert lease is not None and lock.acquire() is not None
    acquired.put(lease.fence)
    time.sleep(3600)


def looping_worker(url: str, name: str, seconds: float, start: threading.Barrier) -> list[Hold]:
    """Acquire, hold 1 ms, release, and ask again at once, for ``seconds``."""
    lock = Lock(redis.Redis.from_url(url), name, ttl=10)
    holds: list[Hold] = []
    start.wait()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        lease = lock.acquire()
        assert lease is not None
        acquired = time.monotonic()
        time.sleep(0.001)
        released = time.monotonic()
        lease.release()
        holds.append((acquired, released, lease.fence))
    return holds


def rlock_worker(url: str, name: str, sections: int, start: threading.Barrier) -> list[Hold]:
    """Do ``sections`` read-modify-writes of ``<name>:counter`` under an RLock taken
    three levels deep (``with``, ``with lock(timeout=...)``, ``acquire``/``release``).

    Checks inside each section that the inner levels share the outer fence, and
    at the end that this owner's hold count is back to zero.
    """
    client = redis.Redis.from_url(url)
    lock = RLock(client, name, ttl=10)
    holds: list[Hold] = []
    start.wait()
    for i in range(sections):
        with lock as outer:
            acquired = time.monotonic()
            with lock(timeout=1) as middle:
                inner = lock.acquire(blocking=False)
                assert inner is not None and inner.fence == middle.fence == outer.fence
                if i % 10 == 0:
                    assert lock.hold_count() == 3
                value = int(client.get(f"{name}:counter") or 0)
                client.set(f"{name}:counter", value + 1)
                inner.release()
            released = time.monotonic()
        holds.append((acquired, released, outer.fence))
    assert lock.hold_count() == 0
    return holds


def async_rlock_worker(url: str, name: str, tasks: int, sections: int) -> list[Hold]:
    """``tasks`` asyncio tasks sharing one AsyncRLock, each doing ``sections``
    read-modify-writes under it, taken two levels deep."""

    async def main() -> list[Hold]:
        client = redis.asyncio.Redis.from_url(url, max_connections=tasks + 8)
        lock = AsyncRLock(client, name, ttl=10)
        holds: list[Hold] = []

        async def task() -> None:
            for _ in range(sections):
                async with lock as outer:
                    acquired = time.monotonic()
                    async with lock as inner:
                        assert inner.fence == outer.fence
                        value = int(await client.get(f"{name}:counter") or 0)
                        await client.set(f"{name}:counter", value + 1)
                    released = time.monotonic()
                holds.append((acquired, released, outer.fence))
            assert await lock.hold_count() == 0

        await asyncio.gather(*(task() for _ in range(tasks)))
        await client.aclose()
        return holds

    return asyncio.run(main())


# --- semaphore and latch ------------------------------------------------------

#: (acquired_at, released_at, holders seen) on time.monotonic(); "holders seen" is
#: the value of a shared Redis counter that each holder increments right after
#: acquiring and decrements right before releasing.
Span = tuple[float, float, int]


def check_at_most(spans: list[Span], limit: int) -> int:
    """Assert that no more than ``limit`` spans overlap at any moment, and that no
    holder saw more than ``limit`` holders in Redis. Returns the most at once."""
    for span in spans:
        assert span[2] <= limit, f"a holder saw {span[2]} holders in Redis: {span}"
    # At equal times a release comes before an acquire (the permit passed on).
    events = sorted([(s[0], 1) for s in spans] + [(s[1], -1) for s in spans])
    most = current = 0
    for at, step in events:
        current += step
        assert current <= limit, f"{current} holders at once at {at}, limit {limit}"
        most = max(most, current)
    return most


def semaphore_worker(
    url: str, name: str, permits: int, sections: int, start: threading.Barrier, hold: float
) -> list[Span]:
    """Hold one permit of a Semaphore ``sections`` times, ``hold`` seconds each."""
    client = redis.Redis.from_url(url)
    sem = Semaphore(client, name, permits, ttl=10)
    spans: list[Span] = []
    start.wait()
    for _ in range(sections):
        with sem:
            acquired = time.monotonic()
            seen = int(client.incr(f"{name}:holders"))
            time.sleep(hold)
            client.decr(f"{name}:holders")
            released = time.monotonic()
        spans.append((acquired, released, seen))
    return spans


def async_semaphore_worker(
    url: str, name: str, permits: int, tasks: int, sections: int, hold: float
) -> list[Span]:
    """``tasks`` asyncio tasks sharing one AsyncSemaphore, each holding one permit
    ``sections`` times; also checks the permits held locally never exceed ``permits``."""

    async def main() -> list[Span]:
        client = redis.asyncio.Redis.from_url(url, max_connections=tasks + 8)
        sem = AsyncSemaphore(client, name, permits, ttl=10)
        spans: list[Span] = []
        inside = 0

        async def task() -> None:
            nonlocal inside
            for _ in range(sections):
                async with sem:
                    acquired = time.monotonic()
                    inside += 1
                    assert inside <= permits, f"{inside} tasks inside"
                    seen = int(await client.incr(f"{name}:holders"))
                    await asyncio.sleep(hold)
                    await client.decr(f"{name}:holders")
                    inside -= 1
                    released = time.monotonic()
                spans.append((acquired, released, seen))

        await asyncio.gather(*(task() for _ in range(tasks)))
        await client.aclose()
        return spans

    return asyncio.run(main())


def semaphore_holder_until_killed(url: str, name: str, permits: int, ttl: float, out: Any) -> None:
    """Acquire one permit, put (token, acquired_at) on ``out``, then hang (the test
    kills this process with SIGKILL)."""
    lease = Semaphore(redis.Redis.from_url(url), name, permits, ttl=ttl).acquire()
    assert lease is not None
    out.put((lease.owner, time.monotonic()))
    time.sleep(120)


def semaphore_waiter_until_killed(url: str, name: str, permits: int, n: int) -> None:
    """Wait for ``n`` permits without limit (the test kills this process with SIGKILL
    while it waits)."""
    Semaphore(redis.Redis.from_url(url), name, permits).acquire(n)


def latch_waiter(url: str, name: str, timeout: float) -> tuple[bool, float]:
    """Wait on a CountDownLatch; return the outcome and when it came (monotonic)."""
    opened = CountDownLatch(redis.Redis.from_url(url), name).wait(timeout)
    return opened, time.monotonic()


# --- read-write lock ---------------------------------------------------------

#: (mode, acquired_at, released_at, fence) on time.monotonic(); mode "read" or "write"
RWHold = tuple[str, float, float, int]


def check_rw_history(holds: list[RWHold]) -> None:
    """Assert the read-write lock's invariants on a recorded history: no write
    hold overlaps any other hold (read or write), write fences strictly increase
    in hold order, and each read hold's fence is that of the last write hold
    before it (when there is one; all write holds of the name must be recorded)
    and smaller than that of the next.

    Recorded intervals lie inside the real holds (taken after acquire returned,
    before release was called), so an overlap seen here is a real one.
    """
    writes = sorted((start, end, fence) for mode, start, end, fence in holds if mode == "write")
    reads = sorted((start, end, fence) for mode, start, end, fence in holds if mode == "read")
    for before, after in itertools.pairwise(writes):
        assert after[0] >= before[1], f"overlapping write holds: {before} and {after}"
        assert after[2] > before[2], f"write fence went backwards: {before} then {after}"
    starts = [w[0] for w in writes]
    for read in reads:
        i = bisect.bisect_left(starts, read[0])  # writes[:i] began before the read
        if i > 0:
            last = writes[i - 1]
            assert last[1] <= read[0], f"write {last} overlaps read {read}"
            assert read[2] == last[2], f"read {read} has not the last write's fence {last}"
        if i < len(writes):
            following = writes[i]
            assert following[0] >= read[1], f"write {following} overlaps read {read}"
            assert read[2] < following[2], f"read {read} has a fence >= a later write's {following}"


def _read_section(client: redis.Redis, name: str, hold: float) -> None:
    """Read the counter twice, ``hold`` seconds apart: no writer may change it."""
    first = client.get(f"{name}:counter")
    time.sleep(hold)
    assert client.get(f"{name}:counter") == first, "the counter changed under a read hold"


def rw_worker(
    url: str,
    name: str,
    sections: int,
    start: threading.Barrier,
    write_every: int = 4,
    hold: float = 0.001,
) -> list[RWHold]:
    """``sections`` holds of a ReadWriteLock: every ``write_every``-th a write
    (a read-modify-write of ``<name>:counter`` taken under ``with rw.write``,
    with a re-entry and a read under it), the others reads (the counter read
    twice, ``hold`` seconds apart, under ``with rw.read(timeout=...)``)."""
    client = redis.Redis.from_url(url)
    rw = ReadWriteLock(client, name, ttl=10)
    holds: list[RWHold] = []
    start.wait()
    for i in range(sections):
        if i % write_every == write_every - 1:
            with rw.write as lease:
                acquired = time.monotonic()
                with rw.write as inner, rw.read as under:
                    assert inner.fence == under.fence == lease.fence
                value = int(client.get(f"{name}:counter") or 0)
                client.set(f"{name}:counter", value + 1)
                released = time.monotonic()
        else:
            with rw.read(timeout=30) as lease:
                acquired = time.monotonic()
                _read_section(client, name, hold)
                released = time.monotonic()
        holds.append((lease.mode, acquired, released, lease.fence))
    assert rw.read.hold_count() == 0 and rw.write.hold_count() == 0
    return holds


def rw_reader_loop(url: str, name: str, seconds: float, hold: float, threads: int) -> list[RWHold]:
    """``threads`` threads taking the read lock over and over for ``seconds``:
    each holds it a random time between ``hold``/2 and 1.5 ``hold`` (so that
    readers do not release together) and asks again at once."""
    client = redis.Redis.from_url(url)
    rw = ReadWriteLock(client, name, ttl=10)
    holds: list[RWHold] = []
    end = time.monotonic() + seconds

    def loop() -> None:
        rng = random.Random()
        while time.monotonic() < end:
            with rw.read as lease:
                acquired = time.monotonic()
                time.sleep(rng.uniform(hold / 2, hold * 1.5))
                released = time.monotonic()
            holds.append(("read", acquired, released, lease.fence))

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return holds


def rw_holding_reader(url: str, name: str, ttl: float, acquired: Any) -> None:
    """Take the read lock with the watchdog renewing, put the fence on
    ``acquired``, and hold until killed."""
    rw = ReadWriteLock(redis.Redis.from_url(url), name, ttl=ttl, auto_renew=True)
    lease = rw.read.acquire()
    assert lease is not None
    acquired.put(lease.fence)
    time.sleep(3600)


def async_rw_worker(
    url: str, name: str, tasks: int, sections: int, write_every: int = 5
) -> list[RWHold]:
    """``tasks`` asyncio tasks sharing one AsyncReadWriteLock, each doing
    ``sections`` holds, task i's j-th a write when (i + j) % ``write_every`` == 0
    (a read-modify-write of ``<name>:counter``), else a read (the counter read
    twice across a sleep)."""
    return asyncio.run(_async_rw(url, name, tasks, sections, write_every))


async def _async_rw(
    url: str, name: str, tasks: int, sections: int, write_every: int
) -> list[RWHold]:
    client = redis.asyncio.Redis.from_url(url, max_connections=tasks + 8)
    rw = AsyncReadWriteLock(client, name, ttl=10)
    holds: list[RWHold] = []

    async def task(i: int) -> None:
        for j in range(sections):
            view = rw.write if (i + j) % write_every == 0 else rw.read
            async with view as lease:
                acquired = time.monotonic()
                value = await client.get(f"{name}:counter")
                if lease.mode == "write":
                    await client.set(f"{name}:counter", int(value or 0) + 1)
                else:
                    await asyncio.sleep(0.001)
                    assert await client.get(f"{name}:counter") == value
                released = time.monotonic()
            holds.append((lease.mode, acquired, released, lease.fence))
        assert await rw.read.hold_count() == 0 and await rw.write.hold_count() == 0

    try:
        await asyncio.gather(*(task(i) for i in range(tasks)))
    finally:
        await client.aclose()
    return holds


def multi_holder(url: str, names: list[str], ttl: float, acquired: Any) -> None:
    """Take a MultiLock over Locks ``names`` (renewed by the watchdog), put the
    fences on ``acquired``, and hold until killed."""
    from tenure import MultiLock

    client = redis.Redis.from_url(url)
    lease = MultiLock([Lock(client, n, ttl=ttl, auto_renew=True) for n in names]).acquire()
    assert lease is not None
    acquired.put(lease.fence)
    time.sleep(3600)


#: The primitives of tests/test_stalled_waiter.py: for each, what the holder, the
#: stalled waiter and the live waiter ask for (a read-write lock's mode).
STALL_KINDS: dict[str, tuple[str, str, str]] = {
    "lock": ("", "", ""),
    "rlock": ("", "", ""),
    "fair": ("", "", ""),
    "semaphore": ("", "", ""),
    "rw-write": ("write", "write", "read"),  # a write hold handed to the stalled writer
    "rw-read": ("write", "read", "write"),  # a read hold handed to the stalled reader
}


def stall_acquirer(kind: str, role: int, client: redis.Redis, name: str, ttl: float) -> Any:
    """The ``acquire`` of the primitive ``kind`` (a key of :data:`STALL_KINDS`)
    named ``name``, for ``role`` (0 holder, 1 stalled waiter, 2 live waiter)."""
    if kind == "lock":
        return Lock(client, name, ttl=ttl).acquire
    if kind == "rlock":
        return RLock(client, name, ttl=ttl).acquire
    if kind == "fair":
        return FairLock(client, name, ttl=ttl).acquire
    if kind == "semaphore":
        return Semaphore(client, name, 1, ttl=ttl).acquire
    rw = ReadWriteLock(client, name, ttl=ttl)
    return (rw.read if STALL_KINDS[kind][role] == "read" else rw.write).acquire


def stalled_waiter(url: str, kind: str, name: str, timeout: float, out: Any) -> None:
    """Wait for ``kind`` ``name`` as the stalled waiter (the test stops this process
    while it waits); put on ``out`` ``None`` if the acquire timed out, else the
    hold ``(acquired_at, released_at, fence)`` (released at once)."""
    acquire = stall_acquirer(kind, 1, redis.Redis.from_url(url), name, 10.0)
    lease = acquire(timeout=timeout)
    if lease is None:
        out.put(None)
        return
    acquired = time.monotonic()
    lease.release()
    out.put((acquired, time.monotonic(), lease.fence))


def redlock_worker(urls: list[str], name: str, sections: int, start: Any) -> list[Hold]:
    """Do ``sections`` read-modify-writes of ``<name>:counter`` (on the first
    master) under a Redlock over ``urls``; return the holds."""
    from tenure import Redlock

    clients = [redis.Redis.from_url(url) for url in urls]
    lock = Redlock(clients, name, ttl=5)
    holds: list[Hold] = []
    start.wait()
    for _ in range(sections):
        with lock(timeout=30) as lease:
            acquired = time.monotonic()
            value = int(clients[0].get(f"{name}:counter") or 0)
            time.sleep(0.002)
            clients[0].set(f"{name}:counter", value + 1)
            holds.append((acquired, time.monotonic(), lease.fence))
    return holds


def redlock_holder(urls: list[str], name: str, ttl: float, acquired: Any) -> None:
    """Hold a Redlock over ``urls`` (not renewed) and sleep until killed."""
    from tenure import Redlock

    clients = [redis.Redis.from_url(url) for url in urls]
    lease = Redlock(clients, name, ttl=ttl).acquire()
    assert lease
    acquired.set()
    time.sleep(3600)
