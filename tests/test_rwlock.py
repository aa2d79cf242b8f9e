"""ReadWriteLock and AsyncReadWriteLock against a real server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
import redis
import redis.asyncio
from _workers import RWHold, check_rw_history

from tenure import (
    AcquireTimeout,
    AdaptiveTTL,
    AsyncReadWriteLock,
    FencedKey,
    InvalidArgument,
    LockLostError,
    LockUpgradeError,
    NotOwnedError,
    ReadWriteHolder,
    ReadWriteLease,
    ReadWriteLock,
    RLock,
    WrongTypeError,
)
from tenure._server import ServerProcess, free_port

KEY = "tenure:{%s}:rwlock"


class Owner:
    """A thread of its own (so another owner), running what it is given."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1)

    def start(self, fn: Callable[[], Any]) -> Future[Any]:
        """Run ``fn`` on this owner's thread; its result comes in the future."""
        return self._pool.submit(fn)

    def run(self, fn: Callable[[], Any], timeout: float = 10) -> Any:
        return self._pool.submit(fn).result(timeout=timeout)


def owners(n: int) -> list[Owner]:
    return [Owner() for _ in range(n)]


def test_many_readers_hold_together_and_a_writer_waits_for_all(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "docs", ttl=5)
    a, b, c, w = owners(4)
    leases = [o.run(rw.read.acquire) for o in (a, b, c)]
    assert all(isinstance(lease, ReadWriteLease) and lease.mode == "read" for lease in leases)
    assert len({lease.fence for lease in leases}) == 1  # the last fence minted, shared
    assert len({lease.owner for lease in leases}) == 3
    assert r.hget(KEY % "docs", "mode") == b"read"
    assert r.zcard(KEY % "docs" + ":holds") == 3  # one expiry per hold
    assert 4900 < r.pttl(KEY % "docs") <= 5000
    assert w.run(lambda: rw.write.acquire(blocking=False)) is None
    got = w.start(lambda: rw.write.acquire(timeout=5))
    time.sleep(0.2)
    for owner, lease in zip((a, b), leases, strict=False):
        owner.run(lease.release)
    assert not got.done()  # one reader left
    released_at = time.monotonic()
    c.run(leases[2].release)
    lease = got.result(timeout=5)
    assert isinstance(lease, ReadWriteLease) and lease.mode == "write"
    assert time.monotonic() - released_at < 1.0  # handed off, not found by a timer
    assert lease.fence > leases[0].fence
    assert r.hget(KEY % "docs", "mode") == b"write"
    w.run(lease.release)
    assert not r.exists(KEY % "docs") and not r.exists(KEY % "docs" + ":holds")


def test_a_writer_excludes_readers_and_writers(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "excl", ttl=5)
    a, b = owners(2)
    lease = a.run(rw.write.acquire)
    assert b.run(lambda: rw.read.acquire(blocking=False)) is None
    assert b.run(lambda: rw.write.acquire(blocking=False)) is None
    assert b.run(lambda: rw.read.acquire(timeout=0.2)) is None
    assert b.run(rw.read.locked) is False and b.run(rw.write.locked) is True
    assert a.run(rw.write.owned) and not b.run(rw.write.owned)
    a.run(lease.release)
    got = b.run(lambda: rw.read.acquire(blocking=False))
    assert got is not None
    b.run(got.release)


def test_both_modes_are_reentrant_and_share_their_hold(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "re", ttl=5)
    w1 = rw.write.acquire()
    w2 = rw.write.acquire(timeout=1)
    assert w1 is not None and w2 is not None and w1.fence == w2.fence and w1 is not w2
    assert rw.write.hold_count() == 2 and rw.read.hold_count() == 0
    w2.release()
    w1.release()
    r1 = rw.read.acquire()
    r2 = rw.read.acquire()
    assert r1 is not None and r2 is not None and r1.fence == r2.fence == w1.fence
    assert rw.read.hold_count() == 2
    field = f"r:{r1.owner}".encode()
    count, fence, _hold = r.hget(KEY % "re", field).decode().split("|")  # type: ignore[union-attr]
    assert (int(count), int(fence)) == (2, r1.fence)
    r1.release()  # release order is free
    assert rw.read.hold_count() == 1 and not r1.valid and r2.valid
    rw.read.release()
    assert rw.read.hold_count() == 0 and not rw.locked()
    with pytest.raises(NotOwnedError, match="read lock is not held by this thread"):
        rw.read.release()


