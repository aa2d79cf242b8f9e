"""An acquire's grant made a lease, for every kind of lock: the plan run
(on one connection for a replicated lease), a grant or lease its caller would
never see given back, the outcome reported to the telemetry; and who holds a
lock now, in words, for an error message."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ... import _telemetry
from ..._drivers import _async as _driver
from ..._plans.waiting import Grant
from ..._protocol import Plan, is_interrupt, result_lost_with

G = TypeVar("G", bound=Grant)
R = TypeVar("R")


async def _take_grant(
    lock: Any,
    plan: Plan[G | None],
    hold: Callable[[G], Any],
    give_back: Callable[[G], Plan[Any]],
    replicated: bool = False,
    blocking: bool = True,
) -> Any:
    """Run an acquire ``plan`` of ``lock`` (a lock object: its ``_client``,
    ``name`` and ``_probe``); the lease ``hold`` makes of its grant (``None``
    when it returned none), once the lease's ``_start`` is done. The acquire
    is logged and recorded (:mod:`tenure._telemetry`) when anything watches:
    ``blocking`` tells a wait that ran out from one attempt that found the
    lock busy.

    A ``replicated`` lease (``min_replicas``) is granted, waited for and, if
    that fails, given back on one connection (see the driver's
    ``one_connection``): the ``WAIT`` counts the replicas of the server that
    made the grant, and the give-back reaches that server, even if the
    client's pool has meanwhile learned of another master (a failover).

    A grant its caller would never see is given back (best effort) before the
    error is raised: an interrupt or cancellation between the plan's grant
    and the lease's return (the driver's clean-up, the lease's making, its
    start), or a start that failed: the lease's own release if it was made,
    else the ``give_back`` plan of the grant (a release of its token). Without
    this the lock stayed held under a token nobody used until its ttl ran
    out (a ``Lock``'s owner got ``AlreadyHeldError`` meanwhile).
    """
    client = lock._client
    watched = _telemetry.acquiring(lock, blocking, _driver.server_name)
    if watched is None:
        return await _held_after(client, plan, hold, give_back, replicated)
    try:
        lease = await _held_after(client, plan, hold, give_back, replicated)
    except BaseException as exc:
        watched.failed(exc)
        raise
    await _report(watched, lease)
    return lease


async def _watched(
    lock: object, blocking: bool, server: Any, take: Callable[[], Coroutine[Any, Any, R]]
) -> R:
    """``take()``, an acquire's work, with its outcome reported to the
    telemetry (:func:`_report`): a lock of several servers or parts, whose
    acquire is not :func:`_take_grant`'s."""
    watched = _telemetry.acquiring(lock, blocking, server)
    if watched is None:
        return await take()
    try:
        lease = await take()
    except BaseException as exc:
        watched.failed(exc)
        raise
    await _report(watched, lease)
    return lease


async def _report(watched: _telemetry.Acquire, lease: Any) -> None:
    """``watched.done(lease)``: an acquire's outcome logged and recorded. A
    lease whose caller would never see it (an interrupt, of any class, while
    it is recorded) is released first (best effort), as in :func:`_take_grant`."""
    try:
        watched.done(lease)
    except BaseException:
        if lease is not None:
            with contextlib.suppress(Exception):
                await lease.release()
        raise


async def _held_after(
    client: Any,
    plan: Plan[G | None],
    hold: Callable[[G], Any],
    give_back: Callable[[G], Plan[Any]],
    replicated: bool,
) -> Any:
    """:func:`_take_grant`'s work."""
    if not replicated:
        return await _grant_and_hold(client, plan, hold, give_back)
    lease = None
    try:
        async with _driver.one_connection(client):
            lease = await _grant_and_hold(client, plan, hold, give_back)
    except BaseException:
        # a lease made, then cut off from its caller as the block ended
        # (an interrupt in the block's exit): released, not left renewed
        if lease is not None:
            with contextlib.suppress(Exception):
                await lease.release()
        raise
    return lease


async def _grant_and_hold(
    client: Any,
    plan: Plan[G | None],
    hold: Callable[[G], Any],
    give_back: Callable[[G], Plan[Any]],
) -> Any:
    """:func:`_held_after`'s work, on one connection or not."""
    try:
        grant = await _driver.run(client, plan)
    except BaseException as exc:
        lost: G | None = result_lost_with(exc)
        if lost is not None:
            with contextlib.suppress(Exception):
                await _driver.run(client, give_back(lost))
        raise
    if grant is None:
        return None
    lease = None
    try:
        lease = hold(grant)
        await lease._start()
    except BaseException:
        with contextlib.suppress(Exception):
            if lease is not None:
                await lease.release()  # (a start that failed released it already)
            else:
                await _driver.run(client, give_back(grant))
        raise
    return lease


async def holder_of(lock: object) -> str | None:
    """Who holds ``lock`` now, in words (:func:`tenure._info.held_by` of its
    ``info()``, or of its read-write lock's; a Redlock's holder on a quorum of
    its masters), read with one more call: for an
    error message, never on the hot path. ``None`` when it has no such
    snapshot or the call failed."""
    read: Any = (
        getattr(lock, "_held_by", None)  # (a Redlock: its quorum's holder, in words)
        or getattr(lock, "info", None)
        or getattr(getattr(lock, "lock", None), "info", None)
    )
    if read is None:
        return None
    try:
        answer = await read()
    except Exception as exc:
        if is_interrupt(exc):  # (of any class: never swallowed)
            raise
        return None
    if isinstance(answer, str):
        return answer
    from ..._info import held_by  # (an error's words: loaded on first use)

    return held_by(answer)
