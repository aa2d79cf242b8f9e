"""The key schema. All keys of one lock share a Redis Cluster hash tag.

A named lock ``orders:42`` with prefix ``tenure:`` uses::

    tenure:{orders:42}           the lock; value = holder's owner token
    tenure:{orders:42}:fence     the last fencing token minted
    tenure:{orders:42}:waiters   waiting processes (sorted set)
    tenure:{orders:42}:delay     the lock-delay guard: outlives an unreleased lease
    tenure:{orders:42}:released  the token of the last clean release (120 s), so a
                                 release retried after a lost reply is recognised
    tenure:{orders:42}:wake:<w>  pub/sub channel that wakes waiter <w>

An exact-key lock on ``orders:42`` uses the key itself as the lock (the common
``SET key token NX PX`` protocol, shared with redis-py's ``Lock``) and
``{orders:42}:fence`` etc. beside it (or ``<key>:fence`` when the key already
carries a hash tag), so every key still hashes to the lock key's slot.

A reentrant lock (``RLock``) named ``orders:42`` with prefix ``tenure:`` puts
its keys under ``<prefix>rlock:`` (:func:`rlock_keys`), so that it never shares
keys with a ``Lock`` of the same name and prefix::

    tenure:rlock:{orders:42}           the lock: a hash {<owner id>: <hold count>}
                                       (one field while held); the key's PX is the lease
    tenure:rlock:{orders:42}:fence     the last fencing token minted
    tenure:rlock:{orders:42}:waiters   waiting owners (sorted set)
    tenure:rlock:{orders:42}:wake:<w>  pub/sub channel that wakes waiter <w>

An ``RLock`` has no exact-key mode: its hash is tenure's own protocol.

A semaphore named ``pool`` (:func:`semaphore_keys`) lives under ``<prefix>semaphore:``::

    tenure:semaphore:{pool}           the holders: a sorted set with one member per
                                      held permit, "<lease token>#<i>" (i = 1..n for a
                                      lease of n permits), score = the lease's expiry
                                      in server milliseconds; the key's PX is the
                                      latest expiry
    tenure:semaphore:{pool}:permits   the permit count (a string holding an integer)
    tenure:semaphore:{pool}:fence     the last fencing token minted (one per acquire)
    tenure:semaphore:{pool}:waiters   waiting processes (sorted set)
    tenure:semaphore:{pool}:wake:<w>  pub/sub channel that wakes waiter <w>

A count-down latch named ``job`` (:func:`latch_keys`) lives under ``<prefix>latch:``::

    tenure:latch:{job}          the count (a string holding an integer); absent = zero
    tenure:latch:{job}:opened   a number that grows each time the count reaches zero
                                (seeded from the server's clock, as a fence)
    tenure:latch:{job}:zero     pub/sub channel on which reaching zero wakes every waiter

A read-write lock (``ReadWriteLock``) named ``orders:42`` puts its keys under
``<prefix>rwlock:`` (:func:`rwlock_keys`)::

    tenure:rwlock:{orders:42}             the lock: a hash {"mode": "read" | "write",
                                          "r:<owner id>" / "w:<owner id>":
                                          "<count>|<fence>|<hold id>"}, one field
                                          per hold; the key's PX is the latest expiry
    tenure:rwlock:{orders:42}:holds       each hold's expiry: sorted set, member =
                                          the hold's field, score = server ms
    tenure:rwlock:{orders:42}:fence       the last fence minted (by a write hold)
    tenure:rwlock:{orders:42}:waiters     waiting readers and writers, in one queue
    tenure:rwlock:{orders:42}:delay       the lock-delay guard of the write hold
    tenure:rwlock:{orders:42}:op:<owner>  the owner's last change (120 s), so that a
                                          call retried after a lost reply is recognised
    tenure:rwlock:{orders:42}:wake:<w>    pub/sub channel that wakes waiter <w>

A fair lock (``FairLock``) named ``orders:42`` puts its keys under
``<prefix>fair:`` (:func:`fair_keys`), apart from every ``Lock`` and ``RLock``::

    tenure:fair:{orders:42}             the lock; value = holder's owner token
    tenure:fair:{orders:42}:fence       the last fencing token minted
    tenure:fair:{orders:42}:waiters     the queue: sorted set, score = arrival
                                        order, member = "<waiter>|<lease ms>|<token>"
    tenure:fair:{orders:42}:deadlines   sorted set, the same members, score = the
                                        server time (ms) at which each is dropped
    tenure:fair:{orders:42}:delay       the lock-delay guard (as a Lock's)
    tenure:fair:{orders:42}:released    the token of the last clean release (120 s)
    tenure:fair:{orders:42}:wake:<w>    pub/sub channel of one waiting thread or task
"""

from __future__ import annotations

from dataclasses import dataclass

from ._errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class LockKeys:
    """Redis keys and the wake-channel prefix of one lock."""

    name: str
    lock: str
    fence: str
    waiters: str
    wake_prefix: str
    delay: str
    released: str


def _has_hash_tag(key: str) -> bool:
    start = key.find("{")
    if start < 0:
        return False
    end = key.find("}", start + 1)
    return end > start + 1


def fenced_keys(key: str) -> tuple[str, str]:
    """The keys of a fenced resource: the value's key and, in its hash slot, the
    key holding the largest fence accepted (``{<key>}:fence-seen``, or
    ``<key>:fence-seen`` when ``key`` already carries a hash tag).

    Raises:
        InvalidArgument: ``key`` is not a non-empty ``str``.
    """
    key = check_name(key, "key")
    base = key if _has_hash_tag(key) else "{" + key + "}"
    return key, base + ":fence-seen"