def test_write_then_read_then_downgrade(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "down", ttl=5)
    other_reader, writer = owners(2)
    w = rw.write.acquire()
    assert w is not None
    # a reader queued before the downgrade comes in with it; a writer stays out
    got = other_reader.start(lambda: rw.read.acquire(timeout=5))
    time.sleep(0.2)
    assert rw.info().waiters == 1
    under = rw.read.acquire(blocking=False)  # no wait, whoever waits
    assert under is not None and under.fence == w.fence
    info = rw.info()
    assert info.mode == "write" and {(h.mode, h.count) for h in info.holders} == {
        ("write", 1),
        ("read", 1),
    }
    w.release()  # the downgrade: the read hold stays
    shared = got.result(timeout=5)
    assert shared is not None and shared.fence == w.fence
    assert rw.info().mode == "read" and rw.read.hold_count() == 1 and rw.write.hold_count() == 0
    assert writer.run(lambda: rw.write.acquire(blocking=False)) is None
    under.release()
    other_reader.run(shared.release)
    lease = writer.run(lambda: rw.write.acquire(blocking=False))
    assert lease is not None and lease.fence > w.fence
    writer.run(lease.release)


def test_read_to_write_upgrade_is_refused_at_once(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "up", ttl=5)
    lease = rw.read.acquire()
    assert lease is not None
    started = time.monotonic()
    with pytest.raises(LockUpgradeError, match="release the read lock first"):
        rw.write.acquire()  # would wait for itself: refused instead
    with pytest.raises(RuntimeError):
        rw.write.acquire(timeout=5)
    assert time.monotonic() - started < 1.0
    assert rw.read.hold_count() == 1 and rw.write.hold_count() == 0 and rw.info().waiters == 0
    lease.release()
    w = rw.write.acquire(blocking=False)
    assert w is not None
    # holding both, taking the write lock again is a re-entry, not an upgrade
    r2 = rw.read.acquire()
    w2 = rw.write.acquire()
    assert r2 is not None and w2 is not None and w2.fence == w.fence
    for one in (w2, r2, w):
        one.release()
    assert not rw.locked()


def test_a_waiting_writer_makes_new_readers_queue_behind_it(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "fair", ttl=5)
    first, writer, late = owners(3)
    held = first.run(rw.read.acquire)
    w_got = writer.start(lambda: rw.write.acquire(timeout=5))
    time.sleep(0.2)
    assert rw.info().waiting_writers == 1
    # readers hold, but a writer waits: a new reader does not get in
    assert late.run(lambda: rw.read.acquire(blocking=False)) is None
    r_got = late.start(lambda: rw.read.acquire(timeout=5))
    time.sleep(0.2)
    assert not r_got.done()
    first.run(held.release)
    write = w_got.result(timeout=5)
    time.sleep(0.2)
    assert write is not None and not r_got.done()  # the writer first
    writer.run(write.release)
    reader = r_got.result(timeout=5)
    assert reader is not None and reader.fence == write.fence
    late.run(reader.release)
    assert not rw.locked() and rw.info().waiters == 0


