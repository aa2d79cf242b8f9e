"""Semaphore and AsyncSemaphore against a real server."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, cast

import pytest
import redis
import redis.asyncio
from _workers import (
    Span,
    async_semaphore_worker,
    check_at_most,
    semaphore_holder_until_killed,
    semaphore_waiter_until_killed,
    semaphore_worker,
)

from tenure import (
    AcquireTimeout,
    AsyncSemaphore,
    InvalidArgument,
    LockLostError,
    NotOwnedError,
    Semaphore,
    SemaphoreHolder,
    SemaphoreInfo,
    SemaphoreLease,
    WrongTypeError,
)
from tenure._label import default_label
from tenure._server import free_port

HOLDERS = "tenure:{%s}:semaphore"
SPAWN = multiprocessing.get_context("spawn")


def in_thread(fn: Any) -> Any:
    """Run ``fn`` in another thread (another owner) and return its result or exception."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out[0]


def background(fn: Any) -> tuple[threading.Thread, list[Any]]:
    """Start ``fn`` in a thread; its result (or exception) lands in the list."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def until(condition: Any, timeout: float = 5.0) -> None:
    """Wait (in the test, not in tenure) until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_acquire_release_permits_and_fences(r: redis.Redis) -> None:
    sem = Semaphore(r, "pool", 3, ttl=5)
    assert sem.available() == 3 and sem.name == "pool" and sem.permits == 3 and sem.ttl == 5
    a = sem.acquire()
    b = sem.acquire(2)
    assert isinstance(a, SemaphoreLease) and isinstance(b, SemaphoreLease)
    assert a.permits == 1 and b.permits == 2 and a.name == "pool" and a.ttl == 5
    assert b.fence > a.fence and a.owner != b.owner and len(a.owner.split(":")[-1]) >= 32
    assert a.valid and 4.9 < a.remaining <= 5
    assert sem.available() == 0 and sem.acquire(blocking=False) is None
    members = {m.decode() for m in cast(list[bytes], r.zrange(HOLDERS % "pool", 0, -1))}
    assert members == {f"{a.owner}#1", f"{b.owner}#1", f"{b.owner}#2"}
    assert int(r.get(HOLDERS % "pool" + ":permits") or 0) == 3
    assert 4900 < r.pttl(HOLDERS % "pool") <= 5000  # the holders key ends with the last lease
    b.release()
    assert sem.available() == 2 and not b.valid and a.valid
    c = sem.acquire(2)
    assert c is not None and c.fence > b.fence
    a.release()
    c.release()
    assert sem.available() == 3 and not r.exists(HOLDERS % "pool")


def test_extend_and_not_owned(r: redis.Redis) -> None:
    sem = Semaphore(r, "ext", 2, ttl=1)
    lease = sem.acquire(2)
    assert lease is not None
    lease.extend(5)
    assert lease.ttl == 5 and lease.remaining > 4.5
    first, second = (r.zscore(HOLDERS % "ext", f"{lease.owner}#{i}") for i in (1, 2))
    assert first is not None and first == second  # both permits of the lease move together
    assert 4900 < r.pttl(HOLDERS % "ext") <= 5000
    lease.extend()  # its ttl (now 5)
    with pytest.raises(InvalidArgument, match="seconds must be > 0"):
        lease.extend(0)
    assert lease.valid
    lease.release()
    with pytest.raises(NotOwnedError, match="already released"):
        lease.release()
    with pytest.raises(NotOwnedError, match="already released"):
        lease.extend()
    with pytest.raises(NotOwnedError, match="no permits held by this thread"):
        sem.release()


def test_expired_permits_come_back_and_cannot_be_released(r: redis.Redis) -> None:
    sem = Semaphore(r, "exp", 2, ttl=0.2)
    a, b = sem.acquire(), sem.acquire()
    assert a is not None and b is not None and sem.available() == 0
    time.sleep(0.25)
    assert not a.valid and sem.available() == 2 and sem.info().holders == ()
    c = sem.acquire(2)  # the expired permits are free again
    assert c is not None and c.fence > b.fence
    assert a.lost.is_set() and b.lost.is_set()  # the watchdog saw their deadline pass
    with pytest.raises(LockLostError, match=rf"fence {a.fence}\).*deadline passed"):
        a.release()
    with pytest.raises(LockLostError, match="deadline passed"):
        b.extend(5)
    assert c.valid and sem.available() == 0  # the stale calls took nothing from c
    c.release()


