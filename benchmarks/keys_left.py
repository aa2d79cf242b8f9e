"""Keys and memory a name leaves behind: the numbers of docs/guide/keys-and-memory.md.

Two parts, against one server (started here unless ``--url`` is given):

1. **Every key of every primitive.** Each primitive lives a typical life under
   the name ``orders:42`` (a holder with a lock-delay, a waiter, a hand-off,
   releases); every key seen on the way is listed with its role, its type, its
   size (``MEMORY USAGE <key> SAMPLES 0``, bytes) and its PTTL when first seen.
2. **N ``Lock`` names** (default 20,000), each acquired and released once:
   the keys and ``used_memory`` right after, the keys by role with their
   longest PTTL, and what is left once every lifetime has passed. By default
   that is computed from the PTTLs: every key whose PTTL is at most
   ``--after`` seconds (default 600, the documented bound) is deleted, as
   expiry would delete it, and ``used_memory`` is read again. With ``--wait``
   the script waits for the keys to expire instead (about 10 minutes).

Usage::

    .venv/bin/python benchmarks/keys_left.py
    .venv/bin/python benchmarks/keys_left.py --names 2000 --wait
    .venv/bin/python benchmarks/keys_left.py --server /usr/bin/redis-server
    .venv/bin/python benchmarks/keys_left.py --url redis://host:6379/15   # an empty db

With ``--url`` the database must be empty (the script flushes it between
parts, and ``used_memory`` differences need a quiet server).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, Protocol

import redis

from tenure import (
    CountDownLatch,
    FairLock,
    FencedKey,
    Lock,
    ReadWriteLock,
    RLock,
    Semaphore,
)
from tenure._keys import parse_key
from tenure._server import ServerProcess

#: The name every primitive of part 1 uses.
NAME = "orders:42"


@dataclass
class KeySeen:
    """One key as first seen: who uses it, its Redis type, size (bytes) and PTTL (ms)."""

    primitive: str
    key: str
    role: str
    type: str
    bytes: int
    pttl_ms: int


def role_of(key: str, user_keys: dict[str, str]) -> str:
    """The role of ``key``: from :func:`parse_key`, else from ``user_keys``."""
    if key in user_keys:
        return user_keys[key]
    info = parse_key(key)
    if info is None:
        return "?"
    if info.role == "lock":
        return {"Semaphore": "holders", "CountDownLatch": "count"}.get(info.kind, "lock")
    return "op:<owner>" if info.role == "op" else info.role


def snapshot(client: redis.Redis, primitive: str, user: dict[str, str]) -> None:
    """Record every key of the database not seen yet (in :data:`SEEN`)."""
    for raw in client.scan_iter(count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        if key in SEEN:
            continue
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind == "none":
            continue
        size = int(client.memory_usage(key, samples=0) or 0)
        SEEN[key] = KeySeen(primitive, key, role_of(key, user), kind, size, int(client.pttl(key)))


#: Keys seen in part 1, by key.
SEEN: dict[str, KeySeen] = {}


def until(check: Callable[[], bool], seconds: float = 5.0) -> None:
    """Wait until ``check()`` is true (at most ``seconds``)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting for the benchmark's waiter")
        time.sleep(0.005)


class _Releasable(Protocol):
    def release(self) -> None: ...


