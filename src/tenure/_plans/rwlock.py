"""Plans for :class:`tenure.ReadWriteLock`: acquire, release, extend and inspect.

The lock is a hash of holds, one field per (owner, mode): ``r:<owner id>`` for
a read hold, ``w:<owner id>`` for the write hold, each ``<count>|<fence>|<hold
id>``, and a sorted set of the holds' expiries in server time, so that every
hold is a lease of its own: a reader that dies stops blocking writers when its
own lease ends (``_rwlock.lua`` has the layout). The owner id is the driver's
``current_owner()``, so each thread or task is an owner, and both modes are
reentrant per owner. A write holder may also take the read lock, and release
the write lock while keeping the read lock (a downgrade). A read holder that
asks for the write lock is refused (:class:`~tenure.LockUpgradeError`): two
readers upgrading at once would wait for each other forever.

Fences: a write hold's fence is minted like every exclusive lock's (strictly
increasing). A read hold's fence is the last fence minted when it began,
i.e. the fence of the last writer before it; no writer can begin while the
read hold lasts, so a reader that finds a larger fence on a fenced resource
knows its hold has ended and what it read may be stale.

Waiting is :mod:`.waiting`'s loop with one queue for readers and writers.
A new hold is taken in the queue's order: once anyone waits, a new reader
queues too, even while readers hold, so a waiting writer is not starved. A
release hands the lock to the head of the queue: a writer alone, or every
reader up to the next writer, each told on its process's wake channel. Owners
that already hold are never queued: a re-entry, and a write holder's read, are
granted at once (the first attempt is always made alone, as with the RLock).

The contender's token is ``<r or w>:<owner id>:<op id>``, unique per acquire
call, and the op id becomes the id of a hold the call begins, so a hand-off
message is trusted as it is: the waiter holds the lock when it arrives (as with
:class:`tenure.Lock`), for its claim window, which it extends to its full
lease at once (see :mod:`.waiting`); each reader of a batch has its own. A
waiter that gives up, or whose attempt's reply was lost, leaves the queue and
gives back what its call got (a hold handed to it, or a count its attempt
made: the owner's last op says so), in one call.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Literal

from .._errors import InvalidArgument, LockUpgradeError, NotOwnedError, ProtocolError
from .._info import ReadWriteHolder as ReadWriteHolder
from .._info import ReadWriteInfo as ReadWriteInfo
from .._keys import RWLockKeys
from .._protocol import Eval, Plan, Status
from .._scripts import RWLOCK_ACQUIRE, RWLOCK_EXTEND, RWLOCK_INSPECT, RWLOCK_RELEASE
from .._units import lease_ms
from .lock import FENCE_KEEP_MS, extend_refused, least_left_ms
from .waiting import (
    Clock,
    Contender,
    Grant,
    claim_window,
    handed_off_until,
    validity,
    wait_turn,
)

Mode = Literal["read", "write"]

_LETTER: dict[str, str] = {"read": "r", "write": "w"}
_MODE: dict[str, Mode] = {"r": "read", "w": "write"}


def letter(mode: Mode) -> str:
    """The scripts' name for ``mode``: ``"r"`` or ``"w"``.

    Raises:
        InvalidArgument: ``mode`` is neither ``"read"`` nor ``"write"``.
    """
    found = _LETTER.get(mode) if isinstance(mode, str) else None
    if found is None:
        raise InvalidArgument(f"mode must be 'read' or 'write', not {mode!r}")
    return found


@dataclass(frozen=True, slots=True)
class RWGrant(Grant):
    """A successful acquire of a read-write lock: a :class:`Grant` (``token`` is
    the owner id) plus the ``mode`` and the ``hold`` id shared by every level
    of the hold."""

    mode: Mode
    hold: str


@dataclass(frozen=True, slots=True)
class RWState:
    """What ``rwlock_inspect.lua`` says: the snapshot, and the asking owner's
    read and write hold counts."""

    info: ReadWriteInfo
    mine_read: int
    mine_write: int


def _keys6(keys: RWLockKeys, owner: str) -> tuple[str, ...]:
    return (keys.lock, keys.holds, keys.fence, keys.waiters, keys.delay, keys.last_op(owner))


def acquire(
    keys: RWLockKeys,
    owner: str,
    mode: Mode,
    ttl: float,
    *,
    blocking: bool,
    timeout: float | None,
    now: Clock,
    op: str,
    delay_ms: int = 0,
) -> Plan[RWGrant | None]:
    """Take the read or write lock for ``owner``, or enter it again if ``owner``
    holds that mode (or the read lock while it holds the write lock).

    ``op`` (unique per call, not empty) is the id of a hold the call begins; a
    script call retried after its reply was lost (by redis-py) is recognised by
    it and not counted twice. ``delay_ms`` is the lock-delay of a write hold.

    Returns an :class:`RWGrant`, or ``None`` when ``blocking`` is false and the
    lock is not free for ``owner``, or when ``timeout`` seconds pass first.

    Raises:
        InvalidArgument: ``ttl`` is not a lease length (0.01 s to a year), ``mode``
            is bad, or ``op`` is empty.
        LockUpgradeError: ``mode`` is ``"write"`` and ``owner`` holds the read
            lock without the write lock.
        WrongTypeError: one of the lock's keys holds another type.
    """
    if not op:
        raise InvalidArgument("op must not be empty")
    contender = _RWContender(keys, owner, mode, ttl, op, delay_ms, now)
    grant = yield from wait_turn(contender, blocking=blocking, timeout=timeout, now=now)
    if grant is not None and not isinstance(grant, RWGrant):
        raise ProtocolError(f"{RWLOCK_ACQUIRE.name}: unexpected grant {grant!r}")
    return grant


class _RWContender(Contender):
    listen_first = False  # an owner that holds must not queue (see the module docstring)

    def __init__(
        self,
        keys: RWLockKeys,
        owner: str,
        mode: Mode,
        ttl: float,
        op: str,
        delay_ms: int,
        now: Clock,
    ) -> None:
        self.rw_keys = keys
        self.keys = keys
        self.owner, self.mode, self.letter = owner, mode, letter(mode)
        self.ttl, self.ttl_ms = ttl, lease_ms(ttl)
        self.op, self.delay_ms, self.now = op, delay_ms, now
        self.token = f"{self.letter}:{owner}:{op}"

    def attempt(self, member: str) -> Eval:
        keys = self.rw_keys
        return Eval(
            RWLOCK_ACQUIRE,
            _keys6(keys, self.owner),
            (
                self.owner,
                self.letter,
                self.ttl_ms,
                member,
                FENCE_KEEP_MS,
                self.delay_ms,
                self.op,
                keys.wake_prefix,
            ),
        )

    def _grant(self, fence: int, hold: str, expires_at: float, claim: float = 0.0) -> RWGrant:
        return RWGrant(self.owner, fence, self.ttl, expires_at, self.mode, hold, claim=claim)

    def outcome(self, status: Status, value: Any, sent_at: float) -> Grant | int:
        if status is Status.OK:
            fence, hold = value
            return self._grant(int(fence), str(hold), sent_at + validity(self.ttl))
        if status is Status.BUSY:
            return int(value)
        if status is Status.OWNED_BY_CALLER:
            raise LockUpgradeError(self.keys.name)
        raise ProtocolError(f"{RWLOCK_ACQUIRE.name}: unexpected status {status.name}")

    def handed_off(self, fence: int, queued_at: float) -> Plan[Grant | None]:
        # The hold began with our op id as its id, no earlier than queued_at.
        ttl = self.ttl
        refresh = extend(
            self.rw_keys,
            self.owner,
            self.mode,
            self.op,
            ttl,
            self.now,
            ttl=claim_window(ttl),  # Redis holds it for the claim window
            delay_ms=self.delay_ms,
        )
        until = yield from handed_off_until(ttl, queued_at, self.now, refresh)
        return None if until is None else self._grant(fence, self.op, until[0], until[1])

    def leave(self, member: str, in_flight: bool) -> Plan[None]:
        with contextlib.suppress(Exception):
            yield _release_step(
                self.rw_keys, self.owner, self.letter, "", member, self.op, self.delay_ms
            )


def _release_step(
    keys: RWLockKeys, owner: str, mode: str, hold: str, member: str, op: str, delay_ms: int
) -> Eval:
    return Eval(
        RWLOCK_RELEASE,
        _keys6(keys, owner),
        (owner, mode, hold, keys.wake_prefix, FENCE_KEEP_MS, member, op, delay_ms),
    )


def release(
    keys: RWLockKeys,
    owner: str,
    mode: Mode,
    hold: str,
    fence: int,
    *,
    op: str,
    delay_ms: int = 0,
) -> Plan[int]:
    """Count down ``owner``'s hold of ``mode`` (the one with id ``hold``); at zero
    the hold ends and the lock is handed on to the head of the queue (with a
    lock-delay of ``delay_ms`` for a writer handed it). Returns the count left
    (0: no longer held in this mode). ``fence`` is only used in the error message.

    ``op`` (unique per call, not empty) makes a retry of a release whose reply
    was lost count down only once.

    Raises:
        NotOwnedError: ``owner`` holds no such hold, or it has another id (the
            lease expired, and perhaps a new hold began); nothing was changed.
    """
    if not op:
        raise InvalidArgument("op must not be empty")
    step = _release_step(keys, owner, letter(mode), hold, "", op, delay_ms)
    status, value = yield step
    if status is Status.NOT_OWNED:
        raise NotOwnedError(
            keys.name, fence, f"can't release the {mode} lock: not held (the lease expired)"
        )
    return int(value)


def renewal(
    keys: RWLockKeys,
    owner: str,
    mode: Mode,
    hold: str,
    seconds: float,
    *,
    ttl: float,
    delay_ms: int = 0,
) -> Eval:
    """The script call that resets the lease of ``owner``'s hold of ``mode`` (the
    one with id ``hold``, whose lease is now ``ttl`` seconds long) to end
    ``seconds`` from now, unless it has less left than the holder's clock allows
    for drift.

    Reply: ``(OK, count)``, or ``(NOT_OWNED, late)`` with ``late`` 1 when refused
    for having too little left.

    Raises:
        InvalidArgument: ``seconds`` is not a lease length (0.01 s to a year).
    """
    ms = lease_ms(seconds, "seconds")
    return Eval(
        RWLOCK_EXTEND,
        (keys.lock, keys.holds, keys.fence, keys.waiters, keys.delay),
        (owner, letter(mode), hold, ms, FENCE_KEEP_MS, least_left_ms(ttl), delay_ms),
    )


def extend(
    keys: RWLockKeys,
    owner: str,
    mode: Mode,
    hold: str,
    seconds: float,
    now: Clock,
    *,
    ttl: float,
    delay_ms: int = 0,
    fence: int | None = None,
) -> Plan[float]:
    """Reset the lease of ``owner``'s hold of ``mode`` (see :func:`renewal`).
    Returns the new ``expires_at`` on the caller's monotonic clock. ``fence`` is
    only used in the error message.

    Raises:
        InvalidArgument: ``seconds`` is not a lease length (0.01 s to a year).
        NotOwnedError: ``owner`` holds no such hold, or it has another id, or its
            lease had too little left to be trusted; nothing was changed.
    """
    step = renewal(keys, owner, mode, hold, seconds, ttl=ttl, delay_ms=delay_ms)
    sent_at = now()
    status, late = yield step
    if status is Status.NOT_OWNED:
        raise NotOwnedError(keys.name, fence, extend_refused(late))
    return sent_at + validity(seconds)


def inspect(keys: RWLockKeys, owner: str = "") -> Plan[RWState]:
    """Read the lock's mode, live holds, queue and last fence, and ``owner``'s
    read and write hold counts."""
    _, value = yield Eval(
        RWLOCK_INSPECT, (keys.lock, keys.holds, keys.fence, keys.waiters), (owner,)
    )
    mode, fence, waiters, writers, mine_r, mine_w, *rest = value
    holders = tuple(
        ReadWriteHolder(str(o), _MODE[str(m)], int(c), int(p) / 1000, int(f))
        for o, m, c, p, f in (rest[i : i + 5] for i in range(0, len(rest), 5))
    )
    info = ReadWriteInfo(
        keys.name, _MODE.get(str(mode)[:1]), holders, int(waiters), int(writers), int(fence)
    )
    return RWState(info, int(mine_r), int(mine_w))
