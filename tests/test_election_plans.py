"""The election's plans without Redis: announce, release, read, watch, and the
observer's Cursor (term order, each change once, reconciling with the record)."""

from __future__ import annotations

import base64

import pytest
from _plan_harness import finish, first, send

from tenure import ElectionEvent, InvalidArgument, NotOwnedError, NotReplicatedError
from tenure._keys import election_keys
from tenure._plans import election
from tenure._plans.election import Cursor, ElectionRead, Record
from tenure._plans.replicas import ReplicaPolicy
from tenure._protocol import Command, Eval, Pipeline, Status, Subscribe, WaitWake
from tenure._scripts import ELECTION_ANNOUNCE, ELECTION_READ, ELECTION_RESIGN, FAIR_RELEASE

KEYS = election_keys("jobs", prefix="tenure:")


def event(change: str, term: int, value: bytes | None = None, label: str = "a") -> ElectionEvent:
    return ElectionEvent(change, term, label, value, 1.0)  # type: ignore[arg-type]


def state(
    *entries: tuple[str, ElectionEvent],
    holder: str = "",
    record: Record | None = None,
    tail: str = "",
    pttl: int = -2,
    full: bool = False,
) -> ElectionRead:
    term = record.term if record is not None else 0
    last = entries[-1][0] if entries else tail
    return ElectionRead(holder, pttl, term, record, tuple(entries), last, full)


def record(term: int, value: bytes | None = None, active: bool = True, token: str = "t") -> Record:
    return Record(token, term, "a", value, 1.0, active)


# --- values and labels ---------------------------------------------------------------------


def test_values_are_checked_and_named() -> None:
    assert election.check_value("héllo") == "héllo".encode()
    assert election.check_value(bytearray(b"\x00\xff")) == b"\x00\xff"
    with pytest.raises(InvalidArgument, match="not int 7"):
        election.check_value(7)
    with pytest.raises(InvalidArgument, match=r"value b'xxx.*\.\.\. is 4097 bytes"):
        election.check_value(b"x" * 4097)
    with pytest.raises(InvalidArgument, match="UTF-8"):
        election.check_value("\udc80")
    assert election.check_value(b"x" * election.VALUE_MAX)


# --- the steps ---------------------------------------------------------------------------


def test_announce_and_proclaim_send_the_term_and_the_value_base64() -> None:
    plan = election.announce(KEYS, "tok", 42, "web-1")
    step = first(plan)
    assert isinstance(step, Eval) and step.script is ELECTION_ANNOUNCE
    assert step.keys == (KEYS.lock, KEYS.fence, KEYS.record, KEYS.log)
    assert step.args[:5] == ("tok", "42", "elected", "web-1", "")
    assert step.args[5] == KEYS.channel == "tenure:{jobs}:election:feed"
    assert finish(plan, (Status.OK, 1)) is True
    plan = election.announce(KEYS, "tok", 42, "web-1", b"\xff")
    step = first(plan)
    assert step.args[2:5] == ("proclaimed", "web-1", base64.b64encode(b"\xff").decode())
    with pytest.raises(NotOwnedError, match="its term ended"):
        send(plan, (Status.NOT_OWNED, 0))


def test_release_ends_the_term_then_releases_in_one_round_trip() -> None:
    plan = election.release(KEYS, "tok", 42, op="op1")
    step = first(plan)
    assert isinstance(step, Pipeline)
    end, release = step.steps
    assert isinstance(end, Eval) and isinstance(release, Eval)
    assert end.script is ELECTION_RESIGN and end.args[:3] == ("tok", "42", "resigned")
    assert release.script is FAIR_RELEASE and release.args[0] == "tok" and release.args[-1] == "op1"
    assert finish(plan, [(Status.OK, 1), (Status.OK, 1)]) is None
    plan = election.release(KEYS, "tok", 42)
    first(plan)
    with pytest.raises(NotOwnedError, match="expired"):
        send(plan, [(Status.OK, 0), (Status.NOT_OWNED, 0)])
    plan = election.release(KEYS, "tok", 42)
    first(plan)
    with pytest.raises(ConnectionError):
        send(plan, [ConnectionError("gone"), (Status.OK, 1)])
    plan = election.depose(KEYS, "tok", 42)
    assert first(plan).steps[0].args[2] == "lost"


