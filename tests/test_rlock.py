"""RLock and AsyncRLock against a real server."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest
import redis
import redis.asyncio
from _interrupts import InterruptedCall
from _workers import (
    Hold,
    async_rlock_worker,
    check_history,
    renewing_rlock_holder,
    rlock_worker,
)

from tenure import (
    AcquireTimeout,
    AsyncRLock,
    InvalidArgument,
    Lock,
    NotOwnedError,
    RLock,
    RLockLease,
    WrongTypeError,
)
from tenure._drivers import _sync
from tenure._label import default_suffix
from tenure._server import ServerProcess, free_port

SPAWN = multiprocessing.get_context("spawn")
KEY = "tenure:{%s}:rlock"


def field(owner: str) -> bytes:
    """The hash field of ``owner``'s hold: its owner id, ';' and this process's label."""
    return (owner + default_suffix()).encode()


def in_thread(fn: Any) -> Any:
    """Run ``fn`` in another thread (another owner) and return its result."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def test_reentry_shares_the_fence_and_counts_up(r: redis.Redis) -> None:
    lock = RLock(r, "orders:42", ttl=5)
    leases = [lock.acquire() for _ in range(3)]
    assert all(isinstance(lease, RLockLease) and lease.valid for lease in leases)
    a, b, c = (lease for lease in leases if lease is not None)
    assert a.fence == b.fence == c.fence and a.owner == b.owner == c.owner
    assert a is not b and a.name == "orders:42" and a.ttl == 5
    assert lock.hold_count() == 3 and lock.owned() and lock.locked()
    assert r.hgetall(KEY % "orders:42") == {field(a.owner): b"3"}  # owner id + label: the field
    assert 4900 < r.pttl(KEY % "orders:42") <= 5000
    # Release order is free: the count goes down whichever lease is released.
    a.release()
    assert lock.hold_count() == 2 and not a.valid and b.valid and c.valid
    c.release()
    assert lock.hold_count() == 1 and lock.owned()
    b.release()
    assert lock.hold_count() == 0 and not lock.owned() and not lock.locked()
    assert (
        not r.exists(KEY % "orders:42") and int(r.get(KEY % "orders:42" + ":fence") or 0) == a.fence
    )


def test_fence_strictly_increases_across_holds(r: redis.Redis) -> None:
    lock = RLock(r, "fences", ttl=5)
    fences = []
    for _ in range(5):
        with lock as outer, lock as inner:
            assert inner.fence == outer.fence and lock.hold_count() == 2
        fences.append(outer.fence)
    assert fences == sorted(set(fences))


def test_over_release_raises(r: redis.Redis) -> None:
    lock = RLock(r, "over", ttl=5)
    with pytest.raises(NotOwnedError, match="not held by this thread"):
        lock.release()
    a, b = lock.acquire(), lock.acquire()
    assert a is not None and b is not None
    lock.release()  # the latest lease first
    assert not b.valid and a.valid
    with pytest.raises(NotOwnedError, match="already released"):
        b.release()
    a.release()
    with pytest.raises(NotOwnedError, match="not held by this thread"):
        lock.release()
    with pytest.raises(NotOwnedError, match="already released"):
        a.extend()
    assert not r.exists(KEY % "over")
    # Another RLock object of the same thread shares the hold count in Redis.
    other = RLock(r, "over")
    x, y = lock.acquire(), other.acquire()
    assert x is not None and y is not None and x.fence == y.fence
    assert other.hold_count() == 2
    x.release()
    y.release()
    with pytest.raises(NotOwnedError, match="not held by this thread"):
        other.release()
    assert not lock.locked()


