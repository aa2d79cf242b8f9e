"""The one place that reads the client libraries' private attributes.

redis-py and valkey-py (sync and asyncio) do not expose everything the
drivers need: a sync connection's socket (to poll several servers at once),
an asyncio connection's stream reader and writer (to see a reply waiting in
its buffer, to write without a timer per call), a connection's command
packer, a retry policy's count, a ``PubSub``'s key normalisation. Every such
read or write goes through a function here, and ``tests/test_internals.py``
runs each one on a real connection of every installed library (the oldest
redis-py allowed too, in ``tests/test_packaging.py``): a library release that
renames one fails there, in one place. No other module of tenure names a
library's private attribute (``tests/test_private_names.py`` checks it).

Each function takes a library object of either library and returns what the
attribute holds, or a neutral value (``None``, ``False``, ``-1``) when the
object has no such attribute (another connection class, a fake in a test).
"""

from __future__ import annotations

import asyncio
import errno
import select
import socket
import ssl
import sys
from typing import Any

# -- sync connections (redis.Connection, valkey.Connection and subclasses) --


def pushed_parser(conn: Any) -> Any:
    """The parser of a sync connection, if it is redis-py's hiredis one on a
    plain socket (its reader keeps no reply aside): what a thread waiting on a
    hub's connection reads the server's pushes with itself (see
    :func:`pushed_reply`); ``None`` for any other (the thread then waits for the
    hub's reader)."""
    parser = getattr(conn, "_parser", None)
    kind = type(parser)
    if kind.__name__ != "_HiredisParser" or kind.__module__ != "redis._parsers.hiredis":
        return None
    sock = getattr(parser, "_sock", None)
    if getattr(parser, "_reader", None) is None or sock is None or isinstance(sock, ssl.SSLSocket):
        return None
    return parser


def pushed_reply(parser: Any) -> Any:
    """The next whole reply in the reader of ``parser`` (see
    :func:`pushed_parser`), ``None`` if none: read without the library's
    ``PubSub``, whose read takes ``logging``'s lock and swallows exceptions
    (not for a thread that an interrupt may hit). An error reply comes back
    as the exception (not raised); a reply it cannot parse raises.

    Raises:
        OSError: (``ENOTCONN``) the connection was closed meanwhile (by another
            thread: the parser let go of its socket and reader), as
            :func:`pushed_due` and :func:`pushed_feed` do.
    """
    reply = _pushed_reader(parser).gets()
    return None if reply is sys.modules[type(parser).__module__].NOT_ENOUGH_DATA else reply


def pushed_due(parser: Any, timeout: float) -> bool:
    """Whether the socket of ``parser`` has data to read within ``timeout``
    seconds (consumes nothing)."""
    poll = select.poll()
    poll.register(_pushed_sock(parser), select.POLLIN)
    return bool(poll.poll(max(0, int(timeout * 1000))))


def pushed_feed(parser: Any) -> bool:
    """Read what the socket of ``parser`` has into its reader (after
    :func:`pushed_due`); ``False`` when the server closed the connection."""
    data = _pushed_sock(parser).recv(65536)
    if data:
        _pushed_reader(parser).feed(data)
    return bool(data)


def _pushed_sock(parser: Any) -> socket.socket:
    sock: socket.socket | None = parser._sock
    if sock is None:
        raise OSError(errno.ENOTCONN, "the connection was closed")
    return sock


def _pushed_reader(parser: Any) -> Any:
    reader = parser._reader
    if reader is None:
        raise OSError(errno.ENOTCONN, "the connection was closed")
    return reader


def sock_of(conn: Any) -> socket.socket | None:
    """The socket of a sync connection, ``None`` while it is not connected
    (redis-py sets ``_sock`` to ``None`` on ``disconnect``)."""
    return getattr(conn, "_sock", None)


def connected(conn: Any) -> bool:
    """Whether a connection (sync or asyncio) is connected: a sync one has its
    socket, an asyncio one its stream writer."""
    return sock_of(conn) is not None or writer_of(conn) is not None


