"""Decisions and per-master script calls of :class:`tenure.Redlock`: one lock
over N independent masters (the algorithm of redis.io's "Distributed Locks with
Redis" page). Pure: no I/O, no clock, no randomness of its own (the facade
passes the time and a random number in).

Each master holds an ordinary :class:`tenure.Lock` under the same name (its
keys are a Lock's, so ``tenure inspect`` on one master shows a Lock held by
the Redlock's token), with the Lock's scripts: ``lock_acquire.lua`` (``SET NX
PX`` and a fence ``max(last + 1, TIME µs)`` minted by that master),
``lock_extend.lua`` and the token-checked ``lock_release.lua``. An acquire
sends the same unguessable token to every master at once, each call bounded by
a per-master timeout (:func:`master_timeout`, far below the ttl), and
:func:`tally` decides: the lock is held when a quorum (``N // 2 + 1``) granted
it and the lease is still valid, ``ttl - elapsed - drift`` > 0 (the drift of
:func:`~.waiting.validity`, 1 % of the ttl + 2 ms). Otherwise it is released on
every master that granted it or did not answer, at once.

Waiting without polling, and flat in the number of waiters. A waiter that
found the lock busy listens on a wake channel of its own on every master
(``<prefix>{name}:wake:<w>``) and queues itself on each master in a sorted set
of its own kind, ``<prefix>{name}:quorum`` (the same ``lock_acquire.lua``
queues it there: the script is given that key as its queue). No Lock release
ever hands the lock to a member of that set. A Redlock release first releases
on every master (with, in the same round trip, the length of each master's
queue); once every master answered (or timed out), it sends
``redlock_wake.lua`` to the masters with waiters, which publishes "recheck 0"
to the first live member of that master's queue only (dropping members nobody
hears). Waking only after the whole release round means the woken waiter finds
every master free, not a master that has not seen the release yet (which
would make it a split vote, below). So a release wakes at most N waiters (the
heads of the N queues; usually one and the same waiter, as every waiter
queues on every master at about the same time), whatever the number of
waiters, and each woken waiter makes one attempt on every master: a hand-off
costs 2 commands per master for the release, 1 for the wake and N per woken
waiter at worst, none of them per waiter. A waiter also tries again when the
earliest lease it was told of runs out (:func:`wait_for`), in case a wake was
lost or a holder died. A waiter leaves every queue when it stops waiting.

Livelock: two waiters that each got a minority (a split vote) release what
they got, without waking anyone, and back off for a random delay
(:func:`backoff`); the delay grows with each split in a row. A wake that comes
during the back-off is not acted on at once: the attempt the waiter makes when
the back-off ends comes after the release that sent it, so it is not lost. The
first to come back finds the masters free and takes a quorum; the others find
it held and wait for its release's wake. A waiter that gives up (timeout,
error) wakes the heads when it releases what it got; and one that stops
waiting without the lock leaves every queue while it still listens, then
passes on a wake that came since its last attempt (:func:`wake` on every
master: it wakes the new heads), as it will not act on it.

Why a release is never followed by a wait of a whole lease. A wake goes to a
queued waiter that is still listening, and every such waiter makes one more
attempt after it (at once, or when its back-off ends) or, if it stops waiting
instead, passes the wake on. That attempt takes the lock (its release wakes
the next head), finds it held by a quorum (whose release wakes the next head)
or by the minorities of a split (whose holders try again after their
back-off without waiting for a wake, and the one that takes the lock wakes
the next head), or splits the vote itself (the same). So the end of the
earliest lease (:func:`wait_for`) is only a fallback: for a lost message, a
dead holder, or a wake still on its way to a client that stops listening
(the leave's reply comes after the server sent the wake, so the hub has it
in hand by then, but may not have read it yet). ``redlock_wake.lua`` takes a
``PUBLISH`` that the server counted as heard for a wake delivered: a
waiter's client must read every channel it subscribed (the drivers' wake
hubs send one SUBSCRIBE at a time on one connection).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import InvalidArgument, NoQuorumError, NotOwnedError, TenureError
from .._keys import LockKeys
from .._protocol import Command, Eval, Pipeline, Plan, Status, Step, text
from .._scripts import LOCK_ACQUIRE, LOCK_EXTEND, LOCK_RELEASE, REDLOCK_WAKE
from .._units import lease_ms
from .common import FENCE_KEEP_MS, fence_keep_ms, least_left_ms
from .waiting import NO_EXPIRY_RECHECK, claim_ms, validity

#: The shortest and longest per-master timeout, seconds (:func:`master_timeout`).
MASTER_TIMEOUT_MIN = 0.05
MASTER_TIMEOUT_MAX = 0.5

#: The first back-off after a split vote, seconds; it doubles with each split
#: in a row, up to :data:`BACKOFF_MAX` (:func:`backoff`).
BACKOFF_BASE = 0.01
BACKOFF_MAX = 0.2

#: How many acquire rounds in a row may find too few masters answering for a
#: quorum before a blocking acquire raises :class:`~tenure.NoQuorumError` (a
#: loaded client or a brief network stall can time every master out once;
#: masters that are really down fail every round, so the error still comes
#: within a few per-master timeouts).
UNREACHABLE_ROUNDS = 3


def quorum(n: int) -> int:
    """How many of ``n`` masters must agree: a strict majority, ``n // 2 + 1``."""
    return n // 2 + 1


