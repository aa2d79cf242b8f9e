"""An interrupted ``MultiLease.release()``, of any exception class and at any
point of the call (before it began, inside a part's release, between two
parts): no part is left held once the owner calls ``release()`` again or
acquires again (the multi-lock, or a part on its own), and the multi-lease
never says it is released while a part may still hold."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from types import FrameType
from typing import Any

import pytest
import redis
import redis.asyncio
from _interrupts import raise_once
from test_multi import in_thread

from tenure import (
    AsyncLock,
    AsyncMultiLock,
    AsyncRLock,
    Lock,
    MultiLease,
    MultiLock,
    NotOwnedError,
    RLock,
)
from tenure._api._sync import _base as sync_base
from tenure._api._sync import multi as sync_multi
from tenure._leasebook import LeaseLife, Phase

#: The parts' keys: a Lock ("p1") and an RLock ("p2", released first: the
#: acquire order is by key, the release order its reverse).
KEYS = ("tenure:{p1}", "tenure:{p2}:rlock")


class AlarmTimeout(Exception):
    """What a ``signal.alarm`` handler commonly raises: an ordinary ``Exception``."""


def _multi(url: str, layout: str) -> MultiLock:
    """The parts on one client (released together, in one round trip) or on
    two clients of the same server (two pools: released one by one)."""
    first = redis.Redis.from_url(url)
    second = first if layout == "one-server" else redis.Redis.from_url(url)
    return MultiLock([Lock(first, "p1", ttl=30), RLock(second, "p2", ttl=30)])


def _between_parts(error: type[BaseException]) -> tuple[Any, list[int]]:
    """A trace function that raises ``error`` in the multi-lease's release
    loop (``_release_together``) at its first line once a part's release has
    begun, while another part's has not: between two parts."""
    fired: list[int] = []

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and not fired:
            phases = [lease._life.phase for lease in frame.f_locals.get("leases", ())]
            if Phase.HELD in phases and any(p is not Phase.HELD for p in phases):
                fired.append(frame.f_lineno)
                raise error
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code is sync_multi._release_together.__code__ else None

    return calls, fired


def _phase(lease: Any) -> Phase:
    """The lease's phase, read afresh (another call may have changed it)."""
    phase: Phase = lease._life.phase
    return phase


@contextmanager
def _interrupted(
    point: str, error: type[BaseException], lease: MultiLease, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[int]]:
    """``error`` raised once at ``point`` of the next ``lease.release()``;
    yields a list that is non-empty once it was raised."""
    if point == "between":
        tracer, fired = _between_parts(error)
        previous = sys.gettrace()
        sys.settrace(tracer)
        try:
            yield fired
        finally:
            sys.settrace(previous)
        return
    target: tuple[Any, str, int]
    if point == "before":  # the multi-lease's own check, before its release began
        target = (LeaseLife, "check_process", 1)
    elif point == "part-begin":  # the first part's begin_release (the first is the whole's)
        target = (LeaseLife, "begin_release", 2)
    elif point == "part-mark":  # the first part's process check
        target = (sync_base, "process_mark", 1)
    else:  # "part-entry": as the first part's release() is called, before it did anything
        target = (type(lease.leases[1]), "release", 1)
    owner, name, on_call = target
    stand_in, fired = raise_once(getattr(owner, name), error, on_call)
    with monkeypatch.context() as patched:
        patched.setattr(owner, name, stand_in)
        yield fired


POINTS = [
    pytest.param("one-server", "before"),
    pytest.param("one-server", "part-begin"),
    pytest.param("one-server", "part-mark"),
    pytest.param("one-server", "between"),
    pytest.param("two-clients", "before"),
    pytest.param("two-clients", "part-begin"),
    pytest.param("two-clients", "part-mark"),
    pytest.param("two-clients", "part-entry"),
    pytest.param("two-clients", "between"),
]


