"""What a holder label costs an uncontended cycle (acquire + release, sync
API, one thread): the calling process's CPU time per cycle (``time.process_time``)
and the server's time per cycle (every command's ``usec`` in ``INFO
commandstats``), for each primitive whose leases carry a label, with the
default label, with none (``label=""``), and for the tenure on ``PYTHONPATH``
without labels at all (run it against an older tree: ``--no-label-argument``).

Slices of 2,000 cycles, the median of ``--slices`` (default 7); run it twice,
on a quiet moment, and alternate the trees compared.

Usage::

    .venv/bin/python benchmarks/label_cost.py
    PYTHONPATH=/tmp/before/src .venv/bin/python benchmarks/label_cost.py --no-label-argument
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from tenure import FairLock, Lock, ReadWriteLock, RLock, Semaphore
from tenure._server import ServerProcess

CYCLES = 2000


def server_usec(r: redis.Redis) -> float:
    """Every command's total server time so far (µs), from ``INFO commandstats``."""
    return sum(float(v["usec"]) for v in r.info("commandstats").values())


def measure(r: redis.Redis, cycle: Callable[[], object], slices: int) -> tuple[float, float]:
    """(client CPU µs, server µs) per cycle: the medians over ``slices`` slices."""
    for _ in range(200):  # warm: scripts loaded, the quick path's connection taken
        cycle()
    cpu, server = [], []
    for _ in range(slices):
        r.config_resetstat()
        before = server_usec(r)  # (INFO's own time is not in commandstats until after)
        start = time.process_time()
        for _ in range(CYCLES):
            cycle()
        cpu.append((time.process_time() - start) / CYCLES * 1e6)
        server.append((server_usec(r) - before) / CYCLES)
    return statistics.median(cpu), statistics.median(server)


def cycles(client: redis.Redis, label: dict[str, Any]) -> dict[str, Callable[[], object]]:
    lock, rlock = Lock(client, "b-lock", **label), RLock(client, "b-rlock", **label)
    fair, rw = FairLock(client, "b-fair", **label), ReadWriteLock(client, "b-rw", **label)
    sem = Semaphore(client, "b-sem", 2, **label)
    return {
        "Lock": lambda: lock.acquire().release(),  # type: ignore[union-attr]
        "RLock": lambda: rlock.acquire().release(),  # type: ignore[union-attr]
        "FairLock": lambda: fair.acquire().release(),  # type: ignore[union-attr]
        "ReadWriteLock write": lambda: rw.write.acquire().release(),  # type: ignore[union-attr]
        "Semaphore": lambda: sem.acquire().release(),  # type: ignore[union-attr]
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", help="redis-server/valkey-server to start")
    parser.add_argument("--slices", type=int, default=7)
    parser.add_argument(
        "--no-label-argument",
        action="store_true",
        help="the tenure measured has no label argument (an older tree)",
    )
    args = parser.parse_args(argv)
    variants: dict[str, dict[str, Any]] = (
        {"no labels (older tree)": {}}
        if args.no_label_argument
        else {"default label": {}, 'label=""': {"label": ""}}
    )
    with ServerProcess(args.server) as server:
        r = redis.Redis.from_url(server.url)
        client = redis.Redis.from_url(server.url)
        print("| primitive | variant | client CPU µs/cycle | server µs/cycle |")
        print("|---|---|--:|--:|")
        for variant, label in variants.items():
            for name, cycle in cycles(client, label).items():
                cpu, srv = measure(r, cycle, args.slices)
                print(f"| {name} | {variant} | {cpu:.1f} | {srv:.1f} |", flush=True)
        client.close()
        r.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
