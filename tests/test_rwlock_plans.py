"""Pure tests of the ReadWriteLock plans and keys: canned replies and a fake clock, no Redis."""

from __future__ import annotations

from typing import Any

import pytest
from _plan_harness import Clock, finish, first, started
from _plan_harness import queue as queue_up

from tenure import InvalidArgument, LockUpgradeError, NotOwnedError
from tenure._errors import ProtocolError
from tenure._info import ReadWriteHolder, ReadWriteInfo
from tenure._keys import lock_keys, rlock_keys, rwlock_keys
from tenure._plans import rwlock as plans
from tenure._plans.common import FENCE_KEEP_MS
from tenure._plans.waiting import validity
from tenure._protocol import Contend, Eval, HandedOff, Status, WaitWake
from tenure._scripts import RWLOCK_ACQUIRE, RWLOCK_EXTEND, RWLOCK_INSPECT, RWLOCK_RELEASE

KEYS = rwlock_keys("docs", prefix="tenure:")
OWNER = "p0.7"
KEYS6 = (KEYS.lock, KEYS.holds, KEYS.fence, KEYS.waiters, KEYS.delay, KEYS.last_op(OWNER))


def acquire_plan(
    clock: Clock,
    mode: plans.Mode = "write",
    *,
    blocking: bool = True,
    timeout: float | None = None,
    delay_ms: int = 0,
) -> Any:
    return plans.acquire(
        KEYS,
        OWNER,
        mode,
        10.0,
        blocking=blocking,
        timeout=timeout,
        now=clock,
        op="op1",
        delay_ms=delay_ms,
    )


def member(mode: str = "w") -> str:
    return f"w1|1000|{mode}:{OWNER}:op1"


def queue(plan: Any, mode: str = "w", pttl: int = 2500) -> None:
    """Drive a fresh acquire to its first wait: busy, contend, queued and still busy."""
    contend = queue_up(plan, slot=3, member=member(mode), busy=pttl)
    assert contend.token == f"{mode}:{OWNER}:op1"


def test_keys_share_a_slot_and_are_apart_from_lock_and_rlock() -> None:
    from redis.crc import key_slot

    assert KEYS.lock == "tenure:{docs}:rwlock"
    assert KEYS.holds == "tenure:{docs}:rwlock:holds"
    assert KEYS.fence == "tenure:{docs}:rwlock:fence"
    assert KEYS.waiters == "tenure:{docs}:rwlock:waiters"
    assert KEYS.delay == "tenure:{docs}:rwlock:delay"
    assert KEYS.wake_prefix == "tenure:{docs}:rwlock:wake:"
    assert KEYS.last_op(OWNER) == "tenure:{docs}:rwlock:op:p0.7"
    slots = {key_slot(k.encode()) for k in (*KEYS6, KEYS.wake_prefix + "w1")}
    assert len(slots) == 1
    others = lock_keys("docs", key=None, prefix="tenure:"), rlock_keys("docs", prefix="tenure:")
    for other in others:
        assert not {other.lock, other.fence, other.waiters} & set(KEYS6)
        assert not KEYS.wake_prefix.startswith(other.wake_prefix)
    assert rwlock_keys("a", prefix="app:").lock == "app:{a}:rwlock"
    for name, prefix in (("", "p:"), (None, "p:"), (b"x", "p:"), ("x", None)):
        with pytest.raises(InvalidArgument):
            rwlock_keys(name, prefix=prefix)  # type: ignore[arg-type]


@pytest.mark.parametrize(("mode", "letter"), [("read", "r"), ("write", "w")])
def test_first_attempt_is_one_script_call_never_queued_first(mode: plans.Mode, letter: str) -> None:
    """No Listening step: an owner that holds must re-enter (or read under its
    write hold) without waiting on the process-local gate."""
    clock = Clock()
    plan = acquire_plan(clock, mode, delay_ms=300)
    step = plan.send(None)
    assert isinstance(step, Eval) and step.script is RWLOCK_ACQUIRE and step.keys == KEYS6
    assert step.args == (OWNER, letter, 10000, "", FENCE_KEEP_MS, 300, "op1", KEYS.wake_prefix)
    grant = finish(plan, (Status.OK, [42, "op0"]))
    assert isinstance(grant, plans.RWGrant)
    assert (grant.token, grant.fence, grant.ttl, grant.mode, grant.hold) == (
        OWNER,
        42,
        10.0,
        mode,
        "op0",
    )
    assert grant.expires_at == pytest.approx(100.0 + validity(10.0))


def test_a_bare_fence_is_a_new_hold_whose_id_is_the_calls_op() -> None:
    """The uncontended path replies the fence alone: the hold it began has
    this call's op id (ARGV[7])."""
    plan = acquire_plan(Clock(), "write")
    assert isinstance(plan.send(None), Eval)
    grant = finish(plan, (Status.OK, 44))
    assert isinstance(grant, plans.RWGrant) and (grant.fence, grant.hold) == (44, "op1")


