"""A FastAPI dependency that holds a tenure ``AsyncLock`` per account while a
request is handled.

``POST /accounts/<account>/deposit?amount=N`` depends on ``account_lease``,
which takes the lock ``account:<account>`` (waiting at most ``wait`` seconds,
else answering 503) and releases it once the endpoint has returned. Requests
for one account are handled one at a time across every process and host that
uses the server; requests for different accounts do not wait for each other.
The endpoint reads the balance, does its work, and writes the new balance with
the lease's fence through an ``AsyncFencedKey``: a request whose lease ended
meanwhile gets 409 instead of overwriting a newer balance.

Run it from ``examples/``, with uvicorn installed::

    REDIS_URL=redis://localhost:6379/0 uvicorn fastapi_app:app
    curl -X POST 'localhost:8000/accounts/alice/deposit?amount=5'

``tests/test_fastapi.py`` sends concurrent requests for one account to two
instances of the app and checks that no deposit is lost and fences increase.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Annotated

import redis.asyncio
from fastapi import Depends, FastAPI, HTTPException, Request

from tenure import AsyncFencedKey, AsyncLease, AsyncLock, StaleFenceError


async def account_lease(account: str, request: Request) -> AsyncIterator[AsyncLease]:
    """Hold the lock of ``account`` while the request is handled (503 if it
    stays held for ``app.state.wait`` seconds)."""
    lock = AsyncLock(request.app.state.redis, f"account:{account}", ttl=10)
    lease = await lock.acquire(timeout=request.app.state.wait)
    if lease is None:
        raise HTTPException(503, f"account {account!r} is busy")
    async with lease:  # released when the endpoint has returned
        yield lease


Lease = Annotated[AsyncLease, Depends(account_lease)]


def make_app(client: redis.asyncio.Redis, *, wait: float = 5, work: float = 0.01) -> FastAPI:
    """The app, its locks and balances on ``client``."""
    app = FastAPI()
    app.state.redis = client
    app.state.wait = wait

    @app.post("/accounts/{account}/deposit")
    async def deposit(account: str, amount: int, lease: Lease) -> dict[str, int]:
        balance = AsyncFencedKey(client, f"account:{account}:balance")
        new = int(await client.get(balance.key) or 0) + amount
        await asyncio.sleep(work)  # the request's work
        try:
            await balance.set(str(new), fence=lease.fence)
        except StaleFenceError as exc:
            raise HTTPException(409, str(exc)) from exc
        return {"balance": new, "fence": lease.fence}

    return app


app = make_app(
    redis.asyncio.Redis.from_url(os.environ.get("REDIS_URL", "redis://localhost:6379/0"))
)
