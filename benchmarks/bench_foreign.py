"""How a foreign client fares on an exact key shared with tenure (``Lock(key=K)``).

Two tenure processes and one foreign process loop on one key for a fixed wall
time: acquire, hold ``--hold`` (1 ms), release, then ``--think`` outside the lock
(0: ask again at once; the foreign client has its own ``--foreign-think``). Every
party records its sections on the shared monotonic clock; the run checks that
no two sections overlap and reports, per foreign client:

- sections per party and the foreign client's share of all sections;
- hand-offs between parties in the order of the sections, and the foreign <->
  tenure ones among them (the number the issue counted);
- the longest run of tenure sections between two foreign ones, and the longest
  time the foreign client went without the key;
- sections per second in all (what fairness costs tenure).

The foreign clients:

- ``node-redlock``: the npm package ``redlock`` (``--redlock-version``, default
  the registry's latest, 4.2.0) with ``ioredis``, installed on first use with
  ``npm`` into ``--cache`` (``~/.cache/tenure-bench/node`` by default); it polls
  with its own defaults (retryDelay 200 ms, retryJitter 100 ms: a retry every
  100-300 ms) unless ``--redlock-retry-delay`` / ``--redlock-retry-jitter`` say
  otherwise. Skipped, with a note, when ``node`` or ``npm`` is missing.
- ``redis-py``: redis-py's ``Lock`` with ``sleep=--redis-py-sleep`` (its default,
  0.1 s, unless given).

Usage::

    .venv/bin/python benchmarks/bench_foreign.py                       # both, 4 s each
    .venv/bin/python benchmarks/bench_foreign.py --foreign redis-py --seconds 3
    .venv/bin/python benchmarks/bench_foreign.py --rounds 2 --json out.json
    .venv/bin/python benchmarks/bench_foreign.py --tenure-only        # no foreign client

``--rounds N`` alternates the foreign clients N times (the machine is shared:
compare numbers within one run).

A poller gets at most one hold per poll, so its share follows its retry period
(node-redlock's ``retryDelay`` / ``retryJitter``, redis-py's ``sleep``), not the
client: with 10 ms windows every third hold, node-redlock at ``retryDelay`` 10
and redis-py at ``sleep=0.01`` got about the same share, and so did node-redlock
at its defaults and redis-py at ``sleep=0.2`` (``--redlock-retry-delay 10
--redlock-retry-jitter 5``, ``--redis-py-sleep 0.2``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis

from tenure import Lock
from tenure._keys import lock_keys
from tenure._server import ServerProcess, server_version

HERE = Path(__file__).resolve().parent
NODE_WORKER = HERE / "foreign_redlock.js"
#: The lease every party asks for, seconds: far longer than any section.
TTL = 10.0

Section = tuple[str, float, float]  # (party, start, end) on time.monotonic()


# --- the workers (each its own process) ---------------------------------------------------------


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.monotonic()))


def tenure_worker(port: int, key: str, start: float, end: float, hold: float, think: float) -> Any:
    client = redis.Redis(port=port)
    lock = Lock(client, key=key, ttl=TTL)
    sections: list[tuple[float, float]] = []
    _sleep_until(start)
    while time.monotonic() < end:
        lease = lock.acquire(timeout=max(0.0, end - time.monotonic()))
        if lease is None:
            break
        began = time.monotonic()
        time.sleep(hold)
        sections.append((began, time.monotonic()))
        lease.release()
        if think:
            time.sleep(think)
    client.close()
    return {"sections": sections}


def redis_py_worker(
    port: int, key: str, start: float, end: float, hold: float, think: float, sleep: float
) -> Any:
    client = redis.Redis(port=port)
    theirs = client.lock(key, timeout=TTL, sleep=sleep)
    sections: list[tuple[float, float]] = []
    _sleep_until(start)
    while time.monotonic() < end:
        if not theirs.acquire(blocking_timeout=max(0.01, end - time.monotonic())):
            break
        began = time.monotonic()
        time.sleep(hold)
        sections.append((began, time.monotonic()))
        theirs.release()
        if think:
            time.sleep(think)
    client.close()
    return {"sections": sections}


def _worker_main(argv: list[str]) -> None:
    kind, out = argv[0], argv[-1]
    port, key, start, end, hold, think = (
        int(argv[1]),
        argv[2],
        float(argv[3]),
        float(argv[4]),
        float(argv[5]),
        float(argv[6]),
    )
    if kind == "tenure":
        result = tenure_worker(port, key, start, end, hold, think)
    else:
        result = redis_py_worker(port, key, start, end, hold, think, float(argv[7]))
    Path(out).write_text(json.dumps(result))


# --- node-redlock, installed on demand ----------------------------------------------------------


def node_redlock(cache: Path, version: str) -> tuple[list[str], dict[str, str]] | str:
    """The command and environment that run the node worker, or why not."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        return "node or npm not found"
    where = cache / f"redlock-{version}"
    if not (where / "node_modules" / "redlock").is_dir():
        where.mkdir(parents=True, exist_ok=True)
        log(f"installing redlock@{version} and ioredis into {where} ...")
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(where),
             f"redlock@{version}", "ioredis@5"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            return f"npm install failed: {done.stderr.strip()[-300:]}"
    env = dict(os.environ, NODE_PATH=str(where / "node_modules"))
    return [node, str(NODE_WORKER)], env


