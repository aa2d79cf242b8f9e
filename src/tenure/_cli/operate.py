"""The operator commands: ``inspect``, ``ls``, ``release --force`` and ``doctor``."""

from __future__ import annotations

import argparse
import sys

import redis

from .. import _doctor, _ops, _views
from .._api._sync import Election, RedlockElection
from .._drivers._sync import Client
from .._plans.kinds import KINDS, by_name
from .._views import view_of
from .common import EXIT_USAGE, Server, _add_json, _add_prefix, _client, _one_lock, _positive_int


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
            "Semaphore, CountDownLatch and Election may share a name): the holders (an RLock's "
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
    inspect.set_defaults(handler=_run_inspect, embedded="existing")


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
            "locks": [_views.to_json(v) for v in views],
        }
        print(_views.dumps(out))
    elif views:
        print("\n\n".join("\n".join(_views.describe(v)) for v in views))
    if not views:
        what = f"key {args.key!r}" if args.key is not None else f"{args.name!r}"
        where = "" if args.key is not None else f" under prefix {args.prefix!r}"
        print(f"tenure inspect: no lock {what}{where}", file=sys.stderr)
        return EXIT_USAGE if skipped else 1
    return 0


def add_leader(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Add ``tenure leader``."""
    leader = commands.add_parser(
        "leader",
        parents=parents,
        help="show who leads an election: its label, term and value",
        description=(
            "Show the leader of the tenure Election NAME (a 'tenure run --leader NAME' "
            "replica, or a program's Election): its label, its term (larger than "
            "every earlier leader's), what it proclaimed, since when, and its lease "
            "left. Several --url (3, 5, ... independent masters) read a RedlockElection "
            "over them: what a majority of the masters says. Exits with status 1 when "
            "nobody leads."
        ),
    )
    leader.add_argument("name", metavar="NAME", help="the election's name")
    _add_prefix(leader)
    _add_json(leader)
    leader.set_defaults(handler=_run_leader, embedded="existing")


def _run_leader(args: argparse.Namespace, server: Server) -> int:
    urls: list[str] = getattr(args, "urls", None) or []
    if len(urls) > 1:
        masters = [redis.Redis.from_url(url) for url in urls]
        try:
            lead = RedlockElection(masters, args.name, prefix=args.prefix).leader()
        finally:
            for master in masters:
                master.close()
    else:
        with _client(server) as client:
            lead = Election(client, args.name, prefix=args.prefix).leader()
    if args.json:
        print(_views.dumps({"name": args.name, "prefix": args.prefix, **_views.leader_json(lead)}))
    elif lead is None:
        print(f"no leader of {args.name!r}")
    else:
        print("\n".join(_views.leader_lines(args.name, lead)))
    return 0 if lead is not None else 1


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
    ls.set_defaults(handler=_run_ls, embedded="existing")


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
            "locks": [_views.to_json(v, waiting=False) for v in views],
        }
        print(_views.dumps(out))
    elif views:
        print("\n".join(_views.ls_table(views)))
    else:
        print(f"no locks under prefix {args.prefix!r} match {args.pattern!r}")
    return 0


#: ``release``'s flag for each kind it can release, from the registry (the
#: default kind, a Lock, needs none).
RELEASE_FLAGS: dict[str, str] = {
    k.name: flag for k in KINDS if k.releasable and (flag := view_of(k.name).release_flag)
}

#: The kind ``release`` breaks when no flag picks one.
DEFAULT_RELEASE = next(
    k.name for k in KINDS if k.releasable and view_of(k.name).release_flag is None
)


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
            "hold) or Semaphore (every lease, or the one given by --token) named NAME; "
            "an Election's leader is deposed (its term logged as lost) and the next "
            "candidate elected. "
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
        flag = view_of(k.name).release_flag
        if flag is None:
            continue
        what = f"the {k.name} named NAME"
        if not k.releasable:
            what = f"refused: a {k.name} is not a lock ({view_of(k.name).instead})"
        kinds.add_argument(flag, dest="kind", action="store_const", const=k.name, help=what)
    release.add_argument(
        "--token", metavar="TOKEN", help=f"with {_lease_flags()}: only the lease with this token"
    )
    release.add_argument("--force", action="store_true", help="really remove the holder (required)")
    _add_prefix(release)
    _add_json(release)
    release.set_defaults(handler=_run_release, kind=DEFAULT_RELEASE, embedded="existing")


def _lease_flags() -> str:
    """The flags of the kinds whose leases ``--token`` picks (``--semaphore``)."""
    return " or ".join(str(view_of(k.name).release_flag) for k in KINDS if k.picks_lease)


def _release_problem(args: argparse.Namespace) -> str | None:
    """An error message for a ``release`` command line that can't be run, or ``None``."""
    kind = by_name(args.kind)
    if not kind.releasable:
        return (
            f"tenure release: a {kind.name} is not a lock: it has no holder to release"
            f" ({view_of(kind.name).instead})"
        )
    problem = _one_lock(args, "release")
    if not problem and not kind.exact_key and args.key is not None:
        problem = (
            f"tenure release: {view_of(kind.name).release_flag} and --key don't mix "
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
        if not by_name(view.kind).releasable:
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
    out = sys.stdout if done.released else sys.stderr
    if args.json:
        print(_views.dumps(_views.release_json(done)), file=out)
    else:
        print("\n".join(_views.describe_release(done)), file=out)
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
    doctor.set_defaults(handler=_run_doctor, embedded="existing")


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
            print(_views.dumps(report.to_json()))
        else:
            _doctor.print_report(report)
        return 1 if hazards else 0
    if args.json:  # a cluster: one report per master
        nodes = [{"node": address, **report.to_json()} for address, report in reports]
        print(_views.dumps({"cluster": True, "hazards": hazards, "nodes": nodes}))
    else:
        for i, (address, report) in enumerate(reports):
            if i:
                print()
            print(f"master {address}:")
            _doctor.print_report(report)
        print(f"\nchecked every master of the cluster ({len(reports)}): {hazards} hazard(s)")
    return 1 if hazards else 0
