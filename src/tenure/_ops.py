"""What ``tenure inspect``, ``ls`` and ``release --force`` do, apart from argparse.

The commands know no kind by name: every kind (``Lock``, ``RLock``,
``FairLock``, ``ReadWriteLock``, ``Semaphore``, ``CountDownLatch``) is a
:class:`~tenure._plans.kind.Kind` in the registry :mod:`tenure._plans.kinds`,
which says how to read it (with the library's own inspect plan, run here
through the sync driver), describe it and break its holds. A forced release
reads the holders, then runs the normal, token-checked release script with
each holder's token (an RLock's or a read-write hold's once per hold level, a
semaphore's once per lease), so the lock or the permits go to the queue
exactly as the holder's own release would hand them over. ``ls`` finds the
primitives with ``SCAN`` (never ``KEYS``) and groups each one's keys (lock,
fence, waiters, ...) under it.

Against a Redis Cluster (:func:`connect` asks ``INFO cluster`` of the URL's
node), the commands use a ``redis.cluster.RedisCluster`` client: ``ls`` scans
every master (:func:`masters`) and merges what it finds; ``inspect`` and
``release --force`` run their scripts through the cluster client, which
routes each to the master owning the name's slot.

JSON shape of one primitive, in ``inspect --json`` and ``ls --json`` (stable:
new keys may be added, none removed or renamed)::

    {"kind": "Lock" | "RLock" | "FairLock" | "ReadWriteLock" | "Semaphore"
             | "CountDownLatch",
     "name": "orders:42", "key": "tenure:{orders:42}",
     "held": true, "holder": "<token or owner id>" | null, "count": 1,
     "ttl": 9.52 | null, "fence": 1754300000000001 | null, "waiters": 1,
     "waiting": [{"waiter": "<hub id>", "holder": "<token or owner id>",
                  "lease": 10.0 | null, "queued_for": 0.41 | null}]}

``key`` is the primitive's main key (a semaphore's holders, a latch's count).
``holder`` is the lease token (Lock, FairLock, Semaphore) or owner id (RLock,
ReadWriteLock) of the holder; where several hold (ReadWriteLock, Semaphore)
it is the first of ``holders`` (the writer, or else the hold that ends
first). ``count`` is ``holder``'s hold count (1 for a held Lock or FairLock, a
semaphore lease's permits, 0 when free). ``ttl`` is the seconds left, null
when free or held with no expiry; where several hold, the seconds until the
last of them ends. ``fence`` is the last fence minted for the name, null if
none is known. ``waiting`` (``inspect`` only) lists the first
:data:`WAITERS_SHOWN` queued waiters in queue order, each with the lease it
asked for and how long it has been queued (by the server's clock).

Per kind, these keys are added (each kind's ``json_extras``):

- ``FairLock``: each ``waiting`` entry has ``"deadline"``: seconds until the
  waiter is dropped unless it calls again (``queued_for`` is null).
- ``ReadWriteLock``: ``"mode": "read" | "write" | null``, ``"waiting_writers"``,
  ``"holders": [{"owner", "mode", "count", "ttl", "fence"}]`` (latest expiry
  last); each ``waiting`` entry has ``"mode"``, and its ``holder`` is the owner id.
- ``Semaphore``: ``"permits"`` (the stored count, null when none is stored),
  ``"available"`` (null likewise), ``"holders": [{"token", "permits", "ttl"}]``
  (first to expire first); each ``waiting`` entry has ``"permits"``.
- ``CountDownLatch``: ``"count"`` is the latch's count, ``"open"`` whether it
  is zero, ``"opened"`` the number that grows each time it opens (null if none
  is known); ``held`` is false, ``holder``, ``ttl``, ``fence`` and ``waiters``
  are null (a latch's waiters are not queued in Redis).

``inspect --json`` prints ``{"name", "key", "prefix", "locks": [...]}``;
``ls --json`` prints ``{"prefix", "pattern", "locks": [...]}``.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.cluster
import redis.exceptions

from ._drivers._identity import new_op
from ._drivers._sync import Client, run
from ._errors import InvalidArgument, WrongTypeError
from ._keys import LatchKeys, LockKeys, check_prefix
from ._keys import parse_key as parse_any_key
from ._plans.kind import ForcedRelease as ForcedRelease
from ._plans.kind import Hold as Hold
from ._plans.kind import Kind
from ._plans.kind import LockView as LockView
from ._plans.kind import Waiter as Waiter
from ._plans.kind import parse_waiters as parse_waiters
from ._plans.kind import read_waiters as read_waiters
from ._plans.kind import seconds as seconds
from ._plans.kinds import KINDS, by_name
from ._protocol import Plan

#: How many queued waiters ``inspect`` lists (all of them are counted).
WAITERS_SHOWN = 10

#: Keys asked for per ``SCAN`` call by ``ls`` unless told otherwise.
SCAN_COUNT = 1000


# --- the client: one server, or a cluster ---------------------------------------------------


def cluster_enabled(client: redis.Redis) -> bool:
    """Whether the server ``client`` talks to says ``cluster_enabled:1`` in
    ``INFO cluster`` (``False`` if the server refuses the question)."""
    try:
        info = client.info("cluster")
    except redis.exceptions.ResponseError:
        return False
    return bool(int(info.get("cluster_enabled", 0) or 0))


def connect(url: str) -> redis.Redis | redis.cluster.RedisCluster:
    """A client for the server at ``url``: a ``redis.cluster.RedisCluster``
    (which finds the other nodes from this one) if the server is in cluster
    mode, else a ``redis.Redis``. A cluster node whose cluster can't be mapped
    (slots not covered, say) gets a ``redis.Redis`` on that node alone, so that
    the doctor can say what is wrong. The caller closes it.

    Raises:
        redis.exceptions.ConnectionError: the server can't be reached.
    """
    single = redis.Redis.from_url(url)
    try:
        if not cluster_enabled(single):
            return single
        cluster = redis.cluster.RedisCluster.from_url(url)
    except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException):
        return single  # a broken cluster: this node alone (an unreachable one raises below)
    except BaseException:
        single.close()
        raise
    single.close()
    return cluster


def masters(client: Client) -> list[tuple[str, redis.Redis]]:
    """``(address, client)`` of every server a command must visit: each master
    of a cluster client (``host:port``, sorted), or the one server of another
    client (labelled ``""``)."""
    if isinstance(client, redis.cluster.RedisCluster):
        primaries = client.get_primaries()  # type: ignore[no-untyped-call]
        nodes = sorted(primaries, key=lambda n: (n.host, n.port))
        return [(f"{n.host}:{n.port}", client.get_redis_connection(n)) for n in nodes]
    return [("", client)]  # type: ignore[list-item]


# --- one primitive, as the operator sees it -------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """A primitive to read: its kind's name (``"Lock"``, ...) and keys."""

    kind: str
    keys: LockKeys | LatchKeys

    @property
    def spec(self) -> Kind[Any]:
        """Its kind, from the registry."""
        return by_name(self.kind)


