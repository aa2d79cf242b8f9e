"""The drivers' quick path (tenure._drivers._clients.quick_connections): scripts
written and read on connections tenure keeps checked out of the client's pool.
What it must never do: keep a connection a user's pool needs, read a reply
that belongs to an interrupted call, or turn a connection fault into anything
but the ordinary path's behaviour."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio
from _interrupts import InterruptedCall
from redis.backoff import NoBackoff
from redis.retry import Retry

from tenure import AsyncLock, Lock
from tenure._drivers import _clients


def _client_ids(r: redis.Redis, name: str) -> list[str]:
    return [str(c["id"]) for c in r.client_list() if c.get("name") == name]


def test_a_blocking_pool_keeps_all_its_connections_for_its_user(url: str) -> None:
    """A BlockingConnectionPool of one connection: after tenure's calls the
    user's next command gets that connection at once (tenure kept none out)."""
    pool = redis.BlockingConnectionPool.from_url(url, max_connections=1, timeout=0.5)
    client = redis.Redis(connection_pool=pool)
    lock = Lock(client, "blocking-pool", ttl=10)
    for _ in range(3):
        lease = lock.acquire()
        assert lease is not None
        lease.release()
    assert client.set("blocking-pool-user", "ok")  # would wait 0.5 s and fail
    assert _clients.quick_connections(client) == 0


def test_a_small_pool_keeps_three_quarters_for_its_user(url: str) -> None:
    """A ConnectionPool of 4: tenure's quick path keeps at most one, so the
    user can still hold 3 connections at once while tenure's calls go on."""
    client = redis.Redis.from_url(url, max_connections=4)
    assert _clients.quick_connections(client) == 1
    lock = Lock(client, "small-pool", ttl=10)
    lease = lock.acquire()
    assert lease is not None
    held = [client.connection_pool.get_connection() for _ in range(3)]
    try:
        lease.release()  # the quick path's own connection: no checkout
        again = lock.acquire()
        assert again is not None and again.fence > lease.fence
        again.release()
    finally:
        for conn in held:
            client.connection_pool.release(conn)


def test_single_connection_clients_take_the_ordinary_path(url: str) -> None:
    client = redis.Redis.from_url(url, single_connection_client=True)
    assert _clients.quick_connections(client) == 0
    with Lock(client, "single", ttl=10) as lease:
        assert client.get("tenure:{single}") == lease.owner.encode()


def test_a_killed_quick_connection_is_made_again_and_the_call_retried(
    url: str, r: redis.Redis
) -> None:
    """The quick path's connection killed between two calls: the next acquire
    still takes the lock (the client retries by default), with a larger fence."""
    client = redis.Redis.from_url(url, client_name="quick-killed")
    lock = Lock(client, "quick-killed", ttl=10)
    first = lock.acquire()
    assert first is not None
    first.release()
    for cid in _client_ids(r, "quick-killed"):
        r.client_kill_filter(_id=cid)
    second = lock.acquire()
    assert second is not None and second.fence > first.fence
    assert r.get("tenure:{quick-killed}") == second.owner.encode()
    second.release()
    assert not lock.locked()


def test_without_retries_a_killed_connection_raises_and_nothing_is_held(
    url: str, r: redis.Redis
) -> None:
    """A client that does not retry sees the connection error, as on the
    ordinary path; nothing was taken, and the next call connects again."""
    client = redis.Redis.from_url(url, client_name="quick-noretry", retry=Retry(NoBackoff(), 0))
    lock = Lock(client, "quick-noretry", ttl=10)
    lease = lock.acquire()
    assert lease is not None
    lease.release()
    for cid in _client_ids(r, "quick-noretry"):
        r.client_kill_filter(_id=cid)
    with pytest.raises(redis.exceptions.ConnectionError):
        lock.acquire()
    assert r.get("tenure:{quick-noretry}") is None
    again = lock.acquire()
    assert again is not None and again.fence > lease.fence
    again.release()


