"""A Sentinel group of real processes for the tests: one master, one replica,
three sentinels, all on loopback ports.

The sentinels are the test server binary run with ``--sentinel`` (Valkey's and
Redis's servers both can), or ``TENURE_SENTINEL`` (e.g. Debian's
``redis-sentinel``). Failure detection and failover are tuned short
(:data:`DOWN_AFTER_MS`, :data:`FAILOVER_TIMEOUT_MS`), so a failover takes a
second or three.

:class:`SentinelGroup` starts the processes, fails the master over (by
``SENTINEL FAILOVER``, or by killing it) and waits until the group is healthy
again (every sentinel names the same master, which the other server replicates
from with its link up), so that one group serves a whole test module whichever
server is the master.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
import redis.sentinel

from tenure._server import ServerProcess, free_port

#: The service name the sentinels monitor.
SERVICE = "tenure-test"
#: A server that has not answered for this long is down, milliseconds.
DOWN_AFTER_MS = 600
#: Sentinel's failover timeout, milliseconds (also the wait before it retries
#: a failover that failed, and the time it gives replicas to follow the new master).
FAILOVER_TIMEOUT_MS = 2000
#: Longest wait for the group to settle (after start or a failover), seconds.
SETTLE = 20.0


class _Sentinel:
    """One sentinel process, from a config file it may rewrite."""

    def __init__(self, binary: str, master_port: int) -> None:
        self.port = free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="tenure-sentinel-")
        conf = Path(self._dir.name) / "sentinel.conf"
        conf.write_text(
            f"port {self.port}\n"
            "bind 127.0.0.1\n"
            "protected-mode no\n"
            "daemonize no\n"
            f"dir {self._dir.name}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        from mirakuru import TCPExecutor

        self._executor = TCPExecutor(
            [binary, str(conf), "--sentinel"],
            "127.0.0.1",
            self.port,
            timeout=10,
            stdout=subprocess.DEVNULL,
        )

    def start(self) -> None:
        self._executor.start()

    def close(self) -> None:
        if self._executor.running():
            self._executor.stop()
        self._dir.cleanup()


class SentinelGroup:
    """One master, one replica and three sentinels monitoring them as :data:`SERVICE`.

    Args:
        binary: the server binary (``None``: the embedded Valkey).
        sentinel_binary: the binary run with ``--sentinel`` (``None``: ``binary``).
    """

    def __init__(self, binary: str | None = None, sentinel_binary: str | None = None) -> None:
        # diskless sync at once: a replica (re)links within milliseconds
        args = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
        self._binary = binary
        self._args = args
        first = ServerProcess(binary, args=args)
        self.servers: dict[int, ServerProcess] = {first.port: first}
        first.start()
        second = ServerProcess(binary, args=(*args, "--replicaof", "127.0.0.1", str(first.port)))
        self.servers[second.port] = second
        second.start()
        self._sentinels: list[_Sentinel] = []
        try:
            for _ in range(3):
                s = _Sentinel(sentinel_binary or first.binary, first.port)
                self._sentinels.append(s)
                s.start()
            self.wait_healthy()
        except BaseException:
            self.close()
            raise

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """The sentinels' ``(host, port)``, as ``Sentinel(...)`` takes them."""
        return [("127.0.0.1", s.port) for s in self._sentinels]

    def sentinel(self, **kwargs: Any) -> redis.sentinel.Sentinel:
        """A redis-py ``Sentinel`` on this group (``kwargs``: for the master's connections)."""
        return redis.sentinel.Sentinel(self.addresses, **kwargs)  # type: ignore[no-untyped-call]

    def _ask(self, port: int, *args: str) -> Any:
        with redis.Redis(port=port, socket_timeout=2, decode_responses=True) as c:
            return c.execute_command(*args)

    def master_port(self) -> int:
        """The master's port as the first sentinel names it."""
        reply = self._ask(self._sentinels[0].port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(reply[1])

    @property
    def master(self) -> ServerProcess:
        """The master's process (as the first sentinel sees it)."""
        return self.servers[self.master_port()]

    @property
    def replica(self) -> ServerProcess:
        """The other server."""
        master = self.master_port()
        return next(s for port, s in self.servers.items() if port != master)

    def _healthy(self) -> int | None:
        """The master's port if the group is settled, else ``None``."""
        try:
            named = {
                int(self._ask(s.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)[1])
                for s in self._sentinels
            }
            if len(named) != 1:
                return None
            master = named.pop()
            if self._ask(master, "ROLE")[0] != "master":
                return None
            for port in self.servers:
                if port != master:
                    info = self._ask(port, "INFO", "replication")
                    if info.get("master_port") != master or info.get("master_link_status") != "up":
                        return None
            for s in self._sentinels:
                state = dict(_pairs(self._ask(s.port, "SENTINEL", "MASTER", SERVICE)))
                flags = state["flags"]
                if flags != "master" or int(state["num-other-sentinels"]) < 2:
                    return None
                if int(state["num-slaves"]) < 1:
                    return None
                # a replica it can promote (its view of the replica's link is
                # refreshed only every 10 s: the replica's own INFO is checked above)
                replicas = self._ask(s.port, "SENTINEL", "REPLICAS", SERVICE)
                if not any(dict(_pairs(r))["flags"] == "slave" for r in replicas):
                    return None
            return master
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            return None

    def wait_healthy(self, timeout: float = SETTLE) -> int:
        """Wait until every sentinel names one master that answers as a master,
        sees the other sentinels and a replica that is not down, and the other
        server replicates from it with its link up; return the master's port.

        Raises:
            AssertionError: not settled within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            port = self._healthy()
            if port is not None:
                return port
            assert time.monotonic() < deadline, "the sentinel group did not settle"
            time.sleep(0.1)

    def _wait_master(self, old: int, timeout: float = SETTLE) -> int:
        deadline = time.monotonic() + timeout
        while True:
            try:
                ports = {
                    int(self._ask(s.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)[1])
                    for s in self._sentinels
                }
            except (redis.ConnectionError, redis.TimeoutError):
                ports = set()
            if len(ports) == 1 and old not in ports:
                port = ports.pop()
                if self._ask(port, "ROLE")[0] == "master":
                    return port
            assert time.monotonic() < deadline, "no failover"
            time.sleep(0.05)

    def failover(self) -> int:
        """``SENTINEL FAILOVER``: the replica is promoted, the old master follows
        it. Returns once every sentinel names the new master and it answers as
        one (its port); the old master may still be re-linking (see :meth:`wait_healthy`)."""
        old = self.master_port()
        deadline = time.monotonic() + SETTLE
        while True:
            try:
                self._ask(self._sentinels[0].port, "SENTINEL", "FAILOVER", SERVICE)
                break
            except redis.ResponseError as exc:  # INPROG / NOGOODSLAVE: not settled yet
                assert time.monotonic() < deadline, f"SENTINEL FAILOVER: {exc}"
                time.sleep(0.2)
        return self._wait_master(old)

    def demote(self, port: int) -> None:
        """Make the old master at ``port`` a replica of the current master, as the
        Sentinels do when they see it again after a failover (some seconds
        later: this does it at once), with the same commands: ``REPLICAOF``,
        then ``CLIENT KILL TYPE normal`` (pub/sub connections stay open)."""
        master = self.master_port()
        with redis.Redis(port=port, socket_timeout=2) as old:
            pipe = old.pipeline(transaction=True)
            pipe.execute_command("REPLICAOF", "127.0.0.1", str(master))
            pipe.execute_command("CLIENT", "KILL", "TYPE", "normal")
            pipe.execute()

    def kill_master(self) -> ServerProcess:
        """SIGKILL the master (what it had not replicated is lost); return its process."""
        master = self.master
        os.kill(master.pid, signal.SIGKILL)
        master._executor.process.wait()
        return master

    def wait_promoted(self, old: int) -> int:
        """Wait until the sentinels promoted another server than port ``old``; its port."""
        return self._wait_master(old)

    def rejoin(self, server: ServerProcess) -> None:
        """Start a killed server again (empty) as a replica of the current master."""
        master = self.master_port()
        server._executor = None
        server._args = (*self._args, "--replicaof", "127.0.0.1", str(master))
        server.start()

    def close(self) -> None:
        """Stop every process."""
        for s in self._sentinels:
            s.close()
        for server in self.servers.values():
            server.close()


def _pairs(flat: Any) -> list[tuple[str, str]]:
    """A flat ``[k1, v1, k2, v2, ...]`` reply (or a dict) as pairs."""
    if isinstance(flat, dict):
        return list(flat.items())
    return list(zip(flat[::2], flat[1::2], strict=True))
