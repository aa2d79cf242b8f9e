"""Snapshots that ``info()`` returns: frozen dataclasses, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from ._plans.lock import LockInfo


@dataclass(frozen=True, slots=True)
class FairWaiter:
    """One waiter in a fair lock's queue.

    Attributes:
        token: the lease token the lock will be handed to (``<owner id>:<random>``).
        owner: the waiting thread's or task's owner id (the token without its
            random part).
        waiter: the id of the waiter's wake channel.
        lease: the lease a release hands it, in seconds: its claim window, the
            smaller of the lease it asked for and 1 s (it extends the lease to
            its full length at once).
        deadline: seconds (by the server's clock) until it is dropped from the
            queue unless it calls again; a live waiter calls again well before.
    """

    token: str
    owner: str
    waiter: str
    lease: float
    deadline: float


@dataclass(frozen=True, slots=True)
class FairLockInfo(LockInfo):
    """A snapshot of a fair lock in Redis (it may change at once): a
    :class:`~tenure.LockInfo` with the queue.

    Attributes:
        name: the lock's name.
        holder: the holding lease's token, or ``None`` when free.
        hold_count: 1 while held, 0 when free.
        ttl: seconds left on the holder's lease; ``None`` when free (or held
            with no expiry).
        fence: the last fence minted for the name (0 if none is known).
        waiters: how many waiters are queued (whose deadline has not passed).
        queue: the first of them (at most the ``limit`` asked for), in the
            order the lock will go to them.
    """

    queue: tuple[FairWaiter, ...]


@dataclass(frozen=True, slots=True)
class MultiPartInfo:
    """One part of a multi-lock, as Redis has it now.

    Attributes:
        kind: the part's class name (``"Lock"``, ``"AsyncFairLock"``, ...).
        name: the part's name (or exact key).
        key: the part's lock key in Redis.
        locked: whether anyone holds the part.
        fence: the fence of the part in the caller's lease, or ``None`` when
            the caller holds no lease of the multi-lock.
    """

    kind: str
    name: str
    key: str
    locked: bool
    fence: int | None


@dataclass(frozen=True, slots=True)
class MultiLockInfo:
    """A snapshot of a multi-lock: its parts, in the order they were given.

    Attributes:
        held: whether the calling thread or task holds a valid lease of it.
        parts: one :class:`MultiPartInfo` per part.
    """

    held: bool
    parts: tuple[MultiPartInfo, ...]
