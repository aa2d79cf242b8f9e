"""Plans for :class:`tenure.RLock`: acquire, release, extend and inspect.

The lock is a hash at the lock key, ``{<owner id>: <hold count>}``, whose PX is
the lease (Redisson's RLock layout). The owner id is the driver's
``current_owner()`` (client process id + thread or task), so the owner itself
is what Redis stores: a thread or task that holds the lock takes it again at
once, counting up, and keeps the fence minted by its first acquire. Release
counts down; at zero the lock is deleted and handed to the first live waiter,
whose owner id the waiters member carries (``rlock_release.lua``).

Waiting is :mod:`.waiting`'s loop, with two differences from :class:`tenure.Lock`:

- The first attempt is always made alone, never queued at once, even when the
  process already listens for the lock: an owner that already holds the lock
  must re-enter without waiting on the process-local gate, which another
  waiter of the same process may hold until this owner releases.
- A hand-off message ("<fence> <owner id>") only wakes the waiter, which then
  claims the hold with one more attempt (``rlock_acquire.lua`` sees the hold
  handed to the queued owner and does not count it twice, and resets its
  lease, handed over for the claim window only, to the full lease). The owner id is
  stable for a thread's or task's life, so a message delayed past the wait it
  was meant for could reach a later wait of the same owner: it is never
  trusted on its own.

A waiter that gives up (timeout, cancellation, a lost reply) leaves the queue
and gives back a hold handed to it, in one call. A first attempt whose reply is
lost (an interrupt, a cut connection) is undone by a release that counts down
only if that attempt is the lock's last op (``rlock_release.lua``'s undone op):
it was applied and nothing changed since, so the count it added is taken back
and never a level the owner held before it. One case is left: an attempt whose
command reaches Redis only after its undo (the undo goes on another
connection); the lock then stays held until its lease runs out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .._errors import NotOwnedError, ProtocolError
from .._keys import LockKeys, rlock_keys
from .._label import split_holder
from .._protocol import Eval, Plan, Status, failed_calls_suppressed
from .._scripts import RLOCK_ACQUIRE, RLOCK_EXTEND, RLOCK_INSPECT, RLOCK_RELEASE
from .._units import lease_ms
from .common import FENCE_KEEP_MS, extended, least_left_ms
from .kind import Kind, named, release_each, release_levels, with_waiting
from .waiting import Clock, Contender, Grant, Refused, validity, wait_turn

if TYPE_CHECKING:  # (the snapshot types are imported on first use)
    from .snapshot import Hold, LockView, Waiter


@dataclass(frozen=True, slots=True)
class RLockState:
    """A snapshot of a reentrant lock in Redis.

    Attributes:
        holder: the holding owner id, ``""`` when free.
        count: the holder's hold count (0 when free).
        pttl_ms: the remaining lease in ms; -2 when free, -1 with no expiry.
        fence: the last fence minted for the name (0 if none is known).
        waiters: the number of queued waiters.
        mine: the asking owner's hold count (0 when it holds none).
    """

    holder: str
    count: int
    pttl_ms: int
    fence: int
    waiters: int
    mine: int


def acquire(
    keys: LockKeys,
    owner: str,
    ttl: float,
    *,
    blocking: bool,
    timeout: float | None,
    now: Clock,
    op: str,
    delay_ms: int = 0,
    label: str = "",
) -> Plan[Grant | None]:
    """Take the lock for ``owner``, or enter it again if ``owner`` holds it.

    ``op`` is unique per call: a script call retried after its reply was lost
    (by redis-py) is recognised by it and not counted twice. ``delay_ms`` is the
    lock-delay (see :class:`tenure.Lock`). ``label`` (the holder's label as
    :func:`tenure._label.label_suffix` gives it, or "") goes after the owner id
    in the field of a new hold and in the queue member; a re-entry keeps the
    hold's field.

    Returns a :class:`Grant` whose ``token`` is ``owner``; a re-entry's fence
    is the hold's fence. Returns ``None`` when ``blocking`` is false and another
    owner holds the lock, or when ``timeout`` seconds pass first.

    Raises:
        InvalidArgument: ``ttl`` is not a lease length (0.01 s to a year).
        WrongTypeError: one of the lock's keys holds another type.
    """
    contender = _RLockContender(keys, owner, ttl, lease_ms(ttl), label)
    contender.op, contender.delay_ms = op, delay_ms
    return (yield from wait_turn(contender, blocking=blocking, timeout=timeout, now=now))


class _RLockContender(Contender):
    listen_first = False  # see the module docstring
    # A hold handed to an owner that gave up is given back by its leave (the
    # queue member is removed first, so no later release hands it one): the
    # hub has nothing to pass on, and the Lock release it would run does not
    # fit an RLock's hash.
    pass_on = False
    op = ""
    delay_ms = 0

    def __init__(self, keys: LockKeys, owner: str, ttl: float, ttl_ms: int, label: str) -> None:
        self.keys, self.owner, self.ttl, self.ttl_ms = keys, owner, ttl, ttl_ms
        self.token = owner + label  # (what the member and a hand-off's message carry)

    def attempt(self, member: str) -> Eval:
        keys = self.keys
        return Eval(
            RLOCK_ACQUIRE,
            (keys.lock, keys.fence, keys.waiters, keys.delay, keys.released),
            (
                self.token,
                self.ttl_ms,
                member,
                FENCE_KEEP_MS,
                self.delay_ms,
                self.op,
                keys.wake_prefix,
            ),
        )

    def outcome(self, status: Status, value: Any, sent_at: float) -> Grant | int | Refused:
        if status is Status.OK:
            return Grant(self.owner, int(value), self.ttl, sent_at + validity(self.ttl))
        if status is Status.BUSY:
            return int(value)
        raise ProtocolError(f"{RLOCK_ACQUIRE.name}: unexpected status {status.name}")

    def handed_off(self, fence: int, queued_at: float) -> Plan[Grant | None]:
        return None  # claim it with the next attempt (see the module docstring)
        yield  # a generator

    def leave(self, member: str, in_flight: bool) -> Plan[None]:
        if member:  # queued: any hold it has came from this acquire
            with failed_calls_suppressed():
                yield _release_step(self.keys, self.token, "", member, "", self.delay_ms)
        elif in_flight and self.op:  # the first attempt, if applied (module docstring)
            with failed_calls_suppressed():
                op = self.op + "-undo"
                yield _release_step(self.keys, self.token, "", "", op, self.delay_ms, self.op)


def _release_step(
    keys: LockKeys,
    owner: str,
    fence: str,
    member: str,
    op: str = "",
    delay_ms: int = 0,
    undone: str = "",
) -> Eval:
    """``rlock_release.lua``; ``undone``: the op of an acquire to undo (if applied)."""
    args: tuple[str | int, ...] = (
        owner,
        fence,
        keys.wake_prefix,
        FENCE_KEEP_MS,
        member,
        delay_ms,
        op,
    )
    return Eval(
        RLOCK_RELEASE,
        (keys.lock, keys.waiters, keys.fence, keys.delay, keys.released),
        (*args, undone) if undone else args,
    )


def release(
    keys: LockKeys, owner: str, fence: int, *, op: str = "", delay_ms: int = 0
) -> Plan[int]:
    """Count down ``owner``'s hold (the one with ``fence``); at zero, hand the lock
    to the first live waiter (with a lock-delay of ``delay_ms`` for its hold).
    Returns the count left (0: no longer held).

    ``op`` (unique per call; "" for none) makes a retry of a release whose reply
    was lost count down only once.

    Raises:
        NotOwnedError: ``owner`` holds no count, or its hold has another fence (the
            lease expired, and perhaps a new hold began); nothing was changed.
    """
    status, value = yield _release_step(keys, owner, str(fence), "", op, delay_ms)
    if status is Status.NOT_OWNED:
        raise NotOwnedError(
            keys.name, fence, "can't release: not held (the lease expired, or it was released)"
        )
    return int(value)


def renewal(
    keys: LockKeys, owner: str, fence: int, seconds: float, *, ttl: float, delay_ms: int = 0
) -> Eval:
    """The script call that resets the lease of ``owner``'s hold (the one with
    ``fence``, whose lease is now ``ttl`` seconds long) to end ``seconds`` from
    now, unless it has less left than the holder's clock allows for drift.

    Reply: ``(OK, count)``, or ``(NOT_OWNED, late)`` with ``late`` 1 when refused
    for having too little left.

    Raises:
        InvalidArgument: ``seconds`` is not a lease length (0.01 s to a year).
    """
    ms = lease_ms(seconds, "seconds")
    return Eval(
        RLOCK_EXTEND,
        (keys.lock, keys.fence, keys.delay),
        (owner, fence, ms, FENCE_KEEP_MS, least_left_ms(ttl), delay_ms),
    )


def extend(
    keys: LockKeys,
    owner: str,
    fence: int,
    seconds: float,
    now: Clock,
    *,
    ttl: float,
    delay_ms: int = 0,
) -> Plan[float]:
    """Reset the lease of ``owner``'s hold (the one with ``fence``, now ``ttl``
    seconds long) to end ``seconds`` from now (see :func:`renewal`). Returns the
    new ``expires_at`` on the caller's monotonic clock.

    Raises:
        InvalidArgument: ``seconds`` is not a lease length (0.01 s to a year).
        NotOwnedError: ``owner`` holds no count, or its hold has another fence, or
            its lease had too little left to be trusted; nothing was changed.
    """
    step = renewal(keys, owner, fence, seconds, ttl=ttl, delay_ms=delay_ms)
    return (yield from extended(step, keys.name, fence, seconds, now))


def inspect(keys: LockKeys, owner: str = "") -> Plan[RLockState]:
    """Read the holder, its count, the lease left, the last fence, the waiter count,
    and ``owner``'s hold count."""
    _, (holder, count, pttl, fence, waiters, mine) = yield Eval(
        RLOCK_INSPECT, (keys.lock, keys.fence, keys.waiters), (owner,)
    )
    return RLockState(str(holder), int(count), int(pttl), int(fence), int(waiters), int(mine))


