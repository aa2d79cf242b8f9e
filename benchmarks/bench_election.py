"""Benchmark tenure's leader election: failover time, and how fast observers
learn of a change, against a polling peer.

One run against one server started here (``tenure._server.ServerProcess``, the
embedded Valkey unless ``--server``); every candidate and every observer is a
process of its own (this script, run with ``--child``), as they would be in a
service, and they tell the times of what they saw on their standard output
(``time.time()``: one machine, one clock).

Failover. A leader process leads an election with ``--ttl`` while
``--candidates`` processes wait in ``campaign``, and an observer process
follows ``observe()``. Each round either kills the leader (``kill -9``: its
lease ends by its ttl, at most ``ttl`` after its last renewal) or tells it to
``resign()`` (a hand-off: the next candidate is woken at once). Measured from
the kill (or the ``resign()`` call) to the moment the next candidate's
``campaign`` returned, and to the moment the observer saw that term
``elected``. The new leader is the next round's victim, and a new candidate
joins the line each round.

Observe latency. A leader in this process proclaims a value; the time from
the ``proclaim`` call to an ``observe()`` process seeing it, against the peer
approach: the leader ``SET``s a key, and a process ``GET``s it every
``--poll`` seconds (100 ms) until it changes. Proclaims and writes alternate,
with a random pause between. Idle cost, while nothing changes: the round
trips per second (scripts, or the poller's ``GET``) and the server's commands
per second (``INFO commandstats``: those a script runs count too; the
benchmark's own ``INFO`` left out), for the leader's watchdog alone, then per
observer and per poller.

Usage::

    .venv/bin/python benchmarks/bench_election.py            # ~1 min
    .venv/bin/python benchmarks/bench_election.py --quick    # ~25 s
    .venv/bin/python benchmarks/bench_election.py --ttl 5 --rounds 8 --markdown out.md
"""

from __future__ import annotations

import argparse
import os
import platform
import queue
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import redis

import tenure
from tenure._server import ServerProcess

ELECTION = "bench-failover"
OBSERVED = "bench-observe"
POLL_KEY = "bench-poll"
#: How long to wait for any one thing a child should say, seconds.
PATIENCE = 60.0


# -- the child processes --------------------------------------------------------


def _say(*words: object) -> None:
    print(*words, flush=True)


def child_candidate(url: str, name: str, ttl: float) -> None:
    """Campaign; say when elected; then resign when told (``resign`` on the
    standard input), or lead until killed."""
    client = redis.Redis.from_url(url)
    label = f"candidate {os.getpid()}"
    # warm up: the code paths of a campaign, an announce and a resignation run
    # once in this process before they are timed (a service's run many times)
    warm = tenure.Election(client, f"{name}-warm-{os.getpid()}", ttl=ttl, label=label)
    warmed = warm.campaign()
    assert warmed is not None
    with warmed:
        warmed.proclaim("warm")
    election = tenure.Election(client, name, ttl=ttl, label=label)
    _say("ready", time.time())
    leadership = election.campaign()
    assert leadership is not None
    _say("elected", time.time(), leadership.term)
    for line in sys.stdin:
        if line.strip() == "resign":
            _say("resigning", time.time())
            leadership.resign()
            return


def child_observer(url: str, name: str) -> None:
    """Say every event of ``observe()``, with the time it came."""
    client = redis.Redis.from_url(url)
    for event in tenure.Election(client, name).observe():
        value = "-" if event.value is None else event.value.decode()
        _say("event", time.time(), event.change, event.term, value)


def child_poller(url: str, key: str, every: float) -> None:
    """The peer approach: ``GET`` the key every ``every`` seconds; say each new value."""
    client = redis.Redis.from_url(url, decode_responses=True)
    last = client.get(key)
    _say("seen", time.time(), "-" if last is None else last)
    while True:
        time.sleep(every)
        value = client.get(key)
        if value != last:
            last = value
            _say("seen", time.time(), "-" if value is None else value)


# -- the parent -----------------------------------------------------------------


class Child:
    """A child process whose lines are read by a thread into a queue."""

    def __init__(self, *args: str, elected: queue.Queue[tuple[Child, list[str]]] | None = None):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--child", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[list[str]] = queue.Queue()
        self._elected = elected  # where its "elected" line goes instead, with the child
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            words = line.split()
            if self._elected is not None and words and words[0] == "elected":
                self._elected.put((self, words))
            else:
                self.lines.put(words)

    def expect(self, first: str, timeout: float = PATIENCE) -> list[str]:
        """The next line whose first word is ``first`` (earlier ones dropped)."""
        deadline = time.monotonic() + timeout
        while True:
            words = self.lines.get(timeout=max(0.001, deadline - time.monotonic()))
            if words and words[0] == first:
                return words

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@dataclass
class Failover:
    """Seconds from the kill or the resign call to the new leader's election."""

    campaign: list[float] = field(default_factory=list)
    observed: list[float] = field(default_factory=list)


