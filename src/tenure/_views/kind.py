"""How one kind of primitive looks to the operator: :class:`KindView`, and the
text helpers the kinds' views share.

A :class:`~tenure._plans.kind.Kind` says what the code decides about a kind
(its keys, how to read it, how to break its holds); a :class:`KindView` says
how ``tenure inspect``, ``ls``, ``release --force`` and ``doctor --kind`` show
it: its lines of text, its ``ls`` column, its JSON keys and its command-line
names. :mod:`.kinds` holds one view per registered kind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._label import holder_text
from .._plans.kinds import kind_of
from .._plans.snapshot import ForcedRelease, Hold, LockView

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
        who = holder_text(w.holder, w.label)
        lines.append(f"    {i}. {mode}{who} ({', '.join(what)}, waiter {w.waiter})")
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


def more_text(holds: Sequence[Hold]) -> str:
    """``ls``'s note of the holds after the first: `` +2 more``, or nothing."""
    return f" +{len(holds) - 1} more" if len(holds) > 1 else ""


def holder_lines(view: LockView) -> list[str]:
    """``inspect``'s lines of a lock held by one lease token (a Lock, a FairLock)."""
    return one_holder_lines(view, holder_text(view.holder, view.label))


def holder_or_free(view: LockView) -> str:
    """``ls``'s HOLDER column of a lock held by one lease token: it, or ``free``."""
    return holder_text(view.holder, view.label, short=True) if view.held else "free"


def now_text(view: LockView) -> str:
    """Where a lock with one holder stands after a forced release, in a few words."""
    if not view.held:
        return "now free"
    return f"now held by {holder_text(view.holder, view.label)} (fence {view.fence})"


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
        lines.append(
            f"  handed to the first waiter: {holder_text(a.holder, a.label)} (fence {a.fence})"
        )
    elif a.held:
        lines.append(f"  {now_text(a)}")
    else:
        lines.append("  now free (nobody was waiting)")
    return lines


def token_release_lines(done: ForcedRelease) -> list[str]:
    """``release --force``'s lines of a lock held by one lease token."""
    return one_holder_release(done, holder_text(done.before.holder, done.before.label))


def many_holders_release(
    done: ForcedRelease,
    hold_text: Callable[[Hold], str],
    handed_text: Callable[[Hold], str],
    now: Callable[[LockView], str],
    fence: bool,
) -> list[str]:
    """``release --force``'s lines after ``released <label>`` for a kind with
    several holds: each hold removed or gone (``hold_text``), the fence if
    ``fence``, each new hold a waiter was handed (``handed_text``), and where
    the primitive stands now (``now``)."""
    b, a = done.before, done.after
    lines = [f"  removed  {hold_text(h)}" for h in done.removed]
    lines += [f"  gone     {hold_text(h)}: it ended first" for h in done.gone]
    if fence:
        lines.append(f"  fence    {b.fence or '-'}")
    before = {(h.holder, h.mode) for h in kind_of(b).holds(b)}
    after = kind_of(a).holds(a)
    handed = [h for h in after if (h.holder, h.mode) not in before]
    lines += [f"  handed to a waiter: {handed_text(h)}" for h in handed]
    if not handed and not after:
        lines.append("  now free (nobody was waiting)")
    else:
        lines.append(f"  {now(a)}")
    return lines


def no_extras(view: LockView) -> dict[str, Any]:
    """No JSON keys beyond the common ones."""
    return {}


def no_release_lines(done: ForcedRelease) -> list[str]:
    """Nothing to say (a kind that can't be released)."""
    return []


# --- the descriptor -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KindView:
    """How the operator commands show one kind (its decisions are its
    :class:`~tenure._plans.kind.Kind`, of the same ``name``).

    Attributes:
        name: the kind's public name (``"Lock"``), its :attr:`Kind.name`.
        option: its ``tenure doctor --kind`` value (``"lock"``, ``"fair"``, ...).
        describe: ``inspect``'s lines for it after the ``<kind> '<name>' (key
            <key>)`` line.
        summary: ``ls``'s HOLDER column.
        json_extras: the JSON keys it adds to the common ones.
        now_text: where it stands after a forced release, in a few words.
        release_lines: ``release --force``'s lines after ``released <label>``.
        release_flag: ``tenure release``'s flag picking it (``None``: the
            default kind, or not releasable).
        queued: whether its waiters queue in Redis (``ls`` counts them).
        instead: what to do instead of ``release``, for a kind that has no
            holder (``"count it down to open it"``).
    """

    name: str
    option: str
    describe: Callable[[LockView], list[str]]
    summary: Callable[[LockView], str]
    json_extras: Callable[[LockView], dict[str, Any]] = no_extras
    now_text: Callable[[LockView], str] = now_text
    release_lines: Callable[[ForcedRelease], list[str]] = no_release_lines
    release_flag: str | None = None
    queued: bool = True
    instead: str = ""
