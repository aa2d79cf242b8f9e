"""The cron recipe (examples/cron_job.py): two ``tenure run --no-wait`` of one
job at once, on a real server; only one runs the script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tenure import FencedKey

pytestmark = pytest.mark.once

JOB = Path(__file__).resolve().parent.parent / "examples" / "cron_job.py"


def _cron_turn(url: str) -> subprocess.Popen[str]:
    """What the crontab line of the recipe starts, on the test server."""
    argv = ["run", "--no-wait", "--conflict-exit-code", "0", "report"]
    return subprocess.Popen(
        [sys.executable, "-m", "tenure", *argv, "--", sys.executable, str(JOB)],
        env={**os.environ, "REDIS_URL": url, "REPORT_WORK": "3"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_hosts_at_once_run_the_job_once(url: str, r: redis.Redis) -> None:
    first = _cron_turn(url)
    deadline = time.monotonic() + 30
    while not r.llen("report:runs"):  # the first one's script runs
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.02)
    second = _cron_turn(url)
    second_out = second.communicate(timeout=30)
    assert second.returncode == 0, second_out  # skipped its turn, quietly
    assert first.poll() is None, "the script ended before the second turn was tried"
    first_out = first.communicate(timeout=30)
    assert first.returncode == 0, first_out

    runs = [json.loads(run) for run in r.lrange("report:runs", 0, -1)]
    assert len(runs) == 1, runs
    assert FencedKey(r, "report:body").seen() == runs[0]["fence"]