def _queued(client: redis.Redis, name: str, count: int) -> None:
    """Wait until ``count`` candidates wait in line."""
    election = tenure.Election(client, name)
    deadline = time.monotonic() + PATIENCE
    while election.info().waiters < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} candidates never queued")
        time.sleep(0.01)


def _observed_elected(observer: Child, term: int) -> float:
    """When the observer saw ``term`` (or a later one) elected."""
    while True:
        words = observer.expect("event")
        if words[2] == "elected" and int(words[3]) >= term:
            return float(words[1])


def measure_failover(
    url: str, ttl: float, candidates: int, rounds: int
) -> tuple[Failover, Failover]:
    """``rounds`` kills and ``rounds`` resignations, alternating."""
    client = redis.Redis.from_url(url)
    elected: queue.Queue[tuple[Child, list[str]]] = queue.Queue()
    leader = Child("candidate", url, ELECTION, str(ttl), elected=elected)
    elected.get(timeout=PATIENCE)
    observer = Child("observer", url, ELECTION)
    observer.expect("event")  # (the current state: subscribed)
    waiting = [
        Child("candidate", url, ELECTION, str(ttl), elected=elected) for _ in range(candidates)
    ]
    killed, resigned = Failover(), Failover()
    try:
        for n in range(2 * rounds):
            _queued(client, ELECTION, candidates)
            time.sleep(random.uniform(0.0, ttl / 3))  # (anywhere between two renewals)
            if n % 2 == 0:
                start, into = time.time(), killed
                os.kill(leader.proc.pid, signal.SIGKILL)
            else:
                into = resigned
                leader.send("resign")
                start = float(leader.expect("resigning")[1])
            # the first candidate in line is the one elected
            new, words = elected.get(timeout=PATIENCE)
            waiting.remove(new)
            elected_at, term = float(words[1]), int(words[2])
            into.campaign.append(elected_at - start)
            into.observed.append(_observed_elected(observer, term) - start)
            leader.stop()
            leader = new
            waiting.append(Child("candidate", url, ELECTION, str(ttl), elected=elected))
    finally:
        for child in [leader, observer, *waiting]:
            child.stop()
        client.close()
    return killed, resigned


@dataclass
class Observe:
    """Seconds from the write to the observer seeing it, and idle commands/s."""

    observe: list[float] = field(default_factory=list)
    poll: list[float] = field(default_factory=list)
    idle: dict[str, Idle] = field(default_factory=dict)


def _calls(client: redis.Redis) -> dict[str, int]:
    """The server's calls per command so far (those run by scripts included)."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


@dataclass
class Idle:
    """What the server did per second over an idle stretch."""

    commands: float  # every command, those run inside scripts included
    scripts: float  # EVALSHA calls: one round trip each
    gets: float  # GET calls (the poller's round trips; scripts run GET too)

    def __sub__(self, other: Idle) -> Idle:
        return Idle(
            self.commands - other.commands, self.scripts - other.scripts, self.gets - other.gets
        )


def _idle(client: redis.Redis, seconds: float) -> Idle:
    """The server's work per second over ``seconds`` (the ``INFO`` asked here left out)."""
    before = _calls(client)
    time.sleep(seconds)
    after = _calls(client)
    delta = {name: after[name] - before.get(name, 0) for name in after if name != "info"}
    scripts = delta.get("evalsha", 0) + delta.get("evalsha_ro", 0) + delta.get("eval", 0)
    return Idle(sum(delta.values()) / seconds, scripts / seconds, delta.get("get", 0) / seconds)


def measure_observe(url: str, ttl: float, writes: int, poll: float, idle: float) -> Observe:
    client = redis.Redis.from_url(url)
    out = Observe()
    leadership = tenure.Election(client, OBSERVED, ttl=ttl, label="bench leader").campaign()
    assert leadership is not None
    client.delete(POLL_KEY)
    children: list[Child] = []
    try:
        alone = _idle(client, idle)
        out.idle["the leader's watchdog"] = alone
        observer = Child("observer", url, OBSERVED)
        children.append(observer)
        observer.expect("event")
        both = _idle(client, idle)
        out.idle["one observer (observe())"] = both - alone
        poller = Child("poller", url, POLL_KEY, str(poll))
        children.append(poller)
        poller.expect("seen")
        out.idle[f"peer: one poller (GET every {poll * 1000:g} ms)"] = _idle(client, idle) - both
        for i in range(writes):
            value = f"v{i}"
            time.sleep(random.uniform(0.02, 0.1))
            start = time.time()
            leadership.proclaim(value)
            while True:
                words = observer.expect("event")
                if words[2] == "proclaimed" and words[4] == value:
                    out.observe.append(float(words[1]) - start)
                    break
            time.sleep(random.uniform(0.02, 0.1))
            start = time.time()
            client.set(POLL_KEY, value)
            while True:
                words = poller.expect("seen")
                if words[2] == value:
                    out.poll.append(float(words[1]) - start)
                    break
        leadership.resign()
    finally:
        for child in children:
            child.stop()
        client.close()
    return out


