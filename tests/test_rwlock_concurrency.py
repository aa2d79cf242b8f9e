"""The read-write lock under concurrency: real processes, threads and tasks,
with every invariant checked on a recorded history (``check_rw_history``)."""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import queue
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor

import pytest
import redis
import redis.asyncio
from _workers import (
    RWHold,
    async_rw_worker,
    check_rw_history,
    rw_holding_reader,
    rw_reader_loop,
    rw_worker,
)

from tenure import AsyncReadWriteLock, ReadWriteLock

SPAWN = multiprocessing.get_context("spawn")
KEY = "tenure:{%s}:rwlock"


def test_checker_catches_each_broken_invariant() -> None:
    ok: list[RWHold] = [
        ("read", 0.0, 2.0, 5),
        ("read", 1.0, 3.0, 5),  # readers overlap: fine
        ("write", 3.0, 4.0, 6),
        ("read", 4.0, 5.0, 6),
    ]
    check_rw_history(ok)
    broken: list[tuple[list[RWHold], str]] = [
        ([("write", 0.0, 2.0, 1), ("write", 1.0, 3.0, 2)], "overlapping write holds"),
        ([("write", 0.0, 1.0, 2), ("write", 1.0, 2.0, 1)], "write fence went backwards"),
        ([("write", 0.0, 2.0, 1), ("read", 1.0, 3.0, 1)], "overlaps read"),
        ([("read", 0.0, 2.0, 1), ("write", 1.0, 3.0, 2)], "overlaps read"),
        ([("write", 0.0, 1.0, 3), ("read", 1.0, 2.0, 2)], "not the last write's fence"),
        ([("read", 0.0, 1.0, 4), ("write", 1.0, 2.0, 3)], "fence >= a later write's"),
    ]
    for holds, message in broken:
        with pytest.raises(AssertionError, match=message):
            check_rw_history(holds)


def test_processes_share_reads_and_never_overlap_a_write(r: redis.Redis, url: str) -> None:
    processes, sections = 3, 48
    manager = SPAWN.Manager()
    start = manager.Barrier(processes)
    with ProcessPoolExecutor(processes, mp_context=SPAWN) as pool:
        futures = [
            pool.submit(rw_worker, url, "mp", sections, start, 4, 0.005) for _ in range(processes)
        ]
        holds = [h for f in futures for h in f.result(timeout=120)]
    manager.shutdown()
    assert len(holds) == processes * sections
    check_rw_history(holds)
    writes = sum(mode == "write" for mode, *_ in holds)
    assert writes == processes * sections // 4
    assert int(r.get("mp:counter") or 0) == writes  # no lost update
    reads = sorted((s, e) for mode, s, e, _ in holds if mode == "read")
    assert any(b[0] < a[1] for a, b in itertools.pairwise(reads)), "no reads overlapped"
    assert not r.exists(KEY % "mp") and r.zcard(KEY % "mp" + ":waiters") == 0


def test_a_waiting_writer_is_not_starved_by_arriving_readers(r: redis.Redis, url: str) -> None:
    """Readers in two processes (three threads each) keep the read lock held
    without a gap for 2.5 s, each asking again as soon as it releases. A writer
    asking meanwhile gets in as soon as the readers ahead of it leave (each
    holds 20 to 60 ms), not when the readers stop. (If arriving readers went
    ahead of a waiting writer, it would wait the whole 2.5 s.)"""
    name, hold, seconds = "starve", 0.04, 2.5
    with ProcessPoolExecutor(2, mp_context=SPAWN) as pool:
        futures = [pool.submit(rw_reader_loop, url, name, seconds, hold, 3) for _ in range(2)]
        rw = ReadWriteLock(r, name, ttl=10)
        deadline = time.monotonic() + 30
        while rw.info().mode != "read":  # the readers are at work
            assert time.monotonic() < deadline, "the readers did not start"
            time.sleep(0.01)
        writes: list[RWHold] = []
        waits: list[float] = []
        for _ in range(4):
            time.sleep(0.2)
            asked = time.monotonic()
            lease = rw.write.acquire(timeout=seconds)
            assert lease is not None, "the writer was starved"
            acquired = time.monotonic()
            waits.append(acquired - asked)
            time.sleep(0.005)
            writes.append(("write", acquired, time.monotonic(), lease.fence))
            lease.release()
        holds = writes + [h for f in futures for h in f.result(timeout=60)]
    check_rw_history(holds)
    assert max(waits) < 0.6, f"writer waits {waits}"  # readers hold up to 60 ms
    last_write = writes[-1][2]
    assert any(s > last_write for mode, s, _, _ in holds if mode == "read"), "readers went on"