# --- the kind, for the operator tools -------------------------------------------------------


def _read(keys: LockKeys, waiting: int) -> Plan[LockView]:
    from .snapshot import LockView  # (loaded by the first read)

    r = yield from inspect(keys)
    owner, label = split_holder(r.holder)
    view = LockView(
        "RLock", keys.name, keys.lock, owner, r.count, r.pttl_ms, r.fence, r.waiters, label=label
    )
    return (yield from with_waiting(view, keys, waiting, _refine))


def _refine(waiter: Waiter) -> Waiter:
    """A waiter whose member's holder is ``"<owner id>;<label>"``, as its owner
    id and its label (the operator's views name an RLock's holder by its owner id)."""
    owner, label = split_holder(waiter.holder)
    return replace(waiter, holder=owner, label=label) if label is not None else waiter


def _force_release(
    keys: LockKeys, before: LockView, holds: Sequence[Hold], new_op: Callable[[], str]
) -> Plan[tuple[list[Hold], list[Hold]]]:
    def end(hold: Hold) -> Plan[bool]:
        return (yield from release_levels(lambda: release(keys, hold.holder, hold.fence)))

    return (yield from release_each(holds, end))


def _acl_keys(keys: LockKeys) -> tuple[str, ...]:
    return (keys.lock, keys.fence, keys.waiters, keys.delay, keys.released)


#: The ``RLock`` kind (see :class:`~tenure._plans.kind.Kind`).
RLOCK: Kind[LockKeys] = Kind(
    name="RLock",
    build=named("RLock", rlock_keys),
    read=_read,
    scripts=(RLOCK_ACQUIRE, RLOCK_RELEASE, RLOCK_EXTEND, RLOCK_INSPECT),
    acl_keys=_acl_keys,
    refine_waiter=_refine,
    force_release=_force_release,
)
