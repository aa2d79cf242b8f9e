# GENERATED from _async/_holds.py by scripts/unasync.py: do not edit.
"""The reentrant-hold bookkeeping of ``RLock`` and ``ReadWriteLock``:
the leases of each hold, renewed, extended and lost together."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Hashable
from typing import Any, ClassVar, Generic, TypeVar

from ... import _telemetry
from ..._drivers import _sync as _driver
from ..._drivers._watchbook import Watch
from ..._models import run_all
from ..._plans.waiting import Grant
from ._base import _HeldLease, _LeaseOptions

HoldsT = TypeVar("HoldsT", bound="_Holds[Any]")
HL = TypeVar("HL", bound="_HoldLease[Any]")


class _HoldLease(_HeldLease[HoldsT]):
    """One level of a hold of a reentrant lock (``RLock``, either mode of
    an ``ReadWriteLock``). The lock object that issued it keeps its hold's
    leases (:class:`_Holds`): they end, are lost and get a new deadline
    together.

    Attributes:
        _key: which of the lock object's holds it belongs to (its owner's, or
            its owner's of its mode).
        _hold: the hold's id, the same for every lease of the hold: an
            ``RLock`` hold's fence (as text), a read-write hold's id.
    """

    __slots__ = ("_hold", "_key")

    def __init__(self, lock: HoldsT, grant: Grant, key: Hashable, hold: str) -> None:
        super().__init__(lock, grant)
        self._key = key
        self._hold = hold

    # Re-declared for its docstring alone: an extend resets the whole hold.
    def extend(self, seconds: float | None = None) -> None:
        """Reset the whole hold's lease to end ``seconds`` from now (default: its ttl).

        Args:
            seconds: the new remaining lease, in seconds, from 0.01 to a year.

        Raises:
            InvalidArgument: ``seconds`` is not a number of seconds from 0.01 to a year.
            LockLostError: the hold was lost (its deadline passed, or it is gone
                from Redis); every lease of it ends.
            NotOwnedError: this lease was released.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return super().extend(seconds)

    @property
    def _given_up(self) -> bool:
        """(The watchdog's, which watches a hold through one of its leases)
        whether every lease of the hold still here was given up."""
        hold = self._lock._same_hold(self)
        return bool(hold) and all(one._life.unfinished for one in hold)

    def _released_one(self, left: int | None) -> None:
        self._life.released()
        self._lock._forget(self)
        if left == 0:
            self._lock._end_hold(self)

    def _extended(self, ttl: float, expires_at: float) -> None:
        self._lock._renewed(self, ttl, expires_at)

    def _start_watch(self, renew: bool) -> None:
        self._lock._watch_hold(self, renew)

    def _stop_renewing(self) -> None:
        self._lock._stop_renewing_hold(self)

    def _end(self) -> None:
        """This lease is lost and done with: it alone goes (a newer lease of the
        same hold, taken after it was lost, lives on)."""
        self._lock._forget(self)
        if not self._lock._holds.get(self._key):
            self._lock._unwatch(self._key)

    def _lose(self, reason: str) -> None:
        self._lock._lose_hold(self, reason)


