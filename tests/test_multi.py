"""MultiLock and AsyncMultiLock against real servers: all or none, no deadlock,
no overlap (checked per part on recorded histories)."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio
import redis.sentinel
from _fair_workers import PartHold, multi_worker
from _workers import Hold, check_history
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tenure import (
    AcquireTimeout,
    AlreadyHeldError,
    AsyncFairLock,
    AsyncLock,
    AsyncMultiLock,
    AsyncRLock,
    FairLock,
    InvalidArgument,
    Lease,
    Lock,
    LockLostError,
    MultiLease,
    MultiLock,
    NotOwnedError,
    RLock,
)
from tenure._drivers import _sync
from tenure._label import default_suffix
from tenure._server import ServerProcess, free_port

SPAWN = multiprocessing.get_context("spawn")
MakeServer = Callable[..., ServerProcess]
T = TypeVar("T")


def in_thread(fn: Callable[[], Any]) -> Any:
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result(timeout=30)


def check_parts(holds: Sequence[PartHold]) -> int:
    """Check, part by part, that no two holds of a part overlap and that the
    part's fences strictly increase. Returns how many parts were seen."""
    per_part: dict[str, list[Hold]] = defaultdict(list)
    for acquired, released, fences, labels in holds:
        for fence, label in zip(fences, labels, strict=True):
            per_part[label].append((acquired, released, fence))
    for part_holds in per_part.values():
        check_history(part_holds)
    return len(per_part)


def test_checker_catches_an_overlap_on_one_part() -> None:
    a = (0.0, 2.0, (1, 1), ("x", "y"))
    b = (1.0, 3.0, (2,), ("y",))  # overlaps a on y only
    with pytest.raises(AssertionError, match="overlapping"):
        check_parts([a, b])
    assert check_parts([a, (1.0, 3.0, (2,), ("z",))]) == 3


# --- basics ---------------------------------------------------------------------


def test_takes_every_part_and_releases_them(r: redis.Redis) -> None:
    parts: list[Lock | RLock] = [Lock(r, "b", ttl=5), RLock(r, "a", ttl=5), FairLock(r, "c", ttl=5)]
    multi = MultiLock(parts)
    lease = multi.acquire()
    assert isinstance(lease, MultiLease) and lease and lease.valid
    assert lease.name == "b + a + c" == multi.name
    assert [p.name for p in lease.leases] == ["b", "a", "c"]  # the order given
    assert lease.fence == tuple(p.fence for p in lease.leases)
    assert r.get("tenure:{b}") == lease.leases[0].owner.encode()
    assert r.hget("tenure:{a}:rlock", lease.leases[1].owner + default_suffix()) == b"1"
    assert r.get("tenure:{c}:fair") == lease.leases[2].owner.encode()
    # (the 5 s ttl's, less what a loaded machine took since the acquire)
    assert multi.locked() and multi.owned() and 2.5 < lease.remaining <= 5
    info = multi.info()
    assert info.held and [p.kind for p in info.parts] == ["Lock", "RLock", "FairLock"]
    assert [p.fence for p in info.parts] == list(lease.fence) and all(p.locked for p in info.parts)
    assert "MultiLock [Lock('b'), RLock('a'), FairLock('c')] held_here=1" in repr(multi)
    assert "MultiLease 'b + a + c'" in repr(lease) and "valid" in repr(lease)
    assert not in_thread(multi.owned)  # another thread holds none of it
    lease.extend(8)
    assert all(6000 < r.pttl(k) <= 8000 for k in ("tenure:{b}", "tenure:{c}:fair"))
    lease.release()
    assert not r.exists("tenure:{b}", "tenure:{a}:rlock", "tenure:{c}:fair")
    assert not multi.locked() and not multi.owned() and not lease.valid
    assert not multi.info().held and multi.info().parts[0].fence is None
    with pytest.raises(NotOwnedError, match="already released"):
        lease.release()
    with pytest.raises(NotOwnedError):
        multi.release()
    with multi as held:
        assert held.valid and multi.owned()
    with multi(timeout=1) as again:
        assert all(f > g for f, g in zip(again.fence, lease.fence, strict=True))
    assert not multi.locked()


