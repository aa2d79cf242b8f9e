"""Each accessor of ``tenure._drivers._internals`` (the one module that reads
the client libraries' private attributes) on a real connection of every
installed library, sync and asyncio: a library release that renames what
one reads fails here, in one place. ``tests/test_packaging.py`` runs this
file on the oldest redis-py allowed too."""

from __future__ import annotations

import asyncio
import errno
import importlib
import select
import socket
from types import ModuleType
from typing import Any

import pytest

from tenure._drivers import _internals


def _installed() -> list[str]:
    names = ["redis"]
    try:
        importlib.import_module("valkey")
    except ImportError:
        pass
    else:
        names.append("valkey")
    return names


LIBRARIES = _installed()


def _lib(name: str) -> ModuleType:
    return importlib.import_module(name)


def _client_class(lib: ModuleType, asyncio_api: bool) -> Any:
    module = importlib.import_module(f"{lib.__name__}.asyncio") if asyncio_api else lib
    return module.Redis if lib.__name__ == "redis" else module.Valkey


def _text(reply: Any) -> str:
    return reply.decode() if isinstance(reply, bytes) else str(reply)


class _CountingPacker:
    """Wraps a connection's packer, counting what it packs."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.packed: list[tuple[Any, ...]] = []

    def pack(self, *args: Any) -> Any:
        self.packed.append(args)
        return self.inner.pack(*args)


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_sync_connections_socket_is_read_and_polled(url: str, library: str) -> None:
    client = _client_class(_lib(library), False).from_url(url)
    conn = client.connection_pool.make_connection()
    try:
        assert _internals.sock_of(conn) is None and not _internals.connected(conn)
        assert _internals.fileno_of(conn) == -1
        conn.connect()
        sock = _internals.sock_of(conn)
        assert isinstance(sock, socket.socket) and _internals.connected(conn)
        fd = _internals.fileno_of(conn)
        assert fd == sock.fileno() >= 0
        conn.send_command("PING")
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        assert poller.poll(5000), "the reply is seen on the socket"
        assert _text(conn.read_response()) == "PONG"
        conn.disconnect()
        assert _internals.sock_of(conn) is None and not _internals.connected(conn)
    finally:
        conn.disconnect()
        client.close()


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_pubsub_connections_pushes_are_read_off_its_parser(url: str, library: str) -> None:
    """redis-py's hiredis parser: a published message, read whole off the
    socket into the parser's reader, a read with nothing due, the server
    closing the connection. Any other parser (valkey-py's, redis-py's Python
    one): ``None``, its waiting threads wait for the hub's reader."""
    client = _client_class(_lib(library), False).from_url(url)
    pubsub = client.pubsub()
    try:
        pubsub.subscribe("internals:pushed")
        assert pubsub.get_message(timeout=5) is not None  # (the confirmation)
        parser = _internals.pushed_parser(pubsub.connection)
        hiredis = type(pubsub.connection._parser).__name__ == "_HiredisParser"
        if library != "redis" or not hiredis:
            assert parser is None
            return
        assert parser is not None
        assert _internals.pushed_reply(parser) is None
        assert not _internals.pushed_due(parser, 0.05)
        client.publish("internals:pushed", "1 token")
        reply = None
        while reply is None:
            assert _internals.pushed_due(parser, 5)
            assert _internals.pushed_feed(parser)
            reply = _internals.pushed_reply(parser)
        assert isinstance(reply, list)
        assert [_text(part) for part in reply] == ["message", "internals:pushed", "1 token"]
        client.client_kill_filter(_type="pubsub")
        assert _internals.pushed_due(parser, 5)
        assert not _internals.pushed_feed(parser)  # (the server closed it)
        # closed by another thread (a failed SUBSCRIBE's send): the parser lets
        # go of its socket and reader; each read is an OSError with an errno,
        # which hands the reading back to the hub's reader
        pubsub.connection.disconnect()
        for read in (
            lambda: _internals.pushed_due(parser, 0.05),
            lambda: _internals.pushed_feed(parser),
            lambda: _internals.pushed_reply(parser),
        ):
            with pytest.raises(OSError) as cut:
                read()
            assert cut.value.errno == errno.ENOTCONN
    finally:
        pubsub.close()
        client.close()


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_sync_connections_packer_is_read_and_replaced(url: str, library: str) -> None:
    client = _client_class(_lib(library), False).from_url(url)
    conn = client.connection_pool.make_connection()
    try:
        packer = _internals.command_packer(conn)
        assert callable(getattr(packer, "pack", None))
        counting = _CountingPacker(packer)
        _internals.set_command_packer(conn, counting)
        assert _internals.command_packer(conn) is counting
        conn.connect()  # (the handshake is packed by it too, if there is one)
        conn.send_command("PING")
        assert _text(conn.read_response()) == "PONG"
        assert ("PING",) in counting.packed
    finally:
        conn.disconnect()
        client.close()


