"""A Redlock's rounds (tenure._plans.rounds), without servers: the acquire's
loop and the release round, with canned replies per master, a fake clock and
fixed random draws; and the facade's loop that performs such plans."""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Iterator
from typing import Any

import pytest
import redis.exceptions
from _plan_harness import Clock, PlanGen, fanned, finish, raised, send

from tenure import NoQuorumError, WrongTypeError
from tenure._api._async import _steps as async_steps
from tenure._api._sync import _steps as sync_steps
from tenure._keys import lock_keys
from tenure._plans import redlock as plans
from tenure._plans import rounds
from tenure._plans.fanout import (
    ClearWake,
    Fan,
    Fanned,
    Listen,
    SendLate,
    Sleep,
    StopListening,
    WaitWoken,
)
from tenure._plans.waiting import Grant, validity
from tenure._protocol import Status

KEYS = lock_keys("orders", key=None, prefix="tenure:")
N, TTL, TOKEN = 5, 1.0, "o:t"
MEMBER = plans.member("w1", 1000, TOKEN)  # "w1|1000|o:t"
OK, BUSY, NOT_OWNED = Status.OK, Status.BUSY, Status.NOT_OWNED
DOWN = redis.exceptions.ConnectionError("down")
LATE = TimeoutError("no reply in time")
PENDING = object()  # a master not in yet, as a fan-out's ``enough`` sees it
EVERYONE = tuple(range(N))


def busy(pttl: int = 800) -> Any:
    return fanned(*[(BUSY, pttl)] * N)


def take(
    clock: Clock,
    *,
    blocking: bool = True,
    timeout: float | None = None,
    draws: tuple[float, ...] = (),
) -> tuple[PlanGen, list[rounds.Taken]]:
    """A take of ``TOKEN`` on ``N`` masters, and the caller's list its grant goes to."""
    granted: list[rounds.Taken] = []
    rands: Iterator[float] = iter(draws)
    waiters = iter(["w1", "w2"])
    plan = rounds.take(
        KEYS,
        N,
        TTL,
        TOKEN,
        blocking,
        timeout,
        granted,
        master_timeout=0.05,
        now=clock,
        rand=lambda: next(rands),
        new_waiter=lambda: next(waiters),
    )
    return plan, granted


def attempt(plan: PlanGen, reply: Any = None, queued: str = "") -> Fan:
    """Send ``reply``; the plan clears its wake and sends its attempt (queued
    as ``queued``) to every master at once: that step."""
    assert isinstance(send(plan, reply), ClearWake)
    fan = send(plan)
    assert isinstance(fan, Fan) and fan.masters == EVERYONE and not fan.behind
    assert fan.steps == (plans.attempt(KEYS, TOKEN, 1000, queued),) * N
    return fan


def release_fan(
    step: Any, masters: tuple[int, ...], queued: str = "", *, quick: bool = False
) -> None:
    """``step`` releases ``TOKEN`` on ``masters`` (``quick``: the clean-up of a
    round cut off: it returns once a quorum answered, queued behind calls in flight)."""
    assert isinstance(step, Fan) and step.masters == masters
    assert step.steps == (plans.release(KEYS, TOKEN, "", queued),) * len(masters)
    assert step.behind is quick and (step.enough is not None) is quick
    if quick:
        assert step.enough is not None
        assert step.enough([[(OK, 0), 0]] * 3 + [PENDING] * 2)
        assert not step.enough([[(OK, 0), 0]] * 2 + [PENDING] * 3)


def test_a_quorum_won_returns_the_grant_once_a_quorum_granted() -> None:
    clock = Clock()
    plan, granted = take(clock)
    fan = attempt(plan)
    assert fan.enough is not None  # the round returns once a quorum granted
    assert not fan.enough([(OK, 1), (OK, 2), (BUSY, 5), PENDING, PENDING])
    assert fan.enough([(OK, 1), PENDING, (OK, 2), PENDING, (OK, 3)])
    clock.t += 0.01
    # master 3 not waited for; master 4 never sent (a call stuck there)
    result = finish(plan, fanned((OK, 10), (OK, 12), (OK, 11), LATE, LATE, unsent=[4]))
    assert result == (Grant(TOKEN, 12, TTL, 100.0 + validity(TTL)), frozenset({0, 1, 2, 3}))
    assert granted == [result]  # the caller's to give back from the return on


