"""The wake hub's pass-on on a real server: a lock handed to a token nobody in
the process waits with any more is released with its own kind's plan (looked
up in the registry of kinds), so that it goes on to the next waiter."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from tenure import FairLock, LockLostError
from tenure import Lock as TenureLock
from tenure._drivers import _sync
from tenure._drivers._hubbook import PassOn

MAKERS: dict[str, Callable[[redis.Redis], Any]] = {
    "Lock": lambda c: TenureLock(c, "passed", ttl=30),
    "exact-key Lock": lambda c: TenureLock(c, key="app:{passed}:lock", ttl=30),
    "FairLock": lambda c: FairLock(c, "passed", ttl=30),
}


@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_lock_passed_on_goes_to_the_next_waiter(r: redis.Redis, url: str, kind: str) -> None:
    holder = MAKERS[kind](r)
    lease = holder.acquire()
    assert lease is not None
    got: list[Any] = []

    def wait() -> None:
        client = redis.Redis.from_url(url)
        got.append(MAKERS[kind](client).acquire(timeout=20))

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    deadline = time.monotonic() + 10
    while not r.zcard(holder._keys.waiters):
        assert time.monotonic() < deadline, "the waiter did not queue"
        time.sleep(0.02)

    started = time.monotonic()
    _sync.run(r, PassOn(holder._keys, lease.owner).plan())  # as the hub does
    waiter.join(10)
    assert got and got[0] is not None, "the lock did not go on to the waiter"
    assert time.monotonic() - started < 10
    assert got[0].fence > lease.fence
    with pytest.raises(LockLostError):
        lease.release()
    got[0].release()
