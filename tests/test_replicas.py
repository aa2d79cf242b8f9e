"""min_replicas= and fences across a failover, with a real replica."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio

from tenure import (
    AsyncLock,
    InvalidArgument,
    Lock,
    MultiLock,
    NotReplicatedError,
    RLock,
    Semaphore,
    UnsupportedServer,
)
from tenure._label import default_suffix
from tenure._server import ServerProcess

MakeServer = Callable[..., ServerProcess]


def _pair(make_server: MakeServer, *replica_args: str) -> tuple[ServerProcess, ServerProcess]:
    """A master and one replica of it, linked, and acknowledging writes."""
    master = make_server(args=("--repl-diskless-sync-delay", "0"))  # link up at once
    replica = make_server(args=("--replicaof", "127.0.0.1", str(master.port), *replica_args))
    client = redis.Redis.from_url(master.url)
    deadline = time.monotonic() + 15
    while True:  # a write on this connection, acknowledged by the replica
        client.set("tenure-test:linked", "1")
        if client.execute_command("WAIT", "1", "100") == 1:  # type: ignore[no-untyped-call]
            break
        assert time.monotonic() < deadline, "the replica did not link up"
    client.delete("tenure-test:linked")
    client.close()
    return master, replica


def test_acquire_returns_once_the_replica_has_the_lease(make_server: MakeServer) -> None:
    master, replica = _pair(make_server)
    client = redis.Redis.from_url(master.url)
    on_replica = redis.Redis.from_url(replica.url)
    lock = Lock(client, "rep", ttl=30, min_replicas=1)
    for _ in range(5):
        lease = lock.acquire()
        assert lease is not None
        # acknowledged: the replica has this lease and its fence, at once
        assert on_replica.get("tenure:{rep}") == lease.owner.encode()
        assert int(on_replica.get("tenure:{rep}:fence") or 0) == lease.fence
        lease.release()
    rlock = RLock(client, "rep", ttl=30, min_replicas=1)
    with rlock as held:
        assert on_replica.hget("tenure:{rep}:rlock", held.owner + default_suffix()) == b"1"
    semaphore = Semaphore(client, "rep", 2, ttl=30, min_replicas=1)
    with semaphore as permit:
        assert on_replica.zscore("tenure:{rep}:semaphore", permit.owner + "#1") is not None


def test_paused_replica_fails_the_acquire_and_frees_the_lock(make_server: MakeServer) -> None:
    master, replica = _pair(make_server)
    client = redis.Redis.from_url(master.url)
    lock = Lock(client, "paused", ttl=30, min_replicas=1, replica_timeout=0.3)
    replica.pause()
    try:
        started = time.monotonic()
        with pytest.raises(NotReplicatedError, match="0 of 1 replicas") as info:
            lock.acquire()
        took = time.monotonic() - started
    finally:
        replica.resume()
    assert info.value.wanted == 1 and info.value.acknowledged == 0
    assert 0.3 <= took < 2.0
    assert not lock.locked(), "the unacknowledged lease was not released"
    back = Lock(client, "paused", ttl=30, min_replicas=1, replica_timeout=5)
    assert back.acquire(timeout=5) is not None  # the replica is back


def test_more_replicas_than_exist_fail(make_server: MakeServer) -> None:
    master, _ = _pair(make_server)
    client = redis.Redis.from_url(master.url)
    with pytest.raises(NotReplicatedError, match="1 of 2"):
        Lock(client, "two", min_replicas=2, replica_timeout=0.5).acquire()
    assert not Lock(client, "two").locked()


def test_replica_fsync_waits_for_the_replicas_append_only_file(make_server: MakeServer) -> None:
    master, _ = _pair(make_server, "--appendonly", "yes", "--appendfsync", "always")
    client = redis.Redis.from_url(master.url)
    lock = Lock(client, "aof", ttl=30, min_replicas=1, replica_fsync=True, replica_timeout=2)
    info = client.info("server")
    version = tuple(int(p) for p in str(info["redis_version"]).split(".")[:2])
    if "valkey_version" not in info and version < (7, 2):
        with pytest.raises(UnsupportedServer, match="WAITAOF"):
            lock.acquire()
        assert not lock.locked()
        return
    lease = lock.acquire()
    assert lease is not None
    lease.release()


def test_async_min_replicas(make_server: MakeServer) -> None:
    master, replica = _pair(make_server)

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(master.url)
        lock = AsyncLock(client, "arep", ttl=30, min_replicas=1)
        async with lock as lease:
            on_replica = redis.asyncio.Redis.from_url(replica.url)
            assert await on_replica.get("tenure:{arep}") == lease.owner.encode()
            await on_replica.aclose()
        await client.aclose()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"min_replicas": -1}, "min_replicas"),
        ({"min_replicas": 1.5}, "min_replicas"),
        ({"min_replicas": True}, "min_replicas"),
        ({"min_replicas": 1, "replica_timeout": 0}, "replica_timeout"),
        ({"min_replicas": 1, "replica_fsync": "yes"}, "replica_fsync"),
    ],
)
def test_bad_replica_arguments(r: redis.Redis, kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        Lock(r, "bad", **kwargs)  # type: ignore[arg-type]


def test_fences_increase_across_a_failover(make_server: MakeServer) -> None:
    """The replica is promoted after the master dies, possibly before it got the
    last writes: fences from the new master are still larger than every fence
    the old one granted (they are seeded from server time)."""
    master, replica = _pair(make_server)
    old = redis.Redis.from_url(master.url)
    lock = Lock(old, "failover", ttl=30)
    fences = []
    for _ in range(20):
        lease = lock.acquire()
        assert lease is not None
        fences.append(lease.fence)
        lease.release()
    master.stop()  # no time to replicate the last writes, perhaps
    promoted = redis.Redis.from_url(replica.url)
    promoted.replicaof("NO", "ONE")
    lease = Lock(promoted, "failover", ttl=30).acquire(timeout=5)
    assert lease is not None and lease.fence > max(fences)
    assert fences == sorted(set(fences))


def test_a_lease_missing_where_the_wait_runs_is_not_replicated() -> None:
    """The rewrite sent before the WAIT finds no lease on the server it reached
    (not the one that granted it: the grant's connection failed after a
    failover, and the wait went to the new master). The acquire raises its
    documented NotReplicatedError (0 acknowledged, saying why), not
    NotOwnedError."""
    from tenure._plans.replicas import ReplicaPolicy, replicate
    from tenure._protocol import Eval, Pipeline, Status
    from tenure._scripts import ScriptSpec

    write = Eval(ScriptSpec("lock_extend", b"", "0" * 40), ("tenure:{gone}",), ())
    plan = replicate("gone", 7, write, ReplicaPolicy(1, 0.5, False))
    step = next(plan)
    assert isinstance(step, Pipeline) and step.steps[0] == write
    with pytest.raises(NotReplicatedError, match="not on the server") as info:
        plan.send([(Status.NOT_OWNED, None), 1])
    assert info.value.wanted == 1 and info.value.acknowledged == 0


def _senders(monitor: Any, key: str, until: str) -> list[tuple[str, str]]:
    """The (client port, command name) of each ``EVALSHA`` on ``key`` and each
    ``WAIT`` that ``monitor`` saw, up to the command ``ECHO until`` (a
    script's own commands, marked "lua", left out)."""
    seen: list[tuple[str, str]] = []
    while True:
        entry = monitor.next_command()
        command = str(entry["command"])
        if entry["client_address"] == "lua":
            continue
        name = command.split(" ", 1)[0].upper()
        if name == "WAIT" or (name == "EVALSHA" and key in command):
            seen.append((str(entry["client_port"]), name))
        if command == f"ECHO {until}":
            return seen


def test_the_grant_its_wait_and_its_give_back_share_one_connection(
    make_server: MakeServer,
) -> None:
    """WAIT counts the replicas that acknowledged the writes of *its own
    connection*; the grant, the WAIT and (when too few acknowledge) the
    give-back go on one connection, so that they reach one server even if the
    client's pool has meanwhile learned of another master (see test_sentinel's
    split-brain test). Seen by MONITOR: every script call on the lock and every
    WAIT comes from one client port: a Lock (sync and asyncio), the parts of a
    MultiLock taken together, and a Lock whose replica is paused."""
    master, replica = _pair(make_server)
    watcher = redis.Redis.from_url(master.url, socket_timeout=5, decode_responses=True)
    client = redis.Redis.from_url(master.url)

    def sync_acquires() -> None:
        lease = Lock(client, "one", ttl=30, auto_renew=False, min_replicas=1).acquire()
        assert lease is not None
        client.execute_command("ECHO", "acquired")  # type: ignore[no-untyped-call]
        lease.release()
        multi = MultiLock(
            [Lock(client, "one", auto_renew=False, min_replicas=1), Lock(client, "two")]
        ).acquire(blocking=False)
        assert multi is not None
        client.execute_command("ECHO", "multi")  # type: ignore[no-untyped-call]
        multi.release()

    async def async_acquires() -> None:
        aclient = redis.asyncio.Redis.from_url(master.url)
        lease = await AsyncLock(aclient, "one", ttl=30, auto_renew=False, min_replicas=1).acquire()
        assert lease is not None
        await aclient.execute_command("ECHO", "acquired")  # type: ignore[no-untyped-call]
        await lease.release()
        await aclient.aclose()

    sync_acquires()  # (the scripts loaded: no NOSCRIPT round trips below)
    for acquires in (sync_acquires, lambda: asyncio.run(async_acquires())):
        with watcher.monitor() as monitor:  # type: ignore[no-untyped-call]
            acquires()
            seen = _senders(monitor, "tenure:{one}", "acquired")
            assert [name for _, name in seen] == ["EVALSHA", "EVALSHA", "WAIT"], seen
            assert len({port for port, _ in seen}) == 1, f"sent on several connections: {seen}"
            if acquires is sync_acquires:
                seen = _senders(monitor, "tenure:{one}", "multi")[1:]  # (the release before)
                assert [name for _, name in seen] == ["EVALSHA", "EVALSHA", "WAIT"], seen
                assert len({port for port, _ in seen}) == 1, f"several connections: {seen}"
    # too few acknowledge: the give-back goes on the grant's connection too
    replica.pause()
    try:
        with watcher.monitor() as monitor:  # type: ignore[no-untyped-call]
            with pytest.raises(NotReplicatedError):
                Lock(client, "one", ttl=30, min_replicas=1, replica_timeout=0.2).acquire()
            client.execute_command("ECHO", "failed")  # type: ignore[no-untyped-call]
            seen = _senders(monitor, "tenure:{one}", "failed")
    finally:
        replica.resume()
    assert [name for _, name in seen] == ["EVALSHA", "EVALSHA", "WAIT", "EVALSHA"], seen
    assert len({port for port, _ in seen}) == 1, f"sent on several connections: {seen}"
    assert not Lock(client, "one").locked()
