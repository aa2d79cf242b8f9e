"""The watchdog and the lost signal, on real servers: renewal, loss, faults."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio
from _replies import LosesReply, losing_client
from _workers import renewing_holder
from redis.backoff import NoBackoff
from redis.retry import Retry

from tenure import DEFAULT_TTL, AsyncLock, AsyncRLock, Lock, LockLostError, RLock
from tenure._drivers._watchbook import BATCH_SLACK, LINGER, RENEW_EVERY
from tenure._scripts import LOCK_EXTEND
from tenure._server import ServerProcess

SPAWN = multiprocessing.get_context("spawn")
MakeServer = Callable[..., ServerProcess]


def _watchdogs() -> int:
    return sum(t.name == "tenure-watchdog" for t in threading.enumerate())


def test_auto_renewed_lease_outlives_its_ttl(r: redis.Redis) -> None:
    lock = Lock(r, "wd", ttl=0.5, auto_renew=True)
    lease = lock.acquire()
    assert lease is not None
    time.sleep(1.6)  # more than three ttls
    assert lease.valid and not lease.lost.is_set()
    assert 0 < r.pttl("tenure:{wd}") <= 500
    other: list[Any] = []  # another owner (thread) must not get it
    t = threading.Thread(target=lambda: other.append(Lock(r, "wd").acquire(blocking=False)))
    t.start()
    t.join()
    assert other == [None]
    lease.release()
    assert not lease.lost.is_set() and not lock.locked()


def test_default_lease_is_renewed_and_an_explicit_ttl_is_not(r: redis.Redis) -> None:
    default = Lock(r, "default").acquire()
    assert default is not None and default.ttl == DEFAULT_TTL == 30.0
    short = Lock(r, "short", ttl=0.3).acquire()
    assert short is not None
    time.sleep(0.5)
    # not renewed: gone from Redis, and lost at its deadline
    assert r.exists("tenure:{short}") == 0 and short.lost.is_set()
    assert "deadline passed" in (short.lost_reason or "")
    assert default.valid and default.remaining > 29
    # the default lease is watched for renewal (its first renewal is 10 s away;
    # test_auto_renewed_lease_outlives_its_ttl shows renewal itself), the short one not
    assert default._watch.renew and not short._watch.renew
    default.release()


def test_lease_taken_away_is_lost_and_callbacks_run(r: redis.Redis) -> None:
    seen: list[tuple[str, Any]] = []
    lock = Lock(r, "taken", ttl=0.6, auto_renew=True, on_lost=lambda ls: seen.append(("lock", ls)))
    lease = lock.acquire()
    assert lease is not None
    lease.on_lost(lambda ls: seen.append(("lease", ls)))
    lease.on_lost(lambda ls: 1 / 0)  # a failing callback must not stop the others
    r.set("tenure:{taken}", "someone else", px=10_000)
    started = time.monotonic()
    assert lease.lost.wait(2)
    # found at the next renewal: every third of the ttl
    assert time.monotonic() - started < 0.6 / 3 + 0.15
    assert not lease.valid and lease.remaining == 0.0
    assert "gone" in (lease.lost_reason or "")
    assert [(who, ls is lease) for who, ls in seen] == [("lock", True), ("lease", True)]
    late: list[Any] = []
    lease.on_lost(late.append)  # registered after the loss: runs at once
    assert late == [lease]
    with pytest.raises(LockLostError, match="gone"):
        lease.release()
    assert r.get("tenure:{taken}") == b"someone else"  # the lost lease changed nothing


def test_renewals_are_batched_into_one_round_trip(url: str) -> None:
    """Ten leases renewed together cost one round trip per renewal round: every
    round trip that carries a renewal carries all ten."""
    sends: list[int] = []  # the renewals each round trip carried
    extend = LOCK_EXTEND.sha1.encode()

    class Counting(redis.Connection):
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            packed = command if isinstance(command, bytes) else b"".join(command)
            sends.append(packed.count(extend))
            super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    client = redis.Redis.from_url(url)
    client.connection_pool.connection_class = Counting
    # Taken within BATCH_SLACK of the ttl (0.2 s, for ten acquires on a loaded
    # machine), they are due together. (At 0.6 s, with 60 ms to take them in,
    # a loaded machine split them into two batches that stayed apart.)
    ttl = 2.0
    started = time.monotonic()
    leases = [Lock(client, f"batch{i}", ttl=ttl, auto_renew=True).acquire() for i in range(10)]
    taken = time.monotonic() - started
    sends.clear()
    started = time.monotonic()
    time.sleep(2.2)  # about three renewal rounds (every ttl / 3)
    slept = time.monotonic() - started
    assert all(lease is not None and lease.valid for lease in leases)
    what = f"renewals per round trip {sends}, the leases taken in {taken:.3f} s"
    # (a round trip with none: SCRIPT LOAD after NOSCRIPT, on a server that
    # did not have the renewal's script yet)
    carried = [n for n in sends if n]
    # the batching's condition: taken within the slack, the ten are due
    # together (else they may be due in a batch per slack they took)
    batches = 1 + int(taken / (ttl * BATCH_SLACK))
    if batches == 1:
        assert set(carried) == {10}, what
    # at least two rounds; at most one per third of the ttl that passed (and
    # one resent after NOSCRIPT), of one round trip per batch
    assert 2 <= len(carried) <= (slept / (ttl * RENEW_EVERY) + 2) * batches, what
    for lease in leases:
        assert lease is not None
        lease.release()


def test_renewal_survives_killed_connections(r: redis.Redis, url: str) -> None:
    lock = Lock(redis.Redis.from_url(url), "killed", ttl=0.6, auto_renew=True)
    lease = lock.acquire()
    assert lease is not None
    killed = 0
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        killed += int(r.client_kill_filter(_type="normal", skipme=True))
        killed += int(r.client_kill_filter(_type="pubsub"))
        time.sleep(0.07)
    assert killed >= 3, "nothing was killed"
    assert lease.valid and not lease.lost.is_set(), lease.lost_reason
    lease.release()


def test_paused_server_loses_the_lease_at_its_deadline(make_server: MakeServer) -> None:
    """A renewal that hangs (the server is paused) must not delay the lost signal."""
    s = make_server()
    client = redis.Redis.from_url(s.url, retry=Retry(NoBackoff(), 0))
    lease = Lock(client, "paused", ttl=0.6, auto_renew=True).acquire()
    assert lease is not None
    deadline = lease.expires_at
    s.pause()
    try:
        assert lease.lost.wait(3)
        late = time.monotonic() - deadline
    finally:
        s.resume()
    assert -0.01 < late < 0.1, f"lost {late:.3f}s after the deadline"
    assert "deadline" in (lease.lost_reason or "")
    with pytest.raises(LockLostError):
        lease.release()


def test_server_restart_reports_the_lease_lost(make_server: MakeServer) -> None:
    s = make_server()
    client = redis.Redis.from_url(s.url)
    lock = Lock(client, "restart", ttl=0.9, auto_renew=True)
    lease = lock.acquire()
    assert lease is not None
    s.restart()  # no persistence: the lock is forgotten
    assert lease.lost.wait(2), "the watchdog did not notice"
    assert not lease.valid
    with pytest.raises(LockLostError):
        lease.release()
    again = lock.acquire(timeout=2)
    assert again is not None and again.fence > lease.fence
    again.release()


def test_killed_renewing_holder_frees_the_lock_after_its_ttl(url: str) -> None:
    acquired = SPAWN.Queue()
    holder = SPAWN.Process(target=renewing_holder, args=(url, "kill9", 0.8, acquired))
    holder.start()
    try:
        fence = acquired.get(timeout=30)
        time.sleep(1.0)  # renewed past its first ttl
        client = redis.Redis.from_url(url)
        assert Lock(client, "kill9").acquire(blocking=False) is None
        assert holder.pid is not None
        os.kill(holder.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        lease = Lock(client, "kill9").acquire(timeout=5)
        waited = time.monotonic() - killed_at
    finally:
        holder.join(timeout=10)
    assert lease is not None and lease.fence > fence
    assert waited < 0.8 + 0.3, f"free only {waited:.2f}s after the kill"
    lease.release()


def _child_after_fork(url: str, out: Any) -> None:
    names = [t.name for t in threading.enumerate()]
    lease = Lock(redis.Redis.from_url(url), "child", ttl=0.5, auto_renew=True).acquire()
    assert lease is not None
    time.sleep(0.8)
    out.put((names.count("tenure-watchdog"), lease.valid))
    lease.release()


def test_watchdog_does_not_survive_fork_and_restarts_in_the_child(url: str) -> None:
    import warnings

    client = redis.Redis.from_url(url)
    lease = Lock(client, "parent", ttl=0.5, auto_renew=True).acquire()
    assert lease is not None and _watchdogs() >= 1
    fork = multiprocessing.get_context("fork")
    out = fork.Queue()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads
        child = fork.Process(target=_child_after_fork, args=(url, out))
        child.start()
    inherited_watchdogs, child_lease_valid = out.get(timeout=20)
    child.join(timeout=10)
    assert inherited_watchdogs == 0 and child_lease_valid
    assert lease.valid  # the parent's watchdog went on renewing
    lease.release()


def _watchdog_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "tenure-watchdog"}


def test_watchdog_ends_when_nothing_is_watched(url: str) -> None:
    before = _watchdog_threads()  # other tests' clients' (they may end meanwhile)
    client = redis.Redis.from_url(url)
    lease = Lock(client, "idle", auto_renew=True).acquire()  # renewal due in 10 s
    assert lease is not None
    (mine,) = _watchdog_threads() - before
    lease.release()
    mine.join(3)  # (the client is kept: its watchdog ends after its linger)
    assert not mine.is_alive()
    client.close()


def test_the_watchdog_of_a_dropped_client_ends_at_once(url: str) -> None:
    """A client made per request (on a shared pool, or its own) and dropped
    once its lease is released: its watchdog thread ends as the client goes,
    not :data:`LINGER` seconds later (clients made and dropped faster than
    that kept a thread each: about 400 threads at 350 such requests a second)."""
    pool = redis.ConnectionPool.from_url(url)
    before = _watchdog_threads()  # other tests' clients'
    for i in range(20):
        client = redis.Redis(connection_pool=pool) if i % 2 else redis.Redis.from_url(url)
        with Lock(client, f"per-request-{i}"):
            pass
        del client
    gc.collect()
    deadline = time.monotonic() + LINGER / 2
    while _watchdog_threads() - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _watchdog_threads() - before
    pool.disconnect()


def test_rlock_hold_is_renewed_and_lost_together(r: redis.Redis) -> None:
    lock = RLock(r, "rw", ttl=0.5, auto_renew=True)
    outer = lock.acquire()
    inner = lock.acquire()
    assert outer is not None and inner is not None
    time.sleep(1.2)
    assert outer.valid and inner.valid and lock.hold_count() == 2
    r.delete("tenure:{rw}:rlock")
    assert outer.lost.wait(1) and inner.lost.wait(0.1)
    with pytest.raises(LockLostError):
        inner.release()
    with pytest.raises(LockLostError):
        outer.release()


def test_release_retried_after_a_lost_reply_succeeds(url: str) -> None:
    """redis-py retries a command whose reply was lost; tenure's release and
    acquire are idempotent, so the retry reports what the first call did."""
    from tenure._scripts import LOCK_ACQUIRE, LOCK_RELEASE

    client = losing_client(url, retries=2)
    lock = Lock(client, "retried", ttl=30)
    LosesReply.armed = LOCK_ACQUIRE.sha1
    lease = lock.acquire()
    assert LosesReply.armed == "", "the reply was not dropped"
    assert lease is not None
    assert client.get("tenure:{retried}") == lease.owner.encode()
    assert int(client.get("tenure:{retried}:fence") or 0) == lease.fence
    LosesReply.armed = LOCK_RELEASE.sha1
    lease.release()  # executed, reply lost, retried: not an error
    assert LosesReply.armed == ""
    assert not lock.locked() and not lease.lost.is_set()


def test_rlock_retried_calls_count_once(url: str) -> None:
    """A retried re-entry or release of an RLock must not count twice: a double
    count-down would free the lock while its owner still holds it."""
    from tenure._scripts import RLOCK_ACQUIRE, RLOCK_RELEASE

    client = losing_client(url, retries=2)
    lock = RLock(client, "retried-r", ttl=30)
    for script in (RLOCK_ACQUIRE, RLOCK_ACQUIRE, RLOCK_RELEASE):
        LosesReply.armed = script.sha1
        if script is RLOCK_ACQUIRE:
            assert lock.acquire() is not None
        else:
            lock.release()
        assert LosesReply.armed == "", f"the reply of {script.name} was not dropped"
    assert lock.hold_count() == 1  # two acquires, one release: each counted once
    LosesReply.armed = RLOCK_RELEASE.sha1
    lock.release()
    assert LosesReply.armed == "" and not lock.locked()


def test_async_auto_renewal_and_lost_signal(url: str) -> None:
    asyncio.run(_async_auto_renewal_and_lost_signal(url))


async def _async_auto_renewal_and_lost_signal(url: str) -> None:
    client = redis.asyncio.Redis.from_url(url)
    lock = AsyncLock(client, "awd", ttl=0.5, auto_renew=True)
    lease = await lock.acquire()
    assert lease is not None
    await asyncio.sleep(1.3)
    assert lease.valid and not lease.lost.is_set()
    await client.delete("tenure:{awd}")
    async with asyncio.timeout(1):
        await lease.lost.wait()
    assert "gone" in (lease.lost_reason or "")
    with pytest.raises(LockLostError):
        await lease.release()
    rlock = AsyncRLock(client, "awd-r", ttl=0.4)
    held = await rlock.acquire()
    assert held is not None
    async with asyncio.timeout(1):
        await held.lost.wait()  # not renewed: lost at its deadline
    await client.aclose()


def test_async_on_lost_coroutine_callbacks_are_run(url: str) -> None:
    """An ``async def`` on_lost callback of an asyncio lease is run in the
    event loop (as a task), both the lock's and one added by ``on_lost``,
    also once the lease is already lost. Before, it was called and its
    coroutine dropped: it never ran (only a "never awaited" warning)."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        ran: list[str] = []

        async def from_lock(lease: Any) -> None:
            await asyncio.sleep(0)
            ran.append("lock")

        async def from_lease(lease: Any) -> None:
            ran.append("lease")

        lease = await AsyncLock(client, "acb", ttl=0.2, on_lost=from_lock).acquire()
        assert lease is not None
        lease.on_lost(from_lease)
        async with asyncio.timeout(1):
            await lease.lost.wait()
        for _ in range(50):
            if len(ran) == 2:
                break
            await asyncio.sleep(0.01)
        assert sorted(ran) == ["lease", "lock"]
        lease.on_lost(from_lease)  # already lost: run at once
        await asyncio.sleep(0.05)
        assert ran.count("lease") == 2
        await client.aclose()

    asyncio.run(main())


