"""``AsyncRLock``, the distributed reentrant lock, and its ``AsyncRLockLease``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..._drivers import _async as _driver
from ..._drivers._identity import new_op
from ..._errors import NotOwnedError
from ..._keys import DEFAULT_PREFIX, rlock_keys
from ..._plans import lock as lock_plans
from ..._plans import rlock as rlock_plans
from ..._plans.waiting import Grant
from ..._protocol import Eval, Plan
from ._base import _LeaseOptions, check_label, label_of
from ._blocks import _AsyncBlocks
from ._docs import shared_args
from ._grants import _take_grant
from ._holds import _AsyncHoldLease, _AsyncHolds

if TYPE_CHECKING:  # (imported on first use)
    from ..._adaptive import AdaptiveTTL
    from ..._info import LockInfo


class AsyncRLockLease(_AsyncHoldLease["AsyncRLock"]):
    """One level of a held :class:`AsyncRLock`: returned by each successful acquire.

    A lease is truthy. Every acquire by the owner that holds the lock returns a
    new lease of the same hold: the same ``owner`` and ``fence``, and the hold
    count one higher. Releasing a lease counts the hold down by one; the lock is
    free (or handed to the next waiter) when the count reaches zero. The lease
    ends with its ttl in Redis unless extended: ``extend`` and every re-entry
    reset the whole hold's lease, and ``expires_at`` of every lease of the hold
    held through this lock object follows. See :class:`tenure.LeaseBase` for the
    attributes (``name``, ``owner``, ``fence``, ``ttl``, ``expires_at``);
    ``owner`` is the holding thread's or task's owner id, the field stored in Redis.
    """

    __slots__ = ()

    def __init__(self, lock: AsyncRLock, grant: Grant) -> None:
        super().__init__(lock, grant, grant.token, str(grant.fence))

    # Re-declared for its docstring alone: a release counts the hold down.
    async def release(self) -> None:
        """Count the hold down by one; at zero, release the lock and hand it to the
        next waiter.

        Raises:
            LockLostError: the hold was lost (``lost`` is set): its deadline
                passed, or Redis no longer has it (the message gives the name,
                fence and why). Every lease of the hold ends.
            NotOwnedError: this lease was already released. Nothing was changed.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        self._life.asked = True  # first, no call before it: see LeaseLife.asked
        return await super().release()

    def _release_plan(self) -> Plan[int]:
        lock = self._lock
        return rlock_plans.release(
            lock._keys,
            lock._field(self.owner),
            self.fence,
            op=self._life.release_op,
            delay_ms=lock._opts.delay_ms,
        )

    def _extend_plan(self, seconds: float) -> Plan[float]:
        lock = self._lock
        return rlock_plans.extend(
            lock._keys,
            lock._field(self.owner),
            self.fence,
            seconds,
            time.monotonic,
            ttl=self.ttl,
            delay_ms=lock._opts.delay_ms,
        )

    def _renewal(self) -> Eval:
        lock = self._lock
        return rlock_plans.renewal(
            lock._keys,
            lock._field(self.owner),
            self.fence,
            self.ttl,
            ttl=self.ttl,
            delay_ms=lock._opts.delay_ms,
        )