def test_parse_read_decodes_the_record_and_the_entries() -> None:
    value = base64.b64encode(b"addr").decode()
    flat = [b"token", b"t", b"term", b"7", b"label", b"a", b"value", value.encode()]
    flat += [b"has", b"1", b"since", b"1500", b"state", b"active"]
    raw_entries = [
        [b"1-0", [b"event", b"elected", b"term", b"7", b"has", b"0", b"since", b"1500"]],
        [b"1-1", [b"event", b"bogus", b"term", b"7"]],  # (unknown: skipped)
    ]
    read = election.parse_read(["t", 900, "7", flat, raw_entries, "1-1"], count=2)
    assert read.record == Record("t", 7, "a", b"addr", 1.5, True)
    assert read.entries == (("1-0", ElectionEvent("elected", 7, "", None, 1.5)),)
    assert read.full and read.tail == "1-1"
    assert read.leader is not None and (read.leader.term, read.leader.ttl) == (7, 0.9)
    # a holder that has not announced itself: a leader with no label
    read = election.parse_read(["u", 900, "8", flat, [], "1-1"])
    assert read.leader is not None and (read.leader.label, read.leader.term) == ("", 8)
    assert read.announced is None
    assert election.parse_read(["", -2, "8", flat, [], ""]).leader is None


def test_watch_reads_at_once_then_waits_until_the_lease_would_end() -> None:
    cursor = Cursor()
    plan = election.watch(KEYS, cursor, 10.0)
    assert first(plan) == Subscribe(KEYS.channel, 10.0)
    step = send(plan, True)
    assert step.script is ELECTION_READ and step.args[0] == ""
    empty = ["", -2, "0", [], [], ""]
    assert finish(plan, (Status.OK, empty)).holder == ""  # the first read: the catch-up
    assert cursor.take(election.parse_read(empty)) == []
    assert cursor.after == "0-0"
    plan = election.watch(KEYS, cursor)
    first(plan)
    assert send(plan, True).args[0] == "0-0"
    held = ["t", 1500, "7", [], [], ""]  # a lease not announced: nothing new yet
    assert send(plan, (Status.OK, held)) == WaitWake(1.5 + election.LATE)
    assert send(plan, True).script is ELECTION_READ
    assert finish(plan, (Status.OK, empty)).holder == ""
    plan = election.watch(KEYS, cursor)
    first(plan)
    send(plan, True)
    assert send(plan, (Status.OK, empty)) == WaitWake(None)  # nobody leads: no limit
    plan = election.watch(KEYS, cursor, limit=0.25)
    first(plan)
    send(plan, True)
    assert send(plan, (Status.OK, held)) == WaitWake(0.25)  # the caller's limit first
    assert election.watch(KEYS, cursor, 1.0).send(None) == Subscribe(KEYS.channel, 1.0)
    unconfirmed = election.watch(KEYS, cursor, 1.0)
    first(unconfirmed)
    assert finish(unconfirmed, False) is None


# --- the cursor --------------------------------------------------------------------------


def test_the_first_read_delivers_the_standing_leader() -> None:
    cursor = Cursor()
    assert cursor.take(state(holder="t", record=record(7, b"v"), tail="5-0")) == [
        event("proclaimed", 7, b"v")
    ]
    assert (cursor.after, cursor.term, cursor.on) == ("5-0", 7, True)
    assert Cursor().take(state(holder="t", record=record(7))) == [event("elected", 7)]
    # a record whose lease ended, or none: nothing stands
    assert Cursor().take(state(holder="", record=record(7))) == []
    assert Cursor().take(state()) == []