def test_another_thread_waits_until_the_count_is_zero(r: redis.Redis) -> None:
    lock = RLock(r, "excl", ttl=5)
    outer = lock.acquire()
    assert outer is not None
    assert in_thread(lambda: lock.acquire(blocking=False)) is None
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append((lock.acquire(timeout=5), lock)))
    waiter.start()
    time.sleep(0.2)  # the waiter is queued and holds this process's gate for the lock
    started = time.monotonic()
    inner = lock.acquire(timeout=2)  # re-entry never waits behind our own waiter
    assert inner is not None and inner.fence == outer.fence
    assert time.monotonic() - started < 0.5
    inner.release()
    time.sleep(0.1)
    assert not got and lock.hold_count() == 1  # count 1: still excluded
    handed_at = time.monotonic()
    outer.release()
    assert lock.acquire(blocking=False) is None  # handed to the waiter: no barging in
    waiter.join()
    lease = got[0][0]
    assert lease is not None and lease.fence > outer.fence  # handed off
    assert time.monotonic() - handed_at < 1.0  # by the release, not by the lease running out
    assert r.hgetall(KEY % "excl") == {field(lease.owner): b"1"}  # the claim counted once
    assert in_thread(lambda: lock.hold_count()) == 0  # (a new thread: another owner)
    with pytest.raises(NotOwnedError, match="not held by this thread"):
        lock.release()  # the waiter's hold is not ours
    lease.release()
    assert not r.exists(KEY % "excl") and r.zcard(KEY % "excl" + ":waiters") == 0


def test_hand_off_to_a_waiter_in_another_process(r: redis.Redis, url: str) -> None:
    lock = RLock(r, "handoff", ttl=10)
    outer = lock.acquire()
    assert outer is not None
    with ProcessPoolExecutor(1, mp_context=SPAWN) as pool:
        future = pool.submit(_take_once, url, "handoff")
        for _ in range(1000):
            if r.zcard(KEY % "handoff" + ":waiters"):
                break
            time.sleep(0.01)
        assert r.zcard(KEY % "handoff" + ":waiters") == 1
        released_at = time.time()
        outer.release()
        fence, count, waited_from = future.result(timeout=30)
    assert fence > outer.fence and count == 1
    assert waited_from - released_at < 2.0  # long before the 10 s lease could run out
    assert not r.exists(KEY % "handoff")


def _take_once(url: str, name: str) -> tuple[int, int, float]:
    lock = RLock(redis.Redis.from_url(url), name, ttl=10)
    lease = lock.acquire(timeout=20)
    assert lease is not None
    got_at = time.time()
    count = lock.hold_count()
    lease.release()
    return lease.fence, count, got_at


def test_expired_hold_cannot_release_a_later_hold_of_the_same_owner(r: redis.Redis) -> None:
    lock = RLock(r, "aba", ttl=0.2)
    old = lock.acquire()
    assert old is not None
    time.sleep(0.3)
    assert not old.valid and not lock.owned()
    new = lock.acquire()  # the same thread: a new hold, a new fence
    assert new is not None and new.fence > old.fence
    with pytest.raises(NotOwnedError, match=rf"fence {old.fence}"):
        old.release()
    assert lock.hold_count() == 1 and new.valid
    new.extend(5)
    new.release()
    assert not lock.locked()


def test_extend_and_reentry_reset_the_whole_hold(r: redis.Redis) -> None:
    lock = RLock(r, "ext", ttl=1)
    a = lock.acquire()
    assert a is not None
    b = lock.acquire()
    assert b is not None
    a.extend(5)
    assert 4900 < r.pttl(KEY % "ext") <= 5000
    assert a.remaining > 4.5 and b.remaining > 4.5 and a.ttl == b.ttl == 5
    lock.acquire()  # a re-entry resets the lease to the lock's ttl
    assert r.pttl(KEY % "ext") <= 1000 and a.remaining <= 1
    with pytest.raises(InvalidArgument, match="seconds must be > 0"):
        a.extend(0)
    for _ in range(3):
        lock.release()
    time.sleep(0.05)
    with pytest.raises(NotOwnedError):
        a.extend()


def test_context_managers_and_timeout_error(r: redis.Redis) -> None:
    lock = RLock(r, "ctx", ttl=5)
    with lock as outer:
        with lock(timeout=1) as inner:
            assert inner.fence == outer.fence and lock.hold_count() == 2

            def contender() -> BaseException | None:
                try:
                    with lock(timeout=0.2):
                        return None
                except AcquireTimeout as exc:
                    return exc

            error = in_thread(contender)
            assert isinstance(error, TimeoutError) and "'ctx'" in str(error)
        assert lock.hold_count() == 1
    assert lock.hold_count() == 0 and not lock.locked()
    lease = lock.acquire()
    assert lease is not None
    with lease:  # a lease is a context manager too: released on exit
        assert lock.hold_count() == 1
    assert not lock.locked()


