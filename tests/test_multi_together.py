"""MultiLock's parts on one server taken and released together: one round trip
for the attempt at every part of a server, one for their releases; all or none
when a part is held; nothing held after an interruption or a cancellation;
no overlap and increasing fences when multi-locks over shared parts contend."""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from types import FrameType
from typing import Any

import pytest
import redis
import redis.asyncio
from _fair_workers import PartHold, multi_worker
from _interrupts import InterruptedCall, raise_once
from test_multi import check_parts, in_thread

from tenure import (
    AlreadyHeldError,
    AsyncLock,
    AsyncMultiLock,
    FairLock,
    Lock,
    MultiLease,
    MultiLock,
    RLock,
)
from tenure._api._sync import multi as sync_multi
from tenure._label import default_suffix
from tenure._plans.waiting import Grant
from tenure._server import ServerProcess

SPAWN = multiprocessing.get_context("spawn")


def _scripts_in(command: Any) -> bool:
    """Whether a packed write (bytes, or a list of byte strings) holds an
    ``EVALSHA``: the writes of script calls are counted, not those of the
    wake hub's pub/sub connection (a lingering channel's ``UNSUBSCRIBE`` may
    come at any time) or of the watchdog."""
    data = command if isinstance(command, bytes | bytearray) else b"".join(command)
    return b"EVALSHA" in data


class _Counted(redis.Connection):
    """Counts the writes of script calls (one per round trip: a round's
    commands are written at once)."""

    writes = 0

    def send_packed_command(self, command: Any, *args: Any, **kwargs: Any) -> None:
        if _scripts_in(command):
            _Counted.writes += 1
        super().send_packed_command(command, *args, **kwargs)  # type: ignore[no-untyped-call]


def _counted(url: str, blocking_pool: bool = False) -> redis.Redis:
    if blocking_pool:  # (no quick path: a pipeline of the client's)
        pool = redis.BlockingConnectionPool.from_url(url, connection_class=_Counted)
        return redis.Redis(connection_pool=pool)
    client = redis.Redis.from_url(url)
    client.connection_pool.connection_class = _Counted
    return client


def _take(multi: MultiLock) -> MultiLease:
    """``multi``'s lease, taken now (it is free)."""
    lease = multi.acquire(blocking=False)
    assert lease is not None
    return lease


def _evalsha_calls(r: redis.Redis) -> int:
    return int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


@pytest.mark.parametrize("blocking_pool", [False, True], ids=["quick-path", "blocking-pool"])
def test_an_uncontended_cycle_is_one_round_trip_each_way(
    url: str, r: redis.Redis, blocking_pool: bool
) -> None:
    """Three parts on one server (a Lock, an RLock, a FairLock): the acquire
    is one round trip (three scripts), the release one more."""
    client = _counted(url, blocking_pool)
    parts: list[Lock | RLock] = [Lock(client, "t1", ttl=10), RLock(client, "t2", ttl=10)]
    parts.append(FairLock(client, "t3", ttl=10))
    multi = MultiLock(parts)
    _take(multi).release()  # (the first call probes the server)
    for _ in range(3):
        writes, calls = _Counted.writes, _evalsha_calls(r)
        lease = multi.acquire()
        assert lease is not None and lease.valid
        assert (_Counted.writes - writes, _evalsha_calls(r) - calls) == (1, 3)
        assert r.get("tenure:{t1}") == lease.leases[0].owner.encode()
        assert r.hget("tenure:{t2}:rlock", lease.leases[1].owner + default_suffix()) == b"1"
        assert r.get("tenure:{t3}:fair") == lease.leases[2].owner.encode()
        writes, calls = _Counted.writes, _evalsha_calls(r)
        lease.release()
        assert (_Counted.writes - writes, _evalsha_calls(r) - calls) == (1, 3)
        assert not r.exists("tenure:{t1}", "tenure:{t2}:rlock", "tenure:{t3}:fair")
    writes = _Counted.writes
    with multi(timeout=1) as lease:  # a timed acquire tries them together first too
        assert _Counted.writes - writes == 1
    assert _Counted.writes - writes == 2


