"""Lock and AsyncLock against a real server."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
import redis
import redis.asyncio
from _interrupts import raise_once
from _not_utf8 import ESCAPED, HOLD_MS, KINDS, NOT_UTF8, hold_foreign, holder_of
from redis.backoff import NoBackoff
from redis.retry import Retry

from tenure import (
    AcquireTimeout,
    AlreadyHeldError,
    AsyncFairLock,
    AsyncLock,
    AsyncReadWriteLock,
    AsyncRLock,
    AsyncSemaphore,
    Election,
    FairLock,
    InvalidArgument,
    Lock,
    LockLostError,
    NotOwnedError,
    ReadWriteLock,
    RLock,
    Semaphore,
    WrongTypeError,
)
from tenure._drivers import _async as _async_driver
from tenure._label import default_label
from tenure._plans.waiting import Grant
from tenure._server import ServerProcess, free_port


def test_acquire_release_and_fence_increase(r: redis.Redis) -> None:
    lock = Lock(r, "orders:42", ttl=5)
    fences = []
    for _ in range(5):
        lease = lock.acquire()
        assert lease and lease.valid and lease.name == "orders:42" and lease.ttl == 5
        assert 4.9 < lease.remaining <= 5
        assert r.get("tenure:{orders:42}") == lease.owner.encode()
        assert lock.locked() and lock.owned()
        fences.append(lease.fence)
        lease.release()
        assert not lease.valid and not lock.locked() and not lock.owned()
        assert len(lease.owner.split(":")[-1]) >= 32  # 128 random bits
    assert fences == sorted(set(fences))


def test_non_blocking_and_timeout(r: redis.Redis) -> None:
    holder = Lock(r, "x", ttl=5)
    lease = holder.acquire()
    assert lease is not None
    other = Lock(redis.Redis(connection_pool=r.connection_pool), "x")
    result: list[Any] = []
    t = threading.Thread(target=lambda: result.append(other.acquire(blocking=False)))
    t.start()
    t.join()
    assert result == [None]
    started = time.monotonic()
    t = threading.Thread(target=lambda: result.append(other.acquire(timeout=0.3)))
    t.start()
    t.join()
    assert result[-1] is None and time.monotonic() - started >= 0.3
    lease.release()


def test_context_manager_and_timeout_error(r: redis.Redis) -> None:
    lock = Lock(r, "ctx", ttl=5)
    with lock as lease:
        assert lock.owned() and lease.valid
        errors: list[BaseException] = []

        def contender() -> None:
            try:
                with lock(timeout=0.2):
                    pass
            except AcquireTimeout as exc:
                errors.append(exc)

        t = threading.Thread(target=contender)
        t.start()
        t.join()
        assert len(errors) == 1 and isinstance(errors[0], TimeoutError)
        assert "'ctx'" in str(errors[0])
    assert not lock.locked()
    with lock(timeout=1) as lease2:
        assert lease2.fence > lease.fence


def test_second_acquire_by_same_owner_raises_at_once(r: redis.Redis) -> None:
    lock = Lock(r, "re", ttl=30)
    lease = lock.acquire()
    started = time.monotonic()
    with pytest.raises(AlreadyHeldError, match="'re'"):
        lock.acquire()
    with pytest.raises(AlreadyHeldError):
        Lock(r, "re").acquire(timeout=5)  # another Lock object, same thread
    assert time.monotonic() - started < 1
    assert lease is not None and lease.valid
    lease.release()


def test_release_and_extend_errors(r: redis.Redis) -> None:
    lock = Lock(r, "rel", ttl=0.2)
    with pytest.raises(NotOwnedError, match="not held by this thread"):
        lock.release()
    lease = lock.acquire()
    assert lease is not None
    time.sleep(0.3)
    # the watchdog saw the deadline pass: lost, and extend says so
    assert lease.lost.is_set() and not lease.valid
    with pytest.raises(LockLostError, match=rf"'rel' \(fence {lease.fence}\).*deadline passed"):
        lease.extend()
    lease2 = lock.acquire()
    assert lease2 is not None
    time.sleep(0.3)
    with pytest.raises(LockLostError, match="deadline passed"):
        lock.release()
    with pytest.raises(LockLostError):  # still lost, at every use
        lease2.release()
    clean = lock.acquire()
    assert clean is not None
    clean.release()
    with pytest.raises(NotOwnedError, match="already released") as info:
        clean.release()
    assert not isinstance(info.value, LockLostError)
    # gone from Redis while still valid here: the release finds it out
    lease3 = Lock(r, "rel", ttl=30).acquire()
    assert lease3 is not None
    r.delete("tenure:{rel}")
    with pytest.raises(LockLostError, match="expired before release"):
        lease3.release()
    assert lease3.lost.is_set() and lease3.lost_reason is not None


def test_extend_resets_the_lease(r: redis.Redis) -> None:
    lock = Lock(r, "ext", ttl=0.5)
    lease = lock.acquire()
    assert lease is not None
    lease.extend(5)
    assert 4000 < r.pttl("tenure:{ext}") <= 5000 and lease.remaining > 4.5
    lock.extend()
    assert r.pttl("tenure:{ext}") <= 5000
    time.sleep(0.6)
    assert lock.owned()
    lease.release()


def test_expired_lease_cannot_release_the_next_holder(r: redis.Redis) -> None:
    a = Lock(r, "aba", ttl=0.2)
    lease_a = a.acquire()
    assert lease_a is not None
    time.sleep(0.3)
    b_result: list[Any] = []
    t = threading.Thread(target=lambda: b_result.append(Lock(r, "aba", ttl=5).acquire()))
    t.start()
    t.join()
    lease_b = b_result[0]
    assert lease_b.fence > lease_a.fence
    with pytest.raises(NotOwnedError):
        lease_a.release()
    assert r.get("tenure:{aba}") == lease_b.owner.encode()
    lease_b.release()


def test_threads_sharing_one_lock_each_own_their_acquisition(r: redis.Redis) -> None:
    lock = Lock(r, "shared", ttl=5)
    lease = lock.acquire()
    assert lease is not None
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            lock.release()
        except NotOwnedError as exc:
            errors.append(exc)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert len(errors) == 1 and lock.owned()
    lease.release()


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((), {}, "exactly one of name or key"),
        (("",), {}, "name must not be empty"),
        ((b"x",), {}, "name must be a str"),
        (("x",), {"key": "y"}, "exactly one"),
        ((), {"key": ""}, "key must not be empty"),
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
        Lock(dead, *args, **kwargs)
    with pytest.raises(InvalidArgument, match=match):
        AsyncLock(redis.asyncio.Redis(port=free_port()), *args, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"timeout": -1}, "timeout must be >= 0"),
        ({"blocking": False, "timeout": 1}, "blocking=False"),
        ({"timeout": "soon"}, "timeout must be a number"),
        ({"blocking": None}, "blocking must be True or False"),
    ],
)
@pytest.mark.parametrize(("sync", "asynchronous"), [(Lock, AsyncLock), (RLock, AsyncRLock)])
def test_bad_acquire_arguments_do_no_io(
    kwargs: dict[str, Any], match: str, sync: Any, asynchronous: Any
) -> None:
    dead = redis.Redis(port=free_port())  # any I/O would raise ConnectionError instead
    with pytest.raises(InvalidArgument, match=match):
        sync(dead, "x").acquire(**kwargs)

    async def main() -> None:
        with pytest.raises(InvalidArgument, match=match):
            await asynchronous(redis.asyncio.Redis(port=free_port()), "x").acquire(**kwargs)

    asyncio.run(main())


def test_extend_bad_seconds(r: redis.Redis) -> None:
    lease = Lock(r, "x").acquire()
    assert lease is not None
    with pytest.raises(InvalidArgument, match="seconds must be > 0"):
        lease.extend(0)
    assert lease.valid
    lease.release()


def test_wrong_type_key_names_the_key(r: redis.Redis) -> None:
    r.hset("tenure:{h}", "a", "1")
    with pytest.raises(WrongTypeError, match=r"'tenure:\{h\}'"):
        Lock(r, "h").acquire(timeout=1)
    r.lpush("{ek}:key:fence", "x")
    with pytest.raises(WrongTypeError, match=r"'\{ek\}:key:fence'"):
        Lock(r, key="ek").acquire()
    assert not r.exists("ek")  # nothing half-written
    r.set("tenure:{w}", "someone")
    r.set("tenure:{w}:waiters", "not a zset")
    with pytest.raises(WrongTypeError, match="waiters"):
        Lock(r, "w").acquire(timeout=1)
    assert r.hgetall("tenure:{h}") == {b"a": b"1"}


def test_a_fence_key_that_holds_no_number_is_named_and_kept(r: redis.Redis) -> None:
    """A named lock's fence key holding another type, or a string that is no
    number: WrongTypeError naming it, and nothing written (the lock free, the
    value as it was: the fence is written and read in one SET ... GET, and put
    back)."""
    r.lpush("tenure:{fl}:fence", "x")
    with pytest.raises(WrongTypeError, match=r"'tenure:\{fl\}:fence'"):
        Lock(r, "fl").acquire(blocking=False)
    assert r.lrange("tenure:{fl}:fence", 0, -1) == [b"x"]
    assert not r.exists("tenure:{fl}")
    r.set("tenure:{fs}:fence", "not a number")
    with pytest.raises(WrongTypeError, match=r"'tenure:\{fs\}:fence'"):
        Lock(r, "fs").acquire(blocking=False)
    assert r.get("tenure:{fs}:fence") == b"not a number"
    assert not r.exists("tenure:{fs}")


@pytest.mark.parametrize("stored", ["-5", "-1", None])
def test_a_retry_of_its_own_grant_gets_a_fence_the_fence_key_lost(
    r: redis.Redis, stored: str | None
) -> None:
    """An attempt whose token holds the lock already (a retry after a lost
    reply, a hand-off whose message was lost) gets its fence from the fence
    key; one that lost it (set below 0 by hand, or gone) gets a new fence, not
    the stored number (a bare negative reply is BUSY: the holder would wait on
    itself) or no reply at all (a ProtocolError)."""
    from tenure._plans.common import FENCE_KEEP_MS
    from tenure._protocol import Status, parse_reply
    from tenure._scripts import LOCK_ACQUIRE

    keys = Lock(r, "retried")._keys

    def attempt() -> tuple[Status, Any]:
        raw = r.eval(
            LOCK_ACQUIRE.source.decode(),
            4,
            *(keys.lock, keys.fence, keys.waiters, keys.delay),
            *("tok", "own:", 5000, "", FENCE_KEEP_MS, 0),
        )
        return parse_reply(LOCK_ACQUIRE, raw)

    status, first = attempt()
    assert status is Status.OK
    assert attempt() == (Status.OK, first)  # (its own fence again)
    if stored is None:
        r.delete(keys.fence)
    else:
        r.set(keys.fence, stored)
    status, fence = attempt()
    assert status is Status.OK and fence >= first, (status, fence)
    assert int(r.get(keys.fence) or 0) == fence
    assert r.get(keys.lock) == b"tok"


@pytest.mark.parametrize("stored", ["-5", "-1", None])
def test_a_reentry_or_fair_retry_gets_a_fence_the_fence_key_lost(
    r: redis.Redis, stored: str | None
) -> None:
    """As for a Lock's retry: an RLock's reentry, and a FairLock attempt whose
    token holds the lock, get a new fence when the fence key lost theirs (set
    below 0 by hand, or gone), not a bare negative reply (BUSY: the holder
    would wait on itself), nor a fence 0."""
    from tenure import RLock
    from tenure._plans.common import FENCE_KEEP_MS
    from tenure._protocol import Status, parse_reply
    from tenure._scripts import FAIR_ACQUIRE

    def lose(fence_key: str) -> None:
        if stored is None:
            r.delete(fence_key)
        else:
            r.set(fence_key, stored)

    rlock = RLock(r, "reentered", ttl=5)
    first = rlock.acquire()
    assert first is not None
    lose(rlock._keys.fence)
    again = rlock.acquire(timeout=1)
    assert again is not None and again.fence >= first.fence, again

    keys: Any = FairLock(r, "fair-retried")._keys  # (a FairKeys)

    def attempt() -> tuple[Status, Any]:
        raw = r.eval(
            FAIR_ACQUIRE.source.decode(),
            5,
            *(keys.lock, keys.fence, keys.waiters, keys.deadlines, keys.delay),
            *("tok", "own:", 5000, "", FENCE_KEEP_MS, 0, 30000, keys.wake_prefix),
        )
        return parse_reply(FAIR_ACQUIRE, raw)

    status, fence = attempt()
    assert status is Status.OK
    lose(keys.fence)
    status, fence_again = attempt()
    assert status is Status.OK and fence_again >= fence, (status, fence_again)
    assert int(r.get(keys.fence) or 0) == fence_again


@pytest.mark.parametrize(
    "stored", ["inf", "nan", "1e400", "9007199254740993", "99999999999999999999", "4e15+0.5"]
)
@pytest.mark.parametrize(
    "kind", ["Lock", "FairLock", "RLock", "ReadWriteLock.write", "ReadWriteLock.read", "Semaphore"]
)
def test_a_fence_key_that_holds_no_exact_integer_is_named_and_kept(
    r: redis.Redis, kind: str, stored: str
) -> None:
    """A fence key holding a number that is no integer below 2**53 (infinite,
    not a number, a fraction, or too large for the scripts' numbers to add 1
    to it exactly): no larger fence can follow it, so it is a WrongTypeError
    naming it, and nothing written (not a fence that is negative, repeated
    or smaller than the one stored)."""
    from tenure import FairLock, ReadWriteLock, RLock, Semaphore

    value = "4000000000000000.5" if stored == "4e15+0.5" else stored
    kinds: dict[str, Callable[[], Any]] = {
        "Lock": lambda: Lock(r, "garbled", ttl=5),
        "FairLock": lambda: FairLock(r, "garbled", ttl=5),
        "RLock": lambda: RLock(r, "garbled", ttl=5),
        "ReadWriteLock.write": lambda: ReadWriteLock(r, "garbled", ttl=5).write,
        "ReadWriteLock.read": lambda: ReadWriteLock(r, "garbled", ttl=5).read,
        "Semaphore": lambda: Semaphore(r, "garbled", 2, ttl=5),
    }
    lock = kinds[kind]()
    fence_key = (lock.lock if kind.startswith("ReadWriteLock") else lock)._keys.fence
    r.set(fence_key, value)
    with pytest.raises(WrongTypeError, match=re.escape(repr(fence_key))):
        lock.acquire(blocking=False)
    assert r.get(fence_key) == value.encode()
    assert r.keys("*") == [fence_key.encode()]


def test_connection_errors_propagate() -> None:
    lock = Lock(redis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0)), "x")
    with pytest.raises(redis.exceptions.ConnectionError):
        lock.acquire()


def test_release_after_script_flush(r: redis.Redis) -> None:
    lock = Lock(r, "flush", ttl=5)
    lease = lock.acquire()
    assert lease is not None
    r.script_flush()
    lease.release()
    assert not r.exists("tenure:{flush}")
    r.script_flush()
    assert lock.acquire() is not None


def test_exact_key_excludes_redis_py_lock(r: redis.Redis) -> None:
    theirs = r.lock("orders:7", timeout=5)
    assert theirs.acquire(blocking=False)
    ours = Lock(r, key="orders:7", ttl=5)
    assert ours.acquire(blocking=False) is None
    theirs.release()
    lease = ours.acquire(blocking=False)
    assert lease is not None
    assert r.get("orders:7") == lease.owner.encode()  # the common protocol: value = token
    other = r.lock("orders:7", timeout=5)
    assert not other.acquire(blocking=False)
    lease.release()
    assert other.acquire(blocking=False)
    other.release()


def test_reads_show_a_redis_py_token_not_utf8_escaped(r: redis.Redis, url: str) -> None:
    """An exact key held by redis-py's Lock with a token that is not UTF-8:
    info() and locked(), sync and asyncio, show it with its bytes escaped; the
    key is left as it was, tenure still kept out and redis-py's release its own."""
    theirs = r.lock("bin:7", timeout=30)
    assert theirs.acquire(blocking=False, token=NOT_UTF8)
    lock = Lock(r, key="bin:7", ttl=5)
    info = lock.info()
    assert lock.locked() and info.holder == ESCAPED and info.label is None, info
    assert info.hold_count == 1 and info.ttl is not None and 29 < info.ttl <= 30, info

    async def main() -> tuple[bool, str | None]:
        client = redis.asyncio.Redis.from_url(url)
        try:
            mine = AsyncLock(client, key="bin:7", ttl=5)
            return await mine.locked(), (await mine.info()).holder
        finally:
            await client.aclose()

    assert asyncio.run(main()) == (True, ESCAPED)
    assert lock.acquire(blocking=False) is None
    assert r.get("bin:7") == NOT_UTF8
    theirs.release()
    assert not lock.locked() and lock.info().holder is None


