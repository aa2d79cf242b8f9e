"""What a kind of primitive is, for the decisions of the operator tools, doctor and the hub.

Each primitive's plans module ends with one :class:`Kind` (``lock.LOCK``,
``rlock.RLOCK``, ``fair.FAIR``, ``rwlock.RWLOCK``, ``semaphore.SEMAPHORE``,
``latch.LATCH``), and :mod:`.kinds` lists them all: ``tenure inspect``, ``ls``,
``release --force``, ``doctor --kind`` and the wake hub's pass-on look a kind up
there and never switch on its name. A kind says its public name, its keys
(built by :mod:`tenure._keys`, whose :data:`~tenure._keys.MARKERS` and
:data:`~tenure._keys.ROLES` it reads rather than copies), how to read it into
the operator's snapshot (:class:`LockView`, a plan), how to break its holds (a
plan running the normal, token-checked release of each hold), what the hub
runs to pass on a hand-off nobody waits for, and what doctor checks of it.
How the commands show a snapshot, in text and JSON, is not decided here: see
:mod:`tenure._views`, a layer above.

The snapshot types that the kinds share are :mod:`.snapshot`'s, imported on
the first read. This module imports no primitive's plans (they import it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Generic, TypeVar

from .._errors import InvalidArgument, NotOwnedError
from .._keys import MARKERS, ROLES, LockKeys
from .._protocol import Command, Plan, text
from .._scripts import ScriptSpec

if TYPE_CHECKING:  # (imported by the first read: see .snapshot)
    from .._keys import LatchKeys
    from .snapshot import Hold, LockView, Waiter

K = TypeVar("K", bound="LockKeys | LatchKeys")  # (a latch's keys: imported by its kind)
D = TypeVar("D")

#: How a forced release ends holds: ``(keys, snapshot before, holds to end,
#: new_op)`` -> a plan returning ``(removed, gone)``. ``new_op`` makes a new
#: operation id (a release that must not be counted twice when retried).
ForceRelease = Callable[
    [K, "LockView", Sequence["Hold"], Callable[[], str]],
    Plan[tuple[list["Hold"], list["Hold"]]],
]


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
    *,
    label: str | None = None,
) -> LockView:
    """The snapshot of a kind with several holds (a ReadWriteLock, a Semaphore):
    ``first`` is the ``(holder, count)`` it names (``None``: nobody holds it), its
    lease the longest of the holds' ``ttls`` (seconds), ``info`` its ``info()``."""
    from .snapshot import LockView

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
        label=label,
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
    from .snapshot import Waiter

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


# --- the descriptor -------------------------------------------------------------------------


def one_holder(view: LockView) -> tuple[Hold, ...]:
    """The hold of a kind with one holder: its holder, if held."""
    from .snapshot import Hold

    return (
        (Hold(view.holder, view.count, view.ttl, view.fence, label=view.label),)
        if view.held
        else ()
    )


def nothing_else(view: LockView) -> bool:
    """No key beyond the lock, its fence and its queue says it exists."""
    return False


@dataclass(frozen=True, slots=True)
class Kind(Generic[K]):
    """What the code decides about one kind: its keys, how to read it, how to
    break its holds, what the hub runs for it and what doctor checks of it.
    How the operator commands show it is its view
    (:class:`tenure._views.kind.KindView`, of the same ``name``).

    Attributes:
        name: the public class name (``"Lock"``), as ``inspect`` and the JSON say it.
        build: its keys from ``(name, exact key, prefix)``, one of the first two
            ``None`` (a :mod:`tenure._keys` builder; see :func:`named`).
        read: a plan reading it into a :class:`LockView`, with its first
            ``waiting`` queued waiters: ``read(keys, waiting)``.
        scripts: the scripts it runs (``doctor`` checks their commands).
        acl_keys: every key it uses, main key first (``doctor``'s ACL check; a
            ReadWriteLock's owner key stands for all).
        exact_key: whether it may be given by an exact key (a ``Lock`` only).
        holds: its holds in a snapshot (holder first).
        exists: whether a snapshot shows it exists when it is not held and has
            neither fence nor waiters (a semaphore's count, a latch's count).
        refine_waiter: what its waiters members add to the holder, split out.
        force_release: a plan ending the given holds with the normal release,
            or ``None`` if it has no holder (a latch).
        pass_on: the plan the wake hub runs on a hand-off to a token nobody in
            the process waits with any more, or ``None`` when its waiters give
            back such a hand-off themselves.
        picks_lease: whether ``release --token`` may pick one of its leases.
    """

    name: str
    build: Callable[[str | None, str | None, str], K]
    read: Callable[[K, int], Plan[LockView]]
    scripts: tuple[ScriptSpec, ...]
    acl_keys: Callable[[K], tuple[str, ...]]
    exact_key: bool = False
    holds: Callable[[LockView], tuple[Hold, ...]] = one_holder
    exists: Callable[[LockView], bool] = nothing_else
    refine_waiter: Callable[[Waiter], Waiter] = same_waiter
    force_release: ForceRelease[K] | None = None
    pass_on: Callable[[K, str], Plan[None]] | None = None
    picks_lease: bool = False

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
