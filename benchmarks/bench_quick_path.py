"""Benchmark the drivers' quick path: tenure's uncontended ``acquire(); release()``
with the quick path (scripts written and read on connections kept checked out
of the pool, packed by hiredis) and without it (every script sent through the
client's ``execute_command``, as before the quick path), in the same run,
against redis-py's ``Lock`` and the raw floor (``SET NX PX`` + an ``EVALSHA``
compare-and-delete).

Every lock gets its own client on one server started here
(``tenure._server.ServerProcess``, the embedded Valkey unless ``--server``).
The quick path is turned off for the "ordinary path" rows by giving their
client's state no kept connections (what a ``BlockingConnectionPool`` client
gets). The rows are timed in slices of ``--slice`` seconds each, in turn, the
order rotating each slice (this machine's speed drifts over seconds), for
``--rounds`` rounds; the table gives each row's median and best slice, its
ratio to the floor's median, and the calling thread's CPU time per cycle
(``time.thread_time``, the median slice).

Usage::

    .venv/bin/python benchmarks/bench_quick_path.py
    .venv/bin/python benchmarks/bench_quick_path.py --rounds 60 --markdown out.md
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio

import tenure
from tenure._drivers import _async, _sync
from tenure._server import ServerProcess

TTL = 10.0
RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)


@dataclass
class Row:
    """One implementation's slices: seconds per cycle and CPU seconds per cycle."""

    name: str
    kind: str
    per_cycle: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def slices_sync(rows: dict[str, Callable[[], Any]], rounds: int, seconds: float) -> list[Row]:
    """Time each callable in slices of ``seconds``, in turn, rotating the order."""
    out = {name: Row(name, "sync") for name in rows}
    names = list(rows)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            fn, n = rows[name], 0
            t0, c0 = time.perf_counter(), time.thread_time()
            while time.perf_counter() - t0 < seconds:
                fn()
                n += 1
            out[name].per_cycle.append((time.perf_counter() - t0) / n)
            out[name].cpu.append((time.thread_time() - c0) / n)
    return list(out.values())


async def slices_async(
    rows: dict[str, Callable[[], Awaitable[Any]]], rounds: int, seconds: float
) -> list[Row]:
    """:func:`slices_sync` for coroutines (one task, awaited in turn)."""
    out = {name: Row(name, "asyncio") for name in rows}
    names = list(rows)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            fn, n = rows[name], 0
            t0, c0 = time.perf_counter(), time.thread_time()
            while time.perf_counter() - t0 < seconds:
                await fn()
                n += 1
            out[name].per_cycle.append((time.perf_counter() - t0) / n)
            out[name].cpu.append((time.thread_time() - c0) / n)
    return list(out.values())


def sync_rows(url: str, clients: list[redis.Redis] | None = None) -> dict[str, Callable[[], Any]]:
    """Each sync row's cycle, warmed up; ``clients`` gets the rows' clients
    (tenure's quick, tenure's ordinary, the one redis-py's ``Lock`` and the
    floor share)."""
    quick = redis.Redis.from_url(url)
    ordinary = redis.Redis.from_url(url)
    plain = redis.Redis.from_url(url)
    if clients is not None:
        clients.extend((quick, ordinary, plain))
    lock_q = tenure.Lock(quick, "quick", ttl=TTL)
    lock_o = tenure.Lock(ordinary, "ordinary", ttl=TTL)
    for lock in (lock_q, lock_o):  # warm up: probe, scripts, connections
        for _ in range(50):
            lock.acquire().release()  # type: ignore[union-attr]
    _sync._state(ordinary).reserve = None  # the ordinary path: through the client
    assert _sync._state(quick).reserve is not None
    rp = plain.lock("redis-py", timeout=TTL)
    release = plain.register_script(RELEASE)
    token = secrets.token_hex(16)

    def tenure_quick() -> None:
        lock_q.acquire().release()  # type: ignore[union-attr]

    def tenure_ordinary() -> None:
        lock_o.acquire().release()  # type: ignore[union-attr]

    def redis_py() -> None:
        rp.acquire()
        rp.release()

    def floor() -> None:
        plain.set("floor", token, nx=True, px=int(TTL * 1000))
        release(keys=["floor"], args=[token])

    return {
        "tenure Lock, quick path": tenure_quick,
        "tenure Lock, ordinary path": tenure_ordinary,
        "redis-py Lock": redis_py,
        "raw floor": floor,
    }


async def async_rows(url: str, rounds: int, seconds: float) -> list[Row]:
    quick = redis.asyncio.Redis.from_url(url)
    ordinary = redis.asyncio.Redis.from_url(url)
    plain = redis.asyncio.Redis.from_url(url)
    try:
        lock_q = tenure.AsyncLock(quick, "aquick", ttl=TTL)
        lock_o = tenure.AsyncLock(ordinary, "aordinary", ttl=TTL)
        for lock in (lock_q, lock_o):
            for _ in range(50):
                await (await lock.acquire()).release()  # type: ignore[union-attr]
        _async._state(ordinary).reserve = None
        assert _async._state(quick).reserve is not None
        release = plain.register_script(RELEASE)
        token = secrets.token_hex(16)

        async def tenure_quick() -> None:
            await (await lock_q.acquire()).release()  # type: ignore[union-attr]

        async def tenure_ordinary() -> None:
            await (await lock_o.acquire()).release()  # type: ignore[union-attr]

        async def floor() -> None:
            await plain.set("afloor", token, nx=True, px=int(TTL * 1000))
            await release(keys=["afloor"], args=[token])

        return await slices_async(
            {
                "tenure AsyncLock, quick path": tenure_quick,
                "tenure AsyncLock, ordinary path": tenure_ordinary,
                "raw floor (asyncio)": floor,
            },
            rounds,
            seconds,
        )
    finally:
        for c in (quick, ordinary, plain):
            await c.aclose()


def table(rows: Sequence[Row], floor: str) -> list[str]:
    base = statistics.median(next(r for r in rows if r.name == floor).per_cycle)
    lines = [
        "| lock | API | µs/cycle, median slice | best slice | x raw floor (median) | "
        "calling thread CPU µs/cycle |",
        "|---|---|--:|--:|--:|--:|",
    ]
    for r in rows:
        median = statistics.median(r.per_cycle)
        lines.append(
            f"| {r.name} | {r.kind} | {median * 1e6:.0f} | {min(r.per_cycle) * 1e6:.0f} | "
            f"{base / median:.2f} | {statistics.median(r.cpu) * 1e6:.0f} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="slices per row (default 30)")
    parser.add_argument("--slice", type=float, default=0.1, help="seconds per slice (default 0.1)")
    parser.add_argument("--server", help="redis-server/valkey-server to start")
    parser.add_argument("--markdown", help="also write the table as Markdown")
    args = parser.parse_args(argv)
    with ServerProcess(args.server) as server:
        info = redis.Redis.from_url(server.url).info("server")
        name = info.get("server_name") or "redis"
        started = time.monotonic()
        sync = slices_sync(sync_rows(server.url), args.rounds, args.slice)
        asyncio_ = asyncio.run(async_rows(server.url, args.rounds, args.slice))
        took = time.monotonic() - started
    head = (
        f"{name} {info.get('valkey_version') or info['redis_version']}, Python "
        f"{platform.python_version()}, redis-py {redis.__version__}; {args.rounds} slices "
        f"of {args.slice:g} s per row; run took {took:.0f} s."
    )
    lines = [head, "", *table(sync, "raw floor"), "", *table(asyncio_, "raw floor (asyncio)")]
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
