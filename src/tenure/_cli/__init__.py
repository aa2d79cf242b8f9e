"""The ``tenure`` command line (also ``python -m tenure``).

Every command talks to the server given by ``--url`` or ``REDIS_URL`` (the
operator commands: to the whole cluster when that server is a cluster node,
see :func:`tenure._ops.connect`). When neither is given, the commands use one
embedded Valkey per user, on a unix socket in a private directory
(``pip install 'tenure[embedded]'``, :mod:`tenure._shared_server`): ``tenure
run`` starts it on demand and leaves it running (two runs must exclude each
other), ``tenure server start`` starts it and prints its URL, ``tenure server
stop`` stops it; the operator commands (``inspect``, ``ls``, ``release``,
``doctor``) look at it if it runs and say so, and fail otherwise (they never
start an empty server to report on). ``tenure demo`` starts an embedded server
of its own and stops it when it ends, also on Ctrl-C or an error.

To add a command, write an ``add_<name>(commands)`` function that adds its
subparser and sets ``handler`` to a function taking the parsed arguments and
the :class:`Server`, then call it from :func:`build_parser`. A command that
needs another server than a private embedded one sets ``embedded`` (see
:data:`Embedded`).

The operator commands (``inspect``, ``ls``, ``release``, ``doctor``) keep their
logic in :mod:`tenure._ops` and :mod:`tenure._doctor`; their handlers here only
read arguments, print and choose the exit status. The kinds they take (the
``release`` flags, ``doctor --kind``) come from the registry of kinds,
:mod:`tenure._plans.kinds`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import redis
import redis.cluster
import redis.connection
import redis.exceptions

from .. import __version__
from .._errors import TenureError
from .._server import ServerProcess, ServerUnavailable
from .._shared_server import SharedServer
from .common import EXIT_CONFLICT as EXIT_CONFLICT
from .common import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    Check,
    Embedded,
    Handler,
    Server,
    _CountedUrl,
)
from .common import EXIT_LOST as EXIT_LOST
from .dashboard import add_dashboard
from .jobs import add_demo, add_run, add_server
from .operate import DEFAULT_RELEASE as DEFAULT_RELEASE
from .operate import RELEASE_FLAGS as RELEASE_FLAGS
from .operate import add_doctor, add_inspect, add_leader, add_ls, add_release
from .top import add_top


def build_parser() -> argparse.ArgumentParser:
    """The parser of the whole command line, with one subparser per command."""
    url_help = (
        "the server, as a redis:// rediss:// or unix:// URL (default: $REDIS_URL; "
        "without either, an embedded Valkey is started for the command)"
    )
    parser = argparse.ArgumentParser(
        prog="tenure",
        description="Distributed locks with fencing tokens for Redis and Valkey.",
    )
    parser.add_argument("--version", action="version", version=f"tenure {__version__}")
    parser.add_argument(
        "--url",
        default=os.environ.get("REDIS_URL") or None,
        action=_CountedUrl,
        help=url_help + "; several only to 'tenure run' and 'tenure leader' (independent masters)",
    )
    # Accept --url after the command name too; SUPPRESS keeps the global value otherwise.
    url_after = argparse.ArgumentParser(add_help=False)
    url_after.add_argument("--url", default=argparse.SUPPRESS, action=_CountedUrl, help=url_help)

    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    add_demo(commands, parents=[url_after])
    add_inspect(commands, parents=[url_after])
    add_ls(commands, parents=[url_after])
    add_top(commands, parents=[url_after])
    add_dashboard(commands, parents=[url_after])
    add_release(commands, parents=[url_after])
    add_leader(commands, parents=[url_after])
    add_doctor(commands, parents=[url_after])
    add_run(commands, parents=[], url_help=url_help)
    add_server(commands, parents=[])
    return parser


@contextmanager
def open_server(url: str | None, embedded: Embedded = "private") -> Iterator[Server]:
    """The server at ``url``; without one, an embedded Valkey (see :data:`Embedded`):
    a private one is stopped on exit, the shared one is left running.

    Raises:
        ServerUnavailable: no ``url``, and the embedded server is missing or did not start.
    """
    if url:
        yield Server(url, embedded=False)
        return
    if embedded == "none":
        yield Server("", embedded=False)
        return
    if embedded == "existing":
        shared = SharedServer.default()
        if not shared.answers():
            raise ServerUnavailable(
                f"no --url or REDIS_URL given, and no shared server runs at {shared.url}: "
                "start one with 'tenure server start', or give --url"
            )
        print(f"tenure: the shared server at {shared.url}", file=sys.stderr)
        yield Server(shared.url, embedded=True)
        return
    if embedded == "shared":
        shared = SharedServer.default()
        if shared.ensure_running():
            print(
                f"tenure: started the shared embedded server at {shared.url} "
                "(stop it with 'tenure server stop')",
                file=sys.stderr,
            )
        yield Server(shared.url, embedded=True)
        return
    process = ServerProcess(unix_socket=True)
    try:
        process.start()
        yield Server(process.url, embedded=True)
    finally:
        process.close()


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv`` with ``parser`` (exiting with status 2 on a bad command line).

    For ``tenure run``, everything after the first ``--`` is the command, kept
    verbatim in ``after_dashes`` rather than left to argparse, which would drop
    a ``--`` among the command's arguments.
    """
    argv = list(argv)
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        i += 2 if argv[i] == "--url" else 1  # the global options before the command
    if i < len(argv) and argv[i] == "run" and "--" in argv[i + 1 :]:
        dashes = argv.index("--", i + 1)
        args = parser.parse_args(argv[:dashes])
        args.after_dashes = argv[dashes + 1 :]
    else:
        args = parser.parse_args(argv)
    given: list[str] = getattr(args, "url_given", None) or []
    if len(given) > 1:
        if args.command not in ("run", "leader"):
            parser.error(
                "--url may be given only once (several only to tenure run and tenure leader: "
                "independent masters)"
            )
        # before the command, they are the masters of a Redlock all the same
        args.urls = [*given, *(getattr(args, "urls", None) or [])]
    urls = getattr(args, "urls", None)
    if urls:  # several --url: the first also serves as the command's server
        args.url = urls[0]
    if args.command not in (None, "server"):  # (those two never connect to a URL)
        for url in urls or ([args.url] if args.url else []):
            try:
                redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
            except ValueError as exc:  # not the URL itself: it may hold a password
                parser.error(f"bad --url or REDIS_URL: {exc}")
    if args.command == "run" and (args.cmd or not getattr(args, "after_dashes", None)):
        parser.exit(
            EXIT_USAGE,
            "tenure run: give the command after --: "
            "tenure run (NAME | --leader NAME) [options] -- CMD [ARG ...]\n",
        )
    return args


