"""CountDownLatch and AsyncCountDownLatch against a real server."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest
import redis
import redis.asyncio
from _not_utf8 import NOT_UTF8
from _workers import latch_waiter

from tenure import (
    AsyncCountDownLatch,
    CountDownLatch,
    CountDownLatchInfo,
    InvalidArgument,
    WrongTypeError,
)
from tenure._scripts import LATCH_COUNT_DOWN, LATCH_SET
from tenure._server import free_port

SPAWN = multiprocessing.get_context("spawn")
COUNT = "tenure:{%s}:latch"


def background(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


def subscribers(r: redis.Redis, name: str) -> int:
    """How many connections (one per waiting client) listen on the latch's channel."""
    return int(dict(r.pubsub_numsub(COUNT % name + ":zero"))[(COUNT % name + ":zero").encode()])


def until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_set_count_down_and_reuse(r: redis.Redis) -> None:
    latch = CountDownLatch(r, "job")
    assert latch.name == "job" and latch.count() == 0 and latch.wait(0)  # open: no count set
    assert latch.try_set_count(2)
    assert not latch.try_set_count(5)  # only while zero
    assert latch.count() == 2 and r.get(COUNT % "job") == b"2" and r.ttl(COUNT % "job") == -1
    assert latch.count_down() == 1 and latch.count() == 1
    opened_before = latch.info().opened
    assert latch.count_down() == 0
    info = latch.info()
    assert info == CountDownLatchInfo("job", 0, info.opened) and info.opened > opened_before
    assert not r.exists(COUNT % "job")  # zero: the count is deleted
    assert latch.count_down() == 0 and latch.info().opened == info.opened  # at zero: nothing
    assert latch.try_set_count(1)  # reusable once open
    assert latch.count_down() == 0 and latch.info().opened > info.opened


def test_a_wait_that_need_not_wait_subscribes_to_nothing(r: redis.Redis, url: str) -> None:
    """A wait on an open latch, or one with no time to wait, reads the count
    and returns: its process's hub subscribes to nothing (no subscription
    left lingering for the latch's messages)."""
    latch = CountDownLatch(r, "open")
    assert latch.wait() and latch.wait(timeout=1)  # never set
    assert latch.try_set_count(1) and latch.wait(timeout=0) is False
    assert latch.count_down() == 0 and latch.wait(timeout=1)

    async def tasks() -> None:
        client = redis.asyncio.Redis.from_url(url)
        alatch = AsyncCountDownLatch(client, "open")
        assert await alatch.wait() and await alatch.try_set_count(1)
        assert await alatch.wait(timeout=0) is False
        assert await alatch.count_down() == 0 and await alatch.wait(timeout=1)
        await client.aclose()

    asyncio.run(tasks())
    assert subscribers(r, "open") == 0


def test_wait_times_out_then_opens_for_every_waiter(r: redis.Redis) -> None:
    latch = CountDownLatch(r, "w")
    latch.try_set_count(2)
    started = time.monotonic()
    assert latch.wait(timeout=0.2) is False
    assert time.monotonic() - started >= 0.2
    waiters = [background(lambda: latch.wait(timeout=10)) for _ in range(5)]
    until(lambda: subscribers(r, "w") == 1)  # one shared subscription for the process
    time.sleep(0.05)
    latch.count_down()
    time.sleep(0.1)
    assert not any(out for _, out in waiters)  # count 1: nobody passes
    opened_at = time.monotonic()
    latch.count_down()
    for t, _ in waiters:
        t.join(timeout=5)
    assert [out for _, out in waiters] == [[True]] * 5
    assert time.monotonic() - opened_at < 1.0  # woken by the message, not by a timer


def test_a_waiter_sees_an_opening_even_if_the_count_was_set_again(r: redis.Redis) -> None:
    latch = CountDownLatch(r, "again")
    latch.try_set_count(1)
    t, out = background(lambda: latch.wait(timeout=5))
    until(lambda: subscribers(r, "again") == 1)
    time.sleep(0.05)
    # Open and set again in one transaction, before the waiter can read the count.
    count, opened, channel = COUNT % "again", COUNT % "again" + ":opened", COUNT % "again" + ":zero"
    by = COUNT % "again" + ":by"
    pipe = r.pipeline(transaction=True)
    pipe.evalsha(LATCH_COUNT_DOWN.sha1, 3, count, opened, by, channel, 60000)
    pipe.evalsha(LATCH_SET.sha1, 2, count, by, 3, "")
    pipe.execute()
    t.join(timeout=5)
    assert out == [True] and latch.count() == 3


def test_async_latch(url: str) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        latch = AsyncCountDownLatch(client, "ajob")
        assert repr(latch) == "<AsyncCountDownLatch 'ajob' not read yet>"
        assert await latch.try_set_count(3) and not await latch.try_set_count(3)
        waiters = [asyncio.create_task(latch.wait()) for _ in range(20)]
        late = asyncio.create_task(latch.wait(timeout=0.1))
        assert await late is False
        for left in (2, 1):
            assert await latch.count_down() == left
            await asyncio.sleep(0.02)
            assert not any(w.done() for w in waiters)
        assert await latch.count() == 1
        assert repr(latch) == "<AsyncCountDownLatch 'ajob' count=1 at the last call>"
        await latch.count_down()
        assert await asyncio.wait_for(asyncio.gather(*waiters), 5) == [True] * 20
        assert await latch.wait() is True and (await latch.info()).count == 0
        await client.aclose()

    asyncio.run(main())


