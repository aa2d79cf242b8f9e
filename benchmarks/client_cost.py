"""The client's share of an uncontended ``acquire(); release()``: tenure's
``Lock`` against redis-py's ``Lock`` and the raw floor (``SET NX PX`` + an
``EVALSHA`` compare-and-delete), each with the server's replies faked.

Each lock first runs a few real cycles against a server started here (the
embedded Valkey unless ``--server``: the probe, the scripts, the connection
it keeps); then the one connection its cycles use has its
``send_packed_command`` and ``read_response`` replaced by a stand-in that
keeps the packed command and answers at once as the server would (a fence
for tenure's acquire, 0 for its release; ``OK`` and 1 for the others). What
is timed is then the Python each library runs per cycle, its packing
included, without the network, the server or the scheduler: the measure
moves by a few per cent between runs where a real cycle's moves by tens
(the two processes may share a core or not), so a change of a microsecond
on the client shows. The rows run in turn, the order rotating, for
``--rounds`` rounds of ``--cycles`` cycles with the garbage collector off;
the table gives each row's lowest and lower-quartile round and its ratio to
redis-py's ``Lock``.

Usage::

    .venv/bin/python benchmarks/client_cost.py
    .venv/bin/python benchmarks/client_cost.py --rounds 60 --server /usr/bin/redis-server
"""

from __future__ import annotations

import argparse
import gc
import platform
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

import tenure
from tenure._drivers import _sync
from tenure._scripts import LOCK_ACQUIRE
from tenure._server import ServerProcess

TTL = 10.0
RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)


class Answers:
    """A connection's I/O replaced: each command packed is answered at once
    with ``answer(packed)``, in order."""

    def __init__(self, conn: Any, answer: Callable[[bytes], Any]) -> None:
        self.replies: list[Any] = []
        self.answer = answer
        conn.send_packed_command = self.send
        conn.read_response = self.read

    def send(self, packed: Any, check_health: bool = True) -> None:
        data = packed if isinstance(packed, bytes | bytearray) else b"".join(packed)
        self.replies.append(self.answer(bytes(data)))

    def read(self, *args: Any, **kwargs: Any) -> Any:
        return self.replies.pop(0)


def rows(url: str) -> dict[str, Callable[[], Any]]:
    """Each lock's cycle, warmed up, its connection's I/O faked."""
    mine, theirs, plain = (redis.Redis.from_url(url) for _ in range(3))
    lock = tenure.Lock(mine, "client-cost", ttl=TTL)
    for _ in range(50):
        lock.acquire().release()  # type: ignore[union-attr]
    reserve = _sync._state(mine).reserve
    assert reserve is not None and len(reserve.idle) == 1, "one connection of the quick path"
    acquire_sha = LOCK_ACQUIRE.sha1.encode()
    fences = iter(range(10**15, 10**16))
    Answers(reserve.idle[0], lambda data: next(fences) if acquire_sha in data else 0)

    rp = theirs.lock("client-cost-redis-py", timeout=TTL)
    for _ in range(50):
        rp.acquire()
        rp.release()
    release = plain.register_script(RELEASE)
    token = secrets.token_hex(16)
    for _ in range(50):
        plain.set("client-cost-floor", token, nx=True, px=int(TTL * 1000))
        release(keys=["client-cost-floor"], args=[token])
    for client in (theirs, plain):
        pool: Any = client.connection_pool
        (conn,) = pool._available_connections
        Answers(conn, lambda data: 1 if b"EVALSHA" in data else b"OK")

    def tenure_lock() -> None:
        lock.acquire().release()  # type: ignore[union-attr]

    def redis_py() -> None:
        rp.acquire()
        rp.release()

    def floor() -> None:
        plain.set("client-cost-floor", token, nx=True, px=int(TTL * 1000))
        release(keys=["client-cost-floor"], args=[token])

    return {"tenure Lock": tenure_lock, "redis-py Lock": redis_py, "raw floor": floor}


def measure(cycles: dict[str, Callable[[], Any]], rounds: int, n: int) -> dict[str, list[float]]:
    """µs per cycle of each row, one entry per round, the order rotating."""
    out: dict[str, list[float]] = {name: [] for name in cycles}
    names = list(cycles)
    gc.disable()
    try:
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                fn = cycles[name]
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                out[name].append((time.perf_counter() - t0) / n * 1e6)
    finally:
        gc.enable()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40, help="rounds per row (default 40)")
    parser.add_argument("--cycles", type=int, default=2000, help="cycles per round (default 2000)")
    parser.add_argument("--server", help="redis-server/valkey-server to start")
    args = parser.parse_args(argv)
    with ServerProcess(args.server) as server:
        started = time.monotonic()
        times = measure(rows(server.url), args.rounds, args.cycles)
        took = time.monotonic() - started
    quartile = {name: sorted(v)[len(v) // 4] for name, v in times.items()}
    print(
        f"Python {platform.python_version()}, redis-py {redis.__version__}; replies faked; "
        f"{args.rounds} rounds of {args.cycles} cycles per row; run took {took:.0f} s.\n"
    )
    print("| lock | µs/cycle, lowest round | lower quartile | x redis-py Lock's (quartile) |")
    print("|---|--:|--:|--:|")
    for name, v in times.items():
        ratio = quartile[name] / quartile["redis-py Lock"]
        print(f"| {name} | {min(v):.1f} | {quartile[name]:.1f} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
