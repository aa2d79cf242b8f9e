"""What a client of the asyncio flavour needs that a synchronous one does not
(the rest of :mod:`.state` is one source for both): the owner id of a task,
a Redis Cluster node's pools of their own, renewals in one cluster pipeline.

Written by hand in both flavours, with the same names (``_sync/flavour.py``).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any

from ..._errors import WrongTypeError
from ..._protocol import parse_reply
from .. import _clients, _identity
from .._watchbook import renewal_reply
from . import late
from .statebase import _State

#: The clients this flavour drives (see :func:`_clients.check`).
ASYNCIO = True

_task_numbers: weakref.WeakKeyDictionary[asyncio.Task[Any], int] = weakref.WeakKeyDictionary()


def current_owner() -> str:
    """The calling task's owner id (stable for the task's life, new after fork).

    Raises:
        RuntimeError: called outside an asyncio task.
    """
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("tenure's async API must be used from inside an asyncio task")
    number = _task_numbers.get(task)
    if number is None:
        number = _task_numbers[task] = _identity.next_number()
    return _identity.owner_of(number)


def prepare(client: Any, pool: Any) -> None:
    """Nothing: an asyncio connection packs numbers in Python (see the twin)."""


def node_pool(client: Any, state: _State, node: Any) -> Any:
    """A connection pool of its own to the cluster node ``node`` (for its hub)."""
    return state.hub._library.pool(connection_class=node.connection_class, **node.connection_kwargs)


def _master_client(client: Any, state: _State, node: Any) -> Any:
    """A client of the cluster node ``node`` (a slot's master), on a connection
    pool of its own kept per node in ``state`` (see :func:`.send._on_master`)."""
    where = (str(node.host), int(node.port))
    pool = state.pools.get(where)
    if pool is None:
        pool = state.pools[where] = node_pool(client, state, node)
    return state.hub._library.client(connection_pool=pool)


async def _renew_each(ref: Callable[[], Any], leases: list[Any]) -> list[Any]:
    """A Redis Cluster client's watchdog renewals, grouped by node: one cluster
    pipeline, which sends one round trip to each master owning some of the
    leases' slots. A renewal that fails there (``NOSCRIPT``, ``MOVED`` / ``ASK``
    while its slot moves, a node down) is sent once more on its own through the
    cluster client, which loads the script and follows redirections. Returns
    one reply per lease (``None`` for a lease to retry)."""
    client = ref()
    if client is None:
        return [None] * len(leases)
    steps = [lease._renewal() for lease in leases]
    shard = late.state(client).sharded
    raws: list[Any]
    try:
        async with client.pipeline() as pipe:
            for step in steps:
                pipe.execute_command("EVALSHA", *_clients.evalsha_args(step, shard))
            raws = list(await pipe.execute(raise_on_error=False))
    except Exception:
        raws = [None] * len(steps)
    replies: list[Any] = []
    for step, raw in zip(steps, raws, strict=True):
        if raw is not None and not isinstance(raw, Exception):
            try:
                raw = parse_reply(step.script, raw)
            except Exception as exc:
                raw = exc
        if raw is None or (isinstance(raw, Exception) and not isinstance(raw, WrongTypeError)):
            raw = await late.one(client, step)
        replies.append(renewal_reply(raw))
    return replies
