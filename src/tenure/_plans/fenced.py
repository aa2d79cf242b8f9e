"""Plans for fenced resources: writes that a stale lock holder cannot make.

A lease can end without its holder noticing (a pause longer than the ttl). The
resource is then the last line of defence: it accepts a write only with a fence
at least as large as every fence it has accepted (Kleppmann, "How to do
distributed locking", 2016). Equal fences are accepted, so one holder can write
many times.
"""

from __future__ import annotations

from .._errors import InvalidArgument, StaleFenceError
from .._protocol import Command, Eval, Plan, Status
from .._scripts import FENCED_SET
from .._units import MAX_COUNT


def check_fence(fence: object) -> int:
    """Return ``fence`` if it is an ``int`` from 0 to 2**53 - 1 (every fence
    tenure mints is; the script compares fences as Lua numbers).

    Raises:
        InvalidArgument: ``fence`` is not such an ``int`` (bools refused).
    """
    if isinstance(fence, bool) or not isinstance(fence, int) or not 0 <= fence <= MAX_COUNT:
        raise InvalidArgument(
            f"fence must be an int from 0 to 2**53 - 1 (a lease's fence), not {fence!r}"
        )
    return fence


def fenced_set(key: str, seen_key: str, value: str | bytes, fence: int) -> Plan[None]:
    """Store ``value`` at ``key`` if ``fence`` >= the largest fence ``key`` accepted.

    Raises:
        StaleFenceError: a larger fence was accepted before; nothing was written.
        WrongTypeError: ``key`` or its fence key holds a value of another type.
    """
    status, seen = yield Eval(FENCED_SET, (key, seen_key), (str(fence), value))
    if status is Status.STALE:
        raise StaleFenceError(key, fence, int(seen))


def seen(seen_key: str) -> Plan[int]:
    """The largest fence the resource has accepted (0 when none)."""
    value = yield Command(("GET", seen_key))
    return int(value or 0)
