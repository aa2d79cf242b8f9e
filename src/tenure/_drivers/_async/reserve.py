"""The quick path's reserve: the connections the driver keeps checked out of
a client's pool for its script calls (taken, given back, waited for when all
are busy, closed when a call fails), one reserve per pool and event loop.

Written by hand for the asyncio flavour (futures wait for a connection); the
synchronous flavour's ``_sync/reserve.py`` is written by hand too (bare
locks), with the same names. The calls that use the reserve are in
:mod:`.send` (one source for both).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..._protocol import Eval
from .. import _clients, _identity

if TYPE_CHECKING:
    from .state import Client


class _Fallback(Exception):
    """A call the quick path leaves to the ordinary one (see :func:`_quick`)."""


@dataclass(eq=False)
class _Reserve:
    """The reserve of the scripts' quick path: the connections it keeps
    checked out of one pool (see :func:`.send._quick`) in one event loop,
    shared by every client on the pool: a client made per request on a shared
    pool and dropped leaves them to the next one (held by each client, they
    would be lost with it, slots of the pool never given back). Kept on the
    pool itself (see :func:`_clients.store_on`)."""

    generation: int
    loop: asyncio.AbstractEventLoop
    #: how many it may hold (see _clients.quick_connections)
    most: int
    #: the idle ones, and how many it holds in all
    idle: list[Any] = field(default_factory=list)
    open: int = 0
    #: the calls waiting for one (all it may keep are busy), first come first served
    waiters: collections.deque[asyncio.Future[Any]] = field(default_factory=collections.deque)


def _reserve_for(client: Client, loop: asyncio.AbstractEventLoop) -> _Reserve | None:
    """The quick path's reserve of ``client``'s pool in ``loop``, or ``None``
    when the client may take none (see :func:`_clients.quick_connections`).
    The connections of the pool's reserve of another loop are given back to
    it (see :func:`_forsake`)."""
    most = _clients.quick_connections(client)
    if not most:
        return None
    pool = client.connection_pool  # type: ignore[union-attr]
    reserve: _Reserve | None = _clients.stored_on(pool, "reserve")
    if reserve is None or reserve.generation != _identity.generation() or reserve.loop is not loop:
        if reserve is not None and reserve.generation == _identity.generation():
            _forsake(reserve.idle, pool)
            reserve.idle = []
        reserve = _Reserve(_identity.generation(), loop, most)
        if not _clients.store_on(
            pool, "reserve", reserve
        ):  # (made by the first client, in its loop)
            return None
    return reserve


#: The longest a script call waits for a connection of the quick path when
#: all it may keep are busy (a stalled server, say), in seconds: it then
#: takes the ordinary path, through the client.
QUICK_PATIENCE = 1.0


async def _take(client: Client, reserve: _Reserve, retries: bool) -> Any:
    """An idle connection of the quick path; a new one from the pool while
    fewer than it may keep are open; else the next one given back within
    :data:`QUICK_PATIENCE` (:class:`_Fallback` after it)."""
    if reserve.idle:
        return reserve.idle.pop()
    if reserve.open >= reserve.most:
        waiter = reserve.loop.create_future()
        reserve.waiters.append(waiter)
        try:
            await asyncio.wait((waiter,), timeout=QUICK_PATIENCE)
            if not waiter.done():
                raise _Fallback
            conn = waiter.result()
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                _pass_on(reserve, waiter.result())  # given to it as it gave up
            else:
                waiter.cancel()
                if waiter in reserve.waiters:
                    reserve.waiters.remove(waiter)
            raise
        if conn is not None:
            return conn
        # (None: one was let go, this call may open another)
    reserve.open += 1
    try:
        pool: Any = client.connection_pool  # type: ignore[union-attr]
        return await _clients.checkout(pool, _clients.library_of(type(client)))
    except BaseException as exc:
        _let_go(reserve)
        if retries and _clients.connection_fault(exc):
            raise _Fallback from exc
        raise


def _give(reserve: _Reserve, conn: Any) -> None:
    """Give a connection of the quick path back: to the first waiting call, if any."""
    while reserve.waiters:
        waiter = reserve.waiters.popleft()
        if not waiter.done():
            waiter.set_result(conn)
            return
    reserve.idle.append(conn)


def _wake_one(reserve: _Reserve) -> None:
    """A connection was just put with the idle ones: given to the first
    waiting call instead, if any."""
    while reserve.waiters and reserve.idle:
        waiter = reserve.waiters.popleft()
        if not waiter.done():
            waiter.set_result(reserve.idle.pop())
            return


def _pass_on(reserve: _Reserve, conn: Any | None) -> None:
    """What a cancelled waiter was given: a connection (given back), or the
    leave to open one (passed to the next waiter)."""
    if conn is not None:
        _give(reserve, conn)
    else:
        reserve.open += 1
        _let_go(reserve)


def _let_go(reserve: _Reserve) -> None:
    """One connection of the quick path fewer: the first waiting call may open one."""
    reserve.open -= 1
    while reserve.waiters:
        waiter = reserve.waiters.popleft()
        if not waiter.done():
            waiter.set_result(None)
            return


async def _discard(client: Client, reserve: _Reserve, conn: Any) -> None:
    """Close a connection of the quick path whose call failed or was
    cancelled, and keep it (it connects again at its next use); if the close
    itself is cancelled, the connection is let go instead (it may still have
    a reply due)."""
    try:
        await conn.disconnect(nowait=True)
    finally:
        if getattr(conn, "is_connected", True):
            _let_go(reserve)
        else:
            _give(reserve, conn)


def _node_reserve(client: Client, step: Eval) -> tuple[Any, _Reserve] | None:
    """``None``: an asyncio cluster client's scripts take no quick path (the
    synchronous driver's go on the reserve of the node of their keys' slot)."""
    return None


def _forsake(conns: list[Any], pool: Any) -> None:
    """Give back to ``pool`` idle connections that a quick path (of scripts,
    or of run_each) kept checked out of it in another event loop: they are of
    no use in this one, and each would keep a slot of the pool's
    ``max_connections``. Each is closed (as far as its own loop, maybe
    closed, lets it) and released in a task of this loop."""
    if not conns:
        return
    given = list(conns)

    async def give_back() -> None:
        for conn in given:
            with contextlib.suppress(Exception):  # (its loop closed: it is dropped all the same)
                await conn.disconnect(nowait=True)
            with contextlib.suppress(Exception):
                await pool.release(conn)

    task = asyncio.ensure_future(give_back())
    _forsaken.add(task)
    task.add_done_callback(_forsaken.discard)


#: The tasks of :func:`_forsake` (kept referenced until done).
_forsaken: set[asyncio.Task[None]] = set()