def test_expired_permits_return_while_other_leases_are_held(r: redis.Redis) -> None:
    sem = Semaphore(r, "mix", 3, ttl=10)
    live = sem.acquire()
    short = Semaphore(r, "mix", 3, ttl=0.3).acquire(2)
    assert live is not None and short is not None
    t, got = background(lambda: sem.acquire(2, timeout=5))  # waits for the short lease
    time.sleep(0.1)
    assert not got and sem.info().waiters == 1
    t.join()
    lease = got[0]
    assert isinstance(lease, SemaphoreLease)
    assert {h.token for h in sem.info().holders} == {live.owner, lease.owner}
    with pytest.raises(NotOwnedError):
        short.release()
    lease.release()
    live.release()


def test_waiter_is_handed_the_permits_by_the_release(r: redis.Redis) -> None:
    sem = Semaphore(r, "hand", 2, ttl=10)
    a, b = sem.acquire(), sem.acquire()
    assert a is not None and b is not None
    t, got = background(lambda: sem.acquire(2, timeout=5))
    until(lambda: sem.info().waiters == 1)
    a.release()
    time.sleep(0.1)
    assert not got and sem.available() == 1  # one free permit: the waiter needs two
    assert in_thread(lambda: sem.acquire(blocking=False)) is None  # no barging past the queue
    released_at = time.monotonic()
    b.release()
    t.join()
    lease = got[0]
    assert isinstance(lease, SemaphoreLease) and lease.permits == 2 and lease.fence > b.fence
    assert time.monotonic() - released_at < 1.0  # by the release, long before any lease ran out
    assert sem.available() == 0 and sem.info().waiters == 0
    lease.release()


def test_a_large_request_is_not_starved_by_small_ones(r: redis.Redis, url: str) -> None:
    """FIFO across processes (separate clients have separate hubs and queue entries)."""
    sem = Semaphore(r, "fifo", 2, ttl=10)
    held = [sem.acquire(), sem.acquire()]
    big_client, small_client = redis.Redis.from_url(url), redis.Redis.from_url(url)
    big_t, big = background(lambda: Semaphore(big_client, "fifo", 2).acquire(2, timeout=5))
    until(lambda: sem.info().waiters == 1)
    small_t, small = background(lambda: Semaphore(small_client, "fifo", 2).acquire(1, timeout=5))
    until(lambda: sem.info().waiters == 2)
    lease = held.pop()
    assert lease is not None
    lease.release()
    time.sleep(0.1)
    assert not big and not small  # the free permit waits for the big request at the head
    lease = held.pop()
    assert lease is not None
    lease.release()
    big_t.join()
    assert isinstance(big[0], SemaphoreLease) and not small
    big[0].release()
    small_t.join()
    assert isinstance(small[0], SemaphoreLease) and small[0].fence > big[0].fence
    small[0].release()
    big_client.close()
    small_client.close()


def test_non_blocking_timeout_and_context_managers(r: redis.Redis) -> None:
    sem = Semaphore(r, "ctx", 2, ttl=5)
    with sem as outer:
        assert isinstance(outer, SemaphoreLease) and sem.available() == 1
        with sem(1, timeout=1) as inner:
            assert inner.permits == 1 and sem.available() == 0
            started = time.monotonic()
            error = in_thread(lambda: sem(1, timeout=0.2).__enter__())
            assert isinstance(error, AcquireTimeout) and "'ctx' within 0.2s" in str(error)
            assert time.monotonic() - started >= 0.2
        assert sem.available() == 1
    assert sem.available() == 2
    with sem(2) as both:
        assert both.permits == 2
    with sem as entered:  # the exit gives back the lease its entry took, not the latest
        kept = sem.acquire()
        assert kept is not None
    assert not entered.valid and kept.valid
    kept.release()
    lease = sem.acquire()
    assert lease is not None
    with lease:  # a lease is a context manager too
        assert sem.available() == 1
    assert sem.available() == 2


