"""The live views' model (``tenure._views.live``), without a server: how long a
holder has held, which rows show, their order, their cells and their JSON."""

from __future__ import annotations

import json

import pytest

from tenure._info import SemaphoreHolder, SemaphoreInfo
from tenure._plans.snapshot import LockView
from tenure._views.live import (
    COLUMNS,
    SORTS,
    Frame,
    HeldClock,
    Row,
    cells,
    duration,
    frame_json,
    next_sort,
    sort_rows,
)

NOW = 1_800_000_000.0  # the server's clock at a refresh, in seconds


def lock(
    name: str, holder: str = "", *, fence: float = 0, ttl_ms: int = -2, waiters: int = 0
) -> LockView:
    return LockView(
        "Lock", name, f"tenure:{{{name}}}", holder, 1 if holder else 0, ttl_ms, int(fence), waiters
    )


def semaphore(name: str, *tokens: str, fence: float = 0) -> LockView:
    holders = tuple(SemaphoreHolder(t, 1, 20.0) for t in tokens)
    info = SemaphoreInfo(name, 3, 3 - len(tokens), holders, 0)
    holder = tokens[0] if tokens else ""
    return LockView(
        "Semaphore",
        name,
        f"tenure:{{{name}}}:semaphore",
        holder,
        1 if tokens else 0,
        20_000 if tokens else -2,
        int(fence),
        0,
        detail=info,
    )


def test_a_holder_with_a_fence_has_held_since_its_fence_was_minted() -> None:
    clock = HeldClock()
    (row,) = clock.rows([lock("a", "t1", fence=(NOW - 42.5) * 1e6, ttl_ms=9000)], NOW)
    assert row.held_for == pytest.approx(42.5)
    assert not row.at_least
    assert cells(row)[COLUMNS.index("HELD FOR")] == "42.50s"


def test_a_fence_that_is_no_time_of_the_clock_is_not_used() -> None:
    clock = HeldClock()
    first = clock.rows([lock("a", "t1", fence=7, ttl_ms=9000)], NOW)  # counted, not minted
    assert first[0].held_for == 0.0 and first[0].at_least
    later = clock.rows([lock("a", "t1", fence=7, ttl_ms=9000)], NOW + 3)
    assert later[0].held_for == pytest.approx(3.0) and later[0].at_least
    assert cells(later[0])[COLUMNS.index("HELD FOR")] == "≥3.00s"
    ahead = clock.rows([lock("a", "t1", fence=(NOW + 60) * 1e6, ttl_ms=9000)], NOW + 4)
    assert ahead[0].held_for == pytest.approx(4.0)  # a fence from the future: not a grant time


def test_a_semaphore_lease_is_timed_from_the_refresh_that_first_showed_it() -> None:
    clock = HeldClock()
    # the semaphore's fence is the last lease's, not its first holder's: not used
    (row,) = clock.rows([semaphore("s", "old", fence=(NOW - 1) * 1e6)], NOW)
    assert row.held_for == 0.0 and row.at_least  # held before the first refresh
    (row,) = clock.rows([semaphore("s", "old", "new")], NOW + 5)
    assert row.held_for == pytest.approx(5.0) and row.at_least
    (row,) = clock.rows([semaphore("s", "new")], NOW + 6)  # a holder that came later
    assert row.held_for == pytest.approx(1.0) and not row.at_least
    clock.rows([semaphore("s")], NOW + 7)  # released: forgotten
    (row,) = clock.rows([semaphore("s", "new")], NOW + 9)
    assert row.held_for == 0.0 and not row.at_least
    assert cells(row)[COLUMNS.index("PERMITS")] == "1/3"


def test_free_primitives_without_waiters_are_hidden_unless_every_one_is_asked() -> None:
    views = [
        lock("held", "t", fence=NOW * 1e6, ttl_ms=1000),
        lock("free"),
        lock("queued", waiters=2),  # free a moment, waiters about to take it
        semaphore("idle"),
    ]
    frame = Frame(NOW, tuple(HeldClock().rows(views, NOW)))
    assert [r.view.name for r in frame.shown("name", every=False)] == ["held", "queued"]
    assert [r.view.name for r in frame.shown("name", every=True)] == [
        "free",
        "held",
        "idle",
        "queued",
    ]


def test_each_sort_orders_the_rows() -> None:
    views = [
        lock("b", "t1", fence=(NOW - 10) * 1e6, ttl_ms=5000, waiters=1),
        lock("a", "t2", fence=(NOW - 30) * 1e6, ttl_ms=20000, waiters=3),
        lock("c", "t3", fence=(NOW - 20) * 1e6, ttl_ms=-1),
        lock("d"),
    ]
    rows = HeldClock().rows(views, NOW)

    def names(by: str) -> list[str]:
        return [r.view.name for r in sort_rows(rows, by)]

    assert names("name") == ["a", "b", "c", "d"]
    assert names("held") == ["a", "c", "b", "d"]  # longest held first, free last
    assert names("ttl") == ["b", "a", "c", "d"]  # soonest to end first, no expiry last
    assert names("waiters") == ["a", "b", "c", "d"]
    assert names("fence") == ["b", "c", "a", "d"]  # newest first
    assert [next_sort(s) for s in SORTS] == [*SORTS[1:], SORTS[0]]
    with pytest.raises(ValueError, match="unknown sort"):
        sort_rows(rows, "holder")


def test_the_cells_follow_the_columns() -> None:
    (row,) = HeldClock().rows([lock("a", "tok", fence=(NOW - 90) * 1e6, ttl_ms=4500)], NOW)
    assert dict(zip(COLUMNS, cells(row), strict=True)) == {
        "NAME": "a",
        "KIND": "Lock",
        "HELD FOR": "1m30s",
        "TTL": "4.50s",
        "FENCE": str(int((NOW - 90) * 1e6)),
        "WAITERS": "0",
        "PERMITS": "-",
        "HOLDER": "tok",
    }
    free = cells(Row(lock("f"), None))
    assert free[COLUMNS.index("HELD FOR")] == "-" and free[COLUMNS.index("HOLDER")] == "free"
    assert [duration(s) for s in (0.5, 61, 3 * 3600 + 7 * 60, 2 * 86400 + 4 * 3600)] == [
        "0.50s",
        "1m01s",
        "3h07m",
        "2d04h",
    ]


def test_a_frame_as_json() -> None:
    views = [lock("a", "tok", fence=(NOW - 2) * 1e6, ttl_ms=4500), lock("f")]
    frame = Frame(NOW + 0.25, tuple(HeldClock().rows(views, NOW)), ("Lock 'x': wrong type",))
    out = frame_json(frame, prefix="tenure:", pattern="*", by="held", every=False)
    assert json.loads(json.dumps(out)) == out
    assert {k: v for k, v in out.items() if k != "locks"} == {
        "time": NOW + 0.25,
        "prefix": "tenure:",
        "pattern": "*",
        "sort": "held",
        "all": False,
        "shown": 1,
        "total": 2,
        "skipped": ["Lock 'x': wrong type"],
        "error": None,
    }
    (one,) = out["locks"]
    assert one["name"] == "a" and one["holder"] == "tok" and one["ttl"] == 4.5
    assert one["held_for"] == pytest.approx(2.0) and one["held_for_at_least"] is False
    failed = frame_json(
        Frame(NOW, error="ConnectionError: refused"),
        prefix="p:",
        pattern="*",
        by="name",
        every=True,
    )
    assert failed["error"] == "ConnectionError: refused" and failed["locks"] == []