# -- the report -----------------------------------------------------------------


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def report(
    ttl: float,
    poll: float,
    observe_ttl: float,
    candidates: int,
    killed: Failover,
    resigned: Failover,
    obs: Observe,
) -> str:
    lines = [
        f"**E1. Failover, ttl {ttl:g} s, {candidates} candidates waiting, "
        f"{len(killed.campaign)} kills and {len(resigned.campaign)} resignations (ms)**",
        "",
        "| how the leader went | seen by | p50 | p90 | max | p50 / ttl |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for how, series in (("kill -9", killed), ("resign()", resigned)):
        for by, values in (
            ("the candidate (campaign returned)", series.campaign),
            ("an observer (observe(): elected)", series.observed),
        ):
            lines.append(
                f"| {how} | {by} | {_ms(statistics.median(values))} | {_ms(_p(values, 0.9))} "
                f"| {_ms(max(values))} | {statistics.median(values) / ttl:.3f}x |"
            )
    p50_obs, p50_poll = statistics.median(obs.observe), statistics.median(obs.poll)
    lines += [
        "",
        f"**E2. Observe latency, {len(obs.observe)} writes each (ms)**",
        "",
        "| approach | p50 | p90 | max | p50 / observe() p50 |",
        "|---|---:|---:|---:|---:|",
        f"| tenure observe() after proclaim() | {_ms(p50_obs)} | {_ms(_p(obs.observe, 0.9))} "
        f"| {_ms(max(obs.observe))} | 1.00x |",
        f"| peer: GET every {poll * 1000:g} ms after SET | {_ms(p50_poll)} "
        f"| {_ms(_p(obs.poll, 0.9))} | {_ms(max(obs.poll))} | {p50_poll / p50_obs:.0f}x |",
        "",
        f"**E3. Idle cost, nothing changing (per second; the leader's ttl {observe_ttl:g} s)**",
        "",
        "| what | round trips | server commands (those in scripts too) |",
        "|---|---:|---:|",
    ]
    for what, idle in obs.idle.items():
        trips = idle.gets if what.startswith("peer") else idle.scripts
        lines.append(f"| {what} | {trips:.2f} | {idle.commands:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ttl", type=float, default=2.0, help="the failover leaders' ttl, s")
    parser.add_argument(
        "--observe-ttl", type=float, default=10.0, help="the observed leader's ttl, seconds"
    )
    parser.add_argument("--candidates", type=int, default=2, help="candidates waiting")
    parser.add_argument("--rounds", type=int, default=7, help="kills (and as many resigns)")
    parser.add_argument("--writes", type=int, default=60, help="proclaims (and as many SETs)")
    parser.add_argument("--poll", type=float, default=0.1, help="the poller's period, seconds")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds per idle measurement")
    parser.add_argument(
        "--quick", action="store_true", help="ttl 1 s, 3 rounds, 20 writes, idle 4 s (ttl 4 s)"
    )
    parser.add_argument("--server", default=None, help="redis-server/valkey-server binary")
    parser.add_argument("--markdown", default=None, help="also write the tables here")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        if kind == "candidate":
            child_candidate(rest[0], rest[1], float(rest[2]))
        elif kind == "observer":
            child_observer(rest[0], rest[1])
        else:
            child_poller(rest[0], rest[1], float(rest[2]))
        return
    if args.quick:
        args.ttl, args.rounds, args.writes = 1.0, 3, 20
        args.idle = args.observe_ttl = 4.0
    server = ServerProcess(args.server).start()
    try:
        killed, resigned = measure_failover(server.url, args.ttl, args.candidates, args.rounds)
        obs = measure_observe(server.url, args.observe_ttl, args.writes, args.poll, args.idle)
    finally:
        server.close()
    out = report(args.ttl, args.poll, args.observe_ttl, args.candidates, killed, resigned, obs)
    print(f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    print(out)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(out + "\n")


if __name__ == "__main__":
    main()
