"""The documented limits (``tenure._units``: Limits) on real servers.

Numbers out of range and names that can't be encoded are refused with
``InvalidArgument`` before anything is sent (the server stays empty, and a
primitive in use keeps working); the largest values work end to end, exactly;
text output survives names with control characters; primitive objects refuse
to be pickled or copied with a message that says why.
"""

from __future__ import annotations

import copy
import json
import pickle
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
import redis.asyncio

from tenure import (
    AsyncCountDownLatch,
    AsyncFairLock,
    AsyncFencedKey,
    AsyncLock,
    AsyncMultiLock,
    AsyncReadWriteLock,
    AsyncRLock,
    AsyncSemaphore,
    CountDownLatch,
    FairLock,
    FencedKey,
    InvalidArgument,
    Lock,
    MultiLock,
    ReadWriteLock,
    RLock,
    Semaphore,
)
from tenure._cli import main
from tenure._label import holder_text
from tenure._units import MAX_COUNT, MAX_LEASE_PERMITS, MAX_SECONDS, MIN_TTL

#: Lease lengths and durations out of range, each with what the message shows.
BAD_TTLS = [9.3e15, MAX_SECONDS + 1, 1e-9, MIN_TTL / 2, float("nan"), float("inf"), True, 10**400]

#: Counts out of range.
BAD_COUNTS = [10**20, 2**53, 2**53 + 1, 0, -1, True, 2.0]

#: A name with a lone surrogate (as ``os.fsdecode`` makes of an undecodable byte).
SURROGATE = "orders\udc80"


def _shown(value: object) -> str:
    """A pattern for the start of ``value``'s repr, as a message shows it."""
    return re.escape(repr(value)[:20])


def test_latch_counts_out_of_range_are_refused_and_the_latch_keeps_working(
    r: redis.Redis,
) -> None:
    latch = CountDownLatch(r, "job")
    for bad in BAD_COUNTS:
        with pytest.raises(InvalidArgument, match=r"count must be an int from 1 to 2\*\*53 - 1"):
            latch.try_set_count(bad)  # type: ignore[arg-type]
    assert r.dbsize() == 0  # nothing sent
    assert latch.count() == 0
    assert latch.try_set_count(2)
    assert latch.count_down() == 1
    assert latch.count() == 1
    assert latch.count_down() == 0
    assert latch.wait(timeout=0)


def test_a_latch_at_the_largest_count_counts_exactly(r: redis.Redis) -> None:
    latch = CountDownLatch(r, "big")
    with pytest.raises(InvalidArgument, match="not 9007199254740992"):
        latch.try_set_count(MAX_COUNT + 1)
    assert latch.try_set_count(MAX_COUNT)
    assert latch.count() == MAX_COUNT
    assert latch.info().count == MAX_COUNT
    assert not latch.try_set_count(1)  # busy: it replies with the count, exactly
    assert latch.count_down() == MAX_COUNT - 1
    assert latch.count() == MAX_COUNT - 1
    assert int(r.get("tenure:{big}:latch") or 0) == MAX_COUNT - 1


def test_semaphore_permits_out_of_range_are_refused_before_anything_is_sent(
    r: redis.Redis,
) -> None:
    for bad in BAD_COUNTS:
        with pytest.raises(InvalidArgument, match=r"permits must be an int from 1 to 2\*\*53 - 1"):
            Semaphore(r, "pool", permits=bad)  # type: ignore[arg-type]
    sem = Semaphore(r, "pool", permits=MAX_COUNT, ttl=10)
    for n in (MAX_LEASE_PERMITS + 1, 10**20, 0, True):
        with pytest.raises(InvalidArgument, match=r"n must be an int from 1 to 10000, not"):
            sem.acquire(n)
    with pytest.raises(InvalidArgument, match="permits must be"):
        sem.set_permits(10**20)
    assert r.dbsize() == 0
    lease = sem.acquire()
    assert lease is not None and sem.available() == MAX_COUNT - 1
    lease.release()


def test_a_semaphore_at_the_largest_count_lends_the_most_permits_exactly(
    r: redis.Redis,
) -> None:
    with pytest.raises(InvalidArgument, match="not 9007199254740992"):
        Semaphore(r, "big", permits=MAX_COUNT + 1, ttl=30)
    sem = Semaphore(r, "big", permits=MAX_COUNT, ttl=30)
    with pytest.raises(InvalidArgument, match="not 10001"):
        sem.acquire(MAX_LEASE_PERMITS + 1, blocking=False)
    lease = sem.acquire(MAX_LEASE_PERMITS, blocking=False)
    assert lease is not None and lease.permits == MAX_LEASE_PERMITS
    assert r.get("tenure:{big}:semaphore:permits") == str(MAX_COUNT).encode()
    assert r.zcard("tenure:{big}:semaphore") == MAX_LEASE_PERMITS
    assert sem.available() == MAX_COUNT - MAX_LEASE_PERMITS
    other = Semaphore(r, "big", permits=MAX_COUNT, ttl=30).acquire(MAX_LEASE_PERMITS)
    assert other is not None
    assert sem.available() == MAX_COUNT - 2 * MAX_LEASE_PERMITS
    lease.extend()
    lease.release()
    other.release()
    assert sem.available() == MAX_COUNT
    assert r.zcard("tenure:{big}:semaphore") == 0
    sem.set_permits(MAX_COUNT - 1)
    assert sem.info().permits == MAX_COUNT - 1


