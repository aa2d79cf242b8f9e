"""Snapshots that ``info()`` returns: frozen dataclasses, no I/O.

Every primitive's ``info()`` type lives here (and is exported by
:mod:`tenure`); the plans build them, so this module imports nothing from
:mod:`tenure._plans`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

#: A read-write hold's mode.
RWMode = Literal["read", "write"]


@dataclass(frozen=True, slots=True)
class LockInfo:
    """A snapshot of a lock in Redis (what ``Lock.info()`` and ``RLock.info()`` return).

    Attributes:
        name: the lock's name (or exact key).
        holder: the holder's owner token (``Lock``, the lease's ``owner``) or
            owner id (``RLock``); ``None`` when the lock is free.
        hold_count: the holder's hold count (1 for a ``Lock``; 0 when free).
        ttl: seconds left of the holder's lease; ``None`` when free or when the
            holder set no expiry.
        fence: the last fence minted for the name (0 if none is known).
        waiters: the number of processes queued for the lock.
        label: the holder's label (``"web-3 pid 4711 (celery worker)"``, see the
            ``label`` argument); ``None`` when free or when the holder gave none
            (an older tenure, a foreign client, ``label=""``).
    """

    name: str
    holder: str | None
    hold_count: int
    ttl: float | None
    fence: int
    waiters: int
    label: str | None = field(default=None, kw_only=True)


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
        label: the waiter's holder label, or ``None``.
    """

    token: str
    owner: str
    waiter: str
    lease: float
    deadline: float
    label: str | None = field(default=None, kw_only=True)


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


@dataclass(frozen=True, slots=True)
class ReadWriteHolder:
    """One hold of a read-write lock, as :meth:`tenure.ReadWriteLock.info` saw it.

    Attributes:
        owner: the holding thread's or task's owner id.
        mode: ``"read"`` or ``"write"`` (a write holder that also reads has two holds).
        count: the hold count (>= 1).
        ttl: seconds left of the hold's lease.
        fence: the hold's fence.
        label: the holder's label (given with the hold's first acquire), or ``None``.
    """

    owner: str
    mode: RWMode
    count: int
    ttl: float
    fence: int
    label: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class ReadWriteInfo:
    """A snapshot of a read-write lock in Redis (:meth:`tenure.ReadWriteLock.info`).

    Attributes:
        name: the lock's name.
        mode: ``"write"`` while a write hold exists, ``"read"`` while only read
            holds do, ``None`` when the lock is free.
        holders: the live holds, the latest expiry last.
        waiters: how many waiters are queued (one per process and name).
        waiting_writers: how many of them wait for the write lock.
        fence: the last fence minted for the name (0 if none is known).
    """

    name: str
    mode: RWMode | None
    holders: tuple[ReadWriteHolder, ...]
    waiters: int
    waiting_writers: int
    fence: int


@dataclass(frozen=True, slots=True)
class SemaphoreHolder:
    """One lease holding permits of a semaphore, as Redis said at the snapshot.

    Attributes:
        token: the lease's token (``SemaphoreLease.owner``).
        permits: how many permits it holds.
        ttl: seconds until its lease ends in Redis, unless extended.
        label: the holder's label, or ``None``.
    """

    token: str
    permits: int
    ttl: float
    label: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class SemaphoreInfo:
    """A snapshot of a semaphore in Redis (what ``Semaphore.info()`` returns).

    Attributes:
        name: the semaphore's name.
        permits: the permit count stored in Redis, or the asking object's count
            while none is stored.
        available: permits free now: ``permits`` less those held (0 while more
            are held than the count, after it shrank).
        holders: the leases holding permits, first to expire first.
        waiters: processes queued for permits (each process queues one waiting
            thread or task at a time; its others wait behind that one locally).
    """

    name: str
    permits: int
    available: int
    holders: tuple[SemaphoreHolder, ...]
    waiters: int


