"""``AsyncReadWriteLock`` (many readers or one writer), its two views and their leases."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..._drivers import _async as _driver
from ..._drivers._identity import new_op
from ..._errors import NotOwnedError
from ..._keys import DEFAULT_PREFIX, rwlock_keys
from ..._models import PerProcess
from ..._plans import lock as lock_plans
from ..._plans import rwlock as rwlock_plans
from ..._protocol import Eval, Plan
from ._base import _LeaseOptions, check_label, label_of
from ._blocks import _AsyncBlocks
from ._docs import shared_args
from ._grants import _take_grant
from ._holds import _AsyncHoldLease, _AsyncHolds

if TYPE_CHECKING:  # (imported on first use)
    from ..._adaptive import AdaptiveTTL
    from ..._info import ReadWriteInfo


class AsyncReadWriteLease(_AsyncHoldLease["AsyncReadWriteLock"]):
    """One level of a held read or write lock of an :class:`AsyncReadWriteLock`:
    returned by each successful ``rw.read.acquire()`` / ``rw.write.acquire()``.

    A lease is truthy. ``mode`` is ``"read"`` or ``"write"``. Each owner (thread
    or task) has at most one read hold and one write hold of a lock; every
    acquire of a mode the owner holds returns a new lease of the same hold (the
    same ``fence``) and counts it up by one, and releasing a lease counts it
    down. A hold is its own lease in Redis, ended by its ttl unless extended:
    ``extend`` and every re-entry reset the whole hold's lease, and
    ``expires_at`` of every lease of the hold taken through this lock object
    follows. A write hold's ``fence`` is minted for it (larger than every
    earlier hold's); a read hold's is the last fence minted when it began (that
    of the last writer before it). See :class:`tenure.LeaseBase` for the other
    attributes.
    """

    __slots__ = ("mode",)

    def __init__(self, rw: AsyncReadWriteLock, grant: rwlock_plans.RWGrant) -> None:
        super().__init__(rw, grant, (grant.token, grant.mode), grant.hold)
        self.mode: rwlock_plans.Mode = grant.mode

    # Re-declared for its docstring alone: a release counts the hold down.
    async def release(self) -> None:
        """Count the hold down by one; at zero the hold ends and the lock is handed
        on to the waiters it lets in. Releasing the write hold while the owner
        also holds the read lock is a downgrade: the read hold stays.

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
        rw = self._lock
        return rwlock_plans.release(
            rw._keys,
            self.owner,
            self.mode,
            self._hold,
            self.fence,
            op=self._life.release_op,
            delay_ms=rw._opts.delay_ms,
        )

    def _extend_plan(self, seconds: float) -> Plan[float]:
        rw = self._lock
        return rwlock_plans.extend(
            rw._keys,
            self.owner,
            self.mode,
            self._hold,
            seconds,
            time.monotonic,
            ttl=self._redis_ttl,
            delay_ms=rw._opts.delay_ms,
            fence=self.fence,
        )

    def _renewal(self) -> Eval:
        rw = self._lock
        return rwlock_plans.renewal(
            rw._keys,
            self.owner,
            self.mode,
            self._hold,
            self.ttl,
            ttl=self._redis_ttl,
            delay_ms=rw._opts.delay_ms,
        )

    def __repr__(self) -> str:
        return super().__repr__().replace(" fence=", f" {self.mode} fence=", 1)


