"""Client libraries: valkey-py clients work like redis-py's (sync and asyncio), and
every primitive refuses a client it can't use at construction, before anything
is sent, naming what was passed and what it needs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import redis.exceptions
import redis.sentinel
import valkey
import valkey.asyncio
import valkey.asyncio.cluster
import valkey.asyncio.retry
import valkey.backoff
import valkey.cluster
import valkey.exceptions
import valkey.retry
import valkey.sentinel
from _workers import Hold, check_history

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
    ReadWriteLock,
    RLock,
    Semaphore,
    StaleFenceError,
)
from tenure._server import ServerProcess

#: Long enough that a waiter that was not woken (its fallback timer is the
#: holder's remaining lease) can't pass for one that got the hand-off.
TTL = 10.0
#: How soon after the release a woken waiter must hold the lock (loaded machine).
HANDOFF_WITHIN = 3.0


@pytest.fixture
def vk(r: redis.Redis, server: ServerProcess) -> Iterator[valkey.Valkey]:
    """A valkey-py client on the shared (flushed) server."""
    client = valkey.Valkey.from_url(server.url)
    yield client
    client.close()  # type: ignore[no-untyped-call]


def _elsewhere(call: Callable[[], Any], timeout: float = 10.0) -> Any:
    """``call()``'s result (or exception), called by another thread (another owner)."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout)
    if errors:
        raise errors[0]
    [value] = result
    return value


def _fences(lease: Any) -> tuple[int, ...]:
    fence = lease.fence
    return fence if isinstance(fence, tuple) else (fence,)


# --- valkey-py, sync ----------------------------------------------------------

SYNC_PRIMITIVES: dict[str, Callable[[Any, str], Any]] = {
    "Lock": lambda c, n: Lock(c, n, ttl=TTL),
    "RLock": lambda c, n: RLock(c, n, ttl=TTL),
    "FairLock": lambda c, n: FairLock(c, n, ttl=TTL),
    "ReadWriteLock": lambda c, n: ReadWriteLock(c, n, ttl=TTL).write,
    "Semaphore": lambda c, n: Semaphore(c, n, 1, ttl=TTL),
    "MultiLock": lambda c, n: MultiLock([Lock(c, n + "a", ttl=TTL), RLock(c, n + "b", ttl=TTL)]),
}


def _handoff(holder_lock: Any, waiter_lock: Any) -> None:
    """``holder_lock`` is taken here; a thread waits on ``waiter_lock`` (the same
    lock, maybe through another client); the release hands it over at once."""
    held = holder_lock.acquire(blocking=False)
    assert held
    got: list[float] = []

    def release() -> None:
        got.append(time.monotonic())
        held.release()

    release_soon = threading.Timer(0.3, release)

    def wait() -> tuple[float, Any]:
        release_soon.start()  # the waiter queues behind the holder meanwhile
        lease = waiter_lock.acquire(timeout=TTL - 2)
        at = time.monotonic()
        if lease:
            lease.release()
        return at, lease

    at, lease = _elsewhere(wait, TTL)
    release_soon.join()
    [released_at] = got
    assert not held.valid
    assert lease, "the waiter never got the lock"
    assert released_at <= at < released_at + HANDOFF_WITHIN, f"woken {at - released_at:.2f}s after"
    assert all(a < b for a, b in zip(_fences(held), _fences(lease), strict=True))
    # released by the waiter: free again for anyone
    again = holder_lock.acquire(blocking=False)
    assert again
    again.release()


@pytest.mark.parametrize("kind", list(SYNC_PRIMITIVES))
def test_valkey_sync_blocking_acquire_gets_the_handoff(vk: valkey.Valkey, kind: str) -> None:
    lock = SYNC_PRIMITIVES[kind](vk, f"vk-{kind}")
    _handoff(lock, lock)


def test_valkey_sync_latch_wait(vk: valkey.Valkey) -> None:
    latch = CountDownLatch(vk, "vk-latch")
    assert latch.try_set_count(1)
    assert not latch.wait(timeout=0.2)
    opened: list[tuple[bool, float]] = []
    waiter = threading.Thread(
        target=lambda: opened.append((latch.wait(timeout=TTL), time.monotonic()))
    )
    waiter.start()
    time.sleep(0.3)
    counted_at = time.monotonic()
    assert latch.count_down() == 0
    waiter.join(TTL)
    [(woken, at)] = opened
    assert woken and at - counted_at < HANDOFF_WITHIN


