"""Pure tests: plans driven with canned replies and a fake clock, no Redis."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
import redis.exceptions
import valkey.exceptions
from _plan_harness import Clock, finish, start

import tenure._protocol
import tenure._scripts
from tenure import (
    AdaptiveTTL,
    AlreadyHeldError,
    InvalidArgument,
    NotOwnedError,
    UnsupportedServer,
)
from tenure._errors import ProtocolError, WrongTypeError
from tenure._keys import lock_keys
from tenure._plans import common, waiting
from tenure._plans import fair as fair_plans
from tenure._plans import fenced as fenced_plans
from tenure._plans import latch as latch_plans
from tenure._plans import lock as plans
from tenure._plans import replicas as replica_plans
from tenure._plans import semaphore as semaphore_plans
from tenure._plans.server import parse_info
from tenure._protocol import (
    Contend,
    Eval,
    HandedOff,
    Listening,
    Recheck,
    Status,
    WaitWake,
    mark_masterless,
    parse_reply,
    reply_or_error,
)
from tenure._scripts import ALL, LOCK_ACQUIRE, LOCK_RELEASE, build
from tenure._units import (
    MAX_COUNT,
    MAX_LEASE_PERMITS,
    MAX_SECONDS,
    MIN_TTL,
    check_count,
    check_seconds,
    check_ttl,
    to_ms,
)
from tenure._views import shown, table

KEYS = lock_keys("orders", key=None, prefix="tenure:")


def acquire_plan(clock: Clock, *, blocking: bool = True, timeout: float | None = None) -> Any:
    return plans.acquire(
        KEYS, "own", "own:tok", 10.0, blocking=blocking, timeout=timeout, now=clock
    )


def test_uncontended_acquire_is_one_script_call() -> None:
    clock = Clock()
    plan = acquire_plan(clock)
    step = start(plan)
    assert isinstance(step, Eval) and step.script is LOCK_ACQUIRE
    assert step.keys == (
        "tenure:{orders}",
        "tenure:{orders}:fence",
        "tenure:{orders}:waiters",
        "tenure:{orders}:delay",
    )
    assert step.args == ("own:tok", "own:", 10000, "", common.FENCE_KEEP_MS, 0, KEYS.wake_prefix)
    grant = finish(plan, (Status.OK, 42))
    assert grant.fence == 42 and grant.token == "own:tok"
    assert grant.expires_at == pytest.approx(100.0 + 10.0 - (0.1 + 0.002))


def test_fence_key_lives_ten_minutes_or_the_lease() -> None:
    """The fence key is kept 10 minutes after a grant, or the lease when longer
    (a retried acquire reads the holder's fence back from it)."""
    assert common.FENCE_KEEP_MS == 600_000
    assert common.fence_keep_ms(10_000) == 600_000
    assert common.fence_keep_ms(3_600_000) == 3_600_000
    plan = plans.acquire(KEYS, "own", "own:tok", 3600.0, blocking=False, timeout=None, now=Clock())
    step = start(plan)
    assert isinstance(step, Eval) and step.args[4] == 3_600_000


def test_busy_then_listen_then_wait_for_pttl_then_acquire() -> None:
    clock = Clock()
    plan = acquire_plan(clock, timeout=5.0)
    start(plan)
    contend = plan.send((Status.BUSY, 2500))
    assert isinstance(contend, Contend)
    assert contend.keys == KEYS and contend.token == "own:tok" and contend.timeout == 5.0
    retry = plan.send("w1")  # the driver's waiter id
    assert isinstance(retry, Eval) and retry.args[3] == "w1|1000|own:tok"  # queues itself
    wait = plan.send((Status.BUSY, 2500))
    assert isinstance(wait, WaitWake) and wait.timeout == 2.5  # the holder's pttl
    clock.t += 1.0
    again = plan.send(True)  # woken without a hand-off: try again
    assert isinstance(again, Eval) and again.args[3] == "w1|1000|own:tok"
    assert finish(plan, (Status.OK, 43)).fence == 43


@pytest.mark.parametrize(("pttl", "wait"), [(0, 0.001), (1, 0.001), (-1, 1.0)])
def test_wait_for_a_lease_about_to_end_or_without_expiry(pttl: int, wait: float) -> None:
    """pttl 0 (ends within the ms) retries at once, not after the no-expiry recheck."""
    plan = acquire_plan(Clock())
    start(plan)
    plan.send((Status.BUSY, pttl))
    plan.send("w1")
    step = plan.send((Status.BUSY, pttl))
    assert isinstance(step, WaitWake) and step.timeout == wait


def test_a_process_that_listens_queues_at_once() -> None:
    plan = acquire_plan(Clock())
    assert isinstance(plan.send(None), Listening)
    contend = plan.send(True)  # waited on this lock a moment ago: skip the lone try
    assert isinstance(contend, Contend)
    queued = plan.send("w1")
    assert isinstance(queued, Eval) and queued.args[3] == "w1|1000|own:tok"
    assert finish(plan, (Status.OK, 5)).fence == 5  # free: the queueing call takes it


def test_handed_off_lock_needs_no_more_round_trips() -> None:
    clock = Clock()
    plan = acquire_plan(clock)
    start(plan)
    plan.send((Status.BUSY, 2500))
    clock.t += 0.5
    plan.send("w1")  # the queueing call is sent at t = 100.5
    plan.send((Status.BUSY, 2500))
    clock.t += 0.2  # within HANDOFF_RESYNC of the 1 s claim window
    grant = finish(plan, HandedOff(77))
    # Redis holds it for the claim window from the release, which came after the
    # queueing call: timed from that call (conservative); the watchdog extends it.
    assert grant.fence == 77 and grant.claim == waiting.HANDOFF_CLAIM == 1.0
    assert grant.expires_at == pytest.approx(100.5 + waiting.validity(1.0))


def test_hand_off_of_a_short_lease_has_no_claim_window() -> None:
    clock = Clock()
    plan = plans.acquire(KEYS, "own", "own:tok", 0.5, blocking=True, timeout=None, now=clock)
    start(plan)
    plan.send((Status.BUSY, 400))
    queue = plan.send("w1")
    assert isinstance(queue, Eval) and queue.args[3] == "w1|500|own:tok"  # handed whole
    plan.send((Status.BUSY, 400))
    clock.t += 0.1
    grant = finish(plan, HandedOff(77))
    assert grant.claim == 0.0 and grant.expires_at == pytest.approx(100.0 + waiting.validity(0.5))


def test_recheck_shortens_the_wait_to_the_claim_window() -> None:
    clock = Clock()
    plan = acquire_plan(clock)
    start(plan)
    plan.send((Status.BUSY, 9000))
    plan.send("w1")
    wait = plan.send((Status.BUSY, 9000))
    assert isinstance(wait, WaitWake) and wait.timeout == pytest.approx(9.0)
    clock.t += 2.0
    # another waiter was handed the lock: try again when its claim window ends
    shorter = plan.send(Recheck(1.0))
    assert isinstance(shorter, WaitWake) and shorter.timeout == pytest.approx(1.0)
    clock.t += 0.5
    # a second recheck never lengthens the wait
    again = plan.send(Recheck(1.0))
    assert isinstance(again, WaitWake) and again.timeout == pytest.approx(0.5)
    clock.t += 0.5
    retry = plan.send(False)
    assert isinstance(retry, Eval) and retry.script is LOCK_ACQUIRE
    assert finish(plan, (Status.OK, 80)).fence == 80


def test_long_wait_hand_off_restarts_the_lease_clock() -> None:
    clock = Clock()
    plan = acquire_plan(clock)
    start(plan)
    plan.send((Status.BUSY, 9000))
    plan.send("w1")
    plan.send((Status.BUSY, 9000))
    clock.t += 5.0  # more than HANDOFF_RESYNC of the 1 s claim window
    extend = plan.send(HandedOff(78))
    # least left: the drift allowance of the 1 s claim window Redis holds, 12 ms
    assert isinstance(extend, Eval) and extend.args == ("own:tok", 10000, 12, 0, 600_000)
    clock.t += 0.1
    grant = finish(plan, (Status.OK, 0))
    assert grant.fence == 78 and grant.expires_at == pytest.approx(105.0 + waiting.validity(10.0))


def test_wait_is_capped_by_the_deadline() -> None:
    clock = Clock()
    plan = acquire_plan(clock, timeout=1.0)
    start(plan)
    plan.send((Status.BUSY, 30000))
    plan.send("w1")
    clock.t += 0.25
    wait = plan.send((Status.BUSY, 30000))
    assert isinstance(wait, WaitWake) and wait.timeout == pytest.approx(0.75)
    clock.t += 0.75
    last = plan.send(False)  # one more attempt at the deadline
    assert isinstance(last, Eval)
    assert isinstance(plan.send((Status.BUSY, 29000)), Eval)  # leaves the queue
    assert finish(plan, (Status.NOT_OWNED, 0)) is None


def test_timeout_returns_none_after_last_attempt() -> None:
    clock = Clock()
    plan = acquire_plan(clock, timeout=1.0)
    start(plan)
    plan.send((Status.BUSY, 30000))
    plan.send("w1")
    plan.send((Status.BUSY, 30000))
    clock.t += 1.0
    retry = plan.send(False)
    assert isinstance(retry, Eval)
    leave = plan.send((Status.BUSY, 29000))  # leaves the queue (and releases a hand-off)
    assert isinstance(leave, Eval) and leave.script is LOCK_RELEASE
    assert leave.args[0] == "own:tok" and leave.args[3] == "w1|1000|own:tok"
    assert finish(plan, (Status.NOT_OWNED, 0)) is None


def _no_master() -> ConnectionError:
    """A connection error as a driver marks it when the slot has no master."""
    exc = ConnectionError("Error 111 connecting to the slot's master")
    mark_masterless(exc)
    return exc


def test_a_queued_attempt_that_meets_no_master_is_sent_again() -> None:
    """A Redis Cluster failover: the waiter's attempt is sent again after a
    growing pause (a wake ends it early) until the slot's new master answers."""
    clock = Clock()
    plan = acquire_plan(clock, timeout=10.0)
    start(plan)
    plan.send((Status.BUSY, 2000))
    plan.send("w1")
    assert isinstance(plan.send((Status.BUSY, 2000)), WaitWake)
    clock.t += 2.0
    attempt = plan.send(False)  # the holder's lease ended: try again
    pauses = []
    for _ in range(6):
        pause = plan.throw(_no_master())
        assert isinstance(pause, WaitWake) and pause.timeout is not None
        pauses.append(pause.timeout)
        clock.t += pause.timeout
        again = plan.send(False)
        assert again == attempt  # the same call, queued as the same member
    assert pauses == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.5, 0.5])
    assert isinstance(plan.throw(_no_master()), WaitWake)
    assert plan.send(HandedOff(9)) == attempt  # (a hand-off: the attempt finds it ours)
    grant = finish(plan, (Status.OK, 44))
    assert grant.fence == 44 and grant.expires_at > clock.t  # timed from the answered attempt