@pytest.mark.parametrize("error", [KeyboardInterrupt, AlarmTimeout])
@pytest.mark.parametrize(("layout", "point"), POINTS)
@pytest.mark.parametrize("then", ["release-again", "acquire-again", "parts-again"])
def test_an_interrupted_multi_release_leaves_no_part_held(
    url: str,
    r: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    layout: str,
    point: str,
    error: type[BaseException],
    then: str,
) -> None:
    """An interrupt at ``point`` of ``release()``, then the owner's next step:
    ``release()`` again finishes the release (it never raises NotOwnedError
    while a part holds); the owner's next acquire of the multi-lock, or of
    each part on its own, first finishes it (never AlreadyHeldError, nor a
    re-entry of the RLock part's old hold). Then nothing is held, and the
    multi-lease says it is released. Before, a part whose release was cut off
    stayed held (renewed by the watchdog, with ``auto_renew``) while the
    multi-lease said it was released."""
    multi = _multi(url, layout)
    lease = multi.acquire(blocking=False)
    assert lease is not None
    with _interrupted(point, error, lease, monkeypatch) as fired, pytest.raises(error):
        lease.release()
    assert fired
    if r.exists(*KEYS):  # a part still holds: the multi-lease is not released
        assert lease._life.phase is not Phase.RELEASED
    if then == "release-again":
        lease.release()  # finishes it
    elif then == "acquire-again":
        again = multi.acquire(blocking=False)
        assert again is not None
        assert all(f > g for f, g in zip(again.fence, lease.fence, strict=True))
        again.release()
    else:
        for part, old in zip(multi.locks, lease.leases, strict=True):
            one = part.acquire(blocking=False)
            assert one is not None and one.fence > old.fence
            one.release()
        lease.release()  # nothing left to send: the multi-lease ends
    assert not r.exists(*KEYS)
    assert not lease.valid and lease._life.phase is Phase.RELEASED
    with pytest.raises(NotOwnedError):
        lease.release()
    _taken_at_once_by_another(url)


def _taken_at_once_by_another(url: str) -> None:
    """Another thread's multi-lock over the same parts takes them at once."""

    def take() -> bool:
        other = redis.Redis.from_url(url)
        try:
            lease = MultiLock([Lock(other, "p1", ttl=30), RLock(other, "p2", ttl=30)]).acquire(
                blocking=False
            )
            if lease is None:
                return False
            lease.release()
            return True
        finally:
            other.close()

    assert in_thread(take)


@pytest.mark.parametrize("error", [KeyboardInterrupt, AlarmTimeout])
@pytest.mark.parametrize(("layout", "point"), POINTS)
def test_a_with_blocks_interrupted_release_leaves_no_part_held(
    url: str,
    r: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    layout: str,
    point: str,
    error: type[BaseException],
) -> None:
    """``with multi:`` whose exit is interrupted at ``point``: the block is
    gone, so nobody would call ``release()`` again, and a part left HELD would
    be renewed by the watchdog until the owner's next acquire. The exit makes
    the release once more: nothing is held when the interrupt reaches the
    caller, and the owner's next block takes every part again."""
    multi = _multi(url, layout)
    with ExitStack() as patches:
        with pytest.raises(error), multi as lease:
            fired = patches.enter_context(_interrupted(point, error, lease, monkeypatch))
        assert fired
    assert not r.exists(*KEYS)
    assert _phase(lease) is Phase.RELEASED
    with multi as again:
        assert all(f > g for f, g in zip(again.fence, lease.fence, strict=True))
    assert not r.exists(*KEYS)
    _taken_at_once_by_another(url)


