"""Benchmark tenure's Redlock over five masters against tenure's Lock on one
master and against the Python Redlock peers (pottery, redlock-py, aioredlock).

Everything runs in one run against five server processes started here
(``tenure._server.ServerProcess``, the embedded Valkey unless ``--server``):
each implementation does uncontended ``acquire(); release()`` cycles on a name
of its own, and the acquire call alone is timed. Every lock is warmed up first
(connections, server probes, scripts). The cycles are taken in slices of
``--slice`` cycles per implementation in turn, the order rotating each slice,
so that every implementation sees the same mix of the machine's fast and slow
moments. Reported: acquire p50 and p90, cycle (acquire + release) p50, and the
ratio of each acquire p50 to tenure ``Lock``'s (sync) or ``AsyncLock``'s
(asyncio) acquire p50 on one master in the same run. Two raw floors, a bare
``SET NX PX`` written to one master and to all five (then the replies read),
show what talking to five servers costs on this machine by itself; the script
floors (the Lock's scripts, and the leanest script that still mints a fence,
on all five) what the servers' work costs with no client code at all.

Usage::

    .venv/bin/python benchmarks/bench_redlock.py
    .venv/bin/python benchmarks/bench_redlock.py --cycles 3000 --markdown out.md
    .venv/bin/python benchmarks/bench_redlock.py --server /usr/bin/redis-server
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
from tenure._drivers._clients import evalsha_args
from tenure._keys import DEFAULT_PREFIX, lock_keys
from tenure._plans import redlock as redlock_plans
from tenure._protocol import Eval
from tenure._server import ServerProcess

#: Lease length of every lock, seconds: far longer than any hold.
TTL = 10.0
MASTERS = 5


@dataclass
class Series:
    """The timings of one implementation, seconds."""

    name: str
    kind: str  # "sync" or "asyncio"
    acquire: list[float] = field(default_factory=list)
    cycle: list[float] = field(default_factory=list)


SyncCycle = Callable[[], tuple[float, float]]
AsyncCycle = Callable[[], Awaitable[tuple[float, float]]]


def _sync_cycle(acquire: Callable[[], Any], release: Callable[[Any], Any]) -> SyncCycle:
    def cycle() -> tuple[float, float]:
        start = time.perf_counter()
        held = acquire()
        got = time.perf_counter()
        assert held
        release(held)
        return got - start, time.perf_counter() - start

    return cycle


def _async_cycle(
    acquire: Callable[[], Awaitable[Any]], release: Callable[[Any], Awaitable[Any]]
) -> AsyncCycle:
    async def cycle() -> tuple[float, float]:
        start = time.perf_counter()
        held = await acquire()
        got = time.perf_counter()
        assert held
        await release(held)
        return got - start, time.perf_counter() - start

    return cycle


def _raw_cycle(conns: Sequence[Any]) -> SyncCycle:
    """The floor: ``SET key token NX PX`` written to every connection, then the
    replies read; the same for a ``DEL`` (no script, no check, no fence)."""
    token = secrets.token_hex(16)

    def each(*args: Any) -> None:
        for conn in conns:
            conn.send_command(*args)
        for conn in conns:
            conn.read_response()

    def acquire() -> bool:
        each("SET", "bench-raw", token, "NX", "PX", int(TTL * 1000))
        return True

    return _sync_cycle(acquire, lambda _: each("DEL", "bench-raw"))


def _load(conns: Sequence[Any], source: str | bytes) -> Any:
    """Load the script ``source`` on every connection; its SHA-1, as the servers gave it."""
    sha = None
    for conn in conns:
        conn.send_command("SCRIPT", "LOAD", source)
        sha = conn.read_response()
    return sha


def _evalsha_cycle(conns: Sequence[Any], take: Sequence[Any], give: Sequence[Any]) -> SyncCycle:
    """A cycle of ``EVALSHA *take`` (packed once) written to every connection,
    then the replies read, not parsed, to acquire; the same of ``give`` to
    release."""
    packed = [conns[0].pack_command("EVALSHA", *args) for args in (take, give)]

    def each(data: Any) -> None:
        for conn in conns:
            conn.send_packed_command(data)
        for conn in conns:
            conn.read_response()

    def acquire() -> bool:
        each(packed[0])
        return True

    return _sync_cycle(acquire, lambda _: each(packed[1]))


def _script_cycle(conns: Sequence[Any], name: str) -> SyncCycle:
    """The floor of a client that runs tenure's Lock scripts on these masters:
    the ``EVALSHA`` of ``lock_acquire.lua`` a Redlock sends each master (the same
    keys and arguments, packed once) written to every connection, then the
    replies read, not parsed; the same for ``lock_release.lua``. No tenure code
    runs in the loop: what it takes beyond the raw floor is the scripts' time
    on the servers (and the machine's time to run them)."""
    keys = lock_keys(name, key=None, prefix=DEFAULT_PREFIX)
    token = secrets.token_hex(16)
    take = redlock_plans.attempt(keys, token, int(TTL * 1000), "")
    give = redlock_plans.release(keys, token, "").steps[0]
    assert isinstance(give, Eval)
    for step in (take, give):
        _load(conns, step.script.source)
    return _evalsha_cycle(conns, evalsha_args(take), evalsha_args(give))


#: The least a Redlock master's acquire can do and still mint a fence: ``SET NX
#: PX``, then the fence ``max(last + 1, TIME µs)`` (no lock-delay guard, no ACL
#: guard, no queue); its release a bare compare-and-delete.
LEAN_ACQUIRE = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local now = redis.call('TIME')
local fence = math.max(tonumber(now[1]) * 1000000 + tonumber(now[2]),
                       (tonumber(redis.call('GET', KEYS[2])) or 0) + 1)
redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[3])
return fence
"""
LEAN_RELEASE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


def _lean_cycle(conns: Sequence[Any], name: str) -> SyncCycle:
    """The floor of a Redlock with the leanest script that still mints a fence
    (:data:`LEAN_ACQUIRE`) on every master, written to every connection, then
    the replies read: what a Redlock within 1.5x a Lock would need its
    per-master work to fit in on these servers."""
    token = secrets.token_hex(16)
    take = (_load(conns, LEAN_ACQUIRE), 2, name, name + ":fence", token, int(TTL * 1000), 600000)
    give = (_load(conns, LEAN_RELEASE), 1, name, token)
    return _evalsha_cycle(conns, take, give)


def sync_locks(servers: Sequence[ServerProcess]) -> dict[str, SyncCycle]:
    """Every synchronous implementation's cycle, by name (peers that fail to
    import are left out, with a note)."""
    clients = [redis.Redis.from_url(s.url) for s in servers]
    out: dict[str, SyncCycle] = {}
    conns = [c.connection_pool.make_connection() for c in clients]
    out["raw floor (1 master)"] = _raw_cycle(conns[:1])
    out["raw floor (5 masters)"] = _raw_cycle(conns)
    out["script floor (1 master)"] = _script_cycle(conns[:1], "bench-script-1")
    out["script floor (5 masters)"] = _script_cycle(conns, "bench-script-5")
    out["lean script floor (5 masters)"] = _lean_cycle(conns, "bench-lean-5")
    lock = tenure.Lock(clients[0], "bench-lock", ttl=TTL)
    out["tenure Lock (1 master)"] = _sync_cycle(lock.acquire, lambda lease: lease.release())
    red = tenure.Redlock(clients, "bench-redlock", ttl=TTL)
    out["tenure Redlock (5 masters)"] = _sync_cycle(red.acquire, lambda lease: lease.release())
    try:
        import pottery

        plock = pottery.Redlock(key="bench-pottery", masters=set(clients), auto_release_time=TTL)
        out["pottery Redlock (5 masters)"] = _sync_cycle(plock.acquire, lambda _: plock.release())
    except ImportError as exc:
        print(f"pottery left out: {exc}")
    try:
        import redlock

        dlm = redlock.Redlock([{"host": "127.0.0.1", "port": s.port, "db": 0} for s in servers])
        out["redlock-py (5 masters)"] = _sync_cycle(
            lambda: dlm.lock("bench-redlock-py", int(TTL * 1000)), dlm.unlock
        )
    except ImportError as exc:
        print(f"redlock-py left out: {exc}")
    return out


def async_locks(servers: Sequence[ServerProcess]) -> tuple[dict[str, AsyncCycle], list[Any]]:
    """Every asyncio implementation's cycle, by name, and what to close after."""
    clients = [redis.asyncio.Redis.from_url(s.url) for s in servers]
    out: dict[str, AsyncCycle] = {}
    lock = tenure.AsyncLock(clients[0], "bench-alock", ttl=TTL)
    out["tenure AsyncLock (1 master)"] = _async_cycle(lock.acquire, lambda lease: lease.release())
    red = tenure.AsyncRedlock(clients, "bench-aredlock", ttl=TTL)
    out["tenure AsyncRedlock (5 masters)"] = _async_cycle(
        red.acquire, lambda lease: lease.release()
    )
    closers: list[Any] = [*clients]
    try:
        import aioredlock

        manager = aioredlock.Aioredlock([{"host": "127.0.0.1", "port": s.port} for s in servers])
        out["aioredlock (5 masters)"] = _async_cycle(
            lambda: manager.lock("bench-aioredlock", lock_timeout=TTL), manager.unlock
        )
        closers.append(manager)
    except ImportError as exc:
        print(f"aioredlock left out: {exc}")
    return out, closers