def test_a_reader_that_never_releases_stops_blocking_writers_at_its_ttl(r: redis.Redis) -> None:
    """Each read hold has its own expiry: a dead reader's ends while another
    reader's hold (renewed) goes on, and the writer needs only the live one gone."""
    dead = ReadWriteLock(r, "crash", ttl=0.4)
    live = ReadWriteLock(r, "crash", ttl=5)
    a, b, w = owners(3)
    gone = a.run(dead.read.acquire)  # its owner "dies": never released
    alive = b.run(live.read.acquire)
    assert gone is not None and alive is not None
    got = w.start(lambda: live.write.acquire(timeout=5))
    time.sleep(0.6)  # the dead reader's lease is over; the live one holds
    assert not got.done()
    assert [h.owner for h in live.info().holders] == [alive.owner]
    b.run(alive.release)
    w.run(got.result(timeout=2).release)
    # alone, a dead reader's hold lets a writer in when it ends
    gone = a.run(dead.read.acquire)
    started = time.monotonic()
    lease = w.run(lambda: live.write.acquire(timeout=3))
    assert lease is not None and 0.3 < time.monotonic() - started < 1.0
    assert gone.lost.wait(1)  # its own process knew it lost it, at its deadline
    w.run(lease.release)


def test_not_owned_and_lost_errors(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "errs", ttl=5)
    with pytest.raises(NotOwnedError, match="write lock is not held"):
        rw.write.release()
    with pytest.raises(NotOwnedError, match="read lock is not held"):
        rw.read.extend()
    lease = rw.read.acquire()
    assert lease is not None
    lease.release()
    with pytest.raises(NotOwnedError, match="already released"):
        lease.release()
    with pytest.raises(NotOwnedError, match="already released"):
        lease.extend()
    # a hold taken away in Redis: its release raises LockLostError and sets lost
    lease = rw.write.acquire()
    assert lease is not None
    r.delete(KEY % "errs")
    with pytest.raises(LockLostError, match=r"'errs' \(fence \d+\).*lease lost"):
        lease.release()
    assert lease.lost.is_set() and not lease.valid
    # an expired hold: its extend raises LockLostError too, and a later hold of
    # the same owner is not touched by the earlier lease
    short = ReadWriteLock(r, "errs", ttl=0.2)
    old = short.read.acquire()
    assert old is not None
    time.sleep(0.3)
    new = short.read.acquire()
    assert new is not None and new.fence == old.fence  # no writer came between
    with pytest.raises(LockLostError):
        old.release()
    assert short.read.hold_count() == 1 and new.valid
    new.extend(5)
    new.release()
    with pytest.raises(InvalidArgument, match="seconds must be > 0"):
        (rw.read.acquire() or pytest.fail()).extend(0)
    rw.read.release()


def test_extend_and_reentry_reset_the_whole_hold(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "ext", ttl=1)
    a = rw.read.acquire()
    b = rw.read.acquire()
    assert a is not None and b is not None
    a.extend(5)
    assert 4900 < r.pttl(KEY % "ext") <= 5000
    assert a.remaining > 4.5 and b.remaining > 4.5 and a.ttl == b.ttl == 5
    assert 4.5 < rw.info().holders[0].ttl <= 5
    rw.read.acquire()  # a re-entry resets the hold's lease to the lock's ttl
    assert r.pttl(KEY % "ext") <= 1000 and a.remaining <= 1
    for _ in range(3):
        rw.read.release()
    assert not rw.locked()


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("",), {}, "name must not be empty"),
        ((b"x",), {}, "name must be a str"),
        ((None,), {}, "name must be a str"),
        (("x",), {"ttl": 0}, "ttl must be > 0"),
        (("x",), {"ttl": "30"}, "ttl must be a number"),
        (("x",), {"prefix": None}, "prefix must be a str"),
        (("x",), {"auto_renew": 1}, "auto_renew must be"),
        (("x",), {"on_lost": 3}, "on_lost must be callable"),
        (("x",), {"lock_delay": -1}, "lock_delay must be >= 0"),
        (("x",), {"min_replicas": -1}, "min_replicas must be"),
    ],
)
def test_bad_constructor_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], match: str
) -> None:
    dead = redis.Redis(port=free_port())  # any I/O would raise ConnectionError instead
    with pytest.raises(InvalidArgument, match=match):
        ReadWriteLock(dead, *args, **kwargs)
    with pytest.raises(InvalidArgument, match=match):
        AsyncReadWriteLock(redis.asyncio.Redis(port=free_port()), *args, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"blocking": 1}, "blocking must be True or False"),
        ({"timeout": -1}, "timeout must be >= 0"),
        ({"timeout": "1"}, "timeout must be a number"),
        ({"blocking": False, "timeout": 1}, "can't give a timeout"),
    ],
)
def test_bad_acquire_arguments_do_no_io(kwargs: dict[str, Any], match: str) -> None:
    rw = ReadWriteLock(redis.Redis(port=free_port()), "x")
    for view in (rw.read, rw.write):
        with pytest.raises(InvalidArgument, match=match):
            view.acquire(**kwargs)


