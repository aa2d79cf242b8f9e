"""The asyncio facade. The synchronous facade is generated from this file.

Edit this file, then run ``python scripts/unasync.py`` to regenerate ``_sync.py``
(CI runs it with ``--check``).
"""

from __future__ import annotations

import time
from types import TracebackType

from .._drivers import _async as _driver
from .._drivers._identity import new_token
from .._errors import AcquireTimeout, NotOwnedError
from .._keys import lock_keys
from .._models import LeaseBase
from .._plans import lock as lock_plans
from .._units import check_seconds

#: The lease length, in seconds, of a lock created without ``ttl``.
DEFAULT_TTL = 30.0


class AsyncLease(LeaseBase):
    """A held lock: returned by a successful :meth:`AsyncLock.acquire`.

    A lease is truthy. It holds until :meth:`release`, or until its ttl runs out
    in Redis; ``valid`` and ``remaining`` tell, on this process's monotonic
    clock, whether it can still be trusted. See :class:`tenure.LeaseBase` for the
    attributes (``name``, ``owner``, ``fence``, ``ttl``, ``expires_at``).
    """

    __slots__ = ("_holder", "_lock")

    def __init__(self, lock: AsyncLock, grant: lock_plans.Grant, holder: str) -> None:
        super().__init__(lock.name, grant)
        self._lock = lock
        self._holder = holder

    async def release(self) -> None:
        """Release the lock and hand it to the next waiter.

        Raises:
            NotOwnedError: the lease was already released, or it expired and the
                lock is no longer held with this lease's token (the message
                gives the name and fence). Nothing was changed in Redis.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        lock = self._lock
        if self._released:
            raise NotOwnedError(self.name, self.fence, "can't release: already released")
        try:
            await _driver.run(lock._client, lock_plans.release(lock._keys, self.owner, self.fence))
        except NotOwnedError:
            self._end()
            raise
        self._end()

    async def extend(self, seconds: float | None = None) -> None:
        """Reset the lease to end ``seconds`` from now (default: its ttl).

        Args:
            seconds: the new remaining lease, in seconds, > 0.

        Raises:
            InvalidArgument: ``seconds`` is not a positive number.
            NotOwnedError: the lease was released, or it expired in Redis.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        seconds = self.ttl if seconds is None else check_seconds(seconds, "seconds")
        if self._released:
            raise NotOwnedError(self.name, self.fence, "can't extend: already released")
        lock = self._lock
        try:
            self.expires_at = await _driver.run(
                lock._client,
                lock_plans.extend(lock._keys, self.owner, self.fence, seconds, time.monotonic),
            )
        except NotOwnedError:
            self._end()
            raise
        self.ttl = seconds

    def _end(self) -> None:
        self._released = True
        self._lock._forget(self)

    async def __aenter__(self) -> AsyncLease:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()


