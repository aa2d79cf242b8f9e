"""What ``tenure inspect``, ``ls`` and ``release --force`` do, apart from argparse.

Every primitive is read with the library's own inspect plan (``Lock``,
``RLock``, ``FairLock``, ``ReadWriteLock``, ``Semaphore``, ``CountDownLatch``)
through the sync driver. A forced release reads the holders, then runs the
normal, token-checked release script with each holder's token (an RLock's or a
read-write hold's once per hold level, a semaphore's once per lease), so the
lock or the permits go to the queue exactly as the holder's own release would
hand them over. ``ls`` finds the primitives with ``SCAN`` (never ``KEYS``) and
groups each one's keys (lock, fence, waiters, ...) under it.

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

Per kind, these keys are added:

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
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

import redis
import redis.exceptions

from ._drivers._identity import new_op
from ._drivers._sync import run
from ._errors import InvalidArgument, NotOwnedError, WrongTypeError
from ._keys import (
    FairKeys,
    LatchKeys,
    LockKeys,
    RWLockKeys,
    SemaphoreKeys,
    check_prefix,
    fair_keys,
    latch_keys,
    lock_keys,
    rlock_keys,
    rwlock_keys,
    semaphore_keys,
)
from ._keys import parse_key as parse_any_key
from ._plans import fair as fair_plans
from ._plans import latch as latch_plans
from ._plans import lock as lock_plans
from ._plans import rlock as rlock_plans
from ._plans import rwlock as rwlock_plans
from ._plans import semaphore as semaphore_plans
from ._plans.latch import CountDownLatchInfo
from ._plans.rwlock import ReadWriteInfo
from ._plans.semaphore import SemaphoreInfo
from ._protocol import Command, Plan

Kind = Literal["Lock", "RLock", "FairLock", "ReadWriteLock", "Semaphore", "CountDownLatch"]

#: Every kind ``inspect`` looks for, in the order it shows them.
KINDS: tuple[Kind, ...] = (
    "Lock",
    "RLock",
    "FairLock",
    "ReadWriteLock",
    "Semaphore",
    "CountDownLatch",
)

#: The kinds whose holder is one lease (``holder`` and ``count`` say it all).
SINGLE_HOLDER: tuple[Kind, ...] = ("Lock", "RLock", "FairLock")

#: How many queued waiters ``inspect`` lists (all of them are counted).
WAITERS_SHOWN = 10

#: Keys asked for per ``SCAN`` call by ``ls`` unless told otherwise.
SCAN_COUNT = 1000

#: What ``kind`` snapshots keep beside the common fields: the library's ``info()``.
Detail = SemaphoreInfo | ReadWriteInfo | CountDownLatchInfo | None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --- one primitive, as the operator sees it -------------------------------------------------


@dataclass(frozen=True, slots=True)
class Waiter:
    """One queued waiter of a lock (a member of its waiters sorted set).

    Attributes:
        waiter: the waiting process's (a FairLock's: thread's or task's) wake id.
        holder: the lease token (Lock, FairLock, Semaphore) or owner id (RLock,
            ReadWriteLock) a release would hand the lock to.
        lease: the lease a release hands it, in seconds: its claim window, the
            smaller of the lease it asked for and 1 s, which it extends to its
            full lease at once (``None`` if unreadable).
        queued_for: seconds since it queued, by the server's clock (``None``
            for a FairLock's waiter, which has a ``deadline`` instead).
        mode: a ReadWriteLock waiter's mode, ``"read"`` or ``"write"``.
        permits: the permits a Semaphore waiter asks for.
        deadline: seconds until a FairLock waiter is dropped from the queue
            unless it calls again (a live one calls well before).
    """

    waiter: str
    holder: str
    lease: float | None
    queued_for: float | None
    mode: str | None = None
    permits: int | None = None
    deadline: float | None = None

    def to_json(self) -> dict[str, Any]:
        """This waiter as a JSON object (``mode``, ``permits`` and ``deadline``
        only for the kinds that have them)."""
        out: dict[str, Any] = {
            "waiter": self.waiter,
            "holder": self.holder,
            "lease": self.lease,
            "queued_for": self.queued_for,
        }
        for name in ("mode", "permits", "deadline"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@dataclass(frozen=True, slots=True)
class LockView:
    """A snapshot of one primitive (see the module docstring for its JSON shape).

    ``holder`` and ``count`` describe the one holder (the first of several, see
    the module docstring); ``pttl_ms`` is the lease left in milliseconds (-1:
    no expiry, -2: free); ``detail`` is the library's ``info()`` snapshot for a
    ReadWriteLock, Semaphore or CountDownLatch. A CountDownLatch's ``count`` is
    its count.
    """

    kind: Kind
    name: str
    key: str
    holder: str
    count: int
    pttl_ms: int
    fence: int
    waiters: int
    waiting: tuple[Waiter, ...] = ()
    detail: Detail = None

    @property
    def held(self) -> bool:
        """Whether someone holds the lock (or a semaphore's permits)."""
        return bool(self.holder)

    @property
    def exists(self) -> bool:
        """Whether any of its keys exists (a free lock keeps its fence key, an
        open latch its opening number, a semaphore its count)."""
        if self.held or self.fence > 0 or self.waiters > 0:
            return True
        detail = self.detail
        if isinstance(detail, CountDownLatchInfo):
            return detail.count > 0 or detail.opened > 0
        return isinstance(detail, SemaphoreInfo) and detail.permits > 0

    @property
    def ttl(self) -> float | None:
        """Seconds left on the lease; ``None`` when free or held with no expiry."""
        return self.pttl_ms / 1000 if self.held and self.pttl_ms >= 0 else None

    def to_json(self, *, waiting: bool = True) -> dict[str, Any]:
        """This primitive as a JSON object; ``waiting=False`` leaves out the waiter list."""
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
        detail = self.detail
        if isinstance(detail, ReadWriteInfo):
            out["mode"] = detail.mode
            out["waiting_writers"] = detail.waiting_writers
            out["holders"] = [
                {"owner": h.owner, "mode": h.mode, "count": h.count, "ttl": h.ttl, "fence": h.fence}
                for h in detail.holders
            ]
        elif isinstance(detail, SemaphoreInfo):
            out["permits"] = detail.permits or None
            out["available"] = detail.available if detail.permits else None
            out["holders"] = [
                {"token": h.token, "permits": h.permits, "ttl": h.ttl} for h in detail.holders
            ]
        elif isinstance(detail, CountDownLatchInfo):
            out.update(waiters=None, open=detail.count == 0, opened=detail.opened or None)
        if waiting:
            out["waiting"] = [w.to_json() for w in self.waiting]
        return out


@dataclass(frozen=True, slots=True)
class Target:
    """A primitive to read: its kind and keys."""

    kind: Kind
    keys: LockKeys | LatchKeys


def target(kind: Kind, name: str | None, *, key: str | None = None, prefix: str) -> Target:
    """The ``kind`` primitive named ``name`` under ``prefix``, or the exact-key
    ``Lock`` at ``key``.

    Raises:
        InvalidArgument: both or neither of ``name`` and ``key``, an empty one, or
            ``key`` for another kind than ``Lock`` (only a Lock has an exact-key mode).
    """
    if kind == "Lock":
        return Target(kind, lock_keys(name, key=key, prefix=prefix))
    if key is not None or name is None:
        raise InvalidArgument(f"a {kind} is found by name only (only a Lock has an exact key)")
    if kind == "RLock":
        return Target(kind, rlock_keys(name, prefix=prefix))
    if kind == "FairLock":
        return Target(kind, fair_keys(name, prefix=prefix))
    if kind == "ReadWriteLock":
        return Target(kind, rwlock_keys(name, prefix=prefix))
    if kind == "Semaphore":
        return Target(kind, semaphore_keys(name, prefix=prefix))
    return Target(kind, latch_keys(name, prefix=prefix))


def targets(name: str | None, *, key: str | None, prefix: str) -> list[Target]:
    """The primitives ``inspect`` looks at: one of every kind (:data:`KINDS`)
    named ``name`` under ``prefix``, or only the exact-key ``Lock`` at ``key``.

    Raises:
        InvalidArgument: both or neither of ``name`` and ``key``, or an empty one.
    """
    if key is not None or name is None:
        return [target("Lock", name, key=key, prefix=prefix)]
    return [target(kind, name, prefix=prefix) for kind in KINDS]


_MEMBER = re.compile(r"^([^|]*)\|(\d+)\|(.+)$", re.S)


def parse_waiters(raw: object, now: object) -> tuple[Waiter, ...]:
    """Read ``ZRANGE waiters 0 n WITHSCORES`` (flat or as pairs) against ``TIME``.

    A member is ``"<waiter id>|<lease ms>|<holder>"`` and its score the server
    time in µs when it queued (see ``lock_acquire.lua``). A Semaphore's and a
    ReadWriteLock's members say more in ``<holder>``: see :func:`refine_waiter`.
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


_RW_TOKEN = re.compile(r"^([rw]):(.+):([^:]*)$", re.S)
_SEM_TOKEN = re.compile(r"^(\d+)\|(.+)$", re.S)


def refine_waiter(kind: Kind, waiter: Waiter) -> Waiter:
    """Split what a ``kind`` waiter's member adds to its holder: a Semaphore's
    ``"<n>|<token>"`` (permits, token), a ReadWriteLock's ``"<r or w>:<owner
    id>:<op id>"`` (mode, owner id). Other kinds, and members of another shape,
    are left as they are."""
    if kind == "Semaphore":
        match = _SEM_TOKEN.match(waiter.holder)
        if match:
            return replace(waiter, holder=match[2], permits=int(match[1]))
    elif kind == "ReadWriteLock":
        match = _RW_TOKEN.match(waiter.holder)
        if match:
            mode = "read" if match[1] == "r" else "write"
            return replace(waiter, holder=match[2], mode=mode)
    return waiter


def read_waiters(keys: LockKeys, limit: int, kind: Kind = "Lock") -> Plan[tuple[Waiter, ...]]:
    """Read the first ``limit`` queued waiters of the ``kind`` lock with ``keys``."""
    raw = yield Command(("ZRANGE", keys.waiters, "0", str(limit - 1), "WITHSCORES"))
    now = yield Command(("TIME",))
    return tuple(refine_waiter(kind, w) for w in parse_waiters(raw, now))


K = TypeVar("K", bound=LockKeys | LatchKeys)


def _keys_as(lock: Target, cls: type[K]) -> K:
    if not isinstance(lock.keys, cls):
        raise TypeError(f"a {lock.kind} needs {cls.__name__}, not {lock.keys!r}")
    return lock.keys


def _pttl_ms(ttl: float | None, held: bool) -> int:
    """A lease left in seconds as Redis's PTTL would say it (-1 no expiry, -2 free)."""
    if not held:
        return -2
    return -1 if ttl is None else round(ttl * 1000)


def _read_plain(lock: Target) -> Plan[LockView]:
    keys = _keys_as(lock, LockKeys)
    if lock.kind == "Lock":
        s = yield from lock_plans.inspect(keys)
        count = 1 if s.holder else 0
        return LockView(
            "Lock", keys.name, keys.lock, s.holder, count, s.pttl_ms, s.fence, s.waiters
        )
    r = yield from rlock_plans.inspect(keys)
    return LockView("RLock", keys.name, keys.lock, r.holder, r.count, r.pttl_ms, r.fence, r.waiters)


def _read_fair(lock: Target, waiting: int) -> Plan[LockView]:
    keys = _keys_as(lock, FairKeys)
    info = yield from fair_plans.inspect(keys, max(0, waiting))
    queue = tuple(Waiter(w.waiter, w.token, w.lease, None, deadline=w.deadline) for w in info.queue)
    held = info.holder is not None
    return LockView(
        "FairLock",
        keys.name,
        keys.lock,
        info.holder or "",
        info.hold_count,
        _pttl_ms(info.ttl, held),
        info.fence,
        info.waiters,
        queue,
    )


def _read_rwlock(lock: Target) -> Plan[LockView]:
    keys = _keys_as(lock, RWLockKeys)
    state = yield from rwlock_plans.inspect(keys)
    info = state.info
    writers = [h for h in info.holders if h.mode == "write"]
    first = writers[0] if writers else (info.holders[0] if info.holders else None)
    latest = max((h.ttl for h in info.holders), default=None)
    return LockView(
        "ReadWriteLock",
        keys.name,
        keys.lock,
        first.owner if first else "",
        first.count if first else 0,
        _pttl_ms(latest, first is not None),
        info.fence,
        info.waiters,
        detail=info,
    )


def _read_semaphore(lock: Target) -> Plan[LockView]:
    keys = _keys_as(lock, SemaphoreKeys)
    info = yield from semaphore_plans.inspect(keys, 0)  # 0: no count stored
    raw = yield Command(("GET", keys.fence))
    try:
        fence = int(_text(raw)) if raw is not None else 0
    except ValueError:  # changed type since the inspect script checked it
        fence = 0
    first = info.holders[0] if info.holders else None
    latest = max((h.ttl for h in info.holders), default=None)
    return LockView(
        "Semaphore",
        keys.name,
        keys.lock,
        first.token if first else "",
        first.permits if first else 0,
        _pttl_ms(latest, first is not None),
        fence,
        info.waiters,
        detail=info,
    )


def _read_latch(lock: Target) -> Plan[LockView]:
    keys = _keys_as(lock, LatchKeys)
    info = yield from latch_plans.inspect(keys)
    return LockView("CountDownLatch", keys.name, keys.count, "", info.count, -2, 0, 0, detail=info)


def read_lock(lock: Target, *, waiting: int = 0) -> Plan[LockView]:
    """Read one primitive with the library's inspect plan, and its first
    ``waiting`` queued waiters (two more round trips, only when someone waits;
    a FairLock's come with its inspect).

    Raises:
        WrongTypeError: one of the primitive's keys holds another type.
    """
    if lock.kind == "FairLock":
        return (yield from _read_fair(lock, waiting))
    if lock.kind == "CountDownLatch":
        return (yield from _read_latch(lock))
    if lock.kind == "ReadWriteLock":
        view = yield from _read_rwlock(lock)
    elif lock.kind == "Semaphore":
        view = yield from _read_semaphore(lock)
    else:
        view = yield from _read_plain(lock)
    if waiting > 0 and view.waiters > 0:
        entries = yield from read_waiters(_keys_as(lock, LockKeys), waiting, lock.kind)
        view = replace(view, waiting=entries)
    return view


def inspect(client: redis.Redis, found: Sequence[Target]) -> tuple[list[LockView], list[str]]:
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
    kind: Kind
    roles: frozenset[str] = field(compare=False)


def parse_key(key: str, prefix: str) -> tuple[Kind, str, str] | None:
    """``(kind, name, role)`` of a key of a named primitive under ``prefix``, else ``None``.

    ``role`` is ``"lock"`` for the primitive's main key (a semaphore's holders,
    a latch's count) or the sibling's role (``"fence"``, ``"waiters"``,
    ``"opened"``, ... and ``"op"`` for a ReadWriteLock owner's last-op key):
    ``<prefix>{orders}`` is the ``Lock`` ``orders``'s lock key,
    ``<prefix>{gpus}:semaphore:permits`` the ``Semaphore`` ``gpus``'s count
    (see :mod:`tenure._keys`; a name with braces or ``%`` is escaped there).
    Keys under another prefix, and exact-key locks' keys, give ``None``.
    """
    info = parse_any_key(key)
    if info is None or info.prefix != prefix or info.name is None or info.kind not in KINDS:
        return None
    kind = KINDS[KINDS.index(info.kind)]
    return kind, info.name, info.role


def group_keys(keys: Iterable[str | bytes], *, prefix: str, pattern: str = "*") -> list[KeyGroup]:
    """Group scanned keys by primitive, keeping those whose name matches
    ``pattern`` (a glob, as :func:`fnmatch.fnmatchcase`). Keys of no primitive
    are left out. Sorted by name, then kind."""
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

#: The kinds ``release --force`` can release (a latch has no holder).
RELEASABLE: tuple[Kind, ...] = ("Lock", "RLock", "FairLock", "ReadWriteLock", "Semaphore")


@dataclass(frozen=True, slots=True)
class Hold:
    """One hold that a forced release removed (or found gone).

    Attributes:
        holder: the lease token (Lock, FairLock, Semaphore) or owner id (RLock,
            ReadWriteLock).
        count: its hold count (a semaphore lease's permits).
        ttl: seconds its lease had left when read (``None``: no expiry).
        fence: its fence (a Semaphore lease's is not kept: 0).
        mode: a ReadWriteLock hold's mode.
    """

    holder: str
    count: int
    ttl: float | None
    fence: int
    mode: str | None = None


@dataclass(frozen=True, slots=True)
class ForcedRelease:
    """What ``release --force`` did.

    Attributes:
        before: the primitive as read before the release.
        after: the primitive afterwards: held by the first live waiters, or free.
        removed: the holds removed.
        gone: the holds read but not removed, because they ended (or changed
            hands) between the read and the release: the release scripts check
            the token, so they can remove only the hold that was read.
    """

    before: LockView
    after: LockView
    removed: tuple[Hold, ...]
    gone: tuple[Hold, ...] = ()

    @property
    def released(self) -> bool:
        """Whether anything was removed."""
        return bool(self.removed)


def holds_of(view: LockView) -> tuple[Hold, ...]:
    """The holds of a snapshot: the holder of a Lock, RLock or FairLock; every
    hold of a ReadWriteLock (write holds first); every lease of a Semaphore."""
    detail = view.detail
    if isinstance(detail, ReadWriteInfo):
        ordered = sorted(detail.holders, key=lambda h: h.mode != "write")
        return tuple(Hold(h.owner, h.count, h.ttl, h.fence, h.mode) for h in ordered)
    if isinstance(detail, SemaphoreInfo):
        return tuple(Hold(h.token, h.permits, h.ttl, 0) for h in detail.holders)
    return (Hold(view.holder, view.count, view.ttl, view.fence),) if view.held else ()


def read_hold_values(keys: RWLockKeys) -> Plan[dict[str, str]]:
    """A ReadWriteLock's hash as it stands: ``{"w:<owner>": "<count>|<fence>|<hold
    id>", ...}`` (a forced release needs the hold ids, which ``info()`` leaves out)."""
    raw = yield Command(("HGETALL", keys.lock))
    return hold_values(raw)


def hold_values(raw: object) -> dict[str, str]:
    """``HGETALL``'s reply (a dict, or a flat list) as text."""
    if isinstance(raw, dict):
        return {_text(k): _text(v) for k, v in raw.items()}
    items = list(raw) if isinstance(raw, list | tuple) else []
    return {_text(k): _text(v) for k, v in zip(items[::2], items[1::2], strict=False)}


def _release_rw_hold(client: redis.Redis, keys: RWLockKeys, hold: Hold, value: str | None) -> bool:
    """End one read-write hold: its release script once per level, with the
    hold's id (from its hash field's ``value``, ``"<count>|<fence>|<hold id>"``).
    Returns whether any level was released."""
    count, _, rest = (value or "").partition("|")
    fence, _, hold_id = rest.partition("|")
    if not count or not hold_id or fence != str(hold.fence):
        return False  # the hold ended, or is another one now
    mode: rwlock_plans.Mode = "write" if hold.mode == "write" else "read"
    released = False
    try:
        while True:
            left = run(
                client,
                rwlock_plans.release(keys, hold.holder, mode, hold_id, hold.fence, op=new_op()),
            )
            released = True
            if left <= 0:
                return True
    except NotOwnedError:
        return released  # the hold ended meanwhile


def _release_holds(
    client: redis.Redis, lock: Target, before: LockView, holds: Sequence[Hold]
) -> tuple[list[Hold], list[Hold]]:
    """Run the normal release of each of ``holds``: (removed, gone)."""
    removed: list[Hold] = []
    gone: list[Hold] = []
    values: dict[str, str] = {}
    if lock.kind == "ReadWriteLock":
        values = run(client, read_hold_values(_keys_as(lock, RWLockKeys)))
    # A semaphore's count, for its release script when Redis stores none (7 days
    # after its last acquire or set_permits): the permits held, all free once
    # released.
    detail = before.detail
    stored = detail.permits if isinstance(detail, SemaphoreInfo) else 0
    permits = stored or max(1, sum(h.count for h in holds_of(before)))
    for hold in holds:
        done = False
        try:
            if lock.kind == "Lock":
                run(client, lock_plans.release(_keys_as(lock, LockKeys), hold.holder, hold.fence))
                done = True
            elif lock.kind == "FairLock":
                run(client, fair_plans.release(_keys_as(lock, FairKeys), hold.holder, hold.fence))
                done = True
            elif lock.kind == "RLock":
                keys = _keys_as(lock, LockKeys)
                while True:
                    left = run(client, rlock_plans.release(keys, hold.holder, hold.fence))
                    done = True
                    if left <= 0:
                        break
            elif lock.kind == "ReadWriteLock":
                field_name = ("w:" if hold.mode == "write" else "r:") + hold.holder
                done = _release_rw_hold(
                    client, _keys_as(lock, RWLockKeys), hold, values.get(field_name)
                )
            elif lock.kind == "Semaphore":
                run(
                    client,
                    semaphore_plans.release(
                        _keys_as(lock, SemaphoreKeys), hold.holder, hold.count, permits, 0
                    ),
                )
                done = True
        except NotOwnedError:
            pass  # the hold ended meanwhile (after its first level, or entirely)
        (removed if done else gone).append(hold)
    return removed, gone


def force_release(
    client: redis.Redis, lock: Target, *, token: str | None = None
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
        InvalidArgument: ``lock`` is a CountDownLatch (it has no holder), or
            ``token`` is given for another kind than Semaphore.
    """
    if lock.kind not in RELEASABLE:
        raise InvalidArgument(f"a {lock.kind} is not a lock: it has no holder to release")
    if token is not None and lock.kind != "Semaphore":
        raise InvalidArgument("a token picks one lease of a Semaphore only")
    before = run(client, read_lock(lock))
    holds = [h for h in holds_of(before) if token is None or h.holder == token]
    if not holds:
        return None
    removed, gone = _release_holds(client, lock, before, holds)
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


def seconds(value: float | None) -> str:
    """A duration for people: ``9.52s``, or ``-`` for none."""
    return "-" if value is None else f"{value:.2f}s"


def _waiting_lines(view: LockView) -> list[str]:
    lines = []
    for i, w in enumerate(view.waiting, 1):
        what = [f"lease {seconds(w.lease) if w.lease is not None else '?'}"]
        if w.permits is not None:
            what.insert(0, f"{w.permits} permit{'s' if w.permits != 1 else ''}")
        if w.queued_for is not None:
            what.append(f"queued {seconds(w.queued_for)} ago")
        if w.deadline is not None:
            what.append(f"dropped in {seconds(w.deadline)} unless it calls again")
        mode = f"{w.mode} " if w.mode else ""
        lines.append(f"    {i}. {mode}{w.holder} ({', '.join(what)}, waiter {w.waiter})")
    if view.waiters > len(view.waiting) > 0:
        lines.append(f"    ... and {view.waiters - len(view.waiting)} more")
    return lines


def _no_expiry(ttl: float | None) -> str:
    return "no expiry" if ttl is None else seconds(ttl)


def describe(view: LockView) -> list[str]:
    """``inspect``'s text for one primitive (names and keys :func:`shown`, no
    control character left in a line)."""
    return [_one_line(line) for line in _describe(view)]


def _describe(view: LockView) -> list[str]:
    lines = [f"{view.kind} {view.name!r} (key {shown(view.key)})"]
    detail = view.detail
    if isinstance(detail, CountDownLatchInfo):
        state = "open" if detail.count == 0 else "closed"
        lines.append(f"  count    {detail.count} ({state})")
        lines.append(f"  opened   {detail.opened or '-'}")
        return lines
    if isinstance(detail, SemaphoreInfo):
        total = detail.permits or "?"
        lines.append(f"  permits  {total} ({detail.available} available)")
        lines.append(f"  holders  {len(detail.holders) or 'none'}")
        for h in detail.holders:
            n = f"{h.permits} permit{'s' if h.permits != 1 else ''}"
            lines.append(f"    {h.token} ({n}, ttl {seconds(h.ttl)})")
    elif isinstance(detail, ReadWriteInfo):
        lines.append(f"  mode     {detail.mode or 'free'}")
        lines.append(f"  holders  {len(detail.holders) or 'none'}")
        for rw in holds_of(view):
            lines.append(
                f"    {rw.mode:<5}  {rw.holder} (hold count {rw.count}, fence {rw.fence}, "
                f"ttl {seconds(rw.ttl)})"
            )
    elif view.held:
        holder = view.holder if view.kind != "RLock" else f"{view.holder} (hold count {view.count})"
        lines += [f"  holder   {holder}", f"  ttl      {_no_expiry(view.ttl)}"]
    else:
        lines.append("  holder   free")
    lines.append(f"  fence    {view.fence or '-'}")
    writers = ""
    if isinstance(detail, ReadWriteInfo) and detail.waiting_writers:
        s = "s" if detail.waiting_writers != 1 else ""
        writers = f" ({detail.waiting_writers} writer{s})"
    lines.append(f"  waiters  {view.waiters}{writers}")
    return lines + _waiting_lines(view)


def holder_summary(view: LockView) -> str:
    """``ls``'s HOLDER column: who holds it (the first of several, and how many
    more), or ``free``; a latch's count, or ``open``."""
    detail = view.detail
    if isinstance(detail, CountDownLatchInfo):
        return f"count {detail.count}" if detail.count else "open"
    holds = holds_of(view)
    if not holds:
        if isinstance(detail, SemaphoreInfo):
            return f"free (0/{detail.permits or '?'})"
        return "free"
    first, more = holds[0], f" +{len(holds) - 1} more" if len(holds) > 1 else ""
    if isinstance(detail, SemaphoreInfo):
        held = sum(h.count for h in holds)
        return f"{first.holder} x{first.count}{more} ({held}/{detail.permits or '?'})"
    if isinstance(detail, ReadWriteInfo):
        count = f" x{first.count}" if first.count > 1 else ""
        return f"{first.holder}{count} ({first.mode}){more}"
    return view.holder + (f" x{view.count}" if view.kind == "RLock" else "")


