"""Model-based tests: hypothesis drives Lock and RLock against a real server and
a small Python model of their semantics, and checks they agree after every step.

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

from tenure import AlreadyHeldError, Lock, NotOwnedError, RLock
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

    lock_key = "tenure:rlock:{model}"

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


@pytest.mark.parametrize("machine", [LockMachine, RLockMachine], ids=["Lock", "RLock"])
def test_model(machine: type[RuleBasedStateMachine], server: ServerProcess) -> None:
    global _url
    _url = server.url
    run_state_machine_as_test(
        machine, settings=settings(max_examples=25, stateful_step_count=20, deadline=None)
    )