def test_busy_then_contend_with_a_token_unique_to_the_call_then_wait_for_pttl() -> None:
    clock = Clock()
    plan = acquire_plan(clock, "read", timeout=5.0)
    plan.send(None)
    contend = plan.send((Status.BUSY, 2500))
    assert isinstance(contend, Contend)
    assert contend.keys == KEYS and contend.token == f"r:{OWNER}:op1" and contend.timeout == 5.0
    queued = plan.send("w1")
    assert isinstance(queued, Eval) and queued.args[3] == member("r")
    wait = plan.send((Status.BUSY, 2500))
    assert isinstance(wait, WaitWake) and wait.timeout == 2.5
    clock.t += 1.0
    again = plan.send(True)  # woken without a hand-off: try again, still queued
    assert isinstance(again, Eval) and again.args[3] == member("r")
    assert finish(plan, (Status.OK, [43, "op1"])).fence == 43


def test_hand_off_message_is_trusted_as_it_is() -> None:
    """The token is unique to this acquire call, so the message grants the hold
    (whose id is the call's op id) without another round trip."""
    clock = Clock()
    plan = acquire_plan(clock)
    queue(plan)  # the queueing call was sent at t=100
    clock.t += 0.2  # within HANDOFF_RESYNC of the 1 s claim window
    grant = finish(plan, HandedOff(77))
    assert grant.fence == 77 and grant.hold == "op1" and grant.mode == "write"
    # Redis holds it for the claim window (the watchdog extends it at once)
    assert grant.expires_at == pytest.approx(100.0 + validity(1.0)) and grant.claim == 1.0


def test_late_hand_off_restarts_the_lease_clock_with_an_extend() -> None:
    clock = Clock()
    plan = acquire_plan(clock, "read")
    queue(plan, "r")
    clock.t += 5.0
    extend = plan.send(HandedOff(77))
    assert isinstance(extend, Eval) and extend.script is RWLOCK_EXTEND
    assert extend.args[:4] == (OWNER, "r", "op1", 10000)
    assert extend.args[5] == 12  # least left: the 1 s claim window's drift allowance
    grant = finish(plan, (Status.OK, 1))
    assert grant.expires_at == pytest.approx(105.0 + validity(10.0)) and grant.fence == 77


def test_late_hand_off_already_gone_tries_again() -> None:
    clock = Clock()
    plan = acquire_plan(clock)
    queue(plan)
    clock.t += 5.0
    plan.send(HandedOff(77))
    again = plan.send((Status.NOT_OWNED, 0))
    assert isinstance(again, Eval) and again.script is RWLOCK_ACQUIRE


def test_upgrade_is_refused_with_a_clear_error() -> None:
    plan = acquire_plan(Clock())
    plan.send(None)
    with pytest.raises(LockUpgradeError, match=r"'docs'.*holds the read lock.*release the read"):
        plan.send((Status.OWNED_BY_CALLER, 0))


def test_timeout_leaves_the_queue_and_gives_back_what_the_call_got() -> None:
    clock = Clock()
    plan = acquire_plan(clock, timeout=1.0, delay_ms=300)
    queue(plan, pttl=30000)
    clock.t += 1.0
    last = plan.send(False)
    assert isinstance(last, Eval) and last.script is RWLOCK_ACQUIRE
    leave = plan.send((Status.BUSY, 29000))
    assert isinstance(leave, Eval) and leave.script is RWLOCK_RELEASE and leave.keys == KEYS6
    # hold id "": a waiter leaving, undoing what op1 did (a hold handed to it)
    assert leave.args == (OWNER, "w", "", KEYS.wake_prefix, FENCE_KEEP_MS, member(), "op1", 300)
    assert finish(plan, (Status.OK, 0)) is None


def test_lost_reply_of_a_lone_attempt_is_undone_by_its_op() -> None:
    """Unlike RLock's: the owner's last op says whether the attempt counted."""
    plan = acquire_plan(Clock(), "read")
    plan.send(None)
    cleanup = plan.throw(ConnectionError("reply lost"))
    assert isinstance(cleanup, Eval) and cleanup.script is RWLOCK_RELEASE
    assert cleanup.args[:3] == (OWNER, "r", "") and cleanup.args[5:7] == ("", "op1")
    with pytest.raises(ConnectionError, match="reply lost"):
        plan.send((Status.OK, 0))


def test_cancelled_wait_leaves_the_queue_even_if_cleanup_fails() -> None:
    plan = acquire_plan(Clock())
    queue(plan)
    cleanup = plan.throw(KeyboardInterrupt())
    assert isinstance(cleanup, Eval) and cleanup.script is RWLOCK_RELEASE
    assert cleanup.args[5] == member()
    with pytest.raises(KeyboardInterrupt):
        plan.throw(ConnectionError("still down"))


