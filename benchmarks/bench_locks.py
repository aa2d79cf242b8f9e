"""Benchmark tenure's Lock against redis-py's Lock, python-redis-lock and a raw floor.

Every implementation runs in this one run against one server (started here
unless ``--url`` is given), in three parts:

1. uncontended acquire+release cycles/s in this process (best of 3 rounds);
2. contended: 2, 4 and 8 worker processes (spawn) on one name, each looping
   acquire, a 1 ms body, release, for a fixed wall time (3 s);
3. asyncio: 10 and 100 tasks in this process on one name, same loop.

The raw floor is ``SET key token NX PX`` plus an EVALSHA compare-and-delete
(2 round trips per cycle), retrying every 1 ms while the lock is busy.

Usage (``make bench`` runs the first line)::

    .venv/bin/python benchmarks/bench_locks.py
    .venv/bin/python benchmarks/bench_locks.py --quick            # about 35 s
    .venv/bin/python benchmarks/bench_locks.py --json out.json --markdown out.md
    .venv/bin/python benchmarks/bench_locks.py --server /usr/bin/redis-server
    .venv/bin/python benchmarks/bench_locks.py --url redis://host:6379/0
    .venv/bin/python benchmarks/bench_locks.py --think 0.002     # pause after release

See docs/benchmarks.md for what each number means. ``bench_primitives.py``
(which uses this module's helpers) measures tenure's other primitives and
their Python peers.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import math
import multiprocessing
import os
import platform
import secrets
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from typing import Any, Protocol

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.connection
import redis_lock

import tenure
from tenure._server import ServerProcess

#: Lease length of every lock, seconds: far longer than any hold, so no lease
#: expires during a run and every mutual-exclusion violation would be real.
TTL = 10.0
#: The critical section, seconds.
BODY = 0.001
#: The raw floor's retry interval while the lock is busy, seconds.
RAW_RETRY = 0.001
#: The compare-and-delete release of the raw floor.
UNLOCK_LUA = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
    "else return 0 end"
)

SYNC_IMPLS: tuple[str, ...] = ("tenure", "redis-py", "redis-py-1ms", "python-redis-lock", "raw")
ASYNC_IMPLS: tuple[str, ...] = ("tenure", "redis-py", "redis-py-1ms", "raw")
LABELS: dict[str, str] = {
    "tenure": "tenure Lock",
    "redis-py": "redis-py sleep=0.1",
    "redis-py-1ms": "redis-py sleep=0.001",
    "python-redis-lock": "python-redis-lock",
    "raw": "raw floor",
}
ASYNC_LABELS: dict[str, str] = {
    "tenure": "tenure AsyncLock",
    "redis-py": "redis.asyncio sleep=0.1",
    "redis-py-1ms": "redis.asyncio sleep=0.001",
    "raw": "raw floor (asyncio)",
}
#: Slices per uncontended round (see bench_uncontended).
UNCONTENDED_SLICES = 10
PROCESS_COUNTS: tuple[int, ...] = (2, 4, 8)
TASK_COUNTS: tuple[int, ...] = (10, 100)

#: One hold: (acquire called, acquire returned, release called, release returned),
#: all ``time.monotonic()`` (CLOCK_MONOTONIC: one clock for every process on Linux).
Hold = tuple[float, float, float, float]


# --------------------------------------------------------------------------
# Counting round trips: every command a redis-py connection sends.
# --------------------------------------------------------------------------


class _SentCounter:
    """Commands sent by this process's redis-py connections (sync and asyncio)."""

    def __init__(self) -> None:
        self.value = 0
        self._mutex = threading.Lock()

    def add(self) -> None:
        with self._mutex:
            self.value += 1


SENT = _SentCounter()


@contextmanager
def counting_round_trips() -> Iterator[_SentCounter]:
    """Count, while inside, every write to a server through redis-py (one round
    trip each): ``send_packed_command``, which every command goes through (a
    pipeline's commands in one write count once, as one round trip; tenure's
    quick path writes there directly).

    Commands that Lua scripts run inside the server are not sent, so they are
    not counted here; ``INFO commandstats`` counts them.
    """
    sync_cls = redis.connection.AbstractConnection
    async_cls = redis.asyncio.connection.AbstractConnection
    sync_orig: Callable[..., None] = sync_cls.send_packed_command
    async_orig: Callable[..., Awaitable[None]] = async_cls.send_packed_command

    def send_packed_command(self: Any, command: Any, check_health: bool = True) -> None:
        SENT.add()
        sync_orig(self, command, check_health)

    async def async_send_packed_command(self: Any, command: Any, check_health: bool = True) -> None:
        SENT.add()
        await async_orig(self, command, check_health)

    setattr(sync_cls, "send_packed_command", send_packed_command)  # noqa: B010
    setattr(async_cls, "send_packed_command", async_send_packed_command)  # noqa: B010
    try:
        yield SENT
    finally:
        setattr(sync_cls, "send_packed_command", sync_orig)  # noqa: B010
        setattr(async_cls, "send_packed_command", async_orig)  # noqa: B010


