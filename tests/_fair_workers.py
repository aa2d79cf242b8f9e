"""Functions run in worker processes by the FairLock and MultiLock tests (spawned,
so they live in an importable module)."""

from __future__ import annotations

import threading
import time
from typing import Any

import redis
from _workers import Hold

from tenure import FairLock, Lock, MultiLock


def fair_waiter(url: str, name: str, index: int, waiter_timeout: float = 5.0) -> Hold:
    """Wait for the fair lock ``name``; when granted, append ``index`` to the list
    ``<name>:order`` (the grant order) and release."""
    client = redis.Redis.from_url(url)
    lock = FairLock(client, name, ttl=10, waiter_timeout=waiter_timeout)
    lease = lock.acquire(timeout=60)
    assert lease is not None
    acquired = time.monotonic()
    client.rpush(f"{name}:order", index)
    released = time.monotonic()
    lease.release()
    return (acquired, released, lease.fence)


def fair_renewing_holder(url: str, name: str, ttl: float, acquired: Any) -> None:
    """Take the fair lock with the watchdog renewing it, put the fence on
    ``acquired``, and hold until killed."""
    lease = FairLock(redis.Redis.from_url(url), name, ttl=ttl, auto_renew=True).acquire()
    assert lease is not None
    acquired.put(lease.fence)
    time.sleep(3600)


def fair_mutex_worker(
    url: str, name: str, threads: int, sections: int, start: threading.Barrier
) -> list[Hold]:
    """``threads`` threads sharing one FairLock object, each doing ``sections``
    read-modify-writes of ``<name>:counter`` under it."""
    client = redis.Redis.from_url(url)
    lock = FairLock(client, name, ttl=10)
    holds: list[Hold] = []
    start.wait()

    def run() -> None:
        for _ in range(sections):
            with lock as lease:
                acquired = time.monotonic()
                value = int(client.get(f"{name}:counter") or 0)
                client.set(f"{name}:counter", value + 1)
                released = time.monotonic()
            holds.append((acquired, released, lease.fence))

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return holds


PartHold = tuple[float, float, tuple[int, ...], tuple[str, ...]]


def multi_worker(parts: list[tuple[str, str]], seconds: float, start: Any) -> list[PartHold]:
    """Loop for ``seconds``: take a MultiLock over the Locks ``parts`` (each a
    ``(server url, name)``, in the order given), hold it 1 ms, release. Returns
    each hold with the parts' fences and labels (``<url>/<name>``)."""
    clients = {url: redis.Redis.from_url(url) for url, _ in parts}
    multi = MultiLock([Lock(clients[url], name, ttl=10) for url, name in parts])
    labels = tuple(f"{url}/{name}" for url, name in parts)
    holds: list[PartHold] = []
    start.wait()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        lease = multi.acquire(timeout=30)
        assert lease is not None
        acquired = time.monotonic()
        time.sleep(0.001)
        released = time.monotonic()
        lease.release()
        holds.append((acquired, released, lease.fence, labels))
    return holds