# --- one run ------------------------------------------------------------------------------------


@dataclass
class Result:
    foreign: str
    seconds: float
    sections: dict[str, int]
    share: float  # the foreign client's share of all sections
    handoffs: int  # between parties, in the sections' order
    cross: int  # foreign <-> tenure among them
    longest_tenure_run: int  # tenure sections in a row between foreign ones
    longest_run_at_ms: float  # when that run began, after the first section
    longest_foreign_gap_ms: float  # the longest time the foreign client went without the key
    per_second: float
    idle: float  # the share of the time the key was held by nobody
    give_ups: int  # node-redlock: lock() calls that ran out of retries
    overlaps: int
    # from the foreign client's first section after tenure first saw it hold the
    # key (its foreign key appeared), when the documented bound applies:
    seen_ms: float | None  # when tenure first saw it, after the start
    steady_sections: int
    steady_share: float | None
    steady_longest_tenure_run: int | None
    steady_per_second: float | None
    calls_per_section: float = 0.0  # script calls (every party's) per section


def analyse(
    foreign: str, seconds: float, sections: list[Section], give_ups: int, seen: float = math.inf
) -> Result:
    """The figures of one run; ``seen``: when tenure first saw a foreign holder,
    in seconds after the start (the bound holds from then on)."""
    ordered = sorted(sections, key=lambda s: s[1])
    steady = _after(ordered, foreign, (ordered[0][1] if ordered else 0.0) + seen)
    overlaps = sum(1 for a, b in itertools.pairwise(ordered) if a[2] > b[1])
    counts: dict[str, int] = {}
    for who, _, _ in ordered:
        counts[who] = counts.get(who, 0) + 1
    side = ["foreign" if who == foreign else "tenure" for who, _, _ in ordered]
    handoffs = sum(1 for a, b in itertools.pairwise(ordered) if a[0] != b[0])
    cross = sum(1 for a, b in itertools.pairwise(side) if a != b)
    run = longest = 0
    longest_at = 0.0
    for i, s in enumerate(side):
        run = run + 1 if s == "tenure" else 0
        if run > longest:
            longest, longest_at = run, ordered[i - run + 1][1] - ordered[0][1]
    mine = [s for s in ordered if s[0] == foreign]
    first = ordered[0][1] if ordered else 0.0
    last = ordered[-1][2] if ordered else 0.0
    edges = [first] + [t for s in mine for t in (s[1], s[2])] + [last]
    gaps = [edges[i + 1] - edges[i] for i in range(0, len(edges) - 1, 2)]
    held = sum(e - b for _, b, e in ordered)
    total = len(ordered)
    mine_after = [i for i, s in enumerate(steady) if s[0] == foreign]
    steady_runs = [b - a - 1 for a, b in itertools.pairwise(mine_after)]
    return Result(
        foreign,
        seconds,
        counts,
        counts.get(foreign, 0) / total if total else 0.0,
        handoffs,
        cross,
        longest,
        longest_at * 1000,
        max(gaps, default=0.0) * 1000,
        total / seconds,
        1 - held / (last - first) if last > first else 0.0,
        give_ups,
        overlaps,
        seen * 1000 if math.isfinite(seen) else None,
        len(steady),
        (len(mine_after) / len(steady)) if steady else None,
        max(steady_runs, default=None),
        len(steady) / (steady[-1][2] - steady[0][1]) if len(steady) > 1 else None,
    )


def _after(ordered: list[Section], foreign: str, t: float) -> list[Section]:
    """The sections from the foreign client's first one that began after ``t``."""
    for i, s in enumerate(ordered):
        if s[0] == foreign and s[1] > t:
            return ordered[i:]
    return []


