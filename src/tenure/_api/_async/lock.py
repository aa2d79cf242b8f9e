"""``AsyncLock``, the distributed mutual-exclusion lock, and its ``AsyncLease``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..._drivers import _async as _driver
from ..._drivers._identity import new_token
from ..._errors import InvalidArgument, NotOwnedError
from ..._keys import DEFAULT_PREFIX, lock_keys
from ..._plans import lock as lock_plans
from ..._plans.waiting import Grant
from ..._protocol import Eval, Plan
from ._base import _BOOK, _AsyncHeldLease, _LeaseOptions, check_label, label_of
from ._blocks import _AsyncBlocks
from ._docs import shared_args
from ._grants import _take_grant

if TYPE_CHECKING:  # (imported on first use)
    from ..._adaptive import AdaptiveTTL
    from ..._info import LockInfo


class AsyncLease(_AsyncHeldLease["AsyncLock"]):
    """A held lock: returned by a successful :meth:`AsyncLock.acquire`.

    A lease is truthy. It holds until :meth:`release`, or until its ttl runs out
    in Redis; the client's watchdog renews it while held if the lock renews
    (``auto_renew``). ``valid`` and ``remaining`` tell, on this process's
    monotonic clock, whether it can still be trusted, and ``lost`` is set (and
    the ``on_lost`` callbacks run) as soon as it is known lost. See
    :class:`tenure.LeaseBase` for the attributes (``name``, ``owner``,
    ``fence``, ``ttl``, ``expires_at``, ``lost``).
    """

    __slots__ = ("_holder",)

    def __init__(self, lock: AsyncLock, grant: Grant, holder: str) -> None:
        super().__init__(lock, grant)
        self._holder = holder

    def _release_plan(self) -> Plan[None]:
        return self._lock._release_plan(self.owner, self.fence, self._life.release_op)

    def _extend_plan(self, seconds: float) -> Plan[float]:
        lock = self._lock
        return lock_plans.extend(
            lock._keys,
            self.owner,
            self.fence,
            seconds,
            time.monotonic,
            ttl=self._redis_ttl,
            delay_ms=lock._opts.delay_ms,
        )

    def _renewal(self) -> Eval:
        lock = self._lock
        return lock_plans.renewal(
            lock._keys,
            self.owner,
            self.ttl,
            ttl=self._redis_ttl,
            delay_ms=lock._opts.delay_ms,
        )


@shared_args(
    prefix="It is for ``name``: with ``key``, any prefix but the default is refused"
    " (an exact key is used as it is)."
)
class AsyncLock(_AsyncBlocks[AsyncLease]):
    """A distributed mutual-exclusion lock with a lease and a fencing token.

    One owner at a time holds the lock, across every process that uses the same
    Redis or Valkey server and name. Each thread or task is its own owner: a
    ``AsyncLock`` object may be shared, and one owner can never release another
    owner's lease. Unlike ``asyncio.Lock``, ownership is a lease: it ends after
    ``ttl`` seconds unless extended, so a crashed holder cannot block the lock
    forever, and a holder that stalls past its lease loses the lock without
    being told. Protect what the lock guards with the lease's ``fence``.

    Waiting does not poll. Waiters queue in Redis, one thread or task per
    process and name (the others queue behind it in the process), and a release
    hands the lock straight to the first of them: the waiter holds the lock
    when the release's message reaches it. A releaser that asks again queues
    behind the waiters. If the message is lost, the waiter retries when the
    holder's lease would have run out.

    Args:
        {client}
        name: the lock's name; its keys are ``<prefix>{<name>}`` and siblings
            (``{``, ``}`` and ``%`` in the name are written ``%7B``, ``%7D``, ``%25``).
        key: instead of ``name``, an exact Redis key. The lock then speaks the
            common ``SET key token NX PX`` protocol, so it and redis-py's ``Lock``
            (or node-redlock, redsync) holding the same key exclude each other.
            Its other keys are made from the whole key, in its hash slot
            (``{<key>}:key:fence``, ...); a key that is a named lock's main key
            (``tenure:{orders}``) is that lock.
        {lease_args}

    Raises:
        InvalidArgument: ``client`` is not a client this class accepts (a URL,
            ``None``, a client of the other API, a pipeline, a valkey-py cluster client);
            both or neither of ``name`` and ``key``; a ``prefix`` with ``key``; an empty or
            non-``str`` name, key or prefix; a ttl that is not a number from 0.01 to a year;
            a bad ``auto_renew``, ``on_lost``, ``lock_delay``, ``min_replicas``,
            ``replica_timeout`` or ``replica_fsync``.

    Example::

        lock = AsyncLock(client, "orders:42", ttl=10)
        async with lock as lease:
            await charge(order, fence=lease.fence)
    """

    def __init__(
        self,
        client: _driver.Client,
        name: str | None = None,
        *,
        key: str | None = None,
        ttl: float | AdaptiveTTL | None = None,
        auto_renew: bool | None = None,
        on_lost: Callable[[AsyncLease], object] | None = None,
        lock_delay: float = 0.0,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        replica_fsync: bool = False,
        prefix: str = DEFAULT_PREFIX,
        label: str | None = None,
    ) -> None:
        self._client = _driver.check_client(client, "AsyncLock")
        if key is not None and prefix != DEFAULT_PREFIX:
            raise InvalidArgument(
                f"prefix={prefix!r} can't go with key={key!r}: an exact key is used as it is"
            )
        self._keys = lock_keys(name, key=key, prefix=prefix)
        self._opts = _LeaseOptions.check(
            ttl, auto_renew, on_lost, lock_delay, min_replicas, replica_timeout, replica_fsync
        )
        self._label = check_label(label)
        self._leases: dict[str, AsyncLease] = {}

    @property
    def name(self) -> str:
        """The lock's name, or its exact key."""
        return self._keys.name

    @property
    def ttl(self) -> float:
        """The lease length in seconds (with an :class:`AdaptiveTTL`, the next lease's)."""
        return self._opts.next_ttl(self._keys.lock)

    async def acquire(
        self, blocking: bool = True, timeout: float | None = None
    ) -> AsyncLease | None:
        """Take the lock for the calling thread or task.

        Args:
            blocking: wait for the lock if it is held (default). With ``False``,
                make one attempt.
            timeout: the longest wait in seconds, from 0 to a year; ``None`` waits without
                limit. Not allowed with ``blocking=False``.

        Returns:
            An :class:`AsyncLease` (truthy) whose ``fence`` is larger than any
            earlier holder's, or ``None`` if the lock was not taken in time.

        Raises:
            InvalidArgument: a bad ``blocking`` or ``timeout``; nothing was sent.
            AlreadyHeldError: the caller already holds this lock.
            NotReplicatedError: ``min_replicas`` replicas did not acknowledge the
                new lease in time (or the server the wait reached did not hold
                it); it was released, on the server that granted it (best
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

    async def _prepare(
        self, owner: str, blocking: bool, timeout: float | None
    ) -> Plan[Grant | None]:
        """The acquire plan of ``owner``, once a lease it left behind (lost, or
        its release not completed) was cleaned up."""
        left_behind, held = _BOOK.look_up((id(self._client), self._keys.lock, owner))
        if left_behind is not None:
            # Redis may still hold it with our token: never AlreadyHeldError for it.
            await left_behind._clean_up()
        # If held, the first attempt settles it, never queued behind our own gate.
        return self._acquire_plan(owner, blocking, timeout, held)

    def _give_back(self, grant: Grant, owner: str) -> Plan[None]:
        """The release of ``owner``'s ``grant`` whose lease its caller never
        got (see ``_take_grant``)."""
        return self._release_plan(grant.token, grant.fence, "")

    def _granted(self, owner: str, grant: Grant) -> AsyncLease:
        """The lease of ``grant`` (the reply of :meth:`_prepare`'s plan), known
        to this object and the lease book; its ``_start`` is the caller's."""
        lease = AsyncLease(self, grant, owner)
        _BOOK.put((id(self._client), self._keys.lock, owner), lease)
        # last, a plain store with no call after it: a lease whose making an
        # interrupt cut off (its grant given back) is never the owner's here
        self._leases[owner] = lease
        return lease

    def _acquire_plan(
        self, owner: str, blocking: bool, timeout: float | None, maybe_held: bool
    ) -> Plan[Grant | None]:
        return lock_plans.acquire(
            self._keys,
            owner,
            new_token(owner, label_of(self._label)),
            self.ttl,
            blocking=blocking,
            timeout=timeout,
            now=time.monotonic,
            maybe_held=maybe_held,
            delay_ms=self._opts.delay_ms,
        )

    def _release_plan(self, token: str, fence: int, op: str) -> Plan[None]:
        return lock_plans.release(self._keys, token, fence, self._opts.delay_ms, op=op)

    async def release(self) -> None:
        """Release the calling thread's or task's lease (see :meth:`AsyncLease.release`).

        Raises:
            NotOwnedError: the caller holds no lease of this lock, or it expired.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        await self._lease().release()

    async def extend(self, seconds: float | None = None) -> None:
        """Extend the calling thread's or task's lease (see :meth:`AsyncLease.extend`).

        Raises:
            InvalidArgument: ``seconds`` is not a number of seconds from 0.01 to a year.
            NotOwnedError: the caller holds no lease of this lock, or it expired.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        await self._lease().extend(seconds)

    async def locked(self) -> bool:
        """Whether anyone holds the lock now (a snapshot; it may change at once).

        Any value there counts, another program's too, bytes that are not
        UTF-8 included.

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        state = await _driver.run(self._client, lock_plans.inspect(self._keys))
        return state.holder != ""

    async def info(self) -> LockInfo:
        """A snapshot of the lock in Redis: holder, seconds left, last fence, waiters.

        A holder another program wrote as bytes that are not UTF-8 is shown
        with those bytes escaped (``b"\\xff"`` as ``"\\xff"``).

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        s = await _driver.run(self._client, lock_plans.inspect(self._keys))
        return lock_plans.lock_info(self.name, s.holder, 1, s.pttl_ms, s.fence, s.waiters)

    async def owned(self) -> bool:
        """Whether the calling thread or task holds the lock, as Redis says now.

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        lease = self._leases.get(_driver.current_owner())
        if lease is None:
            return False
        state = await _driver.run(self._client, lock_plans.inspect(self._keys))
        return state.holder == lease.owner

    def __repr__(self) -> str:
        held = len(self._leases)
        return f"<{type(self).__name__} {self.name!r} ttl={self._opts.ttl:g}s held_here={held}>"

    def _lease(self) -> AsyncLease:
        lease = self._leases.get(_driver.current_owner())
        if lease is None:
            raise NotOwnedError(self.name, None, "not held by this thread or task")
        return lease

    def _forget(self, lease: AsyncLease) -> None:
        if self._leases.get(lease._holder) is lease:
            # (two threads releasing one lease both end it: never a KeyError)
            self._leases.pop(lease._holder, None)
        _driver.unwatch(self._client, lease._watch)
        self._opts.record(self._keys.lock, lease.acquired_at)
