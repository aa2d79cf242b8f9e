"""``tenure run --leader`` (one replica runs the command at a time) and
``tenure leader``, on real servers and real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest
import redis

from tenure import Election, RedlockElection
from tenure._cli import main
from tenure._server import ServerProcess

PY = sys.executable


def wait_until(check: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting {what}"
        time.sleep(0.01)


def replica(
    url: str | list[str], name: str, log: Path, hold: float, ttl: float
) -> subprocess.Popen[str]:
    """Start ``tenure run --leader NAME`` (several ``url``: over those masters)
    with a command that logs its runs to
    ``log``: "start <term> <pid> <t>" and, ``hold`` s later, "end <term> <pid> <t>".
    At its start the command logs "overlap" if an earlier run's process still
    runs without having logged its end (two commands at once; Linux's /proc)."""
    code = textwrap.dedent(f"""
        import os, time
        log = {str(log)!r}
        term = os.environ["TENURE_TERM"]
        assert os.environ["TENURE_FENCE"] == term
        def note(what):
            with open(log, "a") as out:
                out.write(f"{{what}} {{term}} {{os.getpid()}} {{time.monotonic()!r}}\\n")
        open(log, "a").close()
        started = {{}}
        for line in open(log).read().splitlines():
            what, _, pid, _ = line.split()
            if what == "start":
                started[pid] = True
            elif what == "end":
                started.pop(pid, None)
        for pid in started:
            try:  # (a killed run is a zombie until reaped: not running)
                state = open(f"/proc/{{pid}}/stat").read().rpartition(")")[2].split()[0]
            except OSError:
                continue
            if state not in ("Z", "X"):
                note("overlap")
        note("start")
        time.sleep({hold})
        note("end")
    """)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    urls = [a for u in ([url] if isinstance(url, str) else url) for a in ("--url", u)]
    tenure = [PY, "-m", "tenure", *urls, "run", "--leader", name, "--ttl", str(ttl)]
    return subprocess.Popen(
        [*tenure, "--", PY, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def lines(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.once
def test_three_replicas_one_command_at_a_time_and_a_killed_leader_hands_over(
    url: str, tmp_path: Path
) -> None:
    log = tmp_path / "runs"
    ttl = 1.0
    replicas = [replica(url, "job", log, hold=1.0, ttl=ttl) for _ in range(3)]
    try:
        wait_until(lambda: any(w[0] == "start" for w in lines(log)), 30, "for a first run")
        first_pid = int(next(w for w in lines(log) if w[0] == "start")[2])
        # the replica that runs it: the command's parent (the exec shim keeps its pid)
        leader = psutil.Process(first_pid).ppid()
        victim = next(p for p in replicas if p.pid == leader)
        killed = time.monotonic()
        victim.send_signal(signal.SIGKILL)
        wait_until(lambda: sum(w[0] == "start" for w in lines(log)) >= 2, 10, "for a takeover")
        second = [w for w in lines(log) if w[0] == "start"][1]
        assert float(second[3]) - killed < ttl + 0.5, "not taken over within the ttl"
        statuses = [p.wait(30) for p in replicas]
    finally:
        for p in replicas:
            p.kill()
            p.wait(10)
    assert sorted(statuses) == [-signal.SIGKILL, 0, 0]
    check_runs(log, 3)


def check_runs(log: Path, count: int) -> None:
    """One command at a time, each run's term above the one before."""
    runs = lines(log)
    assert not [w for w in runs if w[0] == "overlap"], runs
    terms = [int(w[1]) for w in runs if w[0] == "start"]
    assert len(terms) == count and terms == sorted(set(terms))


@pytest.mark.once
def test_replicas_over_three_masters_run_one_command_at_a_time(
    make_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    urls = [make_server().url for _ in range(3)]
    log = tmp_path / "runs"
    replicas = [replica(urls, "job", log, hold=0.3, ttl=2.0) for _ in range(3)]
    try:
        statuses = [p.wait(60) for p in replicas]
    finally:
        for p in replicas:
            p.kill()
            p.wait(10)
    assert statuses == [0, 0, 0], [p.stderr.read() if p.stderr else "" for p in replicas]
    check_runs(log, 3)


@pytest.mark.once
def test_a_release_too_few_masters_answer_keeps_the_commands_status(
    make_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    servers = [make_server() for _ in range(3)]
    log = tmp_path / "runs"
    one = replica([s.url for s in servers], "job", log, hold=1.0, ttl=5.0)
    try:
        wait_until(lambda: any(w[0] == "start" for w in lines(log)), 30, "for the run")
        servers[1].stop()
        servers[2].stop()
        status = one.wait(30)
        err = one.stderr.read() if one.stderr else ""
    finally:
        one.kill()
        one.wait(10)
    # the command ran to its end within the lease: its status, and why the
    # leadership is left to expire
    assert status == 0, err
    assert "could not release the leadership of 'job'" in err and "expires within 5s" in err


def test_tenure_leader_shows_the_leader(
    url: str, r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--url", url, "leader", "jobs"]) == 1
    assert capsys.readouterr().out == "no leader of 'jobs'\n"
    leadership = Election(r, "jobs", ttl=10, label="web-1").campaign()
    assert leadership is not None
    leadership.proclaim("10.0.0.7:8080")
    assert main(["--url", url, "leader", "jobs"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "leader of 'jobs': web-1"
    assert out[1] == f"  term     {leadership.term}"
    assert out[2] == "  value    '10.0.0.7:8080'"
    assert main(["--url", url, "leader", "jobs", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["name"] == "jobs"
    assert data["leader"]["label"] == "web-1"
    assert data["leader"]["term"] == leadership.term
    assert data["leader"]["value"] == "10.0.0.7:8080" and not data["leader"]["value_hex"]
    assert data["leader"]["sequence"] == 0  # (an Election's values are not numbered)
    assert 0 < data["leader"]["ttl"] <= 10
    # inspect and ls know the kind
    assert main(["--url", url, "inspect", "jobs"]) == 0
    text = capsys.readouterr().out
    assert "Election 'jobs'" in text and f"leader   web-1 (term {leadership.term})" in text
    assert main(["--url", url, "ls", "--json"]) == 0
    (found,) = json.loads(capsys.readouterr().out)["locks"]
    assert found["kind"] == "Election" and found["leader"]["label"] == "web-1"
    leadership.resign()


def test_run_leader_usage(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", url, "run", "job", "--leader", "job", "--", "true"]) == 2
    assert "exactly one" in capsys.readouterr().err


@pytest.mark.once
def test_tenure_leader_over_three_masters_says_what_a_majority_says(
    make_server: Callable[..., ServerProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    servers = [make_server() for _ in range(3)]
    urls = [a for s in servers for a in ("--url", s.url)]
    masters = [redis.Redis.from_url(s.url) for s in servers]
    assert main([*urls, "leader", "jobs"]) == 1
    assert capsys.readouterr().out == "no leader of 'jobs'\n"
    leadership = RedlockElection(masters, "jobs", ttl=10, label="web-1").campaign(timeout=5)
    assert leadership is not None
    leadership.proclaim("here")
    # one master alone says another value: outvoted
    masters[0].hset("tenure:{jobs}:election:record", "value", "b3V0dm90ZWQ=")
    assert main(["leader", "jobs", *urls, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["leader"]["label"], data["leader"]["term"]) == ("web-1", leadership.term)
    assert data["leader"]["value"] == "here" and data["leader"]["sequence"] == 1
    leadership.proclaim("there")
    assert main(["leader", "jobs", *urls]) == 0
    out = capsys.readouterr().out
    assert "  sequence 2\n" in out and "'there'" in out, out
    servers[1].stop()
    servers[2].stop()
    assert main([*urls, "leader", "jobs"]) == 2
    assert "can't tell who leads: 1 of 3 masters answered" in capsys.readouterr().err
    for m in masters:
        m.close()