def test_all_or_none_when_a_part_is_held(r: redis.Redis) -> None:
    """While another owner holds the last part (in acquire order), a timed
    acquire fails and holds none of the parts afterwards."""
    multi = MultiLock([Lock(r, n, ttl=5) for n in ("c", "a", "b")])
    other = in_thread(lambda: Lock(r, "c", ttl=5).acquire())  # "c" is taken last
    assert other is not None
    started = time.monotonic()
    assert multi.acquire(timeout=0.3) is None
    assert time.monotonic() - started >= 0.3
    assert not r.exists("tenure:{a}", "tenure:{b}")  # what was taken was released
    assert r.zcard("tenure:{c}:waiters") == 0  # and it left the queue
    assert multi.acquire(blocking=False) is None
    assert not r.exists("tenure:{a}", "tenure:{b}")
    with pytest.raises(AcquireTimeout), multi(timeout=0.1):
        pass
    assert r.get("tenure:{c}") == other.owner.encode()
    other.release()
    lease = multi.acquire(timeout=1)
    assert lease is not None
    lease.release()


def test_one_timeout_for_the_whole_acquire(r: redis.Redis) -> None:
    """Two parts busy in turn: the timeout is one budget, not one per part."""
    first = in_thread(lambda: Lock(r, "t1", ttl=0.4).acquire())  # frees itself at 0.4 s
    second = in_thread(lambda: Lock(r, "t2", ttl=5).acquire())
    assert first is not None and second is not None
    started = time.monotonic()
    assert MultiLock([Lock(r, "t2"), Lock(r, "t1")]).acquire(timeout=0.6) is None
    elapsed = time.monotonic() - started
    assert 0.6 <= elapsed < 0.85, elapsed
    assert not r.exists("tenure:{t1}")
    second.release()


def test_a_part_that_expired_meanwhile_starts_the_acquire_over(r: redis.Redis) -> None:
    # "s1" is taken first and not renewed; it runs out while "s2" is awaited.
    # (Margins of a few hundred ms: the three runs of make test share two cores.)
    short = Lock(r, "s1", ttl=0.6)
    busy = in_thread(lambda: Lock(r, "s2", ttl=1.2).acquire())
    assert busy is not None
    lease = MultiLock([short, Lock(r, "s2", ttl=5)]).acquire(timeout=4)
    assert lease is not None and lease.valid
    assert lease.leases[0].remaining > 0.3  # "s1" taken again, after "s2"
    lease.release()


def test_parts_already_held_by_the_caller(r: redis.Redis) -> None:
    rlock = RLock(r, "re", ttl=5)
    outer = rlock.acquire()
    assert outer is not None
    lease = MultiLock([rlock, Lock(r, "other", ttl=5)]).acquire()
    assert lease is not None and lease.leases[0].fence == outer.fence  # entered again
    assert rlock.hold_count() == 2
    lease.release()
    assert rlock.hold_count() == 1
    outer.release()
    plain = Lock(r, "plain", ttl=5)
    held = plain.acquire()
    assert held is not None
    with pytest.raises(AlreadyHeldError):
        MultiLock([Lock(r, "first", ttl=5), plain]).acquire()
    assert not r.exists("tenure:{first}")
    held.release()


def test_parts_on_two_servers(make_server: MakeServer, r: redis.Redis, url: str) -> None:
    s2 = make_server()
    r2 = redis.Redis.from_url(s2.url)
    multi = MultiLock([Lock(r, "x", ttl=5), Lock(r2, "x", ttl=5)])  # same name, two servers
    lease = multi.acquire()
    assert lease is not None
    assert r.get("tenure:{x}") == lease.leases[0].owner.encode()
    assert r2.get("tenure:{x}") == lease.leases[1].owner.encode()
    other = in_thread(lambda: Lock(r2, "x").acquire(blocking=False))
    assert other is None
    lease.release()
    assert not r.exists("tenure:{x}") and not r2.exists("tenure:{x}")
    with pytest.raises(InvalidArgument, match="same lock"):
        MultiLock([Lock(r, "x"), Lock(redis.Redis.from_url(url), "x")])


def test_lost_when_one_part_is_lost(r: redis.Redis) -> None:
    seen: list[Any] = []
    parts = [Lock(r, "l1", ttl=0.5, auto_renew=True), Lock(r, "l2", ttl=0.5, auto_renew=True)]
    multi = MultiLock(parts, on_lost=seen.append)
    lease = multi.acquire()
    assert lease is not None
    lease.on_lost(lambda ml: seen.append("lease"))
    time.sleep(0.7)  # renewed
    assert lease.valid and not lease.lost.is_set()
    r.delete("tenure:{l2}")  # part l2 is taken away
    assert lease.lost.wait(1.5)
    assert seen == [lease, "lease"] and not lease.valid and lease.remaining == 0.0
    assert "part 'l2' was lost" in (lease.lost_reason or "")
    assert r.exists("tenure:{l1}")  # the other part is still held...
    assert "lost" in repr(lease)
    with pytest.raises(LockLostError, match="'l2'"):
        lease.release()
    assert not r.exists("tenure:{l1}")  # ...until the release, which frees it anyway
    with pytest.raises(LockLostError):
        lease.release()  # at every use