def test_waiter_takes_over_when_redis_py_holder_releases(r: redis.Redis) -> None:
    theirs = r.lock("interop", timeout=5)
    assert theirs.acquire()
    got: list[Any] = []
    lock = Lock(redis.Redis(connection_pool=r.connection_pool), key="interop", ttl=5)
    t = threading.Thread(target=lambda: got.append(lock.acquire(timeout=4)))
    t.start()
    time.sleep(0.2)
    theirs.release()  # publishes nothing: the waiter polls a foreign holder
    t.join()
    assert got[0] is not None


def test_redis_py_lock_without_ttl_is_rechecked(r: redis.Redis) -> None:
    theirs = r.lock("forever")  # no expiry at all
    assert theirs.acquire()
    got: list[Any] = []
    lock = Lock(redis.Redis(connection_pool=r.connection_pool), key="forever", ttl=5)
    t = threading.Thread(target=lambda: got.append(lock.acquire(timeout=3)))
    t.start()
    time.sleep(0.3)
    theirs.release()
    t.join()
    assert got[0] is not None


def test_fork_child_does_not_own_parent_leases(r: redis.Redis, server: ServerProcess) -> None:
    lock = Lock(r, "forked", ttl=5)
    lease = lock.acquire()
    assert lease is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            child = redis.Redis.from_url(server.url)
            try:
                lock.release()
                code = 1
            except NotOwnedError:
                pass
            if Lock(child, "forked").acquire(blocking=False) is not None:
                code = 2
        except BaseException:
            code = 3
        os.write(write, bytes([code]))
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"\x00"
    assert lock.owned()
    lease.release()


