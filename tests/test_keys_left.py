"""What a name leaves in Redis after a typical life: every key has the lifetime
docs/guide/keys-and-memory.md gives it.

Each primitive lives a typical life (a holder, a waiter, a hand-off, releases,
a lock-delay, a retried call); then every key left must expire within its
documented bound (``0 < PTTL <= bound``), and within 10 minutes, except the
keys kept on purpose: a semaphore's permit count (its own bound, 7 days), a
latch's count (and who set it) while it is not zero, and a ``FencedKey``'s
value and seen fence (no expiry).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis
from _replies import LosesReply, losing_client

from tenure import (
    CountDownLatch,
    Election,
    FairLock,
    FencedKey,
    Lease,
    Lock,
    ReadWriteLock,
    RLock,
    Semaphore,
)
from tenure._keys import parse_key
from tenure._plans.common import FENCE_KEEP_MS
from tenure._plans.election import KEEP_MS as ELECTION_KEEP_MS
from tenure._plans.latch import OPENED_KEEP_MS
from tenure._plans.lock import FOREIGN_MEMORY_MS
from tenure._plans.semaphore import PERMITS_KEEP_MS
from tenure._scripts import FAIR_ACQUIRE, LOCK_ACQUIRE, LOCK_RELEASE, SEMAPHORE_RELEASE

TTL = 2.0  # s, the leases of these lives
TTL_MS = 2000
DELAY = 0.5  # s, their lock-delay
WAITER_TIMEOUT = 1.0  # s, the fair lock's
TEN_MINUTES_MS = 600_000

#: The documented bound (ms) on each role's PTTL after a life with leases of
#: TTL_MS, a lock-delay of DELAY and a fair waiter timeout of WAITER_TIMEOUT.
BOUND_MS: dict[str, int] = {
    "lock": TTL_MS,
    "holds": TTL_MS,
    "delay": TTL_MS + int(DELAY * 1000),
    "fence": FENCE_KEEP_MS,
    "waiters": TTL_MS + 60_000,
    "deadlines": int(WAITER_TIMEOUT * 1000) + 60_000,
    "released": 120_000,
    "op": 120_000,
    "opened": OPENED_KEEP_MS,
    "permits": PERMITS_KEEP_MS,
    "chain": FENCE_KEEP_MS,  # an exact key's hand-off chain: with the fence
    "foreign": FOREIGN_MEMORY_MS,  # an exact key's last foreign holder
    "record": ELECTION_KEEP_MS,  # an election's leader record and change log
    "log": ELECTION_KEEP_MS,
}

#: The roles kept longer than ten minutes on purpose.
KEPT_LONGER = frozenset({"permits", "record", "log"})


def retrying(url: str) -> redis.Redis:
    """A client that retries a call whose reply was lost (see :class:`LosesReply`)."""
    return losing_client(url, retries=2)


def keys_left(r: redis.Redis) -> dict[str, int]:
    """Every key in the database with its PTTL (ms)."""
    return {k.decode(): int(r.pttl(k)) for k in r.scan_iter(count=1000)}


def check_left(
    r: redis.Redis, *, permanent: frozenset[str] = frozenset(), lock: str = ""
) -> dict[str, int]:
    """Assert every key left expires within its role's bound, and within 10 minutes
    (the permit count apart); ``permanent`` keys have no expiry, and ``lock`` is an
    exact-key lock's own key (a lock). Returns the keys with their PTTLs."""
    left = keys_left(r)
    for key, pttl in left.items():
        if key in permanent:
            assert pttl == -1, (key, pttl)
            continue
        info = parse_key(key)
        assert info is not None or key == lock, key
        role = "lock" if info is None else info.role
        bound = BOUND_MS[role]
        assert 0 < pttl <= bound, (key, pttl, bound)
        if role not in KEPT_LONGER:
            assert pttl <= TEN_MINUTES_MS, (key, pttl)
    return left


@contextmanager
def waiter(acquire: Callable[[], object]) -> Iterator[list[object]]:
    """Run ``acquire()`` in another thread (another owner); release what it got."""
    got: list[object] = []

    def run() -> None:
        lease = acquire()
        got.append(lease)
        if lease is not None:
            lease.release()  # type: ignore[attr-defined]

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield got
    thread.join(10)
    assert not thread.is_alive()