class InfoSource(Protocol):
    """What :func:`command_calls` reads: a client, or the sum of several servers'."""

    def info(self, section: str) -> Any: ...


def command_calls(client: InfoSource) -> dict[str, int]:
    """``INFO commandstats`` as {command: calls}; includes commands run by scripts."""
    stats: dict[str, Any] = client.info("commandstats")
    return {name: int(v["calls"]) for name, v in stats.items()}


def server_cpu(client: redis.Redis) -> float:
    """The server's CPU time so far (user + system, all its threads), seconds."""
    cpu: dict[str, Any] = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def calls_between(before: dict[str, int], after: dict[str, int]) -> int:
    """All commands the server ran between two snapshots, except the INFO calls."""
    return sum(n - before.get(name, 0) for name, n in after.items() if name != "cmdstat_info")


# --------------------------------------------------------------------------
# The lock implementations, behind one small interface each (sync and async).
# --------------------------------------------------------------------------


class SyncLock(Protocol):
    def acquire(self) -> None: ...
    def release(self) -> None: ...


class TenureSync:
    def __init__(self, client: redis.Redis, name: str) -> None:
        self._lock = tenure.Lock(client, name, ttl=TTL)
        self._lease: tenure.Lease | None = None

    def acquire(self) -> None:
        self._lease = self._lock.acquire()
        if self._lease is None:
            raise RuntimeError("tenure: blocking acquire returned None")

    def release(self) -> None:
        assert self._lease is not None
        self._lease.release()
        self._lease = None


class RedisPySync:
    def __init__(self, client: redis.Redis, name: str, sleep: float) -> None:
        self._lock = client.lock(name, timeout=TTL, sleep=sleep)

    def acquire(self) -> None:
        if not self._lock.acquire():
            raise RuntimeError("redis-py: blocking acquire returned False")

    def release(self) -> None:
        self._lock.release()


class PythonRedisLockSync:
    def __init__(self, client: redis.Redis, name: str) -> None:
        self._lock: Any = redis_lock.Lock(client, name, expire=int(TTL))

    def acquire(self) -> None:
        if not self._lock.acquire():
            raise RuntimeError("python-redis-lock: blocking acquire returned False")

    def release(self) -> None:
        self._lock.release()


class RawSync:
    """The floor: SET NX PX, sleep 1 ms and retry while busy; EVALSHA compare-and-delete."""

    def __init__(self, client: redis.Redis, name: str, sha: str) -> None:
        self._client = client
        self._name = name
        self._sha = sha
        self._ms = int(TTL * 1000)
        self._token = ""

    def acquire(self) -> None:
        token = secrets.token_hex(16)
        while not self._client.set(self._name, token, nx=True, px=self._ms):
            time.sleep(RAW_RETRY)
        self._token = token

    def release(self) -> None:
        if self._client.evalsha(self._sha, 1, self._name, self._token) != 1:
            raise RuntimeError("raw floor: the lock was not held at release")


def make_sync(impl: str, client: redis.Redis, name: str, sha: str) -> SyncLock:
    if impl == "tenure":
        return TenureSync(client, name)
    if impl == "redis-py":
        return RedisPySync(client, name, 0.1)
    if impl == "redis-py-1ms":
        return RedisPySync(client, name, 0.001)
    if impl == "python-redis-lock":
        return PythonRedisLockSync(client, name)
    if impl == "raw":
        return RawSync(client, name, sha)
    raise ValueError(impl)


class AsyncLock(Protocol):
    async def acquire(self) -> None: ...
    async def release(self) -> None: ...


class AsyncReleasable(Protocol):
    async def release(self) -> None: ...


class AsyncAcquirer(Protocol):
    @property
    def name(self) -> str: ...

    async def acquire(self) -> AsyncReleasable | None: ...


class TenureAsync:
    """One per task; the tasks share one tenure primitive (``AsyncLock``,
    ``AsyncSemaphore``, ...: each task is its own owner)."""

    def __init__(self, lock: AsyncAcquirer) -> None:
        self._lock = lock
        self._lease: AsyncReleasable | None = None

    async def acquire(self) -> None:
        self._lease = await self._lock.acquire()
        if self._lease is None:
            raise RuntimeError(f"tenure {self._lock.name!r}: blocking acquire returned None")

    async def release(self) -> None:
        assert self._lease is not None
        await self._lease.release()
        self._lease = None


class RedisPyAsync:
    """One redis-py Lock object per task: one shared object would share one token."""

    def __init__(self, client: redis.asyncio.Redis, name: str, sleep: float) -> None:
        self._lock = client.lock(name, timeout=TTL, sleep=sleep)

    async def acquire(self) -> None:
        if not await self._lock.acquire():
            raise RuntimeError("redis-py: blocking acquire returned False")

    async def release(self) -> None:
        await self._lock.release()


