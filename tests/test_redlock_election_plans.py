"""RedlockElection's decisions without servers: what a quorum accepted, who
leads by the quorum's records, and what an observer delivers from the
masters' logs (:mod:`tenure._plans.redlock_election`)."""

from __future__ import annotations

import pytest

from tenure import ElectionEvent, NoQuorumError, NotOwnedError, WrongTypeError
from tenure._plans.election import ElectionRead, Record
from tenure._plans.redlock_election import (
    QuorumCursor,
    change_key,
    needs_history,
    quorum_leader,
    verdict,
)

N = 5
DOWN = ConnectionError("refused")


def rec(
    term: int, seq: int = 0, value: bytes | None = None, *, token: str = "", active: bool = True
) -> Record:
    return Record(token or f"t{term}", term, f"L{term}", value, 1.0, active, seq, "")


def held(record: Record, pttl: int = 1000) -> ElectionRead:
    """A master whose lock the record's token holds."""
    return ElectionRead(record.token, pttl, record.term, record, (), "")


def ended(term: int, end: str, seq: int = 0, value: bytes | None = None) -> ElectionRead:
    record = Record(f"t{term}", term, f"L{term}", value, 1.0, False, seq, end)
    return ElectionRead("", -2, term, record, (), "")


def ev(change: str, term: int, seq: int = 0, value: bytes | None = None) -> ElectionEvent:
    return ElectionEvent(change, term, f"L{term}", value, 1.0, seq)  # type: ignore[arg-type]


def log(read: ElectionRead, *entries: tuple[str, ElectionEvent]) -> ElectionRead:
    tail = entries[-1][0] if entries else read.tail
    return ElectionRead(read.holder, read.pttl_ms, read.term, read.record, entries, tail)


# --- verdict ---------------------------------------------------------------------------------


def test_a_write_is_done_on_a_quorum() -> None:
    verdict([True, False, True, DOWN, DOWN], N, "e", 7, "the proclaim")


def test_a_write_refused_by_a_majority_is_not_owned() -> None:
    refused = NotOwnedError("e", 7, "no")
    with pytest.raises(NotOwnedError, match="refused by 3 of 5"):
        verdict([True, True, refused, refused, refused], N, "e", 7, "the proclaim")


def test_a_write_too_few_answered_is_no_quorum() -> None:
    refused = NotOwnedError("e", 7, "no")
    with pytest.raises(NoQuorumError, match="2 accepted it, 1 refused and 2 did not answer"):
        verdict([True, True, refused, DOWN, TimeoutError()], N, "e", 7, "the proclaim")


def test_an_error_of_tenures_own_is_raised_when_too_many_masters_gave_it() -> None:
    """A master's error of tenure's own (a wrong type) is raised, not counted as
    a master down, when the masters that gave it are too many for the others
    to make a quorum; on fewer it is outvoted, as by a Redlock's acquire (one
    master's stray key does not stop the election): by a quorum that accepted,
    or, when masters too silent for a quorum are what is missing, named in
    the NoQuorumError."""
    wrong = WrongTypeError("k")
    verdict([True, True, True, wrong, DOWN], N, "e", 7, "the proclaim")
    with pytest.raises(WrongTypeError):
        verdict([True, wrong, wrong, wrong, DOWN], N, "e", 7, "the proclaim")
    with pytest.raises(NoQuorumError, match="2 accepted it, 0 refused, 2 failed") as info:
        verdict([True, True, wrong, wrong, TimeoutError()], N, "e", 7, "the proclaim")
    assert "master 2: WrongTypeError" in str(info.value)
    assert "and 1 did not answer" in str(info.value)


def test_a_read_with_an_error_of_tenures_own_is_outvoted_by_a_quorum() -> None:
    wrong = WrongTypeError("k")
    reads = [held(rec(5, 1, b"a"))] * 3 + [wrong, DOWN]
    lead = quorum_leader(reads, N, "e")
    assert lead is not None and (lead.term, lead.value) == (5, b"a")
    with pytest.raises(WrongTypeError):
        quorum_leader([held(rec(5, 1, b"a"))] * 2 + [wrong, wrong, wrong], N, "e")
    # too few answered, because of a master down: the wrong type is named
    with pytest.raises(NoQuorumError, match="2 of 5 masters answered") as info:
        quorum_leader([held(rec(5, 1, b"a"))] * 2 + [wrong, wrong, DOWN], N, "e")
    assert "master 3: WrongTypeError" in str(info.value)


# --- quorum_leader ---------------------------------------------------------------------------


