"""An asyncio worker pool of which at most ``permits`` jobs run at once, across
every process that shares the server: a tenure ``AsyncSemaphore`` as a decorator.

``run_jobs`` starts one asyncio task per job at once; each call of the
decorated ``handle`` takes one permit of the semaphore ``name`` (waiting, first
come first served, as long as it takes) and gives it back when the job ends,
however it ends. Start the pool in several processes or hosts with the same
name and the limit holds for all of them together: a rate-limited API called
by many workers, a licence server, a database that takes ``permits``
connections. A worker that dies gives its permits back when their ttl runs out.

Run it::

    REDIS_URL=redis://localhost:6379/0 python examples/worker_pool.py 20

``tests/test_worker_pool.py`` runs two pools at once and checks that no more
than ``permits`` jobs of the two ever ran together, and that jobs did overlap.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass

import redis.asyncio

from tenure import AsyncSemaphore


@dataclass(frozen=True)
class Done:
    """A job's run, on this process's ``time.monotonic()`` clock, inside its permit."""

    job: int
    started: float
    ended: float


async def run_jobs(
    client: redis.asyncio.Redis,
    jobs: Iterable[int],
    *,
    name: str = "pool",
    permits: int = 3,
    work: float = 0.1,
) -> list[Done]:
    """Run every job, at most ``permits`` at once across all the pools named ``name``."""
    semaphore = AsyncSemaphore(client, name, permits=permits, ttl=30)

    @semaphore  # each call holds one permit while it runs
    async def handle(job: int) -> Done:
        started = time.monotonic()
        await asyncio.sleep(work)  # the job: a request, a query, a download
        return Done(job, started, time.monotonic())

    return await asyncio.gather(*(handle(job) for job in jobs))


async def main(count: int) -> None:
    client = redis.asyncio.Redis.from_url(os.environ.get("REDIS_URL", "redis://localhost:6379/0"))
    try:
        for done in await run_jobs(client, range(count)):
            print(f"job {done.job}: {done.ended - done.started:.3f} s")
    finally:
        await client.aclose()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
