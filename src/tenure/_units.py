"""The one conversion between the API's float seconds and the scripts' integer
milliseconds, and the checks of every number the API takes.

Limits
------

Every number the API takes is checked here, before anything is sent to Redis;
one out of range raises :class:`~tenure.InvalidArgument` naming the argument
and the value. ``bool`` is refused wherever a number is expected, and so are
NaN and the infinities.

- **Durations** (``ttl``, ``timeout``, ``extend(seconds)``, ``lock_delay``,
  ``waiter_timeout``, ``replica_timeout``, ``AdaptiveTTL``'s bounds, a latch's
  wait; ``tenure run``'s ``--ttl``, ``--wait`` and ``--grace``): seconds as an
  ``int`` or ``float``, at most :data:`MAX_SECONDS` (365 days, 3.2e10 ms). The
  scripts get whole milliseconds, rounded up (:func:`to_ms`). Every sum a
  script makes then stays exact both as a Lua number (a double: integers up to
  2**53, 9e15) and as a Redis integer (signed 64 bits): the server clock in ms
  (1.8e12 today) plus a lease and its lock-delay, as a ``PX`` or as a sorted-set
  score; fences and arrival scores in µs (1.8e15 today) stay below 2**53 until
  the year 2255. A year is also far below the longest wait of a thread
  (``threading.TIMEOUT_MAX``), and far above any sensible lease or wait: a
  larger value is a mistake in units (milliseconds passed as seconds) rather
  than a wish. ``timeout=None`` waits without limit.
- **A lease length** (``ttl``, ``extend(seconds)``, ``AdaptiveTTL`` floor and
  ceiling) is also at least :data:`MIN_TTL` (10 ms). A client trusts a lease
  for its ttl less 1 % and 2 ms from the moment its acquire was sent
  (:func:`tenure._plans.waiting.validity`): a ttl of 2 ms or less is dead on
  arrival, and at 10 ms about 8 ms remain, enough for one round trip on a
  local network. Redis keeps expiry in whole milliseconds.
- **Counts** (a semaphore's ``permits``, a latch's count, ``min_replicas``,
  an info ``limit``, ``AdaptiveTTL`` window, a fence): ``int`` from 1 (0 for
  ``min_replicas``, ``limit`` and a fence) up to :data:`MAX_COUNT` = 2**53 - 1,
  the largest range in which every integer is a Lua number exactly (the
  scripts read counts with ``tonumber``, compare and subtract them, and reply
  with them; Redis's ``DECR`` would hold more, Lua would not).
- **Permits in one lease** (``Semaphore.acquire(n)``): at most
  :data:`MAX_LEASE_PERMITS` (10 000), and at most the count. A lease is one
  sorted-set member per permit, written, renewed and removed by one script
  call: 10 000 members take some 30 ms of the server's time (during which no
  other command runs), a million take seconds and megabytes.
- ``AdaptiveTTL``'s ``factor`` is a number from 1 to 1000.
"""

from __future__ import annotations

import math

from ._errors import InvalidArgument

#: The longest duration the API takes, in seconds: 365 days.
MAX_SECONDS = 365 * 24 * 3600

#: The shortest lease (ttl), in seconds: 10 ms.
MIN_TTL = 0.01

#: The largest count (permits, latch count, ...): 2**53 - 1, exact as a Lua number.
MAX_COUNT = 2**53 - 1

#: The most permits one semaphore lease may take.
MAX_LEASE_PERMITS = 10_000


def check_seconds(value: object, what: str, *, allow_zero: bool = False) -> float:
    """Validate a duration given in seconds and return it as a float.

    Raises:
        InvalidArgument: ``value`` is not an ``int`` or ``float`` (a ``bool`` is
            refused), is NaN or infinite, is negative (or zero, unless
            ``allow_zero``), or is more than :data:`MAX_SECONDS`. The message
            names ``what`` and the value.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{what} must be a number of seconds, not {value!r}")
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        raise InvalidArgument(f"{what} must be a finite number of seconds, not {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidArgument(f"{what} must be {bound} seconds, not {value!r}")
    if value > MAX_SECONDS:
        raise InvalidArgument(
            f"{what} must be at most {MAX_SECONDS} seconds (365 days), not {value!r}"
        )
    return float(value)


def check_ttl(value: object, what: str = "ttl") -> float:
    """Validate a lease length in seconds, :data:`MIN_TTL` to :data:`MAX_SECONDS`.

    Raises:
        InvalidArgument: as :func:`check_seconds`, or ``value`` is below
            :data:`MIN_TTL` (a lease that short is lost before its holder
            hears of it).
    """
    seconds = check_seconds(value, what)
    if seconds < MIN_TTL:
        raise InvalidArgument(
            f"{what} must be at least {MIN_TTL} seconds (a shorter lease is over before "
            f"its acquire returns), not {value!r}"
        )
    return seconds


def to_ms(value: object, what: str) -> int:
    """Convert a positive duration in seconds to whole milliseconds, rounding up
    (``1.1`` is 1100 ms, ``0.0015`` is 2 ms, ``1e-6`` is 1 ms).

    Raises:
        InvalidArgument: as :func:`check_seconds` with ``allow_zero=False``.
    """
    # round first: 1.1 * 1000 is 1100.0000000000002 in floating point
    return max(1, math.ceil(round(check_seconds(value, what) * 1000, 6)))


def check_count(value: object, what: str, *, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """Return ``value`` if it is an ``int`` from ``minimum`` to ``maximum``
    (default 1 to :data:`MAX_COUNT`); a ``bool`` is refused.

    Raises:
        InvalidArgument: otherwise; the message names ``what`` and the value.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        top = "2**53 - 1" if maximum == MAX_COUNT else str(maximum)
        raise InvalidArgument(f"{what} must be an int from {minimum} to {top}, not {value!r}")
    return value


#: :func:`lease_ms` of the float lease lengths seen lately (a lock asks it at
#: every acquire, nearly always for the same few lengths).
_LEASE_MS: dict[float, int] = {}


def lease_ms(value: object, what: str = "ttl") -> int:
    """A lease length in seconds (:func:`check_ttl`) as whole milliseconds, rounded up.

    Raises:
        InvalidArgument: as :func:`check_ttl`.
    """
    if type(value) is float:
        ms = _LEASE_MS.get(value)
        if ms is None:
            ms = to_ms(check_ttl(value, what), what)
            if len(_LEASE_MS) >= 1024:
                _LEASE_MS.clear()
            _LEASE_MS[value] = ms
        return ms
    return to_ms(check_ttl(value, what), what)