def test_release_frees_every_part_and_raises_the_first_error(r: redis.Redis) -> None:
    multi = MultiLock([Lock(r, n, ttl=5) for n in ("e1", "e2", "e3")])
    lease = multi.acquire()
    assert lease is not None
    r.delete("tenure:{e1}", "tenure:{e3}")  # two parts gone from Redis
    with pytest.raises(LockLostError) as info:
        lease.release()  # in reverse order: e3 fails first, e2 is released, e1 fails
    assert info.value.name == "e3"
    assert any("'e1'" in note for note in info.value.__notes__)
    assert not r.exists("tenure:{e2}") and lease.lost.is_set()


@pytest.mark.parametrize(
    ("locks", "match"),
    [
        ([], "at least one"),
        ("ab", "sequence of locks"),
        (None, "sequence of locks"),
        ([object()], r"locks\[0\] must be"),
    ],
)
def test_bad_arguments(locks: Any, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        MultiLock(locks)
    with pytest.raises(InvalidArgument, match=match):
        AsyncMultiLock(locks)


def test_sentinel_parts_are_told_apart_by_service() -> None:
    # master_for clients' pools all say localhost:6379 (the master is asked of
    # the Sentinels when they connect): the service names the server.
    # nothing is sent to the Sentinel
    sentinel = redis.sentinel.Sentinel([("localhost", free_port())])  # type: ignore[no-untyped-call]
    a = sentinel.master_for("a")  # type: ignore[no-untyped-call]
    b = sentinel.master_for("b")  # type: ignore[no-untyped-call]
    both = MultiLock([Lock(a, "x"), Lock(b, "x")])
    assert len(both.locks) == 2
    again = sentinel.master_for("a")  # type: ignore[no-untyped-call]
    with pytest.raises(InvalidArgument, match=r"same lock \('tenure:\{x\}' on sentinel:a/0\)"):
        MultiLock([Lock(a, "x"), Lock(again, "x")])


def test_bad_parts_and_callbacks() -> None:
    dead = redis.Redis(port=free_port())  # nothing may be sent
    lock = Lock(dead, "x")
    with pytest.raises(InvalidArgument, match=r"locks\[0\] and locks\[1\] are the same lock"):
        MultiLock([lock, lock])
    with pytest.raises(InvalidArgument, match="same lock"):
        MultiLock([Lock(dead, "x"), Lock(redis.Redis(connection_pool=dead.connection_pool), "x")])
    async_lock = AsyncLock(redis.asyncio.Redis(port=free_port()), "y")
    with pytest.raises(InvalidArgument, match=r"locks\[1\] must be"):
        MultiLock([lock, async_lock])  # type: ignore[list-item]
    with pytest.raises(InvalidArgument, match=r"locks\[0\] must be"):
        AsyncMultiLock([lock])  # type: ignore[list-item]
    with pytest.raises(InvalidArgument, match="on_lost"):
        MultiLock([lock], on_lost=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="timeout"):
        MultiLock([lock]).acquire(timeout=-1)
    # a Lock, an RLock and a FairLock of one name are three different locks
    assert MultiLock([Lock(dead, "n"), RLock(dead, "n"), FairLock(dead, "n")]).name == "n + n + n"


# --- no deadlock, no overlap ------------------------------------------------------


def test_threads_in_opposite_orders_never_deadlock_or_overlap(r: redis.Redis) -> None:
    orders = [("p", "q"), ("q", "p"), ("q", "r", "p"), ("r", "q"), ("p", "r")]
    holds: list[PartHold] = []
    end = time.monotonic() + 1.0

    def run(names: tuple[str, ...]) -> int:
        client = redis.Redis(connection_pool=r.connection_pool)
        multi = MultiLock([Lock(client, n, ttl=10) for n in names])
        count = 0
        while time.monotonic() < end:
            lease = multi.acquire(timeout=20)
            assert lease is not None
            acquired = time.monotonic()
            time.sleep(0.001)
            released = time.monotonic()
            lease.release()
            holds.append((acquired, released, lease.fence, names))
            count += 1
        return count

    with ThreadPoolExecutor(len(orders)) as pool:
        counts = [f.result(timeout=60) for f in [pool.submit(run, o) for o in orders]]
    assert all(counts), counts  # everyone got in: no deadlock, no starvation
    assert check_parts(holds) == 3
    assert not r.exists("tenure:{p}", "tenure:{q}", "tenure:{r}")


def test_processes_in_opposite_orders_on_two_servers(
    make_server: MakeServer, r: redis.Redis, url: str
) -> None:
    url2 = make_server().url
    a, b, c = (url, "x"), (url2, "x"), (url, "y")
    orders = [[a, b, c], [c, b, a], [b, a]]
    manager = SPAWN.Manager()
    start = manager.Barrier(len(orders))
    with ProcessPoolExecutor(len(orders), mp_context=SPAWN) as pool:
        futures = [pool.submit(multi_worker, parts, 1.0, start) for parts in orders]
        per_process = [f.result(timeout=120) for f in futures]
    manager.shutdown()
    assert all(per_process), [len(h) for h in per_process]
    assert check_parts([h for holds in per_process for h in holds]) == 3


# --- asyncio ------------------------------------------------------------------------


def test_async_tasks_in_opposite_orders(server: ServerProcess, r: redis.Redis) -> None:
    async def main() -> list[PartHold]:
        client = redis.asyncio.Redis.from_url(server.url, max_connections=40)
        holds: list[PartHold] = []
        end = time.monotonic() + 0.8

        async def task(names: tuple[str, ...]) -> None:
            parts: list[AsyncLock | AsyncRLock] = [AsyncLock(client, names[0], ttl=10)]
            parts += [AsyncFairLock(client, n, ttl=10) for n in names[1:]]
            multi = AsyncMultiLock(parts)
            while time.monotonic() < end:
                async with multi as lease:
                    acquired = time.monotonic()
                    await asyncio.sleep(0.001)
                    released = time.monotonic()
                labels = (f"lock/{names[0]}", *(f"fair/{n}" for n in names[1:]))
                holds.append((acquired, released, lease.fence, labels))

        orders = [("u", "v", "w"), ("u", "w", "v"), ("u", "v"), ("u", "w")] * 3
        await asyncio.gather(*(task(o) for o in orders))
        await client.aclose()
        return holds

    holds = asyncio.run(main())
    assert len(holds) >= 12
    assert check_parts(holds) == 3


def test_async_cancelled_acquire_holds_nothing(server: ServerProcess, r: redis.Redis) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        blocker = await AsyncLock(client, "k3", ttl=5).acquire()
        assert blocker is not None
        multi = AsyncMultiLock([AsyncLock(client, n, ttl=5) for n in ("k1", "k2", "k3")])
        waiting = asyncio.create_task(multi.acquire())
        while not await client.exists("tenure:{k2}"):
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)  # now waiting for k3
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not await client.exists("tenure:{k1}", "tenure:{k2}")
        assert await client.zcard("tenure:{k3}:waiters") == 0
        await blocker.release()
        async with multi(timeout=1) as lease:
            assert lease.valid and await multi.owned()
            info = await multi.info()
            assert info.held and [p.kind for p in info.parts] == ["AsyncLock"] * 3
        assert not await multi.locked()
        await client.aclose()

    asyncio.run(main())


