"""The sync wake hub's reader: its thread's CPU per pub/sub message when the
process also listens on 0, 1,000 or 10,000 other channels (the wake channels
of other locks it waits on). Each message is published alone (0.3 ms apart),
so each one wakes the reader, as a hand-off does.

Usage::

    .venv/bin/python benchmarks/hub_channels.py
    .venv/bin/python benchmarks/hub_channels.py --others 0,1000,10000 --messages 2000
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Sequence

import redis

from tenure._drivers import _sync
from tenure._server import ServerProcess


def cpu_per_message(url: str, others: int, messages: int) -> float:
    """The hub reader thread's CPU µs per message, with ``others`` more channels."""
    client = redis.Redis.from_url(url)
    publisher = redis.Redis.from_url(url)
    hub = _sync._hub(client, "bench")
    events = [threading.Event() for _ in range(others + 1)]
    channels = [hub.listen(f"bench:other:{i}", events[i]) for i in range(others)]
    mine = hub.listen("bench:mine", events[-1])
    time.sleep(0.5 + others / 20_000)  # (the subscriptions' confirmations)
    reader = next(t for t in threading.enumerate() if t.name == "tenure-wake-hub" and t.is_alive())
    assert reader.ident is not None
    clock = time.pthread_getcpuclockid(reader.ident)
    before = time.clock_gettime(clock)
    for _ in range(messages):
        publisher.publish("bench:mine", "x")
        time.sleep(0.0003)
    time.sleep(0.2)
    used = time.clock_gettime(clock) - before
    for ch, event in zip([*channels, mine], events, strict=True):
        hub.unlisten(ch, event)
    publisher.close()
    client.close()
    return used / messages * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--others", default="0,1000,10000", help="comma-separated counts")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--server", help="redis-server/valkey-server to start")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.others.split(",")]
    print("| other channels | reader CPU µs per message |")
    print("|--:|--:|")
    with ServerProcess(args.server) as server:
        for n in counts:
            us = cpu_per_message(server.url, n, args.messages)
            print(f"| {n:,} | {us:.0f} |", flush=True)
            time.sleep(2.5)  # (the hub's reader stops once every channel is gone)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