class _Holds(Generic[HL]):
    """The holds of a reentrant lock taken through one lock object, by key (an
    owner, or an owner and a mode): the live leases of each hold, oldest first,
    and the watchdog's entry for it, made with its first lease. Every lease of
    a hold has its ``_hold`` id; a lease of another id begins a new hold."""

    _client: _driver.Client
    _opts: _LeaseOptions
    _probe: ClassVar[_telemetry.Probe]
    _holds: dict[Hashable, list[HL]]
    _watches: dict[Hashable, Watch]

    @property
    def name(self) -> str:
        raise NotImplementedError

    def _ttl_key(self, lease: HL) -> str:
        """The :class:`AdaptiveTTL` key of the hold of ``lease``."""
        raise NotImplementedError

    def _watch_of(self, lease: HL) -> Watch | None:
        """The watch of the hold of ``lease`` (``None`` when its key's watch
        watches another hold: a newer hold of the same owner)."""
        watch = self._watches.get(lease._key)
        if watch is not None and getattr(watch.lease, "_hold", None) == lease._hold:
            return watch
        return None

    def _unwatch_lost(self, lease: HL) -> None:
        """The hold of ``lease`` is lost: stop watching it (if it watches that hold)."""
        if self._watch_of(lease) is not None:
            self._unwatch(lease._key)

    def _add(self, lease: HL) -> None:
        """A new lease of the hold of its key, or of a new hold of that key."""
        hold = self._same_hold(lease)
        if not hold:
            # Leases of an earlier hold of this key: Redis began a new hold, so
            # that one was gone.
            self._unwatch(lease._key)
            why = "the hold had ended in Redis (a new hold began)"
            old = self._holds.pop(lease._key, ())
            run_all(*(functools.partial(one._signal_lost, why) for one in old))
        elif not any(one._life.held for one in hold):
            # A re-entry while the hold's last release had not completed: the
            # hold lives on in Redis, so the watchdog renews it again.
            self._unwatch(lease._key)
        hold.append(lease)
        self._holds[lease._key] = hold
        self._renewed(lease, lease.ttl, lease.expires_at)

    def _watch_hold(self, lease: HL, renew: bool) -> None:
        """Have the watchdog watch the hold of ``lease``, unless it does already."""
        if lease._key not in self._watches:
            self._watches[lease._key] = _driver.watch(self._client, lease, renew)

    def _same_hold(self, lease: HL) -> list[HL]:
        return [o for o in self._holds.get(lease._key, ()) if o._hold == lease._hold]

    def _forget(self, lease: HL) -> None:
        leases = self._holds.get(lease._key)
        if leases is not None and lease in leases:
            # (two threads releasing one lease both end it: never an error here)
            with contextlib.suppress(ValueError):
                leases.remove(lease)
            if not leases:
                self._holds.pop(lease._key, None)

    def _end_hold(self, lease: HL) -> None:
        """The hold of ``lease`` is over in Redis: every lease of it is released."""
        hold = [lease, *self._same_hold(lease)]
        self._opts.record(self._ttl_key(lease), min(one.acquired_at for one in hold))
        for one in hold:
            one._life.released()
            self._forget(one)
        if not self._holds.get(lease._key):
            self._unwatch(lease._key)

    def _lose_hold(self, lease: HL, reason: str) -> None:
        """The hold of ``lease`` is lost: every lease of it is, and it is not watched."""
        self._unwatch_lost(lease)
        hold = [lease, *self._same_hold(lease)]
        run_all(*(functools.partial(one._signal_lost, reason) for one in hold))

    def _settle_releases(self, *keys: Hashable) -> None:
        """Send again the releases of this object's leases under ``keys`` that
        were attempted and did not complete, before the owner changes the lock
        again: the owner's record of its last change in Redis is then still
        that release's, so the release is never counted twice."""
        for key in keys:
            for lease in list(self._holds.get(key, ())):
                if lease._life.unfinished:
                    lease._clean_up()

    def _unwatch(self, key: Hashable) -> None:
        watch = self._watches.pop(key, None)
        if watch is not None:
            _driver.unwatch(self._client, watch)

    def _renewed(self, lease: HL, ttl: float, expires_at: float) -> None:
        """The hold of ``lease`` was given a new lease: every lease of it that is
        still held follows."""
        for one in {lease, *self._same_hold(lease)}:
            if one._life.may_move_deadline():
                one.ttl, one.expires_at = ttl, expires_at

    def _stop_renewing_hold(self, lease: HL) -> None:
        """A release of ``lease`` was attempted: unless another lease of its hold
        is still held, the watchdog never renews the hold again."""
        if any(one is not lease and one._life.held for one in self._same_hold(lease)):
            return
        watch = self._watch_of(lease)
        if watch is not None:
            _driver.stop_renewing(self._client, watch)

    def _held_here(self, leases: list[HL]) -> str:
        """How a hold's leases taken here look in a ``repr``."""
        lease = leases[-1]
        validity = f"valid {lease.remaining:.3f}s" if lease.valid else "expired"
        return f"held here by {lease.owner} count={len(leases)} fence={lease.fence} {validity}"
