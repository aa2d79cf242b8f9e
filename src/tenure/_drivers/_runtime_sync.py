"""What the synchronous driver does differently from the asyncio one: threads,
and waits no interrupt can leave locked.

The driver's logic is written once, in ``_async/``; ``_sync/`` is generated
from it (``scripts/unasync.py``) and imports from here what
``_runtime_async`` gives the asyncio flavour, under the same names: the
events and the gate, the waits with a timeout, the current runner (a thread),
the guard that tells an interrupt from a cancellation, ``sleep``, and what a
client of each library does its own way in this flavour (a Redis Cluster
node's clients, renewals in one pipeline per node, numbers packed as text).

The invariant of every wait here: no lock is held between two calls in the
main thread, where a signal handler may raise (so no ``threading.Condition``
and no ``threading.Event``: see :class:`SafeEvent` and :class:`_Wake`).
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from .._protocol import Eval, Pipeline
from . import _clients, _identity, _internals

__all__ = ["Event", "EVENT_RECHECK", "READ_POLL", "SafeEvent", "new_event", "sleep"]

#: The clients this flavour drives (see :func:`_clients.check`).
ASYNCIO = False

#: Whether a thread waiting on a channel reads the hub's connection itself in
#: the reader's place: yes (see the hub's ``wait``).
READS_ITS_WAKE = True

#: How often a hub's reader thread looks up from its pub/sub connection (to
#: unsubscribe idle channels, and to stop at exit), seconds.
READ_POLL = 0.25

# Set at interpreter exit: background threads stop, so that none is frozen
# holding a connection pool's lock while the interpreter tears the pool down
# (which would hang the exit).
_exiting = threading.Event()
_threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def _stop_background_threads() -> None:
    _exiting.set()
    deadline = time.monotonic() + READ_POLL + 1.0
    for thread in list(_threads):
        thread.join(max(0.0, deadline - time.monotonic()))


atexit.register(_stop_background_threads)


class _Wake:
    """A wake-up for the one thread that waits on it (a channel's: its
    process's contender, or the plan of a channel of its own; a watchdog's):
    set by any thread; a wait returns at once, consuming it, if it is set.

    A bare lock, held while not set: setting it is one release, which the
    waiting thread's acquire returns from, without ``threading.Event``'s
    condition variable (whose own lock the waking thread holds while it
    notifies, so the woken thread may block a second time on it)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def set(self) -> None:
        """Wake the waiter (or its next wait); idempotent."""
        with contextlib.suppress(RuntimeError):  # set already
            self._lock.release()

    def is_set(self) -> bool:
        """Whether it is set (and not consumed yet)."""
        return not self._lock.locked()

    def wait(self, timeout: float | None) -> bool:
        """Wait until set or ``timeout`` seconds pass (``None``: no limit); return
        whether it was set, and unset it."""
        if timeout is None:
            return self._lock.acquire()
        return self._lock.acquire(timeout=min(max(0.0, timeout), threading.TIMEOUT_MAX))


#: How often a thread waiting on a :class:`SafeEvent` reads its flag again
#: (in case the ``set`` that raised it was interrupted before it woke the
#: thread), seconds.
EVENT_RECHECK = 1.0


