"""A MultiLock's decisions (tenure._plans.multi), without servers: the
acquire order, the parts tried together, all or nothing, and what is given
back. The parts' leases are stand-in strings (opaque to the plans)."""

from __future__ import annotations

import pytest
from _plan_harness import Clock, PlanGen, finish, raised, send

from tenure._plans import multi as plans
from tenure._plans.multi import AllValid, GiveBack, TakePart, TakeTogether

ORDER = (2, 0, 1)  # the acquire order of three parts


def acquire(
    clock: Clock,
    *,
    grouped: bool = False,
    busy: bool = False,
    blocking: bool = True,
    timeout: float | None = None,
) -> tuple[PlanGen, list[str]]:
    held: list[str] = []
    plan = plans.acquire(ORDER, grouped, busy, blocking, timeout, held, now=clock)
    return plan, held


def test_the_order_is_by_lock_key_then_server_whatever_the_order_given() -> None:
    places = [("tenure:{b}", "h:1/0"), ("tenure:{a}", "h:2/0"), ("tenure:{a}", "h:1/0")]
    assert plans.order(places) == (2, 1, 0)
    assert plans.order(list(reversed(places))) == (0, 1, 2)  # the same parts, same order


def test_the_parts_of_one_pool_are_grouped_where_the_first_comes() -> None:
    # parts 0 and 2 on pool 7, part 1 on pool 8, part 3 alone (a cluster client)
    assert plans.groups((3, 2, 1, 0), [7, 8, 7, None]) == ((3,), (2, 0), (1,))
    assert plans.groups((0, 1, 2), [7, 8, 9]) is None  # no two share a pool
    assert plans.groups((0, 1), [None, None]) is None


def test_all_parts_taken_together_are_handed_over() -> None:
    plan, held = acquire(Clock(), grouped=True)
    assert send(plan) == TakeTogether()
    assert send(plan, ["c", "a", "b"]) == AllValid(("c", "a", "b"))
    assert finish(plan, True) == ["c", "a", "b"]
    assert held == ["c", "a", "b"]  # the caller's to give back from the return on


def test_a_busy_attempt_together_gives_up_or_takes_the_parts_one_by_one() -> None:
    plan, held = acquire(Clock(), grouped=True, blocking=False)
    send(plan)
    assert finish(plan, None) is None and not held  # (the attempt released what it took)
    plan, held = acquire(Clock(), grouped=True, timeout=5.0)
    send(plan)
    assert send(plan, None) == TakePart(2, True, 5.0)
    # a part found busy together a moment ago: straight to one by one
    plan, held = acquire(Clock(), grouped=True, busy=True, timeout=5.0)
    assert send(plan) == TakePart(2, True, 5.0)
    # (not waiting: the attempt together all the same)
    plan, held = acquire(Clock(), grouped=True, busy=True, blocking=False)
    assert send(plan) == TakeTogether()


def test_parts_are_taken_in_order_within_one_timeout() -> None:
    clock = Clock()
    plan, held = acquire(clock, timeout=5.0)
    assert send(plan) == TakePart(2, True, 5.0)
    clock.t += 1.5
    assert send(plan, "c") == TakePart(0, True, 3.5)
    clock.t += 4.0
    assert send(plan, "a") == TakePart(1, True, 0.0)  # the timeout spent: one attempt
    assert send(plan, "b") == AllValid(("c", "a", "b"))
    assert finish(plan, True) == ["c", "a", "b"] and held == ["c", "a", "b"]
    plan, _ = acquire(clock, blocking=False)
    assert send(plan) == TakePart(2, False, None)
    assert send(plan, "c") == TakePart(0, False, None)


def test_a_partial_acquire_is_rolled_back() -> None:
    plan, held = acquire(Clock(), timeout=5.0)
    send(plan)
    send(plan, "c")
    assert send(plan, "a") == TakePart(1, True, 5.0)
    assert send(plan, None) == GiveBack(("c", "a"))  # (released in reverse order)
    assert finish(plan, None) is None and not held
    # the first part not taken: nothing to give back
    plan, held = acquire(Clock(), blocking=False)
    send(plan)
    assert finish(plan, None) is None and not held


def test_a_part_run_out_meanwhile_starts_the_acquire_over() -> None:
    clock = Clock()
    plan, held = acquire(clock, timeout=5.0)
    send(plan)
    send(plan, "c")
    send(plan, "a")
    clock.t += 2.0
    assert send(plan, "b") == AllValid(("c", "a", "b"))
    assert send(plan, False) == GiveBack(("c", "a", "b"))
    assert send(plan, None) == TakePart(2, True, 3.0)  # over, within the same timeout
    # without waiting, or once the timeout is spent: none held
    plan, held = acquire(clock, blocking=False)
    send(plan)
    send(plan, "c")
    send(plan, "a")
    send(plan, "b")
    assert send(plan, False) == GiveBack(("c", "a", "b"))
    assert finish(plan, None) is None and not held


@pytest.mark.parametrize("error", [KeyboardInterrupt(), ValueError("a part's error")])
def test_an_acquire_cut_off_gives_back_the_parts_it_took(error: BaseException) -> None:
    plan, held = acquire(Clock(), timeout=5.0)
    send(plan)
    send(plan, "c")
    assert plan.throw(error) == GiveBack(("c",))  # cut off while part 0 is taken
    raised(plan, error)
    # all taken, cut off before they are handed over
    plan, held = acquire(Clock(), timeout=5.0)
    send(plan)
    send(plan, "c")
    send(plan, "a")
    assert send(plan, "b") == AllValid(("c", "a", "b"))
    assert plan.throw(error) == GiveBack(("c", "a", "b"))
    raised(plan, error)
    assert not held


def test_a_give_back_cut_off_is_sent_again_then_raised() -> None:
    plan, _ = acquire(Clock(), timeout=5.0)
    send(plan)
    send(plan, "c")
    send(plan, "a")
    assert send(plan, None) == GiveBack(("c", "a"))
    interrupt = KeyboardInterrupt()
    assert plan.throw(interrupt) == GiveBack(("c", "a"))  # (a second release is harmless)
    raised(plan, interrupt)


def test_an_attempt_together_cut_off_has_nothing_of_the_plans_to_give_back() -> None:
    """(The attempt together gives back what it took itself, see the facade.)"""
    plan, held = acquire(Clock(), grouped=True)
    send(plan)
    interrupt = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt) as caught:
        plan.throw(interrupt)
    assert caught.value is interrupt and not held