def test_valkey_sync_watchdog_renews_every_primitive(vk: valkey.Valkey) -> None:
    makers: dict[str, Callable[[], Any]] = {
        "Lock": lambda: Lock(vk, "w1", ttl=0.5, auto_renew=True),
        "RLock": lambda: RLock(vk, "w2", ttl=0.5, auto_renew=True),
        "FairLock": lambda: FairLock(vk, "w3", ttl=0.5, auto_renew=True),
        "ReadWriteLock": lambda: ReadWriteLock(vk, "w4", ttl=0.5, auto_renew=True).write,
        "Semaphore": lambda: Semaphore(vk, "w5", 1, ttl=0.5, auto_renew=True),
        "MultiLock": lambda: MultiLock(
            [Lock(vk, "w6", ttl=0.5, auto_renew=True), RLock(vk, "w7", ttl=0.5, auto_renew=True)]
        ),
    }
    locks = {kind: make() for kind, make in makers.items()}
    leases = {kind: lock.acquire(blocking=False) for kind, lock in locks.items()}
    assert all(leases.values())
    vk.script_flush()  # the renewals' pipelines find NOSCRIPT, load the scripts, send again
    time.sleep(1.5)  # three ttls: only renewals keep them
    for kind, lease in leases.items():
        assert lease.valid, f"{kind}'s lease was not renewed"
    # and Redis agrees: another owner finds every one held
    others = _elsewhere(lambda: {k: lock.acquire(blocking=False) for k, lock in locks.items()})
    assert others == dict.fromkeys(locks)
    for lease in leases.values():
        lease.release()
    assert not vk.keys("tenure:{w1}")


def test_valkey_threads_never_overlap_and_fences_increase(vk: valkey.Valkey) -> None:
    lock = Lock(vk, "vk-mutex", ttl=TTL)
    holds: list[Hold] = []
    start = threading.Barrier(4)

    def worker() -> None:
        start.wait()
        for _ in range(15):
            with lock as lease:
                acquired = time.monotonic()
                value = int(cast(Any, vk.get("vk-mutex:counter")) or 0)
                vk.set("vk-mutex:counter", value + 1)
                holds.append((acquired, time.monotonic(), lease.fence))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(holds) == 60
    check_history(holds)
    assert int(cast(Any, vk.get("vk-mutex:counter")) or 0) == 60  # no lost update


def test_valkey_sync_fenced_key(vk: valkey.Valkey) -> None:
    lock, state = Lock(vk, "vk-fenced", ttl=TTL), FencedKey(vk, "vk-fenced:state")
    with lock as first:
        state.set("one", fence=first.fence)
    with lock as second:
        state.set("two", fence=second.fence)
    with pytest.raises(StaleFenceError):
        state.set("late", fence=first.fence)
    assert vk.get("vk-fenced:state") == b"two" and state.seen() == second.fence


def test_valkey_connection_errors_are_valkey_pys_own() -> None:
    with pytest.raises(valkey.exceptions.ConnectionError) as caught:
        Lock(valkey.Valkey(unix_socket_path=DEAD), "n").acquire(blocking=False)
    assert not isinstance(caught.value, redis.exceptions.RedisError)

    async def main() -> None:
        client = valkey.asyncio.Valkey(unix_socket_path=DEAD)
        with pytest.raises(valkey.exceptions.ConnectionError):
            await AsyncLock(client, "n").acquire(blocking=False)

    asyncio.run(main())