def test_permit_count_is_stored_and_checked(r: redis.Redis) -> None:
    first = Semaphore(r, "count", 2, ttl=5)
    lease = first.acquire()
    assert lease is not None
    other = Semaphore(r, "count", 3)
    with pytest.raises(InvalidArgument, match=r"'count' has 2 permits in Redis.*given 3"):
        other.acquire()
    (holder,) = first.info().holders
    label = default_label()
    assert holder == SemaphoreHolder(lease.owner, 1, holder.ttl, label=label)
    assert 4.9 < holder.ttl <= 5
    other.set_permits(3)  # the explicit change
    assert other.permits == 3 and first.available() == 2
    extra = other.acquire(2)
    assert extra is not None
    # The first object was checked at its first acquire; it follows the stored count now.
    assert first.acquire(blocking=False) is None
    lease.release()
    again = first.acquire()
    assert again is not None
    # A count shrunk below what an object asks for is refused by Redis.
    other.set_permits(1)
    with pytest.raises(InvalidArgument, match=r"now has 1 permits.*fewer than the 2 asked"):
        first.acquire(2)
    extra.release()
    again.release()


def test_set_permits_keeps_held_permits_and_hands_new_ones_on(r: redis.Redis) -> None:
    sem = Semaphore(r, "resize", 3, ttl=10)
    leases = [sem.acquire() for _ in range(3)]
    sem.set_permits(1)  # shrinking revokes nothing
    info = sem.info()
    assert info.permits == 1 and info.available == 0 and len(info.holders) == 3
    assert all(lease is not None and lease.valid for lease in leases)
    for lease in leases[:2]:
        assert lease is not None
        lease.release()
    assert sem.available() == 0  # held (1) is not below the new count (1)
    t, got = background(lambda: sem.acquire(timeout=5))
    until(lambda: sem.info().waiters == 1)
    grown_at = time.monotonic()
    sem.set_permits(2)  # the new permit goes to the waiter at once
    t.join()
    assert isinstance(got[0], SemaphoreLease) and time.monotonic() - grown_at < 1.0
    got[0].release()
    last = leases[2]
    assert last is not None
    last.release()
    assert sem.available() == 2


def test_a_waiter_asking_more_than_a_shrunk_count_is_told_at_once(r: redis.Redis, url: str) -> None:
    # A waiter whose request no longer fits the count must hear so when the count
    # shrinks, not when its timer (the holders' leases, 30 s here) runs out: before,
    # the queue dropped it without a word, or kept it behind the head.
    sem = Semaphore(r, "shrink", 3, ttl=30)
    held = sem.acquire(2)
    assert held is not None
    clients = [redis.Redis.from_url(url) for _ in range(2)]
    head_t, head = background(lambda: Semaphore(clients[0], "shrink", 3).acquire(2, timeout=4))
    until(lambda: sem.info().waiters == 1)
    big_t, big = background(lambda: Semaphore(clients[1], "shrink", 3).acquire(3, timeout=4))
    until(lambda: sem.info().waiters == 2)
    shrunk_at = time.monotonic()
    sem.set_permits(2)  # 2 held, so nothing is free: only the big request is refused
    big_t.join()
    assert isinstance(big[0], InvalidArgument) and "2 permits in Redis" in str(big[0])
    assert time.monotonic() - shrunk_at < 1.0
    assert not head and sem.info().waiters == 1  # the head still waits, untouched
    held.release()  # the head's 2 permits fit the new count: handed on
    head_t.join()
    assert isinstance(head[0], SemaphoreLease) and head[0].permits == 2
    assert time.monotonic() - shrunk_at < 1.5
    head[0].release()
    # The same with permits free: the one asking for more than the count is dropped
    # from the queue's head, and told.
    sem.set_permits(3)
    held = sem.acquire(1)
    assert held is not None
    big_t, big = background(lambda: Semaphore(clients[1], "shrink", 3).acquire(3, timeout=4))
    until(lambda: sem.info().waiters == 1)
    shrunk_at = time.monotonic()
    sem.set_permits(2)
    big_t.join()
    assert isinstance(big[0], InvalidArgument) and time.monotonic() - shrunk_at < 1.0
    assert sem.info().waiters == 0 and sem.available() == 1
    held.release()
    for client in clients:
        client.close()


