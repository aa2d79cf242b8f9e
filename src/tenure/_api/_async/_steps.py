"""The facade's loop for the plans it performs itself: those that span
servers (a Redlock's rounds, :mod:`tenure._plans.rounds`) or parts (a
MultiLock's acquire, :mod:`tenure._plans.multi`), whose steps call several
servers at once or a part's own acquire.
"""

from __future__ import annotations

from collections.abc import Generator
from inspect import GEN_CLOSED, getgeneratorstate
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Perform(Protocol):
    """What performs a plan's step: its reply."""

    async def __call__(self, step: Any, /) -> Any: ...


async def drive(plan: Generator[Any, Any, T], perform: Perform) -> T:
    """Drive ``plan`` to its result, ``perform`` doing each step and giving its
    reply. Whatever cuts a step off, or comes between a reply and the plan's
    next step (an interrupt of any class: Python runs signal handlers at
    calls and jumps back; a cancellation), is thrown into the plan at the
    step it waits at, which cleans up (its clean-up steps are performed
    too) and raises it; what the plan raises is raised."""
    reply: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                # one try around the whole loop, its jump back included
                while True:
                    step = plan.send(reply) if error is None else plan.throw(error)
                    error = None
                    reply = await perform(step)
            except StopIteration as stop:
                if getgeneratorstate(plan) == GEN_CLOSED:  # the plan returned
                    result: T = stop.value
                    return result
                reply, error = None, stop
            except BaseException as exc:
                if getgeneratorstate(plan) == GEN_CLOSED:
                    raise  # the plan raised it, after its own clean-up
                reply, error = None, exc  # the plan has not seen it
    finally:
        plan.close()
