"""Plan helpers that several kinds share: the fence key's lifetime, the release
and renewal replies, and the least lease a renewal may find left.

Nothing here is one primitive's: :mod:`.lock`, :mod:`.fair`, :mod:`.rlock`,
:mod:`.rwlock` and :mod:`.semaphore` import these from here. Waiting (the loop,
the clock type, :func:`~.waiting.validity`) is :mod:`.waiting`'s.
"""

from __future__ import annotations

import math

from .._errors import NotOwnedError
from .._protocol import Eval, Plan, Status
from .waiting import Clock, validity

#: How long a fence key is kept after each grant or renewal that writes it (ms):
#: 10 minutes, or the lease granted with it when that is longer
#: (:func:`fence_keep_ms`; the scripts of the other kinds take the longer of the
#: two themselves, and keep the key while the holds that share its fence last).
#:
#: A fence is ``max(last + 1, server TIME in µs)``. The stored ``last`` only
#: matters when it is not below the clock: after several grants within one
#: microsecond (then it is a few µs ahead), or after the server's clock was
#: stepped back. After a backward step of D, ``last`` is up to D ahead of the
#: clock until the clock catches up, D of real time later. Once the key has
#: expired the next fence is the clock alone. What this lifetime costs, then:
#: **after a backward step of the server's clock by more than 10 minutes, a name
#: left idle for longer than its fence key lives but for less than the step can
#: be granted a fence smaller than one given out before** (as after a restart
#: that lost the key, or a failover to a server whose clock is behind by more
#: than the time between two grants). Backward steps of less than 10 minutes in all
#: never make a fence go backwards: the key outlives them.
#:
#: The lease matters only for the grant's own retries: an acquire retried after
#: its reply was lost (or a hand-off whose message was lost) finds its token
#: holding the lock and reads its fence back from the key, within the lease it
#: was granted (the caller can't renew a lease it has not heard of).
FENCE_KEEP_MS = 10 * 60 * 1000


def fence_keep_ms(lease_ms: int) -> int:
    """The fence key's lifetime (ms) for a grant of a ``lease_ms`` lease:
    :data:`FENCE_KEEP_MS`, or the lease when that is longer."""
    return max(FENCE_KEEP_MS, lease_ms)


def released(step: Eval, name: str, fence: int) -> Plan[None]:
    """Send the release script call ``step`` of a lock ``name`` (a ``Lock``'s or a
    ``FairLock``'s, which reply alike). ``fence`` is only used in the error message.

    Raises:
        NotOwnedError: the lock was not held with the step's token; nothing was changed.
    """
    status, _ = yield step
    if status is Status.NOT_OWNED:
        raise NotOwnedError(name, fence, "can't release: the lease expired before release")


def extended(
    step: Eval,
    name: str,
    fence: int | None,
    seconds: float,
    now: Clock,
    *,
    lease: str = "the lease",
) -> Plan[float]:
    """Send the renewal script call ``step``, which resets a lease on the lock
    ``name`` to end ``seconds`` from now and replies ``(OK, _)`` or
    ``(NOT_OWNED, late)`` (``late`` 1: refused for having less left than its
    drift allowance). ``fence`` and ``lease`` (what the lease is called) are
    only used in the error message.

    Returns the new ``expires_at`` on the caller's monotonic clock ``now``, read
    just before the call is sent (the drift allowance taken off, see
    :func:`~.waiting.validity`).

    Raises:
        NotOwnedError: the script refused (``NOT_OWNED``); nothing was changed.
    """
    sent_at = now()
    status, late = yield step
    if status is Status.NOT_OWNED:
        raise NotOwnedError(name, fence, extend_refused(late, lease))
    return sent_at + validity(seconds)


def extend_refused(late: object, lease: str = "the lease") -> str:
    """The reason a renewal refused with ``late`` (its ``NOT_OWNED`` reply's
    value: 1 when the lease had too little left) gives; ``lease`` names it."""
    if late == 1:
        return f"can't extend: {lease} was about to expire (less than its drift allowance left)"
    return f"can't extend: {lease} expired before extend"


def least_left_ms(ttl: float) -> int:
    """The least lease, in ms, a renewal of a ``ttl``-second lease may find left:
    the drift allowance of :func:`~.waiting.validity` (the holder's clock has
    given up the lease when less is left)."""
    return math.ceil(round((ttl - validity(ttl)) * 1000, 6))
