"""Decisions of :class:`tenure.RedlockElection`: an election over N independent
masters, that holds while a majority of them do. Pure: no I/O, no clock.

On each master the election's keys are a single-server election's
(:func:`tenure._keys.election_keys`: its lock, fence, record, log and feed,
and the ``quorum`` queue of the candidates waiting there, as a Redlock's),
so that the election's scripts find the leader's token where they look for
it:

- **The campaign** is a :class:`tenure.Redlock` acquire of the election's lock
  key on every master (``lock_acquire.lua``); the lease's fence, the largest
  its quorum minted, is the **term**. The term is then announced on every
  master with :func:`.election.announce` given a sequence number (0):
  ``election_announce.lua`` accepts it where the master's lock is held by the
  leader's token and raises that master's fence to the term. Announced on a
  quorum, terms increase without any clock: the next leader's quorum shares a
  master with this one, which granted the next lease only after this one
  ended there, and so minted a fence above this term. A campaign that
  announces on fewer than a quorum resigns and stands again
  (:func:`verdict`).
- **Proclaim and resign** run on every master and succeed on a quorum; each
  proclaim carries the next sequence number of its term, so that readers
  order values by ``(term, sequence)``, never by log entry ids (which differ
  from master to master).
- **Readers** (:func:`quorum_leader`) count: the leader is the term on
  (recorded active, its token holding the lock) on a majority of the masters,
  with the highest sequence that a majority holds (or a later one of the same
  term). **Observers** (:class:`QuorumCursor`) read every master's log after
  the last entry they read there and deliver a change once a majority of the
  masters logged it, in ``(term, sequence)`` order: what a minority says (a
  stale record, a proclaim that reached too few, a master restarted empty) is
  never delivered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from .._errors import NoQuorumError, NotOwnedError, TenureError
from .._info import ElectionEvent, Leader
from .._keys import ElectionKeys
from .._protocol import Command, Plan
from .election import LATE, LOG_LENGTH, ElectionRead, entry_key, parse_entry, standing
from .redlock import decisive, quorum


class _Valued(Protocol):
    """A master's record or log entry: what carries a value."""

    @property
    def value(self) -> bytes | None: ...


T = TypeVar("T", bound=_Valued)

#: A change's place in the order observers deliver changes in: (term, 0, 0)
#: for ``elected``, (term, 1, sequence) for ``proclaimed``, (term, 2, 0) for
#: the term's end (``resigned`` or ``lost``: one change, however each master
#: logged it).
Key = tuple[int, int, int]


def change_key(event: ElectionEvent) -> Key:
    """Where ``event`` goes in the order of changes (see :data:`Key`)."""
    if event.change == "elected":
        return (event.term, 0, 0)
    if event.change == "proclaimed":
        return (event.term, 1, event.sequence)
    return (event.term, 2, 0)


def verdict(results: Sequence[Any], n: int, name: str, term: int, what: str) -> None:
    """Judge an announce, proclaim or resign sent to the ``n`` masters (each
    master's plan result, or the exception it raised): done on a quorum.

    Raises:
        TenureError: a master's error of tenure's own other than a refusal
            (a wrong type, a refused permission), given by so many masters
            that the others can't make a quorum: the first such. (On fewer,
            those masters are outvoted, as a Redlock's acquire outvotes them
            when the others grant it.)
        NotOwnedError: more than ``n - quorum`` masters refused: the leader's
            term is over on a majority (it was deposed).
        NoQuorumError: too few masters answered to tell (down, paused); the
            message names what each master that gave an error said.
    """
    q = quorum(n)
    done = sum(1 for r in results if not isinstance(r, BaseException))
    if done >= q:  # (a minority's error, even one of tenure's own, is outvoted)
        return
    _raise_own(results)
    refused = sum(1 for r in results if isinstance(r, NotOwnedError))
    if refused > n - q:
        raise NotOwnedError(
            name,
            term,
            f"{what} refused by {refused} of {n} masters: not the leader, its term ended",
        )
    errors = _errors(results)
    failed = n - done - refused - len(errors)
    error = NoQuorumError(
        f"RedlockElection {name!r}: {what} needs {q} of {n} masters, {done} accepted it, "
        f"{refused} refused{_failed(errors)} and {failed} did not answer within the "
        "per-master timeout"
    )
    error.__cause__ = next(
        (r for r in results if isinstance(r, BaseException) and not isinstance(r, TimeoutError)),
        None,
    )
    raise error


