"""``tenure top`` on real servers: the table in a pseudo-terminal (driven by
pexpect, as a person at a terminal would: the test holds and releases locks
and reads what the screen shows, then quits with ``q`` or Ctrl-C), and
``--json-lines`` read by a script, across a server restart."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pexpect
import pytest
import redis

from tenure import Lock, RLock, Semaphore
from tenure._cli import main
from tenure._server import ServerProcess

pytestmark = pytest.mark.once

MakeServer = Callable[..., ServerProcess]
T = TypeVar("T")
TENURE = [sys.executable, "-m", "tenure"]


def held(lease: T | None) -> T:
    """``lease``, asserted to be one (a blocking acquire returns it)."""
    assert lease is not None
    return lease


def environment(**extra: str) -> dict[str, str]:
    """This process's environment without ``REDIS_URL``, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(TERM="xterm-256color", **extra)
    return env


def spawn_top(url: str, *args: str, width: int = 200) -> pexpect.spawn:
    """``tenure --url URL top ARGS`` in a pseudo-terminal ``width`` columns wide."""
    return pexpect.spawn(
        sys.executable,
        ["-m", "tenure", "--url", url, "top", *args],
        env=environment(),
        dimensions=(40, width),
        encoding="utf-8",
        timeout=15,
        # top leaves a signal it finds ignored as it is (nohup): its own
        # terminal's signals at their defaults, whatever the test run's are
        preexec_fn=_default_signals,
    )


def _default_signals() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def ended(child: pexpect.spawn) -> int:
    """The exit status of ``child`` once its output ends (``-1`` if a signal killed it)."""
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus if child.signalstatus is None else -1


def test_top_shows_a_lock_while_it_is_held_and_quits_with_q(url: str, r: redis.Redis) -> None:
    child = spawn_top(url, "--interval", "0.2")
    try:
        child.expect("no lock held")
        lease = held(Lock(r, "orders:42", ttl=30, label="web-3 job 42").acquire())
        child.expect(r"orders:42\s+Lock\s+")
        child.expect("web-3 job 42")  # the holder, by its label, as ls shows it
        lease.release()
        child.expect("no lock held")  # gone from the table once free
        child.send("q")
        assert ended(child) == 0
    finally:
        child.close(force=True)


def test_top_keys_cycle_the_sort_and_show_the_free_ones(url: str, r: redis.Redis) -> None:
    held(Lock(r, "idle").acquire()).release()  # its fence stays: free, but found
    busy = held(RLock(r, "busy", ttl=30).acquire())
    child = spawn_top(url, "--interval", "0.2")
    try:
        child.expect(r"1 shown of 2 \(free ones hidden\), sort name")
        child.expect("busy")
        child.send("a")
        child.expect(r"2 shown of 2, sort name")
        child.expect("idle")
        child.send("s")
        child.expect("sort held")
        child.expect(r"HELD FOR ▼")
        for sort in ("ttl", "waiters", "fence", "name"):
            child.send("s")
            child.expect(f"sort {sort}")
        child.sendintr()  # Ctrl-C quits cleanly too
        assert ended(child) == 0
    finally:
        child.close(force=True)
        busy.release()


def test_top_takes_no_function_or_arrow_key_for_one_of_its_keys(url: str, r: redis.Redis) -> None:
    """A function or arrow key sends an escape sequence whose last letter may
    be one of top's keys (F2 is ESC O Q, F1 ESC O P, shift-Tab ESC [ Z): none
    is taken for one; a key typed with it still counts."""
    held(Lock(r, "idle").acquire()).release()
    child = spawn_top(url, "--interval", "0.2")
    try:
        child.expect(r"0 shown of 1 \(free ones hidden\), sort name")
        for sequence in ("\x1bOQ", "\x1b[1;2Q", "\x1bOS", "\x1b[A", "\x1b"):
            child.send(sequence)
        child.expect(r"0 shown of 1 \(free ones hidden\), sort name")  # still running
        child.send("a\x1bOQ")  # a key, then a sequence read with it
        child.expect(r"1 shown of 1, sort name")
        child.send("q")
        assert ended(child) == 0
    finally:
        child.close(force=True)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_top_ended_by_a_signal_gives_the_terminal_back(url: str, signum: int) -> None:
    """Ctrl-C, ``kill PID`` or the terminal's hang-up end top as ``q`` does,
    even in its first draw (the signal sent as soon as the table shows): the
    terminal back in its own mode (echo, line editing), off the alternate
    screen, the cursor shown; the exit status says which signal (0 for
    Ctrl-C)."""
    for _ in range(3):
        child = spawn_top(url, "--interval", "0.2")
        try:
            cooked = termios.tcgetattr(child.child_fd)[3] & (termios.ICANON | termios.ECHO)
            child.expect("no lock held")
            child.kill(signum)
            child.expect(pexpect.EOF)
            mode = termios.tcgetattr(child.child_fd)[3] & (termios.ICANON | termios.ECHO)
            assert mode == cooked
            tail = repr(child.before[-300:])
            assert "\x1b[?1049l" in child.before, tail  # the alternate screen left
            assert "\x1b[?25h" in child.before, tail  # the cursor shown again
            child.close()
            assert child.exitstatus == (0 if signum == signal.SIGINT else 128 + signum)
        finally:
            child.close(force=True)


