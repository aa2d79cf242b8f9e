"""tenure._server.ServerProcess: a port taken between choosing it and starting
the server (other test runs share the machine) moves the server to another
port on its first start; a restart keeps its port."""

from __future__ import annotations

import os
import socket

import pytest
import redis

from tenure._server import ServerProcess, ServerUnavailable

# Both start servers of their own on TENURE_SERVER's binary.
pytestmark = pytest.mark.each_server


def _binary() -> str | None:
    return os.environ.get("TENURE_SERVER") or None


def test_a_port_taken_before_the_first_start_moves_the_server() -> None:
    server = ServerProcess(_binary())
    chosen = server.port
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", chosen))
        squatter.listen()
        try:
            server.start()
            assert server.port != chosen
            with redis.Redis(port=server.port) as client:
                assert client.ping()
        finally:
            server.close()


def test_a_restart_keeps_its_port() -> None:
    with ServerProcess(_binary()) as server:
        port = server.port
        server.stop()
        with socket.socket() as squatter:
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
            with pytest.raises(ServerUnavailable, match=str(port)):
                server.start()
        server.start()
        assert server.port == port