def test_a_waiter_without_a_master_until_its_deadline_returns_none() -> None:
    clock = Clock()
    plan = acquire_plan(clock, timeout=1.0)
    start(plan)
    plan.send((Status.BUSY, 500))
    plan.send("w1")
    plan.send((Status.BUSY, 500))
    clock.t += 0.5
    plan.send(False)
    pause = plan.throw(_no_master())
    assert isinstance(pause, WaitWake) and pause.timeout == pytest.approx(0.05)
    clock.t += 0.4
    pause = plan.send(False) and plan.throw(_no_master())
    assert isinstance(pause, WaitWake) and pause.timeout == pytest.approx(0.1)
    clock.t += 0.1
    plan.send(False)
    leave = plan.throw(_no_master())  # at the deadline: leave (and give back what it took)
    assert isinstance(leave, Eval) and leave.script is LOCK_RELEASE
    assert leave.args[0] == "own:tok" and leave.args[3] == "w1|1000|own:tok"
    assert finish(plan, (Status.NOT_OWNED, 0)) is None


def test_a_fresh_attempt_that_meets_no_master_raises() -> None:
    """Only a waiting (queued) acquire rides out a failover: a first attempt raises."""
    plan = acquire_plan(Clock(), timeout=10.0)
    start(plan)
    cleanup = plan.throw(_no_master())  # (its reply lost: gives back what it may have taken)
    assert isinstance(cleanup, Eval) and cleanup.script is LOCK_RELEASE and cleanup.args[3] == ""
    with pytest.raises(ConnectionError, match="111"):
        plan.send((Status.NOT_OWNED, 0))


