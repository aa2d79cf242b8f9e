"""Exact-key locks shared with foreign clients (redis-py's ``Lock``), on a real server.

A foreign client polls the key with ``SET NX`` and hears no hand-off, and its
release wakes nobody. In exact-key mode tenure bounds its hand-off chains
(leaving the key free for a window), and its first waiter polls a key that a
foreign client holds; named locks hand off as before.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections import Counter
from typing import Any

import pytest
import redis
from _not_utf8 import NOT_UTF8

from tenure import Lock, WrongTypeError
from tenure._keys import lock_keys
from tenure._plans.lock import (
    EXACT_CHAIN,
    EXACT_SHORT_WINDOW_MS,
    EXACT_WINDOW_MS,
    FOREIGN_MEMORY_MS,
    FOREIGN_POLL_MS,
    FOREIGN_WINDOW_MS,
)
from tenure._protocol import Status, parse_reply

Section = tuple[str, float, float]  # (who, start, end) on time.monotonic()


def _tenure_worker(
    url: str, key: str, who: str, start: threading.Barrier, end: float, out: list[Section]
) -> None:
    """Acquire, hold 1 ms, release and ask again at once, until ``end``."""
    client = redis.Redis.from_url(url)
    lock = Lock(client, key=key, ttl=5)
    start.wait()
    while time.monotonic() < end:
        lease = lock.acquire(timeout=max(0.0, end - time.monotonic()))
        if lease is None:
            break
        began = time.monotonic()
        time.sleep(0.001)
        out.append((who, began, time.monotonic()))
        lease.release()
    client.close()


def _redis_py_worker(
    url: str,
    key: str,
    start: threading.Barrier,
    end: float,
    out: list[Section],
    sleep: float = 0.01,
    polls: list[tuple[float, float]] | None = None,
    hold: float = 0.001,
) -> None:
    """redis-py's Lock polling every ``sleep`` seconds: acquire, hold ``hold`` s, release,
    then 2 ms of work outside the lock before asking again (asking again at once,
    redis-py would take the key back before any other client's poll could see it
    free). ``polls``, if given, gets each of its attempts as the times it was
    sent and answered (it reached the server in between)."""
    client = redis.Redis.from_url(url)
    theirs = client.lock(key, timeout=5, sleep=sleep)
    if polls is not None:
        attempt = theirs.do_acquire

        def recorded(token: Any) -> bool:
            sent = time.monotonic()
            try:
                return bool(attempt(token))
            finally:
                polls.append((sent, time.monotonic()))

        theirs.do_acquire = recorded
    start.wait()
    while time.monotonic() < end:
        if not theirs.acquire(blocking_timeout=max(0.01, end - time.monotonic())):
            break
        began = time.monotonic()
        time.sleep(hold)
        out.append(("redis-py", began, time.monotonic()))
        theirs.release()
        time.sleep(0.002)
    client.close()


def _check_exclusion(sections: list[Section]) -> None:
    ordered = sorted(sections, key=lambda s: s[1])
    for a, b in itertools.pairwise(ordered):
        assert a[2] <= b[1], f"overlapping sections: {a} and {b}"


def _told(pubsub: Any, timeout: float) -> Any:
    """The next message on ``pubsub`` within ``timeout`` seconds, or ``None``; a
    "probe" (Redis 6.2's channel permission check, which waiters ignore) is
    passed over."""
    deadline = time.monotonic() + timeout
    while True:
        message = pubsub.get_message(timeout=max(0.0, deadline - time.monotonic()))
        if message is None or message.get("data") != b"probe":
            return message


def test_redis_py_poller_and_tenure_waiters_share_an_exact_key(url: str) -> None:
    """Two tenure clients hand the key to each other as fast as they can while
    redis-py's Lock polls it every 10 ms: nobody overlaps, and each side takes
    at least a quarter of the sections (before the fix redis-py got none after
    its first: the key went from tenure waiter to tenure waiter, never free)."""
    out: list[Section] = []
    start = threading.Barrier(3)
    end = time.monotonic() + 3.0
    threads = [
        threading.Thread(target=_tenure_worker, args=(url, "orders:42", f"t{i}", start, end, out))
        for i in range(2)
    ]
    threads.append(
        threading.Thread(target=_redis_py_worker, args=(url, "orders:42", start, end, out))
    )
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    _check_exclusion(out)
    sides = Counter("redis-py" if who == "redis-py" else "tenure" for who, _, _ in out)
    total = sum(sides.values())
    assert total >= 100, sides
    assert min(sides["redis-py"], sides["tenure"]) >= total / 4, sides


def _share_a_key(
    url: str,
    key: str,
    seconds: float,
    sleep: float,
    held_first: float = 0.0,
    polls: list[tuple[float, float]] | None = None,
    hold: float = 0.001,
) -> tuple[list[Section], float]:
    """Two tenure clients and redis-py's Lock (polling every ``sleep`` s) loop on
    ``key`` for ``seconds``: their sections in order, checked for overlaps, and
    when tenure first saw a foreign holder (its foreign key appeared; ``inf``
    if never). ``held_first``: a foreign holder holds ``key`` that long (s) as
    they start, so that tenure sees one at once. ``hold``: how long redis-py
    holds the key each time (s)."""
    if held_first:
        redis.Redis.from_url(url).set(key, "first", px=int(held_first * 1000))
    out: list[Section] = []
    start = threading.Barrier(3)
    end = time.monotonic() + seconds
    seen = [math.inf]
    foreign = lock_keys(None, key=key, prefix="tenure:").foreign

    def watch() -> None:
        watcher = redis.Redis.from_url(url)
        while time.monotonic() < end and not watcher.exists(foreign):
            time.sleep(0.001)
        if watcher.exists(foreign):
            seen[0] = time.monotonic()
        watcher.close()

    threads = [
        threading.Thread(target=_tenure_worker, args=(url, key, f"t{i}", start, end, out))
        for i in range(2)
    ]
    poller = (url, key, start, end, out, sleep, polls, hold)
    threads.append(threading.Thread(target=_redis_py_worker, args=poller))
    threads.append(threading.Thread(target=watch))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    _check_exclusion(out)
    return sorted(out, key=lambda s: s[1]), seen[0]


def test_a_slow_poller_gets_a_turn_after_every_chain(url: str) -> None:
    """redis-py's Lock at its default poll period (0.1 s, like node-redlock's
    100-300 ms) against two tenure clients that always wait: once tenure has seen
    it hold the key (a foreign holder at the start makes sure it does), tenure
    takes at most EXACT_CHAIN + 1 sections in a row before it gets the key
    again, so it has at least one section in EXACT_CHAIN + 2.
    (With 10 ms windows only it got 6-10 % of the sections, with runs of 20 to
    40 tenure sections between its own: a poll every 0.1 s lands at most once.)"""
    polls: list[tuple[float, float]] = []
    # (each hold outlasts the first waiter's look during a window, every
    # FOREIGN_POLL_MS: the bound counts on tenure seeing the foreign holds)
    ordered, seen = _share_a_key(
        url, "slow:42", 2.5, 0.1, held_first=0.1, polls=polls, hold=4 * FOREIGN_POLL_MS / 1000
    )
    # from its first section after tenure saw a foreign holder
    ours = [i for i, (who, b, _) in enumerate(ordered) if who == "redis-py" and b > seen]
    assert len(ours) >= 5, Counter(who for who, _, _ in ordered)

    def kept_asking(a: int, b: int) -> bool:
        """Whether a request of redis-py reached the server in every
        FOREIGN_WINDOW_MS between its sections ``a`` and ``b`` (the bound's
        condition: a machine too loaded to run its thread that often is
        outside it). A request reached the server between the times it was
        sent and answered, so two in a row are at most the later one's answer
        minus the earlier one's sending apart."""
        after, before = ordered[a][2], ordered[b][1]
        asked = [(after, after), *((s, r) for s, r in polls if after < s and r < before)]
        asked.append((before, before))
        gaps = (later[1] - earlier[0] for earlier, later in itertools.pairwise(asked))
        return max(gaps) <= FOREIGN_WINDOW_MS / 1000

    runs = [(b - a - 1, kept_asking(a, b)) for a, b in itertools.pairwise(ours)]
    assert max((n for n, kept in runs if kept), default=0) <= EXACT_CHAIN + 1, runs
    assert sum(1 for _, kept in runs if not kept) <= len(runs) // 4, runs  # (not most of them)
    after = ordered[ours[0] :]
    share = sum(1 for who, _, _ in after if who == "redis-py") / len(after)
    assert share >= 1 / (EXACT_CHAIN + 2), share


