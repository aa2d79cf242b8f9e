"""Redlock's masters are independent servers: one server given twice (two
addresses, two dbs, a unix socket and a TCP port) is refused by what the
server says of itself (its run_id), at the first call and after a restart.
Each test starts its own servers (the layouts are not the module's five)."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio

from tenure import AsyncRedlock, InvalidArgument, Redlock
from tenure._server import ServerProcess

pytestmark = pytest.mark.topology


def _server(*args: str) -> ServerProcess:
    return ServerProcess(os.environ.get("TENURE_SERVER") or None, args=args)


@pytest.fixture
def three() -> Iterator[list[ServerProcess]]:
    """Three independent servers on loopback TCP ports."""
    servers: list[ServerProcess] = []
    try:
        for _ in range(3):
            servers.append(_server().start())
        yield servers
    finally:
        for s in servers:
            s.close()


def _run_id(client: redis.Redis) -> str:
    return str(client.info("server")["run_id"])


def _held(server: ServerProcess, db: int, name: str) -> object:
    with redis.Redis(port=server.port, db=db) as c:
        return c.get(f"tenure:{{{name}}}")


def _info_calls(port: int) -> int:
    """How many INFO commands the server ran (this one not counted yet)."""
    with redis.Redis(port=port) as c:
        stats = c.info("commandstats")
    return int(stats.get("cmdstat_info", {}).get("calls", 0))


def test_one_server_by_two_names_in_two_dbs_is_refused_with_a_master_paused(
    three: list[ServerProcess],
) -> None:
    """The issue's case: the one live server counted twice made a quorum of
    one server; the first acquire must refuse it and take nothing."""
    p, q = three[0].port, three[1].port
    clients = [
        redis.Redis(host="localhost", port=p),
        redis.Redis.from_url(f"redis://127.0.0.1:{p}/1"),
        redis.Redis(port=q),
    ]
    run_id = _run_id(clients[0])
    lock = Redlock(clients, "dup", ttl=5, master_timeout=0.2)  # accepted: addresses differ
    three[1].pause()
    try:
        for _ in range(2):  # refused at every call, not only the first
            with pytest.raises(InvalidArgument) as refused:
                lock.acquire(timeout=1)
            assert str(refused.value).startswith(
                f"clients[0] (localhost:{p}/0) and clients[1] (127.0.0.1:{p}/1) are the "
                f"same server (run_id {run_id})"
            )
            assert _held(three[0], 0, "dup") is None and _held(three[0], 1, "dup") is None
        with pytest.raises(InvalidArgument, match=run_id):
            lock.locked()
        # refused before any lock write: the server never ran a script
        assert "cmdstat_evalsha" not in clients[0].info("commandstats")
    finally:
        three[1].resume()
    assert _held(three[1], 0, "dup") is None
    for c in clients:
        c.close()


def test_one_server_by_two_names_in_two_dbs_is_refused_asyncio(
    three: list[ServerProcess],
) -> None:
    p, q = three[0].port, three[1].port
    run_id = _run_id(redis.Redis(port=p))

    async def main() -> None:
        clients = [
            redis.asyncio.Redis(host="localhost", port=p),
            redis.asyncio.Redis.from_url(f"redis://127.0.0.1:{p}/1"),
            redis.asyncio.Redis(port=q),
        ]
        lock = AsyncRedlock(clients, "adup", ttl=5, master_timeout=0.2)
        three[1].pause()
        try:
            for _ in range(2):
                with pytest.raises(InvalidArgument, match=f"same server \\(run_id {run_id}\\)"):
                    await lock.acquire(timeout=1)
                assert _held(three[0], 0, "adup") is None and _held(three[0], 1, "adup") is None
        finally:
            three[1].resume()
        for c in clients:
            await c.aclose()

    asyncio.run(main())


def test_a_unix_socket_and_a_tcp_port_of_one_server_are_refused(
    three: list[ServerProcess], tmp_path: Path
) -> None:
    sock = str(tmp_path / "s.sock")
    both = _server("--unixsocket", sock, "--unixsocketperm", "700").start()
    try:
        clients = [
            redis.Redis(unix_socket_path=sock),
            redis.Redis(port=three[1].port),
            redis.Redis(port=both.port),
        ]
        lock = Redlock(clients, "sock", ttl=5)
        named = re.escape(f"clients[0] (unix:{sock}/0) and clients[2] (localhost:{both.port}/0)")
        with pytest.raises(InvalidArgument, match=named):
            lock.acquire(blocking=False)
        assert _held(both, 0, "sock") is None and _held(three[1], 0, "sock") is None
        for c in clients:
            c.close()
    finally:
        both.close()


def test_a_restarted_master_is_asked_again_and_still_recognised(
    three: list[ServerProcess],
) -> None:
    clients = [redis.Redis(port=s.port) for s in three]
    lock = Redlock(clients, "restart", ttl=5, master_timeout=0.5)
    for _ in range(5):  # first contact; connections kept by the fan-out
        lock.acquire().release()  # type: ignore[union-attr]
    before = _run_id(clients[1])
    three[1].restart()  # a new process (a new run_id) on the same port
    after = _run_id(clients[1])
    assert after != before
    for _ in range(3):
        lease = lock.acquire(timeout=2)
        assert lease, "a restarted master is another process, not a duplicate"
        lease.release()
    # the restarted master was asked who it is (nothing else sends it INFO)
    assert _info_calls(three[1].port) >= 2  # (the test's own run_id, and the Redlock's)
    for c in clients:
        c.close()


@pytest.mark.parametrize("asyncio_api", [False, True], ids=["sync", "asyncio"])
def test_a_duplicate_that_appears_after_a_restart_is_refused(
    three: list[ServerProcess], asyncio_api: bool
) -> None:
    """Master 0 is a unix socket served by a server of its own; after a restart,
    master 1's server serves that socket too (db 1): the two are then one
    server, which the Redlock must see once their connections broke."""
    alone = ServerProcess(os.environ.get("TENURE_SERVER") or None, unix_socket=True).start()
    sock = str(alone.unix_socket)
    merged = _server("--unixsocket", sock, "--unixsocketperm", "700")
    try:
        urls = [f"unix://{sock}?db=1", f"redis://127.0.0.1:{three[1].port}/0", three[2].url]
        if not asyncio_api:
            clients = [redis.Redis.from_url(u) for u in urls]
            lock = Redlock(clients, "merge", ttl=5, master_timeout=0.5)
            for _ in range(5):  # identified; connections kept by the fan-out
                lock.acquire().release()  # type: ignore[union-attr]
            _merge(alone, three[1], merged)
            with pytest.raises(InvalidArgument, match=r"clients\[0\] .* and clients\[1\]"):
                lock.acquire(timeout=2)
            for c in clients:
                c.close()
        else:

            async def main() -> None:
                clients = [redis.asyncio.Redis.from_url(u) for u in urls]
                lock = AsyncRedlock(clients, "merge", ttl=5, master_timeout=0.5)
                for _ in range(5):
                    await (await lock.acquire()).release()  # type: ignore[union-attr]
                _merge(alone, three[1], merged)
                with pytest.raises(InvalidArgument, match=r"clients\[0\] .* and clients\[1\]"):
                    await lock.acquire(timeout=2)
                for c in clients:
                    await c.aclose()

            asyncio.run(main())
        # nothing is left held: the grant of the acquire that found it was given back
        assert _held(merged, 0, "merge") is None and _held(merged, 1, "merge") is None
        assert _held(three[2], 0, "merge") is None
    finally:
        alone.close()
        merged.close()


def _merge(alone: ServerProcess, second: ServerProcess, merged: ServerProcess) -> None:
    """Stop ``alone`` (the unix socket's server) and ``second``; start
    ``merged`` on ``second``'s port with ``alone``'s socket."""
    alone.stop()
    second.stop()
    merged.port = second.port
    merged.start()