class _AsyncCounted(redis.asyncio.Connection):
    """:class:`_Counted` for asyncio."""

    writes = 0

    async def send_packed_command(self, command: Any, *args: Any, **kwargs: Any) -> None:
        if _scripts_in(command):
            _AsyncCounted.writes += 1
        await super().send_packed_command(command, *args, **kwargs)


def test_an_asyncio_cycle_is_one_round_trip_each_way(url: str, r: redis.Redis) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        client.connection_pool.connection_class = _AsyncCounted
        try:
            multi = AsyncMultiLock([AsyncLock(client, n, ttl=10) for n in ("a1", "a2", "a3")])
            first = await multi.acquire()
            assert first is not None
            await first.release()
            writes, calls = _AsyncCounted.writes, _evalsha_calls(r)
            async with multi as lease:
                assert (_AsyncCounted.writes - writes, _evalsha_calls(r) - calls) == (1, 3)
                assert all(f > g for f, g in zip(lease.fence, first.fence, strict=True))
            assert (_AsyncCounted.writes - writes, _evalsha_calls(r) - calls) == (2, 6)
            assert not r.exists("tenure:{a1}", "tenure:{a2}", "tenure:{a3}")
        finally:
            await client.aclose()

    asyncio.run(main())


def test_one_round_trip_per_server(make_server: Any, url: str, r: redis.Redis) -> None:
    """Two parts on one server and one on another: two round trips each way
    (one per server), and the fences increase from one hold to the next."""
    other = make_server().url
    one, two = _counted(url), _counted(other)
    multi = MultiLock([Lock(one, "s1", ttl=10), Lock(two, "s1", ttl=10), Lock(one, "s2", ttl=10)])
    first = multi.acquire()
    assert first is not None
    first.release()
    writes = _Counted.writes
    lease = multi.acquire(blocking=False)
    assert lease is not None and _Counted.writes - writes == 2
    assert all(f > g for f, g in zip(lease.fence, first.fence, strict=True))
    lease.release()
    assert _Counted.writes - writes == 4
    assert not r.exists("tenure:{s1}", "tenure:{s2}")
    assert not redis.Redis.from_url(other).exists("tenure:{s1}")


def test_a_part_held_by_another_owner_takes_none_then_waits_for_it(
    url: str, r: redis.Redis
) -> None:
    """The middle part (in acquire order) held by another thread: a
    non-blocking acquire takes none (the others, taken in the same round
    trip, are released in one more); a blocking one waits for that part and
    gets every part once it is released."""
    client = _counted(url)
    multi = MultiLock([Lock(client, n, ttl=10) for n in ("h3", "h1", "h2")])
    before = multi.acquire()
    assert before is not None
    before.release()
    other = in_thread(lambda: Lock(r, "h2", ttl=10).acquire())
    assert other is not None
    writes = _Counted.writes
    assert multi.acquire(blocking=False) is None
    assert _Counted.writes - writes == 2  # the attempt, then the releases of h1 and h3
    assert not r.exists("tenure:{h1}", "tenure:{h3}")
    assert r.get("tenure:{h2}") == other.owner.encode()
    result: list[Any] = []
    waiter = threading.Thread(target=lambda: result.append(multi.acquire(timeout=10)))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive()  # waits for h2 (holding h1 only: the acquire order)
    assert not r.exists("tenure:{h3}")
    in_thread(other.release)
    waiter.join(10)
    lease = result[0]
    assert lease is not None and lease.valid
    assert all(f > g for f, g in zip(lease.fence, before.fence, strict=True))
    assert lease.fence[2] > other.fence
    in_thread(lease.release)
    assert not r.exists("tenure:{h1}", "tenure:{h2}", "tenure:{h3}")
    assert r.zcard("tenure:{h2}:waiters") == 0


