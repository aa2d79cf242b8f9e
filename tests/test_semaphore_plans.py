"""Pure tests of the Semaphore plans and keys: canned replies and a fake clock, no Redis."""

from __future__ import annotations

from typing import Any

import pytest
from _plan_harness import Clock, finish, send
from _plan_harness import queue as queue_up
from _plan_harness import start as first_attempt
from redis.crc import key_slot

from tenure import InvalidArgument, NotOwnedError
from tenure._errors import ProtocolError
from tenure._info import SemaphoreHolder, SemaphoreInfo
from tenure._keys import lock_keys, semaphore_keys
from tenure._plans import semaphore as plans
from tenure._plans.common import FENCE_KEEP_MS
from tenure._plans.waiting import validity
from tenure._protocol import Contend, Eval, HandedOff, Listening, Status, WaitWake
from tenure._scripts import (
    SEMAPHORE_ACQUIRE,
    SEMAPHORE_EXTEND,
    SEMAPHORE_INSPECT,
    SEMAPHORE_RELEASE,
    SEMAPHORE_SET_PERMITS,
)

KEYS = semaphore_keys("pool", prefix="tenure:")
SCRIPT_KEYS = (KEYS.holders, KEYS.permits, KEYS.fence, KEYS.waiters)
TOKEN = "p0.7:t1"
MEMBER = f"w1|1000|2|{TOKEN}"  # waiter w1, 1 s claim of a 10 s lease, 2 permits


def acquire_plan(
    clock: Clock,
    *,
    blocking: bool = True,
    timeout: float | None = None,
    check: bool = True,
) -> Any:
    return plans.acquire(
        KEYS,
        TOKEN,
        2,
        3,
        10.0,
        check=check,
        blocking=blocking,
        timeout=timeout,
        now=clock,
    )


def start(plan: Any) -> Eval:
    """Send the first step: not listening yet, so the lone attempt."""
    step = first_attempt(plan, asks_first=True)
    assert isinstance(step, Eval)
    return step


def queue(plan: Any, wait_ms: int = 2500) -> None:
    """Drive a fresh acquire to its first wait: busy, contend, queued and still busy."""
    queue_up(plan, slot=5, member=MEMBER, busy=wait_ms, asks_first=True)


def test_keys_share_a_slot_and_stay_apart_from_locks() -> None:
    assert KEYS.holders == KEYS.lock == "tenure:{pool}:semaphore"
    assert KEYS.permits == "tenure:{pool}:semaphore:permits"
    assert KEYS.fence == "tenure:{pool}:semaphore:fence"
    assert KEYS.waiters == "tenure:{pool}:semaphore:waiters"
    assert KEYS.wake_prefix == "tenure:{pool}:semaphore:wake:"
    assert KEYS.script_keys == SCRIPT_KEYS
    lock = lock_keys("pool", key=None, prefix="tenure:")
    assert not {lock.lock, lock.fence, lock.waiters} & set(SCRIPT_KEYS)
    assert len({key_slot(k.encode()) for k in (*SCRIPT_KEYS, KEYS.wake_prefix)}) == 1
    for name, prefix in (("", "p:"), (None, "p:"), (b"x", "p:"), ("x", None)):
        with pytest.raises(InvalidArgument):
            semaphore_keys(name, prefix=prefix)  # type: ignore[arg-type]


def test_first_attempt_carries_count_check_and_lease() -> None:
    clock = Clock()
    plan = acquire_plan(clock)
    step = start(plan)
    assert step.script is SEMAPHORE_ACQUIRE and step.keys == SCRIPT_KEYS
    assert step.args == (
        TOKEN,
        2,
        10000,
        3,
        "1",
        "",
        KEYS.wake_prefix,
        FENCE_KEEP_MS,
        plans.PERMITS_KEEP_MS,
    )
    grant = finish(plan, (Status.OK, 42))
    assert grant.token == TOKEN and grant.fence == 42 and grant.ttl == 10.0
    assert grant.expires_at == pytest.approx(100.0 + validity(10.0))
    plan = acquire_plan(clock, check=False)
    assert start(plan).args[4] == "0"


