"""Waiters are woken after the wake hub's pub/sub connection comes back.

A release (or a latch reaching zero) published while the hub's connection was
down is lost; each test kills the waiter's pub/sub connection (``CLIENT KILL
TYPE pubsub``) after the waiter subscribed and releases right after. The waiter
must have the lock (the latch must open) within a couple of seconds, not after
the holder's 15 s lease. A server restart is covered too.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ConstantBackoff, ExponentialWithJitterBackoff
from redis.retry import Retry

from tenure import (
    AsyncCountDownLatch,
    AsyncFairLock,
    AsyncLock,
    AsyncReadWriteLock,
    AsyncRLock,
    AsyncSemaphore,
    CountDownLatch,
    FairLock,
    Lock,
    ReadWriteLock,
    RLock,
    Semaphore,
)
from tenure._drivers import _sync as _sync_driver
from tenure._drivers._async import fanout as _fanout
from tenure._server import ServerProcess

#: The holder's lease, seconds: a waiter that misses the wake-up sleeps this long.
LEASE = 15.0
#: How long after the release the waiter may take, seconds (a loaded machine).
PROMPT = 2.5
#: The waiter's own timeout, seconds: a missed wake-up fails, it does not hang.
WAITER_TIMEOUT = 10.0

#: A fair waiter calls again every third of its waiter timeout: make that
#: longer than the waiter's own timeout, so only a wake-up can be prompt.
FAIR: dict[str, Any] = {"waiter_timeout": 3 * WAITER_TIMEOUT + 3}

Release = Callable[[], Any]


def _retry() -> Retry:
    """redis-py's default for a client made with ``Redis(host=..., port=...)``
    (``from_url`` makes clients that do not retry): the hub's pub/sub connection
    then reconnects inside ``get_message``, without an error reaching the hub."""
    return Retry(ExponentialWithJitterBackoff(base=0.01, cap=1.0), 10)


def _async_retry() -> AsyncRetry:
    """:func:`_retry` for an asyncio client."""
    return AsyncRetry(ExponentialWithJitterBackoff(base=0.01, cap=1.0), 10)


#: Retries that outlast a server restart (5 s), for the clients of the restart
#: tests: a waiter woken while the server is down (the hub's read failed) must
#: not get a ConnectionError.
RESTART_RETRY: dict[str, Any] = {"backoff": ConstantBackoff(0.05), "retries": 100}


@dataclass(frozen=True)
class Case:
    """One primitive: ``hold(client, name)`` takes it and returns its release;
    ``wait(client, name)`` waits for it (at most :data:`WAITER_TIMEOUT`), returns
    whether it got it, and gives it back."""

    hold: Callable[[redis.Redis, str], Release]
    wait: Callable[[redis.Redis, str], bool]


def _taken(lease: Any) -> Release:
    assert lease is not None
    return lease.release  # type: ignore[no-any-return]


def _got(lease: Any) -> bool:
    if lease is None:
        return False
    lease.release()
    return True


def _latch_hold(c: redis.Redis, name: str) -> Release:
    latch = CountDownLatch(c, name)
    assert latch.try_set_count(1)
    return latch.count_down


SYNC_CASES = {
    "lock": Case(
        lambda c, n: _taken(Lock(c, n, ttl=LEASE).acquire()),
        lambda c, n: _got(Lock(c, n, ttl=LEASE).acquire(timeout=WAITER_TIMEOUT)),
    ),
    "rlock": Case(
        lambda c, n: _taken(RLock(c, n, ttl=LEASE).acquire()),
        lambda c, n: _got(RLock(c, n, ttl=LEASE).acquire(timeout=WAITER_TIMEOUT)),
    ),
    "fair": Case(
        lambda c, n: _taken(FairLock(c, n, ttl=LEASE).acquire()),
        lambda c, n: _got(FairLock(c, n, ttl=LEASE, **FAIR).acquire(timeout=WAITER_TIMEOUT)),
    ),
    "writer-waits-on-reader": Case(
        lambda c, n: _taken(ReadWriteLock(c, n, ttl=LEASE).read.acquire()),
        lambda c, n: _got(ReadWriteLock(c, n, ttl=LEASE).write.acquire(timeout=WAITER_TIMEOUT)),
    ),
    "reader-waits-on-writer": Case(
        lambda c, n: _taken(ReadWriteLock(c, n, ttl=LEASE).write.acquire()),
        lambda c, n: _got(ReadWriteLock(c, n, ttl=LEASE).read.acquire(timeout=WAITER_TIMEOUT)),
    ),
    "semaphore": Case(
        lambda c, n: _taken(Semaphore(c, n, 1, ttl=LEASE).acquire()),
        lambda c, n: _got(Semaphore(c, n, 1, ttl=LEASE).acquire(timeout=WAITER_TIMEOUT)),
    ),
    # no timeout: only a wake-up ends this wait
    "latch": Case(_latch_hold, lambda c, n: CountDownLatch(c, n).wait()),
}


def _until_subscribed(r: redis.Redis, name: str) -> None:
    """Wait until a connection listens on a channel of the primitive ``name``."""
    deadline = time.monotonic() + 5
    while not r.pubsub_channels(f"*{{{name}}}*"):
        assert time.monotonic() < deadline, "the waiter never subscribed"
        time.sleep(0.005)


def _kill_pubsub(r: redis.Redis) -> None:
    """Kill every pub/sub connection: the waiter's hub's, which listens on the
    primitive's channel, is one of them. The caller releases right after, before
    the hub can subscribe again (no round trip in between)."""
    assert int(r.client_kill_filter(_type="pubsub")) >= 1, "no pub/sub connection to kill"


@pytest.mark.parametrize("case", list(SYNC_CASES))
def test_waiter_woken_after_pubsub_killed(r: redis.Redis, url: str, case: str) -> None:
    c = SYNC_CASES[case]
    name = f"hub-{case}"
    release = c.hold(r, name)
    out: list[tuple[bool, float]] = []

    def wait() -> None:
        got = c.wait(redis.Redis.from_url(url, retry=_retry()), name)
        out.append((got, time.monotonic()))

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    _until_subscribed(r, name)
    time.sleep(0.2)  # the waiter's attempt failed: it sleeps for the lease now
    _kill_pubsub(r)
    released_at = time.monotonic()
    release()
    waiter.join(WAITER_TIMEOUT + 2)
    assert out, f"{case}: the waiter still waits {WAITER_TIMEOUT}s after the release"
    got, at = out[0]
    assert got, f"{case}: the waiter timed out"
    assert at - released_at < PROMPT, f"{case}: the waiter took {at - released_at:.2f}s"


@dataclass(frozen=True)
class AsyncCase:
    hold: Callable[[redis.asyncio.Redis, str], Awaitable[Callable[[], Awaitable[Any]]]]
    wait: Callable[[redis.asyncio.Redis, str], Coroutine[Any, Any, bool]]


async def _ataken(lease: Any) -> Callable[[], Awaitable[Any]]:
    assert lease is not None
    return lease.release  # type: ignore[no-any-return]


async def _agot(lease: Any) -> bool:
    if lease is None:
        return False
    await lease.release()
    return True


async def _alatch_hold(c: redis.asyncio.Redis, name: str) -> Callable[[], Awaitable[Any]]:
    latch = AsyncCountDownLatch(c, name)
    assert await latch.try_set_count(1)
    return latch.count_down


ASYNC_CASES = {
    "lock": AsyncCase(
        lambda c, n: _ataken_of(AsyncLock(c, n, ttl=LEASE).acquire()),
        lambda c, n: _agot_of(AsyncLock(c, n, ttl=LEASE).acquire(timeout=WAITER_TIMEOUT)),
    ),
    "rlock": AsyncCase(
        lambda c, n: _ataken_of(AsyncRLock(c, n, ttl=LEASE).acquire()),
        lambda c, n: _agot_of(AsyncRLock(c, n, ttl=LEASE).acquire(timeout=WAITER_TIMEOUT)),
    ),
    "fair": AsyncCase(
        lambda c, n: _ataken_of(AsyncFairLock(c, n, ttl=LEASE).acquire()),
        lambda c, n: _agot_of(
            AsyncFairLock(c, n, ttl=LEASE, **FAIR).acquire(timeout=WAITER_TIMEOUT)
        ),
    ),
    "writer-waits-on-reader": AsyncCase(
        lambda c, n: _ataken_of(AsyncReadWriteLock(c, n, ttl=LEASE).read.acquire()),
        lambda c, n: _agot_of(
            AsyncReadWriteLock(c, n, ttl=LEASE).write.acquire(timeout=WAITER_TIMEOUT)
        ),
    ),
    "reader-waits-on-writer": AsyncCase(
        lambda c, n: _ataken_of(AsyncReadWriteLock(c, n, ttl=LEASE).write.acquire()),
        lambda c, n: _agot_of(
            AsyncReadWriteLock(c, n, ttl=LEASE).read.acquire(timeout=WAITER_TIMEOUT)
        ),
    ),
    "semaphore": AsyncCase(
        lambda c, n: _ataken_of(AsyncSemaphore(c, n, 1, ttl=LEASE).acquire()),
        lambda c, n: _agot_of(AsyncSemaphore(c, n, 1, ttl=LEASE).acquire(timeout=WAITER_TIMEOUT)),
    ),
    "latch": AsyncCase(_alatch_hold, lambda c, n: AsyncCountDownLatch(c, n).wait()),
}


async def _ataken_of(acquiring: Awaitable[Any]) -> Callable[[], Awaitable[Any]]:
    return await _ataken(await acquiring)


async def _agot_of(acquiring: Awaitable[Any]) -> bool:
    return await _agot(await acquiring)


@pytest.mark.parametrize("case", list(ASYNC_CASES))
def test_async_waiter_woken_after_pubsub_killed(r: redis.Redis, url: str, case: str) -> None:
    c = ASYNC_CASES[case]
    name = f"ahub-{case}"

    async def main() -> None:
        holder_client = redis.asyncio.Redis.from_url(url)
        waiter_client = redis.asyncio.Redis.from_url(url, retry=_async_retry())
        release = await c.hold(holder_client, name)
        waiter = asyncio.create_task(c.wait(waiter_client, name))
        deadline = time.monotonic() + 5
        while not await holder_client.pubsub_channels(f"*{{{name}}}*"):
            assert time.monotonic() < deadline, "the waiter never subscribed"
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.2)  # the waiter's attempt failed: it sleeps for the lease now
        _kill_pubsub(r)
        released_at = time.monotonic()
        await release()
        try:
            got = await asyncio.wait_for(waiter, WAITER_TIMEOUT)
        except TimeoutError:
            raise AssertionError(
                f"{case}: the waiter still waits {WAITER_TIMEOUT}s after the release"
            ) from None
        took = time.monotonic() - released_at
        assert got, f"{case}: the waiter timed out"
        assert took < PROMPT, f"{case}: the waiter took {took:.2f}s"
        await holder_client.aclose()
        await waiter_client.aclose()

    asyncio.run(main())


def test_waiter_gets_a_lock_freed_by_a_server_restart(
    make_server: Callable[..., ServerProcess],
) -> None:
    """The server restarts without persistence: the lock is free afterwards, and
    the waiter (whose hub reconnects) takes it at once, not after the lease."""
    s = make_server()
    holder = Lock(redis.Redis.from_url(s.url), "restart", ttl=20)
    assert holder.acquire() is not None
    out: list[tuple[Any, float]] = []

    def wait() -> None:
        client = redis.Redis.from_url(s.url, retry=Retry(**RESTART_RETRY))
        lease = Lock(client, "restart", ttl=20).acquire(timeout=12)
        out.append((lease, time.monotonic()))

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    probe = redis.Redis.from_url(s.url)
    _until_subscribed(probe, "restart")
    time.sleep(0.2)
    s.restart()
    restarted_at = time.monotonic()
    waiter.join(15)
    assert out, "the waiter neither got the lock nor timed out"
    lease, at = out[0]
    assert lease is not None, "the waiter timed out"
    assert at - restarted_at < 4.0, f"the waiter took {at - restarted_at:.2f}s after the restart"
    lease.release()


def _subscribed_again(r: redis.Redis, name: str, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while not r.pubsub_channels(f"*{{{name}}}*"):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.parametrize("retrying", [True, False], ids=["retrying", "no-retry"])
def test_hub_subscribes_again_after_a_kill(r: redis.Redis, url: str, retrying: bool) -> None:
    """Whether or not the client retries (``from_url`` clients don't), the hub
    reconnects and listens again while its waiter waits."""
    name = f"again-{retrying}"
    lease = Lock(r, name, ttl=LEASE).acquire()
    assert lease is not None
    client = redis.Redis.from_url(url, **({"retry": _retry()} if retrying else {}))
    out: list[Any] = []
    waiter = threading.Thread(
        target=lambda: out.append(Lock(client, name, ttl=LEASE).acquire(timeout=WAITER_TIMEOUT)),
        daemon=True,
    )
    waiter.start()
    _until_subscribed(r, name)
    _kill_pubsub(r)
    assert _subscribed_again(r, name), "the hub did not subscribe again"
    lease.release()
    waiter.join(PROMPT)
    assert out and out[0] is not None
    out[0].release()


@pytest.mark.parametrize("retrying", [True, False], ids=["retrying", "no-retry"])
def test_async_hub_subscribes_again_after_a_kill(r: redis.Redis, url: str, retrying: bool) -> None:
    """The asyncio twin of :func:`test_hub_subscribes_again_after_a_kill`."""
    name = f"aagain-{retrying}"

    async def main() -> None:
        lease = Lock(r, name, ttl=LEASE).acquire()
        assert lease is not None
        kwargs: dict[str, Any] = {"retry": _async_retry()} if retrying else {}
        client = redis.asyncio.Redis.from_url(url, **kwargs)
        waiter = asyncio.create_task(
            AsyncLock(client, name, ttl=LEASE).acquire(timeout=WAITER_TIMEOUT)
        )
        while not r.pubsub_channels(f"*{{{name}}}*"):
            await asyncio.sleep(0.01)
        _kill_pubsub(r)
        deadline = time.monotonic() + 3
        while not r.pubsub_channels(f"*{{{name}}}*"):
            assert time.monotonic() < deadline, "the hub did not subscribe again"
            await asyncio.sleep(0.01)
        lease.release()
        got = await asyncio.wait_for(waiter, PROMPT)
        assert got is not None
        await got.release()
        await client.aclose()

    asyncio.run(main())


def test_async_waiter_gets_a_lock_freed_by_a_server_restart(
    make_server: Callable[..., ServerProcess],
) -> None:
    """The asyncio twin of :func:`test_waiter_gets_a_lock_freed_by_a_server_restart`."""
    s = make_server()
    holder = Lock(redis.Redis.from_url(s.url), "restart", ttl=20)
    assert holder.acquire() is not None
    probe = redis.Redis.from_url(s.url)

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(s.url, retry=AsyncRetry(**RESTART_RETRY))
        waiter = asyncio.create_task(AsyncLock(client, "restart", ttl=20).acquire(timeout=12))
        while not probe.pubsub_channels("*{restart}*"):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        s.restart()  # blocks the loop: the hub finds out after the restart
        restarted_at = time.monotonic()
        lease = await asyncio.wait_for(waiter, 14)
        took = time.monotonic() - restarted_at
        assert lease is not None, "the waiter timed out"
        assert took < 4.0, f"the waiter took {took:.2f}s after the restart"
        await lease.release()
        await client.aclose()

    asyncio.run(main())


def test_a_lingering_channel_is_unsubscribed_after_a_reconnection(r: redis.Redis, url: str) -> None:
    """A client without retries: redis-py reconnects, subscribes again to every
    channel it had (a lingering one too), then raises. The lingering channel
    must still go when its linger ends, not stay subscribed while another
    waiter of the client waits."""
    client = redis.Redis.from_url(url)  # no retries
    b_lease = Lock(r, "drop-b", ttl=LEASE).acquire()
    a_lease = Lock(r, "drop-a", ttl=LEASE).acquire()
    assert a_lease is not None and b_lease is not None
    out: list[Any] = []

    def wait(name: str) -> None:
        out.append(Lock(client, name, ttl=LEASE).acquire(timeout=WAITER_TIMEOUT))

    b_waiter = threading.Thread(target=wait, args=("drop-b",), daemon=True)
    b_waiter.start()
    a_waiter = threading.Thread(target=wait, args=("drop-a",), daemon=True)
    a_waiter.start()
    _until_subscribed(r, "drop-a")
    _until_subscribed(r, "drop-b")
    a_lease.release()
    a_waiter.join(PROMPT)
    assert out and out[0] is not None
    out[0].release()  # drop-a's channel lingers now, nobody waits on it
    _kill_pubsub(r)
    assert _subscribed_again(r, "drop-b"), "the hub did not subscribe again"
    deadline = time.monotonic() + 3  # more than LINGER
    while r.pubsub_channels("*{drop-a}*"):
        assert time.monotonic() < deadline, "the hub kept a channel nobody waits on"
        time.sleep(0.01)
    b_lease.release()
    b_waiter.join(PROMPT)
    assert len(out) == 2 and out[1] is not None
    out[1].release()


@pytest.mark.parametrize("retrying", [True, False], ids=["retrying", "no-retry"])
def test_a_lingering_channel_is_unsubscribed_after_a_reconnection_asyncio(
    r: redis.Redis, url: str, retrying: bool
) -> None:
    """The asyncio twin of
    :func:`test_a_lingering_channel_is_unsubscribed_after_a_reconnection`, with
    and without retries: the lingering channel, which redis-py subscribed
    again, still goes when its linger ends."""
    b_lease = Lock(r, "adrop-b", ttl=LEASE).acquire()
    a_lease = Lock(r, "adrop-a", ttl=LEASE).acquire()
    assert a_lease is not None and b_lease is not None

    async def until(name: str, subscribed: bool, within: float) -> bool:
        deadline = time.monotonic() + within
        while bool(r.pubsub_channels(f"*{{{name}}}*")) != subscribed:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    async def main() -> None:
        kwargs: dict[str, Any] = {"retry": _async_retry()} if retrying else {}
        client = redis.asyncio.Redis.from_url(url, **kwargs)
        a_waiter = asyncio.create_task(
            AsyncLock(client, "adrop-a", ttl=LEASE).acquire(timeout=WAITER_TIMEOUT)
        )
        b_waiter = asyncio.create_task(
            AsyncLock(client, "adrop-b", ttl=LEASE).acquire(timeout=WAITER_TIMEOUT)
        )
        assert await until("adrop-a", True, 5) and await until("adrop-b", True, 5)
        a_lease.release()
        got_a = await asyncio.wait_for(a_waiter, PROMPT)
        assert got_a is not None
        await got_a.release()  # adrop-a's channel lingers now, nobody waits on it
        _kill_pubsub(r)
        assert await until("adrop-b", True, 3), "the hub did not subscribe again"
        assert await until("adrop-a", False, 3), "the hub kept a channel nobody waits on"
        b_lease.release()
        got_b = await asyncio.wait_for(b_waiter, PROMPT)
        assert got_b is not None
        await got_b.release()
        await client.aclose()

    asyncio.run(main())


def _attempts(r: redis.Redis) -> int:
    """Script calls the server ran since the last ``CONFIG RESETSTAT``."""
    stats = r.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))


def _waiter(client: redis.Redis, name: str, out: dict[str, Any]) -> threading.Thread:
    """A thread (named ``waiter <name>``) acquiring ``name`` on ``client``: its
    lease or exception goes to ``out[name]``, when it ended to ``out[name + " at"]``."""

    def run() -> None:
        try:
            out[name] = Lock(client, name, ttl=LEASE).acquire(timeout=WAITER_TIMEOUT)
        except BaseException as exc:
            out[name] = exc
        out[name + " at"] = time.monotonic()

    thread = threading.Thread(target=run, name=f"waiter {name}", daemon=True)
    thread.start()
    return thread


def _entered(hub: Any, name: str) -> bool:
    """Whether a plan of ``hub`` entered the channel of ``name`` and its
    SUBSCRIBE (sent under the hub's mutex) is over."""
    with hub._mutex:
        return any(name in channel for channel in hub._book.channels)


def _one_waiting(
    r: redis.Redis, client: redis.Redis, name: str, other: str
) -> tuple[list[Any], dict[str, Any], Any, threading.Thread, Any]:
    """``name`` and ``other`` held by ``r``, and a waiter of ``name`` on
    ``client`` (see :func:`_waiter`) whose channel is entered and whose hub
    reads: the holders' leases, the waiters' results, the hub, the waiter's
    thread and the hub's ``PubSub``."""
    holders = [Lock(r, n, ttl=LEASE).acquire() for n in (name, other)]
    out: dict[str, Any] = {}
    hub = _sync_driver._state(client).hub
    first = _waiter(client, name, out)
    _until(lambda: _entered(hub, name) and hub._reader is not None)
    pubsub = hub._pubsub
    assert pubsub is not None
    return holders, out, hub, first, pubsub


def test_a_subscribe_leaves_a_connection_that_is_down_to_the_reader(
    r: redis.Redis, url: str
) -> None:
    """A waiter that subscribes a new channel while the hub's connection is
    down (the reader closed it after a leader's read was cut, or found it
    closed) does not connect it: the reader does, and the library then
    subscribes the new channel with the others. Before, the waiter connected
    it in its SUBSCRIBE while the reader connected or read it too: one's
    handshake read the other's replies, or lost its socket to the other's
    clean-up, and the waiter's acquire raised (a ConnectionError, an
    AttributeError)."""
    client = redis.Redis.from_url(url)
    holders, out, hub, first, pubsub = _one_waiting(r, client, "down-a", "down-b")
    conn = pubsub.connection
    connects: list[str] = []  # the threads that connected the hub's connection
    handshake = conn.connect_check_health

    def counted(*args: Any, **kwargs: Any) -> Any:
        connects.append(threading.current_thread().name)
        return handshake(*args, **kwargs)

    conn.connect_check_health = counted
    with hub._reading:  # (the reader, done with its read, waits here)
        conn.disconnect()
        second = _waiter(client, "down-b", out)
        _until(lambda: _entered(hub, "down-b"))
    for lease in holders:
        assert lease is not None
        lease.release()
    first.join(WAITER_TIMEOUT)
    second.join(WAITER_TIMEOUT)
    assert connects == ["tenure-wake-hub"], connects
    for name in ("down-a", "down-b"):
        lease = out.get(name)
        assert lease is not None and not isinstance(lease, BaseException), out
        lease.release()
    client.close()


def _until(condition: Callable[[], bool], timeout: float = WAITER_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "never came to pass"
        time.sleep(0.005)


def test_the_first_connection_wakes_nobody(r: redis.Redis, url: str) -> None:
    """A waiter makes two attempts (the lone one, then the queued one after it
    subscribed) and then sleeps: the hub's first connection is no reconnection."""
    lease = Lock(r, "first", ttl=LEASE).acquire()
    assert lease is not None
    r.config_resetstat()
    client = redis.Redis.from_url(url, retry=_retry())
    waiter = threading.Thread(
        target=lambda: Lock(client, "first", ttl=LEASE).acquire(timeout=1.5), daemon=True
    )
    waiter.start()
    _until_subscribed(r, "first")
    time.sleep(0.5)
    assert _attempts(r) == 2
    waiter.join(5)
    lease.release()


def test_the_first_connection_wakes_nobody_asyncio(r: redis.Redis, url: str) -> None:
    lease = Lock(r, "afirst", ttl=LEASE).acquire()
    assert lease is not None
    r.config_resetstat()

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url, retry=_async_retry())
        waiter = asyncio.create_task(AsyncLock(client, "afirst", ttl=LEASE).acquire(timeout=1.5))
        while not r.pubsub_channels("*{afirst}*"):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        assert _attempts(r) == 2
        assert await waiter is None
        await client.aclose()

    asyncio.run(main())
    lease.release()


def test_async_lingering_channel_is_unsubscribed_after_a_reconnection(
    r: redis.Redis, url: str
) -> None:
    """The asyncio twin of
    :func:`test_a_lingering_channel_is_unsubscribed_after_a_reconnection`."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)  # no retries
        b_lease = Lock(r, "adrop-b", ttl=LEASE).acquire()
        a_lease = Lock(r, "adrop-a", ttl=LEASE).acquire()
        assert a_lease is not None and b_lease is not None
        b = asyncio.create_task(AsyncLock(client, "adrop-b", ttl=LEASE).acquire(timeout=10))
        a = asyncio.create_task(AsyncLock(client, "adrop-a", ttl=LEASE).acquire(timeout=10))
        while not (r.pubsub_channels("*{adrop-a}*") and r.pubsub_channels("*{adrop-b}*")):
            await asyncio.sleep(0.01)
        a_lease.release()
        got = await asyncio.wait_for(a, PROMPT)
        assert got is not None
        await got.release()  # adrop-a's channel lingers now, nobody waits on it
        _kill_pubsub(r)
        deadline = time.monotonic() + 3
        while not r.pubsub_channels("*{adrop-b}*"):
            assert time.monotonic() < deadline, "the hub did not subscribe again"
            await asyncio.sleep(0.01)
        deadline = time.monotonic() + 3  # more than LINGER
        while r.pubsub_channels("*{adrop-a}*"):
            assert time.monotonic() < deadline, "the hub kept a channel nobody waits on"
            await asyncio.sleep(0.01)
        b_lease.release()
        got = await asyncio.wait_for(b, PROMPT)
        assert got is not None
        await got.release()
        await client.aclose()

    asyncio.run(main())


def test_first_subscribes_at_once_on_a_fresh_async_client_are_all_heard(
    r: redis.Redis, url: str
) -> None:
    """Channels a fresh asyncio client's hub is asked to listen on at the same
    moment (a Redlock's waiters that all found the lock busy at once) are all
    read by the hub. (The library's asyncio PubSub took a connection from the
    pool for each concurrent first SUBSCRIBE and kept only the last: the other
    channels were subscribed on connections nobody read, so their messages
    were lost while the server still counted a subscriber, and a Redlock
    waiter that missed its wake slept until the holder's lease ran out.)"""
    channels = [f"tenure:{{burst}}:wake:w{k}" for k in range(4)]

    async def main() -> tuple[list[bool], int]:
        client = redis.asyncio.Redis.from_url(url)  # no connection made yet
        events = [asyncio.Event() for _ in channels]
        stops = await asyncio.gather(
            *(
                _fanout.listen_each([client], ch, ev, 2.0)
                for ch, ev in zip(channels, events, strict=True)
            )
        )
        pubsubs = sum(1 for c in r.client_list() if c.get("sub") not in (None, "0"))
        for ch in channels:
            r.publish(ch, "recheck 0")

        async def heard_on(event: asyncio.Event) -> bool:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PROMPT):
                    await event.wait()
            return event.is_set()

        heard = list(await asyncio.gather(*(heard_on(ev) for ev in events)))
        for stop in stops:
            if stop[0] is not None:
                stop[0]()
        await client.aclose()
        return heard, pubsubs

    heard, pubsubs = asyncio.run(main())
    assert heard == [True] * len(channels)
    assert pubsubs == 1, f"{pubsubs} pub/sub connections, not the hub's one"


def test_a_subscribe_sent_during_the_libraries_handshake_is_confirmed(
    r: redis.Redis, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library makes the hub's connection again inside the reader's read
    (its retry), handshake and all, without the hub's ``_sending``: a waiter
    that finds it connected then sends its SUBSCRIBE during the handshake,
    which reads (and drops) the confirmation, and may add its channel to the
    PubSub's table only after the library took the channels it subscribes
    again. The reader subscribes such a channel again: the waiter takes the
    lock released at once. Before, it waited for its confirmation until
    ``SUBSCRIBE_CONFIRM_WAIT`` (5 s) while the lock was free. The test holds
    the waiter between its SUBSCRIBE and its table's update until the
    library subscribed again (a thread switch there, under load)."""
    # (a waiter that reads the connection itself would find it broken and
    # leave the reconnection to the reader's _take, under _sending: here the
    # reader reads, as an asyncio hub's does)
    monkeypatch.setattr(_sync_driver._Hub, "_lead", lambda self, ch, deadline, me: None)
    client = redis.Redis(
        host=r.connection_pool.connection_kwargs["host"],
        port=r.connection_pool.connection_kwargs["port"],
        retry=_retry(),
    )
    holders, out, hub, first, pubsub = _one_waiting(r, client, "mid-a", "mid-b")
    conn = pubsub.connection
    sent = threading.Event()  # the second waiter's SUBSCRIBE went out
    second: list[threading.Thread] = []
    handshake = conn.on_connect_check_health
    read = conn.read_response
    send = pubsub.execute_command
    shaking: list[bool] = []

    def shake(*args: Any, **kwargs: Any) -> Any:
        shaking.append(True)  # (the reader's reconnection, inside its read)
        try:
            return handshake(*args, **kwargs)
        finally:
            shaking.clear()

    def reading(*args: Any, **kwargs: Any) -> Any:
        reply = read(*args, **kwargs)
        if shaking and not second:  # (its first reply read: HELLO's, say)
            assert threading.current_thread().name == "tenure-wake-hub"
            second.append(_waiter(client, "mid-b", out))
            sent.wait(WAITER_TIMEOUT)
        return reply

    def sending(*args: Any) -> Any:
        reply = send(*args)
        if threading.current_thread().name == "waiter mid-b":
            sent.set()
            deadline = time.monotonic() + WAITER_TIMEOUT
            while not pubsub.reconnected.is_set() and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(0.1)  # (the library's SUBSCRIBEs, from its table, went out)
        return reply

    conn.on_connect_check_health = shake
    conn.read_response = reading
    pubsub.execute_command = sending
    r.client_kill_filter(_type="pubsub")
    _until(lambda: bool(second) and _entered(hub, "mid-b"))
    assert sent.is_set(), "the second waiter's SUBSCRIBE was not sent during the handshake"
    time.sleep(0.3)  # (the second waiter queues, or waits for its confirmation)
    released = time.monotonic()
    for lease in holders:
        assert lease is not None
        lease.release()
    first.join(WAITER_TIMEOUT)
    second[0].join(WAITER_TIMEOUT)
    for name in ("mid-a", "mid-b"):
        lease = out.get(name)
        assert lease is not None and not isinstance(lease, BaseException), (name, lease)
        took = out[name + " at"] - released
        assert took < PROMPT, f"{name} took the lock {took:.2f}s after its release"
        lease.release()