@pytest.mark.parametrize("retrying", [True, False], ids=["retrying", "no-retry"])
def test_valkey_waiter_woken_after_its_pubsub_connection_is_killed(
    r: redis.Redis, url: str, retrying: bool
) -> None:
    """valkey-py's PubSub tells the hub of a reconnection (whether valkey-py
    reconnects inside its read, or the hub after a failed read): the waiter
    checks again when the new subscription is confirmed, and finds the lock
    handed to it although the hand-off's message was lost."""
    name = f"vk-kill-{retrying}"
    held = _elsewhere(lambda: Lock(r, name, ttl=TTL).acquire(blocking=False))
    assert held
    retry = {"retry": valkey.retry.Retry(valkey.backoff.ExponentialBackoff(0.2, 0.01), 10)}
    client = valkey.Valkey.from_url(url, **(retry if retrying else {}))
    waiter = Lock(client, name, ttl=TTL)

    def kill_and_release() -> float:
        deadline = time.monotonic() + 5
        while not r.pubsub_channels(f"*{{{name}}}*"):
            assert time.monotonic() < deadline, "the waiter never subscribed"
            time.sleep(0.005)
        time.sleep(0.2)  # the waiter's attempt failed: it waits for a wake-up now
        assert int(r.client_kill_filter(_type="pubsub")) >= 1
        released_at = time.monotonic()
        held.release()  # its message is lost: nobody listens
        return released_at

    got: list[float] = []
    releaser = threading.Thread(target=lambda: got.append(kill_and_release()))
    releaser.start()
    lease = waiter.acquire(timeout=TTL - 2)
    at = time.monotonic()
    releaser.join(5)
    [released_at] = got
    assert lease, "the waiter never got the lock"
    assert at - released_at < HANDOFF_WITHIN, f"woken {at - released_at:.2f}s after"
    lease.release()
    client.close()  # type: ignore[no-untyped-call]


def test_valkey_async_waiter_woken_after_its_pubsub_connection_is_killed(
    r: redis.Redis, url: str
) -> None:
    name = "avk-kill"
    held = Lock(r, name, ttl=TTL).acquire(blocking=False)
    assert held

    async def main() -> None:
        # retrying on ConnectionError: valkey-py reconnects inside the hub's
        # read, and only the hub's PubSub can tell the hub
        retry = valkey.asyncio.retry.Retry(valkey.backoff.ExponentialBackoff(0.2, 0.01), 10)
        client = valkey.asyncio.Valkey.from_url(
            url, retry=retry, retry_on_error=[valkey.exceptions.ConnectionError]
        )
        try:
            waiter = asyncio.create_task(AsyncLock(client, name, ttl=TTL).acquire(timeout=TTL - 2))
            while not r.pubsub_channels(f"*{{{name}}}*"):
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.2)
            assert int(r.client_kill_filter(_type="pubsub")) >= 1
            released_at = time.monotonic()
            held.release()
            lease = await asyncio.wait_for(waiter, TTL)
            at = time.monotonic()
            assert lease, "the waiter never got the lock"
            assert at - released_at < HANDOFF_WITHIN, f"woken {at - released_at:.2f}s after"
            await lease.release()
        finally:
            await client.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("first", ["redis-py", "valkey-py"])
def test_redis_py_and_valkey_py_locks_exclude_each_other(
    r: redis.Redis, vk: valkey.Valkey, first: str
) -> None:
    vk.script_flush()  # the first EVALSHA finds NOSCRIPT, whichever client sends it
    on_redis, on_valkey = Lock(r, "mixed", ttl=TTL), Lock(vk, "mixed", ttl=TTL)
    holder, waiter = (on_redis, on_valkey) if first == "redis-py" else (on_valkey, on_redis)
    held = holder.acquire(blocking=False)
    assert held
    assert _elsewhere(lambda: waiter.acquire(blocking=False)) is None
    held.release()
    _handoff(holder, waiter)


# --- valkey-py, asyncio -------------------------------------------------------

ASYNC_PRIMITIVES: dict[str, Callable[[Any, str], Any]] = {
    "Lock": lambda c, n: AsyncLock(c, n, ttl=TTL),
    "RLock": lambda c, n: AsyncRLock(c, n, ttl=TTL),
    "FairLock": lambda c, n: AsyncFairLock(c, n, ttl=TTL),
    "ReadWriteLock": lambda c, n: AsyncReadWriteLock(c, n, ttl=TTL).write,
    "Semaphore": lambda c, n: AsyncSemaphore(c, n, 1, ttl=TTL),
    "MultiLock": lambda c, n: AsyncMultiLock(
        [AsyncLock(c, n + "a", ttl=TTL), AsyncRLock(c, n + "b", ttl=TTL)]
    ),
}


async def _async_handoff(holder_lock: Any, waiter_lock: Any) -> None:
    held = await holder_lock.acquire(blocking=False)
    assert held

    async def wait() -> tuple[float, Any]:
        lease = await waiter_lock.acquire(timeout=TTL - 2)
        at = time.monotonic()
        if lease:
            await lease.release()
        return at, lease

    waiter = asyncio.create_task(wait())
    await asyncio.sleep(0.3)
    assert not waiter.done() and held.valid
    released_at = time.monotonic()
    await held.release()
    at, lease = await asyncio.wait_for(waiter, TTL)
    assert not held.valid
    assert lease, "the waiter never got the lock"
    assert released_at <= at < released_at + HANDOFF_WITHIN, f"woken {at - released_at:.2f}s after"
    assert all(a < b for a, b in zip(_fences(held), _fences(lease), strict=True))
    again = await holder_lock.acquire(blocking=False)
    assert again
    await again.release()