def test_wrong_type_key_names_the_key(r: redis.Redis) -> None:
    r.set(KEY % "s", "a string")
    rw = ReadWriteLock(r, "s")
    for call in (rw.read.acquire, rw.write.acquire, rw.info, rw.read.hold_count):
        with pytest.raises(WrongTypeError, match=r"'tenure:\{s\}:rwlock'"):
            call()
    assert r.get(KEY % "s") == b"a string"
    r.lpush(KEY % "h" + ":holds", "x")
    with pytest.raises(WrongTypeError, match="holds"):
        ReadWriteLock(r, "h").read.acquire()
    r.lpush(KEY % "f" + ":fence", "x")
    with pytest.raises(WrongTypeError, match="fence"):
        ReadWriteLock(r, "f").write.acquire()
    assert not r.exists(KEY % "f") and not r.exists(KEY % "h")  # nothing half-written


def test_a_release_with_a_last_op_key_of_another_type_writes_nothing(r: redis.Redis) -> None:
    """The owner's last-op key holding another type: a release (of a sole
    hold at count 1, the quick path's, or of a count of 2) is refused naming
    it, and the hold is still there, its count unchanged."""
    from tenure._keys import rwlock_keys

    keys = rwlock_keys("op-type", prefix="tenure:")
    rw = ReadWriteLock(r, "op-type", ttl=5)
    for view, depth in ((rw.read, 1), (rw.write, 1), (rw.read, 2), (rw.write, 2)):
        leases: list[ReadWriteLease] = []
        for _ in range(depth):
            lease = view.acquire()
            assert lease is not None
            leases.append(lease)
        last_op = keys.last_op(leases[0].owner)
        r.delete(last_op)
        r.rpush(last_op, "x")
        before = r.hgetall(KEY % "op-type")
        with pytest.raises(WrongTypeError, match="op"):
            leases[-1].release()
        assert r.hgetall(KEY % "op-type") == before and r.lrange(last_op, 0, -1) == [b"x"]
        r.delete(last_op)
        for lease in reversed(leases):
            lease.release()
        assert not r.exists(KEY % "op-type")


@pytest.mark.parametrize("stored", ["7.0", "0"])
def test_an_acquire_with_a_last_op_key_of_another_type_writes_nothing(
    r: redis.Redis, stored: str
) -> None:
    """The caller's last-op key holding another type, while another owner
    reads and the fence key holds a number in another form than tenure's
    digits (which the uncontended path leaves to the general one): a read
    acquire is refused naming the key, and the lock's keys keep their values
    and expiry, on every server (Redis 6.2, which checks no command up front,
    included)."""
    from tenure._keys import rwlock_keys

    keys = rwlock_keys("op-type-acq", prefix="tenure:")
    key = KEY % "op-type-acq"
    rw = ReadWriteLock(r, "op-type-acq", ttl=30)
    mine = rw.read.acquire()  # (this thread's owner id)
    assert mine is not None
    mine.release()
    other = Owner()
    held = other.run(ReadWriteLock(r, "op-type-acq", ttl=2).read.acquire)
    assert held is not None
    r.set(key + ":fence", stored, px=60_000)
    last_op = keys.last_op(mine.owner)
    r.delete(last_op)
    r.rpush(last_op, "x")
    before = (r.hgetall(key), r.zrange(key + ":holds", 0, -1, withscores=True))
    with pytest.raises(WrongTypeError, match="op"):
        rw.read.acquire(blocking=False)
    assert (r.hgetall(key), r.zrange(key + ":holds", 0, -1, withscores=True)) == before
    assert 0 < r.pttl(key) <= 2000 and 0 < r.pttl(key + ":holds") <= 2000
    r.delete(last_op)
    other.run(held.release)


