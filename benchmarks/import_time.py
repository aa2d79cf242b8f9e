"""Benchmark the time ``import tenure`` takes against ``import redis, redis.asyncio``.

Each run starts fresh interpreters, alternating between the two statements so
that a burst of load on the machine falls on both:

1. ``python -X importtime -c STATEMENT``: the import's own time, the sum of the
   cumulative times of the top-level imports the statement made (the lines
   after the interpreter's start-up, ``site`` and what it imports);
2. ``python -c STATEMENT``: the interpreter's wall time, start-up included
   (a ``python -c pass`` run is measured too, so the import's share shows).

Reported: the median, minimum and maximum of each, and the ratio of the
medians (tenure / redis). ``import tenure`` imports redis and redis.asyncio
itself, so the ratio cannot go below 1.0.

The interpreters read and write their bytecode in a temporary cache
(``PYTHONPYCACHEPREFIX``), filled by a warm-up run of each statement before the
measured runs: an installed wheel's modules are compiled once at install time,
and an import that compiles its sources each time measures the compiler, not
the import. ``--no-bytecode`` measures that case instead
(``PYTHONDONTWRITEBYTECODE=1``: the modules that have no bytecode beside their
source, as a source checkout's, are compiled in each run).

Usage::

    .venv/bin/python benchmarks/import_time.py
    .venv/bin/python benchmarks/import_time.py --runs 31 --json out.json
    .venv/bin/python benchmarks/import_time.py --tree 25   # tenure's heaviest modules
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

TENURE = "import tenure"
REDIS = "import redis, redis.asyncio"


@dataclass
class Samples:
    """The measured times of one statement, in seconds."""

    statement: str
    importtime: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class ImportLine:
    """One line of ``-X importtime``'s report."""

    self_us: int
    cumulative_us: int
    depth: int
    name: str


def parse_importtime(stderr: str) -> list[ImportLine]:
    """The lines of ``-X importtime``'s report, in the order printed."""
    lines = []
    for line in stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        fields = line[len("import time:") :].split("|")
        if len(fields) != 3 or not fields[0].strip().isdigit():
            continue  # the header
        name = fields[2].rstrip()
        stripped = name.lstrip(" ")
        depth = (len(name) - len(stripped) - 1) // 2
        lines.append(ImportLine(int(fields[0]), int(fields[1]), depth, stripped))
    return lines


def statement_time(lines: Sequence[ImportLine]) -> float:
    """The seconds the statement's imports took: its top-level lines after ``site``."""
    after_site = False
    total = 0
    for line in lines:
        if line.depth != 0:
            continue
        if line.name == "site":
            after_site = True
        elif after_site:
            total += line.cumulative_us
    if not after_site:
        raise RuntimeError("no 'site' line in -X importtime's report")
    return total / 1e6