def check_count(n: int) -> int:
    """``n``, the number of masters, if it is odd and at least 3.

    Raises:
        InvalidArgument: ``n`` is even or below 3, naming it.
    """
    if n < 3 or n % 2 == 0:
        raise InvalidArgument(
            f"a Redlock needs an odd number of independent masters, at least 3, not {n}"
        )
    return n


def master_timeout(ttl: float) -> float:
    """The per-master timeout (seconds) of a lease of ``ttl`` seconds: 1/20 of the
    ttl, from :data:`MASTER_TIMEOUT_MIN` to :data:`MASTER_TIMEOUT_MAX`, and never
    above half the ttl. A master that does not answer in that time (paused,
    partitioned, dead) counts as a refusal, so it can't stall an acquire."""
    return min(max(ttl / 20, MASTER_TIMEOUT_MIN), MASTER_TIMEOUT_MAX, ttl / 2)


def quorum_key(keys: LockKeys) -> str:
    """The key of a Redlock's waiters on one master: ``<lock key>:quorum``."""
    return keys.quorum


def member(waiter: str, ttl_ms: int, token: str) -> str:
    """A waiter's member of the queue (the Lock's format, ``"<w>|<claim ms>|<token>"``)."""
    return f"{waiter}|{claim_ms(ttl_ms)}|{token}"


def one(step: Step) -> Plan[Any]:
    """A plan of one step: its reply."""
    return (yield step)


def attempt(
    keys: LockKeys, token: str, ttl_ms: int, queue_as: str, fence_keep: int = FENCE_KEEP_MS
) -> Eval:
    """One master's acquire: ``lock_acquire.lua`` for ``token`` with a lease of
    ``ttl_ms``; when busy, ``queue_as`` (a :func:`member`, or "" not to queue) is
    queued in :func:`quorum_key`. A grant keeps the fence key ``fence_keep``
    ms (or the lease, if longer). No owner prefix can match (a Redlock's owner
    is checked in the process), so the reply is OK (fence), or BUSY (pttl ms)."""
    keep = max(fence_keep, fence_keep_ms(ttl_ms))
    return Eval(
        LOCK_ACQUIRE,
        (keys.lock, keys.fence, quorum_key(keys), keys.delay),
        (token, token + "|", ttl_ms, queue_as, keep, 0, keys.wake_prefix),
    )


def release(keys: LockKeys, token: str, op: str, queued: str = "") -> Pipeline:
    """One master's release, one round trip: the token-checked
    ``lock_release.lua`` (its reply ``(OK, _)`` or ``(NOT_OWNED, 0)``; ``op``
    makes a retry of the same call succeed), then, given ``queued`` (a
    :func:`member`), :func:`leave` that master's queue, then the length of
    its queue (``ZCARD``): where it is not 0, :func:`wake` is sent next."""
    leave_too = (leave(keys, queued),) if queued else ()
    return Pipeline(
        (
            Eval(
                LOCK_RELEASE,
                (keys.lock, keys.waiters, keys.fence, keys.delay, keys.release_record(op)),
                (token, keys.wake_prefix, FENCE_KEEP_MS, "", 0, op),
            ),
            *leave_too,
            Command(("ZCARD", quorum_key(keys))),
        )
    )


def queued_on(replies: Sequence[Any]) -> list[int]:
    """The masters (indexes) whose :func:`release` reply says waiters are queued."""
    return [
        i
        for i, reply in enumerate(replies)
        if isinstance(reply, list) and len(reply) >= 2 and isinstance(reply[-1], int) and reply[-1]
    ]


