"""Pure tests of the RLock plans and keys: canned replies and a fake clock, no Redis."""

from __future__ import annotations

from typing import Any

import pytest
from _plan_harness import Clock, finish, first
from _plan_harness import queue as queue_up

from tenure import InvalidArgument, NotOwnedError
from tenure._errors import ProtocolError
from tenure._keys import lock_keys, rlock_keys
from tenure._plans import rlock as plans
from tenure._plans.common import FENCE_KEEP_MS
from tenure._plans.waiting import validity
from tenure._protocol import Contend, Eval, HandedOff, Status, WaitWake
from tenure._scripts import RLOCK_ACQUIRE, RLOCK_EXTEND, RLOCK_INSPECT, RLOCK_RELEASE

KEYS = rlock_keys("orders", prefix="tenure:")
OWNER = "p0.7"
MEMBER = f"w1|1000|{OWNER}"


def acquire_plan(clock: Clock, *, blocking: bool = True, timeout: float | None = None) -> Any:
    return plans.acquire(KEYS, OWNER, 10.0, blocking=blocking, timeout=timeout, now=clock, op="op1")


def queue(plan: Any, pttl: int = 2500) -> None:
    """Drive a fresh acquire to its first wait: busy, contend, queued and still busy."""
    queue_up(plan, slot=2, member=MEMBER, busy=pttl)


def test_keys_are_apart_from_a_lock_of_the_same_name() -> None:
    from redis.crc import key_slot

    assert KEYS.lock == "tenure:{orders}:rlock"
    assert KEYS.fence == "tenure:{orders}:rlock:fence"
    assert KEYS.waiters == "tenure:{orders}:rlock:waiters"
    assert KEYS.wake_prefix == "tenure:{orders}:rlock:wake:"
    lock = lock_keys("orders", key=None, prefix="tenure:")
    assert not {lock.lock, lock.fence, lock.waiters} & {KEYS.lock, KEYS.fence, KEYS.waiters}
    assert not KEYS.wake_prefix.startswith(lock.wake_prefix)
    slots = {key_slot(k.encode()) for k in (KEYS.lock, KEYS.fence, KEYS.waiters, KEYS.wake_prefix)}
    assert len(slots) == 1
    assert rlock_keys("a", prefix="app:").lock == "app:{a}:rlock"
    for name, prefix in (("", "p:"), (None, "p:"), (b"x", "p:"), ("x", None)):
        with pytest.raises(InvalidArgument):
            rlock_keys(name, prefix=prefix)  # type: ignore[arg-type]


def test_first_attempt_is_one_script_call_never_queued_first() -> None:
    """No Listening step: an owner that holds the lock must re-enter without
    waiting on the process-local gate."""
    clock = Clock()
    plan = acquire_plan(clock)
    step = first(plan)
    assert isinstance(step, Eval) and step.script is RLOCK_ACQUIRE
    assert step.keys == (KEYS.lock, KEYS.fence, KEYS.waiters, KEYS.delay, KEYS.released)
    assert step.args == (OWNER, 10000, "", FENCE_KEEP_MS, 0, "op1", KEYS.wake_prefix)
    grant = finish(plan, (Status.OK, 42))
    assert grant.token == OWNER and grant.fence == 42 and grant.ttl == 10.0
    assert grant.expires_at == pytest.approx(100.0 + validity(10.0))


def test_busy_then_contend_with_the_owner_id_then_wait_for_pttl() -> None:
    clock = Clock()
    plan = acquire_plan(clock, timeout=5.0)
    plan.send(None)
    contend = plan.send((Status.BUSY, 2500))
    assert isinstance(contend, Contend)
    assert contend.keys == KEYS and contend.token == OWNER and contend.timeout == 5.0
    queued = plan.send("w1")
    assert isinstance(queued, Eval) and queued.args == (
        OWNER,
        10000,
        MEMBER,
        FENCE_KEEP_MS,
        0,
        "op1",
        KEYS.wake_prefix,
    )
    wait = plan.send((Status.BUSY, 2500))
    assert isinstance(wait, WaitWake) and wait.timeout == 2.5
    clock.t += 1.0
    again = plan.send(True)
    assert isinstance(again, Eval) and again.args[2] == MEMBER
    assert finish(plan, (Status.OK, 43)).fence == 43


