"""The FastAPI recipe (examples/fastapi_app.py) through httpx's ASGI transport,
on a real server.

Two instances of the app, each with its own client (two contenders, as two
processes would be), get concurrent deposits for one account: none may be
lost, and the fences must increase in the order the balances were written.
"""

from __future__ import annotations

import asyncio
import itertools

import httpx
import redis.asyncio
from fastapi import FastAPI
from fastapi_app import make_app

from tenure import AsyncLock

REQUESTS = 20


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app")


def test_concurrent_deposits_on_one_account_are_serialized(url: str) -> None:
    async def main() -> list[httpx.Response]:
        clients = [redis.asyncio.Redis.from_url(url) for _ in range(2)]
        https = [_client(make_app(c, work=0.005)) for c in clients]
        try:
            return await asyncio.gather(
                *(
                    https[i % 2].post("/accounts/alice/deposit", params={"amount": 1})
                    for i in range(REQUESTS)
                )
            )
        finally:
            for http in https:
                await http.aclose()
            for client in clients:
                await client.aclose()

    responses = asyncio.run(main())
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    bodies = sorted((r.json() for r in responses), key=lambda b: b["balance"])
    # No lost deposit: each request read the balance the one before it wrote.
    assert [b["balance"] for b in bodies] == list(range(1, REQUESTS + 1))
    for before, after in itertools.pairwise(bodies):
        assert before["fence"] < after["fence"], (before, after)


def test_a_request_that_waits_too_long_gets_503(url: str) -> None:
    async def main() -> tuple[httpx.Response, httpx.Response]:
        client = redis.asyncio.Redis.from_url(url)
        http = _client(make_app(client, wait=0.2))
        try:
            async with AsyncLock(client, "account:bob"):  # held by another task
                post = http.post("/accounts/bob/deposit", params={"amount": 1})
                busy = await asyncio.create_task(post)
            other = await http.post("/accounts/bob/deposit", params={"amount": 1})
        finally:
            await http.aclose()
            await client.aclose()
        return busy, other

    busy, other = asyncio.run(main())
    assert busy.status_code == 503, busy.text
    assert other.status_code == 200 and other.json()["balance"] == 1, other.text