def test_non_blocking_busy_returns_none() -> None:
    plan = acquire_plan(Clock(), "read", blocking=False)
    plan.send(None)
    assert finish(plan, (Status.BUSY, 100)) is None


def test_unexpected_acquire_status_is_a_protocol_error() -> None:
    """A reply the plan can't read may have taken a hold: it is given back
    before the error."""
    plan = acquire_plan(Clock())
    plan.send(None)
    give_back = plan.send((Status.NOT_OWNED, 0))
    assert isinstance(give_back, Eval) and give_back.script is RWLOCK_RELEASE
    with pytest.raises(ProtocolError, match=r"rwlock_acquire.*NOT_OWNED"):
        plan.send((Status.NOT_OWNED, 0))


def test_bad_arguments_raise_before_any_step() -> None:
    with pytest.raises(InvalidArgument, match="ttl must be > 0"):
        plans.acquire(
            KEYS, OWNER, "read", 0, blocking=True, timeout=None, now=Clock(), op="o"
        ).send(None)
    with pytest.raises(InvalidArgument, match="mode must be 'read' or 'write'"):
        plans.acquire(
            KEYS,
            OWNER,
            "both",  # type: ignore[arg-type]
            1,
            blocking=True,
            timeout=None,
            now=Clock(),
            op="o",
        ).send(None)
    with pytest.raises(InvalidArgument, match="op must not be empty"):
        plans.acquire(KEYS, OWNER, "read", 1, blocking=True, timeout=None, now=Clock(), op="").send(
            None
        )


def test_release_returns_the_count_left_or_raises() -> None:
    plan = plans.release(KEYS, OWNER, "read", "op0", 77, op="op2", delay_ms=300)
    step = first(plan)
    assert step.script is RWLOCK_RELEASE and step.keys == KEYS6
    assert step.args == (OWNER, "r", "op0", KEYS.wake_prefix, FENCE_KEEP_MS, "", "op2", 300)
    assert finish(plan, (Status.OK, 2)) == 2
    plan = plans.release(KEYS, OWNER, "write", "op0", 77, op="op3")
    plan.send(None)
    with pytest.raises(NotOwnedError, match=r"'docs' \(fence 77\): can't release the write lock"):
        plan.send((Status.NOT_OWNED, 0))


def test_extend_returns_new_deadline_or_raises() -> None:
    clock = Clock()
    plan = plans.extend(KEYS, OWNER, "write", "op0", 2.0, clock, ttl=10.0, fence=77)
    step = first(plan)
    assert step.script is RWLOCK_EXTEND
    assert step.keys == (KEYS.lock, KEYS.holds, KEYS.fence, KEYS.waiters, KEYS.delay)
    # a renewal refuses a lease with less than the drift allowance (102 ms of 10 s) left
    assert step.args == (OWNER, "w", "op0", 2000, FENCE_KEEP_MS, 102, 0)
    assert finish(plan, (Status.OK, 3)) == pytest.approx(100.0 + validity(2.0))
    plan = plans.extend(KEYS, OWNER, "read", "op0", 2.0, clock, ttl=10.0, fence=77)
    plan.send(None)
    with pytest.raises(NotOwnedError, match=r"fence 77.*expired"):
        plan.send((Status.NOT_OWNED, 0))
    plan = plans.extend(KEYS, OWNER, "read", "op0", 2.0, clock, ttl=10.0)
    plan.send(None)
    with pytest.raises(NotOwnedError, match="about to expire"):
        plan.send((Status.NOT_OWNED, 1))
    with pytest.raises(InvalidArgument, match="seconds"):
        plans.extend(KEYS, OWNER, "read", "op0", -1, clock, ttl=10.0).send(None)


def test_inspect_reads_holders_in_order() -> None:
    plan = plans.inspect(KEYS, OWNER)
    step = first(plan)
    assert step.script is RWLOCK_INSPECT and step.args == (OWNER,)
    assert step.keys == (KEYS.lock, KEYS.holds, KEYS.fence, KEYS.waiters)
    reply = ["write", 12, 3, 1, 1, 2, OWNER, "w", 2, 900, 12, OWNER, "r", 1, 1500, 12]
    state = finish(plan, (Status.OK, reply))
    assert state.mine_read == 1 and state.mine_write == 2
    assert state.info == ReadWriteInfo(
        "docs",
        "write",
        (
            ReadWriteHolder(OWNER, "write", 2, 0.9, 12),
            ReadWriteHolder(OWNER, "read", 1, 1.5, 12),
        ),
        3,
        1,
        12,
    )
    free = finish(started(plans.inspect(KEYS)), (Status.OK, ["", 0, 0, 0, 0, 0]))
    assert free.info.mode is None and free.info.holders == ()
