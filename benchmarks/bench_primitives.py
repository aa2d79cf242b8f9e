"""Benchmark tenure's other primitives against the raw floor and their Python peers.

The companion of ``bench_locks.py`` (whose helpers it uses): every number
comes from this one run against one server (started here unless ``--url``
is given), in five parts:

1. uncontended acquire+release cycles/s of every primitive in this process,
   against the raw floor (``SET NX PX`` + EVALSHA compare-and-delete, 2 round
   trips) and tenure's ``Lock``, measured in interleaved slices (best of 3
   rounds); portalocker's ``RedisLock`` (shared and exclusive) takes part as
   the peer of ``ReadWriteLock.read`` / ``.write``;
2. contended: 4 worker processes (spawn) on one name, each looping acquire,
   a 1 ms body, release, for each exclusive primitive (and portalocker's
   exclusive ``RedisLock``): hand-off latency, fairness, no overlap;
3. Redis work per hand-off with 2 and 8 processes (shorter phases): round
   trips and ``INFO commandstats`` per hand-off must not grow with waiters;
4. read-write, mixed: 3 reader processes and 1 writer process on one name,
   tenure's ``ReadWriteLock`` against portalocker's shared/exclusive
   ``RedisLock``: throughput, writer waits, no writer overlapping anyone;
5. asyncio semaphores, 4 permits: tenure's ``AsyncSemaphore`` against
   redsync's ``RedisSemaphore`` (and the raw floor, uncontended), then 10 and
   100 tasks: throughput, waits, never more than 4 holders at once.

Usage (``make bench`` runs ``bench_locks.py`` and then this)::

    .venv/bin/python benchmarks/bench_primitives.py
    .venv/bin/python benchmarks/bench_primitives.py --quick        # about 30 s
    .venv/bin/python benchmarks/bench_primitives.py --json out.json --markdown out.md
    .venv/bin/python benchmarks/bench_primitives.py --server /usr/bin/redis-server
    .venv/bin/python benchmarks/bench_primitives.py --url redis://host:6379/0

See docs/benchmarks.md for what each number means.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import math
import os
import platform
import secrets
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import bench_locks as bl
import redis
import redis.asyncio

import tenure
from tenure._drivers._hubbook import LINGER
from tenure._drivers._sync import READ_POLL
from tenure._server import ServerProcess

#: The permits of the semaphores of parts 1 and 5 (one permit per acquire).
PERMITS = 4
#: Process counts of part 3 (part 2 uses 4).
COUNT_PROCESSES: tuple[int, int] = (2, 8)
HANDOFF_PROCESSES = 4
#: Part 4: reader and writer processes.
MIXED_READERS = 3
MIXED_WRITERS = 1
TASK_COUNTS: tuple[int, ...] = (10, 100)

#: The primitives of part 1, in table order ("raw" and "lock" are the references).
PRIMITIVES: tuple[str, ...] = (
    "raw",
    "lock",
    "rlock",
    "fair",
    "rw-read",
    "rw-write",
    "semaphore",
    "multi",
    "latch",
)
#: The exclusive primitives of parts 2 and 3 ("lock" is the reference of part 2).
EXCLUSIVE: tuple[str, ...] = ("lock", "rlock", "fair", "rw-write", "semaphore-1")
FLAT: tuple[str, ...] = ("rlock", "fair", "rw-write", "semaphore-1")
#: portalocker's RedisLock: with its defaults (a 0.1 s reader thread poll, a
#: 0.25 s retry interval), and with both set to 1 ms.
PORTALOCKER_SHARED: tuple[str, ...] = ("pl-shared", "pl-shared-1ms")
PORTALOCKER_EXCLUSIVE: tuple[str, ...] = ("pl-exclusive", "pl-exclusive-1ms")
ASYNC_IMPLS: tuple[str, ...] = ("raw-async", "semaphore-async", "redsync")
#: A FairLock waiter listens on a wake channel of its own, which the wake hub
#: unsubscribes LINGER seconds after the wait (on its next look up, every
#: READ_POLL s): its phases wait that long after the end so that these
#: UNSUBSCRIBEs count in them. The other primitives listen on one channel per
#: name and process, unsubscribed once per phase.
SETTLE: dict[str, float] = {"fair": LINGER + READ_POLL + 0.15}

LABELS: dict[str, str] = {
    "raw": "raw floor",
    "lock": "tenure Lock",
    "rlock": "tenure RLock",
    "fair": "tenure FairLock",
    "rw-read": "tenure ReadWriteLock.read",
    "rw-write": "tenure ReadWriteLock.write",
    "semaphore": f"tenure Semaphore (permits={PERMITS}, 1 per acquire)",
    "semaphore-1": "tenure Semaphore (permits=1)",
    "multi": "tenure MultiLock (2 Locks)",
    "latch": "tenure CountDownLatch (set 1, count_down, wait)",
    "pl-shared": "portalocker RedisLock SHARED",
    "pl-shared-1ms": "portalocker RedisLock SHARED, 1 ms",
    "pl-exclusive": "portalocker RedisLock EXCLUSIVE",
    "pl-exclusive-1ms": "portalocker RedisLock EXCLUSIVE, 1 ms",
    "raw-async": "raw floor (asyncio)",
    "semaphore-async": f"tenure AsyncSemaphore (permits={PERMITS})",
    "redsync": f"redsync RedisSemaphore (count={PERMITS})",
}
#: Which tenure primitive each peer is compared with.
PEER_OF: dict[str, str] = {
    "pl-shared": "rw-read",
    "pl-shared-1ms": "rw-read",
    "pl-exclusive": "rw-write",
    "pl-exclusive-1ms": "rw-write",
    "redsync": "semaphore-async",
}
#: The package each peer comes from (its distribution name).
PEER_PACKAGE: dict[str, str] = {
    "pl-shared": "portalocker",
    "pl-shared-1ms": "portalocker",
    "pl-exclusive": "portalocker",
    "pl-exclusive-1ms": "portalocker",
    "redsync": "redsync",
}


def package_version(dist: str) -> str | None:
    """The installed version of a distribution, or None if it cannot be imported."""
    try:
        version = importlib.metadata.version(dist)
        __import__(dist)
    except Exception:
        return None
    return version


def available(impl: str) -> bool:
    dist = PEER_PACKAGE.get(impl)
    return dist is None or package_version(dist) is not None


# --------------------------------------------------------------------------
# The primitives behind bench_locks' interface (acquire(); release()).
# --------------------------------------------------------------------------


class Releasable(Protocol):
    def release(self) -> None: ...


class LeaseHolder:
    """Any tenure primitive whose acquire returns a lease (or None) with release()."""

    def __init__(self, acquire: Callable[[], Releasable | None], what: str) -> None:
        self._acquire = acquire
        self._what = what
        self._lease: Releasable | None = None

    def acquire(self) -> None:
        self._lease = self._acquire()
        if self._lease is None:
            raise RuntimeError(f"{self._what}: blocking acquire returned None")

    def release(self) -> None:
        assert self._lease is not None
        self._lease.release()
        self._lease = None


class LatchCycle:
    """One cycle of a CountDownLatch: acquire = try_set_count(1); release = count_down + wait."""

    def __init__(self, client: redis.Redis, name: str) -> None:
        self._latch = tenure.CountDownLatch(client, name)

    def acquire(self) -> None:
        if not self._latch.try_set_count(1):
            raise RuntimeError("CountDownLatch: the count was not zero")

    def release(self) -> None:
        self._latch.count_down()
        if not self._latch.wait(timeout=bl.TTL):
            raise RuntimeError("CountDownLatch: still closed after count_down")


class PortalockerSync:
    """portalocker's RedisLock, shared or exclusive, with its defaults or 1 ms intervals.

    It is a lock held by a pub/sub subscription (no key, no lease): each
    acquire subscribes on a new connection, counts the channel's subscribers
    and, when there are others, asks them who they are; release unsubscribes.
    """

    def __init__(self, client: redis.Redis, name: str, shared: bool, fast: bool) -> None:
        import portalocker
        from portalocker.redis import DEFAULT_THREAD_SLEEP_TIME, RedisLock

        pool = client.connection_pool
        kwargs = dict(pool.connection_kwargs)
        kwargs["decode_responses"] = True  # as portalocker's own connections
        connection = redis.Redis(
            connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
        )
        self._lock = RedisLock(
            name,
            connection=connection,
            timeout=60.0,  # a blocking acquire: far longer than any phase
            # None: the default interval (0.25 s)
            check_interval=0.001 if fast else None,
            thread_sleep_time=0.001 if fast else DEFAULT_THREAD_SLEEP_TIME,
            flags=portalocker.LockFlags.SHARED if shared else portalocker.LockFlags.EXCLUSIVE,
            interrupt_on_lost=False,
        )

    def acquire(self) -> None:
        self._lock.acquire()

    def release(self) -> None:
        self._lock.release()


def make_primitive(impl: str, client: redis.Redis, name: str, sha: str) -> bl.SyncLock:
    """The lock of ``impl`` on ``name`` (a module-level function: workers get it by pickle)."""
    if impl == "raw":
        return bl.RawSync(client, name, sha)
    if impl == "lock":
        return bl.TenureSync(client, name)
    if impl == "rlock":
        return LeaseHolder(tenure.RLock(client, name, ttl=bl.TTL).acquire, impl)
    if impl == "fair":
        return LeaseHolder(tenure.FairLock(client, name, ttl=bl.TTL).acquire, impl)
    if impl == "rw-read":
        return LeaseHolder(tenure.ReadWriteLock(client, name, ttl=bl.TTL).read.acquire, impl)
    if impl == "rw-write":
        return LeaseHolder(tenure.ReadWriteLock(client, name, ttl=bl.TTL).write.acquire, impl)
    if impl == "semaphore":
        return LeaseHolder(tenure.Semaphore(client, name, PERMITS, ttl=bl.TTL).acquire, impl)
    if impl == "semaphore-1":
        return LeaseHolder(tenure.Semaphore(client, name, 1, ttl=bl.TTL).acquire, impl)
    if impl == "multi":
        parts = [tenure.Lock(client, f"{name}:{part}", ttl=bl.TTL) for part in "ab"]
        return LeaseHolder(tenure.MultiLock(parts).acquire, impl)
    if impl == "latch":
        return LatchCycle(client, name)
    if impl.startswith("pl-"):
        return PortalockerSync(client, name, "shared" in impl, impl.endswith("-1ms"))
    raise ValueError(impl)


# --------------------------------------------------------------------------
# asyncio: tenure's AsyncSemaphore, redsync's RedisSemaphore, the raw floor.
# --------------------------------------------------------------------------


class RedsyncHandle:
    """One task's redsync RedisSemaphore: one object holds one permit at a time.

    Acquire is a ``BLPOP`` on a list of permit tokens, release an ``RPUSH``.
    """

    def __init__(self, semaphore: Any) -> None:
        self._semaphore = semaphore

    async def acquire(self) -> None:
        await self._semaphore.acquire()  # no timeout: blocks until a token comes

    async def release(self) -> None:
        await self._semaphore.release()


async def make_async_handles(
    impl: str, client: redis.asyncio.Redis, name: str, count: int
) -> tuple[list[bl.AsyncLock], Callable[[], Awaitable[None]]]:
    """``count`` per-task handles on one ``impl`` named ``name``, and their clean-up."""

    async def nothing() -> None:
        return None

    if impl == "raw-async":
        sha = str(await client.script_load(bl.UNLOCK_LUA))
        return [bl.RawAsync(client, name, sha) for _ in range(count)], nothing
    if impl == "semaphore-async":
        shared = tenure.AsyncSemaphore(client, name, PERMITS, ttl=bl.TTL)
        return [bl.TenureAsync(shared) for _ in range(count)], nothing
    if impl == "redsync":
        from redsync import RedisSemaphore

        # create() is redsync's documented way in for a worker that knows the
        # count (idempotent); each object runs a watchdog task that refreshes
        # the keys' expiry every ~100 s, cancelled by close().
        sems = [await RedisSemaphore.create(client, name, count=PERMITS) for _ in range(count)]

        async def close() -> None:
            for sem in sems:
                await sem.close()

        await asyncio.sleep(0.05)  # let the watchdogs' first round go by
        return [RedsyncHandle(sem) for sem in sems], close
    raise ValueError(impl)


# --------------------------------------------------------------------------
# Analysis beyond bench_locks.analyze (which checks exclusive locks).
# --------------------------------------------------------------------------


@dataclass
class Limited:
    """One contended phase of a semaphore with ``limit`` permits."""

    impl: str
    label: str
    mode: str
    workers: int
    limit: int
    seconds: float
    sections: int
    sections_per_s: float
    wait_p50_ms: float
    wait_p99_ms: float
    wait_max_ms: float
    max_holders: int  # the most holds in progress at once
    violations: int  # acquires that made more than ``limit`` holds in progress
    server_cmds_per_section: float
    round_trips_per_section: float
    per_worker_sections: list[int] = field(default_factory=list)
    ratio_to_tenure: float = math.nan


def sweep(holds: Sequence[tuple[bl.Hold, str]]) -> list[tuple[float, int, str]]:
    """Hold starts (acquire returned, +1) and ends (release called, -1), in time order.

    At equal times an end comes first: two holds that merely touch do not overlap.
    """
    events = [(h[1], +1, kind) for h, kind in holds] + [(h[2], -1, kind) for h, kind in holds]
    events.sort(key=lambda e: (e[0], e[1]))
    return events


def analyze_limited(
    impl: str,
    mode: str,
    per_worker: list[list[bl.Hold]],
    limit: int,
    start: float,
    end: float,
    server_cmds: int,
    round_trips: int,
) -> Limited:
    holds = [(h, "") for hs in per_worker for h in hs]
    n = len(holds)
    inside = most = violations = 0
    for _, step, _ in sweep(holds):
        inside += step
        if step > 0 and inside > limit:
            violations += 1
        most = max(most, inside)
    waits = sorted(h[1] - h[0] for h, _ in holds)
    ms = 1000.0
    return Limited(
        impl=impl,
        label=LABELS[impl],
        mode=mode,
        workers=len(per_worker),
        limit=limit,
        seconds=end - start,
        sections=n,
        sections_per_s=sum(1 for h, _ in holds if h[1] <= end) / (end - start),
        wait_p50_ms=bl.percentile(waits, 50) * ms,
        wait_p99_ms=bl.percentile(waits, 99) * ms,
        wait_max_ms=(waits[-1] if waits else math.nan) * ms,
        max_holders=most,
        violations=violations,
        server_cmds_per_section=server_cmds / n if n else math.nan,
        round_trips_per_section=round_trips / n if n else math.nan,
        per_worker_sections=[len(hs) for hs in per_worker],
    )


@dataclass
class Mixed:
    """One read-write phase: reader and writer processes on one name."""

    impl: str
    label: str
    readers: int
    writers: int
    seconds: float
    reads_per_s: float
    writes_per_s: float
    read_wait_p50_ms: float
    read_wait_p99_ms: float
    write_wait_p50_ms: float
    write_wait_p99_ms: float
    write_wait_max_ms: float
    max_readers: int  # the most read holds in progress at once
    violations: int  # holds that began beside a write hold
    server_cmds_per_section: float
    round_trips_per_section: float
    per_worker_sections: list[int] = field(default_factory=list)


def analyze_mixed(
    impl: str,
    label: str,
    roles: Sequence[str],
    per_worker: list[list[bl.Hold]],
    start: float,
    end: float,
    server_cmds: int,
    round_trips: int,
) -> Mixed:
    """A write hold must overlap no other hold; read holds may overlap each other."""
    holds = [(h, roles[w]) for w, hs in enumerate(per_worker) for h in hs]
    n = len(holds)
    readers = writers = most = violations = 0
    for _, step, kind in sweep(holds):
        if step > 0 and (writers or (kind == "write" and readers)):
            violations += 1
        if kind == "write":
            writers += step
        else:
            readers += step
        most = max(most, readers)

    def waits(kind: str) -> list[float]:
        return sorted(h[1] - h[0] for h, k in holds if k == kind)

    def rate(kind: str) -> float:
        return sum(1 for h, k in holds if k == kind and h[1] <= end) / (end - start)

    rw, ww = waits("read"), waits("write")
    ms = 1000.0
    return Mixed(
        impl=impl,
        label=label,
        readers=roles.count("read"),
        writers=roles.count("write"),
        seconds=end - start,
        reads_per_s=rate("read"),
        writes_per_s=rate("write"),
        read_wait_p50_ms=bl.percentile(rw, 50) * ms,
        read_wait_p99_ms=bl.percentile(rw, 99) * ms,
        write_wait_p50_ms=bl.percentile(ww, 50) * ms,
        write_wait_p99_ms=bl.percentile(ww, 99) * ms,
        write_wait_max_ms=(ww[-1] if ww else math.nan) * ms,
        max_readers=most,
        violations=violations,
        server_cmds_per_section=server_cmds / n if n else math.nan,
        round_trips_per_section=round_trips / n if n else math.nan,
        per_worker_sections=[len(hs) for hs in per_worker],
    )


# --------------------------------------------------------------------------
# Part 5: asyncio semaphores.
# --------------------------------------------------------------------------


async def bench_uncontended_async(
    url: str,
    stats: redis.Redis,
    seconds: float,
    rounds: int,
    tag: str,
    impls: Sequence[str],
    counted: int,
) -> list[bl.Uncontended]:
    """bench_locks.bench_uncontended for asyncio handles, in one event loop."""
    client = redis.asyncio.Redis.from_url(url)
    handles: dict[str, bl.AsyncLock] = {}
    closers: list[Callable[[], Awaitable[None]]] = []
    for impl in impls:
        made, close = await make_async_handles(impl, client, f"{tag}:ua:{impl}", 1)
        handles[impl] = made[0]
        closers.append(close)
    mono = time.monotonic
    for handle in handles.values():  # warm up
        end = mono() + seconds / 2
        while mono() < end:
            await handle.acquire()
            await handle.release()
    per_round: dict[str, list[float]] = {impl: [] for impl in impls}
    order = list(impls)
    for _ in range(rounds):
        cycles = dict.fromkeys(order, 0)
        spent = dict.fromkeys(order, 0.0)
        for _ in range(bl.UNCONTENDED_SLICES):
            for impl in order:
                handle = handles[impl]
                n = 0
                started = mono()
                end = started + seconds / bl.UNCONTENDED_SLICES
                while mono() < end:
                    await handle.acquire()
                    await handle.release()
                    n += 1
                spent[impl] += mono() - started
                cycles[impl] += n
            order.append(order.pop(0))
        for impl in impls:
            per_round[impl].append(cycles[impl] / spent[impl])
    results = [
        bl.Uncontended(impl, LABELS[impl], per_round[impl], max(per_round[impl])) for impl in impls
    ]
    count = counted
    for r in results:
        handle = handles[r.impl]
        with bl.counting_round_trips() as sent:
            before, sent0 = bl.command_calls(stats), sent.value
            server0, client0 = bl.server_cpu(stats), time.process_time()
            for _ in range(count):
                await handle.acquire()
                await handle.release()
            r.client_cpu_us_per_cycle = (time.process_time() - client0) / count * 1e6
            r.server_cpu_us_per_cycle = (bl.server_cpu(stats) - server0) / count * 1e6
            r.round_trips_per_cycle = (sent.value - sent0) / count
            r.server_cmds_per_cycle = bl.calls_between(before, bl.command_calls(stats)) / count
    raw = next(r.cycles_per_s for r in results if r.impl == "raw-async")
    for r in results:
        r.ratio_to_raw = r.cycles_per_s / raw
    for close in closers:
        await close()
    await client.aclose()
    return results


async def semaphore_phase(
    impl: str, url: str, tasks: int, name: str, seconds: float, stats: redis.Redis
) -> Limited:
    """``tasks`` tasks looping acquire, 1 ms body, release on one semaphore of PERMITS."""
    # redsync's waiters each block a connection in BLPOP: room for all of them.
    client = redis.asyncio.Redis.from_url(url, max_connections=tasks + 20)
    await asyncio.gather(*(client.ping() for _ in range(tasks)))
    warm, close_warm = await make_async_handles(impl, client, name + ":warm", 1)
    await warm[0].acquire()
    await warm[0].release()
    await close_warm()
    handles, close = await make_async_handles(impl, client, name, tasks)
    with bl.counting_round_trips() as sent:
        before, sent0 = bl.command_calls(stats), sent.value
        start = time.monotonic() + 0.02
        end = start + seconds
        per_task = await asyncio.gather(*(bl.run_async_loop(h, start, end, 0.0) for h in handles))
        round_trips = sent.value - sent0
        server_cmds = bl.calls_between(before, bl.command_calls(stats))
    await close()
    await client.aclose()
    return analyze_limited(
        impl, "tasks", list(per_task), PERMITS, start, end, server_cmds, round_trips
    )


# --------------------------------------------------------------------------
# Reporting.
# --------------------------------------------------------------------------


@dataclass
class Results:
    unc: list[bl.Uncontended]
    handoff: list[bl.Contended]  # part 2: 4 processes
    counts: list[bl.Contended]  # part 3: 2 and 8 processes
    mixed: list[Mixed]
    async_unc: list[bl.Uncontended]
    async_sem: list[Limited]
    missing: dict[str, str]  # peer package -> why it did not run


def pct(a: float, b: float) -> float:
    """How much b differs from a, in %."""
    return (b / a - 1) * 100 if a else math.nan


def targets(res: Results) -> list[bl.Target]:
    out: list[bl.Target] = []
    by = {(r.impl, r.workers): r for r in res.counts}
    lo, hi = COUNT_PROCESSES
    for impl in FLAT:
        if (impl, lo) not in by or (impl, hi) not in by:
            continue
        a, b = by[impl, lo], by[impl, hi]
        dc = pct(a.server_cmds_per_section, b.server_cmds_per_section)
        dr = pct(a.round_trips_per_section, b.round_trips_per_section)
        out.append(
            bl.Target(
                f"{LABELS[impl]}: cmds/hand-off at {hi} within 10 % of at {lo} (round trips too)",
                f"cmds {a.server_cmds_per_section:.2f} vs {b.server_cmds_per_section:.2f} "
                f"({dc:+.0f}%); round trips {a.round_trips_per_section:.2f} vs "
                f"{b.round_trips_per_section:.2f} ({dr:+.0f}%)",
                abs(dc) <= 10 and abs(dr) <= 10,
            )
        )
    bad = [f"{r.impl}/processes={r.workers}" for r in res.handoff + res.counts if r.violations]
    bad += [f"{m.impl}/mixed" for m in res.mixed if m.violations]
    bad += [f"{s.impl}/tasks={s.workers}" for s in res.async_sem if s.violations]
    out.append(
        bl.Target(
            "no mutual-exclusion violation (any writer or exclusive holder alone; "
            f"at most {PERMITS} semaphore holders), any primitive or peer",
            "none" if not bad else ", ".join(bad),
            not bad,
        )
    )
    return out


def ratio(x: float) -> str:
    """A ratio with two decimals, or two significant digits when it is below 0.1."""
    return bl.fmt(x, ".2f" if math.isnan(x) or x >= 0.1 else ".2g")


CPU_HEADERS = ["client CPU us", "server CPU us"]
CPU_NOTE = (
    "client CPU us / server CPU us: per cycle, this process's CPU time (all its threads; "
    "time.process_time) and the server's (INFO cpu, user + system), over a separate counted "
    "pass of 1000 cycles (500 with --quick; about 0.25 s of them for a slow lock); RT and srv "
    "cmds come from the same pass."
)


def unc_row(u: bl.Uncontended, ref: float) -> list[str]:
    return [
        u.label,
        f"{u.cycles_per_s:,.0f}",
        ratio(u.ratio_to_raw),
        ratio(u.cycles_per_s / ref if ref else math.nan),
        f"{1e6 / u.cycles_per_s:,.0f}",
        bl.fmt(u.client_cpu_us_per_cycle, ",.0f"),
        bl.fmt(u.server_cpu_us_per_cycle, ",.0f"),
        bl.fmt(u.round_trips_per_cycle, ".2f"),
        bl.fmt(u.server_cmds_per_cycle, ".2f"),
    ]


def contended_rows(rs: list[bl.Contended], ref: dict[int, float]) -> list[list[str]]:
    return [
        [
            r.label,
            str(r.workers),
            f"{r.sections_per_s:,.0f}",
            ratio(r.sections_per_s / ref[r.workers] if ref.get(r.workers) else math.nan),
            bl.fmt(r.handoff_p50_ms, ".3f"),
            bl.fmt(r.handoff_p99_ms, ".2f"),
            bl.fmt(r.same_worker_pct, ".0f"),
            bl.fmt(r.cross_handoff_p50_ms, ".3f"),
            f"{bl.fmt(r.wait_p99_ms, '.1f')}/{bl.fmt(r.wait_max_ms, '.0f')}",
            f"{min(r.per_worker_sections)}/{max(r.per_worker_sections)}",
            bl.fmt(r.round_trips_per_section, ".2f"),
            bl.fmt(r.server_cmds_per_section, ".2f"),
            str(r.violations),
        ]
        for r in rs
    ]


def contended_headers(ref: str) -> list[str]:
    return [
        "lock",
        "n",
        "sections/s",
        ref,
        "hand-off p50 ms",
        "p99 ms",
        "same %",
        "cross p50 ms",
        "wait p99/max ms",
        "per-worker min/max",
        "RT/hand-off",
        "srv cmds/hand-off",
        "overlaps",
    ]


def missing_notes(res: Results, packages: Sequence[str]) -> list[str]:
    return [
        f"{pkg} did not run here: {res.missing[pkg]}; no numbers for it."
        for pkg in packages
        if pkg in res.missing
    ]


def report_tables(meta: dict[str, Any], res: Results, tgt: list[bl.Target]) -> list[bl.TableData]:
    tables: list[bl.TableData] = []
    unc = {u.impl: u for u in res.unc}
    lock_rate = unc["lock"].cycles_per_s
    tables.append(
        bl.TableData(
            "P1. Uncontended acquire+release, one process, every primitive "
            f"(best of {meta['uncontended_rounds']} rounds of {meta['uncontended_round_s']:g} s)",
            [
                "primitive",
                "cycles/s",
                "x raw",
                "x Lock",
                "us/cycle",
                *CPU_HEADERS,
                "RT/cycle",
                "srv cmds/cycle",
            ],
            [unc_row(unc[impl], lock_rate) for impl in PRIMITIVES if impl in unc],
            [
                "x raw: cycles/s over the raw floor's (SET NX PX + EVALSHA compare-and-delete, "
                "2 round trips), measured in the same interleaved slices; x Lock: over tenure "
                "Lock's. RT: round trips (commands sent); srv cmds: INFO commandstats, "
                "including commands run inside scripts. MultiLock: both parts taken and "
                "released; CountDownLatch: try_set_count(1), count_down(), wait().",
                CPU_NOTE,
            ],
        )
    )
    procs = [r for r in res.handoff if not r.impl.startswith("pl-")]
    lock4 = {r.workers: r.sections_per_s for r in res.handoff if r.impl == "lock"}
    tables.append(
        bl.TableData(
            f"P2. Contended hand-off: {HANDOFF_PROCESSES} worker processes on one name, "
            f"{bl.BODY * 1000:g} ms body, {meta['contended_seconds']:g} s each",
            contended_headers("x Lock"),
            contended_rows(procs, lock4),
            [
                "x Lock: sections/s over tenure Lock's in this table. The other columns as "
                "in bench_locks' table 2: hand-off = next acquire returned - previous release "
                "called, when someone was waiting; same %: hand-offs back to the releasing "
                "worker; overlaps: mutual-exclusion violations.",
            ],
        )
    )
    lo, hi = COUNT_PROCESSES
    by = {(r.impl, r.workers): r for r in res.counts}
    rows: list[list[str]] = []
    for impl in FLAT:
        if (impl, lo) not in by or (impl, hi) not in by:
            continue
        a, b = by[impl, lo], by[impl, hi]
        rows.append(
            [
                LABELS[impl],
                f"{a.round_trips_per_section:.2f}",
                f"{b.round_trips_per_section:.2f}",
                f"{pct(a.round_trips_per_section, b.round_trips_per_section):+.0f}%",
                f"{a.server_cmds_per_section:.2f}",
                f"{b.server_cmds_per_section:.2f}",
                f"{pct(a.server_cmds_per_section, b.server_cmds_per_section):+.0f}%",
                f"{bl.fmt(a.handoff_p50_ms, '.3f')}/{bl.fmt(b.handoff_p50_ms, '.3f')}",
                f"{bl.fmt(a.same_worker_pct, '.0f')}/{bl.fmt(b.same_worker_pct, '.0f')}",
                f"{a.violations}/{b.violations}",
            ]
        )
    tables.append(
        bl.TableData(
            f"P3. Redis work per hand-off at {lo} and {hi} processes "
            f"({meta['count_seconds']:g} s each)",
            [
                "primitive",
                f"RT n={lo}",
                f"RT n={hi}",
                "RT change",
                f"srv cmds n={lo}",
                f"srv cmds n={hi}",
                "cmds change",
                f"hand-off p50 ms n={lo}/{hi}",
                f"same % n={lo}/{hi}",
                f"overlaps n={lo}/{hi}",
            ],
            rows,
            [
                "Per section (one acquire+release, i.e. one hand-off under contention): "
                "round trips sent by all workers and INFO commandstats calls over the phase, "
                "divided by the sections.",
            ],
        )
    )
    # Peers.
    peer_rows = []
    for impl in ("rw-read", *PORTALOCKER_SHARED, "rw-write", *PORTALOCKER_EXCLUSIVE):
        if impl in unc:
            base = unc[PEER_OF.get(impl, impl)].cycles_per_s
            peer_rows.append(unc_row(unc[impl], base))
    tables.append(
        bl.TableData(
            "P4. Peers, uncontended: portalocker's RedisLock (shared / exclusive) against "
            "ReadWriteLock.read / .write (same slices as P1)",
            [
                "lock",
                "cycles/s",
                "x raw",
                "x tenure",
                "us/cycle",
                *CPU_HEADERS,
                "RT/cycle",
                "srv cmds/cycle",
            ],
            peer_rows,
            [
                "x tenure: over the tenure primitive it is compared with (.read for SHARED, "
                ".write for EXCLUSIVE). portalocker with its defaults (reader thread polls "
                "every 0.1 s, retries every 0.25 s) and with both at 1 ms.",
                *missing_notes(res, ["portalocker"]),
            ],
        )
    )
    pl_rows = [r for r in res.handoff if r.impl in ("rw-write", *PORTALOCKER_EXCLUSIVE)]
    write4 = {r.workers: r.sections_per_s for r in res.handoff if r.impl == "rw-write"}
    tables.append(
        bl.TableData(
            f"P5. Peers, contended exclusive: {HANDOFF_PROCESSES} processes "
            f"({meta['contended_seconds']:g} s each)",
            contended_headers("x tenure"),
            contended_rows(pl_rows, write4),
            [
                "x tenure: sections/s over tenure ReadWriteLock.write's (the phase of P2).",
                *missing_notes(res, ["portalocker"]),
            ],
        )
    )
    tables.append(
        bl.TableData(
            f"P6. Read-write, mixed: {MIXED_READERS} reader processes and {MIXED_WRITERS} "
            f"writer process on one name, {bl.BODY * 1000:g} ms body, "
            f"{meta['mixed_seconds']:g} s each",
            [
                "lock",
                "reads/s",
                "writes/s",
                "most readers at once",
                "read wait p50/p99 ms",
                "write wait p50/p99/max ms",
                "per-worker min/max",
                "RT/section",
                "srv cmds/section",
                "violations",
            ],
            [
                [
                    m.label,
                    f"{m.reads_per_s:,.0f}",
                    f"{m.writes_per_s:,.0f}",
                    str(m.max_readers),
                    f"{bl.fmt(m.read_wait_p50_ms, '.2f')}/{bl.fmt(m.read_wait_p99_ms, '.1f')}",
                    f"{bl.fmt(m.write_wait_p50_ms, '.1f')}/{bl.fmt(m.write_wait_p99_ms, '.1f')}"
                    f"/{bl.fmt(m.write_wait_max_ms, '.0f')}",
                    f"{min(m.per_worker_sections)}/{max(m.per_worker_sections)}",
                    bl.fmt(m.round_trips_per_section, ".2f"),
                    bl.fmt(m.server_cmds_per_section, ".2f"),
                    str(m.violations),
                ]
                for m in res.mixed
            ],
            [
                "Each reader loops read-acquire, 1 ms body, release; the writer the same in "
                "write mode. violations: holds that began while a write hold was in progress, "
                "or write holds that began beside a read hold.",
                *missing_notes(res, ["portalocker"]),
            ],
        )
    )
    aunc = {u.impl: u for u in res.async_unc}
    sem_rate = aunc["semaphore-async"].cycles_per_s if "semaphore-async" in aunc else math.nan
    tables.append(
        bl.TableData(
            f"P7. asyncio semaphores, uncontended: one task, {PERMITS} permits, one per acquire",
            [
                "semaphore",
                "cycles/s",
                "x raw",
                "x tenure",
                "us/cycle",
                *CPU_HEADERS,
                "RT/cycle",
                "srv cmds/cycle",
            ],
            [unc_row(aunc[impl], sem_rate) for impl in ASYNC_IMPLS if impl in aunc],
            [
                "x raw: over the raw floor written with redis.asyncio; x tenure: over "
                "AsyncSemaphore's.",
                *missing_notes(res, ["redsync"]),
            ],
        )
    )
    tables.append(
        bl.TableData(
            f"P8. asyncio semaphores, contended: n tasks in one process, {PERMITS} permits, "
            f"{bl.BODY * 1000:g} ms body, {meta['async_seconds']:g} s each",
            [
                "semaphore",
                "n",
                "sections/s",
                "x tenure",
                "wait p50/p99/max ms",
                "per-task min/max",
                "most holders",
                "RT/section",
                "srv cmds/section",
                "over limit",
            ],
            [
                [
                    s.label,
                    str(s.workers),
                    f"{s.sections_per_s:,.0f}",
                    ratio(s.ratio_to_tenure),
                    f"{bl.fmt(s.wait_p50_ms, '.1f')}/{bl.fmt(s.wait_p99_ms, '.1f')}"
                    f"/{bl.fmt(s.wait_max_ms, '.0f')}",
                    f"{min(s.per_worker_sections)}/{max(s.per_worker_sections)}",
                    str(s.max_holders),
                    bl.fmt(s.round_trips_per_section, ".2f"),
                    bl.fmt(s.server_cmds_per_section, ".2f"),
                    str(s.violations),
                ]
                for s in res.async_sem
            ],
            [
                f"most holders: the most holds in progress at once (at most {PERMITS}); over "
                f"limit: acquires that made it more than {PERMITS}.",
                *missing_notes(res, ["redsync"]),
            ],
        )
    )
    tables.append(
        bl.TableData(
            "Targets",
            ["target", "measured", "met"],
            [[g.what, g.measured, "yes" if g.met else "NO"] for g in tgt],
        )
    )
    return tables


# --------------------------------------------------------------------------
# Main.
# --------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="short phases (about 30 s in all)")
    p.add_argument("--json", metavar="PATH", help="also write every number to PATH")
    p.add_argument("--markdown", metavar="PATH", help="also write the tables as Markdown")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--server", metavar="PATH", help="redis-server/valkey-server to start")
    where.add_argument("--url", help="use this running server instead of starting one")
    p.add_argument("--seconds", type=float, help="override the 4-process and asyncio phase length")
    p.add_argument(
        "--p1-only",
        metavar="IMPLS",
        help="run table P1 alone, for the raw floor, tenure Lock and these primitives"
        " (comma-separated names of PRIMITIVES, e.g. multi), and print its rows",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    phase = args.seconds or (0.5 if args.quick else 2.0)
    count_phase = min(phase, 0.4 if args.quick else 1.0)
    short_phase = min(phase, 0.4 if args.quick else 2.0)
    round_s = 0.1 if args.quick else 0.5
    counted = 500 if args.quick else 1000  # cycles of the counted uncontended pass
    rounds = 3
    missing: dict[str, str] = {}
    versions: dict[str, str] = {"redis-py": redis.__version__}
    for pkg in ("portalocker", "redsync"):
        version = package_version(pkg)
        if version is None:
            missing[pkg] = f"not installed (pip install {pkg}, or make bench)"
        else:
            versions[pkg] = version
    server: ServerProcess | None = None
    if args.url:
        url = str(args.url)
    else:
        server = ServerProcess(args.server).start()
        url = server.url
    tag = f"bench:{secrets.token_hex(4)}"
    started = time.monotonic()
    pool: bl.WorkerPool | None = None
    try:
        stats = redis.Redis.from_url(url)
        meta: dict[str, Any] = {
            "server": bl.server_description(stats),
            "url": url,
            "binary": server.binary if server else None,
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "redis_py": redis.__version__,
            "libraries": versions,
            "missing": missing,
            "tenure": tenure.__version__,
            "quick": bool(args.quick),
            "ttl_s": bl.TTL,
            "body_s": bl.BODY,
            "permits": PERMITS,
            "uncontended_round_s": round_s,
            "uncontended_rounds": rounds,
            "counted_cycles": counted,
            "contended_seconds": phase,
            "count_seconds": count_phase,
            "mixed_seconds": short_phase,
            "async_seconds": short_phase,
        }
        bl.log(f"server: {meta['server']} at {url}")
        sync_impls = [
            i for i in (*PRIMITIVES, *PORTALOCKER_SHARED, *PORTALOCKER_EXCLUSIVE) if available(i)
        ]
        if args.p1_only:
            wanted = {"raw", "lock", *args.p1_only.split(",")}
            if not wanted <= set(PRIMITIVES):
                unknown = sorted(wanted - set(PRIMITIVES))
                raise SystemExit(f"--p1-only: not in PRIMITIVES: {unknown}")
            sync_impls = [i for i in PRIMITIVES if i in wanted]
        bl.log(f"uncontended: {len(sync_impls)} locks x {rounds} rounds x {round_s:g} s")
        unc = bl.bench_uncontended(
            url, stats, round_s, rounds, tag, sync_impls, make_primitive, LABELS, counted
        )
        if args.p1_only:
            print(f"P1 on {meta['server']}: cycles/s, x raw, RT, srv cmds, client CPU us /cycle")
            for u in unc:
                print(
                    f"{u.label:32} {u.cycles_per_s:8,.0f} {u.ratio_to_raw:5.2f}"
                    f" {u.round_trips_per_cycle:5.2f} {u.server_cmds_per_cycle:6.2f}"
                    f" {u.client_cpu_us_per_cycle:5.0f}"
                )
            stats.close()
            return 0

        size = max(*COUNT_PROCESSES, HANDOFF_PROCESSES, MIXED_READERS + MIXED_WRITERS)
        bl.log(f"contended: starting {size} worker processes (spawn)")
        pool = bl.WorkerPool(size, url, make_primitive)
        handoff: list[bl.Contended] = []
        for impl in (*EXCLUSIVE, *PORTALOCKER_EXCLUSIVE):
            if not available(impl):
                continue
            n = HANDOFF_PROCESSES
            bl.log(f"contended: {impl}, {n} processes, {phase:g} s")
            name = f"{tag}:p{n}:{impl}"
            settle = SETTLE.get(impl, 0.0)
            handoff.append(pool.run(impl, n, name, phase, 0.0, stats, LABELS[impl], settle))
        counts: list[bl.Contended] = []
        for n in COUNT_PROCESSES:
            for impl in FLAT:
                bl.log(f"per hand-off: {impl}, {n} processes, {count_phase:g} s")
                name = f"{tag}:c{n}:{impl}"
                settle = SETTLE.get(impl, 0.0)
                counts.append(
                    pool.run(impl, n, name, count_phase, 0.0, stats, LABELS[impl], settle)
                )
        mixed: list[Mixed] = []
        roles = ["read"] * MIXED_READERS + ["write"] * MIXED_WRITERS
        for label, read_impl, write_impl in (
            ("tenure ReadWriteLock", "rw-read", "rw-write"),
            ("portalocker RedisLock", "pl-shared", "pl-exclusive"),
            ("portalocker RedisLock, 1 ms", "pl-shared-1ms", "pl-exclusive-1ms"),
        ):
            if not available(read_impl):
                continue
            bl.log(f"mixed: {label}, {short_phase:g} s")
            name = f"{tag}:m:{read_impl}"
            jobs = [(read_impl if r == "read" else write_impl, name, 0.0) for r in roles]
            d = pool.run_jobs(jobs, short_phase, stats)
            mixed.append(
                analyze_mixed(
                    read_impl,
                    label,
                    roles,
                    d.per_worker,
                    d.start,
                    d.end,
                    d.server_cmds,
                    d.round_trips,
                )
            )
        pool.close()
        pool = None

        async_impls = [i for i in ASYNC_IMPLS if available(i)]
        bl.log(f"asyncio uncontended: {len(async_impls)} semaphores x {rounds} rounds")
        async_unc = asyncio.run(
            bench_uncontended_async(url, stats, round_s, rounds, tag, async_impls, counted)
        )
        async_sem: list[Limited] = []
        for n in TASK_COUNTS:
            for impl in async_impls:
                if impl == "raw-async":
                    continue
                bl.log(f"asyncio: {impl}, {n} tasks, {short_phase:g} s")
                async_sem.append(
                    asyncio.run(
                        semaphore_phase(impl, url, n, f"{tag}:t{n}:{impl}", short_phase, stats)
                    )
                )
        ref = {s.workers: s.sections_per_s for s in async_sem if s.impl == "semaphore-async"}
        for s in async_sem:
            if ref.get(s.workers):
                s.ratio_to_tenure = s.sections_per_s / ref[s.workers]

        res = Results(unc, handoff, counts, mixed, async_unc, async_sem, missing)
        tgt = targets(res)
        meta["total_seconds"] = round(time.monotonic() - started, 1)
        tables = report_tables(meta, res, tgt)
        bl.print_report(meta, tables, "tenure primitives benchmark", width=200)
        bl.log(f"total {meta['total_seconds']} s")
        if args.json:
            doc = {
                "meta": meta,
                "uncontended": [asdict(u) for u in unc],
                "handoff": [asdict(c) for c in handoff],
                "per_handoff": [asdict(c) for c in counts],
                "mixed": [asdict(m) for m in mixed],
                "async_uncontended": [asdict(u) for u in async_unc],
                "async_semaphore": [asdict(s) for s in async_sem],
                "targets": [asdict(g) for g in tgt],
            }
            with open(args.json, "w") as f:
                json.dump(bl.to_jsonable(doc), f, indent=2)
                f.write("\n")
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(bl.markdown(meta, tables))
        stats.close()
    finally:
        if pool is not None:
            pool.close()
        if server is not None:
            server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
