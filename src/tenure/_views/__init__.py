"""The operator's views: how ``tenure inspect``, ``ls`` and ``release --force``
print what :mod:`tenure._ops` read or did, as text and as JSON.

This layer sits above the plans and decides nothing: it takes the snapshots
(:class:`~tenure._plans.kind.LockView`, :class:`~tenure._plans.kind.ForcedRelease`)
and asks each kind's view (:mod:`.kinds`, found by the snapshot's kind name)
for its lines, its ``ls`` column and its JSON keys. It does no I/O.

JSON shape of one primitive, in ``inspect --json`` and ``ls --json`` (stable:
new keys may be added, none removed or renamed)::

    {"kind": "Lock" | "RLock" | "FairLock" | "ReadWriteLock" | "Semaphore"
             | "CountDownLatch" | "Election",
     "name": "orders:42", "key": "tenure:{orders:42}",
     "held": true, "holder": "<token or owner id>" | null,
     "label": "web-3 pid 4711 (celery worker)" | null, "count": 1,
     "ttl": 9.52 | null, "fence": 1754300000000001 | null, "waiters": 1,
     "waiting": [{"waiter": "<hub id>", "holder": "<token or owner id>", "label": ...,
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
:data:`tenure._ops.WAITERS_SHOWN` queued waiters in queue order, each with the lease it
asked for and how long it has been queued (by the server's clock).

Per kind, these keys are added (each view's ``json_extras``, :mod:`.kinds`):

- ``FairLock``: each ``waiting`` entry has ``"deadline"``: seconds until the
  waiter is dropped unless it calls again (``queued_for`` is null).
- ``ReadWriteLock``: ``"mode": "read" | "write" | null``, ``"waiting_writers"``,
  ``"holders": [{"owner", "mode", "count", "ttl", "fence", "label"}]`` (latest expiry
  last); each ``waiting`` entry has ``"mode"``, and its ``holder`` is the owner id.
- ``Semaphore``: ``"permits"`` (the stored count, null when none is stored),
  ``"available"`` (null likewise), ``"holders": [{"token", "permits", "ttl", "label"}]``
  (first to expire first); each ``waiting`` entry has ``"permits"``.
- ``CountDownLatch``: ``"count"`` is the latch's count, ``"open"`` whether it
  is zero, ``"opened"`` the number that grows each time it opens (null if none
  is known); ``label`` is who set the count (null while it is zero, or when it
  was set without a label or by an older tenure); ``held`` is false,
  ``holder``, ``ttl``, ``fence`` and ``waiters`` are null (a latch's waiters
  are not queued in Redis).

- ``Election``: ``"leader": {"label", "term", "sequence", "value", "value_hex",
  "since", "ttl"} | null``: the leader's label, its term, the number of its
  value within the term (a ``RedlockElection``'s; 0 for an ``Election``), the
  value it proclaimed (text; hex digits with ``"value_hex": true`` when not
  UTF-8; null for none), when its term was announced (epoch seconds) and its
  lease left;
  null when nobody leads (or the holder has not announced itself yet: then
  ``holder`` shows its lease token). ``waiters`` counts the candidates.

``tenure leader NAME --json`` prints ``{"name", "prefix", "leader": {...} | null}``.

``inspect --json`` prints ``{"name", "key", "prefix", "locks": [...]}``;
``ls --json`` prints ``{"prefix", "pattern", "locks": [...]}``.

``label`` (everywhere a holder is: the primitive, each ``waiting`` entry, each
ReadWriteLock and Semaphore ``holders`` entry) is the holder's label, who
holds in words (``"web-3 pid 4711 (celery worker)"``), or null when the holder
gave none (an older tenure, a foreign client); a CountDownLatch's is its
setter's. A Lock's, FairLock's and
Semaphore's ``holder`` (and ``token``) is the whole token, which carries the
label after a ``;``; an RLock's and ReadWriteLock's is the owner id.

``release --force --json`` prints what was done::

    {"released": true, "kind": "Lock", "name": "orders:42", "key": "tenure:{orders:42}",
     "removed": [{"holder": "<token or owner id>", "label": "..." | null, "count": 1,
                  "ttl": 9.52 | null, "fence": 1754300000000001 | null,
                  "mode": "read" | "write" (ReadWriteLock only)}],
     "gone": [<the same, for holds that ended before they could be removed>],
     "before": <the primitive before, as in ls --json>,
     "after": <the primitive after: held by the first waiters, or free>}
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .._plans.snapshot import ForcedRelease, Hold, LockView, Waiter
from .kind import KindView as KindView
from .kind import seconds
from .kinds import VIEWS as VIEWS
from .kinds import leader_json as leader_json
from .kinds import leader_lines as leader_lines
from .kinds import view_of as view_of

# --- JSON -----------------------------------------------------------------------------------


def waiter_json(waiter: Waiter) -> dict[str, Any]:
    """One queued waiter as a JSON object (``mode``, ``permits`` and ``deadline``
    only for the kinds that have them)."""
    out: dict[str, Any] = {
        "waiter": waiter.waiter,
        "holder": waiter.holder,
        "label": waiter.label,
        "lease": waiter.lease,
        "queued_for": waiter.queued_for,
    }
    for name in ("mode", "permits", "deadline"):
        value = getattr(waiter, name)
        if value is not None:
            out[name] = value
    return out


def to_json(view: LockView, *, waiting: bool = True) -> dict[str, Any]:
    """One primitive as a JSON object; ``waiting=False`` leaves out the waiter list."""
    out: dict[str, Any] = {
        "kind": view.kind,
        "name": view.name,
        "key": view.key,
        "held": view.held,
        "holder": view.holder or None,
        "label": view.label,
        "count": view.count,
        "ttl": view.ttl,
        "fence": view.fence or None,
        "waiters": view.waiters,
    }
    out.update(view_of(view.kind).json_extras(view))
    if waiting:
        out["waiting"] = [waiter_json(w) for w in view.waiting]
    return out


def hold_json(hold: Hold) -> dict[str, Any]:
    """One hold a forced release removed (or found gone) as a JSON object."""
    out: dict[str, Any] = {
        "holder": hold.holder,
        "label": hold.label,
        "count": hold.count,
        "ttl": hold.ttl,
        "fence": hold.fence or None,
    }
    if hold.mode is not None:
        out["mode"] = hold.mode
    return out


def release_json(done: ForcedRelease) -> dict[str, Any]:
    """What ``release --force`` did, as a JSON object (see the module's docstring)."""
    return {
        "released": done.released,
        "kind": done.before.kind,
        "name": done.before.name,
        "key": done.before.key,
        "removed": [hold_json(h) for h in done.removed],
        "gone": [hold_json(h) for h in done.gone],
        "before": to_json(done.before, waiting=False),
        "after": to_json(done.after, waiting=False),
    }


def dumps(value: object) -> str:
    """``value`` as indented JSON."""
    return json.dumps(value, indent=2, sort_keys=False)


# --- text -----------------------------------------------------------------------------------


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
    return [_one_line(line) for line in (_label(view), *view_of(view.kind).describe(view))]


def holder_summary(view: LockView) -> str:
    """``ls``'s HOLDER column: who holds it (the first of several, and how many
    more), or ``free``; a latch's count and who set it, or ``open``."""
    return view_of(view.kind).summary(view)


def describe_release(done: ForcedRelease) -> list[str]:
    """``release --force``'s text: what was removed, and where the lock went (no
    control character left in a line)."""
    return [_one_line(line) for line in _describe_release(done)]


def _describe_release(done: ForcedRelease) -> list[str]:
    label = _label(done.before)
    if not done.released:
        now = view_of(done.after.kind).now_text(done.after)
        return [f"{label} changed hands before the release: nothing was removed; {now}"]
    return [f"released {label}", *view_of(done.before.kind).release_lines(done)]


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
        waiters = str(v.waiters) if view_of(v.kind).queued else "-"
        rows.append((v.kind, v.name, holder_summary(v), ttl, str(v.fence or "-"), waiters))
    return table(rows)