@pytest.mark.parametrize("library", LIBRARIES)
def test_an_asyncio_connections_streams_buffer_and_direct_write(url: str, library: str) -> None:
    async def main() -> None:
        client = _client_class(_lib(library), True).from_url(url)
        conn = client.connection_pool.make_connection()
        try:
            assert _internals.reader_of(conn) is None
            assert _internals.writer_of(conn) is None and not _internals.connected(conn)
            assert not _internals.buffered(conn)
            await conn.connect()
            assert _internals.connected(conn)
            assert isinstance(_internals.reader_of(conn), asyncio.StreamReader)
            assert isinstance(_internals.writer_of(conn), asyncio.StreamWriter)
            assert not _internals.buffered(conn)
            assert _internals.write_now(conn, conn.pack_command("PING"))
            await asyncio.wait_for(_internals.until_data([conn]), 5)
            assert _internals.buffered(conn), "the reply is in the read buffer, unread"
            assert _text(await conn.read_response()) == "PONG"
            assert not _internals.buffered(conn)
            # a connection that makes health checks is not written to directly
            conn.health_check_interval = 30
            assert not _internals.write_now(conn, conn.pack_command("PING"))
            await conn.disconnect()
            assert not _internals.write_now(conn, conn.pack_command("PING"))
        finally:
            await conn.disconnect()
            await client.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("library", LIBRARIES)
def test_an_asyncio_connection_has_no_packer_to_wrap(url: str, library: str) -> None:
    """An asyncio connection packs in Python (what ``numbers_as_text`` leaves
    alone): should a release give it a C packer, this fails, and tenure's
    wrapping of it must be looked at."""

    async def main() -> None:
        client = _client_class(_lib(library), True).from_url(url)
        conn = client.connection_pool.make_connection()
        try:
            assert _internals.command_packer(conn) is None
            await conn.connect()
            assert _internals.command_packer(conn) is None
        finally:
            await conn.disconnect()
            await client.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("asyncio_api", [False, True], ids=["sync", "asyncio"])
@pytest.mark.parametrize("library", LIBRARIES)
def test_a_retry_policys_count_is_read(url: str, library: str, asyncio_api: bool) -> None:
    lib = _lib(library)
    retry_module = importlib.import_module(
        f"{library}.asyncio.retry" if asyncio_api else f"{library}.retry"
    )
    backoff = importlib.import_module(f"{library}.backoff").NoBackoff()
    assert _internals.retries_of(retry_module.Retry(backoff, 0)) == 0
    assert _internals.retries_of(retry_module.Retry(backoff, 5)) == 5
    client = _client_class(lib, asyncio_api).from_url(url)
    retry = client.get_retry()
    assert retry is None or isinstance(_internals.retries_of(retry), int)
    assert _internals.retries_of(object()) is None


@pytest.mark.parametrize("asyncio_api", [False, True], ids=["sync", "asyncio"])
@pytest.mark.parametrize("library", LIBRARIES)
def test_a_pubsubs_channel_names_are_normalized(url: str, library: str, asyncio_api: bool) -> None:
    async def main() -> None:
        client = _client_class(_lib(library), asyncio_api).from_url(url)
        pubsub = client.pubsub()
        try:
            normalized = _internals.normalize_keys(pubsub, {"a": None, b"b": 1})
            assert {_text(k): v for k, v in normalized.items()} == {"a": None, "b": 1}
            # one name, given as text or as bytes, is one key of the PubSub's tables
            as_text = _internals.normalize_keys(pubsub, {"a": 1})
            assert as_text == _internals.normalize_keys(pubsub, {b"a": 1})
        finally:
            if asyncio_api:
                await pubsub.aclose()
                await client.aclose()
            else:
                pubsub.close()
                client.close()

    asyncio.run(main())