@contextmanager
def waiter(acquire: Callable[[], _Releasable | None]) -> Iterator[None]:
    """Run ``acquire()`` in another thread (a waiter, another owner); release what
    it got."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            got = acquire()
            if got is None:
                raise RuntimeError("the benchmark's waiter did not get the lock")
            got.release()
        except BaseException as exc:  # reported below
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    thread.join(10)
    if failure:
        raise failure[0]


def handed_off(
    client: redis.Redis,
    label: str,
    user: dict[str, str],
    hold: _Releasable | None,
    acquire: Callable[[], _Releasable | None],
    waiters: str,
) -> None:
    """While ``hold`` is held, queue a waiter (``acquire``), snapshot, then release
    ``hold``: the waiter is handed the lock and releases it."""
    assert hold is not None
    with waiter(acquire):
        until(lambda: client.exists(waiters) == 1)
        snapshot(client, label, user)
        hold.release()


def lives(client: redis.Redis) -> Iterator[tuple[str, dict[str, str], Callable[[], None]]]:
    """``(primitive, roles of the user's own keys, its typical life)`` of every
    primitive; the life snapshots the keys that do not last, and
    :func:`part1` snapshots the rest after it."""

    def lock_life(label: str, user: dict[str, str], lock: Lock) -> None:
        waiting = partial(lock.acquire, timeout=5)
        handed_off(client, label, user, lock.acquire(), waiting, lock._keys.waiters)

    exact_user = {NAME: "lock (the user's key)"}
    yield "Lock", {}, partial(lock_life, "Lock", {}, Lock(client, NAME, ttl=10, lock_delay=1))
    exact = Lock(client, key=NAME, ttl=10, lock_delay=1)
    yield "Lock(key=)", exact_user, partial(lock_life, "Lock(key=)", exact_user, exact)

    rlock = RLock(client, NAME, ttl=10, lock_delay=1)

    def rlock_life() -> None:
        first = rlock.acquire()
        assert first is not None
        again = rlock.acquire()
        assert again is not None
        again.release()
        handed_off(
            client, "RLock", {}, first, partial(rlock.acquire, timeout=5), rlock._keys.waiters
        )

    yield "RLock", {}, rlock_life

    fair = FairLock(client, NAME, ttl=10, lock_delay=1)
    yield (
        "FairLock",
        {},
        lambda: handed_off(
            client,
            "FairLock",
            {},
            fair.acquire(),
            partial(fair.acquire, timeout=5),
            fair._keys.waiters,
        ),
    )

    rw = ReadWriteLock(client, NAME, ttl=10, lock_delay=1)
    yield (
        "ReadWriteLock",
        {},
        lambda: handed_off(
            client,
            "ReadWriteLock",
            {},
            rw.write.acquire(),
            partial(rw.read.acquire, timeout=5),
            rw._keys.waiters,
        ),
    )

    sem = Semaphore(client, NAME, 1, ttl=10)
    yield (
        "Semaphore",
        {},
        lambda: handed_off(
            client,
            "Semaphore",
            {},
            sem.acquire(),
            partial(sem.acquire, timeout=5),
            sem._keys.waiters,
        ),
    )

    latch = CountDownLatch(client, NAME)

    def latch_life() -> None:
        assert latch.try_set_count(2)
        latch.count_down()
        snapshot(client, "CountDownLatch", {})
        latch.count_down()

    yield "CountDownLatch", {}, latch_life

    fenced = FencedKey(client, NAME + ":state")
    yield (
        "FencedKey",
        {fenced.key: "value (the user's key)"},
        lambda: fenced.set("paid", 1795253450167863),
    )


def part1(client: redis.Redis) -> list[KeySeen]:
    """Every key of every primitive: see the module docstring."""
    rows: list[KeySeen] = []
    for primitive, user, life in lives(client):
        SEEN.clear()
        client.flushdb()
        life()
        snapshot(client, primitive, user)
        rows.extend(SEEN.values())
    client.flushdb()
    return rows


@dataclass
class Part2:
    """What N Lock names, each acquired and released once, leave behind."""

    names: int
    seconds: float
    keys_before: int
    used_memory_before: int
    keys_after: int
    used_memory_after: int
    roles: dict[str, int]
    longest_pttl_ms: dict[str, int]
    no_expiry: int
    after_s: float
    waited: bool
    keys_left: int
    used_memory_left: int


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def pttls(client: redis.Redis) -> dict[str, int]:
    """Every key of the database with its PTTL (ms; -1: no expiry)."""
    keys = [k.decode() for k in client.scan_iter(count=1000)]
    out: dict[str, int] = {}
    for start in range(0, len(keys), 1000):
        chunk = keys[start : start + 1000]
        pipe = client.pipeline(transaction=False)
        for key in chunk:
            pipe.pttl(key)
        out.update(zip(chunk, (int(v) for v in pipe.execute()), strict=True))
    return out


def part2(client: redis.Redis, names: int, after: float, wait: bool) -> Part2:
    """N Lock names each acquired and released once: see the module docstring."""
    client.flushdb()
    keys_before, memory_before = int(client.dbsize()), used_memory(client)
    started = time.monotonic()
    for i in range(names):
        lock = Lock(client, f"orders:{i}", ttl=30)
        lease = lock.acquire(blocking=False)
        assert lease is not None
        lease.release()
    seconds = time.monotonic() - started
    keys_after, memory_after = int(client.dbsize()), used_memory(client)
    found = pttls(client)
    roles: Counter[str] = Counter()
    longest: dict[str, int] = {}
    for key, pttl in found.items():
        role = role_of(key, {})
        roles[role] += 1
        longest[role] = max(longest.get(role, pttl), pttl) if pttl >= 0 else -1
    no_expiry = sum(1 for pttl in found.values() if pttl < 0)
    if wait:
        time.sleep(max(0.0, max(found.values(), default=0) / 1000) + 1.0)
        for _ in client.scan_iter(count=1000):  # lets lazy expiry find the rest
            pass
    else:
        gone = [key for key, pttl in found.items() if 0 <= pttl <= after * 1000]
        for start in range(0, len(gone), 1000):
            client.delete(*gone[start : start + 1000])
    keys_left, memory_left = int(client.dbsize()), used_memory(client)
    client.flushdb()
    return Part2(
        names,
        seconds,
        keys_before,
        memory_before,
        keys_after,
        memory_after,
        dict(roles),
        longest,
        no_expiry,
        after,
        wait,
        keys_left,
        memory_left,
    )


def lifetime(pttl_ms: int) -> str:
    if pttl_ms == -1:
        return "no expiry"
    if pttl_ms < 0:
        return "gone"
    return f"{pttl_ms / 1000:,.1f} s"


def report(server: str, rows: list[KeySeen], result: Part2) -> str:
    out = [f"server: {server}", "", "Part 1: every key of every primitive (name 'orders:42')", ""]
    out.append("| primitive | key | role | type | bytes | PTTL when seen |")
    out.append("|---|---|---|---|---:|---:|")
    for row in rows:
        out.append(
            f"| {row.primitive} | `{row.key}` | {row.role} | {row.type} | {row.bytes} "
            f"| {lifetime(row.pttl_ms)} |"
        )
    mib = 1024 * 1024
    grown = result.used_memory_after - result.used_memory_before
    left = result.used_memory_left - result.used_memory_before
    how = (
        "after waiting"
        if result.waited
        else f"once every key with PTTL <= {result.after_s:g} s expired"
    )
    out += [
        "",
        f"Part 2: {result.names:,} Lock names, each acquired and released once "
        f"({result.seconds:.1f} s)",
        f"  right after: {result.keys_after - result.keys_before:,} keys, "
        f"used_memory +{grown:,} bytes ({grown / mib:.2f} MiB)",
    ]
    for role, count in sorted(result.roles.items()):
        longest = lifetime(result.longest_pttl_ms[role])
        out.append(f"    {role:<10} {count:>7,} keys, longest PTTL {longest}")
    out += [
        f"  keys with no expiry: {result.no_expiry:,}",
        f"  {how}: {result.keys_left - result.keys_before:,} keys, "
        f"used_memory {left:+,} bytes against the empty database",
    ]
    return "\n".join(out)


def server_description(client: redis.Redis) -> str:
    info: dict[str, Any] = client.info("server")
    name = str(info.get("server_name") or "redis")
    version = info.get(f"{name}_version") or info.get("redis_version")
    return f"{name} {version}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--names", type=int, default=20_000, help="Lock names of part 2 (20,000)")
    p.add_argument(
        "--after",
        type=float,
        default=600.0,
        metavar="S",
        help="part 2: keys whose PTTL is at most S seconds count as expired (600)",
    )
    p.add_argument("--wait", action="store_true", help="part 2: wait for expiry instead")
    p.add_argument("--json", metavar="PATH", help="also write every number to PATH")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--server", metavar="PATH", help="redis-server/valkey-server to start")
    where.add_argument("--url", help="use this running server's (empty) database")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    server: ServerProcess | None = None
    if args.url:
        url = str(args.url)
    else:
        server = ServerProcess(args.server).start()
        url = server.url
    try:
        client = redis.Redis.from_url(url)
        if client.dbsize():
            print(f"the database at {url} is not empty: give an empty one", file=sys.stderr)
            return 2
        described = server_description(client)
        rows = part1(client)
        result = part2(client, args.names, args.after, args.wait)
        print(report(described, rows, result))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(
                    {
                        "server": described,
                        "keys": [asdict(r) for r in rows],
                        "names": asdict(result),
                    },
                    f,
                    indent=2,
                )
        client.close()
    finally:
        if server is not None:
            server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