class RawAsync:
    def __init__(self, client: redis.asyncio.Redis, name: str, sha: str) -> None:
        self._client = client
        self._name = name
        self._sha = sha
        self._ms = int(TTL * 1000)
        self._token = ""

    async def acquire(self) -> None:
        token = secrets.token_hex(16)
        while not await self._client.set(self._name, token, nx=True, px=self._ms):
            await asyncio.sleep(RAW_RETRY)
        self._token = token

    async def release(self) -> None:
        if await self._client.evalsha(self._sha, 1, self._name, self._token) != 1:
            raise RuntimeError("raw floor: the lock was not held at release")


def async_factory(
    impl: str, client: redis.asyncio.Redis, name: str, sha: str
) -> Callable[[], AsyncLock]:
    """A maker of per-task lock handles for one name."""
    if impl == "tenure":
        shared = tenure.AsyncLock(client, name, ttl=TTL)
        return lambda: TenureAsync(shared)
    if impl == "redis-py":
        return lambda: RedisPyAsync(client, name, 0.1)
    if impl == "redis-py-1ms":
        return lambda: RedisPyAsync(client, name, 0.001)
    if impl == "raw":
        return lambda: RawAsync(client, name, sha)
    raise ValueError(impl)


# --------------------------------------------------------------------------
# Analysis of recorded holds.
# --------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of an ascending sequence (NaN when empty)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass
class Contended:
    """One contended phase (processes or tasks) of one implementation."""

    impl: str
    label: str
    mode: str  # "processes" or "tasks"
    workers: int
    seconds: float
    sections: int  # all holds recorded (including those acquired after the end)
    sections_per_s: float  # holds acquired within the timed window / its length
    ratio_to_raw: float = math.nan
    handoffs: int = 0  # gaps counted for the hand-off latency
    handoff_p50_ms: float = math.nan
    handoff_p99_ms: float = math.nan
    handoff_after_return_p50_ms: float = math.nan  # measured from release returned
    cross_handoffs: int = 0  # counted hand-offs that went to another worker
    cross_handoff_p50_ms: float = math.nan
    cross_handoff_p99_ms: float = math.nan
    wait_p50_ms: float = math.nan
    wait_p99_ms: float = math.nan
    wait_max_ms: float = math.nan
    same_worker_pct: float = math.nan  # hand-offs that went back to the releasing worker
    server_cmds_per_section: float = math.nan
    round_trips_per_section: float = math.nan
    violations: int = 0
    per_worker_sections: list[int] = field(default_factory=list)


def analyze(
    impl: str,
    label: str,
    mode: str,
    per_worker: list[list[Hold]],
    start: float,
    end: float,
    server_cmds: int,
    round_trips: int,
) -> Contended:
    """Sections/s, hand-off latency, waits, fairness and mutual exclusion of one phase.

    A hold counts as held from "acquire returned" to "release called": inside
    the true hold on both ends, so any overlap of two such intervals is a real
    mutual-exclusion violation. The hand-off latency of two consecutive holds
    is next.acquired - prev.release_called, counted only when some worker was
    waiting (inside acquire) at prev.release_called.
    """
    holds = sorted(((h, w) for w, hs in enumerate(per_worker) for h in hs), key=lambda hw: hw[0][1])
    n = len(holds)
    requested = [[h[0] for h in hs] for hs in per_worker]

    def someone_waiting(t: float) -> bool:
        for w, hs in enumerate(per_worker):
            i = bisect.bisect_right(requested[w], t) - 1
            if i >= 0 and t < hs[i][1]:
                return True
        return False

    violations = 0
    latest_release = -math.inf
    gaps: list[float] = []
    gaps_after_return: list[float] = []
    cross: list[float] = []
    for i, (h, w) in enumerate(holds):
        if h[1] < latest_release:
            violations += 1
        latest_release = max(latest_release, h[2])
        if i > 0:
            prev, prev_w = holds[i - 1]
            if someone_waiting(prev[2]):
                gaps.append(h[1] - prev[2])
                gaps_after_return.append(h[1] - prev[3])
                if w != prev_w:
                    cross.append(h[1] - prev[2])
    gaps.sort()
    gaps_after_return.sort()
    cross.sort()
    waits = sorted(h[1] - h[0] for h, _ in holds)
    in_window = sum(1 for h, _ in holds if h[1] <= end)
    ms = 1000.0
    return Contended(
        impl=impl,
        label=label,
        mode=mode,
        workers=len(per_worker),
        seconds=end - start,
        sections=n,
        sections_per_s=in_window / (end - start),
        handoffs=len(gaps),
        handoff_p50_ms=percentile(gaps, 50) * ms,
        handoff_p99_ms=percentile(gaps, 99) * ms,
        handoff_after_return_p50_ms=percentile(gaps_after_return, 50) * ms,
        cross_handoffs=len(cross),
        cross_handoff_p50_ms=percentile(cross, 50) * ms,
        cross_handoff_p99_ms=percentile(cross, 99) * ms,
        wait_p50_ms=percentile(waits, 50) * ms,
        wait_p99_ms=percentile(waits, 99) * ms,
        wait_max_ms=(waits[-1] if waits else math.nan) * ms,
        same_worker_pct=100.0 * (len(gaps) - len(cross)) / len(gaps) if gaps else math.nan,
        server_cmds_per_section=server_cmds / n if n else math.nan,
        round_trips_per_section=round_trips / n if n else math.nan,
        violations=violations,
        per_worker_sections=[len(hs) for hs in per_worker],
    )


