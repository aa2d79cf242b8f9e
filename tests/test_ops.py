"""Pure tests of the operator commands' logic: key grouping, reading a lock with
canned replies, and every doctor rule on canned INFO / CONFIG replies. No Redis."""

from __future__ import annotations

import re
import sys
from collections.abc import Generator
from importlib.resources import files
from typing import Any

import pytest

from tenure._doctor import (
    NEEDED_COMMANDS,
    AclCheck,
    CantCheck,
    Facts,
    Level,
    check_acl,
    check_cluster,
    check_eviction,
    check_persistence,
    check_replication,
    check_version,
    diagnose,
    dryrun_args,
    identify,
    print_report,
    report_lines,
)
from tenure._errors import InvalidArgument, WrongTypeError
from tenure._info import ReadWriteHolder, ReadWriteInfo, SemaphoreHolder, SemaphoreInfo
from tenure._keys import LatchKeys, LockKeys
from tenure._ops import (
    ForcedRelease,
    Hold,
    LockView,
    Target,
    Waiter,
    glob_escape,
    group_keys,
    holds_of,
    parse_key,
    read_lock,
    target,
    targets,
)
from tenure._plans.kind import parse_waiters
from tenure._plans.kinds import by_name, exists
from tenure._plans.rwlock import hold_values
from tenure._protocol import Command, Eval, Status
from tenure._scripts import (
    FAIR_INSPECT,
    LATCH_INSPECT,
    LOCK_INSPECT,
    RLOCK_INSPECT,
    RWLOCK_INSPECT,
    SEMAPHORE_INSPECT,
)
from tenure._views import (
    describe,
    describe_release,
    holder_summary,
    ls_table,
    to_json,
    waiter_json,
)

# --- keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        ("tenure:{orders:42}", ("Lock", "orders:42", "lock")),
        ("tenure:{orders:42}:fence", ("Lock", "orders:42", "fence")),
        ("tenure:{orders:42}:waiters", ("Lock", "orders:42", "waiters")),
        ("tenure:{jobs}:rlock", ("RLock", "jobs", "lock")),
        ("tenure:{jobs}:rlock:fence", ("RLock", "jobs", "fence")),
        ("tenure:{jobs}:rlock:waiters", ("RLock", "jobs", "waiters")),
        # A name's braces and % are escaped; colons are kept: the last brace decides.
        ("tenure:{a%7D:fence}", ("Lock", "a}:fence", "lock")),
        ("tenure:{a%7D:fence}:fence", ("Lock", "a}:fence", "fence")),
        ("tenure:{a%257B}:rlock", ("RLock", "a%7B", "lock")),
        ("tenure:{a}:fence}", None),
        ("tenure:{a%7b}", None),
        # Another prefix's keys and exact-key locks' keys are not under "tenure:".
        ("tenure:rlock:{jobs}", None),
        ("{jobs}:key:fence", None),
        # Every other kind, its main key and its siblings.
        ("tenure:{q}:fair", ("FairLock", "q", "lock")),
        ("tenure:{q}:fair:deadlines", ("FairLock", "q", "deadlines")),
        ("tenure:{q}:fair:released", ("FairLock", "q", "released")),
        ("tenure:{doc}:rwlock", ("ReadWriteLock", "doc", "lock")),
        ("tenure:{doc}:rwlock:holds", ("ReadWriteLock", "doc", "holds")),
        ("tenure:{doc}:rwlock:delay", ("ReadWriteLock", "doc", "delay")),
        ("tenure:{doc}:rwlock:op:3f2a.7", ("ReadWriteLock", "doc", "op")),
        ("tenure:{doc}:rwlock:op:", None),
        ("tenure:{doc}:rwlock:released", None),
        ("tenure:{gpus}:semaphore", ("Semaphore", "gpus", "lock")),
        ("tenure:{gpus}:semaphore:permits", ("Semaphore", "gpus", "permits")),
        ("tenure:{gpus}:semaphore:released", ("Semaphore", "gpus", "released")),
        ("tenure:{gpus}:semaphore:released:3f2a", ("Semaphore", "gpus", "released")),
        ("tenure:{gpus}:semaphore:delay", ("Semaphore", "gpus", "delay")),
        ("tenure:{gpus}:semaphore:holds", None),
        ("tenure:{batch:7}:latch", ("CountDownLatch", "batch:7", "lock")),
        ("tenure:{batch:7}:latch:opened", ("CountDownLatch", "batch:7", "opened")),
        ("tenure:{batch:7}:latch:by", ("CountDownLatch", "batch:7", "by")),
        ("tenure:{batch:7}:latch:fence", None),
        # A Lock may be named like another kind's namespace: the brace decides.
        ("tenure:{semaphore:x}", ("Lock", "semaphore:x", "lock")),
        ("tenure:{latch:x}:fence", ("Lock", "latch:x", "fence")),
        ("tenure:{}", None),
        ("tenure:{}:fair", None),
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
        b"tenure:{orders:1}:rlock",
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


