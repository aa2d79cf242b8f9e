"""The registry of kinds: every primitive the operator tools, the CLI, doctor
and the wake hub know, each described once by its plans module (see
:mod:`.kind`).

Adding a primitive means adding its :class:`~.kind.Kind` to :data:`KINDS`;
``tests/test_kinds.py`` fails while a kind of :data:`tenure._keys.MARKERS` (or a
public class of :mod:`tenure`) has none.
"""

from __future__ import annotations

from typing import Any

from .._errors import InvalidArgument
from .._keys import LatchKeys, LockKeys, parse_key
from .election import ELECTION
from .fair import FAIR
from .kind import Kind
from .latch import LATCH
from .lock import LOCK
from .rlock import RLOCK
from .rwlock import RWLOCK
from .semaphore import SEMAPHORE
from .snapshot import LockView

#: Every kind, in the order ``tenure inspect`` shows them.
KINDS: tuple[Kind[Any], ...] = (LOCK, RLOCK, FAIR, RWLOCK, SEMAPHORE, LATCH, ELECTION)

_BY_NAME: dict[str, Kind[Any]] = {kind.name: kind for kind in KINDS}


def by_name(name: str) -> Kind[Any]:
    """The kind whose public name is ``name`` (``"Lock"``, ``"FairLock"``, ...).

    Raises:
        InvalidArgument: no kind has that name.
    """
    kind = _BY_NAME.get(name)
    if kind is None:
        raise InvalidArgument(f"unknown kind {name!r}; one of {', '.join(_BY_NAME)}")
    return kind


def of_keys(keys: LockKeys | LatchKeys) -> Kind[Any] | None:
    """The kind whose keys ``keys`` are (read back from a key tenure derives:
    :func:`tenure._keys.parse_key`), or ``None`` if none is registered."""
    derived = keys.opened if isinstance(keys, LatchKeys) else keys.fence
    info = parse_key(derived)
    return _BY_NAME.get(info.kind) if info is not None else None


def kind_of(view: LockView) -> Kind[Any]:
    """The kind of the snapshot ``view`` (by its :attr:`~.kind.LockView.kind`).

    Raises:
        InvalidArgument: no kind of that name is registered.
    """
    return by_name(view.kind)


def exists(view: LockView) -> bool:
    """Whether any of the keys of the primitive ``view`` shows exists (a free
    lock keeps its fence key, an open latch its opening number, a semaphore its
    count)."""
    return view.held or view.fence > 0 or view.waiters > 0 or kind_of(view).exists(view)