def test_real_server_is_detected(server: ServerProcess, r: redis.Redis) -> None:
    from tenure._plans.server import parse_info
    from tenure._server import server_version

    parsed = parse_info(r.info("server"))  # refusal of old versions: test_plans.py
    assert parsed.name in server_version(server.binary).lower()
    assert ".".join(map(str, parsed.version)) in server_version(server.binary)


# --- asyncio ---------------------------------------------------------------


def test_async_basics(server: ServerProcess, r: redis.Redis) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        lock = AsyncLock(client, "a", ttl=5)
        async with lock as lease:
            assert await lock.owned() and await lock.locked()
            with pytest.raises(AlreadyHeldError):
                await lock.acquire()
            await lease.extend(3)
            assert 2.9 < lease.remaining <= 3
        assert not await lock.locked()
        with pytest.raises(NotOwnedError):
            await lock.release()
        other = AsyncLock(client, "a")
        lease1 = await lock.acquire()
        assert lease1 is not None

        async def contender() -> None:
            with pytest.raises(AcquireTimeout):
                async with other(timeout=0.2):
                    pass

        await asyncio.create_task(contender())
        await lease1.release()
        await client.aclose()

    asyncio.run(main())


def test_async_task_cannot_release_another_tasks_lease(server: ServerProcess) -> None:
    """redis-py's asyncio Lock lets task A release task B's lock; ours must not."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        lock = AsyncLock(client, "tasks", ttl=0.3)
        a_has_it = asyncio.Event()
        b_has_it = asyncio.Event()

        async def task_a() -> None:
            await lock.acquire()
            a_has_it.set()
            await b_has_it.wait()  # A's lease expired meanwhile
            with pytest.raises(NotOwnedError):
                await lock.release()

        async def task_b() -> None:
            await a_has_it.wait()
            lease = await lock.acquire(timeout=2)
            assert lease is not None
            b_has_it.set()
            await asyncio.sleep(0.05)
            assert await lock.owned()
            await lease.release()

        await asyncio.gather(task_a(), task_b())
        await client.aclose()

    asyncio.run(main())


def test_async_cancelled_waiter_leaves_no_trace(server: ServerProcess, r: redis.Redis) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        lock = AsyncLock(client, "cancel", ttl=5)
        lease = await lock.acquire()
        assert lease is not None
        waiter = asyncio.create_task(AsyncLock(client, "cancel").acquire())
        await asyncio.sleep(0.2)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert await client.zcard("tenure:{cancel}:waiters") == 0  # it left the queue
        for _ in range(300):  # the hub unsubscribes the idle channel after LINGER
            if not await client.pubsub_channels("tenure:{cancel}:wake:*"):
                break
            await asyncio.sleep(0.01)
        assert await client.pubsub_channels("tenure:{cancel}:wake:*") == []
        await lease.release()
        assert not await lock.locked()  # nobody to hand it to
        again = await AsyncLock(client, "cancel").acquire(timeout=1)
        assert again is not None
        await again.release()
        await client.aclose()

    asyncio.run(main())


def test_async_cancel_is_never_lost_whatever_the_moment(
    server: ServerProcess, r: redis.Redis
) -> None:
    """A waiting acquire cancelled at any event-loop step raises CancelledError
    at once. redis-py writes a command under ``asyncio.wait_for`` (its socket
    timeout), which on Python 3.11 returns normally when the cancellation
    lands just as the write completes: before the driver checked for that,
    the acquire went on waiting (for the holder's lease, or until it took the
    lock) in a task its caller had cancelled."""

    async def main() -> None:
        holder = redis.asyncio.Redis.from_url(server.url)
        client = redis.asyncio.Redis.from_url(server.url, socket_timeout=5)
        lease = await AsyncLock(holder, "sweep", ttl=5).acquire()
        assert lease is not None
        late: list[int] = []
        for steps in range(40):  # cancel after 0, 1, ... loop iterations
            waiter = asyncio.create_task(AsyncLock(client, "sweep").acquire())
            for _ in range(steps):
                await asyncio.sleep(0)
            waiter.cancel()
            done, _ = await asyncio.wait({waiter}, timeout=1)
            if not done or not waiter.cancelled():
                late.append(steps)
                await asyncio.wait({waiter}, timeout=10)
        assert late == [], f"cancel lost after these loop steps: {late}"
        assert await AsyncLock(holder, "sweep").locked()  # still the holder's
        assert await client.zcard("tenure:{sweep}:waiters") == 0
        await lease.release()
        assert not await AsyncLock(holder, "sweep").locked()
        await holder.aclose()
        await client.aclose()

    asyncio.run(main())


def test_async_waiter_is_woken_when_the_task_subscribing_for_it_is_cancelled(
    server: ServerProcess, r: redis.Redis
) -> None:
    """Two tasks of one client wait on a lock: the first to wait sends the
    wake channel's SUBSCRIBE, the second counts on it. The first is cancelled
    while its SUBSCRIBE waits its turn (the hub sends one at a time): the
    second must still be woken by the release. Before the fix the cancel
    forgot the channel's record with the second still in it, so the second
    waited for a confirmation that never came (5 s), then for its timer."""

    async def main() -> None:
        holder = redis.asyncio.Redis.from_url(server.url)
        client = redis.asyncio.Redis.from_url(server.url)
        lease = await AsyncLock(holder, "subcancel", ttl=5).acquire()
        assert lease is not None
        hub = _async_driver._state(client).hub
        async with hub._sending:  # (a SUBSCRIBE of another lock, in flight)
            first = asyncio.create_task(AsyncLock(client, "subcancel").acquire())
            second = asyncio.create_task(AsyncLock(client, "subcancel").acquire())
            for _ in range(200):  # both counted in on the channel
                if any(ch.refs == 2 for ch in hub._book.channels.values()):
                    break
                await asyncio.sleep(0.005)
            first.cancel()
            await asyncio.wait({first})
        assert first.cancelled()
        await asyncio.sleep(0.05)
        await lease.release()
        done, _ = await asyncio.wait({second}, timeout=1)
        assert done, "the second waiter was not woken by the release"
        got = second.result()
        assert got is not None and got.fence > lease.fence
        await got.release()
        await holder.aclose()
        await client.aclose()

    asyncio.run(main())


def test_async_owner_under_wait_for_and_asyncio_timeout(
    server: ServerProcess, r: redis.Redis
) -> None:
    """As the README says: ``asyncio.timeout()`` keeps the caller the owner; on
    Python 3.11 ``asyncio.wait_for`` runs the acquire in a task of its own,
    which owns the lease."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        lock = AsyncRLock(client, "owner-under-timeout", ttl=5)
        async with asyncio.timeout(1):
            first = await lock.acquire()
            again = await lock.acquire()  # re-entered: the same owner
        assert first is not None and again is not None and again.fence == first.fence
        assert await lock.owned()
        await lock.release()
        await lock.release()
        assert not await lock.locked()
        if sys.version_info < (3, 12):
            plain = AsyncLock(client, "owner-under-wait-for", ttl=5)
            lease = await asyncio.wait_for(plain.acquire(), 1)
            assert lease is not None
            with pytest.raises(NotOwnedError):
                await plain.release()
            await lease.release()
        await client.aclose()

    asyncio.run(main())