def test_a_reply_left_unread_by_an_interrupt_is_never_read_as_the_next_calls(
    url: str, r: redis.Redis
) -> None:
    """KeyboardInterrupt while the acquire's reply is due: the connection is
    closed, so the calls after it (the interrupted acquire's clean-up, then
    the next acquire and release) each read their own reply, never the one
    left unread, and the lock ends free."""
    client = redis.Redis.from_url(url)
    client.connection_pool.connection_class = InterruptedCall
    lock = Lock(client, "quick-interrupted", ttl=10)
    warm = lock.acquire()
    assert warm is not None
    warm.release()
    InterruptedCall.armed = "reply"
    with pytest.raises(KeyboardInterrupt):
        lock.acquire()
    # the server granted it; the clean-up of the interrupted acquire released it
    assert r.get("tenure:{quick-interrupted}") is None
    lease = lock.acquire(blocking=False)
    assert lease is not None and lease.fence > warm.fence
    assert r.get("tenure:{quick-interrupted}") == lease.owner.encode()
    lease.release()
    assert not lock.locked()


class AlarmTimeout(Exception):
    """What a ``signal.alarm`` handler commonly raises: an ordinary ``Exception``."""


@pytest.mark.parametrize("armed", ["send", "reply"])
def test_an_interrupt_as_an_exception_on_the_quick_path_is_raised_and_given_back(
    url: str, r: redis.Redis, monkeypatch: pytest.MonkeyPatch, armed: str
) -> None:
    """An ordinary ``Exception`` (a signal handler's) while the acquire is
    written or its reply is due: the caller gets it, and the lock ends free.
    Before, the quick path took it for a failed connection and the client sent
    the call again, so the interrupt was lost and the acquire went on."""
    client = redis.Redis.from_url(url)  # (its default retry policy retries)
    client.connection_pool.connection_class = InterruptedCall
    monkeypatch.setattr(InterruptedCall, "error", AlarmTimeout)
    lock = Lock(client, "quick-alarm", ttl=10)
    warm = lock.acquire()
    assert warm is not None
    warm.release()
    InterruptedCall.armed = armed
    with pytest.raises(AlarmTimeout):
        lock.acquire()
    assert not InterruptedCall.armed
    assert r.get("tenure:{quick-alarm}") is None
    lease = lock.acquire(blocking=False)
    assert lease is not None and lease.fence > warm.fence
    lease.release()