def test_a_quorum_granted_too_late_is_given_back_and_tried_again() -> None:
    clock = Clock()
    plan, granted = take(clock, draws=(0.5,))
    attempt(plan)
    clock.t += validity(TTL)  # the round took the whole validity
    step = send(plan, fanned((OK, 1), (OK, 2), (OK, 3), (BUSY, 9), (BUSY, 9)))
    release_fan(step, (0, 1, 2))
    assert send(plan, fanned([(OK, 0), 0], [(OK, 0), 0], [(OK, 0), 0])) == Sleep(
        plans.backoff(1, 0.5)
    )
    assert not granted


def test_a_lock_held_elsewhere_is_waited_for_then_taken() -> None:
    clock = Clock()
    plan, granted = take(clock, timeout=5.0)
    attempt(plan)
    # the first busy round listens, then queues with the next round
    assert send(plan, busy()) == Listen(KEYS.wake_prefix + "w1")
    attempt(plan, None, queued=MEMBER)
    pttls = fanned((BUSY, 800), (BUSY, 300), (BUSY, -1), (BUSY, 500), (BUSY, 900))
    assert send(plan, pttls) == WaitWoken(0.3)  # the earliest lease's end
    clock.t += 0.1
    attempt(plan, True, queued=MEMBER)  # woken: at once
    leave = send(plan, fanned((OK, 7), (BUSY, 5), (OK, 9), (OK, 8), (BUSY, 5)))
    # the masters that granted it dropped the member from their queue
    assert leave == Fan((1, 4), (plans.leave(KEYS, MEMBER),) * 2)
    assert isinstance(send(plan, fanned(1, 1)), StopListening)
    grant, reached = finish(plan, False)
    assert grant == Grant(TOKEN, 9, TTL, 100.1 + validity(TTL)) and reached == set(EVERYONE)
    assert granted == [(grant, reached)]


def test_a_quorum_lost_without_waiting_holds_nothing() -> None:
    plan, _ = take(Clock(), blocking=False)
    attempt(plan)
    assert finish(plan, busy()) is None
    # two grants of five: given back, and the heads of the queues woken
    plan, granted = take(Clock(), blocking=False)
    attempt(plan)
    step = send(plan, fanned((OK, 1), (OK, 2), (BUSY, 5), (BUSY, 5), (BUSY, 5)))
    release_fan(step, (0, 1))
    wake = send(plan, fanned([(OK, 0), 0], [(OK, 0), 2]))  # master 1 has waiters
    assert wake == Fan((1,), (plans.wake(KEYS),))
    assert finish(plan, fanned(None)) is None and not granted


def test_split_votes_give_back_wake_nobody_and_back_off_by_the_draws() -> None:
    clock = Clock()
    plan, _ = take(clock, timeout=5.0, draws=(0.0, 0.9, 0.3))
    split = fanned((OK, 1), (OK, 2), (BUSY, 5), (BUSY, 5), (BUSY, 5))
    released = fanned([(OK, 0), 4], [(OK, 0), 4])  # waiters queued: not woken
    attempt(plan)
    release_fan(send(plan, split), (0, 1))
    assert send(plan, released) == Sleep(plans.backoff(1, 0.0))
    attempt(plan)
    release_fan(send(plan, split), (0, 1))
    assert send(plan, released) == Sleep(plans.backoff(2, 0.9))  # longer each split
    attempt(plan)
    assert send(plan, busy()) == Listen(KEYS.wake_prefix + "w1")  # a round of no split
    attempt(plan, None, queued=MEMBER)
    release_fan(send(plan, split), (0, 1))  # (the queues are left only at the end)
    assert send(plan, released) == Sleep(plans.backoff(1, 0.3))  # counted again from 1
    assert plans.backoff(1, 0.0) < plans.backoff(2, 0.9)


def test_a_back_off_ends_with_the_timeout() -> None:
    clock = Clock()
    plan, _ = take(clock, timeout=0.003, draws=(0.0,))
    attempt(plan)
    release_fan(send(plan, fanned((OK, 1), (OK, 2), (BUSY, 5), (BUSY, 5), (BUSY, 5))), (0, 1))
    pause = send(plan, fanned([(OK, 0), 0], [(OK, 0), 0]))
    assert isinstance(pause, Sleep)
    assert pause.seconds == pytest.approx(0.003)  # not the draw's 0.005