def measure_sync(locks: dict[str, SyncCycle], cycles: int, slice_: int) -> list[Series]:
    series = {name: Series(name, "sync") for name in locks}
    for cycle in locks.values():
        for _ in range(50):
            cycle()
    names = list(locks)
    for n in range(cycles // slice_):
        for name in names[n % len(names) :] + names[: n % len(names)]:
            s = series[name]
            for _ in range(slice_):
                acquire, whole = locks[name]()
                s.acquire.append(acquire)
                s.cycle.append(whole)
    return list(series.values())


async def measure_async(servers: Sequence[ServerProcess], cycles: int, slice_: int) -> list[Series]:
    locks, closers = async_locks(servers)
    series = {name: Series(name, "asyncio") for name in locks}
    for cycle in locks.values():
        for _ in range(50):
            await cycle()
    names = list(locks)
    for n in range(cycles // slice_):
        for name in names[n % len(names) :] + names[: n % len(names)]:
            s = series[name]
            for _ in range(slice_):
                acquire, whole = await locks[name]()
                s.acquire.append(acquire)
                s.cycle.append(whole)
    for closer in closers:
        close = getattr(closer, "destroy", None) or closer.aclose
        await close()
    return list(series.values())


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def table(results: list[Series]) -> str:
    """The Markdown table: per implementation, acquire p50/p90, cycle p50 (µs)
    and the acquire p50 ratio to tenure's one-master lock of the same API."""
    lines = [
        "| implementation | API | acquire p50 (µs) | acquire p90 (µs) | cycle p50 (µs)"
        " | acquire p50 / tenure Lock's |",
        "|---|---|---:|---:|---:|---:|",
    ]
    p50 = {s.name: statistics.median(s.acquire) for s in results}
    base = {s.kind: p50[s.name] for s in results if s.name.startswith("tenure") and "1 " in s.name}
    for s in results:
        lines.append(
            f"| {s.name} | {s.kind} | {p50[s.name] * 1e6:.0f} | {_p(s.acquire, 0.9) * 1e6:.0f}"
            f" | {statistics.median(s.cycle) * 1e6:.0f} | {p50[s.name] / base[s.kind]:.2f}x |"
        )
    lines += ["", *floors(p50)]
    return "\n".join(lines)


def floors(p50: dict[str, float]) -> list[str]:
    """What five masters cost by themselves in this run (acquire p50 ratios):
    the floors on five masters against one, and tenure's Redlock and Lock each
    against the floor of its own number of masters."""
    red, lock = p50["tenure Redlock (5 masters)"], p50["tenure Lock (1 master)"]
    out = []
    for kind in ("raw", "script"):
        five, one = p50[f"{kind} floor (5 masters)"], p50[f"{kind} floor (1 master)"]
        out.append(
            f"- {kind} floor, 5 masters / 1 master: {five / one:.2f}x; "
            f"{kind} floor (5 masters) / tenure Lock: {five / lock:.2f}x; "
            f"Redlock / {kind} floor (5 masters): {red / five:.2f}x against "
            f"Lock / {kind} floor (1 master): {lock / one:.2f}x "
            f"(Redlock / Lock normalized by the floors: {(red / five) / (lock / one):.2f}x)"
        )
    lean = p50.get("lean script floor (5 masters)")
    if lean is not None:
        out.append(
            f"- lean script floor (5 masters) / tenure Lock: {lean / lock:.2f}x "
            "(the least any Redlock that mints a fence on each master costs here, "
            "before any client code)"
        )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=2000, help="timed cycles per lock")
    parser.add_argument("--slice", type=int, default=50, help="cycles per lock in a row")
    parser.add_argument("--server", default=None, help="redis-server/valkey-server binary")
    parser.add_argument("--markdown", default=None, help="also write the table here")
    args = parser.parse_args(argv)
    servers = [ServerProcess(args.server).start() for _ in range(MASTERS)]
    try:
        results = measure_sync(sync_locks(servers), args.cycles, args.slice)
        results += asyncio.run(measure_async(servers, args.cycles, args.slice))
    finally:
        for s in servers:
            s.close()
    out = table(results)
    print(f"{platform.python_version()} on {platform.machine()}, {args.cycles} cycles each")
    print(out)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(out + "\n")


if __name__ == "__main__":
    main()