def test_top_shows_an_error_while_the_server_is_down_then_recovers(
    make_server: MakeServer,
) -> None:
    server = make_server()
    client = redis.Redis.from_url(server.url)
    lease = held(Semaphore(client, "gpus", permits=4).acquire(3))
    child = spawn_top(server.url, "--interval", "0.2")
    try:
        child.expect(r"gpus\s+Semaphore\s+")
        child.expect("3/4")
        server.stop()
        child.expect("server unreachable: ConnectionError")
        child.expect("the table is of")  # the last table stays, marked stale
        server.start()  # empty: nothing persisted
        child.expect("no lock held")
        child.send("q")
        assert ended(child) == 0
    finally:
        child.close(force=True)
        del lease  # lost with the restart


def test_top_reads_q_while_its_refresh_is_slower_than_the_interval(
    make_server: MakeServer,
) -> None:
    """A paused server makes each refresh wait for its timeout (seconds, far
    beyond ``--interval``): q still quits, at the end of the refresh under way."""
    server = make_server()
    child = spawn_top(server.url, "--interval", "0.1")
    try:
        child.expect("no lock held")
        server.pause()
        try:
            child.expect("server unreachable: TimeoutError", timeout=30)
            child.send("q")
            # at the end of the refresh under way (each call waits 5 s at most;
            # a reconnection makes two), the server still paused
            child.expect(pexpect.EOF, timeout=40)
            assert ended(child) == 0
        finally:
            server.resume()
    finally:
        child.close(force=True)


