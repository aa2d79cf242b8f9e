"""benchmarks/plot.py reads the benchmarks' Markdown tables and draws each
ratio column (no server)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.once

ROOT = Path(__file__).resolve().parent.parent


def _plot() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_plot", ROOT / "benchmarks" / "plot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_plot"] = module
    spec.loader.exec_module(module)
    return module


plot = _plot()

SAMPLE = """\
**1. Uncontended acquire+release**

| lock | cycles/s | x raw | us/cycle |
|---|--:|--:|--:|
| tenure Lock | 5,747 | 0.69 | 174 |
| raw floor | 8,313 | 1.00 | 120 |

**Targets**

| target | measured | met |
|---|--:|--:|
| uncontended | 0.691x | NO |

| implementation | API | acquire p50 (µs) | acquire p50 / tenure Lock's |
|---|---|---:|---:|
| tenure Redlock (5 masters) | sync | 586 | 1.93x |
"""


def test_tables_are_read_with_their_titles_and_ratio_columns() -> None:
    found = plot.tables(SAMPLE)
    assert [t.title for t in found] == ["1. Uncontended acquire+release", "Targets", "Targets"]
    assert [t.ratio_column() for t in found] == [2, None, 3]
    assert found[0].labels() == ["tenure Lock", "raw floor"]
    assert found[2].labels() == ["tenure Redlock (5 masters) (sync)"]
    assert [plot.number(row[2]) for row in found[0].rows] == [0.69, 1.0]
    assert plot.number("5,747") == 5747.0
    assert plot.number("1.93x") == 1.93
    assert plot.number("—") is None


def test_one_png_per_table_with_a_ratio(tmp_path: Path) -> None:
    source = tmp_path / "bench_locks.md"
    source.write_text(SAMPLE)
    plot.main([str(source), "--out", str(tmp_path / "img")])
    drawn = sorted(p.name for p in (tmp_path / "img").iterdir())
    assert drawn == ["locks-1.png", "locks-2.png"]
    assert all((tmp_path / "img" / name).read_bytes()[:4] == b"\x89PNG" for name in drawn)


def test_a_file_without_a_ratio_table_is_an_error(tmp_path: Path) -> None:
    source = tmp_path / "empty.md"
    source.write_text("| a | b |\n|---|---|\n| 1 | 2 |\n")
    with pytest.raises(SystemExit):
        plot.main([str(source), "--out", str(tmp_path)])


def test_a_column_of_ratios_is_found_by_its_cells() -> None:
    text = (
        "| round | topology | p50 ms | cluster / 1 server |\n|---|---|--:|--:|\n"
        "| 1 | single | 1.18 |  |\n| 1 | cluster | 1.36 | 1.15x |\n"
    )
    (table,) = plot.tables(text)
    assert table.ratio_column() == 3
    assert table.labels() == ["1 (single)", "1 (cluster)"]


def test_the_election_benchmark_tables_are_drawn(tmp_path: Path) -> None:
    """bench_election.py's report: two tables with a ratio (failover / ttl,
    poller / observe()), one without (the idle cost), so that ``make
    bench-plots`` over ``.bench/*.md`` draws it rather than stopping on it."""
    spec = importlib.util.spec_from_file_location(
        "bench_election", ROOT / "benchmarks" / "bench_election.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_election"] = bench
    spec.loader.exec_module(bench)
    failover = bench.Failover(campaign=[0.8, 1.0], observed=[0.82, 1.02])
    handoff = bench.Failover(campaign=[0.006, 0.010], observed=[0.008, 0.012])
    observed = bench.Observe(observe=[0.001, 0.002], poll=[0.05, 0.06])
    observed.idle["the leader's watchdog"] = bench.Idle(commands=3.0, scripts=0.3, gets=0.0)
    text = bench.report(2.0, 0.1, 10.0, 2, failover, handoff, observed)
    found = plot.tables(text)
    assert [t.ratio_column() for t in found] == [5, 4, None]
    assert [row[5] for row in found[0].rows] == ["0.450x", "0.460x", "0.004x", "0.005x"]
    assert [row[4] for row in found[1].rows] == ["1.00x", "37x"]
    source = tmp_path / "election.md"
    source.write_text(text)
    plot.main([str(source), "--out", str(tmp_path / "img")])
    assert sorted(p.name for p in (tmp_path / "img").iterdir()) == [
        "election-1.png",
        "election-2.png",
    ]
