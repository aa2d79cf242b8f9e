# GENERATED from _async/_base.py by scripts/unasync.py: do not edit.
"""What every kind of lock shares: the default ttl, the process's lease book,
the labels, the checked lease options and the lease a lock object issues.
Its ``with`` blocks are :mod:`._blocks`'s, its acquire's run
:mod:`._grants`'s."""

from __future__ import annotations

import threading
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, NoReturn, Protocol, TypeGuard, TypeVar

from ... import _telemetry
from ..._drivers import _sync as _driver
from ..._drivers._identity import process_mark
from ..._errors import InvalidArgument, LockLostError, NotOwnedError
from ..._label import default_suffix, label_suffix
from ..._leasebook import LeaseBook, Phase, Release
from ..._models import LeaseBase, link_to_block, note_started
from ..._plans import replicas as replica_plans
from ..._plans.waiting import Grant
from ..._protocol import Eval, Plan, is_interrupt
from ..._units import check_seconds, check_ttl, to_ms
from ._blocks import _EntersItself
from ._grants import holder_of

if TYPE_CHECKING:  # (imported on first use: see _is_adaptive)
    from ..._adaptive import AdaptiveTTL

#: The lease length, in seconds, of a lock created without ``ttl``.
DEFAULT_TTL = 30.0

#: The latest lease of each (client, lock key, owner) taken in this process,
#: whichever ``Lock`` object took it: a second acquire by the same owner
#: asks Redis first instead of queueing behind this process's other waiters,
#: and first cleans up a lease it left behind (lost, or its release failed).
_BOOK = LeaseBook()


def check_label(label: str | None) -> str | None:
    """What a constructor's ``label`` adds to each lease's token (see
    :func:`label_of`): its encoded text; ``None`` for this process's default
    label, found at each acquire (a forked child's is its own).

    Raises:
        InvalidArgument: ``label`` is neither ``None`` nor a ``str``.
    """
    if label is None:
        return None
    if not isinstance(label, str):
        raise InvalidArgument(f"label must be a str, not {label!r}")
    return label_suffix(label)


def label_of(checked: str | None) -> str:
    """The suffix of a new token (or hold id) for a label :func:`check_label`
    gave (``""``: no label)."""
    return default_suffix() if checked is None else checked


def _is_adaptive(ttl: object) -> TypeGuard[AdaptiveTTL]:
    """Whether ``ttl`` is an :class:`AdaptiveTTL` (a number is not: its module
    loads only when a ttl may be one)."""
    if isinstance(ttl, int | float):
        return False
    from ..._adaptive import AdaptiveTTL

    return isinstance(ttl, AdaptiveTTL)


def _check_callback(on_lost: C | None) -> C | None:
    if on_lost is not None and not callable(on_lost):
        raise InvalidArgument(f"on_lost must be callable, not {on_lost!r}")
    return on_lost


C = TypeVar("C", bound=Callable[..., object])


@dataclass(frozen=True)
class _LeaseOptions:
    """What a lock's lease arguments say, checked (:meth:`check`).

    Attributes:
        ttl: the lease length in seconds; with an :class:`AdaptiveTTL`, its floor.
        adaptive: the :class:`AdaptiveTTL`, or ``None``.
        renew: whether the watchdog renews every lease (``auto_renew``).
        on_lost: the callback every lease gets (``on_lost``), or ``None``.
        delay_ms: the lock-delay in milliseconds (0: none).
        replicas: how many replicas must acknowledge a new lease, or ``None``.
    """

    ttl: float
    adaptive: AdaptiveTTL | None
    renew: bool
    on_lost: Callable[[Any], object] | None
    delay_ms: int
    replicas: replica_plans.ReplicaPolicy | None

    @classmethod
    def check(
        cls,
        ttl: float | AdaptiveTTL | None,
        auto_renew: bool | None,
        on_lost: Callable[[Any], object] | None,
        lock_delay: float = 0.0,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        replica_fsync: bool = False,
        *,
        adaptive: bool = True,
    ) -> _LeaseOptions:
        """Check the arguments, in this order; with ``adaptive=False``, ``ttl``
        may not be an :class:`AdaptiveTTL`.

        Raises:
            InvalidArgument: the first bad argument, named.
        """
        if ttl is None:
            fixed, policy = DEFAULT_TTL, None
        elif adaptive and _is_adaptive(ttl):
            fixed, policy = float(ttl.floor), ttl
        else:
            fixed, policy = check_ttl(ttl), None
        if auto_renew is None:
            renew = ttl is None
        elif isinstance(auto_renew, bool):
            renew = auto_renew
        else:
            raise InvalidArgument(f"auto_renew must be True, False or None, not {auto_renew!r}")
        callback = _check_callback(on_lost)
        delay = check_seconds(lock_delay, "lock_delay", allow_zero=True)
        delay_ms = 0 if delay == 0 else to_ms(delay, "lock_delay")
        replicas = replica_plans.check_policy(min_replicas, replica_timeout, replica_fsync)
        return cls(fixed, policy, renew, callback, delay_ms, replicas)

    def next_ttl(self, key: str) -> float:
        """The length of the next lease of ``key`` (an :class:`AdaptiveTTL`'s key)."""
        return self.ttl if self.adaptive is None else self.adaptive.next_ttl(key)

    def record(self, key: str, started: float) -> None:
        """A hold of ``key`` that began at ``started`` (``time.monotonic()``) ended now."""
        if self.adaptive is not None:
            self.adaptive.record(key, time.monotonic() - started)


