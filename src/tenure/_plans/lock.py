"""Plans for :class:`tenure.Lock`: acquire, release, extend and inspect.

The protocol is the common one (``SET key token NX PX``, compare-and-delete
release), with a fencing token minted in the acquire script and a wake-up
list so that a release hands the lock to one waiting process.

Waiting (DESIGN.md §4): the first attempt is made without listening. If the
lock is busy the plan becomes its process's one contender for the lock
(subscribing to its wake channel *before* trying again), joins the lock's
waiters, and then waits for a wake or for the holder's remaining lease
(``pttl``), whichever is first. A lost wake therefore costs latency, never
liveness.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from .._errors import AlreadyHeldError, InvalidArgument, NotOwnedError
from .._keys import LockKeys
from .._protocol import Command, Contend, Eval, Plan, Status, WaitWake
from .._scripts import LOCK_ACQUIRE, LOCK_EXTEND, LOCK_INSPECT, LOCK_RELEASE
from .._units import check_seconds, to_ms

Clock = Callable[[], float]

#: How long a fence key outlives its last acquire (ms). When it is gone the next
#: fence is seeded from the server's clock, so fences still increase.
FENCE_TTL_MS = 7 * 24 * 3600 * 1000

#: How long a release reserves the lock for the waiter it wakes (ms): the
#: hand-off window. Nobody else can take the lock meanwhile, so a releaser that
#: asks again at once cannot starve the waiters; if the woken waiter does not
#: come (stalled), the reservation lapses.
HANDOFF_MS = 250

#: How often a waiter re-checks a lock whose holder set no expiry (a foreign
#: holder such as redis-py's Lock with ``timeout=None``), seconds.
NO_EXPIRY_RECHECK = 1.0


def validity(ttl: float) -> float:
    """Seconds a lease of ``ttl`` seconds may be trusted after its acquire was sent.

    Subtracts an allowance for clock drift between client and server: 1 % of the
    ttl plus 2 ms (the drift factor of the Redlock algorithm, redis.io
    "Distributed Locks with Redis").
    """
    return ttl - (ttl * 0.01 + 0.002)


@dataclass(frozen=True, slots=True)
class Grant:
    """A successful acquire: the token now holding the lock and its fence.

    ``expires_at`` is on the caller's clock (``time.monotonic()``): the moment
    the acquire was sent plus :func:`validity` of the ttl.
    """

    token: str
    fence: int
    ttl: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class LockState:
    """A snapshot of a lock in Redis."""

    holder: str
    pttl_ms: int
    fence: int
    waiters: int


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
) -> Plan[Grant | None]:
    """Take the lock for ``token`` (whose owner is ``owner``), waiting as the module says.

    Returns ``None`` when ``blocking`` is false and the lock is busy, or when
    ``timeout`` seconds pass first.

    Raises:
        AlreadyHeldError: ``owner`` already holds the lock.
        WrongTypeError: one of the lock's keys holds another type.
    """
    ttl_ms = to_ms(ttl, "ttl")
    deadline = None if timeout is None else now() + timeout
    waiter = ""  # this process's waiter id, once it listens
    listening = in_flight = False
    try:
        while True:
            sent_at = now()
            in_flight = True
            status, value = yield Eval(
                LOCK_ACQUIRE,
                (keys.lock, keys.fence, keys.waiters),
                (token, owner + ":", ttl_ms, waiter if listening else "", FENCE_TTL_MS),
            )
            in_flight = False
            if status is Status.OK:
                return Grant(token, int(value), ttl, sent_at + validity(ttl))
            if status is Status.OWNED_BY_CALLER:
                raise AlreadyHeldError(keys.name)
            pttl = int(value)
            remaining = None if deadline is None else deadline - now()
            if not blocking or (remaining is not None and remaining <= 0):
                if listening:  # so that no release hands the lock to a waiter gone
                    yield from _abandon(keys, "", waiter)
                return None
            if not listening:
                waiter = yield Contend(keys, remaining)
                if waiter is None:
                    return None
                listening = True
                continue
            wait = pttl / 1000 if pttl > 0 else NO_EXPIRY_RECHECK
            if remaining is not None:
                wait = min(wait, remaining)
            yield WaitWake(wait)
    except GeneratorExit:
        raise
    except BaseException:
        # Cancelled, interrupted or cut off: leave the waiters, and if an
        # acquire was sent but its reply never came, give the lock back.
        yield from _abandon(keys, token if in_flight else "", waiter if listening else "")
        raise


def _abandon(keys: LockKeys, token: str, waiter: str) -> Plan[None]:
    """Best effort: give back what a failed or cancelled acquire may hold (the
    lease expires by itself, and a release skips waiters that are gone)."""
    with contextlib.suppress(Exception):
        if waiter:
            yield Command(("ZREM", keys.waiters, waiter))
        if token:
            yield _release_step(keys, token, "")


def _release_step(keys: LockKeys, token: str, passer: str) -> Eval:
    return Eval(
        LOCK_RELEASE, (keys.lock, keys.waiters), (token, keys.wake_prefix, HANDOFF_MS, passer)
    )


def release(keys: LockKeys, token: str, fence: int) -> Plan[None]:
    """Release the lock held by ``token`` and hand it to the first live waiter.

    Raises:
        NotOwnedError: the lock is not held with ``token`` (the lease expired,
            and perhaps another owner holds it now); nothing was changed.
    """
    status, _ = yield _release_step(keys, token, "")
    if status is Status.NOT_OWNED:
        raise NotOwnedError(keys.name, fence, "can't release: the lease expired before release")


def pass_on(keys: LockKeys, waiter: str) -> Plan[None]:
    """Hand the lock on to its next waiter: a wake (and hand-off) reached ``waiter``,
    whose process no longer waits for this lock."""
    yield _release_step(keys, "", waiter)


def extend(keys: LockKeys, token: str, fence: int, seconds: float, now: Clock) -> Plan[float]:
    """Reset the lease held by ``token`` to end ``seconds`` from now.

    Returns the new ``expires_at`` on the caller's monotonic clock.

    Raises:
        InvalidArgument: ``seconds`` is not a positive number.
        NotOwnedError: the lock is not held with ``token``; nothing was changed.
    """
    ms = to_ms(seconds, "seconds")
    sent_at = now()
    status, _ = yield Eval(LOCK_EXTEND, (keys.lock,), (token, ms))
    if status is Status.NOT_OWNED:
        raise NotOwnedError(keys.name, fence, "can't extend: the lease expired before extend")
    return sent_at + validity(seconds)


def inspect(keys: LockKeys) -> Plan[LockState]:
    """Read the lock's holder, remaining lease, last fence and waiter count."""
    _, (holder, pttl, fence, waiters) = yield Eval(
        LOCK_INSPECT, (keys.lock, keys.fence, keys.waiters), ()
    )
    return LockState(str(holder), int(pttl), int(fence), int(waiters))
