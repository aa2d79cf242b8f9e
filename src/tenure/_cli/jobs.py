"""The commands that run something: ``demo``, ``run`` (a distributed ``flock``) and ``server``."""

from __future__ import annotations

import argparse
import sys

import redis
import redis.cluster
import redis.exceptions

from .. import _run
from .._keys import check_name, check_prefix
from .._shared_server import SharedServer
from .common import (
    EXIT_CONFLICT,
    EXIT_LOST,
    EXIT_USAGE,
    Server,
    _add_prefix,
    _exit_status,
    _positive_int,
    _seconds,
)


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
        from .. import _demo
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


def add_run(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
    url_help: str = "",
) -> None:
    """Add ``tenure run`` (its ``--url`` may be given several times: a Redlock)."""
    run = commands.add_parser(
        "run",
        parents=parents,
        usage="tenure run (NAME | --leader NAME) [options] -- CMD [ARG ...]",
        help="run a command while holding a lock (a distributed flock), or while leading",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Take the lock NAME (a tenure Lock), run CMD while holding it, release it.\n"
            "The lease lasts --ttl seconds and is renewed every ttl/3 while CMD runs, so\n"
            "the lock outlives a crashed 'tenure run' by at most that long (on Linux,\n"
            "CMD gets SIGKILL when 'tenure run' dies, so it never outlives the lease\n"
            "into the next holder's turn; its own children are not signalled). CMD runs\n"
            "without a shell, with stdin, stdout and stderr inherited and with\n"
            "TENURE_FENCE (the lease's fencing token) and TENURE_LOCK (NAME) added to\n"
            "its environment. SIGINT, SIGTERM and SIGHUP are forwarded to CMD.\n"
            "\n"
            "If the lease is lost while CMD runs (the lock was broken, or Redis was\n"
            "unreachable until the lease ran out), CMD gets SIGTERM, then SIGKILL after\n"
            "--grace seconds.\n"
            "\n"
            "Each call waits for the server at most a third of --ttl and an eighth of\n"
            "--wait (0.5 to 5 s; a socket_timeout in the URL wins): one that does not\n"
            "answer while the lock is taken ends the run with exit status 2.\n"
            "\n"
            "Several --url (an odd number, at least 3: independent masters) hold a\n"
            "tenure Redlock instead: the lock is held while a majority of them hold it.\n"
            "\n"
            "With --leader NAME instead of NAME, every replica runs the same line: each\n"
            "stands as a candidate of the tenure Election NAME, in the order they came;\n"
            "the elected one runs CMD with TENURE_TERM (its term, larger than every\n"
            "earlier leader's; also in TENURE_FENCE) and TENURE_ELECTION (NAME) in its\n"
            "environment, and resigns when CMD ends. The next candidate is elected at\n"
            "once, or within --ttl when the leader's 'tenure run' died or stalled: one\n"
            "CMD runs at a time. 'tenure leader NAME' shows who leads. Several --url\n"
            "make it a tenure RedlockElection over those masters (some waiting\n"
            "candidate is elected, not the first).\n"
            "\n"
            "Without --url or REDIS_URL, the lock lives in this user's shared embedded\n"
            "Valkey (${XDG_RUNTIME_DIR:-/tmp}/tenure-<uid>/valkey.sock), started on\n"
            "demand and left running: stop it with 'tenure server stop'."
        ),
        epilog=(
            "exit status:\n"
            "  CMD's own    CMD ran and the lease held to its end (128+N if signal N\n"
            "               killed CMD)\n"
            f"  {EXIT_CONFLICT:<3}          the lock was not taken (--no-wait, or --wait\n"
            "               ran out); CMD did not run (see --conflict-exit-code)\n"
            f"  {EXIT_LOST:<3}          the lease was lost while CMD ran\n"
            "  126, 127     CMD could not be started / was not found\n"
            "  128+N        signal N interrupted the wait for the lock\n"
            f"  {EXIT_USAGE:<3}          a bad command line, an unreachable server or one\n"
            "               that refused the lock (a replica, a full server)"
        ),
    )
    run.add_argument(
        "--url",
        dest="urls",
        action="append",
        default=argparse.SUPPRESS,
        metavar="URL",
        help=url_help + "; give it 3, 5, ... times to hold a Redlock over those masters",
    )
    run.add_argument("name", nargs="?", metavar="NAME", help="the lock's name")
    run.add_argument(
        "--leader",
        metavar="NAME",
        help="instead of a lock, stand in the election NAME: CMD runs while leading",
    )
    run.add_argument(
        "cmd", nargs="*", metavar="-- CMD [ARG ...]", help="the command to run, after --"
    )
    run.add_argument(
        "--ttl",
        type=_seconds("ttl", allow_zero=False, lease=True),
        default=30.0,
        metavar="S",
        help="the lease length in seconds (default 30)",
    )
    how_long = run.add_mutually_exclusive_group()
    how_long.add_argument(
        "--wait",
        type=_seconds("wait", allow_zero=True),
        metavar="S",
        help="wait at most S seconds for the lock (default: as long as it takes)",
    )
    how_long.add_argument(
        "--no-wait", action="store_true", help="make one attempt; don't wait if it is held"
    )
    run.add_argument(
        "--grace",
        type=_seconds("grace", allow_zero=True),
        default=10.0,
        metavar="S",
        help="seconds between SIGTERM and SIGKILL when the lease is lost (default 10)",
    )
    run.add_argument(
        "--conflict-exit-code",
        type=_exit_status,
        default=EXIT_CONFLICT,
        metavar="N",
        help=f"the exit status when the lock was not taken (default {EXIT_CONFLICT})",
    )
    _add_prefix(run)
    run.set_defaults(handler=_run_run, check=_check_run, embedded="shared")


