"""Pinned blocks: :func:`one_connection` keeps one connection of the quick
path's reserve for a runner's block of calls, so a grant, its ``WAIT`` and its
give-back reach the same server.

Part of the driver's single source: ``_sync/pins.py`` is generated from this
file by ``scripts/unasync.py``.
"""

from __future__ import annotations

import collections.abc
import contextlib
import contextvars
from typing import Any

from .. import _clients
from .._runtime_async import runner
from .reserve import _give, _Reserve
from .state import Client, _state


class _Pin:
    """The connection of the quick path (of ``reserve``) that one runner's
    (task's or thread's) block of calls (see :func:`one_connection`) keeps
    checked out between its calls: the one that answered the block's last
    call, if any."""

    def __init__(self, reserve: _Reserve, runner: object) -> None:
        self.reserve = reserve
        #: the runner of the block (see the runtime's ``runner``)
        self.runner = runner
        self.conn: Any = None


#: The pin of the running block of :func:`one_connection`, if any (a task
#: started inside the block sees it too, and does not use it: see :func:`_pin_for`).
_pins: contextvars.ContextVar[_Pin | None] = contextvars.ContextVar("tenure_pin", default=None)


@contextlib.asynccontextmanager
async def one_connection(
    client: Client, wanted: bool = True
) -> collections.abc.AsyncIterator[None]:
    """Send this runner's script calls on ``client`` inside the block, and its
    pipelines with ``WAIT``, on one connection: the one that answered the
    block's previous call. So a grant, the ``WAIT`` for its replicas (which
    counts the acknowledgements of *this connection's* writes) and its
    give-back all reach the server that made the grant, even if the client's
    pool has meanwhile learned of another master (a Sentinel failover; the
    old master, still reachable, is then a master no replica follows).

    The connection is one of the quick path's (see :func:`_quick`), kept
    checked out between the block's calls and given back before a step that
    waits (a wake, a contention, a subscription: the next call after it may
    take another) and when the block ends. If it fails, the next call takes
    another. No effect on a cluster client (its pipelines with ``WAIT`` go to
    the master of their slot: see :func:`_on_master`), nor on a client without
    a quick path (each call takes a connection of the pool), nor unless
    ``wanted``.
    """
    reserve = None if not wanted or _clients.is_cluster(type(client)) else _state(client).reserve
    if reserve is None:
        yield
        return
    pin = _Pin(reserve, runner())
    token = _pins.set(pin)
    try:
        yield
    finally:
        _pins.reset(token)
        if pin.conn is not None:
            _give(reserve, _unpin(pin))


def _pin_for(client: Client) -> _Pin | None:
    """The pin of this runner's block of :func:`one_connection` on ``client``'s
    pool, if one runs."""
    pin = _pins.get()
    if pin is None or pin.runner != runner():
        return None
    return pin if _state(client).reserve is pin.reserve else None


def _unpin(pin: _Pin) -> Any:
    """The pinned connection, no longer pinned (the caller gives it back or keeps it)."""
    conn, pin.conn = pin.conn, None
    return conn


def _repin(pin: _Pin, conn: Any) -> None:
    """A connection of the quick path whose call in the block is done: pinned
    (the block's next call goes on it)."""
    if pin.conn is not None:  # (not expected: one call at a time)
        _give(pin.reserve, _unpin(pin))
    pin.conn = conn


def _let_pin_go() -> None:
    """Give back the connection pinned by this runner's block of
    :func:`one_connection`, if any (the block waits: it keeps none meanwhile)."""
    pin = _pins.get()
    if pin is not None and pin.conn is not None and pin.runner == runner():
        _give(pin.reserve, _unpin(pin))