def _errors(results: Sequence[Any]) -> list[tuple[int, TenureError]]:
    """The masters (by index) whose result is an error of tenure's own other
    than a refusal, with it: masters that answered, not masters down."""
    return [
        (i, r)
        for i, r in enumerate(results)
        if isinstance(r, TenureError) and not isinstance(r, NotOwnedError)
    ]


def _raise_own(results: Sequence[Any]) -> None:
    """Raise the first error of tenure's own (see :func:`_errors`) when the
    masters that gave one are so many that the others can't make a quorum:
    what they say then decides, whoever else answers."""
    errors = _errors(results)
    if decisive(len(errors), len(results)):
        raise errors[0][1]


def _failed(errors: list[tuple[int, TenureError]]) -> str:
    """``", 2 failed (master 0: WrongTypeError: ..., master 1: ...)"``, or ``""``."""
    if not errors:
        return ""
    said = ", ".join(f"master {i}: {type(e).__name__}: {e}" for i, e in errors)
    return f", {len(errors)} failed ({said})"


def answered(reads: Sequence[Any]) -> list[ElectionRead]:
    """The reads of the masters that answered (``reads``: one per master).

    Raises:
        TenureError: a master's error of tenure's own (a wrong type, a refused
            permission), given by so many masters that the others can't make
            a quorum: the first such. (On fewer, those masters are outvoted,
            as a Redlock's acquire outvotes them when the others grant it;
            too few reads is then the caller's to judge.)
    """
    _raise_own(reads)
    return [r for r in reads if isinstance(r, ElectionRead)]


def too_few(name: str, reads: Sequence[Any]) -> NoQuorumError:
    """The error of a read (``reads``: one per master) that too few masters
    answered to tell; it names what each master that gave an error said."""
    n = len(reads)
    got = sum(1 for r in reads if isinstance(r, ElectionRead))
    return NoQuorumError(
        f"RedlockElection {name!r}: can't tell who leads: {got} of {n} masters answered "
        f"within the per-master timeout{_failed(_errors(reads))}, {quorum(n)} are needed"
    )


def _on(read: ElectionRead) -> bool:
    """Whether ``read`` shows a term on: recorded active, its token holding the lock."""
    rec = read.record
    return rec is not None and rec.active and rec.token == read.holder


def _top(reads: Sequence[Any], n: int) -> tuple[int, list[tuple[int, ElectionRead]]] | None:
    """The latest term on (see :func:`_on`) on a majority of the masters, and
    those masters' reads (with their indexes); ``None`` when no term is."""
    by_term: dict[int, list[tuple[int, ElectionRead]]] = {}
    for i, read in enumerate(reads):
        if isinstance(read, ElectionRead) and _on(read):
            assert read.record is not None
            by_term.setdefault(read.record.term, []).append((i, read))
    for term, group in sorted(by_term.items(), reverse=True):
        if len(group) >= quorum(n):
            return term, group
    return None


def needs_history(reads: Sequence[Any], n: int) -> bool:
    """Whether :func:`quorum_leader` needs the masters' logs (:func:`history`)
    to tell the latest value a majority held: the masters of the term on have
    moved past a sequence that a majority of them may have held, but fewer
    than a quorum hold any one sequence past the announcement (a proclaim that
    reached too few masters, then another that reached others)."""
    top = _top(reads, n) if len(answered(reads)) >= quorum(n) else None
    if top is None:
        return False
    seqs = [r.record.sequence for _, r in top[1] if r.record is not None]
    q = quorum(n)
    bound = max(s for s in set(seqs) if sum(1 for t in seqs if t >= s) >= q)
    return bound > 0 and seqs.count(bound) < q