def _queued(r: redis.Redis, waiters: str, n: int, timeout: float = 5.0) -> None:
    """Wait until ``waiters`` holds ``n`` members."""
    deadline = time.monotonic() + timeout
    while r.zcard(waiters) != n:
        assert time.monotonic() < deadline, f"{waiters} never held {n} waiters"
        time.sleep(0.002)


def _ping_pong(
    r: redis.Redis,
    url: str,
    where: dict[str, str],
    rounds: int,
    caplog: pytest.LogCaptureFixture,
) -> list[bool]:
    """Two clients' locks (``Lock(**where)``) released in turn while the other
    waits: whether each release handed the lock over (its waiter was woken
    holding it: the waiter's own account, which no scheduling delay of this
    thread can blur; the key then held the waiter's token as soon as the
    release returned)."""
    caplog.set_level(logging.DEBUG, logger="tenure.lock")
    keys = lock_keys(where.get("name"), key=where.get("key"), prefix="tenure:")
    name, key = where.get("name"), where.get("key")
    locks = [Lock(redis.Redis.from_url(url), name, key=key, ttl=5) for _ in range(2)]
    lease = locks[0].acquire()
    assert lease is not None
    handed: list[bool] = []
    for i in range(rounds):
        got: list[Any] = []
        nxt = locks[(i + 1) % 2]
        t = threading.Thread(target=lambda g=got, n=nxt: g.append(n.acquire(timeout=5)))
        t.start()
        _queued(r, keys.waiters, 1)
        lease.release()
        after = r.get(keys.lock)
        t.join(timeout=10)
        lease = got[0]
        assert lease is not None
        assert after is None or after == lease.owner.encode(), after  # never a third party's
        handed.append(
            any(
                f" fence={lease.fence} " in rec.getMessage()
                and rec.getMessage().endswith("(handed off)")
                for rec in caplog.records
            )
        )
        if handed[-1]:
            assert after == lease.owner.encode(), after  # (held by the waiter at once)
    lease.release()
    return handed


