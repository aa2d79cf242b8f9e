"""The command line: ``tenure demo`` end to end, its checkers, and argument handling."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.text import Text

import tenure
from tenure._cli import build_parser, main
from tenure._demo import (
    PHASES,
    TITLE_WIDTH,
    Hold,
    Phase,
    count_overlaps,
    exit_status,
    fence_regressions,
    handoff_gaps,
    lost_updates,
    percentile,
    summarize,
    verdicts,
)

pytestmark = pytest.mark.once

NO_LOCK, LOCK, ASYNC_LOCK, RLOCK, RWLOCK, SEMAPHORE = PHASES
LOCKED_OK = "ok: 0 lost updates, 0 overlaps, fences increasing"


def plain(markup: str) -> str:
    """``markup`` without rich's style tags."""
    return Text.from_markup(markup).plain


def run_tenure(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m tenure ARGS`` without ``REDIS_URL`` in its environment."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return subprocess.run(
        [sys.executable, "-m", "tenure", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def check_demo_output(out: str) -> None:
    """The locked phases kept every update and fence order; the unlocked one lost updates."""
    for phase in (LOCK, ASYNC_LOCK, RLOCK, RWLOCK, SEMAPHORE):
        assert re.search(rf"^{re.escape(phase.title)}\s+{re.escape(LOCKED_OK)}$", out, re.M), out
    lost = re.search(r"^no lock\s+(\d+) of (\d+) updates lost", out, re.M)
    assert lost is not None, out
    assert 0 < int(lost[1]) <= int(lost[2])
    assert "FAIL" not in out


# --- the demo, end to end ------------------------------------------------------------------


def test_demo_quick_with_url(url: str) -> None:
    result = run_tenure("--url", url, "demo", "--quick")
    assert result.returncode == 0, result.stdout + result.stderr
    check_demo_output(result.stdout)
    assert f"at {url}" in result.stdout
    assert "(embedded)" not in result.stdout


def test_demo_quick_embedded_server() -> None:
    result = run_tenure("demo", "--quick")
    assert result.returncode == 0, result.stdout + result.stderr
    check_demo_output(result.stdout)
    where = re.search(r"^server: .* \(embedded\) at unix://(\S+)$", result.stdout, re.M)
    assert where is not None, result.stdout
    assert not Path(where[1]).exists(), "the embedded server's socket outlived the command"


def test_demo_with_unreachable_server_exits_2() -> None:
    status = main(["--url", "redis://127.0.0.1:1/0", "demo", "--quick"])
    assert status == 2


# --- the checkers --------------------------------------------------------------------------


def test_overlaps_none_when_holds_follow_each_other() -> None:
    holds = [Hold(0.0, 1.0, 1), Hold(1.0, 2.0, 2), Hold(2.5, 3.0, 3)]
    assert count_overlaps(holds) == 0


def test_overlaps_caught() -> None:
    assert count_overlaps([Hold(0.0, 1.0, 1), Hold(0.5, 2.0, 2)]) == 1
    # A hold inside a long one, after a short one that ended: still an overlap.
    assert count_overlaps([Hold(0.0, 10.0, 1), Hold(1.0, 2.0, 2), Hold(3.0, 4.0, 3)]) == 2
    # The order in which workers reported does not matter.
    assert count_overlaps([Hold(0.5, 2.0, 2), Hold(0.0, 1.0, 1)]) == 1


def test_fences_checked_in_acquire_order() -> None:
    increasing = [Hold(2.0, 3.0, 7), Hold(0.0, 1.0, 5), Hold(4.0, 5.0, 90)]
    assert fence_regressions(increasing) == 0
    backwards = [Hold(0.0, 1.0, 5), Hold(2.0, 3.0, 4), Hold(4.0, 5.0, 6)]
    assert fence_regressions(backwards) == 1
    repeated = [Hold(0.0, 1.0, 5), Hold(2.0, 3.0, 5)]
    assert fence_regressions(repeated) == 1


def test_lost_updates() -> None:
    assert lost_updates(expected=120, final=120) == 0
    assert lost_updates(expected=120, final=61) == 59


def test_handoff_gaps_and_percentiles() -> None:
    holds = [Hold(0.0, 1.0, 1), Hold(3.0, 4.0, 3), Hold(1.5, 2.0, 2)]
    assert handoff_gaps(holds) == [0.5, 1.0]
    values = [float(v) for v in range(100, 0, -1)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([0.25], 99) == 0.25
    with pytest.raises(ValueError):
        percentile([], 50)


def good_holds(n: int) -> list[Hold]:
    return [Hold(float(i), i + 0.5, 100 + 10 * i) for i in range(n)]


def test_a_clean_locked_phase_passes() -> None:
    stats = summarize(LOCK, expected=10, final=10, seconds=2.0, holds=good_holds(10))
    assert stats.problems() == []
    assert stats.rate == 5.0
    assert stats.handoff_p50 == pytest.approx(0.5)
    assert exit_status([stats]) == 0
    assert [plain(line) for line in verdicts([stats])] == [
        f"{LOCK.title:<{TITLE_WIDTH}} {LOCKED_OK}"
    ]


@pytest.mark.parametrize("phase", [LOCK, ASYNC_LOCK, RLOCK, RWLOCK, SEMAPHORE])
def test_each_broken_invariant_fails_a_locked_phase(phase: Phase) -> None:
    lost = summarize(phase, expected=10, final=9, seconds=1.0, holds=good_holds(10))
    overlapping = [*good_holds(10), Hold(3.2, 3.3, 135)]
    overlap = summarize(phase, expected=11, final=11, seconds=1.0, holds=overlapping)
    backwards = [*good_holds(10), Hold(20.0, 21.0, 1)]
    regress = summarize(phase, expected=11, final=11, seconds=1.0, holds=backwards)

    assert lost.problems() == ["1 lost update"]
    assert overlap.problems() == ["1 overlapping hold"]
    assert regress.problems() == ["1 fence went backwards"]
    for stats in (lost, overlap, regress):
        assert exit_status([stats]) == 1
        assert plain(verdicts([stats])[0]).startswith(f"{phase.title:<{TITLE_WIDTH}} FAIL: ")


def test_lost_updates_without_a_lock_do_not_fail() -> None:
    stats = summarize(NO_LOCK, expected=120, final=70, seconds=0.1, holds=[])
    assert stats.lost_updates == 50
    assert stats.problems() == []
    assert exit_status([stats]) == 0
    assert "50 of 120 updates lost" in verdicts([stats])[0]


# --- arguments -----------------------------------------------------------------------------


def test_version() -> None:
    result = run_tenure("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"tenure {tenure.__version__}"


def test_url_before_or_after_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert build_parser().parse_args(["demo"]).url is None
    assert build_parser().parse_args(["--url", "redis://a", "demo"]).url == "redis://a"
    assert build_parser().parse_args(["demo", "--url", "redis://b"]).url == "redis://b"
    monkeypatch.setenv("REDIS_URL", "redis://env")
    assert build_parser().parse_args(["demo"]).url == "redis://env"
    assert build_parser().parse_args(["demo", "--url", "redis://b"]).url == "redis://b"


def test_a_malformed_url_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: a ValueError from redis-py's URL parser, a traceback and status 1.
    monkeypatch.delenv("REDIS_URL", raising=False)
    for bad in (
        ["ls", "--url", "localhost:6379"],
        ["--url", "redis://127.0.0.1:99999", "inspect", "x"],
        ["run", "--url", "http://x", "n", "--", "true"],
        ["--url", "redis://a:1", "--url", "foo", "--url", "redis://b:1", "run", "n", "--", "true"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(bad)
        assert exit_info.value.code == 2, bad
        assert "bad --url or REDIS_URL: " in capsys.readouterr().err, bad
    monkeypatch.setenv("REDIS_URL", "not a url")
    with pytest.raises(SystemExit) as exit_info:
        main(["ls"])
    assert exit_info.value.code == 2
    assert "bad --url or REDIS_URL: Redis URL must specify" in capsys.readouterr().err


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "demo" in capsys.readouterr().err
    for bad in (["demo", "--workers", "0"], ["demo", "--sections", "x"], ["nope"]):
        with pytest.raises(SystemExit) as exit_info:
            main(bad)
        assert exit_info.value.code == 2
