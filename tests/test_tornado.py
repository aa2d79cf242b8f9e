"""The Tornado example (examples/tornado_app.py) under Tornado's IOLoop, on a real server.

Two instances of the app, each with its own client (two contenders in Redis, as
two processes would be), listen on loopback ports inside the test's own event
loop (Tornado's IOLoop runs on it). Concurrent requests made with Tornado's
``AsyncHTTPClient`` increment one counter; the critical sections must never
overlap, no increment may be lost, and fences must strictly increase in the
order the sections ran.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket

import redis.asyncio
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado_app import Counters, Section, make_app

REQUESTS = 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_concurrent_requests_never_overlap_and_fences_increase(url: str) -> None:
    async def main() -> tuple[list[Section], list[dict[str, int]]]:
        sections: list[Section] = []
        clients = [redis.asyncio.Redis.from_url(url) for _ in range(2)]
        servers: list[HTTPServer] = []
        ports: list[int] = []
        for client in clients:
            port = _free_port()
            app = make_app(Counters(client, work=0.005, on_section=sections.append))
            servers.append(app.listen(port, address="127.0.0.1"))
            ports.append(port)
        http = AsyncHTTPClient(force_instance=True, max_clients=REQUESTS)
        try:
            responses = await asyncio.gather(
                *(
                    http.fetch(
                        f"http://127.0.0.1:{ports[i % 2]}/counter/hits",
                        method="POST",
                        body=b"",
                        request_timeout=30,
                    )
                    for i in range(REQUESTS)
                )
            )
        finally:
            http.close()
            for server in servers:
                server.stop()
            for client in clients:
                await client.aclose()
        return sections, [json.loads(r.body) for r in responses]

    sections, bodies = asyncio.run(main())
    assert len(sections) == len(bodies) == REQUESTS
    ordered = sorted(sections, key=lambda s: s.entered)
    # The responses say what the sections saw.
    assert sorted(bodies, key=lambda b: b["value"]) == [
        {"value": s.value, "fence": s.fence} for s in sorted(sections, key=lambda s: s.value)
    ]
    # No lost update: each section read the value the one before it wrote.
    assert [s.value for s in ordered] == list(range(1, REQUESTS + 1))
    for before, after in itertools.pairwise(ordered):
        assert before.left <= after.entered, f"sections overlap: {before} and {after}"
        assert before.fence < after.fence, f"fence did not increase: {before} then {after}"