def test_named_lock_hands_off_every_time(
    r: redis.Redis, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A named lock is tenure's alone: every release hands it to the waiter, however
    long the chain (the key is never left free)."""
    handed = _ping_pong(r, url, {"name": "chain"}, EXACT_CHAIN + 3, caplog)
    assert handed == [True] * (EXACT_CHAIN + 3)


def test_exact_key_chain_is_bounded_then_left_free(
    r: redis.Redis, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """In exact-key mode EXACT_CHAIN hand-offs in a row are made; the next release
    leaves the key free (for a window), and the waiter still gets it soon after;
    then the chain starts again."""
    handed = _ping_pong(r, url, {"key": "bounded"}, EXACT_CHAIN + 2, caplog)
    assert handed == [True] * EXACT_CHAIN + [False, True], handed


def test_releaser_asking_again_queues_behind_a_tenure_waiter(r: redis.Redis) -> None:
    """Exact-key mode: while a tenure waiter is queued, a releaser asking again never
    takes the key, whether the release handed it over, left it free for the
    window, or the window is over (the waiter is told to take it)."""
    keys = lock_keys(None, key="behind", prefix="tenure:")
    pubsub = r.pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe(keys.wake_prefix + "w1")  # a live waiter that does not act
    assert pubsub.get_message(timeout=1) is not None  # the subscription
    r.zadd(keys.waiters, {"w1|1000|their-token": 1})
    mine = Lock(r, key="behind", ttl=5)
    assert mine.acquire(blocking=False) is None  # the key is free, but w1 is first
    assert r.get("behind") is None
    message = _told(pubsub, 1)
    assert message is not None and message["data"] == b"recheck 0"
    r.set(keys.chain, f"free {EXACT_WINDOW_MS}", px=EXACT_WINDOW_MS * 50)  # a release's window
    assert mine.acquire(blocking=False) is None
    assert _told(pubsub, 0.05) is None  # nobody is told during the window
    r.delete(keys.chain)
    pubsub.unsubscribe()  # w1 is gone: dropped, and the key is taken
    pubsub.close()
    lease = mine.acquire(blocking=False)
    assert lease is not None and r.zcard(keys.waiters) == 0
    lease.release()


def test_tenure_waiter_polls_a_key_held_by_redis_py(r: redis.Redis, url: str) -> None:
    """redis-py's release publishes nothing: the tenure waiter gets the key soon
    after it, not when redis-py's 10 s lease would have ended."""
    theirs = r.lock("polled", timeout=10)
    assert theirs.acquire()
    got: list[Any] = []
    lock = Lock(redis.Redis.from_url(url), key="polled", ttl=5)
    t = threading.Thread(target=lambda: got.append((lock.acquire(timeout=3), time.monotonic())))
    t.start()
    time.sleep(0.3)
    released_at = time.monotonic()
    theirs.release()
    t.join(timeout=10)
    lease, at = got[0]
    assert lease is not None and at - released_at < 1.0, at - released_at
    keys = lock_keys(None, key="polled", prefix="tenure:")
    assert 0 < r.pttl(keys.foreign) <= FOREIGN_MEMORY_MS  # a foreign holder was seen
    lease.release()


def test_the_window_follows_the_foreign_holders_seen(r: redis.Redis) -> None:
    """A release at the chain bound leaves the key free for a window and tells the
    first waiter when to look again: the short window when no foreign holder was
    seen lately; else the foreign key's window (full after a foreign holder was
    seen), the first waiter asked to look every FOREIGN_POLL_MS, and the next
    window halved (down to EXACT_WINDOW_MS) unless a foreign holder is seen."""
    keys = lock_keys(None, key="window", prefix="tenure:")
    pubsub = r.pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe(keys.wake_prefix + "w1")  # a live waiter that does not act
    assert pubsub.get_message(timeout=1) is not None
    lock = Lock(r, key="window", ttl=5)
    full, floor = FOREIGN_WINDOW_MS, EXACT_WINDOW_MS
    cases = [  # (foreign key before, window, told, foreign key after)
        (None, EXACT_SHORT_WINDOW_MS, EXACT_SHORT_WINDOW_MS, None),
        (f"7 {full} x y", full, FOREIGN_POLL_MS, f"7 {full // 2} x y"),
        (f"7 {full // 2} x y", full // 2, FOREIGN_POLL_MS, f"7 {full // 4} x y"),
        (f"7 {floor + 2} x", floor + 2, FOREIGN_POLL_MS, f"7 {floor} x"),
        (f"7 {floor} x", floor, floor, f"7 {floor} x"),  # (floor <= 2 * FOREIGN_POLL_MS)
        ("7 x", floor, floor, "7 x"),  # an older tenure's foreign key: the least window
    ]
    for before, window, told, after in cases:
        if before is not None:
            r.set(keys.foreign, before, px=FOREIGN_MEMORY_MS)
        lease = lock.acquire(blocking=False)
        assert lease is not None
        r.set(keys.chain, f"{EXACT_CHAIN} {lease.owner}")  # as after EXACT_CHAIN hand-offs
        r.zadd(keys.waiters, {"w1|1000|their-token": 1})
        lease.release()
        assert r.get("window") is None  # left free (w1 doesn't act)
        assert r.get(keys.chain) in (f"free {window}".encode(), None)  # (or its end already)
        message = _told(pubsub, 1)
        assert message is not None and message["data"] == f"recheck {told}".encode(), before
        assert r.get(keys.foreign) == (after.encode() if after else None), before
        if after:
            assert FOREIGN_MEMORY_MS - 1000 < r.pttl(keys.foreign) <= FOREIGN_MEMORY_MS
        r.delete(keys.waiters, keys.chain, keys.foreign)
    pubsub.close()


def test_a_foreign_holder_seen_in_a_window_ends_it(r: redis.Redis) -> None:
    """While a long window is open the first waiter is asked to look again every
    FOREIGN_POLL_MS; once it finds a foreign client holding the key, the window is
    over (so it takes the key as soon as that client lets go) and the next
    window is a full one again."""
    keys = lock_keys(None, key="ended", prefix="tenure:")
    r.set(keys.foreign, "7 20 old", px=FOREIGN_MEMORY_MS)  # a decayed window
    r.set(keys.chain, f"free {FOREIGN_WINDOW_MS}", px=FOREIGN_WINDOW_MS)
    lock = Lock(r, key="ended", ttl=5)
    assert lock.acquire(blocking=False) is None  # free, but the window is open
    assert r.get(keys.chain) == f"free {FOREIGN_WINDOW_MS}".encode()
    theirs = r.lock("ended", timeout=10)
    assert theirs.acquire(blocking=False)  # the foreign client lands in the window
    assert lock.acquire(blocking=False) is None  # and is seen holding it
    assert r.get(keys.chain) is None  # the window is over
    _since, window, holder = r.get(keys.foreign).decode().split(" ", 2)  # type: ignore[union-attr]
    assert int(window) == FOREIGN_WINDOW_MS and holder.encode() == r.get("ended")
    theirs.release()
    lease = lock.acquire(blocking=False)  # the key is tenure's again at once
    assert lease is not None
    lease.release()


def test_a_hold_after_nobody_queued_counts_on_while_foreigners_are_about(r: redis.Redis) -> None:
    """A release that leaves the key free with nobody queued lets the next tenure
    acquire count on (while a foreign holder was seen lately), so a tenure
    releaser that asks again at once can't start a new chain: its release at
    the bound leaves the window. Without a foreign holder seen, the count starts
    again (no cost when only tenure uses the key)."""
    keys = lock_keys(None, key="counted", prefix="tenure:")
    pubsub = r.pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe(keys.wake_prefix + "w1")  # a live waiter that does not act
    assert pubsub.get_message(timeout=1) is not None
    lock = Lock(r, key="counted", ttl=5)
    for seen in (False, True):
        if seen:
            r.set(keys.foreign, f"7 {FOREIGN_WINDOW_MS} x", px=FOREIGN_MEMORY_MS)
        lease = lock.acquire(blocking=False)
        assert lease is not None
        # as after EXACT_CHAIN - 1 hand-offs: one below the bound
        r.set(keys.chain, f"{EXACT_CHAIN - 1} {lease.owner}")
        r.zadd(keys.waiters, {"gone|1000|old-token": 1})  # a waiter nobody hears
        lease.release()  # nobody live queued: left free, and no window was left
        assert r.get(keys.chain) == (str(EXACT_CHAIN).encode() if seen else None)
        assert r.zcard(keys.waiters) == 0
        if seen:  # no window was left: the next one is still a full one
            assert r.get(keys.foreign) == f"7 {FOREIGN_WINDOW_MS} x".encode()
        lease = lock.acquire(blocking=False)  # the releaser asks again at once
        assert lease is not None
        counted = EXACT_CHAIN if seen else 0
        assert r.get(keys.chain) == f"{counted} {lease.owner}".encode()
        r.zadd(keys.waiters, {"w1|1000|their-token": 1})
        lease.release()
        if seen:  # at the bound: left free for the window
            assert r.get("counted") is None
            assert r.get(keys.chain) in (f"free {FOREIGN_WINDOW_MS}".encode(), None)
        else:  # handed to w1
            assert r.get("counted") == b"their-token"
            r.delete("counted")
        r.delete(keys.waiters, keys.chain, keys.foreign)
    pubsub.close()


def test_a_hold_at_the_bound_with_nobody_queued_leaves_the_window(r: redis.Redis) -> None:
    """The hold that ends at the chain bound leaves the window even with nobody
    queued (a tenure releaser asking again at once would otherwise be one
    hold too many in a row, EXACT_CHAIN + 2): its release leaves the key free,
    tenure's next acquire is turned away until a foreign client holds the key
    or the window ends, and the window after it is half as long."""
    keys = lock_keys(None, key="bounded", prefix="tenure:")
    r.set(keys.foreign, f"7 {FOREIGN_WINDOW_MS} x", px=FOREIGN_MEMORY_MS)
    lock = Lock(r, key="bounded", ttl=5)
    lease = lock.acquire(blocking=False)
    assert lease is not None
    r.set(keys.chain, f"{EXACT_CHAIN} {lease.owner}")  # as after EXACT_CHAIN hand-offs
    lease.release()
    assert r.get("bounded") is None
    assert r.get(keys.chain) == f"free {FOREIGN_WINDOW_MS}".encode()
    assert 0 < r.pttl(keys.chain) <= FOREIGN_WINDOW_MS
    assert r.get(keys.foreign) == f"7 {FOREIGN_WINDOW_MS // 2} x".encode()
    assert lock.acquire(blocking=False) is None  # the releaser asks again at once
    assert r.get("bounded") is None
    assert r.set("bounded", "theirs", nx=True)  # a foreign poller lands in the window


def _first_poll(r: redis.Redis, key: str, chain: str) -> Any:
    """The reply (status, value) of a queued caller's acquire on the free
    ``key`` while its chain key says ``chain`` (PX its window)."""
    from tenure._plans.common import FENCE_KEEP_MS
    from tenure._plans.lock import FOREIGN_OTHERS_MS
    from tenure._scripts import LOCK_ACQUIRE

    keys = lock_keys(None, key=key, prefix="tenure:")
    r.set(keys.chain, chain, px=int(chain.split()[1]))
    raw = r.eval(
        LOCK_ACQUIRE.source.decode(),
        6,
        *(keys.lock, keys.fence, keys.waiters, keys.delay, keys.chain, keys.foreign),
        *("tok", "own:", 5000, "w9|1000|tok", FENCE_KEEP_MS, 0, keys.wake_prefix),
        *(FOREIGN_POLL_MS, FOREIGN_OTHERS_MS, FOREIGN_MEMORY_MS, FOREIGN_WINDOW_MS),
    )
    return parse_reply(LOCK_ACQUIRE, raw)


def test_the_first_waiter_looks_every_poll_in_a_long_window_only(r: redis.Redis) -> None:
    """In a long window the first queued waiter is told to try again in
    FOREIGN_POLL_MS; a short window it sleeps through."""
    status, wait = _first_poll(r, "polls", f"free {FOREIGN_WINDOW_MS}")
    assert status is Status.BUSY and wait == FOREIGN_POLL_MS
    status, wait = _first_poll(r, "polls2", f"free {EXACT_WINDOW_MS}")
    assert status is Status.BUSY and FOREIGN_POLL_MS < wait <= EXACT_WINDOW_MS


def test_wrong_type_chain_key_names_the_key(r: redis.Redis) -> None:
    keys = lock_keys(None, key="typed", prefix="tenure:")
    r.lpush(keys.chain, "x")
    with pytest.raises(WrongTypeError, match=r"'\{typed\}:key:chain'"):
        Lock(r, key="typed").acquire(blocking=False)
    assert not r.exists("typed")  # nothing half-written
    r.delete(keys.chain)
    lease = Lock(r, key="typed", ttl=5).acquire(blocking=False)
    assert lease is not None
    r.delete(keys.chain)
    r.lpush(keys.chain, "x")
    with pytest.raises(WrongTypeError, match="chain"):
        lease.release()
    assert r.get("typed") == lease.owner.encode()  # still held: nothing written
    r.delete(keys.chain)
    lease.release()


def test_async_waiter_polls_a_key_held_by_redis_py(r: redis.Redis, url: str) -> None:
    """The same with an AsyncLock: redis-py's release is seen within a second."""
    import asyncio

    import redis.asyncio

    from tenure import AsyncLock

    theirs = r.lock("apolled", timeout=10)
    assert theirs.acquire()

    async def main() -> float:
        client = redis.asyncio.Redis.from_url(url)
        lock = AsyncLock(client, key="apolled", ttl=5)
        waiting = asyncio.ensure_future(lock.acquire(timeout=3))
        await asyncio.sleep(0.3)
        released_at = time.monotonic()
        theirs.release()
        lease = await waiting
        took = time.monotonic() - released_at
        assert lease is not None
        await lease.release()
        await client.aclose()
        return took

    took = asyncio.run(main())
    assert took < 1.0, took


def test_a_stale_member_of_the_callers_own_process_is_dropped(r: redis.Redis) -> None:
    """A member left behind by an earlier waiter of the caller's own process (its
    leave failed) heads the queue of a free key: it is dropped, not told to
    retry (which would only wake the caller again, at once, for ever)."""
    from tenure._plans.common import FENCE_KEEP_MS
    from tenure._plans.lock import FOREIGN_OTHERS_MS
    from tenure._scripts import LOCK_ACQUIRE

    keys = lock_keys(None, key="stale", prefix="tenure:")
    pubsub = r.pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe(keys.wake_prefix + "w1")  # the caller's process listens
    assert pubsub.get_message(timeout=1) is not None
    r.zadd(keys.waiters, {"w1|1000|old-token": 1})
    reply = r.eval(
        LOCK_ACQUIRE.source.decode(),
        6,
        *(keys.lock, keys.fence, keys.waiters, keys.delay, keys.chain, keys.foreign),
        *("new-token", "own:", 5000, "w1|1000|new-token", FENCE_KEEP_MS, 0),
        *(keys.wake_prefix, FOREIGN_POLL_MS, FOREIGN_OTHERS_MS, 5000, FOREIGN_WINDOW_MS),
    )
    assert parse_reply(LOCK_ACQUIRE, reply)[0] is Status.OK and r.get("stale") == b"new-token"
    assert r.zcard(keys.waiters) == 0
    assert _told(pubsub, 0.05) is None  # nobody was told anything
    pubsub.close()


def test_a_long_foreign_hold_is_polled_less_and_less(r: redis.Redis, url: str) -> None:
    """The first waiter polls a foreign holder every tenth of the time it has held
    the key so far (at least every 5 ms, at most every second): a 1.5 s hold
    costs a few dozen polls, not 300, and the waiter still follows the release
    within a tenth of the hold (and the round trips)."""
    theirs = r.lock("long", timeout=10)
    assert theirs.acquire()
    r.config_resetstat()
    got: list[Any] = []
    lock = Lock(redis.Redis.from_url(url), key="long", ttl=5)
    t = threading.Thread(target=lambda: got.append((lock.acquire(timeout=5), time.monotonic())))
    t.start()
    time.sleep(1.5)
    released_at = time.monotonic()
    theirs.release()
    t.join(timeout=10)
    lease, at = got[0]
    assert lease is not None and at - released_at < 0.5, at - released_at
    stats = r.info("commandstats")
    scripts = sum(
        int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval")
    )
    assert scripts < 80, scripts
    lease.release()


def test_a_foreign_message_not_utf8_on_a_wake_channel_wakes_nobody(
    r: redis.Redis, url: str
) -> None:
    """Another program publishing bytes that are not UTF-8 on a waiter's wake
    channel: the hub reads it as no hand-off of its own and goes on listening,
    so the release that follows still wakes the waiter at once."""
    lease = Lock(r, "heard", ttl=30).acquire()
    assert lease is not None
    got: list[Any] = []
    lock = Lock(redis.Redis.from_url(url), "heard", ttl=5)
    t = threading.Thread(target=lambda: got.append((lock.acquire(timeout=10), time.monotonic())))
    t.start()
    deadline = time.monotonic() + 5
    while not r.pubsub_channels("*{heard}*"):
        assert time.monotonic() < deadline, "the waiter never subscribed"
        time.sleep(0.005)
    (channel,) = r.pubsub_channels("*{heard}*")
    assert r.publish(channel, NOT_UTF8) == 1
    time.sleep(0.3)
    assert t.is_alive()  # (not woken into taking a lock that is held)
    released_at = time.monotonic()
    lease.release()
    t.join(15)
    theirs, at = got[0]
    assert theirs is not None and at - released_at < 1.0, at - released_at
    theirs.release()