def tenure_lines(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> list[Any]:
    """Run ``tenure --url URL top --json-lines ARGS`` in-process: its lines, parsed."""
    status = main(["--url", url, "top", "--json-lines", *args])
    out, err = capsys.readouterr()
    assert status == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_json_lines_one_object_per_refresh(
    url: str, r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = held(Lock(r, "orders:1", ttl=30).acquire())
    sem = held(Semaphore(r, "gpus", permits=2).acquire())
    held(Lock(r, "other:1").acquire()).release()
    frames = tenure_lines(capsys, url, "--interval", "0.1", "-n", "3", "--sort", "held")
    assert len(frames) == 3
    assert frames[0]["time"] < frames[1]["time"] < frames[2]["time"]
    last = frames[-1]
    assert {
        k: last[k] for k in ("prefix", "pattern", "sort", "all", "shown", "total", "error")
    } == {
        "prefix": "tenure:",
        "pattern": "*",
        "sort": "held",
        "all": False,
        "shown": 2,
        "total": 3,
        "error": None,
    }
    locks = {x["name"]: x for x in last["locks"]}
    assert locks["orders:1"]["holder"] == lock.owner
    assert locks["orders:1"]["held_for_at_least"] is False  # from its fence
    assert 0 <= locks["orders:1"]["held_for"] < 30
    assert locks["gpus"]["holders"][0]["token"] == sem.owner and locks["gpus"]["permits"] == 2
    assert locks["gpus"]["held_for_at_least"] is True  # a lease has no fence of its own
    assert [x["name"] for x in last["locks"]] == ["orders:1", "gpus"]  # longest held first
    # the same objects as ls --json's, two keys added
    main(["--url", url, "ls", "--json"])
    listed = {x["name"]: x for x in json.loads(capsys.readouterr()[0])["locks"]}
    for name, one in locks.items():
        assert set(one) == {*listed[name], "held_for", "held_for_at_least"}
        same = ("kind", "key", "held", "holder", "count", "fence", "waiters")
        assert [one[k] for k in same] == [listed[name][k] for k in same]
    every = tenure_lines(capsys, url, "other:*", "--all", "-n", "1")
    assert [x["name"] for x in every[0]["locks"]] == ["other:1"]
    assert every[0]["locks"][0]["held"] is False and every[0]["pattern"] == "other:*"


def test_json_lines_report_a_server_restart_and_go_on(make_server: MakeServer) -> None:
    server = make_server()
    client = redis.Redis.from_url(server.url)
    Lock(client, "job", ttl=30).acquire()
    top = subprocess.Popen(
        [*TENURE, "--url", server.url, "top", "--json-lines", "--interval", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )
    assert top.stdout is not None

    def next_frame() -> Any:
        line = top.stdout.readline() if top.stdout else ""
        assert line, top.stderr.read() if top.stderr else ""
        return json.loads(line)

    try:
        assert [x["name"] for x in next_frame()["locks"]] == ["job"]
        server.stop()
        while (frame := next_frame())["error"] is None:
            pass
        assert "ConnectionError" in frame["error"] and frame["locks"] == []
        server.start()
        Lock(redis.Redis.from_url(server.url), "after").acquire()
        while not (frame := next_frame())["locks"]:
            assert frame["error"] is None or "Error" in frame["error"]
        assert [x["name"] for x in frame["locks"]] == ["after"] and frame["error"] is None
    finally:
        top.send_signal(2)  # Ctrl-C
        assert top.wait(15) == 0
        top.stdout.close()
        if top.stderr:
            top.stderr.close()


def test_json_lines_stop_quietly_when_the_reader_goes(url: str, r: redis.Redis) -> None:
    Lock(r, "piped").acquire()
    pipe = subprocess.run(
        f"{sys.executable} -m tenure --url {url} top --json-lines --interval 0.05 | head -n 2",
        shell=True,
        capture_output=True,
        text=True,
        env=environment(),
        timeout=30,
    )
    assert len(pipe.stdout.splitlines()) == 2 and pipe.stderr == ""


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    """A fresh ``XDG_RUNTIME_DIR`` (short: unix socket paths are), its shared
    server stopped at the end."""
    path = Path(tempfile.mkdtemp(prefix="tenure-top-", dir="/tmp"))
    yield path
    subprocess.run(
        [sys.executable, "-m", "tenure", "server", "stop"],
        env=environment(XDG_RUNTIME_DIR=str(path)),
        capture_output=True,
        timeout=60,
    )
    shutil.rmtree(path, ignore_errors=True)


def test_top_without_a_url_uses_the_shared_server_and_names_it(runtime_dir: Path) -> None:
    env = environment(XDG_RUNTIME_DIR=str(runtime_dir))
    cli = [sys.executable, "-m", "tenure"]
    none = subprocess.run([*cli, "top", "-n", "1"], env=env, capture_output=True, text=True)
    assert none.returncode == 2 and "tenure server start" in none.stderr
    started = subprocess.run([*cli, "server", "start"], env=env, capture_output=True, text=True)
    assert started.returncode == 0, started.stderr
    shared = started.stdout.strip()
    Lock(redis.Redis.from_url(shared), "nightly", ttl=30).acquire()
    done = subprocess.run(
        [*cli, "top", "--json-lines", "-n", "1"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0 and f"the shared server at {shared}" in done.stderr
    assert [x["name"] for x in json.loads(done.stdout)["locks"]] == ["nightly"]


def test_top_without_a_terminal_prints_its_table(url: str, r: redis.Redis) -> None:
    held(Lock(r, "batch:7", ttl=30, label="cron-batch-7").acquire())
    done = subprocess.run(
        [*TENURE, "--url", url, "top", "-n", "2", "--interval", "0.1", "--sort", "ttl"],
        capture_output=True,
        text=True,
        env=environment(COLUMNS="200"),
        stdin=subprocess.DEVNULL,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert "TTL ▼" in done.stdout and "sort ttl" in done.stdout
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("batch:7")]
    assert line.split()[:2] == ["batch:7", "Lock"] and line.split()[-1] == "cron-batch-7"


def test_top_with_its_standard_input_closed_prints_its_table(url: str, r: redis.Redis) -> None:
    """Started with no standard input at all (``0<&-``, as some daemons and
    job runners do: ``sys.stdin`` is ``None``), top reads no keys and shows
    its table."""
    held(Lock(r, "closed:1", ttl=30, label="closed-stdin-1").acquire())
    done = subprocess.run(
        [*TENURE, "--url", url, "top", "-n", "2", "--interval", "0.1"],
        capture_output=True,
        text=True,
        env=environment(COLUMNS="200"),
        preexec_fn=lambda: os.close(0),
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("closed:1")]
    assert line.split()[-1] == "closed-stdin-1"
