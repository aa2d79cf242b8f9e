"""Sentinel: clients from ``Sentinel(...).master_for(...)``, and failovers.

One group of real processes serves the module (``tests/_sentinel.py``: a
master, a replica, three sentinels); each failover test fails the master over
and puts the old one back as a replica, so the master changes from test to test.

The failover tests check what the docs promise (docs/topologies.md, Sentinel):
a lease acquired with ``min_replicas=1`` is on the new master and the holder's
watchdog renews it there; waiters whose wake hub was on the old master are
woken on the new one (the hand-off comes within :data:`PROMPT`, not after the
holder's :data:`LEASE`); and the documented risk: without ``min_replicas`` a
lease the replica never got is forgotten, the new master grants the lock
again, with a larger fence, and the old holder is told its lease is lost.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel
from _sentinel import SERVICE, SentinelGroup
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from tenure import (
    AsyncCountDownLatch,
    AsyncFairLock,
    AsyncFencedKey,
    AsyncLock,
    AsyncMultiLock,
    AsyncReadWriteLock,
    AsyncRLock,
    AsyncSemaphore,
    CountDownLatch,
    FairLock,
    FencedKey,
    InvalidArgument,
    Lock,
    MultiLock,
    NotReplicatedError,
    ReadWriteLock,
    RLock,
    Semaphore,
    StaleFenceError,
)
from tenure._doctor import diagnose, gather_facts

# A group of servers: `make test` runs these on Valkey only (see the Makefile).
pytestmark = pytest.mark.topology

#: The lease the waiters wait behind, seconds: a waiter not woken waits this long.
LEASE = 30.0
#: How long a woken waiter may take to get the lock after the release, seconds.
PROMPT = 2.5
#: The renewed lease's ttl, seconds: longer than a failover takes, so that the
#: watchdog can renew it on the new master before it runs out there.
RENEWED = 8.0


def _retry() -> Retry:
    """Enough retries (about 20 s of them) to outlast a failover."""
    return Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.5), 40)


def _async_retry() -> AsyncRetry:
    return AsyncRetry(ExponentialWithJitterBackoff(base=0.05, cap=0.5), 40)


@pytest.fixture(scope="module")
def group() -> Iterator[SentinelGroup]:
    g = SentinelGroup(os.environ.get("TENURE_SERVER"), os.environ.get("TENURE_SENTINEL"))
    yield g
    g.close()


def _client(group: SentinelGroup) -> redis.Redis:
    """A client of the master, as a user makes one: socket timeouts (a paused
    master must not hang a call) and retries that outlast a failover."""
    sentinel = redis.sentinel.Sentinel(group.addresses, socket_timeout=1)  # type: ignore[no-untyped-call]
    client: redis.Redis = sentinel.master_for(SERVICE, socket_timeout=1, retry=_retry())  # type: ignore[no-untyped-call]
    return client


def _async_client(group: SentinelGroup) -> redis.asyncio.Redis:
    sentinel = redis.asyncio.sentinel.Sentinel(group.addresses, socket_timeout=1)  # type: ignore[no-untyped-call]
    client: redis.asyncio.Redis = sentinel.master_for(
        SERVICE, socket_timeout=1, retry=_async_retry()
    )
    return client


def _on_master(group: SentinelGroup) -> redis.Redis:
    """A plain client of the current master (to look at what it holds)."""
    return redis.Redis(port=group.master_port(), socket_timeout=2)


def test_a_sentinel_itself_is_refused_naming_master_for() -> None:
    for sentinel, cls in [
        (redis.sentinel.Sentinel([("127.0.0.1", 1)]), Lock),  # type: ignore[no-untyped-call]
        (redis.asyncio.sentinel.Sentinel([("127.0.0.1", 1)]), AsyncLock),  # type: ignore[no-untyped-call]
    ]:
        with pytest.raises(InvalidArgument, match=r"master_for\(") as info:
            cls(sentinel, "x")
        assert "Sentinel" in str(info.value)


def test_every_primitive_through_master_for(group: SentinelGroup) -> None:
    client = _client(group)
    on_master = _on_master(group)
    with Lock(client, "p-lock") as lease:
        assert on_master.get("tenure:{p-lock}") == lease.owner.encode()
        resource = FencedKey(client, "p-resource")
        resource.set("new", fence=lease.fence)
        with pytest.raises(StaleFenceError):
            resource.set("old", fence=lease.fence - 1)
        assert on_master.get("p-resource") == b"new"
    rlock = RLock(client, "p-rlock")
    with rlock, rlock:
        assert rlock.hold_count() == 2
    with FairLock(client, "p-fair") as fair:
        assert fair.fence > 0
    rw = ReadWriteLock(client, "p-rw")
    with rw.read, rw.read:
        assert rw.read.hold_count() == 2
    with rw.write:
        assert rw.write.owned()
    semaphore = Semaphore(client, "p-sem", 2)
    with semaphore, semaphore:
        assert semaphore.acquire(blocking=False) is None
    assert semaphore.available() == 2
    with MultiLock([Lock(client, "p-a"), FairLock(client, "p-b")]) as both:
        assert Lock(client, "p-a").locked() and FairLock(client, "p-b").locked()
    assert not both.valid
    # waiting: the latch's broadcast and a lock's hand-off reach a waiter
    # through the wake hub's pub/sub connection on the master
    latch = CountDownLatch(client, "p-latch")
    assert latch.try_set_count(1)
    opened: list[bool] = []
    waiter = threading.Thread(target=lambda: opened.append(latch.wait(timeout=10)))
    waiter.start()
    time.sleep(0.3)
    latch.count_down()
    waiter.join(PROMPT)
    assert opened == [True]
    _handed_off_promptly(_client(group), Lock(client, "p-wait", ttl=LEASE).acquire())
    client.close()


def _handed_off_promptly(waiting: redis.Redis, lease: Any, name: str = "p-wait") -> None:
    """A waiter on another client gets the lock within PROMPT of its release."""
    got: list[float] = []
    thread = threading.Thread(
        target=lambda: (
            got.append(time.monotonic()) if Lock(waiting, name).acquire(timeout=10) else None
        )
    )
    thread.start()
    time.sleep(0.3)
    released = time.monotonic()
    lease.release()
    thread.join(10)
    assert got and got[0] - released < PROMPT
    waiting.close()


def test_every_async_primitive_through_master_for(group: SentinelGroup) -> None:
    async def main() -> None:
        client = _async_client(group)
        on_master = _on_master(group)
        async with AsyncLock(client, "ap-lock") as lease:
            assert on_master.get("tenure:{ap-lock}") == lease.owner.encode()
            resource = AsyncFencedKey(client, "ap-resource")
            await resource.set("new", fence=lease.fence)
            with pytest.raises(StaleFenceError):
                await resource.set("old", fence=lease.fence - 1)
        rlock = AsyncRLock(client, "ap-rlock")
        async with rlock, rlock:
            assert await rlock.hold_count() == 2
        async with AsyncFairLock(client, "ap-fair") as fair:
            assert fair.fence > 0
        rw = AsyncReadWriteLock(client, "ap-rw")
        async with rw.read, rw.read:
            assert await rw.read.hold_count() == 2
        async with rw.write:
            assert await rw.write.owned()
        semaphore = AsyncSemaphore(client, "ap-sem", 2)
        async with semaphore, semaphore:
            assert await semaphore.acquire(blocking=False) is None
        async with AsyncMultiLock([AsyncLock(client, "ap-a"), AsyncLock(client, "ap-b")]):
            assert await AsyncLock(client, "ap-b").locked()
        latch = AsyncCountDownLatch(client, "ap-latch")
        assert await latch.try_set_count(1)
        waiting = asyncio.create_task(latch.wait(timeout=10))
        await asyncio.sleep(0.3)
        await latch.count_down()
        assert await asyncio.wait_for(waiting, PROMPT)
        # a hand-off to a waiter on another client (another wake hub)
        other = _async_client(group)
        held = await AsyncLock(client, "ap-wait", ttl=LEASE).acquire()
        assert held is not None
        waiter = asyncio.create_task(AsyncLock(other, "ap-wait").acquire(timeout=10))
        await asyncio.sleep(0.3)
        released = time.monotonic()
        await held.release()
        assert await waiter is not None
        assert time.monotonic() - released < PROMPT
        await other.aclose()
        await client.aclose()

    asyncio.run(main())


def _renewed_on(group: SentinelGroup, key: str, token: str, before: float) -> None:
    """Wait until the new master holds ``key`` for ``token`` with a ttl above
    ``before`` seconds: the watchdog renewed it there (it renews every third of
    :data:`RENEWED`)."""
    on_master = _on_master(group)
    deadline = time.monotonic() + RENEWED
    while True:
        assert on_master.get(key) == token.encode(), "the lease is not on the new master"
        if on_master.pttl(key) / 1000 > before:
            return
        assert time.monotonic() < deadline, "the watchdog did not renew on the new master"
        time.sleep(0.1)


def test_failover_while_held_and_waited(group: SentinelGroup) -> None:
    """The master is killed while leases acquired with min_replicas=1 are held
    and two threads wait.
    The sentinels promote the replica: the leases are there, the watchdog
    renews them there, and the release hands the lock to the waiters at once."""
    holder, waiting = _client(group), _client(group)
    renewed = Lock(holder, "f-renewed", ttl=RENEWED, auto_renew=True, min_replicas=1).acquire()
    held = Lock(holder, "f-held", ttl=LEASE, auto_renew=True, min_replicas=1).acquire()
    assert renewed is not None and held is not None
    got: list[tuple[float, float, int]] = []  # (acquired, released, fence)

    def wait() -> None:
        lease = Lock(waiting, "f-held").acquire(timeout=30)
        assert lease is not None
        acquired = time.monotonic()
        time.sleep(0.2)
        got.append((acquired, time.monotonic(), lease.fence))
        lease.release()

    waiters = [threading.Thread(target=wait) for _ in range(2)]
    for thread in waiters:
        thread.start()
    time.sleep(0.5)  # both wait, subscribed on the old master
    old = group.kill_master()
    try:
        group.wait_promoted(old.port)
        _renewed_on(group, "tenure:{f-renewed}", renewed.owner, RENEWED * 0.9)
        assert renewed.valid and not renewed.lost.is_set()
        assert held.valid and not held.lost.is_set()
        released = time.monotonic()
        held.release()
        for thread in waiters:
            thread.join(10)
        assert len(got) == 2, "a waiter did not get the lock"
        first, second = sorted(got)
        assert first[0] - released < PROMPT, "the waiter was not woken on the new master"
        assert first[1] <= second[0], "two holders at once"
        assert second[0] - first[1] < PROMPT
        assert held.fence < first[2] < second[2]
        renewed.release()
    finally:
        group.rejoin(old)
        group.wait_healthy()
        holder.close()
        waiting.close()


def test_async_failover_while_held_and_waited(group: SentinelGroup) -> None:
    """The asyncio twin."""

    async def main() -> None:
        holder, waiting = _async_client(group), _async_client(group)
        renewed = await AsyncLock(
            holder, "af-renewed", ttl=RENEWED, auto_renew=True, min_replicas=1
        ).acquire()
        held = await AsyncLock(
            holder, "af-held", ttl=LEASE, auto_renew=True, min_replicas=1
        ).acquire()
        assert renewed is not None and held is not None
        got: list[tuple[float, float, int]] = []

        async def wait() -> None:
            lease = await AsyncLock(waiting, "af-held").acquire(timeout=30)
            assert lease is not None
            acquired = time.monotonic()
            await asyncio.sleep(0.2)
            got.append((acquired, time.monotonic(), lease.fence))
            await lease.release()

        waiters = [asyncio.create_task(wait()) for _ in range(2)]
        await asyncio.sleep(0.5)
        old = await asyncio.to_thread(group.kill_master)
        try:
            await asyncio.to_thread(group.wait_promoted, old.port)
            await asyncio.to_thread(
                _renewed_on, group, "tenure:{af-renewed}", renewed.owner, RENEWED * 0.9
            )
            assert renewed.valid and held.valid
            released = time.monotonic()
            await held.release()
            await asyncio.wait_for(asyncio.gather(*waiters), 10)
            first, second = sorted(got)
            assert first[0] - released < PROMPT, "the waiter was not woken on the new master"
            assert first[1] <= second[0], "two holders at once"
            assert held.fence < first[2] < second[2]
            await renewed.release()
        finally:
            await asyncio.to_thread(group.rejoin, old)
            await asyncio.to_thread(group.wait_healthy)
            await holder.aclose()
            await waiting.aclose()

    asyncio.run(main())


def test_without_min_replicas_the_new_master_grants_the_lock_again(group: SentinelGroup) -> None:
    """The documented risk. The replica stops replicating (pointed at a port
    where nothing listens), a lock is acquired on the master, and the master
    dies: the replica it never reached is promoted without the lease, and grants
    the lock to another client. Its fence is still larger (fences are seeded
    from the server's clock), and the first holder's watchdog finds its lease
    gone and fires the lost signal. With min_replicas=1 the acquire would have
    failed instead."""
    first, second = _client(group), _client(group)
    replica = group.replica
    group._ask(replica.port, "REPLICAOF", "127.0.0.1", "1")  # the link is down
    lease = Lock(first, "risk", ttl=3, auto_renew=True).acquire(blocking=False)
    assert lease is not None
    with pytest.raises(NotReplicatedError):
        Lock(first, "guarded", min_replicas=1, replica_timeout=0.2).acquire(blocking=False)
    old = group.kill_master()
    try:
        group.wait_promoted(old.port)
        again = Lock(second, "risk", ttl=30).acquire(timeout=10)
        assert again is not None, "the new master did not grant the lock again"
        assert again.fence > lease.fence
        assert lease.lost.wait(10), "the first holder was not told its lease is lost"
        again.release()
    finally:
        group.rejoin(old)
        group.wait_healthy()
        first.close()
        second.close()


def test_doctor_on_a_sentinel_and_its_master(group: SentinelGroup) -> None:
    """`tenure doctor` pointed at a Sentinel names what it monitors and how to
    connect, and nothing about its own settings; at the master it names the
    replica and min_replicas."""
    with redis.Redis(port=group.addresses[0][1]) as sentinel:
        report = diagnose(gather_facts(sentinel))
    assert report.server is not None and report.server.mode == "sentinel"
    assert [f.check for f in report.findings] == ["version", "sentinel"]
    found = report.findings[1]
    assert f"{SERVICE} (master 127.0.0.1:{group.master_port()})" in found.message
    assert f"master_for({SERVICE!r})" in found.advice
    with _on_master(group) as master:
        report = diagnose(gather_facts(master))
    replicas = next(f for f in report.findings if f.check == "replicas")
    assert f"127.0.0.1:{group.replica.port}" in replicas.message
    assert "min_replicas=1" in replicas.advice


def test_valkey_py_master_for_clients(group: SentinelGroup) -> None:
    """valkey-py's Sentinel clients, sync and asyncio: a lease, and a hand-off
    to a waiter through the wake hub (valkey-py's own pub/sub class)."""
    import valkey.asyncio.sentinel
    import valkey.sentinel

    sentinel = valkey.sentinel.Sentinel(group.addresses, socket_timeout=1)  # type: ignore[no-untyped-call]
    client = sentinel.master_for(SERVICE, socket_timeout=1)  # type: ignore[no-untyped-call]
    lease = FairLock(client, "v-fair", ttl=LEASE).acquire()
    assert lease is not None
    got: list[float] = []
    waiting = sentinel.master_for(SERVICE, socket_timeout=1)  # type: ignore[no-untyped-call]
    thread = threading.Thread(
        target=lambda: (
            got.append(time.monotonic())
            if FairLock(waiting, "v-fair").acquire(timeout=10)
            else None
        )
    )
    thread.start()
    time.sleep(0.3)
    released = time.monotonic()
    lease.release()
    thread.join(10)
    assert got and got[0] - released < PROMPT

    async def main() -> None:
        asentinel = valkey.asyncio.sentinel.Sentinel(group.addresses, socket_timeout=1)  # type: ignore[no-untyped-call]
        holder = asentinel.master_for(SERVICE, socket_timeout=1)
        other = asentinel.master_for(SERVICE, socket_timeout=1)
        held = await AsyncLock(holder, "av-lock", ttl=LEASE).acquire()
        assert held is not None
        waiter = asyncio.create_task(AsyncLock(other, "av-lock").acquire(timeout=10))
        await asyncio.sleep(0.3)
        released = time.monotonic()
        await held.release()
        assert await waiter is not None
        assert time.monotonic() - released < PROMPT
        await holder.aclose()
        await other.aclose()

    asyncio.run(main())
    client.close()
    waiting.close()


def test_the_docs_name_tests_that_exist() -> None:
    """Every test docs/topologies.md's Sentinel section cites is in this module
    (``::name``) or names its file (``tests/x.py::name``)."""
    import re
    from pathlib import Path

    root = Path(__file__).parent.parent
    text = (root / "docs" / "topologies.md").read_text()
    section = text.split("## Sentinel", 1)[1].split("\n## ", 1)[0]
    cited = re.findall(r"`(tests/[\w/]+\.py)?::(\w+)`", section)
    assert cited
    for path, name in cited:
        source = (root / (path or "tests/test_sentinel.py")).read_text()
        assert f"def {name}(" in source, f"{path or 'tests/test_sentinel.py'}::{name}"


@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_wake_hub_leaves_a_demoted_master_that_went_silent(group: SentinelGroup, api: str) -> None:
    """A manual failover (SENTINEL FAILOVER): the old master is made a replica,
    which closes the client's connections but not its pub/sub connection, so
    the wake hub stays on it; then it goes silent (paused: its host is gone).
    The hub must move to the new master once its client learned where that is
    (here: the holder's release, on the same client, reconnects), so that the
    waiter gets the lock at once, not at the end of the holder's 30 s lease."""
    old = group.master
    got: list[float] = []
    if api == "sync":
        client = _client(group)
        held = Lock(client, "d-held", ttl=LEASE, min_replicas=1).acquire()
        assert held is not None

        def wait() -> None:
            if Lock(client, "d-held").acquire(timeout=20):
                got.append(time.monotonic())

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.5)  # the waiter waits, subscribed on the old master
        try:
            group.failover()
            group.demote(old.port)
            old.pause()
            released = time.monotonic()
            held.release()
            thread.join(25)
        finally:
            old.resume()
            client.close()
    else:

        async def main() -> float:
            client = _async_client(group)
            held = await AsyncLock(client, "ad-held", ttl=LEASE, min_replicas=1).acquire()
            assert held is not None

            async def wait() -> None:
                if await AsyncLock(client, "ad-held").acquire(timeout=20):
                    got.append(time.monotonic())

            waiter = asyncio.create_task(wait())
            await asyncio.sleep(0.5)
            try:
                await asyncio.to_thread(group.failover)
                await asyncio.to_thread(group.demote, old.port)
                old.pause()
                released = time.monotonic()
                await held.release()
                await asyncio.wait_for(waiter, 25)
                return released
            finally:
                old.resume()
                await client.aclose()

        released = asyncio.run(main())
    group.wait_healthy()
    assert got, "the waiter did not get the lock"
    assert got[0] - released < PROMPT, "the wake hub stayed on the old master"


def test_left_master_only_for_a_sentinel_master_pool() -> None:
    """The hub's check touches nothing but a Sentinel master pool that has
    learned a master other than the connection's server."""
    from types import SimpleNamespace

    from tenure._drivers._clients import left_master

    at = SimpleNamespace(host="127.0.0.1", port=7001)
    assert not left_master(redis.ConnectionPool(), at)
    sentinel = redis.sentinel.Sentinel([("127.0.0.1", 1)])  # type: ignore[no-untyped-call]
    pool = redis.sentinel.SentinelConnectionPool(SERVICE, sentinel)  # type: ignore[no-untyped-call]
    assert not left_master(pool, at)  # no master learned yet
    pool.proxy.master_address = ("127.0.0.1", 7001)
    assert not left_master(pool, at)
    assert not left_master(pool, None)
    pool.proxy.master_address = ("127.0.0.1", 7002)
    assert left_master(pool, at)
    replicas = redis.sentinel.SentinelConnectionPool(SERVICE, sentinel, is_master=False)  # type: ignore[no-untyped-call]
    replicas.proxy.master_address = ("127.0.0.1", 7002)
    assert not left_master(replicas, at)


#: The kinds that honour min_replicas, each as (name, acquirer of a lock of
#: that name on a client, whether a lock of that name on a client is held).
_REPLICATED: list[tuple[str, Any, Any]] = [
    ("lock", lambda c, n, **kw: Lock(c, n, **kw), lambda c, n: Lock(c, n).locked()),
    ("rlock", lambda c, n, **kw: RLock(c, n, **kw), lambda c, n: RLock(c, n).locked()),
    ("fair", lambda c, n, **kw: FairLock(c, n, **kw), lambda c, n: FairLock(c, n).locked()),
    (
        "write",
        lambda c, n, **kw: ReadWriteLock(c, n, **kw).write,
        lambda c, n: ReadWriteLock(c, n).locked(),
    ),
    (
        "read",
        lambda c, n, **kw: ReadWriteLock(c, n, **kw).read,
        lambda c, n: ReadWriteLock(c, n).locked(),
    ),
    (
        "semaphore",
        lambda c, n, **kw: Semaphore(c, n, 1, **kw),
        lambda c, n: Semaphore(c, n, 1).available() < 1,
    ),
    (
        "multi",
        lambda c, n, **kw: MultiLock([Lock(c, f"{n}-a", **kw), RLock(c, f"{n}-b", **kw)]),
        lambda c, n: Lock(c, f"{n}-a").locked() or RLock(c, f"{n}-b").locked(),
    ),
]
_ASYNC_REPLICATED: list[tuple[str, Any, Any]] = [
    ("lock", lambda c, n, **kw: AsyncLock(c, n, **kw), lambda c, n: AsyncLock(c, n).locked()),
    ("rlock", lambda c, n, **kw: AsyncRLock(c, n, **kw), lambda c, n: AsyncRLock(c, n).locked()),
    (
        "fair",
        lambda c, n, **kw: AsyncFairLock(c, n, **kw),
        lambda c, n: AsyncFairLock(c, n).locked(),
    ),
    (
        "write",
        lambda c, n, **kw: AsyncReadWriteLock(c, n, **kw).write,
        lambda c, n: AsyncReadWriteLock(c, n).locked(),
    ),
    (
        "read",
        lambda c, n, **kw: AsyncReadWriteLock(c, n, **kw).read,
        lambda c, n: AsyncReadWriteLock(c, n).locked(),
    ),
    ("semaphore", lambda c, n, **kw: AsyncSemaphore(c, n, 1, **kw), lambda c, n: _taken(c, n)),
    (
        "multi",
        lambda c, n, **kw: AsyncMultiLock(
            [AsyncLock(c, f"{n}-a", **kw), AsyncRLock(c, f"{n}-b", **kw)]
        ),
        lambda c, n: _either(c, n),
    ),
]


async def _taken(client: redis.asyncio.Redis, name: str) -> bool:
    return await AsyncSemaphore(client, name, 1).available() < 1


async def _either(client: redis.asyncio.Redis, name: str) -> bool:
    return (
        await AsyncLock(client, f"{name}-a").locked()
        or await AsyncRLock(client, f"{name}-b").locked()
    )


#: What NotReplicatedError says when the wait ran on the server that made the
#: grant (an isolated old master has no replica), not on another one.
WAITED_THERE = "0 of 1 replicas acknowledged"


def _isolate_the_master(group: SentinelGroup, learn: Any) -> Any:
    """Pause the master until the sentinels promoted the replica, have the
    client's pool learn the new master (``learn()``: as it does when any of
    its connections connects; it closes its idle connections to the old one,
    not those checked out, as the quick path's are), then resume the old one:
    an isolated master, with no replica, until the sentinels make it one
    (some seconds later). Returns its process."""
    old = group.master
    old.pause()
    try:
        group.wait_promoted(old.port)
        learn()
    finally:
        old.resume()
    _still_isolated(group, old.port)
    return old


def _still_isolated(group: SentinelGroup, port: int) -> None:
    """The old master at ``port`` has not been made a replica yet (the test's
    window: the Sentinels do it some seconds after they see it again)."""
    assert group._ask(port, "ROLE")[0] == "master", "the Sentinels demoted the old master too soon"


@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_a_replicated_acquire_on_an_isolated_old_master_gives_its_grant_back(
    group: SentinelGroup, api: str
) -> None:
    """A client's quick path kept a connection to the master, which is paused
    until it is failed over, then comes back as an isolated master (split
    brain). An acquire with min_replicas=1 through that connection is granted
    by the old master, whose wait for replicas runs there too (on the same
    connection), finds none and raises NotReplicatedError (whichever server
    the client's pool now points to), and the old master no longer holds the
    grant. A MultiLock's parts, taken together in one round trip, alike."""
    ttl, patience = 30.0, 0.3
    if api == "sync":
        client = _client(group)
        Lock(client, "s-warm").acquire(blocking=False).release()  # type: ignore[union-attr]
        pool: Any = client.connection_pool
        old = _isolate_the_master(group, pool.get_master_address)
        assert pool.master_address[1] != old.port  # the pool moved on, its quick path did not
        try:
            with redis.Redis(port=old.port, socket_timeout=2) as on_old:
                for kind, make, held in _REPLICATED:
                    name = f"s-split-{kind}"
                    lock = make(client, name, ttl=ttl, min_replicas=1, replica_timeout=patience)
                    with pytest.raises(NotReplicatedError, match=WAITED_THERE):
                        try:
                            lock.acquire(blocking=False)
                        finally:
                            _still_isolated(group, old.port)
                    assert not held(on_old, name), f"{kind}: the old master holds the grant"
        finally:
            group.demote(old.port)
            group.wait_healthy()
            client.close()
        return

    async def main() -> None:
        client = _async_client(group)
        lease = await AsyncLock(client, "as-warm").acquire(blocking=False)
        assert lease is not None
        await lease.release()
        pool: Any = client.connection_pool
        learn = asyncio.run_coroutine_threadsafe
        loop = asyncio.get_running_loop()
        old = await asyncio.to_thread(
            _isolate_the_master,
            group,
            lambda: learn(pool.get_master_address(), loop).result(10),
        )
        assert pool.master_address[1] != old.port
        on_old = redis.asyncio.Redis(port=old.port, socket_timeout=2)
        try:
            for kind, make, held in _ASYNC_REPLICATED:
                name = f"as-split-{kind}"
                lock = make(client, name, ttl=ttl, min_replicas=1, replica_timeout=patience)
                with pytest.raises(NotReplicatedError, match=WAITED_THERE):
                    try:
                        await lock.acquire(blocking=False)
                    finally:
                        await asyncio.to_thread(_still_isolated, group, old.port)
                assert not await held(on_old, name), f"{kind}: the old master holds the grant"
        finally:
            await on_old.aclose()
            await asyncio.to_thread(group.demote, old.port)
            await asyncio.to_thread(group.wait_healthy)
            await client.aclose()

    asyncio.run(main())


def test_a_holders_label_survives_a_failover(group: SentinelGroup) -> None:
    """The label travels in what the lease stores, so the promoted replica
    has it, and an RLock's re-entry there finds the hold by its owner id."""
    label = "web-3 pid 4711 (celery worker)"
    client = _client(group)
    lease = Lock(client, "f-label", ttl=LEASE, auto_renew=True, min_replicas=1, label=label)
    held = lease.acquire()
    rlock = RLock(client, "f-label", ttl=LEASE, auto_renew=True, min_replicas=1, label=label)
    outer = rlock.acquire()
    assert held is not None and outer is not None
    old = group.kill_master()
    try:
        group.wait_promoted(old.port)
        assert Lock(client, "f-label").info().label == label
        again = RLock(client, "f-label", label="another label").acquire(timeout=5)
        assert again is not None and again.fence == outer.fence and rlock.hold_count() == 2
        assert rlock.info().label == label  # (the hold's first label)
        again.release()
        outer.release()
        held.release()
        assert not rlock.locked() and not Lock(client, "f-label").locked()
    finally:
        group.rejoin(old)
        group.wait_healthy()
        client.close()