def test_unreachable_masters_three_rounds_in_a_row_raise_no_quorum() -> None:
    clock = Clock()
    plan, granted = take(clock, draws=(0.5, 0.5))
    down = fanned(DOWN, LATE, (BUSY, 5), LATE, (BUSY, 5))  # two answered: no quorum
    attempt(plan)
    step = send(plan, down)
    release_fan(step, (0, 1, 3))  # where it may have been granted
    # master 1 timed out again: the release goes again once it answers (a ttl)
    late = send(plan, fanned(DOWN, LATE, [(OK, 0), 0]))
    assert late == SendLate((1,), plans.release(KEYS, TOKEN, ""), 100.0 + TTL)
    assert send(plan, None) == Sleep(0.05)  # a per-master timeout at least
    attempt(plan)
    release_fan(send(plan, down), (0, 1, 3))
    assert send(plan, fanned(DOWN, DOWN, DOWN)) == Sleep(0.05)
    attempt(plan)
    release_fan(send(plan, down), (0, 1, 3))
    # the third: it gives up, with a last quick round that leaves nothing held
    release_fan(send(plan, fanned(DOWN, DOWN, DOWN)), EVERYONE, quick=True)
    with pytest.raises(NoQuorumError, match="needs 3 of 5 masters, only 2 answered"):
        send(plan, fanned(DOWN, DOWN, [(OK, 0), 0], DOWN, [(OK, 0), 0]))
    assert not granted


def test_one_round_of_unreachable_masters_is_not_an_outage() -> None:
    clock = Clock()
    plan, _ = take(clock, draws=(0.5, 0.5, 0.5))
    down = fanned(DOWN, DOWN, DOWN, (BUSY, 5), (BUSY, 5))
    attempt(plan)
    release_fan(send(plan, down), (0, 1, 2))
    assert send(plan, fanned(DOWN, DOWN, DOWN)) == Sleep(0.05)
    attempt(plan)
    assert send(plan, busy()) == Listen(KEYS.wake_prefix + "w1")  # answered: count reset
    attempt(plan, None, queued=MEMBER)
    release_fan(send(plan, down), (0, 1, 2))
    assert send(plan, fanned(DOWN, DOWN, DOWN)) == Sleep(0.05)  # the first again
    attempt(plan, None, queued=MEMBER)
    release_fan(send(plan, down), (0, 1, 2))
    assert send(plan, fanned(DOWN, DOWN, DOWN)) == Sleep(0.05)  # the second


def test_a_round_cut_off_gives_back_on_every_master_and_leaves_the_queues() -> None:
    clock = Clock()
    plan, granted = take(clock)
    attempt(plan)
    assert send(plan, busy()) == Listen(KEYS.wake_prefix + "w1")
    attempt(plan, None, queued=MEMBER)
    interrupt = KeyboardInterrupt()
    # cut off while the replies are due: it may have been granted anywhere
    give_back = plan.throw(interrupt)
    release_fan(give_back, EVERYONE, MEMBER, quick=True)
    # a quorum answered (master 2 has waiters); 3 and 4 get it once they answer
    answered = [(OK, 0), 1, 0], [(OK, 0), 1, 0], [(NOT_OWNED, 0), 1, 2]
    late = send(plan, fanned(*answered, LATE, LATE, unsent=[4]))
    step = plans.release(KEYS, TOKEN, "", MEMBER)
    assert late == SendLate((3, 4), step, 100.0 + TTL)
    assert send(plan, None) == Fan((2,), (plans.wake(KEYS),))
    # the give-back left the queues: it only stops listening, passes nothing on
    assert isinstance(send(plan, fanned(None)), StopListening)
    raised(plan, interrupt, True)
    assert not granted


def test_a_first_round_cut_off_gives_back_without_listening() -> None:
    plan, granted = take(Clock())
    attempt(plan)
    interrupt = asyncio.CancelledError()
    release_fan(plan.throw(interrupt), EVERYONE, quick=True)
    late = send(plan, fanned(*[[(NOT_OWNED, 0), 0]] * 3, LATE, LATE))
    assert late == SendLate((3, 4), plans.release(KEYS, TOKEN, ""), 100.0 + TTL)
    raised(plan, interrupt)
    assert not granted


def test_an_error_in_the_give_back_leaves_the_interrupt_to_raise() -> None:
    plan, _ = take(Clock())
    attempt(plan)
    interrupt = KeyboardInterrupt()
    release_fan(plan.throw(interrupt), EVERYONE, quick=True)

    class AlarmTimeout(Exception):
        pass

    with pytest.raises(KeyboardInterrupt) as caught:
        plan.throw(AlarmTimeout())  # the give-back round cut off in turn
    assert caught.value is interrupt


