"""The Celery recipe (examples/celery_app.py) with real Celery workers on a real server.

The test starts its own server (the broker's queues must outlive the flush of
the shared one before each test) and two workers on it: ``steady`` (prefork,
two processes, the default queue) and ``doomed`` (one process, the queue
``doomed``), which is paused and then killed mid-task. Every run of the task
notes its start and end, with its fence, in ``report:journal``.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from celery_app import app, rebuild_report

from tenure import FencedKey
from tenure._server import ServerProcess

pytestmark = pytest.mark.once

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: The doomed worker's lease ttl: how long its lock outlives it. (Its watchdog
#: renews it every third of that: the lock outlives the worker by at least
#: DOOMED_TTL / 4 with a renewal up to 5/12 of the ttl late.)
DOOMED_TTL = 2.0


@dataclass(frozen=True)
class Run:
    run: int
    fence: int
    started: float
    ended: float | None  # None: the run never ended (its worker died)


def _runs(client: redis.Redis) -> dict[int, Run]:
    """The runs the journal tells of, by run number."""
    events = [json.loads(e) for e in client.lrange("report:journal", 0, -1)]
    ends = {e["run"]: e["at"] for e in events if e["event"] == "end"}
    return {
        e["run"]: Run(e["run"], e["fence"], e["at"], ends.get(e["run"]))
        for e in events
        if e["event"] == "start"
    }


def _wait_for_start(client: redis.Redis, run: int, timeout: float = 30) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if run in (runs := _runs(client)):
            return runs[run]
        time.sleep(0.02)
    raise AssertionError(f"run {run} did not start within {timeout} s")


def _worker(url: str, *args: str, ttl: float | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "REDIS_URL": url}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(EXAMPLES), env.get("PYTHONPATH")]))
    if ttl is not None:
        env["REPORT_LOCK_TTL"] = str(ttl)
    command = [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--loglevel=WARNING"]
    return subprocess.Popen([*command, *args], env=env, start_new_session=True)


def _stop(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        os.killpg(worker.pid, signal.SIGQUIT)  # a cold shutdown: the pool's processes too
        try:
            worker.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    """The URL of a server of the module's own, with the steady worker started on it."""
    with ServerProcess(os.environ.get("TENURE_SERVER") or None) as server:
        app.conf.update(broker_url=server.url, result_backend=server.url)
        steady = _worker(server.url, "--concurrency=2", "-n", "steady@%h")
        try:
            yield server.url
        finally:
            _stop(steady)


@pytest.fixture
def journal(broker: str) -> Iterator[redis.Redis]:
    """A client on the broker's server, the journal emptied."""
    client = redis.Redis.from_url(broker)
    client.delete("report:journal")
    yield client
    client.close()


def test_overlapping_tasks_run_one_at_a_time_with_increasing_fences(
    journal: redis.Redis,
) -> None:
    results = [rebuild_report.delay(run, work=0.1, wait=30) for run in range(6)]
    replies = [r.get(timeout=60) for r in results]
    assert [reply["run"] for reply in replies] == list(range(6))
    assert all("fence" in reply and len(reply) == 2 for reply in replies), replies
    runs = sorted(_runs(journal).values(), key=lambda r: r.started)
    assert len(runs) == 6 and all(r.ended is not None for r in runs), runs
    for before, after in itertools.pairwise(runs):
        assert before.ended is not None and before.ended <= after.started, (before, after)
        assert before.fence < after.fence, (before, after)
    last = runs[-1]
    assert journal.get("report:body") == f"report of run {last.run}".encode()
    assert FencedKey(journal, "report:body").seen() == last.fence


def test_a_duplicate_that_finds_the_lock_held_is_skipped(journal: redis.Redis) -> None:
    running = rebuild_report.delay(10, work=1.5)
    first = _wait_for_start(journal, 10)
    # The steady worker's second process takes the duplicate while the first runs.
    assert rebuild_report.delay(11).get(timeout=30) == {"run": 11, "skipped": True}
    assert running.get(timeout=30) == {"run": 10, "fence": first.fence}
    assert set(_runs(journal)) == {10}


def test_a_paused_worker_loses_its_turn_and_its_write_is_refused(
    broker: str, journal: redis.Redis
) -> None:
    doomed = _worker(broker, "--pool=solo", "-Q", "doomed", ttl=DOOMED_TTL)
    try:
        # Paused mid-task for longer than its ttl: the next task runs ...
        paused = rebuild_report.apply_async((20,), {"work": 3.0}, queue="doomed")
        first = _wait_for_start(journal, 20)
        os.kill(doomed.pid, signal.SIGSTOP)
        stopped = time.time()
        nxt = rebuild_report.delay(21, wait=30).get(timeout=30)
        assert nxt["fence"] > first.fence
        assert _runs(journal)[21].started >= stopped + DOOMED_TTL / 4
        # ... and the woken worker's write, with the older fence, is refused.
        os.kill(doomed.pid, signal.SIGCONT)
        assert paused.get(timeout=30) == {
            "run": 20,
            "fence": first.fence,
            "lost": True,
            "written": False,
        }
        assert journal.get("report:body") == b"report of run 21"
        assert _runs(journal)[20].ended is None

        # Killed mid-task: its lock is held until the ttl runs out, then the next runs.
        rebuild_report.apply_async((22,), {"work": 30.0}, queue="doomed")
        killed = _wait_for_start(journal, 22)
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(10)
        died = time.time()
        after = rebuild_report.delay(23, wait=30).get(timeout=30)
        assert after["fence"] > killed.fence
        assert _runs(journal)[23].started >= died + DOOMED_TTL / 4
        assert _runs(journal)[22].ended is None
        assert journal.get("report:body") == b"report of run 23"
    finally:
        _stop(doomed)