def test_a_hand_off_whose_extend_meets_no_master_attempts_again() -> None:
    clock = Clock()
    plan = acquire_plan(clock)
    start(plan)
    plan.send((Status.BUSY, 9000))
    plan.send("w1")
    plan.send((Status.BUSY, 9000))
    clock.t += 5.0
    extend = plan.send(HandedOff(78))  # queued long ago: the lease clock is restarted
    assert isinstance(extend, Eval) and extend.script is not LOCK_ACQUIRE
    again = plan.throw(_no_master())
    assert isinstance(again, Eval) and again.script is LOCK_ACQUIRE
    assert again.args[3] == "w1|1000|own:tok"  # the attempt, on the slot's new master
    assert finish(plan, (Status.OK, 78)).fence == 78


def test_holder_without_expiry_is_rechecked() -> None:
    clock = Clock()
    plan = acquire_plan(clock)
    start(plan)
    plan.send((Status.BUSY, -1))
    wait = plan.send((Status.BUSY, -1))  # after Contend
    assert isinstance(wait, Eval)
    wait = plan.send((Status.BUSY, -1))
    assert isinstance(wait, WaitWake) and wait.timeout == waiting.NO_EXPIRY_RECHECK


def test_non_blocking_busy_returns_none_without_listening() -> None:
    plan = acquire_plan(Clock(), blocking=False)
    start(plan)
    assert finish(plan, (Status.BUSY, 100)) is None


