"""What a client of the synchronous flavour needs that an asyncio one does
not (the rest of :mod:`.state` is generated from one source for both): the
owner id of a thread, numbers packed as text, a Redis Cluster node's own
client, renewals in one pipeline per node.

Written by hand in both flavours, with the same names (``_async/flavour.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..._errors import WrongTypeError
from ..._protocol import Pipeline
from .. import _clients, _identity
from .._watchbook import renewal_reply
from . import late
from .statebase import _State

#: The clients this flavour drives (see :func:`_clients.check`).
ASYNCIO = False

_local = threading.local()


def current_owner() -> str:
    """The calling thread's owner id (stable for the thread's life, new after fork)."""
    number = getattr(_local, "number", None)
    if number is None:
        number = _local.number = _identity.next_number()
    return _identity.owner_of(number)


def prepare(client: Any, pool: Any) -> None:
    """Make ``client``'s connections pack numbers as text (see
    :func:`_clients.numbers_as_text`), before the pool's first connection."""
    _clients.pool_numbers_as_text(pool)
    if (single := getattr(client, "connection", None)) is not None:
        _clients.numbers_as_text(single)  # (a single_connection_client's)


def node_pool(client: Any, state: _State, node: Any) -> Any:
    """The connection pool of the client the cluster client keeps for ``node``."""
    return _clients.node_client(client, node).connection_pool


def _master_client(client: Any, state: _State, node: Any) -> Any:
    """The client of the cluster node ``node`` (a slot's master; see
    :func:`.send._on_master`)."""
    return _clients.node_client(client, node)


def _renew_each(ref: Callable[[], Any], leases: list[Any]) -> list[Any]:
    """A Redis Cluster client's watchdog renewals, grouped by node: one pipelined
    round trip per master owning some of the leases' slots. A renewal that fails
    there (``MOVED`` / ``ASK`` while its slot moves, a node down) is sent once
    more on its own through the cluster client, which follows redirections.
    Returns one reply per lease (``None`` for a lease to retry)."""
    client = ref()
    if client is None:
        return [None] * len(leases)
    steps = [lease._renewal() for lease in leases]
    raws: list[Any] = [None] * len(steps)
    shard = late.state(client).sharded
    for node, indexes in _clients.by_node(client, steps):
        try:
            sent = late.pipeline(
                _clients.node_client(client, node),
                Pipeline(tuple(steps[i] for i in indexes)),
                shard=shard,
            )
        except Exception as exc:
            sent = [exc] * len(indexes)
        for i, raw in zip(indexes, sent, strict=True):
            raws[i] = raw
    for i, raw in enumerate(raws):
        if raw is None or (isinstance(raw, Exception) and not isinstance(raw, WrongTypeError)):
            raws[i] = late.one(client, steps[i])
    return [renewal_reply(raw) for raw in raws]