class AsyncReadWriteView(_AsyncBlocks[AsyncReadWriteLease]):
    """The read lock (``rw.read``) or the write lock (``rw.write``) of an
    :class:`AsyncReadWriteLock`, with the interface of every lock:
    ``acquire``, ``release``, ``extend``, ``locked``, ``owned``,
    ``hold_count``, ``async with rw.read:`` and ``async with rw.write(timeout=2):``.
    """

    def __init__(self, rw: AsyncReadWriteLock, mode: rwlock_plans.Mode) -> None:
        self._rw = rw
        self._mode: rwlock_plans.Mode = mode

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._rw.name

    @property
    def mode(self) -> rwlock_plans.Mode:
        """``"read"`` or ``"write"``."""
        return self._mode

    @property
    def lock(self) -> AsyncReadWriteLock:
        """The read-write lock this is a view of."""
        return self._rw

    async def acquire(
        self, blocking: bool = True, timeout: float | None = None
    ) -> AsyncReadWriteLease | None:
        """Take this mode of the lock for the calling thread or task, or enter it again.

        The read lock is shared: it is granted while no writer holds the lock
        and no writer waits ahead of the caller. The write lock is exclusive: it
        is granted when nobody holds the lock, in the order of the queue. An
        owner that holds this mode already, and a write holder asking for the
        read lock, get it at once (one round trip), whoever waits.

        Args:
            blocking: wait for the lock (default). With ``False``, make one attempt.
            timeout: the longest wait in seconds, from 0 to a year; ``None`` waits without
                limit. Not allowed with ``blocking=False``.

        Returns:
            An :class:`AsyncReadWriteLease` (truthy), or ``None`` if the lock
            was not taken in time.

        Raises:
            InvalidArgument: a bad ``blocking`` or ``timeout``; nothing was sent.
            LockUpgradeError: (write lock) the caller holds the read lock and not
                the write lock: an upgrade is refused, at once.
            NotReplicatedError: ``min_replicas`` replicas did not acknowledge the
                acquire in time (or the server the wait reached did not hold
                it); it was undone, on the server that granted it (best
                effort: else it ends by its ttl).
            WrongTypeError: a key of the lock holds a value of another type.
            UnsupportedServer: the server is older than Redis 6.2 / Valkey 7.2.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return await self._rw._acquire(self._mode, blocking, timeout)

    async def release(self) -> None:
        """Release the calling thread's or task's latest lease of this mode taken
        through this lock object (see :meth:`AsyncReadWriteLease.release`).

        Raises:
            NotOwnedError: the caller holds no lease of this mode through this
                lock object, or the hold expired.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        await self._rw._latest(self._mode).release()

    async def extend(self, seconds: float | None = None) -> None:
        """Extend the calling thread's or task's hold of this mode (see
        :meth:`AsyncReadWriteLease.extend`).

        Raises:
            InvalidArgument: ``seconds`` is not a number of seconds from 0.01 to a year.
            NotOwnedError: the caller holds no lease of this mode through this
                lock object, or it expired.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        await self._rw._latest(self._mode).extend(seconds)

    async def locked(self) -> bool:
        """Whether any owner holds this mode of the lock now (a snapshot).

        Any value there counts, another program's too, bytes that are not
        UTF-8 included.

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        info = await self._rw.info()
        return any(h.mode == self._mode for h in info.holders)

    async def owned(self) -> bool:
        """Whether the calling thread or task holds this mode, as Redis says now.

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return await self.hold_count() > 0

    async def hold_count(self) -> int:
        """The calling thread's or task's hold count of this mode, as Redis says
        now (0 when it does not hold it).

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        rw = self._rw
        state = await _driver.run(
            rw._client, rwlock_plans.inspect(rw._keys, _driver.current_owner())
        )
        return state.mine_read if self._mode == "read" else state.mine_write

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self._rw._describe(self._mode)}>"