def _hold_text(kind: Kind, hold: Hold) -> str:
    if kind == "Semaphore":
        n = f"{hold.count} permit{'s' if hold.count != 1 else ''}"
        return f"lease {hold.holder} ({n}, ttl left {_no_expiry(hold.ttl)})"
    return (
        f"{hold.mode} hold of {hold.holder} (hold count {hold.count}, fence {hold.fence}, "
        f"ttl left {_no_expiry(hold.ttl)})"
    )


def _now_text(view: LockView) -> str:
    """Where a primitive stands after a forced release, in a few words."""
    detail = view.detail
    if isinstance(detail, SemaphoreInfo):
        held = sum(h.permits for h in detail.holders)
        return f"now {held} of {detail.permits or '?'} permits held"
    if isinstance(detail, ReadWriteInfo) and detail.mode == "write":
        return f"now write-held by {view.holder} (fence {view.fence})"
    if isinstance(detail, ReadWriteInfo) and detail.mode == "read":
        owners = len({h.owner for h in detail.holders})
        return f"now read-held by {owners} owner{'s' if owners != 1 else ''}"
    return f"now held by {view.holder} (fence {view.fence})" if view.held else "now free"


def describe_release(done: ForcedRelease) -> list[str]:
    """``release --force``'s text: what was removed, and where the lock went (no
    control character left in a line)."""
    return [_one_line(line) for line in _describe_release(done)]


