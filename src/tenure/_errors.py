"""Errors raised by tenure.

Every error derives from :class:`TenureError` and from the nearest builtin, so
``except TimeoutError`` or ``except ValueError`` keep working::

    TenureError
    ├── AcquireTimeout (TimeoutError)     a `with` / `async with` wait ran out
    ├── NotReplicatedError (TimeoutError) too few replicas acknowledged a new lease
    ├── NotOwnedError (RuntimeError)      release/extend of a lease you do not hold
    │   └── LockLostError                 the lease was seen gone while held
    ├── AlreadyHeldError (RuntimeError)   a non-reentrant lock taken twice by one owner
    ├── LockUpgradeError (RuntimeError)   a read lock's holder asked for the write lock
    ├── StaleFenceError (RuntimeError)    a fenced write refused: a newer holder wrote
    ├── InvalidArgument (ValueError)      a bad argument; nothing was changed in Redis
    │   └── WrongTypeError                a key holds a value of another type (found by
    │                                     the script that reads it, before any write)
    ├── PermissionDenied (PermissionError) the Redis user's ACL lacks a key, channel
    │                                      or command permission; nothing was written
    ├── NoQuorumError (ConnectionError)   too few of a Redlock's masters answered
    ├── UnsupportedServer (RuntimeError)  the server is older than Redis 6.2 / Valkey 7.2
    └── ProtocolError (RuntimeError)      a script reply tenure does not understand (a bug)

Connection problems are not wrapped: the client library's own errors propagate
unchanged, after the client's own retry policy has run. With a redis-py client
they are ``redis.exceptions.ConnectionError`` and ``redis.exceptions.TimeoutError``;
with a valkey-py client, ``valkey.exceptions.ConnectionError`` and
``valkey.exceptions.TimeoutError`` (valkey-py's exceptions are its own classes, not
redis-py's: catch the ones of the library your client comes from). So does any
other error reply of the server that tenure does not expect (the library's
``ResponseError``). The rest is the same for both libraries: a key of another
type is found by the scripts themselves and raises :class:`WrongTypeError`, and
a script missing from the server's cache (``NOSCRIPT``: a restart, ``SCRIPT
FLUSH``) is loaded again and the call sent again, never raised.

A client tenure can't use (a URL, ``None``, an asyncio client given to a
synchronous class or the reverse, a pipeline, a cluster client) raises
:class:`InvalidArgument` when the primitive is made, before anything is sent.
"""

from __future__ import annotations

from typing import Any, ClassVar


class TenureError(Exception):
    """Base class of every error tenure raises.

    Every one pickles as it is (its message and attributes), so that it
    crosses a process boundary (``multiprocessing``, a process pool, a task
    queue): an ``__init__`` that takes other arguments than its message is not
    called again to rebuild it."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (type(self), self.args, dict(self.__dict__)))


def _rebuilt(cls: type[TenureError], args: tuple[Any, ...], state: dict[str, Any]) -> TenureError:
    """The error ``cls`` with ``args`` (its message) and attributes ``state``,
    made without its ``__init__`` (see :class:`TenureError`)."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class AcquireTimeout(TenureError, TimeoutError):
    """A blocking acquire used by a context manager did not succeed in time.

    Attributes:
        name: the lock's name (or exact key).
        timeout: the wait that ran out, in seconds.
        holder: who held it when the wait ran out, in words (``"held by web-3
            pid 4711 (celery worker), lease left 12.4 s"``), or ``None`` when
            it could not be read.
    """

    def __init__(self, name: str, timeout: float | None, holder: str | None = None) -> None:
        self.name = name
        self.timeout = timeout
        self.holder = holder
        text = (
            f"could not acquire {name!r} within {timeout:g}s"
            if timeout is not None
            else f"could not acquire {name!r}"
        )
        super().__init__(f"{text} ({holder})" if holder else text)


class NotOwnedError(TenureError, RuntimeError):
    """Release or extend of a lease the caller does not hold (never held, or expired).

    Attributes:
        name: the lock's name (or exact key).
        fence: the fence of the lease concerned, or ``None`` when the caller held none.
        reason: what was found, in words.
    """

    def __init__(self, name: str, fence: int | None, reason: str) -> None:
        self.name = name
        self.fence = fence
        self.reason = reason
        where = f" (fence {fence})" if fence is not None else ""
        super().__init__(f"lock {name!r}{where}: {reason}")


class LockLostError(NotOwnedError):
    """The lease disappeared while it was believed held (seen by renewal or a check).

    When Redis said so, the message also says who holds the lock now (``now
    held by web-3 pid 4711 (celery worker), lease left 12.4 s``), read once more
    at that moment: :attr:`holder`.

    Attributes:
        holder: who held the lock when the loss was raised, in words, or ``None``.
    """

    holder: str | None = None

    def name_holder(self, holder: str | None) -> None:
        """Add ``holder`` (who holds the lock now, in words) to the message."""
        if holder is None or self.holder is not None:
            return
        self.holder = holder
        self.reason = f"{self.reason}; now {holder}"
        where = f" (fence {self.fence})" if self.fence is not None else ""
        self.args = (f"lock {self.name!r}{where}: {self.reason}",)


