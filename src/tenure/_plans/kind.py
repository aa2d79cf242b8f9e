"""What a kind of primitive is, for the operator tools, the CLI, doctor and the hub.

Each primitive's plans module ends with one :class:`Kind` (``lock.LOCK``,
``rlock.RLOCK``, ``fair.FAIR``, ``rwlock.RWLOCK``, ``semaphore.SEMAPHORE``,
``latch.LATCH``), and :mod:`.kinds` lists them all: ``tenure inspect``, ``ls``,
``release --force``, ``doctor --kind`` and the wake hub's pass-on look a kind up
there and never switch on its name. A kind says its public name, its keys
(built by :mod:`tenure._keys`, whose :data:`~tenure._keys.MARKERS` and
:data:`~tenure._keys.ROLES` it reads rather than copies), how to read it into
the operator's snapshot (:class:`LockView`, a plan), how to describe that
snapshot in text and JSON, how to break its holds (a plan running the normal,
token-checked release of each hold), what the hub runs to pass on a hand-off
nobody waits for, and its ``release`` flag.

This module also holds the snapshot types and the text helpers that the
kinds share. It imports no primitive's plans (they import it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from .._errors import InvalidArgument, NotOwnedError
from .._keys import MARKERS, ROLES, LatchKeys, LockKeys
from .._protocol import Command, Plan
from .._scripts import ScriptSpec

K = TypeVar("K", bound=LockKeys | LatchKeys)
D = TypeVar("D")

#: How a forced release ends holds: ``(keys, snapshot before, holds to end,
#: new_op)`` -> a plan returning ``(removed, gone)``. ``new_op`` makes a new
#: operation id (a release that must not be counted twice when retried).
ForceRelease = Callable[
    [K, "LockView", Sequence["Hold"], Callable[[], str]],
    Plan[tuple[list["Hold"], list["Hold"]]],
]


def text(value: object) -> str:
    """A reply item as ``str`` (``bytes`` decoded as UTF-8)."""
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
    """A snapshot of one primitive (see :mod:`tenure._ops` for its JSON shape).

    ``kind`` is the kind's public name (``"Lock"``, ...: :attr:`Kind.name`);
    ``holder`` and ``count`` describe the one holder (the first of several);
    ``pttl_ms`` is the lease left in milliseconds (-1: no expiry, -2: free);
    ``detail`` is the library's ``info()`` snapshot for a kind whose holders
    or state say more (a ReadWriteLock, Semaphore or CountDownLatch). A
    CountDownLatch's ``count`` is its count.
    """

    kind: str
    name: str
    key: str
    holder: str
    count: int
    pttl_ms: int
    fence: int
    waiters: int
    waiting: tuple[Waiter, ...] = ()
    detail: object = None

    @property
    def spec(self) -> Kind[Any]:
        """This snapshot's kind, from the registry.

        Raises:
            InvalidArgument: no kind of that name is registered.
        """
        from .kinds import by_name  # the registry imports every kind, which import this

        return by_name(self.kind)

    @property
    def held(self) -> bool:
        """Whether someone holds the lock (or a semaphore's permits)."""
        return bool(self.holder)

    @property
    def exists(self) -> bool:
        """Whether any of its keys exists (a free lock keeps its fence key, an
        open latch its opening number, a semaphore its count)."""
        return self.held or self.fence > 0 or self.waiters > 0 or self.spec.exists(self)

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
        out.update(self.spec.json_extras(self))
        if waiting:
            out["waiting"] = [w.to_json() for w in self.waiting]
        return out


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


# --- reading --------------------------------------------------------------------------------


def detail(view: LockView, of: type[D]) -> D:
    """The ``info()`` snapshot that ``view`` carries (:attr:`LockView.detail`),
    of type ``of`` (a ReadWriteLock's, Semaphore's or CountDownLatch's info).

    Raises:
        TypeError: ``view`` carries no snapshot of that type.
    """
    if not isinstance(view.detail, of):
        raise TypeError(f"a {view.kind} snapshot needs its info, not {view.detail!r}")
    return view.detail


def many_holders_view(
    kind: str,
    keys: LockKeys,
    first: tuple[str, int] | None,
    ttls: Iterable[float],
    fence: int,
    waiters: int,
    info: object,
) -> LockView:
    """The snapshot of a kind with several holds (a ReadWriteLock, a Semaphore):
    ``first`` is the ``(holder, count)`` it names (``None``: nobody holds it), its
    lease the longest of the holds' ``ttls`` (seconds), ``info`` its ``info()``."""
    holder, count = first or ("", 0)
    latest = max(ttls, default=None)
    return LockView(
        kind,
        keys.name,
        keys.lock,
        holder,
        count,
        pttl_ms(latest, first is not None),
        fence,
        waiters,
        detail=info,
    )


def pttl_ms(ttl: float | None, held: bool) -> int:
    """A lease left in seconds as Redis's PTTL would say it (-1 no expiry, -2 free)."""
    if not held:
        return -2
    return -1 if ttl is None else round(ttl * 1000)


_MEMBER = re.compile(r"^([^|]*)\|(\d+)\|(.+)$", re.S)


def parse_waiters(raw: object, now: object) -> tuple[Waiter, ...]:
    """Read ``ZRANGE waiters 0 n WITHSCORES`` (flat or as pairs) against ``TIME``.

    A member is ``"<waiter id>|<lease ms>|<holder>"`` and its score the server
    time in µs when it queued (see ``lock_acquire.lua``). A Semaphore's and a
    ReadWriteLock's members say more in ``<holder>``: their kind's
    :attr:`Kind.refine_waiter` splits it.
    """
    items = list(raw) if isinstance(raw, list | tuple) else []
    if items and not isinstance(items[0], list | tuple):
        items = [items[i : i + 2] for i in range(0, len(items) - 1, 2)]
    seconds, micros = (int(text(v)) for v in now) if isinstance(now, list | tuple) else (0, 0)
    now_us = seconds * 1_000_000 + micros
    out = []
    for member, score in items:
        item = text(member)
        queued_for = (now_us - float(text(score))) / 1e6 if now_us else None
        match = _MEMBER.match(item)
        if match:
            w, lease_ms, holder = match.groups()
            out.append(Waiter(w, holder, int(lease_ms) / 1000, queued_for))
        else:
            out.append(Waiter("", item, None, queued_for))
    return tuple(out)


def same_waiter(waiter: Waiter) -> Waiter:
    """A waiter as it is (the kinds whose members add nothing to the holder)."""
    return waiter


def read_waiters(
    keys: LockKeys, limit: int, refine: Callable[[Waiter], Waiter] = same_waiter
) -> Plan[tuple[Waiter, ...]]:
    """Read the first ``limit`` queued waiters of the lock with ``keys``, each
    passed through ``refine`` (its kind's :attr:`Kind.refine_waiter`)."""
    raw = yield Command(("ZRANGE", keys.waiters, "0", str(limit - 1), "WITHSCORES"))
    now = yield Command(("TIME",))
    return tuple(refine(w) for w in parse_waiters(raw, now))


def with_waiting(
    view: LockView, keys: LockKeys, waiting: int, refine: Callable[[Waiter], Waiter] = same_waiter
) -> Plan[LockView]:
    """``view`` with its first ``waiting`` queued waiters (two more round trips,
    only when someone waits)."""
    if waiting > 0 and view.waiters > 0:
        entries = yield from read_waiters(keys, waiting, refine)
        return replace(view, waiting=entries)
    return view


# --- text -----------------------------------------------------------------------------------


def seconds(value: float | None) -> str:
    """A duration for people: ``9.52s``, or ``-`` for none."""
    return "-" if value is None else f"{value:.2f}s"


def no_expiry(ttl: float | None) -> str:
    """A lease left for people: ``9.52s``, or ``no expiry``."""
    return "no expiry" if ttl is None else seconds(ttl)


def permits_text(n: int) -> str:
    """``1 permit``, ``3 permits``."""
    return f"{n} permit{'s' if n != 1 else ''}"


def waiting_lines(view: LockView) -> list[str]:
    """``inspect``'s lines of the queued waiters listed in ``view``."""
    lines = []
    for i, w in enumerate(view.waiting, 1):
        what = [f"lease {seconds(w.lease) if w.lease is not None else '?'}"]
        if w.permits is not None:
            what.insert(0, permits_text(w.permits))
        if w.queued_for is not None:
            what.append(f"queued {seconds(w.queued_for)} ago")
        if w.deadline is not None:
            what.append(f"dropped in {seconds(w.deadline)} unless it calls again")
        mode = f"{w.mode} " if w.mode else ""
        lines.append(f"    {i}. {mode}{w.holder} ({', '.join(what)}, waiter {w.waiter})")
    if view.waiters > len(view.waiting) > 0:
        lines.append(f"    ... and {view.waiters - len(view.waiting)} more")
    return lines


def queue_lines(view: LockView, writers: str = "") -> list[str]:
    """``inspect``'s closing lines of a lock: its fence, its waiter count (and
    ``writers``, what to say of them) and the waiters listed."""
    return [
        f"  fence    {view.fence or '-'}",
        f"  waiters  {view.waiters}{writers}",
        *waiting_lines(view),
    ]


def one_holder_lines(view: LockView, holder: str) -> list[str]:
    """``inspect``'s lines of a lock with one holder (described as ``holder``)."""
    if view.held:
        lines = [f"  holder   {holder}", f"  ttl      {no_expiry(view.ttl)}"]
    else:
        lines = ["  holder   free"]
    return lines + queue_lines(view)


def release_each(
    holds: Sequence[Hold], end: Callable[[Hold], Plan[bool]]
) -> Plan[tuple[list[Hold], list[Hold]]]:
    """End each of ``holds`` with ``end`` (a plan running the normal release,
    returning whether it removed anything); a hold whose release raised
    :class:`~tenure.NotOwnedError` (it ended meanwhile) removed nothing.
    Returns ``(removed, gone)``."""
    removed: list[Hold] = []
    gone: list[Hold] = []
    for hold in holds:
        try:
            done = yield from end(hold)
        except NotOwnedError:
            done = False
        (removed if done else gone).append(hold)
    return removed, gone


def release_levels(release_one: Callable[[], Plan[int]]) -> Plan[bool]:
    """End a reentrant hold: its normal release (``release_one``, returning the
    hold count left) once per level, until the count is zero. Returns whether
    it removed anything: a hold gone before its first release removed nothing,
    and one gone meanwhile after its first is removed all the same."""
    released = False
    try:
        while True:
            left = yield from release_one()
            released = True
            if left <= 0:
                return True
    except NotOwnedError:
        return released


def more_text(holds: Sequence[Hold]) -> str:
    """``ls``'s note of the holds after the first: `` +2 more``, or nothing."""
    return f" +{len(holds) - 1} more" if len(holds) > 1 else ""


def holder_lines(view: LockView) -> list[str]:
    """``inspect``'s lines of a lock held by one lease token (a Lock, a FairLock)."""
    return one_holder_lines(view, view.holder)


def holder_or_free(view: LockView) -> str:
    """``ls``'s HOLDER column of a lock held by one lease token: it, or ``free``."""
    return view.holder if view.held else "free"


def token_release(
    release: Callable[[K, str, int], Plan[None]],
) -> ForceRelease[K]:
    """The forced release of a kind held by one lease token: its normal
    ``release(keys, token, fence)`` once per hold."""

    def force(
        keys: K, before: LockView, holds: Sequence[Hold], new_op: Callable[[], str]
    ) -> Plan[tuple[list[Hold], list[Hold]]]:
        def end(hold: Hold) -> Plan[bool]:
            yield from release(keys, hold.holder, hold.fence)
            return True

        return (yield from release_each(holds, end))

    return force


def token_release_lines(done: ForcedRelease) -> list[str]:
    """``release --force``'s lines of a lock held by one lease token."""
    return one_holder_release(done, done.before.holder)


def now_text(view: LockView) -> str:
    """Where a lock with one holder stands after a forced release, in a few words."""
    return f"now held by {view.holder} (fence {view.fence})" if view.held else "now free"


def one_holder_release(done: ForcedRelease, holder: str) -> list[str]:
    """``release --force``'s lines after ``released <label>`` for a kind with one
    holder (described as ``holder``): what was removed and where the lock went."""
    b, a = done.before, done.after
    lines = [
        f"  removed  holder {holder}",
        f"  fence    {b.fence or '-'}",
        f"  ttl left {no_expiry(b.ttl)}",
    ]
    if a.held and a.holder != b.holder:
        lines.append(f"  handed to the first waiter: {a.holder} (fence {a.fence})")
    elif a.held:
        lines.append(f"  {a.spec.now_text(a)}")
    else:
        lines.append("  now free (nobody was waiting)")
    return lines


def many_holders_release(
    done: ForcedRelease,
    hold_text: Callable[[Hold], str],
    handed_text: Callable[[Hold], str],
    fence: bool,
) -> list[str]:
    """``release --force``'s lines after ``released <label>`` for a kind with
    several holds: each hold removed or gone (``hold_text``), the fence if
    ``fence``, each new hold a waiter was handed (``handed_text``), and where
    the primitive stands now."""
    b, a = done.before, done.after
    lines = [f"  removed  {hold_text(h)}" for h in done.removed]
    lines += [f"  gone     {hold_text(h)}: it ended first" for h in done.gone]
    if fence:
        lines.append(f"  fence    {b.fence or '-'}")
    before = {(h.holder, h.mode) for h in b.spec.holds(b)}
    after = a.spec.holds(a)
    handed = [h for h in after if (h.holder, h.mode) not in before]
    lines += [f"  handed to a waiter: {handed_text(h)}" for h in handed]
    if not handed and not after:
        lines.append("  now free (nobody was waiting)")
    else:
        lines.append(f"  {a.spec.now_text(a)}")
    return lines


# --- the descriptor -------------------------------------------------------------------------


def one_holder(view: LockView) -> tuple[Hold, ...]:
    """The hold of a kind with one holder: its holder, if held."""
    return (Hold(view.holder, view.count, view.ttl, view.fence),) if view.held else ()


def no_extras(view: LockView) -> dict[str, Any]:
    """No JSON keys beyond the common ones."""
    return {}


def nothing_else(view: LockView) -> bool:
    """No key beyond the lock, its fence and its queue says it exists."""
    return False


def no_release_lines(done: ForcedRelease) -> list[str]:
    """Nothing to say (a kind that can't be released)."""
    return []


@dataclass(frozen=True, slots=True)
class Kind(Generic[K]):
    """Everything the operator tools, the CLI, doctor and the hub need of one kind.

    Attributes:
        name: the public class name (``"Lock"``), as ``inspect`` and the JSON say it.
        option: its ``tenure doctor --kind`` value (``"lock"``, ``"fair"``, ...).
        build: its keys from ``(name, exact key, prefix)``, one of the first two
            ``None`` (a :mod:`tenure._keys` builder; see :func:`named`).
        main_key: the key ``inspect`` shows (the lock, a semaphore's holders, a
            latch's count).
        read: a plan reading it into a :class:`LockView`, with its first
            ``waiting`` queued waiters: ``read(keys, waiting)``.
        describe: ``inspect``'s lines for it after the ``<kind> '<name>' (key
            <key>)`` line.
        summary: ``ls``'s HOLDER column.
        scripts: the scripts it runs (``doctor`` checks their commands).
        acl_keys: every key it uses, main key first (``doctor``'s ACL check; a
            ReadWriteLock's owner key stands for all).
        exact_key: whether it may be given by an exact key (a ``Lock`` only).
        holds: its holds in a snapshot (holder first).
        exists: whether a snapshot shows it exists when it is not held and has
            neither fence nor waiters (a semaphore's count, a latch's count).
        json_extras: the JSON keys it adds to the common ones.
        refine_waiter: what its waiters members add to the holder, split out.
        now_text: where it stands after a forced release, in a few words.
        force_release: a plan ending the given holds with the normal release,
            or ``None`` if it has no holder (a latch).
        release_lines: ``release --force``'s lines after ``released <label>``.
        pass_on: the plan the wake hub runs on a hand-off to a token nobody in
            the process waits with any more, or ``None`` when its waiters give
            back such a hand-off themselves.
        release_flag: ``tenure release``'s flag picking it (``None``: the
            default kind, or not releasable).
        single_holder: whether one lease holds it (``holder`` and ``count`` say all).
        queued: whether its waiters queue in Redis (``ls`` counts them).
        picks_lease: whether ``release --token`` may pick one of its leases.
        instead: what to do instead of ``release``, for a kind that has no
            holder (``"count it down to open it"``).
    """

    name: str
    option: str
    build: Callable[[str | None, str | None, str], K]
    main_key: Callable[[K], str]
    read: Callable[[K, int], Plan[LockView]]
    describe: Callable[[LockView], list[str]]
    summary: Callable[[LockView], str]
    scripts: tuple[ScriptSpec, ...]
    acl_keys: Callable[[K], tuple[str, ...]]
    exact_key: bool = False
    holds: Callable[[LockView], tuple[Hold, ...]] = one_holder
    exists: Callable[[LockView], bool] = nothing_else
    json_extras: Callable[[LockView], dict[str, Any]] = no_extras
    refine_waiter: Callable[[Waiter], Waiter] = same_waiter
    now_text: Callable[[LockView], str] = now_text
    force_release: ForceRelease[K] | None = None
    release_lines: Callable[[ForcedRelease], list[str]] = no_release_lines
    pass_on: Callable[[K, str], Plan[None]] | None = None
    release_flag: str | None = None
    single_holder: bool = True
    queued: bool = True
    picks_lease: bool = False
    instead: str = ""

    @property
    def marker(self) -> str:
        """The marker after a named key's hash tag (``""`` for a ``Lock``), from
        :data:`tenure._keys.MARKERS`."""
        return MARKERS[self.name]

    @property
    def roles(self) -> frozenset[str]:
        """The roles of its sibling keys (besides the main key), from
        :data:`tenure._keys.ROLES`."""
        return ROLES[self.name]

    @property
    def releasable(self) -> bool:
        """Whether ``release --force`` can break it (it has holders)."""
        return self.force_release is not None

    def keys(self, name: str | None, *, key: str | None = None, prefix: str) -> K:
        """Its keys by ``name`` under ``prefix``, or by exact ``key`` (a Lock's only).

        Raises:
            InvalidArgument: both or neither of ``name`` and ``key``, an empty
                one, a bad prefix, or ``key`` for a kind that has no exact-key mode.
        """
        return self.build(name, key, prefix)


def named(kind: str, builder: Callable[..., K]) -> Callable[[str | None, str | None, str], K]:
    """The :attr:`Kind.build` of a kind found by name only, from its
    :mod:`tenure._keys` builder (``builder(name, prefix=prefix)``)."""

    def build(name: str | None, key: str | None, prefix: str) -> K:
        if key is not None or name is None:
            raise InvalidArgument(f"a {kind} is found by name only (only a Lock has an exact key)")
        return builder(name, prefix=prefix)

    return build
