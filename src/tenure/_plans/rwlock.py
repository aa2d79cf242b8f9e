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

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from .._errors import InvalidArgument, LockUpgradeError, NotOwnedError, ProtocolError
from .._keys import RWLockKeys, rwlock_keys
from .._label import holder_label, split_holder
from .._protocol import Command, Eval, Plan, Status, failed_calls_suppressed, text
from .._scripts import RWLOCK_ACQUIRE, RWLOCK_EXTEND, RWLOCK_INSPECT, RWLOCK_RELEASE
from .._units import lease_ms
from .common import FENCE_KEEP_MS, extended, least_left_ms
from .kind import Kind, detail, many_holders_view, named, release_each, release_levels, with_waiting
from .waiting import (
    Clock,
    Contender,
    Grant,
    Refused,
    claim_window,
    handed_off_until,
    validity,
    wait_turn,
)

if TYPE_CHECKING:  # (the snapshot types are imported on first use)
    from .._info import ReadWriteHolder, ReadWriteInfo
    from .snapshot import Hold, LockView, Waiter

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

    def outcome(self, status: Status, value: Any, sent_at: float) -> Grant | int | Refused:
        if status is Status.OK:
            # (a bare fence: a new hold, whose id is this call's op)
            fence, hold = (value, self.op) if isinstance(value, int) else value
            return self._grant(int(fence), str(hold), sent_at + validity(self.ttl))
        if status is Status.BUSY:
            return int(value)
        if status is Status.OWNED_BY_CALLER:
            return Refused(LockUpgradeError(self.keys.name))
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
        with failed_calls_suppressed():
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
    return (yield from extended(step, keys.name, fence, seconds, now))


def _holder(who: str, m: str, count: int, pttl_ms: int, fence: int) -> ReadWriteHolder:
    """A hold as ``rwlock_inspect.lua`` gives it: its owner id, with the
    label of the hold's id after it."""
    from .._info import ReadWriteHolder  # (loaded on first use)

    owner, label = split_holder(who)
    return ReadWriteHolder(owner, _MODE[m], count, pttl_ms / 1000, fence, label=label)


def inspect(keys: RWLockKeys, owner: str = "") -> Plan[RWState]:
    """Read the lock's mode, live holds, queue and last fence, and ``owner``'s
    read and write hold counts."""
    from .._info import ReadWriteInfo

    _, value = yield Eval(
        RWLOCK_INSPECT, (keys.lock, keys.holds, keys.fence, keys.waiters), (owner,)
    )
    mode, fence, waiters, writers, mine_r, mine_w, *rest = value
    holders = tuple(
        _holder(str(o), str(m), int(c), int(p), int(f))
        for o, m, c, p, f in (rest[i : i + 5] for i in range(0, len(rest), 5))
    )
    info = ReadWriteInfo(
        keys.name, _MODE.get(str(mode)[:1]), holders, int(waiters), int(writers), int(fence)
    )
    return RWState(info, int(mine_r), int(mine_w))


# --- the kind, for the operator tools -------------------------------------------------------

_RW_TOKEN = re.compile(r"^([rw]):(.+):([^:]*)$", re.S)


def _refine(waiter: Waiter) -> Waiter:
    """A waiter whose member's holder is ``"<r or w>:<owner id>:<op id>"``, as its
    mode and owner id (a member of another shape is left as it is)."""
    match = _RW_TOKEN.match(waiter.holder)
    if match:
        mode = "read" if match[1] == "r" else "write"
        return replace(waiter, holder=match[2], mode=mode, label=holder_label(match[3]))
    return waiter


def _info(view: LockView) -> ReadWriteInfo:
    from .._info import ReadWriteInfo

    return detail(view, ReadWriteInfo)


def _read(keys: RWLockKeys, waiting: int) -> Plan[LockView]:
    state = yield from inspect(keys)
    info = state.info
    writers = [h for h in info.holders if h.mode == "write"]
    first = writers[0] if writers else (info.holders[0] if info.holders else None)
    view = many_holders_view(
        "ReadWriteLock",
        keys,
        (first.owner, first.count) if first else None,
        (h.ttl for h in info.holders),
        info.fence,
        info.waiters,
        info,
        label=first.label if first else None,
    )
    return (yield from with_waiting(view, keys, waiting, _refine))


def _holds(view: LockView) -> tuple[Hold, ...]:
    """Every hold, write holds first."""
    from .snapshot import Hold  # (loaded by the first read)

    ordered = sorted(_info(view).holders, key=lambda h: h.mode != "write")
    return tuple(Hold(h.owner, h.count, h.ttl, h.fence, h.mode, label=h.label) for h in ordered)


def read_hold_values(keys: RWLockKeys) -> Plan[dict[str, str]]:
    """The lock's hash as it stands: ``{"w:<owner>": "<count>|<fence>|<hold
    id>", ...}`` (a forced release needs the hold ids, which ``info()`` leaves out)."""
    raw = yield Command(("HGETALL", keys.lock))
    return hold_values(raw)


def hold_values(raw: object) -> dict[str, str]:
    """``HGETALL``'s reply (a dict, or a flat list) as text."""
    if isinstance(raw, dict):
        return {text(k): text(v) for k, v in raw.items()}
    items = list(raw) if isinstance(raw, list | tuple) else []
    return {text(k): text(v) for k, v in zip(items[::2], items[1::2], strict=False)}


def _force_release(
    keys: RWLockKeys, before: LockView, holds: Sequence[Hold], new_op: Callable[[], str]
) -> Plan[tuple[list[Hold], list[Hold]]]:
    values = yield from read_hold_values(keys)

    def end(hold: Hold) -> Plan[bool]:
        # its release once per level, with the hold's id (from its hash field's
        # value, "<count>|<fence>|<hold id>")
        value = values.get(("w:" if hold.mode == "write" else "r:") + hold.holder)
        count, _, rest = (value or "").partition("|")
        fence, _, hold_id = rest.partition("|")
        if not count or not hold_id or fence != str(hold.fence):
            return False  # the hold ended, or is another one now
        mode: Mode = "write" if hold.mode == "write" else "read"
        return (
            yield from release_levels(
                lambda: release(keys, hold.holder, mode, hold_id, hold.fence, op=new_op())
            )
        )

    return (yield from release_each(holds, end))


def _acl_keys(keys: RWLockKeys) -> tuple[str, ...]:
    # one owner's last-op key stands for all
    return (keys.lock, keys.fence, keys.waiters, keys.delay, keys.holds, keys.last_op("owner"))


#: The ``ReadWriteLock`` kind (see :class:`~tenure._plans.kind.Kind`).
RWLOCK: Kind[RWLockKeys] = Kind(
    name="ReadWriteLock",
    build=named("ReadWriteLock", rwlock_keys),
    read=_read,
    scripts=(RWLOCK_ACQUIRE, RWLOCK_RELEASE, RWLOCK_EXTEND, RWLOCK_INSPECT),
    acl_keys=_acl_keys,
    holds=_holds,
    refine_waiter=_refine,
    force_release=_force_release,
)