def test_a_grant_cut_off_after_it_was_handed_over_is_the_callers() -> None:
    clock = Clock()
    plan, granted = take(clock)
    attempt(plan)
    send(plan, busy())
    attempt(plan, None, queued=MEMBER)
    leave = send(plan, fanned((OK, 1), (OK, 2), (OK, 3), (BUSY, 5), (BUSY, 5)))
    assert leave == Fan((3, 4), (plans.leave(KEYS, MEMBER),) * 2)
    assert isinstance(send(plan, fanned(1, 1)), StopListening)
    interrupt = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt) as caught:
        plan.throw(interrupt)  # no give-back step: the caller's list has the grant
    assert caught.value is interrupt
    assert [grant.fence for grant, _ in granted] == [3]


@pytest.mark.parametrize("woken", [True, False])
def test_a_waiter_that_gives_up_leaves_while_listening_and_passes_a_wake_on(
    woken: bool,
) -> None:
    clock = Clock()
    plan, granted = take(clock, timeout=1.0)
    attempt(plan)
    send(plan, busy(5000))
    attempt(plan, None, queued=MEMBER)
    assert send(plan, busy(5000)) == WaitWoken(1.0)  # the deadline first
    clock.t += 1.0
    attempt(plan, False, queued=MEMBER)  # the last attempt, at the deadline
    leave = send(plan, busy(5000))
    assert leave == Fan(EVERYONE, (plans.leave(KEYS, MEMBER),) * N)
    assert isinstance(send(plan, fanned(*[1] * N)), StopListening)
    if woken:  # a wake since its last attempt: the new heads get it
        assert send(plan, True) == Fan(EVERYONE, (plans.wake(KEYS),) * N)
        assert finish(plan, fanned(*[None] * N)) is None
    else:
        assert finish(plan, False) is None
    assert not granted


def test_a_leave_cut_off_still_stops_listening() -> None:
    clock = Clock()
    plan, _ = take(clock, timeout=1.0)
    attempt(plan)
    send(plan, busy())
    attempt(plan, None, queued=MEMBER)
    send(plan, busy())
    clock.t += 1.0
    attempt(plan, False, queued=MEMBER)
    assert isinstance(send(plan, busy()), Fan)  # the leave
    interrupt = KeyboardInterrupt()
    assert isinstance(plan.throw(interrupt), StopListening)
    raised(plan, interrupt, True)  # (a wake heard is not passed on: it raises)


def test_a_majoritys_own_error_is_raised_after_the_give_back() -> None:
    """Errors of tenure's own on so many masters that the others can't make a
    quorum (3 of 5) end the take with the first of them."""
    plan, _ = take(Clock())
    attempt(plan)
    wrong = WrongTypeError("tenure:{orders}")
    step = send(plan, fanned((OK, 1), wrong, wrong, wrong, (BUSY, 5)))
    release_fan(step, (0, 1, 2, 3))  # the errors' masters count as not answered
    # it does not go on: the heads are woken, then the quick round, then the error
    replies = fanned([(OK, 0), 1], [(OK, 0), 0], [(OK, 0), 0], [(OK, 0), 0])
    assert send(plan, replies) == Fan((0,), (plans.wake(KEYS),))
    release_fan(send(plan, fanned(None)), EVERYONE, quick=True)
    raised(plan, wrong, fanned(*[[(OK, 0), 0]] * N))


def test_a_minoritys_own_error_counts_as_masters_not_answering() -> None:
    """Errors of tenure's own on 2 of 5 masters are outvoted: a split with
    them backs off and tries again, a quorum of the others takes the lock,
    and too few answers (a third master down) end in NoQuorumError naming
    them."""
    clock = Clock()
    plan, granted = take(clock, draws=(0.0,))
    wrong = WrongTypeError("tenure:{orders}")
    attempt(plan)
    release_fan(send(plan, fanned((OK, 1), wrong, wrong, (BUSY, 5), (BUSY, 5))), (0, 1, 2))
    released = fanned([(OK, 0), 0], [(OK, 0), 0], [(OK, 0), 0])
    assert send(plan, released) == Sleep(plans.backoff(1, 0.0))
    attempt(plan)
    result = finish(plan, fanned((OK, 7), wrong, wrong, (OK, 8), (OK, 9)))
    assert result[0].fence == 9 and granted == [result]
    plan, _ = take(clock, blocking=False)
    attempt(plan)
    release_fan(send(plan, fanned((OK, 1), wrong, wrong, DOWN, (OK, 2))), (0, 4, 1, 2, 3))
    # (a last quick round that leaves nothing held, then the error)
    release_fan(send(plan, fanned(*[[(OK, 0), 0]] * N)), EVERYONE, quick=True)
    with pytest.raises(NoQuorumError, match="WrongTypeError") as caught:
        send(plan, fanned(*[[(OK, 0), 0]] * N))
    assert "only 2 answered" in str(caught.value)