def test_a_write_holds_fence_is_the_one_stored_and_replied(r: redis.Redis) -> None:
    """A write hold's fence, minted from the server's clock, is the same
    number in the reply, the fence key and the hold's field, in its shortest
    decimal form, whatever the clock's microseconds (a tenth of these cycles
    read fewer than six digits of them)."""
    rw = ReadWriteLock(r, "digits", ttl=5)
    last = 0
    for _ in range(200):
        lease = rw.write.acquire()
        assert lease is not None
        stored = r.get(KEY % "digits" + ":fence")
        field = r.hget(KEY % "digits", f"w:{lease.owner}").decode()  # type: ignore[union-attr]
        assert stored == str(lease.fence).encode() and field.split("|")[1] == stored.decode()
        assert lease.fence > last
        last = lease.fence
        lease.release()


@pytest.mark.parametrize("stored", ["7.0", "1e3", " 7", "0x10", "1e2", "-5"])
@pytest.mark.parametrize("queued", [False, True])
def test_a_read_hold_from_a_fence_key_in_another_form_is_released(
    r: redis.Redis, stored: str, queued: bool
) -> None:
    """A fence key that another client wrote as a number in another form than
    tenure's digits ("7.0", " 7", "1e3", ...) gives a reader that number as its
    fence, stored in its hold as digits: the hold is released, and nothing is
    left. One below 0 is no fence a reader can take (a bare negative reply
    would read as busy): a new one is minted, as when none is stored. Both by
    the uncontended path and by the general one (a writer queued, then gone)."""
    rw = ReadWriteLock(r, "odd-fence", ttl=5)
    key = KEY % "odd-fence"
    r.set(key + ":fence", stored)
    if queued:  # (a member nobody hears: the general path drops it and grants)
        r.zadd(key + ":waiters", {"gone|5000|w:nobody:op": 1})
    lease = rw.read.acquire(timeout=2)
    assert lease is not None
    number = int(stored, 16) if "x" in stored else float(stored)
    if number >= 0:
        assert lease.fence == number
    else:
        assert lease.fence > 10**15  # minted from the server's clock
    value = r.hget(key, f"r:{lease.owner}")
    assert isinstance(value, bytes) and value.decode().split("|")[1] == str(lease.fence)
    lease.release()
    assert not r.exists(key) and not r.exists(key + ":holds")


def test_context_managers_and_timeout_error(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "ctx", ttl=5)
    other = Owner()
    with rw.read as outer, rw.read(timeout=1) as inner:
        assert inner.fence == outer.fence and rw.read.hold_count() == 2

        def contender() -> BaseException | None:
            try:
                with rw.write(timeout=0.2):
                    return None
            except AcquireTimeout as exc:
                return exc

        error = other.run(contender)
        assert isinstance(error, TimeoutError) and "'ctx'" in str(error)
    assert not rw.locked()
    with rw.write(timeout=1):
        assert rw.write.hold_count() == 1
    lease = rw.write.acquire()
    assert lease is not None
    with lease:  # a lease is a context manager too: released on exit
        assert rw.write.hold_count() == 1
    assert not rw.locked()


