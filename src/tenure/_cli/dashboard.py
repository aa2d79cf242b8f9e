"""``tenure dashboard``: ``top``'s table in a browser page that refreshes itself.

A read-only HTTP server (the standard library's ``ThreadingHTTPServer``)
serves three files shipped in the package (``static/``: the page, its script
and its style; no script from the network) and ``api/locks``, one refresh as
JSON (:mod:`tenure._views.live`'s shape, plus the table's text cells). The page
asks for ``api/locks`` every interval. A refresh is read from the server at
most once per half interval, whoever asks; a refresh that fails is shown as
an error and the next one connects again, so the page recovers when the
server is back.

Bound to a loopback address (the default), it answers only requests whose
``Host`` names a loopback host, so that a web page can't read it through a
name that resolves to 127.0.0.1 (DNS rebinding). Only ``GET`` and ``HEAD``
are served.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .._views.live import SORTS, Frame, frame_json, table_json
from .common import EXIT_USAGE, Server
from .live import Watcher, add_live_options, where

#: The port ``dashboard`` listens on unless ``--port`` says otherwise.
PORT = 8642

#: The files of the page: URL path -> (file in ``static/``, content type).
FILES: dict[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
}

#: Sent with every answer: nothing from another origin runs, nothing is cached.
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

_LOOPBACK_NAMES = {"localhost", "localhost."}


def add_dashboard(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Add ``tenure dashboard``."""
    dashboard = commands.add_parser(
        "dashboard",
        parents=parents,
        help="serve top's table as a web page that refreshes itself (read-only)",
        description=(
            "Serve a web page showing the named primitives under the prefix, as 'tenure "
            "top' does, refreshed every --interval seconds; click a column's header to "
            "sort by it. Read-only: it serves the page and its data (GET /api/locks, the "
            "JSON of 'top --json-lines' with the table's text) and changes nothing. "
            "Listens on 127.0.0.1 unless --host says otherwise; the page needs nothing "
            "from the network. While the server can't be read, the page says so and "
            "the table is kept; it recovers when the server is back. Ctrl-C stops it."
        ),
    )
    add_live_options(dashboard)
    dashboard.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1; 0.0.0.0 for every interface: "
        "anyone who reaches it sees the locks' names and holders)",
    )
    dashboard.add_argument(
        "--port",
        type=_port,
        default=PORT,
        help=f"the port to listen on (default {PORT}; 0 picks a free one)",
    )
    dashboard.set_defaults(handler=_run_dashboard, embedded="existing")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {value}")
    return value


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or name, IPv6 in brackets or not) is this machine's
    loopback."""
    host = host.strip("[]").lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Board:
    """The refreshes the pages ask for: read at most once per half interval,
    whichever page asks (thread-safe)."""

    def __init__(self, watcher: Watcher, args: argparse.Namespace) -> None:
        self.watcher = watcher
        self.args = args
        self._lock = threading.Lock()
        self._frame: Frame | None = None
        self._read_at = 0.0

    def frame(self) -> Frame:
        """The latest refresh, read now if the last one is half an interval old."""
        with self._lock:
            fresh = time.monotonic() - self._read_at < self.args.interval / 2
            if self._frame is None or not fresh:
                self._frame = self.watcher.read()
                self._read_at = time.monotonic()
            return self._frame

    def payload(self, by: str, every: bool) -> dict[str, Any]:
        """``api/locks``: the refresh's JSON, its table's cells, the interval and
        the server's address."""
        frame = self.frame()
        a = self.args
        out = frame_json(frame, prefix=a.prefix, pattern=a.pattern, by=by, every=every)
        out["table"] = table_json(frame.shown(by, every))
        out["interval"] = a.interval
        out["server"] = where(self.watcher.url)
        return out


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    board: Board
    check_host: bool


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "tenure-dashboard"
    sys_version = ""  # no Python version in the Server header

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        if self.server.check_host and not self._host_ok():
            self._send(HTTPStatus.FORBIDDEN, b"not a loopback Host\n", "text/plain", body)
            return
        parts = urlsplit(self.path)
        if parts.path in FILES:
            name, kind = FILES[parts.path]
            data = resources.files(__package__).joinpath("static", name).read_bytes()
            self._send(HTTPStatus.OK, data, kind, body)
        elif parts.path == "/api/locks":
            query = parse_qs(parts.query)
            by = query.get("sort", [self.server.board.args.sort])[0]
            if by not in SORTS:
                self._send(HTTPStatus.BAD_REQUEST, b"unknown sort\n", "text/plain", body)
                return
            every = query.get("all", ["1" if self.server.board.args.all else "0"])[0] == "1"
            data = json.dumps(self.server.board.payload(by, every)).encode()
            self._send(HTTPStatus.OK, data, "application/json", body)
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain", body)

    def _host_ok(self) -> bool:
        host = self.headers.get("Host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return is_loopback(name)

    def _send(self, status: HTTPStatus, data: bytes, kind: str, body: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in HEADERS.items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per request, every second, would drown the terminal


def _run_dashboard(args: argparse.Namespace, server: Server) -> int:
    watcher = Watcher(server.url, prefix=args.prefix, pattern=args.pattern, count=args.scan_count)
    try:
        watcher.first()  # an unreachable server fails now, as ls would
        try:
            kind = _Server6 if ":" in args.host else _Server
            http = kind((args.host.strip("[]"), args.port), _Handler)
        except OSError as exc:
            print(
                f"tenure dashboard: can't listen on {args.host}:{args.port}: {exc}", file=sys.stderr
            )
            return EXIT_USAGE
        http.board = Board(watcher, args)
        http.check_host = is_loopback(args.host)
        host, port = str(http.server_address[0]), int(http.server_address[1])
        shown = f"[{host}]" if ":" in host else host
        print(
            f"tenure dashboard: serving http://{shown}:{port}/ (Ctrl-C to stop)",
            file=sys.stderr,
            flush=True,
        )
        with http:
            http.serve_forever(poll_interval=0.2)
        return 0
    except KeyboardInterrupt:  # how it is meant to stop
        return 0
    finally:
        watcher.close()