def test_group_keys_puts_every_kinds_siblings_under_it() -> None:
    keys = [
        "tenure:{gpus}:semaphore",
        "tenure:{gpus}:semaphore:permits",
        "tenure:{gpus}:semaphore:fence",
        "tenure:{gpus}:semaphore:waiters",
        "tenure:{gpus}:semaphore:released",
        "tenure:{gpus}:semaphore:released:3f2a",
        "tenure:{doc}:rwlock:holds",
        "tenure:{doc}:rwlock",
        "tenure:{doc}:rwlock:op:a.1",
        "tenure:{doc}:rwlock:op:b.2",
        "tenure:{readonly}:rwlock:op:a.1",
        "tenure:{q}:fair:deadlines",
        "tenure:{q}:fair:waiters",
        "tenure:{q}:fair",
        "tenure:{batch}:latch:opened",
        "tenure:{gpus}:fence",
    ]
    groups = group_keys(keys, prefix="tenure:")
    assert [(g.kind, g.name, sorted(g.roles)) for g in groups] == [
        ("CountDownLatch", "batch", ["opened"]),  # open: only its opening number is left
        ("ReadWriteLock", "doc", ["holds", "lock", "op"]),
        ("Lock", "gpus", ["fence"]),
        ("Semaphore", "gpus", ["fence", "lock", "permits", "released", "waiters"]),
        ("FairLock", "q", ["deadlines", "lock", "waiters"]),
        ("ReadWriteLock", "readonly", ["op"]),
    ]


def test_glob_escape() -> None:
    assert glob_escape("app[1]*?\\:") == "app\\[1\\]\\*\\?\\\\:"
    assert glob_escape("tenure:") == "tenure:"


def main_key(t: Target) -> str:
    return t.keys.count if isinstance(t.keys, LatchKeys) else t.keys.lock


def test_targets() -> None:
    every = targets("x", key=None, prefix="p:")
    assert [(t.kind, main_key(t)) for t in every] == [
        ("Lock", "p:{x}"),
        ("RLock", "p:{x}:rlock"),
        ("FairLock", "p:{x}:fair"),
        ("ReadWriteLock", "p:{x}:rwlock"),
        ("Semaphore", "p:{x}:semaphore"),
        ("CountDownLatch", "p:{x}:latch"),
        ("Election", "p:{x}:election"),
    ]
    [exact] = targets(None, key="k", prefix="p:")
    assert isinstance(exact.keys, LockKeys)
    assert (exact.kind, exact.keys.lock, exact.keys.fence) == ("Lock", "k", "{k}:key:fence")
    for kind in ("RLock", "FairLock", "ReadWriteLock", "Semaphore", "CountDownLatch"):
        with pytest.raises(InvalidArgument, match="only a Lock has an exact key"):
            target(kind, "x", key="k", prefix="p:")
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
    lock = target("Lock", "orders", prefix="tenure:")
    steps, view = drive(
        read_lock(lock, waiting=5),
        [
            (Status.OK, ["own.1:tok", 9500, 77, 1]),
            0,
            [[b"hub|3000|own.2:tok", 1_000_000.0]],
            (3, 0),
        ],
    )
    assert isinstance(steps[0], Eval) and steps[0].script is LOCK_INSPECT
    assert steps[1] == Command(("ZCARD", "tenure:{orders}:quorum"))
    assert steps[2] == Command(("ZRANGE", "tenure:{orders}:waiters", "0", "4", "WITHSCORES"))
    assert steps[3] == Command(("TIME",))
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
    assert view.held and exists(view) and view.ttl == 9.5
    assert to_json(view)["waiting"] == [
        {"waiter": "hub", "holder": "own.2:tok", "label": None, "lease": 3.0, "queued_for": 2.0}
    ]