@dataclass(frozen=True, slots=True)
class CountDownLatchInfo:
    """A snapshot of a count-down latch in Redis (what ``CountDownLatch.info()`` returns).

    Attributes:
        name: the latch's name.
        count: the count; 0 when the latch is open (no count set, or counted down).
        opened: a number that grows each time the count reaches zero (0 when
            none is known); two snapshots with different numbers saw the latch
            open in between.
        label: who set the count, in words (the ``label`` its
            :class:`~tenure.CountDownLatch` was made with, by default ``web-3
            pid 4711 (celery worker)``); ``None`` while the latch is open, and
            for a count set without a label (``label=""``) or by an older tenure.
    """

    name: str
    count: int
    opened: int
    label: str | None = None


def held_by(info: object) -> str | None:
    """Who holds what ``info`` (a snapshot of a lock, a read-write lock or a
    semaphore) shows, in a few words for an error message: ``held by web-3 pid
    4711 (celery worker), lease left 12.4 s`` (a holder without a label by its
    token or owner id; several by the first, and how many more), ``free``;
    ``None`` for a snapshot of another kind."""
    if isinstance(info, LockInfo):
        if info.holder is None:
            return "free"
        return _held(info.label or info.holder, info.ttl, 0)
    if isinstance(info, ReadWriteInfo):
        holds = sorted(info.holders, key=lambda h: h.mode != "write")
        if not holds:
            return "free"
        first = holds[0]
        return _held(f"{first.label or first.owner} ({first.mode})", first.ttl, len(holds) - 1)
    if isinstance(info, SemaphoreInfo):
        if not info.holders:
            return "free"
        lease = info.holders[0]
        return _held(lease.label or lease.token, lease.ttl, len(info.holders) - 1)
    return None


def _held(who: str, ttl: float | None, more: int) -> str:
    left = "no expiry" if ttl is None else f"lease left {ttl:.1f} s"
    others = f" and {more} more" if more else ""
    return f"held by {who}{others}, {left}"


#: What changed in an election: a term began (``"elected"``), its leader
#: published a value (``"proclaimed"``), or the term ended by the leader's
#: release (``"resigned"``) or by its lease's end (``"lost"``: expired, taken
#: by ``release --force``, or gone with the server's data).
ElectionChange = Literal["elected", "proclaimed", "resigned", "lost"]


@dataclass(frozen=True, slots=True)
class Leader:
    """Who leads an election (what ``Election.leader()`` returns).

    Attributes:
        label: the leader's label (``Election(label=...)``; by default host,
            pid and program), as it announced itself.
        term: its term: its lease's fence, larger than every earlier leader's.
            Compare terms, never labels: a label says who, the term says when.
        value: the value it proclaimed in this term (``bytes``), or ``None``.
        since: when its term was announced, as the server's clock said
            (seconds since the epoch).
        ttl: seconds left of its lease when read (``None`` when unknown).
        sequence: (``RedlockElection`` only; 0 otherwise) the number of the
            value within the term: 0 before the first proclaim, then 1, 2...
            Compare ``(term, sequence)`` to order two reads.
    """

    label: str
    term: int
    value: bytes | None
    since: float
    ttl: float | None = None
    sequence: int = 0


@dataclass(frozen=True, slots=True)
class ElectionEvent:
    """One change of an election, as ``Election.observe()`` delivers it.

    Attributes:
        change: ``"elected"``, ``"proclaimed"``, ``"resigned"`` or ``"lost"``
            (see :data:`ElectionChange`).
        term: the term it is about; never smaller than an earlier event's.
        label: that term's leader's label.
        value: the value proclaimed in that term so far (``None``: none).
        since: when that term was announced (server clock, epoch seconds).
        sequence: (``RedlockElection`` only; 0 otherwise) the number of the
            value within the term (see :class:`Leader`).
    """

    change: ElectionChange
    term: int
    label: str
    value: bytes | None
    since: float
    sequence: int = 0

    @property
    def leading(self) -> bool:
        """Whether the term is still on after this change (elected or proclaimed)."""
        return self.change in ("elected", "proclaimed")


# Every class here is a snapshot type that :mod:`tenure` exports (importing this
# module on their first use), and says it is tenure's, as tenure's other public
# classes do (a traceback, ``help()`` and pickle name ``tenure.LockInfo``),
# whichever import loads this module first: tenure's ``__getattr__`` or a plan
# building a snapshot.
for _public in [c for c in globals().values() if isinstance(c, type) and c.__module__ == __name__]:
    _public.__module__ = "tenure"
del _public
