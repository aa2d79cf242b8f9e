"""Where a contended hand-off's CPU goes: N worker processes (default 4) loop
*acquire, 1 ms, release* on one lock for S seconds; the hand-off p50 (next
acquire returned - previous release called, when someone waited), sections
per second, and per section: the workers' CPU (each thread's, from
``/proc/self/task``), the waiting threads' voluntary context switches and the
server's CPU (``INFO cpu``). tenure's ``Lock`` and python-redis-lock run in
turn, alternated, against one embedded server.

Usage::

    .venv/bin/python benchmarks/handoff_cpu.py
    .venv/bin/python benchmarks/handoff_cpu.py --workers 4 --seconds 3 --rounds 2
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Sequence
from multiprocessing.queues import Queue
from typing import Any

import redis

Hold = tuple[float, float, float, float]  # acquire called, returned, release called, returned


def _thread_stats() -> dict[str, float]:
    """CPU seconds and voluntary context switches of each thread of this process."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        name = names.get(int(tid), "other")
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out[f"cpu {name}"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        with open(f"/proc/self/task/{tid}/status") as f:
            status = f.read()
        out[f"cs {name}"] = float(status.split("voluntary_ctxt_switches:")[1].split()[0])
    return out


def worker(impl: str, url: str, name: str, start: float, end: float, out: Queue[Any]) -> None:
    client = redis.Redis.from_url(url)
    if impl == "tenure":
        import tenure

        lock = tenure.Lock(client, name, ttl=10)
        warm = tenure.Lock(client, f"{name}:warm:{os.getpid()}", ttl=10).acquire()
        assert warm is not None
        warm.release()

        def cycle() -> Hold:
            t0 = time.monotonic()
            lease = lock.acquire()
            assert lease is not None
            t1 = time.monotonic()
            time.sleep(0.001)
            t2 = time.monotonic()
            lease.release()
            return t0, t1, t2, time.monotonic()
    else:
        import redis_lock

        other = redis_lock.Lock(client, name, expire=10)

        def cycle() -> Hold:
            t0 = time.monotonic()
            other.acquire()
            t1 = time.monotonic()
            time.sleep(0.001)
            t2 = time.monotonic()
            other.release()
            return t0, t1, t2, time.monotonic()

    while time.monotonic() < start:
        time.sleep(0.0005)
    before = _thread_stats()
    holds = []
    while time.monotonic() < end:
        holds.append(cycle())
    after = _thread_stats()
    out.put((holds, {k: after[k] - before.get(k, 0.0) for k in after}))


def phase(impl: str, url: str, workers: int, seconds: float, tag: str) -> dict[str, float]:
    ctx = multiprocessing.get_context("fork")
    out: Queue[Any] = ctx.Queue()
    stats = redis.Redis.from_url(url)
    start = time.monotonic() + 1.0
    end = start + seconds
    procs = [
        ctx.Process(target=worker, args=(impl, url, f"cpu:{tag}", start, end, out))
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    time.sleep(max(0.0, start - time.monotonic()))
    cpu0 = stats.info("cpu")
    results = [out.get() for _ in procs]
    cpu1 = stats.info("cpu")
    for p in procs:
        p.join()
    holds = sorted(((h, i) for i, (hs, _) in enumerate(results) for h in hs), key=lambda x: x[0][1])
    gaps = [
        cur[1] - prev[2] for (prev, _), (cur, _) in itertools.pairwise(holds) if cur[0] <= prev[2]
    ]
    per: Counter[str] = Counter()
    for _, thread_stats in results:
        per.update(thread_stats)
    n = len(holds)
    server = sum(cpu1[k] - cpu0[k] for k in ("used_cpu_user", "used_cpu_sys"))
    row = {
        "hand-off p50 ms": statistics.median(gaps) * 1000,
        "sections/s": n / seconds,
        "client CPU µs": sum(v for k, v in per.items() if k.startswith("cpu ")) * 1e6 / n,
        "waiting threads' CPU µs": per["cpu MainThread"] * 1e6 / n,
        "hub reader CPU µs": per["cpu tenure-wake-hub"] * 1e6 / n,
        "waiting threads' switches": per["cs MainThread"] / n,
        "server CPU µs": server * 1e6 / n,
    }
    stats.close()
    return row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--server", help="redis-server/valkey-server to start")
    args = parser.parse_args(argv)
    from tenure._server import ServerProcess

    rows: list[tuple[str, dict[str, float]]] = []
    with ServerProcess(args.server) as server:
        for r in range(args.rounds):
            for impl in ("tenure", "python-redis-lock"):
                rows.append(
                    (impl, phase(impl, server.url, args.workers, args.seconds, f"{r}{impl}"))
                )
    columns = list(rows[0][1])
    print(f"{args.workers} processes, {args.seconds:g} s per phase; per section:")
    print("| lock | " + " | ".join(columns) + " |")
    print("|---|" + "--:|" * len(columns))
    for impl, row in rows:
        print(
            f"| {impl} | "
            + " | ".join(f"{row[c]:.2f}" if row[c] < 10 else f"{row[c]:.0f}" for c in columns)
            + " |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