class AsyncLock:
    """A distributed mutual-exclusion lock with a lease and a fencing token.

    One owner at a time holds the lock, across every process that uses the same
    Redis or Valkey server and name. Each thread or task is its own owner: a
    ``AsyncLock`` object may be shared, and one owner can never release another
    owner's lease. Unlike ``asyncio.Lock``, ownership is a lease: it ends after
    ``ttl`` seconds unless extended, so a crashed holder cannot block the lock
    forever, and a holder that stalls past its lease loses the lock without
    being told. Protect what the lock guards with the lease's ``fence``.

    Waiting does not poll. A waiting process listens on a wake channel and its
    one contender per name retries when a release wakes it, or when the
    holder's lease runs out, whichever comes first.

    Args:
        client: your ``redis.asyncio.Redis`` client (its pool, TLS and ACL settings
            are used as they are; tenure adds one pub/sub connection per client
            while something waits).
        name: the lock's name; its keys are ``<prefix>{<name>}`` and siblings.
        key: instead of ``name``, an exact Redis key. The lock then speaks the
            common ``SET key token NX PX`` protocol, so it and redis-py's ``Lock``
            (or node-redlock, redsync) holding the same key exclude each other.
        ttl: the lease length in seconds, > 0 (default 30).
        prefix: the key prefix for ``name`` (default ``"tenure:"``).

    Raises:
        InvalidArgument: both or neither of ``name`` and ``key``; an empty or
            non-``str`` name, key or prefix; a ttl that is not a positive number.

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
        ttl: float | None = None,
        prefix: str = "tenure:",
    ) -> None:
        self._keys = lock_keys(name, key=key, prefix=prefix)
        self._ttl = DEFAULT_TTL if ttl is None else check_seconds(ttl, "ttl")
        self._client = client
        self._leases: dict[str, AsyncLease] = {}

    @property
    def name(self) -> str:
        """The lock's name, or its exact key."""
        return self._keys.name

    @property
    def ttl(self) -> float:
        """The lease length in seconds."""
        return self._ttl

    async def acquire(
        self, blocking: bool = True, timeout: float | None = None
    ) -> AsyncLease | None:
        """Take the lock for the calling thread or task.

        Args:
            blocking: wait for the lock if it is held (default). With ``False``,
                make one attempt.
            timeout: the longest wait in seconds, >= 0; ``None`` waits without
                limit. Not allowed with ``blocking=False``.

        Returns:
            An :class:`AsyncLease` (truthy) whose ``fence`` is larger than any
            earlier holder's, or ``None`` if the lock was not taken in time.

        Raises:
            InvalidArgument: a bad ``blocking`` or ``timeout``; nothing was sent.
            AlreadyHeldError: the caller already holds this lock.
            WrongTypeError: a key of the lock holds a value of another type.
            UnsupportedServer: the server is older than Redis 6.2 / Valkey 7.2.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        wait = lock_plans.check_acquire(blocking, timeout)
        owner = _driver.current_owner()
        plan = lock_plans.acquire(
            self._keys,
            owner,
            new_token(owner),
            self._ttl,
            blocking=blocking,
            timeout=wait,
            now=time.monotonic,
        )
        grant = await _driver.run(self._client, plan)
        if grant is None:
            return None
        lease = AsyncLease(self, grant, owner)
        self._leases[owner] = lease
        return lease

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
            InvalidArgument: ``seconds`` is not a positive number.
            NotOwnedError: the caller holds no lease of this lock, or it expired.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        await self._lease().extend(seconds)

    async def locked(self) -> bool:
        """Whether anyone holds the lock now (a snapshot; it may change at once).

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        state = await _driver.run(self._client, lock_plans.inspect(self._keys))
        return state.holder != ""

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

    def __call__(self, *, timeout: float | None = None) -> _AsyncHolding:
        """A context manager that acquires with ``timeout`` seconds and releases on exit.

        Raises:
            AcquireTimeout: (on entry) the lock was not taken within ``timeout``.
        """
        return _AsyncHolding(self, timeout)

    async def __aenter__(self) -> AsyncLease:
        return await _AsyncHolding(self, None).__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()

    def __repr__(self) -> str:
        held = len(self._leases)
        return f"<{type(self).__name__} {self.name!r} ttl={self._ttl:g}s held_here={held}>"

    def _lease(self) -> AsyncLease:
        lease = self._leases.get(_driver.current_owner())
        if lease is None:
            raise NotOwnedError(self.name, None, "not held by this thread or task")
        return lease

    def _forget(self, lease: AsyncLease) -> None:
        if self._leases.get(lease._holder) is lease:
            del self._leases[lease._holder]


class _AsyncHolding:
    """``async with lock(timeout=...)``: acquire on entry, release on exit."""

    def __init__(self, lock: AsyncLock, timeout: float | None) -> None:
        self._lock = lock
        self._timeout = timeout
        self._lease: AsyncLease | None = None

    async def __aenter__(self) -> AsyncLease:
        lease = await self._lock.acquire(timeout=self._timeout)
        if lease is None:
            raise AcquireTimeout(self._lock.name, self._timeout)
        self._lease = lease
        return lease

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._lease is not None
        await self._lease.release()
