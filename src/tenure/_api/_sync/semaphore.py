# GENERATED from _async/semaphore.py by scripts/unasync.py: do not edit.
"""``Semaphore``, the counting semaphore of expiring leases, and its leases."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Literal, cast, overload

from ..._drivers import _sync as _driver
from ..._drivers._identity import new_token
from ..._errors import NotOwnedError
from ..._keys import DEFAULT_PREFIX, semaphore_keys
from ..._models import PerProcess, block_enter, block_exit
from ..._plans import lock as lock_plans
from ..._plans import semaphore as semaphore_plans
from ..._plans.waiting import Grant
from ..._protocol import Eval, Plan
from ._base import _HeldLease, _LeaseOptions, check_label, label_of
from ._blocks import F, _Guard, _Holding, _Skipping, _current_lease
from ._docs import shared_args
from ._grants import _take_grant

if TYPE_CHECKING:  # (the snapshot types are imported on first use)
    from ..._info import SemaphoreInfo


class SemaphoreLease(_HeldLease["Semaphore"]):
    """Permits held from a semaphore (:class:`Semaphore`): what a successful acquire returns.

    A lease is truthy. It holds ``permits`` permits until :meth:`release`, or
    until its ttl runs out in Redis: then the permits return to the semaphore by
    themselves, so a crashed holder's permits come back after its ttl. ``valid``
    and ``remaining`` tell, on this process's monotonic clock, whether the lease
    can still be trusted. See :class:`tenure.LeaseBase` for ``name``, ``owner``
    (the lease's token, new for each acquire), ``fence`` (minted by each
    acquire of the semaphore, larger than every earlier lease's: it orders the
    holders, it does not exclude them), ``ttl``, ``expires_at`` and ``lost``
    (the client's watchdog renews the lease while held when the semaphore
    renews, and sets ``lost`` as soon as the lease is known lost).

    Attributes:
        permits: how many permits the lease holds (the ``n`` it was acquired with).
    """

    __slots__ = ("_holder", "permits")

    def __init__(self, semaphore: Semaphore, grant: Grant, permits: int, holder: str) -> None:
        super().__init__(semaphore, grant)
        self._holder = holder
        self.permits = permits

    # Re-declared for its docstring alone: a release gives permits back.
    def release(self) -> None:
        """Give the permits back, handing them to the first waiters that fit.

        A release retried after its reply was lost is recognised and succeeds.

        Raises:
            LockLostError: the lease was lost (``lost`` is set): its deadline
                passed, or its permits expired in Redis (the message gives the
                name, fence and why).
            NotOwnedError: the lease was already released. Nothing was changed.
            redis.exceptions.ConnectionError: Redis could not be reached (the
                lease is kept: the release may be tried again).
        """
        self._life.asked = True  # first, no call before it: see LeaseLife.asked
        return super().release()

    def _release_plan(self) -> Plan[None]:
        sem = self._lock
        op = self._life.release_op
        return semaphore_plans.release(
            sem._keys, self.owner, self.permits, sem._permits, self.fence, op=op
        )

    def _extend_plan(self, seconds: float) -> Plan[float]:
        sem = self._lock
        return semaphore_plans.extend(
            sem._keys, self.owner, self.permits, sem._permits, self.fence, seconds, time.monotonic
        )

    def _renewal(self) -> Eval:
        sem = self._lock
        return semaphore_plans.renewal(sem._keys, self.owner, self.permits, sem._permits, self.ttl)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]} permits={self.permits}>"


class _PermitsOf:
    """``n`` permits of a semaphore, as :class:`_Holding` acquires them."""

    def __init__(self, semaphore: Semaphore, n: int) -> None:
        self._semaphore = semaphore
        self._n = n

    @property
    def name(self) -> str:
        return self._semaphore.name

    def acquire(
        self, blocking: bool = True, timeout: float | None = None
    ) -> SemaphoreLease | None:
        return self._semaphore.acquire(self._n, blocking, timeout)

    def info(self) -> SemaphoreInfo:
        """The semaphore's snapshot (who holds, for an :class:`AcquireTimeout`)."""
        return self._semaphore.info()