def wake(keys: LockKeys) -> Eval:
    """Wake the first live waiter of one master's queue (``redlock_wake.lua``)."""
    return Eval(REDLOCK_WAKE, (quorum_key(keys),), (keys.wake_prefix,))


def renewal(
    keys: LockKeys, token: str, seconds: float, ttl: float, fence_keep_ms: int = FENCE_KEEP_MS
) -> Eval:
    """One master's renewal (``lock_extend.lua``): the lease of ``token`` (``ttl``
    seconds long) ends ``seconds`` from now, unless less than its drift
    allowance was left; the fence key is kept ``fence_keep_ms`` (or the
    lease, if longer).

    Raises:
        InvalidArgument: ``seconds`` is not a lease length (0.01 s to a year).
    """
    return Eval(
        LOCK_EXTEND,
        (keys.lock, keys.delay, keys.fence),
        (token, lease_ms(seconds, "seconds"), least_left_ms(ttl), 0, fence_keep_ms),
    )


def leave(keys: LockKeys, queued: str) -> Command:
    """Leave one master's queue (``ZREM``)."""
    return Command(("ZREM", quorum_key(keys), queued))


@dataclass(frozen=True, slots=True)
class Tally:
    """The replies of one round of calls, one per master (by index).

    Attributes:
        ok: the masters that replied OK (granted, renewed or released).
        fences: for an acquire, the fences the ``ok`` masters minted (same order).
        refused: the masters that replied otherwise (busy, not owned).
        pttls: for an acquire, the busy masters' remaining leases (ms; -1: no expiry).
        failed: the masters that did not answer (connection error, timeout).
        late: for a renewal, whether a master refused for too little left.
        error: the first error that is tenure's own (a wrong type, a refused
            permission): to raise, not to count as a master down.
        causes: why each ``failed`` master failed (same order).
    """

    ok: tuple[int, ...]
    fences: tuple[int, ...]
    refused: tuple[int, ...]
    pttls: tuple[int, ...]
    failed: tuple[int, ...]
    late: bool = False
    error: BaseException | None = None
    causes: tuple[BaseException, ...] = ()


def tally(replies: Sequence[Any]) -> Tally:
    """Sort one round's replies: each a script's ``(Status, value)``, a
    :func:`release` pipeline's list (its first item counts), or an exception
    (a master whose reply was not waited for counts as ``failed``: it may yet
    grant it)."""
    ok: list[int] = []
    fences: list[int] = []
    refused: list[int] = []
    pttls: list[int] = []
    failed: list[int] = []
    causes: list[BaseException] = []
    late = False
    error: BaseException | None = None
    for i, reply in enumerate(replies):
        if isinstance(reply, list):
            reply = reply[0] if reply else ConnectionError("empty pipeline reply")
        if isinstance(reply, BaseException):
            failed.append(i)
            causes.append(reply)
            if isinstance(reply, TenureError) and error is None:
                error = reply
            continue
        status, value = reply
        if status is Status.OK:
            ok.append(i)
            fences.append(int(value) if isinstance(value, int) else 0)
        else:
            refused.append(i)
            if status is Status.BUSY:
                pttls.append(int(value))
            late = late or (value == 1 and status is Status.NOT_OWNED)
    return Tally(
        tuple(ok),
        tuple(fences),
        tuple(refused),
        tuple(pttls),
        tuple(failed),
        late,
        error,
        tuple(causes),
    )


def granted(t: Tally, n: int, ttl: float, sent_at: float, now: float) -> bool:
    """Whether an acquire round holds the lock: a quorum of the ``n`` masters
    granted it and the lease, sent at ``sent_at``, is still valid at ``now``
    (``ttl - elapsed - drift`` > 0, :func:`~.waiting.validity`)."""
    return len(t.ok) >= quorum(n) and sent_at + validity(ttl) > now


def quorum_granted(replies: Sequence[Any], n: int) -> bool:
    """Whether the replies so far of an acquire round (one per master; any
    other object for a master yet to answer) already hold a quorum of grants:
    then the round need not wait for the other masters (see :func:`fence`)."""
    return sum(1 for r in replies if isinstance(r, tuple) and r[0] is Status.OK) >= quorum(n)


def quorum_answered(replies: Sequence[Any], n: int) -> bool:
    """Whether a quorum of the ``n`` masters answered a :func:`release` round so
    far (any other object for a master yet to answer): enough for the
    clean-up of a cancelled acquire, which needs no outcome (the others get
    the release later, see the facade)."""
    return sum(1 for r in replies if isinstance(r, list)) >= quorum(n)


