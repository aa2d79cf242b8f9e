"""Model-based tests of the counting primitives: hypothesis drives Semaphore and
CountDownLatch against a real server and a small Python model of their
semantics, and checks they agree after every step.

Each owner is its own thread (tenure's owner is the thread), as in test_model.py.
"""

from __future__ import annotations

from typing import Any

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
from test_model import OWNERS, _Owners

from tenure import (
    CountDownLatch,
    InvalidArgument,
    NotOwnedError,
    Semaphore,
    SemaphoreLease,
)
from tenure._server import ServerProcess

PERMITS = 3
HOLDERS = "tenure:{model}:semaphore"

_url: str = ""


class SemaphoreMachine(RuleBasedStateMachine):
    """Model: the permit count stored in Redis (``None`` before first use), the live
    leases and how many permits each holds, each owner's leases taken through the
    semaphore object (the ones ``sem.release()`` picks from), and the last fence.

    ``sem`` (given 3 permits) is used by the owners; ``admin``, another object of
    the same name, changes the count, so ``sem`` meets counts it was not given.
    """

    def __init__(self) -> None:
        super().__init__()
        self.client = redis.Redis.from_url(_url)
        self.client.flushall()
        self.owners = _Owners()
        self.sem = Semaphore(self.client, "model", PERMITS, ttl=30)
        self.admin = Semaphore(self.client, "model", 1)
        self.stored: int | None = None
        self.checked = False  # sem had a successful acquire: it follows the stored count
        self.live: dict[SemaphoreLease, int] = {}
        self.all: list[SemaphoreLease] = []
        self.local: list[list[SemaphoreLease]] = [[] for _ in range(OWNERS)]
        self.fence = 0

    def teardown(self) -> None:
        self.owners.close()
        self.client.close()

    @property
    def total(self) -> int:
        return PERMITS if self.stored is None else self.stored

    def forget(self, lease: SemaphoreLease) -> None:
        """The object no longer tracks ``lease`` (released, or seen expired)."""
        for leases in self.local:
            if lease in leases:
                leases.remove(lease)

    @rule(owner=st.integers(0, OWNERS - 1), n=st.integers(1, PERMITS + 1))
    def acquire(self, owner: int, n: int) -> None:
        def call() -> Any:
            try:
                return self.sem.acquire(n, blocking=False)
            except InvalidArgument as exc:
                return exc

        got = self.owners.run(owner, call)
        held = sum(self.live.values())
        if n > PERMITS:  # more than sem was given: refused before any I/O
            assert isinstance(got, InvalidArgument) and "more than the semaphore's" in str(got)
        elif not self.checked and self.stored not in (None, PERMITS):
            assert isinstance(got, InvalidArgument) and "permits in Redis, but" in str(got)
        elif n > self.total:
            assert isinstance(got, InvalidArgument) and "fewer than the" in str(got)
        elif held + n <= self.total:
            assert isinstance(got, SemaphoreLease) and got.permits == n
            assert got.fence > self.fence
            self.fence = got.fence
            self.stored, self.checked = self.total, True
            self.live[got] = n
            self.all.append(got)
            self.local[owner].append(got)
        else:
            assert got is None
            if self.stored is None:
                self.stored = PERMITS

    @precondition(lambda self: self.all)
    @rule(i=st.integers(0, 50))
    def release_lease(self, i: int) -> None:
        lease = self.all[i % len(self.all)]
        try:
            lease.release()
            released = True
        except NotOwnedError:
            released = False
        assert released == (lease in self.live)
        self.live.pop(lease, None)
        self.forget(lease)

    @rule(owner=st.integers(0, OWNERS - 1))
    def release_latest(self, owner: int) -> None:
        """``sem.release()``: the owner's latest lease taken through ``sem``."""

        def call() -> bool:
            try:
                self.sem.release()
                return True
            except NotOwnedError:
                return False

        released = self.owners.run(owner, call)
        leases = self.local[owner]
        if not leases:
            assert not released
            return
        lease = leases[-1]
        assert released == (lease in self.live)
        self.live.pop(lease, None)
        self.forget(lease)

    @precondition(lambda self: self.all)
    @rule(i=st.integers(0, 50))
    def extend(self, i: int) -> None:
        lease = self.all[i % len(self.all)]
        try:
            lease.extend(30)
            extended = True
        except NotOwnedError:
            extended = False
        assert extended == (lease in self.live)
        if not extended:
            self.forget(lease)

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 50))
    def expire(self, i: int) -> None:
        """A lease's permits run out in Redis (as after its holder crashed)."""
        lease = list(self.live)[i % len(self.live)]
        n = self.live.pop(lease)
        self.client.zadd(HOLDERS, {f"{lease.owner}#{j}": 1 for j in range(1, n + 1)}, xx=True)

    @rule(permits=st.integers(1, PERMITS + 1))
    def set_permits(self, permits: int) -> None:
        self.admin.set_permits(permits)
        self.stored = permits

    @invariant()
    def agrees(self) -> None:
        info = self.sem.info()
        held = sum(self.live.values())
        assert info.permits == self.total
        assert info.available == max(0, self.total - held) == self.sem.available()
        assert {h.token: h.permits for h in info.holders} == {
            lease.owner: n for lease, n in self.live.items()
        }
        assert info.waiters == 0


class LatchMachine(RuleBasedStateMachine):
    """Model: the count, and how many times the latch opened (its opening number
    must grow exactly then). Two latch objects of one name share the state."""

    def __init__(self) -> None:
        super().__init__()
        self.client = redis.Redis.from_url(_url)
        self.client.flushall()
        self.latches = [CountDownLatch(self.client, "model") for _ in range(2)]
        self.count = 0
        self.opened = 0

    def teardown(self) -> None:
        self.client.close()

    @rule(which=st.integers(0, 1), n=st.integers(1, 3))
    def try_set_count(self, which: int, n: int) -> None:
        assert self.latches[which].try_set_count(n) == (self.count == 0)
        if self.count == 0:
            self.count = n

    @rule(which=st.integers(0, 1))
    def count_down(self, which: int) -> None:
        before = self.count
        self.count = max(0, self.count - 1)
        assert self.latches[which].count_down() == self.count
        if before == 1:
            opened = self.latches[which].info().opened
            assert opened > self.opened
            self.opened = opened

    @rule(which=st.integers(0, 1))
    def wait_now(self, which: int) -> None:
        assert self.latches[which].wait(timeout=0.001) == (self.count == 0)

    @invariant()
    def agrees(self) -> None:
        for latch in self.latches:
            assert latch.count() == self.count
            assert latch.info().opened == self.opened


@pytest.mark.parametrize(
    "machine", [SemaphoreMachine, LatchMachine], ids=["Semaphore", "CountDownLatch"]
)
def test_model(machine: type[RuleBasedStateMachine], server: ServerProcess) -> None:
    global _url
    _url = server.url
    run_state_machine_as_test(
        machine, settings=settings(max_examples=60, stateful_step_count=30, deadline=None)
    )
