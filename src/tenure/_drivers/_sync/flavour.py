# GENERATED from _async/flavour.py by scripts/unasync.py: do not edit.
"""What a client does its own way in each flavour, through the runtime's
names (:mod:`.._runtime_async` / ``_runtime_sync``): the owner id of a task
or thread, a Redis Cluster node's master client, cluster renewals.

Part of the driver's single source: ``_sync/flavour.py`` is generated from
this file by ``scripts/unasync.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..._errors import WrongTypeError
from .. import _identity
from .._runtime_sync import node_client, owner_number, send_by_node
from .._watchbook import renewal_reply
from . import late
from .statebase import _State


def current_owner() -> str:
    """The calling task's or thread's owner id (stable for its life, new
    after fork).

    Raises:
        RuntimeError: (asyncio) called outside a task.
    """
    return _identity.owner_of(owner_number())


def _master_client(client: Any, state: _State, node: Any) -> Any:
    """A client of the cluster node ``node`` (a slot's master; see
    :func:`.send._on_master` and the runtime's ``node_client``)."""
    return node_client(client, state.hub._library, state.pools, node)


def _renew_each(ref: Callable[[], Any], leases: list[Any]) -> list[Any]:
    """A Redis Cluster client's watchdog renewals, grouped by node: one round
    trip to each master owning some of the leases' slots (the runtime's
    ``send_by_node``). A renewal that fails there (``NOSCRIPT``, ``MOVED`` /
    ``ASK`` while its slot moves, a node down) is sent once more on its own
    through the cluster client, which loads the script and follows
    redirections. Returns one reply per lease (``None`` for a lease to retry)."""
    client = ref()
    if client is None:
        return [None] * len(leases)
    steps = [lease._renewal() for lease in leases]
    raws = send_by_node(client, steps, late.state(client).sharded, late.pipeline)
    replies: list[Any] = []
    for step, raw in zip(steps, raws, strict=True):
        if raw is None or (isinstance(raw, Exception) and not isinstance(raw, WrongTypeError)):
            raw = late.one(client, step)
        replies.append(renewal_reply(raw))
    return replies
