"""The life of a lease (tenure._leasebook): forks, copies, failed and interrupted
releases, leases declared lost, and guards shared between threads, on real servers;
and the transition table itself, without Redis."""

from __future__ import annotations

import asyncio
import copy
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio
from _replies import LosesReply, losing_client
from redis.backoff import NoBackoff
from redis.retry import Retry

from tenure import (
    AsyncFairLock,
    AsyncLock,
    AsyncReadWriteLock,
    AsyncRLock,
    AsyncSemaphore,
    FairLock,
    Lock,
    LockLostError,
    NotOwnedError,
    ReadWriteLock,
    RLock,
    Semaphore,
)
from tenure._leasebook import TRANSITIONS, LeaseBook, LeaseLife, Phase, Release
from tenure._server import ServerProcess

MakeServer = Callable[..., ServerProcess]


# --- the transition table, without Redis ---------------------------------------


def test_release_then_done() -> None:
    life = LeaseLife(0, "op1")
    assert life.held and life.may_move_deadline()
    assert life.begin_release("x", 1) is Release.SEND
    assert life.phase is Phase.RELEASING and not life.may_move_deadline()
    assert life.begin_release("x", 1) is Release.SEND  # a failed release is sent again
    assert life.released() is False
    assert life.phase.value == "released"
    with pytest.raises(NotOwnedError, match="already released"):
        life.begin_release("x", 1)
    with pytest.raises(NotOwnedError, match="already released"):
        life.begin_extend("x", 1)
    assert life.lose("late") is False and life.phase.value == "released"


def test_lost_once_and_cleaned_up() -> None:
    life = LeaseLife(0, "op1")
    assert life.lose("gone") is True and life.lose("again") is False
    assert life.phase is Phase.LOST and life.lost_reason == "gone"
    assert life.begin_release("x", 1) is Release.CLEAN_UP
    with pytest.raises(LockLostError, match="gone"):
        life.begin_extend("x", 1)
    assert life.released() is True and life.phase is Phase.LOST  # never un-lost


def test_releasing_refuses_extend_and_may_be_lost() -> None:
    life = LeaseLife(0, "op1")
    life.begin_release("x", 1)
    with pytest.raises(NotOwnedError, match="release was attempted"):
        life.begin_extend("x", 1)
    assert life.lose("deadline") is True and life.phase is Phase.LOST


#: Each event of the table, as the lease's owner or watchdog reports it.
EVENTS: dict[str, Callable[[LeaseLife], object]] = {
    "release sent": lambda life: life.begin_release("x", 1),
    "released": lambda life: life.released(),
    "lost": lambda life: life.lose("gone"),
}


@pytest.mark.parametrize("event", EVENTS)
@pytest.mark.parametrize("start", list(Phase), ids=lambda p: p.value)
def test_every_phase_change_is_a_move_of_the_table(start: Phase, event: str) -> None:
    life = LeaseLife(0, "op1")
    life.phase = start
    try:
        EVENTS[event](life)
    except NotOwnedError:
        assert (start, event) == (Phase.RELEASED, "release sent")
    assert life.phase is TRANSITIONS.get((start, event), start)


def test_other_process_is_refused() -> None:
    life = LeaseLife(3, "op1")
    life.check_process("x", 1, 3, "release")
    with pytest.raises(NotOwnedError, match="forked child"):
        life.check_process("x", 1, 4, "release")


def test_book_reports_leases_left_behind() -> None:
    class Lease:
        def __init__(self) -> None:
            self._life = LeaseLife(0, "op1")

    book, lease = LeaseBook(), Lease()
    book.put("k", lease)
    assert book.held("k") and book.left_behind("k") is None
    lease._life.begin_release("x", 1)
    assert not book.held("k") and book.left_behind("k") is lease
    lease._life.lose("deadline")
    assert book.left_behind("k") is lease
    lease._life.cleaned = True
    assert book.left_behind("k") is None
    del lease
    assert book.get("k") is None  # entries go with their lease