def test_repr_shows_live_state(r: redis.Redis) -> None:
    lock = RLock(r, "repr", ttl=5)
    assert repr(lock) == "<RLock 'repr' ttl=5s not held here>"
    a = lock.acquire()
    b = lock.acquire()
    assert a is not None and b is not None
    text = repr(lock)
    assert f"held here by {a.owner} count=2 fence={a.fence} valid" in text
    assert repr(a).startswith(f"<RLockLease 'repr' fence={a.fence} valid")
    b.release()
    a.release()
    assert "not held here" in repr(lock) and "released" in repr(a)


def test_lock_and_rlock_of_one_name_are_apart(r: redis.Redis) -> None:
    plain = Lock(r, "both", ttl=5).acquire(blocking=False)
    reentrant = RLock(r, "both", ttl=5).acquire(blocking=False)
    assert plain is not None and reentrant is not None
    assert r.type("tenure:{both}") == b"string" and r.type(KEY % "both") == b"hash"
    plain.release()
    reentrant.release()


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("",), {}, "name must not be empty"),
        ((b"x",), {}, "name must be a str"),
        ((None,), {}, "name must be a str"),
        (("x",), {"ttl": 0}, "ttl must be > 0"),
        (("x",), {"ttl": -1.5}, "ttl must be > 0"),
        (("x",), {"ttl": "30"}, "ttl must be a number"),
        (("x",), {"prefix": None}, "prefix must be a str"),
    ],
)
def test_bad_constructor_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], match: str
) -> None:
    dead = redis.Redis(port=free_port())  # any I/O would raise ConnectionError instead
    with pytest.raises(InvalidArgument, match=match):
        RLock(dead, *args, **kwargs)
    with pytest.raises(InvalidArgument, match=match):
        AsyncRLock(redis.asyncio.Redis(port=free_port()), *args, **kwargs)


# Bad acquire arguments: test_lock.py's test covers RLock and AsyncRLock too.


def test_wrong_type_key_names_the_key(r: redis.Redis) -> None:
    r.set(KEY % "s", "a string")
    lock = RLock(r, "s")
    with pytest.raises(WrongTypeError, match=r"'tenure:\{s\}:rlock'"):
        lock.acquire(timeout=1)
    for check in (lock.locked, lock.hold_count):
        with pytest.raises(WrongTypeError, match=r"'tenure:\{s\}:rlock'"):
            check()
    assert r.get(KEY % "s") == b"a string"
    r.lpush(KEY % "f" + ":fence", "x")
    with pytest.raises(WrongTypeError, match=r"'tenure:\{f\}:rlock:fence'"):
        RLock(r, "f").acquire()
    assert not r.exists(KEY % "f")  # nothing half-written
    holder = RLock(r, "w", ttl=5).acquire()
    assert holder is not None
    r.set(KEY % "w" + ":waiters", "not a zset")
    error = in_thread(lambda: _raises(lambda: RLock(r, "w").acquire(timeout=1)))
    assert isinstance(error, WrongTypeError) and "waiters" in str(error)
    with pytest.raises(WrongTypeError, match="waiters"):
        holder.release()
    r.delete(KEY % "w" + ":waiters")
    holder.release()


def _raises(fn: Any) -> BaseException | None:
    try:
        fn()
    except BaseException as exc:
        return exc
    return None


def test_a_hand_off_message_for_a_departed_waiter_changes_nothing(r: redis.Redis) -> None:
    """The hub passes on a lock handed to a token no plan waits with by running
    the pass-on plan of the lock's kind; an RLock has none (a waiter that leaves
    gives back a hold handed to it by itself), and a Lock's release on its hash
    is refused without a write."""
    from tenure._drivers._hubbook import PassOn
    from tenure._keys import rlock_keys
    from tenure._plans import lock as lock_plans

    lease = RLock(r, "departed", ttl=5).acquire()
    assert lease is not None
    keys = rlock_keys("departed", prefix="tenure:")
    _sync.run(r, PassOn(keys, lease.owner).plan())
    with pytest.raises(WrongTypeError):
        _sync.run(r, lock_plans.pass_on(keys, lease.owner))
    assert r.hgetall(KEY % "departed") == {field(lease.owner): b"1"}
    lease.release()


