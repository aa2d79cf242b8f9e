"""A ``with`` block whose exit is cut off at its first instruction (a signal
handler's exception as the exit is called, before any line of it ran): the
lease its entry took is not renewed any more (it ends by its ttl), and the
owner's next acquire releases it first instead of answering
``AlreadyHeldError``. A block still open, however long, is renewed as before;
so is a lease entered through an ``ExitStack`` (linked to no statement)."""

from __future__ import annotations

import gc
import inspect
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import redis

from tenure import Lock, MultiLock, NotOwnedError, RLock, Semaphore, _models
from tenure._api._sync import _blocks as sync_blocks
from tenure._models import BlockExit

TTL = 0.6  # renewed by the watchdog every third of it while the block is open


def _held(r: redis.Redis, key: str) -> bool:
    return bool(r.exists(key))


def _cut_exit(monkeypatch: pytest.MonkeyPatch, error: type[BaseException]) -> list[int]:
    """The next ``with`` statement's exit raises ``error`` as it is called, at
    its first instruction, before any of it ran; a list that is non-empty once
    it did. (Each statement's exit is a :class:`BlockExit` of the manager's
    exit function: the stand-in takes that function's place in it.)"""
    fired: list[int] = []

    def due() -> bool:
        if fired:
            return False
        fired.append(1)
        return True

    def exit_of(fn: Callable[..., Any], target: object, **bound: Any) -> BlockExit:
        if inspect.iscoroutinefunction(fn):

            async def cut_in_async(*args: Any, **kwargs: Any) -> Any:
                if due():
                    raise error
                return await fn(*args, **kwargs)

            return BlockExit(cut_in_async, target, **bound)

        def cut_in(*args: Any, **kwargs: Any) -> Any:
            if due():
                raise error
            return fn(*args, **kwargs)

        return BlockExit(cut_in, target, **bound)

    monkeypatch.setattr(_models, "BlockExit", exit_of)
    return fired


class AlarmTimeout(Exception):
    """What a program's SIGALRM handler may raise: an ordinary Exception."""


FORMS: dict[str, Callable[[Any], Any]] = {
    "with lock": lambda lock: lock,
    "with lock(timeout=...)": lambda lock: lock(timeout=5),
    "with lock.acquire()": lambda lock: lock.acquire(),
}


@pytest.mark.parametrize("error", [KeyboardInterrupt, AlarmTimeout])
@pytest.mark.parametrize("form", FORMS)
def test_a_lock_whose_block_exit_was_cut_off_is_not_renewed(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, form: str, error: type[BaseException]
) -> None:
    """The lease of a block whose exit was cut off is not renewed: the key
    goes by its ttl (before: renewed for as long as the process lives)."""
    lock = Lock(r, "bx-renew", ttl=TTL, auto_renew=True)
    fired = _cut_exit(monkeypatch, error)
    with pytest.raises(error), FORMS[form](lock) as lease:
        fence = lease.fence
    assert fired, "the exit was cut off"
    monkeypatch.undo()
    assert _held(r, "tenure:{bx-renew}")
    deadline = time.monotonic() + 3 * TTL
    while _held(r, "tenure:{bx-renew}") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _held(r, "tenure:{bx-renew}"), "the watchdog still renews the lease"
    again = lock.acquire(blocking=False)
    assert again is not None and again.fence > fence
    again.release()


