"""Plans for :class:`tenure.FairLock`: acquire, release, pass-on and inspect.

A fair lock is a :class:`tenure.Lock` (``SET key token NX PX``, a fence minted
by every acquire, compare-and-delete release, renewal by ``lock_extend.lua``)
whose waiters are served first come, first served:

- **One place per waiter.** Every waiting thread or task queues itself, on a
  wake channel of its own (:class:`~tenure._protocol.Contend` with
  ``own_channel``), unlike ``Lock``'s one contender per process. The queue is
  a sorted set ordered by arrival: the moment the waiter's first queueing
  call reached Redis (server ``TIME``, made strictly increasing).
- **The head only.** The lock is granted only to the head of the queue: an
  attempt, queued or not (``blocking=False``), succeeds only when the lock is
  free and nobody live is queued ahead of it. A release hands the lock to the
  head and publishes on the head's channel alone, so a hand-off costs the same
  few commands however many wait.
- **Dead waiters time out.** Each queued waiter has a deadline, the server's
  ``TIME`` + the waiter timeout (5 s by default), kept in a second sorted set.
  A live waiter keeps its place by calling again before it: the plan never
  waits longer than :data:`REFRESH` of the waiter timeout between attempts
  while queued, and each attempt (also the one after every wake-up) moves its
  deadline on. Every acquire and release first drops the waiters whose
  deadline has passed, and a release also drops a head whose wake channel has
  no subscriber (its process is gone). A waiter dropped while alive (stalled
  past its deadline) queues again at the back at its next attempt.

Waiting is :mod:`.waiting`'s loop. The first attempt is made without queueing,
as ``Lock``'s is: a waiter's place in line is that of its second call (after
subscribing to its channel), so waiters that start within one round trip of
each other may be served in either order.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from .._errors import InvalidArgument, NotOwnedError
from .._keys import FairKeys, fair_keys
from .._label import holder_label
from .._protocol import Eval, Plan, failed_calls_suppressed
from .._scripts import FAIR_ACQUIRE, FAIR_INSPECT, FAIR_RELEASE, LOCK_EXTEND
from .._units import check_count, check_seconds, lease_ms, to_ms
from .common import FENCE_KEEP_MS, fence_keep_ms, released
from .kind import Kind, named, pttl_ms, token_release
from .lock import _LockContender
from .waiting import Clock, Grant, wait_turn

if TYPE_CHECKING:  # (the snapshot types are imported on first use)
    from .._info import FairLockInfo
    from .snapshot import LockView

#: The default waiter timeout, seconds: a queued waiter that does not call
#: again for this long is dropped from the queue.
WAITER_TIMEOUT = 5.0

#: A queued waiter calls again at least every this part of the waiter timeout.
REFRESH = 1 / 3


def check_waiter_timeout(value: object) -> float:
    """Validate ``waiter_timeout=``: seconds, from 3 ms to a year (``MAX_SECONDS``).

    Raises:
        InvalidArgument: not a number of seconds in that range.
    """
    seconds = check_seconds(value, "waiter_timeout")
    if seconds < 0.003:
        raise InvalidArgument(f"waiter_timeout must be at least 0.003 seconds, not {value!r}")
    return seconds


def acquire(
    keys: FairKeys,
    owner: str,
    token: str,
    ttl: float,
    *,
    blocking: bool,
    timeout: float | None,
    now: Clock,
    waiter_timeout: float = WAITER_TIMEOUT,
    delay_ms: int = 0,
) -> Plan[Grant | None]:
    """Take the fair lock for ``token`` (whose owner is ``owner``), queueing in
    arrival order as the module says.

    Returns ``None`` when ``blocking`` is false and the lock is held or others
    are queued, or when ``timeout`` seconds pass first.

    Raises:
        AlreadyHeldError: ``owner`` already holds the lock.
        WrongTypeError: one of the lock's keys holds another type.
    """
    contender = _FairContender(keys, owner, token, ttl, lease_ms(ttl), now)
    contender.delay_ms = delay_ms
    contender.waiter_ms = to_ms(waiter_timeout, "waiter_timeout")
    contender.refresh = waiter_timeout * REFRESH
    return (yield from wait_turn(contender, blocking=blocking, timeout=timeout, now=now))


class _FairContender(_LockContender):
    listen_first = False  # it never queues behind a process-local gate
    own_channel = True
    waiter_ms = to_ms(WAITER_TIMEOUT, "waiter_timeout")
    keys: FairKeys

    def attempt(self, member: str) -> Eval:
        keys = self.keys
        return Eval(
            FAIR_ACQUIRE,
            (keys.lock, keys.fence, keys.waiters, keys.deadlines, keys.delay),
            (
                self.token,
                self.owner + ":",
                self.ttl_ms,
                member,
                fence_keep_ms(self.ttl_ms),
                self.delay_ms,
                self.waiter_ms,
                keys.wake_prefix,
            ),
        )

    def leave(self, member: str, in_flight: bool) -> Plan[None]:
        with failed_calls_suppressed():
            yield release_step(self.keys, self.token, member)


def release_step(keys: FairKeys, token: str, member: str, delay_ms: int = 0, op: str = "") -> Eval:
    """The ``fair_release.lua`` call of ``token`` (see :func:`release`), with the
    queue ``member`` to remove first ("" for none)."""
    return Eval(
        FAIR_RELEASE,
        (keys.lock, keys.waiters, keys.deadlines, keys.fence, keys.delay, keys.release_record(op)),
        (token, keys.wake_prefix, FENCE_KEEP_MS, member, delay_ms, op),
    )


def release(
    keys: FairKeys, token: str, fence: int, delay_ms: int = 0, *, op: str = ""
) -> Plan[None]:
    """Release the lock held by ``token`` and hand it to the head of the queue
    (with a lock-delay of ``delay_ms`` for its hold).

    Idempotent per call: the same call (``op``, its id, non-empty) retried
    after its reply was lost (within 120 s) succeeds again; any other call
    with the same token finds it not owned. ``fence`` is only used in the
    error message.

    Raises:
        NotOwnedError: the lock is not held with ``token`` (the lease expired,
            and perhaps another owner holds it now); nothing was changed.
    """
    yield from released(release_step(keys, token, "", delay_ms, op), keys.name, fence)


def pass_on(keys: FairKeys, token: str) -> Plan[None]:
    """Release a lock that a release handed to ``token`` after its waiter had
    left, so that it goes on to the next waiter."""
    with contextlib.suppress(NotOwnedError):
        yield from release(keys, token, 0)


def check_limit(limit: object) -> int:
    """Validate ``info(limit=)``: an ``int`` from 0 to 2**53 - 1.

    Raises:
        InvalidArgument: not an ``int`` in that range.
    """
    return check_count(limit, "limit", minimum=0)


def inspect(keys: FairKeys, limit: int) -> Plan[FairLockInfo]:
    """Read the holder, its lease left, the last fence, and the first ``limit``
    queued waiters in order with their deadlines (the count also has the
    candidates of a RedlockElection of the same name on this server, unlisted)."""
    queues = (keys.waiters, keys.deadlines, *((keys.quorum,) if keys.quorum else ()))
    _, value = yield Eval(FAIR_INSPECT, (keys.lock, keys.fence, *queues), (limit,))
    return parse_info(keys.name, value)


def parse_info(name: str, value: Any) -> FairLockInfo:
    """Read a ``fair_inspect.lua`` reply (see its header)."""
    from .._info import FairLockInfo, FairWaiter  # (loaded on first use)

    holder, pttl, fence, waiting, *flat = value
    queue = []
    for member, left in zip(flat[::2], flat[1::2], strict=True):
        text = str(member)
        waiter, _, rest = text.partition("|")
        lease_ms, _, token = rest.partition("|")
        owner = token.rpartition(":")[0] or token
        lease = int(lease_ms) / 1000 if lease_ms.isdigit() else 0.0
        label = holder_label(token)
        queue.append(FairWaiter(token, owner, waiter, lease, int(left) / 1000, label=label))
    held = bool(holder)
    return FairLockInfo(
        name,
        str(holder) if held else None,
        1 if held else 0,
        int(pttl) / 1000 if held and int(pttl) >= 0 else None,
        int(fence),
        int(waiting),
        tuple(queue),
        label=holder_label(str(holder)) if held else None,
    )


# --- the kind, for the operator tools and the hub -------------------------------------------


def _read(keys: FairKeys, waiting: int) -> Plan[LockView]:
    # the queue comes with the inspect: no more round trips
    from .snapshot import LockView, Waiter  # (loaded by the first read)

    info = yield from inspect(keys, max(0, waiting))
    queue = tuple(Waiter(w.waiter, w.token, w.lease, None, deadline=w.deadline) for w in info.queue)
    held = info.holder is not None
    return LockView(
        "FairLock",
        keys.name,
        keys.lock,
        info.holder or "",
        info.hold_count,
        pttl_ms(info.ttl, held),
        info.fence,
        info.waiters,
        queue,
    )


def _acl_keys(keys: FairKeys) -> tuple[str, ...]:
    record = keys.release_record("0")
    return (keys.lock, keys.fence, keys.waiters, keys.delay, record, keys.deadlines)


#: The ``FairLock`` kind (see :class:`~tenure._plans.kind.Kind`). It extends its
#: lease as a ``Lock`` does.
FAIR: Kind[FairKeys] = Kind(
    name="FairLock",
    build=named("FairLock", fair_keys),
    read=_read,
    scripts=(FAIR_ACQUIRE, FAIR_RELEASE, LOCK_EXTEND, FAIR_INSPECT),
    acl_keys=_acl_keys,
    force_release=token_release(release),
    pass_on=pass_on,
)