def _describe_release(done: ForcedRelease) -> list[str]:
    b, a = done.before, done.after
    label = f"{b.kind} {b.name!r} (key {shown(b.key)})"
    now = _now_text(a)
    if not done.released:
        return [f"{label} changed hands before the release: nothing was removed; {now}"]
    if b.kind in SINGLE_HOLDER:
        holder = b.holder if b.kind != "RLock" else f"{b.holder} (hold count {b.count})"
        lines = [
            f"released {label}",
            f"  removed  holder {holder}",
            f"  fence    {b.fence or '-'}",
            f"  ttl left {_no_expiry(b.ttl)}",
        ]
        if a.held and a.holder != b.holder:
            lines.append(f"  handed to the first waiter: {a.holder} (fence {a.fence})")
        elif a.held:
            lines.append(f"  {now}")
        else:
            lines.append("  now free (nobody was waiting)")
        return lines
    lines = [f"released {label}"]
    lines += [f"  removed  {_hold_text(b.kind, h)}" for h in done.removed]
    lines += [f"  gone     {_hold_text(b.kind, h)}: it ended first" for h in done.gone]
    if b.kind == "ReadWriteLock":
        lines.append(f"  fence    {b.fence or '-'}")
    before = {(h.holder, h.mode) for h in holds_of(b)}
    handed = [h for h in holds_of(a) if (h.holder, h.mode) not in before]
    for new in handed:
        if b.kind == "Semaphore":
            n = f"{new.count} permit{'s' if new.count != 1 else ''}"
            lines.append(f"  handed to a waiter: {new.holder} ({n})")
        else:
            lines.append(f"  handed to a waiter: {new.holder} ({new.mode}, fence {new.fence})")
    if not handed and not holds_of(a):
        lines.append("  now free (nobody was waiting)")
    else:
        lines.append(f"  {now}")
    return lines


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
        latch = v.kind == "CountDownLatch"
        waiters = "-" if latch else str(v.waiters)
        rows.append((v.kind, v.name, holder_summary(v), ttl, str(v.fence or "-"), waiters))
    return table(rows)


def dumps(value: object) -> str:
    """``value`` as indented JSON."""
    return json.dumps(value, indent=2, sort_keys=False)
