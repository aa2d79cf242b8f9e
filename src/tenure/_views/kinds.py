"""The views of every registered kind (:class:`~.kind.KindView`), one section a
kind, in the order of :data:`tenure._plans.kinds.KINDS`.

``tests/test_kinds.py`` fails while a registered kind has no view here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .._errors import InvalidArgument
from .._info import CountDownLatchInfo, Leader, ReadWriteInfo, SemaphoreInfo
from .._label import holder_text
from .._plans.kind import detail
from .._plans.kinds import kind_of
from .._plans.snapshot import ForcedRelease, Hold, LockView
from .kind import (
    KindView,
    holder_lines,
    holder_or_free,
    many_holders_release,
    more_text,
    no_expiry,
    now_text,
    one_holder_lines,
    one_holder_release,
    permits_text,
    queue_lines,
    seconds,
    token_release_lines,
)

# --- Lock, FairLock: one lease token ----------------------------------------------------------

LOCK = KindView(
    name="Lock",
    option="lock",
    describe=holder_lines,
    summary=holder_or_free,
    release_lines=token_release_lines,
)

FAIR = KindView(
    name="FairLock",
    option="fair",
    describe=holder_lines,
    summary=holder_or_free,
    release_lines=token_release_lines,
    release_flag="--fair",
)


# --- RLock: one owner, several levels ---------------------------------------------------------


def _rlock_holder(view: LockView) -> str:
    return f"{holder_text(view.holder, view.label)} (hold count {view.count})"


def _rlock_describe(view: LockView) -> list[str]:
    return one_holder_lines(view, _rlock_holder(view))


def _rlock_summary(view: LockView) -> str:
    return (
        f"{holder_text(view.holder, view.label, short=True)} x{view.count}" if view.held else "free"
    )


def _rlock_release_lines(done: ForcedRelease) -> list[str]:
    return one_holder_release(done, _rlock_holder(done.before))


RLOCK = KindView(
    name="RLock",
    option="rlock",
    describe=_rlock_describe,
    summary=_rlock_summary,
    release_lines=_rlock_release_lines,
    release_flag="--rlock",
)


# --- ReadWriteLock ----------------------------------------------------------------------------


def _rw_info(view: LockView) -> ReadWriteInfo:
    return detail(view, ReadWriteInfo)


def _rw_json_extras(view: LockView) -> dict[str, Any]:
    info = _rw_info(view)
    return {
        "mode": info.mode,
        "waiting_writers": info.waiting_writers,
        "holders": [
            {
                "owner": h.owner,
                "mode": h.mode,
                "count": h.count,
                "ttl": h.ttl,
                "fence": h.fence,
                "label": h.label,
            }
            for h in info.holders
        ],
    }


def _rw_describe(view: LockView) -> list[str]:
    info = _rw_info(view)
    lines = [f"  mode     {info.mode or 'free'}", f"  holders  {len(info.holders) or 'none'}"]
    for rw in kind_of(view).holds(view):
        lines.append(
            f"    {rw.mode:<5}  {holder_text(rw.holder, rw.label)} (hold count {rw.count}, "
            f"fence {rw.fence}, "
            f"ttl {seconds(rw.ttl)})"
        )
    writers = ""
    if info.waiting_writers:
        s = "s" if info.waiting_writers != 1 else ""
        writers = f" ({info.waiting_writers} writer{s})"
    return lines + queue_lines(view, writers)


def _rw_summary(view: LockView) -> str:
    holds = kind_of(view).holds(view)
    if not holds:
        return "free"
    first = holds[0]
    count = f" x{first.count}" if first.count > 1 else ""
    who = holder_text(first.holder, first.label, short=True)
    return f"{who}{count} ({first.mode}){more_text(holds)}"


def _rw_now_text(view: LockView) -> str:
    info = _rw_info(view)
    if info.mode == "write":
        return f"now write-held by {holder_text(view.holder, view.label)} (fence {view.fence})"
    if info.mode == "read":
        owners = len({h.owner for h in info.holders})
        return f"now read-held by {owners} owner{'s' if owners != 1 else ''}"
    return now_text(view)


def _rw_hold_text(hold: Hold) -> str:
    return (
        f"{hold.mode} hold of {holder_text(hold.holder, hold.label)} (hold count {hold.count}, "
        f"fence {hold.fence}, "
        f"ttl left {no_expiry(hold.ttl)})"
    )


def _rw_release_lines(done: ForcedRelease) -> list[str]:
    return many_holders_release(
        done,
        _rw_hold_text,
        lambda h: f"{holder_text(h.holder, h.label)} ({h.mode}, fence {h.fence})",
        _rw_now_text,
        fence=True,
    )


RWLOCK = KindView(
    name="ReadWriteLock",
    option="rwlock",
    describe=_rw_describe,
    summary=_rw_summary,
    json_extras=_rw_json_extras,
    now_text=_rw_now_text,
    release_lines=_rw_release_lines,
    release_flag="--rwlock",
)


# --- Semaphore --------------------------------------------------------------------------------


def _sem_info(view: LockView) -> SemaphoreInfo:
    return detail(view, SemaphoreInfo)


def _sem_json_extras(view: LockView) -> dict[str, Any]:
    info = _sem_info(view)
    return {
        "permits": info.permits or None,
        "available": info.available if info.permits else None,
        "holders": [
            {"token": h.token, "permits": h.permits, "ttl": h.ttl, "label": h.label}
            for h in info.holders
        ],
    }


def _sem_describe(view: LockView) -> list[str]:
    info = _sem_info(view)
    lines = [
        f"  permits  {info.permits or '?'} ({info.available} available)",
        f"  holders  {len(info.holders) or 'none'}",
    ]
    for h in info.holders:
        who = holder_text(h.token, h.label)
        lines.append(f"    {who} ({permits_text(h.permits)}, ttl {seconds(h.ttl)})")
    return lines + queue_lines(view)


def _sem_summary(view: LockView) -> str:
    info = _sem_info(view)
    holds = kind_of(view).holds(view)
    if not holds:
        return f"free (0/{info.permits or '?'})"
    first, held = holds[0], sum(h.count for h in holds)
    who = holder_text(first.holder, first.label, short=True)
    return f"{who} x{first.count}{more_text(holds)} ({held}/{info.permits or '?'})"


def _sem_now_text(view: LockView) -> str:
    info = _sem_info(view)
    held = sum(h.permits for h in info.holders)
    return f"now {held} of {info.permits or '?'} permits held"


def _sem_hold_text(hold: Hold) -> str:
    who = holder_text(hold.holder, hold.label)
    return f"lease {who} ({permits_text(hold.count)}, ttl left {no_expiry(hold.ttl)})"


def _sem_release_lines(done: ForcedRelease) -> list[str]:
    return many_holders_release(
        done,
        _sem_hold_text,
        lambda h: f"{holder_text(h.holder, h.label)} ({permits_text(h.count)})",
        _sem_now_text,
        fence=False,
    )


SEMAPHORE = KindView(
    name="Semaphore",
    option="semaphore",
    describe=_sem_describe,
    summary=_sem_summary,
    json_extras=_sem_json_extras,
    now_text=_sem_now_text,
    release_lines=_sem_release_lines,
    release_flag="--semaphore",
)


# --- CountDownLatch: no holder, a setter ------------------------------------------------------


def _latch_info(view: LockView) -> CountDownLatchInfo:
    return detail(view, CountDownLatchInfo)


def _latch_json_extras(view: LockView) -> dict[str, Any]:
    info = _latch_info(view)
    return {"waiters": None, "open": info.count == 0, "opened": info.opened or None}


def _latch_describe(view: LockView) -> list[str]:
    info = _latch_info(view)
    state = "open" if info.count == 0 else "closed"
    lines = [f"  count    {info.count} ({state})"]
    if info.label is not None:  # (only while the count is not zero)
        lines.append(f"  set by   {info.label}")
    return [*lines, f"  opened   {info.opened or '-'}"]


def _latch_summary(view: LockView) -> str:
    info = _latch_info(view)
    if not info.count:
        return "open"
    return f"count {info.count}, set by {info.label}" if info.label else f"count {info.count}"


#: ``release --force`` refuses a latch (it has no holder); ``--latch`` says why.
LATCH = KindView(
    name="CountDownLatch",
    option="latch",
    describe=_latch_describe,
    summary=_latch_summary,
    json_extras=_latch_json_extras,
    release_flag="--latch",
    queued=False,
    instead="count it down to open it",
)


# --- Election: a fair lock whose holder leads -------------------------------------------------


def _leader(view: LockView) -> Leader | None:
    return view.detail if isinstance(view.detail, Leader) else None


def value_text(value: bytes | None) -> str:
    """A proclaimed value for people: its text if it is UTF-8 (quoted), else
    its bytes' ``repr``; ``-`` for none."""
    if value is None:
        return "-"
    try:
        return repr(value.decode())
    except UnicodeDecodeError:
        return repr(value)


