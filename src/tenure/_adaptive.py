"""Adaptive lease length: a ttl set from this process's recent hold durations.

For users who cannot guess a ttl and do not want the watchdog: every hold of a
name (acquire to release, or to the moment a lost lease is given up) is
recorded in a sliding window per name, in this process; the next lease of that
name lasts ``factor`` times the window's 99th percentile, within ``floor`` and
``ceiling``. A hold that ran longer than its lease is recorded too, so a ttl
that proved short grows at once.

The history is bounded: it keeps the windows of the :data:`MAX_NAMES` names
most recently used (recorded or asked for) in this process, and forgets the
least recently used beyond that; a forgotten name starts again at ``floor``.
A window holds at most ``window`` floats, so the whole history stays under
``MAX_NAMES`` times ``window`` floats (about 3 MB with the defaults, far less in
practice).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass

from ._errors import InvalidArgument
from ._units import check_count, check_ttl

#: How many names' hold histories a process keeps (the most recently used).
MAX_NAMES = 1024

_mutex = threading.Lock()
_history: OrderedDict[str, deque[float]] = OrderedDict()


def _touch(key: str) -> deque[float] | None:
    """The window of ``key``, now the most recently used (call with ``_mutex``)."""
    window = _history.get(key)
    if window is not None:
        _history.move_to_end(key)
    return window


@dataclass(frozen=True, slots=True)
class AdaptiveTTL:
    """Pass as ``ttl=`` to set each lease's length from recent holds of the name.

    The next lease lasts ``factor`` times the 99th percentile of the last ``window``
    hold durations of the name in this process (seconds), at least ``floor`` and
    at most ``ceiling``; ``floor`` until a hold has been recorded.

    Args:
        floor: the shortest lease, seconds, from 0.01 to a year (default 5).
        factor: the multiple of the recent p99, a number from 1 to 1000 (default 3).
        window: how many recent holds count, an ``int`` >= 1 (default 100).
        ceiling: the longest lease, seconds, from ``floor`` to a year (default 300).

    Raises:
        InvalidArgument: a value out of range (the message names it).

    Example::

        lock = Lock(client, "reports", ttl=AdaptiveTTL(floor=2, factor=4))
    """

    floor: float = 5.0
    factor: float = 3.0
    window: int = 100
    ceiling: float = 300.0

    def __post_init__(self) -> None:
        floor = check_ttl(self.floor, "AdaptiveTTL floor")
        ceiling = check_ttl(self.ceiling, "AdaptiveTTL ceiling")
        if ceiling < floor:
            raise InvalidArgument(
                f"AdaptiveTTL ceiling ({ceiling:g}) is below its floor ({floor:g})"
            )
        factor = self.factor
        if (
            isinstance(factor, bool)
            or not isinstance(factor, int | float)
            or not 1 <= factor <= 1000
        ):
            raise InvalidArgument(
                f"AdaptiveTTL factor must be a number from 1 to 1000, not {factor!r}"
            )
        check_count(self.window, "AdaptiveTTL window")

    def next_ttl(self, key: str) -> float:
        """The lease length, in seconds, for the next hold of the lock with ``key``."""
        with _mutex:
            recent = sorted(list(_touch(key) or ())[-self.window :])
        if not recent:
            return float(self.floor)
        p99 = recent[min(len(recent) - 1, math.ceil(0.99 * len(recent)) - 1)]
        return float(min(self.ceiling, max(self.floor, self.factor * p99)))

    def record(self, key: str, seconds: float) -> None:
        """Note that a hold of the lock with ``key`` lasted ``seconds``."""
        with _mutex:
            window = _touch(key)
            if window is None or window.maxlen != self.window:
                window = _history[key] = deque(window or (), maxlen=self.window)
            window.append(max(0.0, seconds))
            while len(_history) > MAX_NAMES:
                _history.popitem(last=False)
