"""Asyncio candidates for the election tests, one election object per task:
the checks both elections' task tests share."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from tenure import LockLostError


async def tasks_take_turns(
    elections: Sequence[Any],
    rounds: int,
    on_term: Callable[[int, int], Awaitable[object]] | None = None,
) -> list[tuple[float, float, int]]:
    """One asyncio task per election (each a candidate), leading ``rounds``
    terms each; each term checks that no other task leads (``"two leaders at
    once"``) and calls ``on_term(index, term)``. Returns ``(elected,
    resigning, term)`` per term, in the order the terms ended."""
    inside = 0
    holds: list[tuple[float, float, int]] = []

    async def candidate(index: int, election: Any) -> None:
        nonlocal inside
        for _ in range(rounds):
            leadership = await election.campaign(timeout=60)
            assert leadership is not None
            async with leadership:
                elected = time.monotonic()
                inside += 1
                assert inside == 1, "two leaders at once"
                if on_term is not None:
                    await on_term(index, leadership.term)
                await asyncio.sleep(0.001)
                inside -= 1
                holds.append((elected, time.monotonic(), leadership.term))

    await asyncio.gather(*(candidate(i, e) for i, e in enumerate(elections)))
    return holds


async def work_cancelled_when_lost(election: Any, depose: Callable[[], Awaitable[object]]) -> bool:
    """Run, while leading ``election`` (``run_while_leader``), work that deposes
    its own leader (``depose()``) and then sleeps; check that
    ``run_while_leader`` raises ``LockLostError``, and return whether the work
    was cancelled."""
    cancelled = asyncio.Event()

    async def forever(leadership: Any) -> None:
        await depose()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(LockLostError):
        await asyncio.wait_for(election.run_while_leader(forever, timeout=5), 10)
    return cancelled.is_set()


async def work_ends_before_a_cancelled_call(election: Any) -> list[str]:
    """Cancel a ``run_while_leader`` call of ``election`` while its work runs,
    the work's cleanup taking a while; return what had happened when the
    cancelled call ended: ``"cleaned"`` once the work's cleanup ended,
    ``"leading"`` if the election still had a leader."""
    steps: list[str] = []
    started = asyncio.Event()

    async def work(leadership: Any) -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.3)  # its cleanup, before it lets go
            steps.append("cleaned")

    call = asyncio.ensure_future(election.run_while_leader(work, timeout=5))
    await asyncio.wait_for(started.wait(), 10)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(call, 10)
    ended = list(steps)
    if await election.leader() is not None:
        ended.append("leading")
    await asyncio.sleep(0.5)  # (a work left running ends now: not counted)
    return ended