def run_sync_loop(lock: SyncLock, start: float, end: float, think: float) -> list[Hold]:
    """Acquire, 1 ms body, release (then ``think`` s), from ``start`` until ``end``."""
    mono = time.monotonic
    sleep = time.sleep
    delay = start - mono()
    if delay > 0:
        sleep(delay)
    holds: list[Hold] = []
    while True:
        t0 = mono()
        if t0 >= end:
            return holds
        lock.acquire()
        t1 = mono()
        sleep(BODY)
        t2 = mono()
        lock.release()
        holds.append((t0, t1, t2, mono()))
        if think:
            sleep(think)


async def run_async_loop(lock: AsyncLock, start: float, end: float, think: float) -> list[Hold]:
    mono = time.monotonic
    delay = start - mono()
    if delay > 0:
        await asyncio.sleep(delay)
    holds: list[Hold] = []
    while True:
        t0 = mono()
        if t0 >= end:
            return holds
        await lock.acquire()
        t1 = mono()
        await asyncio.sleep(BODY)
        t2 = mono()
        await lock.release()
        holds.append((t0, t1, t2, mono()))
        if think:
            await asyncio.sleep(think)


# --------------------------------------------------------------------------
# Part 1: uncontended.
# --------------------------------------------------------------------------


@dataclass
class Uncontended:
    impl: str
    label: str
    rounds: list[float]  # cycles/s of each round
    cycles_per_s: float  # the best round
    ratio_to_raw: float = math.nan
    server_cmds_per_cycle: float = math.nan
    round_trips_per_cycle: float = math.nan
    # CPU per cycle, µs: this process's (all threads) and the server's (INFO cpu)
    client_cpu_us_per_cycle: float = math.nan
    server_cpu_us_per_cycle: float = math.nan


#: A maker of one implementation's lock: (impl, client, name, raw floor's script sha).
MakeSync = Callable[[str, redis.Redis, str, str], SyncLock]
#: Makes a worker's client from the url it is given.
Connect = Callable[[str], Any]


def bench_uncontended(
    url: str,
    stats: redis.Redis,
    seconds: float,
    rounds: int,
    tag: str,
    impls: Sequence[str] = SYNC_IMPLS,
    make: MakeSync | None = None,
    labels: dict[str, str] | None = None,
    counted: int = 500,
) -> list[Uncontended]:
    """Cycles/s of each of ``impls`` (which must include "raw"), in one process.

    ``make`` builds an implementation's lock (default :func:`make_sync`),
    ``labels`` names it in the tables (default :data:`LABELS`). Round trips,
    server commands and CPU per cycle come from a separate pass of ``counted``
    cycles (or about a quarter of a second of them, for a slow lock).
    """
    make = make or make_sync
    labels = labels or LABELS
    client = redis.Redis.from_url(url)
    sha = str(client.script_load(UNLOCK_LUA))
    locks = {impl: make(impl, client, f"{tag}:u:{impl}", sha) for impl in impls}
    for lock in locks.values():  # warm up: server probe, script loading, connection, CPU
        end = time.monotonic() + seconds / 2
        while time.monotonic() < end:
            lock.acquire()
            lock.release()
    per_round: dict[str, list[float]] = {impl: [] for impl in impls}
    mono = time.monotonic
    # This machine's speed drifts by up to 2-3x over seconds (a shared VM). So
    # each round gives every lock `seconds` in all, in short slices taken in
    # turn (the order rotating each time): all locks see the same mix of fast
    # and slow moments, which keeps their ratios honest.
    order = list(impls)
    slice_s = seconds / UNCONTENDED_SLICES
    for _ in range(rounds):
        cycles = dict.fromkeys(order, 0)
        spent = dict.fromkeys(order, 0.0)
        for k in range(UNCONTENDED_SLICES):
            for impl in order:
                # A lock whose one cycle outlasts a slice (a slow peer) has had
                # its share of the round already: it skips slices until the
                # others catch up, so the round stays about `seconds` long.
                if spent[impl] >= (k + 1) * slice_s:
                    continue
                lock = locks[impl]
                n = 0
                started = mono()
                end = started + slice_s
                while mono() < end:
                    lock.acquire()
                    lock.release()
                    n += 1
                spent[impl] += mono() - started
                cycles[impl] += n
            order.append(order.pop(0))
        for impl in impls:
            per_round[impl].append(cycles[impl] / spent[impl])
    results = [
        Uncontended(impl, labels[impl], per_round[impl], max(per_round[impl])) for impl in impls
    ]
    for r in results:
        lock = locks[r.impl]
        count = min(counted, max(10, int(r.cycles_per_s / 4)))
        with counting_round_trips() as sent:
            before, sent0 = command_calls(stats), sent.value
            server0, client0 = server_cpu(stats), time.process_time()
            for _ in range(count):
                lock.acquire()
                lock.release()
            r.client_cpu_us_per_cycle = (time.process_time() - client0) / count * 1e6
            r.server_cpu_us_per_cycle = (server_cpu(stats) - server0) / count * 1e6
            r.round_trips_per_cycle = (sent.value - sent0) / count
            r.server_cmds_per_cycle = calls_between(before, command_calls(stats)) / count
    raw = next(r.cycles_per_s for r in results if r.impl == "raw")
    for r in results:
        r.ratio_to_raw = r.cycles_per_s / raw
    client.close()
    return results


