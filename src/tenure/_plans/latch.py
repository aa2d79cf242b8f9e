"""Plans for :class:`tenure.CountDownLatch`: set the count, count down, read, wait.

The count is a string key; absent means zero (the latch is open). It is set
only while it is zero (Redisson's ``trySetCount``), so a latch can be used
again once it has opened. Counting down to zero deletes it, gives the latch a
new *opening number* (the last + 1, or the server's clock in µs when none is
stored, as a fence, so it grows across expiry and restart) and publishes that
number on the latch's channel, which wakes every waiter of every process.

Waiting does not poll: the plan reads the count and the opening number; at
zero the wait ends there (an open latch costs one read, no subscription).
Otherwise it subscribes to the channel (the hub's shared subscription), then
reads again (the latch may have opened before the subscription was
confirmed, its message unheard), then waits for a message or the timeout.
Each wake is checked against Redis: the wait ends when the count is zero, or
when the opening number has grown since the first read (the latch opened and
was set again before this waiter looked).
A reconnection of the hub also wakes the waiter, once the channel is
subscribed again, since a message may have been lost while disconnected: it
reads the count again (a count lost with the server's data reads as zero, open).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _units
from .._keys import LatchKeys, latch_keys
from .._label import decode_label
from .._protocol import Eval, Plan, Status, Subscribe, WaitWake, text
from .._scripts import LATCH_COUNT_DOWN, LATCH_INSPECT, LATCH_SET
from .kind import Kind, detail, named
from .waiting import Clock

if TYPE_CHECKING:  # (the snapshot types are imported on first use)
    from .._info import CountDownLatchInfo
    from .snapshot import LockView

#: How long the opened key (the number of the latch's last opening) is kept after
#: the opening that wrote it (ms): 10 minutes. Waiters compare the number with
#: the one they read when they began, so that an opening followed at once by a
#: new count still ends their wait; a waiter woken by the opening's message reads
#: it within moments. What a shorter lifetime costs: a waiter that missed the
#: message and looks only later (its hub reconnecting after a long outage, or its
#: timeout ending) after the latch was set again finds no number (or an older
#: one) and waits on for the next opening. And, as for fences
#: (:data:`~tenure._plans.common.FENCE_KEEP_MS`), a new number is seeded from the
#: server's clock once the key is gone, so numbers keep growing unless the
#: server's clock is stepped back by more than this while the latch is idle.
OPENED_KEEP_MS = 10 * 60 * 1000


def check_count(value: object) -> int:
    """Return ``value`` if it is an ``int`` from 1 to 2**53 - 1 (bools refused):
    the scripts read and return the count as a Lua number, exact in that range.

    Raises:
        InvalidArgument: otherwise.
    """
    return _units.check_count(value, "count")


def try_set_count(keys: LatchKeys, count: int, label: str) -> Plan[bool]:
    """Set the count to ``count`` if it is zero, and record who set it:
    ``label``, the setter's label encoded by :func:`~tenure._label.encode_label`
    (``""``: none), kept in the by key until the count reaches zero. Returns
    whether it was set."""
    status, _ = yield Eval(LATCH_SET, (keys.count, keys.by), (count, label))
    return status is Status.OK


def count_down(keys: LatchKeys) -> Plan[int]:
    """Count down by one (nothing happens at zero); at zero, wake every waiter
    and delete who set it with the count. Returns the count left."""
    _, left = yield Eval(
        LATCH_COUNT_DOWN, (keys.count, keys.opened, keys.by), (keys.channel, OPENED_KEEP_MS)
    )
    return int(left)


def inspect(keys: LatchKeys) -> Plan[CountDownLatchInfo]:
    """Read the count, the opening number and who set the count (no one while
    it is zero: a by key left by an older tenure's count-down is not shown)."""
    from .._info import CountDownLatchInfo  # (loaded on first use)

    _, (count, opened, by) = yield Eval(LATCH_INSPECT, (keys.count, keys.opened, keys.by), ())
    count = int(count)
    # (a value another client wrote, UTF-8 or not, is no encoded label: no label)
    label = decode_label(text(by)) if count > 0 else None
    return CountDownLatchInfo(keys.name, count, int(opened), label)


def wait(keys: LatchKeys, timeout: float | None, now: Clock) -> Plan[bool]:
    """Wait until the count is zero, as the module says, at most ``timeout``
    seconds (``None``: no limit). Returns ``True`` if the latch opened, ``False``
    if the timeout ran out first."""
    deadline = None if timeout is None else now() + timeout
    first = yield from inspect(keys)
    if first.count == 0:
        return True
    if deadline is not None and deadline <= now():
        return False  # (no time left to wait: nothing to subscribe for)
    # woken: the subscription confirmed (else its wait ran out), then a message
    woken = yield Subscribe(keys.channel, None if deadline is None else deadline - now())
    while True:
        state = yield from inspect(keys)
        if state.count == 0 or state.opened > first.opened:
            return True
        if not woken:
            return False
        remaining = None if deadline is None else deadline - now()
        if remaining is not None and remaining <= 0:
            return False
        woken = yield WaitWake(remaining)


# --- the kind, for the operator tools -------------------------------------------------------


def _info(view: LockView) -> CountDownLatchInfo:
    from .._info import CountDownLatchInfo

    return detail(view, CountDownLatchInfo)


def _read(keys: LatchKeys, waiting: int) -> Plan[LockView]:
    # a latch's waiters are not queued in Redis: ``waiting`` has nothing to read
    from .snapshot import LockView  # (loaded by the first read)

    info = yield from inspect(keys)
    free = ("CountDownLatch", keys.name, keys.count, "", info.count, -2, 0, 0)
    return LockView(*free, detail=info, label=info.label)  # (its label: who set it)


def _exists(view: LockView) -> bool:
    info = _info(view)
    return info.count > 0 or info.opened > 0


def _acl_keys(keys: LatchKeys) -> tuple[str, ...]:
    return (keys.count, keys.opened, keys.by)


#: The ``CountDownLatch`` kind (see :class:`~tenure._plans.kind.Kind`): it has
#: no holder, so ``release --force`` refuses it (``--latch`` says why); its
#: view's ``label`` is who set the count, while it is not zero.
LATCH: Kind[LatchKeys] = Kind(
    name="CountDownLatch",
    build=named("CountDownLatch", latch_keys),
    read=_read,
    scripts=(LATCH_SET, LATCH_COUNT_DOWN, LATCH_INSPECT),
    acl_keys=_acl_keys,
    holds=lambda view: (),
    exists=_exists,
)