def test_waiters_in_processes_pass_only_after_zero(r: redis.Redis, url: str) -> None:
    processes = 3
    latch = CountDownLatch(r, "mp")
    assert latch.try_set_count(3)
    with ProcessPoolExecutor(processes, mp_context=SPAWN) as pool:
        futures = [pool.submit(latch_waiter, url, "mp", 30.0) for _ in range(processes)]
        until(lambda: subscribers(r, "mp") == processes, timeout=30)
        for _ in range(2):
            latch.count_down()
            time.sleep(0.05)
        assert not any(f.done() for f in futures)
        before_zero = time.monotonic()
        latch.count_down()
        after_zero = time.monotonic()
        results = [f.result(timeout=30) for f in futures]
    assert all(opened for opened, _ in results)
    for _, passed_at in results:
        assert passed_at >= before_zero  # never before the count hit zero
        assert passed_at - after_zero < 1.0  # and promptly after
    assert latch.count() == 0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda latch: latch.try_set_count(0),
            r"count must be an int from 1 to 2\*\*53 - 1, not 0",
        ),
        (
            lambda latch: latch.try_set_count(True),
            r"count must be an int from 1 to 2\*\*53 - 1, not True",
        ),
        (lambda latch: latch.try_set_count("2"), r"count must be an int from 1 to 2\*\*53 - 1"),
        (lambda latch: latch.wait(-1), "timeout must be >= 0"),
        (lambda latch: latch.wait("1"), "timeout must be a number"),
    ],
)
def test_bad_arguments_do_no_io(call: Any, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):  # any I/O would raise ConnectionError
        call(CountDownLatch(redis.Redis(port=free_port()), "x"))

    async def main() -> None:
        with pytest.raises(InvalidArgument, match=match):
            await call(AsyncCountDownLatch(redis.asyncio.Redis(port=free_port()), "x"))

    asyncio.run(main())
    for name, prefix, message in (("", "p:", "name must not be empty"), ("x", 3, "prefix")):
        with pytest.raises(InvalidArgument, match=message):
            CountDownLatch(redis.Redis(port=free_port()), name, prefix=prefix)  # type: ignore[arg-type]


def test_wrong_type_key_is_named(r: redis.Redis) -> None:
    r.hset(COUNT % "h", "a", "1")
    latch = CountDownLatch(r, "h")
    for call in (latch.count, lambda: latch.try_set_count(1), latch.count_down, latch.wait):
        with pytest.raises(WrongTypeError, match=r"'tenure:\{h\}:latch'"):
            call()
    assert r.hgetall(COUNT % "h") == {b"a": b"1"}


def test_info_reads_a_setter_not_utf8_as_no_label(r: redis.Redis, url: str) -> None:
    """A key naming who set the count that another program wrote as bytes that
    are not UTF-8: info(), sync and asyncio, reads it as no label, not failing."""
    latch = CountDownLatch(r, "alien")
    assert latch.try_set_count(3)
    r.set(COUNT % "alien" + ":by", NOT_UTF8)
    assert latch.info() == CountDownLatchInfo("alien", 3, 0, None)

    async def main() -> CountDownLatchInfo:
        client = redis.asyncio.Redis.from_url(url)
        try:
            return await AsyncCountDownLatch(client, "alien").info()
        finally:
            await client.aclose()

    assert asyncio.run(main()) == CountDownLatchInfo("alien", 3, 0, None)
    assert r.get(COUNT % "alien" + ":by") == NOT_UTF8


def test_hundred_tasks_and_threads_wait_on_one_latch(r: redis.Redis, url: str) -> None:
    """100 asyncio tasks (in a thread's loop) and 4 threads wait on one latch
    that another client counts down: none passes before zero, all pass after."""
    latch = CountDownLatch(redis.Redis.from_url(url), "many")
    assert latch.try_set_count(2)
    passed: list[float] = []
    zero_at: list[float] = []

    def thread_waiter() -> None:
        assert CountDownLatch(redis.Redis.from_url(url), "many").wait(timeout=10)
        passed.append(time.monotonic())

    async def tasks() -> None:
        client = redis.asyncio.Redis.from_url(url, max_connections=120)
        alatch = AsyncCountDownLatch(client, "many")

        async def one() -> None:
            assert await alatch.wait(timeout=10)
            passed.append(time.monotonic())

        await asyncio.gather(*(one() for _ in range(100)))
        await client.aclose()

    waiters = [threading.Thread(target=thread_waiter) for _ in range(4)]
    waiters.append(threading.Thread(target=lambda: asyncio.run(tasks())))
    for w in waiters:
        w.start()
    until(lambda: subscribers(r, "many") >= 5)  # the 5 clients' hubs listen
    time.sleep(0.2)
    assert passed == [] and latch.count_down() == 1
    time.sleep(0.2)
    assert passed == []  # one left: nobody passes
    zero_at.append(time.monotonic())
    assert latch.count_down() == 0
    for w in waiters:
        w.join(timeout=15)
    assert len(passed) == 104 and min(passed) >= zero_at[0]
    assert max(passed) - zero_at[0] < 2.0