def leader_json(lead: Leader | None) -> dict[str, Any]:
    """``{"leader": ...}``: an election's leader as JSON (see the package's docstring)."""
    if lead is None:
        return {"leader": None}
    value: str | None = None
    binary = False
    if lead.value is not None:
        try:
            value = lead.value.decode()
        except UnicodeDecodeError:
            value, binary = lead.value.hex(), True
    return {
        "leader": {
            "label": lead.label,
            "term": lead.term,
            "sequence": lead.sequence,
            "value": value,
            "value_hex": binary,
            "since": lead.since or None,
            "ttl": lead.ttl,
        }
    }


def leader_lines(name: str, lead: Leader) -> list[str]:
    """``tenure leader``'s lines for the leader ``lead`` of the election ``name``."""
    since = datetime.fromtimestamp(lead.since, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return [
        f"leader of {name!r}: {lead.label or '(not announced yet)'}",
        f"  term     {lead.term}",
        *([f"  sequence {lead.sequence}"] if lead.sequence else []),
        f"  value    {value_text(lead.value)}",
        f"  since    {since + ' UTC' if lead.since else '-'}",
        f"  ttl      {seconds(lead.ttl)}",
    ]


def _election_json_extras(view: LockView) -> dict[str, Any]:
    return leader_json(_leader(view))


def _election_describe(view: LockView) -> list[str]:
    lead = _leader(view)
    if lead is None:
        lines = ["  leader   none"]
    else:
        lines = [
            f"  leader   {lead.label or '(not announced yet)'} (term {lead.term})",
            f"  value    {value_text(lead.value)}",
        ]
    return lines + one_holder_lines(view, view.holder)


def _election_summary(view: LockView) -> str:
    lead = _leader(view)
    if lead is None:
        return "no leader"
    return f"{lead.label or view.holder} (term {lead.term})"


ELECTION = KindView(
    name="Election",
    option="election",
    describe=_election_describe,
    summary=_election_summary,
    json_extras=_election_json_extras,
    release_lines=token_release_lines,
    release_flag="--election",
)


# --- the registry -----------------------------------------------------------------------------

#: Every kind's view, in the order of :data:`tenure._plans.kinds.KINDS`.
VIEWS: tuple[KindView, ...] = (LOCK, RLOCK, FAIR, RWLOCK, SEMAPHORE, LATCH, ELECTION)

_BY_NAME: dict[str, KindView] = {v.name: v for v in VIEWS}


def view_of(name: str) -> KindView:
    """The view of the kind whose public name is ``name`` (``"Lock"``, ...).

    Raises:
        InvalidArgument: no kind has that name.
    """
    found = _BY_NAME.get(name)
    if found is None:
        raise InvalidArgument(f"unknown kind {name!r}; one of {', '.join(_BY_NAME)}")
    return found