@shared_args(
    ttl="Each read hold and the write hold is a lease of its own; an"
    " :class:`AdaptiveTTL` records each mode apart, per hold.",
    on_lost="Every lease of a hold is lost together.",
    lock_delay="Only a write hold's lease counts: a read hold's lease that ends"
    " unreleased frees its share at once (a reader does not write).",
)
class AsyncReadWriteLock(PerProcess, _AsyncHolds[AsyncReadWriteLease]):
    """A distributed read-write lock: many readers, or one writer.

    ``rw.read`` and ``rw.write`` are two locks with the interface of every lock
    (:class:`AsyncReadWriteView`): any number of owners may hold the read lock
    together, while the write lock excludes every other holder, reader or
    writer. Each thread or task is its own owner, and an object may be shared.
    Both modes are reentrant per owner, like :class:`AsyncRLock`: an owner that
    holds a mode takes it again at once, counting up; releases count down.

    - **Write, then read**: a write holder may take the read lock too, at once,
      and release the write lock first: a downgrade, keeping the read lock with
      no writer in between.
    - **No upgrade**: a read holder that asks for the write lock gets
      :class:`LockUpgradeError` at once (two readers upgrading together would
      wait for each other forever). Release the read lock first.
    - **Writers are not starved**: readers and writers wait in one queue in
      Redis. Once a writer waits, new readers queue behind it, though readers
      hold the lock; a release hands the lock to the head of the queue, a
      writer alone or every reader up to the next writer, through the wake
      hub (no polling).
    - **Every hold is a lease**: each read hold and the write hold has its own
      expiry in Redis (server time), so a reader that dies blocks writers only
      until its lease ends. The watchdog renews each hold (``auto_renew``), and
      a hold seen gone fires its leases' ``lost`` signal.
    - **Fences**: a write hold gets a newly minted fence, strictly larger than
      every earlier one. A read hold gets the last fence minted when it began
      (that of the last writer before it): no writer begins while it lasts, so
      a reader that sees a larger fence on the resource (a
      :class:`AsyncFencedKey`'s ``seen()``) knows its hold ended meanwhile and
      what it read may be stale.

    Args:
        {client}
        name: the lock's name; its keys are ``<prefix>{<name>}:rwlock`` and
            siblings, apart from any ``AsyncLock``'s or ``AsyncRLock``'s.
        {lease_args}

    Raises:
        InvalidArgument: ``client`` is not a client this class accepts (a URL,
            ``None``, a client of the other API, a pipeline, a valkey-py cluster client);
            an empty or non-``str`` name or prefix; a ttl that is not
            a number from 0.01 to a year; a bad ``auto_renew``, ``on_lost``, ``lock_delay``,
            ``min_replicas``, ``replica_timeout`` or ``replica_fsync``.

    Example::

        rw = AsyncReadWriteLock(client, "catalog", ttl=10)
        async with rw.read as lease:          # shared with other readers
            data = await load(fence=lease.fence)
        async with rw.write(timeout=2) as lease:  # alone; AcquireTimeout after 2 s
            await store(data, fence=lease.fence)
            async with rw.read:               # a writer may read (and downgrade)
                ...
    """

    def __init__(
        self,
        client: _driver.Client,
        name: str,
        *,
        ttl: float | AdaptiveTTL | None = None,
        auto_renew: bool | None = None,
        on_lost: Callable[[AsyncReadWriteLease], object] | None = None,
        lock_delay: float = 0.0,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        replica_fsync: bool = False,
        prefix: str = DEFAULT_PREFIX,
        label: str | None = None,
    ) -> None:
        self._client = _driver.check_client(client, "AsyncReadWriteLock")
        self._keys = rwlock_keys(name, prefix=prefix)
        self._opts = _LeaseOptions.check(
            ttl, auto_renew, on_lost, lock_delay, min_replicas, replica_timeout, replica_fsync
        )
        self._label = check_label(label)
        # by (owner id, mode)
        self._watches = {}
        self._holds = {}
        self._read = AsyncReadWriteView(self, "read")
        self._write = AsyncReadWriteView(self, "write")

    @property
    def read(self) -> AsyncReadWriteView:
        """The read lock: shared by any number of owners while no writer holds."""
        return self._read

    @property
    def write(self) -> AsyncReadWriteView:
        """The write lock: held by one owner, with no reader but itself."""
        return self._write

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._keys.name

    @property
    def ttl(self) -> float:
        """The lease length in seconds (with an :class:`AdaptiveTTL`, the next
        write hold's)."""
        return self._opts.next_ttl(self._mode_key("write"))

    async def info(self) -> ReadWriteInfo:
        """A snapshot of the lock in Redis: its mode (``"read"``, ``"write"`` or
        ``None`` when free), every live hold (owner, mode, count, seconds left,
        fence), the number of waiters (and of waiting writers), and the last
        fence minted.

        A holder another program wrote as bytes that are not UTF-8 is shown
        with those bytes escaped (``b"\\xff"`` as ``"\\xff"``).

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        state = await _driver.run(self._client, rwlock_plans.inspect(self._keys))
        return state.info

    async def locked(self) -> bool:
        """Whether anyone holds the lock, in either mode, now (a snapshot).

        Any value there counts, another program's too, bytes that are not
        UTF-8 included.

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return (await self.info()).mode is not None

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.name!r} ttl={self._opts.ttl:g}s "
            f"{self._describe('read')}; {self._describe('write')}>"
        )

    def _describe(self, mode: str) -> str:
        holds = [ls for ls in list(self._holds.values()) if ls and ls[0].mode == mode]
        if not holds:
            return f"{mode} not held here"
        if len(holds) > 1:
            return f"{mode} held here by {len(holds)} owners"
        return f"{mode} {self._held_here(holds[0])}"

    async def _acquire(
        self, mode: rwlock_plans.Mode, blocking: bool, timeout: float | None
    ) -> AsyncReadWriteLease | None:
        wait = lock_plans.check_acquire(blocking, timeout)
        owner = _driver.current_owner()
        await self._settle_releases((owner, "read"), (owner, "write"))
        plan = rwlock_plans.acquire(
            self._keys,
            owner,
            mode,
            self._opts.next_ttl(self._mode_key(mode)),
            blocking=blocking,
            timeout=wait,
            now=time.monotonic,
            op=new_op() + label_of(self._label),  # (a new hold's id: it carries the label)
            delay_ms=self._opts.delay_ms,
        )

        def hold(grant: rwlock_plans.RWGrant) -> AsyncReadWriteLease:
            lease = AsyncReadWriteLease(self, grant)
            self._add(lease)
            return lease

        return await _take_grant(  # type: ignore[no-any-return]
            self,
            plan,
            hold,
            lambda grant: AsyncReadWriteLease(self, grant)._release_plan(),
            replicated=self._opts.replicas is not None,
            blocking=blocking,
        )

    def _latest(self, mode: str) -> AsyncReadWriteLease:
        leases = self._holds.get((_driver.current_owner(), mode))
        if not leases:
            raise NotOwnedError(
                self.name, None, f"the {mode} lock is not held by this thread or task"
            )
        return leases[-1]

    def _mode_key(self, mode: str) -> str:
        """The :class:`AdaptiveTTL` key of the holds of ``mode``."""
        return f"{self._keys.lock}:{mode}"

    def _ttl_key(self, lease: AsyncReadWriteLease) -> str:
        return self._mode_key(lease.mode)
