"""A Redlock's rounds as plans (:mod:`.fanout` steps): the acquire's loop
(:func:`take`) and the release round (:func:`release_round`). What each
round decides (quorum, validity, back-off, the wake) is
:mod:`.redlock`'s; this module strings the rounds together. Pure: the
clock (``now``), the random draws (``rand``) and the waiter ids
(``new_waiter``) are arguments, so that the rounds are tested without
servers, sleeping or chance (``tests/test_redlock_rounds.py``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Collection, Sequence

from .._keys import LockKeys
from .._units import lease_ms
from . import redlock as plans
from .common import FENCE_KEEP_MS
from .fanout import (
    ClearWake,
    Fan,
    Fanned,
    FanPlan,
    Listen,
    SendLate,
    Sleep,
    StopListening,
    WaitWoken,
)
from .waiting import Clock, Grant, validity

#: What :func:`take` returns: the grant, and the masters an attempt of its
#: token was sent to (its release goes to them even behind a call stuck there).
Taken = tuple[Grant, frozenset[int]]


def release_round(
    keys: LockKeys,
    n: int,
    ttl: float,
    token: str,
    op: str,
    masters: Sequence[int],
    wake: bool = True,
    *,
    late: Collection[int] = (),
    queued: str = "",
    quick: bool = False,
    last: bool = False,
    now: Clock,
) -> FanPlan[plans.Tally]:
    """Release ``token`` on ``masters`` at once (and leave their queues as
    ``queued``, if given); then, if ``wake``, wake the first waiter of each
    master that has waiters (see :mod:`.redlock`). ``quick`` (the clean-up of
    an acquire cut off): return once a quorum answered (the outcome is then
    not known), and never send the release to a master on another
    connection while a call there is still in flight (the acquire it undoes,
    cut off on a worker thread or task: the release is queued behind it, as
    for ``late`` below). Returns the release's :class:`~.redlock.Tally`.

    A master of ``late`` (one an acquire of ``token`` was sent to) that did
    not answer in time gets the release again once it answers, if within a
    ttl (:class:`~.fanout.SendLate`: behind a call still stuck there, which
    kept this one from being sent; or the release was given up before it was
    written, on a new connection whose handshake the paused master did not
    answer): an acquire stuck there runs when the master resumes, and would
    otherwise hold the name there for a ttl after that. A second release of
    the same token is harmless.

    ``last`` (a lease's release, or the give-back of a grant: the token is
    never sent again): a master of ``late`` where a call was still in flight
    as the release was sent gets it again behind that call too: the call may
    be the acquire of this token, still on its way there (a round does not
    wait for a master under suspicion, and another call may clear the
    suspicion meanwhile), which would run after the release and hold the
    name there for a ttl. (Not for a round of an acquire: its token may be
    granted there again by its next round, which a late release would undo.)"""
    masters = tuple(masters)
    step = plans.release(keys, token, op, queued)
    enough = (lambda r: plans.quorum_answered(r, n)) if quick else None
    fanned: Fanned = yield Fan(masters, (step,) * len(masters), enough, quick)
    replies = fanned.results
    until = now() + ttl
    again = tuple(
        masters[k]
        for k, reply in enumerate(replies)
        if masters[k] in late and (isinstance(reply, TimeoutError) or (last and k in fanned.busy))
    )
    if again:
        yield SendLate(again, step, until)
    busy = tuple(masters[k] for k in plans.queued_on(replies))
    if wake and busy:  # (what escapes the round is an interrupt: it goes on)
        yield Fan(busy, (plans.wake(keys),) * len(busy))
    return plans.tally(replies)


def take(
    keys: LockKeys,
    n: int,
    ttl: float,
    token: str,
    blocking: bool,
    timeout: float | None,
    granted: list[Taken],
    *,
    master_timeout: float,
    now: Clock,
    rand: Callable[[], float],
    new_waiter: Callable[[], str],
    fence_keep: int = FENCE_KEEP_MS,
) -> FanPlan[Taken | None]:
    """Rounds until a quorum of the ``n`` masters grants ``token`` (see
    :mod:`.redlock`): the grant, and the masters an attempt was sent to; or
    ``None`` once ``timeout`` ran out (``None``: no limit; one round if not
    ``blocking``) with nothing held. A grant keeps each fence key
    ``fence_keep`` ms (:func:`.redlock.attempt`).

    Each round clears the wake, sends the attempt to every master and
    returns once a quorum granted it. Not held: what it got is given back
    on the masters that granted it or did not answer (waking the queues'
    heads only if it gives up, a split vote wakes nobody); then a round that
    too few masters answered is tried again after a per-master timeout at
    least (three such rounds in a row raise :class:`~tenure.NoQuorumError`),
    a split vote after a random back-off (``rand()`` in [0, 1) each time),
    and a lock held by another is waited for: the first time, by listening
    on a wake channel of its own (``new_waiter()``) and queueing with the
    next round; after that, until a wake or the earliest lease it was told
    of ends.

    The grant is appended to ``granted`` (the caller's list) before it is
    returned: from then on the caller gives it back if anything cuts it off.
    Cut off before that (a step's exception thrown in: an interrupt of any
    class, a cancellation; or a master's error of tenure's own, raised), it
    releases ``token`` on every master and leaves the queues in one quick
    round (:func:`release_round`), then raises. A waiter that stops waiting
    without the lock leaves every queue while it still listens, stops
    listening (even if the leave is cut off), then passes on a wake it heard
    and will not act on (:func:`~.redlock.wake` on every master).

    Raises:
        NoQuorumError: too few masters answered, three rounds in a row (one
            if not ``blocking`` or the timeout ran out).
        TenureError: a master's error of tenure's own (a wrong type...) on
            so many masters that the others can't make a quorum
            (:func:`~.redlock.own_error`; on fewer, those masters count as
            not answering).
    """
    everyone = tuple(range(n))
    ttl_ms = lease_ms(ttl)
    deadline = None if timeout is None else now() + timeout
    queued = ""  # our member of every master's queue, once we listen
    splits = 0  # split votes in a row
    unreachable = 0  # rounds in a row with too few answers for a quorum
    reached: set[int] = set()  # the masters an attempt was sent to
    left = False  # our member left every queue
    try:
        while True:
            yield ClearWake()
            sent_at = now()
            fanned: Fanned = yield Fan(
                everyone,
                (plans.attempt(keys, token, ttl_ms, queued, fence_keep),) * n,
                lambda replies: plans.quorum_granted(replies, n),
            )
            reached.update(i for i in everyone if i not in fanned.unsent)
            t = plans.tally(fanned.results)
            if plans.granted(t, n, ttl, sent_at, now()):
                grant = Grant(token, plans.fence(t), ttl, sent_at + validity(ttl))
                if queued:  # the masters that granted it dropped us from their queue
                    others = tuple(i for i in everyone if i not in t.ok)
                    yield Fan(others, (plans.leave(keys, queued),) * len(others))
                result = grant, frozenset(reached)
                granted.append(result)  # the caller's to give back from here on
                return result
            remaining = None if deadline is None else deadline - now()
            unreachable = 0 if plans.reachable(t, n) else unreachable + 1
            error = plans.own_error(t, n)
            going_on = (
                error is None
                and unreachable < plans.UNREACHABLE_ROUNDS
                and blocking
                and (remaining is None or remaining > 0)
            )
            if t.ok or t.failed:  # a split vote wakes nobody (see .redlock)
                yield from release_round(
                    keys,
                    n,
                    ttl,
                    token,
                    "",
                    (*t.ok, *t.failed),
                    not going_on,
                    late=reached,
                    now=now,
                )
            if error is not None:
                raise error
            if unreachable and not going_on:
                raise plans.no_quorum(keys.name, "acquire", t, n)
            if not going_on:
                return None
            if unreachable:  # try again after a per-master timeout: it may have been a stall
                pause = max(master_timeout, plans.backoff(unreachable, rand()))
                yield Sleep(pause if remaining is None else min(pause, remaining))
                continue
            if plans.split(t):
                splits += 1
                pause = plans.backoff(splits, rand())
                yield Sleep(pause if remaining is None else min(pause, remaining))
                continue
            splits = 0
            if not queued:
                waiter = new_waiter()
                yield Listen(keys.wake_prefix + waiter)
                queued = plans.member(waiter, ttl_ms, token)
                continue  # queue with the next round: a release before it is seen by it
            yield WaitWoken(plans.wait_for(t, remaining))
    except GeneratorExit:  # closed by its driver: no step may follow
        raise
    except BaseException:
        if not granted:  # a round cut off may have been granted somewhere
            # one round, leaving the queues too, that returns once a quorum
            # answered: a cancelled acquire does not wait for a paused
            # master (which gets the release once it answers)
            left = True
            with contextlib.suppress(Exception):
                yield from release_round(
                    keys,
                    n,
                    ttl,
                    token,
                    "",
                    everyone,
                    late=everyone,
                    queued=queued,
                    quick=True,
                    now=now,
                )
        raise
    finally:
        woken = False
        closed = isinstance(sys.exc_info()[1], GeneratorExit)  # (no step may follow)
        try:
            if queued and not granted and not left and not closed:
                # leave the queues while still listening: a wake sent before
                # we left (a release after our last attempt) is then heard
                # (a master's failure is its reply: what escapes is an
                # interrupt, of any class, and goes on as one)
                yield Fan(everyone, (plans.leave(keys, queued),) * n)
        finally:  # (even if that leave is cut off: else we listen for good)
            if queued and not closed:  # (cut off once granted: the caller gives it back)
                woken = yield StopListening()
        if queued and not granted and not left and woken:
            # a wake we will not act on: pass it on to the heads (a
            # giving-up waiter's rule, see .redlock)
            yield Fan(everyone, (plans.wake(keys),) * n)
