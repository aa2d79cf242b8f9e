"""What ``tenure inspect``, ``ls`` and ``release --force`` do, apart from argparse.

The commands know no kind by name: every kind (``Lock``, ``RLock``,
``FairLock``, ``ReadWriteLock``, ``Semaphore``, ``CountDownLatch``) is a
:class:`~tenure._plans.kind.Kind` in the registry :mod:`tenure._plans.kinds`,
which says how to read it (with the library's own inspect plan, run here
through the sync driver) and break its holds. A forced release
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

What the commands print, as text and JSON (and the JSON shape of one
primitive), is :mod:`tenure._views`.
"""

from __future__ import annotations

import fnmatch
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
from ._label import split_holder
from ._plans.kind import Kind
from ._plans.kinds import KINDS, by_name, exists, kind_of
from ._plans.snapshot import ForcedRelease as ForcedRelease
from ._plans.snapshot import Hold as Hold
from ._plans.snapshot import LockView as LockView
from ._plans.snapshot import Waiter as Waiter
from ._protocol import Plan, strict_text

#: Why ``release --force`` refuses a primitive whose keys hold bytes that are
#: not UTF-8 (the reads show them escaped, another value than the one stored,
#: which a token-checked release would not find): what tenure writes in the
#: keys the views read is text (tokens, labels, numbers; an election's value
#: in base64).
NOT_TEXT = "a key holds bytes that are not UTF-8; not a tenure key"

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


def connect(
    url: str, *, socket_timeout: float | None = None
) -> redis.Redis | redis.cluster.RedisCluster:
    """A client for the server at ``url``: a ``redis.cluster.RedisCluster``
    (which finds the other nodes from this one) if the server is in cluster
    mode, else a ``redis.Redis``. A cluster node whose cluster can't be mapped
    (slots not covered, say) gets a ``redis.Redis`` on that node alone, so that
    the doctor can say what is wrong. The caller closes it. ``socket_timeout``
    bounds each call's wait for the server (default: none).

    Raises:
        redis.exceptions.ConnectionError: the server can't be reached.
    """
    single = redis.Redis.from_url(url, socket_timeout=socket_timeout)
    try:
        if not cluster_enabled(single):
            return single
        cluster = redis.cluster.RedisCluster.from_url(url, socket_timeout=socket_timeout)
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


def server_time(client: Client) -> float:
    """The server's clock (the first master's, on a cluster), in Unix seconds."""
    secs, micros = masters(client)[0][1].time()
    return float(secs) + micros / 1e6


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
        if exists(view):
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
        # a byte that is not UTF-8 kept as a lone surrogate (see raw_name)
        key = raw.decode(errors="surrogateescape") if isinstance(raw, bytes) else raw
        parsed = parse_key(key, prefix)
        if parsed is None or not fnmatch.fnmatchcase(parsed[1], pattern):
            continue
        kind, name, role = parsed
        roles.setdefault((name, kind), set()).add(role)
    return sorted(KeyGroup(name, kind, frozenset(r)) for (name, kind), r in roles.items())


def raw_name(name: str) -> str | None:
    """A name that is not UTF-8 (its bytes kept as lone surrogates by
    :func:`group_keys`) as the literal of its bytes, ``b'\\xffjobs'`` (every
    byte that is not printable ASCII escaped: ``ast.literal_eval`` gives the
    bytes back). ``None`` for a name of text (any name tenure takes)."""
    try:
        name.encode()
    except UnicodeEncodeError:
        return repr(name.encode(errors="surrogateescape"))
    return None


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
        shown = raw_name(group.name)
        if shown is not None:  # no name of tenure's: its names are text, sent as UTF-8
            skipped.append(f"{group.kind} {shown}: the name is not UTF-8; not a tenure key")
            continue
        try:
            views.append(run(client, read_lock(target(group.kind, group.name, prefix=prefix))))
        except WrongTypeError as exc:  # not one of tenure's primitives
            skipped.append(f"{group.kind} {group.name!r}: {exc}")
    return views, skipped


# --- release --force ------------------------------------------------------------------------


def holds_of(view: LockView) -> tuple[Hold, ...]:
    """The holds of a snapshot: the holder of a kind with one holder; every
    hold of a ReadWriteLock (write holds first); every lease of a Semaphore."""
    return kind_of(view).holds(view)


def _names(holder: str) -> tuple[str, str]:
    """What picks a lease with ``--token``: its whole token, or the token
    without its label (what ``inspect`` shows in brackets)."""
    return holder, split_holder(holder)[0]


def force_release(
    client: Client, lock: Target, *, token: str | None = None
) -> ForcedRelease | None:
    """Break ``lock``'s holds: read them, then run the normal release with each
    holder's token (for an ``RLock`` and a read-write hold, once per hold
    level), which hands the lock (or a semaphore's permits) to the first live
    waiters. ``token`` (whole, or without its label) picks one Semaphore
    lease; otherwise every hold goes.
    Returns ``None`` when nothing (matching) is held.

    A race with a holder's own release is harmless: the release scripts compare
    the token (and an ``RLock``'s fence, a read-write hold's id), so they can
    remove only the hold that was read, never a later one.

    Raises:
        InvalidArgument: ``lock`` has no holder (a CountDownLatch), or
            ``token`` is given for a kind whose leases it can't pick (all but
            the Semaphore), or one of its keys holds bytes that are not UTF-8
            (see :data:`NOT_TEXT`); nothing was released.
        WrongTypeError: one of its keys holds another type.
    """
    spec = lock.spec
    if spec.force_release is None:
        raise InvalidArgument(f"a {lock.kind} is not a lock: it has no holder to release")
    if token is not None and not spec.picks_lease:
        raise InvalidArgument("a token picks one lease of a Semaphore only")
    try:
        with strict_text():  # (the holders' tokens are sent back: see NOT_TEXT)
            before = run(client, read_lock(lock))
            holds = [h for h in holds_of(before) if token is None or token in _names(h.holder)]
            if not holds:
                return None
            removed, gone = run(client, spec.force_release(lock.keys, before, holds, new_op))
    except UnicodeDecodeError:
        raise InvalidArgument(f"{lock.kind} {lock.keys.name!r}: {NOT_TEXT}") from None
    return ForcedRelease(before, run(client, read_lock(lock)), tuple(removed), tuple(gone))