def _check_run(args: argparse.Namespace) -> int | None:
    """Refuse a ``tenure run`` line that can't run before a server is opened for
    it (the shared one would be started, and left running): the exit status
    after saying why, or ``None``.

    Raises:
        InvalidArgument: a bad NAME or --prefix.
    """
    if (args.name is None) == (args.leader is None):
        print("tenure run: give a lock NAME or --leader NAME (exactly one)", file=sys.stderr)
        return EXIT_USAGE
    check_name(args.leader if args.leader is not None else args.name, "name")
    check_prefix(args.prefix)
    return None


def _run_run(args: argparse.Namespace, server: Server) -> int:
    # Not closed here: closing the pool under the wake hub's lingering reader thread
    # (after a wait for the lock) can hang the interpreter's exit; the process ends
    # right after this anyway.
    urls: list[str] = getattr(args, "urls", None) or [server.url]
    wait = 0.0 if args.no_wait else args.wait
    timeout = _run.socket_timeout(args.ttl, wait)
    clients = [
        redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        for url in urls
    ]
    return _run.run(
        clients[0] if len(clients) == 1 else clients,
        args.leader if args.leader is not None else args.name,
        args.after_dashes,
        ttl=args.ttl,
        blocking=not args.no_wait,
        wait=args.wait,
        prefix=args.prefix,
        grace=args.grace,
        conflict_status=args.conflict_exit_code,
        lost_status=EXIT_LOST,
        leader=args.leader is not None,
    )


def add_server(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Add ``tenure server start``, ``status`` and ``stop``."""
    server = commands.add_parser(
        "server",
        parents=parents,
        help="start, show or stop this user's shared embedded server",
        description=(
            "Without --url or REDIS_URL, the commands use one embedded Valkey per "
            "user, on the unix socket ${XDG_RUNTIME_DIR:-/tmp}/tenure-<uid>/"
            "valkey.sock: 'tenure run' starts it on demand and leaves it running; "
            "inspect, ls, release and doctor look at it if it runs. These commands "
            "start it, show it and stop it; they ignore --url and REDIS_URL."
        ),
    )
    actions = server.add_subparsers(title="actions", dest="action", metavar="ACTION")
    start = actions.add_parser(
        "start",
        help="start it (if none runs) and print its URL",
        description=(
            "Start the shared server unless it runs, and print its URL on standard "
            "output (export REDIS_URL=$(tenure server start) points programs at it). "
            "It keeps nothing on disk and runs until 'tenure server stop'."
        ),
    )
    start.set_defaults(handler=_run_server_start, embedded="none")
    status = actions.add_parser(
        "status",
        help="show whether it runs (exit status 0) or not (1)",
        description="Show whether the shared server runs: its socket, pid, version, keys.",
    )
    status.set_defaults(handler=_run_server_status, embedded="none")
    stop = actions.add_parser(
        "stop",
        help="stop it; every lock it holds is forgotten",
        description=(
            "Stop the shared server (SHUTDOWN NOSAVE). It keeps nothing on disk: every "
            "lock in it is forgotten, and a 'tenure run' still running loses its lease "
            "and stops its command. Exits with status 0, also when none was running."
        ),
    )
    stop.set_defaults(handler=_run_server_stop, embedded="none")

    def usage(args: argparse.Namespace, _: Server) -> int:
        server.print_help(sys.stderr)
        return EXIT_USAGE

    server.set_defaults(handler=usage, embedded="none")


def _run_server_start(args: argparse.Namespace, server: Server) -> int:
    shared = SharedServer.default()
    started = shared.ensure_running()
    print(
        "tenure: started the shared server"
        if started
        else "tenure: the shared server runs already",
        file=sys.stderr,
    )
    print(shared.url)
    return 0


def _run_server_status(args: argparse.Namespace, server: Server) -> int:
    shared = SharedServer.default()
    info = shared.info()
    if info is None:
        print(f"no shared server at {shared.url}")
        return 1
    version = info.get("valkey_version") or info.get("redis_version")
    print(f"shared server at {shared.url}")
    print(f"  pid      {info['process_id']}")
    print(f"  version  {info.get('server_name') or 'redis'} {version}")
    print(f"  up       {info['uptime_in_seconds']}s")
    print(f"  keys     {info['keys']}")
    return 0


def _run_server_stop(args: argparse.Namespace, server: Server) -> int:
    shared = SharedServer.default()
    pid = shared.stop()
    if pid is None:
        print(f"no shared server at {shared.url}")
    else:
        print(f"stopped the shared server at {shared.url} (pid {pid})")
    return 0
