"""What the asyncio driver does differently from the synchronous one: tasks,
and ``asyncio`` waits.

The driver's logic is written once, in ``_async/``, which imports these;
``_sync/`` is generated from it (``scripts/unasync.py``) and imports the
same names from ``_runtime_sync``: the events and the gate, the waits with a
timeout, the current runner (a task), the guard that tells an interrupt from
a cancellation (:func:`cancel_requests`, :func:`swallowed`), ``sleep``, and
what a client of each library does its own way in this flavour (a Redis
Cluster node's pools, renewals in one cluster pipeline, valkey-py's missing
sharded pub/sub).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeAlias, TypeVar

from .._protocol import Eval, reply_or_error
from . import _clients, _identity, _internals
from ._hubbook import LINGER

__all__ = ["Event", "new_event", "sleep"]

#: The clients this flavour drives (see :func:`_clients.check`).
ASYNCIO = True

#: Whether a thread waiting on a channel reads the hub's connection itself in
#: the reader's place: no (a task's wake costs no thread hop).
READS_ITS_WAKE = False

#: How long a hub's reader waits for a message before it looks up (to
#: unsubscribe the channels whose linger ended), seconds.
READ_POLL = LINGER

#: The events of the flavour (a plan's own subscription, the facade's).
Event: TypeAlias = asyncio.Event


def new_event() -> asyncio.Event:
    """An event for the facade (a lease's ``lost``, a Redlock waiter's wake)
    and for a plan's own subscription."""
    return asyncio.Event()


async def _within(wait: Callable[[], Awaitable[object]], timeout: float | None) -> bool:
    """Whether ``wait()`` ended within ``timeout`` seconds (``None``: no limit)."""
    try:
        async with asyncio.timeout(timeout):
            await wait()
    except TimeoutError:
        return False
    return True