def history(keys: ElectionKeys) -> Plan[tuple[ElectionEvent, ...]]:
    """The changes in one master's log, latest first (the log keeps the last
    :data:`~.election.LOG_LENGTH`)."""
    raw = yield Command(("XREVRANGE", keys.log, "+", "-", "COUNT", str(LOG_LENGTH)))
    out = []
    for entry_id, fields in raw or ():
        flat = [x for kv in fields.items() for x in kv] if isinstance(fields, dict) else fields
        entry = parse_entry((entry_id, flat))
        if entry is not None:
            out.append(entry[1])
    return tuple(out)


def quorum_leader(
    reads: Sequence[Any], n: int, name: str, logs: Sequence[Any] | None = None
) -> Leader | None:
    """Who leads, from one read of each of the ``n`` masters (an
    :class:`~.election.ElectionRead`, or the exception of a master that did
    not answer): the term on on a majority of the masters, with the latest
    value of that term that a majority of them held (by ``sequence``; the
    announcement, 0, when no proclaim reached a majority), as most of those
    masters hold it; its ``ttl`` is the lease left on the last of the majority
    to end. ``None`` when no term is on on a majority.

    A master holds the value its record holds and the announcement; given
    ``logs`` (each master's :func:`history`, or an exception), also every value
    of the term its log holds. Without them, a value that a majority held
    but most of them have moved past (see :func:`needs_history`) is not told
    from one a minority held: the announcement is returned instead, which a
    majority held.

    Raises:
        NoQuorumError: fewer than a quorum of the masters answered.
    """
    got = answered(reads)
    q = quorum(n)
    if len(got) < q:
        raise too_few(name, reads)
    top = _top(reads, n)
    if top is None:
        return None
    term, group = top
    holds: list[dict[int, bytes | None]] = []  # per master of the group: sequence -> value
    for i, read in group:
        assert read.record is not None
        have: dict[int, bytes | None] = {0: None}
        changes = logs[i] if logs is not None and i < len(logs) else ()
        if isinstance(changes, tuple):
            for change in changes:
                if change.term == term and change.change in ("elected", "proclaimed"):
                    have[change.sequence] = change.value
        have[read.record.sequence] = read.record.value
        holds.append(have)
    seq = max(s for s in set().union(*holds) if sum(1 for h in holds if s in h) >= q)
    value = _agreed([_Value(h[seq]) for h in holds if seq in h]).value
    first = group[0][1].record
    assert first is not None
    pttls = sorted((r.pttl_ms for _, r in group), reverse=True)
    ttl = pttls[q - 1] / 1000 if pttls[q - 1] >= 0 else None
    return Leader(first.label, term, value, first.since, ttl, seq)


@dataclass(frozen=True)
class _Value:
    """A value, as :func:`_agreed` counts them."""

    value: bytes | None


def _agreed(items: Sequence[T]) -> T:
    """The item whose value most of ``items`` (one per master) hold. A change
    has one value, as its leader sent it: a master that holds another (not
    written by tenure) is outvoted by those that agree."""
    return max(items, key=lambda one: sum(1 for i in items if i.value == one.value))


def _ended(event: ElectionEvent, ends: Sequence[str]) -> ElectionEvent:
    """The end of ``event``'s term, as the masters' ``ends`` (each
    ``"resigned"`` or ``"lost"``) say: ``resigned`` when at least half of
    them do, else ``lost``."""
    resigned = bool(ends) and list(ends).count("resigned") * 2 >= len(ends)
    return ElectionEvent(
        "resigned" if resigned else "lost",
        event.term,
        event.label,
        event.value,
        event.since,
        event.sequence,
    )