# --------------------------------------------------------------------------
# Part 2: contended, worker processes.
# --------------------------------------------------------------------------

WorkerMessage = tuple[Any, ...]


def worker_main(
    wid: int,
    url: str,
    inbox: Queue[WorkerMessage | None],
    outbox: Queue[WorkerMessage],
    make: MakeSync = make_sync,
    connect: Connect = redis.Redis.from_url,
) -> None:
    """A benchmark worker process: runs one phase per pair of messages.

    A job is (impl, name, think, settle); ``make`` builds the lock of ``impl``
    on the client that ``connect`` makes from ``url`` (default: one server's).
    After its loop the worker sleeps ``settle`` seconds before it reports its
    round trips, so that commands a lock sends late (a wake channel
    unsubscribed a while after the last wait) count in this phase, not the next.
    """
    try:
        with counting_round_trips() as sent:
            client = connect(url)
            sha = str(client.script_load(UNLOCK_LUA))
            outbox.put(("up", wid))
            while (job := inbox.get()) is not None:
                impl, name, think, settle = job
                warm = make(impl, client, name + ":warm", sha)
                warm.acquire()
                warm.release()
                lock = make(impl, client, name, sha)
                outbox.put(("ready", wid))
                go = inbox.get()
                assert go is not None
                start, end = go
                sent0 = sent.value
                holds = run_sync_loop(lock, start, end, think)
                if settle:
                    time.sleep(settle)
                outbox.put(("done", wid, holds, sent.value - sent0))
            client.close()
    except BaseException:
        outbox.put(("error", wid, traceback.format_exc()))


@dataclass
class PhaseData:
    """What the workers of one contended phase recorded."""

    start: float
    end: float
    per_worker: list[list[Hold]]  # in worker order
    round_trips: int  # commands sent by the workers' connections
    server_cmds: int  # INFO commandstats over the phase, less the INFO calls


class WorkerPool:
    """Worker processes started once (spawn) and reused by every contended phase.

    ``make`` (a module-level function, so that it pickles) builds the lock of
    each job's implementation in the workers (default :func:`make_sync`), on
    the client ``connect`` makes from ``url`` (default: ``redis.Redis.from_url``).
    """

    def __init__(
        self,
        size: int,
        url: str,
        make: MakeSync = make_sync,
        connect: Connect = redis.Redis.from_url,
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._inboxes: list[Queue[WorkerMessage | None]] = [ctx.Queue() for _ in range(size)]
        self._outbox: Queue[WorkerMessage] = ctx.Queue()
        self._procs: list[BaseProcess] = [
            ctx.Process(
                target=worker_main,
                args=(i, url, self._inboxes[i], self._outbox, make, connect),
                name=f"bench-worker-{i}",
                daemon=True,
            )
            for i in range(size)
        ]
        for p in self._procs:
            p.start()
        self._collect("up", size, 60.0)

    def _collect(self, kind: str, count: int, timeout: float) -> list[WorkerMessage]:
        got: list[WorkerMessage] = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            msg = self._outbox.get(timeout=max(0.1, deadline - time.monotonic()))
            if msg[0] == "error":
                raise RuntimeError(f"worker {msg[1]} failed:\n{msg[2]}")
            if msg[0] != kind:
                raise RuntimeError(f"expected {kind!r} from a worker, got {msg!r}")
            got.append(msg)
        return got

    def run_jobs(
        self,
        jobs: Sequence[tuple[str, str, float]],
        seconds: float,
        stats: InfoSource,
        settle: float = 0.0,
    ) -> PhaseData:
        """Run one phase: worker i runs jobs[i] = (impl, name, think) for ``seconds``.

        The counts of round trips and server commands include what the workers
        send for ``settle`` seconds after the phase (see :func:`worker_main`).
        """
        workers = len(jobs)
        for i, job in enumerate(jobs):
            self._inboxes[i].put((*job, settle))
        self._collect("ready", workers, 30.0)
        before = command_calls(stats)
        start = time.monotonic() + 0.05
        end = start + seconds
        for i in range(workers):
            self._inboxes[i].put((start, end))
        done = self._collect("done", workers, seconds + settle + 60.0)
        server_cmds = calls_between(before, command_calls(stats))
        done.sort(key=lambda m: int(m[1]))
        per_worker: list[list[Hold]] = [list(m[2]) for m in done]
        round_trips = sum(int(m[3]) for m in done)
        return PhaseData(start, end, per_worker, round_trips, server_cmds)

    def run(
        self,
        impl: str,
        workers: int,
        name: str,
        seconds: float,
        think: float,
        stats: InfoSource,
        label: str | None = None,
        settle: float = 0.0,
    ) -> Contended:
        """Run one phase of ``workers`` processes looping on one lock of ``impl``."""
        d = self.run_jobs([(impl, name, think)] * workers, seconds, stats, settle)
        return analyze(
            impl,
            label or LABELS[impl],
            "processes",
            d.per_worker,
            d.start,
            d.end,
            d.server_cmds,
            d.round_trips,
        )

    def close(self) -> None:
        for q in self._inboxes:
            q.put(None)
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)