def test_second_acquire_raises_even_while_a_local_thread_waits(r: redis.Redis) -> None:
    """The owner's second acquire must not queue behind this process's waiter."""
    lease = Lock(r, "gate", ttl=30).acquire()
    assert lease is not None
    waiter = threading.Thread(target=lambda: Lock(r, "gate").acquire(timeout=3))
    waiter.start()
    time.sleep(0.2)  # the waiter now holds this process's gate for "gate"
    started = time.monotonic()
    with pytest.raises(AlreadyHeldError):
        Lock(r, "gate").acquire(timeout=1.5)
    assert time.monotonic() - started < 0.5
    lease.release()
    waiter.join()


# --- lock-delay ---------------------------------------------------------------


def _take_in_thread(lock: Lock, **kwargs: Any) -> tuple[Any, float]:
    out: list[Any] = []

    def take() -> None:
        started = time.monotonic()
        out.append(lock.acquire(**kwargs))
        out.append(time.monotonic() - started)

    t = threading.Thread(target=take)
    t.start()
    t.join(timeout=30)
    return out[0], out[1]


def test_lock_delay_keeps_a_dead_holders_name_unavailable(r: redis.Redis) -> None:
    lock = Lock(r, "delayed", ttl=0.3, lock_delay=0.6)
    dead = lock.acquire()  # never released: its holder "dies"
    assert dead is not None
    acquired_at = time.monotonic()
    time.sleep(0.4)  # the lease is over in Redis, the delay is not
    assert r.exists("tenure:{delayed}") == 0 and r.exists("tenure:{delayed}:delay") == 1
    assert _take_in_thread(lock, blocking=False)[0] is None
    lease, _ = _take_in_thread(lock, timeout=3)
    waited = time.monotonic() - acquired_at
    assert lease is not None and lease.fence > dead.fence
    assert 0.85 <= waited < 1.3, f"free {waited:.2f}s after the dead holder's acquire"
    lease.release()


def test_lock_delay_is_skipped_by_a_clean_release_and_follows_extend(r: redis.Redis) -> None:
    lock = Lock(r, "clean", ttl=0.5, lock_delay=5)
    lease = lock.acquire()
    assert lease is not None
    lease.extend(2)
    assert 6500 < r.pttl("tenure:{clean}:delay") <= 7000  # the new lease + the delay
    lease.release()
    assert r.exists("tenure:{clean}:delay") == 0
    again, _ = _take_in_thread(lock, blocking=False)
    assert again is not None  # at once: a release frees the name
    again.release()


def test_lock_delay_applies_to_a_hand_off(r: redis.Redis) -> None:
    """A waiter handed the lock gets the lock-delay guard too."""
    lock = Lock(r, "handed", ttl=0.4, lock_delay=0.5)
    first = lock.acquire()
    assert first is not None
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(lock.acquire(timeout=5)))
    waiter.start()
    time.sleep(0.1)
    first.release()
    waiter.join(timeout=10)
    second = got[0]
    assert second is not None and second.fence > first.fence
    assert r.get("tenure:{handed}:delay") == second.owner.encode()
    # the second holder "dies": the name is free only after its ttl + the delay
    lease, waited = _take_in_thread(lock, timeout=3)
    assert lease is not None and waited >= 0.75
    lease.release()


def test_bad_lock_delay(r: redis.Redis) -> None:
    for bad in (-1, "1", float("inf"), True):
        with pytest.raises(InvalidArgument, match="lock_delay"):
            Lock(r, "bad", lock_delay=bad)  # type: ignore[arg-type]


def test_info_snapshots(r: redis.Redis) -> None:
    from tenure import LockInfo

    lock = Lock(r, "info", ttl=10)
    assert lock.info() == LockInfo("info", None, 0, None, 0, 0)
    lease = lock.acquire()
    assert lease is not None
    info = lock.info()
    assert info.holder == lease.owner and info.hold_count == 1 and info.fence == lease.fence
    assert info.ttl is not None and 9 < info.ttl <= 10 and info.waiters == 0
    rlock = RLock(r, "info", ttl=10)
    with rlock as held, rlock:
        rinfo = rlock.info()
        assert rinfo.holder == held.owner and rinfo.hold_count == 2 and rinfo.fence == held.fence
        assert rinfo.label == info.label == default_label()
    lease.release()
    assert lock.info().holder is None and lock.info().fence == lease.fence