def until(check: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def lock_life(r: redis.Redis, lock: Lock) -> None:
    """A lock's typical life, with retried calls, then its keys checked."""
    keys = lock._keys
    LosesReply.armed = LOCK_ACQUIRE.sha1  # retried: reads its fence back
    lease = lock.acquire()
    assert LosesReply.armed == "" and lease is not None
    with waiter(lambda: lock.acquire(timeout=5)) as got:
        until(lambda: r.exists(keys.waiters) == 1)
        lease.release()  # hands the lock to the waiter
    assert got and isinstance(got[0], Lease) and got[0].fence > lease.fence
    again = lock.acquire()
    assert again is not None
    LosesReply.armed = LOCK_RELEASE.sha1  # retried: recognised
    again.release()
    assert LosesReply.armed == ""
    # a lease that ends unreleased leaves its lock-delay guard
    lapsed = lock.acquire()
    assert lapsed is not None and lapsed.fence > again.fence
    left = check_left(r, lock=keys.lock)
    record = keys.release_record(again._life.release_op)  # the retried call's
    assert {keys.fence, record, keys.delay, keys.lock} <= set(left)


def test_lock_leaves_only_short_lived_keys(r: redis.Redis, url: str) -> None:
    client = retrying(url)
    lock_life(r, Lock(client, "orders:42", ttl=TTL, lock_delay=DELAY))
    r.flushall()
    lock_life(r, Lock(client, key="orders:42", ttl=TTL, lock_delay=DELAY))
    client.close()


def test_rlock_leaves_only_short_lived_keys(r: redis.Redis) -> None:
    rlock = RLock(r, "orders:42", ttl=TTL, lock_delay=DELAY)
    lease = rlock.acquire()
    again = rlock.acquire()
    assert lease is not None and again is not None
    with waiter(lambda: rlock.acquire(timeout=5)) as got:
        until(lambda: r.exists(rlock._keys.waiters) == 1)
        again.release()
        lease.release()
    assert got and got[0] is not None
    left = check_left(r)
    assert rlock._keys.fence in left


def test_an_election_keeps_only_its_record_and_log_longer(r: redis.Redis) -> None:
    election = Election(r, "orders:42", ttl=TTL, lock_delay=DELAY, waiter_timeout=WAITER_TIMEOUT)
    leadership = election.campaign()
    assert leadership is not None
    leadership.proclaim("10.0.0.7:8080")
    with waiter(lambda: Election(r, "orders:42", ttl=TTL).campaign(timeout=5)) as got:
        until(lambda: r.exists(election._keys.waiters) == 1)
        leadership.resign()
    assert got and got[0] is not None
    left = check_left(r)
    keys = election._keys
    assert {keys.record, keys.log} <= set(left)
    assert left[keys.record] > TEN_MINUTES_MS  # who led last, for leader() and observers


def test_fair_lock_with_a_waiter_that_gave_up(r: redis.Redis) -> None:
    fair = FairLock(r, "orders:42", ttl=TTL, lock_delay=DELAY, waiter_timeout=WAITER_TIMEOUT)
    lease = fair.acquire()
    assert lease is not None
    with waiter(lambda: fair.acquire(timeout=0.2)) as gave_up:
        pass
    assert gave_up == [None]
    with waiter(lambda: fair.acquire(timeout=5)) as got:
        until(lambda: r.exists(fair._keys.waiters) == 1)
        lease.release()
    assert got and got[0] is not None
    # a waiter that died in the queue: its member stays until its deadline
    holder = fair.acquire()
    assert holder is not None
    keys = fair._fair
    r.script_load(FAIR_ACQUIRE.source)
    member = f"dead.1|1000|{'d' * 32}"
    status, _ = r.evalsha(
        FAIR_ACQUIRE.sha1,
        5,
        keys.lock,
        keys.fence,
        keys.waiters,
        keys.deadlines,
        keys.delay,
        "d" * 32,
        "dead:",
        TTL_MS,
        member,
        FENCE_KEEP_MS,
        0,
        int(WAITER_TIMEOUT * 1000),
    )
    assert status == 2 and r.exists(keys.waiters, keys.deadlines) == 2
    holder.release()
    left = check_left(r)
    record = fair._keys.release_record(holder._life.release_op)
    assert fair._keys.fence in left and record in left


def test_rwlock_leaves_only_short_lived_keys(r: redis.Redis) -> None:
    rw = ReadWriteLock(r, "orders:42", ttl=TTL, lock_delay=DELAY)
    lease = rw.write.acquire()
    assert lease is not None
    with waiter(lambda: rw.read.acquire(timeout=5)) as got:
        until(lambda: r.exists(rw._keys.waiters) == 1)
        lease.release()
    assert got and got[0] is not None
    reader = rw.read.acquire()
    assert reader is not None
    reader.release()
    left = check_left(r)
    assert rw._keys.fence in left
    assert "op" in {info.role for k in left if (info := parse_key(k)) is not None}


def test_semaphore_keeps_only_its_count(r: redis.Redis, url: str) -> None:
    client = retrying(url)
    sem = Semaphore(client, "orders:42", 1, ttl=TTL)
    keys = sem._keys
    lease = sem.acquire()
    assert lease is not None
    with waiter(lambda: sem.acquire(timeout=5)) as got:
        until(lambda: r.exists(keys.waiters) == 1)
        lease.release()
    assert got and got[0] is not None
    again = sem.acquire()
    assert again is not None
    LosesReply.armed = SEMAPHORE_RELEASE.sha1  # retried: recognised
    again.release()
    assert LosesReply.armed == ""
    sem.set_permits(2)
    left = check_left(r)
    # the count is kept on purpose, far longer than the fence
    assert left[keys.permits] > TEN_MINUTES_MS
    assert 0 < left[keys.fence] <= FENCE_KEEP_MS
    client.close()


def test_latch_keeps_only_a_count_that_is_not_zero(r: redis.Redis) -> None:
    latch = CountDownLatch(r, "orders:42")
    assert latch.try_set_count(2)
    latch.count_down()
    keys = latch._keys
    # a lapse would open it; who set it lives as long
    left = check_left(r, permanent=frozenset({keys.count, keys.by}))
    assert keys.by in left
    latch.count_down()
    left = check_left(r)
    assert keys.count not in left and keys.by not in left and keys.opened in left


def test_fenced_key_keeps_its_value_and_seen_fence(r: redis.Redis) -> None:
    fenced = FencedKey(r, "orders:42:state")
    fenced.set("paid", 10)
    fenced.set("shipped", 11)
    seen_key = fenced._seen_key
    assert check_left(r, permanent=frozenset({fenced.key, seen_key})).keys() == {
        fenced.key,
        seen_key,
    }


def test_fence_increases_after_its_key_expired(r: redis.Redis) -> None:
    """Once the fence key is gone, the next fence comes from the server's clock
    and is still larger than every fence given out before."""
    lock = Lock(r, "orders:42", ttl=TTL)
    fences = []
    for _ in range(3):
        lease = lock.acquire()
        assert lease is not None
        fences.append(lease.fence)
        lease.release()
        r.pexpire(lock._keys.fence, 1)
        until(lambda: r.exists(lock._keys.fence) == 0)
    assert fences == sorted(set(fences))
    # while the key lives it wins over a clock behind it (as after a step back)
    ahead = int(r.time()[0]) * 1_000_000 + 3_600_000_000
    r.set(lock._keys.fence, ahead, px=FENCE_KEEP_MS)
    lease = lock.acquire()
    assert lease is not None and lease.fence == ahead + 1
    lease.release()


def test_fence_key_outlives_a_long_lease(r: redis.Redis) -> None:
    """A lease longer than 10 minutes keeps its fence key as long as the lease (a
    retried acquire reads its fence back), and a retry gets the same fence."""
    lock = Lock(r, "orders:42", ttl=3600)
    lease = lock.acquire()
    assert lease is not None
    pttl = int(r.pttl(lock._keys.fence))
    assert FENCE_KEEP_MS < pttl <= 3_600_000
    lease.release()


def test_a_waiter_whose_queue_key_expired_still_gets_the_lock(r: redis.Redis) -> None:
    """The queue key lapsing under a waiter costs latency (the waiter retries when
    the lease it saw ends), never the lock."""
    lock = Lock(r, "orders:42", ttl=1.0)
    lease = lock.acquire()
    assert lease is not None
    started = time.monotonic()
    with waiter(lambda: lock.acquire(timeout=10)) as got:
        until(lambda: r.exists(lock._keys.waiters) == 1)
        r.delete(lock._keys.waiters)  # as if it had expired
        lease.release()  # nobody to hand it to: the lock is free
    assert got and got[0] is not None
    assert time.monotonic() - started < 5.0


def test_a_renewal_keeps_the_fence_key_of_a_held_lock(r: redis.Redis) -> None:
    """A lock held longer than the fence key's 10 minutes (renewed by its
    watchdog, or extended) keeps its fence key, so ``info()`` shows its fence."""
    lock = Lock(r, "orders:42", ttl=TTL)
    lease = lock.acquire()
    assert lease is not None
    r.pexpire(lock._keys.fence, 1000)  # as if the grant were 10 minutes old
    lease.extend(TTL)
    assert FENCE_KEEP_MS - 60_000 < int(r.pttl(lock._keys.fence)) <= FENCE_KEEP_MS
    assert lock.info().fence == lease.fence
    lease.release()
