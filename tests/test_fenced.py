"""Fenced writes: a resource in Redis that refuses writers with an older fence."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio
from redis.crc import key_slot

from tenure import (
    AsyncFencedKey,
    FencedKey,
    InvalidArgument,
    Lock,
    StaleFenceError,
    WrongTypeError,
)
from tenure._server import ServerProcess, free_port


def test_older_fence_is_refused_equal_and_newer_accepted(r: redis.Redis) -> None:
    key = FencedKey(r, "orders:42:state")
    assert key.seen() == 0
    key.set("created", fence=10)
    key.set("paid", fence=10)  # the same holder writes again
    with pytest.raises(StaleFenceError, match=r"fence 9 is older than fence 10") as info:
        key.set("stale", fence=9)
    assert (info.value.key, info.value.fence, info.value.seen) == ("orders:42:state", 9, 10)
    assert isinstance(info.value, RuntimeError)
    assert r.get("orders:42:state") == b"paid"  # nothing written
    key.set(b"shipped", fence=11)
    assert r.get("orders:42:state") == b"shipped" and key.seen() == 11


def test_with_lock_fences(r: redis.Redis) -> None:
    lock, key = Lock(r, "orders:7", ttl=5), FencedKey(r, "orders:7:state")
    first = lock.acquire()
    assert first is not None
    first.release()
    with lock as second:
        key.set("by second", fence=second.fence)
    with pytest.raises(StaleFenceError):
        key.set("by first, late", fence=first.fence)
    assert r.get("orders:7:state") == b"by second"


def test_keys_share_a_slot(r: redis.Redis) -> None:
    for name in ("plain", "{tagged}:x"):
        key = FencedKey(r, name)
        key.set("v", fence=1)
        keys: list[bytes] = r.keys("*")  # type: ignore[assignment]
        seen = [k for k in keys if k != name.encode()]
        assert len(seen) == 1 and key_slot(seen[0]) == key_slot(name.encode())
        r.flushall()


@pytest.mark.parametrize(
    ("fence", "value", "match"),
    [
        (-1, "v", r"fence must be an int from 0 to 2\*\*53 - 1 \(a lease's fence\), not -1"),
        (2**53, "v", "not 9007199254740992"),
        (True, "v", "fence must be"),
        ("5", "v", "fence must be"),
        (1.5, "v", "fence must be"),
        (1, 5, "value must be str or bytes"),
    ],
)
def test_bad_arguments_do_no_io(fence: object, value: object, match: str) -> None:
    dead = redis.Redis(port=free_port())
    with pytest.raises(InvalidArgument, match=match):
        FencedKey(dead, "k").set(value, fence=fence)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="key must not be empty"):
        FencedKey(dead, "")


def test_wrong_type(r: redis.Redis) -> None:
    r.hset("h", "a", "1")
    with pytest.raises(WrongTypeError, match="'h'"):
        FencedKey(r, "h").set("v", fence=1)
    r.lpush("{s}:fenced:seen", "x")
    with pytest.raises(WrongTypeError, match="fenced:seen"):
        FencedKey(r, "s").set("v", fence=1)
    assert not r.exists("s")


def test_async_twin(server: ServerProcess, r: redis.Redis) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        key = AsyncFencedKey(client, "a")
        await key.set("one", fence=3)
        with pytest.raises(StaleFenceError):
            await key.set("two", fence=2)
        assert await key.seen() == 3 and await client.get("a") == b"one"
        await client.aclose()

    asyncio.run(main())
