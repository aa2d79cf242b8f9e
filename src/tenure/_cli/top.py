"""``tenure top``: the primitives under a prefix, refreshed in the terminal.

The table is :mod:`.screen`'s (rich, imported only then); ``--json-lines``
prints one JSON object per refresh instead (:mod:`tenure._views.live`
documents it), and needs no rich.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .._views.live import Frame, frame_json
from .common import EXIT_USAGE, Server, _positive_int
from .live import Watcher, add_live_options, ticks


def add_top(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Add ``tenure top``."""
    top = commands.add_parser(
        "top",
        parents=parents,
        help="watch the locks live: holders, how long held, ttl, fence, waiters",
        description=(
            "Show the named primitives under the prefix as 'ls' finds them, refreshed "
            "every --interval seconds: name, kind, holder, how long it has held, ttl "
            "left, last fence, waiters and a semaphore's permits held. Keys: q quits "
            "(so does Ctrl-C), s cycles the sort, a shows or hides the free primitives. "
            "On a Redis Cluster every master is scanned. With --json-lines, prints one "
            "JSON object per refresh instead, until Ctrl-C or --iterations."
        ),
    )
    add_live_options(top)
    top.add_argument(
        "--json-lines",
        action="store_true",
        help="print one JSON object per refresh, one a line, instead of the table",
    )
    top.add_argument(
        "-n",
        "--iterations",
        type=_positive_int,
        metavar="N",
        help="stop after N refreshes (default: run until q or Ctrl-C)",
    )
    top.set_defaults(handler=_run_top, embedded="existing")


def _run_top(args: argparse.Namespace, server: Server) -> int:
    watcher = Watcher(server.url, prefix=args.prefix, pattern=args.pattern, count=args.scan_count)
    try:
        frame = watcher.first()
        if args.json_lines:
            return _json_lines(watcher, frame, args)
        try:
            from .screen import show
        except ModuleNotFoundError as exc:
            if exc.name != "rich":
                raise
            print(
                "tenure top needs rich for its table: pip install 'tenure[embedded]' "
                "(or use --json-lines)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        return show(watcher, frame, args)
    except KeyboardInterrupt:
        return 0
    finally:
        watcher.close()


def _json_lines(watcher: Watcher, frame: Frame, args: argparse.Namespace) -> int:
    due_times = ticks(args.interval, args.iterations)
    try:
        while True:
            out = frame_json(
                frame, prefix=args.prefix, pattern=args.pattern, by=args.sort, every=args.all
            )
            print(json.dumps(out), flush=True)
            due = next(due_times, None)
            if due is None:
                return 0
            time.sleep(max(0.0, due - time.monotonic()))
            frame = watcher.read()
    except BrokenPipeError:  # the reader went away (| head): done
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