def test_processes_never_overlap_and_counts_return_to_zero(r: redis.Redis, url: str) -> None:
    processes, sections = 4, 50
    manager = SPAWN.Manager()
    start = manager.Barrier(processes)
    with ProcessPoolExecutor(processes, mp_context=SPAWN) as pool:
        futures = [pool.submit(rlock_worker, url, "mp", sections, start) for _ in range(processes)]
        holds: list[Hold] = [h for f in futures for h in f.result(timeout=120)]
    manager.shutdown()
    assert len(holds) == processes * sections == 200
    check_history(holds)
    assert int(r.get("mp:counter") or 0) == 200  # no lost update
    assert not r.exists(KEY % "mp") and r.zcard(KEY % "mp" + ":waiters") == 0


# --- asyncio ---------------------------------------------------------------


def test_async_basics(server: ServerProcess, r: redis.Redis) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        lock = AsyncRLock(client, "a", ttl=5)
        async with lock as outer:
            async with lock(timeout=1) as inner:
                assert inner.fence == outer.fence
                assert await lock.hold_count() == 2 and await lock.owned()
                await inner.extend(3)
                assert 2.9 < outer.remaining <= 3
            assert await lock.hold_count() == 1 and await lock.locked()
        assert not await lock.locked()
        with pytest.raises(NotOwnedError):
            await lock.release()
        assert "not held here" in repr(lock)
        await client.aclose()

    asyncio.run(main())


def test_async_two_tasks_sharing_one_rlock_are_two_owners(
    server: ServerProcess, r: redis.Redis
) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        lock = AsyncRLock(client, "tasks", ttl=5)
        a_holds = asyncio.Event()
        b_waits = asyncio.Event()

        async def task_a() -> int:
            outer = await lock.acquire()
            inner = await lock.acquire()
            assert outer is not None and inner is not None and inner.fence == outer.fence
            a_holds.set()
            await b_waits.wait()
            await asyncio.sleep(0.1)
            await inner.release()
            await asyncio.sleep(0.1)
            assert await lock.hold_count() == 1  # B still waits
            await lock.release()
            assert await lock.hold_count() == 0
            with pytest.raises(NotOwnedError):
                await lock.release()
            return outer.fence

        async def task_b() -> int:
            await a_holds.wait()
            assert await lock.acquire(blocking=False) is None
            assert await lock.hold_count() == 0
            with pytest.raises(NotOwnedError):
                await lock.release()  # A's leases are not B's
            b_waits.set()
            lease = await lock.acquire(timeout=3)
            assert lease is not None
            assert await lock.hold_count() == 1
            await lease.release()
            return lease.fence

        fence_a, fence_b = await asyncio.gather(task_a(), task_b())
        assert fence_b > fence_a  # handed from A to B
        assert not await lock.locked()
        await client.aclose()

    asyncio.run(main())


def test_async_cancelled_waiter_leaves_no_trace(server: ServerProcess, r: redis.Redis) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        lock = AsyncRLock(client, "cancel", ttl=5)
        lease = await lock.acquire()
        assert lease is not None
        waiter = asyncio.create_task(lock.acquire())
        await asyncio.sleep(0.2)
        assert await client.zcard(KEY % "cancel" + ":waiters") == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert await client.zcard(KEY % "cancel" + ":waiters") == 0
        await lease.release()
        assert not await lock.locked()  # nobody to hand it to
        await client.aclose()

    asyncio.run(main())


def test_async_tasks_never_overlap(r: redis.Redis, url: str) -> None:
    holds = async_rlock_worker(url, "atasks", tasks=100, sections=2)
    assert len(holds) == 200
    check_history(holds)
    assert int(r.get("atasks:counter") or 0) == 200
    assert not r.exists(KEY % "atasks")


def test_sync_threads_and_async_tasks_share_one_name(r: redis.Redis, url: str) -> None:
    """Threads of this process and asyncio tasks of another thread's loop take the
    same RLock name: one history, no overlap, no lost update."""
    holds: list[Hold] = []

    def threads() -> None:
        lock = RLock(redis.Redis.from_url(url), "mixed", ttl=10)
        for _ in range(30):
            with lock as outer, lock:
                acquired = time.monotonic()
                value = int(r.get("mixed:counter") or 0)
                r.set("mixed:counter", value + 1)
                released = time.monotonic()
            holds.append((acquired, released, outer.fence))

    workers = [threading.Thread(target=threads) for _ in range(2)]
    for w in workers:
        w.start()
    holds += async_rlock_worker(url, "mixed", tasks=10, sections=3)
    for w in workers:
        w.join(timeout=60)
    assert len(holds) == 2 * 30 + 30
    check_history(holds)
    assert int(r.get("mixed:counter") or 0) == 90


