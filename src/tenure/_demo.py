"""``tenure demo``: worker processes race on a shared counter, without and with a lock.

Each worker process does read-modify-write on one counter key (GET, a short
pause, SET value + 1). Three phases run on the same server, each on a fresh
counter:

1. no lock: workers overwrite each other's updates, and the lost updates are
   counted; this is the race a lock exists to prevent;
2. :class:`tenure.Lock`, shared by name by every worker;
3. :class:`tenure.AsyncLock`, with several asyncio tasks in every worker.

In the locked phases every worker records each hold as ``(acquired_at,
released_at, fence)`` on ``time.monotonic()`` (one clock for every process of
a Linux machine). The parent then checks the holds with the pure functions
below: no two holds overlap, fences strictly increase in hold order, and no
update was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing
import queue
import secrets
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from multiprocessing.context import SpawnContext, SpawnProcess
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import SynchronizedArray
from multiprocessing.synchronize import Event
from typing import Literal, NamedTuple

import redis
import redis.asyncio
from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

import tenure

#: Pause between reading and writing the counter, in seconds: long enough that
#: workers without a lock really do interleave.
PAUSE = 0.0005
#: asyncio tasks per worker process in the AsyncLock phase.
ASYNC_TASKS = 8
#: The lease of the demo's locks, in seconds (a section takes about a millisecond).
LOCK_TTL = 10.0
#: A phase fails if no section completes for this long, in seconds.
STALL_TIMEOUT = 30.0

DEFAULT_WORKERS = 4
DEFAULT_SECTIONS = 250
QUICK_WORKERS = 2
QUICK_SECTIONS = 60

Mode = Literal["none", "lock", "async", "rlock", "rwlock", "semaphore"]


class Hold(NamedTuple):
    """One critical section as a worker saw it, in ``time.monotonic()`` seconds.

    Both times are taken inside the ``with lock`` block, so the recorded interval
    lies within the real hold: two recorded holds that overlap are a real overlap.
    """

    acquired_at: float
    released_at: float
    fence: int


@dataclass(frozen=True)
class Phase:
    """One way of running the sections: without a lock, or with one of tenure's locks."""

    mode: Mode
    title: str

    @property
    def locked(self) -> bool:
        """Whether the phase uses a lock (and so must lose no update)."""
        return self.mode != "none"


PHASES = (
    Phase("none", "no lock"),
    Phase("lock", "tenure.Lock"),
    Phase("async", "tenure.AsyncLock"),
    Phase("rlock", "tenure.RLock"),
    Phase("rwlock", "tenure.ReadWriteLock"),
    Phase("semaphore", "tenure.Semaphore"),
)


#: The width of the phase titles column in the progress bars and verdicts.
TITLE_WIDTH = max(len(phase.title) for phase in PHASES)


# --- the checks (pure functions) ----------------------------------------------------------


def lost_updates(expected: int, final: int) -> int:
    """How many increments are missing from the counter (negative: too many)."""
    return expected - final


def in_acquire_order(holds: Iterable[Hold]) -> list[Hold]:
    """The holds sorted by the time they were acquired."""
    return sorted(holds, key=lambda hold: hold.acquired_at)


def count_overlaps(holds: Iterable[Hold]) -> int:
    """How many holds began before an earlier hold had ended (0 under mutual exclusion)."""
    overlaps = 0
    latest_release = -math.inf
    for hold in in_acquire_order(holds):
        if hold.acquired_at < latest_release:
            overlaps += 1
        latest_release = max(latest_release, hold.released_at)
    return overlaps


def fence_regressions(holds: Iterable[Hold]) -> int:
    """How many times, in acquire order, a fence was not larger than the one before."""
    ordered = in_acquire_order(holds)
    return sum(1 for prev, cur in pairwise(ordered) if cur.fence <= prev.fence)


def handoff_gaps(holds: Iterable[Hold]) -> list[float]:
    """Seconds from each release to the next acquire, in acquire order."""
    ordered = in_acquire_order(holds)
    return [cur.acquired_at - prev.released_at for prev, cur in pairwise(ordered)]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0 < q <= 100) of ``values`` by the nearest-rank method.

    Raises:
        ValueError: ``values`` is empty or ``q`` is out of range.
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 < q <= 100:
        raise ValueError(f"percentile must be in (0, 100], not {q!r}")
    ordered = sorted(values)
    return ordered[math.ceil(q / 100 * len(ordered)) - 1]


