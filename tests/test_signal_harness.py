"""The random-signal harness (scripts/signal_harness.py, `make fault-signals`)
still works: one short cell, Lock under KeyboardInterrupt, interrupts the
library many times and reports on every check (a harness whose alarms never
land in a library call, or whose child no longer runs, would pass with nothing
checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tenure

# The harness starts its servers on TENURE_SERVER's binary.
pytestmark = pytest.mark.each_server

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "signal_harness.py"


def harness(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run one 2 s cell, Lock under KeyboardInterrupt: the process and the cell's counts."""
    out = tmp_path / "cells.json"
    env = dict(os.environ, PYTHONPATH=str(Path(tenure.__file__).resolve().parents[1]))
    cmd = [sys.executable, str(SCRIPT), "--quick", "--kind", "lock", "--style", "keyboard"]
    done = subprocess.run(
        [*cmd, *args, "--json", str(out)], env=env, capture_output=True, text=True, timeout=90
    )
    [cell] = json.loads(out.read_text())
    return done, cell


def test_without_interrupts_the_signal_harness_finds_nothing(tmp_path: Path) -> None:
    done, cell = harness(tmp_path, "--control")
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert cell["raised"] == cell["caught"] == 0, report
    assert cell["acquired"] > 100 and cell["contender_holds"] > 0, report
    assert cell["final_free"] is True and cell["done"] is True, report


def test_the_signal_harness_interrupts_lock_and_checks_what_is_left(tmp_path: Path) -> None:
    done, cell = harness(tmp_path)
    report = done.stdout + done.stderr
    assert (cell["kind"], cell["style"]) == ("lock", "keyboard"), report
    assert cell["raised"] >= 10, report  # interrupts raised inside tenure's calls
    assert cell["caught"] >= 10 and cell["acquired"] > 0 and cell["contender_holds"] > 0, report
    assert "| lock      | keyboard |" in done.stdout, report  # the table
    failed = cell["stranded"] or cell["overlaps"] or cell["unfinished"] or cell["crash"]
    assert (done.returncode == 1) == bool(failed or not cell["final_free"]), report
    if done.returncode:
        # Seen on the main branch of 2026-11-27 in about one 2 s run in three:
        # an interrupted release still held after the owner's next acquire, or
        # both threads hung on a threading.Event whose lock the interrupt left
        # taken. To become a plain assert once those are fixed.
        pytest.xfail(f"the harness found a fault in Lock under KeyboardInterrupt:\n{report}")