def test_info_and_repr_show_live_state(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "show", ttl=5)
    assert repr(rw) == "<ReadWriteLock 'show' ttl=5s read not held here; write not held here>"
    assert rw.info().mode is None and rw.info().holders == () and not rw.locked()
    w = rw.write.acquire()
    r1 = rw.read.acquire()
    r2 = rw.read.acquire()
    assert w is not None and r1 is not None and r2 is not None
    text = repr(rw)
    assert f"read held here by {r1.owner} count=2 fence={w.fence} valid" in text
    assert f"write held here by {w.owner} count=1 fence={w.fence} valid" in text
    assert repr(rw.read).startswith("<ReadWriteView 'show' read held here by")
    assert repr(r1).startswith(f"<ReadWriteLease 'show' read fence={w.fence} valid")
    waiter = Owner()
    waiting = waiter.start(lambda: rw.read.acquire(timeout=5))
    time.sleep(0.2)
    info = rw.info()
    assert info.name == "show" and info.mode == "write" and info.fence == w.fence
    assert info.waiters == 1 and info.waiting_writers == 0
    assert sorted((h.mode, h.count, h.owner) for h in info.holders) == [
        ("read", 2, r1.owner),
        ("write", 1, w.owner),
    ]
    assert all(isinstance(h, ReadWriteHolder) and 4 < h.ttl <= 5 for h in info.holders)
    with pytest.raises(AttributeError):
        info.mode = "read"  # type: ignore[misc]
    for lease in (r2, r1, w):
        lease.release()
    assert "not held here" in repr(rw) and "released" in repr(w)
    waiter.run(waiting.result(timeout=5).release)


def test_fences_for_writes_increase_and_reads_see_the_last_one(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "fences", ttl=5)
    resource = FencedKey(r, "fences:resource")
    seen: list[tuple[str, int]] = []
    for _ in range(3):
        with rw.write as w:
            resource.set("v", fence=w.fence)
            seen.append(("write", w.fence))
        with rw.read as rd:
            seen.append(("read", rd.fence))
            assert resource.seen() == rd.fence  # not stale: no writer since
    writes = [f for m, f in seen if m == "write"]
    assert writes == sorted(set(writes))
    assert [f for m, f in seen if m == "read"] == writes


def test_lock_and_rlock_and_rwlock_of_one_name_are_apart(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "both", ttl=5)
    reentrant = RLock(r, "both", ttl=5).acquire(blocking=False)
    lease = rw.write.acquire(blocking=False)
    assert reentrant is not None and lease is not None
    assert r.type(KEY % "both") == b"hash" and r.type("tenure:{both}:rlock") == b"hash"
    lease.release()
    reentrant.release()


def test_lock_delay_keeps_a_dead_writers_name_unavailable(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "delay", ttl=0.3, lock_delay=0.5)
    dead = rw.write.acquire()  # never released: its holder "dies"
    assert dead is not None
    taken_at = time.monotonic()
    other = Owner()
    time.sleep(0.4)  # the lease is over in Redis; the delay is not
    assert other.run(lambda: rw.read.acquire(blocking=False)) is None
    lease = other.run(lambda: rw.read.acquire(timeout=3))
    waited = time.monotonic() - taken_at
    assert lease is not None and 0.75 <= waited < 1.3, f"free {waited:.2f}s after the acquire"
    other.run(lease.release)
    # a clean release (and a downgrade) frees the name at once
    w = rw.write.acquire()
    under = rw.read.acquire()
    assert w is not None and under is not None
    w.release()
    got = other.run(lambda: rw.read.acquire(blocking=False))
    assert got is not None
    other.run(got.release)
    under.release()


def test_adaptive_ttl_is_kept_per_mode(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "adaptive", ttl=AdaptiveTTL(floor=0.5, factor=2, ceiling=10))
    assert rw.ttl == 0.5
    with rw.write:
        time.sleep(0.4)
    write = rw.write.acquire()
    read = rw.read.acquire()
    assert write is not None and read is not None
    assert write.ttl >= 0.8 and read.ttl == 0.5  # only write holds were long
    read.release()
    write.release()


# --- retries and the watchdog -----------------------------------------------