def target(kind: str, name: str | None, *, key: str | None = None, prefix: str) -> Target:
    """The ``kind`` primitive (a registered kind's name) named ``name`` under
    ``prefix``, or the exact-key ``Lock`` at ``key``.

    Raises:
        InvalidArgument: an unknown kind, both or neither of ``name`` and
            ``key``, an empty one, or ``key`` for a kind that has no exact-key
            mode (only a Lock has one).
    """
    spec = by_name(kind)
    return Target(spec.name, spec.keys(name, key=key, prefix=prefix))


def targets(name: str | None, *, key: str | None, prefix: str) -> list[Target]:
    """The primitives ``inspect`` looks at: one of every registered kind named
    ``name`` under ``prefix``, or only the exact-key ``Lock`` at ``key``.

    Raises:
        InvalidArgument: both or neither of ``name`` and ``key``, or an empty one.
    """
    if key is not None or name is None:
        return [target(k.name, name, key=key, prefix=prefix) for k in KINDS if k.exact_key]
    return [target(k.name, name, prefix=prefix) for k in KINDS]


def refine_waiter(kind: str, waiter: Waiter) -> Waiter:
    """Split what a ``kind`` waiter's member adds to its holder (a Semaphore's
    permits, a ReadWriteLock's mode); other kinds, and members of another
    shape, are left as they are."""
    return by_name(kind).refine_waiter(waiter)