@pytest.mark.parametrize("kind", KINDS)
def test_reads_show_a_foreign_holder_not_utf8_escaped(r: redis.Redis, url: str, kind: str) -> None:
    """A named primitive whose holder another program wrote as bytes that are
    not UTF-8: info() (and locked(), where the kind has it), sync and asyncio,
    show that holder with its bytes escaped, and the keys are left as they were."""
    hold_foreign(r, kind, "alien")
    before = {k: r.dump(k) for k in r.scan_iter()}
    sync: dict[str, Any] = {
        "Lock": Lock, "RLock": RLock, "FairLock": FairLock,
        "ReadWriteLock": ReadWriteLock, "Semaphore": lambda c, n: Semaphore(c, n, 3),
    }  # fmt: skip
    made = sync[kind](r, "alien")
    info = made.info()
    assert holder_of(info) == ESCAPED, info
    if kind == "Semaphore":
        assert made.available() == 2 and info.available == 2, info
    else:
        assert made.locked()
    if kind in ("Lock", "RLock", "FairLock"):
        assert info.hold_count == 1 and info.ttl is not None, info
        assert 0 < info.ttl <= HOLD_MS / 1000, info
    if kind == "ReadWriteLock":
        assert made.write.locked() and not made.read.locked() and info.mode == "write", info
    asynchronous: dict[str, Any] = {
        "Lock": AsyncLock, "RLock": AsyncRLock, "FairLock": AsyncFairLock,
        "ReadWriteLock": AsyncReadWriteLock, "Semaphore": lambda c, n: AsyncSemaphore(c, n, 3),
    }  # fmt: skip

    async def main() -> tuple[bool, str | None]:
        client = redis.asyncio.Redis.from_url(url)
        try:
            made = asynchronous[kind](client, "alien")
            held = await made.available() < 3 if kind == "Semaphore" else await made.locked()
            return held, holder_of(await made.info())
        finally:
            await client.aclose()

    assert asyncio.run(main()) == (True, ESCAPED)
    assert {k: r.dump(k) for k in r.scan_iter()} == before


class _GateInterruptedAfterAcquire:
    """A channel's process-local gate whose ``acquire`` is interrupted (a
    KeyboardInterrupt, as a signal handler raises it between two bytecodes)
    just after the lock was taken, before the caller could note it; once."""

    armed = True

    def __init__(self) -> None:
        self._gate = threading.RLock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._gate.acquire(blocking, timeout)
        if got and _GateInterruptedAfterAcquire.armed:
            _GateInterruptedAfterAcquire.armed = False
            raise KeyboardInterrupt
        return got

    def release(self) -> None:
        self._gate.release()

    def _is_owned(self) -> bool:
        return bool(self._gate._is_owned())  # type: ignore[attr-defined]


