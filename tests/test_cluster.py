# mypy: disable-error-code="no-untyped-call,union-attr"
# (redis-py's cluster classes are untyped; a blocking acquire returns a lease, never None)
"""Redis Cluster: ``redis.cluster.RedisCluster`` and ``redis.asyncio.cluster.RedisCluster``
clients with every primitive, on a real cluster of three masters.

One cluster serves the module (``tests/_cluster.py``); the names used are
picked so that each lands on a different master. What is checked: every
primitive acquires and releases there (its keys on the master owning the
name's slot); a waiter is woken by the release (sharded pub/sub on that
master), long before the holder's ttl; contending threads never overlap and
fences increase; the watchdog keeps a lease alive, and fires the lost signal
when the lease's key is deleted. A Redis 6.2 cluster (no sharded pub/sub) is
refused. (Replicas, failover and slot migration: ``tests/test_cluster_ha.py``.)
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
from typing import Any

import pytest
import redis
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.cluster
import redis.connection
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
    UnsupportedServer,
)
from tenure._cli import main
from tenure._drivers import _async as _async_driver
from tenure._drivers import _clients
from tenure._scripts import ALL
from tenure._server import embedded_binary, server_version

pytestmark = pytest.mark.topology

#: A holder's lease in the hand-off tests, seconds: a waiter woken by the
#: release gets the lock within PROMPT, far sooner.
LEASE = 20.0
PROMPT = 3.0


def _binary() -> str:
    return os.environ.get("TENURE_SERVER") or embedded_binary()


def _sharded_pubsub(binary: str) -> bool:
    """Whether the binary has sharded pub/sub (Redis >= 7.0, any Valkey)."""
    line = server_version(binary)  # "Redis server v=7.0.15 sha=..."
    version = tuple(int(p) for p in line.split("v=", 1)[1].split()[0].split(".")[:2])
    return line.lower().startswith("valkey") or version >= (7, 0)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if not _sharded_pubsub(_binary()):
        pytest.skip("a Redis 6.2 cluster is refused (no sharded pub/sub): see test_refuses_6_2")
    with Cluster(os.environ.get("TENURE_SERVER") or None) as c:
        yield c


@pytest.fixture
def rc(cluster: Cluster) -> Iterator[redis.cluster.RedisCluster]:
    nodes = [redis.cluster.ClusterNode(host, port) for host, port in cluster.startup]
    client = redis.cluster.RedisCluster(startup_nodes=nodes)
    client.flushall(target_nodes=redis.cluster.RedisCluster.PRIMARIES)
    yield client
    client.close()


def _async_client(cluster: Cluster) -> redis.asyncio.cluster.RedisCluster:
    nodes = [redis.asyncio.cluster.ClusterNode(host, port) for host, port in cluster.startup]
    return redis.asyncio.cluster.RedisCluster(startup_nodes=nodes)


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


def test_refuses_6_2() -> None:
    with pytest.raises(UnsupportedServer, match="sharded pub/sub"):
        _clients.check_cluster_server("redis", (6, 2, 14))
    _clients.check_cluster_server("redis", (7, 0, 15))
    _clients.check_cluster_server("valkey", (8, 0, 0))


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


def test_every_primitive_on_every_master(rc: redis.cluster.RedisCluster) -> None:
    names = _names(rc, "every")
    assert len({_port_of(rc, name) for name in names}) == 3
    for name in names:
        with Lock(rc, name, ttl=5) as lease:
            assert lease.fence > 0 and _on_node(rc, name, f"tenure:{{{name}}}")
        assert not _on_node(rc, name, f"tenure:{{{name}}}")
        rlock = RLock(rc, name, ttl=5)
        with rlock, rlock:
            assert _on_node(rc, name, f"tenure:{{{name}}}:rlock")
        with FairLock(rc, name, ttl=5) as fair:
            assert fair.fence > lease.fence
        rw = ReadWriteLock(rc, name, ttl=5)
        with rw.read(), rw.read():
            pass
        with rw.write() as write:
            assert write.fence > 0
        pool = Semaphore(rc, name, 2, ttl=5)
        with pool, pool:
            assert _on_node(rc, name, f"tenure:{{{name}}}:semaphore")
        latch = CountDownLatch(rc, name)
        assert latch.try_set_count(2)
        assert latch.count_down() == 1 and not latch.wait(timeout=0.05)
        assert latch.count_down() == 0 and latch.wait(timeout=1)
        FencedKey(rc, name).set("v", fence=lease.fence)
        assert rc.get(name) == b"v"


def test_every_primitive_on_every_master_async(cluster: Cluster) -> None:
    async def main() -> None:
        rc = _async_client(cluster)
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
def test_a_release_wakes_the_waiter(rc: redis.cluster.RedisCluster, make: type) -> None:
    for name in _names(rc, f"wake-{make.__name__}"):
        assert _handoff(rc, make, name) < PROMPT


def test_a_release_wakes_the_waiter_semaphore_rwlock_latch(
    rc: redis.cluster.RedisCluster,
) -> None:
    name = _names(rc, "wake-more")[0]
    pool = Semaphore(rc, name, 1, ttl=LEASE)
    rw = ReadWriteLock(rc, name, ttl=LEASE)
    latch = CountDownLatch(rc, name)
    latch.try_set_count(1)
    held, write = pool.acquire(), rw.read.acquire()
    got: dict[str, float] = {}

    def semaphore() -> None:
        with Semaphore(rc, name, 1, ttl=LEASE).acquire(timeout=LEASE):
            got["semaphore"] = time.monotonic()

    def writer() -> None:
        with ReadWriteLock(rc, name, ttl=LEASE).write.acquire(timeout=LEASE):
            got["rwlock"] = time.monotonic()

    def opened() -> None:
        if CountDownLatch(rc, name).wait(timeout=LEASE):
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


def test_a_release_wakes_the_waiter_async(cluster: Cluster) -> None:
    async def main() -> list[float]:
        rc = _async_client(cluster)
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


def test_contending_threads_never_overlap(rc: redis.cluster.RedisCluster) -> None:
    names = _names(rc, "contend")[:2]
    inside = dict.fromkeys(names, 0)
    overlaps: list[str] = []
    fences: dict[str, list[int]] = {name: [] for name in names}
    mutex = threading.Lock()

    def work(name: str) -> None:
        lock = Lock(rc, name, ttl=5)
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


def test_the_watchdog_renews_and_tells_a_loss(rc: redis.cluster.RedisCluster) -> None:
    kept, dropped = _names(rc, "watch")[:2]
    lost = threading.Event()
    a = Lock(rc, kept, ttl=0.6, auto_renew=True).acquire()
    b = Lock(rc, dropped, ttl=0.6, auto_renew=True, on_lost=lambda _: lost.set()).acquire()
    time.sleep(1.5)  # over twice the ttl: renewed on both masters
    assert rc.exists(f"tenure:{{{kept}}}") and rc.exists(f"tenure:{{{dropped}}}")
    assert not a.lost.is_set() and not b.lost.is_set()
    rc.delete(f"tenure:{{{dropped}}}")
    assert lost.wait(3) and b.lost.is_set()
    assert not a.lost.is_set()
    a.release()


def test_multilock_over_parts_on_three_masters(rc: redis.cluster.RedisCluster) -> None:
    names = _names(rc, "multi")
    multi = MultiLock([Lock(rc, name, ttl=5) for name in names])
    with multi.acquire(timeout=5) as lease:
        assert all(_on_node(rc, name, f"tenure:{{{name}}}") for name in names)
        other: list[object] = []
        thread = threading.Thread(
            target=lambda: other.append(Lock(rc, names[1]).acquire(blocking=False))
        )
        thread.start()
        thread.join(5)
        assert other == [None]
        assert lease is not None
    assert not any(rc.exists(f"tenure:{{{name}}}") for name in names)


def test_min_replicas_without_replicas_fails_and_holds_nothing(
    rc: redis.cluster.RedisCluster,
) -> None:
    """``WAIT`` goes to the master of the name's slot, which has no replica
    here: acquire fails and the lease is released (with replicas:
    ``tests/test_cluster_ha.py::test_min_replicas_on_a_cluster``)."""
    for name in _names(rc, "replicas"):
        with pytest.raises(NotReplicatedError):
            Lock(rc, name, ttl=5, min_replicas=1, replica_timeout=0.1).acquire(timeout=1)
        assert not rc.exists(f"tenure:{{{name}}}")


def test_the_watchdog_renews_and_tells_a_loss_async(cluster: Cluster) -> None:
    async def main() -> None:
        rc = _async_client(cluster)
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


def test_scripts_flushed_on_a_master_are_loaded_again(
    cluster: Cluster, rc: redis.cluster.RedisCluster
) -> None:
    """NOSCRIPT from the master owning the slot: the script is loaded (on every
    master) and sent again, for a call and for the watchdog's renewals."""
    name = _names(rc, "noscript")[0]
    lease = Lock(rc, name, ttl=0.6, auto_renew=True).acquire()
    _flush_scripts(cluster)
    time.sleep(1.2)  # renewals after the flush
    assert not lease.lost.is_set() and rc.exists(f"tenure:{{{name}}}")
    _flush_scripts(cluster)
    lease.release()
    assert not rc.exists(f"tenure:{{{name}}}")