def test_hand_off_is_claimed_with_one_more_attempt() -> None:
    """The owner id is stable, so a hand-off message is never trusted alone: the
    next (queued) attempt claims the hold, and the lease is timed from it."""
    clock = Clock()
    plan = acquire_plan(clock)
    queue(plan)
    clock.t += 0.5
    claim = plan.send(HandedOff(77))
    assert isinstance(claim, Eval) and claim.script is RLOCK_ACQUIRE
    assert claim.args == (OWNER, 10000, MEMBER, FENCE_KEEP_MS, 0, "op1", KEYS.wake_prefix)
    clock.t += 0.01
    grant = finish(plan, (Status.OK, 77))
    assert grant.fence == 77 and grant.expires_at == pytest.approx(100.5 + validity(10.0))


def test_stale_hand_off_message_does_not_grant() -> None:
    clock = Clock()
    plan = acquire_plan(clock)
    queue(plan)
    claim = plan.send(HandedOff(5))  # meant for an earlier wait of this owner
    assert isinstance(claim, Eval)
    assert isinstance(plan.send((Status.BUSY, 2000)), WaitWake)  # still waiting


def test_timeout_leaves_the_queue_and_gives_back_a_hand_off() -> None:
    clock = Clock()
    plan = acquire_plan(clock, timeout=1.0)
    queue(plan, pttl=30000)
    clock.t += 1.0
    last = plan.send(False)
    assert isinstance(last, Eval) and last.script is RLOCK_ACQUIRE
    leave = plan.send((Status.BUSY, 29000))
    assert isinstance(leave, Eval) and leave.script is RLOCK_RELEASE
    assert leave.keys == (KEYS.lock, KEYS.waiters, KEYS.fence, KEYS.delay, KEYS.released)
    # fence "": whatever hold this owner has (one handed to it), member removed first
    assert leave.args == (OWNER, "", KEYS.wake_prefix, FENCE_KEEP_MS, MEMBER, 0, "")
    assert finish(plan, (Status.NOT_OWNED, 0)) is None


def test_non_blocking_busy_returns_none_without_listening() -> None:
    plan = acquire_plan(Clock(), blocking=False)
    plan.send(None)
    assert finish(plan, (Status.BUSY, 100)) is None


def test_contend_timeout_returns_none() -> None:
    plan = acquire_plan(Clock(), timeout=2.0)
    plan.send(None)
    plan.send((Status.BUSY, 100))
    assert finish(plan, None) is None


def test_lost_reply_of_a_lone_attempt_is_undone_only_if_it_was_applied() -> None:
    """The owner may have held the lock already: the undo counts down only if
    that attempt's op is the lock's last op (its op id as the undone op), with
    an op of its own so that a retry of the undo counts down once."""
    plan = acquire_plan(Clock())
    plan.send(None)
    cleanup = plan.throw(ConnectionError("reply lost"))
    assert isinstance(cleanup, Eval) and cleanup.script is RLOCK_RELEASE
    assert cleanup.args == (OWNER, "", KEYS.wake_prefix, FENCE_KEEP_MS, "", 0, "op1-undo", "op1")
    with pytest.raises(ConnectionError, match="reply lost"):
        plan.send((Status.NOT_OWNED, 0))


def test_lost_reply_of_a_queued_attempt_gives_the_hold_back() -> None:
    plan = acquire_plan(Clock())
    queue(plan)
    plan.send(True)  # a queued attempt is in flight
    cleanup = plan.throw(ConnectionError("reply lost"))
    assert isinstance(cleanup, Eval) and cleanup.script is RLOCK_RELEASE
    assert cleanup.args == (OWNER, "", KEYS.wake_prefix, FENCE_KEEP_MS, MEMBER, 0, "")
    with pytest.raises(ConnectionError, match="reply lost"):
        plan.send((Status.OK, 1))