def test_the_leader_is_the_term_on_on_a_majority() -> None:
    reads = [held(rec(5, 1, b"a"), 900), held(rec(5, 1, b"a"), 500), held(rec(5, 1, b"a"), 700)]
    # a minority with a newer term on (a master that granted a lease nobody announced
    # on a quorum) and one with an older term still on: neither leads
    reads += [held(rec(9, 3, b"z")), held(rec(2, 0))]
    lead = quorum_leader(reads, N, "e")
    assert lead is not None
    assert (lead.label, lead.term, lead.value, lead.sequence) == ("L5", 5, b"a", 1)
    assert lead.ttl == 0.5  # the lease left on the third of the majority to end


def test_the_value_is_the_latest_a_majority_holds() -> None:
    reads = [
        held(rec(5, 3, b"three")),
        held(rec(5, 3, b"three")),
        held(rec(5, 2, b"two")),
        held(rec(5, 1, b"one")),
        DOWN,
    ]
    # masters 0 and 1 held the second value before the third: their logs say so
    assert needs_history(reads, N)
    past = (ev("proclaimed", 5, 3, b"three"), ev("proclaimed", 5, 2, b"two"), ev("elected", 5))
    lead = quorum_leader(reads, N, "e", [past, past, (), (), DOWN])
    assert lead is not None and (lead.value, lead.sequence) == (b"two", 2)
    # a master that holds the latest of a majority's values settles it without logs
    reads[3] = held(rec(5, 3, b"three"))
    assert not needs_history(reads, N)
    lead = quorum_leader(reads, N, "e")
    assert lead is not None and (lead.value, lead.sequence) == (b"three", 3)


def test_a_value_a_minority_held_is_not_the_leaders() -> None:
    # the first value reached master 0 only, the second masters 1 and 2 only
    # (each proclaim raised NoQuorumError): no value but the announcement was
    # ever on a majority
    reads = [
        held(rec(5, 1, b"v1")),
        held(rec(5, 2, b"v2")),
        held(rec(5, 2, b"v2")),
        held(rec(5)),
        held(rec(5)),
    ]
    assert needs_history(reads, N)
    logs = [
        (ev("proclaimed", 5, 1, b"v1"), ev("elected", 5)),
        (ev("proclaimed", 5, 2, b"v2"), ev("elected", 5)),
        (ev("proclaimed", 5, 2, b"v2"), ev("elected", 5)),
        (ev("elected", 5),),
        (ev("elected", 5),),
    ]
    for given in (None, logs):
        lead = quorum_leader(reads, N, "e", given)
        assert lead is not None and (lead.value, lead.sequence) == (None, 0)
        cursor = QuorumCursor(N)
        assert cursor.take(reads, given) == [ev("elected", 5)]
    # a value every master held, then two proclaims that reached two masters
    # each: the value all held is the leader's
    reads = [
        held(rec(5, 2, b"v2")),
        held(rec(5, 2, b"v2")),
        held(rec(5, 3, b"v3")),
        held(rec(5, 3, b"v3")),
        held(rec(5, 1, b"v1")),
    ]
    one = ev("proclaimed", 5, 1, b"v1")
    logs = [
        (ev("proclaimed", 5, 2, b"v2"), one),
        (ev("proclaimed", 5, 2, b"v2"), one),
        (ev("proclaimed", 5, 3, b"v3"), one),
        (ev("proclaimed", 5, 3, b"v3"), one),
        (one,),
    ]
    lead = quorum_leader(reads, N, "e", logs)
    assert lead is not None and (lead.value, lead.sequence) == (b"v1", 1)


def test_no_leader_without_a_majority_on() -> None:
    reads = [held(rec(5)), held(rec(5)), ended(5, "resigned"), ended(5, "resigned"), DOWN]
    assert quorum_leader(reads, N, "e") is None
    # a record whose token no longer holds the lock is not on
    stale = ElectionRead("other", 100, 6, rec(5), (), "")
    assert quorum_leader([stale, stale, stale, held(rec(5)), held(rec(5))], N, "e") is None


def test_too_few_answers_is_no_quorum() -> None:
    with pytest.raises(NoQuorumError, match="2 of 5 masters answered"):
        quorum_leader([held(rec(5)), held(rec(5)), DOWN, DOWN, TimeoutError()], N, "e")


# --- QuorumCursor ----------------------------------------------------------------------------


def test_changes_go_in_term_then_sequence_order() -> None:
    keys = [change_key(e) for e in (ev("elected", 5), ev("proclaimed", 5, 2), ev("lost", 5))]
    assert keys == sorted(keys)
    assert change_key(ev("resigned", 4)) < change_key(ev("elected", 5))
    assert change_key(ev("proclaimed", 5, 1)) < change_key(ev("proclaimed", 5, 10))


def _started(lead_seq: int = 0) -> tuple[QuorumCursor, list[ElectionRead]]:
    cursor = QuorumCursor(N)
    base = [log(held(rec(5, lead_seq)), ("1-0", ev("elected", 5))) for _ in range(N)]
    assert cursor.take(base) == [ev("elected", 5)]  # the standing leader first
    assert cursor.after == ["1-0"] * N
    return cursor, base