def test_busy_then_contend_without_pass_on_and_wait_for_the_first_expiry() -> None:
    clock = Clock()
    plan = acquire_plan(clock, timeout=5.0)
    start(plan)
    contend = send(plan, (Status.BUSY, 2500))
    assert isinstance(contend, Contend)
    assert contend.keys == KEYS and contend.token == TOKEN and contend.timeout == 5.0
    assert contend.pass_on is False  # the waiter gives back hand-offs itself
    queued = send(plan, "w1")
    assert isinstance(queued, Eval) and queued.args[5] == MEMBER  # n is in the member
    wait = send(plan, (Status.BUSY, 2500))
    assert isinstance(wait, WaitWake) and wait.timeout == 2.5
    clock.t += 2.5
    again = send(plan, False)  # the first lease ran out: try again, still queued
    assert isinstance(again, Eval) and again.args[5] == MEMBER
    assert finish(plan, (Status.OK, 43)).fence == 43


def test_a_process_that_listens_queues_at_once() -> None:
    plan = acquire_plan(Clock())
    assert isinstance(send(plan), Listening)
    assert isinstance(send(plan, True), Contend)
    queued = send(plan, "w1")
    assert isinstance(queued, Eval) and queued.args[5] == MEMBER


def test_hand_off_is_trusted_at_once_or_resynced_with_an_extend() -> None:
    clock = Clock()
    plan = acquire_plan(clock)
    queue(plan)
    clock.t += 0.2
    grant = finish(plan, HandedOff(77))  # no further round trip
    # Redis holds it for the claim window (the watchdog extends it at once)
    assert grant.fence == 77 and grant.expires_at == pytest.approx(100.0 + validity(1.0))
    assert grant.claim == 1.0
    # A hand-off seen long after the last queueing call: the lease clock restarts.
    plan = acquire_plan(clock)
    queue(plan)
    clock.t += 5.0
    extend = send(plan, HandedOff(78))
    assert isinstance(extend, Eval) and extend.script is SEMAPHORE_EXTEND
    assert extend.args == (TOKEN, 2, 10000, 3, KEYS.wake_prefix, FENCE_KEEP_MS)
    grant = finish(plan, (Status.OK, 0))
    assert grant.fence == 78 and grant.expires_at == pytest.approx(clock.t + validity(10.0))
    assert grant.claim == 0.0


def test_timeout_leaves_the_queue_and_gives_back_a_hand_off() -> None:
    clock = Clock()
    plan = acquire_plan(clock, timeout=1.0)
    queue(plan, wait_ms=30000)
    clock.t += 1.0
    last = send(plan, False)
    assert isinstance(last, Eval) and last.script is SEMAPHORE_ACQUIRE
    leave = send(plan, (Status.BUSY, 29000))
    assert isinstance(leave, Eval) and leave.script is SEMAPHORE_RELEASE
    assert leave.keys == (*SCRIPT_KEYS, KEYS.released)
    assert leave.args == (TOKEN, 2, 3, MEMBER, KEYS.wake_prefix, FENCE_KEEP_MS, "")
    assert finish(plan, (Status.NOT_OWNED, 0)) is None


def test_lost_reply_of_a_lone_attempt_gives_back_what_it_may_have_taken() -> None:
    """The token is new for this acquire, so releasing it can only undo this attempt."""
    plan = acquire_plan(Clock())
    start(plan)
    cleanup = plan.throw(ConnectionError("reply lost"))
    assert isinstance(cleanup, Eval) and cleanup.script is SEMAPHORE_RELEASE
    assert cleanup.args == (TOKEN, 2, 3, "", KEYS.wake_prefix, FENCE_KEEP_MS, "")
    with pytest.raises(ConnectionError, match="reply lost"):
        plan.throw(ConnectionError("still down"))  # cleanup errors are suppressed


def test_non_blocking_busy_returns_none() -> None:
    plan = acquire_plan(Clock(), blocking=False)
    step = send(plan)  # no Listening step: a non-blocking call never queues
    assert isinstance(step, Eval) and step.args[5] == ""
    assert finish(plan, (Status.BUSY, 100)) is None


def test_count_mismatch_and_too_many_raise_after_leaving_the_queue() -> None:
    plan = acquire_plan(Clock())
    start(plan)
    with pytest.raises(InvalidArgument, match=r"'pool' has 5 permits in Redis.*given 3"):
        send(plan, (Status.PERMITS_DIFFER, 5))
    plan = acquire_plan(Clock(), check=False)
    queue(plan)
    leave = send(plan, True)
    assert isinstance(leave, Eval)
    leave = send(plan, (Status.TOO_MANY, 1))
    assert isinstance(leave, Eval) and leave.script is SEMAPHORE_RELEASE and leave.args[3] == MEMBER
    with pytest.raises(InvalidArgument, match=r"now has 1 permits.*fewer than the 2 asked"):
        send(plan, (Status.NOT_OWNED, 0))