def test_retried_calls_count_once(url: str) -> None:
    """redis-py retries a script call whose reply was lost; acquires and releases
    of either mode count once."""
    from _replies import LosesReply, losing_client

    from tenure._scripts import RWLOCK_ACQUIRE, RWLOCK_RELEASE

    client = losing_client(url, retries=2)
    rw = ReadWriteLock(client, "retried", ttl=30)
    steps: list[tuple[Any, Callable[[], object]]] = [
        (RWLOCK_ACQUIRE, rw.write.acquire),
        (RWLOCK_ACQUIRE, rw.write.acquire),  # a re-entry
        (RWLOCK_ACQUIRE, rw.read.acquire),
        (RWLOCK_RELEASE, rw.write.release),
        (RWLOCK_ACQUIRE, rw.read.acquire),
        (RWLOCK_RELEASE, rw.read.release),
    ]
    for script, call in steps:
        LosesReply.armed = script.sha1
        if script is RWLOCK_ACQUIRE:
            assert call() is not None
        else:
            call()
        assert LosesReply.armed == "", f"the reply of {script.name} was not dropped"
    assert rw.write.hold_count() == 1 and rw.read.hold_count() == 1
    for script, call in ((RWLOCK_RELEASE, rw.read.release), (RWLOCK_RELEASE, rw.write.release)):
        LosesReply.armed = script.sha1
        call()  # the last count of each: the retry finds it gone, and is not an error
        assert LosesReply.armed == ""
    assert not rw.locked()
    client.close()


def test_watchdog_renews_read_and_write_holds_and_signals_loss(r: redis.Redis) -> None:
    seen: list[ReadWriteLease] = []
    rw = ReadWriteLock(r, "wd", ttl=0.4, auto_renew=True, on_lost=seen.append)
    w = rw.write.acquire()
    under = rw.read.acquire()
    other = rw.read.acquire()
    assert w is not None and under is not None and other is not None
    time.sleep(1.3)  # more than three ttls
    assert w.valid and under.valid and other.valid and rw.write.hold_count() == 1
    assert 0 < r.pttl(KEY % "wd") <= 400
    w.release()  # downgrade: the read hold goes on being renewed
    time.sleep(0.5)
    assert under.valid and rw.read.hold_count() == 2
    # the read hold taken away: both its leases are lost, at the next renewal
    r.hdel(KEY % "wd", f"r:{under.owner}")
    assert under.lost.wait(1) and other.lost.wait(0.1)
    assert "gone" in (under.lost_reason or "") and {id(x) for x in seen} == {id(under), id(other)}
    with pytest.raises(LockLostError):
        other.release()
    with pytest.raises(NotOwnedError):
        rw.read.release()  # every lease of the hold ended
    assert not w.lost.is_set()  # released cleanly before


# --- asyncio ---------------------------------------------------------------


def test_async_basics(server: ServerProcess, r: redis.Redis) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        rw = AsyncReadWriteLock(client, "a", ttl=5)
        async with rw.write as w, rw.read(timeout=1) as under:
            assert under.fence == w.fence and await rw.write.owned()
            await under.extend(3)
            assert 2.9 < under.remaining <= 3 and await rw.read.hold_count() == 1
            async with rw.read, rw.write:
                pass  # re-entries: this task holds both
        assert not await rw.locked()

        async def upgrade() -> None:
            async with rw.read:
                await rw.write.acquire()

        with pytest.raises(LockUpgradeError):
            await asyncio.create_task(upgrade())
        assert not await rw.locked()

        async def reader(i: int) -> int:
            async with rw.read as lease:
                await asyncio.sleep(0.1)
                return lease.fence

        started = time.monotonic()
        fences = await asyncio.gather(*(reader(i) for i in range(10)))
        assert time.monotonic() - started < 0.5  # together, not one after another
        assert set(fences) == {w.fence}
        with pytest.raises(NotOwnedError):
            await rw.read.release()
        await client.aclose()

    asyncio.run(main())


def test_async_cancelled_waiter_leaves_no_trace(server: ServerProcess, r: redis.Redis) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        rw = AsyncReadWriteLock(client, "cancel", ttl=5)
        lease = await rw.read.acquire()
        assert lease is not None
        waiter = asyncio.create_task(rw.write.acquire())
        await asyncio.sleep(0.2)
        assert (await rw.info()).waiting_writers == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert (await rw.info()).waiters == 0
        await lease.release()
        assert not await rw.locked()  # nobody to hand it to
        await client.aclose()

    asyncio.run(main())


# --- replicas, hand-off edges and the cost of a hand-off ----------------------


