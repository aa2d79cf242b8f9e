"""Redlock over five independent server processes: quorum, dead and paused
masters, a killed holder, contention across threads, processes and tasks."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import linecache
import multiprocessing
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from types import FrameType
from typing import Any

import pytest
import redis
import redis.asyncio
import valkey
import valkey.asyncio
import valkey.exceptions
from _interrupts import raise_once
from _not_utf8 import NOT_UTF8
from _workers import Hold, check_history, redlock_holder, redlock_worker

from tenure import (
    AlreadyHeldError,
    AsyncRedlock,
    InvalidArgument,
    Lock,
    NoQuorumError,
    NotOwnedError,
    Redlock,
    WrongTypeError,
    _ops,
)
from tenure._drivers import _fanout_shared
from tenure._drivers._async import fanout as _fanout
from tenure._drivers._hubbook import LINGER
from tenure._drivers._sync import fanout as _sync_fanout
from tenure._protocol import Command
from tenure._scripts import LOCK_ACQUIRE, REDLOCK_WAKE
from tenure._server import ServerProcess

pytestmark = pytest.mark.topology

SPAWN = multiprocessing.get_context("spawn")
N = 5


@pytest.fixture(scope="module")
def masters() -> Iterator[list[ServerProcess]]:
    """Five independent servers for the module (a test that stops one restarts it)."""
    servers: list[ServerProcess] = []
    try:
        for _ in range(N):
            servers.append(ServerProcess(os.environ.get("TENURE_SERVER") or None).start())
        yield servers
    finally:
        for s in servers:
            s.close()


@pytest.fixture
def clients(masters: list[ServerProcess]) -> Iterator[list[redis.Redis]]:
    """A client per master, every master running and flushed."""
    for s in masters:
        if not _up(s):
            s.start()
    out = [redis.Redis.from_url(s.url) for s in masters]
    for c in out:
        c.flushall()
    yield out
    for c in out:
        c.close()
    for s in masters:
        if not _up(s):
            s.start()


def _up(s: ServerProcess) -> bool:
    try:
        redis.Redis.from_url(s.url, socket_timeout=1).ping()
    except redis.exceptions.RedisError:
        return False
    return True


def _holders(clients: list[redis.Redis], name: str) -> list[object]:
    out: list[object] = []
    for c in clients:
        try:
            out.append(c.get(f"tenure:{{{name}}}"))
        except redis.exceptions.ConnectionError:
            out.append(None)
    return out


def test_arguments_are_checked(clients: list[redis.Redis], masters: list[ServerProcess]) -> None:
    for count in (1, 2, 4):
        with pytest.raises(InvalidArgument, match=f"not {count}"):
            Redlock(clients[:count], "a")
    with pytest.raises(InvalidArgument, match=r"clients\[0\] and clients\[2\]"):
        Redlock([clients[0], clients[1], clients[0]], "a")
    same_server = redis.Redis.from_url(masters[1].url)
    with pytest.raises(InvalidArgument, match="same master"):
        Redlock([clients[0], clients[1], same_server], "a")
    # one server in two dbs is one master: it must not count twice in a quorum
    kwargs = clients[1].connection_pool.connection_kwargs
    other_db = redis.Redis(host=kwargs["host"], port=kwargs["port"], db=1)
    with pytest.raises(InvalidArgument, match="same master"):
        Redlock([clients[0], clients[1], other_db], "a")
    with pytest.raises(InvalidArgument):
        Redlock(clients[:3], "a", master_timeout=-1)
    with pytest.raises(InvalidArgument):
        AsyncRedlock(clients[:3], "a")  # type: ignore[arg-type]  # sync clients


def test_every_master_holds_a_lock_with_the_same_token(clients: list[redis.Redis]) -> None:
    lock = Redlock(clients, "same", ttl=5)
    lease = lock.acquire()
    assert lease and lease.valid and lock.quorum == 3
    assert _holders(clients, "same") == [lease.owner.encode()] * N
    fences = [int(c.get("tenure:{same}:fence") or 0) for c in clients]
    assert lease.fence == max(fences)
    # each master shows an ordinary Lock of that name held by the token
    info = Lock(clients[2], "same").info()
    assert info.holder == lease.owner and info.ttl is not None and 4 < info.ttl <= 5
    assert lock.locked() and lock.owned()
    with pytest.raises(AlreadyHeldError):
        lock.acquire(blocking=False)
    lease.extend(8)
    assert all(4 < c.pttl("tenure:{same}") / 1000 <= 8 for c in clients)
    lease.release()
    assert _holders(clients, "same") == [None] * N
    assert not lock.locked()


def test_locked_counts_a_foreign_holder_not_utf8(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """Another program's token that is not UTF-8 on a quorum of masters: a
    holder to locked(), sync and asyncio, which reads it without failing."""
    for c in clients[:3]:
        c.set("tenure:{alien}", NOT_UTF8, px=30_000)
    assert Redlock(clients, "alien").locked()

    async def main() -> bool:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        try:
            return await AsyncRedlock(aclients, "alien").locked()
        finally:
            for c in aclients:
                await c.aclose()

    assert asyncio.run(main())
    assert [c.get("tenure:{alien}") for c in clients] == [NOT_UTF8] * 3 + [None] * (N - 3)


def _commands_run(client: redis.Redis) -> int:
    """Every command the server ran so far (scripts' own included), less INFO."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for name, v in stats.items() if name != "cmdstat_info")


def test_an_uncontended_cycle_is_one_round_per_master(
    clients: list[redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An uncontended acquire is one write to each master and a release one more
    (its script and a ZCARD, pipelined): no probe, no queue write, no
    subscription; each master runs what a Lock's cycle runs, plus that ZCARD."""
    writes: list[int] = []
    original = redis.connection.AbstractConnection.send_packed_command

    def counted(
        self: redis.connection.AbstractConnection, command: object, check_health: bool = True
    ) -> None:
        writes.append(1)
        original(self, command, check_health)  # type: ignore[no-untyped-call]

    red = Redlock(clients, "rounds", ttl=10)
    lock = Lock(clients[0], "rounds-lock", ttl=10)
    for _ in range(3):  # warm up: server probes, scripts, connections
        red.acquire().release()  # type: ignore[union-attr]
        lock.acquire().release()  # type: ignore[union-attr]
    cycles = 20
    before = [_commands_run(c) for c in clients]
    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
    for _ in range(cycles):
        lease = red.acquire()
        assert lease is not None
        assert len(writes) % (2 * N) == N  # the acquire: one write per master
        lease.release()
    red_writes = len(writes)
    monkeypatch.undo()
    per_master = [(_commands_run(c) - b) / cycles for c, b in zip(clients, before, strict=True)]
    before_lock = _commands_run(clients[0])
    for _ in range(cycles):
        lock.acquire().release()  # type: ignore[union-attr]
    lock_commands = (_commands_run(clients[0]) - before_lock) / cycles
    assert red_writes == cycles * 2 * N
    assert per_master == [lock_commands + 1] * N


def test_two_of_five_down_acquire_and_renew(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    masters[0].stop()
    masters[3].stop()
    lock = Redlock(clients, "two-down", ttl=1.0, auto_renew=True)
    started = time.monotonic()
    lease = lock.acquire(timeout=5)
    assert lease, "a quorum of 3 live masters grants the lock"
    assert time.monotonic() - started < 2
    time.sleep(1.6)  # past the ttl: only renewals on a quorum keep it
    assert lease.valid and not lease.lost.is_set()
    live = [clients[i] for i in (1, 2, 4)]
    assert all(c.get("tenure:{two-down}") == lease.owner.encode() for c in live)
    assert all(c.pttl("tenure:{two-down}") > 300 for c in live)
    other = Redlock(clients, "two-down", ttl=1.0)
    assert other.acquire(blocking=False) is None  # still exclusive
    lease.release()
    assert _holders(live, "two-down") == [None] * 3


def test_three_of_five_down_is_a_clear_error_and_leaves_nothing(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    for i in (0, 1, 3):
        masters[i].stop()
    lock = Redlock(clients, "three-down", ttl=2.0, master_timeout=0.2)
    started = time.monotonic()
    with pytest.raises(NoQuorumError, match=r"3 of 5 masters, only 2 answered"):
        lock.acquire(timeout=1.5)
    assert time.monotonic() - started < 1.5
    assert _holders([clients[2], clients[4]], "three-down") == [None, None]


def test_stray_keys_on_a_minority_are_outvoted_on_a_majority_raised(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """A lock key holding another type on 2 masters of 5 counts as 2 masters
    not answering: the other 3 grant the lock; with a third master paused,
    too few answered (NoQuorumError, naming the wrong type); on 3 masters,
    WrongTypeError. Nothing is left held."""
    lock = Redlock(clients, "stray", ttl=2.0, master_timeout=0.2)
    key = "tenure:{stray}"
    for c in clients[:2]:
        c.rpush(key, "x")
    lease = lock.acquire(blocking=False)
    assert lease is not None
    assert _holders(clients[2:], "stray") == [lease.owner.encode()] * 3
    lease.release()
    masters[2].pause()
    try:
        with pytest.raises(NoQuorumError, match="WrongTypeError") as caught:
            lock.acquire(blocking=False)
        assert "only 2 answered" in str(caught.value), caught.value
    finally:
        masters[2].resume()
    # (another name: the paused master runs the round it missed, then the
    # give-back; a round while its connection still waits on those does not
    # reach it, which is too few answers again)
    for c in clients[:3]:
        c.rpush("tenure:{stray3}", "x")
    third = Redlock(clients, "stray3", ttl=2.0, master_timeout=0.2)
    deadline = time.monotonic() + 5
    while True:
        try:
            third.acquire(blocking=False)
        except NoQuorumError:
            assert time.monotonic() < deadline, "the resumed master never answered"
            time.sleep(0.1)
            continue
        except WrongTypeError as exc:
            assert "stray3" in str(exc)
            break
        raise AssertionError("granted on 2 masters of 5")
    assert _holders(clients[3:], "stray3") == [None, None]
    assert all(c.lrange("tenure:{stray3}", 0, -1) == [b"x"] for c in clients[:3])


def test_losing_the_quorum_fires_the_lost_signal(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    lost: list[str] = []
    lock = Redlock(clients, "lose", ttl=0.6, auto_renew=True, on_lost=lambda _: lost.append("x"))
    lease = lock.acquire()
    assert lease
    for i in (0, 1, 2):
        masters[i].stop()
    assert lease.lost.wait(2.0), "no quorum can renew it: lost by its deadline"
    assert lost == ["x"] and not lease.valid


def test_a_paused_master_does_not_stall_acquire(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    lock = Redlock(clients, "paused", ttl=5, master_timeout=0.2)
    assert lock.acquire(blocking=False) is not None  # every connection made, server probed
    lock.release()
    masters[1].pause()
    try:
        started = time.monotonic()
        lease = lock.acquire(timeout=1)
        took = time.monotonic() - started
        assert lease, "4 of 5 masters grant it"
        assert took < 0.2 + 0.5, f"acquire took {took:.3f} s past the per-master timeout"
        started = time.monotonic()
        lease.release()
        assert time.monotonic() - started < 0.2 + 0.5
    finally:
        masters[1].resume()


def test_renewals_go_on_while_a_master_is_paused(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    lock = Redlock(clients, "renew-paused", ttl=1.0, auto_renew=True)
    lease = lock.acquire()
    assert lease
    masters[2].pause()
    try:
        time.sleep(2.0)  # two ttls: only renewals on the 4 others keep it
        assert lease.valid and not lease.lost.is_set()
        live = [c for i, c in enumerate(clients) if i != 2]
        assert all(c.pttl("tenure:{renew-paused}") > 300 for c in live)
        lease.release()
    finally:
        masters[2].resume()


def test_a_killed_holder_frees_the_lock_after_its_ttl(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    urls = [s.url for s in masters]
    acquired = SPAWN.Event()
    holder = SPAWN.Process(target=redlock_holder, args=(urls, "killed", 1.0, acquired))
    holder.start()
    try:
        assert acquired.wait(20)
        killed_at = time.monotonic()
        os.kill(holder.pid or 0, signal.SIGKILL)
        lock = Redlock(clients, "killed", ttl=2)
        lease = lock.acquire(timeout=4)
        waited = time.monotonic() - killed_at
        assert lease, "free again once the dead holder's ttl ran out"
        assert waited < 1.0 + 1.5
        lease.release()
    finally:
        holder.join(5)


def test_a_release_wakes_a_waiter_without_polling(clients: list[redis.Redis]) -> None:
    lock = Redlock(clients, "wake", ttl=10)
    lease = lock.acquire()
    got: list[float] = []

    def wait() -> None:
        waited = lock.acquire(timeout=5)
        assert waited
        got.append(time.monotonic())
        waited.release()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)
    released_at = time.monotonic()
    assert lease
    lease.release()
    waiter.join(5)
    assert got and got[0] - released_at < 1.0, "woken by the release, not by the 10 s ttl"


def test_a_release_wakes_few_waiters_however_many_wait(clients: list[redis.Redis]) -> None:
    waiters = 8
    lock = Redlock(clients, "flat", ttl=10)
    lease = lock.acquire()
    assert lease
    got: list[float] = []
    done = threading.Event()

    def wait() -> None:
        waited = lock.acquire(timeout=10)
        if waited:
            got.append(time.monotonic())
            done.wait(10)
            waited.release()

    threads = [threading.Thread(target=wait) for _ in range(waiters)]
    deadline = time.monotonic() + 10
    for k, t in enumerate(threads, 1):  # one by one: the same queue order on every master
        t.start()
        while any(c.zcard("tenure:{flat}:quorum") < k for c in clients):
            assert time.monotonic() < deadline, "the waiters never all queued"
            time.sleep(0.005)
    for c in clients:
        c.script_load(REDLOCK_WAKE.source)  # no NOSCRIPT round in the count
        c.config_resetstat()
    lease.release()
    while not got:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.2)
    calls = [c.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0) for c in clients]
    done.set()
    for t in threads:
        t.join(15)
    # the release's lock_release and redlock_wake, then one attempt per wake
    # message: the head of every queue is the same waiter, but a master whose
    # wake comes after that waiter took the lock (and left its queue) wakes the
    # next one. At most one wake per master: 2 + 5, however many wait (a wake
    # of every waiter would be at least 2 + 8)
    assert max(calls) <= 2 + N, calls
    assert len(got) == waiters


def test_threads_never_overlap_and_fences_increase(clients: list[redis.Redis]) -> None:
    lock = Redlock(clients, "threads", ttl=5)
    holds: list[Hold] = []

    def work() -> None:
        for _ in range(6):
            with lock(timeout=30) as lease:
                acquired = time.monotonic()
                value = int(clients[0].get("threads:counter") or 0)
                time.sleep(0.001)
                clients[0].set("threads:counter", value + 1)
                holds.append((acquired, time.monotonic(), lease.fence))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(holds) == 24
    check_history(holds)
    assert int(clients[0].get("threads:counter") or 0) == 24
    assert _holders(clients, "threads") == [None] * N
    assert all(c.zcard("tenure:{threads}:quorum") == 0 for c in clients)


def test_processes_never_overlap_and_fences_increase(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    urls = [s.url for s in masters]
    manager = SPAWN.Manager()
    start = manager.Barrier(3)
    with ProcessPoolExecutor(3, mp_context=SPAWN) as pool:
        futures = [pool.submit(redlock_worker, urls, "procs", 10, start) for _ in range(3)]
        holds = [h for f in futures for h in f.result(timeout=60)]
    manager.shutdown()
    assert len(holds) == 30
    check_history(holds)
    assert int(clients[0].get("procs:counter") or 0) == 30


def test_asyncio_tasks_never_overlap(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    async def main() -> list[Hold]:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        # (a per-master timeout a loaded CI machine's stalls can't reach: the
        # default, 0.25 s for this ttl, once timed a release out on all five)
        lock = AsyncRedlock(aclients, "tasks", ttl=5, master_timeout=2.0)
        holds: list[Hold] = []

        async def work() -> None:
            for _ in range(5):
                async with lock(timeout=30) as lease:
                    acquired = time.monotonic()
                    await asyncio.sleep(0.001)
                    holds.append((acquired, time.monotonic(), lease.fence))

        await asyncio.gather(*(work() for _ in range(5)))
        lease = await lock.acquire()
        assert lease and await lock.owned()
        await lease.extend(3)
        await lease.release()
        for c in aclients:
            await c.aclose()
        return holds

    holds = asyncio.run(main())
    assert len(holds) == 25
    check_history(holds)
    assert _holders(clients, "tasks") == [None] * N


#: The lease of the prompt-wake tests, seconds: a waiter that misses its wake
#: waits for the holder's lease to run out, so a lost wake shows as a wait of
#: about this long (the acquire gives up at half of it).
WAKE_TTL = 10.0
#: The longest wait of one acquire in those tests, and of the whole run,
#: seconds: far below the ttl, far above a loaded machine's stalls.
WAKE_WAIT, WAKE_RUN = 2.5, 4.0


def _check_prompt(holds: list[Hold], waits: list[float], took: float, count: int) -> None:
    assert len(holds) == count
    check_history(holds)
    assert max(waits) < WAKE_WAIT, f"an acquire waited {max(waits):.2f} s (lost wake?)"
    assert took < WAKE_RUN, f"{count} short sections took {took:.2f} s"


def test_waiting_threads_are_woken_promptly(clients: list[redis.Redis]) -> None:
    """Every release wakes a waiter that then tries at once: no waiter waits
    for the holder's lease (the ttl) to run out, however the votes split."""
    lock = Redlock(clients, "prompt", ttl=WAKE_TTL)
    holds: list[Hold] = []
    waits: list[float] = []

    def work() -> None:
        for _ in range(5):
            asked = time.monotonic()
            lease = lock.acquire(timeout=WAKE_TTL / 2)
            assert lease, "not taken within half the ttl"
            acquired = time.monotonic()
            waits.append(acquired - asked)
            time.sleep(0.001)
            holds.append((acquired, time.monotonic(), lease.fence))
            lease.release()

    started = time.monotonic()
    threads = [threading.Thread(target=work) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    _check_prompt(holds, waits, time.monotonic() - started, 25)


def test_waiting_tasks_are_woken_promptly(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """The asyncio test of the same, on fresh clients: the tasks that found the
    lock busy at once subscribe at once on the clients' new wake hubs. (Each
    hub's first concurrent SUBSCRIBEs went to connections nobody read: their
    waiters' wakes were lost while the server counted them heard, so no one
    else was woken either, and they slept until the holder's lease ran out.)"""

    async def main() -> tuple[list[Hold], list[float], float]:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        lock = AsyncRedlock(aclients, "aprompt", ttl=WAKE_TTL)
        holds: list[Hold] = []
        waits: list[float] = []

        async def work() -> None:
            for _ in range(5):
                asked = time.monotonic()
                lease = await lock.acquire(timeout=WAKE_TTL / 2)
                assert lease, "not taken within half the ttl"
                acquired = time.monotonic()
                waits.append(acquired - asked)
                await asyncio.sleep(0.001)
                holds.append((acquired, time.monotonic(), lease.fence))
                await lease.release()

        started = time.monotonic()
        await asyncio.gather(*(work() for _ in range(5)))
        took = time.monotonic() - started
        for c in aclients:
            await c.aclose()
        return holds, waits, took

    holds, waits, took = asyncio.run(main())
    _check_prompt(holds, waits, took, 25)
    assert _holders(clients, "aprompt") == [None] * N


def _queued(clients: list[redis.Redis], name: str, count: int) -> None:
    """Wait until ``count`` Redlock waiters are queued on every master."""
    deadline = time.monotonic() + 5
    while any(c.zcard(f"tenure:{{{name}}}:quorum") < count for c in clients):
        assert time.monotonic() < deadline, f"{count} waiters never queued"
        time.sleep(0.005)


def _is_leave(steps: Any) -> bool:
    return isinstance(steps[0], Command) and steps[0].args[0] == "ZREM"


def test_a_waiter_woken_as_it_gives_up_passes_the_wake_on(clients: list[redis.Redis]) -> None:
    """The first waiter times out (its last attempt found the lock held), and
    the holder releases just before it leaves the queues: the release wakes
    it, the head, and it passes the wake on to the next waiter, which does not
    wait for the lease to run out."""
    holder = Redlock(clients, "quit", ttl=WAKE_TTL).acquire()
    assert holder
    quitter = Redlock(clients, "quit", ttl=WAKE_TTL)
    released: list[float] = []
    send_on = quitter._send_on

    def leave_after_a_release(masters: Any, steps: Any, enough: Any = None, **kw: Any) -> Any:
        if _is_leave(steps) and not released:
            holder.release()
            released.append(time.monotonic())
            time.sleep(0.05)  # the wake reaches the quitter's hub
        return send_on(masters, steps, enough, **kw)

    quitter._send_on = leave_after_a_release  # type: ignore[method-assign]
    got: list[float] = []
    quits = threading.Thread(target=lambda: quitter.acquire(timeout=1.0))
    quits.start()
    _queued(clients, "quit", 1)

    def wait() -> None:
        lease = Redlock(clients, "quit", ttl=WAKE_TTL).acquire(timeout=WAKE_TTL / 2)
        if lease:
            got.append(time.monotonic())
            lease.release()

    waiter = threading.Thread(target=wait)
    waiter.start()
    _queued(clients, "quit", 2)
    quits.join(5)
    waiter.join(10)
    assert released and got, "the waiter never got the lock"
    assert got[0] - released[0] < WAKE_WAIT, f"woken {got[0] - released[0]:.2f} s after"


def test_a_task_woken_as_it_gives_up_passes_the_wake_on(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """The asyncio test of the same."""

    async def main() -> float:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        holder = await AsyncRedlock(aclients, "aquit", ttl=WAKE_TTL).acquire()
        assert holder
        quitter = AsyncRedlock(aclients, "aquit", ttl=WAKE_TTL)
        released: list[float] = []
        send_on = quitter._send_on

        async def leave_after_a_release(
            masters: Any, steps: Any, enough: Any = None, **kw: Any
        ) -> Any:
            if _is_leave(steps) and not released:
                await holder.release()
                released.append(time.monotonic())
                await asyncio.sleep(0.05)  # the wake reaches the quitter's hub
            return await send_on(masters, steps, enough, **kw)

        quitter._send_on = leave_after_a_release  # type: ignore[method-assign]
        quits = asyncio.create_task(quitter.acquire(timeout=1.0))
        while any(c.zcard("tenure:{aquit}:quorum") < 1 for c in clients):
            await asyncio.sleep(0.005)
        waiter = asyncio.create_task(
            AsyncRedlock(aclients, "aquit", ttl=WAKE_TTL).acquire(timeout=WAKE_TTL / 2)
        )
        while any(c.zcard("tenure:{aquit}:quorum") < 2 for c in clients):
            await asyncio.sleep(0.005)
        assert await quits is None
        lease = await waiter
        got = time.monotonic()
        assert released and lease, "the waiter never got the lock"
        await lease.release()
        for c in aclients:
            await c.aclose()
        return got - released[0]

    late = asyncio.run(main())
    assert late < WAKE_WAIT, f"woken {late:.2f} s after the release"


def _wake_channels(clients: list[redis.Redis], name: str) -> list[int]:
    """How many of the lock's wake channels each master has subscribed."""
    return [len(c.pubsub_channels(f"tenure:{{{name}}}:wake:*")) for c in clients]


def _unsubscribed(clients: list[redis.Redis], name: str) -> list[int]:
    """The wake channels left once the hubs' lingering channels had their time."""
    deadline = time.monotonic() + 3 * LINGER + 2
    while any(_wake_channels(clients, name)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _wake_channels(clients, name)


def test_an_interrupt_as_a_waiter_leaves_the_queues_still_stops_its_listening(
    clients: list[redis.Redis],
) -> None:
    """KeyboardInterrupt while a waiter that gave up leaves the queues: it still
    stops listening, so its wake channel is unsubscribed on every master once
    it has lingered (before, the give-up's clean-up skipped it: the channel
    stayed subscribed on every master's hub for good)."""
    holder = Redlock(clients, "quit-cut", ttl=WAKE_TTL).acquire()
    assert holder
    quitter = Redlock(clients, "quit-cut", ttl=WAKE_TTL)
    send_on = quitter._send_on

    def interrupted_leave(masters: Any, steps: Any, enough: Any = None, **kw: Any) -> Any:
        if _is_leave(steps):
            raise KeyboardInterrupt
        return send_on(masters, steps, enough, **kw)

    quitter._send_on = interrupted_leave  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        quitter.acquire(timeout=0.3)
    assert _unsubscribed(clients, "quit-cut") == [0] * N
    holder.release()


def test_a_cancel_as_a_task_leaves_the_queues_still_stops_its_listening(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """The asyncio test of the same: the task is cancelled during its give-up's
    leave round (an outer timeout that ends with the acquire's own)."""

    async def main() -> None:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        holder = await AsyncRedlock(aclients, "aquit-cut", ttl=WAKE_TTL).acquire()
        assert holder
        quitter = AsyncRedlock(aclients, "aquit-cut", ttl=WAKE_TTL)
        send_on = quitter._send_on
        leaving = asyncio.Event()

        async def slow_leave(masters: Any, steps: Any, enough: Any = None, **kw: Any) -> Any:
            if _is_leave(steps):
                leaving.set()
                await asyncio.sleep(1.0)
            return await send_on(masters, steps, enough, **kw)

        quitter._send_on = slow_leave  # type: ignore[method-assign]
        quits = asyncio.create_task(quitter.acquire(timeout=0.3))
        await leaving.wait()
        quits.cancel()
        with pytest.raises(asyncio.CancelledError):
            await quits
        left = await asyncio.to_thread(_unsubscribed, clients, "aquit-cut")
        assert left == [0] * N
        await holder.release()
        for c in aclients:
            await c.aclose()

    asyncio.run(main())


def test_an_interrupt_while_the_listens_are_confirmed_leaves_nothing_listening(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """KeyboardInterrupt while a waiter's wake listens wait for their
    confirmations (one master paused: its confirmation does not come): every
    listen is stopped once done. (Before, the listens went on in the worker
    threads, and the wake channel stayed subscribed on every master's hub for
    good.)"""
    holder = Redlock(clients, "cut-listen", ttl=WAKE_TTL).acquire()
    assert holder
    waiter = Redlock(clients, "cut-listen", ttl=WAKE_TTL, master_timeout=1.5)

    def interrupt_in_listen_each(signum: int, frame: Any) -> None:
        while frame is not None:
            if frame.f_code.co_name == "listen_each":
                raise KeyboardInterrupt
            frame = frame.f_back
        signal.setitimer(signal.ITIMER_REAL, 0.01)  # not there yet

    before = signal.signal(signal.SIGALRM, interrupt_in_listen_each)
    masters[4].pause()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.01)
        with pytest.raises(KeyboardInterrupt):
            waiter.acquire(timeout=5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
        masters[4].resume()
    assert _unsubscribed(clients, "cut-listen") == [0] * N
    holder.release()


def test_a_task_cancelled_while_its_listens_are_confirmed_leaves_nothing_listening(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """A task cancelled while its wake listens wait for their confirmations (one
    master paused: its confirmation does not come) stops every listen: those
    confirmed and the one still waiting. (Before, the confirmed ones were lost
    with the cancelled gather and the waiting one was never counted out: the
    wake channel stayed subscribed on every master's hub for good.)"""

    async def main() -> list[int]:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        holder = await AsyncRedlock(aclients, "acut-listen", ttl=WAKE_TTL).acquire()
        assert holder
        # the hubs' connections are made (and kept open by a listen of their own)
        kept = await _fanout.listen_each(aclients, "tenure:{acut-listen}:kept", asyncio.Event(), 2)
        assert all(stop is not None for stop in kept)
        waiter = AsyncRedlock(aclients, "acut-listen", ttl=WAKE_TTL, master_timeout=1.5)
        masters[4].pause()
        try:
            task = asyncio.create_task(waiter.acquire(timeout=5))
            deadline = time.monotonic() + 5
            while _wake_channels(clients[:4], "acut-listen") != [1] * 4:
                assert time.monotonic() < deadline, "the waiter never listened"
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            masters[4].resume()
        for stop in kept:
            assert stop is not None
            stop()
        left = await asyncio.to_thread(_unsubscribed, clients, "acut-listen")
        await holder.release()
        for c in aclients:
            await c.aclose()
        return left

    assert asyncio.run(main()) == [0] * N


def test_asyncio_paused_master_and_quorum_loss(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    async def main() -> None:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        lock = AsyncRedlock(aclients, "apaused", ttl=5, master_timeout=0.2)
        lease = await lock.acquire(blocking=False)
        assert lease
        await lease.release()
        masters[4].pause()
        try:
            started = time.monotonic()
            lease = await lock.acquire(timeout=1)
            assert lease and time.monotonic() - started < 0.7
            await lease.release()
        finally:
            masters[4].resume()
        # (the paused master may still hold that lease: the acquire it got while
        # paused ran on resuming, after the release; it ends by its ttl)
        # renewals go on while a master is paused
        lock = AsyncRedlock(aclients, "arenew", ttl=1.0, auto_renew=True, master_timeout=0.2)
        lease = await lock.acquire()
        assert lease
        masters[3].pause()
        try:
            await asyncio.sleep(2.0)
            assert lease.valid and not lease.lost.is_set()
            await lease.release()
        finally:
            masters[3].resume()
        for i in (0, 1, 2):
            masters[i].stop()
        lock = AsyncRedlock(aclients, "aquorum", ttl=5, master_timeout=0.2)
        with pytest.raises(NoQuorumError):
            await lock.acquire(timeout=1)
        for c in aclients:
            await c.aclose()

    asyncio.run(main())
    assert _holders([clients[3], clients[4]], "aquorum") == [None, None]


def test_a_forked_child_takes_a_redlock_at_once(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    # the parent's worker threads (idle after its rounds) do not exist in a
    # forked child: its first rounds must not be handed to them
    lock = Redlock(clients, "forked", ttl=5, master_timeout=0.5)
    masters[1].pause()  # a round that times out: a suspect master, a worker thread stuck
    try:
        lease = lock.acquire(blocking=False)
        assert lease
        lease.release()
    finally:
        masters[1].resume()
    fork = multiprocessing.get_context("fork")
    result = fork.Queue()

    def child() -> None:
        try:
            mine = Redlock(clients, "forked-child", ttl=5, master_timeout=0.5)
            got = mine.acquire(blocking=False)
            result.put(repr(got is not None and got.fence > 0))
            if got:
                got.release()
        except BaseException as exc:
            result.put(repr(exc))

    proc = fork.Process(target=child)
    proc.start()
    try:
        assert result.get(timeout=10) == "True"
    finally:
        proc.join(10)
    assert _holders(clients, "forked-child") == [None] * N


def test_too_few_answers_to_tell_is_no_quorum(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    lock = Redlock(clients, "tell", ttl=5, master_timeout=0.2)
    lease = lock.acquire()
    assert lease
    for c in clients[:2]:
        c.delete("tenure:{tell}")  # held on exactly 3: masters 2, 3 and 4
    masters[2].pause()
    try:
        # 2 hold it, 2 do not: the paused master decides, nobody can tell
        with pytest.raises(NoQuorumError, match="can't tell"):
            lock.locked()
        with pytest.raises(NoQuorumError, match="2 held it, 2 did not and 1 did not answer"):
            lease.extend()
    finally:
        masters[2].resume()
    time.sleep(0.3)  # the calls stuck on the paused master return (until then it fails at once)
    lease.release()
    for i in (0, 1, 3):
        masters[i].stop()
    with pytest.raises(NoQuorumError, match="2 of 5 masters answered"):
        lock.locked()


def test_a_dropped_redlock_is_not_kept_alive(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    # a Redlock per request (with Redlock(...): ...) must not pile up: its
    # watchdog (the value of its weak entry) held it through its renewal method
    lock = Redlock(clients, "dropped", ttl=5)
    lease = lock.acquire()
    assert lease
    lease.release()
    ref = weakref.ref(lock)
    del lock, lease
    gc.collect()
    assert ref() is None
    # but a lease kept without its Redlock is still renewed: it outlives its
    # first deadline. (The ttl is not the subject: 3 s, so that renewals may
    # miss their quorum for 2 s, each master given its 1/20 of the ttl to
    # answer; a loaded machine's stalls lost a 0.5 s lease once, a 1.5 s one
    # once.)
    kept = Redlock(clients, "kept", ttl=3, auto_renew=True).acquire()
    assert kept
    first = kept.expires_at
    gc.collect()
    time.sleep(3.2)  # past its ttl
    assert kept.valid and not kept.lost.is_set(), kept.lost_reason
    assert kept.expires_at > first
    kept.release()

    async def main() -> weakref.ref[AsyncRedlock]:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        alock = AsyncRedlock(aclients, "adropped", ttl=5)
        alease = await alock.acquire()
        assert alease
        await alease.release()
        for c in aclients:
            await c.aclose()
        return weakref.ref(alock)

    aref = asyncio.run(main())
    gc.collect()
    assert aref() is None


def test_an_async_redlock_does_not_keep_its_ended_event_loops(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """Each ``asyncio.run`` takes and releases an ``AsyncRedlock``, and one
    takes a lease it still holds as its loop ends: the process's shared
    watchdogs of an ended loop are dropped as the next loop's are made, so
    the loops go (before, each loop stayed for good: the idle watchdog, the
    value of the loop's weak entry, refers to its loop; and a lease still
    held kept its watchdog, its Redlock and its clients)."""

    async def main(keep: bool) -> weakref.ref[asyncio.AbstractEventLoop]:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        lease = await AsyncRedlock(aclients, f"loops-{os.urandom(4).hex()}", ttl=5).acquire()
        assert lease
        if not keep:
            await lease.release()
        for c in aclients:
            await c.aclose()
        return weakref.ref(asyncio.get_running_loop())

    refs = [asyncio.run(main(keep=i == 0)) for i in range(6)]
    gc.collect()
    # (the last loop's watchdogs are dropped when another loop makes its own)
    assert [ref() is None for ref in refs[:-1]] == [True] * 5


def test_the_operator_tools_see_a_redlocks_waiters(clients: list[redis.Redis]) -> None:
    lock = Redlock(clients, "seen", ttl=10)
    lease = lock.acquire()
    assert lease
    waiter = threading.Thread(target=lambda: bool(lock.acquire(timeout=3)))
    waiter.start()
    try:
        deadline = time.monotonic() + 2
        while not clients[0].zcard("tenure:{seen}:quorum") and time.monotonic() < deadline:
            time.sleep(0.02)
        views, _ = _ops.inspect(clients[0], _ops.targets("seen", key=None, prefix="tenure:"))
        (view,) = views
        assert view.kind == "Lock" and view.held and view.fence > 0
        assert view.waiters == 1 and len(view.waiting) == 1
    finally:
        lease.release()
        waiter.join(5)


def _watchdogs() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "tenure-watchdog")


def test_many_redlocks_share_one_watchdog(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """A Redlock per request does not start a watchdog thread (or task) per
    object: the leases of every Redlock share one, renewed on each quorum."""
    before = _watchdogs()
    for i in range(50):
        lease = Redlock(clients, f"many-{i}", ttl=5, auto_renew=True).acquire()
        assert lease
        lease.release()
    assert _watchdogs() <= before + 1
    # leases of several Redlocks (one of them over other masters' clients) renewed together
    others = [redis.Redis.from_url(s.url) for s in masters]
    locks = [Redlock(clients, f"shared-{i}", ttl=0.6, auto_renew=True) for i in range(3)]
    locks.append(Redlock(others[::-1], "shared-other", ttl=0.6, auto_renew=True))
    leases = [lock.acquire() for lock in locks]
    assert all(leases)
    assert _watchdogs() <= before + 1
    time.sleep(1.5)  # past two ttls: only renewals keep them
    assert all(lease.valid and not lease.lost.is_set() for lease in leases)  # type: ignore[union-attr]
    for i in (0, 1, 2):
        masters[i].stop()
    assert all(lease.lost.wait(2.0) for lease in leases), "no quorum: each one lost"  # type: ignore[union-attr]
    time.sleep(1.5)  # nothing watched for more than the linger: the thread ended
    assert _watchdogs() <= before
    for c in others:
        c.close()

    async def main() -> int:
        for s in masters:
            if not _up(s):
                s.start()
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        for i in range(50):
            alease = await AsyncRedlock(aclients, f"amany-{i}", ttl=5, auto_renew=True).acquire()
            assert alease
            await alease.release()
        dogs = sum(1 for t in asyncio.all_tasks() if t.get_name() == "tenure-watchdog")
        for c in aclients:
            await c.aclose()
        return dogs

    assert asyncio.run(main()) <= 1


def test_many_short_lived_redlocks_do_not_grow_the_thread_count(
    clients: list[redis.Redis],
) -> None:
    """300 Redlock objects made, used and dropped in a tight loop (a Redlock
    per request, each lease renewed) leave the process's thread count flat:
    no thread per object outlives its lease (a watchdog per object lived a
    second after its last lease: 300 objects made ~280 threads)."""
    before = threading.active_count()
    peak = before
    for i in range(300):
        lease = Redlock(clients, f"short-{i}", ttl=5, auto_renew=True).acquire()
        assert lease
        lease.release()
        peak = max(peak, threading.active_count())
    # the fan-out's worker threads (one per master at most, reused) and one watchdog
    assert peak <= before + N + 3, f"{peak - before} more threads for 300 Redlocks"


def _fence_on(client: redis.Redis, name: str) -> int:
    return int(client.get(f"tenure:{{{name}}}:fence") or 0)


def test_a_paused_master_is_not_waited_for_and_still_sees_the_release(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """An acquire returns once a quorum granted it, not at the per-master
    timeout of a paused master; the release written on that master's
    connection after the acquire runs after it when the master resumes, so
    nothing is left held there."""
    lock = Redlock(clients, "slow", ttl=10, master_timeout=1.0)
    assert lock._keys.fence == "tenure:{slow}:fence"
    for _ in range(3):  # servers probed, a connection of the quick path to each
        lock.acquire(blocking=False).release()  # type: ignore[union-attr]
    before = _fence_on(clients[1], "slow")
    masters[1].pause()
    try:
        started = time.monotonic()
        lease = lock.acquire(blocking=False)
        took = time.monotonic() - started
        assert lease, "4 of 5 masters grant it"
        assert took < 0.3, f"acquire took {took:.3f} s: it waited for the paused master"
        lease.release()
    finally:
        masters[1].resume()
    deadline = time.monotonic() + 5
    while _fence_on(clients[1], "slow") == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _fence_on(clients[1], "slow") > before, "the acquire ran on resuming"
    assert _holders(clients, "slow") == [None] * N, "and the release after it"
    again = lock.acquire(blocking=False)  # the master answers again: back in the quick path
    assert again
    again.release()

    async def main() -> float:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        alock = AsyncRedlock(aclients, "aslow", ttl=10, master_timeout=1.0)
        for _ in range(3):  # servers probed, a connection of the quick path to each
            alease = await alock.acquire(blocking=False)
            assert alease
            await alease.release()
        masters[0].pause()  # the first in order: the replies here are read first
        try:
            started = time.monotonic()
            alease = await alock.acquire(blocking=False)
            took = time.monotonic() - started
            assert alease
            await alease.release()
        finally:
            masters[0].resume()
        for c in aclients:
            await c.aclose()
        return took

    before = _fence_on(clients[0], "aslow")
    took = asyncio.run(main())
    assert took < 0.3, f"acquire took {took:.3f} s: it waited for the paused master"
    deadline = time.monotonic() + 5
    while _fence_on(clients[0], "aslow") == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _holders(clients, "aslow") == [None] * N


# (a script's TIME is frozen while it runs: os.clock, the server's CPU time)
#: Keeps its server busy for ARGV[1] ms (by the server's TIME: Redis 6.2's Lua has no ``os``).
BUSY = """
local function now() local t = redis.call('TIME'); return t[1] * 1e6 + t[2] end
local t0 = now()
while now() - t0 < tonumber(ARGV[1]) * 1000 do end
return 1
"""


def test_a_reply_due_from_a_late_master_never_blocks_the_next_call(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """A master that answers the acquire after it returned, then stops: the
    release on that connection reads the acquire's reply, then times out on
    its own (no blocking read past the per-master timeout)."""
    lock = Redlock(clients, "late", ttl=10, master_timeout=0.5)
    for _ in range(3):  # servers probed, a connection of the quick path to each
        lock.acquire(blocking=False).release()  # type: ignore[union-attr]
    busy_client = redis.Redis.from_url(masters[1].url)
    busy = threading.Thread(target=lambda: busy_client.eval(BUSY, 0, 300))
    busy.start()
    time.sleep(0.05)  # master 1 runs a 0.3 s script: the acquire waits there
    lease = lock.acquire(blocking=False)
    assert lease, "4 of 5 masters grant it at once"
    busy.join()
    time.sleep(0.1)  # master 1 ran the acquire and answered (the reply waits in the socket)
    masters[1].pause()
    try:
        done = threading.Event()

        def release() -> None:
            lease.release()
            done.set()

        started = time.monotonic()
        threading.Thread(target=release, daemon=True).start()
        assert done.wait(3), "the release blocked on the stopped master"
        assert time.monotonic() - started < 0.5 + 0.5
    finally:
        masters[1].resume()
        busy_client.close()
    deadline = time.monotonic() + 5
    while _holders(clients, "late") != [None] * N and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _holders(clients, "late") == [None] * N, "the release ran there on resuming"


def test_a_suspect_master_is_not_waited_for_by_later_acquires_async(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """Once a paused master failed to answer in time (a suspect), each later
    asyncio acquire still returns at the quorum, not at that master's
    per-master timeout; and after the master resumes nothing is held past a ttl."""

    async def main() -> list[float]:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        lock = AsyncRedlock(aclients, "suspect", ttl=2, master_timeout=0.5)
        for _ in range(3):  # servers probed, a connection of the quick path to each
            lease = await lock.acquire(blocking=False)
            assert lease
            await lease.release()
        took: list[float] = []
        last = 0
        masters[3].pause()
        try:
            for _ in range(4):
                started = time.monotonic()
                lease = await lock.acquire(blocking=False)
                took.append(time.monotonic() - started)
                assert lease and lease.fence > last
                last = lease.fence
                await lease.release()
        finally:
            masters[3].resume()
        for c in aclients:
            await c.aclose()
        return took

    took = asyncio.run(main())
    assert max(took) < 0.25, f"acquires took {took} s: one waited for the paused master"
    deadline = time.monotonic() + 2 + 1
    while _holders(clients, "suspect") != [None] * N and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _holders(clients, "suspect") == [None] * N


def _all_suspect_then_release(
    masters: list[ServerProcess],
    locked: Any,
    release: Any,
) -> None:
    """Every master paused long enough for a round to time out (every one a
    suspect, as after a stall of this process); then, still paused, a
    round in flight on every master (``locked``, started) when the release
    (``release``, started next) comes; the masters resume 0.15 s later. Both
    are callables started on threads of their own and joined here."""
    for s in masters:
        s.pause()
    try:
        probe = threading.Thread(target=locked)
        probe.start()
        time.sleep(0.05)
        releaser = threading.Thread(target=release)
        releaser.start()
        time.sleep(0.15)
    finally:
        for s in masters:
            s.resume()
    probe.join(10)
    releaser.join(10)


def test_a_release_waits_for_the_calls_in_flight_when_every_master_is_a_suspect(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """A release that can't reach a quorum at once because every master is a
    suspect with a call of this process still in flight there waits for
    those calls (within the per-master timeout) and is sent once they are
    answered: it releases the lock, where it used to fail at once with
    NoQuorumError (none of it sent)."""
    lock = Redlock(clients, "stall", ttl=10, master_timeout=0.5)
    lease = lock.acquire()
    assert lease
    for s in masters:
        s.pause()
    try:
        with pytest.raises(NoQuorumError):
            lock.locked()  # every master a suspect
    finally:
        for s in masters:
            s.resume()
    outcome: list[object] = []

    def release() -> None:
        try:
            lease.release()
            outcome.append("released")
        except BaseException as exc:
            outcome.append(exc)

    def locked() -> None:
        with contextlib.suppress(NoQuorumError):
            lock.locked()

    _all_suspect_then_release(masters, locked, release)
    assert outcome == ["released"]
    assert _holders(clients, "stall") == [None] * N


def test_a_release_waits_for_the_calls_in_flight_when_every_master_is_a_suspect_async(
    masters: list[ServerProcess], clients: list[redis.Redis]
) -> None:
    """The asyncio twin: a release and a round of another task in flight on
    every suspect master."""
    outcome: list[object] = []

    async def main() -> None:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        lock = AsyncRedlock(aclients, "astall", ttl=10, master_timeout=0.5)
        lease = await lock.acquire()
        assert lease
        for s in masters:
            s.pause()
        try:
            with pytest.raises(NoQuorumError):
                await lock.locked()  # every master a suspect
        finally:
            for s in masters:
                s.resume()
        for s in masters:
            s.pause()
        try:
            probe = asyncio.ensure_future(lock.locked())
            await asyncio.sleep(0.05)
            releaser = asyncio.ensure_future(lease.release())
            await asyncio.sleep(0.15)
        finally:
            for s in masters:
                s.resume()
        with contextlib.suppress(NoQuorumError):
            await probe
        try:
            await releaser
            outcome.append("released")
        except BaseException as exc:
            outcome.append(exc)
        for c in aclients:
            await c.aclose()

    asyncio.run(main())
    assert outcome == ["released"]
    assert _holders(clients, "astall") == [None] * N


def test_a_socket_timeout_keeps_a_master_a_suspect(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """A suspect master's call that ends in the client library's own timeout
    (its socket timeout, shorter than the per-master timeout) is no answer:
    the master stays a suspect, so the next calls to it are not piled up."""
    timing_out = [redis.Redis.from_url(s.url, socket_timeout=0.1) for s in masters]
    lock = Redlock(timing_out, "socket-timeout", ttl=10, master_timeout=1.0)
    lease = lock.acquire()  # every master probed, the quick path's connections kept
    assert lease is not None
    lease.release()
    masters[0].pause()
    try:
        lock.locked()  # master 0 fails to answer in time: a suspect
        assert _sync_fanout.suspected(timing_out[0])
        lock.locked()  # its call of its own times out in the socket
        assert _sync_fanout.suspected(timing_out[0]), "a socket timeout counted as an answer"
    finally:
        masters[0].resume()
    for c in timing_out:
        c.close()


def test_no_quorum_says_why_each_master_failed(masters: list[ServerProcess]) -> None:
    """A master that fails for another reason than a timeout (here: its
    client's connection pool is full) is named with that reason, and the
    error is chained to it: not just "did not answer within the timeout"."""
    full = [redis.Redis.from_url(s.url, max_connections=1) for s in masters]
    taken = [c.connection_pool.get_connection() for c in full[:3]]
    try:
        lock = Redlock(full, "full", ttl=5, master_timeout=0.2)
        with pytest.raises(NoQuorumError, match="master 0: MaxConnectionsError") as caught:
            lock.acquire(blocking=False)
        assert isinstance(caught.value.__cause__, redis.exceptions.ConnectionError)
    finally:
        for c, conn in zip(full, taken, strict=False):
            c.connection_pool.release(conn)
            c.close()


def test_a_short_lease_is_not_lost_waiting_on_another_locks_renewal(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """The watchdog is shared by every Redlock of the process (per event loop):
    while a master is paused, the renewal of a lock with a long per-master
    timeout must not hold up (and so lose) the lease of a lock with a short
    ttl, which survives the same pause alone. Sync, then asyncio."""
    slow = Redlock(clients, "long", ttl=1.5, auto_renew=True, master_timeout=0.5)
    quick = Redlock(clients, "short", ttl=0.4, auto_renew=True)
    for _ in range(3):  # servers probed, a connection of the quick path to each
        slow.acquire().release()  # type: ignore[union-attr]
        quick.acquire().release()  # type: ignore[union-attr]
    held, short = slow.acquire(), quick.acquire()
    assert held and short
    time.sleep(0.3)
    masters[4].pause()
    try:
        time.sleep(3.0)
        assert not short.lost.is_set() and short.valid, "the short lease was lost"
    finally:
        masters[4].resume()
    short.release()
    held.release()

    async def main() -> None:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        aslow = AsyncRedlock(aclients, "along", ttl=1.5, auto_renew=True, master_timeout=0.5)
        aquick = AsyncRedlock(aclients, "ashort", ttl=0.4, auto_renew=True)
        for _ in range(3):
            await (await aslow.acquire()).release()  # type: ignore[union-attr]
            await (await aquick.acquire()).release()  # type: ignore[union-attr]
        aheld, ashort = await aslow.acquire(), await aquick.acquire()
        assert aheld and ashort
        masters[3].pause()
        try:
            await asyncio.sleep(2.5)
            assert not ashort.lost.is_set() and ashort.valid, "the short lease was lost"
        finally:
            masters[3].resume()
        await ashort.release()
        await aheld.release()
        for c in aclients:
            await c.aclose()

    asyncio.run(main())


def _gone_within(clients: list[redis.Redis], name: str, seconds: float) -> float:
    """Seconds until no master holds ``name`` (at most ``seconds``: then the holders)."""
    started = time.monotonic()
    while _holders(clients, name) != [None] * N and time.monotonic() - started < seconds:
        time.sleep(0.02)
    assert _holders(clients, name) == [None] * N, f"still held after {seconds} s"
    return time.monotonic() - started


async def _agone_within(clients: list[redis.Redis], name: str, seconds: float) -> float:
    """:func:`_gone_within` with the event loop running (a late release is sent
    by a task of the loop)."""
    started = time.monotonic()
    while _holders(clients, name) != [None] * N and time.monotonic() - started < seconds:
        await asyncio.sleep(0.02)
    assert _holders(clients, name) == [None] * N, f"still held after {seconds} s"
    return time.monotonic() - started


def test_a_release_behind_a_call_stuck_on_a_paused_master_still_reaches_it(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """Acquire and release in a loop while a master is paused: the master
    becomes a suspect, an acquire stuck there grants the lock when it resumes,
    and the release made while that call was stuck is queued behind it (not
    dropped), so the name is free there at once, not a ttl after the resume.
    Sync, then asyncio."""
    ttl = 2.0
    lock = Redlock(clients, "behind", ttl=ttl, master_timeout=0.3)
    for _ in range(3):  # servers probed, a connection of the quick path to each
        lock.acquire(blocking=False).release()  # type: ignore[union-attr]
    last = 0
    masters[4].pause()
    try:
        for _ in range(5):
            lease = lock.acquire(timeout=1)
            assert lease and lease.fence > last
            last = lease.fence
            lease.release()
        time.sleep(0.3)
    finally:
        masters[4].resume()
    assert _gone_within(clients, "behind", ttl) < 0.5 * ttl

    async def main() -> float:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        alock = AsyncRedlock(aclients, "abehind", ttl=ttl, master_timeout=0.3)
        for _ in range(3):
            await (await alock.acquire(blocking=False)).release()  # type: ignore[union-attr]
        last = 0
        masters[3].pause()
        try:
            for _ in range(5):
                alease = await alock.acquire(timeout=1)
                assert alease and alease.fence > last
                last = alease.fence
                await alease.release()
            await asyncio.sleep(0.3)
        finally:
            masters[3].resume()
        gone = await _agone_within(clients, "abehind", ttl)
        for c in aclients:
            await c.aclose()
        return gone

    assert asyncio.run(main()) < 0.5 * ttl


def test_a_cancelled_async_acquire_does_not_wait_for_a_paused_master(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """An AsyncRedlock acquire cancelled while it waits (a master paused)
    releases what it may hold and leaves the queues in one round that does not
    wait for the paused master (it gets that round once it answers): it
    returns well within a per-master timeout of the cancel; nothing is left
    held or queued once the master resumes."""
    mt = 0.4

    async def main() -> None:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        holder = AsyncRedlock(aclients, "cancel", ttl=5, master_timeout=mt)
        waiter = AsyncRedlock(aclients, "cancel", ttl=5, master_timeout=mt)
        for _ in range(3):
            await (await waiter.acquire(blocking=False)).release()  # type: ignore[union-attr]
        lease = await holder.acquire()
        assert lease
        masters[4].pause()
        try:
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(waiter.acquire(), 2.5 * mt)
            took = time.monotonic() - started - 2.5 * mt
            await lease.release()
        finally:
            masters[4].resume()
        assert took < 0.5 * mt, f"the cancelled acquire took {took:.2f} s more to return"
        assert not await waiter.owned()
        await _agone_within(clients, "cancel", 1.0)
        for c in aclients:
            await c.aclose()

    asyncio.run(main())
    assert [c.zcard("tenure:{cancel}:quorum") for c in clients] == [0] * N


#: The pool size of the clients of the pool-slot tests: far fewer than the
#: connections their Redlock calls drop.
SMALL_POOL = 6


def _free_slots(pool: Any, library: str, most: int = SMALL_POOL + 1) -> int:
    """How many connections ``pool`` hands out at once now, up to ``most``
    (each checked out, counted, then all given back)."""
    held: list[Any] = []
    try:
        while len(held) < most:
            held.append(
                pool.get_connection("PING") if library == "valkey" else pool.get_connection()
            )
    except (redis.exceptions.ConnectionError, valkey.exceptions.ConnectionError):
        pass  # MaxConnectionsError, "Too many connections"
    for conn in held:
        pool.release(conn)
    return len(held)


def _drop_connections(client: Any) -> None:
    """Close every ordinary connection of ``client``'s server but the caller's."""
    client.execute_command("CLIENT", "KILL", "TYPE", "normal")


@pytest.mark.parametrize("library", ["redis", "valkey"])
@pytest.mark.parametrize("how", ["killed", "paused"])
def test_connections_the_fanout_drops_give_their_pool_slots_back(
    clients: list[redis.Redis], masters: list[ServerProcess], library: str, how: str
) -> None:
    """Connections that Redlock's one-thread calls drop (their server closed
    them, or did not answer in time) go back to their client's pool: after
    far more drops than the pool has connections, the pool still hands out
    all but the few tenure keeps, and a Redlock call still reaches that
    master. (Before, each drop used up a pool slot for good: redis-py 8 and
    valkey-py count the connections a pool makes.)"""
    cls: Any = valkey.Valkey if library == "valkey" else redis.Redis
    mine = [cls.from_url(s.url, max_connections=SMALL_POOL) for s in masters[:3]]
    other = cls.from_url(masters[0].url)
    lock = Redlock(mine, "slots", ttl=5, master_timeout=0.3)
    pool = mine[0].connection_pool
    cycles = 3 * SMALL_POOL if how == "killed" else SMALL_POOL + 2  # (one drop each)
    try:
        for _ in range(cycles):
            for _ in range(3):  # the quick path to each master (back after a suspicion)
                lease = lock.acquire(blocking=False)
                assert lease, "every master answers"
                lease.release()
            if how == "killed":
                _drop_connections(other)
            else:  # two of three do not answer in time: their connections are dropped
                masters[0].pause()
                masters[1].pause()
                try:
                    with pytest.raises(NoQuorumError):
                        lock.acquire(blocking=False)
                finally:
                    masters[0].resume()
                    masters[1].resume()
                time.sleep(0.2)  # the late acquire ran on resuming: it may hold it
                for c in mine:
                    c.flushall()
        # tenure keeps at most a quarter of a pool (here 1) for Redlock, and a
        # pub/sub connection: the user gets the rest
        assert _free_slots(pool, library) >= SMALL_POOL - 2
        assert mine[0].ping()
        lease = lock.acquire(blocking=False)
        assert lease
        # (it may return with two masters' answers: the third's is on its way)
        deadline = time.monotonic() + 2
        while mine[0].get("tenure:{slots}") is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert mine[0].get("tenure:{slots}") == lease.owner.encode()
        lease.release()
    finally:
        for c in [*mine, other]:
            c.close()


@pytest.mark.parametrize("library", ["redis", "valkey"])
def test_connections_the_async_fanout_drops_give_their_pool_slots_back(
    clients: list[redis.Redis], masters: list[ServerProcess], library: str
) -> None:
    """:func:`test_connections_the_fanout_drops_give_their_pool_slots_back`
    (killed connections) for AsyncRedlock, whose connections are checked out
    of the asyncio pool too."""

    async def main() -> None:
        cls: Any = valkey.asyncio.Valkey if library == "valkey" else redis.asyncio.Redis
        mine = [cls.from_url(s.url, max_connections=SMALL_POOL) for s in masters[:3]]
        other = cls.from_url(masters[0].url)
        lock = AsyncRedlock(mine, "aslots", ttl=1, master_timeout=0.3)
        pool = mine[0].connection_pool
        try:
            for _ in range(3 * SMALL_POOL):
                for _ in range(3):
                    lease = await lock.acquire(blocking=False)
                    assert lease, "every master answers"
                    await lease.release()
                await other.execute_command("CLIENT", "KILL", "TYPE", "normal")
            held: list[Any] = []
            try:
                while len(held) < SMALL_POOL + 1:
                    held.append(
                        await (
                            pool.get_connection("PING")
                            if library == "valkey"
                            else pool.get_connection()
                        )
                    )
            except (redis.exceptions.ConnectionError, valkey.exceptions.ConnectionError):
                pass
            for conn in held:
                await pool.release(conn)
            assert len(held) >= SMALL_POOL - 2
            assert await mine[0].ping()
            # (a release right after a kill may miss master 0: its key ends by its ttl)
            deadline = time.monotonic() + 2
            while await mine[0].exists("tenure:{aslots}") and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            lease = await lock.acquire(blocking=False)
            assert lease
            # (it may return with two masters' answers: the third's is on its way)
            deadline = time.monotonic() + 2
            while await mine[0].get("tenure:{aslots}") is None and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert await mine[0].get("tenure:{aslots}") == lease.owner.encode()
            await lease.release()
        finally:
            for c in [*mine, other]:
                await c.aclose()

    asyncio.run(main())


def test_a_redlock_over_blocking_pools_keeps_none_of_their_connections(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """A client on a ``BlockingConnectionPool`` (whose user waits for its
    connections) lends tenure none to keep: each Redlock call checks one out
    and gives it back, and all of them are back between calls."""
    pools = [
        redis.BlockingConnectionPool.from_url(s.url, max_connections=4, timeout=1)
        for s in masters[:3]
    ]
    mine = [redis.Redis(connection_pool=p) for p in pools]
    lock = Redlock(mine, "blocking", ttl=5, master_timeout=0.5)
    try:
        for _ in range(5):
            lease = lock.acquire(blocking=False)
            assert lease
            lease.release()
        time.sleep(0.1)  # (a worker thread gives its connection back after the call)
        for c in mine:
            assert c.ping()
        for p in pools:  # (a pub/sub connection may be kept: the other 3 are free)
            held = [p.get_connection() for _ in range(3)]  # type: ignore[no-untyped-call]
            for conn in held:
                p.release(conn)  # type: ignore[no-untyped-call]
    finally:
        for c in mine:
            c.close()


#: The pool size of the per-request tests: tenure keeps at most a quarter of
#: it for Redlock's calls (3) and a quarter for its scripts' quick path (3).
SHARED_POOL = 12


@pytest.mark.parametrize("library", ["redis", "valkey"])
def test_a_redlock_of_clients_made_per_request_keeps_none_of_their_pools(
    clients: list[redis.Redis], masters: list[ServerProcess], library: str
) -> None:
    """A Redlock whose masters' clients are made per request on shared pools,
    then dropped (a common web pattern): the connections its calls keep are
    each pool's, shared by every client of the pool, so dropping clients
    loses none of the pools' slots. (Kept per client, each dropped client
    took up to 3 of each pool of 12 for good: the pools ran out after a few
    requests.)"""
    import concurrent.futures

    cls: Any = valkey.Valkey if library == "valkey" else redis.Redis
    pool_cls: Any = valkey.ConnectionPool if library == "valkey" else redis.ConnectionPool
    pools = [pool_cls.from_url(s.url, max_connections=SHARED_POOL) for s in masters[:3]]
    other = concurrent.futures.ThreadPoolExecutor(1)

    def rival_check(rival: Redlock) -> None:  # (another thread: another owner)
        assert other.submit(rival.acquire, blocking=False).result(10) is None

    holds: list[tuple[float, float, int]] = []
    try:
        for r in range(36):
            mine = [cls(connection_pool=p) for p in pools]
            lock = Redlock(mine, "per-request", ttl=5, master_timeout=0.5)
            rival = Redlock(mine, "per-request", ttl=5, master_timeout=0.5)
            for _ in range(3):
                lease = lock.acquire(blocking=False)
                assert lease, f"round {r}: every master answers"
                acquired = time.monotonic()
                rival_check(rival)
                fence = lease.fence
                lease.release()
                holds.append((acquired, time.monotonic(), fence))
            del mine, lock, rival, lease
            gc.collect()
        check_history(holds)
        assert len(holds) == 108
        time.sleep(0.2)  # (a worker thread may still be checking one out)
        free = [_free_slots(p, library, SHARED_POOL) for p in pools]
        # tenure keeps at most a quarter of each pool for Redlock's calls and
        # a quarter for its scripts: the user gets the rest
        assert min(free) >= SHARED_POOL - 2 * (SHARED_POOL // 4), free
    finally:
        other.shutdown()
        for p in pools:
            p.disconnect()


@pytest.mark.parametrize("library", ["redis", "valkey"])
def test_an_async_redlock_of_clients_made_per_request_keeps_none_of_their_pools(
    clients: list[redis.Redis], masters: list[ServerProcess], library: str
) -> None:
    """The asyncio twin of
    :func:`test_a_redlock_of_clients_made_per_request_keeps_none_of_their_pools`."""

    async def main() -> list[int]:
        cls: Any = valkey.asyncio.Valkey if library == "valkey" else redis.asyncio.Redis
        pool_cls: Any = (
            valkey.asyncio.ConnectionPool if library == "valkey" else redis.asyncio.ConnectionPool
        )
        pools = [pool_cls.from_url(s.url, max_connections=SHARED_POOL) for s in masters[:3]]
        holds: list[tuple[float, float, int]] = []
        try:
            for r in range(36):
                mine = [cls(connection_pool=p) for p in pools]
                lock = AsyncRedlock(mine, "per-request-async", ttl=5, master_timeout=0.5)
                rival = AsyncRedlock(mine, "per-request-async", ttl=5, master_timeout=0.5)
                for _ in range(3):
                    lease = await lock.acquire(blocking=False)
                    assert lease, f"round {r}: every master answers"
                    acquired = time.monotonic()
                    # (another task: another owner)
                    assert await asyncio.ensure_future(rival.acquire(blocking=False)) is None
                    fence = lease.fence
                    await lease.release()
                    holds.append((acquired, time.monotonic(), fence))
                del mine, lock, rival, lease
                gc.collect()
            check_history(holds)
            assert len(holds) == 108
            await asyncio.sleep(0.2)  # (a task may still be checking one out)
            free: list[int] = []
            for p in pools:
                held: list[Any] = []
                try:
                    while len(held) < SHARED_POOL:
                        held.append(
                            await (
                                p.get_connection("PING")
                                if library == "valkey"
                                else p.get_connection()
                            )
                        )
                except (redis.exceptions.ConnectionError, valkey.exceptions.ConnectionError):
                    pass
                for conn in held:
                    await p.release(conn)
                free.append(len(held))
            return free
        finally:
            for p in pools:
                await p.disconnect()

    free = asyncio.run(main())
    assert min(free) >= SHARED_POOL - 2 * (SHARED_POOL // 4), free


def _unused_port() -> int:
    """A local TCP port nothing listens on (a master that is down)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("library", ["redis", "valkey"])
def test_dropped_clients_of_a_redlock_are_not_kept_alive(
    clients: list[redis.Redis], masters: list[ServerProcess], library: str
) -> None:
    """Clients made per request with their own pool (``from_url``) and
    dropped after a Redlock used them go with their pools and connections,
    also one whose master is down (its calls fail on worker threads):
    nothing of tenure's keeps them (before, a finished worker call's callback
    kept its client for good, and the connections kept per pool kept a
    redis-py pool, through its maintenance-notification handler, alive as the
    key of their weak entry)."""
    cls: Any = valkey.Valkey if library == "valkey" else redis.Redis
    refs: list[weakref.ref[Any]] = []
    fences: list[int] = []
    down = f"redis://127.0.0.1:{_unused_port()}"
    for _ in range(4):
        mine = [cls.from_url(url) for url in [masters[0].url, masters[1].url, down]]
        lock = Redlock(mine, "dropped-clients", ttl=5, master_timeout=0.5)
        for _ in range(3):
            lease = lock.acquire(blocking=False)
            assert lease
            fences.append(lease.fence)
            lease.release()
        refs += [weakref.ref(c) for c in mine] + [weakref.ref(c.connection_pool) for c in mine]
        del mine, lock, lease
        gc.collect()
    assert fences == sorted(set(fences))
    deadline = time.monotonic() + 2  # (a worker thread lets go of its call once it is done)
    while any(r() is not None for r in refs) and time.monotonic() < deadline:
        time.sleep(0.05)
        gc.collect()
    assert [r() for r in refs if r() is not None] == []


@pytest.mark.parametrize("library", ["redis", "valkey"])
def test_dropped_clients_of_an_async_redlock_are_not_kept_alive(
    clients: list[redis.Redis], masters: list[ServerProcess], library: str
) -> None:
    """The asyncio twin of :func:`test_dropped_clients_of_a_redlock_are_not_kept_alive`
    (each client closed before it is dropped, as asyncio clients must be;
    one master down)."""

    async def main() -> list[weakref.ref[Any]]:
        cls: Any = valkey.asyncio.Valkey if library == "valkey" else redis.asyncio.Redis
        refs: list[weakref.ref[Any]] = []
        fences: list[int] = []
        down = f"redis://127.0.0.1:{_unused_port()}"
        for _ in range(4):
            mine = [cls.from_url(url) for url in [masters[0].url, masters[1].url, down]]
            lock = AsyncRedlock(mine, "dropped-aclients", ttl=5, master_timeout=0.5)
            for _ in range(3):
                lease = await lock.acquire(blocking=False)
                assert lease
                fences.append(lease.fence)
                await lease.release()
            refs += [weakref.ref(c) for c in mine]
            refs += [weakref.ref(c.connection_pool) for c in mine]
            for c in mine:
                await c.aclose()
            del mine, lock, lease
            gc.collect()
        assert fences == sorted(set(fences))
        await asyncio.sleep(0.1)  # (a background task may still give a connection back)
        gc.collect()
        return refs

    refs = asyncio.run(main())
    gc.collect()
    assert [r() for r in refs if r() is not None] == []


def test_an_interrupt_while_the_redlock_lease_starts_gives_the_lock_back(
    clients: list[redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    """KeyboardInterrupt after a quorum granted the lock, while its lease
    starts (its watchdog entry): the grant is given back on every master
    before the error reaches the caller, as for a single server's kinds, so
    another owner takes the lock at once and the same owner can acquire again."""
    from tenure._api._sync import redlock as sync_redlock

    interrupted_start, fired = raise_once(sync_redlock.RedlockLease._start)
    monkeypatch.setattr(sync_redlock.RedlockLease, "_start", interrupted_start)
    lock = Redlock(clients, "rl-start-interrupted", ttl=30)
    with pytest.raises(KeyboardInterrupt):
        lock.acquire()
    assert fired
    assert not any(c.exists("tenure:{rl-start-interrupted}") for c in clients)
    fences: list[int] = []

    def take() -> None:
        other = Redlock(clients, "rl-start-interrupted", ttl=30).acquire(blocking=False)
        assert other is not None, "the interrupted grant was given back"
        fences.append(int(other.fence))
        other.release()

    thread = threading.Thread(target=take)
    thread.start()
    thread.join(10)
    assert fences
    lease = lock.acquire(blocking=False)
    assert lease is not None and lease.fence > fences[0]
    lease.release()


def test_an_interrupt_while_a_granted_waiter_stops_listening_gives_the_lock_back(
    clients: list[redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    """KeyboardInterrupt after a quorum granted the lock to a waiter, while it
    stops listening on its wake channel: the grant is given back on every
    master before the error reaches the caller."""
    from tenure._drivers import _sync

    unlisten = _sync._Hub.unlisten
    armed = [False]

    def interrupted_unlisten(self: Any, *args: Any) -> None:
        unlisten(self, *args)
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt

    monkeypatch.setattr(_sync._Hub, "unlisten", interrupted_unlisten)
    name = "rl-unlisten-interrupted"
    holder = Redlock(clients, name, ttl=30).acquire()
    assert holder is not None
    lock = Redlock(clients, name, ttl=30)
    armed[0] = True
    timer = threading.Timer(0.3, holder.release)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            lock.acquire(timeout=5)
    finally:
        timer.join()
    assert not armed[0]
    assert not any(c.exists(f"tenure:{{{name}}}") for c in clients)
    lease = lock.acquire(blocking=False)
    assert lease is not None and lease.fence > holder.fence
    lease.release()


def _interrupt_after_the_grant(take: Any, at: int) -> tuple[Any, list[int]]:
    """A trace function that raises KeyboardInterrupt once in ``_take``
    (``take``: the sync or asyncio function), at the ``at``-th point after a
    quorum granted the lock where Python may run a signal handler: each line
    of ``_take`` once the grant is made (a handler runs before it, as the
    previous call returns), and ``_take``'s return of the grant (the handler
    runs in ``acquire``, as the call returns). Counted from 1; the list is
    non-empty once it raised."""
    code = take.__code__
    seen: list[int] = []
    fired: list[int] = []

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if fired or "grant" not in frame.f_locals:
            return local
        if event == "line" or (event == "return" and isinstance(arg, tuple)):
            seen.append(frame.f_lineno)
            if len(seen) == at:
                fired.append(frame.f_lineno)
                raise KeyboardInterrupt
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code is code else None

    return calls, fired


def test_an_interrupt_as_the_quorums_grant_is_returned_gives_it_back(
    clients: list[redis.Redis],
) -> None:
    """KeyboardInterrupt at each point after a quorum granted the lock as
    ``_take`` hands the grant to ``acquire`` (the last line of ``_take``, its
    return): the grant is given back on every master before the error
    reaches the caller (a grant never outlives an interrupted acquire), so
    another owner takes the lock at once."""
    name = "rl-grant-returned"
    lock = Redlock(clients, name, ttl=30)
    at = 1
    while True:
        tracer, fired = _interrupt_after_the_grant(Redlock._take, at)
        sys.settrace(tracer)
        try:
            lease = lock.acquire()
        except KeyboardInterrupt:
            lease = None
        finally:
            sys.settrace(None)
        if not fired:  # past the last point: acquire returned the lease
            assert lease is not None and at > 2
            lease.release()
            break
        assert lease is None, "the interrupt reached the caller"
        _gone_within(clients, name, 1.0)
        other = Redlock(clients, name, ttl=30).acquire(blocking=False)
        assert other is not None, f"the grant interrupted at line {fired[0]} was given back"
        other.release()
        at += 1


def test_an_interrupt_as_an_async_quorums_grant_is_returned_gives_it_back(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """The asyncio twin: KeyboardInterrupt at each point as
    ``AsyncRedlock._take`` hands the grant to ``acquire`` gives it back on
    every master before it is raised."""
    name = "arl-grant-returned"

    async def main() -> None:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        try:
            lock = AsyncRedlock(aclients, name, ttl=30)
            at = 1
            while True:
                tracer, fired = _interrupt_after_the_grant(AsyncRedlock._take, at)
                sys.settrace(tracer)
                try:
                    lease = await lock.acquire()
                except KeyboardInterrupt:
                    lease = None
                finally:
                    sys.settrace(None)
                if not fired:
                    assert lease is not None and at > 2
                    await lease.release()
                    break
                assert lease is None, "the interrupt reached the caller"
                await _agone_within(clients, name, 1.0)
                other = await AsyncRedlock(aclients, name, ttl=30).acquire(blocking=False)
                assert other is not None, f"the grant interrupted at line {fired[0]} was given back"
                await other.release()
                at += 1
        finally:
            for c in aclients:
                await c.aclose()

    asyncio.run(main())


class _SlowFirstScript(redis.Connection):
    """Holds its first script call (EVALSHA or EVAL) before sending it until
    ``go`` is set, once armed (a class attribute, shared by the class's
    connections): a master slow to get a fresh client's first acquire."""

    armed = False
    go = threading.Event()
    #: set once the held call is being held
    holding = threading.Event()
    #: what the held call's command holds (the lock's name: not a probe's script)
    needle = b""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        data = command if isinstance(command, bytes) else b"".join(command)
        if _SlowFirstScript.armed and b"EVAL" in data and _SlowFirstScript.needle in data:
            _SlowFirstScript.armed = False
            _SlowFirstScript.holding.set()
            _SlowFirstScript.go.wait(10)
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


def test_an_interrupted_first_round_releases_after_the_acquire_it_cut_off(
    clients: list[redis.Redis], masters: list[ServerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """KeyboardInterrupt during a fresh Redlock's first round (its calls on
    worker threads), while the acquire on master 0 is not sent yet: the
    clean-up release for that master is queued behind the acquire still in
    flight (a release never overtakes the acquire it undoes), so once the
    acquire runs there the name is released at once, not held for the ttl."""
    from tenure._drivers._sync import calls as sync_calls
    from tenure._drivers._sync import fanout as _fanout_sync

    name = "rl-first-round-interrupted"
    pool = redis.ConnectionPool(
        host="127.0.0.1", port=masters[0].port, connection_class=_SlowFirstScript
    )
    slow = redis.Redis(connection_pool=pool)
    fresh = [slow] + [redis.Redis.from_url(s.url) for s in masters[1:]]
    lock = Redlock(fresh, name, ttl=30, master_timeout=0.5)
    wait = sync_calls.wait_calls
    fired: list[int] = []

    def interrupted_wait(calls: Any, timeout: float) -> bool:
        done = wait(calls, timeout)
        if not fired and _SlowFirstScript.holding.is_set():
            # Ctrl-C as the acquire round's wait ends, master 0's call still out
            # (not in the round before it, which asks the masters who they are)
            fired.append(1)
            raise KeyboardInterrupt
        return done

    _SlowFirstScript.go.clear()
    _SlowFirstScript.holding.clear()
    _SlowFirstScript.needle = name.encode()
    _SlowFirstScript.armed = True
    monkeypatch.setattr(_fanout_sync, "wait_calls", interrupted_wait)
    try:
        with pytest.raises(KeyboardInterrupt):
            lock.acquire()
    finally:
        monkeypatch.undo()
        _SlowFirstScript.armed = False
        _SlowFirstScript.go.set()
    assert fired
    deadline = time.monotonic() + 5
    while _fence_on(clients[0], name) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _fence_on(clients[0], name) > 0, "the held-up acquire ran on master 0"
    _gone_within(clients, name, 2.0)
    for c in fresh:
        c.close()


def test_a_release_never_overtakes_its_acquire_still_on_its_way(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """A lease released while its acquire is still on its way to master 0 (a
    fresh client's first script call, held on its worker thread past the
    round's timeout), master 0 no longer under suspicion (another call of
    that client answered meanwhile): the release is sent there again once
    that acquire ended, so the name is free on every master once it ran,
    not held on master 0 until its ttl (before, the release ran there first,
    found nothing, and the acquire ran after it)."""
    name = "rl-release-behind-its-acquire"
    pool = redis.ConnectionPool(
        host="127.0.0.1", port=masters[0].port, connection_class=_SlowFirstScript
    )
    slow = redis.Redis(connection_pool=pool)
    fresh = [slow] + [redis.Redis.from_url(s.url) for s in masters[1:]]
    lock = Redlock(fresh, name, ttl=30, master_timeout=0.2)
    _SlowFirstScript.go.clear()
    _SlowFirstScript.holding.clear()
    _SlowFirstScript.needle = name.encode()
    _SlowFirstScript.armed = True
    try:
        lease = lock.acquire(blocking=False)
        assert lease is not None
        assert _SlowFirstScript.holding.is_set(), "master 0's acquire is held on its thread"
        _sync_fanout._servers.answered(slow)  # (another call of that client answered)
        lease.release()
    finally:
        _SlowFirstScript.armed = False
        _SlowFirstScript.go.set()
    deadline = time.monotonic() + 5
    while _fence_on(clients[0], name) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _fence_on(clients[0], name) > 0, "the held-up acquire ran on master 0"
    _gone_within(clients, name, 2.0)
    for c in fresh:
        c.close()


def test_a_clean_up_release_waits_for_its_acquire_whatever_ran_there_since(
    clients: list[redis.Redis], masters: list[ServerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """KeyboardInterrupt during a fresh Redlock's first round while master 0's
    acquire is held on its worker thread, after another call to master 0 (of
    another lock of the same clients) went out on a worker thread of its own
    and came back: the clean-up release for master 0 still waits for the
    acquire still in flight (a release never overtakes the acquire it undoes,
    whatever other calls to that master started or ended meanwhile), so once
    the acquire runs there the name is released at once, not held for the ttl."""
    from tenure._drivers._sync import _state
    from tenure._drivers._sync import calls as sync_calls
    from tenure._drivers._sync import fanout as _fanout_sync
    from tenure._plans import redlock as redlock_plans

    name = "rl-clean-up-behind-its-acquire"
    pool = redis.ConnectionPool(
        host="127.0.0.1", port=masters[0].port, connection_class=_SlowFirstScript
    )
    slow = redis.Redis(connection_pool=pool)
    fresh = [slow] + [redis.Redis.from_url(s.url) for s in masters[1:]]
    lock = Redlock(fresh, name, ttl=30, master_timeout=0.5)
    wait = sync_calls.wait_calls
    fired: list[object] = []

    def interrupted_wait(calls: Any, timeout: float) -> bool:
        done = wait(calls, timeout)
        if not fired and _SlowFirstScript.holding.is_set():
            # another lock's call to master 0, handed to a worker thread of
            # its own (the kept connections all in use), done while the
            # acquire is still held there
            fan = _state(slow).fan
            assert fan is not None
            with fan.mutex:
                busy, fan.idle[:] = list(fan.idle), []
                owed, fan.owed[:] = list(fan.owed), []
                connecting, fan.connecting = fan.connecting, True
            fired.append(None)  # (its own wait is not this one)
            try:
                fired[0] = _fanout_sync.run_each(
                    [(slow, redlock_plans.one(Command(("PING",))))], 5.0
                )
            finally:
                with fan.mutex:
                    fan.idle.extend(busy)
                    fan.owed.extend(owed)
                    fan.connecting = connecting
            raise KeyboardInterrupt
        return done

    _SlowFirstScript.go.clear()
    _SlowFirstScript.holding.clear()
    _SlowFirstScript.needle = name.encode()
    _SlowFirstScript.armed = True
    monkeypatch.setattr(_fanout_sync, "wait_calls", interrupted_wait)
    try:
        with pytest.raises(KeyboardInterrupt):
            lock.acquire()
    finally:
        monkeypatch.undo()
        _SlowFirstScript.armed = False
        _SlowFirstScript.go.set()
    assert fired and fired[0] in ([True], [b"PONG"]), fired  # (the PING answered)
    deadline = time.monotonic() + 5
    while _fence_on(clients[0], name) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _fence_on(clients[0], name) > 0, "the held-up acquire ran on master 0"
    _gone_within(clients, name, 2.0)
    for c in fresh:
        c.close()


def test_a_queued_release_waits_for_the_calls_before_it_not_after(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """A release queued behind a call in flight on a worker thread goes once
    that call returned, even while a call to the same master that started
    after it was queued is still in flight (a master that other locks keep
    busy never holds it up)."""
    from tenure._drivers._sync import calls
    from tenure._drivers._sync import fanout as _fanout_sync
    from tenure._plans import redlock as redlock_plans

    name = "rl-late-release-not-held-up"
    client = redis.Redis.from_url(masters[0].url)
    lock = Redlock([client, *clients[1:]], name, ttl=30)
    token = "late-release-token"
    taken = _fanout_sync.run_each(
        [(client, redlock_plans.one(redlock_plans.attempt(lock._keys, token, 30_000, "")))], 5.0
    )
    assert not isinstance(taken[0], BaseException), taken
    assert _holders(clients, name)[0] == token.encode()
    before, after = threading.Event(), threading.Event()
    in_flight = functools.partial(_fanout_sync._in_flight, client)
    first = calls._workers.submit(lambda: before.wait(10), in_flight)
    step = redlock_plans.release(lock._keys, token, "")
    assert _fanout_sync.send_late(client, step, time.monotonic() + 30)
    second = calls._workers.submit(lambda: after.wait(10), in_flight)
    try:
        time.sleep(0.2)
        assert _holders(clients, name)[0] == token.encode(), "sent before the call before it"
        before.set()
        _gone_within(clients, name, 2.0)
        assert not second.done(), "the call after it is still in flight"
    finally:
        before.set()
        after.set()
    assert first.wait(5) and second.wait(5)
    client.close()


def _after_blpop(key: str, seconds: float, step: Any) -> Any:
    """A plan that waits ``seconds`` on the server (a ``BLPOP`` of ``key``,
    which nobody pushes to) and then sends ``step``: a call that stays in
    flight for that long."""
    yield Command(("BLPOP", key, f"{seconds}"))
    return (yield step)


def test_an_async_queued_release_waits_for_every_call_before_it_not_after(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """The asyncio twin of
    :func:`test_a_queued_release_waits_for_the_calls_before_it_not_after`: a
    release queued behind two calls in tasks of their own on one master
    (a client whose blocking pool lends tenure no connection to keep) goes
    once both ended, not once the later one did (the earlier one, still in
    flight, may be the acquire it undoes); a call that started after it was
    queued does not hold it up."""
    from tenure._plans import redlock as redlock_plans

    name = "arl-late-release-every-call"
    idle = f"tenure-test:{{{name}}}:never-pushed"

    async def main() -> None:
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            masters[0].url, max_connections=8, timeout=5
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        others = [redis.asyncio.Redis.from_url(s.url) for s in masters[1:]]
        lock = AsyncRedlock([client, *others], name, ttl=30)
        token = "late-release-every-call"
        take = redlock_plans.attempt(lock._keys, token, 30_000, "")
        first = asyncio.ensure_future(
            _fanout.run_each([(client, _after_blpop(idle, 1.0, take))], 5.0)
        )
        await asyncio.sleep(0.2)
        second = asyncio.ensure_future(
            _fanout.run_each([(client, _after_blpop(idle, 0.3, Command(("PING",))))], 5.0)
        )
        await asyncio.sleep(0.1)
        step = redlock_plans.release(lock._keys, token, "")
        assert _fanout.send_late(client, step, time.monotonic() + 30)
        third = asyncio.ensure_future(
            _fanout.run_each([(client, _after_blpop(idle, 3.0, Command(("PING",))))], 5.0)
        )
        try:
            assert not isinstance((await second)[0], BaseException)
            taken = await first
            assert not isinstance(taken[0], BaseException), taken
            await _agone_within(clients, name, 1.0)  # (sent after the acquire, not before)
            assert not third.done(), "the call after it is still in flight"
        finally:
            await asyncio.wait([first, second, third], timeout=5)
            for c in [client, *others]:
                await c.aclose()

    asyncio.run(main())


class _AsyncHangOnWrite(redis.asyncio.Connection):
    """Hangs as it writes a command, once armed: a write of the quick path
    that waits (its connections make health checks, so it awaits each write),
    where a cancellation lands."""

    armed = False
    hung: asyncio.Event | None = None

    async def send_packed_command(self, *args: Any, **kwargs: Any) -> None:
        if _AsyncHangOnWrite.armed and _AsyncHangOnWrite.hung is not None:
            _AsyncHangOnWrite.armed = False
            _AsyncHangOnWrite.hung.set()
            await asyncio.sleep(30)
        await super().send_packed_command(*args, **kwargs)


def test_a_cancel_as_the_async_quick_path_writes_gives_every_connection_back(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """An AsyncRedlock call cancelled while its round writes to a master
    (the quick path, in the caller's task) gives back every connection the
    round took, the one being written to and those of the masters not
    written to yet: each pool's kept connections are all idle or owing
    replies, none counted as taken for good, and the lock still works."""
    from tenure._drivers import _async

    name = "arl-cancel-write"

    async def main() -> None:
        mine = [
            redis.asyncio.Redis(
                connection_pool=redis.asyncio.ConnectionPool(
                    host="127.0.0.1",
                    port=s.port,
                    connection_class=_AsyncHangOnWrite,
                    health_check_interval=3600,
                    max_connections=4 * SMALL_POOL,
                )
            )
            for s in masters
        ]
        lock = AsyncRedlock(mine, name, ttl=30, master_timeout=0.3)
        try:
            for _ in range(3):  # servers probed, a connection of the quick path to each
                await (await lock.acquire(blocking=False)).release()  # type: ignore[union-attr]
            fans = [_async._state(c).fan for c in mine]
            for _ in range(3):
                hung = _AsyncHangOnWrite.hung = asyncio.Event()
                _AsyncHangOnWrite.armed = True
                task = asyncio.ensure_future(lock.acquire(blocking=False))
                try:
                    await asyncio.wait_for(hung.wait(), 5)
                finally:
                    _AsyncHangOnWrite.armed = False
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                await asyncio.sleep(0.3)  # (connections are closed in the background)
                for k, fan in enumerate(fans):
                    assert fan is not None
                    kept = len(fan.idle) + len(fan.owed) + int(fan.connecting)
                    assert fan.open == kept, f"master {k}: {fan.open - kept} taken for good"
                await _agone_within(clients, name, 2.0)
            lease = await lock.acquire(blocking=False)
            assert lease is not None
            await lease.release()
        finally:
            _AsyncHangOnWrite.hung = None
            for c in mine:
                await c.aclose()

    asyncio.run(main())


class AlarmTimeout(Exception):
    """What a program's SIGALRM handler may raise: an ordinary Exception."""


class _AlarmOnReply(redis.Connection):
    """Raises :class:`AlarmTimeout` instead of reading its next reply, once
    armed (a class attribute): a signal handler that runs while a master's
    reply is read."""

    armed = False

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if _AlarmOnReply.armed:
            _AlarmOnReply.armed = False
            raise AlarmTimeout
        return super().read_response(*args, **kwargs)


def _alarm_cuts_an_acquire_off(
    clients: list[redis.Redis], masters: list[ServerProcess], name: str, connection: Any
) -> None:
    """A Redlock over clients whose connections are of class ``connection``
    (with an ``armed`` class attribute: raise :class:`AlarmTimeout` once, at
    its point) acquires with the alarm armed: ``AlarmTimeout`` reaches the
    caller, every master is free again within a second, and the next acquire
    is granted."""
    alarmed = [
        redis.Redis(
            connection_pool=redis.ConnectionPool(
                host="127.0.0.1", port=s.port, connection_class=connection
            )
        )
        for s in masters
    ]
    lock = Redlock(alarmed, name, ttl=30)
    for _ in range(3):  # servers probed, a connection of the quick path to each
        lock.acquire(blocking=False).release()  # type: ignore[union-attr]
    connection.armed = True
    try:
        with pytest.raises(AlarmTimeout):
            lock.acquire()
    finally:
        connection.armed = False
    _gone_within(clients, name, 1.0)
    lease = lock.acquire(blocking=False)
    assert lease is not None
    lease.release()
    for c in alarmed:
        c.close()


def test_an_exception_of_a_signal_handler_in_a_round_gives_the_grant_back(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """An ordinary Exception raised while a master's reply is read (a signal
    handler's ``AlarmTimeout``) is not a master's failure: it cuts the round
    off as KeyboardInterrupt does, reaches the caller, and what the round may
    have taken is given back on every master."""
    _alarm_cuts_an_acquire_off(clients, masters, "rl-alarm", _AlarmOnReply)


class _AlarmOnCheck(redis.Connection):
    """Raises :class:`AlarmTimeout` as it checks whether an idle connection
    has something to read, once armed: a signal handler that runs while the
    quick path picks a connection it kept."""

    armed = False

    def can_read(self, *args: Any, **kwargs: Any) -> bool:
        if _AlarmOnCheck.armed:
            _AlarmOnCheck.armed = False
            raise AlarmTimeout
        return bool(super().can_read(*args, **kwargs))


def test_an_exception_of_a_signal_handler_as_a_connection_is_picked_reaches_the_caller(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """An interrupt of any class raised while the quick path checks a kept
    connection is the caller's, not a sign of a broken connection: acquire
    raises it (it is never swallowed) and holds nothing after."""
    _alarm_cuts_an_acquire_off(clients, masters, "rl-alarm-check", _AlarmOnCheck)


class _AsyncAlarmOnReply(redis.asyncio.Connection):
    """:class:`_AlarmOnReply` for asyncio connections, once a script's reply
    was read (a list, or a number: an OK script reply; not the reply of the
    round that first asks who the masters are, nor a handshake's, where an
    interrupt takes nothing)."""

    armed = False

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        reply = await super().read_response(*args, **kwargs)
        if _AsyncAlarmOnReply.armed and type(reply) in (list, int):
            _AsyncAlarmOnReply.armed = False
            raise AlarmTimeout
        return reply


@pytest.mark.parametrize("probed", [True, False])
def test_an_exception_of_a_signal_handler_in_an_async_round_gives_the_grant_back(
    clients: list[redis.Redis], masters: list[ServerProcess], probed: bool
) -> None:
    """The asyncio twin: ``AlarmTimeout`` raised while a master's reply is
    read (in the round's own task once the masters were probed, in a task of
    its own for a fresh client's first call: a signal handler runs in
    whatever task runs) reaches the caller, and the grant is given back on
    every master."""
    name = f"arl-alarm-{probed}"

    async def main() -> None:
        alarmed = [
            redis.asyncio.Redis(
                connection_pool=redis.asyncio.ConnectionPool(
                    host="127.0.0.1", port=s.port, connection_class=_AsyncAlarmOnReply
                )
            )
            for s in masters
        ]
        lock = AsyncRedlock(alarmed, name, ttl=30)
        for _ in range(3 if probed else 0):  # a connection of the quick path to each
            await (await lock.acquire(blocking=False)).release()  # type: ignore[union-attr]
        _AsyncAlarmOnReply.armed = True
        try:
            with pytest.raises(AlarmTimeout):
                await lock.acquire()
        finally:
            _AsyncAlarmOnReply.armed = False
        await _agone_within(clients, name, 1.0)
        lease = await lock.acquire(blocking=False)
        assert lease is not None
        await lease.release()
        for c in alarmed:
            await c.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_an_exception_of_a_signal_handler_as_a_reply_is_parsed_reaches_the_caller(
    clients: list[redis.Redis],
    masters: list[ServerProcess],
    monkeypatch: pytest.MonkeyPatch,
    api: str,
) -> None:
    """``AlarmTimeout`` (an ordinary Exception a signal handler raises) while
    the quick path parses a master's reply as it arrives is the caller's, not
    an error reply to parse again later: acquire raises it (before, it was
    swallowed and the acquire returned a lease) and every master is free
    again."""
    name = f"rl-alarm-parse-{api}"
    if api == "sync":
        lock = Redlock(clients, name, ttl=30)
        for _ in range(3):  # servers probed, a connection of the quick path to each
            lock.acquire(blocking=False).release()  # type: ignore[union-attr]
        stand_in, fired = raise_once(_fanout_shared.replies, AlarmTimeout)
        monkeypatch.setattr(_sync_fanout, "replies", stand_in)
        with pytest.raises(AlarmTimeout):
            lock.acquire()
        monkeypatch.undo()
        assert fired
        _gone_within(clients, name, 1.0)
        lease = lock.acquire(blocking=False)
        assert lease is not None
        lease.release()
        return

    async def main() -> None:
        mine = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        lock = AsyncRedlock(mine, name, ttl=30)
        try:
            for _ in range(3):
                await (await lock.acquire(blocking=False)).release()  # type: ignore[union-attr]
            stand_in, fired = raise_once(_fanout_shared.replies, AlarmTimeout)
            monkeypatch.setattr(_fanout, "replies", stand_in)
            with pytest.raises(AlarmTimeout):
                await lock.acquire()
            monkeypatch.undo()
            assert fired
            await _agone_within(clients, name, 1.0)
            lease = await lock.acquire(blocking=False)
            assert lease is not None
            await lease.release()
        finally:
            for c in mine:
                await c.aclose()

    asyncio.run(main())


def test_an_exception_of_a_signal_handler_as_a_stale_connection_is_closed_reaches_the_caller(
    clients: list[redis.Redis], masters: list[ServerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AlarmTimeout`` raised while the quick path closes a kept connection
    the server closed (found as a round takes its connections) is the
    caller's: acquire raises it (before, the close's clean-up swallowed it,
    and the acquire returned a lease) and every master is free again."""
    name = "rl-alarm-stale"
    lock = Redlock(clients, name, ttl=30)
    for _ in range(3):  # servers probed, a connection of the quick path to each
        lock.acquire(blocking=False).release()  # type: ignore[union-attr]
    admin = redis.Redis.from_url(masters[0].url)
    _drop_connections(admin)  # the kept ones too
    deadline = time.monotonic() + 5  # (closed: the server may close them after it replies)
    while len(admin.client_list(_type="normal")) > 1:
        assert time.monotonic() < deadline, admin.client_list(_type="normal")
        time.sleep(0.01)
    time.sleep(0.05)
    admin.close()
    stand_in, fired = raise_once(redis.Connection.disconnect, AlarmTimeout, main_thread=True)
    monkeypatch.setattr(redis.Connection, "disconnect", stand_in)
    with pytest.raises(AlarmTimeout):
        lock.acquire()
    monkeypatch.undo()
    assert fired
    _gone_within(clients, name, 1.0)
    lease = lock.acquire(blocking=False)
    assert lease is not None
    lease.release()


@pytest.mark.parametrize("where", ["as-it-begins", "releasing"])
def test_the_owners_next_acquire_finishes_an_interrupted_release_first(
    clients: list[redis.Redis], monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """KeyboardInterrupt inside ``lease.release()`` (as the call begins, or
    once the lease is RELEASING, before the round is sent): every master
    still holds the old token. The same owner's next acquire sends that
    release again first: it neither answers ``AlreadyHeldError`` nor returns
    while the old token holds a master, and the old lease is over."""
    from tenure._leasebook import LeaseLife

    name = f"rl-unfinished-{where}"
    lock = Redlock(clients, name, ttl=30)
    old = lock.acquire(blocking=False)
    assert old is not None
    if where == "as-it-begins":
        stand_in, fired = raise_once(LeaseLife.check_process)
        monkeypatch.setattr(LeaseLife, "check_process", stand_in)
    else:
        stand_in, fired = raise_once(Redlock._release_round)
        monkeypatch.setattr(Redlock, "_release_round", stand_in)
    with pytest.raises(KeyboardInterrupt):
        old.release()
    monkeypatch.undo()
    assert fired
    assert _holders(clients, name) == [old.owner.encode()] * N
    new = lock.acquire(blocking=False)
    assert new is not None, "the old lease's release was finished before the take"
    assert old.owner.encode() not in _holders(clients, name)
    assert _holders(clients, name).count(new.owner.encode()) >= 3
    with pytest.raises(NotOwnedError):
        old.release()
    new.release()
    assert _holders(clients, name) == [None] * N


def test_the_owners_next_async_acquire_finishes_an_interrupted_release_first(
    clients: list[redis.Redis], masters: list[ServerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The asyncio twin: a release cut off once the lease is RELEASING is
    sent again by the same task's next acquire before it takes the lock."""
    name = "arl-unfinished"

    async def main() -> None:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        try:
            lock = AsyncRedlock(aclients, name, ttl=30)
            old = await lock.acquire(blocking=False)
            assert old is not None
            stand_in, fired = raise_once(AsyncRedlock._release_round)
            monkeypatch.setattr(AsyncRedlock, "_release_round", stand_in)
            with pytest.raises(KeyboardInterrupt):
                await old.release()
            monkeypatch.undo()
            assert fired
            assert _holders(clients, name) == [old.owner.encode()] * N
            new = await lock.acquire(blocking=False)
            assert new is not None, "the old lease's release was finished before the take"
            assert old.owner.encode() not in _holders(clients, name)
            await new.release()
        finally:
            for c in aclients:
                await c.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("handed", [True, False])
def test_an_interrupt_as_a_rounds_call_is_handed_to_a_thread_releases_after_it(
    clients: list[redis.Redis], masters: list[ServerProcess], handed: bool
) -> None:
    """KeyboardInterrupt as a fresh Redlock's acquire round hands master 0's
    call to a worker thread (``handed``: the call handed over and running,
    before the round hears of it: a signal handler runs as ``put`` returns):
    the clean-up release for master 0 is still queued behind that acquire,
    so the name is released there once the acquire runs, not held for the
    ttl. Cut off before it was handed over, the call never runs, and master
    0 is not left waiting for it (the next acquire takes it there)."""
    from tenure._drivers._sync import calls as sync_calls
    from tenure._drivers._sync import fanout as _fanout_sync

    name = f"rl-handed-over-interrupted-{handed}"
    at = "return future" if handed else "inbox.put(call)"
    pool = redis.ConnectionPool(
        host="127.0.0.1", port=masters[0].port, connection_class=_SlowFirstScript
    )
    slow = redis.Redis(connection_pool=pool)
    fresh = [slow] + [redis.Redis.from_url(s.url) for s in masters[1:]]
    lock = Redlock(fresh, name, ttl=30, master_timeout=0.5)
    code = sync_calls.Workers.submit.__code__
    fired: list[int] = []

    def in_take(frame: FrameType | None) -> bool:
        while frame is not None:
            if frame.f_code.co_name == "_take":
                return True
            frame = frame.f_back
        return False

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        fn = frame.f_locals.get("fn")
        if (
            not fired
            and event == "line"
            and at in linecache.getline(code.co_filename, frame.f_lineno)
            and getattr(fn, "func", None) is _fanout_sync._run_trusted
            and getattr(fn, "args", (None,))[0] is slow
            and in_take(frame)
        ):
            # the acquire is on master 0's worker thread, held before it is sent
            assert not handed or _SlowFirstScript.holding.wait(5)
            fired.append(frame.f_lineno)
            raise KeyboardInterrupt
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code is code else None

    _SlowFirstScript.go.clear()
    _SlowFirstScript.holding.clear()
    _SlowFirstScript.needle = name.encode()
    _SlowFirstScript.armed = True
    sys.settrace(calls)
    try:
        with pytest.raises(KeyboardInterrupt):
            lock.acquire()
    finally:
        sys.settrace(None)
        _SlowFirstScript.armed = False
        _SlowFirstScript.go.set()
    assert fired
    if handed:
        deadline = time.monotonic() + 5
        while _fence_on(clients[0], name) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _fence_on(clients[0], name) > 0, "the handed-over acquire ran on master 0"
    _gone_within(clients, name, 2.0)
    if not handed:
        assert _fence_on(clients[0], name) == 0, "the call cut off before it was handed over"
    lease = lock.acquire(blocking=False)
    assert lease is not None
    assert _holders(clients, name).count(lease.owner.encode()) >= 3
    lease.release()
    for c in fresh:
        c.close()


def _in(frame: FrameType | None, function: str) -> bool:
    """Whether ``frame`` is (called by) a call of a function named ``function``."""
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def _interrupt_in_the_rounds_wait(at: int) -> tuple[Any, list[str]]:
    """A trace function that raises KeyboardInterrupt once, at the ``at``-th
    line run by the sync round's wait for its calls on worker threads (in
    the acquire round, once master 0's acquire is held on its thread); and
    a list that names where, once it raised."""
    from tenure._drivers._sync import fanout as _fanout_sync

    waiter = _fanout_sync.run_each.__code__
    seen: list[int] = []
    fired: list[str] = []

    def under_wait(frame: FrameType | None) -> bool:
        while frame is not None:
            back = frame.f_back
            if back is not None and back.f_code is waiter:
                return frame.f_code.co_name == "wait_calls"
            frame = back
        return False

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if fired or event != "line":
            return local
        seen.append(1)
        if len(seen) == at:
            fired.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
            raise KeyboardInterrupt
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        if fired or not under_wait(frame) or not _in(frame, "_take"):
            return None  # (not the acquire round: the one that asks who the masters are)
        assert _SlowFirstScript.holding.wait(5), "master 0's acquire is on its thread"
        return local

    return calls, fired


def test_an_interrupt_anywhere_in_a_rounds_wait_for_its_threads_strands_nothing(
    masters: list[ServerProcess], clients: list[redis.Redis]
) -> None:
    """KeyboardInterrupt at each line, in turn, of the sync round's wait for
    its calls on worker threads (a fresh Redlock's first acquire round,
    master 0's acquire held on its thread): once master 0's acquire runs,
    the clean-up release queued behind it runs too, and the name is free on
    every master. (The wait entered each call's lock by calling its
    acquire: an interrupt as that call returned left the lock held, the
    worker blocked for good as it set the result, and the queued release
    never went out: the name stayed held on master 0 until its ttl.)"""
    at = 1
    while at <= 60:
        name = f"rl-wait-interrupted-{at}"
        pool = redis.ConnectionPool(
            host="127.0.0.1", port=masters[0].port, connection_class=_SlowFirstScript
        )
        fresh = [redis.Redis(connection_pool=pool)] + [
            redis.Redis.from_url(s.url) for s in masters[1:]
        ]
        lock = Redlock(fresh, name, ttl=30, master_timeout=0.5)
        calls, fired = _interrupt_in_the_rounds_wait(at)
        _SlowFirstScript.go.clear()
        _SlowFirstScript.holding.clear()
        _SlowFirstScript.needle = name.encode()
        _SlowFirstScript.armed = True
        sys.settrace(calls)
        try:
            lease = lock.acquire()
        except KeyboardInterrupt:
            lease = None
        finally:
            sys.settrace(None)
            _SlowFirstScript.armed = False
            _SlowFirstScript.go.set()
        if lease is not None:  # past the wait's last line: nothing cut off
            assert not fired
            # (master 0's attempt, let go in the finally above, runs first: this
            # round's subject is an interrupt in the wait, not that race)
            deadline = time.monotonic() + 5
            while _fence_on(clients[0], name) == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            lease.release()
            _gone_within(clients, name, 2.0)
            break
        assert fired
        deadline = time.monotonic() + 5
        while _fence_on(clients[0], name) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            _gone_within(clients, name, 2.0)
        except AssertionError:
            raise AssertionError(f"held after an interrupt in {fired[0]}") from None
        for c in fresh:
            c.close()
        at += 1
    assert at > 10, f"only {at - 1} points of the wait were interrupted"


def _interrupt_at_a_call(
    at: int, error: type[BaseException], where: tuple[str, ...]
) -> tuple[Any, list[str]]:
    """A profile function that raises ``error`` once, at the ``at``-th point
    where a signal handler may run (a Python function's entry, the return of
    a call into C) in the main thread, in a file whose path ends in one of
    ``where``; and a list that names where, once it raised."""
    seen: list[int] = []
    fired: list[str] = []
    main = threading.main_thread()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if fired or event not in ("call", "c_return") or threading.current_thread() is not main:
            return
        if not frame.f_code.co_filename.endswith(where):
            return
        seen.append(1)
        if len(seen) == at:
            called = getattr(arg, "__qualname__", "") if event == "c_return" else ""
            fired.append(f"{event} {called} in {frame.f_code.co_name}:{frame.f_lineno}")
            raise error

    return profile, fired


def _reserve_counts(clients: list[redis.Redis]) -> list[tuple[int, int, int]]:
    """Each client's run_each reserve: connections counted, kept (idle or
    owing replies), being checked out; once no checkout is under way."""
    from tenure._drivers._sync import _state

    deadline = time.monotonic() + 5
    while any(_state(c).fan.connecting for c in clients) and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.005)
    out = []
    for c in clients:
        fan = _state(c).fan
        assert fan is not None
        with fan.mutex:
            out.append((fan.open, len(fan.idle) + len(fan.owed), int(fan.connecting)))
    return out


@pytest.mark.parametrize("error", [KeyboardInterrupt, AlarmTimeout])
def test_an_interrupt_at_any_call_of_the_quick_path_loses_no_connection(
    clients: list[redis.Redis], masters: list[ServerProcess], error: type[BaseException]
) -> None:
    """An interrupt (of either class) at each point of the sync fan-out in
    turn where a signal handler may run, through a probed Redlock's acquire:
    every connection the quick path holds stays counted and reachable (kept
    in its reserve, or dropped and given back to its pool), and the name is
    free once the clean-up is done. (A connection taken out of the reserve,
    or out of the round's own book to be kept, was lost to both when the
    interrupt came between the two: the reserve counted it for good, and
    once it counted all it may hold, every call left the quick path.)"""
    name = f"rl-every-call-{error.__name__}"
    mine = [redis.Redis.from_url(s.url) for s in masters]
    lock = Redlock(mine, name, ttl=30)
    for _ in range(3):  # servers probed, a connection of the quick path to each
        lock.acquire(blocking=False).release()  # type: ignore[union-attr]
    where = (
        os.path.join("_drivers", "_sync", "fanout.py"),
        os.path.join("_drivers", "_sync", "calls.py"),
        os.path.join("_drivers", "_fanout_shared.py"),
    )
    at = 1
    while at <= 2000:
        profile, fired = _interrupt_at_a_call(at, error, where)
        lease = None
        sys.setprofile(profile)
        try:
            lease = lock.acquire(blocking=False)
        except error:
            pass
        finally:
            sys.setprofile(None)
        if lease is not None:
            lease.release()
        if not fired:
            break
        deadline = time.monotonic() + 5
        while _sync_fanout._book.pending() and time.monotonic() < deadline:
            time.sleep(0.005)
        for k, (counted, kept, connecting) in enumerate(_reserve_counts(mine)):
            assert counted == kept + connecting, (
                f"master {k}: {counted - kept - connecting} connection(s) lost"
                f" after an interrupt at {fired[0]}"
            )
        try:
            _gone_within(clients, name, 2.0)
        except AssertionError:
            raise AssertionError(f"held after an interrupt at {fired[0]}") from None
        at += 1
    assert at > 100, f"only {at - 1} points of the acquire were interrupted"
    for c in mine:
        c.close()


class _FinishesItsWrite(redis.asyncio.Connection):
    """Once armed (a class attribute: how many more), a connection whose send
    of an acquire is slow and, cancelled meanwhile, finishes that send before
    it lets the cancellation through: what a library does that sees a
    cancellation only once the write it is in is done."""

    armed = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        data = command if isinstance(command, bytes | str) else b"".join(command)
        data = data.encode() if isinstance(data, str) else data
        if _FinishesItsWrite.armed and LOCK_ACQUIRE.sha1.encode() in data:
            _FinishesItsWrite.armed -= 1
            try:
                await asyncio.sleep(0.5)
            except asyncio.CancelledError:
                await asyncio.sleep(0.05)
                await super().send_packed_command(command, check_health)
                await self.disconnect(nowait=True)  # (its reply is never read)
                raise
        await super().send_packed_command(command, check_health)


def test_an_async_clean_up_never_overtakes_an_acquire_still_being_sent(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """An acquire cancelled while a quorum of masters' attempts are still being sent
    (each in a task of its own, which finishes its write before it sees the
    cancellation): the clean-up release waits behind those calls, so it
    reaches each master after the attempt it undoes, and nothing stays held
    (before: the release went first, and the late attempts held the name on a
    quorum for the ttl)."""

    async def main() -> None:
        slow = [
            redis.asyncio.Redis(
                connection_pool=redis.asyncio.BlockingConnectionPool(
                    host="127.0.0.1", port=s.port, connection_class=_FinishesItsWrite
                )
            )
            for s in masters
        ]
        lock = AsyncRedlock(slow, "arl-finishes", ttl=30)
        await (await lock.acquire(blocking=False)).release()  # type: ignore[union-attr]
        _FinishesItsWrite.armed = N // 2 + 1  # (a quorum: none granted in time)
        try:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await lock.acquire()
        finally:
            _FinishesItsWrite.armed = 0
        await asyncio.sleep(0.3)  # (the attempts cut off land meanwhile)
        await _agone_within(clients, "arl-finishes", 2.0)
        lease = await lock.acquire(blocking=False)
        assert lease is not None
        await lease.release()
        for c in slow:
            await c.aclose()

    asyncio.run(main())