def reachable(t: Tally, n: int) -> bool:
    """Whether enough masters answered for a quorum to be possible at all."""
    return n - len(t.failed) >= quorum(n)


def decisive(errors: int, n: int) -> bool:
    """Whether errors of tenure's own (a wrong type, a refused permission) on
    ``errors`` of the ``n`` masters leave the others too few for a quorum:
    then they decide; fewer are outvoted, as masters that did not answer."""
    return errors > n - quorum(n)


def own_error(t: Tally, n: int) -> BaseException | None:
    """The first error of tenure's own (:attr:`Tally.error`) when it is
    :func:`decisive`; else ``None``: those masters count as masters that did
    not answer, outvoted when the others grant, named by :func:`no_quorum`
    when too few answered."""
    own = sum(1 for cause in t.causes if isinstance(cause, TenureError))
    return t.error if decisive(own, n) else None


def fence(t: Tally) -> int:
    """The fence of a granted lock: the largest of those its quorum minted,
    among the masters that answered before the acquire returned (it returns
    once a quorum granted it, see :func:`quorum_granted`; a master that grants
    it later mints a fence nobody hears of). Leaving that one out keeps what
    the fence promises: any later lease's quorum shares a master with the
    quorum that answered, and the promise rests on that master alone."""
    return max(t.fences)


def split(t: Tally) -> bool:
    """Whether a failed acquire round got some grants (a split vote with other
    contenders, or masters down): it must back off for a random delay."""
    return bool(t.ok)


def wait_for(t: Tally, remaining: float | None) -> float:
    """How long (seconds) a waiter that found the lock busy waits for a wake
    before it tries again: until the earliest lease it was told of runs out
    (at least 1 ms; :data:`~.waiting.NO_EXPIRY_RECHECK` for a holder that set no
    expiry), within ``remaining`` (``None``: no deadline)."""
    live = [p for p in t.pttls if p >= 0]
    wait = max(min(live), 1) / 1000 if live else NO_EXPIRY_RECHECK
    return wait if remaining is None else max(0.0, min(wait, remaining))


def backoff(splits: int, rand: float) -> float:
    """The random delay (seconds) after the ``splits``-th split vote in a row,
    ``rand`` drawn uniformly from [0, 1): from half to one and a half times
    :data:`BACKOFF_BASE` doubled per split, at most :data:`BACKOFF_MAX`."""
    base = min(BACKOFF_BASE * 2.0 ** max(0, splits - 1), BACKOFF_MAX)
    return float(base * (0.5 + rand))


def renewed(t: Tally, n: int) -> tuple[Status, Any] | None:
    """A quorum renewal's outcome as one renewal reply: ``(OK, 0)`` when a quorum
    renewed it; ``(NOT_OWNED, late)`` when so many refused that no quorum can
    hold it any more (the lease is lost); ``None`` when it can't be told yet
    (masters did not answer: try again)."""
    q = quorum(n)
    if len(t.ok) >= q:
        return Status.OK, 0
    if len(t.refused) > n - q:
        return Status.NOT_OWNED, 1 if t.late else 0
    return None


def extended_until(
    t: Tally, n: int, name: str, fence: int, seconds: float, sent_at: float
) -> float:
    """The new ``expires_at`` of an extend round sent at ``sent_at``.

    Raises:
        NotOwnedError: too many masters refused (the lease is lost).
        NoQuorumError: too few masters answered to tell (nothing is known).
    """
    reply = renewed(t, n)
    if reply is None:
        raise no_quorum(name, "extend", t, n)
    if reply[0] is not Status.OK:
        why = "was about to expire" if reply[1] == 1 else "expired before extend"
        raise NotOwnedError(name, fence, f"can't extend: the lease {why} on a quorum of masters")
    return sent_at + validity(seconds)


def released_ok(t: Tally, n: int) -> bool | None:
    """Whether a release round released the lease cleanly: ``True`` when a
    quorum released it, ``False`` when so many refused that no quorum held it
    (it was lost), ``None`` when too few answered to tell."""
    q = quorum(n)
    if len(t.ok) >= q:
        return True
    if len(t.refused) > n - q:
        return False
    return None