def test_info_repr_and_holders(r: redis.Redis) -> None:
    sem = Semaphore(r, "info", 3, ttl=5)
    assert sem.info() == SemaphoreInfo("info", 3, 3, (), 0)  # nothing stored yet
    assert repr(sem) == "<Semaphore 'info' permits=3 ttl=5s none held here>"
    a = sem.acquire(2)
    b = sem.acquire()
    assert a is not None and b is not None
    info = sem.info()
    assert info.name == "info" and info.permits == 3 and info.available == 0 and info.waiters == 0
    assert {h.token: h.permits for h in info.holders} == {a.owner: 2, b.owner: 1}
    assert all(4.5 < h.ttl <= 5 for h in info.holders)
    assert repr(sem) == "<Semaphore 'info' permits=3 ttl=5s held here: 3 permits in 2 leases>"
    assert repr(a).startswith(f"<SemaphoreLease 'info' fence={a.fence} valid ")
    assert repr(a).endswith(" permits=2>")
    sem.release()  # the caller's latest lease: b
    assert not b.valid and a.valid and sem.available() == 1
    a.release()
    assert "released" in repr(a) and "none held here" in repr(sem)


def test_async_semaphore(url: str) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        sem = AsyncSemaphore(client, "apool", 2, ttl=5)
        async with sem as lease:
            assert lease.permits == 1 and await sem.available() == 1
            async with sem(1, timeout=1) as inner:
                assert inner.fence > lease.fence and await sem.available() == 0
                assert await sem.acquire(blocking=False) is None
                waiter = asyncio.create_task(sem.acquire(timeout=5))
                await asyncio.sleep(0.1)
                assert (await sem.info()).waiters == 1
            handed = await waiter  # the inner release handed its permit to the waiting task
            assert handed is not None and handed.fence > inner.fence
            await handed.extend(3)
            assert 2.5 < handed.remaining <= 3
            await handed.release()
            with pytest.raises(NotOwnedError):
                await handed.extend()
        assert await sem.available() == 2
        assert repr(sem) == "<AsyncSemaphore 'apool' permits=2 ttl=5s none held here>"
        other = AsyncSemaphore(client, "apool", 4)
        with pytest.raises(InvalidArgument, match="has 2 permits in Redis"):
            await other.acquire()
        await other.set_permits(4)
        leases = [await other.acquire(2), await other.acquire(2)]
        assert all(leases) and await other.available() == 0
        with pytest.raises(AcquireTimeout):
            async with other(timeout=0.05):
                pass
        for held in leases:
            assert held is not None
            await held.release()
        with pytest.raises(NotOwnedError, match="no permits held"):
            await other.release()
        await client.aclose()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("", 2), {}, "name must not be empty"),
        ((b"x", 2), {}, "name must be a str"),
        (("x", 0), {}, r"permits must be an int from 1 to 2\*\*53 - 1, not 0"),
        (("x", -3), {}, r"permits must be an int from 1 to 2\*\*53 - 1"),
        (("x", True), {}, r"permits must be an int from 1 to 2\*\*53 - 1, not True"),
        (("x", 2.0), {}, r"permits must be an int from 1 to 2\*\*53 - 1, not 2.0"),
        (("x", "2"), {}, r"permits must be an int from 1 to 2\*\*53 - 1"),
        (("x", 2), {"ttl": 0}, "ttl must be > 0"),
        (("x", 2), {"ttl": "5"}, "ttl must be a number"),
        (("x", 2), {"prefix": None}, "prefix must be a str"),
    ],
)
def test_bad_constructor_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(InvalidArgument, match=match):
        Semaphore(redis.Redis(port=free_port()), *args, **kwargs)
    with pytest.raises(InvalidArgument, match=match):
        AsyncSemaphore(redis.asyncio.Redis(port=free_port()), *args, **kwargs)


@pytest.mark.parametrize(
    ("method", "args", "match"),
    [
        ("acquire", (0,), "n must be an int from 1 to 10000, not 0"),
        ("acquire", (3,), "n=3 is more than the semaphore's 2 permits"),
        ("acquire", (True,), "n must be an int from 1 to 10000, not True"),
        ("acquire", (1, "yes"), "blocking must be True or False"),
        ("acquire", (1, True, -1), "timeout must be >= 0"),
        ("acquire", (1, False, 1), "with blocking=False"),
        ("set_permits", (0,), r"permits must be an int from 1 to 2\*\*53 - 1, not 0"),
        ("set_permits", ("3",), r"permits must be an int from 1 to 2\*\*53 - 1, not '3'"),
    ],
)
def test_bad_call_arguments_do_no_io(method: str, args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):  # any I/O would raise ConnectionError
        getattr(Semaphore(redis.Redis(port=free_port()), "x", 2), method)(*args)

    async def main() -> None:
        with pytest.raises(InvalidArgument, match=match):
            await getattr(AsyncSemaphore(redis.asyncio.Redis(port=free_port()), "x", 2), method)(
                *args
            )
        with pytest.raises(InvalidArgument, match="n=5 is more"):
            async with AsyncSemaphore(redis.asyncio.Redis(port=free_port()), "x", 2)(5):
                pass

    asyncio.run(main())