def test_book_drops_the_entries_of_leases_gone() -> None:
    """A process that takes many names (or many threads one name) keeps no
    entry per name once its leases are gone; a live lease keeps its own."""

    class Lease:
        def __init__(self) -> None:
            self._life = LeaseLife(0, "op1")

    book, kept = LeaseBook(), Lease()
    book.put("kept", kept)
    for n in range(10_000):
        book.put(("gone", n), Lease())  # (dropped at once: nothing refers to it)
    assert len(book._leases) < 200
    assert book.get("kept") is kept and book.held("kept")


def test_watch_book_after_a_release_attempt() -> None:
    """Once a release was attempted the watch book sends no renewal and no claim
    extend, and a renewal in flight that finds the lease gone (the release came
    first in Redis) is no loss: the lease is lost only if still watched at its
    deadline."""
    from dataclasses import dataclass

    from tenure._drivers._watchbook import WatchBook
    from tenure._protocol import Status

    @dataclass
    class Fake:
        ttl: float
        expires_at: float
        _claim: float = 0.0
        _given_up: bool = False

        def _renewal(self) -> Any:
            return None

        def _renewed(self, expires_at: float) -> None:
            self.expires_at = expires_at

        def _lose(self, reason: str) -> None:
            raise AssertionError("the book never calls it")

    book = WatchBook()
    renewed = book.add(Fake(3.0, 103.0), True, 100.0)
    claimed = book.add(Fake(3.0, 101.0, _claim=1.0), False, 100.0)
    book.stop_renewing(claimed)  # released before its claim extend was sent
    assert book.take_due(101.0) == [renewed]  # the renewal is in flight ...
    book.stop_renewing(renewed)  # ... when the release begins
    assert book.settle(renewed, (Status.NOT_OWNED, 0), 101.0, 101.1) is None
    assert book.take_due(200.0) == []  # nothing is ever sent again
    book.discard(renewed, 101.2)  # its release returned
    assert book.expired(103.0) == [claimed]  # the other: lost at its deadline
    assert book.settle(renewed, (Status.OK, 0), 101.0, 101.3) is None  # never revived


# --- a lease is inert outside its process and cannot be copied --------------------


def _in_child(action: Callable[[], str]) -> str:
    """Run ``action`` in a forked child; return what it returns (or its error)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.close(read)
            try:
                out = action()
            except BaseException as exc:
                out = f"{type(exc).__name__}: {exc}"
            os.write(write, out.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


@pytest.mark.parametrize("kind", ["Lock", "Semaphore", "RLock", "FairLock", "write", "read"])
def test_forked_child_cannot_release_or_extend_the_parents_lease(
    r: redis.Redis, url: str, kind: str
) -> None:
    import warnings

    make: dict[str, Callable[[], Any]] = {
        "Lock": lambda: Lock(r, "forked", ttl=30),
        "Semaphore": lambda: Semaphore(r, "forked", 1, ttl=30),
        "RLock": lambda: RLock(r, "forked", ttl=30),
        "FairLock": lambda: FairLock(r, "forked", ttl=30),
        "write": lambda: ReadWriteLock(r, "forked", ttl=30).write,
        "read": lambda: ReadWriteLock(r, "forked", ttl=30).read,
    }
    lock = make[kind]()
    lease = lock.acquire()
    assert lease is not None
    before = sorted((k, r.dump(k)) for k in r.keys("*") if r.type(k) != b"none")

    def child() -> str:
        for attempt in (lease.release, lease.extend):
            try:
                attempt()
                return f"{attempt.__name__} succeeded in the child"
            except NotOwnedError as exc:
                assert "forked child" in str(exc), exc
        return "refused"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads
        assert _in_child(child) == "refused"
    after = sorted((k, r.dump(k)) for k in r.keys("*") if r.type(k) != b"none")
    assert [k for k, _ in after] == [k for k, _ in before]  # nothing written
    assert lease.valid
    other = make[kind]()
    taken: list[Any] = []
    t = threading.Thread(target=lambda: taken.append(other.acquire(blocking=False)))
    t.start()
    t.join()
    if kind != "read":
        assert taken == [None], "the child's release let another owner in"
    lease.release()  # the parent's release is its own: it succeeds, once
    assert not lease.valid
    if taken and taken[0] is not None:
        taken[0].release()


def test_a_lease_cannot_be_copied_or_pickled(r: redis.Redis) -> None:
    lease = Lock(r, "copy", ttl=30).acquire()
    assert lease is not None
    for attempt in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError, match="owned by the thread or task"):
            attempt(lease)
    lease.release()


@pytest.mark.parametrize("kind", ["Lock", "FairLock", "Semaphore"])
def test_a_release_by_anyone_else_is_reported_to_the_holder_as_lost(
    r: redis.Redis, kind: str
) -> None:
    """The release record names the call, not only the token: a forced release
    (the same token, another call) is not taken for a retry of the holder's."""
    from tenure._ops import force_release, target

    make: dict[str, Callable[[], Any]] = {
        "Lock": lambda: Lock(r, "other-call", ttl=30),
        "FairLock": lambda: FairLock(r, "other-call", ttl=30),
        "Semaphore": lambda: Semaphore(r, "other-call", 2, ttl=30),
    }
    lease = make[kind]().acquire()
    assert lease is not None
    assert force_release(r, target(kind, "other-call", prefix="tenure:")) is not None
    with pytest.raises(LockLostError):
        lease.release()
    assert lease.lost.is_set()


