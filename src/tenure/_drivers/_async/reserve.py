"""The quick paths' reserves: the connections the driver keeps checked out
of a client's pool, one reserve per pool and use (and, in the asyncio
flavour, per event loop: see the runtime's :func:`home`): the scripts'
(taken, given back, waited for when all are busy, closed when a call fails)
and ``run_each``'s (see :mod:`.fanout`: it keeps some with replies due).

Part of the driver's single source: ``_sync/reserve.py`` is generated from
this file by ``scripts/unasync.py``. A call waiting for a connection waits on
a wake of its own (the runtime's :func:`new_wake`), under a mutex no
interrupt leaves held; a connection given back goes with the idle ones and
wakes the first waiting call, which looks again (it is never handed to a
call, so an interrupt of the waiter or of the giver loses none). The calls
that use the reserve are in :mod:`.send`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..._protocol import Eval
from .. import _clients, _identity
from .._clients import Fallback
from .._runtime_async import (
    NODE_QUICK_PATH,
    close,
    closed,
    forsake,
    home,
    let_go,
    new_mutex,
    new_wake,
    states_mutex,
    wait_wake,
)

if TYPE_CHECKING:
    from .state import Client


class _Reserve:
    """A quick path's reserve: the connections it keeps checked out of one
    pool in one home (event loop, or process), shared by every client on the
    pool: a client made per request on a shared pool and dropped leaves them
    to the next one (held by each client, they would be lost with it, slots
    of the pool never given back). Kept on the pool itself (see
    :func:`_clients.store_on`), one per use: the scripts' (``"reserve"``,
    see :func:`.send._quick`) and ``run_each``'s (``"fan"``, see
    :mod:`.fanout`)."""

    def __init__(self, generation: int, loop: Any, most: int) -> None:
        self.generation = generation
        #: the runtime's home it belongs to (see :func:`home`)
        self.loop = loop
        #: how many it may hold (see _clients.quick_connections, _clients.pool_share)
        self.most = most
        #: the idle ones, and how many it holds in all (idle, owing replies, in
        #: use or being checked out)
        self.idle: list[Any] = []
        self.open = 0
        #: guards the counts and lists (the fan-out's: all of them): entered only
        #: by ``with`` (which no interrupt leaves held)
        self.mutex: Any = new_mutex()
        #: the wakes of the calls waiting for an idle one, first come first woken
        #: (the scripts')
        self.waiting: list[Any] = []
        #: those left with replies still due (run_each's: a round that stopped
        #: once it had enough): ``(connection, replies due)``, taken first, the
        #: next call's commands written after the due ones
        self.owed: list[tuple[Any, int]] = []
        #: whether one is being checked out in the background (run_each's)
        self.connecting = False


#: The most connections run_each's quick path keeps checked out of a pool
#: (in a loop) (idle, owing replies or in use; at most a quarter of the
#: pool: see :func:`_clients.pool_share`).
SPARE_CONNECTIONS = 8


def _reserve_for(client: Client, use: str, most: int) -> _Reserve | None:
    """The reserve for ``use`` (``"reserve"``: the scripts'; ``"fan"``:
    run_each's) of ``client``'s pool in the current home, holding at most
    ``most`` connections, or ``None`` when the client may take none (``most``
    is 0: see :func:`_clients.quick_connections`, :func:`_clients.pool_share`).
    The connections of the pool's reserve of another event loop are given back
    to it (see :func:`forsake`). Called with ``states_mutex`` held."""
    if not most:
        return None
    pool = client.connection_pool  # type: ignore[union-attr]
    here = home()
    reserve: _Reserve | None = _clients.stored_on(pool, use)
    # (a fork's pool starts afresh)
    if reserve is None or reserve.generation != _identity.generation() or reserve.loop is not here:
        if reserve is not None and reserve.generation == _identity.generation():
            forsake([*reserve.idle, *(conn for conn, _ in reserve.owed)], pool)
            reserve.idle = []
            reserve.owed = []
        reserve = _Reserve(_identity.generation(), here, most)
        if not _clients.store_on(pool, use, reserve):  # (made by the first client)
            return None
    return reserve


#: The longest a script call waits for a connection of the quick path when
#: all it may keep are busy (a stalled server, say), in seconds: it then
#: takes the ordinary path, through the client.
QUICK_PATIENCE = 1.0


async def _take(client: Client, reserve: _Reserve, retries: bool) -> Any:
    """An idle connection of the quick path; a new one from the pool while
    fewer than it may keep are open; else the first one given back within
    :data:`QUICK_PATIENCE` (:class:`Fallback` after it)."""
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
                raise Fallback
            wake = new_wake()
            reserve.waiting.append(wake)
        woken = False
        try:
            woken = await wait_wake(wake, QUICK_PATIENCE)
        finally:
            with reserve.mutex:
                if wake in reserve.waiting:
                    reserve.waiting.remove(wake)
                elif not woken:  # woken as its wait ended otherwise (a timeout,
                    _notify(reserve)  # an interrupt, a cancellation): the wake goes on
        waited = not woken
    try:
        pool: Any = client.connection_pool  # type: ignore[union-attr]
        return await _clients.checkout(pool, _clients.library_of(type(client)))
    except BaseException as exc:
        with reserve.mutex:
            reserve.open -= 1
            _notify(reserve)
        if retries and _clients.connection_fault(exc):
            raise Fallback from exc
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


async def _discard(client: Client, reserve: _Reserve, conn: Any) -> None:
    """A connection of the quick path whose call failed or was interrupted:
    closed (a reply may still be due on it) and kept (it connects again at
    its next use); if the close itself is interrupted, let go instead (see
    the runtime's :func:`let_go`) and the reserve holds one fewer."""
    try:
        await close(conn)
    finally:
        if closed(conn):
            _give(reserve, conn)
        else:
            let_go(client.connection_pool, conn)  # type: ignore[union-attr]
            with reserve.mutex:
                reserve.open -= 1
                _notify(reserve)


def _node_reserve(client: Client, step: Eval) -> tuple[Any, _Reserve] | None:
    """The client of the cluster node that owns ``step``'s first key's slot
    (in the cluster client's slot map) and the reserve of that node's own
    pool, for :func:`.send._node_quick`; ``None`` when it takes none (always,
    where the flavour's cluster scripts take no quick path: see
    :data:`NODE_QUICK_PATH`), or when the node's client could not be made (a
    connection fault)."""
    if not NODE_QUICK_PATH:
        return None
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
        with states_mutex:
            reserve = _reserve_for(node_client, "reserve", _clients.quick_connections(node_client))
    return None if reserve is None else (node_client, reserve)