def test_entries_are_delivered_in_order_each_once() -> None:
    cursor = Cursor()
    cursor.take(state(tail="1-0"))
    changes = [
        ("2-0", event("elected", 7)),
        ("3-0", event("proclaimed", 7, b"x")),
        ("4-0", event("resigned", 7, b"x")),
        ("5-0", event("elected", 9)),
    ]
    now = state(*changes, holder="t", record=record(9))
    assert cursor.news(now)
    assert [e for _, e in changes] == cursor.take(now)
    assert cursor.after == "5-0" and not cursor.news(now)
    assert cursor.take(state(*changes, holder="t", record=record(9))) == []


def test_an_earlier_term_is_never_delivered_after_a_later_one() -> None:
    cursor = Cursor()
    cursor.take(state(holder="t", record=record(9), tail="9-0"))
    late = state(("10-0", event("proclaimed", 7, b"old")), holder="t", record=record(9))
    assert cursor.take(late) == []
    ended = state(
        ("11-0", event("lost", 9)), ("12-0", event("lost", 9)), record=record(9, active=False)
    )
    assert cursor.take(ended) == [event("lost", 9)]  # (a term ends once)


def test_a_term_gone_from_the_data_is_delivered_lost() -> None:
    cursor = Cursor()
    cursor.take(state(holder="t", record=record(7, b"v"), tail="5-0"))
    # the server lost its data: no record, an empty log
    assert cursor.take(state()) == [event("lost", 7, b"v")]
    assert cursor.after == "0-0" and not cursor.on
    # the next leader's term, read from the new log
    assert cursor.take(state(("1-0", event("elected", 9)), holder="t", record=record(9))) == [
        event("elected", 9)
    ]


def test_changes_trimmed_from_the_log_are_reconciled() -> None:
    cursor = Cursor()
    cursor.take(state(holder="t", record=record(7), tail="5-0"))
    # the observer fell behind by more than the log holds: only term 11 is left
    now = state(
        ("90-0", event("proclaimed", 11, b"z")), holder="u", record=record(11, b"z", token="u")
    )
    assert cursor.take(now) == [event("proclaimed", 11, b"z")]
    # a proclaim whose entry is gone: the record's value is delivered
    now = state(holder="u", record=record(11, b"w", token="u"), tail="90-0")
    assert cursor.take(now) == [event("proclaimed", 11, b"w")]
    # a full read: more entries follow, nothing is reconciled yet
    full = state(("91-0", event("proclaimed", 11, b"q")), record=None, full=True)
    assert cursor.take(full) == [event("proclaimed", 11, b"q")]


def test_every_reply_shape_parses() -> None:
    # a reply with str items (a client that decodes) reads the same
    flat = ["token", "t", "term", "7", "state", "active", "has", "0"]
    read = election.parse_read(
        ["t", "100", "7", flat, [["1-0", ["event", "lost", "term", "7"]]], "1-0"]
    )
    assert read.record is not None and read.record.active and read.record.value is None
    assert read.entries[0][1].change == "lost"


def test_with_min_replicas_the_announcement_waits_for_the_replicas() -> None:
    policy = ReplicaPolicy(1, 0.5, False)
    plan = election.announce(KEYS, "tok", 42, "web-1", b"v", policy)
    step = first(plan)
    assert isinstance(step, Pipeline)
    write, wait = step.steps
    assert isinstance(write, Eval) and write.script is ELECTION_ANNOUNCE
    assert wait == Command(("WAIT", "1", "500"))
    assert finish(plan, [(Status.OK, 1), 1]) is True
    plan = election.announce(KEYS, "tok", 42, "web-1", None, policy)
    first(plan)
    with pytest.raises(NotReplicatedError):
        send(plan, [(Status.OK, 1), 0])
    plan = election.announce(KEYS, "tok", 42, "web-1", b"v", policy)
    first(plan)
    with pytest.raises(NotOwnedError):  # refused: nothing to wait for
        send(plan, [(Status.NOT_OWNED, 0), 0])
