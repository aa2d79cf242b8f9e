"""The worker-pool recipe (examples/worker_pool.py) on a real server: two pools,
each with its own client (two contenders, as two processes would be), run
their jobs at once; never more than ``permits`` of them together."""

from __future__ import annotations

import asyncio

import redis.asyncio
from worker_pool import Done, run_jobs

PERMITS = 3


def _most_at_once(runs: list[Done]) -> int:
    """The largest number of runs in progress at one instant."""
    edges = sorted([(d.started, 1) for d in runs] + [(d.ended, -1) for d in runs])
    running = most = 0
    for _, step in edges:  # at a tie, an end (-1) sorts before a start
        running += step
        most = max(most, running)
    return most


def test_two_pools_run_at_most_permits_jobs_together(url: str) -> None:
    async def main() -> list[Done]:
        clients = [redis.asyncio.Redis.from_url(url) for _ in range(2)]
        try:
            pools = await asyncio.gather(
                run_jobs(clients[0], range(0, 12), permits=PERMITS, work=0.05),
                run_jobs(clients[1], range(12, 24), permits=PERMITS, work=0.05),
            )
        finally:
            for client in clients:
                await client.aclose()
        return pools[0] + pools[1]

    runs = asyncio.run(main())
    assert sorted(d.job for d in runs) == list(range(24))
    assert _most_at_once(runs) == PERMITS
