"""A Tornado web app whose requests take a tenure ``AsyncLock``, one per request.

Tornado runs on asyncio, so tenure's asyncio classes work in its handlers as in
any asyncio program. Each request is its own asyncio task, hence its own lock
owner, so one ``AsyncLock`` object per name serves the whole app.

``POST /counter/<name>`` takes the lock ``counter:<name>`` (waiting at most
5 s), reads the counter, does its work (``work`` seconds of sleep here), writes
the counter plus one with the lease's fence through an ``AsyncFencedKey`` (so a
holder whose lease ended meanwhile is refused, not obeyed) and answers
``{"value": <new value>, "fence": <fence>}``. A request that waited too long
gets 503; one whose lease ended before its write gets 409. Several processes
(or hosts) running this app against one server share the counters safely.

Run it::

    REDIS_URL=redis://localhost:6379/0 python examples/tornado_app.py --port 8888
    curl -X POST localhost:8888/counter/visits

``tests/test_tornado.py`` starts two instances of it on loopback ports inside
its own event loop and checks that concurrent requests never overlap in the
critical section and that fences increase.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio
import tornado.web

from tenure import AcquireTimeout, AsyncFencedKey, AsyncLock, StaleFenceError


@dataclass(frozen=True)
class Section:
    """One critical section, as the handler saw it.

    ``entered`` and ``left`` are on this process's ``time.monotonic()`` clock,
    in seconds: just after the lock was acquired and just before it was released.
    """

    name: str
    value: int
    fence: int
    entered: float
    left: float


class Counters:
    """The app's shared state: one client, one ``AsyncLock`` per counter name."""

    def __init__(
        self,
        client: redis.asyncio.Redis,
        *,
        work: float = 0.01,
        on_section: Callable[[Section], object] | None = None,
    ) -> None:
        self.client = client
        self.work = work
        self.on_section = on_section
        self._locks: dict[str, AsyncLock] = {}

    def lock(self, name: str) -> AsyncLock:
        if name not in self._locks:
            self._locks[name] = AsyncLock(self.client, f"counter:{name}", ttl=10)
        return self._locks[name]

    async def increment(self, name: str) -> Section:
        """Add one to the counter ``name`` under its lock.

        Raises:
            AcquireTimeout: the lock was not acquired within 5 s.
            StaleFenceError: the lease ended and a newer holder wrote first.
        """
        store = AsyncFencedKey(self.client, f"counter:{name}:value")
        async with self.lock(name)(timeout=5) as lease:
            entered = time.monotonic()
            value = int(await self.client.get(store.key) or 0) + 1
            await asyncio.sleep(self.work)  # the request's work
            await store.set(str(value), fence=lease.fence)
            section = Section(name, value, lease.fence, entered, time.monotonic())
        if self.on_section is not None:
            self.on_section(section)
        return section


class CounterHandler(tornado.web.RequestHandler):
    def initialize(self, counters: Counters) -> None:
        self.counters = counters

    async def post(self, name: str) -> None:
        try:
            section = await self.counters.increment(name)
        except AcquireTimeout:
            self.set_status(503)
            self.finish({"error": f"counter {name!r} is busy"})
            return
        except StaleFenceError as exc:
            self.set_status(409)
            self.finish({"error": str(exc)})
            return
        self.finish({"value": section.value, "fence": section.fence})


def make_app(counters: Counters) -> tornado.web.Application:
    """The Tornado application serving ``POST /counter/<name>``."""
    return tornado.web.Application(
        [(r"/counter/([\w:.-]+)", CounterHandler, {"counters": counters})]
    )


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A Tornado app with tenure counters.")
    parser.add_argument("--port", type=int, default=8888)
    parser.add_argument("--url", default=os.environ.get("REDIS_URL", "redis://localhost:6379/0"))
    args = parser.parse_args(argv)
    client = redis.asyncio.Redis.from_url(args.url)
    app = make_app(Counters(client))
    server = app.listen(args.port, address="127.0.0.1")
    try:
        await asyncio.Event().wait()  # serve until interrupted
    finally:
        server.stop()
        await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