def test_wrong_type_keys_are_named_and_nothing_is_written(r: redis.Redis) -> None:
    r.set(HOLDERS % "s", "a string")
    sem = Semaphore(r, "s", 2)
    for call in (sem.acquire, sem.available, lambda: sem.set_permits(3)):
        with pytest.raises(WrongTypeError, match=r"'tenure:\{s\}:semaphore'"):
            call()
    assert r.get(HOLDERS % "s") == b"a string" and not r.exists(HOLDERS % "s" + ":permits")
    r.set(HOLDERS % "p" + ":permits", "many")
    with pytest.raises(WrongTypeError, match=r"'tenure:\{p\}:semaphore:permits'"):
        Semaphore(r, "p", 2).acquire()
    assert not r.exists(HOLDERS % "p")


def test_an_acquire_renews_the_permit_count(r: redis.Redis) -> None:
    """Every acquire keeps the permit count 7 days more: the count as the
    caller gives it (its expiry renewed), or as another writing stored it
    (written again as the caller would)."""
    from tenure._plans.semaphore import PERMITS_KEEP_MS

    permits = HOLDERS % "renew" + ":permits"
    sem = Semaphore(r, "renew", 2, ttl=5)
    for stored in ("2", "02", "2.0"):
        r.set(permits, stored, px=60_000)
        lease = sem.acquire()
        assert lease is not None
        assert r.get(permits) == b"2"
        assert PERMITS_KEEP_MS - 5_000 < r.pttl(permits) <= PERMITS_KEEP_MS
        lease.release()


