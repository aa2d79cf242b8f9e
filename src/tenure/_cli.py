"""The ``tenure`` command line (also ``python -m tenure``).

Every command talks to the server given by ``--url`` or ``REDIS_URL`` (the
operator commands: to the whole cluster when that server is a cluster node,
see :func:`tenure._ops.connect`). When
neither is given, the command starts an embedded Valkey on a unix socket in a
private directory (``pip install 'tenure[embedded]'``) and stops it when the
command ends, also on Ctrl-C or an error. ``tenure run`` is the exception: two
of them must exclude each other, so without a URL they share one embedded
server per user, started on demand and left running
(:mod:`tenure._shared_server`; ``tenure server stop`` stops it).

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
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import redis
import redis.cluster
import redis.exceptions

from . import __version__, _doctor, _ops, _run
from ._drivers._sync import Client
from ._errors import InvalidArgument, TenureError
from ._keys import DEFAULT_PREFIX
from ._plans.kinds import KINDS, by_name
from ._server import ServerProcess, ServerUnavailable
from ._shared_server import SharedServer
from ._units import check_seconds, check_ttl

#: Exit status for a bad command line or an unusable server (argparse uses 2 too).
EXIT_USAGE = 2
#: Exit status after Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130
#: ``tenure run``: the lock was not taken (``--no-wait``, ``--wait`` ran out); the
#: command did not run. EX_TEMPFAIL of sysexits.h; ``--conflict-exit-code`` changes it.
EXIT_CONFLICT = 75
#: ``tenure run``: the lease was lost while the command ran (the command was stopped,
#: or it ended and the release found the lock gone).
EXIT_LOST = 76

#: Which server a command gets when no URL is given: ``"private"``, an embedded
#: server of its own, stopped when it ends; ``"shared"``, the user's shared
#: embedded server (started if none runs); ``"none"``, no server at all (the
#: handler gets a :class:`Server` with an empty URL).
Embedded = Literal["private", "shared", "none"]


@dataclass(frozen=True)
class Server:
    """The server a command works on."""

    url: str
    embedded: bool


Handler = Callable[[argparse.Namespace, Server], int]


def _seconds(what: str, *, allow_zero: bool, lease: bool = False) -> Callable[[str], float]:
    """A parser of a duration option ``what``, in the API's range (``_units``:
    Limits; a ``lease`` is at least its shortest), so that a bad one is a usage
    error before any server is reached or started."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        try:
            if lease:
                return check_ttl(value, what)
            return check_seconds(value, what, allow_zero=allow_zero)
        except InvalidArgument as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _exit_status(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 0 <= value <= 255:
        raise argparse.ArgumentTypeError(f"an exit status is 0 to 255, not {value}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


class _CountedUrl(argparse.Action):
    """``--url``: the last one given, and every one given (``url_given``), so
    that several are an error (or, before ``run``, a Redlock) rather than all but
    the last silently dropped."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        seen: list[str] = list(getattr(namespace, "url_given", None) or [])
        namespace.url_given = [*seen, str(values)]
        setattr(namespace, self.dest, values)


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
        help=url_help + "; give it several times only to 'tenure run' (a Redlock)",
    )
    # Accept --url after the command name too; SUPPRESS keeps the global value otherwise.
    url_after = argparse.ArgumentParser(add_help=False)
    url_after.add_argument("--url", default=argparse.SUPPRESS, action=_CountedUrl, help=url_help)

    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    add_demo(commands, parents=[url_after])
    add_inspect(commands, parents=[url_after])
    add_ls(commands, parents=[url_after])
    add_release(commands, parents=[url_after])
    add_doctor(commands, parents=[url_after])
    add_run(commands, parents=[], url_help=url_help)
    add_server(commands, parents=[])
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


def _client(server: Server) -> closing[redis.Redis | redis.cluster.RedisCluster]:
    """A client for the server; a cluster client when it is in cluster mode."""
    return closing(_ops.connect(server.url))


def _add_prefix(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prefix",
        default=DEFAULT_PREFIX,
        help=f"the key prefix the locks were made with (default {DEFAULT_PREFIX!r})",
    )


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _one_lock(args: argparse.Namespace, command: str) -> str | None:
    """An error message unless exactly one of NAME and --key was given."""
    if (args.name is None) == (args.key is None):
        return f"tenure {command}: give a lock NAME or --key KEY (exactly one)"
    return None


def add_inspect(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Add ``tenure inspect``."""
    inspect = commands.add_parser(
        "inspect",
        parents=parents,
        help="show who holds a lock, semaphore or latch, its ttl, fence and waiters",
        description=(
            "Show every primitive named NAME (a Lock, RLock, FairLock, ReadWriteLock, "
            "Semaphore and CountDownLatch may share a name): the holders (an RLock's "
            "owner and hold count, a ReadWriteLock's holds with their modes, a "
            "Semaphore's leases with their permits), the ttl left, the last fence, "
            "and the queued waiters; a latch's count. Exits with status 1 when nothing "
            "of that name exists."
        ),
    )
    inspect.add_argument("name", nargs="?", metavar="NAME", help="the primitive's name")
    inspect.add_argument("--key", metavar="KEY", help="an exact-key Lock instead of a name")
    _add_prefix(inspect)
    _add_json(inspect)
    inspect.set_defaults(handler=_run_inspect)


def _run_inspect(args: argparse.Namespace, server: Server) -> int:
    problem = _one_lock(args, "inspect")
    if problem:
        print(problem, file=sys.stderr)
        return EXIT_USAGE
    found = _ops.targets(args.name, key=args.key, prefix=args.prefix)
    with _client(server) as client:
        views, skipped = _ops.inspect(client, found)
    for message in skipped:
        print(f"tenure inspect: skipped {message}", file=sys.stderr)
    if args.json:
        out = {
            "name": args.name,
            "key": args.key,
            "prefix": args.prefix,
            "locks": [v.to_json() for v in views],
        }
        print(_ops.dumps(out))
    elif views:
        print("\n\n".join("\n".join(_ops.describe(v)) for v in views))
    if not views:
        what = f"key {args.key!r}" if args.key is not None else f"{args.name!r}"
        where = "" if args.key is not None else f" under prefix {args.prefix!r}"
        print(f"tenure inspect: no lock {what}{where}", file=sys.stderr)
        return EXIT_USAGE if skipped else 1
    return 0


def add_ls(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Add ``tenure ls``."""
    ls = commands.add_parser(
        "ls",
        parents=parents,
        help="list the locks, semaphores and latches under a prefix",
        description=(
            "List the named primitives (Lock, RLock, FairLock, ReadWriteLock, "
            "Semaphore, CountDownLatch) under the prefix, found with SCAN, one row "
            "each: kind, name, holder (the first of several, and how many more; "
            "'free'; a latch's count or 'open'), ttl, last fence, waiters. A lock "
            "whose only key left is its fence is free. Exact-key locks have no prefix "
            "and are not listed: use 'tenure inspect --key'."
        ),
    )
    ls.add_argument(
        "pattern", nargs="?", default="*", metavar="PATTERN", help="a glob on the names"
    )
    _add_prefix(ls)
    _add_json(ls)
    ls.add_argument(
        "--scan-count",
        type=_positive_int,
        default=_ops.SCAN_COUNT,
        metavar="N",
        help=f"keys asked for per SCAN call (default {_ops.SCAN_COUNT})",
    )
    ls.set_defaults(handler=_run_ls)


def _run_ls(args: argparse.Namespace, server: Server) -> int:
    with _client(server) as client:
        views, skipped = _ops.list_locks(
            client, prefix=args.prefix, pattern=args.pattern, count=args.scan_count
        )
    for message in skipped:
        print(f"tenure ls: skipped {message}", file=sys.stderr)
    if args.json:
        out = {
            "prefix": args.prefix,
            "pattern": args.pattern,
            "locks": [v.to_json(waiting=False) for v in views],
        }
        print(_ops.dumps(out))
    elif views:
        print("\n".join(_ops.ls_table(views)))
    else:
        print(f"no locks under prefix {args.prefix!r} match {args.pattern!r}")
    return 0


#: ``release``'s flag for each kind it can release, from the registry (the
#: default kind, a Lock, needs none).
RELEASE_FLAGS: dict[str, str] = {
    k.name: k.release_flag for k in KINDS if k.releasable and k.release_flag is not None
}

#: The kind ``release`` breaks when no flag picks one.
DEFAULT_RELEASE = next(k.name for k in KINDS if k.releasable and k.release_flag is None)


def add_release(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Add ``tenure release``."""
    release = commands.add_parser(
        "release",
        parents=parents,
        help="break a stuck lock, or a semaphore's leases (needs --force)",
        description=(
            "Remove a lock's holder, whoever it is, and hand the lock to the first "
            "waiter as a normal release does: a Lock by default, or the RLock, "
            "FairLock (to the head of its queue), ReadWriteLock (every read and write "
            "hold) or Semaphore (every lease, or the one given by --token) named NAME. "
            "The holders are read first and the token-checked release script is run "
            "with each one's token, so a race with a holder's own release removes "
            "nothing else. The holder may still be running: use fences. A "
            "CountDownLatch has no holder and can't be released. Exits with status 1 "
            "if nothing was held, 2 without --force."
        ),
    )
    release.add_argument("name", nargs="?", metavar="NAME", help="the lock's name")
    release.add_argument("--key", metavar="KEY", help="an exact-key Lock instead of a name")
    kinds = release.add_mutually_exclusive_group()
    for k in KINDS:
        if k.release_flag is None:
            continue
        what = f"the {k.name} named NAME"
        if not k.releasable:
            what = f"refused: a {k.name} is not a lock ({k.instead})"
        kinds.add_argument(
            k.release_flag, dest="kind", action="store_const", const=k.name, help=what
        )
    release.add_argument(
        "--token", metavar="TOKEN", help=f"with {_lease_flags()}: only the lease with this token"
    )
    release.add_argument("--force", action="store_true", help="really remove the holder (required)")
    _add_prefix(release)
    release.set_defaults(handler=_run_release, kind=DEFAULT_RELEASE)


def _lease_flags() -> str:
    """The flags of the kinds whose leases ``--token`` picks (``--semaphore``)."""
    return " or ".join(str(k.release_flag) for k in KINDS if k.picks_lease)


def _release_problem(args: argparse.Namespace) -> str | None:
    """An error message for a ``release`` command line that can't be run, or ``None``."""
    kind = by_name(args.kind)
    if not kind.releasable:
        return (
            f"tenure release: a {kind.name} is not a lock: it has no holder to release"
            f" ({kind.instead})"
        )
    problem = _one_lock(args, "release")
    if not problem and not kind.exact_key and args.key is not None:
        problem = (
            f"tenure release: {kind.release_flag} and --key don't mix "
            "(only a Lock has an exact key)"
        )
    if not problem and args.token is not None and not kind.picks_lease:
        leases = " or ".join(k.name for k in KINDS if k.picks_lease)
        problem = f"tenure release: --token picks a {leases} lease: add {_lease_flags()}"
    if not problem and not args.force:
        problem = (
            "tenure release: refusing to remove a lock's holder without --force "
            "(it may still be working); add --force to break the lock"
        )
    return problem


def _release_hint(client: Client, args: argparse.Namespace) -> str:
    """Why nothing was held, when another kind of the same name is: `` (the
    RLock 'x' is held: add --rlock)``; or ``""``."""
    if args.key is not None:
        return ""
    kind: str = args.kind
    others = [_ops.target(k.name, args.name, prefix=args.prefix) for k in KINDS if k.name != kind]
    views, _ = _ops.inspect(client, others)
    for view in views:
        if not view.spec.releasable:
            if view.count:
                return f" (the {view.kind} {args.name!r} is not a lock: it can't be released)"
            continue
        if not view.held:
            continue
        flag = RELEASE_FLAGS.get(kind, "")
        other = RELEASE_FLAGS.get(view.kind, "")
        if not other:
            how = f"leave out {flag}"
        elif not flag:
            how = f"add {other}"
        else:
            how = f"use {other} instead of {flag}"
        return f" (the {view.kind} {args.name!r} is held: {how})"
    return ""


def _run_release(args: argparse.Namespace, server: Server) -> int:
    problem = _release_problem(args)
    if problem:
        print(problem, file=sys.stderr)
        return EXIT_USAGE
    kind: str = args.kind
    target = _ops.target(kind, args.name, key=args.key, prefix=args.prefix)
    with _client(server) as client:
        done = _ops.force_release(client, target, token=args.token)
        hint = _release_hint(client, args) if done is None and args.token is None else ""
    label = f"{kind} {target.keys.name!r}"
    if done is None:
        if args.token is not None:
            print(f"tenure release: {label} has no lease {args.token!r}", file=sys.stderr)
        else:
            print(f"tenure release: {label} is not held{hint}", file=sys.stderr)
        return 1
    print("\n".join(_ops.describe_release(done)), file=sys.stdout if done.released else sys.stderr)
    return 0 if done.released else 1


def add_doctor(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Add ``tenure doctor``."""
    doctor = commands.add_parser(
        "doctor",
        parents=parents,
        help="check the server's settings that break locks",
        description=(
            "Check the server's settings that can lose a lock or grant it twice "
            "(persistence, eviction, replication, cluster state, ACL permissions), "
            "each with what to do. Exits with status 1 when a hazard is found, 0 "
            "otherwise, 2 when the server can't be reached."
        ),
    )
    _add_prefix(doctor)
    _add_json(doctor)
    which = doctor.add_mutually_exclusive_group()
    which.add_argument(
        "--name",
        help="also check that the user has every key, channel and command permission the "
        "primitive NAME needs (of --kind), and print the ACL rule a least-privilege user needs",
    )
    which.add_argument(
        "--key",
        help="the same for Lock(key=KEY) (or, with --kind fenced, FencedKey(KEY))",
    )
    doctor.add_argument(
        "--kind",
        choices=sorted(_doctor.KIND_NAMES),
        default="lock",
        help="the kind of --name / --key (default: lock)",
    )
    doctor.add_argument(
        "--acl-user",
        metavar="USER",
        help="check USER's permissions (ACL DRYRUN) instead of the connected user's",
    )
    doctor.set_defaults(handler=_run_doctor)


def _run_doctor(args: argparse.Namespace, server: Server) -> int:
    needs = None
    if args.name is not None or args.key is not None:
        kind = _doctor.KIND_NAMES[args.kind]
        needs = _doctor.acl_needs(kind, name=args.name, key=args.key, prefix=args.prefix)
    with _client(server) as client:
        reports = [
            (
                address,
                _doctor.diagnose(
                    _doctor.gather_facts(
                        node, prefix=args.prefix, needs=needs, acl_user=args.acl_user
                    )
                ),
            )
            for address, node in _ops.masters(client)
        ]
    hazards = sum(report.hazards for _, report in reports)
    if len(reports) == 1 and not reports[0][0]:  # one server, not a cluster
        report = reports[0][1]
        if args.json:
            print(_ops.dumps(report.to_json()))
        else:
            _doctor.print_report(report)
        return 1 if hazards else 0
    if args.json:  # a cluster: one report per master
        nodes = [{"node": address, **report.to_json()} for address, report in reports]
        print(_ops.dumps({"cluster": True, "hazards": hazards, "nodes": nodes}))
    else:
        for i, (address, report) in enumerate(reports):
            if i:
                print()
            print(f"master {address}:")
            _doctor.print_report(report)
        print(f"\nchecked every master of the cluster ({len(reports)}): {hazards} hazard(s)")
    return 1 if hazards else 0


def add_run(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
    url_help: str = "",
) -> None:
    """Add ``tenure run`` (its ``--url`` may be given several times: a Redlock)."""
    run = commands.add_parser(
        "run",
        parents=parents,
        usage="tenure run NAME [options] -- CMD [ARG ...]",
        help="run a command while holding a lock (a distributed flock)",
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
            "Several --url (an odd number, at least 3: independent masters) hold a\n"
            "tenure Redlock instead: the lock is held while a majority of them hold it.\n"
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
            f"  {EXIT_USAGE:<3}          a bad command line or an unreachable server"
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
    run.add_argument("name", metavar="NAME", help="the lock's name")
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
    run.set_defaults(handler=_run_run, embedded="shared")


def _run_run(args: argparse.Namespace, server: Server) -> int:
    # Not closed here: closing the pool under the wake hub's lingering reader thread
    # (after a wait for the lock) can hang the interpreter's exit; the process ends
    # right after this anyway.
    urls: list[str] = getattr(args, "urls", None) or [server.url]
    clients = [redis.Redis.from_url(url) for url in urls]
    return _run.run(
        clients[0] if len(clients) == 1 else clients,
        args.name,
        args.after_dashes,
        ttl=args.ttl,
        blocking=not args.no_wait,
        wait=args.wait,
        prefix=args.prefix,
        grace=args.grace,
        conflict_status=args.conflict_exit_code,
        lost_status=EXIT_LOST,
    )


def add_server(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Add ``tenure server status`` and ``tenure server stop``."""
    server = commands.add_parser(
        "server",
        parents=parents,
        help="show or stop this user's shared embedded server (used by 'tenure run')",
        description=(
            "Without --url or REDIS_URL, 'tenure run' keeps its locks in one embedded "
            "Valkey per user, on the unix socket ${XDG_RUNTIME_DIR:-/tmp}/tenure-<uid>/"
            "valkey.sock, started on demand and left running. These commands show it "
            "and stop it; they ignore --url and REDIS_URL."
        ),
    )
    actions = server.add_subparsers(title="actions", dest="action", metavar="ACTION")
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
        if args.command != "run":
            parser.error("--url may be given only once (several only to tenure run: a Redlock)")
        # before the command, they are the masters of a Redlock all the same
        args.urls = [*given, *(getattr(args, "urls", None) or [])]
    urls = getattr(args, "urls", None)
    if urls:  # tenure run's own --url: the first also serves as the command's server
        args.url = urls[0]
    if args.command == "run" and (args.cmd or not getattr(args, "after_dashes", None)):
        parser.exit(
            EXIT_USAGE,
            "tenure run: give the command after --: tenure run NAME [options] -- CMD [ARG ...]\n",
        )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tenure`` command line with ``argv`` (default: ``sys.argv[1:]``).

    Returns:
        The exit status: the command's own, 2 for a bad command line or an
        unreachable server, 130 after Ctrl-C.
    """
    parser = build_parser()
    args = parse_args(parser, sys.argv[1:] if argv is None else argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        with open_server(args.url, getattr(args, "embedded", "private")) as server:
            return handler(args, server)
    except KeyboardInterrupt:
        print("tenure: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ServerUnavailable, redis.exceptions.ConnectionError) as exc:
        print(f"tenure: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except TenureError as exc:  # a bad name, an unsupported server, a key of another type
        print(f"tenure: {exc}", file=sys.stderr)
        return EXIT_USAGE
