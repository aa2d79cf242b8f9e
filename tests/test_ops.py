"""Pure tests of the operator commands' logic: key grouping and reading a lock with
canned replies. No Redis."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from tenure._errors import InvalidArgument
from tenure._ops import (
    LockView,
    Waiter,
    describe,
    glob_escape,
    group_keys,
    ls_table,
    parse_key,
    parse_waiters,
    read_lock,
    target,
    targets,
)
from tenure._protocol import Command, Eval, Status
from tenure._scripts import LOCK_INSPECT, RLOCK_INSPECT

# --- keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        ("tenure:{orders:42}", ("Lock", "orders:42", "lock")),
        ("tenure:{orders:42}:fence", ("Lock", "orders:42", "fence")),
        ("tenure:{orders:42}:waiters", ("Lock", "orders:42", "waiters")),
        ("tenure:rlock:{jobs}", ("RLock", "jobs", "lock")),
        ("tenure:rlock:{jobs}:fence", ("RLock", "jobs", "fence")),
        ("tenure:rlock:{jobs}:waiters", ("RLock", "jobs", "waiters")),
        # A name may hold braces and colons: the suffix decides.
        ("tenure:{a}:fence}", ("Lock", "a}:fence", "lock")),
        ("tenure:{a}:fence}:fence", ("Lock", "a}:fence", "fence")),
        ("tenure:{}", None),
        ("tenure:{x}:other", None),
        ("tenure:plain", None),
        ("tenure:sem:{x}", None),
        ("other:{x}", None),
    ],
)
def test_parse_key(key: str, parsed: tuple[str, str, str] | None) -> None:
    assert parse_key(key, "tenure:") == parsed


def test_group_keys_groups_siblings_and_filters_by_name() -> None:
    keys: list[str | bytes] = [
        b"tenure:{orders:1}",
        b"tenure:{orders:1}:fence",
        b"tenure:{orders:1}:waiters",
        b"tenure:{orders:2}:fence",
        b"tenure:rlock:{orders:1}",
        b"tenure:{jobs}",
        b"tenure:\xff{bad}",
        "tenure:unrelated",
    ]
    groups = group_keys(keys, prefix="tenure:", pattern="orders:*")
    assert [(g.kind, g.name, sorted(g.roles)) for g in groups] == [
        ("Lock", "orders:1", ["fence", "lock", "waiters"]),
        ("RLock", "orders:1", ["lock"]),
        ("Lock", "orders:2", ["fence"]),
    ]
    assert [g.name for g in group_keys(keys, prefix="tenure:")] == [
        "jobs",
        "orders:1",
        "orders:1",
        "orders:2",
    ]
    assert group_keys(keys, prefix="tenure:", pattern="ORDERS:*") == []


def test_glob_escape() -> None:
    assert glob_escape("app[1]*?\\:") == "app\\[1\\]\\*\\?\\\\:"
    assert glob_escape("tenure:") == "tenure:"


def test_targets() -> None:
    both = targets("x", key=None, prefix="p:")
    assert [(t.kind, t.keys.lock) for t in both] == [("Lock", "p:{x}"), ("RLock", "p:rlock:{x}")]
    [exact] = targets(None, key="k", prefix="p:")
    assert (exact.kind, exact.keys.lock, exact.keys.fence) == ("Lock", "k", "{k}:fence")
    with pytest.raises(InvalidArgument):
        target("RLock", "x", key="k", prefix="p:")
    with pytest.raises(InvalidArgument):
        targets(None, key=None, prefix="p:")


# --- reading a lock ------------------------------------------------------------------------


def drive(plan: Generator[Any, Any, Any], replies: list[Any]) -> tuple[list[Any], Any]:
    """Run ``plan`` on canned replies: (the steps it yielded, its result)."""
    steps = [plan.send(None)]
    for reply in replies:
        try:
            steps.append(plan.send(reply))
        except StopIteration as stop:
            return steps, stop.value
    raise AssertionError(f"the plan wants more replies after {steps}")


def test_parse_waiters_flat_or_paired() -> None:
    now = (1000, 500_000)  # 1000.5 s
    flat = [b"hub-1|10000|own.1:tok", b"999500000", b"garbage", b"1000000000"]
    paired = [[b"hub-1|10000|own.1:tok", 999_500_000.0], [b"garbage", 1_000_000_000.0]]
    for raw in (flat, paired):
        assert parse_waiters(raw, now) == (
            Waiter("hub-1", "own.1:tok", 10.0, 1.0),
            Waiter("", "garbage", None, 0.5),
        )
    assert parse_waiters([], now) == ()


def test_read_lock_with_waiters() -> None:
    [lock, _] = targets("orders", key=None, prefix="tenure:")
    steps, view = drive(
        read_lock(lock, waiting=5),
        [
            (Status.OK, ["own.1:tok", 9500, 77, 1]),
            [[b"hub|3000|own.2:tok", 1_000_000.0]],
            (3, 0),
        ],
    )
    assert isinstance(steps[0], Eval) and steps[0].script is LOCK_INSPECT
    assert steps[1] == Command(("ZRANGE", "tenure:{orders}:waiters", "0", "4", "WITHSCORES"))
    assert steps[2] == Command(("TIME",))
    assert view == LockView(
        "Lock",
        "orders",
        "tenure:{orders}",
        "own.1:tok",
        1,
        9500,
        77,
        1,
        (Waiter("hub", "own.2:tok", 3.0, 2.0),),
    )
    assert view.held and view.exists and view.ttl == 9.5
    assert view.to_json()["waiting"] == [
        {"waiter": "hub", "holder": "own.2:tok", "lease": 3.0, "queued_for": 2.0}
    ]


def test_read_an_rlock_without_waiters_is_one_call() -> None:
    [_, rlock] = targets("jobs", key=None, prefix="tenure:")
    steps, view = drive(read_lock(rlock, waiting=5), [(Status.OK, ["own.1", 2, -1, 5, 0, 0])])
    assert len(steps) == 1 and steps[0].script is RLOCK_INSPECT
    assert (view.kind, view.holder, view.count, view.ttl) == ("RLock", "own.1", 2, None)
    assert view.to_json(waiting=False) == {
        "kind": "RLock",
        "name": "jobs",
        "key": "tenure:rlock:{jobs}",
        "held": True,
        "holder": "own.1",
        "count": 2,
        "ttl": None,
        "fence": 5,
        "waiters": 0,
    }


def test_a_lock_exists_while_any_key_does() -> None:
    free = LockView("Lock", "n", "k", "", 0, -2, 0, 0)
    assert not free.exists and not free.held and free.ttl is None
    assert LockView("Lock", "n", "k", "", 0, -2, 12, 0).exists  # its fence key is left
    assert LockView("Lock", "n", "k", "", 0, -2, 0, 1).exists  # a waiter is queued


def test_text_output() -> None:
    held = LockView("RLock", "jobs", "tenure:rlock:{jobs}", "own.1", 2, 1500, 9, 0)
    free = LockView("Lock", "orders", "tenure:{orders}", "", 0, -2, 8, 0)
    assert describe(held)[:3] == [
        "RLock 'jobs' (key tenure:rlock:{jobs})",
        "  holder   own.1 (hold count 2)",
        "  ttl      1.50s",
    ]
    assert "  holder   free" in describe(free)
    rows = [line.split() for line in ls_table([held, free])]
    assert rows == [
        ["KIND", "NAME", "HOLDER", "TTL", "FENCE", "WAITERS"],
        ["RLock", "jobs", "own.1", "x2", "1.50s", "9", "0"],
        ["Lock", "orders", "free", "-", "8", "0"],
    ]