def read_lock(lock: Target, *, waiting: int = 0) -> Plan[LockView]:
    """Read one primitive with the library's inspect plan, and its first
    ``waiting`` queued waiters (two more round trips, only when someone waits;
    a FairLock's come with its inspect).

    Raises:
        WrongTypeError: one of the primitive's keys holds another type.
    """
    return (yield from lock.spec.read(lock.keys, waiting))


def inspect(client: Client, found: Sequence[Target]) -> tuple[list[LockView], list[str]]:
    """The primitives among ``found`` that exist, with their first queued
    waiters; and a message for each one skipped because one of its keys holds
    another type."""
    views: list[LockView] = []
    skipped: list[str] = []
    for t in found:
        try:
            view = run(client, read_lock(t, waiting=WAITERS_SHOWN))
        except WrongTypeError as exc:  # not one of tenure's primitives
            skipped.append(f"{t.kind} {t.keys.name!r}: {exc}")
            continue
        if view.exists:
            views.append(view)
    return views, skipped


# --- ls: scanning and grouping keys ---------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class KeyGroup:
    """The keys of one primitive found by a scan: ``roles`` among ``lock`` and
    its siblings (``fence``, ``waiters``, ...)."""

    name: str
    kind: str
    roles: frozenset[str] = field(compare=False)


def parse_key(key: str, prefix: str) -> tuple[str, str, str] | None:
    """``(kind, name, role)`` of a key of a named primitive of a registered kind
    under ``prefix``, else ``None``.

    ``role`` is ``"lock"`` for the primitive's main key (a semaphore's holders,
    a latch's count) or the sibling's role (``"fence"``, ``"waiters"``,
    ``"opened"``, ... and ``"op"`` for a ReadWriteLock owner's last-op key):
    ``<prefix>{orders}`` is the ``Lock`` ``orders``'s lock key,
    ``<prefix>{gpus}:semaphore:permits`` the ``Semaphore`` ``gpus``'s count
    (see :mod:`tenure._keys`; a name with braces or ``%`` is escaped there).
    Keys under another prefix, and exact-key locks' keys, give ``None``.
    """
    info = parse_any_key(key)
    if info is None or info.prefix != prefix or info.name is None:
        return None
    if info.kind not in (k.name for k in KINDS):
        return None
    return info.kind, info.name, info.role


def group_keys(keys: Iterable[str | bytes], *, prefix: str, pattern: str = "*") -> list[KeyGroup]:
    """Group scanned keys by primitive, keeping those whose name matches
    ``pattern`` (a glob, as :func:`fnmatch.fnmatchcase`). Keys of no primitive
    are left out. Sorted by name, then kind."""
    roles: dict[tuple[str, str], set[str]] = {}
    for raw in keys:
        try:
            key = raw.decode() if isinstance(raw, bytes) else raw
        except UnicodeDecodeError:
            continue  # not a key tenure wrote: names are str
        parsed = parse_key(key, prefix)
        if parsed is None or not fnmatch.fnmatchcase(parsed[1], pattern):
            continue
        kind, name, role = parsed
        roles.setdefault((name, kind), set()).add(role)
    return sorted(KeyGroup(name, kind, frozenset(r)) for (name, kind), r in roles.items())