def test_async_lost_signal(server: ServerProcess, r: redis.Redis) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        parts: list[AsyncLock | AsyncRLock] = [
            AsyncLock(client, "al1", ttl=0.4, auto_renew=True),
            AsyncRLock(client, "al2"),
        ]
        lease = await AsyncMultiLock(parts).acquire()
        assert lease is not None
        await client.delete("tenure:{al1}")
        async with asyncio.timeout(2):
            await lease.lost.wait()
        with pytest.raises(LockLostError):
            await lease.release()
        assert not await client.exists("tenure:{al2}:rlock")
        await client.aclose()

    asyncio.run(main())


def test_sync_threads_share_one_multilock(r: redis.Redis) -> None:
    """One MultiLock object, several threads: each is its own owner."""
    multi = MultiLock([Lock(r, "s1", ttl=5), Lock(r, "s2", ttl=5)])
    lease = multi.acquire()
    assert lease is not None
    errors: list[BaseException] = []

    def other() -> None:
        try:
            multi.release()
        except NotOwnedError as exc:
            errors.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(errors) == 1 and multi.owned()
    lease.release()


# --- model ---------------------------------------------------------------------------

OWNERS, PARTS = 3, 3
_model_url = ""


class MultiLockMachine(RuleBasedStateMachine):
    """Model: which owner holds each part (None: free), what each owner holds (a
    multi-lease over some parts, in the order it gave them, or one part alone),
    and which owners had a part taken away from under them."""

    def __init__(self) -> None:
        super().__init__()
        self.client = redis.Redis.from_url(_model_url)
        self.client.flushall()
        self.pools = [ThreadPoolExecutor(1) for _ in range(OWNERS)]
        self.ids = [self.run(i, _sync.current_owner) for i in range(OWNERS)]
        self.parts = [Lock(self.client, f"m{i}", ttl=30) for i in range(PARTS)]
        self.holder: list[int | None] = [None] * PARTS
        self.holds: dict[int, tuple[Any, list[int]]] = {}  # owner -> (lease, parts)
        self.robbed: set[int] = set()  # owners a part of whose hold was taken away

    def run(self, owner: int, fn: Callable[[], T]) -> T:
        return self.pools[owner].submit(fn).result(timeout=10)

    def teardown(self) -> None:
        for pool in self.pools:
            pool.shutdown()
        self.client.close()

    def take(self, owner: int, subset: list[int], lease: Any) -> None:
        free = all(self.holder[i] is None for i in subset)
        if not free:
            assert lease is None  # and nothing of it is held: see the invariant
            return
        assert isinstance(lease, MultiLease | Lease)
        self.holds[owner] = (lease, subset)
        for i in subset:
            self.holder[i] = owner

    @rule(
        owner=st.integers(0, OWNERS - 1),
        subset=st.lists(st.integers(0, PARTS - 1), min_size=1, max_size=PARTS, unique=True),
        wait=st.booleans(),
    )
    def take_multi(self, owner: int, subset: list[int], wait: bool) -> None:
        if owner in self.holds:
            return
        multi = MultiLock([self.parts[i] for i in subset])
        if wait:  # nobody releases meanwhile: the same outcome, after the timeout
            lease = self.run(owner, lambda: multi.acquire(timeout=0.05))
        else:
            lease = self.run(owner, lambda: multi.acquire(blocking=False))
        self.take(owner, subset, lease)
        if lease is not None:
            assert lease.fence == tuple(part.fence for part in lease.leases)

    @rule(owner=st.integers(0, OWNERS - 1), part=st.integers(0, PARTS - 1))
    def take_one(self, owner: int, part: int) -> None:
        if owner in self.holds:
            return
        lease = self.run(owner, lambda: self.parts[part].acquire(blocking=False))
        self.take(owner, [part], lease)

    @rule(owner=st.integers(0, OWNERS - 1))
    def release(self, owner: int) -> None:
        if owner not in self.holds:
            return
        lease, subset = self.holds.pop(owner)
        lost = owner in self.robbed
        self.robbed.discard(owner)

        def call() -> bool:
            try:
                lease.release()
                return True
            except LockLostError:
                return False

        assert self.run(owner, call) == (not lost)
        for i in subset:
            if self.holder[i] == owner:
                self.holder[i] = None

    @precondition(lambda self: any(h is not None for h in self.holder))
    @rule(part=st.integers(0, PARTS - 1))
    def take_away(self, part: int) -> None:
        """A part's key is deleted under its holder (an operator, an expiry)."""
        owner = self.holder[part]
        if owner is None:
            return
        self.client.delete(f"tenure:{{m{part}}}")
        self.holder[part] = None
        self.robbed.add(owner)

    @invariant()
    def agrees(self) -> None:
        for i, owner in enumerate(self.holder):
            value = self.client.get(f"tenure:{{m{i}}}")
            if owner is None:
                assert value is None, f"part {i} is held, the model has it free"
            else:
                assert isinstance(value, bytes)
                assert value.decode().startswith(self.ids[owner] + ":")


def test_multi_lock_model(server: ServerProcess) -> None:
    global _model_url
    _model_url = server.url
    run_state_machine_as_test(
        MultiLockMachine,
        settings=settings(max_examples=20, stateful_step_count=20, deadline=None),
    )


def test_killed_holder_frees_every_part_after_the_ttl(url: str) -> None:
    import os
    import signal

    from _workers import multi_holder

    spawn = multiprocessing.get_context("spawn")
    acquired = spawn.Queue()
    holder = spawn.Process(target=multi_holder, args=(url, ["k9a", "k9b"], 0.8, acquired))
    holder.start()
    try:
        fences = acquired.get(timeout=30)
        time.sleep(1.0)  # renewed past its first ttl
        assert holder.pid is not None
        os.kill(holder.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        client = redis.Redis.from_url(url)
        lease = MultiLock([Lock(client, "k9a"), Lock(client, "k9b")]).acquire(timeout=5)
        waited = time.monotonic() - killed_at
    finally:
        holder.join(timeout=10)
    assert lease is not None and all(
        new > old for new, old in zip(lease.fence, fences, strict=True)
    )
    assert waited < 0.8 + 0.3, f"free only {waited:.2f}s after the kill"
    lease.release()
