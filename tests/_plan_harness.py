"""The plan tests' one harness: a fake clock, and the ways to drive a plan (a
generator of :mod:`tenure._protocol` steps) with canned replies, no Redis.

A test sends each step's reply as the driver would (``(Status, value)`` for an
:class:`~tenure._protocol.Eval`, the waiter id for a ``Contend``, ...) and reads
the next step, or the plan's result with :func:`finish`. The plans over
several servers (:mod:`tenure._plans.fanout` steps, which the facade performs)
take the same replies, one per server at once (:func:`fanned`); a test
throws an interrupt into a plan at a step with ``plan.throw``, as the facade
does when it cuts that step off.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import Any

import pytest

from tenure._plans.fanout import Fanned
from tenure._protocol import Contend, Eval, Listening, Status, WaitWake

PlanGen = Generator[Any, Any, Any]


class Clock:
    """A fake monotonic clock for a plan's ``now``: ``t`` seconds, 100.0 at first;
    a test moves it by setting ``t``."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def send(plan: PlanGen, reply: Any = None) -> Any:
    """The plan's next step after ``reply`` (``None``: its first step)."""
    return plan.send(reply)


def first(plan: PlanGen) -> Any:
    """The plan's first step."""
    return plan.send(None)


def started(plan: PlanGen) -> PlanGen:
    """``plan``, once it has yielded its first step (so that the next send is its reply)."""
    plan.send(None)
    return plan


def start(plan: PlanGen, *, asks_first: bool = False) -> Any:
    """The plan's first step; for an acquire that waits, after it asked whether
    this process listens for the lock already (:class:`Listening`) and heard no.
    ``asks_first``: the plan must ask that first."""
    step = plan.send(None)
    if asks_first:
        assert isinstance(step, Listening)
    return plan.send(False) if isinstance(step, Listening) else step


def finish(plan: PlanGen, reply: Any) -> Any:
    """Send ``reply``, which must end the plan; return the plan's result."""
    with pytest.raises(StopIteration) as stop:
        plan.send(reply)
    return stop.value.value


def queue(plan: PlanGen, *, slot: int, member: str, busy: int, asks_first: bool = False) -> Contend:
    """Drive a fresh acquire to its first wait: its lone attempt (not queued:
    ``args[slot]`` is ""), a BUSY reply (``busy``), the :class:`Contend` (the
    driver replies waiter id ``"w1"``), the attempt queued as ``member`` (at
    ``args[slot]``), BUSY again, and its :class:`WaitWake`. ``asks_first``: as for
    :func:`start`. Returns the ``Contend`` step."""
    attempt = start(plan, asks_first=asks_first)
    assert isinstance(attempt, Eval) and attempt.args[slot] == ""
    contend = plan.send((Status.BUSY, busy))
    assert isinstance(contend, Contend)
    queued = plan.send("w1")
    assert isinstance(queued, Eval) and queued.args[slot] == member
    assert isinstance(plan.send((Status.BUSY, busy)), WaitWake)
    return contend


def fanned(*results: Any, unsent: Iterable[int] = ()) -> Fanned:
    """A :class:`~tenure._plans.fanout.Fan` step's reply: ``results``, one per
    master of the step (in its order); ``unsent``: the positions never sent."""
    return Fanned(list(results), frozenset(unsent))


def raised(plan: PlanGen, error: BaseException, reply: Any = None) -> None:
    """Send ``reply``, which must end the plan by raising ``error`` (that very object)."""
    with pytest.raises(type(error)) as caught:
        plan.send(reply)
    assert caught.value is error