def test_cancelled_wait_leaves_the_queue_even_if_cleanup_fails() -> None:
    plan = acquire_plan(Clock())
    queue(plan)
    cleanup = plan.throw(KeyboardInterrupt())
    assert isinstance(cleanup, Eval) and cleanup.script is RLOCK_RELEASE
    with pytest.raises(KeyboardInterrupt):
        plan.throw(ConnectionError("still down"))


def test_unexpected_acquire_status_is_a_protocol_error() -> None:
    """A reply the plan can't read may have taken a count: it is undone
    (the attempt's op, if applied) before the error."""
    plan = acquire_plan(Clock())
    plan.send(None)
    undo = plan.send((Status.NOT_OWNED, 0))
    assert isinstance(undo, Eval) and undo.script is RLOCK_RELEASE and undo.args[-1] == "op1"
    with pytest.raises(ProtocolError, match=r"rlock_acquire.*NOT_OWNED"):
        plan.send((Status.NOT_OWNED, 0))


def test_bad_ttl_raises_before_any_step() -> None:
    plan = plans.acquire(KEYS, OWNER, 0, blocking=True, timeout=None, now=Clock(), op="op1")
    with pytest.raises(InvalidArgument, match="ttl must be > 0"):
        plan.send(None)


def test_release_returns_the_count_left() -> None:
    plan = plans.release(KEYS, OWNER, 77, op="op2", delay_ms=300)
    step = first(plan)
    assert step.script is RLOCK_RELEASE
    assert step.keys == (KEYS.lock, KEYS.waiters, KEYS.fence, KEYS.delay, KEYS.released)
    assert step.args == (OWNER, "77", KEYS.wake_prefix, FENCE_KEEP_MS, "", 300, "op2")
    assert finish(plan, (Status.OK, 2)) == 2


def test_release_not_owned_names_lock_and_fence() -> None:
    plan = plans.release(KEYS, OWNER, 77)
    plan.send(None)
    with pytest.raises(NotOwnedError, match=r"'orders' \(fence 77\)"):
        plan.send((Status.NOT_OWNED, 0))


def test_extend_returns_new_deadline_or_raises() -> None:
    clock = Clock()
    plan = plans.extend(KEYS, OWNER, 77, 2.0, clock, ttl=10.0)
    step = first(plan)
    assert step.script is RLOCK_EXTEND and step.keys == (KEYS.lock, KEYS.fence, KEYS.delay)
    # a renewal refuses a lease with less than the drift allowance (102 ms of 10 s) left
    assert step.args == (OWNER, 77, 2000, FENCE_KEEP_MS, 102, 0)
    assert finish(plan, (Status.OK, 3)) == pytest.approx(100.0 + validity(2.0))
    plan = plans.extend(KEYS, OWNER, 77, 2.0, clock, ttl=10.0)
    plan.send(None)
    with pytest.raises(NotOwnedError, match="fence 77"):
        plan.send((Status.NOT_OWNED, 0))
    plan = plans.extend(KEYS, OWNER, 77, 2.0, clock, ttl=10.0)
    plan.send(None)
    with pytest.raises(NotOwnedError, match="about to expire"):
        plan.send((Status.NOT_OWNED, 1))
    with pytest.raises(InvalidArgument, match="seconds"):
        plans.extend(KEYS, OWNER, 77, -1, clock, ttl=10.0).send(None)


def test_inspect() -> None:
    plan = plans.inspect(KEYS, OWNER)
    step = first(plan)
    assert step.script is RLOCK_INSPECT and step.args == (OWNER,)
    state = finish(plan, (Status.OK, [OWNER, 2, 900, 12, 1, 2]))
    assert state == plans.RLockState(OWNER, 2, 900, 12, 1, 2)
