"""Steps of the plans that span servers: a Redlock's rounds (:mod:`.rounds`).

A driver runs a plan on one client (:mod:`tenure._protocol`'s steps). A plan
over N masters decides when to call all of them at once, how many replies
are enough, when to pause and when to listen for a wake; the facade performs
its steps with the drivers' fan-out (``_drivers/_async/fanout.py``: ``run_each``,
``send_late``, ``listen_each``) in one small loop written once for both
facades (``_api/_async/_steps.py``: ``drive``; a MultiLock's acquire,
:mod:`.multi`, runs in it too, with steps of its own). The masters are named by
their index in the lock's list of clients. Each step's docstring gives its
reply.

Interrupts. The facade throws whatever cuts a step off (an interrupt of any
class, a cancellation), or comes between two steps, into the plan at the
step it waits at: the plan cleans up (it may yield more steps: a clean-up
round) and raises it. A plan that decides what the caller must give back
hands it over before it returns (see :func:`.rounds.take`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from .._protocol import Command, Eval, Pipeline, Step

T = TypeVar("T")

#: How many replies of a :class:`Fan` are enough: called with the results so
#: far (one per master of the step, in its order; a master yet to answer has
#: an object of no other use there).
Enough = Callable[[list[Any]], bool]

#: A call queued for a master behind one still stuck there (:class:`SendLate`).
Late = Eval | Command | Pipeline


@dataclass(frozen=True, slots=True)
class Fan:
    """Send ``steps[k]`` to master ``masters[k]``, all at once, each within the
    per-master timeout; return once every master answered or timed out, or
    once ``enough`` says so (the others' replies are then read by the next
    call on each: see ``run_each``).

    ``behind``: a step for a master where an earlier call is still in flight
    on a worker thread is not sent there (its result is "unsent"), so that
    the plan queues it behind that call (:class:`SendLate`): for a clean-up
    release, which never overtakes the acquire it undoes.

    Reply: :class:`Fanned`.
    """

    masters: tuple[int, ...]
    steps: tuple[Step, ...]
    enough: Enough | None = None
    behind: bool = False


@dataclass(frozen=True, slots=True)
class Fanned:
    """A :class:`Fan`'s reply.

    Attributes:
        results: per master of the step, in its order: its step's reply, or
            the exception its call ended with (``TimeoutError`` when it did not
            answer in time or was not waited for).
        unsent: the positions (in ``results``) of the masters the step was
            never sent to, an earlier call still stuck there: they can't have
            run it.
        busy: the positions of the masters where a call (in a task or on a
            worker thread of its own) was still in flight as the step was
            sent: that call may run there after the step.
    """

    results: list[Any]
    unsent: frozenset[int] = frozenset()
    busy: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class SendLate:
    """Send ``step`` to each of ``masters`` once the call still stuck there
    ends, if that is before ``until`` (the plan's clock); at once where no
    call is stuck. Reply: ``None``."""

    masters: tuple[int, ...]
    step: Late
    until: float


@dataclass(frozen=True, slots=True)
class Sleep:
    """Pause ``seconds``. Reply: ``None``."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Listen:
    """Listen on ``channel`` on every master (each message, and each
    reconnection of a master's wake hub, wakes the plan), waiting within the
    per-master timeout for the subscriptions to be confirmed; a master whose
    confirmation does not come is not listened on. The listening lasts until
    :class:`StopListening` or the plan's end. Reply: ``None``."""

    channel: str


@dataclass(frozen=True, slots=True)
class ClearWake:
    """Forget the wakes heard so far (a round is about to be sent: a wake after
    this one is one its replies may not reflect). Reply: ``None``."""


@dataclass(frozen=True, slots=True)
class WaitWoken:
    """Wait until a wake is heard (since the last :class:`ClearWake` or
    ``WaitWoken``) or ``timeout`` seconds pass. Reply: ``True`` if woken,
    ``False`` on timeout; either way the wakes so far are forgotten."""

    timeout: float


@dataclass(frozen=True, slots=True)
class StopListening:
    """Stop every listening of :class:`Listen`. Reply: whether a wake was heard
    since the last :class:`ClearWake` or :class:`WaitWoken`."""


FanStep = Fan | SendLate | Sleep | Listen | ClearWake | WaitWoken | StopListening
FanPlan = Generator[FanStep, Any, T]