def test_unexpected_acquire_status_is_a_protocol_error() -> None:
    """A reply the plan can't read may have taken a permit: it is given back
    before the error."""
    plan = acquire_plan(Clock())
    start(plan)
    give_back = send(plan, (Status.NOT_OWNED, 0))
    assert isinstance(give_back, Eval) and give_back.script is SEMAPHORE_RELEASE
    with pytest.raises(ProtocolError, match=r"semaphore_acquire.*NOT_OWNED"):
        send(plan, (Status.NOT_OWNED, 0))


@pytest.mark.parametrize(
    ("value", "match"),
    [(0, "not 0"), (-1, "not -1"), (True, "not True"), ("2", "not '2'"), (1.5, "not 1.5")],
)
def test_check_permits_and_n(value: object, match: str) -> None:
    with pytest.raises(
        InvalidArgument, match=rf"permits must be an int from 1 to 2\*\*53 - 1, {match}"
    ):
        plans.check_permits(value)
    with pytest.raises(InvalidArgument, match=f"n must be an int from 1 to 10000, {match}"):
        plans.check_n(value, 3)


def test_check_n_against_the_count() -> None:
    assert plans.check_n(3, 3) == 3
    with pytest.raises(InvalidArgument, match="n=4 is more than the semaphore's 3 permits"):
        plans.check_n(4, 3)


def test_release_extend_set_permits() -> None:
    plan: Any = plans.release(KEYS, TOKEN, 2, 3, 77, op="op1")
    step = send(plan)
    record = KEYS.release_record("op1")
    assert step.script is SEMAPHORE_RELEASE and step.keys == (*SCRIPT_KEYS, record)
    assert step.args == (TOKEN, 2, 3, "", KEYS.wake_prefix, FENCE_KEEP_MS, "op1")
    assert finish(plan, (Status.OK, 0)) is None
    plan = plans.release(KEYS, TOKEN, 2, 3, 77)
    send(plan)
    with pytest.raises(NotOwnedError, match=r"'pool' \(fence 77\).*expired"):
        send(plan, (Status.NOT_OWNED, 0))
    clock = Clock()
    plan = plans.extend(KEYS, TOKEN, 2, 3, 77, 2.0, clock)
    assert send(plan).args == (TOKEN, 2, 2000, 3, KEYS.wake_prefix, FENCE_KEEP_MS)
    assert finish(plan, (Status.OK, 0)) == pytest.approx(100.0 + validity(2.0))
    plan = plans.extend(KEYS, TOKEN, 2, 3, 77, 2.0, clock)
    send(plan)
    why = "can't extend: the semaphore lease expired before extend"
    with pytest.raises(NotOwnedError, match=rf"fence 77\): {why}"):
        send(plan, (Status.NOT_OWNED, 0))
    with pytest.raises(InvalidArgument, match="seconds"):
        send(plans.extend(KEYS, TOKEN, 2, 3, 77, 0, clock))
    plan = plans.set_permits(KEYS, 5)
    step = send(plan)
    assert step.script is SEMAPHORE_SET_PERMITS and step.args == (
        5,
        KEYS.wake_prefix,
        FENCE_KEEP_MS,
        plans.PERMITS_KEEP_MS,
    )
    assert finish(plan, (Status.OK, 3)) == 3


def test_inspect_groups_permits_by_lease() -> None:
    plan = plans.inspect(KEYS, 4)
    step = send(plan)
    assert step.script is SEMAPHORE_INSPECT and step.keys == SCRIPT_KEYS and step.args == ()
    flat = [b"a:1#1", 900, b"b:2#1", 2500, b"b:2#2", 2500]
    info = finish(plan, (Status.OK, [3, 1, flat]))
    assert info == SemaphoreInfo(
        "pool",
        3,
        0,
        (SemaphoreHolder("a:1", 1, 0.9), SemaphoreHolder("b:2", 2, 2.5)),
        1,
    )
    plan = plans.inspect(KEYS, 4)  # no count stored yet: the caller's; none held
    send(plan)
    assert finish(plan, (Status.OK, [0, 0, []])) == SemaphoreInfo("pool", 4, 4, (), 0)
