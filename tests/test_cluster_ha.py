# mypy: disable-error-code="no-untyped-call,union-attr"
# (redis-py's cluster classes are untyped; a blocking acquire returns a lease, never None)
"""Redis Cluster high availability: a slot migration and a master's failover
while a lease is held and waiters wait, and ``min_replicas`` on a cluster.

One cluster of three masters and three replicas serves the module
(``tests/_cluster.py``, ``Cluster(replicas=1)``). Each scenario holds a lock
``A`` with a long lease (:data:`LEASE`, not renewed) that a synchronous and an
asyncio waiter (each with its own cluster client) wait for, and a short lease
on another name of the same slot, which the watchdog renews. Then the slot
moves to another master (``MIGRATING`` / ``IMPORTING``, its keys ``MIGRATE``\\ d,
``SETSLOT NODE``), or its master is killed (SIGKILL) and its replica promoted.
What is checked: the waiters' wake channels are subscribed on the slot's new
owner (``PUBSUB SHARDCHANNELS`` there); the release of ``A`` on the new owner
wakes both waiters within :data:`PROMPT` seconds (far before the holder's
PTTL); the holders never overlap and the fences strictly increase; the renewed
lease is never lost and is renewed on the new owner. With ``min_replicas=1``
a lease is on the replica when acquire returns (and acquire fails when the
replica can't acknowledge), and is on the promoted replica after a failover.
Waiters of clients whose slot map is stale (learned before a migration) end
up on the new owner too.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster
from _cluster import Cluster
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from tenure import AsyncLock, Lease, Lock, NotReplicatedError
from tenure._server import ServerProcess, embedded_binary, server_version

pytestmark = pytest.mark.topology

#: The contended lock's lease, seconds: a waiter that is not woken by the
#: release waits this long.
LEASE = 20.0
#: How soon after the release each waiter must hold the lock, seconds.
PROMPT = 3.0
#: The renewed leases' ttl in the migration test, seconds (the watchdog renews
#: them every third of it).
RENEWED_TTL = 2.0
#: How long the slot stays split in the migration test (from ``MIGRATING`` to
#: ``SETSLOT NODE``), seconds: every script of the slot gets ``TRYAGAIN`` then
#: (its keys are not all on one node), so renewals fail and are retried.
SPLIT = 0.3
#: Their ttl in the failover test: longer than the failover (node timeout 2 s,
#: then the replica's election), which no renewal can reach.
FAILOVER_TTL = 10.0


def _binary() -> str:
    return os.environ.get("TENURE_SERVER") or embedded_binary()


def _sharded_pubsub(binary: str) -> bool:
    line = server_version(binary)
    version = tuple(int(p) for p in line.split("v=", 1)[1].split()[0].split(".")[:2])
    return line.lower().startswith("valkey") or version >= (7, 0)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if not _sharded_pubsub(_binary()):
        pytest.skip("Valkey and Redis >= 7.0 only: the Redis 6.2 test cluster has no replicas")
    with Cluster(os.environ.get("TENURE_SERVER") or None, replicas=1) as c:
        yield c


def _client(cluster: Cluster) -> redis.cluster.RedisCluster:
    nodes = [redis.cluster.ClusterNode(host, port) for host, port in cluster.startup]
    return redis.cluster.RedisCluster(startup_nodes=nodes)


@pytest.fixture
def rc(cluster: Cluster) -> Iterator[redis.cluster.RedisCluster]:
    client = _client(cluster)
    client.flushall(target_nodes=redis.cluster.RedisCluster.PRIMARIES)
    yield client
    client.close()


def _same_slot(rc: redis.cluster.RedisCluster, stem: str, count: int) -> list[str]:
    """``count`` names whose keys share one slot (the first name's)."""
    first = f"{stem}-0"
    slot = rc.keyslot(first)
    names = [first]
    i = 1
    while len(names) < count:
        name = f"{stem}-{i}"
        if rc.keyslot(name) == slot:
            names.append(name)
        i += 1
    return names


def _ask(node: ServerProcess, *args: object) -> Any:
    with redis.Redis(port=node.port, socket_timeout=2, decode_responses=True) as c:
        return c.execute_command(*args)


def _subscribed(node: ServerProcess, name: str) -> int:
    """How many wake channels of the lock ``name`` are subscribed on ``node``."""
    return len(_ask(node, "PUBSUB", "SHARDCHANNELS", f"tenure:{{{name}}}:wake:*"))


def _on_replica(node: ServerProcess, key: str) -> bool:
    """Whether the replica ``node`` has ``key`` (read with ``READONLY``)."""
    with redis.Redis(port=node.port, socket_timeout=2) as c:
        c.execute_command("READONLY")
        return bool(c.exists(key))


def _until(ready: Callable[[], bool], seconds: float, what: str) -> float:
    """Wait until ``ready()``; return how long it took. Fails the test after ``seconds``."""
    start = time.monotonic()
    while not ready():
        assert time.monotonic() - start < seconds, f"{what} within {seconds} s"
        time.sleep(0.05)
    return time.monotonic() - start


def _outlives(node: ServerProcess, key: str) -> None:
    """Check that ``key`` is still on ``node`` after the time it had left: it
    was renewed there."""
    left = _ask(node, "PTTL", key)
    assert isinstance(left, int) and left > 0, f"{key} is not on the node ({left})"
    time.sleep(left / 1000 + 0.2)
    assert _ask(node, "PTTL", key) > 0, f"{key} was not renewed on the node"


def _renewed_on(node: ServerProcess, key: str, seconds: float) -> None:
    """Check that ``key``'s PTTL on ``node`` goes up within ``seconds`` (it only
    goes down between renewals, so a rise from one reading to the next is one)."""
    before = _ask(node, "PTTL", key)
    assert isinstance(before, int) and before > 0, f"{key} is not on the node ({before})"
    start = time.monotonic()
    while (now := _ask(node, "PTTL", key)) <= before:
        assert now > 0 and time.monotonic() - start < seconds, f"{key} not renewed on the node"
        before = now
        time.sleep(0.05)


@dataclass
class History:
    """Who held the contended lock when, with which fence."""

    mutex: threading.Lock = field(default_factory=threading.Lock)
    holds: list[tuple[float, float, int, str]] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def held(self, start: float, end: float, fence: int, who: str) -> None:
        with self.mutex:
            self.holds.append((start, end, fence, who))

    def check(self) -> None:
        """No two holds overlap; fences strictly increase in the order of the holds."""
        assert not self.errors, self.errors
        holds = sorted(self.holds)
        for (_, end, fence, who), (start, _, later, other) in itertools.pairwise(holds):
            assert end <= start, f"{who} and {other} held the lock at once"
            assert later > fence, f"fence {later} of {other} after {fence} of {who}"


HOLD = 0.2


#: The client libraries, by name: (sync cluster client class, asyncio one).
LIBRARIES = ("redis", "valkey")


def _classes(lib: str) -> tuple[Any, Any]:
    if lib == "valkey":
        import valkey.asyncio.cluster
        import valkey.cluster

        return valkey.cluster.ValkeyCluster, valkey.asyncio.cluster.ValkeyCluster
    return redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster


def _lib_client(cluster: Cluster, lib: str, asyncio: bool = False) -> Any:
    """A cluster client of the library ``lib`` (sync, or ``asyncio``)."""
    host, port = cluster.startup[0]
    return _classes(lib)[asyncio](host=host, port=port)


def _sync_waiter(
    cluster: Cluster, name: str, history: History, lib: str = "redis"
) -> threading.Thread:
    def run() -> None:
        client = _lib_client(cluster, lib)
        try:
            lease = Lock(client, name).acquire(timeout=LEASE + 10)
            start = time.monotonic()
            time.sleep(HOLD)
            history.held(start, time.monotonic(), lease.fence, "sync waiter")
            lease.release()
        except BaseException as exc:
            history.errors.append(exc)
        finally:
            client.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _async_waiter(
    cluster: Cluster, name: str, renewed: str, ttl: float, history: History, lib: str = "redis"
) -> threading.Thread:
    """An asyncio waiter on ``name`` that meanwhile holds ``renewed`` (watchdog)."""

    async def main() -> None:
        client = _lib_client(cluster, lib, asyncio=True)
        try:
            lost: list[object] = []
            kept = await AsyncLock(
                client, renewed, ttl=ttl, auto_renew=True, on_lost=lost.append
            ).acquire()
            lease = await AsyncLock(client, name).acquire(timeout=LEASE + 10)
            start = time.monotonic()
            await asyncio.sleep(HOLD)
            history.held(start, time.monotonic(), lease.fence, "async waiter")
            await lease.release()
            assert not lost, "the asyncio watchdog lost its lease"
            assert kept.valid
            await kept.release()
        except BaseException as exc:
            history.errors.append(exc)
        finally:
            await client.aclose()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    return thread


def _role(node: ServerProcess) -> list[Any]:
    return list(_ask(node, "ROLE"))


def _replica_of(cluster: Cluster, master: ServerProcess) -> ServerProcess:
    """The live replica of ``master``."""
    return next(
        n
        for n in cluster.live()
        if n is not master and _role(n)[0] == "slave" and int(_role(n)[2]) == master.port
    )


def _other_master(cluster: Cluster, master: ServerProcess) -> ServerProcess:
    return next(n for n in cluster.live() if n is not master and _role(n)[0] == "master")


def _release_wakes_both(
    rc: redis.cluster.RedisCluster,
    holder: Lease,
    history: History,
    waiters: list[threading.Thread],
) -> None:
    released = time.monotonic()
    holder.release()
    history.held(0.0, released, holder.fence, "holder")
    for thread in waiters:
        thread.join(PROMPT + HOLD * len(waiters) - (time.monotonic() - released))
        assert not thread.is_alive(), "a waiter was not woken by the release on the new owner"
    history.check()
    assert len(history.holds) == 3


@pytest.mark.parametrize("lib", LIBRARIES)
def test_a_slot_migration_while_waiters_wait(
    cluster: Cluster, rc: redis.cluster.RedisCluster, lib: str
) -> None:
    """The slot of a held lock moves to another master in three steps while a
    sync and an asyncio waiter wait and two leases of the slot are renewed
    (all of redis-py's cluster clients, or all of valkey-py's)."""
    name, renewed, renewed_async = _same_slot(rc, f"moving-{lib}", 3)
    slot = rc.keyslot(name)
    history = History()
    lost: list[object] = []
    client = _lib_client(cluster, lib)
    holder = Lock(client, name, ttl=LEASE).acquire()
    assert holder is not None
    kept = Lock(client, renewed, ttl=RENEWED_TTL, auto_renew=True, on_lost=lost.append).acquire()
    source = cluster.owner(slot)
    waiters = [
        _sync_waiter(cluster, name, history, lib),
        _async_waiter(cluster, name, renewed_async, RENEWED_TTL, history, lib),
    ]
    _until(lambda: _subscribed(source, name) >= 2, 10, "both waiters subscribed")
    target = _other_master(cluster, source)
    cluster.begin_migration(slot, target)
    time.sleep(SPLIT / 2)
    assert cluster.move_keys(slot, source, target) >= 4
    time.sleep(SPLIT / 2)
    cluster.end_migration(slot, source, target)
    _until(lambda: _subscribed(target, name) >= 2, PROMPT, "waiters subscribed on the new owner")
    # renewals answered MOVED by the source, then sent to the new owner: the
    # lease is still there after the time it had left
    _outlives(target, f"tenure:{{{renewed}}}")
    assert not lost and kept.valid
    assert _ask(target, "EXISTS", f"tenure:{{{name}}}") == 1
    _release_wakes_both(rc, holder, history, waiters)
    assert not lost
    kept.release()
    client.close()


def test_a_failover_while_waiters_wait(cluster: Cluster, rc: redis.cluster.RedisCluster) -> None:
    """The master of a held lock's slot is killed and its replica promoted while
    a sync and an asyncio waiter wait and two leases of the slot are renewed.
    The leases were on the replica before the kill (the test waits for it), so
    they were not lost: the renewed ones renew on the new master and the lost
    signal never fires."""
    name, renewed, renewed_async = _same_slot(rc, "failing", 3)
    slot = rc.keyslot(name)
    history = History()
    lost: list[object] = []
    holder = Lock(rc, name, ttl=LEASE).acquire()
    assert holder is not None
    kept = Lock(rc, renewed, ttl=FAILOVER_TTL, auto_renew=True, on_lost=lost.append).acquire()
    master = cluster.owner(slot)
    waiters = [
        _sync_waiter(cluster, name, history),
        _async_waiter(cluster, name, renewed_async, FAILOVER_TTL, history),
    ]
    _until(lambda: _subscribed(master, name) >= 2, 10, "both waiters subscribed")
    replica = _replica_of(cluster, master)
    for key in (f"tenure:{{{name}}}", f"tenure:{{{renewed}}}", f"tenure:{{{renewed_async}}}"):
        _until(partial(_on_replica, replica, key), 5, f"{key} on the replica")
    cluster.kill(master)
    try:
        promoted = cluster.wait_failover(slot, master)
        assert promoted is replica
        _until(lambda: _subscribed(promoted, name) >= 2, 10, "waiters subscribed on the new master")
        # the watchdog renews on the new master (every third of the ttl)
        _renewed_on(promoted, f"tenure:{{{renewed}}}", FAILOVER_TTL / 2)
        assert not lost and kept.valid
        _release_wakes_both(rc, holder, history, waiters)
        assert not lost
        kept.release()
    finally:
        cluster.revive(master)


def test_min_replicas_on_a_cluster(cluster: Cluster, rc: redis.cluster.RedisCluster) -> None:
    """``min_replicas=1``: the lease is on the slot's replica when acquire
    returns (sync and asyncio); with the replica paused, acquire fails and
    holds nothing; after a failover the lease is on the new master."""
    name, other, async_name = _same_slot(rc, "replicated", 3)
    slot = rc.keyslot(name)
    master = cluster.owner(slot)
    replica = _replica_of(cluster, master)
    lease = Lock(rc, name, ttl=LEASE, min_replicas=1).acquire(timeout=5)
    assert _on_replica(replica, f"tenure:{{{name}}}")  # acknowledged: no wait needed

    async def acquire_async() -> None:
        nodes = [redis.asyncio.cluster.ClusterNode(h, p) for h, p in cluster.startup]
        client = redis.asyncio.cluster.RedisCluster(startup_nodes=nodes)
        try:
            got = await AsyncLock(client, async_name, ttl=LEASE, min_replicas=1).acquire(timeout=5)
            assert _on_replica(replica, f"tenure:{{{async_name}}}")
            await got.release()
        finally:
            await client.aclose()

    asyncio.run(acquire_async())

    replica.pause()
    try:
        with pytest.raises(NotReplicatedError):
            Lock(rc, other, ttl=LEASE, min_replicas=1, replica_timeout=0.3).acquire(timeout=5)
    finally:
        replica.resume()
    assert not rc.exists(f"tenure:{{{other}}}")

    cluster.kill(master)
    try:
        assert cluster.wait_failover(slot, master) is replica
        lease.extend(LEASE)  # the lease, token and all, is on the new master
        assert _ask(replica, "PTTL", f"tenure:{{{name}}}") > (LEASE - 2) * 1000
        fence = lease.fence
        lease.release()
        again = Lock(rc, name, ttl=LEASE).acquire(timeout=5)
        assert again.fence > fence
        again.release()
    finally:
        cluster.revive(master)


def test_a_waiter_whose_slot_map_is_stale(cluster: Cluster, rc: redis.cluster.RedisCluster) -> None:
    """A client learned the slot's owner, then the slot moved: its waiters
    (sync and asyncio) start waiting with the old map, and still end up
    subscribed on the new owner and woken by the release there."""
    name = _same_slot(rc, "stale", 1)[0]
    slot = rc.keyslot(name)
    holder = Lock(rc, name, ttl=LEASE).acquire()
    assert holder is not None
    history = History()
    stale = _client(cluster)
    stale.get(f"{{{name}}}:probe")  # its map names the slot's owner now
    aio: list[redis.asyncio.cluster.RedisCluster] = []

    async def learn() -> None:
        nodes = [redis.asyncio.cluster.ClusterNode(h, p) for h, p in cluster.startup]
        aio.append(redis.asyncio.cluster.RedisCluster(startup_nodes=nodes))
        await aio[0].get(f"{{{name}}}:probe")

    loop = asyncio.new_event_loop()
    loop.run_until_complete(learn())
    source = cluster.owner(slot)
    target = _other_master(cluster, source)
    cluster.migrate_slot(slot, target)

    def sync_wait() -> None:
        lease = Lock(stale, name).acquire(timeout=LEASE + 10)
        start = time.monotonic()
        time.sleep(HOLD)
        history.held(start, time.monotonic(), lease.fence, "sync waiter")
        lease.release()

    async def async_wait() -> None:
        lease = await AsyncLock(aio[0], name).acquire(timeout=LEASE + 10)
        start = time.monotonic()
        await asyncio.sleep(HOLD)
        history.held(start, time.monotonic(), lease.fence, "async waiter")
        await lease.release()
        await aio[0].aclose()

    def guarded(run: Callable[[], None]) -> Callable[[], None]:
        def body() -> None:
            try:
                run()
            except BaseException as exc:
                history.errors.append(exc)

        return body

    waiters = [
        threading.Thread(target=guarded(sync_wait), daemon=True),
        threading.Thread(
            target=guarded(lambda: loop.run_until_complete(async_wait())), daemon=True
        ),
    ]
    for thread in waiters:
        thread.start()
    try:
        _until(
            lambda: _subscribed(target, name) >= 2, 10, "both waiters subscribed on the new owner"
        )
        _release_wakes_both(rc, holder, history, waiters)
    finally:
        stale.close()
        if not waiters[1].is_alive():
            loop.close()


#: How long the slot stays split in the test of calls made meanwhile, seconds:
#: longer than redis-py's own retries of ``TRYAGAIN`` (about 0.4 s).
LONG_SPLIT = 1.0


def _split_for(
    cluster: Cluster, slot: int, target: ServerProcess, seconds: float
) -> threading.Thread:
    """Split ``slot`` (``MIGRATING`` / ``IMPORTING``) now, and finish moving it
    to ``target`` ``seconds`` later, in a thread."""
    source = cluster.begin_migration(slot, target)

    def finish() -> None:
        time.sleep(seconds)
        cluster.move_keys(slot, source, target)
        cluster.end_migration(slot, source, target)

    thread = threading.Thread(target=finish, daemon=True)
    thread.start()
    return thread


def test_calls_made_while_a_slot_is_split_wait_for_the_move(
    cluster: Cluster, rc: redis.cluster.RedisCluster
) -> None:
    """While a slot is split mid-migration every script of it is answered
    ``TRYAGAIN``; a release, an acquire (sync and asyncio) made then waits until
    the slot has moved (up to ``_clients.SPLIT_PATIENCE``) instead of raising
    redis-py's ``ClusterError('TTL exhausted.')``."""
    (name,) = _same_slot(rc, "split", 1)
    slot = rc.keyslot(name)
    lease = Lock(rc, name, ttl=10).acquire()
    first = lease.fence
    source = cluster.owner(slot)
    target = _other_master(cluster, source)
    mover = _split_for(cluster, slot, target, LONG_SPLIT)
    start = time.monotonic()
    lease.release()
    assert time.monotonic() - start >= LONG_SPLIT / 2, "the release did not meet the split"
    mover.join(10)
    assert _ask(target, "EXISTS", f"tenure:{{{name}}}") == 0

    mover = _split_for(cluster, slot, source, LONG_SPLIT)
    again = Lock(rc, name, ttl=10).acquire(timeout=0)
    assert again is not None and again.fence > first
    mover.join(10)
    again.release()

    async def asynchronously() -> int:
        client = _lib_client(cluster, "redis", asyncio=True)
        try:
            lease = await AsyncLock(client, name, ttl=10).acquire(timeout=0)
            assert lease is not None
            await lease.release()
            return lease.fence
        finally:
            await client.aclose()

    mover = _split_for(cluster, slot, target, LONG_SPLIT)
    assert asyncio.run(asynchronously()) > again.fence
    mover.join(10)


#: The ride-out test (waiters whose timers fire while their slot has no
#: master), seconds from the unrenewed lease's acquire: its ttl, when the
#: other locks are released to a stalled waiter (whose claim window then ends
#: 1 s later, while the slot has no master), when the master is killed (the
#: promotion takes the node timeout, 2 s, plus the replica's election delay),
#: and the short waiters' deadline (after the lease ends, before any promotion).
RIDE_TTL = 3.7
RIDE_RELEASE = 2.2
RIDE_KILL = 2.5
RIDE_SHORT = 4.5
#: The other waiters' timeout, seconds: far beyond the failover.
RIDE_TIMEOUT = 20.0
#: How long the first of the unrenewed lock's waiters holds it after the
#: promotion, seconds: the other waits meanwhile, on its hub (subscribed again
#: on the new master) and the holder's PTTL (30 s).
RIDE_HOLD = 1.5


def _ride_client(cluster: Cluster, asyncio: bool, patient: bool) -> Any:
    """A redis-py cluster client, with its default retries (3), or ``patient``:
    60 retries with an exponential backoff, as one configures to ride out a
    failover, which the client does not wait for: it refreshes its slot map
    between its retries, and they run out within a few seconds (sometimes
    after this test's promotion, so the other waiters have the default)."""
    host, port = cluster.startup[0]
    if not patient:
        return _classes("redis")[asyncio](host=host, port=port)
    retry = Retry(ExponentialBackoff(cap=0.5, base=0.05), 60)
    return _classes("redis")[asyncio](host=host, port=port, retry=retry)


class _Stalled:
    """A waiter queued first on ``name`` that hears its hand-off and never
    claims it (a stalled process whose wake connection is open): the release
    hands it the lock for its claim window (1 s) and tells the next waiter to
    check again when the window ends."""

    TOKEN = "stalled-token"

    def __init__(self, master: ServerProcess, name: str) -> None:
        self.client = redis.Redis(port=master.port, decode_responses=True)
        self.pubsub = self.client.pubsub()
        self.pubsub.ssubscribe(f"tenure:{{{name}}}:wake:stalled")
        assert self.pubsub.get_sharded_message(timeout=5)["type"] == "ssubscribe"
        self.client.zadd(f"tenure:{{{name}}}:waiters", {f"stalled|1000|{self.TOKEN}": 0})

    def handed(self) -> int:
        """The fence of the hand-off it heard."""
        message = self.pubsub.get_sharded_message(ignore_subscribe_messages=True, timeout=5)
        assert message is not None, "the release did not hand the lock to the stalled waiter"
        fence, token = message["data"].split()
        assert token == self.TOKEN
        return int(fence)

    def close(self) -> None:
        self.pubsub.close()
        self.client.close()


@dataclass
class _Ride:
    """One waiter of the ride-out test: its lock, its deadline (on the
    monotonic clock) and what its acquire gave (when, and the lease or ``None``)."""

    name: str
    until: float
    history: History
    who: str
    hold: float = HOLD
    patient: bool = False
    done: tuple[float, bool] | None = None
    error: str = ""

    def sync(self, cluster: Cluster) -> None:
        client = _ride_client(cluster, False, self.patient)
        try:
            lease = Lock(client, self.name).acquire(timeout=self.until - time.monotonic())
            self.done = (time.monotonic(), lease is not None)
            if lease is not None:
                start = time.monotonic()
                time.sleep(self.hold)
                self.history.held(start, time.monotonic(), lease.fence, self.who)
                lease.release()
        except BaseException as exc:
            self.history.errors.append(exc)
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            client.close()

    async def aio(self, cluster: Cluster) -> None:
        client = _ride_client(cluster, True, self.patient)
        try:
            waiting = AsyncLock(client, self.name)
            lease = await waiting.acquire(timeout=self.until - time.monotonic())
            self.done = (time.monotonic(), lease is not None)
            if lease is not None:
                start = time.monotonic()
                await asyncio.sleep(self.hold)
                self.history.held(start, time.monotonic(), lease.fence, self.who)
                await lease.release()
        except BaseException as exc:
            self.history.errors.append(exc)
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            await client.aclose()

    def start(self, cluster: Cluster, aio: bool) -> threading.Thread:
        target = partial(asyncio.run, self.aio(cluster)) if aio else partial(self.sync, cluster)
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        return thread


def _queued(node: ServerProcess, name: str) -> int:
    return int(_ask(node, "ZCARD", f"tenure:{{{name}}}:waiters"))


def _queued_two(node: ServerProcess, name: str) -> bool:
    """The stalled waiter and one more are queued for ``name``."""
    return _queued(node, name) == 2


def _replica_has(node: ServerProcess, key: str, value: str | None = None) -> bool:
    with redis.Redis(port=node.port, socket_timeout=2, decode_responses=True) as c:
        c.execute_command("READONLY")
        held = c.get(key)
    return held is not None and (value is None or held == value)


def test_waiters_ride_out_a_failover(cluster: Cluster, rc: redis.cluster.RedisCluster) -> None:
    """The master of a slot dies while waiters of three of its locks wait,
    sync and asyncio, each with its own cluster client (one with 60 retries):

    - (a) on ``a``, the holder's lease (not renewed) ends while the slot has
      no master: the waiters' timers fire and their attempts meet the dead
      master;
    - (b) on ``b_sync`` and ``b_async``, the holder released the lock to a
      stalled waiter just before the kill, and told the waiter behind it to
      check again when the claim window ends, while the slot has no master.

    Each waiter keeps trying within its timeout and gets the lock from the
    promoted replica (holders never overlap, fences increase); the short
    waiters of ``a``, whose deadline comes before the promotion, get ``None``
    at their deadline, not the client's ``ConnectionError``."""
    a, b_sync, b_async = _same_slot(rc, "riding", 3)
    slot = rc.keyslot(a)
    master = cluster.owner(slot)
    replica = _replica_of(cluster, master)
    histories = {name: History() for name in (a, b_sync, b_async)}
    rides: list[_Ride] = []
    threads: list[threading.Thread] = []
    far = time.monotonic() + RIDE_TIMEOUT
    stalled = {name: _Stalled(master, name) for name in (b_sync, b_async)}
    killed = 0.0
    try:
        holders = {name: Lock(rc, name, ttl=LEASE).acquire() for name in (b_sync, b_async)}
        for name, aio in ((b_sync, False), (b_async, True)):
            who = f"b {'async' if aio else 'sync'}"
            rides.append(_Ride(name, far, histories[name], who, patient=not aio))
            threads.append(rides[-1].start(cluster, aio))
            _until(partial(_queued_two, master, name), 10, f"the waiter of {name} queued")

        taken = time.monotonic()
        holder = Lock(rc, a, ttl=RIDE_TTL).acquire()
        histories[a].held(taken, taken + RIDE_TTL, holder.fence, "a's holder")
        for who, until, aio in (
            ("a sync", far, False),
            ("a async", far, True),
            ("a sync short", taken + RIDE_SHORT, False),
            ("a async short", taken + RIDE_SHORT, True),
        ):
            rides.append(_Ride(a, until, histories[a], who, RIDE_HOLD))
            threads.append(rides[-1].start(cluster, aio))
        _until(lambda: _queued(master, a) == 4, RIDE_RELEASE, "a's four waiters queued")

        time.sleep(max(0.0, taken + RIDE_RELEASE - time.monotonic()))
        for name, lease in holders.items():
            released = time.monotonic()
            lease.release()
            histories[name].held(0.0, released, lease.fence, f"{name} holder")
            fence = stalled[name].handed()
            histories[name].held(released, time.monotonic() + 1.0, fence, f"{name} stalled")
        for name in (b_sync, b_async):
            key = f"tenure:{{{name}}}"
            _until(partial(_replica_has, replica, key, _Stalled.TOKEN), 1, f"{key} replicated")
        _until(partial(_replica_has, replica, f"tenure:{{{a}}}"), 1, "a's lease replicated")
        assert time.monotonic() < taken + RIDE_KILL, "the set-up took too long"
        time.sleep(taken + RIDE_KILL - time.monotonic())
        cluster.kill(master)
        killed = time.monotonic()
        assert cluster.wait_failover(slot, master) is replica
        promoted = time.monotonic()
        assert promoted > taken + RIDE_SHORT, "promoted before the short waiters' deadline"
        failed = [(ride.who, ride.error) for ride in rides if ride.error]
        assert not failed, failed  # (the client's ConnectionError, when not ridden out)
        # the hubs subscribe again on the new master (nothing else subscribes there)
        _until(lambda: _subscribed(replica, a) >= 1, PROMPT, "a's channels on the new master")
        for thread in threads:
            thread.join(far - time.monotonic() + 5)
            assert not thread.is_alive(), "a waiter is still waiting"
        for history in histories.values():
            history.check()
        # a's second waiter is woken by the first one's release (on its hub)
        assert len(histories[a].holds) == 3, histories[a].holds
        (_, first, _, _), (second, _, _, _) = sorted(histories[a].holds)[1:]
        assert second - first < PROMPT, "a's second waiter was not woken by the release"
        for ride in rides:
            assert ride.done is not None
            returned, got = ride.done
            if ride.until == far:
                assert got, f"{ride.who} did not get the lock"
                assert returned > killed
            else:
                assert not got, f"{ride.who} got the lock before the promotion"
                assert returned >= ride.until, f"{ride.who} returned before its deadline"
    finally:
        for s in stalled.values():
            s.close()
        if killed:
            cluster.revive(master)