def test_async_callback_raising_cancelled_does_not_stop_the_watchdog(url: str) -> None:
    """A plain callback run in the asyncio watchdog's task that raises
    ``CancelledError`` (no ``Exception``, and no cancellation of the task: a
    plain function has no await to cancel) is logged: the client's other
    leases go on being renewed."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        fine = await AsyncLock(client, "fine", ttl=0.6, auto_renew=True).acquire()
        short = await AsyncLock(client, "short", ttl=0.2).acquire()
        assert fine is not None and short is not None

        def cancels(lease: Any) -> None:
            raise asyncio.CancelledError

        short.on_lost(cancels)
        async with asyncio.timeout(1):
            await short.lost.wait()
        await asyncio.sleep(1.3)  # two ttls more
        assert fine.valid and not fine.lost.is_set(), fine.lost_reason
        await fine.release()
        await client.aclose()

    asyncio.run(main())


def test_a_short_outage_does_not_lose_the_lease(make_server: MakeServer) -> None:
    """Redis paused for less than the lease's remaining time: the hanging renewal
    completes when it comes back, in time, and the lease is kept."""
    s = make_server()
    lease = Lock(redis.Redis.from_url(s.url), "blip", ttl=1.5, auto_renew=True).acquire()
    assert lease is not None
    time.sleep(0.55)  # a renewal has just gone out
    s.pause()
    time.sleep(0.5)
    s.resume()
    time.sleep(1.0)  # renewed since
    assert lease.valid and not lease.lost.is_set(), lease.lost_reason
    lease.release()


def test_semaphore_leases_are_renewed_and_released_once(url: str) -> None:
    from tenure import Semaphore
    from tenure._scripts import SEMAPHORE_RELEASE

    client = losing_client(url, retries=2)
    sem = Semaphore(client, "wd-sem", 2, ttl=0.5, auto_renew=True)
    lease = sem.acquire()
    assert lease is not None
    time.sleep(1.3)  # more than two ttls: renewed
    assert lease.valid and not lease.lost.is_set() and sem.available() == 1
    LosesReply.armed = SEMAPHORE_RELEASE.sha1
    lease.release()  # executed, reply lost, retried: recognised, not an error
    assert LosesReply.armed == "" and sem.available() == 2


def test_a_new_rlock_hold_ends_the_old_leases_and_keeps_its_watch(r: redis.Redis) -> None:
    lock = RLock(r, "new-hold", ttl=0.6, auto_renew=True)
    old = lock.acquire()
    assert old is not None
    r.delete("tenure:{new-hold}:rlock")  # the hold ends behind its back (release --force)
    new = lock.acquire()  # a new hold of the same owner
    assert new is not None and new.fence > old.fence
    assert old.lost.is_set() and not old.valid
    with pytest.raises(LockLostError):
        old.release()  # must not stop the watch of the new hold
    time.sleep(1.3)  # two ttls: renewed
    assert new.valid and not new.lost.is_set(), new.lost_reason
    new.release()


def test_a_broken_lease_and_a_failing_callback_do_not_stop_the_watchdog(
    r: redis.Redis, url: str
) -> None:
    """One lease's key now holds a hash: its renewal finds it gone (lost at the
    next renewal, not at its deadline), and the client's other lease goes on
    being renewed."""
    client = redis.Redis.from_url(url)
    broken = Lock(client, "broken", ttl=0.6, auto_renew=True).acquire()
    fine = Lock(client, "fine", ttl=0.6, auto_renew=True).acquire()
    assert broken is not None and fine is not None
    broken.on_lost(lambda lease: 1 / 0)  # runs on the watchdog's thread: must not kill it
    r.delete("tenure:{broken}")
    r.hset("tenure:{broken}", "not", "a lock")  # WRONGTYPE for every renewal
    assert broken.lost.wait(0.6 / 3 + 0.2) and "gone" in (broken.lost_reason or "")
    time.sleep(1.3)  # two ttls more
    assert fine.valid and not fine.lost.is_set(), fine.lost_reason
    fine.release()


@pytest.mark.parametrize("escape", [SystemExit, KeyboardInterrupt, GeneratorExit])
def test_a_callback_that_exits_does_not_stop_the_watchdog(
    url: str, escape: type[BaseException]
) -> None:
    """A callback on the watchdog's thread that raises what is no
    ``Exception`` (``sys.exit()`` in it, meant to end the process, only ends
    that thread) is logged like any failing callback: the lease's other
    callbacks run, and the client's other leases go on being renewed."""
    client = redis.Redis.from_url(url)
    fine = Lock(client, "fine", ttl=0.6, auto_renew=True).acquire()
    short = Lock(client, "short", ttl=0.2).acquire()  # not renewed: lost at its deadline
    assert fine is not None and short is not None
    seen: list[str] = []

    def escapes(lease: Any) -> None:
        raise escape

    short.on_lost(escapes)
    short.on_lost(lambda lease: seen.append("after"))
    assert short.lost.wait(1)
    time.sleep(1.3)  # two ttls more
    assert seen == ["after"]
    assert fine.valid and not fine.lost.is_set(), fine.lost_reason
    fine.release()