@dataclass
class QuorumCursor:
    """What one observer of a :class:`tenure.RedlockElection` has delivered:
    per master, the last log entry read there; the changes seen on fewer than
    a quorum of masters so far; the last change delivered. :meth:`take` turns
    one read of every master into the changes to deliver, in ``(term,
    sequence)`` order (:data:`Key`), each once, each once a majority of the
    masters logged it.

    The first read that a quorum answered delivers the current state (the
    quorum's leader, if any). A master read for the first time after that
    (it was down) starts at its log's end: what it logged before is either
    on a majority already or not to be delivered. A master whose log went
    back (restarted without its data) starts again at its new end. After the
    logs, the cursor reconciles with the quorum's records (a log trimmed, or
    lost on too many masters): a term delivered on that a majority no longer
    has on is delivered ended, and a later state of a majority not seen in
    the logs is delivered as it stands.
    """

    n: int
    after: list[str] = field(default_factory=list)
    started: bool = False
    last: Key | None = None
    on: ElectionEvent | None = None
    pending: dict[Key, dict[int, ElectionEvent]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.after:
            self.after = [""] * self.n

    def more(self, reads: Sequence[Any]) -> bool:
        """Whether a master's read returned as many entries as it could (read again)."""
        return any(r.full for r in answered(reads))

    def wait(self, reads: Sequence[Any]) -> float | None:
        """How long an idle observer may wait for a message after ``reads``:
        until the first lease it read would end (a term that ends with no
        successor is published by nobody), else without limit."""
        left = [r.pttl_ms for r in answered(reads) if r.holder and r.pttl_ms >= 0]
        return min(left) / 1000 + LATE if left else None

    def take(self, reads: Sequence[Any], logs: Sequence[Any] | None = None) -> list[ElectionEvent]:
        """The changes to deliver from one read of each master (an
        :class:`~.election.ElectionRead`, or an exception); the cursor moves on.
        Nothing is delivered from a read that fewer than a quorum answered,
        but for the changes the logs already put on a majority. ``logs``: each
        master's :func:`history`, for the state as it stands when
        :func:`needs_history` says so (see :func:`quorum_leader`)."""
        out: list[ElectionEvent] = []
        got = answered(reads)
        q = quorum(self.n)
        if not self.started:
            if len(got) < q:
                return out
            self.started = True
            for i, read in enumerate(reads):
                if isinstance(read, ElectionRead):
                    self.after[i] = read.tail or "0-0"
            lead = quorum_leader(reads, self.n, "", logs)
            if lead is not None and lead.since:
                self._deliver(out, standing(lead))
            return out
        for i, read in enumerate(reads):
            if isinstance(read, ElectionRead):
                self._note(i, read)
        for key in sorted(self.pending):
            seen = self.pending[key]
            if len(seen) < q or (self.last is not None and key <= self.last):
                continue
            if key[1] == 2:  # an end: of the term delivered on only
                if self.on is not None and self.on.term == key[0]:
                    self._deliver(out, _ended(self.on, [e.change for e in seen.values()]))
                continue
            self._deliver(out, _agreed(list(seen.values())))
        self.pending = {k: v for k, v in self.pending.items() if self.last is None or k > self.last}
        if len(got) >= q and not self.more(reads):
            self._reconcile(out, reads, got, logs)
        return out

    def _note(self, i: int, read: ElectionRead) -> None:
        """Count the new entries of master ``i``'s log."""
        if not self.after[i] or (
            not read.entries and entry_key(read.tail or "0-0") < entry_key(self.after[i])
        ):
            # first read of this master, or its log went back (restarted empty)
            self.after[i] = read.tail or "0-0"
            return
        for entry_id, event in read.entries:
            if entry_key(entry_id) <= entry_key(self.after[i]):
                continue
            self.after[i] = entry_id
            key = change_key(event)
            if self.last is None or key > self.last:
                self.pending.setdefault(key, {})[i] = event

    def _reconcile(
        self,
        out: list[ElectionEvent],
        reads: Sequence[Any],
        got: list[ElectionRead],
        logs: Sequence[Any] | None,
    ) -> None:
        """Bring the cursor to the quorum's records where the logs did not."""
        q = quorum(self.n)
        on = self.on
        if on is not None:
            off = sum(
                1 for r in got if not (_on(r) and r.record is not None and r.record.term == on.term)
            )
            if off >= q:  # (a majority has the term over: it can't be on again)
                ends = [
                    r.record.end
                    for r in got
                    if r.record is not None and r.record.term == on.term and r.record.end
                ]
                self._deliver(out, _ended(on, ends))
        lead = quorum_leader(reads, self.n, "", logs)
        if lead is not None and lead.since:
            event = standing(lead)
            if self.last is None or change_key(event) > self.last:
                self._deliver(out, event)

    def _deliver(self, out: list[ElectionEvent], event: ElectionEvent) -> None:
        out.append(event)
        self.last = change_key(event)
        self.on = event if event.leading else None
