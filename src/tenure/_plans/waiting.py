"""The waiting loop shared by the locks and the semaphore (:class:`tenure.Lock`,
:class:`tenure.RLock`, :class:`tenure.Semaphore`).

Waiting (DESIGN.md §4): an attempt is made without listening. If the lock is
busy the plan becomes its process's one contender for the lock (subscribing to
its wake channel *before* trying again), queues itself with a member
(:meth:`Contender.member`: ``"<waiter id>|<lease ms>|<token>"`` for the locks),
and waits for a hand-off or for the holder's remaining lease (``pttl``),
whichever is first. A release hands the
lock to the first live waiter and publishes ``"<fence> <token>"`` on its wake
channel; what the waiter does with that message is the primitive's choice
(:meth:`Contender.handed_off`). A lost message costs latency, never liveness:
the waiter's next attempt finds the lock held for it.

The loop is written once; each primitive supplies a :class:`Contender`: its
attempt script call, its queue member, how it reads the attempt's reply, what a
hand-off gives it, and how it leaves the queue.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._errors import NotOwnedError
from .._keys import LockKeys
from .._protocol import Contend, Eval, HandedOff, Listening, Plan, Status, WaitWake

Clock = Callable[[], float]

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


def handed_off_until(
    ttl: float, queued_at: float, now: Clock, extend: Plan[float]
) -> Plan[float | None]:
    """Until when (``expires_at``, on ``now``'s clock) a lease of ``ttl`` seconds
    that a release handed over may be trusted; ``queued_at`` is when the last
    queueing call was sent (the release came after it). If that is more than
    :data:`HANDOFF_RESYNC` of the ttl ago, the lease clock is restarted with
    ``extend`` (the primitive's extend plan, started only then). ``None``: the
    lease is already gone.
    """
    if now() - queued_at <= ttl * HANDOFF_RESYNC:
        return queued_at + validity(ttl)
    with contextlib.suppress(NotOwnedError):  # else: gone already; try again
        return (yield from extend)
    return None


class Contender(ABC):
    """One primitive's part in :func:`wait_turn`.

    Attributes:
        keys: the lock's keys.
        token: the string a release publishes after the fence when it hands the
            lock to this plan (the hub routes hand-offs by it); also the last
            part of the waiters member.
        ttl_ms: the lease asked for, in milliseconds (the waiters member's middle part).
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
        ``"<waiter id>|<lease ms>|<token>"``."""
        return f"{waiter}|{self.ttl_ms}|{self.token}"

    @abstractmethod
    def attempt(self, member: str) -> Eval:
        """The script call that tries to take the lock, queueing ``member`` ("" = don't)."""

    @abstractmethod
    def outcome(self, status: Status, value: Any, sent_at: float) -> Grant | int:
        """Read an attempt's reply: a :class:`Grant`, or the holder's pttl (ms) when busy.

        May raise (for instance when the caller already holds a non-reentrant lock).
        """

    @abstractmethod
    def handed_off(self, fence: int, queued_at: float) -> Plan[Grant | None]:
        """A release handed the lock to :attr:`token` with ``fence``; ``queued_at`` is
        when the last queueing attempt was sent. Return the grant, or ``None`` to
        attempt again."""

    @abstractmethod
    def leave(self, member: str, in_flight: bool) -> Plan[None]:
        """Best effort, errors suppressed: leave the queue (``member``, "" if not
        queued) and give back a lock handed to us or taken by an attempt whose
        reply was lost (``in_flight``)."""


def wait_turn(
    c: Contender, *, blocking: bool, timeout: float | None, now: Clock
) -> Plan[Grant | None]:
    """Take the lock as the module says; ``None`` when ``blocking`` is false and the
    lock is busy, or when ``timeout`` seconds pass first.

    Raises whatever :meth:`Contender.outcome` raises, after leaving the queue.
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
            sent_at = now()
            in_flight = True
            status, value = yield c.attempt(member)
            in_flight = False
            result = c.outcome(status, value, sent_at)
            if isinstance(result, Grant):
                return result
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
            woken = yield WaitWake(wait)
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
