"""Benchmark tenure on a three-master Redis Cluster against one server, in one run.

Four server processes are started here (``tenure._server.ServerProcess``, the
embedded Valkey unless ``--server``): one plain server, and three
``--cluster-enabled`` masters joined into one cluster by the tests' fixture
(``tests/_cluster.py``). The same primitives run on a ``redis.Redis`` client of
the plain server and on a ``redis.cluster.RedisCluster`` client of the cluster:

1. Uncontended ``acquire(); release()`` per primitive (Lock, RLock, FairLock,
   Semaphore, ReadWriteLock read and write, CountDownLatch), one name each: in
   a counted pass, the round trips per cycle (every write of a command or a
   pipeline to a server, counted by wrapping redis-py's
   ``Connection.send_packed_command``) and the server commands per cycle (the
   ``INFO commandstats`` deltas summed over the masters, less the INFO calls,
   commands run inside scripts included), which must be the same on the
   cluster as on one server; then in a timed pass, taken in slices of
   ``--slice`` cycles per topology in turn, the cycle p50 of each.
2. Contended: 4 worker processes (spawn) on one name, each looping acquire,
   1 ms body, release, for ``--seconds``; the phases alternate between the
   topologies for ``--rounds`` rounds. Reported per round and topology: the
   hand-off p50 (next acquire returned - previous release called, while
   someone waited; ``bench_locks.analyze``), sections/s, commands sent and
   server commands per hand-off, and mutual-exclusion violations; and the
   cluster's hand-off p50 as a ratio of the single server's in the same round.

Usage (``make bench-cluster`` runs the first line)::

    .venv/bin/python benchmarks/bench_cluster.py
    .venv/bin/python benchmarks/bench_cluster.py --quick
    .venv/bin/python benchmarks/bench_cluster.py --markdown out.md --json out.json
    .venv/bin/python benchmarks/bench_cluster.py --server /usr/bin/redis-server
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import secrets
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import bench_locks as bl
import bench_primitives as bp
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.cluster
import redis.connection

import tenure
from tenure._server import ServerProcess

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _cluster import Cluster  # the tests' cluster fixture

#: The primitives of part 1, as ``bench_primitives.make_primitive`` names them.
PRIMITIVES: dict[str, str] = {
    "lock": "Lock",
    "rlock": "RLock",
    "fair": "FairLock",
    "semaphore": "Semaphore (4 permits)",
    "rw-read": "ReadWriteLock read",
    "rw-write": "ReadWriteLock write",
    "latch": "CountDownLatch",
}
#: The asyncio row of part 1 (``AsyncLock``).
ASYNC_LABEL = "AsyncLock (asyncio)"
TOPOLOGIES = ("single", "cluster")
HANDOFF_PROCESSES = 4
#: The issue's target: the cluster's hand-off p50 at most this times one server's.
HANDOFF_TARGET = 1.5


# --------------------------------------------------------------------------
# Counting: writes to servers (round trips) and server commands.
# --------------------------------------------------------------------------


class _Writes:
    """Writes by this process's redis-py connections, and the commands in them."""

    def __init__(self) -> None:
        self.count = 0
        self.commands: Counter[str] = Counter()
        self._mutex = threading.Lock()

    def add(self, packed: Any) -> None:
        names = _command_names(packed)
        with self._mutex:
            self.count += 1
            self.commands.update(names)


def _command_names(packed: Any) -> list[str]:
    """The command names in a packed write (RESP arrays of bulk strings)."""
    chunks = [packed] if isinstance(packed, bytes | str) else list(packed)
    data = b"".join(c.encode() if isinstance(c, str) else bytes(c) for c in chunks)
    names: list[str] = []
    for part in data.split(b"\r\n*")[0:]:
        fields = part.split(b"\r\n")
        if len(fields) >= 3:
            names.append(fields[2].decode(errors="replace").upper())
    return names