def quorum_holder(holders: Sequence[str], n: int) -> tuple[bool, str | None]:
    """Who holds the lock on a quorum of the ``n`` masters, from the holder
    each master that answered named (``""``: free; the others did not answer):
    ``(True, token)``, ``(True, None)`` when no token can have a quorum, or
    ``(False, None)`` when the masters that did not answer could make one (too
    few answered to tell)."""
    q, failed = quorum(n), n - len(holders)
    for holder in set(holders):
        if holder and holders.count(holder) >= q:
            return True, holder
    if failed >= q or any(h and holders.count(h) + failed >= q for h in holders):
        return False, None
    return True, None


def no_quorum(name: str, what: str, t: Tally, n: int) -> NoQuorumError:
    """The error of an ``what`` round of lock ``name`` that too few masters
    answered to tell the outcome; it names why each master failed (a timeout,
    a refused connection, a client's full connection pool...) and is chained
    to the first such error other than a timeout."""
    answered = n - len(t.failed)
    if answered >= quorum(n):  # enough answered, but split: the silent ones decide
        error = NoQuorumError(
            f"Redlock {name!r}: {what} can't tell: of {n} masters, {len(t.ok)} held it, "
            f"{len(t.refused)} did not and {len(t.failed)} did not answer within the "
            f"per-master timeout (a quorum is {quorum(n)}){_why(t)}"
        )
    else:
        error = NoQuorumError(
            f"Redlock {name!r}: {what} needs {quorum(n)} of {n} masters, "
            f"only {answered} answered within the per-master timeout{_why(t)}"
        )
    error.__cause__ = next((c for c in t.causes if not isinstance(c, TimeoutError)), None)
    return error


def _why(t: Tally) -> str:
    """``"; master 1: <error>, master 3: ..."`` for the failed masters of ``t``."""
    parts = [
        f"master {i}: {type(cause).__name__}: {cause}"
        for i, cause in zip(t.failed, t.causes, strict=True)
    ]
    return "; " + ", ".join(parts) if parts else ""


#: A call queued for a master behind one still stuck there (a release, or the
#: clean-up of an acquire): the fan-outs' ``send_late``.
Late = Eval | Command | Pipeline


def late_plan(steps: Sequence[Late]) -> Plan[Any]:
    """The plan that sends the calls ``steps`` queued for one master as one
    pipeline (a pipeline among them contributes its parts), in order, and
    returns its replies."""
    parts: list[Eval | Command] = []
    for step in steps:
        parts.extend(step.steps if isinstance(step, Pipeline) else (step,))
    return (yield Pipeline(tuple(parts)))


def identify() -> Plan[str]:
    """Ask one master which server process it is: its :func:`run_id`."""
    info = yield Command(("INFO", "server"))
    return run_id(info)


def run_id(info: object) -> str:
    """The ``run_id`` of an ``INFO server`` reply (the dict redis-py parses it
    into, or the raw text): random for each start of a server process, so
    two addresses (or dbs) that give the same one reach the same process.
    ``""`` when the reply has none (a proxy that answers ``INFO`` itself)."""
    if isinstance(info, dict):
        value = info.get("run_id")
        return str(value) if value is not None else ""
    if isinstance(info, bytes):
        info = text(info)
    if isinstance(info, str):
        for line in info.splitlines():
            if line.startswith("run_id:"):
                return line[len("run_id:") :].strip()
    return ""


def identity(result: object) -> str | None:
    """A master's identity from the result of :func:`identify` on it: its
    ``run_id`` (``""``: it answered without one), or ``None`` when it did not
    answer (ask it again)."""
    return result if isinstance(result, str) else None


def answered(result: object) -> bool:
    """Whether :func:`identify` on a master is done (a ``run_id`` or an error),
    for a fan-out's ``enough``."""
    return isinstance(result, str | BaseException)


def same_server(ids: Sequence[str | None]) -> tuple[int, int] | None:
    """The first two masters (indexes) that are one server process: they gave
    the same ``run_id``; ``None`` when no two did. A master not identified
    (``None``) or without a ``run_id`` (``""``) matches no other."""
    first: dict[str, int] = {}
    for j, ident in enumerate(ids):
        if ident:
            i = first.setdefault(ident, j)
            if i != j:
                return i, j
    return None


def same_server_error(i: int, where_i: str, j: int, where_j: str, run_id: str) -> InvalidArgument:
    """The error of a Redlock whose masters ``i`` (at ``where_i``) and ``j``
    (at ``where_j``) are one server process (``run_id``)."""
    return InvalidArgument(
        f"clients[{i}] ({where_i}) and clients[{j}] ({where_j}) are the same server "
        f"(run_id {run_id}): a Redlock needs independent masters, each counted once; "
        f"nothing was taken"
    )
