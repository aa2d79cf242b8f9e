# mypy: disable-error-code="no-untyped-call,union-attr"
# (redis-py's cluster and sentinel classes are untyped)
"""Elections on a Redis Cluster (every key in the name's slot, the feed on that
master's sharded pub/sub, both client libraries) and through Sentinel (a
leadership taken with ``min_replicas=1`` survives a failover, candidates and
observers follow the new master)."""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.sentinel
from _cluster import Cluster
from _sentinel import SERVICE, SentinelGroup
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry
from test_cluster import REDIS, VALKEY, Lib

from tenure import AsyncElection, Election, ElectionEvent, Leadership, NotReplicatedError

pytestmark = pytest.mark.topology

#: How long a candidate woken by a resignation may take to lead, seconds.
PROMPT = 2.5


def wait_until(check: Any, timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting {what}"
        time.sleep(0.01)


class Watch(threading.Thread):
    """Collect an election's changes in a thread."""

    def __init__(self, client: Any, name: str, quiet: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.events: list[ElectionEvent] = []
        self.iterator = Election(client, name).observe(timeout=quiet)

    def run(self) -> None:
        for event in self.iterator:
            self.events.append(event)

    def until(self, count: int, timeout: float = 15.0) -> list[tuple[str, int]]:
        wait_until(lambda: len(self.events) >= count, timeout, f"for {count} events")
        return [(e.change, e.term) for e in self.events]


def _handover(make: Any, name: str, watch: Watch) -> tuple[Leadership, Leadership, float]:
    """Lead ``name``, proclaim, start ``watch`` (once it saw the leader), let a
    waiting candidate take over at the resignation; return both leaderships
    and how long the takeover took."""
    first = make(name, "first").campaign(timeout=10)
    assert first is not None
    first.proclaim("one")
    watch.start()
    assert watch.until(1) == [("proclaimed", first.term)]
    got: list[tuple[Leadership | None, float]] = []
    candidate = make(name, "second")
    thread = threading.Thread(
        target=lambda: got.append((candidate.campaign(timeout=20), time.monotonic()))
    )
    thread.start()
    wait_until(lambda: candidate.info().waiters >= 1, what="for the candidate to queue")
    resigned = time.monotonic()
    first.resign()
    thread.join(20)
    second, at = got[0]
    assert second is not None
    return first, second, at - resigned


# --- Redis Cluster ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(os.environ.get("TENURE_SERVER") or None) as c:
        yield c


@pytest.fixture(params=[REDIS, VALKEY], ids=lambda lib: lib.name)
def crc(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[Any]:
    lib: Lib = request.param
    client = lib.client(cluster)
    client.flushall(target_nodes=lib.sync.PRIMARIES)
    yield client
    client.close()


def _names(rc: Any, stem: str) -> list[str]:
    by_port: dict[int, str] = {}
    i = 0
    while len(by_port) < 3:
        name = f"{stem}-{i}"
        by_port.setdefault(rc.get_node_from_key(name).port, name)
        i += 1
    return list(by_port.values())


def test_an_election_on_every_master(crc: Any) -> None:
    def make(name: str, label: str) -> Election:
        return Election(crc, name, ttl=10, label=label)

    for name in _names(crc, "elect"):
        watch = Watch(crc, name, quiet=1.0)
        node = redis.Redis(port=crc.get_node_from_key(name).port)
        first, second, took = _handover(make, name, watch)
        assert took < PROMPT and second.term > first.term
        # every key of the election on the master owning the name's slot
        assert node.exists(f"tenure:{{{name}}}:election:record")
        assert node.exists(f"tenure:{{{name}}}:election:log")
        lead = make(name, "x").leader()
        assert lead is not None and (lead.label, lead.term) == ("second", second.term)
        second.resign()
        t1, t2 = first.term, second.term
        assert watch.until(4) == [
            ("proclaimed", t1),
            ("resigned", t1),
            ("elected", t2),
            ("resigned", t2),
        ]
        node.close()
        watch.join(10)  # (ended, before the client closes)


def test_an_async_election_on_a_cluster(cluster: Cluster) -> None:
    async def main() -> None:
        client = REDIS.async_client(cluster)
        seen: list[tuple[str, int]] = []

        async def watch() -> None:
            async for event in AsyncElection(client, "aelect").observe():
                seen.append((event.change, event.term))

        election = AsyncElection(client, "aelect", ttl=10)
        leadership = await election.campaign(timeout=10)
        assert leadership is not None
        watcher = asyncio.create_task(watch())
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:  # where it stands
            await asyncio.sleep(0.01)
        await leadership.proclaim("v")
        assert (await election.leader()).value == b"v"
        await leadership.resign()
        deadline = time.monotonic() + 10
        while len(seen) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        watcher.cancel()
        await client.aclose()
        t = leadership.term
        assert seen == [("elected", t), ("proclaimed", t), ("resigned", t)]

    asyncio.run(main())


# --- Sentinel ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def group() -> Iterator[SentinelGroup]:
    g = SentinelGroup(os.environ.get("TENURE_SERVER"), os.environ.get("TENURE_SENTINEL"))
    yield g
    g.close()


def _client(group: SentinelGroup) -> redis.Redis:
    sentinel = redis.sentinel.Sentinel(group.addresses, socket_timeout=1)
    retry = Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.5), 40)
    client: redis.Redis = sentinel.master_for(SERVICE, socket_timeout=1, retry=retry)
    return client


def test_a_leadership_with_min_replicas_survives_a_failover(group: SentinelGroup) -> None:
    """The master is killed while a leader (min_replicas=1) leads, a candidate
    waits and an observer watches: the replica is promoted with the lease and
    its record, the watchdog renews the lease there, and the resignation
    elects the candidate at once."""
    leading, waiting, watching = _client(group), _client(group), _client(group)
    election = Election(leading, "sentinel", ttl=8, min_replicas=1, replica_timeout=0.3, label="a")
    leadership = election.campaign(10)
    assert leadership is not None
    leadership.proclaim("before")
    watch = Watch(watching, "sentinel")
    watch.start()
    assert watch.until(1) == [("proclaimed", leadership.term)]  # where it stands
    candidate = Election(waiting, "sentinel", ttl=8, label="b")
    got: list[tuple[Leadership | None, float]] = []
    thread = threading.Thread(
        target=lambda: got.append((candidate.campaign(timeout=40), time.monotonic()))
    )
    thread.start()
    wait_until(lambda: candidate.info().waiters >= 1, what="for the candidate to queue")
    old = group.kill_master()
    try:
        group.wait_promoted(old.port)
        time.sleep(1.0)  # a renewal on the new master at least
        assert not leadership.lost.is_set()
        # fenced by its term and made on the new master, which has no replica
        # yet: with min_replicas=1 the proclaim says so
        with pytest.raises(NotReplicatedError):
            leadership.proclaim("after")
        assert Election(watching, "sentinel").leader().value == b"after"
        resigned = time.monotonic()
        leadership.resign()
        thread.join(20)
        second, at = got[0]
        assert second is not None and second.term > leadership.term
        assert at - resigned < PROMPT
        t1, t2 = leadership.term, second.term
        changes = watch.until(4, timeout=20)
        assert changes[:2] == [("proclaimed", t1), ("proclaimed", t1)]
        assert changes[-2:] == [("resigned", t1), ("elected", t2)]
        assert all(a[1] <= b[1] for a, b in itertools.pairwise(changes))
        second.resign()
    finally:
        group.rejoin(old)
        group.wait_healthy()
        watch.join(10)
        for c in (leading, waiting, watching):
            c.close()