MAKERS: list[tuple[str, Callable[..., Any]]] = [
    ("Lock", lambda r, **kw: Lock(r, "res", **kw)),
    ("RLock", lambda r, **kw: RLock(r, "res", **kw)),
    ("FairLock", lambda r, **kw: FairLock(r, "res", **kw)),
    ("ReadWriteLock", lambda r, **kw: ReadWriteLock(r, "res", **kw)),
    ("Semaphore", lambda r, **kw: Semaphore(r, "res", 2, **kw)),
]


@pytest.mark.parametrize(("kind", "make"), MAKERS, ids=[k for k, _ in MAKERS])
def test_durations_out_of_range_are_refused_and_a_held_lease_is_kept(
    r: redis.Redis, kind: str, make: Callable[..., Any]
) -> None:
    for bad in BAD_TTLS:
        with pytest.raises(InvalidArgument, match=rf"ttl must be .*, not {_shown(bad)}"):
            make(r, ttl=bad)
    for what in ("replica_timeout", *(["lock_delay"] if kind != "Semaphore" else [])):
        with pytest.raises(InvalidArgument, match=rf"{what} must be at most 31536000 seconds"):
            make(r, ttl=10, **{what: 9.3e15})
    assert r.dbsize() == 0  # nothing sent
    lock = make(r, ttl=10)
    taker = lock.write if kind == "ReadWriteLock" else lock
    with pytest.raises(InvalidArgument, match="timeout must be at most 31536000 seconds"):
        taker.acquire(timeout=9.3e15)
    assert r.dbsize() == 0
    lease = taker.acquire()
    assert lease is not None
    for bad in BAD_TTLS:
        with pytest.raises(InvalidArgument, match=rf"seconds must be .*, not {_shown(bad)}"):
            lease.extend(bad)
    assert lease.valid and lease.lost.is_set() is False
    lease.extend(5)  # still held: nothing was lost or half-written
    lease.release()


@pytest.mark.parametrize(("kind", "make"), MAKERS, ids=[k for k, _ in MAKERS])
def test_the_longest_ttl_works_end_to_end(
    r: redis.Redis, kind: str, make: Callable[..., Any]
) -> None:
    extra = {"waiter_timeout": MAX_SECONDS} if kind == "FairLock" else {}
    if kind != "Semaphore":
        extra["lock_delay"] = MAX_SECONDS
    with pytest.raises(InvalidArgument, match="ttl must be at most 31536000 seconds"):
        make(r, ttl=MAX_SECONDS + 0.001, **extra)
    lock = make(r, ttl=MAX_SECONDS, **extra)
    taker = lock.write if kind == "ReadWriteLock" else lock
    lease = taker.acquire(timeout=MAX_SECONDS)
    assert lease is not None and lease.valid
    main_key = "tenure:{res}" + ("" if kind == "Lock" else f":{kind.lower()}")
    main_key = main_key.replace("readwritelock", "rwlock").replace("fairlock", "fair")
    year_ms = MAX_SECONDS * 1000
    assert year_ms - 60_000 < r.pttl(main_key) <= year_ms
    assert lease.remaining > MAX_SECONDS * 0.98
    lease.extend(MAX_SECONDS)
    assert year_ms - 60_000 < r.pttl(main_key) <= year_ms
    if kind != "Semaphore":
        delay_key = main_key + ":delay"
        assert year_ms * 2 - 60_000 < r.pttl(delay_key) <= year_ms * 2  # lease + lock-delay
    lease.release()
    assert not r.exists(main_key)
    again = taker.acquire(blocking=False)  # a clean release leaves no lock-delay
    assert again is not None
    again.release()


def test_the_shortest_ttl_is_taken_and_runs_out(r: redis.Redis) -> None:
    with pytest.raises(InvalidArgument, match=r"ttl must be at least 0\.01 seconds"):
        Lock(r, "short", ttl=MIN_TTL * 0.99)
    lock = Lock(r, "short", ttl=MIN_TTL)
    lease = lock.acquire()
    assert lease is not None
    assert r.pttl("tenure:{short}") <= 10  # -2 once it ran out
    with ThreadPoolExecutor(1) as pool:  # another owner
        other = pool.submit(lambda: Lock(r, "short", ttl=1).acquire(timeout=5)).result()
        assert other is not None  # the short lease ran out in Redis
        pool.submit(other.release).result()


