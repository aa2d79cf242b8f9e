"""What tenure's telemetry costs an uncontended ``Lock`` acquire+release cycle:
the client's CPU per cycle (``time.process_time``) of source trees side by side.

Each run is a child process that imports tenure from one tree, makes
``--cycles`` cycles on one server (started here, shared), and prints its CPU
and wall time per cycle; the trees' runs alternate (A B A B ...) so that a
machine's load falls on each alike, and the median of each is shown.

``--otel`` says what the children see of OpenTelemetry: ``blocked`` (its
import refused: as if it were not installed), ``api`` (installed, no provider
configured: the default), ``sdk`` (an SDK meter and tracer provider, with an
in-memory reader and exporter, given to ``configure_telemetry``).

    git archive <base> src | tar -x -C /tmp/base
    python benchmarks/bench_telemetry.py before=/tmp/base/src after=src --otel blocked
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import textwrap

from tenure._server import ServerProcess

_BLOCK = """
import importlib.abc, sys

class NoOtel(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ImportError(name)
        return None

sys.meta_path.insert(0, NoOtel())
"""

_SDK = """
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tenure import configure_telemetry

_tp = TracerProvider()
_tp.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
configure_telemetry(
    meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]), tracer_provider=_tp
)
"""

_RUN = """
import sys, time
import redis
from tenure import Lock

r = redis.Redis.from_url(sys.argv[1])
lock = Lock(r, "bench-telemetry", ttl=30)
n = int(sys.argv[2])
for _ in range(200):
    lock.acquire().release()
cpu, wall = time.process_time(), time.perf_counter()
for _ in range(n):
    lock.acquire().release()
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print(cpu / n * 1e6, wall / n * 1e6)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="label=path of a tree's src/")
    parser.add_argument("--otel", choices=("blocked", "api", "sdk"), default="blocked")
    parser.add_argument("--cycles", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    trees = [tree.split("=", 1) for tree in args.trees]
    prelude = {"blocked": _BLOCK, "api": "", "sdk": _SDK}[args.otel]
    results: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in trees}
    with ServerProcess(None) as server:
        for _ in range(args.rounds):
            for label, path in trees:
                if args.otel == "sdk" and label == trees[0][0]:
                    code = _RUN  # (a tree before configure_telemetry: nothing to give)
                else:
                    code = textwrap.dedent(prelude) + _RUN
                env = {**os.environ, "PYTHONPATH": os.path.abspath(path)}
                out = subprocess.run(
                    [sys.executable, "-c", code, server.url, str(args.cycles)],
                    capture_output=True,
                    text=True,
                    env=env,
                    check=True,
                ).stdout.split()
                results[label].append((float(out[0]), float(out[1])))
    print(f"otel={args.otel}, {args.cycles} cycles x {args.rounds} runs each, alternating")
    print("| tree | CPU µs/cycle (median) | min | max | wall µs/cycle (median) |")
    print("|---|---:|---:|---:|---:|")
    for label, runs in results.items():
        cpu = [c for c, _ in runs]
        wall = [w for _, w in runs]
        print(
            f"| {label} | {statistics.median(cpu):.1f} | {min(cpu):.1f} | {max(cpu):.1f} "
            f"| {statistics.median(wall):.1f} |"
        )


if __name__ == "__main__":
    main()