@dataclass(frozen=True)
class PhaseStats:
    """What one phase achieved, and what went wrong in it."""

    phase: Phase
    sections: int
    seconds: float
    lost_updates: int
    overlaps: int
    fence_regressions: int
    handoff_p50: float | None
    handoff_p99: float | None

    @property
    def rate(self) -> float:
        """Sections per second."""
        return self.sections / self.seconds if self.seconds > 0 else math.inf

    def problems(self) -> list[str]:
        """What broke mutual exclusion (always empty for the phase without a lock)."""
        if not self.phase.locked:
            return []
        found = []
        if self.lost_updates:
            found.append(_count(self.lost_updates, "lost update"))
        if self.overlaps:
            found.append(_count(self.overlaps, "overlapping hold"))
        if self.fence_regressions:
            found.append(_count(self.fence_regressions, "fence") + " went backwards")
        return found


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def summarize(
    phase: Phase, expected: int, final: int, seconds: float, holds: Sequence[Hold]
) -> PhaseStats:
    """Check one phase: its expected and final counter, its duration and its holds."""
    gaps = handoff_gaps(holds)
    return PhaseStats(
        phase=phase,
        sections=expected,
        seconds=seconds,
        lost_updates=lost_updates(expected, final),
        overlaps=count_overlaps(holds),
        fence_regressions=fence_regressions(holds),
        handoff_p50=percentile(gaps, 50) if gaps else None,
        handoff_p99=percentile(gaps, 99) if gaps else None,
    )


def exit_status(stats: Iterable[PhaseStats]) -> int:
    """1 if a locked phase lost an update, overlapped or saw a fence go backwards; else 0."""
    return 1 if any(s.problems() for s in stats) else 0


# --- the workers (each runs in its own process) -------------------------------------------


@dataclass(frozen=True)
class Job:
    """What one worker process does in one phase."""

    url: str
    mode: Mode
    index: int
    sections: int
    counter: str
    lock_name: str


@dataclass(frozen=True)
class Shared:
    """How the parent and the workers of one phase talk to each other."""

    progress: SynchronizedArray[int]  # sections done, one slot per worker
    ready: SynchronizedArray[int]  # 1 once a worker is connected and waits for `start`
    start: Event
    reports: Queue[Report]


@dataclass(frozen=True)
class Report:
    """A worker's result: its holds and when it finished, or its error."""

    index: int
    holds: list[Hold]
    finished_at: float
    error: str | None = None


def _worker(job: Job, shared: Shared) -> None:
    try:
        if job.mode == "async":
            holds, finished_at = asyncio.run(_async_sections(job, shared))
        else:
            holds, finished_at = _sync_sections(job, shared)
        shared.reports.put(Report(job.index, holds, finished_at))
    except Exception:
        shared.reports.put(Report(job.index, [], 0.0, traceback.format_exc()))


def _get_ready(job: Job, shared: Shared) -> None:
    shared.ready[job.index] = 1
    shared.start.wait()


def _sync_sections(job: Job, shared: Shared) -> tuple[list[Hold], float]:
    client = redis.Redis.from_url(job.url)
    try:
        client.ping()
        lock = tenure.Lock(client, job.lock_name, ttl=LOCK_TTL)
        rlock = tenure.RLock(client, job.lock_name, ttl=LOCK_TTL)
        rwlock = tenure.ReadWriteLock(client, job.lock_name, ttl=LOCK_TTL)
        # one permit: the semaphore guards the counter as a mutex would
        semaphore = tenure.Semaphore(client, job.lock_name, permits=1, ttl=LOCK_TTL)
        holds: list[Hold] = []
        _get_ready(job, shared)
        for _ in range(job.sections):
            if job.mode == "none":
                _increment(client, job.counter)
            elif job.mode == "rwlock":
                with rwlock.read:  # readers share: look at the counter
                    client.get(job.counter)
                with rwlock.write as written:  # one writer: the read-modify-write
                    acquired_at = time.monotonic()
                    _increment(client, job.counter)
                    released_at = time.monotonic()
                holds.append(Hold(acquired_at, released_at, written.fence))
            elif job.mode == "rlock":
                with rlock as outer, rlock:  # entered twice by its holder: no wait
                    acquired_at = time.monotonic()
                    _increment(client, job.counter)
                    released_at = time.monotonic()
                holds.append(Hold(acquired_at, released_at, outer.fence))
            else:
                with semaphore if job.mode == "semaphore" else lock as lease:
                    acquired_at = time.monotonic()
                    _increment(client, job.counter)
                    released_at = time.monotonic()
                holds.append(Hold(acquired_at, released_at, lease.fence))
            shared.progress[job.index] += 1
        return holds, time.monotonic()
    finally:
        client.close()


