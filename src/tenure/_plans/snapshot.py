"""The operator's snapshot of one primitive: :class:`LockView`, its queued
:class:`Waiter` s, the :class:`Hold` s a forced release ends and what it did
(:class:`ForcedRelease`).

The kinds' read plans build them (:mod:`.kind` and each primitive's plans
module), for ``tenure inspect``, ``ls``, ``release --force``, ``doctor`` and the
live views; how the commands show them is :mod:`tenure._views`'. No primitive
needs them to lock: the plans import this module on the first read, so that
``import tenure`` does not pay for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._label import holder_label


@dataclass(frozen=True, slots=True)
class Waiter:
    """One queued waiter of a lock (a member of its waiters sorted set).

    Attributes:
        waiter: the waiting process's (a FairLock's: thread's or task's) wake id.
        holder: the lease token (Lock, FairLock, Semaphore) or owner id (RLock,
            ReadWriteLock) a release would hand the lock to.
        lease: the lease a release hands it, in seconds: its claim window, the
            smaller of the lease it asked for and 1 s, which it extends to its
            full lease at once (``None`` if unreadable).
        queued_for: seconds since it queued, by the server's clock (``None``
            for a FairLock's waiter, which has a ``deadline`` instead).
        mode: a ReadWriteLock waiter's mode, ``"read"`` or ``"write"``.
        permits: the permits a Semaphore waiter asks for.
        deadline: seconds until a FairLock waiter is dropped from the queue
            unless it calls again (a live one calls well before).
    """

    waiter: str
    holder: str
    lease: float | None
    queued_for: float | None
    mode: str | None = None
    permits: int | None = None
    deadline: float | None = None
    label: str | None = None

    def __post_init__(self) -> None:
        if self.label is None:  # (a kind whose holder is no stored token gives it)
            object.__setattr__(self, "label", holder_label(self.holder))


@dataclass(frozen=True, slots=True)
class LockView:
    """A snapshot of one primitive (see :mod:`tenure._views` for its JSON shape).

    ``kind`` is the kind's public name (``"Lock"``, ...: :attr:`Kind.name`;
    :func:`.kinds.kind_of` finds the kind, :func:`.kinds.exists` says whether
    any of its keys exists);
    ``holder`` and ``count`` describe the one holder (the first of several);
    ``pttl_ms`` is the lease left in milliseconds (-1: no expiry, -2: free);
    ``detail`` is the library's ``info()`` snapshot for a kind whose holders
    or state say more (a ReadWriteLock, Semaphore or CountDownLatch). A
    CountDownLatch's ``count`` is its count, its ``label`` who set it.
    """

    kind: str
    name: str
    key: str
    holder: str
    count: int
    pttl_ms: int
    fence: int
    waiters: int
    waiting: tuple[Waiter, ...] = ()
    detail: object = None
    label: str | None = None

    def __post_init__(self) -> None:
        if self.label is None:  # (a kind whose holder is no stored token gives it)
            object.__setattr__(self, "label", holder_label(self.holder))

    @property
    def held(self) -> bool:
        """Whether someone holds the lock (or a semaphore's permits)."""
        return bool(self.holder)

    @property
    def ttl(self) -> float | None:
        """Seconds left on the lease; ``None`` when free or held with no expiry."""
        return self.pttl_ms / 1000 if self.held and self.pttl_ms >= 0 else None


@dataclass(frozen=True, slots=True)
class Hold:
    """One hold that a forced release removed (or found gone).

    Attributes:
        holder: the lease token (Lock, FairLock, Semaphore) or owner id (RLock,
            ReadWriteLock).
        count: its hold count (a semaphore lease's permits).
        ttl: seconds its lease had left when read (``None``: no expiry).
        fence: its fence (a Semaphore lease's is not kept: 0).
        mode: a ReadWriteLock hold's mode.
    """

    holder: str
    count: int
    ttl: float | None
    fence: int
    mode: str | None = None
    label: str | None = None

    def __post_init__(self) -> None:
        if self.label is None:  # (a kind whose holder is no stored token gives it)
            object.__setattr__(self, "label", holder_label(self.holder))


@dataclass(frozen=True, slots=True)
class ForcedRelease:
    """What ``release --force`` did.

    Attributes:
        before: the primitive as read before the release.
        after: the primitive afterwards: held by the first live waiters, or free.
        removed: the holds removed.
        gone: the holds read but not removed, because they ended (or changed
            hands) between the read and the release: the release scripts check
            the token, so they can remove only the hold that was read.
    """

    before: LockView
    after: LockView
    removed: tuple[Hold, ...]
    gone: tuple[Hold, ...] = ()

    @property
    def released(self) -> bool:
        """Whether anything was removed."""
        return bool(self.removed)