def test_a_part_already_held_by_the_caller_releases_the_others(r: redis.Redis) -> None:
    held = Lock(r, "c2", ttl=10)
    lease = held.acquire()
    assert lease is not None
    multi = MultiLock([Lock(r, "c1", ttl=10), held, Lock(r, "c3", ttl=10)])
    with pytest.raises(AlreadyHeldError):
        multi.acquire()
    assert not r.exists("tenure:{c1}", "tenure:{c3}")
    assert r.get("tenure:{c2}") == lease.owner.encode()
    lease.release()
    again = multi.acquire(blocking=False)
    assert again is not None
    again.release()


def test_an_rlock_part_the_caller_holds_is_entered_and_given_back(r: redis.Redis) -> None:
    """An RLock part already held by the caller: the attempt at every part
    enters it again; when another part is busy, that level is given back and
    the caller's own hold stays."""
    rlock = RLock(r, "e1", ttl=10)
    own = rlock.acquire()
    assert own is not None
    other = in_thread(lambda: Lock(r, "e2", ttl=10).acquire())
    assert other is not None
    multi = MultiLock([rlock, Lock(r, "e2", ttl=10)])
    assert multi.acquire(blocking=False) is None
    assert rlock.hold_count() == 1 and own.valid
    in_thread(other.release)
    lease = multi.acquire(blocking=False)
    assert lease is not None and lease.fence[0] == own.fence
    assert rlock.hold_count() == 2
    lease.release()
    assert rlock.hold_count() == 1 and not r.exists("tenure:{e2}")
    own.release()
    assert not r.exists("tenure:{e1}:rlock")


def test_scripts_flushed_from_the_server_are_loaded_again(r: redis.Redis) -> None:
    multi = MultiLock([Lock(r, "f1", ttl=10), RLock(r, "f2", ttl=10)])
    _take(multi).release()
    r.script_flush()
    lease = multi.acquire(blocking=False)
    assert lease is not None
    r.script_flush()
    lease.release()
    assert not r.exists("tenure:{f1}", "tenure:{f2}:rlock")


class AlarmTimeout(Exception):
    """What a ``signal.alarm`` handler commonly raises: an ordinary ``Exception``."""