def _increment(client: redis.Redis, counter: str) -> None:
    value = int(client.get(counter) or 0)
    time.sleep(PAUSE)
    client.set(counter, value + 1)


async def _async_sections(job: Job, shared: Shared) -> tuple[list[Hold], float]:
    client = redis.asyncio.Redis.from_url(job.url)
    try:
        await client.ping()
        lock = tenure.AsyncLock(client, job.lock_name, ttl=LOCK_TTL)
        holds: list[Hold] = []

        async def task(sections: int) -> None:
            for _ in range(sections):
                async with lock as lease:
                    acquired_at = time.monotonic()
                    value = int(await client.get(job.counter) or 0)
                    await asyncio.sleep(PAUSE)
                    await client.set(job.counter, value + 1)
                    released_at = time.monotonic()
                holds.append(Hold(acquired_at, released_at, lease.fence))
                shared.progress[job.index] += 1

        shares = [len(range(i, job.sections, ASYNC_TASKS)) for i in range(ASYNC_TASKS)]
        _get_ready(job, shared)
        await asyncio.gather(*(task(n) for n in shares if n))
        return holds, time.monotonic()
    finally:
        await client.aclose()


# --- the parent ---------------------------------------------------------------------------


class DemoError(Exception):
    """A phase could not run to the end (a worker failed, died or stalled)."""


def run_phase(
    ctx: SpawnContext,
    job: Job,
    workers: int,
    on_progress: Callable[[int], None],
) -> tuple[float, list[Hold]]:
    """Run ``workers`` processes doing ``job``; return the phase's duration and all holds.

    ``on_progress(n)`` is called often with the number of sections done so far.

    Raises:
        DemoError: a worker raised or died, or the workers did nothing for ``STALL_TIMEOUT``.
    """
    shared = Shared(
        progress=ctx.Array("i", workers),
        ready=ctx.Array("i", workers),
        start=ctx.Event(),
        reports=ctx.Queue(),
    )
    procs: list[SpawnProcess] = [
        ctx.Process(
            target=_worker,
            args=(replace(job, index=i), shared),
            name=f"tenure-demo-{job.mode}-{i}",
        )
        for i in range(workers)
    ]
    with _ctrl_c_ignored():  # workers inherit this: Ctrl-C stops the parent, which stops them
        for proc in procs:
            proc.start()
    try:
        return _collect(procs, shared, on_progress)
    except BaseException:
        for proc in procs:
            proc.terminate()
        raise
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        shared.reports.close()


@contextlib.contextmanager
def _ctrl_c_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may change signal handlers
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _collect(
    procs: list[SpawnProcess], shared: Shared, on_progress: Callable[[int], None]
) -> tuple[float, list[Hold]]:
    reports: dict[int, Report] = {}
    started_at: float | None = None
    last_done, last_change = 0, time.monotonic()
    while len(reports) < len(procs):
        if started_at is None and all(shared.ready[:]):
            started_at = time.monotonic()
            shared.start.set()
        try:
            report = shared.reports.get(timeout=0.05)
        except queue.Empty:
            pass
        else:
            if report.error is not None:
                raise DemoError(f"worker {report.index} failed:\n{report.error}")
            reports[report.index] = report
            last_change = time.monotonic()
        done = sum(shared.progress[:])
        on_progress(done)
        now = time.monotonic()
        if done != last_done:
            last_done, last_change = done, now
        elif now - last_change > STALL_TIMEOUT:
            raise DemoError(
                f"workers stalled: nothing done or reported for {STALL_TIMEOUT:g} s "
                f"({done} sections done)"
            )
        for i, proc in enumerate(procs):
            if proc.exitcode not in (None, 0) and i not in reports:
                raise DemoError(f"worker {i} exited with status {proc.exitcode}")
    assert started_at is not None
    seconds = max(r.finished_at for r in reports.values()) - started_at
    return seconds, [hold for r in reports.values() for hold in r.holds]


def server_name(client: redis.Redis) -> str:
    """``Valkey 9.0.0`` or ``Redis 7.0.15``, from INFO."""
    info = client.info("server")
    if "valkey_version" in info:
        return f"Valkey {info['valkey_version']}"
    return f"Redis {info.get('redis_version', '?')}"