# --- once a release was attempted, the lease is never renewed again ----------------


def _timing_out_client(s: ServerProcess) -> redis.Redis:
    return redis.Redis.from_url(s.url, socket_timeout=0.3, retry=Retry(NoBackoff(), 0))


SYNC_KINDS: dict[str, Callable[[redis.Redis, str], Any]] = {
    "Lock": lambda c, name: Lock(c, name, ttl=1.0, auto_renew=True),
    "RLock": lambda c, name: RLock(c, name, ttl=1.0, auto_renew=True),
    "FairLock": lambda c, name: FairLock(c, name, ttl=1.0, auto_renew=True),
    "write": lambda c, name: ReadWriteLock(c, name, ttl=1.0, auto_renew=True).write,
    "read": lambda c, name: ReadWriteLock(c, name, ttl=1.0, auto_renew=True).read,
    "Semaphore": lambda c, name: Semaphore(c, name, 1, ttl=1.0, auto_renew=True),
}


def _nothing_held(client: redis.Redis, deadline: float, kind: str, name: str = "stuck") -> bool:
    """Whether the ``kind`` primitive ``name`` is free (as a fresh object on
    ``client`` reads Redis) before ``deadline``."""
    fresh = SYNC_KINDS[kind](client, name)
    while time.monotonic() < deadline:
        if fresh.available() == 1 if isinstance(fresh, Semaphore) else not fresh.locked():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("kind", list(SYNC_KINDS))
def test_a_failed_release_is_never_renewed(make_server: MakeServer, kind: str) -> None:
    s = make_server()
    client = _timing_out_client(s)
    lease = SYNC_KINDS[kind](client, "stuck").acquire()
    assert lease is not None
    s.pause()
    try:
        with pytest.raises(redis.exceptions.TimeoutError):
            lease.release()
    finally:
        s.resume()
    assert not lease.valid  # given up: no longer to be trusted
    # The watchdog renewed it every third of a second before; now it ends by its ttl.
    assert _nothing_held(redis.Redis.from_url(s.url), time.monotonic() + 3.0, kind)


def test_an_interrupted_sync_release_is_never_renewed(make_server: MakeServer) -> None:
    s = make_server()
    client = redis.Redis.from_url(s.url)
    lease = Lock(client, "stuck", ttl=1.0, auto_renew=True).acquire()
    assert lease is not None
    main = threading.main_thread().ident
    assert main == threading.get_ident()
    s.pause()
    # Python's own Ctrl-C handler, even where SIGINT came in ignored (a job that
    # a non-interactive shell started in the background)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, lambda: signal.pthread_kill(main, signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            lease.release()
    finally:
        timer.join()
        signal.signal(signal.SIGINT, handler)
        s.resume()
    client.connection_pool.disconnect()
    assert _nothing_held(redis.Redis.from_url(s.url), time.monotonic() + 3.0, "Lock")


