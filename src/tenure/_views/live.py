"""The live views' model: the rows of ``tenure top`` and ``tenure dashboard``.

Both show the same table, made here from the snapshots ``ls`` reads
(:class:`~tenure._plans.kind.LockView`): one :class:`Row` per primitive, its
cells as text (:func:`cells`, under :data:`COLUMNS`), sorted by one of
:data:`SORTS`. How long a holder has held (``held_for``) comes from its own
fence when it has one (a fence is minted from the server's clock, in
microseconds, at the grant), else from the refresh that first showed it
(:class:`HeldClock`). Nothing here reads a clock: the time is an argument.

JSON of one refresh, ``top --json-lines`` (one line each refresh) and the
dashboard's ``api/locks`` (stable: new keys may be added, none removed or
renamed)::

    {"time": 1754300000.25, "prefix": "tenure:", "pattern": "*",
     "sort": "name", "all": false,
     "locks": [<a primitive, as in ls --json>, ...],
     "shown": 1, "total": 3, "skipped": ["<message>"],
     "error": null | "<why the server could not be read>"}

``time`` is when the refresh was made (this machine's clock, Unix seconds).
``locks`` are those shown, in the ``sort`` order: each is the object of
``ls --json`` with two keys added, ``"held_for"`` (seconds the holder has
held, null when free) and ``"held_for_at_least"`` (true when that is only a
lower bound: the holder has no fence of its own, a Semaphore lease, and
already held at the first refresh). Without ``all``, a primitive that is
free, has no waiter and is not a closed latch is left out of ``locks``;
``total`` counts them all. ``skipped`` names the primitives left out because
one of their keys holds another type (as ``ls`` does). ``error`` is set, and
``locks`` empty, when the server could not be read; the next refresh tries
again.

The dashboard's ``api/locks`` adds ``"interval"`` (its seconds between
refreshes), ``"server"`` (the server's address, without user or password)
and ``"table"``: ``{"columns": [...], "sorts": {"<column>": "<sort>"},
"rows": [{"key", "kind", "cells": [...]}]}``, the text of ``top``'s table for
the rows of ``locks`` and the sort of each column that has one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .._plans.kinds import kind_of
from .._plans.snapshot import LockView
from . import holder_summary, to_json
from .kind import seconds
from .kinds import view_of

#: The orders the live views sort by: ``name`` (then kind), ``held`` (longest
#: held first), ``ttl`` (soonest to expire first), ``waiters`` (most first),
#: ``fence`` (newest first).
SORTS: tuple[str, ...] = ("name", "held", "ttl", "waiters", "fence")

#: The table's header (the holder last: the widest, it gives way first).
COLUMNS: tuple[str, ...] = (
    "NAME",
    "KIND",
    "HELD FOR",
    "TTL",
    "FENCE",
    "WAITERS",
    "PERMITS",
    "HOLDER",
)

#: The column each sort orders by.
SORT_COLUMN: dict[str, str] = {
    "name": "NAME",
    "held": "HELD FOR",
    "ttl": "TTL",
    "waiters": "WAITERS",
    "fence": "FENCE",
}

#: A fence older than this (seconds before the server's time) is not taken as
#: its grant's time: it was not minted from the clock.
_OLDEST_FENCE = 10 * 365 * 86400.0


@dataclass(frozen=True, slots=True)
class Row:
    """One primitive as the live views show it.

    Attributes:
        view: the snapshot ``ls`` read.
        held_for: seconds its (first) holder has held it; ``None`` when free.
        at_least: ``held_for`` is only a lower bound (see :class:`HeldClock`).
    """

    view: LockView
    held_for: float | None
    at_least: bool = False

    @property
    def active(self) -> bool:
        """Held, waited for, or a closed latch (a kind with no queue and a count)."""
        v = self.view
        queued = view_of(v.kind).queued
        return v.held or (queued and v.waiters > 0) or (not queued and v.count > 0)


class HeldClock:
    """When each holder seen began to hold, across refreshes.

    A holder with a fence of its own (a Lock's, RLock's, FairLock's, a
    ReadWriteLock hold's) began when that fence was minted: the server's time
    in microseconds at the grant (a fence that can't be such a time is not
    used). Any other (a Semaphore lease) began at the first refresh that
    showed it, which is a lower bound when that was the very first refresh.
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str, str], float] = {}
        self._first: float | None = None

    def rows(self, views: Iterable[LockView], now: float) -> list[Row]:
        """The rows of ``views`` read at ``now`` (the server's clock, in seconds;
        on a cluster, one master's: the masters' clocks are taken to agree);
        holders no longer seen are forgotten."""
        if self._first is None:
            self._first = now
        seen: dict[tuple[str, str, str], float] = {}
        rows = []
        for view in views:
            holds = kind_of(view).holds(view)
            for hold in holds:  # every holder, so that the next first one is timed too
                key = (view.kind, view.name, hold.holder)
                seen[key] = self._seen.get(key, now)
            if not holds:
                rows.append(Row(view, None))
                continue
            fence = holds[0].fence / 1e6
            if now - _OLDEST_FENCE < fence <= now + 1.0:
                rows.append(Row(view, max(0.0, now - fence)))
                continue
            since = seen[view.kind, view.name, holds[0].holder]
            rows.append(Row(view, now - since, at_least=since == self._first))
        self._seen = seen
        return rows