def test_contend_timeout_returns_none() -> None:
    plan = acquire_plan(Clock(), timeout=2.0)
    start(plan)
    plan.send((Status.BUSY, 100))
    assert finish(plan, None) is None


def test_owned_by_caller_raises() -> None:
    plan = acquire_plan(Clock())
    start(plan)
    with pytest.raises(AlreadyHeldError, match="orders"):
        plan.send((Status.OWNED_BY_CALLER, 5000))


def test_lost_reply_gives_the_lock_back_then_reraises() -> None:
    plan = acquire_plan(Clock())
    start(plan)
    plan.send((Status.BUSY, 100))
    plan.send("w1")  # listening now
    cleanup = plan.throw(ConnectionError("reply lost"))
    assert isinstance(cleanup, Eval) and cleanup.script is LOCK_RELEASE
    assert cleanup.args[0] == "own:tok" and cleanup.args[3] == "w1|1000|own:tok"
    with pytest.raises(ConnectionError, match="reply lost"):
        plan.send((Status.OK, 1))


def test_cleanup_failure_does_not_hide_the_original_error() -> None:
    plan = acquire_plan(Clock())
    start(plan)
    plan.throw(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        plan.throw(ConnectionError("still down"))


def test_release_not_owned_names_lock_and_fence() -> None:
    plan = plans.release(KEYS, "own:tok", 77, op="op1")
    step = start(plan)
    assert step.keys == (
        "tenure:{orders}",
        "tenure:{orders}:waiters",
        "tenure:{orders}:fence",
        "tenure:{orders}:delay",
        "tenure:{orders}:released:op1",
    )
    assert step.args == ("own:tok", "tenure:{orders}:wake:", common.FENCE_KEEP_MS, "", 0, "op1")
    with pytest.raises(NotOwnedError, match=r"'orders' \(fence 77\)"):
        plan.send((Status.NOT_OWNED, 0))


def test_exact_key_steps_carry_the_chain_and_foreign_keys() -> None:
    """An exact-key Lock's acquire and release also pass the chain and foreign keys
    and their settings (named locks pass neither: see the two tests above)."""
    exact = lock_keys(None, key="orders:42", prefix="tenure:")
    attempt = start(
        plans.acquire(exact, "own", "own:tok", 10.0, blocking=True, timeout=None, now=Clock())
    )
    assert attempt.keys[4:] == ("{orders:42}:key:chain", "{orders:42}:key:foreign")
    assert attempt.args[6:] == (
        "{orders:42}:key:wake:",
        plans.FOREIGN_POLL_MS,
        plans.FOREIGN_OTHERS_MS,
        plans.FOREIGN_MEMORY_MS,
        plans.FOREIGN_WINDOW_MS,
    )
    release = start(plans.release(exact, "own:tok", 1))
    assert release.keys[5:] == ("{orders:42}:key:chain", "{orders:42}:key:foreign")
    assert release.args[6:] == (
        plans.EXACT_CHAIN,
        plans.EXACT_WINDOW_MS,
        plans.EXACT_SHORT_WINDOW_MS,
        plans.FOREIGN_POLL_MS,
    )


def test_extend_returns_new_deadline() -> None:
    clock = Clock()
    plan = plans.extend(KEYS, "own:tok", 5, 2.0, clock, ttl=2.0, delay_ms=500)
    step = start(plan)
    assert step.keys == ("tenure:{orders}", "tenure:{orders}:delay", "tenure:{orders}:fence")
    # refused with less than the drift allowance (22 ms of 2 s) left; lock-delay 500 ms
    assert step.args == ("own:tok", 2000, 22, 500, 600_000)
    assert finish(plan, (Status.OK, 0)) == pytest.approx(100.0 + 2.0 - 0.022)


def test_extend_refusals_say_why() -> None:
    clock = Clock()
    for late, why in ((0, "the lease expired before extend"), (1, "the lease was about to expire")):
        plan = plans.extend(KEYS, "own:tok", 5, 2.0, clock, ttl=2.0)
        start(plan)
        with pytest.raises(NotOwnedError, match=rf"'orders' \(fence 5\): can't extend: {why}"):
            plan.send((Status.NOT_OWNED, late))


@pytest.mark.parametrize(
    ("blocking", "timeout"),
    [(True, -1), (True, "3"), (False, 1.0), ("yes", None), (True, float("nan"))],
)
def test_bad_acquire_arguments(blocking: object, timeout: object) -> None:
    with pytest.raises(InvalidArgument):
        plans.check_acquire(blocking, timeout)


def test_units() -> None:
    assert to_ms(0.0001, "ttl") == 1
    assert to_ms(1.5, "ttl") == 1500
    assert to_ms(0.0015, "ttl") == 2  # rounds up
    assert to_ms(1.1, "ttl") == 1100  # not 1101: 1.1 * 1000 is 1100.0000000000002
    assert to_ms(0.29, "ttl") == 290 and to_ms(4.35, "ttl") == 4350
    assert to_ms(MAX_SECONDS, "ttl") == 31_536_000_000
    for bad in (0, -1, float("inf"), True, None, "1"):
        with pytest.raises(InvalidArgument, match="ttl"):
            to_ms(bad, "ttl")
    assert check_seconds(0, "timeout", allow_zero=True) == 0.0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (9.3e15, "ttl must be at most 31536000 seconds (365 days), not 9300000000000000.0"),
        (MAX_SECONDS + 1, "ttl must be at most 31536000 seconds (365 days), not 31536001"),
        (10**400, "ttl must be at most 31536000 seconds (365 days), not 1000"),
        (
            1e-9,
            "ttl must be at least 0.01 seconds (a shorter lease is over before its "
            "acquire returns), not 1e-09",
        ),
        (0.0099, "ttl must be at least 0.01 seconds"),
        (float("nan"), "ttl must be a finite number of seconds, not nan"),
        (float("-inf"), "ttl must be a finite number of seconds, not -inf"),
        (True, "ttl must be a number of seconds, not True"),
        (-0.5, "ttl must be > 0 seconds, not -0.5"),
    ],
)
def test_lease_lengths_out_of_range(value: object, message: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        check_ttl(value)
    assert str(info.value).startswith(message)
    with pytest.raises(InvalidArgument, match="ttl must be"):
        start(plans.acquire(KEYS, "own", "tok", value, blocking=True, timeout=None, now=Clock()))  # type: ignore[arg-type]


def test_limits_of_durations_and_counts() -> None:
    assert check_ttl(MIN_TTL) == 0.01 and check_ttl(MAX_SECONDS) == MAX_SECONDS
    assert check_seconds(MAX_SECONDS, "timeout") == MAX_SECONDS
    with pytest.raises(InvalidArgument, match="timeout must be at most 31536000 seconds"):
        plans.check_acquire(True, MAX_SECONDS + 0.5)
    assert plans.check_acquire(True, MAX_SECONDS) == MAX_SECONDS
    with pytest.raises(InvalidArgument, match=r"seconds must be at least 0\.01"):
        plans.renewal(KEYS, "tok", 0.001, ttl=30.0)
    assert check_count(MAX_COUNT, "count") == 2**53 - 1
    for bad in (2**53, 10**20, 0, True, 1.0, "1", None):
        with pytest.raises(
            InvalidArgument, match=r"count must be an int from 1 to 2\*\*53 - 1, not"
        ):
            check_count(bad, "count")
    assert check_count(0, "limit", minimum=0) == 0
    with pytest.raises(InvalidArgument, match="n must be an int from 1 to 10000, not 10001"):
        check_count(10_001, "n", maximum=MAX_LEASE_PERMITS)
    assert semaphore_plans.check_n(MAX_LEASE_PERMITS, MAX_COUNT) == MAX_LEASE_PERMITS
    assert semaphore_plans.check_permits(MAX_COUNT) == MAX_COUNT
    assert latch_plans.check_count(MAX_COUNT) == MAX_COUNT
    with pytest.raises(InvalidArgument, match="fence must be an int from 0 to 2"):
        fenced_plans.check_fence(2**53)
    assert fenced_plans.check_fence(MAX_COUNT) == MAX_COUNT
    with pytest.raises(InvalidArgument, match="min_replicas must be an int from 0 to 2"):
        replica_plans.check_policy(2**53, 1.0, False)
    with pytest.raises(InvalidArgument, match="replica_timeout must be at most"):
        replica_plans.check_policy(1, 9.3e15, False)
    with pytest.raises(InvalidArgument, match="waiter_timeout must be at most"):
        fair_plans.check_waiter_timeout(MAX_SECONDS * 2)
    with pytest.raises(InvalidArgument, match="limit must be an int from 0 to 2"):
        fair_plans.check_limit(2**53)
    policies: list[tuple[str, float]] = [
        ("floor", 1e-9),
        ("ceiling", 9.3e15),
        ("factor", 10**400),
        ("factor", float("inf")),
        ("window", 2**53),
    ]
    for field, bad in policies:
        with pytest.raises(InvalidArgument, match=f"AdaptiveTTL {field} must be"):
            AdaptiveTTL(**{field: bad})  # type: ignore[arg-type]


def test_names_keys_and_prefixes_must_encode_as_utf8() -> None:
    with pytest.raises(InvalidArgument) as info:
        lock_keys("orders\udc80", key=None, prefix="tenure:")
    assert str(info.value) == (
        "name 'orders\\udc80' can't be encoded as UTF-8 ('\\udc80' at index 6 is a lone surrogate)"
    )
    with pytest.raises(InvalidArgument, match=r"key 'a\\ud800b' can't be encoded"):
        lock_keys(None, key="a\ud800b", prefix="tenure:")
    with pytest.raises(InvalidArgument, match=r"prefix '\\udcff:' can't be encoded"):
        lock_keys("orders", key=None, prefix="\udcff:")
    assert lock_keys("é🔒", key=None, prefix="tenure:").lock == "tenure:{é🔒}"


def test_text_output_escapes_control_characters() -> None:
    assert shown("orders:42 é") == "orders:42 é"
    assert shown("a\nb\tc") == "'a\\nb\\tc'"
    rows = table([("KIND", "NAME"), ("Lock", "a\nb"), ("Lock", "x\x1by")])
    assert len(rows) == 3 and all(row.isprintable() for row in rows)
    assert rows[1] == "Lock  'a\\nb'"


def test_keys_share_a_hash_tag() -> None:
    from redis.crc import key_slot

    named = lock_keys("orders:42", key=None, prefix="app:")
    exact = lock_keys(None, key="orders:42", prefix="tenure:")
    tagged = lock_keys(None, key="{user1}:lock", prefix="tenure:")
    for k in (named, exact, tagged):
        slots = {key_slot(x.encode()) for x in (k.lock, k.fence, k.waiters, k.wake_prefix + "w")}
        assert len(slots) == 1, k
    assert exact.lock == "orders:42" and exact.fence == "{orders:42}:key:fence"
    assert tagged.fence == "{user1}:key:%7Buser1%7D:lock:fence"
    for bad_name, bad_key in ((None, None), ("a", "b"), ("", None), (None, ""), (3, None)):
        with pytest.raises(InvalidArgument):
            lock_keys(bad_name, key=bad_key, prefix="p:")  # type: ignore[arg-type]


def test_parse_reply() -> None:
    assert parse_reply(LOCK_ACQUIRE, [1, 5]) == (Status.OK, 5)
    assert parse_reply(LOCK_ACQUIRE, [1, [b"a", 2]]) == (Status.OK, ["a", 2])
    assert parse_reply(LOCK_ACQUIRE, 0) == (Status.OK, 0)
    # a busy reply's number n (>= -1) as the bare -2 - n
    assert parse_reply(LOCK_ACQUIRE, -9989) == (Status.BUSY, 9987)
    assert parse_reply(LOCK_ACQUIRE, -2) == (Status.BUSY, 0)
    assert parse_reply(LOCK_ACQUIRE, -1) == (Status.BUSY, -1)
    assert parse_reply(LOCK_ACQUIRE, [2, 9987]) == (Status.BUSY, 9987)
    with pytest.raises(WrongTypeError, match="'k'"):
        parse_reply(LOCK_ACQUIRE, [5, b"k"])
    with pytest.raises(ProtocolError, match="unknown status"):
        parse_reply(LOCK_ACQUIRE, [99, 0])
    with pytest.raises(ProtocolError, match="unexpected reply"):
        parse_reply(LOCK_ACQUIRE, b"OK")


def test_a_pipeline_keeps_a_refused_reply_but_not_an_interrupt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step's refused reply stands in the pipeline's replies; an interrupt
    raised while a reply is parsed (a signal handler's ``Exception``) is no
    reply of the server: it propagates, so the driver gives back what the
    pipeline may have taken."""
    assert isinstance(reply_or_error(LOCK_ACQUIRE, [5, b"k"]), WrongTypeError)
    assert isinstance(reply_or_error(LOCK_ACQUIRE, b"OK"), ProtocolError)
    assert reply_or_error(LOCK_ACQUIRE, 7) == (Status.OK, 7)

    class AlarmTimeout(Exception):
        pass

    def interrupted(script: object, raw: object) -> None:
        raise AlarmTimeout

    monkeypatch.setattr(tenure._protocol, "parse_reply", interrupted)
    with pytest.raises(AlarmTimeout):
        reply_or_error(LOCK_ACQUIRE, [1, 5])


def test_server_versions() -> None:
    assert parse_info({"redis_version": "6.2.14", "redis_mode": "standalone"}).version == (6, 2, 14)
    valkey = parse_info(
        {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "9.1.2"}
    )
    assert valkey.name == "valkey" and valkey.version == (9, 1, 2)
    cluster = {"server_name": "valkey", "valkey_version": "9.1.2", "server_mode": "cluster"}
    assert parse_info(cluster).mode == "cluster"  # Valkey 8+ says server_mode
    with pytest.raises(UnsupportedServer, match=r"redis 6\.0\.9"):
        parse_info({"redis_version": "6.0.9"})
    with pytest.raises(UnsupportedServer, match=r"valkey 7\.0"):
        parse_info({"redis_version": "7.0.0", "server_name": "valkey", "valkey_version": "7.0"})


def test_every_script_has_a_header_contract() -> None:
    for spec in ALL:
        head = spec.source.decode().splitlines()[0]
        assert head.startswith(f"-- {spec.name}.lua:"), spec.name
        assert b"-- Returns" in spec.source and b"KEYS[1]" in spec.source
        assert b"--@include" not in spec.source  # the helpers were put in place
        assert b"--@acl" not in spec.source  # and the ACL guard's command list


def test_every_script_file_is_loaded() -> None:
    # A .lua file without its _load line would never be sent (nor checked above).
    folder = Path(tenure._scripts.__file__).parent
    files = {p.stem for p in folder.glob("*.lua") if not p.name.startswith("_")}
    assert files == {spec.name for spec in ALL}


def test_scripts_reply_with_the_status_names_of_the_enum() -> None:
    """Every script has a Lua local per ``Status`` (from ``_common.lua``'s marker,
    so the numbers can't drift from the enum), and replies by name."""
    locals_line = "local " + ", ".join(s.name for s in Status)
    locals_line += " = " + ", ".join(str(int(s)) for s in Status)
    for spec in ALL:
        text = spec.source.decode()
        assert text.count(locals_line + "\n") == 1, spec.name
        code = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
        bare = [line for line in code if re.search(r"return \{\s*\d", line)]
        assert not bare, (spec.name, bare)
        assert "--@status" not in text
    # a script that forgets _common.lua would have no names: it is refused at load
    with pytest.raises(ValueError, match=r"must include _common\.lua"):
        build("bare", lambda name: b"-- bare.lua\nreturn {OK, 0}\n")


def test_a_scripts_first_lines_make_only_the_helpers_they_use() -> None:
    """Above a script's ``--@later`` line, the helpers its first lines do not
    use (themselves or through the helpers they use) are not defined: they are
    defined at that line, before the rest that may use them."""
    parts = {
        "quick.lua": b"-- quick.lua\n--@include _common.lua\n"
        b"if ARGV[1] == '' then return twice(1) end\n--@later\n"
        b"if ARGV[1] == 'x' then return 'other' end\n--@later\n"
        b"return {OK, other(2) + twice(3)}\n",
        "_common.lua": b"--@status\n"
        b"local function once(n)\n  return n\nend\n"
        b"local function twice(n)\n  return once(n) * 2\nend\n"
        b"local function other(n)\n  return once(n) + 1\nend\n",
    }
    text = build("quick", parts.__getitem__).source.decode()
    quick, second = text.index("if ARGV[1] == ''"), text.index("if ARGV[1] == 'x'")
    later = text.index("local function other")  # (a name in a string is no use)
    assert text.index("local function once") < text.index("local function twice") < quick
    assert quick < second < later < text.index("return {OK, other(2)")
    for spec in ALL:  # every script built so still defines each helper once
        text = spec.source.decode()
        names = re.findall(r"^local function (\w+)", text, re.MULTILINE)
        assert len(names) == len(set(names)), spec.name
        assert "--@later" not in text, spec.name


def test_plans_do_no_io() -> None:
    """The plans package imports nothing that does I/O, sleeps or reads the clock."""
    import ast
    from pathlib import Path

    import tenure._plans

    forbidden = {"redis", "asyncio", "threading", "time", "socket", "os", "subprocess"}
    for path in Path(tenure._plans.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in forbidden, f"{path.name} imports {name}"


class _AlarmTimeout(Exception):
    """What a ``signal.alarm`` handler commonly raises: an ordinary ``Exception``."""


@pytest.mark.parametrize(
    ("exc", "interrupt"),
    [
        (_AlarmTimeout(), True),
        (KeyboardInterrupt(), True),
        (asyncio.CancelledError(), True),
        (RuntimeError("from a handler"), True),
        (AlreadyHeldError("x"), False),
        (WrongTypeError("k"), False),
        (redis.exceptions.ConnectionError(), False),
        (redis.exceptions.ResponseError("ERR"), False),
        (redis.exceptions.SlotNotCoveredError(), False),
        (valkey.exceptions.ValkeyClusterException(), False),
        (valkey.exceptions.TimeoutError(), False),
        (ConnectionResetError(), False),
        (TimeoutError(), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_an_interrupt_is_anything_a_call_to_redis_does_not_raise(
    exc: BaseException, interrupt: bool
) -> None:
    """What best-effort calls may swallow (a failed call: tenure's errors, the
    client library's, the socket's) and what they never do (an interrupt, of
    any exception class)."""
    from tenure._protocol import failed_calls_suppressed, is_interrupt

    assert is_interrupt(exc) is interrupt
    if isinstance(exc, Exception):
        if interrupt:
            with pytest.raises(type(exc)), failed_calls_suppressed():
                raise exc
        else:
            with failed_calls_suppressed():
                raise exc