def test_a_change_is_delivered_once_a_majority_logged_it() -> None:
    cursor, base = _started()
    change = ("2-0", ev("proclaimed", 5, 1, b"v"))
    reads: list[object] = [log(base[0], change), log(base[1], change), base[2], DOWN, DOWN]
    assert cursor.take(reads) == []  # two of five: not yet
    reads = [base[0], base[1], log(base[2], change), DOWN, DOWN]
    assert cursor.take(reads) == [ev("proclaimed", 5, 1, b"v")]
    reads = [base[0], base[1], base[2], log(base[3], change), log(base[4], change)]
    assert cursor.take(reads) == []  # (once)


def test_what_a_minority_logged_is_never_delivered() -> None:
    cursor, base = _started()
    minority = ("2-0", ev("proclaimed", 5, 2, b"minority"))
    quorum = ("3-0", ev("proclaimed", 5, 3, b"next"))
    reads: list[object] = [
        log(base[0], minority, quorum),
        log(base[1], minority),
        base[2],
        base[3],
        base[4],
    ]
    assert cursor.take(reads) == []  # neither is on a majority
    reads = [base[0], log(base[1], quorum), log(base[2], quorum), base[3], base[4]]
    assert cursor.take(reads) == [ev("proclaimed", 5, 3, b"next")]
    assert not cursor.pending  # (the minority's, before it, is dropped for good)


def test_an_end_is_one_change_however_each_master_logged_it() -> None:
    cursor, _ = _started()
    gone = [ended(5, "resigned"), ended(5, "resigned"), ended(5, "lost"), ended(5, "lost")]
    reads: list[object] = [
        log(gone[0], ("2-0", ev("resigned", 5))),
        log(gone[1], ("2-0", ev("resigned", 5))),
        log(gone[2], ("2-0", ev("lost", 5))),
        DOWN,
        DOWN,
    ]
    assert cursor.take(reads) == [ev("resigned", 5)]  # as most of them logged it
    cursor, _ = _started()
    reads = [log(gone[2], ("2-0", ev("lost", 5)))] * 3 + [DOWN, DOWN]
    assert cursor.take(reads) == [ev("lost", 5)]


def test_a_term_a_majority_has_over_is_delivered_ended_without_its_log() -> None:
    cursor, base = _started()
    # the masters lost their logs (restarted empty): their logs go back, and
    # the quorum's records say the term is over
    empty = ElectionRead("", -2, 0, None, (), "")
    assert cursor.take([empty, empty, empty, base[3], base[4]]) == [ev("lost", 5)]
    assert cursor.after[:3] == ["0-0"] * 3


def test_a_master_first_read_late_starts_at_its_log_end() -> None:
    cursor = QuorumCursor(N)
    base = log(held(rec(5)), ("1-0", ev("elected", 5)))
    assert cursor.take([base, base, base, DOWN, DOWN]) == [ev("elected", 5)]
    back = log(held(rec(5)), ("0-5", ev("elected", 3)), ("0-9", ev("resigned", 3)))
    assert cursor.take([base, base, base, back, back]) == []
    assert cursor.after[3:] == ["0-9", "0-9"]


def test_nothing_is_delivered_before_a_quorum_answered_first() -> None:
    cursor = QuorumCursor(N)
    assert cursor.take([held(rec(5)), held(rec(5)), DOWN, DOWN, DOWN]) == []
    assert not cursor.started


def test_an_idle_observer_reads_again_when_the_first_lease_ends() -> None:
    cursor = QuorumCursor(N)
    reads = [held(rec(5), 900), held(rec(5), 300), ended(4, "lost"), DOWN, DOWN]
    assert cursor.wait(reads) == pytest.approx(0.35)
    assert cursor.wait([ended(4, "lost")] * 3 + [DOWN, DOWN]) is None


def test_a_master_holding_another_value_for_the_sequence_is_outvoted() -> None:
    reads = [held(rec(5, 2, b"odd")), held(rec(5, 2, b"v")), held(rec(5, 2, b"v")), DOWN, DOWN]
    lead = quorum_leader(reads, N, "e")
    assert lead is not None and (lead.value, lead.sequence) == (b"v", 2)


def test_an_observer_delivers_the_value_most_masters_logged() -> None:
    cursor, base = _started()
    odd = ("2-0", ev("proclaimed", 5, 1, b"odd"))
    agreed = ("2-0", ev("proclaimed", 5, 1, b"v"))
    reads = [log(base[0], odd), log(base[1], agreed), log(base[2], agreed), DOWN, DOWN]
    assert cursor.take(reads) == [ev("proclaimed", 5, 1, b"v")]