@pytest.mark.parametrize("error", [KeyboardInterrupt, AlarmTimeout])
def test_a_block_cut_off_is_left_while_the_program_keeps_the_interrupt(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    """The program keeps the interrupt (and so its traceback, with the frames
    of the cut-off exit) for as long as it likes: the block still counts as
    left, its lease is not renewed, with no garbage collection in between."""
    lock = Lock(r, "bx-kept", ttl=TTL, auto_renew=True)
    _cut_exit(monkeypatch, error)
    kept: list[BaseException] = []
    gc.disable()
    try:
        try:
            with lock:
                pass
        except error as e:
            kept.append(e)
        monkeypatch.undo()
        assert kept and kept[0].__traceback__ is not None
        deadline = time.monotonic() + 3 * TTL
        while _held(r, "tenure:{bx-kept}") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _held(r, "tenure:{bx-kept}"), "the watchdog still renews the lease"
    finally:
        gc.enable()
    lease = lock.acquire(blocking=False)
    assert lease is not None
    lease.release()


@pytest.mark.parametrize("form", FORMS)
def test_the_owners_next_acquire_releases_a_lease_whose_block_exit_was_cut_off(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    """The owner's next acquire (a new block) releases the lease first and is
    granted at once (before: ``AlreadyHeldError`` until the lease ended)."""
    lock = Lock(r, "bx-next", ttl=30)
    _cut_exit(monkeypatch, KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt), FORMS[form](lock) as lease:
        first = lease.fence
    monkeypatch.undo()
    with lock(timeout=1) as lease:
        assert lease.fence > first
        assert r.get("tenure:{bx-next}") == lease.owner.encode()
    assert not _held(r, "tenure:{bx-next}")


def test_an_rlock_level_whose_block_exit_was_cut_off_ends_with_the_next_acquire(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inner ``with rlock`` block cut off at its exit: the outer block's
    exit still frees the lock once the owner acquires again (the cut-off
    level is released first), and the hold is not renewed for good."""
    rlock = RLock(r, "bx-rlock", ttl=TTL, auto_renew=True)
    key = "tenure:{bx-rlock}:rlock"
    with rlock:
        _cut_exit(monkeypatch, KeyboardInterrupt)
        with pytest.raises(KeyboardInterrupt), rlock:
            pass
        monkeypatch.undo()
        assert _held(r, key)
    # the outer block released its level; the cut-off level still holds
    assert _held(r, key)
    deadline = time.monotonic() + 3 * TTL
    while _held(r, key) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _held(r, key), "the watchdog still renews the hold"
    with rlock(timeout=1) as lease:
        assert lease.valid
    assert not _held(r, key)


def test_a_semaphore_block_cut_off_gives_its_permit_back_on_the_next_acquire(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``with semaphore`` block cut off at its exit: its permit is given back
    by the owner's next acquire through the same object."""
    sem = Semaphore(r, "bx-sem", 1, ttl=30)
    _cut_exit(monkeypatch, AlarmTimeout)
    with pytest.raises(AlarmTimeout), sem:
        pass
    monkeypatch.undo()
    lease = sem.acquire(timeout=1)
    assert lease is not None, "the permit of the cut-off block was not given back"
    lease.release()


def test_a_multi_lock_block_cut_off_releases_its_parts_on_the_next_acquire(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    multi = MultiLock([Lock(r, "bx-m1", ttl=30), Lock(r, "bx-m2", ttl=30)])
    _cut_exit(monkeypatch, KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt), multi:
        pass
    monkeypatch.undo()
    assert _held(r, "tenure:{bx-m1}") and _held(r, "tenure:{bx-m2}")
    with multi(timeout=1) as lease:
        assert lease.valid
    assert not _held(r, "tenure:{bx-m1}") and not _held(r, "tenure:{bx-m2}")


def _blocks(lock: Lock) -> Iterator[None]:
    with lock:
        yield


@pytest.mark.parametrize("how", ["with", "ExitStack", "generator"])
def test_an_open_block_is_renewed_for_as_long_as_it_lasts(r: redis.Redis, how: str) -> None:
    """No false give-up: a block open for many renewals (a ``with`` statement,
    an ``ExitStack``, a generator suspended inside its block), through
    garbage collections, keeps its lease, and its exit releases it."""
    ttl = 2 * TTL  # (renewed every third of it: a renewal 0.8 s late still keeps it)
    lock = Lock(r, f"bx-open-{how}", ttl=ttl, auto_renew=True)
    key = f"tenure:{{bx-open-{how}}}"

    def hold() -> None:
        for _ in range(6):  # 3 ttls
            time.sleep(ttl / 2)
            gc.collect()
            assert _held(r, key)

    if how == "with":
        with lock as lease:
            hold()
            assert lease.valid
    elif how == "ExitStack":
        with ExitStack() as stack:
            lease = stack.enter_context(lock)
            hold()
            assert lease.valid
    else:
        blocks = _blocks(lock)
        next(blocks)
        hold()
        with pytest.raises(StopIteration):
            next(blocks)
    assert not _held(r, key)


def _raise_after(monkeypatch: pytest.MonkeyPatch, cls: Any, error: type[BaseException]) -> None:
    """``cls.acquire`` raises ``error`` once, after the real acquire returned: an
    interrupt as the acquire returns into the block's enter."""
    real = cls.acquire
    fired: list[int] = []

    def acquire(self: Any, *args: Any, **kwargs: Any) -> Any:
        lease = real(self, *args, **kwargs)
        if not fired:
            fired.append(1)
            raise error
        return lease

    monkeypatch.setattr(cls, "acquire", acquire)


@pytest.mark.parametrize("form", ["with lock", "with lock(timeout=...)"])
def test_a_block_cut_off_as_its_acquire_returns_gives_the_lease_up(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    """An interrupt as the acquire returns into the block's enter (the lease
    made, the block never begun): the lease is given up all the same (linked
    to the statement as it started), not renewed for good."""
    lock = Lock(r, "bx-enter", ttl=TTL, auto_renew=True)
    _raise_after(monkeypatch, Lock, AlarmTimeout)
    with pytest.raises(AlarmTimeout), FORMS[form](lock):
        pytest.fail("the block ran")
    monkeypatch.undo()
    assert _held(r, "tenure:{bx-enter}")
    with lock(timeout=1) as lease:
        assert lease.valid
    assert not _held(r, "tenure:{bx-enter}")
    _raise_after(monkeypatch, Lock, AlarmTimeout)
    with pytest.raises(AlarmTimeout), FORMS[form](lock):
        pytest.fail("the block ran")
    monkeypatch.undo()
    deadline = time.monotonic() + 3 * TTL
    while _held(r, "tenure:{bx-enter}") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _held(r, "tenure:{bx-enter}"), "the watchdog still renews the lease"


def test_a_multi_lock_block_cut_off_as_its_acquire_returns_gives_its_parts_up(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    multi = MultiLock([Lock(r, "bx-me1", ttl=30), Lock(r, "bx-me2", ttl=30)])
    _raise_after(monkeypatch, MultiLock, KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt), multi:
        pytest.fail("the block ran")
    monkeypatch.undo()
    with multi(timeout=1) as lease:
        assert lease.valid
    assert not _held(r, "tenure:{bx-me1}") and not _held(r, "tenure:{bx-me2}")


class _ListedThenCut:
    """Stands in for the context's list of open blocks: its next ``set`` (a
    block's enter listing its block) is made, then ``AlarmTimeout`` raised, as
    an interrupt at the enter's last instruction would."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.fired = False

    def get(self) -> Any:
        return self.real.get()

    def set(self, value: Any) -> Any:
        token = self.real.set(value)
        if not self.fired:
            self.fired = True
            raise AlarmTimeout
        return token


@pytest.mark.parametrize("form", ["with lock", "with lock(timeout=...)"])
def test_current_lease_never_gives_the_lease_of_a_block_cut_off(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    """A block whose exit was cut off, or whose enter was cut off once the
    block was listed, is over: its lease is due for release (the owner's next
    acquire sends it), and ``current_lease()`` must not give it."""
    lock = Lock(r, "bx-current", ttl=30)
    _cut_exit(monkeypatch, AlarmTimeout)
    with pytest.raises(AlarmTimeout), FORMS[form](lock):
        pass
    monkeypatch.undo()
    with pytest.raises(NotOwnedError):
        lock.current_lease()
    with lock(timeout=1) as lease:  # (releases the one left first)
        assert lock.current_lease() is lease
    with pytest.raises(NotOwnedError):
        lock.current_lease()

    listing = _ListedThenCut(sync_blocks._open_here)
    monkeypatch.setattr(sync_blocks, "_open_here", listing)
    with pytest.raises(AlarmTimeout), FORMS[form](lock):
        pytest.fail("the block ran")
    assert listing.fired
    with pytest.raises(NotOwnedError):
        lock.current_lease()
    with lock(timeout=1) as lease:
        assert lock.current_lease() is lease
    with pytest.raises(NotOwnedError):
        lock.current_lease()
    assert not _held(r, "tenure:{bx-current}")