def fileno_of(conn: Any) -> int:
    """The file descriptor of a sync connection's socket; ``-1`` when it has none."""
    sock = sock_of(conn)
    return sock.fileno() if sock is not None else -1


# -- asyncio connections (redis.asyncio.Connection, valkey.asyncio.Connection) --


def reader_of(conn: Any) -> asyncio.StreamReader | None:
    """The stream an asyncio connection reads its replies from (``None``: not connected)."""
    return getattr(conn, "_reader", None)


def writer_of(conn: Any) -> asyncio.StreamWriter | None:
    """The stream an asyncio connection writes to (``None``: not connected)."""
    return getattr(conn, "_writer", None)


def buffered(conn: Any) -> bool:
    """Whether some of a reply is already in an asyncio connection's read
    buffer (the ``StreamReader``'s ``_buffer``: read it before the replies
    still on their way)."""
    return bool(getattr(reader_of(conn), "_buffer", None))


def write_now(conn: Any, data: list[bytes]) -> bool:
    """Hand ``data`` to an asyncio connection's transport at once, when it is
    connected, its write buffer is empty (nothing to drain: no wait) and it
    makes no health checks; ``False`` (nothing written) otherwise. What
    ``send_packed_command`` does in that case, without the task and the
    timer its ``socket_timeout`` costs per call (the caller bounds the wait
    for the replies)."""
    writer = writer_of(conn)
    if writer is None or not getattr(conn, "is_connected", False):
        return False
    if getattr(conn, "health_check_interval", 0):
        return False
    transport = writer.transport
    if transport.is_closing() or transport.get_write_buffer_size():
        return False
    writer.writelines(data)
    return True


async def until_data(conns: list[Any]) -> None:
    """Wait until some of a reply is in the read buffer of one of ``conns``
    (asyncio connections; or one of them is closed), without reading: a
    slow server's reply is then not waited for while others are here.
    Returns at once when a connection's buffer can't be watched (then the
    caller reads the replies in order). It sets the ``StreamReader``'s own
    ``_waiter``, which ``feed_data`` and ``feed_eof`` wake, and clears it again."""
    loop = asyncio.get_running_loop()
    mine: list[tuple[Any, asyncio.Future[None]]] = []
    try:
        for conn in conns:
            reader: Any = reader_of(conn)
            # (a waiter already set: one of the stream's own reads is waiting)
            if reader is None or getattr(reader, "_waiter", False) is not None or reader.at_eof():
                return
            waiter: asyncio.Future[None] = loop.create_future()
            reader._waiter = waiter
            mine.append((reader, waiter))
        await asyncio.wait([w for _, w in mine], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for reader, waiter in mine:
            if reader._waiter is waiter:
                reader._waiter = None
            if waiter.done() and not waiter.cancelled():
                waiter.exception()  # retrieved (a lost connection): the read raises it
            waiter.cancel()


# -- either kind of connection --


def command_packer(conn: Any) -> Any:
    """The object a connection packs its commands with (``None``: it has none)."""
    return getattr(conn, "_command_packer", None)


def set_command_packer(conn: Any, packer: Any) -> None:
    """Make ``conn`` pack its commands, its handshake's too, with ``packer``."""
    conn._command_packer = packer


# -- clients and their parts --


def retries_of(retry: Any) -> int | None:
    """How many times a ``Retry`` policy sends a command again (``None``: unknown)."""
    count = getattr(retry, "_retries", None)
    return count if isinstance(count, int) else None


def normalize_keys(pubsub: Any, channels: dict[Any, Any]) -> dict[Any, Any]:
    """``channels`` with its names as the ``PubSub`` keeps them in its own
    tables (decoded by its encoder), as ``subscribe`` stores them."""
    normalized: dict[Any, Any] = pubsub._normalize_keys(channels)
    return normalized
