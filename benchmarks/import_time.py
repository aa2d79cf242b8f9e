"""Benchmark the time ``import tenure`` takes against ``import redis, redis.asyncio``.

Each run starts fresh interpreters, alternating between the statements so
that a burst of load on the machine falls on all of them:

1. ``python -X importtime -c STATEMENT``: the import's own time, the sum of the
   cumulative times of the top-level imports the statement made (the lines
   after the interpreter's start-up, ``site`` and what it imports);
2. ``python -c STATEMENT``: the interpreter's wall time and CPU time (user +
   system, from ``wait4``), start-up included; ``python -c pass`` is measured
   too, so that the start-up can be taken off. The CPU time moves least when
   other processes load the machine.

The statements: ``import tenure``, ``import redis, redis.asyncio`` and
``import tenure; tenure.AsyncLock`` (an asyncio program's import: tenure
imports its ``Async*`` classes on their first use). Reported: the median,
minimum and maximum of each, and each tenure statement's ratios to redis's
(of the medians, of the minima, and the spread of the ratios within the
alternated pairs). ``import tenure`` imports redis and redis.asyncio's
modules itself, so a ratio cannot go much below 1.0.

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
    .venv/bin/python benchmarks/import_time.py --hide opentelemetry
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
#: An asyncio program's import: the ``Async*`` classes are imported on first use.
TENURE_ASYNC = "import tenure; tenure.AsyncLock"
#: The statements measured with ``-X importtime`` (``pass`` only by wall and CPU time).
STATEMENTS = (TENURE, REDIS, TENURE_ASYNC)


@dataclass
class Samples:
    """The measured times of one statement, in seconds."""

    statement: str
    importtime: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


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


def child_env(cache: str, bytecode: bool, hide: Sequence[str] = ()) -> dict[str, str]:
    """The environment of the measured interpreters: ``hide``, modules they can't
    import (a ``sitecustomize`` in ``cache`` puts ``None`` in ``sys.modules``)."""
    env = dict(os.environ)
    if hide:
        folder = os.path.join(cache, "hide")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "sitecustomize.py"), "w") as f:
            f.write(f"import sys\nsys.modules.update(dict.fromkeys({list(hide)!r}))\n")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [folder, env.get("PYTHONPATH")]))
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


def run_wall(python: str, statement: str, env: dict[str, str]) -> tuple[float, float]:
    """One fresh interpreter's wall time and CPU time (user + system) to run
    ``statement`` and exit, in seconds."""
    start = time.perf_counter()
    child = subprocess.Popen([python, "-c", statement], env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, child.args)
    return wall, usage.ru_utime + usage.ru_stime


def measure(python: str, runs: int, env: dict[str, str], warm: bool) -> dict[str, Samples]:
    """``runs`` alternated measurements of each statement (and of ``pass``'s)."""
    samples = {s: Samples(s) for s in (*STATEMENTS, "pass")}
    if warm:
        for statement in samples:
            run_wall(python, statement, env)
    for _ in range(runs):
        for statement in STATEMENTS:
            samples[statement].importtime.append(
                statement_time(run_importtime(python, statement, env))
            )
        for statement in samples:
            wall, cpu = run_wall(python, statement, env)
            samples[statement].wall.append(wall)
            samples[statement].cpu.append(cpu)
    return samples


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, minimum and maximum, in milliseconds."""
    return {
        "median_ms": round(statistics.median(values) * 1e3, 1),
        "min_ms": round(min(values) * 1e3, 1),
        "max_ms": round(max(values) * 1e3, 1),
    }


def ratios(samples: dict[str, Samples], statement: str) -> dict[str, float]:
    """``statement``'s times as ratios of ``import redis, redis.asyncio``'s: of the
    ``-X importtime`` medians (and minima), the median of the ratios within each
    alternated pair, and of the wall and CPU medians less ``pass``'s."""
    ours, redis, bare = samples[statement], samples[REDIS], samples["pass"]
    med = statistics.median
    paired = [t / r for t, r in zip(ours.importtime, redis.importtime, strict=True)]
    out = {
        "importtime_median": med(ours.importtime) / med(redis.importtime),
        "importtime_min": min(ours.importtime) / min(redis.importtime),
        "importtime_per_pair_median": med(paired),
        "importtime_per_pair_min": min(paired),
        "importtime_per_pair_max": max(paired),
    }
    for kind in ("wall", "cpu"):
        base = med(getattr(bare, kind))
        out[f"{kind}_median_less_pass"] = (med(getattr(ours, kind)) - base) / (
            med(getattr(redis, kind)) - base
        )
    return {k: round(v, 3) for k, v in out.items()}


def report(samples: dict[str, Samples]) -> dict[str, object]:
    """The medians, spreads and ratios of a measurement."""
    return {
        "runs": len(samples[TENURE].importtime),
        "times": {
            kind: {
                s.statement: summary(getattr(s, kind)) for s in samples.values() if getattr(s, kind)
            }
            for kind in ("importtime", "wall", "cpu")
        },
        "ratios": {s: ratios(samples, s) for s in STATEMENTS if s != REDIS},
    }


def print_report(out: dict[str, object]) -> None:
    """The report as a few readable lines."""
    print(f"runs: {out['runs']} of each, alternated")
    times = out["times"]
    assert isinstance(times, dict)
    for kind, table in times.items():
        for statement, row in table.items():
            print(
                f"  {kind:10} {statement:36} median {row['median_ms']:7.1f} ms"
                f"  (min {row['min_ms']:.1f}, max {row['max_ms']:.1f})"
            )
    all_ratios = out["ratios"]
    assert isinstance(all_ratios, dict)
    for statement, row in all_ratios.items():
        print(f"ratio of `{statement}` to `{REDIS}`:")
        for name, value in row.items():
            print(f"  {name:28} {value:.3f}")


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
    parser.add_argument(
        "--hide",
        action="append",
        default=[],
        metavar="MODULE",
        help="measure as if MODULE were not installed (repeatable): opentelemetry,"
        " which redis imports when it can",
    )
    parser.add_argument("--json", help="write the report to this file")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="tenure-import-") as cache:
        env = child_env(cache, bytecode=not args.no_bytecode, hide=args.hide)
        out = report(measure(args.python, args.runs, env, warm=not args.no_bytecode))
        out["bytecode"] = not args.no_bytecode
        out["hidden"] = args.hide
        print_report(out)
        if args.tree:
            print_tree(args.python, env, args.tree)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
