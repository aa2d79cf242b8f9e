"""Redlock's decisions (tenure._plans.redlock), without Redis."""

from __future__ import annotations

import pytest
import redis.exceptions

from tenure import InvalidArgument, NoQuorumError, NotOwnedError, WrongTypeError
from tenure._keys import lock_keys
from tenure._plans import redlock as plans
from tenure._plans.waiting import validity
from tenure._protocol import Command, Eval, Pipeline, Status
from tenure._scripts import LOCK_ACQUIRE, LOCK_EXTEND, LOCK_RELEASE, REDLOCK_WAKE

KEYS = lock_keys("orders", key=None, prefix="tenure:")
OK, BUSY, NOT_OWNED = Status.OK, Status.BUSY, Status.NOT_OWNED
DOWN = redis.exceptions.ConnectionError("down")


def test_quorum_is_a_strict_majority_of_an_odd_count() -> None:
    assert [plans.quorum(n) for n in (3, 5, 7)] == [2, 3, 4]
    assert plans.check_count(5) == 5
    for n in (0, 1, 2, 4, 6):
        with pytest.raises(InvalidArgument, match=f"not {n}$"):
            plans.check_count(n)


def test_master_timeout_is_far_below_the_ttl() -> None:
    assert plans.master_timeout(30) == 0.5
    assert plans.master_timeout(2) == pytest.approx(0.1)
    assert plans.master_timeout(0.5) == 0.05
    assert plans.master_timeout(0.04) == pytest.approx(0.02)  # half the ttl at most


def test_granted_needs_a_quorum_and_a_valid_lease() -> None:
    t = plans.tally([(OK, 10), (OK, 12), (BUSY, 900), DOWN, (OK, 11)])
    assert t.ok == (0, 1, 4) and t.fences == (10, 12, 11)
    assert t.refused == (2,) and t.pttls == (900,) and t.failed == (3,)
    assert plans.fence(t) == 12
    assert plans.granted(t, 5, ttl=1.0, sent_at=100.0, now=100.5)
    # the acquire took longer than the ttl less the drift: not held
    assert not plans.granted(t, 5, ttl=1.0, sent_at=100.0, now=100.0 + validity(1.0))
    two = plans.tally([(OK, 1), (OK, 2), (BUSY, 5), (BUSY, 5), (BUSY, 5)])
    assert not plans.granted(two, 5, ttl=1.0, sent_at=0.0, now=0.0)
    assert plans.split(two) and plans.reachable(two, 5)


def test_reachable_counts_masters_that_answered() -> None:
    three_down = plans.tally([DOWN, DOWN, (OK, 1), DOWN, (OK, 2)])
    assert not plans.reachable(three_down, 5)
    err = plans.no_quorum("orders", "acquire", three_down, 5)
    assert isinstance(err, NoQuorumError) and isinstance(err, ConnectionError)
    assert "3 of 5 masters, only 2 answered" in str(err)
    assert plans.reachable(plans.tally([DOWN, DOWN, (BUSY, 1), (BUSY, 1), (BUSY, 1)]), 5)


def test_tenure_errors_are_raised_not_counted_as_a_master_down() -> None:
    wrong = WrongTypeError("tenure:{orders}")
    t = plans.tally([(OK, 1), wrong, (OK, 2)])
    assert t.error is wrong and t.failed == (1,)


def test_wait_for_the_earliest_lease_within_the_deadline() -> None:
    t = plans.tally([(BUSY, 800), (BUSY, 300), (BUSY, -1), DOWN, (BUSY, 0)])
    assert plans.wait_for(t, None) == 0.001  # a lease ending within the millisecond
    t = plans.tally([(BUSY, 800), (BUSY, 300), (BUSY, -1)])
    assert plans.wait_for(t, None) == 0.3
    assert plans.wait_for(t, 0.1) == 0.1
    assert plans.wait_for(t, -1.0) == 0.0
    assert plans.wait_for(plans.tally([(BUSY, -1)]), None) == 1.0  # no expiry: recheck


def test_split_votes_back_off_randomly_and_longer_each_time() -> None:
    first = [plans.backoff(1, r) for r in (0.0, 0.5, 0.999)]
    assert first[0] < first[1] < first[2]  # two contenders draw different delays
    assert first[0] == pytest.approx(plans.BACKOFF_BASE / 2)
    assert plans.backoff(3, 0.5) == pytest.approx(4 * plans.BACKOFF_BASE)
    assert plans.backoff(50, 0.999) < 1.5 * plans.BACKOFF_MAX


def test_renewals_and_releases_decided_by_quorum() -> None:
    ok, gone, late = (OK, 0), (NOT_OWNED, 0), (NOT_OWNED, 1)
    assert plans.renewed(plans.tally([ok, ok, ok, gone, DOWN]), 5) == (OK, 0)
    assert plans.renewed(plans.tally([ok, ok, gone, gone, gone]), 5) == (NOT_OWNED, 0)
    assert plans.renewed(plans.tally([ok, late, gone, late, DOWN]), 5) == (NOT_OWNED, 1)
    assert plans.renewed(plans.tally([ok, ok, gone, DOWN, DOWN]), 5) is None  # retry
    assert plans.extended_until(plans.tally([ok, ok, ok]), 3, "o", 1, 2.0, 10.0) == (
        10.0 + validity(2.0)
    )
    with pytest.raises(NotOwnedError, match="expired"):
        plans.extended_until(plans.tally([ok, gone, gone]), 3, "o", 1, 2.0, 10.0)
    with pytest.raises(NoQuorumError):
        plans.extended_until(plans.tally([ok, DOWN, DOWN]), 3, "o", 1, 2.0, 10.0)
    # a release pipeline's reply counts by its first item (the release)
    assert plans.released_ok(plans.tally([[ok, ok], [ok, ok], [gone, ok]]), 3) is True
    assert plans.released_ok(plans.tally([[ok, ok], [gone, ok], [gone, ok]]), 3) is False
    assert plans.released_ok(plans.tally([[ok, ok], DOWN, DOWN]), 3) is None