def test_min_replicas_for_both_modes(make_server: Callable[..., ServerProcess]) -> None:
    from test_replicas import _pair

    from tenure import NotReplicatedError

    master, replica = _pair(make_server)
    client = redis.Redis.from_url(master.url)
    on_replica = redis.Redis.from_url(replica.url)
    rw = ReadWriteLock(client, "rep", ttl=30, min_replicas=1, replica_timeout=5)
    with rw.write as w, rw.read as under:  # acknowledged: the replica has both holds
        fields = on_replica.hgetall(KEY % "rep")
        assert fields[b"mode"] == b"write"
        assert {f"w:{w.owner}".encode(), f"r:{under.owner}".encode()} <= set(fields)
    replica.pause()
    try:
        hasty = ReadWriteLock(client, "rep", ttl=30, min_replicas=1, replica_timeout=0.3)
        with pytest.raises(NotReplicatedError, match="0 of 1 replicas"):
            hasty.read.acquire()
    finally:
        replica.resume()
    assert not rw.locked(), "the unacknowledged hold was not released"
    client.close()
    on_replica.close()


def test_a_hand_off_message_for_a_departed_waiter_changes_nothing(r: redis.Redis) -> None:
    """The hub passes on a lock handed to a token no plan waits with by running
    the pass-on plan of the lock's kind; a read-write lock has none (a waiter
    that leaves gives back a hold handed to it by itself), and a Lock's release
    on its hash is refused without a write."""
    from tenure._drivers import _sync
    from tenure._drivers._hubbook import PassOn
    from tenure._keys import rwlock_keys
    from tenure._plans import lock as lock_plans

    lease = ReadWriteLock(r, "departed", ttl=5).read.acquire()
    assert lease is not None
    before = r.hgetall(KEY % "departed")
    keys = rwlock_keys("departed", prefix="tenure:")
    _sync.run(r, PassOn(keys, f"r:{lease.owner}:op").plan())
    assert r.hgetall(KEY % "departed") == before
    with pytest.raises(WrongTypeError):
        _sync.run(r, lock_plans.pass_on(keys, f"r:{lease.owner}:op"))
    assert r.hgetall(KEY % "departed") == before
    lease.release()


def test_script_calls_per_hand_off_do_not_grow_with_waiters(
    make_server: Callable[..., ServerProcess],
) -> None:
    """N writers, each with its own client (so each its own queue entry, as a
    process would be), wait while the lock is held. From then on each hand-off
    costs the release that makes it and the watchdog's extend of the claim window
    it hands over (skipped when the hold ends first), whatever N is: the waiter
    holds the lock when the message comes, and no waiter is woken to retry."""
    from tenure._scripts import ALL

    calls: dict[int, int] = {}
    for writers in (2, 8):
        s = make_server()
        client = redis.Redis.from_url(s.url)
        for spec in ALL:  # so that no first call pays an extra NOSCRIPT round
            client.script_load(spec.source)
        holder = ReadWriteLock(client, "flat", ttl=10)
        first = holder.write.acquire()
        assert first is not None
        clients = [redis.Redis.from_url(s.url) for _ in range(writers)]
        pool = ThreadPoolExecutor(writers)

        def one(c: redis.Redis) -> RWHold:
            with ReadWriteLock(c, "flat", ttl=10).write(timeout=30) as lease:
                acquired = time.monotonic()
                time.sleep(0.01)
                return ("write", acquired, time.monotonic(), lease.fence)

        futures = [pool.submit(one, c) for c in clients]
        deadline = time.monotonic() + 10
        while holder.info().waiters < writers:
            assert time.monotonic() < deadline, "the writers did not queue"
            time.sleep(0.01)
        client.config_resetstat()
        first.release()
        holds = [f.result(timeout=30) for f in futures]
        pool.shutdown()
        check_rw_history(holds)
        calls[writers] = int(client.info("commandstats")["cmdstat_evalsha"]["calls"])
        for c in [client, *clients]:
            c.close()
    # the holder's release, then each writer's release and claim extend
    for writers, made in calls.items():
        assert writers + 1 <= made <= 2 * writers + 1, calls