class SafeEvent(threading.Event):
    """A ``threading.Event`` that no interrupt leaves locked: any thread may set
    or clear it, several may wait on it.

    ``threading.Event`` guards its flag with a ``Condition`` that Python code
    enters by calling its lock's acquire; a signal handler that raises as that
    call returns (Python runs handlers there) leaves the lock held with no
    ``with`` block to give it back, and every later ``set``, ``clear`` or
    ``wait`` then blocks for good. Here no lock is held between two calls:
    the flag is one attribute, and each waiting thread waits on a
    :class:`_Wake` of its own, registered before it reads the flag again,
    which :meth:`set` sets after it sets the flag (so no wake is missed). An
    interrupt leaves at most a stale registration, which a later ``set`` sets
    to no effect; a ``set`` cut short by one before it woke every waiter
    still wakes them within :data:`EVENT_RECHECK` (they read the flag again
    that often)."""

    def __init__(self) -> None:  # (no Condition: see the class)
        self._flag = False
        self._waiters: list[_Wake] = []

    def _at_fork_reinit(self) -> None:
        self._waiters = []

    def is_set(self) -> bool:
        """Whether it is set."""
        return self._flag

    def set(self) -> None:
        """Set it and wake every thread waiting."""
        self._flag = True
        for wake in self._waiters.copy():
            wake.set()

    def clear(self) -> None:
        """Unset it."""
        self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until it is set or ``timeout`` seconds pass (``None``: no limit);
        return whether it was set (it stays set)."""
        if self._flag:
            return True
        wake = _Wake()
        waiters = self._waiters
        waiters.append(wake)
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._flag:
                left = EVENT_RECHECK if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return False
                if wake.wait(min(left, EVENT_RECHECK)):
                    return True
            return True
        finally:
            with contextlib.suppress(ValueError):
                waiters.remove(wake)


#: The events of the flavour (a plan's own subscription, the facade's).
Event: TypeAlias = threading.Event


def new_event() -> threading.Event:
    """An event for the facade (a lease's ``lost``, a Redlock waiter's wake)
    and for a plan's own subscription: a :class:`SafeEvent`, which no
    interrupt leaves locked."""
    return SafeEvent()


def wait_set(event: threading.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass (``None``: no
    limit); return whether it was set (it stays set)."""
    return event.wait(timeout)


def new_wake() -> _Wake:
    """A wake-up for the one thread that waits on it (see :class:`_Wake`)."""
    return _Wake()


def wake_from_anywhere(wake: _Wake) -> None:
    """Set ``wake`` from any thread, or from a weak reference's callback."""
    wake.set()


def wait_wake(wake: _Wake, timeout: float | None) -> bool:
    """Wait on a wake-up (see :class:`_Wake`; ``None``: no limit); return
    whether it was set, consuming it."""
    return wake.wait(timeout)


def new_gate() -> threading.RLock:
    """A channel's gate (the process's contender). Reentrant only so that an
    interrupted acquire can tell whether its thread holds it (see :func:`owns`)."""
    return threading.RLock()


def owns(gate: Any) -> bool:
    """Whether the calling thread holds ``gate``: an interrupt between the
    gate's acquire and the store of its result leaves the thread holding it
    unrecorded, and the drive's clean-up gives it back."""
    return bool(gate._is_owned())


def acquire(gate: Any, timeout: float | None) -> bool:
    """Take ``gate`` within ``timeout`` seconds (``None``: no limit); whether it was taken."""
    if timeout is None:
        return bool(gate.acquire())
    return bool(gate.acquire(timeout=max(0.0, timeout)))


def runner() -> int:
    """What runs the current call: the thread (a pin of ``one_connection`` is
    used by its own runner only)."""
    return threading.get_ident()


def cancel_requests() -> int:
    """A thread has no pending cancellations to count (see the asyncio twin)."""
    return 0


def swallowed(asked: int) -> BaseException | None:
    """Nothing a thread's call can swallow (see the asyncio twin)."""
    return None


#: A lock one call holds across its I/O (the first call's server probe).
Lock: TypeAlias = threading.Lock


def new_lock() -> threading.Lock:
    """A lock one call holds across its I/O (see :data:`Lock`)."""
    return threading.Lock()


def new_mutex() -> threading.Lock:
    """A mutex of the driver's bookkeeping (a hub's, a watchdog's): a bare
    lock, entered only by ``with`` (which no interrupt leaves held)."""
    return threading.Lock()


