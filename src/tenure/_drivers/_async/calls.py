"""How the fan-out's calls run in the asyncio flavour (written by hand in
both flavours, with the same names: see ``_sync/calls.py``): a call of the
ordinary path is a task of its own (:func:`start`), a round of the quick
path writes to each transport (:func:`write`) and reads the replies as they
come, those already in a connection's read buffer first (:func:`collect`);
the event loop waits for them."""

from __future__ import annotations

import asyncio
import math
import select
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from .. import _internals
from .._fanout_shared import Round, is_fault
from .._runtime_async import detach
from .state import T


def start(
    fn: Callable[..., Coroutine[Any, Any, T]],
    *args: Any,
    before: Callable[[asyncio.Task[T]], object] | None = None,
) -> asyncio.Task[T]:
    """Run ``fn(*args)`` in a task of its own (the runtime's ``detach``);
    ``before``, if given, is called with the task before it first runs."""
    task = detach(fn(*args))
    if before is not None:
        before(task)
    return task


def settle(fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
    """Run ``fn(*args)``, a clean-up nobody waits for (closing a connection),
    where nothing cuts it off half-way: in a task of its own."""
    start(fn, *args)


async def wait_calls(calls: Iterable[asyncio.Task[Any]], timeout: float) -> bool:
    """Wait until every one of ``calls`` is done, for at most ``timeout``
    seconds; whether they all are."""
    pending = [call for call in calls if not call.done()]
    if pending:
        await asyncio.wait(pending, timeout=max(0.0, timeout))
    return all(call.done() for call in pending)


def abandon(call: asyncio.Task[Any]) -> None:
    """A call the caller no longer waits for: cancelled (a worker thread's,
    in the synchronous flavour, is left to finish)."""
    call.cancel()


def within(seconds: float) -> asyncio.Timeout:
    """A block cut off with ``TimeoutError`` after ``seconds`` (the
    synchronous flavour's calls are bounded by their socket timeouts)."""
    return asyncio.timeout(max(0.0, seconds))


async def write(conn: Any, data: list[bytes], deadline: float) -> None:
    """Write ``data`` on ``conn``: handed to its transport at once when it can
    take it with no wait; else sent, connecting first if it must (the
    handshake may block on a paused server), by ``deadline``."""
    if not _internals.write_now(conn, data):
        async with within(deadline - time.monotonic()):
            await conn.send_packed_command(data)


def sound(conn: Any) -> bool:
    """Whether an idle connection (no reply due on it) is still open: connected,
    nothing in its read buffer, no end of stream seen, and nothing to read on
    its socket (a server that closed it, and the loop did not see it yet)."""
    if not getattr(conn, "is_connected", False):
        return False
    reader = _internals.reader_of(conn)
    if reader is not None and (reader.at_eof() or _internals.buffered(conn)):
        return False
    writer = _internals.writer_of(conn)
    sock = writer.get_extra_info("socket") if writer is not None else None
    if sock is None:
        return True
    try:
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


async def collect(
    batch: Round, arrived: Callable[[int, list[Any]], bool]
) -> list[list[Any] | BaseException | None]:
    """Read ``batch`` (see :class:`~.._fanout_shared.Round`): the replies
    already in a connection's read buffer first, then the others in order,
    under one timeout for all (not one per connection); once it has run
    out, the entry it cut off fails with ``TimeoutError`` and each of the
    others gets a short wait (its replies may be here already)."""
    sent = batch.sent
    got: list[list[Any] | BaseException | None] = [None] * len(sent)
    left = list(range(len(sent)))
    reading = -1
    try:
        async with within(max(0.001, batch.deadline - time.monotonic())):
            while left:
                k = next((k for k in left if _internals.buffered(sent[k][1])), -1)
                if k < 0 and len(left) > 1:
                    await _internals.until_data([sent[k][1] for k in left])
                    k = next((k for k in left if _internals.buffered(sent[k][1])), -1)
                if k < 0:
                    k = left[0]
                left.remove(k)
                i, conn, _ = sent[k]
                reading = k
                try:
                    raws = await _read(conn, batch.need[i], batch.errors[i], math.inf)
                except Exception as exc:
                    if not is_fault(exc):
                        raise  # (cut off: the caller drops every connection)
                    reading = -1
                    got[k] = exc
                    continue
                reading = -1
                got[k] = raws
                batch.read[i] = len(raws)
                if arrived(k, raws):
                    return got
    except TimeoutError:
        if reading >= 0:
            got[reading] = TimeoutError("no reply in time")
        for k in left:
            i, conn, _ = sent[k]
            try:
                # past the deadline: only replies already here (a zero wait still reads them)
                async with within(max(0.001, batch.deadline - time.monotonic())):
                    got[k] = await _read(conn, batch.need[i], batch.errors[i], None)
                batch.read[i] = batch.need[i]
            except Exception as exc:
                if not is_fault(exc):
                    raise
                got[k] = exc
    return got


async def _read(conn: Any, n: int, error: type[Exception], timeout: float | None) -> list[Any]:
    """``n`` replies from ``conn``, an error reply (``error``) in place of its
    reply. ``timeout=math.inf`` spares the timer redis-py's ``read_response``
    otherwise sets for its ``socket_timeout`` on every call (the caller
    bounds them all); ``None``: the connection's own."""
    raws: list[Any] = []
    for _ in range(n):
        try:
            if timeout is None:
                raws.append(await conn.read_response())
            else:
                raws.append(await conn.read_response(timeout=timeout))
        except error as exc:
            raws.append(exc)
    return raws