def test_killed_holder_frees_the_lock_after_its_ttl(url: str) -> None:
    acquired = SPAWN.Queue()
    holder = SPAWN.Process(target=renewing_rlock_holder, args=(url, "k9", 0.8, acquired))
    holder.start()
    try:
        fence = acquired.get(timeout=30)
        time.sleep(1.0)  # renewed past its first ttl, held two levels deep
        assert holder.pid is not None
        os.kill(holder.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        lease = RLock(redis.Redis.from_url(url), "k9").acquire(timeout=5)
        waited = time.monotonic() - killed_at
    finally:
        holder.join(timeout=10)
    assert lease is not None and lease.fence > fence
    assert waited < 0.8 + 0.3, f"free only {waited:.2f}s after the kill"
    lease.release()


def test_lock_delay_keeps_a_dead_holders_name_unavailable(r: redis.Redis) -> None:
    lock = RLock(r, "rdelay", ttl=0.3, lock_delay=0.5)
    dead = lock.acquire()  # never released: its holder "dies"
    assert dead is not None and lock.acquire() is not None  # a re-entry keeps the guard
    taken_at = time.monotonic()
    got: list[Any] = []

    def other_owner() -> None:
        got.append(lock.acquire(blocking=False))
        got.append(lock.acquire(timeout=3))
        got.append(time.monotonic() - taken_at)

    time.sleep(0.4)  # the lease is over in Redis; the delay is not
    t = threading.Thread(target=other_owner)
    t.start()
    t.join(timeout=10)
    refused, lease, waited = got
    assert refused is None and lease is not None and lease.fence > dead.fence
    assert 0.75 <= waited < 1.3, f"free {waited:.2f}s after the dead holder's acquire"
    lease.release()
    # a clean release frees the name at once
    t = threading.Thread(target=lambda: got.append(lock.acquire(blocking=False)))
    t.start()
    t.join(timeout=10)
    assert got[-1] is not None
    got[-1].release()


@pytest.mark.parametrize("blocking", [True, False])
def test_an_interrupted_first_attempt_is_undone_only_if_applied(
    r: redis.Redis, url: str, blocking: bool
) -> None:
    """KeyboardInterrupt while an acquire's reply is due (Redis counted it):
    the count it added is taken back, so the owner's next acquire and release
    leave the lock free (before, the interrupted level stayed: the lock was
    held until its lease ran out). A re-entry interrupted the same way takes
    back its level only, never the one held before; an acquire interrupted
    before it was sent takes back nothing."""
    client = redis.Redis.from_url(url)
    client.connection_pool.connection_class = InterruptedCall
    lock = RLock(client, "undo", ttl=30)
    warm = lock.acquire()
    assert warm is not None
    warm.release()
    InterruptedCall.armed = "reply"
    with pytest.raises(KeyboardInterrupt):
        lock.acquire(blocking=blocking)
    assert not r.exists(KEY % "undo")  # taken back
    lease = lock.acquire(blocking=False)
    assert lease is not None and lease.fence > warm.fence
    InterruptedCall.armed = "reply"
    with pytest.raises(KeyboardInterrupt):
        lock.acquire(blocking=blocking)  # a re-entry, applied: 2, then back to 1
    assert r.hgetall(KEY % "undo") == {field(lease.owner): b"1"}
    InterruptedCall.armed = "send"
    with pytest.raises(KeyboardInterrupt):
        lock.acquire(blocking=blocking)  # never sent: the hold of 1 stays
    assert r.hgetall(KEY % "undo") == {field(lease.owner): b"1"}
    assert in_thread(lambda: RLock(r, "undo").acquire(blocking=False)) is None
    lease.release()
    assert not r.exists(KEY % "undo")

    def take_and_release() -> int:
        other = RLock(r, "undo").acquire(blocking=False)
        assert other is not None
        other.release()
        return other.fence

    assert in_thread(take_and_release) > lease.fence
    client.close()
