"""The waiting loop shared by the locks and the semaphore (:class:`tenure.Lock`,
:class:`tenure.RLock`, :class:`tenure.Semaphore`).

Waiting (docs/algorithms.md, section 7): an attempt is made without listening. If the lock is
busy the plan becomes its process's one contender for the lock (subscribing to
its wake channel *before* trying again), queues itself with a member
(:meth:`Contender.member`: ``"<waiter id>|<claim ms>|<token>"`` for the locks),
and waits for a hand-off or for the holder's remaining lease (``pttl``),
whichever is first. A release hands the
lock to the first live waiter and publishes ``"<fence> <token>"`` on its wake
channel; what the waiter does with that message is the primitive's choice
(:meth:`Contender.handed_off`). A lost message costs latency, never liveness:
the waiter's next attempt finds the lock held for it.

The claim window: a hand-off gives the waiter a lease of only
:func:`claim_window` of its ttl (the middle part of its queue member), and the
waiter extends it to its full ttl soon after (its watchdog, 50 ms on, if it
still holds it). A waiter that is stalled (stopped,
swapped out) while its wake connection stays open hears the message, so the
release cannot tell it from a live one; it then keeps the others out for the
claim window, not for a whole ttl. So that the next waiter does not sleep
through that window on its own timer (the former holder's lease), the release
also tells it to try again when the window ends (:class:`Recheck`).

The loop is written once; each primitive supplies a :class:`Contender`: its
attempt script call, its queue member, how it reads the attempt's reply, what a
hand-off gives it, and how it leaves the queue.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._errors import NotOwnedError, TenureError
from .._keys import LockKeys
from .._protocol import (
    Contend,
    Eval,
    HandedOff,
    Listening,
    Plan,
    Recheck,
    Status,
    WaitWake,
    masterless,
)

Clock = Callable[[], float]

#: The claim window, seconds: the longest lease a release hands to a waiter
#: (shorter ttls are handed whole). The waiter extends it to its ttl soon, in
#: the background (the watchdog) or before its acquire returns (see
#: :func:`handed_off_until`), so a waiter that stalled with its wake connection
#: open keeps the lock from the others for at most this long. It is far above a
#: loaded machine's round trip, so that a live waiter never loses a hand-off.
HANDOFF_CLAIM = 1.0

#: :data:`HANDOFF_CLAIM` in milliseconds, as queue members carry it.
HANDOFF_CLAIM_MS = 1000

#: A lease handed over by a release is timed from the waiter's last queueing
#: call (the release came after it). If that was longer ago than this part of
#: the claim window, the new holder restarts its lease clock with one extend
#: before its acquire returns; else it trusts the claim and the watchdog extends
#: it (so at least 3/4 of the window is left for that extend to reach Redis).
HANDOFF_RESYNC = 0.25

#: How often a waiter re-checks a lock whose holder set no expiry (a foreign
#: holder such as redis-py's Lock with ``timeout=None``), seconds.
NO_EXPIRY_RECHECK = 1.0

#: A queued plan's attempt that meets no master for its slot (a Redis Cluster
#: failover, see :func:`tenure._protocol.masterless`) is sent again after a
#: pause: this long at first, doubled after each such attempt up to
#: :data:`MASTERLESS_PAUSE_CAP`, seconds. A wake ends a pause early: the hub
#: wakes its waiters once it has subscribed again on the slot's new master.
MASTERLESS_PAUSE = 0.05
MASTERLESS_PAUSE_CAP = 0.5


def validity(ttl: float) -> float:
    """Seconds a lease of ``ttl`` seconds may be trusted after its acquire was sent.

    Subtracts an allowance for clock drift between client and server: 1 % of the
    ttl plus 2 ms (the drift factor of the Redlock algorithm, redis.io
    "Distributed Locks with Redis").
    """
    return ttl - (ttl * 0.01 + 0.002)


def claim_window(ttl: float) -> float:
    """Seconds of lease a hand-off gives a waiter whose ttl is ``ttl`` seconds."""
    return min(ttl, HANDOFF_CLAIM)


def claim_ms(ttl_ms: int) -> int:
    """:func:`claim_window` in milliseconds, of a ttl of ``ttl_ms`` ms (the part of
    a queue member that says what lease a hand-off sets)."""
    return min(ttl_ms, HANDOFF_CLAIM_MS)


@dataclass(frozen=True, slots=True)
class Grant:
    """A successful acquire: the token now holding the lock and its fence.

    ``expires_at`` is on the caller's clock (``time.monotonic()``): the moment
    the acquire was sent plus :func:`validity` of the ttl. ``claim`` is 0.0, or,
    for a hand-off whose lease Redis holds only for the claim window (seconds)
    from the release, that window: ``expires_at`` is then the window's end (from
    the waiter's last queueing call), and the holder must extend the lease to its
    ttl soon (the watchdog does: one extend, even for a lease it does not
    renew). Keyword-only.
    """

    token: str
    fence: int
    ttl: float
    expires_at: float
    claim: float = field(default=0.0, kw_only=True)


@dataclass(frozen=True, slots=True)
class Refused:
    """An attempt's reply that refused it, taking nothing (the caller already
    holds the lock, the request does not fit what Redis has): ``error`` is
    what the acquire raises. A contender returns it rather than raising it,
    so that anything else that escapes while a reply is read (an interrupt of
    any class, from a signal handler) counts as "something may have been taken".
    """

    error: TenureError


def handed_off_until(
    ttl: float, queued_at: float, now: Clock, extend: Plan[float]
) -> Plan[tuple[float, float] | None]:
    """Until when (``expires_at``, on ``now``'s clock) a lease of ``ttl`` seconds
    that a release handed over may be trusted, and its claim window (the
    :class:`Grant`'s ``claim``): ``(expires_at, claim)``.

    Redis holds the lease for :func:`claim_window` of the ttl from the release,
    and ``queued_at`` is when the last queueing call was sent (the release came
    after it). If that is at most :data:`HANDOFF_RESYNC` of the window ago, the
    window is trusted from ``queued_at`` (no round trip; ``claim`` is the window
    when it is shorter than the ttl, for the watchdog to extend); else the lease
    is extended to the ttl at once with ``extend`` (the primitive's extend plan,
    started only then), and ``claim`` is 0.0. ``None``: the lease is already
    gone, or the extend met no master for the slot (a Redis Cluster failover:
    the waiter's next attempt, on the new master, finds the lock held for its
    token or free).
    """
    claim = claim_window(ttl)
    if now() - queued_at <= claim * HANDOFF_RESYNC:
        return queued_at + validity(claim), (claim if claim < ttl else 0.0)
    try:
        return (yield from extend), 0.0
    except NotOwnedError:
        return None  # gone already: try again
    except Exception as exc:
        if masterless(exc):  # the next attempt, on the slot's new master, settles it
            return None
        raise


class Contender(ABC):
    """One primitive's part in :func:`wait_turn`.

    Attributes:
        keys: the lock's keys.
        token: the string a release publishes after the fence when it hands the
            lock to this plan (the hub routes hand-offs by it); also the last
            part of the waiters member.
        ttl_ms: the lease asked for, in milliseconds (its :func:`claim_ms` is the
            waiters member's middle part).
        listen_first: whether a process that already listens for the lock skips
            the lone first attempt and queues at once (saves a round trip). A
            primitive whose owner may already hold the lock (reentrancy) must not
            skip it: queueing first would wait on the process-local gate, which
            another waiter of the same process may hold until this owner releases.
        pass_on: whether the hub releases a hand-off that reaches this process
            after the plan stopped waiting (see :class:`tenure._protocol.Contend`).
        own_channel: whether the plan queues as itself, on a wake channel of its
            own (see :class:`Contend`), instead of as its process's one contender.
        refresh: the longest wait, in seconds, between two attempts while queued
            (``None``: no limit), for a queue whose members must call again
            before a deadline to keep their place.
    """

    keys: LockKeys
    token: str
    ttl_ms: int
    listen_first: bool
    pass_on: bool = True
    own_channel: bool = False
    refresh: float | None = None

    def member(self, waiter: str) -> str:
        """This plan's member of the lock's queue, once this process's hub is ``waiter``:
        ``"<waiter id>|<claim ms>|<token>"`` (the lease a hand-off sets, :func:`claim_ms`)."""
        return f"{waiter}|{claim_ms(self.ttl_ms)}|{self.token}"

    @abstractmethod
    def attempt(self, member: str) -> Eval:
        """The script call that tries to take the lock, queueing ``member`` ("" = don't)."""

    @abstractmethod
    def outcome(self, status: Status, value: Any, sent_at: float) -> Grant | int | Refused:
        """Read an attempt's reply: a :class:`Grant`, the holder's pttl (ms) when
        busy, or :class:`Refused` when the reply refused the attempt (for
        instance when the caller already holds a non-reentrant lock).

        Whatever it raises is taken for an interrupt: the attempt may have taken
        the lock, and is given back.
        """

    @abstractmethod
    def handed_off(self, fence: int, queued_at: float) -> Plan[Grant | None]:
        """A release handed the lock to :attr:`token` with ``fence``; ``queued_at`` is
        when the last queueing attempt was sent. Return the grant, or ``None`` to
        attempt again."""

    @abstractmethod
    def leave(self, member: str, in_flight: bool) -> Plan[None]:
        """Best effort, the call's failures suppressed (never an interrupt, of
        any class: see :func:`~tenure._protocol.failed_calls_suppressed`):
        leave the queue (``member``, "" if not queued) and give back a lock
        handed to us or taken by an attempt whose reply was lost (``in_flight``)."""


def wait_turn(
    c: Contender, *, blocking: bool, timeout: float | None, now: Clock
) -> Plan[Grant | None]:
    """Take the lock as the module says; ``None`` when ``blocking`` is false and the
    lock is busy, or when ``timeout`` seconds pass first.

    Raises the error of a :class:`Refused` reply, after leaving the queue;
    anything else that escapes (an interrupt, a cancellation, a lost
    connection) after leaving the queue and giving back what the attempt in
    flight, or a hand-off, may have taken.
    Once queued, an attempt that meets no master for the slot (a Redis Cluster
    failover) is sent again until the deadline (see :func:`_attempted`).
    """
    keys, token = c.keys, c.token
    deadline = None if timeout is None else now() + timeout
    member = ""  # our entry in the lock's queue, once this process listens
    queued_at = 0.0  # when our last queueing call was sent
    in_flight = False
    try:
        if blocking and c.listen_first and (yield Listening(keys)):
            waiter = yield Contend(keys, token, timeout, c.pass_on, c.own_channel)
            if waiter is None:
                return None
            member = c.member(waiter)
        while True:
            in_flight = True
            attempted = yield from _attempted(c, member, deadline, now)
            if attempted is None:  # no master for the slot until the deadline
                yield from c.leave(member, True)
                return None
            sent_at, (status, value) = attempted
            # Until the reply is read, anything that escapes (an interrupt of any
            # class) may have left the lock taken: in flight, given back.
            result = c.outcome(status, value, sent_at)
            if isinstance(result, Refused):
                in_flight = False  # the reply said what happened: nothing taken
                raise result.error
            if isinstance(result, Grant):
                return result  # (in flight until returned: an interrupt gives it back)
            in_flight = False
            queued_at = sent_at
            pttl = result
            remaining = None if deadline is None else deadline - now()
            if not blocking or (remaining is not None and remaining <= 0):
                if member:  # leave the queue; a hand-off may just have made us holder
                    yield from c.leave(member, False)
                return None
            if not member:
                waiter = yield Contend(keys, token, remaining, c.pass_on, c.own_channel)
                if waiter is None:
                    return None
                member = c.member(waiter)
                continue
            # pttl 0: the lease ends within the millisecond; -1: no expiry at all
            wait = max(pttl, 1) / 1000 if pttl >= 0 else NO_EXPIRY_RECHECK
            if remaining is not None:
                wait = min(wait, remaining)
            if c.refresh is not None:
                wait = min(wait, c.refresh)
            until = now() + wait
            woken = yield WaitWake(wait)
            while isinstance(woken, Recheck):  # another waiter got it: try when its claim ends
                until = min(until, now() + woken.seconds)
                left = until - now()
                woken = (yield WaitWake(left)) if left > 0 else False
            if isinstance(woken, HandedOff):
                grant = yield from c.handed_off(woken.fence, queued_at)
                if grant is not None:
                    return grant
    except GeneratorExit:
        raise
    except BaseException:
        # Cancelled, interrupted or cut off: leave the queue, and give the lock
        # back if an acquire was sent without its reply, or a hand-off came.
        if in_flight or member:
            yield from c.leave(member, in_flight)
        raise


def _attempted(
    c: Contender, member: str, deadline: float | None, now: Clock
) -> Plan[tuple[float, tuple[Status, Any]] | None]:
    """Send ``c``'s attempt, queueing ``member``: when it was sent, and its reply.

    A queued plan (``member`` given) waits within its timeout whatever the
    slot's master does: its attempt that meets no master (a Redis Cluster
    failover, :func:`tenure._protocol.masterless`) is sent again after a pause
    (:data:`MASTERLESS_PAUSE`) that a wake ends early, until one is answered;
    ``None`` once ``deadline`` has passed (the attempt may have run: the caller
    leaves as after a lost reply). A hand-off or recheck heard meanwhile needs
    nothing more: the next attempt finds the lock held for its token. Any other
    error, and this one for a plan not queued (a fresh call), is raised."""
    failures = 0
    while True:
        sent_at = now()
        try:
            return sent_at, (yield c.attempt(member))
        except Exception as exc:
            if not member or not masterless(exc):
                raise
        failures += 1
        left = math.inf if deadline is None else deadline - now()
        if left <= 0:
            return None
        pause = MASTERLESS_PAUSE * 2 ** min(failures - 1, 8)
        yield WaitWake(min(left, pause, MASTERLESS_PAUSE_CAP))