@contextmanager
def counting_writes() -> Iterator[_Writes]:
    """Count, while inside, every write of this process's sync redis-py connections."""
    cls = redis.connection.AbstractConnection
    original: Callable[..., None] = cls.send_packed_command
    writes = _Writes()

    def send_packed_command(self: Any, command: Any, check_health: bool = True) -> None:
        writes.add(command)
        original(self, command, check_health)

    setattr(cls, "send_packed_command", send_packed_command)  # noqa: B010
    try:
        yield writes
    finally:
        setattr(cls, "send_packed_command", original)  # noqa: B010


@contextmanager
def counting_async_writes() -> Iterator[_Writes]:
    """:func:`counting_writes` for redis.asyncio's connections."""
    cls = redis.asyncio.connection.AbstractConnection
    original: Callable[..., Awaitable[None]] = cls.send_packed_command
    writes = _Writes()

    async def send_packed_command(self: Any, command: Any, check_health: bool = True) -> None:
        writes.add(command)
        await original(self, command, check_health)

    setattr(cls, "send_packed_command", send_packed_command)  # noqa: B010
    try:
        yield writes
    finally:
        setattr(cls, "send_packed_command", original)  # noqa: B010


class MastersInfo:
    """``INFO`` summed over several servers (``bench_locks.InfoSource``): the
    ``calls`` of every command of ``commandstats``."""

    def __init__(self, clients: Sequence[redis.Redis]) -> None:
        self.clients = list(clients)

    def info(self, section: str) -> dict[str, dict[str, int]]:
        total: Counter[str] = Counter()
        for client in self.clients:
            stats: dict[str, Any] = client.info(section)
            for name, value in stats.items():
                total[name] += int(value["calls"])
        return {name: {"calls": calls} for name, calls in total.items()}

    def close(self) -> None:
        for client in self.clients:
            client.close()


def connect_cluster(url: str) -> redis.cluster.RedisCluster:
    """A cluster client from one node's url (``bench_locks.Connect``; it pickles)."""
    return redis.cluster.RedisCluster.from_url(url)


# --------------------------------------------------------------------------
# Part 1: uncontended, counted and timed.
# --------------------------------------------------------------------------


@dataclass
class Uncontended:
    """One primitive on one topology."""

    impl: str
    label: str
    topology: str
    cycles_counted: int
    round_trips_per_cycle: float
    server_cmds_per_cycle: float
    commands_sent: dict[str, int]  # by name, over the counted pass
    server_commands: dict[str, int]  # by name, over the counted pass
    cycle_us: list[float] = field(default_factory=list, repr=False)

    @property
    def cycle_p50_us(self) -> float:
        return statistics.median(self.cycle_us) if self.cycle_us else math.nan


def _cycle(lock: bl.SyncLock) -> float:
    start = time.perf_counter()
    lock.acquire()
    lock.release()
    return time.perf_counter() - start