ASYNC_KINDS: dict[str, Callable[[redis.asyncio.Redis, str], Any]] = {
    "Lock": lambda c, name: AsyncLock(c, name, ttl=1.0, auto_renew=True),
    "RLock": lambda c, name: AsyncRLock(c, name, ttl=1.0, auto_renew=True),
    "FairLock": lambda c, name: AsyncFairLock(c, name, ttl=1.0, auto_renew=True),
    "write": lambda c, name: AsyncReadWriteLock(c, name, ttl=1.0, auto_renew=True).write,
    "read": lambda c, name: AsyncReadWriteLock(c, name, ttl=1.0, auto_renew=True).read,
    "Semaphore": lambda c, name: AsyncSemaphore(c, name, 1, ttl=1.0, auto_renew=True),
}


def test_a_cancelled_async_release_is_never_renewed(url: str) -> None:
    """Every async primitive at once (one name each), on a client of one
    connection: the releases wait for it (busy with a BLPOP) and are cancelled
    before they are sent. Their leases must end by their ttl, while the loop
    and its watchdog live on."""

    async def main() -> None:
        pool = redis.asyncio.BlockingConnectionPool.from_url(url, max_connections=1)
        client = redis.asyncio.Redis(connection_pool=pool)
        leases = [
            await make(client, f"stuck-{kind}").acquire() for kind, make in ASYNC_KINDS.items()
        ]
        assert all(leases)

        async def occupy() -> None:  # the one connection, for 0.4 s
            await client.blpop(["nothing"], timeout=0.4)

        busy = asyncio.create_task(occupy())
        await asyncio.sleep(0.05)
        tasks = [asyncio.create_task(lease.release()) for lease in leases]
        await asyncio.sleep(0.1)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with pytest.raises(asyncio.CancelledError):
                await task
        assert not any(lease.valid for lease in leases)
        await busy
        check = redis.asyncio.Redis.from_url(url)
        fresh = {kind: make(check, f"stuck-{kind}") for kind, make in ASYNC_KINDS.items()}
        deadline = time.monotonic() + 3.0
        held = list(fresh)
        while held and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            held = [kind for kind, lock in fresh.items() if not await _free(lock)]
        assert held == []
        await check.aclose()
        await client.aclose()

    asyncio.run(main())


async def _free(lock: Any) -> bool:
    if isinstance(lock, AsyncSemaphore):
        return await lock.available() == 1
    return not await lock.locked()


# --- a lease declared lost never blocks its owner ----------------------------------


def test_a_lease_declared_lost_is_still_deleted_and_never_blocks_its_owner(
    r: redis.Redis, url: str
) -> None:
    """The acquire's reply comes after the lease's deadline (the server was paused
    while it ran): the client declares it lost though Redis holds it for a whole
    ttl with this owner's token. Its release still sends the token-checked
    delete, and the owner's next acquire never says AlreadyHeldError."""
    client = redis.Redis.from_url(url)
    lock = Lock(client, "late", ttl=1.0)
    assert not lock.locked()  # the client has probed the server: the acquire is sent at once
    for release_first in (True, False):
        r.client_pause(1200)
        lease = lock.acquire()
        assert lease is not None
        assert lease.lost.wait(1.0) and not lease.valid
        assert r.exists("tenure:{late}") and r.pttl("tenure:{late}") > 300
        if release_first:
            with pytest.raises(LockLostError):
                lease.release()
            assert not r.exists("tenure:{late}")  # the delete was sent all the same
        again = lock.acquire(timeout=0.5)
        assert again is not None and again.fence > lease.fence
        again.release()


# --- a guard shared between threads ---------------------------------------------------