def child_env(cache: str, bytecode: bool) -> dict[str, str]:
    """The environment of the measured interpreters."""
    env = dict(os.environ)
    if bytecode:
        env["PYTHONPYCACHEPREFIX"] = cache
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env.pop("PYTHONPYCACHEPREFIX", None)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_importtime(python: str, statement: str, env: dict[str, str]) -> list[ImportLine]:
    """One fresh interpreter's ``-X importtime`` report of ``statement``."""
    done = subprocess.run(
        [python, "-X", "importtime", "-c", statement],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return parse_importtime(done.stderr)


def run_wall(python: str, statement: str, env: dict[str, str]) -> float:
    """One fresh interpreter's wall time to run ``statement`` and exit, in seconds."""
    start = time.perf_counter()
    subprocess.run([python, "-c", statement], env=env, check=True)
    return time.perf_counter() - start


def measure(python: str, runs: int, env: dict[str, str], warm: bool) -> dict[str, Samples]:
    """``runs`` alternated measurements of each statement (and of ``pass``'s wall time)."""
    samples = {s: Samples(s) for s in (TENURE, REDIS, "pass")}
    if warm:
        for statement in samples:
            run_wall(python, statement, env)
    for _ in range(runs):
        for statement in (TENURE, REDIS):
            samples[statement].importtime.append(
                statement_time(run_importtime(python, statement, env))
            )
        for statement in (TENURE, REDIS, "pass"):
            samples[statement].wall.append(run_wall(python, statement, env))
    return samples


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, minimum and maximum, in milliseconds."""
    return {
        "median_ms": round(statistics.median(values) * 1e3, 1),
        "min_ms": round(min(values) * 1e3, 1),
        "max_ms": round(max(values) * 1e3, 1),
    }


def report(samples: dict[str, Samples]) -> dict[str, object]:
    """The medians, spreads and ratios of a measurement."""
    tenure, redis, bare = samples[TENURE], samples[REDIS], samples["pass"]
    out: dict[str, object] = {
        "runs": len(tenure.importtime),
        "importtime": {
            TENURE: summary(tenure.importtime),
            REDIS: summary(redis.importtime),
        },
        "wall": {
            TENURE: summary(tenure.wall),
            REDIS: summary(redis.wall),
            "pass": summary(bare.wall),
        },
    }
    out["ratio_importtime"] = round(
        statistics.median(tenure.importtime) / statistics.median(redis.importtime), 3
    )
    base = statistics.median(bare.wall)
    out["ratio_wall_less_startup"] = round(
        (statistics.median(tenure.wall) - base) / (statistics.median(redis.wall) - base), 3
    )
    # The ratio within each alternated pair: its spread shows how much the
    # machine's load moved the medians.
    paired = sorted(t / r for t, r in zip(tenure.importtime, redis.importtime, strict=True))
    out["ratio_importtime_per_pair"] = {
        "median": round(statistics.median(paired), 3),
        "min": round(paired[0], 3),
        "max": round(paired[-1], 3),
    }
    return out


def print_report(out: dict[str, object]) -> None:
    """The report as a few readable lines."""
    print(f"runs: {out['runs']} of each, alternated")
    for kind in ("importtime", "wall"):
        table = out[kind]
        assert isinstance(table, dict)
        for statement, row in table.items():
            print(
                f"  {kind:10} {statement:30} median {row['median_ms']:7.1f} ms"
                f"  (min {row['min_ms']:.1f}, max {row['max_ms']:.1f})"
            )
    print(f"ratio tenure / redis, -X importtime medians: {out['ratio_importtime']}")
    print(f"  per alternated pair: {out['ratio_importtime_per_pair']}")
    print(f"ratio tenure / redis, wall medians less `pass`: {out['ratio_wall_less_startup']}")


def print_tree(python: str, env: dict[str, str], top: int) -> None:
    """The ``top`` heaviest modules (self time) that only ``import tenure`` imports."""
    tenure = run_importtime(python, TENURE, env)
    redis = {line.name for line in run_importtime(python, REDIS, env)}
    extra = [line for line in tenure if line.name not in redis]
    total = sum(line.self_us for line in extra)
    print(f"modules only `{TENURE}` imports: {len(extra)}, self time {total / 1e3:.1f} ms")
    for line in sorted(extra, key=lambda x: -x.self_us)[:top]:
        print(f"  {line.self_us / 1e3:6.2f} ms  {line.name}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="runs of each statement")
    parser.add_argument("--python", default=sys.executable, help="the interpreter measured")
    parser.add_argument(
        "--no-bytecode",
        action="store_true",
        help="compile every module's source in each run (no bytecode cache)",
    )
    parser.add_argument(
        "--tree", type=int, metavar="N", help="also list tenure's N heaviest modules"
    )
    parser.add_argument("--json", help="write the report to this file")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="tenure-import-") as cache:
        env = child_env(cache, bytecode=not args.no_bytecode)
        out = report(measure(args.python, args.runs, env, warm=not args.no_bytecode))
        out["bytecode"] = not args.no_bytecode
        print_report(out)
        if args.tree:
            print_tree(args.python, env, args.tree)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
