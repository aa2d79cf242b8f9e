"""Every guard as a decorator, sync and asyncio: ``@guard`` waits as long as it
takes, ``@guard(timeout=...)`` raises ``AcquireTimeout`` when the lock is not
taken in time, ``skip=True`` returns ``None`` without running the function;
the lock is held while the function runs and released however it ends."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from contextlib import AsyncExitStack, ExitStack
from typing import Any

import pytest
import redis
import redis.asyncio

from tenure import (
    AcquireTimeout,
    AsyncLock,
    AsyncMultiLock,
    AsyncReadWriteLock,
    AsyncRedlock,
    AsyncRLock,
    AsyncSemaphore,
    FairLock,
    InvalidArgument,
    Lock,
    MultiLock,
    NotOwnedError,
    ReadWriteLock,
    Redlock,
    RLock,
    Semaphore,
)
from tenure._server import ServerProcess

#: Each guard, built on a client, by name: (the guard, a rival that holds the
#: lock so that the guard can't take it).
SYNC: dict[str, Callable[[redis.Redis, str], tuple[Any, Any]]] = {
    "Lock": lambda c, n: (Lock(c, n), Lock(c, n)),
    "RLock": lambda c, n: (RLock(c, n), RLock(c, n)),
    "FairLock": lambda c, n: (FairLock(c, n), FairLock(c, n)),
    "ReadWriteLock.write": lambda c, n: (ReadWriteLock(c, n).write, ReadWriteLock(c, n).read),
    "ReadWriteLock.read": lambda c, n: (ReadWriteLock(c, n).read, ReadWriteLock(c, n).write),
    "Semaphore": lambda c, n: (Semaphore(c, n, permits=1), Semaphore(c, n, permits=1)),
    "MultiLock": lambda c, n: (
        MultiLock([Lock(c, n + ":a"), Lock(c, n + ":b")]),
        Lock(c, n + ":b"),
    ),
    "Redlock": lambda c, n: (Redlock([c, c, c], n), Lock(c, n)),
}


def _is_held(rival: Any) -> bool:
    """Whether the lock is taken by someone (the rival, in a thread of its own,
    can't take it now)."""
    got: list[bool] = []

    def look() -> None:
        lease = rival.acquire(timeout=0)
        got.append(lease is None)
        if lease is not None:
            lease.release()

    thread = threading.Thread(target=look)
    thread.start()
    thread.join(10)
    assert got, "the rival's attempt did not return"
    return got[0]


@pytest.fixture
def three(make_server: Callable[..., ServerProcess]) -> list[redis.Redis]:
    """A client per server of three (a Redlock's masters)."""
    return [redis.Redis.from_url(make_server().url) for _ in range(3)]


def _guard(kind: str, r: redis.Redis, three: list[redis.Redis], name: str) -> tuple[Any, Any]:
    if kind == "Redlock":
        return Redlock(three, name), Redlock(three, name)
    return SYNC[kind](r, name)


@pytest.mark.parametrize("kind", sorted(SYNC))
def test_every_guard_decorates_a_function(
    r: redis.Redis, three: list[redis.Redis], kind: str
) -> None:
    guard, rival = _guard(kind, r, three, f"deco-{kind}")
    seen: list[bool] = []

    @guard  # type: ignore[untyped-decorator]  # (any guard: Any)
    def plain(x: int) -> int:
        seen.append(_is_held(rival))
        return x + 1

    @guard(timeout=5)  # type: ignore[untyped-decorator]  # (any guard: Any)
    def timed(x: int) -> int:
        seen.append(_is_held(rival))
        return x * 2

    assert plain.__name__ == "plain"  # (functools.wraps)
    assert plain(1) == 2 and timed(4) == 8
    assert seen == [True, True], "the lock was not held while the function ran"
    assert not _is_held(rival), "the lock was not released after the call"

    @guard  # type: ignore[untyped-decorator]  # (any guard: Any)
    def fails() -> None:
        assert _is_held(rival)
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        fails()
    assert not _is_held(rival), "an exception left the lock held"


@pytest.mark.parametrize("kind", sorted(SYNC))
def test_a_busy_lock_times_out_or_is_skipped(
    r: redis.Redis, three: list[redis.Redis], kind: str
) -> None:
    guard, rival = _guard(kind, r, three, f"busy-{kind}")
    ran: list[str] = []

    @guard(timeout=0)  # type: ignore[untyped-decorator]  # (any guard: Any)
    def once() -> str:
        ran.append("once")
        return "ran"

    @guard(timeout=0.2, skip=True)  # type: ignore[untyped-decorator]  # (any guard: Any)
    def skipped() -> str:
        ran.append("skipped")
        return "ran"

    taken = threading.Event()
    done = threading.Event()

    def hold() -> None:  # (another thread: the rival is another owner)
        held = rival.acquire()
        assert held is not None
        taken.set()
        done.wait(10)
        held.release()

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(10)
    try:
        with pytest.raises(AcquireTimeout):
            once()
        assert skipped() is None
    finally:
        done.set()
        holder.join(10)
    assert ran == []
    assert once() == "ran" and skipped() == "ran" and ran == ["once", "skipped"]


def test_a_timeout_of_the_function_itself_is_not_skipped(r: redis.Redis) -> None:
    """``skip`` skips only the decorator's own acquire: an ``AcquireTimeout``
    the function raises (another lock's) reaches the caller."""
    other = Lock(r, "deco-other")

    @Lock(r, "deco-outer")(timeout=1, skip=True)
    def inner() -> None:
        with other(timeout=0):
            pass

    r.set("tenure:{deco-other}", "someone-else", px=10_000)  # held by another owner
    with pytest.raises(AcquireTimeout, match="deco-other"):
        inner()
    assert not _is_held(Lock(r, "deco-outer"))


def test_skip_on_a_block_and_the_wrong_flavour_are_refused(r: redis.Redis) -> None:
    lock = Lock(r, "deco-bad")
    with pytest.raises(InvalidArgument, match="skip=True"), lock(timeout=1, skip=True):
        pass
    assert not _is_held(Lock(r, "deco-bad"))

    async def coroutine() -> None:
        pass

    with pytest.raises(InvalidArgument, match="plain function"):
        lock(coroutine)
    with pytest.raises(InvalidArgument, match="plain function"):
        lock(timeout=1)(coroutine)


def test_a_generator_function_is_refused_not_run_unguarded(r: redis.Redis, url: str) -> None:
    """A generator's call only makes it: decorated, its body would run after
    the block ended, with the lock free. Refused in both flavours, at
    decoration, before anything is acquired."""
    lock = Lock(r, "deco-gen")
    sem = Semaphore(r, "deco-gen-sem", permits=2)

    def generator() -> Any:
        yield _is_held(Lock(r, "deco-gen"))

    async def async_generator() -> Any:
        yield 1

    for func in (generator, async_generator):
        for guard in (lock, lock(timeout=1), lock(timeout=0, skip=True), sem(2, timeout=1)):
            with pytest.raises(InvalidArgument, match="generator"):
                guard(func)
    assert not _is_held(Lock(r, "deco-gen"))

    alock = AsyncLock(redis.asyncio.Redis.from_url(url), "deco-gen")
    for func in (generator, async_generator):
        for aguard in (alock, alock(timeout=1), alock(timeout=0, skip=True)):
            with pytest.raises(InvalidArgument, match="generator"):
                aguard(func)


def test_a_call_that_returns_a_coroutine_is_refused_not_run_unguarded(r: redis.Redis) -> None:
    """A plain function that returns a coroutine (a lambda, a wrapper) slips
    past the check at decoration: its call only makes the coroutine, whose
    body would run after the block ended. The call is refused, the coroutine
    closed unrun, and the lock is free again."""
    lock = Lock(r, "deco-coro")
    ran: list[bool] = []

    async def body() -> None:
        ran.append(_is_held(Lock(r, "deco-coro")))

    for guard in (lock, lock(timeout=1), lock(timeout=1, skip=True)):
        decorated = guard(lambda: body())
        with pytest.raises(InvalidArgument, match="returned an awaitable"):
            decorated()
        assert not _is_held(Lock(r, "deco-coro"))
    assert ran == []


def test_a_semaphore_decorates_with_n_permits(r: redis.Redis) -> None:
    sem = Semaphore(r, "deco-sem", permits=3)
    counts: list[int] = []

    @sem(2, timeout=5)
    def two() -> None:
        counts.append(sem.available())

    @sem
    def one() -> None:
        counts.append(sem.available())

    two()
    one()
    assert counts == [1, 2] and sem.available() == 3


def test_threads_calling_a_decorated_function_never_overlap(r: redis.Redis) -> None:
    inside: list[int] = []
    overlaps: list[int] = []

    @Lock(r, "deco-threads")
    def section() -> None:
        inside.append(1)
        if len(inside) > 1:
            overlaps.append(len(inside))
        inside.pop()

    def work() -> None:
        for _ in range(20):
            section()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert overlaps == []


ASYNC: dict[str, Callable[[redis.asyncio.Redis, str], tuple[Any, Any]]] = {
    "AsyncLock": lambda c, n: (AsyncLock(c, n), AsyncLock(c, n)),
    "AsyncRLock": lambda c, n: (AsyncRLock(c, n), AsyncRLock(c, n)),
    "AsyncReadWriteLock.write": lambda c, n: (
        AsyncReadWriteLock(c, n).write,
        AsyncReadWriteLock(c, n).read,
    ),
    "AsyncSemaphore": lambda c, n: (
        AsyncSemaphore(c, n, permits=1),
        AsyncSemaphore(c, n, permits=1),
    ),
    "AsyncMultiLock": lambda c, n: (
        AsyncMultiLock([AsyncLock(c, n + ":a"), AsyncLock(c, n + ":b")]),
        AsyncLock(c, n + ":b"),
    ),
    "AsyncRedlock": lambda c, n: (AsyncRedlock([c, c, c], n), AsyncLock(c, n)),
}


async def _ais_held(rival: Any) -> bool:
    """Whether the lock is taken by someone (the rival, in a task of its own,
    can't take it now)."""

    async def look() -> bool:
        lease = await rival.acquire(timeout=0)
        if lease is None:
            return True
        await lease.release()
        return False

    return await asyncio.ensure_future(look())


@pytest.mark.parametrize("kind", sorted(ASYNC))
def test_every_async_guard_decorates_a_coroutine_function(
    server: ServerProcess, make_server: Callable[..., ServerProcess], kind: str
) -> None:
    urls = [make_server().url for _ in range(3)] if kind == "AsyncRedlock" else []

    async def main() -> None:
        c = redis.asyncio.Redis.from_url(server.url)
        masters = [redis.asyncio.Redis.from_url(u) for u in urls]
        name = f"adeco-{kind}"
        if masters:
            guard, rival = AsyncRedlock(masters, name), AsyncRedlock(masters, name)
        else:
            guard, rival = ASYNC[kind](c, name)
        seen: list[bool] = []

        @guard
        async def plain(x: int) -> int:
            seen.append(await _ais_held(rival))
            assert guard.current_lease().valid  # (the call's lease)
            return x + 1

        @guard(timeout=0, skip=True)
        async def skipped() -> str:
            return "ran"

        assert inspect.iscoroutinefunction(plain)
        assert await plain(1) == 2 and seen == [True]
        assert not await _ais_held(rival)
        taken, done = asyncio.Event(), asyncio.Event()

        async def hold() -> None:  # (a task of its own: another owner)
            held = await rival.acquire()
            assert held is not None
            taken.set()
            await done.wait()
            await held.release()

        holder = asyncio.ensure_future(hold())
        await asyncio.wait_for(taken.wait(), 10)
        try:
            assert await skipped() is None
            with pytest.raises(AcquireTimeout):
                await guard(timeout=0)(plain)(1)
        finally:
            done.set()
            await holder
        assert await skipped() == "ran"
        with pytest.raises(InvalidArgument, match="coroutine function"):
            guard(len)
        for client in (c, *masters):
            await client.aclose()

    asyncio.run(main())


# -- current_lease(): the lease of the block or decorated call open here ---------


@pytest.mark.parametrize("kind", sorted(SYNC))
def test_a_decorated_call_reaches_its_lease(
    r: redis.Redis, three: list[redis.Redis], kind: str
) -> None:
    guard, rival = _guard(kind, r, three, f"lease-{kind}")
    seen: list[Any] = []

    with pytest.raises(NotOwnedError, match="no block or decorated call"):
        guard.current_lease()

    @guard(timeout=5)  # type: ignore[untyped-decorator]  # (any guard: Any)
    def work() -> Any:
        lease = guard.current_lease()
        seen.append((lease.valid, lease.fence, _is_held(rival)))
        return lease

    @guard(timeout=5, skip=True)  # type: ignore[untyped-decorator]  # (any guard: Any)
    def skippable() -> Any:
        return guard.current_lease()

    first = work()
    assert seen == [(True, first.fence, True)], "not the call's live lease"
    assert not first.valid, "the call's lease was not released after it"
    assert skippable() is not first and skippable() is not None
    with guard as lease:
        assert guard.current_lease() is lease
    with pytest.raises(NotOwnedError):
        guard.current_lease()  # (closed)


def _in_thread(call: Callable[[], Any]) -> Any:
    got: list[Any] = []

    def run() -> None:
        try:
            got.append(call())
        except Exception as exc:
            got.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    return got[0]


def test_current_lease_is_per_thread_object_and_innermost(r: redis.Redis) -> None:
    """Another thread sees none of this thread's blocks; each object sees its
    own (a read view not the write view's, one lock not another of the same
    name); a re-entered RLock's inner block is the current one until it ends."""
    lock, same_name = Lock(r, "cur-a"), Lock(r, "cur-a")
    other = Lock(r, "cur-b")
    rw = ReadWriteLock(r, "cur-rw")
    rl = RLock(r, "cur-rl")
    with lock as a, other(timeout=5) as b, rw.read as read:
        assert lock.current_lease() is a and other.current_lease() is b
        assert rw.read.current_lease() is read
        for obj in (same_name, rw.write):
            with pytest.raises(NotOwnedError):
                obj.current_lease()
        assert isinstance(_in_thread(lock.current_lease), NotOwnedError)
    with rl as outer:
        with rl(timeout=1) as inner:
            assert rl.current_lease() is inner and inner is not outer
        assert rl.current_lease() is outer


def test_a_semaphore_reaches_the_lease_of_its_innermost_block(r: redis.Redis) -> None:
    sem = Semaphore(r, "cur-sem", permits=3)
    seen: list[int] = []

    @sem(2, timeout=5)
    def two() -> int | None:
        seen.append(sem.current_lease().permits)
        with sem:
            seen.append(sem.current_lease().permits)
        seen.append(sem.current_lease().permits)
        return sem.current_lease().fence

    assert two() is not None and seen == [2, 1, 2]
    with pytest.raises(NotOwnedError):
        sem.current_lease()


def test_a_task_and_the_tasks_it_starts_reach_its_lease(server: ServerProcess) -> None:
    """A task started inside a block inherits it; a task started before does
    not see it; the lease is the block's, and none is current after it."""

    async def main() -> None:
        c = redis.asyncio.Redis.from_url(server.url)
        lock = AsyncLock(c, "acur")
        started = asyncio.Event()
        go = asyncio.Event()

        async def earlier() -> Any:
            started.set()
            await go.wait()
            try:
                return lock.current_lease()
            except NotOwnedError as exc:
                return exc

        async def child() -> Any:
            await asyncio.sleep(0)
            return lock.current_lease()

        before = asyncio.ensure_future(earlier())
        await started.wait()

        @lock(timeout=5)
        async def work() -> tuple[Any, Any, Any]:
            mine = lock.current_lease()
            go.set()
            return mine, await asyncio.ensure_future(child()), await before

        mine, childs, earliers = await work()
        assert childs is mine and isinstance(earliers, NotOwnedError)
        with pytest.raises(NotOwnedError):
            lock.current_lease()
        sem = AsyncSemaphore(c, "acur-sem", permits=2)
        async with sem(2, timeout=5) as lease:
            assert sem.current_lease() is lease

        pool = AsyncSemaphore(c, "acur-pool", permits=3)

        @pool
        async def job() -> Any:  # (three at once, each in a task of its own)
            lease = pool.current_lease()
            await asyncio.sleep(0.05)
            assert pool.current_lease() is lease
            return lease

        leases = await asyncio.gather(*(job() for _ in range(3)))
        assert len({id(lease) for lease in leases}) == 3
        await c.aclose()

    asyncio.run(main())


def test_a_block_closed_by_another_task_is_no_longer_current(server: ServerProcess) -> None:
    """An async generator's block entered by one task and closed by another:
    the first task's context still lists it, closed, and reports no lease."""

    async def main() -> None:
        c = redis.asyncio.Redis.from_url(server.url)
        lock = AsyncLock(c, "acur-closed")

        async def holding() -> Any:
            async with lock(timeout=5) as lease:
                yield lease

        gen = holding()
        lease = await gen.__anext__()
        assert lock.current_lease() is lease
        await asyncio.ensure_future(gen.aclose())  # (another task exits the block)
        assert not lease.valid
        with pytest.raises(NotOwnedError):
            lock.current_lease()
        async with lock as again:  # (and the stale entry is dropped at the next exit)
            assert lock.current_lease() is again
        with pytest.raises(NotOwnedError):
            lock.current_lease()
        await c.aclose()

    asyncio.run(main())


def test_a_block_closed_by_another_task_releases_its_own_lease(server: ServerProcess) -> None:
    """An async generator suspended in a block of a semaphore, closed by
    another task (as the event loop's finalizer does after ``async for ...:
    break``), while a third task is inside a block of the same guard: the
    exit gives back the generator's permit, never the third task's."""

    async def main() -> None:
        c = redis.asyncio.Redis.from_url(server.url)
        sem = AsyncSemaphore(c, "ablocks-closed", 2)

        async def stream() -> Any:
            async with sem:
                yield 1

        async def reader() -> Any:
            gen = stream()
            await gen.__anext__()  # (holds a permit, suspended in its block)
            return gen

        gen = await asyncio.ensure_future(reader())
        inside, done = asyncio.Event(), asyncio.Event()

        async def worker() -> bool:
            async with sem as lease:
                inside.set()
                await done.wait()
                return lease.valid

        task = asyncio.ensure_future(worker())
        await inside.wait()
        await asyncio.ensure_future(gen.aclose())  # (another task exits the block)
        third = await sem.acquire(blocking=False)  # (the generator's permit)
        assert third is not None
        assert await sem.acquire(blocking=False) is None
        done.set()
        assert await task, "the worker's permit was given back under it"
        await third.release()
        await c.aclose()

    asyncio.run(main())


def _closed_in_another_thread_gives_back_its_own(sem: Semaphore, stream: Any) -> None:
    """Suspend the generator ``stream()`` inside its block of ``sem`` (2
    permits), then close it from another thread while a third thread is
    inside a ``with`` block of the same guard: the close gives back the
    generator's permit, never the third thread's."""
    gen = stream()
    next(gen)
    inside, done = threading.Event(), threading.Event()
    valid: list[bool] = []

    def worker() -> None:
        with sem as lease:
            inside.set()
            done.wait(5)
            valid.append(lease.valid)

    thread = threading.Thread(target=worker)
    thread.start()
    assert inside.wait(5)
    closer = threading.Thread(target=gen.close)
    closer.start()
    closer.join(5)
    third = sem.acquire(blocking=False)  # (the generator's permit)
    assert third is not None
    assert sem.acquire(blocking=False) is None
    done.set()
    thread.join(5)
    assert valid == [True], "the worker's permit was given back under it"
    third.release()


def test_a_block_left_in_another_thread_releases_its_own_lease(r: redis.Redis) -> None:
    """A generator suspended in a ``with`` block of a semaphore, closed by
    another thread while a third is inside a block of the same guard."""
    sem = Semaphore(r, "blocks-closed", 2)

    def stream() -> Any:
        with sem:
            yield 1

    _closed_in_another_thread_gives_back_its_own(sem, stream)


def test_an_exit_stack_leaves_its_own_block_not_a_statements(r: redis.Redis) -> None:
    """A block entered through an ``ExitStack`` (its exit names no statement)
    and a ``with`` block of the same guard, open in one thread, the stack
    closed first: the stack gives back its own permit, and the statement's
    exit its own."""
    sem = Semaphore(r, "blocks-stack", 3)
    stack = ExitStack()
    stacked = stack.enter_context(sem)
    with sem as lease:
        stack.close()
        assert lease.valid, "the stack gave back the with block's permit"
        assert not stacked.valid
    assert not lease.valid


def test_an_exit_stack_closed_in_another_thread_leaves_its_own_block(r: redis.Redis) -> None:
    """The same with the generator's block entered through an ``ExitStack``
    (its exit names no statement)."""
    sem = Semaphore(r, "blocks-stack-closed", 2)

    def stream() -> Any:
        with ExitStack() as stack:
            stack.enter_context(sem)
            yield 1

    _closed_in_another_thread_gives_back_its_own(sem, stream)


def test_an_async_exit_stack_closed_by_another_task_leaves_its_own_block(
    server: ServerProcess,
) -> None:
    """The asyncio twin: an async generator's ``AsyncExitStack`` closed by
    another task gives back the generator's permit, not a running task's."""

    async def main() -> None:
        c = redis.asyncio.Redis.from_url(server.url)
        sem = AsyncSemaphore(c, "ablocks-stack-closed", 2)

        async def stream() -> Any:
            async with AsyncExitStack() as stack:
                await stack.enter_async_context(sem)
                yield 1

        async def reader() -> Any:
            gen = stream()
            await gen.__anext__()
            return gen

        gen = await asyncio.ensure_future(reader())
        inside, done = asyncio.Event(), asyncio.Event()

        async def worker() -> bool:
            async with sem as lease:
                inside.set()
                await done.wait()
                return lease.valid

        task = asyncio.ensure_future(worker())
        await inside.wait()
        await asyncio.ensure_future(gen.aclose())
        third = await sem.acquire(blocking=False)  # (the generator's permit)
        assert third is not None
        done.set()
        assert await asyncio.wait_for(task, 5), "the worker's permit was given back under it"
        await third.release()
        await c.aclose()

    asyncio.run(main())