def spawn(
    target: Callable[..., None], name: str, *args: Any, uses_pool: bool = True
) -> threading.Thread:
    """Run ``target(*args)`` in the background: a daemon thread, waited for
    at exit if it ``uses_pool`` (see ``_exiting``)."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    if uses_pool:
        _threads.add(thread)
    thread.start()
    return thread


def exiting() -> bool:
    """Whether the interpreter exits: background threads stop (see ``_exiting``)."""
    return _exiting.is_set()


def sleep(seconds: float) -> None:
    """Sleep ``seconds``."""
    time.sleep(seconds)


#: Held while a client's driver state (or a cluster node's hub, or a
#: quick path's reserve) is made; a bare lock, entered only by ``with``.
states_mutex = threading.Lock()


def home() -> object:
    """What a client's driver state and its pool's reserves belong to: the
    process (``None``; a fork's start afresh, by their generation)."""
    return None


def ended(place: Any) -> bool:
    """Whether the home ``place`` (see :func:`home`) is gone for good: never
    (a forked parent's state is told by its generation)."""
    return False


#: Whether a cluster client's scripts take the quick path of the node that
#: owns their slot (on that node's pool's reserve): yes.
NODE_QUICK_PATH = True


def close(conn: Any) -> None:
    """Close a connection of the quick path (it connects again at its next use)."""
    conn.disconnect()


def closed(conn: Any) -> bool:
    """Whether :func:`close` closed ``conn`` (not interrupted before it did)."""
    return _internals.sock_of(conn) is None


def let_go(pool: Any, conn: Any) -> None:
    """A connection of the quick path whose close was interrupted: given back
    to ``pool`` (whose checkout tests a connection for unread data)."""
    with contextlib.suppress(Exception):
        pool.release(conn)


def forsake(conns: list[Any], pool: Any) -> None:
    """Nothing: a process has one home (see :func:`home`), whose reserves are
    never forsaken (the asyncio twin gives back another loop's)."""


def finish(target: Callable[..., None], *args: Any) -> None:
    """Run ``target(*args)`` in the calling thread (the asyncio twin runs it
    in a task of its own, which the caller's cancellation does not stop)."""
    target(*args)


def close_pubsub(pubsub: Any) -> None:
    """Close a hub's PubSub."""
    pubsub.close()


_local = threading.local()


def owner_number() -> int:
    """The calling thread's number (stable for the thread's life; see
    :func:`_identity.owner_of`)."""
    number: int | None = getattr(_local, "number", None)
    if number is None:
        number = _local.number = _identity.next_number()
    return number


def prepare(client: Any, pool: Any) -> None:
    """Make ``client``'s connections pack numbers as text (see
    :func:`_clients.numbers_as_text`), before the pool's first connection."""
    _clients.pool_numbers_as_text(pool)
    if (single := getattr(client, "connection", None)) is not None:
        _clients.numbers_as_text(single)  # (a single_connection_client's)


def numbers_as_text(conn: Any) -> None:
    """Make ``conn`` pack numbers as text (see :func:`_clients.numbers_as_text`)."""
    _clients.numbers_as_text(conn)


def node_pool(client: Any, library: Any, node: Any) -> Any:
    """The connection pool of the client the cluster client keeps for ``node``."""
    return _clients.node_client(client, node).connection_pool


def node_client(client: Any, library: Any, pools: dict[Any, Any], node: Any) -> Any:
    """The client the cluster client keeps for its node ``node`` (a slot's master)."""
    return _clients.node_client(client, node)


def send_by_node(
    client: Any, steps: Sequence[Eval], shard: bool, pipeline: Callable[..., Any]
) -> list[Any]:
    """``steps`` (scripts) sent to the masters owning their slots, by
    ``pipeline`` (the driver's), in one round trip per master, on the client
    the cluster ``client`` keeps for it: one reply or error per step, ``None``
    for a step not sent."""
    raws: list[Any] = [None] * len(steps)
    for node, indexes in _clients.by_node(client, steps):
        try:
            sent = pipeline(
                _clients.node_client(client, node),
                Pipeline(tuple(steps[i] for i in indexes)),
                shard=shard,
            )
        except Exception as exc:
            sent = [exc] * len(indexes)
        for i, raw in zip(indexes, sent, strict=True):
            raws[i] = raw
    return raws


class ShardedPubSub:
    """Nothing to add: valkey-py's synchronous PubSub has sharded pub/sub
    (its asyncio one lacks it: see the asyncio twin)."""