def test_an_asyncio_interrupt_as_an_exception_on_the_quick_path_is_raised_and_given_back(
    url: str, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The asyncio twin, with the exception raised as the acquire's reply is read."""
    from _interrupts import raise_once

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        try:
            lock = AsyncLock(client, "quick-alarm", ttl=10)
            warm = await lock.acquire()
            assert warm is not None
            await warm.release()
            conn_type = redis.asyncio.connection.AbstractConnection
            cut, fired = raise_once(conn_type.read_response, AlarmTimeout)
            monkeypatch.setattr(conn_type, "read_response", cut)
            with pytest.raises(AlarmTimeout):
                await lock.acquire()
            monkeypatch.undo()
            assert fired
            assert await client.get("tenure:{quick-alarm}") is None
            lease = await lock.acquire(blocking=False)
            assert lease is not None and lease.fence > warm.fence
            await lease.release()
        finally:
            await client.aclose()

    asyncio.run(main())


def test_an_interrupt_as_a_sound_connection_is_given_back_loses_no_connection(
    url: str, r: redis.Redis
) -> None:
    """An interrupt (of any class) at the first call made once a script's
    reply was read, as its connection goes back to the quick path: where a
    signal handler may run. The connection is back among the idle ones, so
    the quick path keeps as many as before. Before, the interrupt came as the
    give-back began: the connection stayed counted as open and was never
    given back, one fewer for every later call, until each call waited a
    second for a connection (seen under random SIGALRM: 8 of 8 gone in 30 s)."""
    import sys
    from types import FrameType

    from tenure._drivers import _sync

    client = redis.Redis.from_url(url)
    lock = Lock(client, "quick-give-back", ttl=10)
    warm = lock.acquire()
    assert warm is not None
    warm.release()
    reserve = _sync._state(client).reserve
    assert reserve is not None and reserve.open == len(reserve.idle) > 0
    fired: list[str] = []

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        caller = frame.f_back
        if (
            event == "call"
            and not fired
            and caller is not None
            and caller.f_code is _sync.send._exchange.__code__
            and caller.f_locals.get("sound") is True
        ):
            fired.append(frame.f_code.co_name)
            raise AlarmTimeout
        return None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        with pytest.raises(AlarmTimeout):
            lock.acquire()
    finally:
        sys.settrace(previous)
    assert fired
    assert reserve.open == len(reserve.idle), "no connection of the quick path was lost"
    assert r.get("tenure:{quick-give-back}") is None  # (the grant was given back)
    client.close()


def test_threads_sharing_a_client_never_overlap_and_keep_few_connections(
    url: str, r: redis.Redis
) -> None:
    """12 threads cycling one lock through one client: no two holders, fences
    increasing in the order of the holds, and the client's connections stay
    few (the quick path's are bounded; the other calls use the pool)."""
    client = redis.Redis.from_url(url, client_name="quick-threads")
    lock = Lock(client, "quick-threads", ttl=10)
    holder: list[str] = []
    fences: list[int] = []
    overlaps: list[str] = []
    mutex = threading.Lock()
    deadline = time.monotonic() + 2.0

    def work(n: int) -> None:
        while time.monotonic() < deadline:
            lease = lock.acquire(timeout=10)
            assert lease is not None
            with mutex:
                if holder:
                    overlaps.append(f"{n} entered while {holder[0]} held")
                holder.append(str(n))
                fences.append(lease.fence)
            with mutex:
                holder.remove(str(n))
            lease.release()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not overlaps
    assert len(fences) > 12 and fences == sorted(fences) and len(set(fences)) == len(fences)
    # scripts: at most 8 kept + the pool's; plus the hub's pub/sub connection
    assert len(_client_ids(r, "quick-threads")) <= 8 + 12 + 1


def test_a_forked_child_uses_connections_of_its_own(url: str, r: redis.Redis) -> None:
    """After a fork the child's calls never share the parent's quick
    connection (a shared socket would mix the two processes' replies)."""
    client = redis.Redis.from_url(url)
    lock = Lock(client, "quick-fork-parent", ttl=10)
    lease = lock.acquire()
    assert lease is not None
    lease.release()  # the parent's quick connection is now idle, connected
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            child_lock = Lock(client, "quick-fork-child", ttl=10)
            for _ in range(200):
                got = child_lock.acquire()
                assert got is not None
                got.release()
            code = 0
        finally:
            os._exit(code)
    for _ in range(200):
        got = lock.acquire()
        assert got is not None
        got.release()
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert not lock.locked() and r.get("tenure:{quick-fork-child}") is None


def test_asyncio_clients_keep_their_quick_connections_per_client(url: str) -> None:
    """The asyncio twin: cycles and a killed connection, as in sync."""
    asyncio.run(_asyncio_cycles(url))


async def _asyncio_cycles(url: str) -> None:
    client = redis.asyncio.Redis.from_url(url, client_name="quick-async")
    try:
        lock = AsyncLock(client, "quick-async", ttl=10)
        first = await lock.acquire()
        assert first is not None
        await first.release()
        for c in await client.client_list():
            if c.get("name") == "quick-async":
                await client.client_kill_filter(_id=str(c["id"]))
        second = await lock.acquire()
        assert second is not None and second.fence > first.fence
        await second.release()
        assert not await lock.locked()
    finally:
        await client.aclose()


class _Stalls(redis.asyncio.Connection):
    """Waits a second before reading the next reply, once armed: a task
    cancelled meanwhile leaves the reply unread on the socket."""

    armed = False

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if _Stalls.armed:
            _Stalls.armed = False
            await asyncio.sleep(1)
        return await super().read_response(*args, **kwargs)


def test_a_cancelled_asyncio_call_never_leaves_its_reply_to_the_next(url: str) -> None:
    """An asyncio acquire cancelled while its reply is due: the calls after it
    read their own replies (the connection was closed), the lock ends free."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        client.connection_pool.connection_class = _Stalls
        check = redis.asyncio.Redis.from_url(url)
        try:
            lock = AsyncLock(client, "quick-cancelled", ttl=10)
            warm = await lock.acquire()
            assert warm is not None
            await warm.release()
            _Stalls.armed = True
            task = asyncio.ensure_future(lock.acquire())
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            lease = await lock.acquire(blocking=False)
            assert lease is not None and lease.fence > warm.fence
            assert await check.get("tenure:{quick-cancelled}") == lease.owner.encode()
            await lease.release()
            assert not await lock.locked()
            assert await check.get("tenure:{quick-cancelled}") is None
        finally:
            await client.aclose()
            await check.aclose()

    asyncio.run(main())


def test_asyncio_tasks_beyond_the_kept_connections_wait_for_them(url: str) -> None:
    """100 tasks on a client whose pool holds 8 connections: tenure's calls
    wait for the quick path's 2 (a quarter) instead of taking more from the
    pool, so nothing runs out of connections; no two holders, fences increase.
    (Before the wait, the calls beyond the kept ones took pool connections, and
    100 tasks on redis-py's default pool of 100 raised MaxConnectionsError.)"""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url, max_connections=8)
        try:
            lock = AsyncLock(client, "quick-tasks", ttl=10)
            holders: list[int] = []
            fences: list[int] = []
            overlaps = 0

            async def task(n: int) -> None:
                nonlocal overlaps
                for _ in range(3):
                    lease = await lock.acquire(timeout=30)
                    assert lease is not None
                    overlaps += bool(holders)
                    holders.append(n)
                    fences.append(lease.fence)
                    await asyncio.sleep(0)
                    holders.remove(n)
                    await lease.release()

            await asyncio.gather(*(task(n) for n in range(100)))
            assert overlaps == 0
            assert len(fences) == 300 and fences == sorted(set(fences))
        finally:
            await client.aclose()

    asyncio.run(main())


def test_an_asyncio_waiter_cancelled_as_it_is_woken_passes_the_wake_on(url: str) -> None:
    """All the quick path's connections busy, two tasks waiting for one: the
    first is cancelled just after a connection given back woke it, before it
    ran. The connection stays with the reserve and the second task gets it at
    once (not after QUICK_PATIENCE); nothing is counted open that is not."""
    from tenure._drivers import _async
    from tenure._drivers._async.reserve import _give

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url, max_connections=8)
        try:
            reserve = _async._state(client).reserve
            assert reserve is not None and reserve.most == 2
            held = [await _async._take(client, reserve, True) for _ in range(2)]
            first = asyncio.create_task(_async._take(client, reserve, True))
            await asyncio.sleep(0.05)
            second = asyncio.create_task(_async._take(client, reserve, True))
            await asyncio.sleep(0.05)
            assert len(reserve.waiting) == 2
            started = time.monotonic()
            _give(reserve, held.pop())  # wakes the first waiter...
            first.cancel()  # ...which is cancelled before it runs
            conn = await asyncio.wait_for(second, timeout=_async.QUICK_PATIENCE / 2)
            assert time.monotonic() - started < _async.QUICK_PATIENCE / 2
            with pytest.raises(asyncio.CancelledError):
                await first
            assert reserve.waiting == [] and reserve.idle == []
            for each in (conn, *held):
                _give(reserve, each)
            assert reserve.open == len(reserve.idle) == 2
        finally:
            await client.aclose()

    asyncio.run(main())


def test_threads_beyond_the_kept_connections_wait_for_them(url: str) -> None:
    """24 threads on a client whose pool holds 12 connections (the quick path
    keeps 3): every call gets a connection, none overlaps, fences increase."""
    client = redis.Redis.from_url(url, max_connections=12)
    assert _clients.quick_connections(client) == 3
    lock = Lock(client, "quick-few", ttl=10)
    fences: list[int] = []
    errors: list[BaseException] = []
    busy = threading.Lock()

    def work() -> None:
        try:
            for _ in range(10):
                lease = lock.acquire(timeout=30)
                assert lease is not None
                assert busy.acquire(blocking=False), "two holders"
                fences.append(lease.fence)
                busy.release()
                lease.release()
        except BaseException as exc:  # (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert len(fences) == 240 and fences == sorted(set(fences))


def test_clients_made_per_request_on_a_shared_pool_share_its_kept_connections(
    url: str,
) -> None:
    """A client made per request on one shared pool, then dropped (a common web
    pattern): the quick path's connections are the pool's, shared by every
    client, so dropping clients loses none of the pool's slots (kept per
    client, each dropped client took one for good: a pool of 40 ran out
    after 40 requests)."""
    import gc

    pool = redis.ConnectionPool.from_url(url, max_connections=40)
    fences: list[int] = []
    for _ in range(60):
        client = redis.Redis(connection_pool=pool)
        lease = Lock(client, "per-request", ttl=10).acquire()
        assert lease is not None
        fences.append(lease.fence)
        lease.release()
        del client, lease
        gc.collect()
    assert fences == sorted(set(fences))
    held = [pool.get_connection() for _ in range(30)]
    for conn in held:
        pool.release(conn)


def test_clients_made_per_request_on_a_shared_pool_share_its_wake_hub(url: str) -> None:
    """Clients made per request on one shared pool, each waiting for a lock a
    release hands it, then dropped: they share the pool's wake hub (one
    pub/sub connection) and watchdog. (Each had a hub of its own, whose
    pub/sub connection, a slot of the pool, stayed subscribed a second after
    its wait: a pool of 16 ran out, ``MaxConnectionsError``, after about 12
    such requests within a second.)"""
    import gc

    pool = redis.ConnectionPool.from_url(url, max_connections=16)
    holder = redis.Redis.from_url(url)
    admin = redis.Redis.from_url(url)
    name = "per-request-wait"

    def hold(taken: threading.Event) -> None:
        lease = Lock(holder, name, ttl=10).acquire()
        assert lease is not None
        taken.set()
        time.sleep(0.02)
        lease.release()  # hands it to the waiter

    for _ in range(24):
        taken = threading.Event()
        thread = threading.Thread(target=hold, args=(taken,))
        thread.start()
        assert taken.wait(5)
        client = redis.Redis(connection_pool=pool)
        lease = Lock(client, name, ttl=10).acquire(timeout=5)
        assert lease is not None
        lease.release()
        thread.join()
        del client, lease
        gc.collect()
    subscribers = [c for c in admin.client_list() if int(c.get("sub", 0))]
    assert len(subscribers) <= 2, subscribers  # the shared pool's hub, the holder's
    holder.close()
    admin.close()
    pool.disconnect()


def test_asyncio_clients_made_per_request_share_the_pools_kept_connections(url: str) -> None:
    """The asyncio twin: 60 clients made and dropped on a pool of 40."""

    async def main() -> None:
        import gc

        pool = redis.asyncio.ConnectionPool.from_url(url, max_connections=40)
        for _ in range(60):
            client = redis.asyncio.Redis(connection_pool=pool)
            lease = await AsyncLock(client, "per-request-async", ttl=10).acquire()
            assert lease is not None
            await lease.release()
            del client, lease
            gc.collect()
        held = [await pool.get_connection() for _ in range(30)]  # type: ignore[no-untyped-call]
        for conn in held:
            await pool.release(conn)
        await pool.disconnect()

    asyncio.run(main())


def test_an_asyncio_client_used_by_one_event_loop_after_another_keeps_few(url: str) -> None:
    """One asyncio client used by 8 ``asyncio.run`` calls in turn (each closes
    it at its end, as redis-py asks), its pool of 8: every run's Lock cycle
    and its user's command succeed, and the quick path keeps at most 2
    connections checked out (each loop's once stayed checked out for good:
    the pool ran out at the 8th run)."""
    client = redis.asyncio.Redis.from_url(url, max_connections=8)

    async def run(n: int) -> None:
        lock = AsyncLock(client, "loops", ttl=10)
        async with lock as lease:
            assert await client.get("tenure:{loops}") == lease.owner.encode()
        await client.set("loops-user", n)
        await client.aclose()

    for n in range(8):
        asyncio.run(run(n))
    assert len(client.connection_pool._in_use_connections) <= 8 // 4


_PACK_INTERRUPTED = """
import signal
import redis
from tenure._drivers import _clients
from tenure._protocol import Eval
from tenure._scripts import LOCK_ACQUIRE
armed = False  # (a handler Python runs late, after the try, must not raise)
def interrupt(*_):
    if armed:
        raise KeyboardInterrupt
signal.signal(signal.SIGALRM, interrupt)
conn = redis.Redis().connection_pool.make_connection()
step = Eval(LOCK_ACQUIRE, ("k" * 1000,) * 20_000, (7,))  # hiredis copies 20 MB, then an int
interrupted = 0
for _ in range(20):
    try:
        try:
            armed = True
            signal.setitimer(signal.ITIMER_REAL, 0.001)
            _clients.packed_evalsha(conn, step)
        finally:
            armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except KeyboardInterrupt:
        interrupted += 1
print(interrupted)
"""


@pytest.mark.skipif(_clients._HIREDIS is None, reason="hiredis is not installed")
def test_a_signal_while_hiredis_packs_raises_in_python_not_a_crash() -> None:
    """A signal handler that raises (KeyboardInterrupt, a timeout alarm)
    while the quick path packs a script's arguments: the exception is raised
    and the process goes on. hiredis 3.5's pack_command formats an int with
    PyObject_Repr, which runs the pending handler and returns NULL, and then
    reads it: the process died of a segmentation fault (it did here, every
    time, before the quick path gave hiredis only str and bytes)."""
    done = subprocess.run(
        [sys.executable, "-c", _PACK_INTERRUPTED],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert int(done.stdout) > 0  # the handler did run inside some of the calls


_INTERRUPTED_CYCLES = """
import contextlib, json, random, signal, sys, time
import redis
from tenure import AlreadyHeldError, Lock
url, seconds, kind = sys.argv[1], float(sys.argv[2]), sys.argv[3]
if kind == "pool":
    client = redis.Redis.from_url(url)
else:
    client = redis.Redis.from_url(url, single_connection_client=True, protocol=2)
lock = Lock(client, "interrupted-cycles", ttl=1)
armed = False  # (a handler Python runs late, after the try, must not raise)
def interrupt(*_):
    if armed:
        raise KeyboardInterrupt
signal.signal(signal.SIGALRM, interrupt)
counts = {"interrupted": 0, "cycles": 0}
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        try:
            armed = True
            # (mostly where a call connects again after the last interrupt)
            longest = 0.00015 if random.random() < 0.8 else 0.002
            signal.setitimer(signal.ITIMER_REAL, random.uniform(0.00005, longest))
            lease = lock.acquire(blocking=False)
            if lease is not None:
                lease.release()
                counts["cycles"] += 1
        finally:
            armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except KeyboardInterrupt:
        counts["interrupted"] += 1
    except AlreadyHeldError:  # (an interrupted release: held until its ttl)
        with contextlib.suppress(Exception):
            lock.release()
    except Exception as exc:  # (redis-py's own, see safety.md: counted)
        counts[type(exc).__name__] = counts.get(type(exc).__name__, 0) + 1
print(json.dumps(counts))
"""


@pytest.mark.skipif(_clients._HIREDIS is None, reason="hiredis is not installed")
@pytest.mark.parametrize("kind", ["pool", "single"])
def test_random_interrupts_through_acquire_and_release_never_crash(url: str, kind: str) -> None:
    """Random SIGALRM interrupts (KeyboardInterrupt) through Lock.acquire and
    release for a few seconds, with hiredis packing: the process goes on.
    Nothing tenure hands hiredis is a number (hiredis 3.5 runs the pending
    handler inside its repr of one and reads the NULL it returns): not the
    scripts' arguments on the ordinary path (``single``: a single-connection
    RESP2 client), nor the handshake (``HELLO 3``) of the quick path's
    connection, made again after each interrupt (``pool``). Before, ``single``
    died of SIGSEGV in 10 runs of 10, ``pool`` in 6 to 7 of 10 (the others:
    runs whose quick path had lost its kept connections to interrupts early,
    and then seldom connected again)."""
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_CYCLES, url, "4", kind],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    died = -done.returncode if done.returncode < 0 else None
    assert died is None, (signal.Signals(died).name, done.stderr[-2000:])
    assert done.returncode == 0, done.stderr[-2000:]
    counts = json.loads(done.stdout)
    assert counts["interrupted"] > 100, counts  # (interrupts did cut calls; cycles vary)


class _InterruptedTwice(redis.Connection):
    """Once armed: KeyboardInterrupt instead of reading the reply, and again
    in the close that follows (a second Ctrl-C, or an alarm, during clean-up)."""

    armed = 0

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if _InterruptedTwice.armed == 2:
            _InterruptedTwice.armed = 1
            raise KeyboardInterrupt
        return super().read_response(*args, **kwargs)

    def disconnect(self, *args: Any, **kwargs: Any) -> None:
        super().disconnect(*args, **kwargs)  # type: ignore[no-untyped-call]
        if _InterruptedTwice.armed == 1:
            _InterruptedTwice.armed = 0
            raise KeyboardInterrupt


def test_a_call_after_an_interrupted_clean_up_does_not_wait_forever(url: str) -> None:
    """KeyboardInterrupt while the reply is due, and again in the close: the
    interrupted acquire (its clean-up included) and the next acquire finish."""
    client = redis.Redis.from_url(url, max_connections=4)  # keeps 1
    client.connection_pool.connection_class = _InterruptedTwice
    lock = Lock(client, "quick-twice", ttl=1)
    warm = lock.acquire()
    assert warm is not None
    warm.release()
    done: list[object] = []

    def calls() -> None:
        _InterruptedTwice.armed = 2
        try:
            lock.acquire()
        except KeyboardInterrupt:
            done.append("interrupted")
        _InterruptedTwice.armed = 0
        done.append(lock.acquire(timeout=2))

    worker = threading.Thread(target=calls, daemon=True)
    worker.start()
    worker.join(6)  # the acquire's own timeout is 2 s; the lock's ttl 1 s
    assert len(done) == 2 and done[1] is not None, done


@pytest.mark.skipif(_clients._HIREDIS is None, reason="hiredis is not installed")
def test_a_pool_tenure_uses_never_hands_hiredis_a_number(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a client's first tenure call on, no connection of its pool hands
    hiredis a number to pack (hiredis runs a pending signal handler as it
    formats one, and crashes when the handler raises): not the handshake of
    the pool's first connection, made for tenure's first call (``HELLO 3``,
    ``SELECT 1``), nor of one made later, nor the program's own commands."""
    import hiredis

    packed: list[type] = []
    real = hiredis.pack_command

    def spy(args: Any) -> Any:
        packed.extend(type(a) for a in args)
        return real(args)

    monkeypatch.setattr(hiredis, "pack_command", spy)
    client = redis.Redis.from_url(url, db=1, protocol=3)
    lease = Lock(client, "numbers").acquire()
    assert lease is not None
    lease.release()
    client.connection_pool.disconnect()  # every connection makes its handshake again
    client.set("n", 5, px=60_000)
    assert client.incrbyfloat("n", 1.5) == 6.5
    assert packed, "hiredis packed nothing: the spy was not reached"
    assert int not in packed and float not in packed
    client.close()


@pytest.mark.parametrize("error", [KeyboardInterrupt, AlarmTimeout])
def test_a_handshake_cut_off_leaves_no_half_made_connection_in_the_pool(
    url: str, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    """From a client's first tenure call on, a new connection of its pool whose
    handshake is cut off (an interrupt as its reply parser is set up) is
    disconnected, not kept with its socket and no parser: the pool's next
    call, tenure's or the program's, connects it again (before: every later
    call on it failed with an AttributeError)."""
    import hiredis

    client = redis.Redis.from_url(url)
    lease = Lock(client, "handshake").acquire()
    assert lease is not None
    lease.release()
    real, cut = hiredis.Reader, list[bool]()

    def reader(**kwargs: Any) -> Any:
        if not cut:
            cut.append(True)
            raise error
        return real(**kwargs)

    monkeypatch.setattr(hiredis, "Reader", reader)
    client.connection_pool.disconnect()  # the next call makes a new connection
    with pytest.raises(error):
        client.ping()
    assert cut
    assert client.ping() is True
    lease = Lock(client, "handshake").acquire(timeout=2)
    assert lease is not None
    lease.release()
    client.close()