def test_renewals_survive_script_flush(r: redis.Redis) -> None:
    """The renewal batch gets NOSCRIPT after SCRIPT FLUSH: it loads the scripts
    and sends the batch again."""
    leases = [Lock(r, f"flush{i}", ttl=0.5, auto_renew=True).acquire() for i in range(3)]
    r.script_flush()
    time.sleep(1.3)
    for lease in leases:
        assert lease is not None and lease.valid and not lease.lost.is_set(), lease
        lease.release()


def test_a_lease_held_as_its_event_loop_ends_does_not_keep_its_client(url: str) -> None:
    """Each ``asyncio.run`` makes a client, takes an auto-renewed lease and
    ends holding it: the driver's state of an ended loop (its watchdog's book
    holds the lease, which holds the lock and the client) is dropped as the
    next loops make theirs, so the clients, their pools and their connections
    go (before, each stayed in the table of states for good, one server
    connection per loop)."""
    loops = 30

    async def hold() -> weakref.ref[Any]:
        client = redis.asyncio.Redis.from_url(url)
        lease = await AsyncLock(client, f"left-held-{os.urandom(4).hex()}", ttl=5).acquire()
        assert lease is not None
        await client.aclose()
        return weakref.ref(client)

    refs = [asyncio.run(hold()) for _ in range(loops)]
    gc.collect()
    kept = [ref for ref in refs if ref() is not None]
    # (the states of ended loops are swept as new ones are made: a few are left)
    assert len(kept) <= loops // 3, len(kept)
