"""Model-based tests: hypothesis drives Lock, RLock and ReadWriteLock against a
real server and a small Python model of their semantics, and checks they agree
after every step.

Each owner is its own thread (tenure's owner is the thread), so every operation
of owner i runs on executor i.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
import redis
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
    AlreadyHeldError,
    Lock,
    LockUpgradeError,
    NotOwnedError,
    ReadWriteLease,
    ReadWriteLock,
    RLock,
)
from tenure._drivers import _sync
from tenure._server import ServerProcess

OWNERS = 3
T = TypeVar("T")


class _Owners:
    def __init__(self) -> None:
        self.pools = [ThreadPoolExecutor(1) for _ in range(OWNERS)]

    def run(self, owner: int, fn: Callable[[], T]) -> T:
        return self.pools[owner].submit(fn).result(timeout=10)

    def close(self) -> None:
        for pool in self.pools:
            pool.shutdown()


_url: str = ""


class _Machine(RuleBasedStateMachine):
    """What both models share: the owners, the holder, release and expiry.

    Subclasses set ``lock`` and ``lock_key``, and count holds in ``count``
    (always 1 for a non-reentrant lock).
    """

    lock_key: str

    def __init__(self) -> None:
        super().__init__()
        self.client = redis.Redis.from_url(_url)
        self.client.flushall()
        self.owners = _Owners()
        self.holder: int | None = None
        self.count = 0
        self.fence = 0

    def teardown(self) -> None:
        self.owners.close()
        self.client.close()

    def release_as(self, owner: int, release: Callable[[], None]) -> None:
        def call() -> bool:
            try:
                release()
                return True
            except NotOwnedError:
                return False

        assert self.owners.run(owner, call) == (self.holder == owner)
        if self.holder == owner:
            self.count -= 1
            if self.count == 0:
                self.holder = None

    @precondition(lambda self: self.holder is not None)
    @rule()
    def expire(self) -> None:
        """The holder's lease runs out in Redis (as after a long pause)."""
        assert self.client.pexpire(self.lock_key, 1)
        while self.client.exists(self.lock_key):
            pass
        self.holder, self.count = None, 0


class LockMachine(_Machine):
    """Model: who holds the lock (an owner index or None), and the last fence."""

    lock_key = "tenure:{model}"

    def __init__(self) -> None:
        super().__init__()
        self.lock = Lock(self.client, "model", ttl=30)

    @rule(owner=st.integers(0, OWNERS - 1))
    def acquire(self, owner: int) -> None:
        def call() -> Any:
            try:
                return self.lock.acquire(blocking=False)
            except AlreadyHeldError:
                return "again"

        lease = self.owners.run(owner, call)
        if self.holder is None:
            assert lease is not None and lease != "again"
            assert lease.fence > self.fence
            self.holder, self.count, self.fence = owner, 1, lease.fence
        elif self.holder == owner:
            assert lease == "again"
        else:
            assert lease is None

    @rule(owner=st.integers(0, OWNERS - 1))
    def release(self, owner: int) -> None:
        self.release_as(owner, self.lock.release)

    @precondition(lambda self: self.holder is not None)
    @rule()
    def extend(self) -> None:
        assert self.holder is not None
        self.owners.run(self.holder, lambda: self.lock.extend(30))

    @invariant()
    def agrees(self) -> None:
        assert self.lock.locked() == (self.holder is not None)
        for owner in range(OWNERS):
            assert self.owners.run(owner, self.lock.owned) == (owner == self.holder)


class RLockMachine(_Machine):
    """Model: the holding owner, its hold count, and the fence of its hold."""

    lock_key = "tenure:{model}:rlock"

    def __init__(self) -> None:
        super().__init__()
        self.lock = RLock(self.client, "model", ttl=30)

    @rule(owner=st.integers(0, OWNERS - 1))
    def acquire(self, owner: int) -> None:
        lease = self.owners.run(owner, lambda: self.lock.acquire(blocking=False))
        if self.holder is None:
            assert lease is not None and lease.fence > self.fence
            self.holder, self.count, self.fence = owner, 1, lease.fence
        elif self.holder == owner:
            assert lease is not None and lease.fence == self.fence  # same hold
            self.count += 1
        else:
            assert lease is None

    @rule(owner=st.integers(0, OWNERS - 1))
    def release(self, owner: int) -> None:
        self.release_as(owner, self.lock.release)

    @invariant()
    def agrees(self) -> None:
        assert self.lock.locked() == (self.holder is not None)
        for owner in range(OWNERS):
            expected = self.count if owner == self.holder else 0
            assert self.owners.run(owner, self.lock.hold_count) == expected