def test_an_interrupt_just_after_the_gate_was_taken_frees_it(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interrupted waiter's gate is given back: another thread of the process
    then waits for the lock and gets it when it is released (before, it stalled
    on the gate until its timeout, though the lock was free)."""
    from tenure._drivers import _sync

    class Channel(_sync._Channel):
        def __init__(self, keys: Any) -> None:
            super().__init__(keys)
            self.gate = _GateInterruptedAfterAcquire()

    monkeypatch.setattr(_GateInterruptedAfterAcquire, "armed", True)
    monkeypatch.setattr(_sync.hubbase, "_Channel", Channel)  # for the hub of the new client below
    client = redis.Redis.from_url(url)
    holder = Lock(client, "gate-interrupted", ttl=30).acquire()
    assert holder is not None
    interrupted: list[BaseException] = []

    def interrupted_waiter() -> None:
        try:
            Lock(client, "gate-interrupted").acquire(timeout=3)
        except BaseException as exc:
            interrupted.append(exc)

    first = threading.Thread(target=interrupted_waiter)
    first.start()
    first.join(5)
    assert len(interrupted) == 1 and isinstance(interrupted[0], KeyboardInterrupt)
    assert not _GateInterruptedAfterAcquire.armed  # (the interrupt came from the gate)
    got: list[Any] = []
    waiter = threading.Thread(
        target=lambda: got.append(Lock(client, "gate-interrupted").acquire(timeout=3))
    )
    waiter.start()
    time.sleep(0.2)
    holder.release()
    waiter.join(5)
    assert got and got[0] is not None and got[0].fence > holder.fence
    got[0].release()
    assert not client.exists("tenure:{gate-interrupted}")
    client.close()


def in_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in another thread (another owner) and return its result."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join()
    return out[0]


def taken_at_once_by_another(make: Callable[[redis.Redis], Any], r: redis.Redis, why: str) -> int:
    """Another thread (another owner) takes ``make(r)`` without waiting and
    releases it (``why`` says what that shows); its fence."""

    def take_and_release() -> int:
        other = make(r).acquire(blocking=False)
        assert other is not None, why
        other.release()
        return int(other.fence)

    return int(in_thread(take_and_release))


def given_back(lock: Any, make: Callable[[redis.Redis], Any], r: redis.Redis, why: str) -> int:
    """After an interrupted acquire of ``lock``: another owner takes the lock
    at once, and then so does this one, with a larger fence; that fence."""
    first = taken_at_once_by_another(make, r, why)
    lease = lock.acquire(blocking=False)
    assert lease is not None and lease.fence > first
    lease.release()
    return int(lease.fence)


_GRANTED_KINDS: dict[str, Callable[[redis.Redis], Any]] = {
    "Lock": lambda r: Lock(r, "grant-interrupted", ttl=30),
    "RLock": lambda r: RLock(r, "grant-interrupted", ttl=30),
    "FairLock": lambda r: FairLock(r, "grant-interrupted", ttl=30),
    "Semaphore": lambda r: Semaphore(r, "grant-interrupted", permits=1, ttl=30),
    "ReadWriteLock.write": lambda r: ReadWriteLock(r, "grant-interrupted", ttl=30).write,
}


@pytest.mark.parametrize("kind", sorted(_GRANTED_KINDS))
def test_an_interrupt_between_the_grant_and_the_caller_gives_the_lock_back(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """KeyboardInterrupt while the granted lease starts (its watchdog entry):
    the grant is given back before the error reaches the caller, so another
    thread can take the lock at once and so can this one (before, the lock
    stayed held under a token nobody used until its ttl, and a Lock's owner
    got AlreadyHeldError meanwhile)."""
    from tenure._api._sync import _base

    interrupted_start, fired = raise_once(_base._HeldLease._start)
    monkeypatch.setattr(_base._HeldLease, "_start", interrupted_start)
    make = _GRANTED_KINDS[kind]
    lock = make(r)
    with pytest.raises(KeyboardInterrupt):
        lock.acquire()
    assert fired
    why = "the interrupted grant was given back"
    fence = given_back(lock, make, r, why)
    assert taken_at_once_by_another(make, r, why) > fence


@pytest.mark.parametrize("kind", sorted(_GRANTED_KINDS))
def test_the_give_back_of_a_lease_never_watched_ends_as_a_release(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """KeyboardInterrupt as the granted lease starts, before its watchdog
    entry: the release that gives it back ends as any release does (its
    end recorded, as ``_telemetry.released`` says), the lease having no
    watch to drop. Before, dropping the missing watch raised an
    ``AttributeError`` inside the give-back, which swallowed it, and the
    release's end was skipped."""
    from tenure import _telemetry
    from tenure._api._sync import _base

    interrupted_start, fired = raise_once(_base._HeldLease._start)
    monkeypatch.setattr(_base._HeldLease, "_start", interrupted_start)
    ended: list[object] = []
    released = _telemetry.released

    def noted(lease: Any, probe: Any) -> None:
        ended.append(lease)
        released(lease, probe)

    monkeypatch.setattr(_telemetry, "released", noted)
    with pytest.raises(KeyboardInterrupt):
        _GRANTED_KINDS[kind](r).acquire()
    assert fired
    assert len(ended) == 1, "the give-back's release ended"


@pytest.mark.parametrize("kind", ["Lock", "Election"])
def test_an_interrupt_as_the_lease_book_records_a_grant_leaves_no_lease_behind(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """KeyboardInterrupt as the process's lease book records a new lease (where
    a signal handler may run: its sweep of the entries of leases gone is a
    loop): the grant is given back, and the lock keeps no lease of it for the
    owner, so its ``release()`` (an election's ``resign()``) says it holds
    none. Before, the lock kept that lease, never watched, and its release
    failed with an ``AttributeError``."""
    from tenure._api._sync import _base

    interrupted_put, fired = raise_once(_base._BOOK.put)
    monkeypatch.setattr(_base._BOOK, "put", interrupted_put)
    if kind == "Election":
        election = Election(r, "book-interrupted", ttl=30)
        with pytest.raises(KeyboardInterrupt):
            election.campaign()
        assert fired
        with pytest.raises(NotOwnedError, match="does not lead"):
            election.resign()
        other = in_thread(lambda: Election(r, "book-interrupted", ttl=30).campaign(timeout=0))
        assert other is not None, "the interrupted grant was given back"
        other.resign()
        return

    def make(r: redis.Redis) -> Lock:
        return Lock(r, "book-interrupted", ttl=30)

    lock = make(r)
    with pytest.raises(KeyboardInterrupt):
        lock.acquire()
    assert fired
    with pytest.raises(NotOwnedError, match="not held by this thread"):
        lock.release()
    assert "held_here=0" in repr(lock)
    given_back(lock, make, r, "the interrupted grant was given back")


def _interrupt_when_the_reply_is_due_to_the_plan() -> tuple[Any, list[int]]:
    """A trace function that raises KeyboardInterrupt in the sync driver's loop
    at the line that hands the plan a script's reply, once, the first time that
    reply is a script's (not the server probe's): where Python may run a
    signal handler between a reply and the plan that waits for it."""
    from tenure._drivers import _sync

    lines, first = inspect.getsourcelines(_sync._drive)
    target = first + next(i for i, line in enumerate(lines) if "plan.send(reply)" in line)
    fired: list[int] = []

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        due = event == "line" and frame.f_lineno == target and not fired
        if due and isinstance(frame.f_locals.get("reply"), tuple):
            fired.append(target)
            raise KeyboardInterrupt
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code is _sync._drive.__code__ else None

    return calls, fired


@pytest.mark.parametrize("kind", sorted(_GRANTED_KINDS))
def test_an_interrupt_between_a_reply_and_its_plan_gives_the_grant_back(
    r: redis.Redis, kind: str
) -> None:
    """KeyboardInterrupt in the driver after the acquire's reply was read and
    before its plan got it (the loop's jump back, where Python checks for
    signals): the plan is told, and gives back what the attempt took. Before,
    the interrupt left the driver without a word to the plan, and the lock
    stayed held under a token nobody used until its ttl."""
    make = _GRANTED_KINDS[kind]
    lock = make(r)
    tracer, fired = _interrupt_when_the_reply_is_due_to_the_plan()
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            lock.acquire()
    finally:
        sys.settrace(previous)
    assert fired
    given_back(lock, make, r, "the interrupted attempt gave the lock back")


class AlarmTimeout(Exception):
    """What a ``signal.alarm`` handler commonly raises: an ordinary ``Exception``."""


def _interrupt_while_the_reply_is_read(error: type[BaseException]) -> tuple[Any, list[int]]:
    """A trace function that raises ``error`` at the first line of a contender's
    ``outcome`` (where the plan reads an attempt's reply), once, for a reply that
    granted the attempt: where a signal handler may run after Redis took the lock
    for the attempt and before the plan has its grant."""
    from tenure._plans.waiting import Contender
    from tenure._protocol import Status

    fired: list[int] = []

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and not fired and frame.f_locals.get("status") is Status.OK:
            fired.append(frame.f_lineno)
            raise error
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_name == "outcome" and isinstance(frame.f_locals.get("self"), Contender):
            return local
        return None

    return calls, fired


@pytest.mark.parametrize("error", [AlarmTimeout, KeyboardInterrupt])
@pytest.mark.parametrize("kind", sorted(_GRANTED_KINDS))
def test_an_interrupt_of_any_class_while_the_reply_is_read_gives_the_grant_back(
    r: redis.Redis, kind: str, error: type[BaseException]
) -> None:
    """An interrupt raised while the plan reads a granting reply, as an ordinary
    ``Exception`` (a ``signal.alarm`` handler's) as well as a KeyboardInterrupt:
    the attempt may have taken the lock, so it is given back before the error
    goes on. Before, an ``Exception`` was taken for the reply's own refusal
    (nothing taken), and the lock stayed held until its ttl."""
    make = _GRANTED_KINDS[kind]
    lock = make(r)
    tracer, fired = _interrupt_while_the_reply_is_read(error)
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        with pytest.raises(error):
            lock.acquire()
    finally:
        sys.settrace(previous)
    assert fired
    given_back(lock, make, r, "the interrupted attempt gave the lock back")


def test_an_interrupt_as_a_timed_out_waiter_leaves_the_queue_is_raised(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ordinary ``Exception`` (a signal handler's) while a waiter whose
    timeout ran out leaves the queue: the caller gets it, once the queue was
    left (a hand-off may have just made the waiter holder). Before, the
    leave's best effort swallowed it, and the acquire returned ``None`` as if
    the alarm had not fired."""
    from tenure._drivers import _sync
    from tenure._scripts import LOCK_RELEASE

    holder = Lock(r, "leave-interrupted", ttl=30).acquire()
    assert holder is not None
    evalsha = _sync._evalsha
    fired: list[int] = []

    def interrupted_leave(client: Any, step: Any, *rest: Any) -> Any:
        if step.script is LOCK_RELEASE and step.args[3] and not fired:  # (its queue member)
            fired.append(1)
            raise AlarmTimeout
        return evalsha(client, step, *rest)

    monkeypatch.setattr(_sync.drive, "_evalsha", interrupted_leave)
    with pytest.raises(AlarmTimeout):
        in_thread_raising(lambda: Lock(r, "leave-interrupted").acquire(timeout=0.3))
    assert fired
    assert r.zcard("tenure:{leave-interrupted}:waiters") == 0, "the queue was left"
    holder.release()
    assert taken_at_once_by_another(
        lambda c: Lock(c, "leave-interrupted"), r, "nobody holds it after the release"
    )


def test_an_interrupt_as_the_next_acquire_finishes_a_release_is_raised(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release that failed (a lost connection) is sent again by the owner's
    next acquire; an ordinary ``Exception`` (a signal handler's) as it is sent
    reaches the caller, and the acquire after it finishes the release. Before,
    the clean-up took it for a failed call and swallowed it: the acquire went
    on, and raised AlreadyHeldError for the lease still held."""
    from tenure._drivers import _sync
    from tenure._scripts import LOCK_RELEASE

    lock = Lock(r, "clean-up-interrupted", ttl=30)
    lease = lock.acquire()
    assert lease is not None
    evalsha = _sync._evalsha
    raising: list[type[BaseException]] = [redis.exceptions.ConnectionError, AlarmTimeout]

    def failing_release(client: Any, step: Any, *rest: Any) -> Any:
        if step.script is LOCK_RELEASE and raising:
            raise raising.pop(0)
        return evalsha(client, step, *rest)

    monkeypatch.setattr(_sync.drive, "_evalsha", failing_release)
    with pytest.raises(redis.exceptions.ConnectionError):
        lease.release()
    with pytest.raises(AlarmTimeout):
        lock.acquire(timeout=2)
    assert not raising
    again = lock.acquire(timeout=2)
    assert again is not None and again.fence > lease.fence
    again.release()


def in_thread_raising(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in another thread (another owner): its result, or its error raised here."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return out[0]


_ASYNC_GRANTED_KINDS: dict[str, Callable[[Any], Any]] = {
    "AsyncLock": lambda c: AsyncLock(c, "grant-interrupted", ttl=30),
    "AsyncRLock": lambda c: AsyncRLock(c, "grant-interrupted", ttl=30),
    "AsyncFairLock": lambda c: AsyncFairLock(c, "grant-interrupted", ttl=30),
    "AsyncSemaphore": lambda c: AsyncSemaphore(c, "grant-interrupted", permits=1, ttl=30),
    "AsyncReadWriteLock.write": lambda c: AsyncReadWriteLock(c, "grant-interrupted", ttl=30).write,
}


@pytest.mark.parametrize("kind", sorted(_ASYNC_GRANTED_KINDS))
def test_an_asyncio_interrupt_of_any_class_while_the_reply_is_read_gives_the_grant_back(
    url: str, r: redis.Redis, kind: str
) -> None:
    """The asyncio twin: an ``Exception`` raised in the task while its plan reads
    a granting reply gives the lock back (another client takes it at once)."""
    make = _ASYNC_GRANTED_KINDS[kind]

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        try:
            lock = make(client)
            tracer, fired = _interrupt_while_the_reply_is_read(AlarmTimeout)
            previous = sys.gettrace()
            sys.settrace(tracer)
            try:
                with pytest.raises(AlarmTimeout):
                    await lock.acquire()
            finally:
                sys.settrace(previous)
            assert fired
            other = make(client)
            lease = await asyncio.wait_for(asyncio.create_task(other.acquire(blocking=False)), 5)
            assert lease is not None, "the interrupted attempt gave the lock back"
            await lease.release()
        finally:
            await client.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("error", [KeyboardInterrupt, AlarmTimeout])
@pytest.mark.parametrize("kind", sorted(_GRANTED_KINDS))
def test_an_interrupt_as_a_with_blocks_release_begins_still_releases(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, kind: str, error: type[BaseException]
) -> None:
    """KeyboardInterrupt as the release of a ``with`` block's exit begins (a
    signal handler runs as a call starts), before it did anything: the block
    is gone, so nobody could release the lease, which the watchdog would renew
    for as long as the process lives (a Lock's owner then got AlreadyHeldError
    at every ``with lock:``). The exit makes the release once more."""
    make = _GRANTED_KINDS[kind]
    lock = make(r)
    first = lock.acquire()
    assert first is not None
    lease_type = type(first)
    first.release()
    interrupted, fired = raise_once(lease_type.release, error)
    monkeypatch.setattr(lease_type, "release", interrupted)
    with pytest.raises(error), lock:
        pass
    assert fired
    assert taken_at_once_by_another(make, r, "the block's lease was released") > first.fence
    with lock as again:
        assert again.fence > first.fence


@pytest.mark.parametrize("error", [KeyboardInterrupt, AlarmTimeout])
@pytest.mark.parametrize("kind", ["FairLock", "Lock", "RLock", "ReadWriteLock.write", "Semaphore"])
def test_a_release_cut_off_before_it_began_is_finished_by_the_next_acquire(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, kind: str, error: type[BaseException]
) -> None:
    """An interrupt inside ``lease.release()`` before the release began (as it
    checks the process): the owner's next acquire sends that release first and
    takes a new hold. Before, the lease stayed held, so the next acquire raised
    AlreadyHeldError (Lock, FairLock) or re-entered the old hold (RLock,
    ReadWriteLock), which then outlived every release its owner made, or, for
    a Semaphore of one permit, waited for the old lease's ttl."""
    from tenure._leasebook import LeaseLife

    make = _GRANTED_KINDS[kind]
    lock = make(r)
    first = lock.acquire()
    assert first is not None
    interrupted, fired = raise_once(LeaseLife.check_process, error)
    monkeypatch.setattr(LeaseLife, "check_process", interrupted)
    with pytest.raises(error):
        first.release()
    assert fired
    again = lock.acquire(timeout=2)
    assert again is not None and again.fence > first.fence
    again.release()
    assert taken_at_once_by_another(make, r, "the owner's releases freed the lock") > again.fence


def test_an_asyncio_block_cancelled_as_its_release_begins_still_releases(
    url: str, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The asyncio twin, for ``async with lock:``: a cancellation raised as the
    release begins, before it did anything, is followed by the release."""
    from tenure._api._async import lock as async_lock

    cancelled, fired = raise_once(async_lock.AsyncLease.release, asyncio.CancelledError)
    monkeypatch.setattr(async_lock.AsyncLease, "release", cancelled)

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        try:
            lock = AsyncLock(client, "exit-cancelled")  # (renewed: default ttl)
            with pytest.raises(asyncio.CancelledError):
                async with lock:
                    pass
            assert fired
            assert not r.exists("tenure:{exit-cancelled}")
            async with lock:
                pass
        finally:
            await client.aclose()

    asyncio.run(main())


def test_an_interrupt_in_the_drivers_clean_up_after_a_hand_off_gives_the_lock_back(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KeyboardInterrupt in the driver's clean-up just after a hand-off made a
    waiter the holder (its plan returned the grant): the grant is given back,
    and the waiter's thread can take the lock again at once."""
    from tenure._drivers import _sync

    left = _sync._Hub.leave
    armed = [False]

    def interrupted_leave(self: Any, ch: Any, token: str, kept: bool = False) -> None:
        left(self, ch, token, kept)
        if armed[0] and kept:
            armed[0] = False
            raise KeyboardInterrupt

    monkeypatch.setattr(_sync._Hub, "leave", interrupted_leave)
    holder = Lock(r, "handed-interrupted", ttl=30).acquire()
    assert holder is not None
    outcome: list[Any] = []

    def waiter() -> None:
        lock = Lock(r, "handed-interrupted", ttl=30)
        try:
            lock.acquire(timeout=5)
            outcome.append("returned")
        except KeyboardInterrupt:
            outcome.append(lock.locked())
            again = lock.acquire(blocking=False)
            outcome.append(again is not None and again.fence > holder.fence)
            if again is not None:
                again.release()

    armed[0] = True
    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.3)  # the waiter is queued
    holder.release()  # hands the lock to the waiter
    thread.join(10)
    assert outcome == [False, True]
    assert not r.exists("tenure:{handed-interrupted}")


def test_a_cancel_between_the_grant_and_the_caller_gives_the_lock_back(
    server: ServerProcess, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncio: a task cancelled while its granted lease starts gives the lock
    back before the CancelledError reaches it; another owner takes it at once."""
    from tenure._api._async import _base

    cancelled_start, fired = raise_once(_base._AsyncHeldLease._start, asyncio.CancelledError)
    monkeypatch.setattr(_base._AsyncHeldLease, "_start", cancelled_start)

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        lock = AsyncLock(client, "grant-cancelled", ttl=30)
        with pytest.raises(asyncio.CancelledError):
            await lock.acquire()
        assert fired
        assert not await lock.locked()
        lease = await AsyncLock(client, "grant-cancelled", ttl=30).acquire(blocking=False)
        assert lease is not None
        await lease.release()
        await client.aclose()

    asyncio.run(main())
    assert not r.exists("tenure:{grant-cancelled}")


def _interrupt_after_the_plan_is_closed() -> tuple[Any, list[int]]:
    """A profile function that raises KeyboardInterrupt as the driver's call
    ``plan.close()`` returns (where Python checks for signals: a handler may
    run there) in the clean-up after a plan returned a grant, once."""
    from tenure._drivers import _sync

    fired: list[int] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        due = event == "c_return" and not fired and frame.f_code is _sync._drive.__code__
        closed = due and getattr(arg, "__name__", "") == "close"
        if closed and isinstance(frame.f_locals.get("result"), Grant):
            fired.append(frame.f_lineno)
            raise KeyboardInterrupt

    return profile, fired


@pytest.mark.parametrize("kind", sorted(_GRANTED_KINDS))
def test_an_interrupt_as_the_driver_returns_the_grant_gives_it_back(
    r: redis.Redis, kind: str
) -> None:
    """KeyboardInterrupt after the driver's clean-up closed the plan that
    returned a grant (a signal handler may run as ``plan.close()`` returns):
    the grant is given back before the error reaches the caller. Before, it
    stayed held under a token nobody used until its ttl."""
    make = _GRANTED_KINDS[kind]
    lock = make(r)
    profiler, fired = _interrupt_after_the_plan_is_closed()
    sys.setprofile(profiler)
    try:
        with pytest.raises(KeyboardInterrupt):
            lock.acquire()
    finally:
        sys.setprofile(None)
    assert fired
    given_back(lock, make, r, "the interrupted grant was given back")


@pytest.mark.parametrize("delay", [0, 500])
@pytest.mark.parametrize("gone", [0, 1, 3, 4])
def test_a_release_hands_the_lock_to_the_first_waiter_that_hears_it(
    r: redis.Redis, gone: int, delay: int
) -> None:
    """A release with waiters queued hands the lock to the first one whose
    wake channel is heard (``gone``: how many of the first ones are not), with
    a fence after the stored one, and tells the next one to recheck; members
    nobody hears are dropped, and with nobody left the lock is free. The
    releasing holder's lock-delay key goes; the waiter handed the lock gets
    one of its own when the release gives a lock-delay (``delay`` ms)."""
    from tenure._scripts import LOCK_RELEASE

    keys = [f"tenure:{{hand}}{k}" for k in ("", ":waiters", ":fence", ":delay", ":released:1")]
    r.set(keys[0], "holder", px=10000)
    r.set(keys[3], "holder", px=20000)
    r.set(keys[2], str(2**52), px=600000)  # (ahead of the clock: the fence is the next one)
    members = [f"w{i}|700|token{i}" for i in range(4)]
    r.zadd(keys[1], {m: i for i, m in enumerate(members)})
    listener = r.pubsub()  # type: ignore[no-untyped-call]
    channels = ["wake:none", *(f"wake:w{i}" for i in range(gone, 4))]
    listener.subscribe(*channels)
    heard: list[tuple[bytes, bytes]] = []
    try:
        for _ in channels:  # (each subscription confirmed before the release)
            assert listener.get_message(timeout=5)["type"] == "subscribe"
        r.script_load(LOCK_RELEASE.source)
        reply = r.evalsha(LOCK_RELEASE.sha1, 5, *keys, "holder", "wake:", 600000, "", delay, "1")
        while (message := listener.get_message(timeout=0.2)) is not None:
            # (Redis 6.2's ACL guard probes the channels with "probe": ignored)
            if message["type"] == "message" and message["data"] != b"probe":
                heard.append((message["channel"], message["data"]))
    finally:
        listener.close()
    fence = 2**52 + 1
    told = [(f"wake:w{gone}".encode(), f"{fence} token{gone}".encode())]
    if gone < 3:
        told.append((f"wake:w{gone + 1}".encode(), b"recheck 700"))
    assert heard == told[: 4 - gone]
    if gone < 4:
        assert reply == 1
        assert r.get(keys[0]) == f"token{gone}".encode()
        assert 0 < r.pttl(keys[0]) <= 700
        assert r.get(keys[2]) == str(fence).encode()
        if delay:
            assert r.get(keys[3]) == f"token{gone}".encode()
            assert 700 < r.pttl(keys[3]) <= 700 + delay
        else:
            assert not r.exists(keys[3])
    else:
        assert reply == 0 and not r.exists(keys[0]) and not r.exists(keys[3])
        assert r.get(keys[2]) == str(2**52).encode()
    assert r.zrange(keys[1], 0, -1) == [m.encode() for m in members[gone + 1 :]]
    assert r.exists(keys[4])  # the release is recorded


@pytest.mark.parametrize("stored", [None, "-0", "00012", "1e3", " 7", "0x10", "PAST"])
def test_a_hand_off_fence_from_the_clock_is_its_microseconds_in_plain_digits(
    r: redis.Redis, stored: str | None
) -> None:
    """A release that hands the lock on while the fence key is behind the
    clock (gone, or a stored fence in any form the scripts read as one) mints
    the server's TIME in µs, published and stored as plain digits: between
    TIME before and after the call, also when the release runs early in a
    second (TIME's µs below 100000, whose leading zeros the digits keep)."""
    from tenure._scripts import LOCK_RELEASE

    keys = [f"tenure:{{clockhand}}{k}" for k in ("", ":waiters", ":fence", ":delay", ":released:1")]
    listener = r.pubsub()  # type: ignore[no-untyped-call]
    listener.subscribe("wake:w")
    try:
        assert listener.get_message(timeout=5)["type"] == "subscribe"
        r.script_load(LOCK_RELEASE.source)
        deadline = time.monotonic() + 5
        while r.time()[1] >= 50_000:  # (wait for the start of a second: ≤ 1 s)
            assert time.monotonic() < deadline
        r.delete(*keys)
        r.set(keys[0], "holder", px=10000)
        r.zadd(keys[1], {"w|700|token": 1})
        seconds, micros = r.time()
        if stored == "PAST":
            r.set(keys[2], seconds * 1_000_000 + micros - 1)
        elif stored is not None:
            r.set(keys[2], stored)
        before = seconds * 1_000_000 + micros
        reply = r.evalsha(LOCK_RELEASE.sha1, 5, *keys, "holder", "wake:", 600000, "", 0, "1")
        seconds, micros = r.time()
        after = seconds * 1_000_000 + micros
        # (Redis 6.2's ACL guard probes the channel with "probe" first)
        while (message := listener.get_message(timeout=5)) is not None:
            if message["data"] != b"probe":
                break
    finally:
        listener.close()
    assert reply == 1 and message is not None
    digits, token = message["data"].decode().split(" ")
    assert token == "token" and re.fullmatch(r"[1-9][0-9]{15}", digits), digits
    assert before <= int(digits) <= after, (before, digits, after)
    assert r.get(keys[2]) == digits.encode()
    assert r.get(keys[0]) == b"token"