def test_script_calls_use_the_lock_keys_and_the_quorum_queue() -> None:
    step = plans.attempt(KEYS, "o:t", 2000, "w|1000|o:t")
    assert step.script is LOCK_ACQUIRE
    assert step.keys == (KEYS.lock, KEYS.fence, "tenure:{orders}:quorum", KEYS.delay)
    assert step.args[:4] == ("o:t", "o:t|", 2000, "w|1000|o:t")
    assert plans.member("w", 2000, "o:t") == "w|1000|o:t"
    release = plans.release(KEYS, "o:t", "op1")
    assert isinstance(release, Pipeline)
    first, count = release.steps
    assert isinstance(first, Eval) and first.script is LOCK_RELEASE
    assert first.keys[1] == KEYS.waiters and first.args[0] == "o:t" and first.args[-1] == "op1"
    assert count == Command(("ZCARD", "tenure:{orders}:quorum"))
    # the wake goes only to the masters whose queue is not empty, after the release round
    assert plans.queued_on([[(OK, 0), 0], [(OK, 0), 3], DOWN, [(NOT_OWNED, 0), 1]]) == [1, 3]
    wake = plans.wake(KEYS)
    assert wake.script is REDLOCK_WAKE
    assert wake.keys == ("tenure:{orders}:quorum",) and wake.args == (KEYS.wake_prefix,)
    renew = plans.renewal(KEYS, "o:t", 3.0, 3.0)
    assert renew.script is LOCK_EXTEND and renew.args[1] == 3000
    assert plans.leave(KEYS, "w|1000|o:t") == Command(
        ("ZREM", "tenure:{orders}:quorum", "w|1000|o:t")
    )
    # a release that also leaves the queue (a cancelled waiter): the ZREM before
    # the ZCARD, so that the waiter does not count itself
    both = plans.release(KEYS, "o:t", "", "w|1000|o:t")
    assert both.steps[1:] == (plans.leave(KEYS, "w|1000|o:t"), count)
    assert plans.queued_on([[(OK, 0), 1, 0], [(OK, 0), 0, 2]]) == [1]


def test_calls_queued_behind_a_stuck_one_go_as_one_pipeline_in_order() -> None:
    first = Command(("PING",))
    released = Eval(LOCK_RELEASE, ("k",), ("t",))
    cleanup = Pipeline((Command(("ECHO", "a")), Command(("ECHO", "b"))))
    plan = plans.late_plan([first, cleanup, released])
    step = next(plan)
    assert step == Pipeline((first, *cleanup.steps, released))
    with pytest.raises(StopIteration) as done:
        plan.send(["PONG", "a", "b", (Status.OK, 1)])
    assert done.value.value == ["PONG", "a", "b", (Status.OK, 1)]


RUN_A = "8f3e1c2b9a7d6e5f4c3b2a1908172635445362a1"
RUN_B = "0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d"


def test_a_masters_run_id_is_read_from_info_server_parsed_or_raw() -> None:
    assert plans.run_id({"redis_version": "7.2.4", "run_id": RUN_A}) == RUN_A
    raw = f"# Server\r\nredis_version:7.2.4\r\nrun_id:{RUN_A}\r\ntcp_port:6379\r\n"
    assert plans.run_id(raw.encode()) == RUN_A
    assert plans.run_id(raw) == RUN_A
    # a reply without one (a proxy answering INFO itself): nothing to compare
    assert plans.run_id({"redis_version": "7.2.4"}) == ""
    assert plans.run_id(b"# Server\r\nredis_version:7.2.4\r\n") == ""
    assert plans.run_id(None) == ""
    plan = plans.identify()
    assert next(plan) == Command(("INFO", "server"))
    with pytest.raises(StopIteration) as done:
        plan.send({"run_id": RUN_B})
    assert done.value.value == RUN_B


def test_a_master_that_did_not_answer_is_not_identified() -> None:
    assert plans.identity(RUN_A) == RUN_A
    assert plans.identity("") == ""
    assert plans.identity(DOWN) is None
    assert plans.identity(TimeoutError("no reply in time")) is None
    assert plans.answered(RUN_A) and plans.answered("") and plans.answered(DOWN)
    assert not plans.answered(object())  # a fan-out's "not done yet"


def test_two_masters_with_one_run_id_are_one_server() -> None:
    assert plans.same_server([RUN_A, RUN_B, "c" * 40]) is None
    assert plans.same_server([RUN_A, RUN_B, RUN_A]) == (0, 2)
    assert plans.same_server([RUN_B, RUN_A, RUN_A, RUN_B, "x"]) == (1, 2)
    # not known (None) or no run_id (""): matches nothing, not even another such
    assert plans.same_server([None, None, RUN_A]) is None
    assert plans.same_server(["", "", RUN_A]) is None
    assert plans.same_server([RUN_A, None, RUN_B, None, RUN_A]) == (0, 4)
    error = plans.same_server_error(0, "localhost:7000/0", 2, "127.0.0.1:7000/1", RUN_A)
    assert isinstance(error, InvalidArgument)
    assert str(error) == (
        f"clients[0] (localhost:7000/0) and clients[2] (127.0.0.1:7000/1) are the same "
        f"server (run_id {RUN_A}): a Redlock needs independent masters, each counted "
        f"once; nothing was taken"
    )