@pytest.mark.parametrize("kind", list(ASYNC_PRIMITIVES))
def test_valkey_async_blocking_acquire_gets_the_handoff(url: str, kind: str) -> None:
    async def main() -> None:
        client = valkey.asyncio.Valkey.from_url(url)
        try:
            lock = ASYNC_PRIMITIVES[kind](client, f"avk-{kind}")
            await _async_handoff(lock, lock)
        finally:
            await client.aclose()

    asyncio.run(main())


def test_valkey_async_latch_wait_and_watchdog(url: str) -> None:
    async def main() -> None:
        client = valkey.asyncio.Valkey.from_url(url)
        try:
            latch = AsyncCountDownLatch(client, "avk-latch")
            assert await latch.try_set_count(1)
            waiter = asyncio.create_task(latch.wait(timeout=TTL))
            await asyncio.sleep(0.3)
            counted_at = time.monotonic()
            assert await latch.count_down() == 0
            assert await asyncio.wait_for(waiter, TTL)
            assert time.monotonic() - counted_at < HANDOFF_WITHIN

            locks: dict[str, Any] = {
                "Lock": AsyncLock(client, "aw1", ttl=0.5, auto_renew=True),
                "RLock": AsyncRLock(client, "aw2", ttl=0.5, auto_renew=True),
                "FairLock": AsyncFairLock(client, "aw3", ttl=0.5, auto_renew=True),
                "ReadWriteLock": AsyncReadWriteLock(client, "aw4", ttl=0.5, auto_renew=True).write,
                "Semaphore": AsyncSemaphore(client, "aw5", 1, ttl=0.5, auto_renew=True),
                "MultiLock": AsyncMultiLock(
                    [
                        AsyncLock(client, "aw6", ttl=0.5, auto_renew=True),
                        AsyncRLock(client, "aw7", ttl=0.5, auto_renew=True),
                    ]
                ),
            }
            leases = {kind: await lock.acquire(blocking=False) for kind, lock in locks.items()}
            assert all(leases.values())
            await client.script_flush()  # the renewals find NOSCRIPT and load the scripts
            await asyncio.sleep(1.5)  # three ttls: only renewals keep them
            for kind, lease in leases.items():
                assert lease.valid, f"{kind}'s lease was not renewed"
            for lease in leases.values():
                await lease.release()
            assert not await client.exists("tenure:{aw1}")
        finally:
            await client.aclose()

    asyncio.run(main())


def test_async_redis_py_and_valkey_py_locks_exclude_each_other(url: str) -> None:
    async def main() -> None:
        rc, vc = redis.asyncio.Redis.from_url(url), valkey.asyncio.Valkey.from_url(url)
        try:
            await vc.script_flush()
            on_redis, on_valkey = AsyncLock(rc, "amixed", ttl=TTL), AsyncLock(vc, "amixed", ttl=TTL)
            held = await on_valkey.acquire(blocking=False)
            # another task (another owner) finds it held
            assert held and await asyncio.create_task(on_redis.acquire(blocking=False)) is None
            await held.release()
            await _async_handoff(on_valkey, on_redis)
            await _async_handoff(on_redis, on_valkey)
        finally:
            await rc.aclose()
            await vc.aclose()

    asyncio.run(main())


# --- clients refused at construction -----------------------------------------

#: A unix socket nobody listens on: a client on it fails on its first command,
#: so a refusal that comes back as InvalidArgument proves nothing was sent.
DEAD = "/nonexistent/tenure-test.sock"


def _sync_classes() -> dict[str, Callable[[Any], object]]:
    return {
        "Lock": lambda c: Lock(c, "n"),
        "FairLock": lambda c: FairLock(c, "n"),
        "RLock": lambda c: RLock(c, "n"),
        "ReadWriteLock": lambda c: ReadWriteLock(c, "n"),
        "Semaphore": lambda c: Semaphore(c, "n", 2),
        "CountDownLatch": lambda c: CountDownLatch(c, "n"),
        "FencedKey": lambda c: FencedKey(c, "k"),
        "MultiLock": lambda c: MultiLock([Lock(c, "n")]),
    }


