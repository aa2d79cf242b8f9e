"""Pure tests of FairLock's plans: canned replies and a fake clock, no Redis."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from _plan_harness import Clock, finish
from redis.crc import key_slot

from tenure import AlreadyHeldError, FairLockInfo, FairWaiter, InvalidArgument, NotOwnedError
from tenure._drivers._hubbook import PassOn
from tenure._keys import FairKeys, fair_keys, lock_keys
from tenure._plans import fair as plans
from tenure._plans.common import FENCE_KEEP_MS
from tenure._plans.waiting import validity
from tenure._protocol import Contend, Eval, HandedOff, Status, WaitWake
from tenure._scripts import FAIR_ACQUIRE, FAIR_INSPECT, FAIR_RELEASE, LOCK_EXTEND, LOCK_RELEASE

KEYS = fair_keys("orders", prefix="tenure:")
TOKEN = "own:tok"


def acquire_plan(
    clock: Clock,
    *,
    blocking: bool = True,
    timeout: float | None = None,
    waiter_timeout: float = 6.0,
) -> Any:
    return plans.acquire(
        KEYS,
        "own",
        TOKEN,
        10.0,
        blocking=blocking,
        timeout=timeout,
        now=clock,
        waiter_timeout=waiter_timeout,
    )


def first_eval(plan: Generator[Any, Any, Any]) -> Eval:
    step = plan.send(None)
    assert isinstance(step, Eval)
    return step


def queued(plan: Generator[Any, Any, Any], pttl: int = 2500) -> Eval:
    """Drive a new acquire plan from its first, busy attempt to its queueing call."""
    first = plan.send(None)
    assert isinstance(first, Eval) and first.script is FAIR_ACQUIRE
    contend = plan.send((Status.BUSY, pttl))
    assert isinstance(contend, Contend) and contend.own_channel  # a channel of its own
    step = plan.send("hub.7")  # the driver's waiter id for this plan
    assert isinstance(step, Eval)
    return step


def test_keys_live_under_fair_and_share_a_hash_tag() -> None:
    assert isinstance(KEYS, FairKeys)
    assert (KEYS.lock, KEYS.waiters, KEYS.deadlines) == (
        "tenure:{orders}:fair",
        "tenure:{orders}:fair:waiters",
        "tenure:{orders}:fair:deadlines",
    )
    keys = fair_keys("a:b", prefix="app:")
    names = (keys.lock, keys.fence, keys.waiters, keys.deadlines, keys.delay, keys.released)
    slots = {key_slot(k.encode()) for k in (*names, keys.wake_prefix + "w")}
    assert len(slots) == 1
    plain = lock_keys("orders", key=None, prefix="tenure:")
    assert not set(names) & {plain.lock, plain.fence, plain.waiters}  # apart from a Lock's
    for bad_name, bad_prefix in (("", "p:"), (3, "p:"), ("x", None)):
        with pytest.raises(InvalidArgument):
            fair_keys(bad_name, prefix=bad_prefix)  # type: ignore[arg-type]


def test_uncontended_acquire_is_one_unqueued_call() -> None:
    clock = Clock()
    plan = acquire_plan(clock)
    step = plan.send(None)  # no Listening step: a fair waiter never shares a gate
    assert isinstance(step, Eval) and step.script is FAIR_ACQUIRE
    assert step.keys == (
        KEYS.lock,
        KEYS.fence,
        KEYS.waiters,
        KEYS.deadlines,
        KEYS.delay,
    )
    assert step.args == (TOKEN, "own:", 10000, "", 600_000, 0, 6000, KEYS.wake_prefix)
    grant = finish(plan, (Status.OK, 42))
    assert grant.fence == 42 and grant.token == TOKEN
    assert grant.expires_at == pytest.approx(100.0 + validity(10.0))


def test_fence_key_outlives_a_long_lease() -> None:
    plan = plans.acquire(KEYS, "own", TOKEN, 3600.0, blocking=False, timeout=None, now=Clock())
    step = plan.send(None)
    assert isinstance(step, Eval) and step.args[4] == 3_600_000


def test_busy_queues_on_its_own_channel_and_waits_no_longer_than_the_refresh() -> None:
    clock = Clock()
    plan = acquire_plan(clock, waiter_timeout=6.0)
    step = queued(plan, pttl=30000)
    assert step.args[3] == f"hub.7|1000|{TOKEN}"  # queues itself, with its own channel
    wait = plan.send((Status.BUSY, 30000))
    # the holder has 30 s left, but a queued waiter calls again before its deadline
    assert isinstance(wait, WaitWake) and wait.timeout == pytest.approx(2.0)
    clock.t += 2.0
    refresh = plan.send(False)  # timed out: call again, which moves the deadline on
    assert isinstance(refresh, Eval) and refresh.args[3] == f"hub.7|1000|{TOKEN}"
    wait = plan.send((Status.BUSY, 500))  # a shorter pttl wins
    assert isinstance(wait, WaitWake) and wait.timeout == pytest.approx(0.5)
    clock.t += 0.5
    again = plan.send(True)  # woken without a hand-off (a reconnect): try again
    assert isinstance(again, Eval) and again.args[3] == f"hub.7|1000|{TOKEN}"
    assert finish(plan, (Status.OK, 43)).fence == 43


def test_hand_off_is_trusted_and_needs_no_round_trip() -> None:
    clock = Clock()
    plan = acquire_plan(clock)
    queued(plan)
    clock.t += 0.2
    plan.send((Status.BUSY, 2500))
    grant = finish(plan, HandedOff(77))
    assert grant.fence == 77 and grant.token == TOKEN


def test_late_hand_off_restarts_the_lease_clock_with_lock_extend() -> None:
    clock = Clock()
    plan = acquire_plan(clock)
    queued(plan)
    plan.send((Status.BUSY, 2500))
    clock.t += 5.0  # more than a tenth of the 10 s ttl since the queueing call
    extend = plan.send(HandedOff(78))
    assert isinstance(extend, Eval) and extend.script is LOCK_EXTEND
    assert extend.keys == (KEYS.lock, KEYS.delay, KEYS.fence)
    assert finish(plan, (Status.OK, 0)).expires_at == pytest.approx(105.0 + validity(10.0))


def test_non_blocking_busy_returns_none_without_queueing() -> None:
    plan = acquire_plan(Clock(), blocking=False)
    step = plan.send(None)
    assert step.args[3] == ""  # never queued: it cannot take a place in line
    assert finish(plan, (Status.BUSY, 100)) is None


def test_timeout_leaves_the_queue_with_the_fair_release() -> None:
    clock = Clock()
    plan = acquire_plan(clock, timeout=1.0)
    queued(plan)
    plan.send((Status.BUSY, 30000))
    clock.t += 1.0
    last = plan.send(False)
    assert isinstance(last, Eval) and last.script is FAIR_ACQUIRE
    leave = plan.send((Status.BUSY, 29000))
    assert isinstance(leave, Eval) and leave.script is FAIR_RELEASE
    assert leave.keys == (
        KEYS.lock,
        KEYS.waiters,
        KEYS.deadlines,
        KEYS.fence,
        KEYS.delay,
        KEYS.released,
    )
    assert leave.args == (TOKEN, KEYS.wake_prefix, FENCE_KEEP_MS, f"hub.7|1000|{TOKEN}", 0, "")
    assert finish(plan, (Status.NOT_OWNED, 0)) is None


def test_cancelled_waiter_leaves_then_reraises() -> None:
    plan = acquire_plan(Clock())
    queued(plan)
    leave = plan.throw(KeyboardInterrupt())
    assert isinstance(leave, Eval) and leave.script is FAIR_RELEASE
    with pytest.raises(KeyboardInterrupt):
        plan.throw(ConnectionError("still down"))  # a failed leave hides nothing


def test_owned_by_caller_raises_already_held() -> None:
    plan = acquire_plan(Clock())
    plan.send(None)
    with pytest.raises(AlreadyHeldError, match="orders"):
        plan.send((Status.OWNED_BY_CALLER, 5000))


def test_release_and_pass_on() -> None:
    plan = plans.release(KEYS, TOKEN, 77, delay_ms=250, op="op1")
    step = first_eval(plan)
    assert step.script is FAIR_RELEASE and step.args == (
        TOKEN,
        KEYS.wake_prefix,
        FENCE_KEEP_MS,
        "",
        250,
        "op1",
    )
    with pytest.raises(NotOwnedError, match=r"'orders' \(fence 77\)"):
        plan.send((Status.NOT_OWNED, 0))
    plan = plans.release(KEYS, TOKEN, 77)
    plan.send(None)
    assert finish(plan, (Status.OK, 1)) is None
    passing = plans.pass_on(KEYS, TOKEN)
    assert first_eval(passing).script is FAIR_RELEASE
    assert finish(passing, (Status.NOT_OWNED, 0)) is None  # gone already: nothing to do


def test_the_hub_passes_a_fair_lock_on_with_the_fair_release() -> None:
    fair = PassOn(KEYS, TOKEN).plan()
    assert first_eval(fair).script is FAIR_RELEASE
    plain = PassOn(lock_keys("orders", key=None, prefix="tenure:"), TOKEN).plan()
    assert first_eval(plain).script is LOCK_RELEASE


def test_inspect_reads_the_queue_in_order() -> None:
    plan = plans.inspect(KEYS, 10)
    step = first_eval(plan)
    assert step.script is FAIR_INSPECT
    assert step.keys == (KEYS.lock, KEYS.fence, KEYS.waiters, KEYS.deadlines)
    assert step.args == (10,)
    info = finish(
        plan,
        (
            Status.OK,
            ["p.1:aa", "9520", "77", "3", "h.1|10000|p.2:bb", "4900", "h.2|2500|p.3:cc", "1200"],
        ),
    )
    assert info == FairLockInfo(
        "orders",
        "p.1:aa",
        1,
        9.52,
        77,
        3,
        (
            FairWaiter("p.2:bb", "p.2", "h.1", 10.0, 4.9),
            FairWaiter("p.3:cc", "p.3", "h.2", 2.5, 1.2),
        ),
    )
    free = plans.parse_info("orders", ["", -2, 0, 0])
    assert free == FairLockInfo("orders", None, 0, None, 0, 0, ())


@pytest.mark.parametrize("bad", [0, -1, 0.001, "5", True, float("nan")])
def test_bad_waiter_timeout(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="waiter_timeout"):
        plans.check_waiter_timeout(bad)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True, None])
def test_bad_info_limit(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="limit"):
        plans.check_limit(bad)