@shared_args(
    adaptive=False,
    min_replicas="Releasing the lease gives its permits back.",
)
class Semaphore(PerProcess):
    """A distributed counting semaphore whose permits are owned, expiring leases.

    At most ``permits`` permits are held at once, across every process that uses
    the same Redis or Valkey server and name. Each acquire takes ``n`` permits as
    one lease (Redisson's ``RPermitExpirableSemaphore``): only that lease can
    give them back or extend them, and they return to the semaphore by
    themselves when its ttl runs out, so a crashed holder cannot leak permits.
    Lease expiry is kept on the server's clock, never a client's.

    The permit count is stored in Redis by the first acquire, and kept until a
    week after the semaphore's last acquire or :meth:`set_permits` (the guide's
    "Keys and memory"). An object given another count
    raises :class:`~tenure.InvalidArgument` at its first acquire, naming both;
    change the count of a live semaphore with :meth:`set_permits`.

    Waiting does not poll, and it is first come, first served: waiters queue in
    Redis (one thread or task per process and name; the others queue behind it
    in the process), and a release hands the permits straight to the first
    waiters that fit. A waiter asking for more permits than are free waits, and
    so does everyone behind it, so a large request is never starved by small
    ones; for the same reason an acquire gets nothing while others queue, even
    with permits free. If a wake-up message is lost, the waiter retries when
    the first lease would have run out.

    Args:
        {client}
        name: the semaphore's name; its keys are ``<prefix>{<name>}:semaphore``
            and siblings, apart from any lock's.
        permits: the number of permits, an ``int`` from 1 to 2**53 - 1.
        {lease_args}

    Raises:
        InvalidArgument: ``client`` is not a client this class accepts (a URL,
            ``None``, a client of the other API, a pipeline, a valkey-py cluster client);
            an empty or non-``str`` name or prefix; ``permits`` not
            an ``int`` from 1 to 2**53 - 1; a ttl that is not a number from 0.01 to a year; a bad
            ``auto_renew``, ``on_lost``, ``min_replicas``, ``replica_timeout`` or
            ``replica_fsync``.

    Example::

        gpus = Semaphore(client, "gpus", permits=4, ttl=60)
        with gpus as lease:  # one permit
            train(fence=lease.fence)
        with gpus(2, timeout=10) as lease:  # two permits, or AcquireTimeout
            train_big(lease.permits)
    """

    def __init__(
        self,
        client: _driver.Client,
        name: str,
        permits: int,
        *,
        ttl: float | None = None,
        auto_renew: bool | None = None,
        on_lost: Callable[[SemaphoreLease], object] | None = None,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        replica_fsync: bool = False,
        prefix: str = DEFAULT_PREFIX,
        label: str | None = None,
    ) -> None:
        self._client = _driver.check_client(client, "Semaphore")
        self._keys = semaphore_keys(name, prefix=prefix)
        self._permits = semaphore_plans.check_permits(permits)
        self._opts = _LeaseOptions.check(
            ttl,
            auto_renew,
            on_lost,
            min_replicas=min_replicas,
            replica_timeout=replica_timeout,
            replica_fsync=replica_fsync,
            adaptive=False,
        )
        self._label = check_label(label)
        # Until an acquire succeeds, a different count stored in Redis is an error.
        self._check = True
        # owner id -> the live leases it took through this object, oldest first
        self._held: dict[str, list[SemaphoreLease]] = {}
        # the leases of the open ``with semaphore:`` blocks
        self._blocks = _Holding(_PermitsOf(self, 1), None, self)

    @property
    def name(self) -> str:
        """The semaphore's name."""
        return self._keys.name

    @property
    def permits(self) -> int:
        """The permit count this object was given (or last set with :meth:`set_permits`)."""
        return self._permits

    @property
    def ttl(self) -> float:
        """The lease length in seconds."""
        return self._opts.ttl

    def acquire(
        self, n: int = 1, blocking: bool = True, timeout: float | None = None
    ) -> SemaphoreLease | None:
        """Take ``n`` permits as one lease for the calling thread or task.

        Args:
            n: the number of permits, an ``int`` from 1 to :attr:`permits`, and at
                most 10 000 (one sorted-set member per permit is written at once).
            blocking: wait for the permits if they are not free (default). With
                ``False``, make one attempt.
            timeout: the longest wait in seconds, from 0 to a year; ``None`` waits without
                limit. Not allowed with ``blocking=False``.

        Returns:
            A lease (:class:`SemaphoreLease`, truthy) of ``n`` permits, or
            ``None`` if they were not taken in time.

        Raises:
            InvalidArgument: a bad ``n``, ``blocking`` or ``timeout`` (nothing was
                sent); Redis stores another permit count than this object's (at
                its first acquire), or fewer than ``n`` (after ``set_permits``).
            NotReplicatedError: ``min_replicas`` replicas did not acknowledge the
                permits in time (or the server the wait reached did not hold
                them); they were given back, on the server that granted them
                (best effort: else they end by their ttl).
            WrongTypeError: a key of the semaphore holds a value of another type.
            UnsupportedServer: the server is older than Redis 6.2 / Valkey 7.2.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        n = semaphore_plans.check_n(n, self._permits)
        wait = lock_plans.check_acquire(blocking, timeout)
        owner = _driver.current_owner()
        for left in list(self._held.get(owner, ())):
            # a lease of this owner whose release was cut off (or that was
            # lost) is released first: its permits are not ours to keep
            if left._life.left_behind:
                left._clean_up()
        plan = semaphore_plans.acquire(
            self._keys,
            new_token(owner, label_of(self._label)),
            n,
            self._permits,
            self._opts.ttl,
            check=self._check,
            blocking=blocking,
            timeout=wait,
            now=time.monotonic,
        )

        def hold(grant: Grant) -> SemaphoreLease:
            self._check = False
            lease = SemaphoreLease(self, grant, n, owner)
            self._held.setdefault(owner, []).append(lease)
            return lease

        return _take_grant(  # type: ignore[no-any-return]
            self,
            plan,
            hold,
            lambda grant: SemaphoreLease(self, grant, n, owner)._release_plan(),
            replicated=self._opts.replicas is not None,
            blocking=blocking,
        )

    def release(self) -> None:
        """Release the calling thread's or task's latest lease taken through this
        object (see :meth:`SemaphoreLease.release`).

        Raises:
            NotOwnedError: the caller holds no lease of this object, or it expired.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        leases = self._held.get(_driver.current_owner())
        if not leases:
            raise NotOwnedError(self.name, None, "no permits held by this thread or task")
        leases[-1].release()

    def set_permits(self, permits: int) -> None:
        """Change the semaphore's permit count in Redis, for every user of the name.

        Safe while the semaphore is in use: held permits are never taken back.
        With fewer permits, new acquires wait until enough are given back; with
        more, the new permits go to the first waiters that fit at once. A waiter
        asking for more permits than the new count leaves the queue and its
        acquire raises :class:`~tenure.InvalidArgument` at once.

        Args:
            permits: the new count, an ``int`` from 1 to 2**53 - 1.

        Raises:
            InvalidArgument: ``permits`` is not an ``int`` from 1 to 2**53 - 1; nothing was sent.
            WrongTypeError: a key of the semaphore holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        permits = semaphore_plans.check_permits(permits)
        _driver.run(self._client, semaphore_plans.set_permits(self._keys, permits))
        self._permits = permits
        self._check = False

    def available(self) -> int:
        """The permits free now, as Redis says: the count less the permits held by
        leases that have not expired (0 while more are held than the count).

        Raises:
            WrongTypeError: a key of the semaphore holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return (self.info()).available

    def info(self) -> SemaphoreInfo:
        """A snapshot of the semaphore in Redis: its count, free permits, holders
        (token, permits, seconds left) and the number of queued waiters.

        A holder another program wrote as bytes that are not UTF-8 is shown
        with those bytes escaped (``b"\\xff"`` as ``"\\xff"``).

        Raises:
            WrongTypeError: a key of the semaphore holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return _driver.run(self._client, semaphore_plans.inspect(self._keys, self._permits))

    @overload
    def __call__(self, n: F) -> F: ...

    @overload
    def __call__(
        self, n: int = 1, *, timeout: float | None = None, skip: Literal[False] = False
    ) -> _Holding[SemaphoreLease]: ...

    @overload
    def __call__(
        self, n: int = 1, *, timeout: float | None = None, skip: Literal[True]
    ) -> _Skipping[SemaphoreLease]: ...

    @overload
    def __call__(
        self, n: int = 1, *, timeout: float | None = None, skip: bool
    ) -> _Guard[SemaphoreLease]: ...

    def __call__(
        self, n: int | F = 1, *, timeout: float | None = None, skip: bool = False
    ) -> F | _Guard[SemaphoreLease]:
        """A context manager that acquires ``n`` permits with ``timeout`` seconds and
        releases them on exit; also a decorator (``@semaphore(2, timeout=5)``,
        ``skip=True``: see :meth:`Lock.__call__ <tenure.Lock.__call__>`).
        Called with a function (``@semaphore``), it decorates it with one permit,
        waiting as long as it takes. Inside a block or a decorated call,
        :meth:`current_lease` is its lease.

        Raises:
            InvalidArgument: (on entry) a bad ``n`` or ``timeout``, or
                ``skip=True`` on a block; (decorating) a function of the other flavour.
            AcquireTimeout: (on entry, or each decorated call without
                ``skip``) the permits were not taken within ``timeout``.
        """
        if callable(n):
            return cast(F, self._blocks(n))
        if skip:
            return _Skipping(_PermitsOf(self, n), timeout, self)
        return _Holding(_PermitsOf(self, n), timeout, self)

    def current_lease(self) -> SemaphoreLease:
        """The lease of the innermost ``with`` block of this semaphore
        (``with semaphore:``, ``with semaphore(n, timeout=...):``) or call of a
        function it decorates that is open in the calling thread or task (a
        task started inside one inherits it). No I/O.

        Raises:
            NotOwnedError: no such block or call is open here.
        """
        lease: SemaphoreLease = _current_lease(self, self.name)
        return lease

    @block_enter
    def __enter__(self) -> SemaphoreLease:
        """Take one permit, waiting as long as it takes; the block's exit gives
        back exactly this lease.

        Raises:
            WrongTypeError: a key of the semaphore holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return self._blocks.__enter__()

    @block_exit
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        statement: int | None = None,
    ) -> None:
        # the lease this block took, whatever else it took
        _Guard.__exit__(self._blocks, exc_type, exc, tb, statement)

    def __repr__(self) -> str:
        leases = [lease for held in self._held.values() for lease in held if lease.valid]
        if leases:
            permits = sum(lease.permits for lease in leases)
            state = f"held here: {permits} permits in {len(leases)} leases"
        else:
            state = "none held here"
        return (
            f"<{type(self).__name__} {self.name!r} permits={self._permits} "
            f"ttl={self._opts.ttl:g}s {state}>"
        )

    def _forget(self, lease: SemaphoreLease) -> None:
        leases = self._held.get(lease._holder)
        if leases is not None and lease in leases:
            # (two threads releasing one lease both end it: never an error here)
            with contextlib.suppress(ValueError):
                leases.remove(lease)
            if not leases:
                self._held.pop(lease._holder, None)
        _driver.unwatch(self._client, lease._watch)