# --------------------------------------------------------------------------
# Part 3: asyncio tasks in this process.
# --------------------------------------------------------------------------


async def async_phase(
    impl: str, url: str, tasks: int, name: str, seconds: float, think: float, stats: redis.Redis
) -> Contended:
    client = redis.asyncio.Redis.from_url(url)
    # Open the connections the tasks will use before the clock starts.
    await asyncio.gather(*(client.ping() for _ in range(tasks)))
    sha = str(await client.script_load(UNLOCK_LUA))
    warm = async_factory(impl, client, name + ":warm", sha)()
    await warm.acquire()
    await warm.release()
    make = async_factory(impl, client, name, sha)
    handles = [make() for _ in range(tasks)]
    with counting_round_trips() as sent:
        before, sent0 = command_calls(stats), sent.value
        start = time.monotonic() + 0.02
        end = start + seconds
        per_task = await asyncio.gather(*(run_async_loop(h, start, end, think) for h in handles))
        round_trips = sent.value - sent0
        server_cmds = calls_between(before, command_calls(stats))
    await client.aclose()
    return analyze(
        impl, ASYNC_LABELS[impl], "tasks", list(per_task), start, end, server_cmds, round_trips
    )


# --------------------------------------------------------------------------
# Reporting.
# --------------------------------------------------------------------------


@dataclass
class Target:
    what: str
    measured: str
    met: bool


def set_ratios(rows: list[Contended]) -> None:
    raw = {r.workers: r.sections_per_s for r in rows if r.impl == "raw"}
    for r in rows:
        if raw.get(r.workers):
            r.ratio_to_raw = r.sections_per_s / raw[r.workers]


def targets(unc: list[Uncontended], con: list[Contended], asy: list[Contended]) -> list[Target]:
    out: list[Target] = []
    t = next(r for r in unc if r.impl == "tenure")
    out.append(
        Target(
            "uncontended tenure >= 0.95x raw floor",
            f"{t.ratio_to_raw:.3f}x ({t.cycles_per_s:,.0f} cycles/s)",
            t.ratio_to_raw >= 0.95,
        )
    )
    by = {(r.impl, r.workers): r for r in con}
    if ("tenure", 4) in by:
        r4 = by["tenure", 4]
        out.append(
            Target(
                "4 processes: tenure hand-off p50 <= 0.3 ms",
                f"{r4.handoff_p50_ms:.3f} ms ({r4.same_worker_pct:.0f}% to the releaser; "
                f"to another process: p50 {r4.cross_handoff_p50_ms:.3f} ms)",
                r4.handoff_p50_ms <= 0.3,
            )
        )
    if ("tenure", 2) in by and ("tenure", 8) in by:
        r2, r8 = by["tenure", 2], by["tenure", 8]
        for what, a, b in (
            ("server cmds", r2.server_cmds_per_section, r8.server_cmds_per_section),
            ("round trips", r2.round_trips_per_section, r8.round_trips_per_section),
        ):
            out.append(
                Target(
                    f"tenure {what}/hand-off same at 2 and 8 processes (within 10%)",
                    f"{a:.2f} vs {b:.2f} ({(b / a - 1) * 100:+.0f}%)",
                    abs(b / a - 1) <= 0.10,
                )
            )
    ta = {(r.impl, r.workers): r for r in asy}
    if ("tenure", 100) in ta:
        r = ta["tenure", 100]
        out.append(
            Target(
                "100 tasks: tenure AsyncLock >= 2x raw floor sections/s",
                f"{r.ratio_to_raw:.2f}x ({r.sections_per_s:,.0f} vs "
                f"{ta['raw', 100].sections_per_s:,.0f}/s)",
                r.ratio_to_raw >= 2.0,
            )
        )
    bad = [f"{r.impl}/{r.mode}={r.workers}" for r in con + asy if r.violations]
    out.append(
        Target(
            "no mutual-exclusion violation, any lock",
            "none" if not bad else ", ".join(bad),
            not bad,
        )
    )
    return out