class _OneLine(logging.Formatter):
    """A record as one line: its message, then its exception's type and text (no
    traceback: a watchdog retrying through an outage would print one per renewal)."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            text += f" ({type(exc).__name__}: {exc})"
        return text


@contextmanager
def _log_in_lines() -> Iterator[None]:
    """While in the block, show the ``tenure`` logger's warnings and errors on
    stderr, one line each, unless something configured that logger already."""
    log = logging.getLogger("tenure")
    if any(not isinstance(h, logging.NullHandler) for h in log.handlers):
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    handler.setLevel(logging.WARNING)
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tenure`` command line with ``argv`` (default: ``sys.argv[1:]``).

    Returns:
        The exit status: the command's own, 2 for a bad command line or an
        unreachable server (refused, or not answering in time) or one that
        refused a command (a replica, a full server), 130 after Ctrl-C.
    """
    parser = build_parser()
    args = parse_args(parser, sys.argv[1:] if argv is None else argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        check: Check | None = getattr(args, "check", None)
        refused = None if check is None else check(args)  # (before any server is opened)
        if refused is not None:
            return refused
        with _log_in_lines(), open_server(args.url, getattr(args, "embedded", "private")) as server:
            return handler(args, server)
    except KeyboardInterrupt:
        print("tenure: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ServerUnavailable, redis.exceptions.ConnectionError) as exc:
        print(f"tenure: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except redis.exceptions.TimeoutError as exc:  # a stopped or cut-off server
        print(f"tenure: the server did not answer in time ({exc})", file=sys.stderr)
        return EXIT_USAGE
    except redis.exceptions.RedisError as exc:  # a replica (READONLY), a full server (OOM)
        print(f"tenure: the server refused: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except TenureError as exc:  # a bad name, an unsupported server, a key of another type
        print(f"tenure: {exc}", file=sys.stderr)
        return EXIT_USAGE
