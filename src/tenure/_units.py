"""The one conversion between the API's float seconds and the scripts' integer milliseconds."""

from __future__ import annotations

import math

from ._errors import InvalidArgument


def check_seconds(value: object, what: str, *, allow_zero: bool = False) -> float:
    """Validate a duration given in seconds and return it as a float.

    Raises:
        InvalidArgument: ``value`` is not a real number, is NaN or infinite, or is
            negative (or zero, unless ``allow_zero``). The message names ``what``.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{what} must be a number of seconds, not {value!r}")
    seconds = float(value)
    if math.isnan(seconds) or math.isinf(seconds):
        raise InvalidArgument(f"{what} must be a finite number of seconds, not {value!r}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidArgument(f"{what} must be {bound} seconds, not {value!r}")
    return seconds


def to_ms(value: object, what: str) -> int:
    """Convert a positive duration in seconds to whole milliseconds, rounding up.

    Raises:
        InvalidArgument: as :func:`check_seconds` with ``allow_zero=False``.
    """
    return max(1, math.ceil(check_seconds(value, what) * 1000))