def test_a_redlock_refuses_a_cluster_client() -> None:
    # unset clients: the check sends nothing
    sync = redis.cluster.RedisCluster.__new__(redis.cluster.RedisCluster)
    aio = redis.asyncio.cluster.RedisCluster.__new__(redis.asyncio.cluster.RedisCluster)
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
    rc: redis.cluster.RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10 leases on 3 masters: each renewal round sends one pipelined request to
    each master (counted on the client's connections: one send per round trip)."""
    # (renewal thread, port) of each request sent; a thread per round (kept here:
    # the idents of finished threads are reused)
    sends: list[tuple[threading.Thread, int]] = []
    real = redis.connection.AbstractConnection.send_packed_command

    def counted(self: redis.connection.AbstractConnection, *args: object, **kw: object) -> None:
        if threading.current_thread().name.startswith("tenure-renewal"):
            sends.append((threading.current_thread(), int(self.port)))  # type: ignore[attr-defined]
        real(self, *args, **kw)

    names = [name for stem in range(4) for name in _names(rc, f"batch{stem}")][:10]
    assert len({_port_of(rc, name) for name in names}) == 3
    leases = [Lock(rc, name, ttl=0.9, auto_renew=True).acquire() for name in names]
    time.sleep(0.8)  # a first round: the renewal script is loaded on every master
    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
    time.sleep(1.2)  # a few rounds
    monkeypatch.undo()
    assert all(rc.exists(f"tenure:{{{name}}}") for name in names)
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
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The asyncio twin: each renewal round sends one request to each master (the
    round is marked in a context variable, which the tasks it starts inherit)."""
    sends: list[tuple[int, int]] = []  # (renewal round, port) of each request sent
    round_of: contextvars.ContextVar[int] = contextvars.ContextVar("round_of", default=0)
    rounds = itertools.count(1)
    real = redis.asyncio.connection.AbstractConnection.send_packed_command
    real_renew = _async_driver._renew_each

    async def counted(self: Any, *args: Any, **kw: Any) -> None:
        if round_of.get():
            sends.append((round_of.get(), int(self.port)))
        await real(self, *args, **kw)

    async def renew_each(*args: Any) -> list[Any]:
        round_of.set(next(rounds))
        return await real_renew(*args)

    async def main() -> None:
        client = _async_client(cluster)
        sync = redis.cluster.RedisCluster(
            startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in cluster.startup]
        )
        names = [name for stem in range(4) for name in _names(sync, f"abatch{stem}")][:10]
        sync.close()
        leases = [
            await AsyncLock(client, name, ttl=0.9, auto_renew=True).acquire() for name in names
        ]
        await asyncio.sleep(0.8)  # a first round: the renewal script is loaded on every master
        monkeypatch.setattr(
            redis.asyncio.connection.AbstractConnection, "send_packed_command", counted
        )
        monkeypatch.setattr(_async_driver, "_renew_each", renew_each)
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
