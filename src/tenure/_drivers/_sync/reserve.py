"""The quick path's reserve: the connections the driver keeps checked out of
a client's pool for its script calls (taken, given back, waited for when all
are busy, closed when a call fails), one reserve per pool.

Written by hand for the synchronous flavour (bare locks and :class:`_Wake`s,
which no interrupt leaves held); the asyncio flavour's ``_async/reserve.py``
is written by hand too (futures), with the same names. The calls that use
the reserve are in :mod:`.send` (generated from one source for both).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..._protocol import Eval
from .. import _clients, _identity, _internals
from .._runtime_sync import _states_mutex, _Wake

if TYPE_CHECKING:
    from .state import Client


class _Fallback(Exception):
    """A call the quick path leaves to the ordinary one (see :func:`_quick`)."""


@dataclass(eq=False)
class _Reserve:
    """The reserve of the scripts' quick path: the connections it keeps
    checked out of one pool (see :func:`.send._quick`), shared by every
    client on the pool: a client made per request on a shared pool and
    dropped leaves them to the next one (held by each client, they would be
    lost with it, slots of the pool never given back). Kept on the pool
    itself (see :func:`_clients.store_on`)."""

    generation: int
    #: how many it may hold (see _clients.quick_connections)
    most: int
    #: the idle ones, and how many it holds in all
    idle: list[Any] = field(default_factory=list)
    open: int = 0
    #: guards ``open`` and ``waiting``: a bare lock, entered only by ``with``
    #: (which no interrupt leaves held; a ``threading.Condition`` may be)
    mutex: threading.Lock = field(default_factory=threading.Lock)
    #: the wakes of the calls waiting for an idle one, first come first
    waiting: list[_Wake] = field(default_factory=list)


def _reserve_for(client: Client) -> _Reserve | None:
    """The quick path's reserve of ``client``'s pool, or ``None`` when
    the client may take none (see :func:`_clients.quick_connections`).
    Called with ``_states_mutex`` held."""
    most = _clients.quick_connections(client)
    if not most:
        return None
    pool = client.connection_pool  # type: ignore[union-attr]
    reserve: _Reserve | None = _clients.stored_on(pool, "reserve")
    # (a fork's pool starts afresh)
    if reserve is None or reserve.generation != _identity.generation():
        reserve = _Reserve(_identity.generation(), most)
        if not _clients.store_on(pool, "reserve", reserve):  # (made by the first client)
            return None
    return reserve


#: The longest a script call waits for a connection of the quick path when
#: all it may keep are busy (a stalled server, say), in seconds: it then
#: takes the ordinary path, through the client.
QUICK_PATIENCE = 1.0


def _take(client: Client, reserve: _Reserve, retries: bool) -> Any:
    """An idle connection of the quick path; a new one from the pool while
    fewer than it may keep are open; else the first one given back within
    :data:`QUICK_PATIENCE` (:class:`_Fallback` after it)."""
    try:
        return reserve.idle.pop()
    except IndexError:
        pass
    waited = False
    while True:
        with reserve.mutex:
            if reserve.idle:
                return reserve.idle.pop()
            if reserve.open < reserve.most:
                reserve.open += 1
                break
            if waited:  # (QUICK_PATIENCE passed)
                raise _Fallback
            wake = _Wake()
            reserve.waiting.append(wake)
        woken = False
        try:
            woken = wake.wait(QUICK_PATIENCE)
        finally:
            with reserve.mutex:
                if wake in reserve.waiting:
                    reserve.waiting.remove(wake)
                elif not woken:  # woken as its wait ended otherwise (a timeout,
                    _notify(reserve)  # an interrupt): the wake goes to the next one
        waited = not woken
    try:
        return _clients.checkout(client.connection_pool, _clients.library_of(type(client)))  # type: ignore[union-attr]
    except BaseException as exc:
        with reserve.mutex:
            reserve.open -= 1
            _notify(reserve)
        if retries and _clients.connection_fault(exc):
            raise _Fallback from exc
        raise


def _give(reserve: _Reserve, conn: Any) -> None:
    """Give a connection of the quick path back (to a waiting call, if any).
    (A call whose connection is sound appends it itself, with no call before
    the append: an interrupt at this function's entry would leave the
    connection counted as open and never given back, one fewer for every
    later call, until all were gone and each call waited QUICK_PATIENCE.)"""
    reserve.idle.append(conn)
    _wake_one(reserve)


def _wake_one(reserve: _Reserve) -> None:
    """A connection was given back: wake a call that waits for one, if any (a
    wake-up lost to an interrupt costs that call at most QUICK_PATIENCE: it
    looks at the idle connections again then)."""
    if reserve.waiting:
        with reserve.mutex:
            _notify(reserve)


def _notify(reserve: _Reserve) -> None:
    """Wake the first call waiting for a connection of the quick path, if
    any. Called holding ``reserve.mutex``."""
    if reserve.waiting:
        reserve.waiting.pop(0).set()


def _discard(client: Client, reserve: _Reserve, conn: Any) -> None:
    """A connection of the quick path whose call failed or was interrupted:
    closed (a reply may still be due on it) and kept; if the close itself is
    interrupted, given back to the pool instead (whose checkout tests a
    connection for unread data) and the reserve holds one fewer."""
    try:
        conn.disconnect()
    finally:
        if _internals.sock_of(conn) is None:
            _give(reserve, conn)
        else:
            with contextlib.suppress(Exception):
                client.connection_pool.release(conn)  # type: ignore[union-attr]
            with reserve.mutex:
                reserve.open -= 1
                _notify(reserve)


def _node_reserve(client: Client, step: Eval) -> tuple[Any, _Reserve] | None:
    """The client of the cluster node that owns ``step``'s first key's slot
    (in the cluster client's slot map) and the reserve of that node's own
    pool, for :func:`.send._node_quick`; ``None`` when it takes none, or
    when the node's client could not be made (a connection fault)."""
    cluster: Any = client
    try:
        node_client = _clients.node_client(cluster, cluster.get_node_from_key(step.keys[0]))
        pool = node_client.connection_pool
    except Exception as exc:
        if _clients.connection_fault(exc):
            return None
        raise  # (an interrupt of any class: never swallowed)
    reserve: _Reserve | None = _clients.stored_on(pool, "reserve")
    if reserve is None or reserve.generation != _identity.generation():
        with _states_mutex:
            reserve = _reserve_for(node_client)
    return None if reserve is None else (node_client, reserve)