def bench_uncontended(
    clients: dict[str, Any],
    stats: dict[str, bl.InfoSource],
    counted: int,
    timed: int,
    slice_: int,
    tag: str,
) -> list[Uncontended]:
    """Part 1 for every primitive on every topology."""
    out: list[Uncontended] = []
    for impl, label in PRIMITIVES.items():
        locks = {
            top: bp.make_primitive(impl, clients[top], f"{tag}:u:{impl}:{top}", "")
            for top in TOPOLOGIES
        }
        rows: dict[str, Uncontended] = {}
        for top in TOPOLOGIES:
            for _ in range(50):  # warm up: connections, server probe, scripts
                _cycle(locks[top])
            before = bl.command_calls(stats[top])
            with counting_writes() as writes:
                for _ in range(counted):
                    _cycle(locks[top])
            after = bl.command_calls(stats[top])
            server = {
                name.removeprefix("cmdstat_"): n - before.get(name, 0)
                for name, n in after.items()
                if name != "cmdstat_info" and n != before.get(name, 0)
            }
            rows[top] = Uncontended(
                impl,
                label,
                top,
                counted,
                writes.count / counted,
                sum(server.values()) / counted,
                dict(writes.commands),
                server,
            )
        for n in range(timed // slice_):
            order = TOPOLOGIES if n % 2 == 0 else TOPOLOGIES[::-1]
            for top in order:
                rows[top].cycle_us.extend(_cycle(locks[top]) * 1e6 for _ in range(slice_))
        out.extend(rows.values())
    return out


async def bench_uncontended_async(
    urls: dict[str, str],
    stats: dict[str, bl.InfoSource],
    counted: int,
    timed: int,
    slice_: int,
    tag: str,
) -> list[Uncontended]:
    """Part 1 for ``AsyncLock`` on a ``redis.asyncio`` client and a
    ``redis.asyncio.cluster.RedisCluster``, the same way."""
    clients: dict[str, Any] = {
        "single": redis.asyncio.Redis.from_url(urls["single"]),
        "cluster": redis.asyncio.cluster.RedisCluster.from_url(urls["cluster"]),
    }
    locks = {
        top: tenure.AsyncLock(clients[top], f"{tag}:ua:{top}", ttl=bl.TTL) for top in TOPOLOGIES
    }

    async def cycle(top: str) -> float:
        start = time.perf_counter()
        lease = await locks[top].acquire()
        assert lease is not None
        await lease.release()
        return time.perf_counter() - start

    rows: dict[str, Uncontended] = {}
    try:
        for top in TOPOLOGIES:
            for _ in range(50):
                await cycle(top)
            before = bl.command_calls(stats[top])
            with counting_async_writes() as writes:
                for _ in range(counted):
                    await cycle(top)
            after = bl.command_calls(stats[top])
            server = {
                name.removeprefix("cmdstat_"): n - before.get(name, 0)
                for name, n in after.items()
                if name != "cmdstat_info" and n != before.get(name, 0)
            }
            rows[top] = Uncontended(
                "async-lock",
                ASYNC_LABEL,
                top,
                counted,
                writes.count / counted,
                sum(server.values()) / counted,
                dict(writes.commands),
                server,
            )
        for n in range(timed // slice_):
            for top in TOPOLOGIES if n % 2 == 0 else TOPOLOGIES[::-1]:
                for _ in range(slice_):
                    rows[top].cycle_us.append(await cycle(top) * 1e6)
    finally:
        for client in clients.values():
            await client.aclose()
    return list(rows.values())


# --------------------------------------------------------------------------
# Part 2: hand-off with 4 processes.
# --------------------------------------------------------------------------


@dataclass
class HandOff:
    round: int
    topology: str
    result: bl.Contended


def bench_handoff(
    pools: dict[str, bl.WorkerPool],
    stats: dict[str, bl.InfoSource],
    seconds: float,
    rounds: int,
    tag: str,
) -> list[HandOff]:
    """Part 2: tenure Lock, 4 processes, alternating topologies, ``rounds`` rounds."""
    out: list[HandOff] = []
    for r in range(rounds):
        order = TOPOLOGIES if r % 2 == 0 else TOPOLOGIES[::-1]
        for top in order:
            bl.log(f"hand-off: round {r + 1}, {top}, {HANDOFF_PROCESSES} processes, {seconds:g} s")
            res = pools[top].run(
                "tenure",  # bench_locks' name of tenure's Lock
                HANDOFF_PROCESSES,
                f"{tag}:h{r}:{top}",
                seconds,
                0.0,
                stats[top],
                label=f"tenure Lock ({top})",
            )
            out.append(HandOff(r + 1, top, res))
    return out


# --------------------------------------------------------------------------
# Reporting.
# --------------------------------------------------------------------------


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b and not math.isnan(a) and not math.isnan(b) else "-"


def _differences(single: dict[str, int], cluster: dict[str, int]) -> str:
    names = sorted(set(single) | set(cluster))
    diff = [
        f"{n} {single.get(n, 0)}->{cluster.get(n, 0)}"
        for n in names
        if single.get(n, 0) != cluster.get(n, 0)
    ]
    return "; ".join(diff)


def report(meta: dict[str, Any], unc: list[Uncontended], hand: list[HandOff]) -> str:
    by = {(u.impl, u.topology): u for u in unc}
    out = [
        f"{meta['server']}, {meta['nproc']} CPUs, Python {meta['python']}, redis-py "
        f"{meta['redis_py']}, tenure {meta['tenure']}; run took {meta['total_seconds']} s.",
        "",
        f"**C1. Uncontended acquire + release: one server vs a 3-master cluster "
        f"({meta['counted']} counted cycles, {meta['timed']} timed cycles per primitive "
        f"and topology)**",
        "",
        "| primitive | round trips/cycle, 1 server | cluster | server cmds/cycle, 1 server"
        " | cluster | equal | cycle p50 us, 1 server | cluster | cluster / 1 server |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    notes: list[str] = []
    for impl, label in [*PRIMITIVES.items(), ("async-lock", ASYNC_LABEL)]:
        if (impl, "single") not in by:
            continue
        s, c = by[(impl, "single")], by[(impl, "cluster")]
        equal = math.isclose(s.round_trips_per_cycle, c.round_trips_per_cycle) and math.isclose(
            s.server_cmds_per_cycle, c.server_cmds_per_cycle
        )
        out.append(
            f"| {label} | {s.round_trips_per_cycle:.2f} | {c.round_trips_per_cycle:.2f} | "
            f"{s.server_cmds_per_cycle:.2f} | {c.server_cmds_per_cycle:.2f} | "
            f"{'yes' if equal else 'NO'} | {s.cycle_p50_us:.0f} | {c.cycle_p50_us:.0f} | "
            f"{_ratio(c.cycle_p50_us, s.cycle_p50_us)} |"
        )
        if not equal:
            sent = _differences(s.commands_sent, c.commands_sent)
            ran = _differences(s.server_commands, c.server_commands)
            notes.append(f"- {label}: sent {sent or 'the same'}; server ran {ran or 'the same'}.")
    out.append("")
    out.append(
        "Round trips: writes to a server (a command or a pipeline), counted by wrapping "
        "redis-py's `send_packed_command`. Server cmds: `INFO commandstats` deltas summed "
        "over the masters, less the INFO calls, including the commands scripts run."
    )
    if notes:
        out += ["", "Differences (per counted pass):", *notes]
    out += [
        "",
        f"**C2. tenure Lock, {HANDOFF_PROCESSES} processes on one name, 1 ms body, "
        f"{meta['seconds']:g} s per phase, the topologies alternating**",
        "",
        "| round | topology | sections/s | hand-off p50 ms | p99 ms | cross p50 ms"
        " | RT/hand-off | srv cmds/hand-off | overlaps | hand-off p50, cluster / 1 server |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    singles = {h.round: h.result for h in hand if h.topology == "single"}
    ratios: list[float] = []
    for h in hand:
        r = h.result
        ratio = ""
        if h.topology == "cluster":
            base = singles[h.round].handoff_p50_ms
            ratios.append(r.handoff_p50_ms / base)
            ratio = _ratio(r.handoff_p50_ms, base)
        out.append(
            f"| {h.round} | {h.topology} | {r.sections_per_s:.0f} | {r.handoff_p50_ms:.3f} | "
            f"{r.handoff_p99_ms:.2f} | {r.cross_handoff_p50_ms:.3f} | "
            f"{r.round_trips_per_section:.2f} | {r.server_cmds_per_section:.2f} | "
            f"{r.violations} | {ratio} |"
        )
    out.append("")
    out.append(
        "hand-off: next acquire returned - previous release called, while another process "
        "waited (as in bench_locks' table 2). RT: writes by the workers (redis-py's "
        "`send_packed_command`); srv cmds: summed over the masters."
    )
    if ratios:
        worst = max(ratios)
        out += [
            "",
            f"Hand-off p50, cluster / one server: {min(ratios):.2f}x to {worst:.2f}x over "
            f"{len(ratios)} rounds (target <= {HANDOFF_TARGET}x: "
            f"{'met' if worst <= HANDOFF_TARGET else 'NOT met'}).",
        ]
    return "\n".join(out) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="short phases (about 30 s in all)")
    p.add_argument("--server", metavar="PATH", help="redis-server/valkey-server to start")
    p.add_argument("--seconds", type=float, help="length of each hand-off phase (default 3)")
    p.add_argument("--rounds", type=int, help="hand-off rounds (default 3)")
    p.add_argument("--counted", type=int, help="counted cycles per primitive (default 200)")
    p.add_argument("--timed", type=int, help="timed cycles per primitive (default 1000)")
    p.add_argument("--slice", type=int, default=50, help="timed cycles per topology in a row")
    p.add_argument("--json", metavar="PATH", help="also write every number to PATH")
    p.add_argument("--markdown", metavar="PATH", help="also write the tables as Markdown")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    seconds = args.seconds or (1.0 if args.quick else 3.0)
    rounds = args.rounds or (2 if args.quick else 3)
    counted = args.counted or (100 if args.quick else 200)
    timed = args.timed or (300 if args.quick else 1000)
    tag = f"bench:{secrets.token_hex(4)}"
    started = time.monotonic()
    single = ServerProcess(args.server)
    cluster = Cluster(args.server)
    pools: dict[str, bl.WorkerPool] = {}
    clients: dict[str, Any] = {}
    stats: dict[str, MastersInfo] = {}
    try:
        single.start()
        cluster.start()
        urls = {"single": single.url, "cluster": cluster.nodes[0].url}
        clients = {
            "single": redis.Redis.from_url(single.url),
            "cluster": connect_cluster(cluster.nodes[0].url),
        }
        stats = {
            "single": MastersInfo([redis.Redis.from_url(single.url)]),
            "cluster": MastersInfo([redis.Redis.from_url(n.url) for n in cluster.nodes]),
        }
        meta: dict[str, Any] = {
            "server": bl.server_description(stats["single"].clients[0]),
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "redis_py": redis.__version__,
            "tenure": tenure.__version__,
            "counted": counted,
            "timed": timed,
            "slice": args.slice,
            "seconds": seconds,
            "rounds": rounds,
        }
        bl.log(f"server: {meta['server']}; cluster of {len(cluster.nodes)} masters")
        bl.log(f"uncontended: {len(PRIMITIVES)} primitives x 2 topologies")
        unc = bench_uncontended(clients, dict(stats), counted, timed, args.slice, tag)
        unc += asyncio.run(
            bench_uncontended_async(urls, dict(stats), counted, timed, args.slice, tag)
        )
        bl.log(f"hand-off: starting {HANDOFF_PROCESSES} worker processes per topology (spawn)")
        pools["single"] = bl.WorkerPool(HANDOFF_PROCESSES, urls["single"])
        pools["cluster"] = bl.WorkerPool(
            HANDOFF_PROCESSES, urls["cluster"], connect=connect_cluster
        )
        hand = bench_handoff(pools, dict(stats), seconds, rounds, tag)
        meta["total_seconds"] = round(time.monotonic() - started, 1)
        text = report(meta, unc, hand)
        print(text)
        if args.markdown:
            Path(args.markdown).write_text(text)
        if args.json:
            doc = {
                "meta": meta,
                "uncontended": [
                    {**asdict(u), "cycle_p50_us": u.cycle_p50_us, "cycle_us": None} for u in unc
                ],
                "handoff": [asdict(h) for h in hand],
            }
            Path(args.json).write_text(json.dumps(bl.to_jsonable(doc), indent=2) + "\n")
    finally:
        for pool in pools.values():
            pool.close()
        for client in clients.values():
            client.close()
        for info in stats.values():
            info.close()
        cluster.close()
        single.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