@pytest.mark.parametrize("error", [KeyboardInterrupt, AlarmTimeout])
def test_an_interrupt_while_the_replies_are_due_leaves_nothing_held(
    url: str, r: redis.Redis, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    """An interrupt, of any exception class, while the replies of the attempt
    at every part are due (the server granted them all): each part's clean-up
    releases its token, so nothing is held; an interrupt while the releases'
    replies are due leaves the release to be called again, which completes it."""
    client = redis.Redis.from_url(url)
    client.connection_pool.connection_class = InterruptedCall
    monkeypatch.setattr(InterruptedCall, "error", error)
    parts: list[Lock | RLock] = [Lock(client, "i1", ttl=10), RLock(client, "i2", ttl=10)]
    parts.append(Lock(client, key="exact:i3", ttl=10))
    multi = MultiLock(parts)
    warm = multi.acquire()
    assert warm is not None
    warm.release()
    InterruptedCall.armed = "reply"
    with pytest.raises(error):
        multi.acquire()
    assert not r.exists("tenure:{i1}", "tenure:{i2}:rlock", "exact:i3")
    assert not multi.owned()
    lease = multi.acquire(blocking=False)
    assert lease is not None
    assert all(f > g for f, g in zip(lease.fence, warm.fence, strict=True))
    InterruptedCall.armed = "reply"
    with pytest.raises(error):
        lease.release()
    assert not lease.valid  # its release was attempted: never renewed again
    lease.release()  # sent again (the same calls): recognised, and completes
    assert not r.exists("tenure:{i1}", "tenure:{i2}:rlock", "exact:i3")
    assert not multi.owned() and not multi.locked()
    again = multi.acquire(blocking=False)
    assert again is not None and again.fence[0] > lease.fence[0]
    again.release()


class _Stalls(redis.asyncio.Connection):
    """Waits a second before reading the next reply, once armed: a task
    cancelled meanwhile leaves the replies unread on the socket."""

    armed = False

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if _Stalls.armed:
            _Stalls.armed = False
            await asyncio.sleep(1)
        return await super().read_response(*args, **kwargs)


def test_an_asyncio_acquire_cancelled_while_the_replies_are_due_holds_nothing(
    url: str, r: redis.Redis
) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        client.connection_pool.connection_class = _Stalls
        try:
            multi = AsyncMultiLock([AsyncLock(client, n, ttl=10) for n in ("x1", "x2", "x3")])
            warm = await multi.acquire()
            assert warm is not None
            await warm.release()
            _Stalls.armed = True
            task = asyncio.ensure_future(multi.acquire())
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not r.exists("tenure:{x1}", "tenure:{x2}", "tenure:{x3}")
            lease = await multi.acquire(blocking=False)
            assert lease is not None
            assert all(f > g for f, g in zip(lease.fence, warm.fence, strict=True))
            _Stalls.armed = True
            task = asyncio.ensure_future(lease.release())
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await lease.release()  # sent again: completes
            assert not r.exists("tenure:{x1}", "tenure:{x2}", "tenure:{x3}")
            assert not await multi.locked()
        finally:
            await client.aclose()

    asyncio.run(main())


def test_a_waiting_acquire_after_a_busy_attempt_takes_the_parts_one_by_one(
    url: str, r: redis.Redis
) -> None:
    """For BUSY_MEMORY seconds after an attempt at every part found one busy,
    a waiting acquire of any multi-lock with that part goes straight to taking
    the parts one by one (the attempt would most likely fail again); then
    they are tried together again."""
    client = _counted(url)
    multi = MultiLock([Lock(client, "b1", ttl=10), Lock(client, "b2", ttl=10)])
    _take(multi).release()
    other = in_thread(lambda: Lock(r, "b2", ttl=10).acquire())
    assert other is not None
    writes = _Counted.writes
    assert multi.acquire(timeout=0.05) is None  # the attempt found b2 busy
    assert multi._busy()
    assert _Counted.writes - writes >= 3  # the attempt, the release of b1, then b1 alone
    # another multi-lock with b2 (in this process) skips the attempt too:
    # b1, then b2 (busy): no write for an attempt at both
    again = MultiLock([Lock(client, "b2", ttl=10), Lock(client, "b3", ttl=10)])
    assert again._busy()
    writes = _Counted.writes
    assert again.acquire(timeout=0.05) is None
    # b2 alone (busy, then its waiting and leaving), never b2 and b3 together
    assert not r.exists("tenure:{b3}")
    in_thread(other.release)
    lease = multi.acquire(timeout=1)
    assert lease is not None
    lease.release()
    assert not r.exists("tenure:{b1}", "tenure:{b2}")
    time.sleep(sync_multi.BUSY_MEMORY)
    assert not multi._busy() and not again._busy()
    writes = _Counted.writes
    lease = again.acquire(timeout=1)  # together again: one round trip
    assert lease is not None and _Counted.writes - writes == 1
    lease.release()


def test_threads_on_overlapping_parts_of_one_server_never_overlap(r: redis.Redis) -> None:
    orders = [("m", "n"), ("n", "m", "o"), ("o", "m"), ("n", "o"), ("m", "n", "o")]
    holds: list[PartHold] = []
    end = time.monotonic() + 1.0

    def run(names: tuple[str, ...]) -> int:
        client = redis.Redis(connection_pool=r.connection_pool)
        multi = MultiLock([Lock(client, n, ttl=10) for n in names])
        count = 0
        while time.monotonic() < end:
            lease = multi.acquire(blocking=False) if count % 3 == 2 else multi.acquire(timeout=20)
            if lease is None:
                continue
            acquired = time.monotonic()
            time.sleep(0.001)
            released = time.monotonic()
            lease.release()
            holds.append((acquired, released, lease.fence, names))
            count += 1
        return count

    with ThreadPoolExecutor(len(orders)) as pool:
        counts = [f.result(timeout=60) for f in [pool.submit(run, o) for o in orders]]
    assert all(counts), counts
    assert check_parts(holds) == 3
    assert not r.exists("tenure:{m}", "tenure:{n}", "tenure:{o}")


def test_processes_on_overlapping_parts_of_one_server_never_overlap(
    server: ServerProcess, r: redis.Redis
) -> None:
    url = server.url
    a, b, c = (url, "pa"), (url, "pb"), (url, "pc")
    orders = [[a, b, c], [c, b], [b, a], [a, c]]
    manager = SPAWN.Manager()
    start = manager.Barrier(len(orders))
    with ProcessPoolExecutor(len(orders), mp_context=SPAWN) as pool:
        futures = [pool.submit(multi_worker, parts, 1.0, start) for parts in orders]
        per_process = [f.result(timeout=120) for f in futures]
    manager.shutdown()
    assert all(per_process), [len(h) for h in per_process]
    assert check_parts([h for holds in per_process for h in holds]) == 3


def _free_now(r: redis.Redis, url: str, names: tuple[str, ...]) -> None:
    """Every part is free at once (not after its ttl): the key is gone and
    another thread's multi-lock over the same names takes them all."""
    assert not r.exists(*(f"tenure:{{{n}}}" for n in names))

    def take() -> bool:
        other = redis.Redis.from_url(url)
        try:
            lease = MultiLock([Lock(other, n, ttl=30) for n in names]).acquire(blocking=False)
            if lease is None:
                return False
            lease.release()
            return True
        finally:
            other.close()

    assert in_thread(take)


@pytest.mark.parametrize("together", [True, False], ids=["one-server", "two-clients"])
def test_an_interrupt_while_the_multi_lease_is_made_gives_the_parts_back(
    url: str, r: redis.Redis, monkeypatch: pytest.MonkeyPatch, together: bool
) -> None:
    """KeyboardInterrupt after every part was taken, while the multi-lease is
    made: the parts are released before the error reaches the caller (before,
    they stayed held under tokens nobody used until their ttl), and the
    caller can take them again at once."""
    interrupted, fired = raise_once(sync_multi.MultiLease.__init__)
    monkeypatch.setattr(sync_multi.MultiLease, "__init__", interrupted)
    first = redis.Redis.from_url(url)
    second = first if together else redis.Redis.from_url(url)
    multi = MultiLock([Lock(first, "m1", ttl=30), Lock(second, "m2", ttl=30)])
    with pytest.raises(KeyboardInterrupt):
        multi.acquire()
    assert fired and not multi.owned()
    _free_now(r, url, ("m1", "m2"))
    lease = multi.acquire(blocking=False)
    assert lease is not None
    lease.release()
    first.close()
    second.close()


def test_an_interrupt_between_two_parts_grants_gives_both_back(
    url: str, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KeyboardInterrupt while the grants of one server's parts, taken
    together, are made leases (the first made and started, the second not
    yet): the started one is released and the other grant given back."""
    from tenure._api._sync import lock as sync_lock

    interrupted, fired = raise_once(sync_lock.Lock._granted, on_call=2)
    monkeypatch.setattr(sync_lock.Lock, "_granted", interrupted)
    client = redis.Redis.from_url(url)
    multi = MultiLock([Lock(client, "g1", ttl=30), Lock(client, "g2", ttl=30)])
    with pytest.raises(KeyboardInterrupt):
        multi.acquire()
    assert fired
    _free_now(r, url, ("g1", "g2"))
    client.close()


class _ClosesInterrupted:
    """An acquire plan whose ``close`` raises KeyboardInterrupt once armed:
    the driver is cut off after the plan returned its grant."""

    armed = False

    def __init__(self, plan: Any) -> None:
        self._plan = plan

    def send(self, value: Any) -> Any:
        return self._plan.send(value)

    def throw(self, exc: BaseException) -> Any:
        return self._plan.throw(exc)

    def close(self) -> None:
        self._plan.close()
        if _ClosesInterrupted.armed:
            _ClosesInterrupted.armed = False
            raise KeyboardInterrupt


def test_an_interrupt_in_the_drivers_clean_up_after_the_grants_gives_them_back(
    url: str, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KeyboardInterrupt in the driver's clean-up after the parts' plans
    returned their grants (run_together cut off before it returned them):
    the driver hands the results over with the error, and the grants are
    given back."""
    from tenure._api._sync import lock as sync_lock

    prepared = sync_lock.Lock._prepare

    def wrapped(self: Any, *args: Any) -> Any:
        return _ClosesInterrupted(prepared(self, *args))

    monkeypatch.setattr(sync_lock.Lock, "_prepare", wrapped)
    client = redis.Redis.from_url(url)
    multi = MultiLock([Lock(client, "d1", ttl=30), Lock(client, "d2", ttl=30)])
    _ClosesInterrupted.armed = True
    with pytest.raises(KeyboardInterrupt):
        multi.acquire()
    assert not _ClosesInterrupted.armed
    _free_now(r, url, ("d1", "d2"))
    client.close()


def test_an_asyncio_acquire_cancelled_while_the_multi_lease_is_made_gives_the_parts_back(
    url: str, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The asyncio twin: a cancellation after every part was taken, while the
    multi-lease is made, releases the parts before it reaches the caller."""
    from tenure._api._async import multi as async_multi

    cancelled, fired = raise_once(async_multi.AsyncMultiLease.__init__, asyncio.CancelledError)
    monkeypatch.setattr(async_multi.AsyncMultiLease, "__init__", cancelled)

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        try:
            multi = AsyncMultiLock([AsyncLock(client, n, ttl=30) for n in ("c1", "c2")])
            with pytest.raises(asyncio.CancelledError):
                await multi.acquire()
            assert fired
            _free_now(r, url, ("c1", "c2"))
            lease = await multi.acquire(blocking=False)
            assert lease is not None
            await lease.release()
        finally:
            await client.aclose()

    asyncio.run(main())


def test_an_interrupt_after_a_lone_parts_grant_in_the_driver_gives_it_back(
    url: str, r: redis.Redis
) -> None:
    """KeyboardInterrupt in run_together's one-plan-at-a-time loop (a part
    alone on its client: one plan) after the plan returned its grant, at the
    loop's jump back (where Python checks for signals): the driver hands the
    grant over with the error, and it is given back."""
    from tenure._drivers import _sync

    lines, first = inspect.getsourcelines(_sync.run_together)
    target = first + next(i for i, line in enumerate(lines) if "for i, plan in enumerate" in line)
    fired: list[int] = []

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        due = event == "line" and frame.f_lineno == target and not fired
        if due and any(isinstance(x, Grant) for x in frame.f_locals.get("results") or ()):
            fired.append(target)
            raise KeyboardInterrupt
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code is _sync.run_together.__code__ else None

    one, two = redis.Redis.from_url(url), redis.Redis.from_url(url)
    multi = MultiLock([Lock(one, "l1", ttl=30), Lock(one, "l2", ttl=30), Lock(two, "l3", ttl=30)])
    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        with pytest.raises(KeyboardInterrupt):
            multi.acquire()
    finally:
        sys.settrace(previous)
    assert fired
    _free_now(r, url, ("l1", "l2", "l3"))
    one.close()
    two.close()
