"""Plans for :class:`tenure.Semaphore`: acquire, release, extend, set the count, inspect.

Every permit is owned by a lease and expires with it, on the server's clock:
the holders are a sorted set with one member per permit, ``"<token>#<i>"``,
scored by the lease's expiry in server milliseconds. Each script first drops
the expired permits, so a crashed holder's permits come back when its lease
ends, and then hands free permits to the queue (``_semaphore.lua``).

The permit count is stored in Redis on first use. An acquire checks it against
the caller's count until its first success (``check``), so that a program
started with another count is told at once; afterwards it follows the stored
count, which :func:`set_permits` may change while the semaphore is in use.

Waiting is :mod:`.waiting`'s loop. The queue is FIFO: a release (or any call
that finds free permits) hands them to the first waiters, in order, while the
first one fits, so a large request blocks those behind it rather than being
starved by small ones; an attempt that is not queued gets permits only while
nobody waits. A hand-off sets the waiter's permits with a lease of its claim
window (extended to the full lease at once, see :mod:`.waiting`), mints its
fence and publishes ``"<fence> <token>"``: the token is new for each acquire,
so the message is trusted as it is, as for :class:`tenure.Lock`.

A waiter that gives up leaves the queue and gives back permits handed to it in
the same script call, so the hub never has to pass a hand-off on (the
:class:`~tenure._protocol.Contend` step's ``pass_on`` is off): a message that
arrives after the plan ended concerns permits that were either given back or
returned to the caller by an attempt.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .._errors import InvalidArgument, NotOwnedError, ProtocolError
from .._keys import SemaphoreKeys, semaphore_keys
from .._label import holder_label
from .._protocol import Command, Eval, Plan, Status, failed_calls_suppressed, text
from .._scripts import (
    SEMAPHORE_ACQUIRE,
    SEMAPHORE_EXTEND,
    SEMAPHORE_INSPECT,
    SEMAPHORE_RELEASE,
    SEMAPHORE_SET_PERMITS,
)
from .._units import MAX_LEASE_PERMITS, check_count, lease_ms
from .common import FENCE_KEEP_MS, extended
from .kind import Kind, detail, many_holders_view, named, release_each, with_waiting
from .waiting import (
    Clock,
    Contender,
    Grant,
    Refused,
    claim_ms,
    handed_off_until,
    validity,
    wait_turn,
)

if TYPE_CHECKING:  # (the snapshot types are imported on first use)
    from .._info import SemaphoreInfo
    from .snapshot import Hold, LockView, Waiter

#: How long the permits key (the stored count) is kept after the last acquire or
#: :func:`set_permits` (ms): 7 days, or the acquire's lease when longer. It is
#: the one key a semaphore keeps on purpose once it is idle: the count a
#: :func:`set_permits` stored, which an acquire follows instead of its own count,
#: and against which a program started with another count is told at once. When
#: it is gone the next acquire stores its caller's count. Its lifetime is its
#: own: the fence key, like every lock's, lives
#: :data:`~tenure._plans.common.FENCE_KEEP_MS`.
PERMITS_KEEP_MS = 7 * 24 * 3600 * 1000


def check_permits(value: object) -> int:
    """Return ``value`` if it is an ``int`` from 1 to 2**53 - 1 (bools refused):
    the scripts hold the count as a Lua number, exact in that range.

    Raises:
        InvalidArgument: otherwise.
    """
    return check_count(value, "permits")


def check_n(n: object, permits: int) -> int:
    """Validate the number of permits asked for, against the semaphore's ``permits``:
    an ``int`` from 1 to :data:`~tenure._units.MAX_LEASE_PERMITS` (one sorted-set
    member per permit is written in one script call) and at most ``permits``.

    Raises:
        InvalidArgument: ``n`` is not such an ``int``, or is more than ``permits``.
    """
    n = check_count(n, "n", maximum=MAX_LEASE_PERMITS)
    if n > permits:
        raise InvalidArgument(f"n={n} is more than the semaphore's {permits} permits")
    return n


def acquire(
    keys: SemaphoreKeys,
    token: str,
    n: int,
    permits: int,
    ttl: float,
    *,
    check: bool,
    blocking: bool,
    timeout: float | None,
    now: Clock,
) -> Plan[Grant | None]:
    """Take ``n`` permits for the lease ``token``, waiting as the module says.

    ``permits`` is the caller's count, stored if Redis has none; with ``check``,
    a different stored count is an error.

    Returns ``None`` when ``blocking`` is false and the permits are not free, or
    when ``timeout`` seconds pass first.

    Raises:
        InvalidArgument: ``ttl`` is not a lease length (0.01 s to a year); with ``check``, Redis
            stores another count; ``n`` is more than the stored count.
        WrongTypeError: one of the semaphore's keys holds another type.
    """
    contender = _SemaphoreContender(keys, token, n, permits, ttl, lease_ms(ttl), check, now)
    return (yield from wait_turn(contender, blocking=blocking, timeout=timeout, now=now))


class _SemaphoreContender(Contender):
    keys: SemaphoreKeys
    listen_first = True
    pass_on = False  # see the module docstring

    def __init__(
        self,
        keys: SemaphoreKeys,
        token: str,
        n: int,
        permits: int,
        ttl: float,
        ttl_ms: int,
        check: bool,
        now: Clock,
    ) -> None:
        self.keys, self.token, self.n, self.permits = keys, token, n, permits
        self.ttl, self.ttl_ms, self.check, self.now = ttl, ttl_ms, check, now

    def member(self, waiter: str) -> str:
        return f"{waiter}|{claim_ms(self.ttl_ms)}|{self.n}|{self.token}"

    def attempt(self, member: str) -> Eval:
        keys = self.keys
        return Eval(
            SEMAPHORE_ACQUIRE,
            keys.script_keys,
            (
                self.token,
                self.n,
                self.ttl_ms,
                self.permits,
                "1" if self.check else "0",
                member,
                keys.wake_prefix,
                FENCE_KEEP_MS,
                PERMITS_KEEP_MS,
            ),
        )

    def outcome(self, status: Status, value: Any, sent_at: float) -> Grant | int | Refused:
        if status is Status.OK:
            return Grant(self.token, int(value), self.ttl, sent_at + validity(self.ttl))
        if status is Status.BUSY:
            return int(value)
        name = self.keys.name
        if status is Status.PERMITS_DIFFER:
            return Refused(
                InvalidArgument(
                    f"semaphore {name!r} has {value} permits in Redis, but this Semaphore was "
                    f"given {self.permits}; call set_permits({self.permits}) to change the count"
                )
            )
        if status is Status.TOO_MANY:
            return Refused(
                InvalidArgument(
                    f"semaphore {name!r} now has {value} permits in Redis (its count was "
                    f"changed), fewer than the {self.n} asked for"
                )
            )
        raise ProtocolError(f"{SEMAPHORE_ACQUIRE.name}: unexpected status {status.name}")

    def handed_off(self, fence: int, queued_at: float) -> Plan[Grant | None]:
        ttl, token = self.ttl, self.token
        refresh = extend(self.keys, token, self.n, self.permits, fence, ttl, self.now)
        until = yield from handed_off_until(ttl, queued_at, self.now, refresh)
        return None if until is None else Grant(token, fence, ttl, until[0], claim=until[1])

    def leave(self, member: str, in_flight: bool) -> Plan[None]:
        with failed_calls_suppressed():
            yield _release_step(self.keys, self.token, self.n, self.permits, member)


def _release_step(
    keys: SemaphoreKeys, token: str, n: int, permits: int, member: str, op: str = ""
) -> Eval:
    return Eval(
        SEMAPHORE_RELEASE,
        (*keys.script_keys, keys.release_record(op)),
        (token, n, permits, member, keys.wake_prefix, FENCE_KEEP_MS, op),
    )


def release(
    keys: SemaphoreKeys, token: str, n: int, permits: int, fence: int, *, op: str = ""
) -> Plan[None]:
    """Give back the ``n`` permits of lease ``token`` and hand free permits to the
    first waiters that fit. ``permits`` is the caller's count (used when Redis
    stores none); ``fence`` is only used in the error message. The same call
    (``op``, non-empty) retried after its reply was lost (within 120 s)
    succeeds again; any other call with the token finds it not owned.

    Raises:
        NotOwnedError: the lease holds no permits (it expired, or was released).
    """
    status, _ = yield _release_step(keys, token, n, permits, "", op)
    if status is Status.NOT_OWNED:
        raise NotOwnedError(
            keys.name, fence, "can't release: the semaphore lease expired before release"
        )


def renewal(keys: SemaphoreKeys, token: str, n: int, permits: int, seconds: float) -> Eval:
    """The script call that resets lease ``token`` (of ``n`` permits) to end
    ``seconds`` from now. Reply: ``(OK, 0)``, or ``(NOT_OWNED, 0)`` when the lease
    holds no permits (expired permits are dropped first: never revived).

    Raises:
        InvalidArgument: ``seconds`` is not a lease length (0.01 s to a year).
    """
    ms = lease_ms(seconds, "seconds")
    return Eval(
        SEMAPHORE_EXTEND,
        keys.script_keys,
        (token, n, ms, permits, keys.wake_prefix, FENCE_KEEP_MS),
    )


def extend(
    keys: SemaphoreKeys,
    token: str,
    n: int,
    permits: int,
    fence: int,
    seconds: float,
    now: Clock,
) -> Plan[float]:
    """Reset the lease ``token`` (of ``n`` permits) to end ``seconds`` from now.

    Returns the new ``expires_at`` on the caller's monotonic clock.

    Raises:
        InvalidArgument: ``seconds`` is not a lease length (0.01 s to a year).
        NotOwnedError: the lease holds no permits (it expired, or was released).
    """
    step = renewal(keys, token, n, permits, seconds)
    return (yield from extended(step, keys.name, fence, seconds, now, lease="the semaphore lease"))


def set_permits(keys: SemaphoreKeys, permits: int) -> Plan[int]:
    """Store ``permits`` as the count; hand new permits to waiters that fit.

    Returns the count stored before (0 when none was).
    """
    _, old = yield Eval(
        SEMAPHORE_SET_PERMITS,
        keys.script_keys,
        (permits, keys.wake_prefix, FENCE_KEEP_MS, PERMITS_KEEP_MS),
    )
    return int(old)


def inspect(keys: SemaphoreKeys, permits: int) -> Plan[SemaphoreInfo]:
    """Read the count (``permits``, the caller's, when Redis stores none), the
    leases holding permits, and the number of queued waiters."""
    from .._info import SemaphoreHolder, SemaphoreInfo  # (loaded on first use)

    _, (stored, waiters, flat) = yield Eval(SEMAPHORE_INSPECT, keys.script_keys, ())
    total = int(stored) or permits
    counts: dict[str, int] = {}
    ttls: dict[str, float] = {}
    for member, pttl in zip(flat[::2], flat[1::2], strict=True):
        token = text(member).rpartition("#")[0]
        counts[token] = counts.get(token, 0) + 1
        ttls[token] = int(pttl) / 1000
    holders = tuple(
        SemaphoreHolder(token, counts[token], ttls[token], label=holder_label(token))
        for token in counts
    )
    held = sum(counts.values())
    return SemaphoreInfo(keys.name, total, max(0, total - held), holders, int(waiters))


# --- the kind, for the operator tools -------------------------------------------------------

_SEM_TOKEN = re.compile(r"^(\d+)\|(.+)$", re.S)


def _refine(waiter: Waiter) -> Waiter:
    """A waiter whose member's holder is ``"<n>|<token>"``, as its permits and
    token (a member of another shape is left as it is)."""
    match = _SEM_TOKEN.match(waiter.holder)
    if match:
        return replace(waiter, holder=match[2], permits=int(match[1]))
    return waiter


def _info(view: LockView) -> SemaphoreInfo:
    from .._info import SemaphoreInfo

    return detail(view, SemaphoreInfo)


def _read(keys: SemaphoreKeys, waiting: int) -> Plan[LockView]:
    info = yield from inspect(keys, 0)  # 0: no count stored
    raw = yield Command(("GET", keys.fence))
    try:
        fence = int(text(raw)) if raw is not None else 0
    except ValueError:  # changed type since the inspect script checked it
        fence = 0
    first = info.holders[0] if info.holders else None
    view = many_holders_view(
        "Semaphore",
        keys,
        (first.token, first.permits) if first else None,
        (h.ttl for h in info.holders),
        fence,
        info.waiters,
        info,
    )
    return (yield from with_waiting(view, keys, waiting, _refine))


def _holds(view: LockView) -> tuple[Hold, ...]:
    """Every lease (first to expire first)."""
    from .snapshot import Hold  # (loaded by the first read)

    return tuple(Hold(h.token, h.permits, h.ttl, 0) for h in _info(view).holders)


def _exists(view: LockView) -> bool:
    return _info(view).permits > 0  # its count is stored


def _force_release(
    keys: SemaphoreKeys, before: LockView, holds: Sequence[Hold], new_op: Callable[[], str]
) -> Plan[tuple[list[Hold], list[Hold]]]:
    # The count, for the release script when Redis stores none (7 days after
    # the last acquire or set_permits): the permits held, all free once released.
    permits = _info(before).permits or max(1, sum(h.count for h in _holds(before)))

    def end(hold: Hold) -> Plan[bool]:
        yield from release(keys, hold.holder, hold.count, permits, 0)
        return True

    return (yield from release_each(holds, end))


def _acl_keys(keys: SemaphoreKeys) -> tuple[str, ...]:
    record = keys.release_record("0")
    return (keys.lock, keys.fence, keys.waiters, keys.delay, record, keys.permits)


#: The ``Semaphore`` kind (see :class:`~tenure._plans.kind.Kind`).
SEMAPHORE: Kind[SemaphoreKeys] = Kind(
    name="Semaphore",
    build=named("Semaphore", semaphore_keys),
    read=_read,
    scripts=(
        SEMAPHORE_ACQUIRE,
        SEMAPHORE_RELEASE,
        SEMAPHORE_EXTEND,
        SEMAPHORE_SET_PERMITS,
        SEMAPHORE_INSPECT,
    ),
    acl_keys=_acl_keys,
    holds=_holds,
    exists=_exists,
    refine_waiter=_refine,
    force_release=_force_release,
    picks_lease=True,
)