def run_demo(
    url: str,
    *,
    workers: int = DEFAULT_WORKERS,
    sections: int = DEFAULT_SECTIONS,
    where: str = "",
    console: Console | None = None,
) -> int:
    """Run the three phases with progress bars, print the results; return the exit status.

    Args:
        url: the server, as a redis-py URL; the workers connect to it too.
        workers: worker processes per phase.
        sections: critical sections per worker and phase.
        where: how the server came to be, for the header (e.g. ``"embedded"``).
        console: where to print (default: standard output).

    Raises:
        DemoError: a phase could not run to the end.
        redis.exceptions.ConnectionError: the server could not be reached.
    """
    console = console or Console(width=max(100, Console().width))
    client = redis.Redis.from_url(url)
    run_id = secrets.token_hex(4)
    total = workers * sections
    try:
        about = f"{server_name(client)}{f' ({where})' if where else ''}"
        console.print(
            f"[bold]tenure demo[/]: {workers} worker processes x {sections} sections per phase, "
            "each a read-modify-write of one shared counter",
            soft_wrap=True,
        )
        console.print(f"server: {about} at {url}", soft_wrap=True, highlight=False)
        ctx = multiprocessing.get_context("spawn")
        stats: list[PhaseStats] = []
        with Progress(
            TextColumn(f"{{task.description:<{TITLE_WIDTH}}}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            for phase in PHASES:
                job = Job(
                    url=url,
                    mode=phase.mode,
                    index=0,
                    sections=sections,
                    counter=f"tenure-demo:{run_id}:{phase.mode}:counter",
                    lock_name=f"demo:{run_id}:{phase.mode}",
                )
                client.set(job.counter, 0)
                bar = progress.add_task(phase.title, total=total)

                def show(done: int, bar: TaskID = bar) -> None:
                    progress.update(bar, completed=done)

                seconds, holds = run_phase(ctx, job, workers, show)
                final = int(client.get(job.counter) or 0)
                stats.append(summarize(phase, total, final, seconds, holds))
                progress.stop_task(bar)
    finally:
        with contextlib.suppress(redis.exceptions.RedisError):
            _clean_up(client, run_id)
        client.close()
    console.print(results_table(stats))
    for line in verdicts(stats):
        console.print(line, soft_wrap=True, highlight=False)
    return exit_status(stats)


def _clean_up(client: redis.Redis, run_id: str) -> None:
    keys = [key for key in client.scan_iter(match=f"*demo:{run_id}:*", count=1000)]
    if keys:
        client.delete(*keys)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.2f} ms"


def results_table(stats: Sequence[PhaseStats]) -> Table:
    """The results of every phase as a ``rich`` table (fits 80 columns)."""
    table = Table(
        title="results",
        caption="hand-off: from one holder's release to the next holder's acquire",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        collapse_padding=True,
    )
    table.add_column("phase", no_wrap=True, min_width=len("tenure.AsyncLock"))
    for name in ("sections\nper s", "hand-off\np50", "hand-off\np99", "lost\nupdates", "overlaps"):
        table.add_column(name, justify="right")
    table.add_column("fences", no_wrap=True)
    red = "[bold red]{}[/]".format
    for s in stats:
        if not s.phase.locked:
            cells = ["-", "-", f"[yellow]{s.lost_updates}[/]", "-", "-"]
        else:
            cells = [
                _ms(s.handoff_p50),
                _ms(s.handoff_p99),
                red(s.lost_updates) if s.lost_updates else "0",
                red(s.overlaps) if s.overlaps else "0",
                "increasing" if not s.fence_regressions else red("backwards"),
            ]
        table.add_row(s.phase.title, f"{s.rate:,.0f}", *cells)
    return table


def verdicts(stats: Sequence[PhaseStats]) -> list[str]:
    """One line per phase saying what it showed (plain words, easy to grep in CI logs)."""
    lines = []
    for s in stats:
        if not s.phase.locked:
            if s.lost_updates > 0:
                said = f"{s.lost_updates} of {s.sections} updates lost: the race a lock prevents"
            else:
                said = "no update lost this time (the race is still there: try more --workers)"
        elif problems := s.problems():
            said = f"[bold red]FAIL[/]: {', '.join(problems)}"
        else:
            said = "[green]ok[/]: 0 lost updates, 0 overlaps, fences increasing"
        lines.append(f"{s.phase.title:<{TITLE_WIDTH}} {said}")
    return lines
