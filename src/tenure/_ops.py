"""What ``tenure inspect``, ``ls`` and ``release --force`` do, apart from argparse.

Locks are read with the library's own plans (``lock_plans.inspect``,
``rlock_plans.inspect``) through the sync driver. A forced release reads the
holder, then runs the normal, token-checked release with the holder's token,
so the lock goes to the first live waiter exactly as the holder's own release
would hand it over. ``ls`` finds locks with ``SCAN`` (never ``KEYS``) and
groups each lock's keys (lock, fence, waiters) under it.

JSON shape of one lock, in ``inspect --json`` and ``ls --json`` (stable: new
keys may be added, none removed or renamed)::

    {"kind": "Lock" | "RLock", "name": "orders:42", "key": "tenure:{orders:42}",
     "held": true, "holder": "<token or owner id>" | null, "count": 1,
     "ttl": 9.52 | null, "fence": 1754300000000001 | null, "waiters": 1,
     "waiting": [{"waiter": "<hub id>", "holder": "<token or owner id>",
                  "lease": 10.0 | null, "queued_for": 0.41 | null}]}

``holder`` is the lease token (Lock) or owner id (RLock); ``count`` the hold
count (1 for a held Lock, 0 when free); ``ttl`` the seconds left, null when
free or held with no expiry; ``fence`` the last fence minted for the name,
null if none is known. ``waiting`` (``inspect`` only) lists the first
:data:`WAITERS_SHOWN` queued waiters in queue order, each with the lease it
asked for and how long it has been queued (by the server's clock).
``inspect --json`` prints ``{"name", "key", "prefix", "locks": [...]}``;
``ls --json`` prints ``{"prefix", "pattern", "locks": [...]}``.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import redis
import redis.exceptions

from ._drivers._sync import run
from ._errors import InvalidArgument, NotOwnedError, WrongTypeError
from ._keys import RLOCK_NAMESPACE, LockKeys, lock_keys, rlock_keys
from ._plans import lock as lock_plans
from ._plans import rlock as rlock_plans
from ._protocol import Command, Plan

Kind = Literal["Lock", "RLock"]

#: How many queued waiters ``inspect`` lists (all of them are counted).
WAITERS_SHOWN = 10

#: Keys asked for per ``SCAN`` call by ``ls`` unless told otherwise.
SCAN_COUNT = 1000


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --- one lock, as the operator sees it ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Waiter:
    """One queued waiter of a lock (a member of its waiters sorted set).

    Attributes:
        waiter: the waiting process's wake-hub id.
        holder: the lease token (Lock) or owner id (RLock) a release would hand
            the lock to.
        lease: the lease it asked for, in seconds (``None`` if unreadable).
        queued_for: seconds since it queued, by the server's clock.
    """

    waiter: str
    holder: str
    lease: float | None
    queued_for: float | None

    def to_json(self) -> dict[str, Any]:
        """This waiter as a JSON object."""
        return {
            "waiter": self.waiter,
            "holder": self.holder,
            "lease": self.lease,
            "queued_for": self.queued_for,
        }


@dataclass(frozen=True, slots=True)
class LockView:
    """A snapshot of one lock (see the module docstring for its JSON shape)."""

    kind: Kind
    name: str
    key: str
    holder: str
    count: int
    pttl_ms: int
    fence: int
    waiters: int
    waiting: tuple[Waiter, ...] = ()

    @property
    def held(self) -> bool:
        """Whether someone holds the lock."""
        return bool(self.holder)

    @property
    def exists(self) -> bool:
        """Whether any of the lock's keys exists (a free lock keeps its fence key)."""
        return self.held or self.fence > 0 or self.waiters > 0

    @property
    def ttl(self) -> float | None:
        """Seconds left on the lease; ``None`` when free or held with no expiry."""
        return self.pttl_ms / 1000 if self.held and self.pttl_ms >= 0 else None

    def to_json(self, *, waiting: bool = True) -> dict[str, Any]:
        """This lock as a JSON object; ``waiting=False`` leaves out the waiter list."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "name": self.name,
            "key": self.key,
            "held": self.held,
            "holder": self.holder or None,
            "count": self.count,
            "ttl": self.ttl,
            "fence": self.fence or None,
            "waiters": self.waiters,
        }
        if waiting:
            out["waiting"] = [w.to_json() for w in self.waiting]
        return out


@dataclass(frozen=True, slots=True)
class Target:
    """A lock to read: its kind and keys."""

    kind: Kind
    keys: LockKeys


def target(kind: Kind, name: str | None, *, key: str | None = None, prefix: str) -> Target:
    """The ``kind`` lock named ``name`` under ``prefix``, or the exact-key ``Lock`` at ``key``.

    Raises:
        InvalidArgument: both or neither of ``name`` and ``key``, an empty one, or
            ``key`` for an ``RLock`` (which has no exact-key mode).
    """
    if kind == "Lock":
        return Target(kind, lock_keys(name, key=key, prefix=prefix))
    if key is not None or name is None:
        raise InvalidArgument("an RLock is found by name only (it has no exact-key mode)")
    return Target(kind, rlock_keys(name, prefix=prefix))


def targets(name: str | None, *, key: str | None, prefix: str) -> list[Target]:
    """The locks ``inspect`` looks at: a ``Lock`` and an ``RLock`` named ``name``
    under ``prefix``, or only the exact-key ``Lock`` at ``key``.

    Raises:
        InvalidArgument: both or neither of ``name`` and ``key``, or an empty one.
    """
    if key is not None or name is None:
        return [target("Lock", name, key=key, prefix=prefix)]
    return [target("Lock", name, prefix=prefix), target("RLock", name, prefix=prefix)]


_MEMBER = re.compile(r"^([^|]*)\|(\d+)\|(.+)$", re.S)


def parse_waiters(raw: object, now: object) -> tuple[Waiter, ...]:
    """Read ``ZRANGE waiters 0 n WITHSCORES`` (flat or as pairs) against ``TIME``.

    A member is ``"<waiter id>|<lease ms>|<holder>"`` and its score the server
    time in µs when it queued (see ``lock_acquire.lua``).
    """
    items = list(raw) if isinstance(raw, list | tuple) else []
    if items and not isinstance(items[0], list | tuple):
        items = [items[i : i + 2] for i in range(0, len(items) - 1, 2)]
    seconds, micros = (int(_text(v)) for v in now) if isinstance(now, list | tuple) else (0, 0)
    now_us = seconds * 1_000_000 + micros
    out = []
    for member, score in items:
        text = _text(member)
        queued_for = (now_us - float(_text(score))) / 1e6 if now_us else None
        match = _MEMBER.match(text)
        if match:
            w, lease_ms, holder = match.groups()
            out.append(Waiter(w, holder, int(lease_ms) / 1000, queued_for))
        else:
            out.append(Waiter("", text, None, queued_for))
    return tuple(out)


def read_waiters(keys: LockKeys, limit: int) -> Plan[tuple[Waiter, ...]]:
    """Read the first ``limit`` queued waiters of the lock with ``keys``."""
    raw = yield Command(("ZRANGE", keys.waiters, "0", str(limit - 1), "WITHSCORES"))
    now = yield Command(("TIME",))
    return parse_waiters(raw, now)


def read_lock(lock: Target, *, waiting: int = 0) -> Plan[LockView]:
    """Read one lock with the library's inspect plan, and its first ``waiting``
    queued waiters (two more round trips, only when someone waits).

    Raises:
        WrongTypeError: one of the lock's keys holds another type.
    """
    keys = lock.keys
    if lock.kind == "Lock":
        s = yield from lock_plans.inspect(keys)
        view = LockView(
            "Lock",
            keys.name,
            keys.lock,
            s.holder,
            1 if s.holder else 0,
            s.pttl_ms,
            s.fence,
            s.waiters,
        )
    else:
        r = yield from rlock_plans.inspect(keys)
        view = LockView(
            "RLock", keys.name, keys.lock, r.holder, r.count, r.pttl_ms, r.fence, r.waiters
        )
    if waiting > 0 and view.waiters > 0:
        entries = yield from read_waiters(keys, waiting)
        view = replace(view, waiting=entries)
    return view


def inspect(client: redis.Redis, found: Sequence[Target]) -> list[LockView]:
    """The locks among ``found`` that exist, with their first queued waiters.

    Raises:
        WrongTypeError: one of the locks' keys holds another type.
    """
    views = [run(client, read_lock(t, waiting=WAITERS_SHOWN)) for t in found]
    return [v for v in views if v.exists]


# --- ls: scanning and grouping keys ---------------------------------------------------------

_NAMESPACES: tuple[tuple[str, Kind], ...] = ((RLOCK_NAMESPACE, "RLock"), ("", "Lock"))
_SIBLINGS = ("fence", "waiters", "delay", "released")


@dataclass(frozen=True, slots=True, order=True)
class KeyGroup:
    """The keys of one lock found by a scan: ``roles`` among ``lock``, ``fence``, ``waiters``."""

    name: str
    kind: Kind
    roles: frozenset[str] = field(compare=False)


def parse_key(key: str, prefix: str) -> tuple[Kind, str, str] | None:
    """``(kind, name, role)`` of a key of a named lock under ``prefix``, else ``None``.

    ``role`` is ``"lock"`` or a sibling (``"fence"``, ``"waiters"``, ``"delay"``,
    ``"released"``): ``<prefix>{orders}`` is
    the ``Lock`` ``orders``'s lock key, ``<prefix>rlock:{orders}:fence`` the
    ``RLock`` ``orders``'s fence key (see :mod:`tenure._keys`).
    """
    if not key.startswith(prefix):
        return None
    rest = key[len(prefix) :]
    for namespace, kind in _NAMESPACES:
        if not rest.startswith(namespace + "{"):
            continue
        body = rest[len(namespace) + 1 :]
        if body.endswith("}"):
            name, role = body[:-1], "lock"
        else:
            for sibling in _SIBLINGS:
                if body.endswith("}:" + sibling):
                    name, role = body[: -len(sibling) - 2], sibling
                    break
            else:
                return None
        return (kind, name, role) if name else None
    return None


def group_keys(keys: Iterable[str | bytes], *, prefix: str, pattern: str = "*") -> list[KeyGroup]:
    """Group scanned keys by lock, keeping the locks whose name matches ``pattern``
    (a glob, as :func:`fnmatch.fnmatchcase`). Keys of no lock are left out.
    Sorted by name, then kind."""
    roles: dict[tuple[str, Kind], set[str]] = {}
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


def scan(client: redis.Redis, prefix: str, count: int = SCAN_COUNT) -> Iterator[bytes]:
    """Every key that starts with ``prefix``, by ``SCAN`` (never ``KEYS``), ``count``
    keys asked for per call."""
    yield from client.scan_iter(match=glob_escape(prefix) + "*", count=count)


def list_locks(
    client: redis.Redis, *, prefix: str, pattern: str = "*", count: int = SCAN_COUNT
) -> tuple[list[LockView], list[str]]:
    """The named locks under ``prefix`` whose name matches ``pattern``, read one by
    one after the scan; and a message for each lock skipped because one of its
    keys holds another type."""
    views: list[LockView] = []
    skipped: list[str] = []
    for group in group_keys(scan(client, prefix, count), prefix=prefix, pattern=pattern):
        try:
            views.append(run(client, read_lock(target(group.kind, group.name, prefix=prefix))))
        except WrongTypeError as exc:  # not one of tenure's locks
            skipped.append(f"{group.kind} {group.name!r}: {exc}")
    return views, skipped


# --- release --force ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ForcedRelease:
    """What ``release --force`` did.

    Attributes:
        before: the lock as read before the release (its holder is what was removed).
        after: the lock afterwards: held by the first live waiter, or free.
        released: ``False`` when the holder changed between the read and the
            release (it released itself, or its lease ran out); then nothing was
            removed, since the release script checks the token.
    """

    before: LockView
    after: LockView
    released: bool


def force_release(client: redis.Redis, lock: Target) -> ForcedRelease | None:
    """Break ``lock``'s hold: read its holder, then run the normal release with
    the holder's token (for an ``RLock``, once per hold level), which hands the
    lock to the first live waiter. Returns ``None`` when the lock is not held.

    A race with the holder's own release is harmless: the release script
    compares the token (and an ``RLock``'s fence), so it can remove only the
    hold that was read, never a later one.
    """
    before = run(client, read_lock(lock))
    if not before.held:
        return None
    keys = lock.keys
    released = False
    try:
        if lock.kind == "Lock":
            run(client, lock_plans.release(keys, before.holder, before.fence))
            released = True
        else:
            while True:
                left = run(client, rlock_plans.release(keys, before.holder, before.fence))
                released = True
                if left <= 0:
                    break
    except NotOwnedError:
        pass  # the hold ended meanwhile (by itself after the first level, or entirely)
    return ForcedRelease(before, run(client, read_lock(lock)), released)


# --- text output ----------------------------------------------------------------------------


def seconds(value: float | None) -> str:
    """A duration for people: ``9.52s``, or ``-`` for none."""
    return "-" if value is None else f"{value:.2f}s"


def describe(view: LockView) -> list[str]:
    """``inspect``'s text for one lock."""
    lines = [f"{view.kind} {view.name!r} (key {view.key})"]
    if view.held:
        holder = view.holder if view.kind == "Lock" else f"{view.holder} (hold count {view.count})"
        ttl = "no expiry" if view.ttl is None else seconds(view.ttl)
        lines += [f"  holder   {holder}", f"  ttl      {ttl}"]
    else:
        lines.append("  holder   free")
    lines.append(f"  fence    {view.fence or '-'}")
    lines.append(f"  waiters  {view.waiters}")
    for i, w in enumerate(view.waiting, 1):
        lease = seconds(w.lease) if w.lease is not None else "?"
        ago = f", queued {seconds(w.queued_for)} ago" if w.queued_for is not None else ""
        lines.append(f"    {i}. {w.holder} (lease {lease}{ago}, waiter {w.waiter})")
    if view.waiters > len(view.waiting) > 0:
        lines.append(f"    ... and {view.waiters - len(view.waiting)} more")
    return lines


def describe_release(done: ForcedRelease) -> list[str]:
    """``release --force``'s text: what was removed, and where the lock went."""
    b, a = done.before, done.after
    label = f"{b.kind} {b.name!r} (key {b.key})"
    now = f"now held by {a.holder} (fence {a.fence})" if a.held else "now free"
    if not done.released:
        return [f"{label} changed hands before the release: nothing was removed; {now}"]
    holder = b.holder if b.kind == "Lock" else f"{b.holder} (hold count {b.count})"
    ttl = "no expiry" if b.ttl is None else seconds(b.ttl)
    lines = [
        f"released {label}",
        f"  removed  holder {holder}",
        f"  fence    {b.fence or '-'}",
        f"  ttl left {ttl}",
    ]
    if a.held and a.holder != b.holder:
        lines.append(f"  handed to the first waiter: {a.holder} (fence {a.fence})")
    elif a.held:
        lines.append(f"  {now}")
    else:
        lines.append("  now free (nobody was waiting)")
    return lines


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as left-aligned columns (two spaces apart), the first row a header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def ls_table(views: Sequence[LockView]) -> list[str]:
    """``ls``'s text: one row per lock."""
    rows = [("KIND", "NAME", "HOLDER", "TTL", "FENCE", "WAITERS")]
    for v in views:
        holder = v.holder if v.held else "free"
        if v.kind == "RLock" and v.held:
            holder += f" x{v.count}"
        ttl = seconds(v.ttl) if v.held and v.ttl is not None else ("no expiry" if v.held else "-")
        rows.append((v.kind, v.name, holder, ttl, str(v.fence or "-"), str(v.waiters)))
    return table(rows)


def dumps(value: object) -> str:
    """``value`` as indented JSON."""
    return json.dumps(value, indent=2, sort_keys=False)
