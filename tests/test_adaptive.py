"""Adaptive ttl: the lease length follows recent hold durations of the name."""

from __future__ import annotations

import math
import time

import pytest
import redis

from tenure import AdaptiveTTL, InvalidArgument, Lock, LockLostError, RLock


def test_policy_uses_a_multiple_of_the_recent_p99_within_bounds() -> None:
    policy = AdaptiveTTL(floor=1.0, factor=3.0, window=10, ceiling=20.0)
    key = "unit:adaptive:1"
    assert policy.next_ttl(key) == 1.0  # nothing recorded: the floor
    for seconds in [0.1] * 9 + [2.0]:
        policy.record(key, seconds)
    assert policy.next_ttl(key) == pytest.approx(6.0)  # 3 x p99 (the 2 s hold)
    for _ in range(10):  # the window slides: the long hold drops out
        policy.record(key, 0.1)
    assert policy.next_ttl(key) == 1.0  # 3 x 0.1 is below the floor
    policy.record(key, 100.0)
    assert policy.next_ttl(key) == 20.0  # the ceiling


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"floor": 0}, "floor"),
        ({"floor": 5, "ceiling": 1}, "ceiling"),
        ({"factor": 0.5}, "factor"),
        ({"factor": float("nan")}, "factor"),
        ({"window": 0}, "window"),
        ({"window": 2.5}, "window"),
    ],
)
def test_bad_policy(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        AdaptiveTTL(**kwargs)  # type: ignore[arg-type]


def test_lock_lease_follows_recent_holds(r: redis.Redis) -> None:
    lock = Lock(r, "adaptive", ttl=AdaptiveTTL(floor=0.2, factor=4.0, window=5))
    assert lock.ttl == 0.2
    for _ in range(3):
        with lock:
            time.sleep(0.1)
    # holds of ~0.1 s: the next lease is ~4 x 0.1 s, and Redis has it
    assert 0.4 <= lock.ttl < 0.6
    lease = lock.acquire()
    assert lease is not None and lease.ttl == pytest.approx(lock.ttl, abs=0.05)
    assert 350 < r.pttl("tenure:{adaptive}") <= math.ceil(lease.ttl * 1000)
    lease.release()


def test_a_hold_that_outlived_its_lease_grows_the_next_one(r: redis.Redis) -> None:
    lock = Lock(r, "overran", ttl=AdaptiveTTL(floor=0.2, factor=2.0))
    lease = lock.acquire()
    assert lease is not None and lease.ttl == 0.2
    time.sleep(0.35)  # longer than the lease: lost
    with pytest.raises(LockLostError):
        lease.release()
    assert lock.ttl >= 0.7  # 2 x the 0.35 s hold


def test_rlock_records_the_whole_hold(r: redis.Redis) -> None:
    lock = RLock(r, "radaptive", ttl=AdaptiveTTL(floor=0.5, factor=2.0))
    with lock:
        time.sleep(0.3)
        with lock:  # a re-entry is part of the hold
            pass
    assert 0.6 <= lock.ttl < 0.8  # 2 x the 0.3 s hold, from first acquire to last release


def test_history_keeps_only_the_most_recently_used_names() -> None:
    from tenure import _adaptive

    policy = AdaptiveTTL(floor=1.0, factor=2.0, window=5)
    policy.record("unit:adaptive:kept", 4.0)
    for i in range(_adaptive.MAX_NAMES * 3):
        policy.record(f"unit:adaptive:many:{i}", 2.0)
        if i % 100 == 0:
            assert policy.next_ttl("unit:adaptive:kept") == 8.0  # used: kept
    assert len(_adaptive._history) == _adaptive.MAX_NAMES
    assert policy.next_ttl("unit:adaptive:many:0") == 1.0  # least recently used: forgotten
    assert policy.next_ttl(f"unit:adaptive:many:{_adaptive.MAX_NAMES * 3 - 1}") == 4.0