def run_once(args: argparse.Namespace, port: int, foreign: str, n: int) -> Result | str:
    key = f"bench:foreign:{n}"
    start = time.monotonic() + 1.0  # every process is up and connected by then
    end = start + args.seconds
    common = [str(port), key, repr(start), repr(end), repr(args.hold)]
    procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    give_ups = 0
    calls_before = _calls(port)
    with tempfile.TemporaryDirectory(prefix="bench-foreign-") as tmp:
        me = [sys.executable, str(Path(__file__).resolve()), "--worker"]
        for i in range(args.tenure):
            out = Path(tmp) / f"t{i}.json"
            cmd = [*me, "tenure", *common, repr(args.think), str(out)]
            procs.append((f"tenure-{i}", subprocess.Popen(cmd), out))
        if foreign == "redis-py":
            out = Path(tmp) / "f.json"
            cmd = [*me, "redis-py", *common, repr(args.foreign_think)]
            cmd += [repr(args.redis_py_sleep), str(out)]
            procs.append((foreign, subprocess.Popen(cmd), out))
        elif foreign == "node-redlock":
            how = node_redlock(args.cache, args.redlock_version)
            if isinstance(how, str):
                for _, p, _ in procs:
                    p.kill()
                return how
            cmd, env = how
            for name, value in (
                ("REDLOCK_RETRY_DELAY", args.redlock_retry_delay),
                ("REDLOCK_RETRY_JITTER", args.redlock_retry_jitter),
            ):
                if value is not None:
                    env[name] = str(value)
            out = Path(tmp) / "f.json"
            cmd = [*cmd, *common, repr(args.foreign_think), str(out)]
            procs.append((foreign, subprocess.Popen(cmd, env=env), out))
        seen = _first_seen(port, key, end)
        sections: list[Section] = []
        for name, proc, out in procs:
            if proc.wait(timeout=args.seconds + 60) != 0:
                return f"{name} worker failed ({proc.returncode})"
            data = json.loads(out.read_text())
            give_ups += int(data.get("give_ups", 0))
            sections += [(name, float(b), float(e)) for b, e in data["sections"]]
    calls = _calls(port) - calls_before
    # every tenure party is "tenure" for the shares; the foreign keeps its name
    result = analyse(foreign, args.seconds, sections, give_ups, seen - start)
    result.calls_per_section = calls / max(1, len(sections))
    return result


def _calls(port: int) -> int:
    """Script calls (EVAL, EVALSHA) the server has run so far, every client's:
    tenure's attempts, polls and releases, node-redlock's locks and unlocks,
    redis-py's releases (its SET NX polls are not counted)."""
    client = redis.Redis(port=port)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return sum(
        int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_eval", "cmdstat_evalsha")
    )


def _first_seen(port: int, key: str, end: float) -> float:
    """When tenure first saw a foreign holder of ``key`` (its foreign key
    appeared), watching until ``end``; ``inf`` if never."""
    foreign = lock_keys(None, key=key, prefix="tenure:").foreign
    client = redis.Redis(port=port)
    try:
        while time.monotonic() < end:
            if client.exists(foreign):
                return time.monotonic()
            time.sleep(0.001)
    finally:
        client.close()
    return math.inf


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def show(r: Result) -> str:
    parts = ", ".join(f"{k} {v}" for k, v in sorted(r.sections.items()))
    total = sum(r.sections.values())
    return (
        f"{r.foreign:>12}: {total} sections ({parts}); foreign share {r.share:.1%}; "
        f"hand-offs {r.handoffs}, foreign<->tenure {r.cross} ({r.cross / max(total, 1):.1%} of "
        f"sections); longest tenure run {r.longest_tenure_run} (at {r.longest_run_at_ms:.0f} ms); "
        f"longest foreign gap "
        f"{r.longest_foreign_gap_ms:.0f} ms; {r.per_second:.0f} sections/s; key idle "
        f"{r.idle:.0%}; {r.calls_per_section:.1f} script calls per section"
        + (f"; give-ups {r.give_ups}" if r.give_ups else "")
        + (f"; OVERLAPS {r.overlaps}" if r.overlaps else "")
        + (
            f"\n{'':>14}tenure first saw it at {r.seen_ms:.0f} ms; from its next section: "
            f"{r.steady_sections} sections, foreign share {r.steady_share:.1%}, longest "
            f"tenure run {r.steady_longest_tenure_run}, {r.steady_per_second:.0f} sections/s"
            if r.seen_ms is not None and r.steady_sections > 1
            else ""
        )
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        _worker_main(argv[1:])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--foreign", choices=("both", "node-redlock", "redis-py"), default="both")
    p.add_argument("--tenure-only", action="store_true", help="no foreign client (the cost)")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--tenure", type=int, default=2, help="tenure processes")
    p.add_argument("--hold", type=float, default=0.001)
    p.add_argument("--think", type=float, default=0.0, help="tenure's pause after a release")
    p.add_argument("--foreign-think", type=float, default=0.0)
    p.add_argument("--redis-py-sleep", type=float, default=0.1)
    p.add_argument("--redlock-version", default="4.2.0")
    p.add_argument("--redlock-retry-delay", type=int)
    p.add_argument("--redlock-retry-jitter", type=int)
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "tenure-bench" / "node")
    p.add_argument("--server", help="the redis-server / valkey-server binary to start")
    p.add_argument("--port", type=int, help="use a running server on 127.0.0.1:PORT")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    foreigns = ["none"] if args.tenure_only else (
        ["node-redlock", "redis-py"] if args.foreign == "both" else [args.foreign]
    )  # fmt: skip
    results: list[Result] = []
    server = None if args.port else ServerProcess(args.server).start()
    try:
        port = args.port or (server.port if server else 0)
        if server:
            log(f"server: {server_version(server.binary)}")
        n = 0
        for _ in range(args.rounds):
            for foreign in foreigns:
                n += 1
                got = run_once(args, port, foreign, n)
                if isinstance(got, str):
                    log(f"{foreign}: skipped: {got}")
                    continue
                results.append(got)
                print(show(got), flush=True)
    finally:
        if server:
            server.close()
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 1 if any(r.overlaps for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