def fmt(x: float, spec: str) -> str:
    return "-" if math.isnan(x) else format(x, spec)


@dataclass
class TableData:
    """A table as text cells: rendered with rich on the terminal, or as Markdown."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


def report_tables(
    meta: dict[str, Any],
    unc: list[Uncontended],
    con: list[Contended],
    asy: list[Contended],
    tgt: list[Target],
) -> list[TableData]:
    tables = [
        TableData(
            "1. Uncontended acquire+release, one process "
            f"(best of {meta['uncontended_rounds']} rounds of {meta['uncontended_round_s']:g} s)",
            ["lock", "cycles/s", "x raw", "us/cycle", "round trips/cycle", "server cmds/cycle"],
            [
                [
                    u.label,
                    f"{u.cycles_per_s:,.0f}",
                    f"{u.ratio_to_raw:.2f}",
                    f"{1e6 / u.cycles_per_s:.0f}",
                    fmt(u.round_trips_per_cycle, ".2f"),
                    fmt(u.server_cmds_per_cycle, ".2f"),
                ]
                for u in unc
            ],
        )
    ]
    think_note = f" {meta['think_s'] * 1000:g} ms think," if meta["think_s"] else ""
    headers = [
        "lock",
        "n",
        "sections/s",
        "x raw",
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

    def rows(rs: list[Contended]) -> list[list[str]]:
        return [
            [
                r.label,
                str(r.workers),
                f"{r.sections_per_s:,.0f}",
                fmt(r.ratio_to_raw, ".2f"),
                fmt(r.handoff_p50_ms, ".3f"),
                fmt(r.handoff_p99_ms, ".2f"),
                fmt(r.same_worker_pct, ".0f"),
                fmt(r.cross_handoff_p50_ms, ".3f"),
                f"{fmt(r.wait_p99_ms, '.1f')}/{fmt(r.wait_max_ms, '.0f')}",
                f"{min(r.per_worker_sections)}/{max(r.per_worker_sections)}",
                fmt(r.round_trips_per_section, ".2f"),
                fmt(r.server_cmds_per_section, ".2f"),
                str(r.violations),
            ]
            for r in rs
        ]

    legend = [
        "n: worker processes or tasks. hand-off: next acquire returned - previous release "
        "called, when someone was waiting. same %: hand-offs where the releasing worker "
        "took the lock again; cross p50: hand-offs to another worker only. wait: acquire "
        "called -> returned (a starved worker shows in the max). RT: round trips "
        "(commands sent); srv cmds: INFO commandstats, including commands run inside "
        "scripts. overlaps: mutual-exclusion violations.",
    ]
    tables.append(
        TableData(
            f"2. Contended: n worker processes on one name, {BODY * 1000:g} ms body,{think_note} "
            f"{meta['contended_seconds']:g} s each",
            headers,
            rows(con),
            legend,
        )
    )
    tables.append(
        TableData(
            f"3. asyncio: n tasks in one process on one name, {BODY * 1000:g} ms body,{think_note} "
            f"{meta['async_seconds']:g} s each",
            headers,
            rows(asy),
        )
    )
    tables.append(
        TableData(
            "Targets",
            ["target", "measured", "met"],
            [[g.what, g.measured, "yes" if g.met else "NO"] for g in tgt],
        )
    )
    return tables


def print_report(
    meta: dict[str, Any],
    tables: list[TableData],
    title: str = "tenure lock benchmark",
    width: int = 170,
) -> None:
    from rich.console import Console
    from rich.table import Table

    # Wide enough for the contended tables when the output goes to a file or pipe.
    console = Console() if sys.stdout.isatty() else Console(width=width)
    console.print(
        f"[bold]{title}[/]: {meta['server']} at {meta['url']}; "
        f"{meta['nproc']} CPUs; Python {meta['python']}; redis-py {meta['redis_py']}"
    )
    for data in tables:
        t = Table(title=data.title, caption="\n".join(data.notes) or None)
        for i, h in enumerate(data.headers):
            t.add_column(h, justify="left" if i == 0 else "right", overflow="fold")
        for row in data.rows:
            styled = [
                "[green]yes[/]" if c == "yes" else "[red]NO[/]" if c == "NO" else c for c in row
            ]
            t.add_row(*styled)
        console.print(t)


def markdown(meta: dict[str, Any], tables: list[TableData]) -> str:
    """The tables as GitHub Markdown (for docs/benchmarks.md)."""
    libraries: dict[str, str] = meta.get("libraries") or {
        "redis-py": meta["redis_py"],
        "python-redis-lock": meta["python_redis_lock"],
    }
    versions = "".join(f"{name} {version}, " for name, version in libraries.items())
    out = [
        f"{meta['server']}, {meta['nproc']} CPUs, Python {meta['python']}, "
        f"{versions}tenure {meta['tenure']}; run took {meta['total_seconds']} s.",
        "",
    ]
    for data in tables:
        out.append(f"**{data.title}**")
        out.append("")
        out.append("| " + " | ".join(data.headers) + " |")
        out.append(
            "|" + "|".join("---" if i == 0 else "--:" for i in range(len(data.headers))) + "|"
        )
        out.extend("| " + " | ".join(row) + " |" for row in data.rows)
        out.append("")
        out.extend(data.notes)
        if data.notes:
            out.append("")
    return "\n".join(out)


def to_jsonable(obj: Any) -> Any:
    """NaN is not JSON: write it as null."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    return obj