def glob_escape(text: str) -> str:
    """``text`` with the characters special to Redis's glob (``MATCH``) escaped."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def scan(client: Client, prefix: str, count: int = SCAN_COUNT) -> Iterator[bytes]:
    """Every key that starts with ``prefix``, by ``SCAN`` (never ``KEYS``), ``count``
    keys asked for per call; on a cluster client, of every master in turn."""
    for _, node in masters(client):
        yield from node.scan_iter(match=glob_escape(prefix) + "*", count=count)


def list_locks(
    client: Client, *, prefix: str, pattern: str = "*", count: int = SCAN_COUNT
) -> tuple[list[LockView], list[str]]:
    """The named primitives under ``prefix`` whose name matches ``pattern``, read
    one by one after the scan; and a message for each one skipped because one
    of its keys holds another type.

    Raises:
        InvalidArgument: ``prefix`` is not a prefix tenure takes
            (:func:`~tenure._keys.check_prefix`); nothing was sent.
    """
    check_prefix(prefix)
    views: list[LockView] = []
    skipped: list[str] = []
    for group in group_keys(scan(client, prefix, count), prefix=prefix, pattern=pattern):
        try:
            views.append(run(client, read_lock(target(group.kind, group.name, prefix=prefix))))
        except WrongTypeError as exc:  # not one of tenure's primitives
            skipped.append(f"{group.kind} {group.name!r}: {exc}")
    return views, skipped


# --- release --force ------------------------------------------------------------------------


def holds_of(view: LockView) -> tuple[Hold, ...]:
    """The holds of a snapshot: the holder of a kind with one holder; every
    hold of a ReadWriteLock (write holds first); every lease of a Semaphore."""
    return view.spec.holds(view)


def force_release(
    client: Client, lock: Target, *, token: str | None = None
) -> ForcedRelease | None:
    """Break ``lock``'s holds: read them, then run the normal release with each
    holder's token (for an ``RLock`` and a read-write hold, once per hold
    level), which hands the lock (or a semaphore's permits) to the first live
    waiters. ``token`` picks one Semaphore lease; otherwise every hold goes.
    Returns ``None`` when nothing (matching) is held.

    A race with a holder's own release is harmless: the release scripts compare
    the token (and an ``RLock``'s fence, a read-write hold's id), so they can
    remove only the hold that was read, never a later one.

    Raises:
        InvalidArgument: ``lock`` has no holder (a CountDownLatch), or
            ``token`` is given for a kind whose leases it can't pick (all but
            the Semaphore).
    """
    spec = lock.spec
    if spec.force_release is None:
        raise InvalidArgument(f"a {lock.kind} is not a lock: it has no holder to release")
    if token is not None and not spec.picks_lease:
        raise InvalidArgument("a token picks one lease of a Semaphore only")
    before = run(client, read_lock(lock))
    holds = [h for h in holds_of(before) if token is None or h.holder == token]
    if not holds:
        return None
    removed, gone = run(client, spec.force_release(lock.keys, before, holds, new_op))
    return ForcedRelease(before, run(client, read_lock(lock)), tuple(removed), tuple(gone))


# --- text output ----------------------------------------------------------------------------


def shown(text: str) -> str:
    """``text`` for a line of text output: as it is if every character is
    printable, else as a Python literal (``'a\\nb'``), so that a name holding a
    newline, tab or other control character can't break a line or a table's
    columns. (JSON output keeps the exact text.)"""
    return text if text.isprintable() else repr(text)


def _one_line(line: str) -> str:
    """``line`` with each character that is not printable (a newline, a tab, an
    escape) written as its backslash escape: a holder Redis returned can't break
    the output's lines."""
    if line.isprintable():
        return line
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)


def _label(view: LockView) -> str:
    return f"{view.kind} {view.name!r} (key {shown(view.key)})"


def describe(view: LockView) -> list[str]:
    """``inspect``'s text for one primitive (names and keys :func:`shown`, no
    control character left in a line)."""
    return [_one_line(line) for line in (_label(view), *view.spec.describe(view))]


def holder_summary(view: LockView) -> str:
    """``ls``'s HOLDER column: who holds it (the first of several, and how many
    more), or ``free``; a latch's count, or ``open``."""
    return view.spec.summary(view)


def describe_release(done: ForcedRelease) -> list[str]:
    """``release --force``'s text: what was removed, and where the lock went (no
    control character left in a line)."""
    return [_one_line(line) for line in _describe_release(done)]


def _describe_release(done: ForcedRelease) -> list[str]:
    label = _label(done.before)
    if not done.released:
        now = done.after.spec.now_text(done.after)
        return [f"{label} changed hands before the release: nothing was removed; {now}"]
    return [f"released {label}", *done.before.spec.release_lines(done)]


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as left-aligned columns (two spaces apart), the first row a header;
    a cell with a character that is not printable is :func:`shown` escaped."""
    rows = [[shown(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def ls_table(views: Sequence[LockView]) -> list[str]:
    """``ls``'s text: one row per primitive."""
    rows = [("KIND", "NAME", "HOLDER", "TTL", "FENCE", "WAITERS")]
    for v in views:
        ttl = seconds(v.ttl) if v.held and v.ttl is not None else ("no expiry" if v.held else "-")
        waiters = str(v.waiters) if v.spec.queued else "-"
        rows.append((v.kind, v.name, holder_summary(v), ttl, str(v.fence or "-"), waiters))
    return table(rows)


def dumps(value: object) -> str:
    """``value`` as indented JSON."""
    return json.dumps(value, indent=2, sort_keys=False)
