"""Plans for :class:`tenure.Lock`: acquire, release, extend and inspect.

The protocol is the common one (``SET key token NX PX``, compare-and-delete
release), with a fencing token minted in the acquire script and a queue of
waiters to which a release hands the lock directly.

Waiting is :mod:`.waiting`'s loop (docs/algorithms.md, section 7). A
release sets the lock to the first live waiter's token, for its claim
window, mints its fence and publishes both, so the waiter holds the lock
when the message arrives: one
round trip (the release) per hand-off, and no releaser can barge ahead of the
queue; the watchdog then extends the claim to the full lease in the background
(see :mod:`.waiting`). The token is unique per acquire, so the message is
trusted as it is.

Exact-key mode (``Lock(key=K)``, :attr:`LockKeys.chain` set): foreign clients
(redis-py's ``Lock``, node-redlock, redsync) poll ``K`` with ``SET NX`` and
hear no hand-off, so an endless chain of hand-offs would starve them, and a
poller lands at most once per poll whatever tenure does. So a release hands on
at most :data:`EXACT_CHAIN` times in a row; the next one leaves ``K`` free for
a window (tenure's own acquires stay off it meanwhile) and then the first
waiter takes it with ``SET NX`` (or a foreign client got it first). The window:

- :data:`EXACT_SHORT_WINDOW_MS` when no foreign holder was seen in the last
  :data:`FOREIGN_MEMORY_MS`: the cost when only tenure uses the key;
- once one was seen, up to :data:`FOREIGN_WINDOW_MS` (longer than the retry
  period of node-redlock's and redis-py's defaults): the first waiter looks
  every :data:`FOREIGN_POLL_MS` and ends the window when it finds a foreign
  client holding ``K``; a window in which it found none halves the next one,
  down to :data:`EXACT_WINDOW_MS`, and a foreign holder seen makes the next
  one full again.

A release that leaves ``K`` free with nobody queued, while a foreign holder was
seen lately, lets the next tenure acquire count on (and at the bound it leaves
the window all the same), so the bound is: while a
foreign client keeps asking, retrying at least every :data:`FOREIGN_WINDOW_MS`,
tenure holds ``K`` at most ``EXACT_CHAIN + 1`` times in a row between two of its
holds (from the first time tenure saw it hold ``K``). Tenure's order is kept:
while tenure waiters are queued and ``K`` is free, only the first of them takes
it, so a releaser that asks again still queues behind them. A foreign holder's
release publishes nothing, so while one holds ``K`` the first tenure waiter
polls (every :data:`FOREIGN_POLL_MS` at first, then every tenth of the time the
holder has held ``K`` so far, up to :data:`FOREIGN_OTHERS_MS`; the others every
:data:`FOREIGN_OTHERS_MS`, in case the first is gone) instead of sleeping
through the holder's whole lease. A foreign client that asks again at once
after its own release (redis-py's ``Lock`` in a loop) can't be kept from taking
the key back: tenure's poll must land in that gap.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .._errors import AlreadyHeldError, InvalidArgument, NotOwnedError, WrongTypeError
from .._keys import LockKeys, lock_keys
from .._label import split_holder
from .._protocol import Command, Eval, Plan, Status, failed_calls_suppressed
from .._scripts import LOCK_ACQUIRE, LOCK_EXTEND, LOCK_INSPECT, LOCK_RELEASE
from .._units import check_seconds, lease_ms
from .common import FENCE_KEEP_MS, extended, fence_keep_ms, least_left_ms, released
from .kind import Kind, read_waiters, token_release, with_waiting
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
    from .._info import LockInfo
    from .snapshot import LockView

#: Exact-key mode: the most hand-offs in a row before a release leaves the key free.
EXACT_CHAIN = 2

#: Exact-key mode: the least time (ms) a release at the chain bound leaves the
#: key to foreign clients before tenure's first waiter takes it again, while a
#: foreign holder was seen in the last :data:`FOREIGN_MEMORY_MS`.
EXACT_WINDOW_MS = 10

#: Exact-key mode: the full window (ms), left after a window in which (or after
#: which) tenure saw a foreign client hold the key; it ends early when tenure's
#: first waiter sees a foreign client take the key. Each window in which none
#: was seen halves the next, down to :data:`EXACT_WINDOW_MS`. Longer than the
#: retry period of node-redlock's defaults (100-300 ms) and redis-py's (0.1 s),
#: so that such a client retrying all along lands in every full window.
FOREIGN_WINDOW_MS = 500

#: Exact-key mode: the window when no foreign holder was seen lately (ms): the
#: cost when only tenure uses the key, and enough for a poller to get in at
#: times (after which the long window applies).
EXACT_SHORT_WINDOW_MS = 2

#: Exact-key mode: how long (ms) a foreign holder seen by an acquire makes the
#: releases at the chain bound leave the long window.
FOREIGN_MEMORY_MS = 5000

#: Exact-key mode: how often (ms), at the shortest, the first queued waiter
#: re-tries a key held by a foreign client (whose release wakes nobody): every
#: tenth of the time that holder has been seen holding it, at least this often
#: and at most every :data:`FOREIGN_OTHERS_MS` (never beyond its remaining lease).
#: Also how often it looks whether a foreign client took the key during a
#: window longer than twice this (the window ends when it finds one).
FOREIGN_POLL_MS = 5

#: Exact-key mode: how often (ms) the other queued waiters re-try a key that a
#: foreign client holds or that is free while they queue (only so that they go on
#: if the first waiter is gone).
FOREIGN_OTHERS_MS = 1000


@dataclass(frozen=True, slots=True)
class LockState:
    """A snapshot of a lock in Redis."""

    holder: str
    pttl_ms: int
    fence: int
    waiters: int


def lock_info(
    name: str,
    holder: str,
    count: int,
    pttl_ms: int,
    fence: int,
    waiters: int,
    *,
    bare: bool = False,
) -> LockInfo:
    """Build a :class:`LockInfo` from a snapshot's raw fields: ``holder`` as
    stored (a token, or with ``bare`` an RLock's field, whose label is cut off
    so that ``holder`` is the owner id), its label decoded."""
    from .._info import LockInfo  # (loaded on first use)

    stem, label = split_holder(holder)
    return LockInfo(
        name,
        (stem if bare else holder) or None,
        count if holder else 0,
        pttl_ms / 1000 if holder and pttl_ms >= 0 else None,
        fence,
        waiters,
        label=label,
    )


def check_acquire(blocking: object, timeout: object) -> float | None:
    """Validate ``acquire(blocking, timeout)``; return the timeout in seconds or ``None``.

    Raises:
        InvalidArgument: ``blocking`` is not a bool, ``timeout`` is negative or not
            a number, or a timeout was given with ``blocking=False``.
    """
    if not isinstance(blocking, bool):
        raise InvalidArgument(f"blocking must be True or False, not {blocking!r}")
    if timeout is None:
        return None
    seconds = check_seconds(timeout, "timeout", allow_zero=True)
    if not blocking:
        raise InvalidArgument(f"can't give a timeout ({timeout!r}) with blocking=False")
    return seconds


def acquire(
    keys: LockKeys,
    owner: str,
    token: str,
    ttl: float,
    *,
    blocking: bool,
    timeout: float | None,
    now: Clock,
    maybe_held: bool = False,
    delay_ms: int = 0,
) -> Plan[Grant | None]:
    """Take the lock for ``token`` (whose owner is ``owner``), waiting as the module says.

    ``delay_ms``: the lock-delay, in ms (0 for none): if this hold's lease ends
    without a release, the name stays unavailable for that much longer.

    ``maybe_held``: this process believes ``owner`` holds the lock already. The
    first attempt is then always made alone (never queued behind this process's
    other waiters), so that its reply settles it: :class:`AlreadyHeldError` if
    Redis agrees, else the lock was lost meanwhile and the acquire goes on.

    Returns ``None`` when ``blocking`` is false and the lock is busy, or when
    ``timeout`` seconds pass first.

    Raises:
        AlreadyHeldError: ``owner`` already holds the lock.
        WrongTypeError: one of the lock's keys holds another type.
    """
    contender = _LockContender(keys, owner, token, ttl, lease_ms(ttl), now)
    contender.delay_ms = delay_ms
    contender.listen_first = not maybe_held
    return (yield from wait_turn(contender, blocking=blocking, timeout=timeout, now=now))


class _LockContender(Contender):
    listen_first = True
    delay_ms = 0

    def __init__(
        self, keys: LockKeys, owner: str, token: str, ttl: float, ttl_ms: int, now: Clock
    ) -> None:
        self.keys, self.owner, self.token = keys, owner, token
        self.ttl, self.ttl_ms, self.now = ttl, ttl_ms, now

    def attempt(self, member: str) -> Eval:
        keys = self.keys
        args = (
            self.token,
            self.owner + ":",
            self.ttl_ms,
            member,
            fence_keep_ms(self.ttl_ms),
            self.delay_ms,
        )
        if not keys.chain:
            return Eval(
                LOCK_ACQUIRE,
                (keys.lock, keys.fence, keys.waiters, keys.delay),
                (*args, keys.wake_prefix),
            )
        return Eval(
            LOCK_ACQUIRE,
            (keys.lock, keys.fence, keys.waiters, keys.delay, keys.chain, keys.foreign),
            (
                *args,
                keys.wake_prefix,
                FOREIGN_POLL_MS,
                FOREIGN_OTHERS_MS,
                FOREIGN_MEMORY_MS,
                FOREIGN_WINDOW_MS,
            ),
        )

    def outcome(self, status: Status, value: Any, sent_at: float) -> Grant | int | Refused:
        if status is Status.OK:
            return Grant(self.token, int(value), self.ttl, sent_at + validity(self.ttl))
        if status is Status.OWNED_BY_CALLER:
            return Refused(AlreadyHeldError(self.keys.name))
        return int(value)

    def handed_off(self, fence: int, queued_at: float) -> Plan[Grant | None]:
        ttl, token = self.ttl, self.token
        # Redis holds it for the claim window: its drift allowance is the window's
        claim = claim_window(ttl)
        refresh = extend(self.keys, token, fence, ttl, self.now, ttl=claim, delay_ms=self.delay_ms)
        until = yield from handed_off_until(ttl, queued_at, self.now, refresh)
        return None if until is None else Grant(token, fence, ttl, until[0], claim=until[1])

    def leave(self, member: str, in_flight: bool) -> Plan[None]:
        yield from _abandon(self.keys, self.token, member)


def _abandon(keys: LockKeys, token: str, member: str) -> Plan[None]:
    """Best effort: leave the queue and release ``token`` if it holds the lock (the
    lease expires by itself, and a release skips waiters that are gone)."""
    with failed_calls_suppressed():
        yield _release_step(keys, token, member)


def _release_step(keys: LockKeys, token: str, member: str, delay_ms: int = 0, op: str = "") -> Eval:
    names = (keys.lock, keys.waiters, keys.fence, keys.delay, keys.release_record(op))
    args = (token, keys.wake_prefix, FENCE_KEEP_MS, member, delay_ms, op)
    if not keys.chain:
        return Eval(LOCK_RELEASE, names, args)
    return Eval(
        LOCK_RELEASE,
        (*names, keys.chain, keys.foreign),
        (*args, EXACT_CHAIN, EXACT_WINDOW_MS, EXACT_SHORT_WINDOW_MS, FOREIGN_POLL_MS),
    )


def release(
    keys: LockKeys, token: str, fence: int, delay_ms: int = 0, *, op: str = ""
) -> Plan[None]:
    """Release the lock held by ``token`` and hand it to the first live waiter
    (with a lock-delay of ``delay_ms`` for its hold); in exact-key mode, after
    :data:`EXACT_CHAIN` hand-offs in a row, leave it free instead (see the module).

    Idempotent per call: the same call (``op``, its id, non-empty) retried
    after its reply was lost (within 120 s) succeeds again; any other call
    with the same token (a copy of the lease, say) finds it not owned.
    ``fence`` is only used in the error message.

    Raises:
        NotOwnedError: the lock is not held with ``token`` (the lease expired,
            and perhaps another owner holds it now); nothing was changed.
    """
    yield from released(_release_step(keys, token, "", delay_ms, op), keys.name, fence)


def pass_on(keys: LockKeys, token: str) -> Plan[None]:
    """Release a lock that a release handed to ``token`` after its waiter had left,
    so that it goes on to the next waiter."""
    with contextlib.suppress(NotOwnedError):
        yield from release(keys, token, 0)


def renewal(keys: LockKeys, token: str, seconds: float, *, ttl: float, delay_ms: int = 0) -> Eval:
    """The script call that resets the lease of ``token`` (now ``ttl`` seconds
    long) to end ``seconds`` from now, unless it has less left than the holder's
    clock allows for drift (then it is lost to the holder: never revived). The
    name's fence key is kept alive with the lease (:data:`FENCE_KEEP_MS`, or the
    lease when longer), so that ``info()`` and ``tenure inspect`` show the fence
    of a lock held for hours.

    Reply: ``(OK, 0)``, or ``(NOT_OWNED, late)`` with ``late`` 1 when refused
    for having too little left.

    Raises:
        InvalidArgument: ``seconds`` is not a lease length (0.01 s to a year).
    """
    ms = lease_ms(seconds, "seconds")
    return Eval(
        LOCK_EXTEND,
        (keys.lock, keys.delay, keys.fence),
        (token, ms, least_left_ms(ttl), delay_ms, FENCE_KEEP_MS),
    )


def extend(
    keys: LockKeys,
    token: str,
    fence: int,
    seconds: float,
    now: Clock,
    *,
    ttl: float,
    delay_ms: int = 0,
) -> Plan[float]:
    """Reset the lease held by ``token`` (now ``ttl`` seconds long) to end
    ``seconds`` from now (see :func:`renewal`).

    Returns the new ``expires_at`` on the caller's monotonic clock.

    Raises:
        InvalidArgument: ``seconds`` is not a lease length (0.01 s to a year).
        NotOwnedError: the lock is not held with ``token``, or its lease had too
            little left to be trusted; nothing was changed.
    """
    step = renewal(keys, token, seconds, ttl=ttl, delay_ms=delay_ms)
    return (yield from extended(step, keys.name, fence, seconds, now))


def inspect(keys: LockKeys) -> Plan[LockState]:
    """Read the lock's holder, remaining lease, last fence and waiter count."""
    _, (holder, pttl, fence, waiters) = yield Eval(
        LOCK_INSPECT, (keys.lock, keys.fence, keys.waiters), ()
    )
    return LockState(str(holder), int(pttl), int(fence), int(waiters))