def test_a_release_round_sends_again_where_an_acquire_was_sent_and_wakes() -> None:
    clock = Clock()
    plan = rounds.release_round(KEYS, N, TTL, TOKEN, "op1", (1, 2, 4), late={1, 4}, now=clock)
    step = plans.release(KEYS, TOKEN, "op1")
    assert send(plan) == Fan((1, 2, 4), (step,) * 3)
    clock.t = 101.0
    # 1 and 2 timed out: only 1 had an acquire sent to it
    assert send(plan, fanned(LATE, LATE, [(OK, 0), 3])) == SendLate((1,), step, 102.0)
    assert send(plan) == Fan((4,), (plans.wake(KEYS),))
    t = finish(plan, fanned(None))
    assert t.ok == (2,) and t.failed == (0, 1)  # (by position in the round)
    # no wake asked: none sent
    plan = rounds.release_round(KEYS, N, TTL, TOKEN, "", (0,), False, now=clock)
    send(plan)
    assert finish(plan, fanned([(OK, 0), 2])).ok == (0,)


def test_a_leases_release_is_sent_again_behind_a_call_in_flight_where_it_was_acquired() -> None:
    """A lease's release (``last``): a master an acquire was sent to where a
    call was still in flight as the release went (maybe that acquire, still
    on its way) gets the release again behind it, though it answered; a
    round of an acquire (not ``last``: its token may be granted there again)
    does not."""
    clock = Clock()
    step = plans.release(KEYS, TOKEN, "op1")
    released = [(OK, 0), 0]
    for last, again in ((True, (1,)), (False, None)):
        plan = rounds.release_round(
            KEYS, N, TTL, TOKEN, "op1", (1, 2, 4), late={1, 4}, last=last, now=clock
        )
        assert send(plan) == Fan((1, 2, 4), (step,) * 3)
        # master 1 (an acquire sent there) and master 2 (none) were busy
        reply = Fanned([released] * 3, busy=frozenset({0, 1}))
        if again is None:
            assert finish(plan, reply).ok == (0, 1, 2)
        else:
            assert send(plan, reply) == SendLate(again, step, clock.t + TTL)
            assert finish(plan, None).ok == (0, 1, 2)


def _plan(log: list[Any], fail: BaseException | None = None) -> Generator[str, Any, str]:
    try:
        log.append((yield "a"))
        log.append((yield "b"))
    except BaseException as exc:
        log.append(type(exc).__name__)
        log.append((yield "clean-up"))
        raise
    if fail is not None:
        raise fail
    return "done"


class _Interrupt(BaseException):
    pass


def _perform(cut: str | None) -> Any:
    def perform(step: str) -> str:
        if step == cut:
            raise _Interrupt
        return step.upper()

    return perform


def test_the_facade_loop_throws_what_cuts_a_step_off_into_the_plan() -> None:
    log: list[Any] = []
    assert sync_steps.drive(_plan(log), _perform(None)) == "done"
    assert log == ["A", "B"]
    log.clear()
    with pytest.raises(_Interrupt):
        sync_steps.drive(_plan(log), _perform("b"))
    assert log == ["A", "_Interrupt", "CLEAN-UP"]  # the plan cleaned up, then raised
    log.clear()
    error = ValueError("the plan's own")
    with pytest.raises(ValueError) as caught:
        sync_steps.drive(_plan(log, error), _perform(None))
    assert caught.value is error and log == ["A", "B"]  # not thrown back in


def test_the_async_facade_loop_throws_what_cuts_a_step_off_into_the_plan() -> None:
    log: list[Any] = []

    async def perform(step: str) -> str:
        await asyncio.sleep(0)
        if step == "b":
            raise asyncio.CancelledError
        return step.upper()

    async def main() -> None:
        with pytest.raises(asyncio.CancelledError):
            await async_steps.drive(_plan(log), perform)

    asyncio.run(main())
    assert log == ["A", "CancelledError", "CLEAN-UP"]


def test_a_plan_closed_by_its_driver_yields_no_step() -> None:
    """Closed while it waits (its driver gave it up): no clean-up step can be
    sent any more, and none is attempted (Python would raise RuntimeError)."""
    clock = Clock()
    plan, _ = take(clock)
    attempt(plan)
    send(plan, busy())
    attempt(plan, None, queued=MEMBER)
    plan.close()  # at a round: no give-back, no leave, no StopListening
    plan, _ = take(clock)
    attempt(plan)
    release_fan(plan.throw(KeyboardInterrupt()), EVERYONE, quick=True)
    plan.close()  # in its give-back
