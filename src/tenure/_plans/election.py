"""Plans for :class:`tenure.Election`: announce, proclaim, resign, read and watch.

An election is a :class:`tenure.FairLock` on the election's own keys
(:func:`tenure._keys.election_keys`) plus the leader's record and a change log:

- **Candidates** queue for the lock in arrival order (the fair lock's plans,
  :mod:`.fair`, unchanged); the holder is the leader and its lease's fence is
  its **term**, larger than every earlier term (fences grow across leaders and,
  seeded from the server's clock, across a restart that lost the data).
- **The record** (a hash) says who leads: the lease token, the term, the
  label, the proclaimed value and when the term was announced. Only the lease
  that holds the lock, with the term the fence key holds, may write it
  (``election_announce.lua``): a deposed leader's proclaim is refused.
- **The log** (a stream of the last :data:`LOG_LENGTH` changes) holds every
  change (elected, proclaimed, resigned, lost), each announced by its entry's
  id on the **feed** channel. A term that ends unannounced (its lease expired)
  is logged ``lost`` by the next script that finds it so: the next leader's
  announcement, or any read (``election_read.lua``).

Observers (:func:`watch`, :class:`Cursor`) subscribe to the feed, then read
the log after the last entry they saw, then wait for the next message, so no
change falls between two reads; a reconnection of the subscription wakes them
too. :class:`Cursor` delivers the changes in term order and reconciles them
with the record read in the same call, so an observer whose log entries were
trimmed, or lost with the server's data, still ends on the last state.

Values are stored base64-encoded (any bytes, whatever the client decodes).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from .._errors import InvalidArgument, NotOwnedError
from .._info import ElectionChange, ElectionEvent, Leader
from .._keys import ElectionKeys, election_keys
from .._protocol import Eval, Pipeline, Plan, Status, Subscribe, WaitWake, text
from .._scripts import (
    ELECTION_ANNOUNCE,
    ELECTION_READ,
    ELECTION_RENEW,
    ELECTION_RESIGN,
    FAIR_ACQUIRE,
    FAIR_INSPECT,
    FAIR_RELEASE,
)
from .._units import lease_ms
from . import fair
from .common import FENCE_KEEP_MS, least_left_ms
from .kind import Kind, named, token_release
from .replicas import ReplicaPolicy, acknowledged, wait_command
from .snapshot import LockView

#: The largest value a leader may proclaim, in bytes.
VALUE_MAX = 4096

#: How long the record and the log outlive their last write (ms): 7 days.
KEEP_MS = 7 * 24 * 3600 * 1000

#: How many changes the log keeps: an observer that falls further behind
#: (a long disconnection) skips to the last state.
LOG_LENGTH = 64

#: The most log entries one read returns.
READ_COUNT = 32

#: How long after a leader's lease would end an idle observer reads again, in
#: seconds, to see a term that ended with no successor (nothing is published).
LATE = 0.05


def check_value(value: object) -> bytes:
    """Validate a value to proclaim: ``bytes`` (or ``bytearray``, ``memoryview``)
    or ``str`` (sent as UTF-8), at most :data:`VALUE_MAX` bytes.

    Raises:
        InvalidArgument: another type, a ``str`` UTF-8 can't encode, or too long.
    """
    if isinstance(value, str):
        try:
            data = value.encode()
        except UnicodeEncodeError:
            raise InvalidArgument(f"value {value[:40]!r} can't be encoded as UTF-8") from None
    elif isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
    else:
        raise InvalidArgument(
            f"value must be bytes or str, not {type(value).__name__} {_short(value)}"
        )
    if len(data) > VALUE_MAX:
        raise InvalidArgument(
            f"value {_short(value)} is {len(data)} bytes; an election's value is at most "
            f"{VALUE_MAX} bytes (proclaim a reference to larger data)"
        )
    return data


def _short(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _encode(value: bytes) -> str:
    return base64.b64encode(value).decode()


def _decode(stored: str, has: str) -> bytes | None:
    if has != "1":
        return None
    try:
        return base64.b64decode(stored, validate=True)
    except (binascii.Error, ValueError):
        return stored.encode()  # (written by hand: taken as it is)


def announce(
    keys: ElectionKeys,
    token: str,
    term: int,
    label: str,
    value: bytes | None = None,
    replicas: ReplicaPolicy | None = None,
    op: str = "",
    seq: int | None = None,
) -> Plan[bool]:
    """Announce the term ``term`` of the lease ``token`` (``value`` ``None``), or
    proclaim ``value`` in it. Returns whether anything was written (an
    announcement made already writes nothing, nor a proclaim whose call id
    ``op`` the record holds: the call retried after a lost reply). With ``replicas``
    (``min_replicas``), the write and a ``WAIT`` go in one pipeline: the
    caller runs it on the connection that made the grant (the driver's
    ``one_connection``). ``seq`` (one master of several: a
    :class:`tenure.RedlockElection`): the value's number within the term (0
    for the announcement); the lease token holding the lock is then enough,
    and the master's fence is raised to ``term`` (see ``election_announce.lua``).

    Raises:
        NotOwnedError: ``token`` does not hold the election with ``term`` (its
            lease ended, and perhaps another leader was elected); nothing written.
        NotReplicatedError: (``replicas``) fewer replicas acknowledged the
            write in time; it was made on the master.
    """
    event = "elected" if value is None else "proclaimed"
    step = Eval(
        ELECTION_ANNOUNCE,
        (keys.lock, keys.fence, keys.record, keys.log),
        (
            token,
            str(term),
            event,
            label,
            _encode(value) if value is not None else "",
            keys.channel,
            KEEP_MS,
            LOG_LENGTH,
            op,
            "" if seq is None else str(seq),
        ),
    )
    if replicas is None:
        status, written = yield step
    else:
        wait = wait_command(replicas)
        reply, acks = yield Pipeline((step, wait))
        if isinstance(reply, BaseException):
            raise reply
        status, written = reply
        if status is Status.OK:
            acknowledged(keys.name, replicas, wait, acks)
    if status is Status.NOT_OWNED:
        raise NotOwnedError(keys.name, term, "not the leader: its term ended")
    return bool(written)


def renewal(
    keys: ElectionKeys,
    token: str,
    seconds: float,
    *,
    ttl: float,
    delay_ms: int = 0,
    fence_keep_ms: int = FENCE_KEEP_MS,
) -> Eval:
    """The leader's renewal (``election_renew.lua``): a lock's renewal (the
    contract and replies of :func:`tenure._plans.lock.renewal`, the fence key
    kept ``fence_keep_ms`` or the lease) that also keeps the record and the
    log of the lease's term :data:`KEEP_MS` (or the lease) from now, so that a
    term on outlives them however long its leader goes without a write.

    Raises:
        InvalidArgument: ``seconds`` is not a lease length (0.01 s to a year).
    """
    return Eval(
        ELECTION_RENEW,
        (keys.lock, keys.delay, keys.fence, keys.record, keys.log),
        (token, lease_ms(seconds, "seconds"), least_left_ms(ttl), delay_ms, fence_keep_ms, KEEP_MS),
    )


def _resign_step(keys: ElectionKeys, token: str, term: int, event: str) -> Eval:
    return Eval(
        ELECTION_RESIGN,
        (keys.lock, keys.record, keys.log),
        (token, str(term), event, keys.channel, KEEP_MS, LOG_LENGTH),
    )


def end_term(keys: ElectionKeys, token: str, term: int) -> Plan[bool]:
    """End the term ``term`` of the lease ``token`` in the record (logged
    ``resigned``, or ``lost`` if its lease ended first) without releasing it:
    one master's part of a :class:`tenure.RedlockElection`'s resignation,
    before its release. Returns whether the term was ended here (``False``:
    it was not the record's active term)."""
    _, ended = yield _resign_step(keys, token, term, "resigned")
    return bool(ended)


def release(
    keys: ElectionKeys, token: str, fence: int, delay_ms: int = 0, *, op: str = ""
) -> Plan[None]:
    """End the term of the lease ``token`` (logged ``resigned``, or ``lost`` if
    its lease ended first), then release the lock as a fair lock does: the next
    candidate is elected. Idempotent per call ``op`` (see :func:`.fair.release`).

    Raises:
        NotOwnedError: the lease does not hold the lock (it ended).
    """
    yield from _end_and_release(keys, token, fence, "resigned", delay_ms, op)


def depose(keys: ElectionKeys, token: str, fence: int) -> Plan[None]:
    """A forced release (``tenure release --force``): the term is logged
    ``lost``, then the lock goes to the next candidate.

    Raises:
        NotOwnedError: the lease does not hold the lock (it ended).
    """
    yield from _end_and_release(keys, token, fence, "lost")


def _end_and_release(
    keys: ElectionKeys, token: str, fence: int, event: str, delay_ms: int = 0, op: str = ""
) -> Plan[None]:
    # one round trip: both calls are idempotent, and the term's end is logged
    # before the release hands the lock on
    replies = yield Pipeline(
        (
            _resign_step(keys, token, fence, event),
            fair.release_step(keys, token, "", delay_ms, op),
        ),
        ordered=True,
    )
    for reply in replies:
        if isinstance(reply, BaseException):
            raise reply
    if replies[1][0] is Status.NOT_OWNED:
        raise NotOwnedError(keys.name, fence, "can't release: the lease expired before release")


@dataclass(frozen=True, slots=True)
class Record:
    """The leader's record as read (see ``_election.lua``)."""

    token: str
    term: int
    label: str
    value: bytes | None
    since: float
    active: bool
    sequence: int = 0
    end: str = ""


@dataclass(frozen=True, slots=True)
class ElectionRead:
    """One read of an election (``election_read.lua``).

    Attributes:
        holder: the lease token holding the lock ("" when free).
        pttl_ms: its lease left (PTTL: -2 free, -1 no expiry).
        term: the last term minted (0: none known).
        record: the leader's record, or ``None``.
        entries: the log entries after the id asked for, oldest first, with their ids.
        tail: the log's last entry id ("" when the log is empty).
        full: whether the read returned as many entries as it could (more may follow).
    """

    holder: str
    pttl_ms: int
    term: int
    record: Record | None
    entries: tuple[tuple[str, ElectionEvent], ...]
    tail: str
    full: bool = False

    @property
    def leader(self) -> Leader | None:
        """The leader now: the record's term while it is active and its token
        holds the lock; a lease not announced yet (a moment after its grant)
        is a leader with no label; ``None`` when nobody holds the lock."""
        record = self.record
        ttl = self.pttl_ms / 1000 if self.pttl_ms >= 0 else None
        if record is not None and record.active and record.token == self.holder:
            return Leader(record.label, record.term, record.value, record.since, ttl)
        if self.holder:
            return Leader("", self.term, None, 0.0, ttl)
        return None

    @property
    def announced(self) -> Leader | None:
        """The leader now, if it has announced its term (else ``None``)."""
        lead = self.leader
        return lead if lead is not None and lead.since else None


def _fields(flat: Any) -> dict[str, str]:
    items = [text(v) for v in (flat or ())]
    return dict(zip(items[::2], items[1::2], strict=False))


def _record(flat: Any) -> Record | None:
    rec = _fields(flat)
    if not rec.get("token") or not rec.get("term", "").isdigit():
        return None
    return Record(
        rec["token"],
        int(rec["term"]),
        rec.get("label", ""),
        _decode(rec.get("value", ""), rec.get("has", "0")),
        int(rec.get("since", "0") or 0) / 1000 if rec.get("since", "").isdigit() else 0.0,
        rec.get("state") == "active",
        _number(rec.get("seq", "")),
        rec.get("end", ""),
    )


def _number(stored: str) -> int:
    return int(stored) if stored.isdigit() else 0


_CHANGES: dict[str, ElectionChange] = {
    "elected": "elected",
    "proclaimed": "proclaimed",
    "resigned": "resigned",
    "lost": "lost",
}


def parse_entry(raw: Any) -> tuple[str, ElectionEvent] | None:
    """A log entry (its id and its flat fields) as its id and its change;
    ``None`` for an entry tenure did not write."""
    entry_id, flat = raw
    rec = _fields(flat)
    change = _CHANGES.get(rec.get("event", ""))
    if change is None or not rec.get("term", "").isdigit():
        return None
    since = rec.get("since", "0")
    return text(entry_id), ElectionEvent(
        change,
        int(rec["term"]),
        rec.get("label", ""),
        _decode(rec.get("value", ""), rec.get("has", "0")),
        int(since) / 1000 if since.isdigit() else 0.0,
        _number(rec.get("seq", "")),
    )


def parse_read(value: Any, count: int = READ_COUNT) -> ElectionRead:
    """Read an ``election_read.lua`` reply (see its header)."""
    holder, pttl, term, flat, raw_entries, tail = value
    entries = tuple(e for e in (parse_entry(r) for r in (raw_entries or ())) if e is not None)
    term_text = text(term)
    return ElectionRead(
        text(holder),
        int(pttl),
        int(term_text) if term_text.lstrip("-").isdigit() else 0,
        _record(flat),
        entries,
        text(tail),
        full=len(raw_entries or ()) >= count,
    )


def read(keys: ElectionKeys, after: str = "", count: int = READ_COUNT) -> Plan[ElectionRead]:
    """Read the election: its holder, the record, and the log entries after the
    entry id ``after`` ("": none). A term whose lease ended is logged ``lost`` first."""
    _, value = yield Eval(
        ELECTION_READ,
        (keys.lock, keys.fence, keys.record, keys.log),
        (after, count, keys.channel, KEEP_MS, LOG_LENGTH),
    )
    return parse_read(value, count)


def watch(
    keys: ElectionKeys, cursor: Cursor, confirm: float | None = None, limit: float | None = None
) -> Plan[ElectionRead | None]:
    """Wait for the next changes after ``cursor``: subscribe to the feed, read
    the log (a first read returns at once: the catch-up), and when it holds
    nothing new wait for a message (or a reconnection of the subscription),
    at most until the leader's lease would end (plus :data:`LATE`) and
    ``limit`` seconds, then read again. Returns the last read, or ``None`` if
    the subscription was not confirmed within ``confirm`` seconds."""
    subscribed = yield Subscribe(keys.channel, confirm)
    if not subscribed:
        return None
    state = yield from read(keys, cursor.after)
    if not cursor.started or cursor.news(state):
        return state
    wait = cursor.wait(state)
    if limit is not None:
        wait = limit if wait is None else min(wait, limit)
    yield WaitWake(wait)
    return (yield from read(keys, cursor.after))


def entry_key(entry_id: str) -> tuple[int, int]:
    """A log entry id as a pair of numbers, to compare (``(0, 0)`` for none)."""
    ms, _, seq = entry_id.partition("-")
    return (int(ms), int(seq or 0)) if ms.isdigit() and (seq or "0").isdigit() else (0, 0)


def standing(lead: Leader) -> ElectionEvent:
    """The change that brings an observer to ``lead``'s term as it stands."""
    change: ElectionChange = "elected" if lead.value is None else "proclaimed"
    return ElectionEvent(change, lead.term, lead.label, lead.value, lead.since, lead.sequence)


@dataclass
class Cursor:
    """What one observer has delivered: the last log entry read, the last term
    and whether it is still on. :meth:`take` turns reads into the changes to
    deliver, in term order, each once.

    The first read delivers the current state (the leader, if any, as
    ``elected``, or ``proclaimed`` with its value). Later reads deliver the
    log's entries after the last one seen, skipping any of an earlier term than
    the last delivered, then reconcile with the record read in the same call:
    a term on that is gone (the log trimmed, or lost with the server's data) is
    delivered ``lost``, and a newer announced leader not seen in the log is
    delivered as it stands.
    """

    after: str = ""
    term: int = 0
    on: bool = False
    started: bool = False
    last: ElectionEvent | None = field(default=None, repr=False)

    def news(self, state: ElectionRead) -> bool:
        """Whether ``state`` holds something to deliver (without delivering it)."""
        probe = Cursor(self.after, self.term, self.on, self.started, self.last)
        return bool(probe.take(state))

    def wait(self, state: ElectionRead) -> float | None:
        """How long an observer may wait for a message after ``state``: until
        the leader's lease would end (a term that ends with no successor is
        published by nobody), else without limit."""
        if state.holder and state.pttl_ms >= 0:
            return state.pttl_ms / 1000 + LATE
        return None

    def take(self, state: ElectionRead) -> list[ElectionEvent]:
        """The changes to deliver from ``state``, in order; the cursor moves on."""
        out: list[ElectionEvent] = []
        if not self.started:
            self.started = True
            self.after = state.tail or "0-0"  # (an empty log: every entry to come)
            lead = state.announced
            if lead is not None:
                self._deliver(out, standing(lead))
            return out
        for entry_id, event in state.entries:
            if entry_key(entry_id) <= entry_key(self.after):
                continue  # (seen already)
            self.after = entry_id
            if event.term < self.term or (event.term == self.term and not self.on):
                continue
            self._deliver(out, event)
        if state.full:
            return out  # more entries follow: reconcile after the last
        if not state.entries and entry_key(state.tail or "0-0") < entry_key(self.after):
            self.after = state.tail or "0-0"  # the log was replaced (the server lost its data)
        lead = state.announced
        if self.on and (lead is None or lead.term != self.term) and self.last is not None:
            gone = self.last
            self._deliver(out, ElectionEvent("lost", gone.term, gone.label, gone.value, gone.since))
        if lead is not None and (lead.term > self.term or self._missed(lead)):
            self._deliver(out, standing(lead))
        return out

    def _missed(self, lead: Leader) -> bool:
        """Whether ``lead``, of the term on, proclaimed a value not delivered
        (its log entry was trimmed)."""
        last = self.last
        return self.on and last is not None and lead.term == last.term and lead.value != last.value

    def _deliver(self, out: list[ElectionEvent], event: ElectionEvent) -> None:
        out.append(event)
        self.term = event.term
        self.on = event.leading
        self.last = event


# --- the kind, for the operator tools and the hub -------------------------------------------


def _read(keys: ElectionKeys, waiting: int) -> Plan[LockView]:
    view = yield from fair._read(keys, waiting)
    state = yield from read(keys)
    return LockView(
        "Election",
        view.name,
        view.key,
        view.holder,
        view.count,
        view.pttl_ms,
        view.fence,
        view.waiters,
        view.waiting,
        detail=state.leader,
    )


def _acl_keys(keys: ElectionKeys) -> tuple[str, ...]:
    return (*fair._acl_keys(keys), keys.record, keys.log)


def _exists(view: LockView) -> bool:
    return view.detail is not None


#: The ``Election`` kind (see :class:`~tenure._plans.kind.Kind`): a fair lock
#: whose release logs the term's end; ``release --force`` deposes the leader
#: (logged ``lost``) and the next candidate is elected.
ELECTION: Kind[ElectionKeys] = Kind(
    name="Election",
    build=named("Election", election_keys),
    read=_read,
    scripts=(
        FAIR_ACQUIRE,
        FAIR_RELEASE,
        ELECTION_RENEW,
        FAIR_INSPECT,
        ELECTION_ANNOUNCE,
        ELECTION_RESIGN,
        ELECTION_READ,
    ),
    acl_keys=_acl_keys,
    exists=_exists,
    force_release=token_release(depose),
    pass_on=fair.pass_on,
)
