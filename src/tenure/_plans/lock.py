"""Plans for :class:`tenure.Lock`: acquire, release, extend and inspect.

The protocol is the common one (``SET key token NX PX``, compare-and-delete
release), with a fencing token minted in the acquire script and a queue of
waiters to which a release hands the lock directly.

Waiting (DESIGN.md §4): the first attempt is made without listening. If the
lock is busy the plan becomes its process's one contender for the lock
(subscribing to its wake channel *before* trying again), queues its token,
and waits for a hand-off or for the holder's remaining lease (``pttl``),
whichever is first. A release sets the lock to the first live waiter's token,
mints its fence and publishes both, so the waiter holds the lock when the
message arrives: one round trip (the release) per hand-off, and no releaser
can barge ahead of the queue. A lost message costs latency, never liveness:
the waiter's next attempt finds its own token holding the lock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from .._errors import AlreadyHeldError, InvalidArgument, NotOwnedError
from .._keys import LockKeys
from .._protocol import Contend, Eval, HandedOff, Listening, Plan, Status, WaitWake
from .._scripts import LOCK_ACQUIRE, LOCK_EXTEND, LOCK_INSPECT, LOCK_RELEASE
from .._units import check_seconds, to_ms

Clock = Callable[[], float]

#: How long a fence key outlives its last acquire (ms). When it is gone the next
#: fence is seeded from the server's clock, so fences still increase.
FENCE_TTL_MS = 7 * 24 * 3600 * 1000

#: A lease handed over by a release is timed from the waiter's last queueing
#: call (the release came after it). If that was longer ago than this part of
#: the ttl, the new holder restarts its lease clock with one extend.
HANDOFF_RESYNC = 0.1

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
    member = ""  # our entry in the lock's queue, once this process listens
    queued_at = 0.0  # when our last queueing call was sent
    in_flight = False
    try:
        if blocking and (yield Listening(keys)):
            waiter = yield Contend(keys, token, timeout)
            if waiter is None:
                return None
            member = f"{waiter}|{ttl_ms}|{token}"
        while True:
            sent_at = now()
            in_flight = True
            status, value = yield Eval(
                LOCK_ACQUIRE,
                (keys.lock, keys.fence, keys.waiters),
                (token, owner + ":", ttl_ms, member, FENCE_TTL_MS),
            )
            in_flight = False
            if status is Status.OK:
                return Grant(token, int(value), ttl, sent_at + validity(ttl))
            if status is Status.OWNED_BY_CALLER:
                raise AlreadyHeldError(keys.name)
            queued_at = sent_at
            pttl = int(value)
            remaining = None if deadline is None else deadline - now()
            if not blocking or (remaining is not None and remaining <= 0):
                if member:  # leave the queue; a hand-off may just have made us holder
                    yield from _abandon(keys, token, member)
                return None
            if not member:
                waiter = yield Contend(keys, token, remaining)
                if waiter is None:
                    return None
                member = f"{waiter}|{ttl_ms}|{token}"
                continue
            wait = pttl / 1000 if pttl > 0 else NO_EXPIRY_RECHECK
            if remaining is not None:
                wait = min(wait, remaining)
            woken = yield WaitWake(wait)
            if isinstance(woken, HandedOff):
                if now() - queued_at <= ttl * HANDOFF_RESYNC:
                    return Grant(token, woken.fence, ttl, queued_at + validity(ttl))
                with contextlib.suppress(NotOwnedError):  # else: gone already; try again
                    expires_at = yield from extend(keys, token, woken.fence, ttl, now)
                    return Grant(token, woken.fence, ttl, expires_at)
    except GeneratorExit:
        raise
    except BaseException:
        # Cancelled, interrupted or cut off: leave the queue, and give the lock
        # back if an acquire was sent without its reply, or a hand-off came.
        if in_flight or member:
            yield from _abandon(keys, token, member)
        raise


def _abandon(keys: LockKeys, token: str, member: str) -> Plan[None]:
    """Best effort: leave the queue and release ``token`` if it holds the lock (the
    lease expires by itself, and a release skips waiters that are gone)."""
    with contextlib.suppress(Exception):
        yield _release_step(keys, token, member)


def _release_step(keys: LockKeys, token: str, member: str) -> Eval:
    return Eval(
        LOCK_RELEASE,
        (keys.lock, keys.waiters, keys.fence),
        (token, keys.wake_prefix, FENCE_TTL_MS, member),
    )


def release(keys: LockKeys, token: str, fence: int) -> Plan[None]:
    """Release the lock held by ``token`` and hand it to the first live waiter.

    ``fence`` is only used in the error message.

    Raises:
        NotOwnedError: the lock is not held with ``token`` (the lease expired,
            and perhaps another owner holds it now); nothing was changed.
    """
    status, _ = yield _release_step(keys, token, "")
    if status is Status.NOT_OWNED:
        raise NotOwnedError(keys.name, fence, "can't release: the lease expired before release")


def pass_on(keys: LockKeys, token: str) -> Plan[None]:
    """Release a lock that a release handed to ``token`` after its waiter had left,
    so that it goes on to the next waiter."""
    with contextlib.suppress(NotOwnedError):
        yield from release(keys, token, 0)


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