# --------------------------------------------------------------------------
# Main.
# --------------------------------------------------------------------------


def server_description(client: redis.Redis) -> str:
    info: dict[str, Any] = client.info("server")
    name = str(info.get("server_name") or "redis")
    version = info.get(f"{name}_version") or info.get("redis_version")
    return f"{name} {version}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="short phases (about 30 s in all)")
    p.add_argument("--json", metavar="PATH", help="also write every number to PATH")
    p.add_argument("--markdown", metavar="PATH", help="also write the tables as Markdown")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--server", metavar="PATH", help="redis-server/valkey-server to start")
    where.add_argument("--url", help="use this running server instead of starting one")
    p.add_argument("--seconds", type=float, help="override the contended/async phase length")
    p.add_argument(
        "--think",
        type=float,
        default=0.0,
        metavar="S",
        help="contended/async: sleep S seconds after each release (default 0)",
    )
    return p.parse_args(argv)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    phase = args.seconds or (0.75 if args.quick else 3.0)
    round_s = 0.25 if args.quick else 1.0
    think = float(args.think)
    rounds = 3
    server: ServerProcess | None = None
    if args.url:
        url = str(args.url)
    else:
        server = ServerProcess(args.server).start()
        url = server.url
    tag = f"bench:{secrets.token_hex(4)}"
    started = time.monotonic()
    pool: WorkerPool | None = None
    try:
        stats = redis.Redis.from_url(url)
        meta: dict[str, Any] = {
            "server": server_description(stats),
            "url": url,
            "binary": server.binary if server else None,
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "redis_py": redis.__version__,
            "python_redis_lock": redis_lock.__version__,
            "tenure": tenure.__version__,
            "quick": bool(args.quick),
            "ttl_s": TTL,
            "body_s": BODY,
            "raw_retry_s": RAW_RETRY,
            "uncontended_round_s": round_s,
            "uncontended_rounds": rounds,
            "contended_seconds": phase,
            "think_s": think,
            "async_seconds": phase,
        }
        log(f"server: {meta['server']} at {url}")
        log(f"uncontended: {len(SYNC_IMPLS)} locks x {rounds} rounds x {round_s:g} s")
        unc = bench_uncontended(url, stats, round_s, rounds, tag)

        log(f"contended: starting {max(PROCESS_COUNTS)} worker processes (spawn)")
        pool = WorkerPool(max(PROCESS_COUNTS), url)
        con: list[Contended] = []
        for n in PROCESS_COUNTS:
            for impl in SYNC_IMPLS:
                log(f"contended: {impl}, {n} processes, {phase:g} s")
                con.append(pool.run(impl, n, f"{tag}:p{n}:{impl}", phase, think, stats))
        pool.close()
        pool = None
        set_ratios(con)

        asy: list[Contended] = []
        for n in TASK_COUNTS:
            for impl in ASYNC_IMPLS:
                log(f"asyncio: {impl}, {n} tasks, {phase:g} s")
                asy.append(
                    asyncio.run(
                        async_phase(impl, url, n, f"{tag}:t{n}:{impl}", phase, think, stats)
                    )
                )
        set_ratios(asy)

        tgt = targets(unc, con, asy)
        meta["total_seconds"] = round(time.monotonic() - started, 1)
        tables = report_tables(meta, unc, con, asy, tgt)
        print_report(meta, tables)
        log(f"total {meta['total_seconds']} s")
        if args.json:
            doc = {
                "meta": meta,
                "uncontended": [asdict(u) for u in unc],
                "contended": [asdict(c) for c in con],
                "async": [asdict(a) for a in asy],
                "targets": [asdict(g) for g in tgt],
            }
            with open(args.json, "w") as f:
                json.dump(to_jsonable(doc), f, indent=2)
                f.write("\n")
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(markdown(meta, tables))
        stats.close()
    finally:
        if pool is not None:
            pool.close()
        if server is not None:
            server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