async def wait_set(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass (``None``: no
    limit); return whether it was set (it stays set)."""
    return await _within(event.wait, timeout)


def new_wake() -> asyncio.Event:
    """A wake-up for the one task that waits on it (a channel's, a watchdog's)."""
    return asyncio.Event()


def wake_from_anywhere(wake: asyncio.Event) -> None:
    """Nothing: an event is set only in its loop's thread, and a weak
    reference's callback may run in any (the task looks again within its
    longest sleep; a lingering task costs no thread)."""


async def wait_wake(wake: asyncio.Event, timeout: float | None) -> bool:
    """Wait on a wake-up (``None``: no limit); return whether it was set, consuming it."""
    woken = await wait_set(wake, timeout)
    wake.clear()
    return woken


def new_gate() -> asyncio.Lock:
    """A channel's gate (the process's contender)."""
    return asyncio.Lock()


def owns(gate: Any) -> bool:
    """``False``: a task cannot hold the gate unrecorded (nothing runs between
    the acquire's return and the store of its result), so the drive's
    clean-up never needs to ask (see the synchronous twin)."""
    return False


async def acquire(gate: asyncio.Lock, timeout: float | None) -> bool:
    """Take ``gate`` within ``timeout`` seconds (``None``: no limit); whether it was taken."""
    return await _within(gate.acquire, None if timeout is None else max(0.0, timeout))


#: A lock one call holds across its I/O (the first call's server probe).
Lock: TypeAlias = asyncio.Lock


def new_lock() -> asyncio.Lock:
    """A lock one call holds across its I/O (see :data:`Lock`)."""
    return asyncio.Lock()


def new_mutex() -> contextlib.nullcontext[None]:
    """A mutex of the driver's bookkeeping: none is needed between two
    ``await``s of one event loop (a ``with`` of it does nothing)."""
    return contextlib.nullcontext()


def spawn(
    target: Callable[..., Coroutine[Any, Any, None]], name: str, *args: Any, uses_pool: bool = True
) -> asyncio.Task[None]:
    """Run ``target(*args)`` in the background: a task of the running loop
    (the caller keeps it referenced)."""
    return asyncio.create_task(target(*args), name=name)


def exiting() -> bool:
    """``False``: a loop's tasks end with the loop."""
    return False


def runner() -> asyncio.Task[Any] | None:
    """What runs the current call: the task (a pin of ``one_connection`` is
    used by its own runner only; a task started inside the block is another)."""
    return asyncio.current_task()


def cancel_requests() -> int:
    """How many cancellations of the current task are pending (0 outside a task)."""
    task = asyncio.current_task()
    return 0 if task is None else task.cancelling()


def swallowed(asked: int) -> asyncio.CancelledError | None:
    """The cancellation that a call begun when :func:`cancel_requests` was
    ``asked`` returned through without raising, if any: redis-py writes each
    command under ``asyncio.wait_for`` (its socket timeout), which on Python
    3.11 returns the result when the cancellation lands just as the write
    completes, so the caller's cancel (or its ``asyncio.timeout``) would be
    lost and the plan would go on waiting. The plan gets it instead, as if it
    had come during the call (it gives back what the call took)."""
    if cancel_requests() > asked:
        return asyncio.CancelledError()
    return None


async def sleep(seconds: float) -> None:
    """Sleep ``seconds``."""
    await asyncio.sleep(seconds)


#: Held while a client's driver state (or a quick path's reserve) is made:
#: nothing, between two ``await``s of one event loop.
states_mutex = contextlib.nullcontext()


def home() -> asyncio.AbstractEventLoop:
    """What a client's driver state and its pool's reserves belong to: the
    running event loop (one of each per loop; see :func:`forsake`)."""
    return asyncio.get_running_loop()


def ended(place: Any) -> bool:
    """Whether the home ``place`` (see :func:`home`) is gone for good: a closed
    event loop (what belongs to it is of no more use)."""
    return bool(place.is_closed())


#: Whether a cluster client's scripts take the quick path of the node that
#: owns their slot: not in the asyncio flavour (they go through the client).
NODE_QUICK_PATH = False


async def close(conn: Any) -> None:
    """Close a connection of the quick path (it connects again at its next use)."""
    await conn.disconnect(nowait=True)


def closed(conn: Any) -> bool:
    """Whether :func:`close` closed ``conn`` (not cancelled before it did)."""
    return not getattr(conn, "is_connected", True)


def let_go(pool: Any, conn: Any) -> None:
    """A connection of the quick path whose close was cancelled: dropped (a
    reply may still be due on it; the pool's slot goes with it)."""


def forsake(conns: list[Any], pool: Any) -> None:
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

    detach(give_back())


T = TypeVar("T")

#: The tasks of :func:`detach`, kept referenced until done.
_detached: set[asyncio.Task[Any]] = set()


def detach(coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """``coroutine`` run in a task of its own, kept referenced until done, its
    error retrieved (the caller may not wait for its result)."""
    task = asyncio.ensure_future(coroutine)
    _detached.add(task)
    task.add_done_callback(_ended)
    return task


def _ended(task: asyncio.Task[Any]) -> None:
    _detached.discard(task)
    if not task.cancelled():
        task.exception()


async def finish(target: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
    """Run ``target(*args)`` to its end even if the caller is cancelled: in a
    task of its own (:func:`detach`; its error is raised to the caller, if
    that still waits for it)."""
    await asyncio.shield(detach(target(*args)))


async def close_pubsub(pubsub: Any) -> None:
    """Close a hub's PubSub (even if the reader is being cancelled)."""
    await asyncio.shield(pubsub.aclose())


_task_numbers: weakref.WeakKeyDictionary[asyncio.Task[Any], int] = weakref.WeakKeyDictionary()


def owner_number() -> int:
    """The calling task's number (stable for the task's life; see
    :func:`_identity.owner_of`).

    Raises:
        RuntimeError: called outside an asyncio task.
    """
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("tenure's async API must be used from inside an asyncio task")
    number = _task_numbers.get(task)
    if number is None:
        number = _task_numbers[task] = _identity.next_number()
    return number


def prepare(client: Any, pool: Any) -> None:
    """Nothing: an asyncio connection packs numbers in Python (see the twin)."""


def numbers_as_text(conn: Any) -> None:
    """Nothing: an asyncio connection packs numbers in Python (see the twin)."""


def node_pool(client: Any, library: Any, node: Any) -> Any:
    """A connection pool of its own to the cluster node ``node`` (for its hub)."""
    return library.pool(connection_class=node.connection_class, **node.connection_kwargs)


def node_client(client: Any, library: Any, pools: dict[Any, Any], node: Any) -> Any:
    """A client of the cluster node ``node`` (a slot's master), on a connection
    pool of its own kept per node in ``pools``."""
    where = (str(node.host), int(node.port))
    pool = pools.get(where)
    if pool is None:
        pool = pools[where] = node_pool(client, library, node)
    return library.client(connection_pool=pool)


async def send_by_node(
    client: Any, steps: Sequence[Eval], shard: bool, pipeline: Callable[..., Awaitable[Any]]
) -> list[Any]:
    """``steps`` (scripts) sent through the cluster ``client`` in one cluster
    pipeline, which sends one round trip to each master owning some of their
    slots; one parsed reply or error per step, ``None`` for every step when
    the pipeline failed (``pipeline``: the synchronous twin's)."""
    try:
        async with client.pipeline() as pipe:
            for step in steps:
                pipe.execute_command("EVALSHA", *_clients.evalsha_args(step, shard))
            raws = list(await pipe.execute(raise_on_error=False))
    except Exception:
        return [None] * len(steps)
    replies: list[Any] = []
    for step, raw in zip(steps, raws, strict=True):
        if raw is not None and not isinstance(raw, Exception):
            raw = reply_or_error(step.script, raw)
        replies.append(raw)
    return replies


class ShardedPubSub:
    """Sharded pub/sub (``SSUBSCRIBE`` / ``SUNSUBSCRIBE``, ``smessage``), mixed into
    valkey-py's asyncio PubSub, which lacks it (valkey-py 6.2; its synchronous
    PubSub has it, as redis-py's both do): what a ``ValkeyCluster`` hub needs,
    with the same attributes as redis-py's (``shard_channels``), subscribed
    again on a new connection."""

    shard_channels: dict[Any, Any]
    pending_unsubscribe_shard_channels: set[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shard_channels = {}
        self.pending_unsubscribe_shard_channels = set()

    async def ssubscribe(self, *channels: Any) -> None:
        pubsub: Any = self
        await pubsub.execute_command("SSUBSCRIBE", *channels)
        new = _internals.normalize_keys(pubsub, dict.fromkeys(channels))
        self.shard_channels.update(new)
        self.pending_unsubscribe_shard_channels.difference_update(new)

    def sunsubscribe(self, *channels: Any) -> Awaitable[Any]:
        pubsub: Any = self
        self.pending_unsubscribe_shard_channels.update(
            _internals.normalize_keys(pubsub, dict.fromkeys(channels))
        )
        sent: Awaitable[Any] = pubsub.execute_command("SUNSUBSCRIBE", *channels)
        return sent

    async def on_connect(self, connection: Any) -> None:
        inner: Any = super()
        await inner.on_connect(connection)
        self.pending_unsubscribe_shard_channels.clear()
        if self.shard_channels:
            pubsub: Any = self
            await pubsub.execute_command("SSUBSCRIBE", *self.shard_channels)

    async def handle_message(self, response: Any, ignore_subscribe_messages: bool = False) -> Any:
        inner: Any = super()
        message = await inner.handle_message(response, ignore_subscribe_messages)
        if isinstance(message, dict) and message.get("type") in ("sunsubscribe", b"sunsubscribe"):
            channel = message["channel"]
            if channel in self.pending_unsubscribe_shard_channels:
                self.pending_unsubscribe_shard_channels.discard(channel)
                self.shard_channels.pop(channel, None)
        return message

    @property
    def subscribed(self) -> bool:
        pubsub: Any = self
        return bool(pubsub.channels or pubsub.patterns or self.shard_channels)