MODES = st.sampled_from(["read", "write"])


class RWLockMachine(RuleBasedStateMachine):
    """Model of a ReadWriteLock: each owner's read and write hold counts and
    their fences, and the last fence minted. Acquires do not wait, so nobody
    queues: a read is granted to an owner that reads or writes already, or when
    nobody writes; a write to the owner that writes already, or when nobody
    holds anything; a reader asking to write is refused."""

    lock_key = "tenure:{model}:rwlock"

    def __init__(self) -> None:
        super().__init__()
        self.client = redis.Redis.from_url(_url)
        self.client.flushall()
        self.owners = _Owners()
        self.ids = [self.owners.run(i, _sync.current_owner) for i in range(OWNERS)]
        self.rw = ReadWriteLock(self.client, "model", ttl=30)
        self.counts: dict[tuple[int, str], int] = {}  # (owner, mode) -> count, > 0
        self.fences: dict[tuple[int, str], int] = {}  # (owner, mode) -> the hold's fence
        self.last = 0  # the last fence minted (0: none seen yet)

    def teardown(self) -> None:
        self.owners.close()
        self.client.close()

    def view(self, mode: str) -> Any:
        return self.rw.read if mode == "read" else self.rw.write

    def holds(self, mode: str) -> list[int]:
        return [o for (o, m) in self.counts if m == mode]

    @rule(owner=st.integers(0, OWNERS - 1), mode=MODES)
    def acquire(self, owner: int, mode: str) -> None:
        def call() -> Any:
            try:
                return self.view(mode).acquire(blocking=False)
            except LockUpgradeError:
                return "upgrade"

        got = self.owners.run(owner, call)
        key = (owner, mode)
        writers = self.holds("write")
        if key in self.counts:  # a re-entry: the same hold
            assert isinstance(got, ReadWriteLease) and got.fence == self.fences[key]
            self.counts[key] += 1
            return
        if mode == "write" and (owner, "read") in self.counts:
            assert got == "upgrade"
            return
        if mode == "read":
            granted = (owner, "write") in self.counts or not writers
        else:
            granted = not self.counts
        if not granted:
            assert got is None
            return
        assert isinstance(got, ReadWriteLease) and got.mode == mode
        if mode == "write":
            assert got.fence > self.last
        elif self.last:
            assert got.fence == self.last  # a reader gets the last fence minted
        self.last = max(self.last, got.fence)
        self.counts[key], self.fences[key] = 1, got.fence

    @rule(owner=st.integers(0, OWNERS - 1), mode=MODES)
    def release(self, owner: int, mode: str) -> None:
        def call() -> bool:
            try:
                self.view(mode).release()
                return True
            except NotOwnedError:
                return False

        key = (owner, mode)
        assert self.owners.run(owner, call) == (key in self.counts)
        if key in self.counts:
            self.counts[key] -= 1
            if self.counts[key] == 0:
                del self.counts[key], self.fences[key]

    @precondition(lambda self: self.counts)
    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        """One hold's lease runs out in Redis (as after its holder's long pause)."""
        owner, mode = data.draw(st.sampled_from(sorted(self.counts)))
        field = f"{mode[0]}:{self.ids[owner]}"
        assert self.client.zadd(self.lock_key + ":holds", {field: 1}, xx=True) == 0
        del self.counts[owner, mode], self.fences[owner, mode]

    @precondition(lambda self: self.counts)
    @rule(data=st.data())
    def extend(self, data: st.DataObject) -> None:
        owner, mode = data.draw(st.sampled_from(sorted(self.counts)))
        self.owners.run(owner, lambda: self.view(mode).extend(30))

    @invariant()
    def agrees(self) -> None:
        info = self.rw.info()
        mode = "write" if self.holds("write") else "read" if self.counts else None
        assert info.mode == mode
        assert sorted((h.owner, h.mode, h.count, h.fence) for h in info.holders) == sorted(
            (self.ids[o], m, c, self.fences[o, m]) for (o, m), c in self.counts.items()
        )
        for owner in range(OWNERS):
            for m in ("read", "write"):
                count = self.owners.run(owner, self.view(m).hold_count)
                assert count == self.counts.get((owner, m), 0)


@pytest.mark.parametrize(
    "machine", [LockMachine, RLockMachine, RWLockMachine], ids=["Lock", "RLock", "ReadWriteLock"]
)
def test_model(machine: type[RuleBasedStateMachine], server: ServerProcess) -> None:
    global _url
    _url = server.url
    run_state_machine_as_test(
        machine, settings=settings(max_examples=25, stateful_step_count=20, deadline=None)
    )
