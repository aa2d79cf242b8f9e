"""The client's share of an uncontended ``acquire(); release()``: tenure's
``Lock`` (on its quick path and on the ordinary one, through the client)
against redis-py's ``Lock`` and the raw floor (``SET NX PX`` + an
``EVALSHA`` compare-and-delete), each with the server's replies faked: the
rows of ``bench_quick_path.py``.

Each row first runs a few real cycles against a server started here (the
embedded Valkey unless ``--server``: the probe, the scripts, the connection
it keeps); then each connection its cycles use has its
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
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from bench_quick_path import sync_rows

from tenure._drivers import _sync
from tenure._scripts import LOCK_ACQUIRE, LOCK_RELEASE
from tenure._server import ServerProcess


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
    """The sync rows of ``bench_quick_path.py``, each run for real a while,
    then every connection they use answering at once."""
    clients: list[redis.Redis] = []
    cycles = sync_rows(url, clients)
    for cycle in cycles.values():
        for _ in range(50):
            cycle()
    acquire_sha, release_sha = LOCK_ACQUIRE.sha1.encode(), LOCK_RELEASE.sha1.encode()
    fences = iter(range(10**15, 10**16))

    def answer(data: bytes) -> Any:
        if acquire_sha in data:
            return next(fences)
        if release_sha in data:
            return 0  # (released, nobody queued)
        return 1 if b"EVALSHA" in data else b"OK"

    for client in clients:
        reserve = _sync._state(client).reserve
        pool: Any = client.connection_pool
        for conn in [*(reserve.idle if reserve is not None else ()), *pool._available_connections]:
            Answers(conn, answer)
    return cycles


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