@shared_args(
    ttl="An :class:`AdaptiveTTL` records each hold, from its first acquire to the"
    " release at count zero.",
    on_lost="Every lease of a hold is lost together.",
)
class AsyncRLock(_AsyncHolds[AsyncRLockLease], _AsyncBlocks[AsyncRLockLease]):
    """A distributed reentrant lock: one owner at a time, which may take it again.

    Like :class:`AsyncLock` (a lease, a fencing token, waiting without
    polling), but the thread or task that holds the lock can acquire it again
    without waiting: each acquire returns a new lease of the same hold, with the
    same ``fence``, and counts the hold up by one; each release counts it down,
    and the lock is free (or handed to the first waiter) when the count is back
    to zero, as with ``threading.RLock``. The count lives in Redis (a hash
    ``{<owner id>: <count>}`` whose expiry is the lease), so it is shared by every
    ``AsyncRLock`` object of the same name and client process, and each thread
    or task is its own owner: an ``AsyncRLock`` object may be shared. Every
    re-entry and every ``extend`` resets the whole hold's lease to its length.

    Args:
        {client}
        name: the lock's name; its keys are ``<prefix>{<name>}:rlock`` and
            siblings, apart from any ``AsyncLock``'s. There is no exact-key mode.
        {lease_args}

    Raises:
        InvalidArgument: ``client`` is not a client this class accepts (a URL,
            ``None``, a client of the other API, a pipeline, a valkey-py cluster client);
            an empty or non-``str`` name or prefix; a ttl that is not
            a number from 0.01 to a year; a bad ``auto_renew``, ``on_lost``,
            ``lock_delay``, ``min_replicas``, ``replica_timeout`` or ``replica_fsync``.

    Example::

        lock = AsyncRLock(client, "orders:42", ttl=10)
        async with lock as lease:
            async with lock as inner:  # the same owner: no wait
                assert inner.fence == lease.fence
                assert await lock.hold_count() == 2
    """

    def __init__(
        self,
        client: _driver.Client,
        name: str,
        *,
        ttl: float | AdaptiveTTL | None = None,
        auto_renew: bool | None = None,
        on_lost: Callable[[AsyncRLockLease], object] | None = None,
        lock_delay: float = 0.0,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        replica_fsync: bool = False,
        prefix: str = DEFAULT_PREFIX,
        label: str | None = None,
    ) -> None:
        self._client = _driver.check_client(client, "AsyncRLock")
        self._keys = rlock_keys(name, prefix=prefix)
        self._opts = _LeaseOptions.check(
            ttl, auto_renew, on_lost, lock_delay, min_replicas, replica_timeout, replica_fsync
        )
        self._label = check_label(label)
        # by owner id (a hold's id is its fence)
        self._watches = {}
        self._holds = {}

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._keys.name

    @property
    def ttl(self) -> float:
        """The lease length in seconds (with an :class:`AdaptiveTTL`, the next hold's)."""
        return self._opts.next_ttl(self._keys.lock)

    async def acquire(
        self, blocking: bool = True, timeout: float | None = None
    ) -> AsyncRLockLease | None:
        """Take the lock for the calling thread or task, or enter it again.

        If the caller already holds the lock this returns at once (one round
        trip), with the hold count one higher and the hold's lease reset to the ttl.

        Args:
            blocking: wait for the lock if another owner holds it (default). With
                ``False``, make one attempt.
            timeout: the longest wait in seconds, from 0 to a year; ``None`` waits without
                limit. Not allowed with ``blocking=False``.

        Returns:
            An :class:`AsyncRLockLease` (truthy) whose ``fence`` is larger than any
            earlier holder's (a re-entry's is its hold's), or ``None`` if the lock
            was not taken in time.

        Raises:
            InvalidArgument: a bad ``blocking`` or ``timeout``; nothing was sent.
            NotReplicatedError: ``min_replicas`` replicas did not acknowledge the
                acquire in time (or the server the wait reached did not hold
                it); it was undone, on the server that granted it (best
                effort: else it ends by its ttl).
            WrongTypeError: a key of the lock holds a value of another type.
            UnsupportedServer: the server is older than Redis 6.2 / Valkey 7.2.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        wait = lock_plans.check_acquire(blocking, timeout)
        owner = _driver.current_owner()
        plan = await self._prepare(owner, blocking, wait)
        return await _take_grant(  # type: ignore[no-any-return]
            self,
            plan,
            lambda grant: self._granted(owner, grant),
            lambda grant: self._give_back(grant, owner),
            replicated=self._opts.replicas is not None,
            blocking=blocking,
        )

    def _give_back(self, grant: Grant, owner: str) -> Plan[int]:
        """The release of ``owner``'s ``grant`` whose lease its caller never
        got (see ``_take_grant``): one hold level."""
        return rlock_plans.release(self._keys, owner, grant.fence, delay_ms=self._opts.delay_ms)

    def _field(self, owner: str) -> str:
        """``owner`` as the scripts are told it: its owner id and this object's
        label, the field of a hold it begins (and, usually, of the hold it has:
        one look-up in Redis; a hold begun with another label is found by the
        owner id all the same)."""
        return owner + label_of(self._label)

    async def _prepare(
        self, owner: str, blocking: bool, timeout: float | None
    ) -> Plan[Grant | None]:
        """The acquire plan of ``owner``, once its releases that did not
        complete were sent again."""
        await self._settle_releases(owner)
        return rlock_plans.acquire(
            self._keys,
            owner,
            self.ttl,
            blocking=blocking,
            timeout=timeout,
            now=time.monotonic,
            op=new_op(),
            delay_ms=self._opts.delay_ms,
            label=label_of(self._label),
        )

    def _granted(self, owner: str, grant: Grant) -> AsyncRLockLease:
        """The lease of ``grant`` (the reply of :meth:`_prepare`'s plan), added
        to its hold; its ``_start`` is the caller's."""
        lease = AsyncRLockLease(self, grant)
        self._add(lease)
        return lease

    async def release(self) -> None:
        """Release the calling thread's or task's latest lease of this lock object
        (see :meth:`AsyncRLockLease.release`): the hold count goes down by one.

        Raises:
            NotOwnedError: the caller holds no lease of this lock object (released
                as many times as acquired), or the hold expired.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        await self._latest().release()

    async def extend(self, seconds: float | None = None) -> None:
        """Extend the calling thread's or task's hold (see :meth:`AsyncRLockLease.extend`).

        Raises:
            InvalidArgument: ``seconds`` is not a number of seconds from 0.01 to a year.
            NotOwnedError: the caller holds no lease of this lock object, or it expired.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        await self._latest().extend(seconds)

    async def locked(self) -> bool:
        """Whether any owner holds the lock now (a snapshot; it may change at once).

        Any value there counts, another program's too, bytes that are not
        UTF-8 included.

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        state = await _driver.run(self._client, rlock_plans.inspect(self._keys))
        return state.holder != ""

    async def owned(self) -> bool:
        """Whether the calling thread or task holds the lock, as Redis says now.

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return await self.hold_count() > 0

    async def info(self) -> LockInfo:
        """A snapshot of the lock in Redis: holder (owner id) and its hold count,
        seconds left, last fence, waiters.

        A holder another program wrote as bytes that are not UTF-8 is shown
        with those bytes escaped (``b"\\xff"`` as ``"\\xff"``).

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        s = await _driver.run(self._client, rlock_plans.inspect(self._keys))
        return lock_plans.lock_info(
            self.name, s.holder, s.count, s.pttl_ms, s.fence, s.waiters, bare=True
        )

    async def hold_count(self) -> int:
        """The calling thread's or task's hold count, as Redis says now: how many
        acquires it has not yet released (0 when it does not hold the lock).

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        owner = _driver.current_owner()
        state = await _driver.run(self._client, rlock_plans.inspect(self._keys, owner))
        return state.mine

    def __repr__(self) -> str:
        holds = [leases for leases in self._holds.values() if leases]
        state = self._held_here(holds[-1]) if holds else "not held here"
        return f"<{type(self).__name__} {self.name!r} ttl={self._opts.ttl:g}s {state}>"

    def _latest(self) -> AsyncRLockLease:
        leases = self._holds.get(_driver.current_owner())
        if not leases:
            raise NotOwnedError(self.name, None, "not held by this thread or task")
        return leases[-1]

    def _ttl_key(self, lease: AsyncRLockLease) -> str:
        return self._keys.lock