def _async_classes() -> dict[str, Callable[[Any], object]]:
    return {
        "AsyncLock": lambda c: AsyncLock(c, "n"),
        "AsyncFairLock": lambda c: AsyncFairLock(c, "n"),
        "AsyncRLock": lambda c: AsyncRLock(c, "n"),
        "AsyncReadWriteLock": lambda c: AsyncReadWriteLock(c, "n"),
        "AsyncSemaphore": lambda c: AsyncSemaphore(c, "n", 2),
        "AsyncCountDownLatch": lambda c: AsyncCountDownLatch(c, "n"),
        "AsyncFencedKey": lambda c: AsyncFencedKey(c, "k"),
        "AsyncMultiLock": lambda c: AsyncMultiLock([AsyncLock(c, "n")]),
    }


def _part(kind: str) -> str:
    """The class whose constructor refuses the client (a MultiLock's part)."""
    return kind.replace("MultiLock", "Lock")


def _twin(kind: str) -> str:
    return kind.removeprefix("Async") if kind.startswith("Async") else "Async" + kind


# (id, the wrong client, what the message must also say); "{twin}" is the
# class's twin of the other API.
SYNC_WRONG: list[tuple[str, Callable[[], object], list[str]]] = [
    ("url", lambda: "redis://localhost:6379/0", ["'redis://", "redis.Redis.from_url(url)"]),
    ("bytes-url", lambda: b"redis://localhost", ["bytes", "from_url"]),
    ("None", lambda: None, ["not None"]),
    ("int", lambda: 6379, ["int 6379"]),
    ("client-class", lambda: redis.Redis, ["class redis.client.Redis"]),
    (
        "redis-asyncio",
        lambda: redis.asyncio.Redis(unix_socket_path=DEAD),
        ["redis.asyncio.client.Redis", "use {twin}"],
    ),
    (
        "valkey-asyncio",
        lambda: valkey.asyncio.Valkey(unix_socket_path=DEAD),
        ["valkey.asyncio.client.Valkey", "use {twin}"],
    ),
    (
        "redis-pipeline",
        lambda: redis.Redis(unix_socket_path=DEAD).pipeline(),
        ["redis.client.Pipeline", "a pipeline can't hold a lock: pass the client"],
    ),
    (
        "redis-transaction",
        lambda: redis.Redis(unix_socket_path=DEAD).pipeline(transaction=True),
        ["redis.client.Pipeline", "a pipeline can't hold a lock"],
    ),
    (
        "valkey-pipeline",
        lambda: valkey.Valkey(unix_socket_path=DEAD).pipeline(),
        ["valkey.client.Pipeline", "a pipeline can't hold a lock"],
    ),
    (
        "valkey-asyncio-cluster",
        lambda: valkey.asyncio.cluster.ValkeyCluster(host="127.0.0.1", port=1),
        ["valkey.asyncio.cluster.ValkeyCluster", "asyncio cluster client): use {twin}"],
    ),
    (
        "redis-asyncio-cluster",
        lambda: redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=1),
        ["redis.asyncio.cluster.RedisCluster", "asyncio cluster client): use {twin}"],
    ),
    (
        "sentinel",
        lambda: redis.sentinel.Sentinel([("127.0.0.1", 1)]),  # type: ignore[no-untyped-call]
        ["redis.sentinel.Sentinel", "master_for"],
    ),
]

ASYNC_WRONG: list[tuple[str, Callable[[], object], list[str]]] = [
    ("url", lambda: "redis://localhost", ["'redis://", "redis.asyncio.Redis.from_url(url)"]),
    ("None", lambda: None, ["not None"]),
    ("object", lambda: object(), ["the object <object"]),
    (
        "redis-sync",
        lambda: redis.Redis(unix_socket_path=DEAD),
        ["redis.client.Redis", "use {twin}"],
    ),
    (
        "valkey-sync",
        lambda: valkey.Valkey(unix_socket_path=DEAD),
        ["valkey.client.Valkey", "use {twin}"],
    ),
    (
        "redis-asyncio-pipeline",
        lambda: redis.asyncio.Redis(unix_socket_path=DEAD).pipeline(),
        ["redis.asyncio.client.Pipeline", "a pipeline can't hold a lock"],
    ),
    (
        "valkey-asyncio-pipeline",
        lambda: valkey.asyncio.Valkey(unix_socket_path=DEAD).pipeline(),
        ["valkey.asyncio.client.Pipeline", "a pipeline can't hold a lock"],
    ),
    (
        "redis-sync-cluster",
        lambda: redis.cluster.RedisCluster.__new__(redis.cluster.RedisCluster),
        ["redis.cluster.RedisCluster", "synchronous cluster client): use {twin}"],
    ),
    (
        # its constructor would connect to discover the cluster: an unset one
        "valkey-sync-cluster",
        lambda: valkey.cluster.ValkeyCluster.__new__(valkey.cluster.ValkeyCluster),
        ["valkey.cluster.ValkeyCluster", "synchronous cluster client): use {twin}"],
    ),
]