def _sort_key(by: str, row: Row) -> tuple[Any, ...]:
    v = row.view
    name = (v.name, v.kind)
    if by == "held":
        return (row.held_for is None, -(row.held_for or 0.0), *name)
    if by == "ttl":
        return (v.ttl is None, v.ttl or 0.0, *name)
    if by == "waiters":
        return (-(v.waiters if view_of(v.kind).queued else -1), *name)
    if by == "fence":
        return (-v.fence, *name)
    return name


def sort_rows(rows: Iterable[Row], by: str) -> list[Row]:
    """``rows`` in the order ``by`` (one of :data:`SORTS`)."""
    if by not in SORTS:
        raise ValueError(f"unknown sort {by!r}; one of {', '.join(SORTS)}")
    return sorted(rows, key=lambda row: _sort_key(by, row))


def next_sort(by: str) -> str:
    """The sort after ``by`` in :data:`SORTS`, round again after the last."""
    return SORTS[(SORTS.index(by) + 1) % len(SORTS)]


def permits(view: LockView) -> tuple[int, int | None] | None:
    """``(held, stored)`` permits of a kind that has permits (a Semaphore;
    ``stored`` is ``None`` when no count is stored), else ``None``."""
    extras = view_of(view.kind).json_extras(view)
    if "permits" not in extras or "holders" not in extras:
        return None
    return sum(int(h["permits"]) for h in extras["holders"]), extras["permits"]


def cells(row: Row) -> tuple[str, ...]:
    """The row's text, one cell per :data:`COLUMNS` (the holder as ``ls`` shows
    it; ``-`` where a column does not apply)."""
    v = row.view
    held = "-"
    if row.held_for is not None:
        held = ("≥" if row.at_least else "") + duration(row.held_for)
    ttl = seconds(v.ttl) if v.held and v.ttl is not None else ("no expiry" if v.held else "-")
    waiters = str(v.waiters) if view_of(v.kind).queued else "-"
    has = permits(v)
    permit_text = "-" if has is None else f"{has[0]}/{'?' if has[1] is None else has[1]}"
    return (v.name, v.kind, held, ttl, str(v.fence or "-"), waiters, permit_text, holder_summary(v))


def duration(value: float) -> str:
    """A duration for a table cell: ``4.21s``, ``12m05s``, ``3h07m``, ``2d04h``."""
    if value < 60:
        return f"{value:.2f}s"
    whole = int(value)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def row_json(row: Row) -> dict[str, Any]:
    """One row as JSON: ``ls --json``'s object and ``held_for``, ``held_for_at_least``."""
    return {
        **to_json(row.view, waiting=False),
        "held_for": None if row.held_for is None else round(row.held_for, 3),
        "held_for_at_least": row.at_least,
    }


@dataclass(frozen=True, slots=True)
class Frame:
    """One refresh of a live view: the rows read (all of them, in the scan's
    order), what was skipped, or the error that kept the server from being read."""

    time: float
    rows: tuple[Row, ...] = ()
    skipped: tuple[str, ...] = ()
    error: str | None = None

    def shown(self, by: str, every: bool) -> list[Row]:
        """The rows shown: sorted ``by``; only the active ones unless ``every``."""
        return sort_rows((r for r in self.rows if every or r.active), by)


def frame_json(frame: Frame, *, prefix: str, pattern: str, by: str, every: bool) -> dict[str, Any]:
    """One refresh as JSON (the shape in this module's docstring)."""
    shown = frame.shown(by, every)
    return {
        "time": round(frame.time, 3),
        "prefix": prefix,
        "pattern": pattern,
        "sort": by,
        "all": every,
        "locks": [row_json(r) for r in shown],
        "shown": len(shown),
        "total": len(frame.rows),
        "skipped": list(frame.skipped),
        "error": frame.error,
    }


def table_json(rows: Sequence[Row]) -> dict[str, Any]:
    """The rows as text cells, for a page to draw as they are: ``{"columns":
    [...], "sorts": {column: sort}, "rows": [{"key", "kind", "cells": [...]}]}``."""
    return {
        "columns": list(COLUMNS),
        "sorts": {column: by for by, column in SORT_COLUMN.items()},
        "rows": [{"key": r.view.key, "kind": r.view.kind, "cells": list(cells(r))} for r in rows],
    }
