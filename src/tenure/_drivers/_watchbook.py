"""The watchdog's bookkeeping, shared by the sync and async drivers.

Pure: no I/O, no clock reads (times are passed in). The drivers do the waiting
and the script calls; this module decides what is due and what is lost.

Every lease handed to :meth:`WatchBook.add` is watched until it is discarded:

- a lease whose ``expires_at`` (on the monotonic clock) has passed is lost, at
  once, whether or not a renewal is in flight (a renewal that cannot reach Redis
  in time must not leave the holder believing);
- a renewed lease (``auto_renew``) is renewed every :data:`RENEW_EVERY` of its
  ttl, and the renewals that fall due close together go in one batch (one
  round trip);
- a lease that a release handed over with a claim window (its ``_claim``, see
  :data:`tenure._plans.waiting.HANDOFF_CLAIM`) is extended to its ttl soon,
  whether or not it is renewed: its first renewal is due when it is added, or,
  in the drivers, :data:`CLAIM_GRACE` later (a hold released before then, the
  common short critical section, spends no round trip on it; the lease clock
  trusts the window meanwhile), and retried on network failures after
  :func:`retry_after` of the window; from then on only a renewed lease is
  renewed again. A claim extend that finds the lease gone does not make it
  lost at once: a release sent while the extend was in flight (a short hold)
  reaches Redis first and ends the watch; if the lease is still watched at its
  deadline (the window's end, at most 1 s on), it is lost then, for that
  reason;
- a renewal that fails on the network is tried again after :func:`retry_after`,
  while the lease's deadline allows; a renewal that finds the lease gone makes
  it lost; a lost lease is never renewed again;
- a lease whose release was attempted is never renewed again
  (:meth:`WatchBook.stop_renewing`), whatever the release's outcome: it ends
  by its ttl at the latest.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from .._errors import WrongTypeError
from .._plans.waiting import validity
from .._protocol import Status
from .._protocol import Watchable as Watchable  # (declared beside the result hand-over)

#: (``tenure._telemetry.WATCHDOG``: this pure module imports no module with a clock)
_log = logging.getLogger("tenure.watchdog")

#: Renew a lease when this part of its ttl has passed since the last renewal.
RENEW_EVERY = 1 / 3

#: A renewal due within this part of the ttl joins the batch being sent now.
BATCH_SLACK = 0.1

#: How long after a hand-off (seconds) the drivers send the claim extend of a
#: lease handed over with a claim window. A hold released before then (the
#: common short critical section) spends no round trip on it. A hand-off is
#: trusted only while at most 1/4 of its window has passed
#: (:data:`tenure._plans.waiting.HANDOFF_RESYNC`), so the extend still has
#: about 0.69 s of the 1 s window to reach Redis.
CLAIM_GRACE = 0.05

#: How long a watchdog with nothing to watch stays (seconds) before it ends.
LINGER = 1.0

#: The longest a watchdog sleeps (seconds). Adding a lease wakes it only when the
#: lease is due before it would wake anyway, and releasing one never does, so that
#: a busy acquire/release loop costs the watchdog no wake-ups; the watchdog finds
#: out about releases (and ends) within this.
MAX_SLEEP = LINGER


class Watch:
    """One watched lease."""

    def __init__(self, lease: Watchable, renew: bool, due: float, *, claim: float = 0.0) -> None:
        self.lease = lease
        self.renew = renew
        self.due = due
        self.busy = False
        self.failures = 0
        self.claim = claim  # the claim window still to extend (seconds), 0.0 once done
        self.why = "its deadline passed before a renewal reached Redis"  # if lost at its deadline
        #: the driver's watchdog that watches it (set by the driver), so that its
        #: release and end reach that watchdog without looking the client up again
        self.dog: Any = None

    @property
    def renewable(self) -> bool:
        """Whether a renewal or a claim extend may still be sent for it (only
        ever turns false)."""
        return self.renew or bool(self.claim)


def retry_after(ttl: float, failures: int) -> float:
    """Seconds before renewal number ``failures`` + 1 after network failures: short
    next to the ttl, doubling from 1/20 of it, at most 1/6 of it."""
    return float(min(ttl / 20 * 2.0 ** max(0, failures - 1), ttl / 6))


class WatchBook:
    """The leases one client's watchdog watches."""

    def __init__(self) -> None:
        self.watches: dict[int, Watch] = {}
        self.idle_since: float | None = None

    def add(self, lease: Watchable, renew: bool, now: float, claim_after: float = 0.0) -> Watch:
        """Watch ``lease`` (renewed if ``renew``) from ``now``, when it was granted; a
        lease in its claim window is due for its extend ``claim_after`` seconds
        later (the drivers pass :data:`CLAIM_GRACE`)."""
        claim = lease._claim
        due = now + claim_after if claim else now + lease.ttl * RENEW_EVERY
        watch = Watch(lease, renew, due, claim=claim)
        self.watches[id(watch)] = watch
        self.idle_since = None
        return watch

    def discard(self, watch: Watch, now: float) -> None:
        """Stop watching (the lease was released, or is lost)."""
        if self.watches.pop(id(watch), None) is not None and not self.watches:
            self.idle_since = now

    def stop_renewing(self, watch: Watch) -> None:
        """Never send another renewal for ``watch`` (its release was attempted);
        its deadline is still watched, and a claim extend not yet sent is never
        sent. A renewal already in flight may still succeed: the lease then
        ignores it (see :mod:`tenure._leasebook`); if it finds the lease gone
        (the release reached Redis first), that is no loss."""
        watch.renew = False
        if not watch.busy:
            watch.claim = 0.0

    def expired(self, now: float) -> list[Watch]:
        """Stop watching, and return, the leases whose deadline has passed: lost
        (for the reason in their ``why``)."""
        gone = [w for w in self.watches.values() if now >= w.lease.expires_at]
        for w in gone:
            self.discard(w, now)
        return gone

    def take_due(self, now: float) -> list[Watch]:
        """The renewals to send now (marked busy until :meth:`settle`): those due,
        and those due within :data:`BATCH_SLACK` of their ttl, so that leases
        taken close together are renewed together from then on. A claim extend
        goes only once due (not early: a hold released before then needs none)."""
        batch = [
            w
            for w in self.watches.values()
            if (w.renew or w.claim)
            and not w.busy
            and not w.lease._given_up
            and w.due - (0.0 if w.claim else w.lease.ttl * BATCH_SLACK) <= now
        ]
        for w in batch:
            w.busy = True
        return batch

    def settle(
        self, watch: Watch, reply: tuple[Status, object] | None, sent_at: float, now: float
    ) -> str | None:
        """Record a renewal's outcome: ``reply`` is the parsed script reply, or
        ``None`` when it failed on the network. Returns why the lease is lost, or
        ``None``."""
        watch.busy = False
        if id(watch) not in self.watches:
            return None  # released or lost meanwhile: never revive it
        if reply is None:
            watch.failures += 1
            watch.due = now + retry_after(watch.claim or watch.lease.ttl, watch.failures)
            return None
        status, value = reply
        if status is Status.OK:
            watch.failures = 0
            watch.claim = watch.lease._claim = 0.0
            watch.lease._renewed(sent_at + validity(watch.lease.ttl))
            watch.due = sent_at + watch.lease.ttl * RENEW_EVERY
            return None
        if value == 1:
            self.discard(watch, now)
            return "the renewal reached Redis after the lease's deadline"
        if watch.claim or not watch.renew:
            # A claim extend, or a renewal in flight when the release began:
            # perhaps released meanwhile. Lost at its deadline if still watched.
            why = "claim extend" if watch.claim else "renewal"
            watch.claim, watch.renew = 0.0, False
            watch.why = f"the {why} found the lease gone from Redis"
            return None
        self.discard(watch, now)
        return "the renewal found the lease gone from Redis"

    def first_due(self, watch: Watch) -> float:
        """When ``watch`` first needs the watchdog: its renewal, or its deadline."""
        if watch.renew or watch.claim:
            return min(watch.lease.expires_at, watch.due)
        return watch.lease.expires_at

    def sleep(self, now: float) -> float:
        """How long the watchdog may sleep from ``now``, seconds (>= 0)."""
        wake = self.next_wake(now)
        return max(0.0, min(MAX_SLEEP, MAX_SLEEP if wake is None else wake - now))

    def next_wake(self, now: float) -> float | None:
        """When something is next due (a deadline or a renewal), or ``None`` when
        nothing is watched."""
        times = [w.lease.expires_at for w in self.watches.values()]
        times += [w.due for w in self.watches.values() if (w.renew or w.claim) and not w.busy]
        return min(times) if times else None

    def finished(self, now: float) -> bool:
        """Whether the watchdog may end: nothing watched for :data:`LINGER` seconds."""
        return not self.watches and self.idle_since is not None and now - self.idle_since >= LINGER


def renewal_reply(reply: object) -> tuple[Status, Any] | None:
    """Read one renewal's reply from a batch (an item of a
    :class:`~tenure._protocol.Pipeline` reply): ``(Status, value)``, or ``None``
    when it failed (logged; the renewal is tried again). A key that holds
    another type means the lease is gone: ``(NOT_OWNED, 0)``."""
    if isinstance(reply, WrongTypeError):
        return Status.NOT_OWNED, 0
    if isinstance(reply, BaseException) or not isinstance(reply, tuple):
        _log.warning("tenure watchdog: renewal failed (%r); retrying", reply)
        return None
    return reply


def lose(lease: Watchable, reason: str) -> None:
    """Fire ``lease``'s lost signal; a failing callback is logged, never raised
    into the watchdog."""
    try:
        lease._lose(reason)
    except Exception:
        # (a log handler that raises raises here too: never into the watchdog)
        with contextlib.suppress(Exception):
            _log.exception("tenure watchdog: a lost-lease callback failed")
