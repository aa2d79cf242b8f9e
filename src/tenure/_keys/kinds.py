"""The keys of the kinds built on a lock's keys (``Semaphore``,
``ReadWriteLock``, ``FairLock``, ``Election``) and of the ``CountDownLatch``,
as :mod:`tenure._keys` describes them.

Each kind's plans import its keys from :mod:`tenure._keys`, whose
``__getattr__`` imports this module on the first such import: a program that
uses only a ``Lock`` (or an ``RLock``, whose keys are a lock's) creates none
of these types.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import LockKeys, _lock_family, _named_base


@dataclass(frozen=True, slots=True)
class SemaphoreKeys(LockKeys):
    """Redis keys of one semaphore: :class:`LockKeys` whose ``lock`` is the holders'
    sorted set, and the key holding the permit count."""

    permits: str

    @property
    def holders(self) -> str:
        """The holders' sorted set (the same key as ``lock``)."""
        return self.lock

    @property
    def script_keys(self) -> tuple[str, str, str, str]:
        """KEYS of every semaphore script: holders, permits, fence, waiters."""
        return (self.lock, self.permits, self.fence, self.waiters)


def semaphore_keys(name: str, *, prefix: str) -> SemaphoreKeys:
    """Build the keys of semaphore ``name`` under ``prefix`` (``<prefix>{<name>}:semaphore``
    and its roles).

    Raises:
        InvalidArgument: ``name`` is not a non-empty ``str``, or ``prefix`` is not
            a ``str`` or starts an empty hash tag.
    """
    name, base = _named_base("Semaphore", name, prefix)
    return _lock_family(SemaphoreKeys, name, base, base, "permits")


@dataclass(frozen=True, slots=True)
class LatchKeys:
    """Redis keys and the wake channel of one count-down latch."""

    name: str
    count: str
    opened: str
    channel: str
    by: str


def latch_keys(name: str, *, prefix: str) -> LatchKeys:
    """Build the keys of count-down latch ``name`` under ``prefix``
    (``<prefix>{<name>}:latch``, ``…:latch:opened``, ``…:latch:by`` and the
    channel ``…:latch:zero``).

    Raises:
        InvalidArgument: ``name`` is not a non-empty ``str``, or ``prefix`` is not
            a ``str`` or starts an empty hash tag.
    """
    name, base = _named_base("CountDownLatch", name, prefix)
    return LatchKeys(name, base, base + ":opened", base + ":zero", base + ":by")


@dataclass(frozen=True, slots=True)
class RWLockKeys(LockKeys):
    """The keys of a read-write lock: those of :class:`LockKeys` (``released`` is
    the prefix of the per-owner last-op keys, see :meth:`last_op`), and ``holds``,
    the sorted set of the holds' expiries."""

    holds: str

    def last_op(self, owner: str) -> str:
        """The key of ``owner``'s last change of the lock (``<base>:op:<owner>``)."""
        return f"{self.released}:{owner}"


def rwlock_keys(name: str, *, prefix: str) -> RWLockKeys:
    """Build the keys of a read-write lock ``name`` under ``prefix``
    (``<prefix>{<name>}:rwlock`` and its roles), apart from every ``Lock``'s and
    ``RLock``'s keys.

    Raises:
        InvalidArgument: ``name`` is not a non-empty ``str``, or ``prefix`` is not
            a ``str`` or starts an empty hash tag.
    """
    name, base = _named_base("ReadWriteLock", name, prefix)
    return RWLockKeys(
        name,
        base,
        base + ":fence",
        base + ":waiters",
        base + ":wake:",
        base + ":delay",
        base + ":op",
        base + ":holds",
    )


@dataclass(frozen=True, slots=True)
class FairKeys(LockKeys):
    """The keys of a fair lock: a lock's, and the sorted set of its waiters' deadlines."""

    deadlines: str


def fair_keys(name: str, *, prefix: str) -> FairKeys:
    """Build the keys of a fair lock ``name`` under ``prefix``
    (``<prefix>{<name>}:fair`` and its roles, with ``…:fair:deadlines``).

    Raises:
        InvalidArgument: ``name`` is not a non-empty ``str``, or ``prefix`` is not
            a ``str`` or starts an empty hash tag.
    """
    name, base = _named_base("FairLock", name, prefix)
    return _lock_family(FairKeys, name, base, base, "deadlines")


@dataclass(frozen=True, slots=True)
class ElectionKeys(FairKeys):
    """The keys of a leader election: a fair lock's (the candidates' queue and
    the leader's lease), the leader's ``record``, the change ``log`` and the
    ``channel`` every change is announced on (``…:election:feed``); its
    ``quorum`` is the queue of a RedlockElection's candidates on one master."""

    record: str
    log: str
    channel: str


def election_keys(name: str, *, prefix: str) -> ElectionKeys:
    """Build the keys of the election ``name`` under ``prefix``
    (``<prefix>{<name>}:election`` and its roles).

    Raises:
        InvalidArgument: ``name`` is not a non-empty ``str``, or ``prefix`` is not
            a ``str`` or starts an empty hash tag.
    """
    name, base = _named_base("Election", name, prefix)
    keys = _lock_family(ElectionKeys, name, base, base, "deadlines", "record", "log", "feed")
    # (the queue of a RedlockElection's candidates on each master)
    return replace(keys, quorum=base + ":quorum")