def test_a_name_that_cant_be_encoded_is_refused_by_every_constructor(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ar = redis.asyncio.Redis()  # never connects: constructors send nothing
    makers: list[Callable[[], object]] = [
        lambda: Lock(r, SURROGATE),
        lambda: Lock(r, key=SURROGATE),
        lambda: RLock(r, SURROGATE),
        lambda: FairLock(r, SURROGATE),
        lambda: ReadWriteLock(r, SURROGATE),
        lambda: Semaphore(r, SURROGATE, 2),
        lambda: CountDownLatch(r, SURROGATE),
        lambda: FencedKey(r, SURROGATE),
        lambda: AsyncLock(ar, SURROGATE),
        lambda: AsyncRLock(ar, SURROGATE),
        lambda: AsyncFairLock(ar, SURROGATE),
        lambda: AsyncReadWriteLock(ar, SURROGATE),
        lambda: AsyncSemaphore(ar, SURROGATE, 2),
        lambda: AsyncCountDownLatch(ar, SURROGATE),
        lambda: AsyncFencedKey(ar, SURROGATE),
    ]
    for make in makers:
        with pytest.raises(InvalidArgument, match=r"'orders\\udc80' can't be encoded as UTF-8"):
            make()
    with pytest.raises(InvalidArgument, match=r"prefix 'app\\ud800:' can't be encoded"):
        Lock(r, "orders", prefix="app\ud800:")
    for args in (["ls", "--prefix", "app\udcff:"], ["inspect", SURROGATE]):
        assert main(["--url", url, *args]) == 2  # not a traceback from redis-py
        assert "can't be encoded as UTF-8" in capsys.readouterr().err
    assert r.dbsize() == 0


def test_ls_and_inspect_show_names_with_control_characters_one_row_each(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    names = ["line\nbreak", "tab\tbed", "esc\x1b[31m"]
    lock = Lock(r, names[0], ttl=30).acquire()
    sem = Semaphore(r, names[1], 2, ttl=30).acquire()
    assert lock and sem and CountDownLatch(r, names[2]).try_set_count(2)

    assert main(["--url", url, "ls"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 1 + len(names), out  # a header and one row per primitive
    assert "\t" not in out and "\x1b" not in out
    for line, name in zip(lines[1:], sorted(names), strict=True):
        assert repr(name) in line

    assert main(["--url", url, "ls", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sorted(x["name"] for x in data["locks"]) == sorted(names)  # exact

    assert main(["--url", url, "inspect", names[0]]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "Lock 'line\\nbreak' (key 'tenure:{line\\nbreak}')"
    assert "holder   " + holder_text(lock.owner) in out
    lock.release()
    sem.release()


def _objects(r: redis.Redis, ar: redis.asyncio.Redis) -> list[object]:
    rw, arw = ReadWriteLock(r, "p"), AsyncReadWriteLock(ar, "p")
    return [
        Lock(r, "p"),
        RLock(r, "p"),
        FairLock(r, "p"),
        rw,
        rw.read,
        Semaphore(r, "p", 2),
        CountDownLatch(r, "p"),
        MultiLock([Lock(r, "p")]),
        FencedKey(r, "p"),
        AsyncLock(ar, "p"),
        AsyncRLock(ar, "p"),
        AsyncFairLock(ar, "p"),
        arw,
        arw.write,
        AsyncSemaphore(ar, "p", 2),
        AsyncCountDownLatch(ar, "p"),
        AsyncMultiLock([AsyncLock(ar, "p")]),
        AsyncFencedKey(ar, "p"),
    ]


def test_primitives_refuse_to_be_pickled_or_copied_and_say_why(r: redis.Redis) -> None:
    ar = redis.asyncio.Redis()
    for obj in _objects(r, ar):
        kind = type(obj).__name__
        made_from = "key" if "FencedKey" in kind else "name"
        article = "an" if kind.startswith(("A", "RL")) else "a"
        with pytest.raises(
            TypeError,
            match=rf"^{article} {kind} can't be pickled: it holds a client and per-process "
            rf"state; create one in each process from the client and {made_from}$",
        ):
            pickle.dumps(obj)
        for attempt in (copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match=rf"^{article} {kind} can't be copied"):
                attempt(obj)
    with pytest.raises(TypeError, match="a Semaphore can't be pickled"):
        pickle.dumps(Semaphore(r, "p", 2)(1))  # the context manager that takes n permits
    lease = Lock(r, "p", ttl=5).acquire()
    assert lease is not None
    with pytest.raises(TypeError, match=r"^a Lease can't be pickled"):
        pickle.dumps(lease)
    lease.release()


def test_multilock_names_the_kinds_it_takes(r: redis.Redis) -> None:
    with pytest.raises(InvalidArgument) as info:
        MultiLock([Lock(r, "a"), Semaphore(r, "b", 2)])  # type: ignore[list-item]
    assert "locks[1] must be one of Lock, RLock, FairLock, not <Semaphore" in str(info.value)
    with pytest.raises(InvalidArgument, match=r"locks\[0\] must be one of AsyncLock, AsyncRLock"):
        AsyncMultiLock([Lock(r, "a")])  # type: ignore[list-item]