class _Issuer(Protocol):
    """What a lease needs of the lock object that issued it."""

    _client: _driver.Client
    _opts: _LeaseOptions
    _probe: ClassVar[_telemetry.Probe]

    @property
    def name(self) -> str: ...

    def _forget(self, lease: Any) -> None: ...


LockT = TypeVar("LockT", bound=_Issuer)


class _HeldLease(_EntersItself, LeaseBase, Generic[LockT]):
    """A lease issued by a lock object (``_lock``): ``release``, ``extend``, the
    watchdog's renewal and the start of its life, written once on the hooks each
    kind supplies: its plans (``_release_plan``, ``_extend_plan``,
    ``_renewal``) and what a release, a new deadline, the end and a loss do to
    it (``_released_one``, ``_extended``, ``_end``, ``_lose``).

    The docstrings of ``release`` and ``extend`` are :class:`Lease`'s; a
    kind whose text differs overrides them to say its own.
    """

    lost: threading.Event
    __slots__ = ("_lock",)

    def __init__(self, lock: LockT, grant: Grant) -> None:
        super().__init__(lock.name, grant, _driver.new_event)
        self._lock = lock

    def _release_due(self) -> bool:
        """See :class:`ExitReleasable`: the release did nothing."""
        return self._life.phase is Phase.HELD

    def release(self) -> None:
        """Release the lock and hand it to the next waiter.

        From the moment this is called the watchdog never renews the lease
        again, whatever happens to the call (an error, a cancellation, an
        interrupt): if the release does not complete, the lease ends by its
        ttl at the latest, and calling ``release()`` again sends it again. A
        release retried after its reply was lost (redis-py retries on
        connection errors) is recognised as the same call and succeeds; a
        release of this lease by anyone else (a copy, a forced release) makes
        this one raise ``LockLostError``.

        Raises:
            LockLostError: the lease was lost (``lost`` is set): its deadline
                passed, or Redis no longer holds the lock with this lease's
                token (the message gives the name, fence and why). A lost
                lease's token-checked delete is still sent first, so that a
                key Redis still holds with its token is freed.
            NotOwnedError: the lease was already released, or this is not the
                process that acquired it (a forked child). Nothing was changed.
            redis.exceptions.ConnectionError: Redis could not be reached (the
                release may be tried again; the lease is no longer renewed).
        """
        self._life.asked = True  # first, no call before it: see LeaseLife.asked
        if not self._release_begin():
            self._clean_up()
            self._end_lost_named(self._life.cleaned)
        try:
            left = _driver.run(self._lock._client, self._release_plan())
        except NotOwnedError as exc:
            self._lose(exc.reason)
            self._end_lost_named(True)
        self._released_one(left)
        _telemetry.released(self, self._lock._probe)

    def _release_begin(self) -> bool:
        """A release begins (the process checked, the lease RELEASING, never
        renewed again): ``True`` when :meth:`_release_plan` is to be sent, and
        :meth:`_release_end` given what it gave; ``False`` when the lease was
        lost: its clean-up is due instead (``_clean_up``, then ``_end_lost``).

        Raises:
            NotOwnedError: as :meth:`release` does; nothing was changed.
        """
        life = self._life
        life.check_process(self.name, self.fence, process_mark(), "release")
        if life.begin_release(self.name, self.fence) is Release.CLEAN_UP:
            return False
        self._stop_renewing()
        return True

    def _release_end(self, outcome: object) -> None:
        """What the release plan of :meth:`_release_begin` gave (its result, or
        the exception it raised) ends the release, as :meth:`release` says."""
        if isinstance(outcome, NotOwnedError):
            self._lose(outcome.reason)
            self._end_lost()
        if isinstance(outcome, BaseException):
            raise outcome
        self._released_one(outcome if isinstance(outcome, int) else None)
        _telemetry.released(self, self._lock._probe)

    def extend(self, seconds: float | None = None) -> None:
        """Reset the lease to end ``seconds`` from now (default: its ttl).

        Args:
            seconds: the new remaining lease, in seconds, from 0.01 to a year.

        Raises:
            InvalidArgument: ``seconds`` is not a number of seconds from 0.01 to a year.
            LockLostError: the lease was lost (its deadline passed, or it is gone
                from Redis); the lease ends.
            NotOwnedError: the lease was released (or its release attempted),
                or this is not the process that acquired it (a forked child).
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        seconds = self.ttl if seconds is None else check_ttl(seconds, "seconds")
        life = self._life
        life.check_process(self.name, self.fence, process_mark(), "extend")
        try:
            life.begin_extend(self.name, self.fence)
        except LockLostError:
            self._end_lost()
        try:
            expires_at = _driver.run(self._lock._client, self._extend_plan(seconds))
        except NotOwnedError as exc:
            self._lose(exc.reason)
            self._end_lost_named(True)
        self._extended(seconds, expires_at)

    def _clean_up(self) -> None:
        """Send the release of a lease this process gave up on (lost, or whose
        release did not complete), so that Redis does not keep holding it with
        this lease's token; whatever Redis answers, quietly. Only a reply from
        Redis marks it cleaned up (a connection error leaves it to be tried
        again by the owner's next acquire). An interrupt, of any exception
        class, is raised (the release stays to be finished)."""
        life = self._life
        if life.phase is Phase.HELD:  # a release() cut off before it began
            life.begin_release(self.name, self.fence)
        if life.phase is Phase.RELEASING:
            self._stop_renewing()
        try:
            left = _driver.run(self._lock._client, self._release_plan())
        except NotOwnedError as exc:
            self._lose(exc.reason)
        except Exception as exc:
            if is_interrupt(exc):  # (of any class: never swallowed)
                raise
            return
        else:
            if life.phase is Phase.RELEASING:
                with contextlib.suppress(LockLostError):
                    self._released_one(left)
        life.cleaned = True

    def _start(self) -> None:
        """The lease was just granted: give it the lock's ``on_lost`` callback,
        have the watchdog watch it, and wait for the replicas (else release it)."""
        # first: from here on a block cut off gives the lease up, and an acquire
        # that collects its leases (a MultiLock's) knows of it
        link_to_block(self)
        note_started(self)
        opts = self._lock._opts
        if opts.on_lost is not None:
            self.on_lost(opts.on_lost)
        self._start_watch(opts.renew)
        if opts.replicas is None:
            return
        plan = replica_plans.replicate(self.name, self.fence, self._renewal(), opts.replicas)
        try:
            _driver.run(self._lock._client, plan)
        except BaseException:
            with contextlib.suppress(Exception):
                self.release()
            raise

    def _end_lost(self) -> NoReturn:
        """The lease is lost: end it and say so."""
        reason = self._life.lost_reason
        self._end()
        raise LockLostError(self.name, self.fence, f"lease lost: {reason}")

    def _end_lost_named(self, answered: bool) -> NoReturn:
        """:meth:`_end_lost`, its error naming who holds the lock now when
        ``answered`` (Redis just answered: one more call won't hang on a
        server that is down)."""
        try:
            self._end_lost()
        except LockLostError as exc:
            if answered:
                exc.name_holder(holder_of(self._lock))
            raise

    def _release_plan(self) -> Plan[int | None]:
        """The plan that releases the lease (its reply: the hold count left, if any)."""
        raise NotImplementedError

    def _extend_plan(self, seconds: float) -> Plan[float]:
        """The plan that resets the lease to end ``seconds`` from now (its new ``expires_at``)."""
        raise NotImplementedError

    def _renewal(self) -> Eval:
        """The script call that renews the lease for its ttl (the watchdog's)."""
        raise NotImplementedError

    def _released_one(self, left: int | None) -> None:
        """Redis released the lease: it ends (lost all the same if the watchdog
        found it lost meanwhile)."""
        if self._life.released():
            self._end_lost()
        self._end()

    def _renewed(self, expires_at: float) -> None:
        self._extended(self.ttl, expires_at)

    def _extended(self, ttl: float, expires_at: float) -> None:
        """The lease is now ``ttl`` seconds long and ends at ``expires_at``
        (ignored unless the lease is still held: a renewal in flight when the
        release began never revives it)."""
        if self._life.may_move_deadline():
            self.ttl, self.expires_at = ttl, expires_at

    def _start_watch(self, renew: bool) -> None:
        self._watch = _driver.watch(self._lock._client, self, renew)

    def _stop_renewing(self) -> None:
        """A release was attempted: the watchdog never renews the lease again."""
        if self._watch is not None:
            _driver.stop_renewing(self._lock._client, self._watch)

    def _end(self) -> None:
        """The lease is over (released, or lost and done with)."""
        self._lock._forget(self)