def _pools(client: object) -> list[Any]:
    """The connection pools of a client or pipeline (none for a str, None, ...)."""
    pool = getattr(client, "connection_pool", None)
    return [pool] if pool is not None else []


def _connections_made(pool: Any) -> int:
    if hasattr(pool, "_created_connections"):  # the sync pools
        return int(pool._created_connections)
    return len(pool._available_connections) + len(pool._in_use_connections)


def _refused(make: Callable[[Any], object], kind: str, client: object, says: list[str]) -> None:
    with pytest.raises(InvalidArgument) as caught:
        make(client)
    message = str(caught.value)
    owner = _part(kind)
    expected = (
        "redis.asyncio.Redis or valkey.asyncio.Valkey"
        if owner.startswith("Async")
        else "redis.Redis or valkey.Valkey"
    )
    assert message.startswith(f"{owner} needs a {expected} client") or (
        "Redis Cluster" in message and f"{owner} needs a {expected} client" in message
    ), message
    for part in says:
        assert part.format(twin=_twin(owner)) in message, message
    # nothing was sent: the client made no connection
    assert all(_connections_made(pool) == 0 for pool in _pools(client))


@pytest.mark.parametrize("wrong", [w[0] for w in SYNC_WRONG])
@pytest.mark.parametrize("kind", list(_sync_classes()))
def test_sync_classes_refuse_wrong_clients(kind: str, wrong: str) -> None:
    [(_, make_client, says)] = [w for w in SYNC_WRONG if w[0] == wrong]
    _refused(_sync_classes()[kind], kind, make_client(), says)


@pytest.mark.parametrize("wrong", [w[0] for w in ASYNC_WRONG])
@pytest.mark.parametrize("kind", list(_async_classes()))
def test_async_classes_refuse_wrong_clients(kind: str, wrong: str) -> None:
    [(_, make_client, says)] = [w for w in ASYNC_WRONG if w[0] == wrong]
    _refused(_async_classes()[kind], kind, make_client(), says)


def _master_for(sentinel: Any) -> Any:
    """A Sentinel-managed master client (made without connecting)."""
    return sentinel([("127.0.0.1", 1)]).master_for("mymaster")


class _MyRedis(redis.Redis):
    """A user's subclass."""


class _MyAsyncValkey(valkey.asyncio.Valkey):
    """A user's subclass."""


@pytest.mark.parametrize(
    "make_client",
    [
        lambda: redis.Redis(unix_socket_path=DEAD),
        lambda: redis.StrictRedis(unix_socket_path=DEAD),
        lambda: valkey.Valkey(unix_socket_path=DEAD),
        lambda: _MyRedis(unix_socket_path=DEAD),
        lambda: _master_for(redis.sentinel.Sentinel),
        lambda: _master_for(valkey.sentinel.Sentinel),
    ],
    ids=["redis", "StrictRedis", "valkey", "subclass", "sentinel-master", "valkey-sentinel"],
)
def test_sync_classes_accept_clients_of_both_libraries(make_client: Callable[[], Any]) -> None:
    client = make_client()
    for make in _sync_classes().values():
        make(client)
    assert _connections_made(client.connection_pool) == 0


@pytest.mark.parametrize(
    "make_client",
    [
        lambda: redis.asyncio.Redis(unix_socket_path=DEAD),
        lambda: valkey.asyncio.Valkey(unix_socket_path=DEAD),
        lambda: _MyAsyncValkey(unix_socket_path=DEAD),
    ],
    ids=["redis", "valkey", "subclass"],
)
def test_async_classes_accept_clients_of_both_libraries(make_client: Callable[[], Any]) -> None:
    client = make_client()
    for make in _async_classes().values():
        make(client)
    assert _connections_made(client.connection_pool) == 0