def test_read_lock_counts_and_lists_a_redlocks_waiters() -> None:
    # A Redlock holds an ordinary Lock on each master; its waiters queue in the
    # name's quorum key, which the operator tools count and list after the
    # Lock's own waiters.
    lock = target("Lock", "orders", prefix="tenure:")
    steps, view = drive(
        read_lock(lock, waiting=5),
        [
            (Status.OK, ["rl:tok", 9500, 77, 0]),
            2,
            [[b"hub|1000|own.3:tok", 1_000_000.0], [b"hub2|1000|own.4:tok", 1_500_000.0]],
            (3, 0),
        ],
    )
    assert steps[1] == Command(("ZCARD", "tenure:{orders}:quorum"))
    assert steps[2] == Command(("ZRANGE", "tenure:{orders}:quorum", "0", "4", "WITHSCORES"))
    assert view.waiters == 2
    assert [w.holder for w in view.waiting] == ["own.3:tok", "own.4:tok"]


def test_read_lock_refuses_a_quorum_key_of_another_type() -> None:
    plan = read_lock(target("Lock", "orders", prefix="tenure:"), waiting=5)
    assert isinstance(next(plan), Eval)
    assert plan.send((Status.OK, ["", -2, 0, 0])) == Command(("ZCARD", "tenure:{orders}:quorum"))
    wrong = Exception("WRONGTYPE Operation against a key holding the wrong kind of value")
    with pytest.raises(WrongTypeError, match="quorum"):
        plan.throw(wrong)


def test_read_an_rlock_without_waiters_is_one_call() -> None:
    rlock = target("RLock", "jobs", prefix="tenure:")
    steps, view = drive(read_lock(rlock, waiting=5), [(Status.OK, ["own.1", 2, -1, 5, 0, 0])])
    assert len(steps) == 1 and steps[0].script is RLOCK_INSPECT
    assert (view.kind, view.holder, view.count, view.ttl) == ("RLock", "own.1", 2, None)
    assert to_json(view, waiting=False) == {
        "kind": "RLock",
        "name": "jobs",
        "key": "tenure:{jobs}:rlock",
        "held": True,
        "holder": "own.1",
        "label": None,
        "count": 2,
        "ttl": None,
        "fence": 5,
        "waiters": 0,
    }


def test_a_lock_exists_while_any_key_does() -> None:
    free = LockView("Lock", "n", "k", "", 0, -2, 0, 0)
    assert not exists(free) and not free.held and free.ttl is None
    assert exists(LockView("Lock", "n", "k", "", 0, -2, 12, 0))  # its fence key is left
    assert exists(LockView("Lock", "n", "k", "", 0, -2, 0, 1))  # a waiter is queued