@pytest.mark.parametrize("waiters", [2, 6])
def test_script_calls_per_hand_off_do_not_grow_with_waiters(
    r: redis.Redis, url: str, waiters: int
) -> None:
    """N waiters (separate clients: separate hubs, as separate processes would be)
    take the one permit in turn. A release hands it straight to the first waiter,
    so each waiter makes 4 script calls whatever N is (a lone attempt, the
    attempt that queues it, the watchdog's extend of the claim window it was
    handed, its release), where waking every waiter to retry would add about
    N/2 each. (The extend is skipped when the hold ends before it is sent.)"""
    sem = Semaphore(r, "flat", 1, ttl=10)
    first = sem.acquire()
    assert first is not None
    clients = [redis.Redis.from_url(url) for _ in range(waiters)]
    r.config_resetstat()

    def take(client: redis.Redis) -> None:
        lease = Semaphore(client, "flat", 1, ttl=10).acquire(timeout=10)
        assert lease is not None
        time.sleep(0.01)
        lease.release()

    threads = [threading.Thread(target=take, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    until(lambda: r.zcard(HOLDERS % "flat" + ":waiters") == waiters)
    first.release()
    for t in threads:
        t.join()
    calls = r.info("commandstats")["cmdstat_evalsha"]["calls"]
    assert 3 * waiters + 1 <= calls <= 4 * waiters + 1  # + the first holder's release
    assert sem.available() == 1
    for c in clients:
        c.close()


# --- concurrency: histories checked -------------------------------------------


def test_checker_catches_too_many_holders() -> None:
    with pytest.raises(AssertionError, match="3 holders at once"):
        check_at_most([(0.0, 3.0, 1), (1.0, 2.0, 2), (1.5, 2.5, 2)], 2)
    with pytest.raises(AssertionError, match="saw 3 holders in Redis"):
        check_at_most([(0.0, 1.0, 3)], 2)
    assert check_at_most([(0.0, 2.0, 1), (1.0, 3.0, 2), (2.0, 4.0, 2)], 2) == 2


def test_processes_never_hold_more_than_the_permits(r: redis.Redis, url: str) -> None:
    processes, sections, permits = 4, 25, 2
    manager = SPAWN.Manager()
    start = manager.Barrier(processes)
    with ProcessPoolExecutor(processes, mp_context=SPAWN) as pool:
        futures = [
            pool.submit(semaphore_worker, url, "mp", permits, sections, start, 0.005)
            for _ in range(processes)
        ]
        spans: list[Span] = [s for f in futures for s in f.result(timeout=60)]
    manager.shutdown()
    assert len(spans) == processes * sections
    assert check_at_most(spans, permits) == permits  # and the permits were shared, not idle
    sem = Semaphore(r, "mp", permits)
    assert sem.available() == permits and sem.info().waiters == 0
    assert not r.exists(HOLDERS % "mp") and int(r.get("mp:holders") or 0) == 0


def test_a_killed_holders_permit_returns_after_its_ttl(r: redis.Redis, url: str) -> None:
    ttl = 1.0
    sem = Semaphore(r, "crash", 1, ttl=10)
    out = SPAWN.Queue()
    holder = SPAWN.Process(target=semaphore_holder_until_killed, args=(url, "crash", 1, ttl, out))
    holder.start()
    token, acquired_at = out.get(timeout=30)
    assert holder.pid is not None
    os.kill(holder.pid, signal.SIGKILL)
    holder.join()
    assert holder.exitcode == -signal.SIGKILL
    assert [h.token for h in sem.info().holders] == [token]  # still held: nobody released it
    lease = sem.acquire(timeout=ttl + 5)  # waits for the dead holder's lease, no longer
    returned_at = time.monotonic()
    assert lease is not None
    assert acquired_at + ttl - 0.05 <= returned_at <= acquired_at + ttl + 0.5
    assert [h.token for h in sem.info().holders] == [lease.owner]
    lease.release()


def test_a_killed_waiter_at_the_head_does_not_block_requests_that_fit(
    r: redis.Redis, url: str
) -> None:
    # A dead waiter asking for more permits than are free sat at the queue's head for
    # as long as the permits stayed held (its queue entry never expired while others
    # queued behind it): nobody got the free permits. A live one keeps its turn.
    sem = Semaphore(r, "dead-head", 3, ttl=30)
    held = sem.acquire(1)
    assert held is not None
    waiter = SPAWN.Process(target=semaphore_waiter_until_killed, args=(url, "dead-head", 3, 3))
    waiter.start()
    until(lambda: sem.info().waiters == 1, timeout=30)
    assert waiter.pid is not None
    os.kill(waiter.pid, signal.SIGKILL)
    waiter.join()
    killed_at = time.monotonic()
    other = redis.Redis.from_url(url)
    small = Semaphore(other, "dead-head", 3).acquire(2, timeout=3)
    assert small is not None and time.monotonic() - killed_at < 1.0
    assert sem.info().waiters == 0 and sem.available() == 0
    small.release()
    # A live waiter that does not fit keeps the head: no barging past it.
    big_t, big = background(lambda: Semaphore(other, "dead-head", 3).acquire(3, timeout=5))
    until(lambda: sem.info().waiters == 1)
    assert sem.acquire(blocking=False) is None and sem.available() == 2
    held.release()
    big_t.join()
    assert isinstance(big[0], SemaphoreLease) and big[0].permits == 3
    big[0].release()
    other.close()


def test_hundred_tasks_on_one_async_semaphore(r: redis.Redis, url: str) -> None:
    spans = async_semaphore_worker(url, "tasks", 3, tasks=100, sections=3, hold=0.001)
    assert len(spans) == 300
    check_at_most(spans, 3)
    assert Semaphore(r, "tasks", 3).available() == 3 and int(r.get("tasks:holders") or 0) == 0


def test_sync_threads_and_async_tasks_together(r: redis.Redis, url: str) -> None:
    permits, spans = 2, []
    async_thread, async_out = background(
        lambda: async_semaphore_worker(url, "mixed", permits, tasks=10, sections=4, hold=0.002)
    )
    start = threading.Barrier(3)
    threads = [
        background(lambda: semaphore_worker(url, "mixed", permits, 15, start, 0.002))
        for _ in range(3)
    ]
    for t, out in [(async_thread, async_out), *threads]:
        t.join(timeout=60)
        assert out and isinstance(out[0], list), out
        spans += out[0]
    assert len(spans) == 40 + 45
    check_at_most(spans, permits)
    assert Semaphore(r, "mixed", permits).available() == permits