def check_name(value: object, what: str) -> str:
    """Return ``value`` if it is a non-empty ``str``; raise ``InvalidArgument`` otherwise."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, not {type(value).__name__} {value!r}")
    if not value:
        raise InvalidArgument(f"{what} must not be empty")
    return value


def lock_keys(name: str | None, *, key: str | None, prefix: str) -> LockKeys:
    """Build the keys of a lock given by ``name`` (under ``prefix``) or by exact ``key``.

    Raises:
        InvalidArgument: both or neither of ``name`` and ``key`` given, or either is
            not a non-empty ``str``, or ``prefix`` is not a ``str``.
    """
    if not isinstance(prefix, str):
        raise InvalidArgument(f"prefix must be a str, not {type(prefix).__name__} {prefix!r}")
    if (name is None) == (key is None):
        raise InvalidArgument("give exactly one of name or key=")
    if key is not None:
        key = check_name(key, "key")
        base = key if _has_hash_tag(key) else "{" + key + "}"
        return _siblings(key, key, base)
    name = check_name(name, "name")
    base = f"{prefix}{{{name}}}"
    return _siblings(name, base, base)


def _siblings(name: str, lock: str, base: str) -> LockKeys:
    return LockKeys(
        name,
        lock,
        base + ":fence",
        base + ":waiters",
        base + ":wake:",
        base + ":delay",
        base + ":released",
    )


#: The part added to a primitive's prefix for a reentrant lock's keys.
RLOCK_NAMESPACE = "rlock:"


def rlock_keys(name: str, *, prefix: str) -> LockKeys:
    """Build the keys of a reentrant lock ``name``: :func:`lock_keys` under
    ``prefix + "rlock:"``, apart from every ``Lock``'s keys.

    Raises:
        InvalidArgument: ``name`` is not a non-empty ``str``, or ``prefix`` is not a ``str``.
    """
    if not isinstance(prefix, str):
        raise InvalidArgument(f"prefix must be a str, not {type(prefix).__name__} {prefix!r}")
    return lock_keys(check_name(name, "name"), key=None, prefix=prefix + RLOCK_NAMESPACE)


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


#: The part added to a primitive's prefix for a semaphore's keys.
SEMAPHORE_NAMESPACE = "semaphore:"


def semaphore_keys(name: str, *, prefix: str) -> SemaphoreKeys:
    """Build the keys of semaphore ``name`` under ``prefix + "semaphore:"``.

    Raises:
        InvalidArgument: ``name`` is not a non-empty ``str``, or ``prefix`` is not a ``str``.
    """
    if not isinstance(prefix, str):
        raise InvalidArgument(f"prefix must be a str, not {type(prefix).__name__} {prefix!r}")
    base = f"{prefix}{SEMAPHORE_NAMESPACE}{{{check_name(name, 'name')}}}"
    keys = _siblings(name, base, base)
    return SemaphoreKeys(
        keys.name,
        keys.lock,
        keys.fence,
        keys.waiters,
        keys.wake_prefix,
        keys.delay,
        keys.released,
        base + ":permits",
    )


@dataclass(frozen=True, slots=True)
class LatchKeys:
    """Redis keys and the wake channel of one count-down latch."""

    name: str
    count: str
    opened: str
    channel: str


#: The part added to a primitive's prefix for a count-down latch's keys.
LATCH_NAMESPACE = "latch:"


def latch_keys(name: str, *, prefix: str) -> LatchKeys:
    """Build the keys of count-down latch ``name`` under ``prefix + "latch:"``.

    Raises:
        InvalidArgument: ``name`` is not a non-empty ``str``, or ``prefix`` is not a ``str``.
    """
    if not isinstance(prefix, str):
        raise InvalidArgument(f"prefix must be a str, not {type(prefix).__name__} {prefix!r}")
    base = f"{prefix}{LATCH_NAMESPACE}{{{check_name(name, 'name')}}}"
    return LatchKeys(name, base, base + ":opened", base + ":zero")


#: The part added to a primitive's prefix for a read-write lock's keys.
RWLOCK_NAMESPACE = "rwlock:"


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
    """Build the keys of a read-write lock ``name`` under ``prefix + "rwlock:"``,
    apart from every ``Lock``'s and ``RLock``'s keys.

    Raises:
        InvalidArgument: ``name`` is not a non-empty ``str``, or ``prefix`` is not a ``str``.
    """
    if not isinstance(prefix, str):
        raise InvalidArgument(f"prefix must be a str, not {type(prefix).__name__} {prefix!r}")
    name = check_name(name, "name")
    base = f"{prefix}{RWLOCK_NAMESPACE}{{{name}}}"
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


#: The part added to a primitive's prefix for a fair lock's keys.
FAIR_NAMESPACE = "fair:"


@dataclass(frozen=True, slots=True)
class FairKeys(LockKeys):
    """The keys of a fair lock: a lock's, and the sorted set of its waiters' deadlines."""

    deadlines: str


def fair_keys(name: str, *, prefix: str) -> FairKeys:
    """Build the keys of a fair lock ``name``: :func:`lock_keys`'s under
    ``prefix + "fair:"``, and ``<base>:deadlines``.

    Raises:
        InvalidArgument: ``name`` is not a non-empty ``str``, or ``prefix`` is not a ``str``.
    """
    if not isinstance(prefix, str):
        raise InvalidArgument(f"prefix must be a str, not {type(prefix).__name__} {prefix!r}")
    base = lock_keys(check_name(name, "name"), key=None, prefix=prefix + FAIR_NAMESPACE)
    return FairKeys(
        base.name,
        base.lock,
        base.fence,
        base.waiters,
        base.wake_prefix,
        base.delay,
        base.released,
        base.lock + ":deadlines",
    )