def test_text_output() -> None:
    held = LockView("RLock", "jobs", "tenure:{jobs}:rlock", "own.1", 2, 1500, 9, 0)
    free = LockView("Lock", "orders", "tenure:{orders}", "", 0, -2, 8, 0)
    assert describe(held)[:3] == [
        "RLock 'jobs' (key tenure:{jobs}:rlock)",
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


def refine_waiter(kind: str, waiter: Waiter) -> Waiter:
    """``waiter`` as its kind's inspect reads it (a Semaphore's permits, a
    ReadWriteLock's mode split out of the member's holder)."""
    return by_name(kind).refine_waiter(waiter)


def test_refine_waiter_splits_what_a_member_adds() -> None:
    sem = refine_waiter("Semaphore", Waiter("hub", "2|own.2:tok", 5.0, 1.0))
    assert (sem.holder, sem.permits, sem.mode) == ("own.2:tok", 2, None)
    rw = refine_waiter("ReadWriteLock", Waiter("hub", "w:ab12.3:9f00", 5.0, 1.0))
    assert (rw.holder, rw.mode, rw.permits) == ("ab12.3", "write", None)
    assert refine_waiter("ReadWriteLock", Waiter("h", "r:ab12.3:", 1.0, 0.0)).mode == "read"
    odd = Waiter("", "garbage", None, 0.5)
    assert refine_waiter("Semaphore", odd) == odd
    assert refine_waiter("ReadWriteLock", odd) == odd
    assert refine_waiter("Lock", Waiter("h", "2|x", 1.0, 0.0)).permits is None
    assert waiter_json(sem) == {
        "waiter": "hub",
        "holder": "own.2:tok",
        "label": None,
        "lease": 5.0,
        "queued_for": 1.0,
        "permits": 2,
    }


def test_read_a_semaphore_with_a_waiter() -> None:
    sem = target("Semaphore", "gpus", prefix="tenure:")
    flat = [b"own.1:a#1", 9000, b"own.1:a#2", 9000, b"own.1:b#1", 20000]
    steps, view = drive(
        read_lock(sem, waiting=5),
        [
            (Status.OK, [3, 1, flat]),
            b"41",
            [[b"hub|4000|2|own.2:c", 1_000_000.0]],
            (3, 0),
        ],
    )
    assert isinstance(steps[0], Eval) and steps[0].script is SEMAPHORE_INSPECT
    assert steps[1] == Command(("GET", "tenure:{gpus}:semaphore:fence"))
    assert steps[2] == Command(
        ("ZRANGE", "tenure:{gpus}:semaphore:waiters", "0", "4", "WITHSCORES")
    )
    assert (view.kind, view.key, view.holder, view.count) == (
        "Semaphore",
        "tenure:{gpus}:semaphore",
        "own.1:a",
        2,
    )
    assert view.ttl == 20.0 and view.fence == 41 and view.waiters == 1
    data = to_json(view)
    assert data["permits"] == 3 and data["available"] == 0
    assert data["holders"] == [
        {"token": "own.1:a", "permits": 2, "ttl": 9.0, "label": None},
        {"token": "own.1:b", "permits": 1, "ttl": 20.0, "label": None},
    ]
    assert data["waiting"] == [
        {
            "waiter": "hub",
            "holder": "own.2:c",
            "label": None,
            "lease": 4.0,
            "queued_for": 2.0,
            "permits": 2,
        }
    ]
    assert holder_summary(view) == "own.1:a x2 +1 more (3/3)"
    assert [h.holder for h in holds_of(view)] == ["own.1:a", "own.1:b"]
    text = describe(view)
    assert "  permits  3 (0 available)" in text
    assert "    own.1:b (1 permit, ttl 20.00s)" in text
    assert "    1. own.2:c (2 permits, lease 4.00s, queued 2.00s ago, waiter hub)" in text


def test_a_free_semaphore_and_one_with_no_count_stored() -> None:
    sem = target("Semaphore", "gpus", prefix="tenure:")
    _, free = drive(read_lock(sem, waiting=5), [(Status.OK, [4, 0, []]), b"7"])
    assert exists(free) and not free.held and free.ttl is None
    assert holder_summary(free) == "free (0/4)"
    assert to_json(free, waiting=False)["holders"] == []
    _, gone = drive(read_lock(sem), [(Status.OK, [0, 0, []]), None])
    assert not exists(gone)
    data = to_json(gone)
    assert data["permits"] is None and data["available"] is None and data["fence"] is None


def test_read_a_read_write_lock() -> None:
    rw = target("ReadWriteLock", "doc", prefix="tenure:")
    reply = ["read", "12", "2", "1", "0", "0"]
    reply += ["a.1", "r", "2", "5000", "12", "b.2", "r", "1", "8000", "12"]
    steps, view = drive(
        read_lock(rw, waiting=5),
        [
            (Status.OK, reply),
            [[b"hub|3000|w:c.3:op1", 1_000_000.0], [b"hub2|3000|r:d.4:op2", 1_500_000.0]],
            (3, 0),
        ],
    )
    assert isinstance(steps[0], Eval) and steps[0].script is RWLOCK_INSPECT
    assert (view.holder, view.count, view.ttl, view.fence, view.waiters) == ("a.1", 2, 8.0, 12, 2)
    data = to_json(view)
    assert data["mode"] == "read" and data["waiting_writers"] == 1
    assert data["holders"] == [
        {"owner": "a.1", "mode": "read", "count": 2, "ttl": 5.0, "fence": 12, "label": None},
        {"owner": "b.2", "mode": "read", "count": 1, "ttl": 8.0, "fence": 12, "label": None},
    ]
    assert [(w["holder"], w["mode"]) for w in data["waiting"]] == [
        ("c.3", "write"),
        ("d.4", "read"),
    ]
    assert holder_summary(view) == "a.1 x2 (read) +1 more"
    text = describe(view)
    assert "  mode     read" in text and "  waiters  2 (1 writer)" in text
    assert "    1. write c.3 (lease 3.00s, queued 2.00s ago, waiter hub)" in text


def test_a_write_hold_comes_first() -> None:
    rw = target("ReadWriteLock", "doc", prefix="tenure:")
    reply = ["write", "13", "0", "0", "0", "0"]
    reply += ["a.1", "r", "1", "5000", "13", "a.1", "w", "1", "4000", "13"]
    _, view = drive(read_lock(rw, waiting=5), [(Status.OK, reply)])
    assert (view.holder, view.ttl) == ("a.1", 5.0)
    assert [(h.mode, h.ttl) for h in holds_of(view)] == [("write", 4.0), ("read", 5.0)]
    assert holder_summary(view) == "a.1 (write) +1 more"
    _, free = drive(read_lock(rw), [(Status.OK, ["", "13", "0", "0", "0", "0"])])
    assert exists(free) and not free.held and holder_summary(free) == "free"
    assert to_json(free)["mode"] is None and to_json(free)["holders"] == []


def test_read_a_fair_lock_and_its_queue() -> None:
    fair = target("FairLock", "q", prefix="tenure:")
    reply = ["own.1:t1", "9000", "55", "2", "w1|3000|own.2:t2", "4000", "w2|5000|own.3:t3", "4500"]
    steps, view = drive(read_lock(fair, waiting=5), [(Status.OK, reply)])
    assert len(steps) == 1 and steps[0].script is FAIR_INSPECT
    assert steps[0].args == (5,)
    assert (view.kind, view.key, view.holder, view.count) == (
        "FairLock",
        "tenure:{q}:fair",
        "own.1:t1",
        1,
    )
    assert view.ttl == 9.0 and view.fence == 55 and view.waiters == 2
    assert to_json(view)["waiting"][0] == {
        "waiter": "w1",
        "holder": "own.2:t2",
        "label": None,
        "lease": 3.0,
        "queued_for": None,
        "deadline": 4.0,
    }
    assert "    2. own.3:t3 (lease 5.00s, dropped in 4.50s unless it calls again, waiter w2)" in (
        describe(view)
    )
    _, free = drive(read_lock(fair), [(Status.OK, ["", "-2", "55", "0"])])
    assert exists(free) and not free.held and free.ttl is None and free.count == 0


def test_read_a_latch() -> None:
    latch = target("CountDownLatch", "batch", prefix="tenure:")
    steps, closed = drive(read_lock(latch, waiting=5), [(Status.OK, [3, 0, ""])])
    assert len(steps) == 1 and steps[0].script is LATCH_INSPECT
    assert exists(closed) and not closed.held and holder_summary(closed) == "count 3"
    assert to_json(closed) == {
        "kind": "CountDownLatch",
        "name": "batch",
        "key": "tenure:{batch}:latch",
        "held": False,
        "holder": None,
        "label": None,
        "count": 3,
        "ttl": None,
        "fence": None,
        "waiters": None,
        "open": False,
        "opened": None,
        "waiting": [],
    }
    _, opened = drive(read_lock(latch), [(Status.OK, [0, 1754300000000001, ""])])
    assert exists(opened) and holder_summary(opened) == "open"
    assert to_json(opened)["open"] is True and to_json(opened)["opened"] == 1754300000000001
    assert describe(opened)[1:] == ["  count    0 (open)", "  opened   1754300000000001"]
    _, nothing = drive(read_lock(latch), [(Status.OK, [0, 0, ""])])
    assert not exists(nothing)
    [row] = ls_table([opened])[1:]
    assert row.split() == ["CountDownLatch", "batch", "open", "-", "-", "-"]


def test_read_a_latch_and_who_set_it() -> None:
    latch = target("CountDownLatch", "batch", prefix="tenure:")
    by = "web-3+pid+4711+(celery+worker)"
    steps, closed = drive(read_lock(latch), [(Status.OK, [2, 0, by.encode()])])
    assert steps[0].keys == (latch.keys.count, latch.keys.opened, latch.keys.by)  # type: ignore[union-attr]
    assert closed.label == "web-3 pid 4711 (celery worker)" and not closed.held
    assert holder_summary(closed) == "count 2, set by web-3 pid 4711 (celery worker)"
    assert describe(closed)[1:] == [
        "  count    2 (closed)",
        "  set by   web-3 pid 4711 (celery worker)",
        "  opened   -",
    ]
    out = to_json(closed)
    assert out["label"] == "web-3 pid 4711 (celery worker)" and out["holder"] is None
    [row] = ls_table([closed])[1:]
    assert "count 2, set by web-3 pid 4711 (celery worker)" in row
    # open: a by key left behind (an older tenure's count-down) names nobody
    _, opened = drive(read_lock(latch), [(Status.OK, [0, 7, by])])
    assert opened.label is None and to_json(opened)["label"] is None
    assert holder_summary(opened) == "open" and "set by" not in "".join(describe(opened))
    # set by an older tenure (no by key), or with label="": no label
    _, old = drive(read_lock(latch), [(Status.OK, [2, 0, ""])])
    assert old.label is None and holder_summary(old) == "count 2"
    assert describe(old)[1:] == ["  count    2 (closed)", "  opened   -"]


def test_hold_values_from_a_dict_or_a_flat_list() -> None:
    want = {"mode": "read", "r:a.1": "2|12|op1"}
    assert hold_values({b"mode": b"read", b"r:a.1": b"2|12|op1"}) == want
    assert hold_values([b"mode", b"read", b"r:a.1", b"2|12|op1"]) == want
    assert hold_values(None) == {}


def rw_view(*holders: ReadWriteHolder, mode: str | None = None, fence: int = 12) -> LockView:
    info = ReadWriteInfo("doc", mode, holders, 0, 0, fence)  # type: ignore[arg-type]
    first = holders[0] if holders else None
    return LockView(
        "ReadWriteLock",
        "doc",
        "tenure:{doc}:rwlock",
        first.owner if first else "",
        first.count if first else 0,
        5000 if first else -2,
        fence,
        0,
        detail=info,
    )


def test_describe_a_forced_release_of_a_read_write_lock() -> None:
    before = rw_view(
        ReadWriteHolder("a.1", "read", 2, 5.0, 12),
        ReadWriteHolder("b.2", "read", 1, 6.0, 12),
        mode="read",
    )
    after = rw_view(ReadWriteHolder("c.3", "write", 1, 10.0, 13), mode="write", fence=13)
    removed = holds_of(before)
    text = describe_release(ForcedRelease(before, after, removed[:1], removed[1:]))
    assert text == [
        "released ReadWriteLock 'doc' (key tenure:{doc}:rwlock)",
        "  removed  read hold of a.1 (hold count 2, fence 12, ttl left 5.00s)",
        "  gone     read hold of b.2 (hold count 1, fence 12, ttl left 6.00s): it ended first",
        "  fence    12",
        "  handed to a waiter: c.3 (write, fence 13)",
        "  now write-held by c.3 (fence 13)",
    ]
    free = rw_view()
    assert describe_release(ForcedRelease(before, free, removed))[-1] == (
        "  now free (nobody was waiting)"
    )
    assert describe_release(ForcedRelease(before, before, ())) == [
        "ReadWriteLock 'doc' (key tenure:{doc}:rwlock) changed hands before the release: "
        "nothing was removed; now read-held by 2 owners"
    ]


def test_describe_a_forced_release_of_a_semaphore() -> None:
    def sem(*holders: SemaphoreHolder) -> LockView:
        info = SemaphoreInfo("gpus", 2, 2 - sum(h.permits for h in holders), holders, 0)
        first = holders[0] if holders else None
        return LockView(
            "Semaphore",
            "gpus",
            "tenure:{gpus}:semaphore",
            first.token if first else "",
            first.permits if first else 0,
            9000 if first else -2,
            7,
            0,
            detail=info,
        )

    before = sem(SemaphoreHolder("t1", 1, 9.0), SemaphoreHolder("t2", 1, 9.5))
    after = sem(SemaphoreHolder("t2", 1, 9.4), SemaphoreHolder("t3", 1, 10.0))
    done = ForcedRelease(before, after, (Hold("t1", 1, 9.0, 0),))
    assert describe_release(done) == [
        "released Semaphore 'gpus' (key tenure:{gpus}:semaphore)",
        "  removed  lease t1 (1 permit, ttl left 9.00s)",
        "  handed to a waiter: t3 (1 permit)",
        "  now 2 of 2 permits held",
    ]


# --- doctor --------------------------------------------------------------------------------


def levels(findings: list[Any]) -> dict[str, Level]:
    return {f.check: f.level for f in findings}


def test_persistence_rules() -> None:
    off = check_persistence({"aof_enabled": 0}, "always")
    assert levels(off) == {"appendonly": Level.HAZARD}
    assert "granted twice" in off[0].message and "appendonly yes" in off[0].advice
    everysec = check_persistence({"aof_enabled": 1}, "everysec")
    assert levels(everysec) == {"appendfsync": Level.HAZARD}
    assert "everysec" in everysec[0].message
    assert levels(check_persistence({"aof_enabled": 1}, "always")) == {"appendonly": Level.OK}
    unknown = check_persistence({"aof_enabled": 1}, CantCheck("denied"))
    assert levels(unknown) == {"appendfsync": Level.NOTE}
    assert unknown[0].message == "can't check appendfsync: denied"
    assert levels(check_persistence(CantCheck("x"), "always")) == {"appendonly": Level.NOTE}


@pytest.mark.parametrize(
    ("maxmemory", "policy", "level"),
    [
        (0, "noeviction", Level.OK),
        (100, "noeviction", Level.OK),
        (0, "volatile-lru", Level.NOTE),
        (100, "volatile-lru", Level.HAZARD),
        (100, "volatile-ttl", Level.HAZARD),
        (100, "allkeys-lfu", Level.HAZARD),
        (100, "allkeys-random", Level.HAZARD),
    ],
)
def test_eviction_rule(maxmemory: int, policy: str, level: Level) -> None:
    finding = check_eviction({"maxmemory": maxmemory, "maxmemory_policy": policy})
    assert (finding.check, finding.level) == ("maxmemory-policy", level)
    if policy.startswith("allkeys"):
        assert "any key" in finding.message
    assert check_eviction(CantCheck("no")).level is Level.NOTE


def test_replication_rules() -> None:
    assert levels(check_replication({"role": "master", "connected_slaves": 0})) == {
        "replicas": Level.OK
    }
    healthy = {
        "role": "master",
        "connected_slaves": 2,
        "slave0": {"ip": "10.0.0.2", "port": 6379, "state": "online", "offset": 5, "lag": 0},
        "slave1": "ip=10.0.0.3,port=6380,state=online,offset=5,lag=1",  # unparsed form
    }
    [note] = check_replication(healthy)
    assert (note.check, note.level) == ("replicas", Level.NOTE)
    assert "10.0.0.2:6379 (online, lag 0s)" in note.message
    assert "10.0.0.3:6380 (online, lag 1s)" in note.message
    lagging = dict(healthy, slave1="ip=10.0.0.3,port=6380,state=online,offset=5,lag=7")
    syncing = dict(healthy, slave0={"ip": "10.0.0.2", "port": 6379, "state": "wait_bgsave"})
    for info, where in ((lagging, "10.0.0.3:6380"), (syncing, "10.0.0.2:6379")):
        found = check_replication(info)
        assert [(f.check, f.level) for f in found] == [
            ("replicas", Level.NOTE),
            ("replication-lag", Level.HAZARD),
        ]
        assert where in found[1].message
    replica = {"role": "slave", "master_host": "10.0.0.1", "master_port": 6379}
    [hazard] = check_replication(dict(replica, master_link_status="up"))
    assert (hazard.check, hazard.level) == ("replica", Level.HAZARD)
    assert "replica of 10.0.0.1:6379 (link up)" in hazard.message
    assert "10.0.0.1:6379" in hazard.advice


def test_cluster_rule() -> None:
    assert check_cluster({"cluster_enabled": 0}, None).level is Level.OK
    assert check_cluster({"cluster_enabled": 1}, {"cluster_state": "ok"}).level is Level.OK
    failing = check_cluster({"cluster_enabled": 1}, {"cluster_state": "fail"})
    assert failing.level is Level.HAZARD and "fail" in failing.message
    assert check_cluster({"cluster_enabled": 1}, CantCheck("renamed")).level is Level.NOTE


def test_acl_rule() -> None:
    [ok] = check_acl(AclCheck("app", {}))
    assert ok.level is Level.OK
    [denied] = check_acl(AclCheck("app", {"EVALSHA": "no permissions", "SCAN": "no"}))
    assert denied.level is Level.HAZARD
    assert "EVALSHA: no permissions" in denied.message and "SCAN" not in denied.message
    assert "ACL SETUSER app +evalsha" in denied.advice
    [cli_only] = check_acl(AclCheck("app", {"SCAN": "no"}))
    assert cli_only.level is Level.NOTE and "SCAN" in cli_only.message
    [skipped] = check_acl(CantCheck("this server has no ACL DRYRUN (it came in Redis 7.0)"))
    assert skipped.level is Level.NOTE and skipped.message.startswith("check skipped:")
    # min_replicas' commands: a note; a server without WAITAOF (Redis 7.0): nothing
    ok, replicas = check_acl(AclCheck("app", {"WAIT": "no permissions", "WAITAOF": "no"}))
    assert ok.level is Level.OK and replicas.level is Level.NOTE
    assert "WAIT / WAITAOF" in replicas.message and "min_replicas" in replicas.message
    [ok] = check_acl(AclCheck("app", {"WAITAOF": "Command 'waitaof' not found"}))
    assert ok.level is Level.OK


def test_version_and_identity() -> None:
    valkey = {"server_name": "valkey", "valkey_version": "9.1.2", "redis_version": "7.2.4"}
    assert check_version(dict(valkey, server_mode="standalone")).level is Level.OK
    old = check_version({"redis_version": "6.0.9", "redis_mode": "standalone"})
    assert old.level is Level.HAZARD and "6.0.9" in old.message
    assert (
        check_version({"redis_version": "7.0.15", "redis_mode": "sentinel"}).level is Level.HAZARD
    )
    assert str(identify(dict(valkey, server_mode="cluster"), {"role": "master"})) == (
        "valkey 9.1.2 (cluster)"
    )
    redis7 = {"redis_version": "7.0.15", "redis_mode": "standalone"}
    assert str(identify(redis7, {"role": "slave"})) == "redis 7.0.15 (replica)"
    assert identify(CantCheck("denied"), {}) is None


def safe_facts(**changes: Any) -> Facts:
    facts: dict[str, Any] = {
        "server": {"redis_version": "7.0.15", "redis_mode": "standalone"},
        "persistence": {"aof_enabled": 1},
        "memory": {"maxmemory": 0, "maxmemory_policy": "noeviction"},
        "replication": {"role": "master", "connected_slaves": 0},
        "cluster": {"cluster_enabled": 0},
        "appendfsync": "always",
        "acl": AclCheck("default", {}),
    }
    return Facts(**(facts | changes))


def test_only_hazards_count() -> None:
    assert diagnose(safe_facts()).hazards == 0
    notes = diagnose(safe_facts(appendfsync=CantCheck("denied"), acl=CantCheck("6.2")))
    assert notes.hazards == 0
    assert {f.level for f in notes.findings} == {Level.OK, Level.NOTE}
    bad = diagnose(safe_facts(persistence={"aof_enabled": 0}, memory={"maxmemory": 1,
                   "maxmemory_policy": "allkeys-lru"}))  # fmt: skip
    assert bad.hazards == 2
    data = bad.to_json()
    assert data["server"] == {"name": "redis", "version": "7.0.15", "mode": "standalone"}
    assert data["hazards"] == 2
    assert {f["check"] for f in data["findings"] if f["level"] == "hazard"} == {
        "appendonly",
        "maxmemory-policy",
    }
    text = [line for _, line in report_lines(bad)]
    assert text[0] == "server: redis 7.0.15 (standalone)"
    assert any(line.startswith("HAZARD  appendonly") for line in text)
    assert text[-1].startswith("2 hazards")


def lua_commands() -> set[str]:
    """Every command a ``.lua`` script calls (redis.call / redis.pcall)."""
    found: set[str] = set()
    for entry in files("tenure._scripts").iterdir():
        if entry.name.endswith(".lua"):
            found |= set(re.findall(r"redis\.p?call\('([A-Za-z]+)'", entry.read_text()))
    return {c.upper() for c in found}


def test_the_needed_commands_are_those_the_scripts_call() -> None:
    listed = {n.command for n in NEEDED_COMMANDS if n.used_by == "script"}
    assert listed == lua_commands()
    assert len({n.command for n in NEEDED_COMMANDS}) == len(NEEDED_COMMANDS)


def test_dryrun_args_use_the_prefix() -> None:
    by_name = {n.command: n for n in NEEDED_COMMANDS}
    assert dryrun_args(by_name["SCRIPT LOAD"], "p:") == ("SCRIPT", "LOAD", "return 1")
    assert dryrun_args(by_name["HGET"], "p:") == ("HGET", "p:{tenure-doctor}:rlock", "owner")
    assert dryrun_args(by_name["PUBLISH"], "p:")[1].startswith("p:{tenure-doctor}:wake:")
    assert dryrun_args(by_name["SCAN"], "a*:") == ("SCAN", "0", "MATCH", "a\\*:*")


def test_the_report_prints_without_rich(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report = diagnose(safe_facts(persistence={"aof_enabled": 0}))
    monkeypatch.setitem(sys.modules, "rich.console", None)  # import fails: no rich
    print_report(report)
    assert capsys.readouterr().out == "".join(text + "\n" for _, text in report_lines(report))