def test_kill_9_of_a_reading_process_lets_writers_in_within_its_ttl(url: str) -> None:
    ttl = 1.0
    acquired: queue.Queue[int] = SPAWN.Manager().Queue()
    reader = SPAWN.Process(target=rw_holding_reader, args=(url, "kill9", ttl, acquired))
    reader.start()
    try:
        fence = acquired.get(timeout=30)
        rw = ReadWriteLock(redis.Redis.from_url(url), "kill9", ttl=5)
        time.sleep(ttl * 1.5)  # the watchdog keeps the reader's hold past its ttl
        assert rw.write.acquire(blocking=False) is None
        assert rw.read.acquire(blocking=False) is not None  # (readers share it)
        rw.read.release()
        assert reader.pid is not None
        os.kill(reader.pid, signal.SIGKILL)
        killed = time.monotonic()
        lease = rw.write.acquire(timeout=ttl + 2)
        waited = time.monotonic() - killed
        assert lease is not None and lease.fence > fence
        assert waited < ttl + 0.5, f"the writer got in {waited:.2f}s after the kill"
        lease.release()
    finally:
        reader.kill()
        reader.join()


def test_hundred_tasks_reading_and_writing(r: redis.Redis, url: str) -> None:
    holds = async_rw_worker(url, "tasks", tasks=100, sections=4, write_every=5)
    assert len(holds) == 400
    check_rw_history(holds)
    writes = sum(mode == "write" for mode, *_ in holds)
    assert writes == 80 and int(r.get("tasks:counter") or 0) == writes
    assert not r.exists(KEY % "tasks")


def test_threads_and_tasks_together_on_one_name(r: redis.Redis, url: str) -> None:
    """Sync threads and async tasks of one process, each its own owner, on one name."""
    holds: list[RWHold] = []
    mutex = threading.Lock()
    name = "mixed"

    def thread_worker(i: int) -> None:
        client = redis.Redis.from_url(url)
        rw = ReadWriteLock(client, name, ttl=10)
        for j in range(10):
            view = rw.write if (i + j) % 3 == 0 else rw.read
            with view as lease:
                acquired = time.monotonic()
                value = client.get(f"{name}:counter")
                if lease.mode == "write":
                    client.set(f"{name}:counter", int(value or 0) + 1)
                else:
                    time.sleep(0.002)
                    assert client.get(f"{name}:counter") == value
                released = time.monotonic()
            with mutex:
                holds.append((lease.mode, acquired, released, lease.fence))
        client.close()

    threads = [threading.Thread(target=thread_worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    task_holds = async_rw_worker(url, name, tasks=20, sections=3, write_every=4)
    for t in threads:
        t.join()
    holds += task_holds
    assert len(holds) == 40 + 60
    check_rw_history(holds)
    writes = sum(mode == "write" for mode, *_ in holds)
    assert int(r.get(f"{name}:counter") or 0) == writes


def test_many_tasks_read_at_once_and_a_hand_off_wakes_them_together(url: str) -> None:
    """A write release hands the lock to every queued reader of the run at once;
    readers of one process come in together too."""

    async def main() -> list[tuple[float, float]]:
        client = redis.asyncio.Redis.from_url(url, max_connections=40)
        rw = AsyncReadWriteLock(client, "run", ttl=10)
        writer = await rw.write.acquire()
        assert writer is not None
        spans: list[tuple[float, float]] = []

        async def reader() -> None:
            lease = await rw.read.acquire(timeout=10)
            assert lease is not None and lease.fence == writer.fence
            start = time.monotonic()
            await asyncio.sleep(0.2)
            spans.append((start, time.monotonic()))
            await lease.release()

        readers = [asyncio.create_task(reader()) for _ in range(30)]
        await asyncio.sleep(0.3)
        await writer.release()
        await asyncio.gather(*readers)
        await client.aclose()
        return spans

    spans = asyncio.run(main())
    # all 30 held at once at some moment: the last to start began before the first ended
    assert max(s for s, _ in spans) < min(e for _, e in spans)