# --- the kind, for the operator tools and the hub -------------------------------------------


def _build(name: str | None, key: str | None, prefix: str) -> LockKeys:
    return lock_keys(name, key=key, prefix=prefix)


def _read(keys: LockKeys, waiting: int) -> Plan[LockView]:
    from .snapshot import LockView  # (loaded by the first read)

    s = yield from inspect(keys)
    count = 1 if s.holder else 0
    queued = yield from _redlock_queued(keys)
    waiters = s.waiters + queued
    view = LockView("Lock", keys.name, keys.lock, s.holder, count, s.pttl_ms, s.fence, waiters)
    view = yield from with_waiting(replace(view, waiters=s.waiters), keys, waiting)
    left = waiting - len(view.waiting)
    if queued and left > 0:  # then a Redlock's waiters on this master, in their queue's order
        more = yield from read_waiters(replace(keys, waiters=keys.quorum), left)
        view = replace(view, waiting=view.waiting + more)
    return replace(view, waiters=waiters)


def _redlock_queued(keys: LockKeys) -> Plan[int]:
    """How many waiters of a :class:`tenure.Redlock` of this name queue on this
    master (its ``quorum`` key; a Lock's own waiters are in ``waiters``).

    Raises:
        WrongTypeError: the key holds another type than a sorted set.
    """
    if not keys.quorum:
        return 0
    try:
        n = yield Command(("ZCARD", keys.quorum))
    except Exception as exc:  # the client library's error for WRONGTYPE
        if "WRONGTYPE" in str(exc):
            raise WrongTypeError(keys.quorum) from exc
        raise
    return int(n or 0)


def _acl_keys(keys: LockKeys) -> tuple[str, ...]:
    return (keys.lock, keys.fence, keys.waiters, keys.delay, keys.release_record("0"))


#: The ``Lock`` kind (see :class:`~tenure._plans.kind.Kind`).
LOCK: Kind[LockKeys] = Kind(
    name="Lock",
    build=_build,
    read=_read,
    scripts=(LOCK_ACQUIRE, LOCK_RELEASE, LOCK_EXTEND, LOCK_INSPECT),
    acl_keys=_acl_keys,
    exact_key=True,
    force_release=token_release(release),
    pass_on=pass_on,
)
