"""Plans that wait for replicas to acknowledge a new lease (``min_replicas=``).

Redis replicates asynchronously: a lock granted by a master that fails before
its replicas have the write is forgotten by the promoted replica, and another
owner can take it. ``WAIT n timeout`` blocks until ``n`` replicas acknowledged
every write made so far *on this connection*, so the lease's write and the
``WAIT`` must share one connection: the plan sends them as one
:class:`~tenure._protocol.Pipeline` (the write is the lease's renewal, which
rewrites the lease as it stands, so the plan works after any acquire). The
facade runs the acquire, this plan and a failed wait's release inside the
driver's ``one_connection``: that pipeline goes on the connection that made
the grant, so the wait counts the replicas of the server that granted it (a
Sentinel master that was failed over and came back isolated has none) and
the release reaches that server. With
``fsync``, ``WAITAOF 0 n timeout`` (Redis >= 7.2, Valkey) waits instead until
``n`` replicas have written it to their append-only file.

This narrows the window; it does not close it. ``WAIT`` does not make Redis
strongly consistent: a failover can still promote a replica that did not
acknowledge, and an acknowledged write can be lost by a replica that restarts
without persistence (redis.io, ``WAIT`` command).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import (
    InvalidArgument,
    NotReplicatedError,
    PermissionDenied,
    UnsupportedServer,
)
from .._protocol import Command, Eval, Pipeline, Plan, Status
from .._units import check_count, check_seconds, to_ms


@dataclass(frozen=True, slots=True)
class ReplicaPolicy:
    """How many replicas must acknowledge a new lease, within how many seconds,
    and whether to their append-only file (``fsync``)."""

    replicas: int
    timeout: float
    fsync: bool


def check_policy(min_replicas: object, timeout: object, fsync: object) -> ReplicaPolicy | None:
    """Validate ``min_replicas=``, ``replica_timeout=``, ``replica_fsync=``;
    ``None`` when no replica needs to acknowledge.

    Raises:
        InvalidArgument: ``min_replicas`` is not an ``int`` from 0 to 2**53 - 1,
            ``timeout`` not a number of seconds > 0 and at most a year, or
            ``fsync`` not a bool.
    """
    min_replicas = check_count(min_replicas, "min_replicas", minimum=0)
    seconds = check_seconds(timeout, "replica_timeout")
    if not isinstance(fsync, bool):
        raise InvalidArgument(f"replica_fsync must be True or False, not {fsync!r}")
    return ReplicaPolicy(min_replicas, seconds, fsync) if min_replicas else None


def replicate(name: str, fence: int, write: Eval, policy: ReplicaPolicy) -> Plan[int]:
    """Rewrite the lease with ``write`` and wait for ``policy.replicas`` replicas
    to acknowledge it. Returns how many did.

    Raises:
        NotReplicatedError: fewer acknowledged within ``policy.timeout``, or
            the lease was not on the server the rewrite reached (none of its
            replicas can have it: gone, or granted by another server).
        UnsupportedServer: ``fsync`` on a server without ``WAITAOF``.
        PermissionDenied: the user may not run ``WAIT`` (``WAITAOF``).
    """
    wait = wait_command(policy)
    written, acks = yield Pipeline((write, wait))
    if isinstance(written, BaseException):
        raise written
    if written[0] is not Status.OK:
        # (the driver sends this on the grant's connection; if that failed,
        # the rewrite reached another server, a new master after a failover)
        raise NotReplicatedError(
            name,
            policy.replicas,
            0,
            policy.timeout,
            "the lease was not on the server the wait for replicas reached "
            "(gone, or granted by a master that was since failed over)",
        )
    return acknowledged(name, policy, wait, acks)


def wait_command(policy: ReplicaPolicy) -> Command:
    """The command that waits for ``policy``'s replicas: ``WAIT n ms``, or
    ``WAITAOF 0 n ms`` with ``fsync``. Send it in one :class:`Pipeline` after
    the write it waits for (its acknowledgements count that connection's writes)."""
    ms = str(to_ms(policy.timeout, "replica_timeout"))
    n = str(policy.replicas)
    return Command(("WAITAOF", "0", n, ms)) if policy.fsync else Command(("WAIT", n, ms))


def acknowledged(name: str, policy: ReplicaPolicy, wait: Command, acks: object) -> int:
    """How many replicas acknowledged, from ``wait``'s reply ``acks`` (a
    :class:`Pipeline`'s: the exception it raised, or its reply).

    Raises:
        NotReplicatedError: fewer than ``policy.replicas``.
        UnsupportedServer: ``fsync`` on a server without ``WAITAOF``.
        PermissionDenied: the user may not run ``WAIT`` (``WAITAOF``).
    """
    if isinstance(acks, BaseException):
        if policy.fsync and "unknown command" in str(acks).lower():
            raise UnsupportedServer(f"replica_fsync needs WAITAOF (Redis >= 7.2, Valkey): {acks}")
        if type(acks).__name__ == "NoPermissionError":  # the client library's NOPERM
            raise PermissionDenied("command", wait.args[0], "min_replicas") from acks
        raise acks
    count = int(acks[1]) if policy.fsync else int(acks)  # type: ignore[index,call-overload]
    if count < policy.replicas:
        raise NotReplicatedError(name, policy.replicas, count, policy.timeout)
    return count