def _enter_from_two_threads(guard: Any) -> dict[str, Any]:
    """Threads A and B enter ``guard`` together; A leaves first, and B checks
    that its own lease is still valid. Returns their leases."""
    entered = threading.Barrier(2)
    first_out = threading.Event()
    leases: dict[str, Any] = {}
    errors: list[BaseException] = []

    def hold(who: str) -> None:
        try:
            with guard as lease:
                leases[who] = lease
                entered.wait(5)
                if who == "A":
                    return  # leaves first
                assert first_out.wait(5)
                assert lease.valid, "A's exit released B's lease"
        except BaseException as exc:
            errors.append(exc)
        finally:
            if who == "A":
                first_out.set()

    threads = [threading.Thread(target=hold, args=(who,)) for who in "AB"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors, errors
    assert not leases["A"].valid and not leases["B"].valid
    return leases


def test_a_shared_guard_releases_each_threads_own_lease(r: redis.Redis) -> None:
    gpus = Semaphore(r, "gpus", 2, ttl=30)
    _enter_from_two_threads(gpus(timeout=5))
    assert gpus.available() == 2
    rw = ReadWriteLock(r, "catalog", ttl=30)
    _enter_from_two_threads(rw.read(timeout=5))
    writer = rw.write.acquire(timeout=1)
    assert writer is not None, "a read hold was left held"
    writer.release()


# --- found by a hostile run: re-sent releases, shared exits, lost re-entries ----------


@pytest.mark.parametrize("reenter_first", [False, True])
def test_a_release_sent_again_counts_a_reentrant_hold_down_once(
    url: str, r: redis.Redis, reenter_first: bool
) -> None:
    """The inner release of an RLock hold is applied but its reply is lost; the
    owner sends it again (or first enters again). The hold is counted down
    once: the outer lease keeps the lock."""
    from tenure._scripts import RLOCK_RELEASE

    lock = RLock(losing_client(url, retries=0), "twice", ttl=30)
    outer, inner = lock.acquire(), lock.acquire()
    assert outer is not None and inner is not None
    LosesReply.armed = RLOCK_RELEASE.sha1
    with pytest.raises(redis.exceptions.ConnectionError):
        inner.release()
    assert LosesReply.armed == "", "the reply was not dropped"
    if reenter_first:
        again = lock.acquire()  # first sends the pending release again
        assert again is not None and lock.hold_count() == 2
        with pytest.raises(NotOwnedError, match="already released"):
            inner.release()
        again.release()
    else:
        inner.release()  # the same call: recognised, not counted again
    assert lock.hold_count() == 1 and outer.valid
    other: list[Any] = []
    t = threading.Thread(target=lambda: other.append(RLock(r, "twice").acquire(blocking=False)))
    t.start()
    t.join()
    assert other == [None], "another owner got the lock while the outer lease holds it"
    outer.release()
    assert not lock.locked()


def test_two_threads_releasing_one_lease_never_report_it_lost(r: redis.Redis) -> None:
    import sys

    lock, sem = Lock(r, "both", ttl=30), Semaphore(r, "both", 1, ttl=30)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can
    try:
        _release_from_two_threads(lock, sem)
    finally:
        sys.setswitchinterval(interval)


def _release_from_two_threads(*primitives: Any) -> None:
    for primitive in primitives:
        for _ in range(60):
            lease = primitive.acquire()
            assert lease is not None
            start = threading.Barrier(2)
            outcomes: list[str] = []

            def release(lease: Any = lease, start: Any = start, out: Any = outcomes) -> None:
                start.wait(5)
                try:
                    lease.release()
                    out.append("ok")
                except NotOwnedError:
                    out.append("already")
                except LockLostError as exc:
                    out.append(f"lost: {exc}")

            threads = [threading.Thread(target=release) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(5)
            assert "ok" in outcomes and not any(o.startswith("lost") for o in outcomes), outcomes
            assert len(outcomes) == 2, outcomes  # (each call returned or said why not)
            assert not lease.lost.is_set()


def test_a_guard_left_in_another_task_releases_its_lease(url: str) -> None:
    """An async generator holding ``async with lock:`` that its consumer leaves
    early is closed by the event loop in another task: the block's exit must
    release the lease all the same."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        lock = AsyncLock(client, "gen", ttl=1.0, auto_renew=True)
        guard = AsyncSemaphore(client, "gen", 1, ttl=1.0, auto_renew=True)
        for blocks in (lock, lock(timeout=5), guard, guard(1, timeout=5)):
            entered = asyncio.Event()

            async def enter(blocks: Any = blocks, entered: asyncio.Event = entered) -> Any:
                lease = await blocks.__aenter__()
                entered.set()
                return lease

            lease = await asyncio.create_task(enter())
            await entered.wait()
            await asyncio.create_task(blocks.__aexit__(None, None, None))  # another task
            assert not lease.valid and not lease.lost.is_set()
        assert not await lock.locked() and await guard.available() == 1
        await client.aclose()

    asyncio.run(main())


def test_releasing_a_lost_reentrant_lease_keeps_the_newer_lease_of_its_hold(
    r: redis.Redis, url: str
) -> None:
    """l1's acquire reply came after its deadline (lost, though Redis holds the
    hold); the owner enters again (l2, the same hold). Releasing l1 counts the
    hold down by one and raises LockLostError; l2 still holds and releases."""
    lock = RLock(redis.Redis.from_url(url), "late-r", ttl=1.0, auto_renew=True)
    assert not lock.locked()  # probed: the acquire is sent at once
    r.client_pause(1300)
    l1 = lock.acquire()
    assert l1 is not None and l1.lost.wait(1.0)
    l2 = lock.acquire()
    assert l2 is not None and l2.fence == l1.fence and l2.valid
    with pytest.raises(LockLostError):
        l1.release()
    assert l2.valid and not l2.lost.is_set() and lock.hold_count() == 1
    l2.release()
    assert not lock.locked()


def test_a_multi_lease_whose_part_failed_to_release_may_be_released_again(url: str) -> None:
    from tenure import MultiLock
    from tenure._scripts import LOCK_RELEASE

    client = losing_client(url, retries=0)
    multi = MultiLock([Lock(client, "part-a", ttl=30), Lock(client, "part-b", ttl=30)])
    lease = multi.acquire()
    assert lease is not None
    LosesReply.armed = LOCK_RELEASE.sha1  # the first part released: its reply lost
    with pytest.raises(redis.exceptions.ConnectionError):
        lease.release()
    lease.release()  # sends what did not complete (the same call: recognised)
    assert not any(part.locked() for part in multi.locks)
    with pytest.raises(NotOwnedError, match="already released"):
        lease.release()


@pytest.mark.parametrize("kind", ["Lock", "FairLock", "Semaphore"])
def test_a_release_sent_again_after_the_next_holder_released_is_recognised(
    url: str, kind: str
) -> None:
    """A's release hands the lock to waiter B; A's reply is lost; B releases;
    then A's release is sent again. It is the same call: recognised, not lost
    (the record keeps every release of the last 120 s, not only the last)."""
    from tenure._scripts import FAIR_RELEASE, LOCK_RELEASE, SEMAPHORE_RELEASE

    make: dict[str, tuple[Callable[[redis.Redis], Any], str]] = {
        "Lock": (lambda c: Lock(c, "chain", ttl=30), LOCK_RELEASE.sha1),
        "FairLock": (lambda c: FairLock(c, "chain", ttl=30), FAIR_RELEASE.sha1),
        "Semaphore": (lambda c: Semaphore(c, "chain", 1, ttl=30), SEMAPHORE_RELEASE.sha1),
    }
    build, sha = make[kind]
    first = build(losing_client(url, retries=0)).acquire()
    assert first is not None
    handed = threading.Event()
    done: list[Any] = []

    def waiter() -> None:
        lease = build(redis.Redis.from_url(url)).acquire(timeout=10)
        handed.set()
        done.append(lease)
        if lease is not None:
            lease.release()

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)  # the waiter is queued
    LosesReply.armed = sha
    with pytest.raises(redis.exceptions.ConnectionError):
        first.release()
    assert handed.wait(5)
    t.join(5)
    assert done and done[0] is not None, "the waiter was not handed the lock"
    first.release()  # sent again after the waiter's own release: recognised
    assert not first.lost.is_set()