class AlreadyHeldError(TenureError, RuntimeError):
    """A non-reentrant lock was acquired again by the owner that already holds it.

    Raised at once instead of waiting for the caller's own lease to expire.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"lock {name!r} is already held by this thread or task, and Lock is not reentrant"
        )


class LockUpgradeError(TenureError, RuntimeError):
    """The owner that holds a read-write lock's read lock asked for its write lock.

    Raised at once: an upgrade would wait for every reader to leave, itself
    included, and two readers upgrading together would wait for each other
    forever. Release the read lock first (and take the write lock, then read
    again if needed), or take the write lock first and the read lock under it
    (a write holder may read, and may downgrade by releasing the write lock).

    Attributes:
        name: the lock's name.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"read-write lock {name!r}: this thread or task holds the read lock and asked "
            "for the write lock; an upgrade is not allowed (it could deadlock): release "
            "the read lock first"
        )


class StaleFenceError(TenureError, RuntimeError):
    """A fenced write was refused: the resource already accepted a larger fence.

    The writer's lease ended and a newer holder has written; the writer must
    stop. Nothing was written.

    Attributes:
        key: the resource key.
        fence: the refused writer's fence.
        seen: the largest fence the resource has accepted.
    """

    def __init__(self, key: str, fence: int, seen: int) -> None:
        self.key = key
        self.fence = fence
        self.seen = seen
        super().__init__(
            f"fenced write to {key!r} refused: fence {fence} is older than fence {seen}, "
            "which a newer lock holder has written with"
        )


class InvalidArgument(TenureError, ValueError):
    """A bad argument. The operation changed nothing in Redis.

    Most are found before any I/O (a bad value, a client tenure can't use).
    Some are found only in what Redis holds, by the script that reads it and
    refuses before it writes anything: a key of another type
    (:class:`WrongTypeError`: the name or key given points at another
    program's key), or a ``Semaphore`` given another count than the one
    stored."""


class WrongTypeError(InvalidArgument):
    """A key tenure uses holds a Redis value of another type (another program's key).

    Raised after the key was read (by the script that found it, before it
    wrote anything, or by ``tenure inspect``'s reads); an :class:`InvalidArgument`
    because the name, key or prefix given is what must change.

    Attributes:
        key: the offending Redis key.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"Redis key {key!r} holds a value of another type; "
            "it is not a tenure key (choose another name or prefix)"
        )


class NotReplicatedError(TenureError, TimeoutError):
    """Fewer replicas than ``min_replicas`` acknowledged a new lease in time; the
    lease was released and the acquire failed.

    Attributes:
        name: the lock's name (or exact key).
        wanted: ``min_replicas``.
        acknowledged: how many replicas acknowledged (``WAIT``), or wrote it to
            their append-only file (``WAITAOF``, with ``replica_fsync``); 0
            when the server the wait reached did not hold the lease (``reason``
            says so: it is not the server that granted it, after a failover).
    """

    def __init__(
        self, name: str, wanted: int, acknowledged: int, timeout: float, reason: str = ""
    ) -> None:
        self.name = name
        self.wanted = wanted
        self.acknowledged = acknowledged
        why = (
            reason
            or f"{acknowledged} of {wanted} replicas acknowledged the lease within {timeout:g}s"
        )
        super().__init__(f"lock {name!r}: {why}; the lease was released")


class PermissionDenied(TenureError, PermissionError):
    """The connected Redis user's ACL lacks a permission an operation needs.

    Raised before the operation changed anything: every script checks up front
    the keys, channels and commands it may use (``redis.acl_check_cmd``; on
    Redis 6.2 keys and channels only, see ``_scripts/_acl.lua``), and a wait
    whose wake channel the server refuses to SUBSCRIBE to fails at once rather
    than stalling. ``tenure doctor --name NAME`` / ``--key KEY`` prints the
    rule a least-privilege user needs.

    Attributes:
        permission: ``"read"`` or ``"write"`` (a key), ``"key"`` (a key, on
            Redis 6.2, whose ACL has no read/write split), ``"channel"`` (pub/sub)
            or ``"command"``.
        target: the key, channel or command (upper case) concerned.
        operation: what was refused (a script's name, or ``"SUBSCRIBE"``).
    """

    _NEEDS: ClassVar[dict[str, str]] = {
        "read": "read permission on key {0!r} (%R~ or ~ pattern)",
        "write": "write permission on key {0!r} (%W~ or ~ pattern)",
        "key": "permission on key {0!r} (~ pattern)",
        "channel": "permission to PUBLISH on channel {0!r} (& pattern, and +publish)",
        "command": "permission to run {0} (+ command)",
    }

    def __init__(self, permission: str, target: str, operation: str = "") -> None:
        self.permission = permission
        self.target = target
        self.operation = operation
        needs = self._NEEDS.get(permission, permission + " permission on {0!r}").format(target)
        during = f" ({operation})" if operation else ""
        super().__init__(
            f"the Redis user lacks {needs}{during}; nothing was changed. "
            "`tenure doctor --name NAME` or `--key KEY` prints the ACL rule needed"
        )


class NoQuorumError(TenureError, ConnectionError):
    """Too few of a :class:`tenure.Redlock`'s masters answered within the
    per-master timeout for a quorum (``N // 2 + 1``) to be possible: they are
    down, paused or cut off. The message names the lock, the operation and how
    many masters answered. Raised by an acquire after it released what it got
    (nothing is left held), and by ``extend`` and ``release`` (which may be
    called again)."""


class UnsupportedServer(TenureError, RuntimeError):
    """The server is older than tenure supports (Redis 6.2, Valkey 7.2)."""


class ProtocolError(TenureError, RuntimeError):
    """A script replied in a shape tenure does not understand. This is a bug in tenure."""