@pytest.mark.parametrize("layout", ["one-server", "two-clients"])
def test_an_asyncio_multi_release_cancelled_inside_a_part_is_finished_next_time(
    url: str, r: redis.Redis, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """The asyncio twin: a cancellation inside the first part's release; the
    owner's next acquire finishes it, and the old multi-lease says it is
    released."""

    async def main() -> None:
        first = redis.asyncio.Redis.from_url(url)
        second = first if layout == "one-server" else redis.asyncio.Redis.from_url(url)
        multi = AsyncMultiLock([AsyncLock(first, "p1", ttl=30), AsyncRLock(second, "p2", ttl=30)])
        lease = await multi.acquire(blocking=False)
        assert lease is not None
        stand_in, fired = raise_once(LeaseLife.begin_release, asyncio.CancelledError, 2)
        with monkeypatch.context() as patched, pytest.raises(asyncio.CancelledError):
            patched.setattr(LeaseLife, "begin_release", stand_in)
            await lease.release()
        assert fired
        assert r.exists(*KEYS) and _phase(lease) is not Phase.RELEASED
        again = await multi.acquire(blocking=False)
        assert again is not None
        await again.release()
        assert not r.exists(*KEYS)
        assert _phase(lease) is Phase.RELEASED
        await first.aclose()
        if second is not first:
            await second.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("layout", ["one-server", "two-clients"])
def test_an_asyncio_blocks_release_cancelled_inside_a_part_leaves_no_part_held(
    url: str, r: redis.Redis, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """``async with multi:`` whose exit is cancelled inside the first part's
    release: the exit makes the release once more, so nothing is held when
    the cancellation reaches the caller."""

    async def main() -> None:
        first = redis.asyncio.Redis.from_url(url)
        second = first if layout == "one-server" else redis.asyncio.Redis.from_url(url)
        multi = AsyncMultiLock([AsyncLock(first, "p1", ttl=30), AsyncRLock(second, "p2", ttl=30)])
        stand_in, fired = raise_once(LeaseLife.begin_release, asyncio.CancelledError, 2)
        with monkeypatch.context() as patched, pytest.raises(asyncio.CancelledError):
            async with multi as lease:
                patched.setattr(LeaseLife, "begin_release", stand_in)
        assert fired
        assert not r.exists(*KEYS) and _phase(lease) is Phase.RELEASED
        async with multi as again:
            assert all(f > g for f, g in zip(again.fence, lease.fence, strict=True))
        assert not r.exists(*KEYS)
        await first.aclose()
        if second is not first:
            await second.aclose()

    asyncio.run(main())


def _interrupt_after_an_answer_is_kept(error: type[BaseException]) -> tuple[Any, list[int]]:
    """A profile function that raises ``error`` as the driver's
    ``_send_together`` has just appended a step's parsed reply to its answers
    (a signal handler may run as that call returns), once."""
    from tenure._drivers import _sync

    fired: list[int] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        due = event == "c_return" and not fired and frame.f_code is _sync._send_together.__code__
        if due and getattr(arg, "__name__", "") == "append":
            fired.append(frame.f_lineno)
            raise error("alarm")

    return profile, fired


@pytest.mark.parametrize("error", [KeyboardInterrupt, AlarmTimeout])
def test_an_interrupt_as_a_release_reply_is_kept_reaches_the_caller(
    url: str, r: redis.Redis, error: type[BaseException]
) -> None:
    """An interrupt as the driver keeps the parsed reply of one part's
    release (the parts of one server, released in one round trip): the
    caller gets that interrupt, and ``release()`` again finishes the release.
    Before, an ``Exception``-class interrupt was also kept as the next
    step's answer, and the caller got ``ValueError`` (one answer too many)."""
    multi = _multi(url, "one-server")
    warm = multi.acquire(blocking=False)  # (the first call probes the server)
    assert warm is not None
    warm.release()
    lease = multi.acquire(blocking=False)
    assert lease is not None
    profiler, fired = _interrupt_after_an_answer_is_kept(error)
    sys.setprofile(profiler)
    try:
        with pytest.raises(error):
            lease.release()
    finally:
        sys.setprofile(None)
    assert fired
    lease.release()
    assert not r.exists(*KEYS) and _phase(lease) is Phase.RELEASED
    _taken_at_once_by_another(url)


def _interrupt_at(n: int, error: type[BaseException], fired: list[str]) -> Any:
    """A profile function that raises ``error`` at the ``n``-th point of
    tenure's own code where CPython may run a signal handler: a function's
    entry, or just after a call returns (not in a finaliser the garbage
    collector runs meanwhile, nor a weak reference's callback: Python prints
    and drops what those raise), once; ``fired`` then names the point."""
    seen = [0]

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if fired or event not in ("call", "return", "c_return"):
            return
        if "/tenure/" not in frame.f_code.co_filename:
            return
        up: FrameType | None = frame
        while up is not None:
            code = up.f_code
            if code.co_name in ("__del__", "remove", "_forget_state") or (
                code.co_name == "<lambda>" and code.co_filename.endswith("statebase.py")
            ):
                return  # (a finaliser or a weak reference's callback: Python drops its errors)
            up = up.f_back
        seen[0] += 1
        if seen[0] == n:
            fired.append(f"{event} {frame.f_code.co_name}:{frame.f_lineno}")
            raise error("alarm")

    return profile


@pytest.mark.parametrize("error", [AlarmTimeout])
def test_an_interrupt_at_any_point_of_a_multi_release_is_finished_by_the_next_acquire(
    url: str, r: redis.Redis, error: type[BaseException]
) -> None:
    """An interrupt placed, in turn, at every point of ``release()`` (parts on
    two clients) where a signal handler may run: after each, the owner's next
    acquire takes every part (never ``AlreadyHeldError``), its release leaves
    nothing held, and the interrupted multi-lease says it is released. (At
    the very entry of ``release()``, before its first statement, the call is
    as if not made: the owner makes it again.)"""
    multi = _multi(url, "two-clients")
    warm = multi.acquire(blocking=False)
    assert warm is not None
    warm.release()
    n = 0
    while True:
        n += 1
        lease = multi.acquire(blocking=False)
        assert lease is not None, f"point {n - 1}"
        fired: list[str] = []
        sys.setprofile(_interrupt_at(n, error, fired))
        try:
            lease.release()
        except error:
            pass
        finally:
            sys.setprofile(None)
        if not fired:
            break  # every point was tried
        if n == 1:  # at the call's entry: as if not called
            assert fired[0].startswith("call release:"), fired[0]
            lease.release()
        if r.exists(*KEYS):
            assert _phase(lease) is not Phase.RELEASED, fired[0]
        again = multi.acquire(blocking=False)
        assert again is not None, fired[0]
        again.release()
        assert not r.exists(*KEYS), fired[0]
        assert _phase(lease) is Phase.RELEASED, fired[0]
    assert n > 50  # (the points were found)


class _AlarmTimeout(Exception):
    """What a program's SIGALRM handler may raise: an ordinary Exception."""


@pytest.mark.parametrize("error", [KeyboardInterrupt, _AlarmTimeout])
def test_a_part_whose_acquire_return_is_cut_off_is_given_back(
    r: redis.Redis, url: str, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    """An interrupt as a part's acquire returns (its lease made and started,
    on its way back to the multi-lock): the part is given back before the
    interrupt is raised, not left held and renewed."""
    other = redis.Redis.from_url(url)  # (another pool: the parts are taken one by one)
    multi = MultiLock([Lock(r, "cut-p1", ttl=0.6, auto_renew=True), Lock(other, "cut-p2")])
    real = Lock.acquire
    fired: list[int] = []

    def acquire(self: Lock, *args: Any, **kwargs: Any) -> Any:
        lease = real(self, *args, **kwargs)
        if not fired:
            fired.append(1)
            raise error
        return lease

    monkeypatch.setattr(Lock, "acquire", acquire)
    with pytest.raises(error):
        multi.acquire(timeout=2)
    monkeypatch.undo()
    assert fired
    assert not r.exists("tenure:{cut-p1}", "tenure:{cut-p2}"), "a part was left held"
    lease = multi.acquire(blocking=False)
    assert lease is not None
    lease.release()
    other.close()


def test_parts_a_cut_off_release_did_not_reach_are_never_renewed(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``release()`` cut off before it released any part: the parts stay held
    until the owner's next step or their ttl, never renewed (the release was
    asked of the whole, so of each part)."""
    ttl = 0.6
    multi = MultiLock(
        [Lock(r, "nr-1", ttl=ttl, auto_renew=True), RLock(r, "nr-2", ttl=ttl, auto_renew=True)]
    )
    lease = multi.acquire(timeout=1)
    assert lease is not None
    stand_in, fired = raise_once(sync_multi._release_together, KeyboardInterrupt)
    monkeypatch.setattr(sync_multi, "_release_together", stand_in)
    with pytest.raises(KeyboardInterrupt):
        lease.release()
    monkeypatch.undo()
    assert fired
    keys = ("tenure:{nr-1}", "tenure:{nr-2}:rlock")
    assert r.exists(*keys) == 2
    deadline = time.monotonic() + 3 * ttl
    while r.exists(*keys) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not r.exists(*keys), "a part is still renewed"
