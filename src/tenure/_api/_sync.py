"""The synchronous facade. GENERATED from ``_async.py``: do not edit.

Edit this file, then run ``python scripts/unasync.py`` to regenerate ``_sync.py``
(CI runs it with ``--check``).

Every constructor checks its ``client`` first (``_driver.check_client``), before
anything is sent. The docstrings name redis-py's exceptions
(``redis.exceptions.ConnectionError``); with a valkey-py client, the same errors
are valkey-py's own (``valkey.exceptions.ConnectionError``): tenure lets the
client library's connection errors through unchanged.
"""

from __future__ import annotations

import threading
import contextlib
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, NoReturn, Protocol, Self, TypeVar

from .._adaptive import AdaptiveTTL
from .._drivers import _sync as _driver
from .._drivers._identity import new_op, new_token, process_mark
from .._drivers._watchbook import Watch
from .._errors import AcquireTimeout, InvalidArgument, LockLostError, NotOwnedError
from .._info import FairLockInfo, MultiLockInfo, MultiPartInfo
from .._keys import (
    fair_keys,
    fenced_keys,
    latch_keys,
    lock_keys,
    rlock_keys,
    rwlock_keys,
    semaphore_keys,
)
from .._leasebook import LeaseBook, Phase, Release
from .._models import LeaseBase, LostSignalBase, OpenBlocks, PerProcess
from .._plans import fair as fair_plans
from .._plans import fenced as fenced_plans
from .._plans import latch as latch_plans
from .._plans import lock as lock_plans
from .._plans import replicas as replica_plans
from .._plans import rlock as rlock_plans
from .._plans import rwlock as rwlock_plans
from .._plans import semaphore as semaphore_plans
from .._plans.rwlock import ReadWriteInfo
from .._protocol import Eval, Plan
from .._units import check_seconds, check_ttl, to_ms

#: The lease length, in seconds, of a lock created without ``ttl``.
DEFAULT_TTL = 30.0

#: The latest lease of each (client, lock key, owner) taken in this process,
#: whichever ``Lock`` object took it: a second acquire by the same owner
#: asks Redis first instead of queueing behind this process's other waiters,
#: and first cleans up a lease it left behind (lost, or its release failed).
_BOOK = LeaseBook()


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
        elif adaptive and isinstance(ttl, AdaptiveTTL):
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


class _Releasable(Protocol):
    def release(self) -> None: ...


L = TypeVar("L", bound=_Releasable)
L_co = TypeVar("L_co", bound=_Releasable, covariant=True)


class _Acquirer(Protocol[L_co]):
    @property
    def name(self) -> str: ...

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> L_co | None: ...


class _Holding(Generic[L]):
    """``with lock(timeout=...)``: acquire on entry, release that lease on exit.

    One object may be entered by several threads or tasks at once, and nested:
    each block's exit releases the lease that block's entry took (see
    :class:`tenure._models.OpenBlocks`)."""

    def __init__(self, lock: _Acquirer[L], timeout: float | None) -> None:
        self._lock = lock
        self._timeout = timeout
        self._open: OpenBlocks[L] = OpenBlocks()

    def __enter__(self) -> L:
        lease = self._lock.acquire(timeout=self._timeout)
        if lease is None:
            raise AcquireTimeout(self._lock.name, self._timeout)
        self._open.push(_driver.current_owner(), lease)
        return lease

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lease = self._open.pop(_driver.current_owner())
        if lease is None:
            raise NotOwnedError(self._lock.name, None, "no block of this guard is open")
        lease.release()


class _ReleasedOnExit:
    """``with``: ``release()`` on exit."""

    __slots__ = ()

    def release(self) -> None:
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class _Blocks(PerProcess, _ReleasedOnExit, Generic[L]):
    """``with lock`` and ``with lock(timeout=...)``, for every lock class."""

    @property
    def name(self) -> str:
        raise NotImplementedError

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> L | None:
        raise NotImplementedError

    def __call__(self, *, timeout: float | None = None) -> _Holding[L]:
        """A context manager that acquires with ``timeout`` seconds and releases on exit.

        Raises:
            AcquireTimeout: (on entry) the lock was not taken within ``timeout``.
        """
        return _Holding(self, timeout)

    def _blocks(self) -> _Holding[L]:
        """The guard of ``with lock:`` blocks (made on first use)."""
        guard: _Holding[L] | None = self.__dict__.get("_guard")
        if guard is None:
            guard = self.__dict__.setdefault("_guard", _Holding(self, None))
        return guard

    def __enter__(self) -> L:
        return self._blocks().__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._blocks().__exit__(exc_type, exc, tb)


class _EntersItself(_ReleasedOnExit):
    """``with lease:`` returns the lease and releases it on exit."""

    __slots__ = ()

    def __enter__(self) -> Self:
        return self


class _Issuer(Protocol):
    """What a lease needs of the lock object that issued it."""

    _client: _driver.Client
    _opts: _LeaseOptions

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

    def __init__(self, lock: LockT, grant: lock_plans.Grant) -> None:
        super().__init__(lock.name, grant, threading.Event())
        self._lock = lock

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
        life = self._life
        life.check_process(self.name, self.fence, process_mark(), "release")
        if life.begin_release(self.name, self.fence) is Release.CLEAN_UP:
            self._clean_up()
            self._end_lost()
        self._stop_renewing()
        try:
            left = _driver.run(self._lock._client, self._release_plan())
        except NotOwnedError as exc:
            self._lose(exc.reason)
            self._end_lost()
        self._released_one(left)

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
            self._end_lost()
        self._extended(seconds, expires_at)

    def _clean_up(self) -> None:
        """Send the release of a lease this process gave up on (lost, or whose
        release did not complete), so that Redis does not keep holding it with
        this lease's token; whatever Redis answers, quietly. Only a reply from
        Redis marks it cleaned up (a connection error leaves it to be tried
        again by the owner's next acquire)."""
        life = self._life
        if life.phase is Phase.RELEASING:
            self._stop_renewing()
        try:
            left = _driver.run(self._lock._client, self._release_plan())
        except NotOwnedError as exc:
            self._lose(exc.reason)
        except Exception:
            return
        else:
            if life.phase is Phase.RELEASING:
                with contextlib.suppress(LockLostError):
                    self._released_one(left)
        life.cleaned = True

    def _start(self) -> None:
        """The lease was just granted: give it the lock's ``on_lost`` callback,
        have the watchdog watch it, and wait for the replicas (else release it)."""
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


class Lease(_HeldLease["Lock"]):
    """A held lock: returned by a successful :meth:`Lock.acquire`.

    A lease is truthy. It holds until :meth:`release`, or until its ttl runs out
    in Redis; the client's watchdog renews it while held if the lock renews
    (``auto_renew``). ``valid`` and ``remaining`` tell, on this process's
    monotonic clock, whether it can still be trusted, and ``lost`` is set (and
    the ``on_lost`` callbacks run) as soon as it is known lost. See
    :class:`tenure.LeaseBase` for the attributes (``name``, ``owner``,
    ``fence``, ``ttl``, ``expires_at``, ``lost``).
    """

    __slots__ = ("_holder",)

    def __init__(self, lock: Lock, grant: lock_plans.Grant, holder: str) -> None:
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
            ttl=self._claim or self.ttl,  # what Redis holds (a hand-off's claim window)
            delay_ms=lock._opts.delay_ms,
        )

    def _renewal(self) -> Eval:
        lock = self._lock
        return lock_plans.renewal(
            lock._keys,
            self.owner,
            self.ttl,
            ttl=self._claim or self.ttl,  # what Redis holds (a hand-off's claim window)
            delay_ms=lock._opts.delay_ms,
        )


class Lock(_Blocks[Lease]):
    """A distributed mutual-exclusion lock with a lease and a fencing token.

    One owner at a time holds the lock, across every process that uses the same
    Redis or Valkey server and name. Each thread or task is its own owner: a
    ``Lock`` object may be shared, and one owner can never release another
    owner's lease. Unlike ``threading.Lock``, ownership is a lease: it ends after
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
        client: your ``redis.Redis`` or ``valkey.Valkey`` client
            (its pool, TLS and ACL settings are used as they are; tenure adds one
            pub/sub connection per client while something waits).
        name: the lock's name; its keys are ``<prefix>{<name>}`` and siblings
            (``{``, ``}`` and ``%`` in the name are written ``%7B``, ``%7D``, ``%25``).
        key: instead of ``name``, an exact Redis key. The lock then speaks the
            common ``SET key token NX PX`` protocol, so it and redis-py's ``Lock``
            (or node-redlock, redsync) holding the same key exclude each other.
            Its other keys are made from the whole key, in its hash slot
            (``{<key>}:key:fence``, ...); a key that is a named lock's main key
            (``tenure:{orders}``) is that lock.
        ttl: the lease length in seconds, from 0.01 to a year (default 30), or an
            :class:`AdaptiveTTL` to set each lease's length from this process's
            recent hold durations of the name.
        auto_renew: whether the client's watchdog renews every lease of this lock
            while it is held (every third of the ttl; see :class:`Lease`).
            Default: ``True`` when no ``ttl`` is given, else ``False``. Without
            renewal a lease lasts its ttl unless extended, and its ``lost``
            signal is set when its deadline passes.
        on_lost: called with the lease when a lease of this lock is lost (see
            ``Lease.on_lost``).
        lock_delay: seconds, from 0 to a year (default 0): after a lease of this lock ends
            without a release (its holder died or stalled), the name stays
            unavailable for this much longer, so that the dead holder's
            in-flight writes drain before the next holder starts (Chubby's
            lock-delay). A release frees the name at once. Every user of a
            name should give the same value.
        min_replicas: after each acquire, wait until this many replicas
            acknowledge the lease (``WAIT``, on the connection that wrote it);
            if fewer do within ``replica_timeout``, release it and raise
            :class:`NotReplicatedError`. Default 0: don't wait. This narrows,
            but does not close, the window in which a failover forgets a lock.
        replica_timeout: seconds, > 0 and at most a year, that acquire waits for
            replicas (default 1).
        replica_fsync: wait until the replicas wrote the lease to their
            append-only file (``WAITAOF``; Redis >= 7.2 or Valkey) instead.
        prefix: the key prefix for ``name`` (default ``"tenure:"``); one whose
            first ``{`` is followed at once by ``}`` is refused, and so is any
            other prefix with ``key`` (an exact key is used as it is).

    Raises:
        InvalidArgument: ``client`` is not a client this class accepts (a URL,
            ``None``, a client of the other API, a pipeline, a cluster client);
            both or neither of ``name`` and ``key``; a ``prefix`` with ``key``; an empty or
            non-``str`` name, key or prefix; a ttl that is not a number from 0.01 to a year;
            a bad ``auto_renew``, ``on_lost``, ``lock_delay``, ``min_replicas``,
            ``replica_timeout`` or ``replica_fsync``.

    Example::

        lock = Lock(client, "orders:42", ttl=10)
        with lock as lease:
            charge(order, fence=lease.fence)
    """

    def __init__(
        self,
        client: _driver.Client,
        name: str | None = None,
        *,
        key: str | None = None,
        ttl: float | AdaptiveTTL | None = None,
        auto_renew: bool | None = None,
        on_lost: Callable[[Lease], object] | None = None,
        lock_delay: float = 0.0,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        replica_fsync: bool = False,
        prefix: str = "tenure:",
    ) -> None:
        self._client = _driver.check_client(client, "Lock")
        if key is not None and prefix != "tenure:":
            raise InvalidArgument(
                f"prefix={prefix!r} can't go with key={key!r}: an exact key is used as it is"
            )
        self._keys = lock_keys(name, key=key, prefix=prefix)
        self._opts = _LeaseOptions.check(
            ttl, auto_renew, on_lost, lock_delay, min_replicas, replica_timeout, replica_fsync
        )
        self._leases: dict[str, Lease] = {}

    @property
    def name(self) -> str:
        """The lock's name, or its exact key."""
        return self._keys.name

    @property
    def ttl(self) -> float:
        """The lease length in seconds (with an :class:`AdaptiveTTL`, the next lease's)."""
        return self._opts.next_ttl(self._keys.lock)

    def acquire(
        self, blocking: bool = True, timeout: float | None = None
    ) -> Lease | None:
        """Take the lock for the calling thread or task.

        Args:
            blocking: wait for the lock if it is held (default). With ``False``,
                make one attempt.
            timeout: the longest wait in seconds, from 0 to a year; ``None`` waits without
                limit. Not allowed with ``blocking=False``.

        Returns:
            An :class:`Lease` (truthy) whose ``fence`` is larger than any
            earlier holder's, or ``None`` if the lock was not taken in time.

        Raises:
            InvalidArgument: a bad ``blocking`` or ``timeout``; nothing was sent.
            AlreadyHeldError: the caller already holds this lock.
            NotReplicatedError: ``min_replicas`` replicas did not acknowledge the
                new lease in time; it was released.
            WrongTypeError: a key of the lock holds a value of another type.
            UnsupportedServer: the server is older than Redis 6.2 / Valkey 7.2.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        wait = lock_plans.check_acquire(blocking, timeout)
        owner = _driver.current_owner()
        key = (id(self._client), self._keys.lock, owner)
        left_behind = _BOOK.left_behind(key)
        if left_behind is not None:
            # Redis may still hold it with our token: never AlreadyHeldError for it.
            left_behind._clean_up()
        # If held, the first attempt settles it, never queued behind our own gate.
        plan = self._acquire_plan(owner, blocking, wait, _BOOK.held(key))
        grant = _driver.run(self._client, plan)
        if grant is None:
            return None
        lease = Lease(self, grant, owner)
        self._leases[owner] = lease
        _BOOK.put(key, lease)
        lease._start()
        return lease

    def _acquire_plan(
        self, owner: str, blocking: bool, timeout: float | None, maybe_held: bool
    ) -> Plan[lock_plans.Grant | None]:
        return lock_plans.acquire(
            self._keys,
            owner,
            new_token(owner),
            self.ttl,
            blocking=blocking,
            timeout=timeout,
            now=time.monotonic,
            maybe_held=maybe_held,
            delay_ms=self._opts.delay_ms,
        )

    def _release_plan(self, token: str, fence: int, op: str) -> Plan[None]:
        return lock_plans.release(self._keys, token, fence, self._opts.delay_ms, op=op)

    def release(self) -> None:
        """Release the calling thread's or task's lease (see :meth:`Lease.release`).

        Raises:
            NotOwnedError: the caller holds no lease of this lock, or it expired.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        self._lease().release()

    def extend(self, seconds: float | None = None) -> None:
        """Extend the calling thread's or task's lease (see :meth:`Lease.extend`).

        Raises:
            InvalidArgument: ``seconds`` is not a number of seconds from 0.01 to a year.
            NotOwnedError: the caller holds no lease of this lock, or it expired.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        self._lease().extend(seconds)

    def locked(self) -> bool:
        """Whether anyone holds the lock now (a snapshot; it may change at once).

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        state = _driver.run(self._client, lock_plans.inspect(self._keys))
        return state.holder != ""

    def info(self) -> lock_plans.LockInfo:
        """A snapshot of the lock in Redis: holder, seconds left, last fence, waiters.

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        s = _driver.run(self._client, lock_plans.inspect(self._keys))
        return lock_plans.lock_info(self.name, s.holder, 1, s.pttl_ms, s.fence, s.waiters)

    def owned(self) -> bool:
        """Whether the calling thread or task holds the lock, as Redis says now.

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        lease = self._leases.get(_driver.current_owner())
        if lease is None:
            return False
        state = _driver.run(self._client, lock_plans.inspect(self._keys))
        return state.holder == lease.owner

    def __repr__(self) -> str:
        held = len(self._leases)
        return f"<{type(self).__name__} {self.name!r} ttl={self._opts.ttl:g}s held_here={held}>"

    def _lease(self) -> Lease:
        lease = self._leases.get(_driver.current_owner())
        if lease is None:
            raise NotOwnedError(self.name, None, "not held by this thread or task")
        return lease

    def _forget(self, lease: Lease) -> None:
        if self._leases.get(lease._holder) is lease:
            del self._leases[lease._holder]
        _driver.unwatch(self._client, lease._watch)
        self._opts.record(self._keys.lock, lease.acquired_at)


# --- fair lock ----------------------------------------------------------------


class FairLock(Lock):
    """A distributed mutual-exclusion lock that serves its waiters in the order they came.

    Like :class:`Lock` (a lease, a fencing token, the watchdog and the
    lost signal, lock-delay, ``min_replicas``, an idempotent release), but first
    come, first served: every waiting thread or task takes its own place in a
    queue in Redis (not one per process, as ``Lock``'s), and the lock goes
    to the head of the queue only. A release hands the lock straight to the
    head and wakes it alone, on a wake channel of its own, so a hand-off costs
    the same few commands however many wait. An acquire that does not wait
    (``blocking=False``), or the first attempt of one that does, never takes
    the lock while others are queued, even when it is free.

    A waiter's place is that of its first queueing call, as it reached Redis:
    an acquire that finds the lock busy subscribes to its wake channel and then
    queues (one round trip after its first attempt), so waiters that start
    within a round trip of each other may be served in either order.

    Dead waiters time out. Each queued waiter has a deadline in Redis, the
    server's ``TIME`` plus ``waiter_timeout`` (never a client's clock), and
    keeps its place by calling again before it: a waiting acquire calls at
    least every third of ``waiter_timeout`` (and at every wake-up), and each
    call moves its deadline on. Every acquire and release first drops the
    waiters whose deadline has passed, so a waiter whose process died (or
    stalled past its deadline) holds up the queue for ``waiter_timeout`` at
    most; a release also skips at once a head whose process is gone (its wake
    channel has no subscriber). A stalled waiter that comes back queues again,
    at the back.

    Args:
        client: your ``redis.Redis`` or ``valkey.Valkey`` client
            (its pool, TLS and ACL settings are used as they are; tenure adds one
            pub/sub connection per client while something waits).
        name: the lock's name; its keys are ``<prefix>{<name>}:fair`` and
            siblings, apart from any ``Lock``'s or ``RLock``'s. There
            is no exact-key mode.
        ttl: the lease length in seconds, from 0.01 to a year (default 30), or an
            :class:`AdaptiveTTL`.
        auto_renew: whether the client's watchdog renews every lease of this lock
            while it is held (every third of the ttl). Default: ``True`` when no
            ``ttl`` is given, else ``False``.
        on_lost: called with the lease when a lease of this lock is lost (see
            ``Lease.on_lost``).
        waiter_timeout: seconds, from 0.003 to a year (default 5): a queued waiter that has not
            called again for this long is dropped from the queue. Live waiters
            call again every third of it, so keep it well above a round trip
            and above the pauses your processes may take.
        lock_delay: seconds, from 0 to a year (default 0): see :class:`Lock`.
        min_replicas: see :class:`Lock`.
        replica_timeout: see :class:`Lock`.
        replica_fsync: see :class:`Lock`.
        prefix: the key prefix (default ``"tenure:"``); one whose first ``{`` is
            followed at once by ``}`` is refused.

    Raises:
        InvalidArgument: ``client`` is not a client this class accepts (a URL,
            ``None``, a client of the other API, a pipeline, a cluster client);
            an empty or non-``str`` name or prefix; a ttl or
            ``waiter_timeout`` out of that range; a bad
            ``auto_renew``, ``on_lost``, ``lock_delay``, ``min_replicas``,
            ``replica_timeout`` or ``replica_fsync``.

    Example::

        lock = FairLock(client, "orders:42", ttl=10)
        with lock as lease:  # after everyone who asked before us
            charge(order, fence=lease.fence)
    """

    def __init__(
        self,
        client: _driver.Client,
        name: str,
        *,
        ttl: float | AdaptiveTTL | None = None,
        auto_renew: bool | None = None,
        on_lost: Callable[[Lease], object] | None = None,
        waiter_timeout: float = fair_plans.WAITER_TIMEOUT,
        lock_delay: float = 0.0,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        replica_fsync: bool = False,
        prefix: str = "tenure:",
    ) -> None:
        _driver.check_client(client, "FairLock")
        keys = fair_keys(name, prefix=prefix)
        self._waiter_timeout = fair_plans.check_waiter_timeout(waiter_timeout)
        super().__init__(
            client,
            name,
            ttl=ttl,
            auto_renew=auto_renew,
            on_lost=on_lost,
            lock_delay=lock_delay,
            min_replicas=min_replicas,
            replica_timeout=replica_timeout,
            replica_fsync=replica_fsync,
            prefix=prefix,
        )
        self._keys = self._fair = keys

    @property
    def waiter_timeout(self) -> float:
        """Seconds after which a queued waiter that has not called again is dropped."""
        return self._waiter_timeout

    def acquire(
        self, blocking: bool = True, timeout: float | None = None
    ) -> Lease | None:
        """Take the lock for the calling thread or task, after every waiter queued before it.

        Args:
            blocking: wait for the lock, in line, if it is held or others wait
                (default). With ``False``, make one attempt, which fails while
                anyone is queued.
            timeout: the longest wait in seconds, from 0 to a year; ``None`` waits without
                limit. Not allowed with ``blocking=False``. A waiter that gives
                up leaves the queue.

        Returns:
            An :class:`Lease` (truthy) whose ``fence`` is larger than any
            earlier holder's, or ``None`` if the lock was not taken in time.

        Raises:
            InvalidArgument: a bad ``blocking`` or ``timeout``; nothing was sent.
            AlreadyHeldError: the caller already holds this lock.
            NotReplicatedError: ``min_replicas`` replicas did not acknowledge the
                new lease in time; it was released.
            WrongTypeError: a key of the lock holds a value of another type.
            UnsupportedServer: the server is older than Redis 6.2 / Valkey 7.2.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return super().acquire(blocking, timeout)

    def info(self, limit: int = 100) -> FairLockInfo:
        """A snapshot of the lock: its holder, the lease left, the last fence, and
        the first ``limit`` queued waiters in the order they will be served, each
        with its deadline.

        Raises:
            InvalidArgument: ``limit`` is not an ``int`` from 0 to 2**53 - 1; nothing was sent.
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        plan = fair_plans.inspect(self._fair, fair_plans.check_limit(limit))
        return _driver.run(self._client, plan)

    def __repr__(self) -> str:
        held = len(self._leases)
        return (
            f"<{type(self).__name__} {self.name!r} ttl={self._opts.ttl:g}s "
            f"waiter_timeout={self._waiter_timeout:g}s held_here={held}>"
        )

    def _acquire_plan(
        self, owner: str, blocking: bool, timeout: float | None, maybe_held: bool
    ) -> Plan[lock_plans.Grant | None]:
        return fair_plans.acquire(
            self._fair,
            owner,
            new_token(owner),
            self.ttl,
            blocking=blocking,
            timeout=timeout,
            now=time.monotonic,
            waiter_timeout=self._waiter_timeout,
            delay_ms=self._opts.delay_ms,
        )

    def _release_plan(self, token: str, fence: int, op: str) -> Plan[None]:
        return fair_plans.release(self._fair, token, fence, self._opts.delay_ms, op=op)


# --- reentrant lock --------------------------------------------------------


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

    def __init__(self, lock: HoldsT, grant: lock_plans.Grant, key: Hashable, hold: str) -> None:
        super().__init__(lock, grant)
        self._key = key
        self._hold = hold

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
            for old in self._holds.pop(lease._key, ()):
                old._signal_lost("the hold had ended in Redis (a new hold began)")
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
            leases.remove(lease)
            if not leases:
                del self._holds[lease._key]

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
        for one in [lease, *self._same_hold(lease)]:
            one._signal_lost(reason)

    def _settle_releases(self, *keys: Hashable) -> None:
        """Send again the releases of this object's leases under ``keys`` that
        were attempted and did not complete, before the owner changes the lock
        again: the owner's record of its last change in Redis is then still
        that release's, so the release is never counted twice."""
        for key in keys:
            for lease in list(self._holds.get(key, ())):
                if lease._life.phase is Phase.RELEASING:
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


class RLockLease(_HoldLease["RLock"]):
    """One level of a held :class:`RLock`: returned by each successful acquire.

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

    def __init__(self, lock: RLock, grant: lock_plans.Grant) -> None:
        super().__init__(lock, grant, grant.token, str(grant.fence))

    def release(self) -> None:
        """Count the hold down by one; at zero, release the lock and hand it to the
        next waiter.

        Raises:
            LockLostError: the hold was lost (``lost`` is set): its deadline
                passed, or Redis no longer has it (the message gives the name,
                fence and why). Every lease of the hold ends.
            NotOwnedError: this lease was already released. Nothing was changed.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return super().release()

    def _release_plan(self) -> Plan[int]:
        lock = self._lock
        return rlock_plans.release(
            lock._keys,
            self.owner,
            self.fence,
            op=self._life.release_op,
            delay_ms=lock._opts.delay_ms,
        )

    def _extend_plan(self, seconds: float) -> Plan[float]:
        lock = self._lock
        return rlock_plans.extend(
            lock._keys,
            self.owner,
            self.fence,
            seconds,
            time.monotonic,
            ttl=self.ttl,
            delay_ms=lock._opts.delay_ms,
        )

    def _renewal(self) -> Eval:
        lock = self._lock
        return rlock_plans.renewal(
            lock._keys, self.owner, self.fence, self.ttl, ttl=self.ttl, delay_ms=lock._opts.delay_ms
        )


class RLock(_Holds[RLockLease], _Blocks[RLockLease]):
    """A distributed reentrant lock: one owner at a time, which may take it again.

    Like :class:`Lock` (a lease, a fencing token, waiting without
    polling), but the thread or task that holds the lock can acquire it again
    without waiting: each acquire returns a new lease of the same hold, with the
    same ``fence``, and counts the hold up by one; each release counts it down,
    and the lock is free (or handed to the first waiter) when the count is back
    to zero, as with ``threading.RLock``. The count lives in Redis (a hash
    ``{<owner id>: <count>}`` whose expiry is the lease), so it is shared by every
    ``RLock`` object of the same name and client process, and each thread
    or task is its own owner: an ``RLock`` object may be shared. Every
    re-entry and every ``extend`` resets the whole hold's lease to its length.

    Args:
        client: your ``redis.Redis`` or ``valkey.Valkey`` client
            (its pool, TLS and ACL settings are used as they are; tenure adds one
            pub/sub connection per client while something waits).
        name: the lock's name; its keys are ``<prefix>{<name>}:rlock`` and
            siblings, apart from any ``Lock``'s. There is no exact-key mode.
        ttl: the lease length in seconds, from 0.01 to a year (default 30), or an
            :class:`AdaptiveTTL` (recorded per hold, from first acquire to the
            release at count zero).
        auto_renew: whether the client's watchdog renews the hold while it is
            held (every third of the ttl). Default: ``True`` when no ``ttl`` is
            given, else ``False``.
        on_lost: called with a lease when the hold it belongs to is lost (every
            lease of the hold is lost together).
        lock_delay: seconds, from 0 to a year (default 0): after a hold's lease ends without
            a release, the name stays unavailable for this much longer (see
            :class:`Lock`).
        min_replicas: after each acquire, wait until this many replicas
            acknowledge the lease (``WAIT``, on the connection that wrote it);
            if fewer do within ``replica_timeout``, release it and raise
            :class:`NotReplicatedError`. Default 0: don't wait. This narrows,
            but does not close, the window in which a failover forgets a lock.
        replica_timeout: seconds, > 0 and at most a year, that acquire waits for
            replicas (default 1).
        replica_fsync: wait until the replicas wrote the lease to their
            append-only file (``WAITAOF``; Redis >= 7.2 or Valkey) instead.
        prefix: the key prefix (default ``"tenure:"``); one whose first ``{`` is
            followed at once by ``}`` is refused.

    Raises:
        InvalidArgument: ``client`` is not a client this class accepts (a URL,
            ``None``, a client of the other API, a pipeline, a cluster client);
            an empty or non-``str`` name or prefix; a ttl that is not
            a number from 0.01 to a year; a bad ``auto_renew``, ``on_lost``,
            ``min_replicas``, ``replica_timeout`` or ``replica_fsync``.

    Example::

        lock = RLock(client, "orders:42", ttl=10)
        with lock as lease:
            with lock as inner:  # the same owner: no wait
                assert inner.fence == lease.fence
                assert lock.hold_count() == 2
    """

    def __init__(
        self,
        client: _driver.Client,
        name: str,
        *,
        ttl: float | AdaptiveTTL | None = None,
        auto_renew: bool | None = None,
        on_lost: Callable[[RLockLease], object] | None = None,
        lock_delay: float = 0.0,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        replica_fsync: bool = False,
        prefix: str = "tenure:",
    ) -> None:
        self._client = _driver.check_client(client, "RLock")
        self._keys = rlock_keys(name, prefix=prefix)
        self._opts = _LeaseOptions.check(
            ttl, auto_renew, on_lost, lock_delay, min_replicas, replica_timeout, replica_fsync
        )
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

    def acquire(
        self, blocking: bool = True, timeout: float | None = None
    ) -> RLockLease | None:
        """Take the lock for the calling thread or task, or enter it again.

        If the caller already holds the lock this returns at once (one round
        trip), with the hold count one higher and the hold's lease reset to the ttl.

        Args:
            blocking: wait for the lock if another owner holds it (default). With
                ``False``, make one attempt.
            timeout: the longest wait in seconds, from 0 to a year; ``None`` waits without
                limit. Not allowed with ``blocking=False``.

        Returns:
            An :class:`RLockLease` (truthy) whose ``fence`` is larger than any
            earlier holder's (a re-entry's is its hold's), or ``None`` if the lock
            was not taken in time.

        Raises:
            InvalidArgument: a bad ``blocking`` or ``timeout``; nothing was sent.
            NotReplicatedError: ``min_replicas`` replicas did not acknowledge the
                acquire in time; it was undone.
            WrongTypeError: a key of the lock holds a value of another type.
            UnsupportedServer: the server is older than Redis 6.2 / Valkey 7.2.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        wait = lock_plans.check_acquire(blocking, timeout)
        owner = _driver.current_owner()
        self._settle_releases(owner)
        plan = rlock_plans.acquire(
            self._keys,
            owner,
            self.ttl,
            blocking=blocking,
            timeout=wait,
            now=time.monotonic,
            op=new_op(),
            delay_ms=self._opts.delay_ms,
        )
        grant = _driver.run(self._client, plan)
        if grant is None:
            return None
        lease = RLockLease(self, grant)
        self._add(lease)
        lease._start()
        return lease

    def release(self) -> None:
        """Release the calling thread's or task's latest lease of this lock object
        (see :meth:`RLockLease.release`): the hold count goes down by one.

        Raises:
            NotOwnedError: the caller holds no lease of this lock object (released
                as many times as acquired), or the hold expired.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        self._latest().release()

    def extend(self, seconds: float | None = None) -> None:
        """Extend the calling thread's or task's hold (see :meth:`RLockLease.extend`).

        Raises:
            InvalidArgument: ``seconds`` is not a number of seconds from 0.01 to a year.
            NotOwnedError: the caller holds no lease of this lock object, or it expired.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        self._latest().extend(seconds)

    def locked(self) -> bool:
        """Whether any owner holds the lock now (a snapshot; it may change at once).

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        state = _driver.run(self._client, rlock_plans.inspect(self._keys))
        return state.holder != ""

    def owned(self) -> bool:
        """Whether the calling thread or task holds the lock, as Redis says now.

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return self.hold_count() > 0

    def info(self) -> lock_plans.LockInfo:
        """A snapshot of the lock in Redis: holder (owner id) and its hold count,
        seconds left, last fence, waiters.

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        s = _driver.run(self._client, rlock_plans.inspect(self._keys))
        return lock_plans.lock_info(self.name, s.holder, s.count, s.pttl_ms, s.fence, s.waiters)

    def hold_count(self) -> int:
        """The calling thread's or task's hold count, as Redis says now: how many
        acquires it has not yet released (0 when it does not hold the lock).

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        owner = _driver.current_owner()
        state = _driver.run(self._client, rlock_plans.inspect(self._keys, owner))
        return state.mine

    def __repr__(self) -> str:
        holds = [leases for leases in self._holds.values() if leases]
        state = self._held_here(holds[-1]) if holds else "not held here"
        return f"<{type(self).__name__} {self.name!r} ttl={self._opts.ttl:g}s {state}>"

    def _latest(self) -> RLockLease:
        leases = self._holds.get(_driver.current_owner())
        if not leases:
            raise NotOwnedError(self.name, None, "not held by this thread or task")
        return leases[-1]

    def _ttl_key(self, lease: RLockLease) -> str:
        return self._keys.lock


# --- read-write lock -------------------------------------------------------


class ReadWriteLease(_HoldLease["ReadWriteLock"]):
    """One level of a held read or write lock of an :class:`ReadWriteLock`:
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

    def __init__(self, rw: ReadWriteLock, grant: rwlock_plans.RWGrant) -> None:
        super().__init__(rw, grant, (grant.token, grant.mode), grant.hold)
        self.mode: rwlock_plans.Mode = grant.mode

    def release(self) -> None:
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
        return super().release()

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
            ttl=self._claim or self.ttl,  # what Redis holds (a hand-off's claim window)
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
            ttl=self._claim or self.ttl,  # what Redis holds (a hand-off's claim window)
            delay_ms=rw._opts.delay_ms,
        )

    def __repr__(self) -> str:
        return super().__repr__().replace(" fence=", f" {self.mode} fence=", 1)


class ReadWriteView(_Blocks[ReadWriteLease]):
    """The read lock (``rw.read``) or the write lock (``rw.write``) of an
    :class:`ReadWriteLock`, with the interface of every lock:
    ``acquire``, ``release``, ``extend``, ``locked``, ``owned``,
    ``hold_count``, ``with rw.read:`` and ``with rw.write(timeout=2):``.
    """

    def __init__(self, rw: ReadWriteLock, mode: rwlock_plans.Mode) -> None:
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
    def lock(self) -> ReadWriteLock:
        """The read-write lock this is a view of."""
        return self._rw

    def acquire(
        self, blocking: bool = True, timeout: float | None = None
    ) -> ReadWriteLease | None:
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
            An :class:`ReadWriteLease` (truthy), or ``None`` if the lock
            was not taken in time.

        Raises:
            InvalidArgument: a bad ``blocking`` or ``timeout``; nothing was sent.
            LockUpgradeError: (write lock) the caller holds the read lock and not
                the write lock: an upgrade is refused, at once.
            NotReplicatedError: ``min_replicas`` replicas did not acknowledge the
                acquire in time; it was undone.
            WrongTypeError: a key of the lock holds a value of another type.
            UnsupportedServer: the server is older than Redis 6.2 / Valkey 7.2.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return self._rw._acquire(self._mode, blocking, timeout)

    def release(self) -> None:
        """Release the calling thread's or task's latest lease of this mode taken
        through this lock object (see :meth:`ReadWriteLease.release`).

        Raises:
            NotOwnedError: the caller holds no lease of this mode through this
                lock object, or the hold expired.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        self._rw._latest(self._mode).release()

    def extend(self, seconds: float | None = None) -> None:
        """Extend the calling thread's or task's hold of this mode (see
        :meth:`ReadWriteLease.extend`).

        Raises:
            InvalidArgument: ``seconds`` is not a number of seconds from 0.01 to a year.
            NotOwnedError: the caller holds no lease of this mode through this
                lock object, or it expired.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        self._rw._latest(self._mode).extend(seconds)

    def locked(self) -> bool:
        """Whether any owner holds this mode of the lock now (a snapshot).

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        info = self._rw.info()
        return any(h.mode == self._mode for h in info.holders)

    def owned(self) -> bool:
        """Whether the calling thread or task holds this mode, as Redis says now.

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return self.hold_count() > 0

    def hold_count(self) -> int:
        """The calling thread's or task's hold count of this mode, as Redis says
        now (0 when it does not hold it).

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        rw = self._rw
        state = _driver.run(
            rw._client, rwlock_plans.inspect(rw._keys, _driver.current_owner())
        )
        return state.mine_read if self._mode == "read" else state.mine_write

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self._rw._describe(self._mode)}>"


class ReadWriteLock(PerProcess, _Holds[ReadWriteLease]):
    """A distributed read-write lock: many readers, or one writer.

    ``rw.read`` and ``rw.write`` are two locks with the interface of every lock
    (:class:`ReadWriteView`): any number of owners may hold the read lock
    together, while the write lock excludes every other holder, reader or
    writer. Each thread or task is its own owner, and an object may be shared.
    Both modes are reentrant per owner, like :class:`RLock`: an owner that
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
      :class:`FencedKey`'s ``seen()``) knows its hold ended meanwhile and
      what it read may be stale.

    Args:
        client: your ``redis.Redis`` or ``valkey.Valkey`` client
            (tenure adds one pub/sub connection per client while something waits).
        name: the lock's name; its keys are ``<prefix>{<name>}:rwlock`` and
            siblings, apart from any ``Lock``'s or ``RLock``'s.
        ttl: each hold's lease length in seconds, from 0.01 to a year (default 30), or an
            :class:`AdaptiveTTL` (recorded per mode, per hold).
        auto_renew: whether the client's watchdog renews every hold while it is
            held (every third of the ttl). Default: ``True`` when no ``ttl`` is
            given, else ``False``.
        on_lost: called with a lease when the hold it belongs to is lost.
        lock_delay: seconds, from 0 to a year (default 0): after a write hold's lease ends
            without a release, nobody (reader or writer) gets the lock for this
            much longer (see :class:`Lock`). A read hold's lease that ends
            unreleased frees its share at once: a reader does not write.
        min_replicas: after each acquire, wait until this many replicas
            acknowledge the hold (``WAIT``); if fewer do within
            ``replica_timeout``, release it and raise :class:`NotReplicatedError`.
        replica_timeout: seconds, > 0 and at most a year, that acquire waits for
            replicas (default 1).
        replica_fsync: wait for the replicas' append-only file (``WAITAOF``) instead.
        prefix: the key prefix (default ``"tenure:"``); one whose first ``{`` is
            followed at once by ``}`` is refused.

    Raises:
        InvalidArgument: ``client`` is not a client this class accepts (a URL,
            ``None``, a client of the other API, a pipeline, a cluster client);
            an empty or non-``str`` name or prefix; a ttl that is not
            a number from 0.01 to a year; a bad ``auto_renew``, ``on_lost``, ``lock_delay``,
            ``min_replicas``, ``replica_timeout`` or ``replica_fsync``.

    Example::

        rw = ReadWriteLock(client, "catalog", ttl=10)
        with rw.read as lease:          # shared with other readers
            data = load(fence=lease.fence)
        with rw.write(timeout=2) as lease:  # alone; AcquireTimeout after 2 s
            store(data, fence=lease.fence)
            with rw.read:               # a writer may read (and downgrade)
                ...
    """

    def __init__(
        self,
        client: _driver.Client,
        name: str,
        *,
        ttl: float | AdaptiveTTL | None = None,
        auto_renew: bool | None = None,
        on_lost: Callable[[ReadWriteLease], object] | None = None,
        lock_delay: float = 0.0,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        replica_fsync: bool = False,
        prefix: str = "tenure:",
    ) -> None:
        self._client = _driver.check_client(client, "ReadWriteLock")
        self._keys = rwlock_keys(name, prefix=prefix)
        self._opts = _LeaseOptions.check(
            ttl, auto_renew, on_lost, lock_delay, min_replicas, replica_timeout, replica_fsync
        )
        # by (owner id, mode)
        self._watches = {}
        self._holds = {}
        self._read = ReadWriteView(self, "read")
        self._write = ReadWriteView(self, "write")

    @property
    def read(self) -> ReadWriteView:
        """The read lock: shared by any number of owners while no writer holds."""
        return self._read

    @property
    def write(self) -> ReadWriteView:
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

    def info(self) -> ReadWriteInfo:
        """A snapshot of the lock in Redis: its mode (``"read"``, ``"write"`` or
        ``None`` when free), every live hold (owner, mode, count, seconds left,
        fence), the number of waiters (and of waiting writers), and the last
        fence minted.

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        state = _driver.run(self._client, rwlock_plans.inspect(self._keys))
        return state.info

    def locked(self) -> bool:
        """Whether anyone holds the lock, in either mode, now (a snapshot).

        Raises:
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return (self.info()).mode is not None

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

    def _acquire(
        self, mode: rwlock_plans.Mode, blocking: bool, timeout: float | None
    ) -> ReadWriteLease | None:
        wait = lock_plans.check_acquire(blocking, timeout)
        owner = _driver.current_owner()
        self._settle_releases((owner, "read"), (owner, "write"))
        plan = rwlock_plans.acquire(
            self._keys,
            owner,
            mode,
            self._opts.next_ttl(self._mode_key(mode)),
            blocking=blocking,
            timeout=wait,
            now=time.monotonic,
            op=new_op(),
            delay_ms=self._opts.delay_ms,
        )
        grant = _driver.run(self._client, plan)
        if grant is None:
            return None
        lease = ReadWriteLease(self, grant)
        self._add(lease)
        lease._start()
        return lease

    def _latest(self, mode: str) -> ReadWriteLease:
        leases = self._holds.get((_driver.current_owner(), mode))
        if not leases:
            raise NotOwnedError(
                self.name, None, f"the {mode} lock is not held by this thread or task"
            )
        return leases[-1]

    def _mode_key(self, mode: str) -> str:
        """The :class:`AdaptiveTTL` key of the holds of ``mode``."""
        return f"{self._keys.lock}:{mode}"

    def _ttl_key(self, lease: ReadWriteLease) -> str:
        return self._mode_key(lease.mode)


# --- multi-lock ---------------------------------------------------------------

_Part = Lock | RLock
_PartLease = Lease | RLockLease


def _server_of(client: object) -> str:
    """Which server a client talks to, the same in every process that names it
    alike: ``host:port/db`` or ``unix:path/db``; for a client without one
    connection pool (a cluster client), its type and ``id`` (this process only)."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return f"{type(client).__name__}@{id(client):x}"
    db = kwargs.get("db", 0)
    if kwargs.get("path"):
        return f"unix:{kwargs['path']}/{db}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{db}"


def _release_quietly(leases: Sequence[_PartLease]) -> None:
    """Release ``leases`` in reverse order, each whatever the others do."""
    for lease in reversed(leases):
        with contextlib.suppress(Exception):
            lease.release()


def _raise_first(errors: list[BaseException]) -> None:
    """Raise the first error (an interruption or cancellation before any other),
    with the others attached to it as notes."""
    if not errors:
        return
    first = next((e for e in errors if not isinstance(e, Exception)), errors[0])
    for other in errors:
        if other is not first:
            first.add_note(f"also: {type(other).__name__}: {other}")
    raise first


class MultiLease(_EntersItself, LostSignalBase):
    """All the parts of an :class:`MultiLock`, held together: returned by a
    successful :meth:`MultiLock.acquire`.

    A multi-lease is truthy. It holds one lease per part (``leases``), each
    renewed, extended and lost as that part's lease is.

    Attributes:
        name: the multi-lock's name (its parts' names joined by ``" + "``).
        owner: the thread's or task's owner id that holds it.
        leases: the parts' leases, in the order the parts were given to the
            multi-lock.
        fence: the parts' fences, a tuple in that same order (``fence[i]`` is
            the fence of part ``i``). Each part's fence increases on its own;
            give each protected resource the fence of the part that guards it.
        lost: set as soon as any part's lease is lost (an ``threading.Event``;
            ``on_lost`` callbacks run then). The other parts are still held
            until :meth:`release`.
    """

    lost: threading.Event
    fence: tuple[int, ...]
    __slots__ = ("_multi", "fence", "leases", "name", "owner")

    def __init__(
        self, multi: MultiLock, owner: str, leases: tuple[_PartLease, ...]
    ) -> None:
        super().__init__(threading.Event())
        self._multi = multi
        self.name = multi.name
        self.owner = owner
        self.leases = leases
        self.fence = tuple(lease.fence for lease in leases)
        for lease in leases:
            lease.on_lost(self._part_lost)

    def _part_lost(self, lease: _PartLease) -> None:
        self._signal_lost(f"part {lease.name!r} was lost: {lease.lost_reason}")

    @property
    def valid(self) -> bool:
        """``True`` while the multi-lease is neither released nor lost and every
        part's lease is valid."""
        if not self._life.held:
            return False
        return all(lease.valid for lease in self.leases)

    @property
    def expires_at(self) -> float:
        """The earliest of the parts' ``expires_at`` (on ``time.monotonic()``)."""
        return min(lease.expires_at for lease in self.leases)

    @property
    def remaining(self) -> float:
        """Seconds until the first part's lease must be presumed expired (0.0 once
        released or lost)."""
        if not self._life.held:
            return 0.0
        return min(lease.remaining for lease in self.leases)

    def release(self) -> None:
        """Release every part, in the reverse of the order they were taken, each
        whatever the others do.

        Raises:
            LockLostError: a part's lease was lost (``lost`` is set); every
                other part was released all the same.
            NotOwnedError: the multi-lease was already released.
            redis.exceptions.ConnectionError: a part could not be released;
                calling ``release()`` again releases the parts not yet released.

            When several parts fail, the first error is raised (a cancellation
            or interruption before any other), and the others are attached to
            it as notes (``exc.__notes__``).
        """
        life = self._life
        life.check_process(self.name, None, process_mark(), "release")
        life.begin_release(self.name, None)
        if life.cleaned:  # lost, and its parts' releases were sent already
            raise LockLostError(self.name, None, f"lease lost: {life.lost_reason}")
        errors: list[BaseException] = []
        for lease in reversed(self._multi._in_order(self.leases)):
            part = lease._life
            if part.phase is Phase.RELEASED or (part.phase is Phase.LOST and part.cleaned):
                continue  # done by an earlier call
            try:
                lease.release()
            except BaseException as exc:
                errors.append(exc)
        if any(lease._life.phase is Phase.RELEASING for lease in self.leases):
            pass  # a part's release did not complete: release() may be called again
        elif life.phase is Phase.LOST:
            life.cleaned = True
            self._multi._forget(self)
        else:
            life.released()
            self._multi._forget(self)
        _raise_first(errors)
        if life.phase is Phase.LOST:
            raise LockLostError(self.name, None, f"lease lost: {life.lost_reason}")

    def extend(self, seconds: float | None = None) -> None:
        """Reset every part's lease to end ``seconds`` from now (default: each
        part's ttl), each whatever the others do.

        Raises:
            InvalidArgument: ``seconds`` is not a number of seconds from 0.01 to a
                year; nothing was sent.
            LockLostError: a part's lease was lost (``lost`` is set).
            NotOwnedError: the multi-lease was released.
            redis.exceptions.ConnectionError: a part could not be extended.

            When several parts fail, the first error is raised, with the others
            as notes.
        """
        if seconds is not None:
            check_ttl(seconds, "seconds")
        self._life.check_process(self.name, None, process_mark(), "extend")
        self._life.begin_extend(self.name, None)
        errors: list[BaseException] = []
        for lease in self._multi._in_order(self.leases):
            try:
                lease.extend(seconds)
            except BaseException as exc:
                errors.append(exc)
        _raise_first(errors)


class MultiLock(_Blocks[MultiLease]):
    """Several locks taken as one: all of them, or none.

    The parts may be any mix of :class:`Lock`, :class:`RLock` and
    :class:`FairLock` objects, on one client or on several (different
    servers). An acquire takes the parts one by one in a fixed order, sorted by
    lock key and then server (``host:port/db``), whatever order they were given
    in: two multi-locks over overlapping parts then never wait for each other
    in a circle (no deadlock). If a part is not taken in time, the parts already
    taken are released, in reverse order, and the acquire returns ``None``:
    nothing is left held. ``timeout`` is one budget for the whole acquire, not
    per part.

    A part whose lease ran out while later parts were being waited for (a part
    with a short ``ttl`` and no renewal) makes the acquire release everything
    and start over, within the same timeout. Parts created without a ``ttl`` are
    renewed by their client's watchdog, so this does not happen to them.

    Each part keeps its own semantics: its own lease, ttl, renewal, fence and
    lost signal; a part that is an ``RLock`` already held by the caller is
    entered again. The :class:`MultiLease` returned covers them all.

    Args:
        locks: the parts, at least one; no two of them the same lock (the same
            lock key on the same server).
        on_lost: called with the multi-lease when any part of it is lost.

    Raises:
        InvalidArgument: ``locks`` is empty or not a sequence, holds something
            that is not an ``Lock``, ``RLock`` or ``FairLock``, or
            holds the same lock twice; or ``on_lost`` is not callable.

    Example::

        both = MultiLock([Lock(client, "account:1"), Lock(client, "account:2")])
        with both as lease:
            transfer(1, 2, fences=lease.fence)
    """

    def __init__(
        self,
        locks: Sequence[Lock | RLock],
        *,
        on_lost: Callable[[MultiLease], object] | None = None,
    ) -> None:
        if isinstance(locks, str | bytes) or not isinstance(locks, Sequence):
            raise InvalidArgument(f"locks must be a sequence of locks, not {locks!r}")
        if not locks:
            raise InvalidArgument("locks must hold at least one lock")
        seen: dict[tuple[str, str], int] = {}
        for i, part in enumerate(locks):
            if not isinstance(part, Lock | RLock):
                raise InvalidArgument(
                    f"locks[{i}] must be one of Lock, RLock, FairLock, not {part!r}"
                )
            where = (part._keys.lock, _server_of(part._client))
            if where in seen:
                raise InvalidArgument(
                    f"locks[{seen[where]}] and locks[{i}] are the same lock "
                    f"({where[0]!r} on {where[1]})"
                )
            seen[where] = i
        self._parts: tuple[_Part, ...] = tuple(locks)
        # the acquire order: by lock key, then server (the same in every process)
        self._order = tuple(i for _, i in sorted(seen.items()))
        self._on_lost = _check_callback(on_lost)
        self._leases: dict[str, MultiLease] = {}

    @property
    def name(self) -> str:
        """The parts' names, in the order given, joined by ``" + "``."""
        return " + ".join(part.name for part in self._parts)

    @property
    def locks(self) -> tuple[Lock | RLock, ...]:
        """The parts, in the order given."""
        return self._parts

    def acquire(
        self, blocking: bool = True, timeout: float | None = None
    ) -> MultiLease | None:
        """Take every part for the calling thread or task, or none of them.

        Args:
            blocking: wait for the parts that are held (default). With
                ``False``, make one attempt at each part, and give up (releasing
                what was taken) at the first that is held.
            timeout: the longest wait in seconds for the whole acquire, from 0 to a year;
                ``None`` waits without limit. Not allowed with ``blocking=False``.

        Returns:
            An :class:`MultiLease` (truthy) holding every part, or ``None``
            if they were not all taken in time; then none is held.

        Raises:
            InvalidArgument: a bad ``blocking`` or ``timeout``; nothing was sent.
            AlreadyHeldError: the caller already holds a part that is an
                ``Lock`` or ``FairLock`` (the parts taken were released).
            NotReplicatedError, WrongTypeError, UnsupportedServer,
            redis.exceptions.ConnectionError: as a part's acquire raises them;
                the parts taken were released.
        """
        wait = lock_plans.check_acquire(blocking, timeout)
        owner = _driver.current_owner()
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            taken = self._take_all(blocking, deadline)
            if taken is None:
                return None
            if all(lease.valid for lease in taken):
                break
            # a part's lease ran out while later parts were awaited: start over
            _release_quietly(taken)
            if not blocking or (deadline is not None and time.monotonic() >= deadline):
                return None
        by_part = dict(zip(self._order, taken, strict=True))
        lease = MultiLease(self, owner, tuple(by_part[i] for i in range(len(self._parts))))
        self._leases[owner] = lease
        if self._on_lost is not None:
            lease.on_lost(self._on_lost)
        return lease

    def _take_all(
        self, blocking: bool, deadline: float | None
    ) -> list[_PartLease] | None:
        """Take the parts in the acquire order; ``None`` (holding none) if one
        was not taken in time."""
        taken: list[_PartLease] = []
        try:
            for i in self._order:
                part = self._parts[i]
                if not blocking:
                    lease = part.acquire(blocking=False)
                else:
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    lease = part.acquire(timeout=left)
                if lease is None:
                    _release_quietly(taken)
                    return None
                taken.append(lease)
        except BaseException:
            _release_quietly(taken)
            raise
        return taken

    def _in_order(self, leases: tuple[_PartLease, ...]) -> list[_PartLease]:
        """A multi-lease's part leases (given in the parts' order) in the acquire order."""
        return [leases[i] for i in self._order]

    def release(self) -> None:
        """Release the calling thread's or task's multi-lease (see
        :meth:`MultiLease.release`).

        Raises:
            NotOwnedError: the caller holds no multi-lease of this object, or a
                part of it was lost (``LockLostError``).
            redis.exceptions.ConnectionError: a part could not be released.
        """
        self._lease().release()

    def extend(self, seconds: float | None = None) -> None:
        """Extend every part of the calling thread's or task's multi-lease (see
        :meth:`MultiLease.extend`).

        Raises:
            InvalidArgument: ``seconds`` is not a number of seconds from 0.01 to a year.
            NotOwnedError: the caller holds no multi-lease of this object, or a
                part of it was lost (``LockLostError``).
            redis.exceptions.ConnectionError: a part could not be extended.
        """
        self._lease().extend(seconds)

    def locked(self) -> bool:
        """Whether any part is held by anyone now, so that an acquire would
        wait (a snapshot; it may change at once).

        Raises:
            WrongTypeError: a key of a part holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        for part in self._parts:
            if part.locked():
                return True
        return False

    def owned(self) -> bool:
        """Whether the calling thread or task holds every part through this
        multi-lock, as Redis says now.

        Raises:
            WrongTypeError: a key of a part holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        if _driver.current_owner() not in self._leases:
            return False
        for part in self._parts:
            if not part.owned():
                return False
        return True

    def info(self) -> MultiLockInfo:
        """A snapshot of the parts, in the order given: for each, whether anyone
        holds it, and the fence of the caller's lease of it.

        Raises:
            WrongTypeError: a key of a part holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        lease = self._leases.get(_driver.current_owner())
        parts = []
        for i, part in enumerate(self._parts):
            fence = lease.fence[i] if lease is not None else None
            kind = type(part).__name__
            parts.append(
                MultiPartInfo(kind, part.name, part._keys.lock, part.locked(), fence)
            )
        return MultiLockInfo(lease is not None and lease.valid, tuple(parts))

    def __repr__(self) -> str:
        parts = ", ".join(f"{type(p).__name__}({p.name!r})" for p in self._parts)
        return f"<{type(self).__name__} [{parts}] held_here={len(self._leases)}>"

    def _lease(self) -> MultiLease:
        lease = self._leases.get(_driver.current_owner())
        if lease is None:
            raise NotOwnedError(self.name, None, "not held by this thread or task")
        return lease

    def _forget(self, lease: MultiLease) -> None:
        if self._leases.get(lease.owner) is lease:
            del self._leases[lease.owner]


# --- fenced resources -------------------------------------------------------


class FencedKey(PerProcess):
    """A value in Redis that only a current lock holder can overwrite.

    Every write carries the writer's fence (``lease.fence``). The key accepts a
    write only if its fence is at least as large as every fence it accepted
    before, so a holder whose lease ended while it was paused, and whose
    successor has written since, is refused instead of overwriting newer data
    (Kleppmann, "How to do distributed locking", 2016). Equal fences are
    accepted: one holder may write many times. The check and the write are one
    atomic script. For resources outside Redis, make the same check there, e.g.
    in SQL: ``UPDATE t SET v = :v, fence = :fence WHERE id = :id AND fence <= :fence``.

    Args:
        client: your ``redis.Redis`` or ``valkey.Valkey`` client.
        key: the resource's Redis key (a string value). The largest fence
            accepted is kept beside it, in the same hash slot
            (``{<key>}:fenced:seen``, or a name made from the whole key when it
            holds braces or ``%``).

    Raises:
        InvalidArgument: ``client`` is not a client this class accepts (a URL,
            ``None``, a client of the other API, a pipeline, a cluster client);
            ``key`` is not a non-empty ``str``.

    Example::

        orders = FencedKey(client, "orders:42:state")
        with Lock(client, "orders:42") as lease:
            orders.set("charged", fence=lease.fence)
    """

    _made_from = "the client and key"

    def __init__(self, client: _driver.Client, key: str) -> None:
        self._client = _driver.check_client(client, "FencedKey")
        self._key, self._seen_key = fenced_keys(key)

    @property
    def key(self) -> str:
        """The resource's Redis key."""
        return self._key

    def set(self, value: str | bytes, fence: int) -> None:
        """Store ``value`` if ``fence`` is at least the largest fence accepted so far.

        Args:
            value: the new value (``str`` or ``bytes``).
            fence: the writer's fence, a non-negative ``int`` (``lease.fence``).

        Raises:
            StaleFenceError: a write with a larger fence was accepted before: the
                writer's lease has ended. Nothing was written.
            InvalidArgument: ``fence`` is not a non-negative ``int`` or ``value``
                is not ``str``/``bytes``; nothing was sent.
            WrongTypeError: the key holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        fence = fenced_plans.check_fence(fence)
        if not isinstance(value, str | bytes):
            raise InvalidArgument(f"value must be str or bytes, not {type(value).__name__}")
        plan = fenced_plans.fenced_set(self._key, self._seen_key, value, fence)
        _driver.run(self._client, plan)

    def seen(self) -> int:
        """The largest fence this key has accepted (0 before any fenced write).

        Raises:
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return _driver.run(self._client, fenced_plans.seen(self._seen_key))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._key!r}>"


# --- semaphore --------------------------------------------------------------


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

    def __init__(
        self, semaphore: Semaphore, grant: lock_plans.Grant, permits: int, holder: str
    ) -> None:
        super().__init__(semaphore, grant)
        self._holder = holder
        self.permits = permits

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
        return super().release()

    def extend(self, seconds: float | None = None) -> None:
        """Reset the lease to end ``seconds`` from now (default: its ttl).

        Args:
            seconds: the new remaining lease, in seconds, from 0.01 to a year.

        Raises:
            InvalidArgument: ``seconds`` is not a number of seconds from 0.01 to a year.
            LockLostError: the lease was lost (its deadline passed, or its
                permits expired in Redis); the lease ends.
            NotOwnedError: the lease was released.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return super().extend(seconds)

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


class Semaphore(PerProcess):
    """A distributed counting semaphore whose permits are owned, expiring leases.

    At most ``permits`` permits are held at once, across every process that uses
    the same Redis or Valkey server and name. Each acquire takes ``n`` permits as
    one lease (Redisson's ``RPermitExpirableSemaphore``): only that lease can
    give them back or extend them, and they return to the semaphore by
    themselves when its ttl runs out, so a crashed holder cannot leak permits.
    Lease expiry is kept on the server's clock, never a client's.

    The permit count is stored in Redis by the first acquire, and kept until a
    week after the semaphore's last acquire or :meth:`set_permits` (README,
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
        client: your ``redis.Redis`` or ``valkey.Valkey`` client
            (its pool, TLS and ACL settings are used as they are; tenure adds one
            pub/sub connection per client while something waits).
        name: the semaphore's name; its keys are ``<prefix>{<name>}:semaphore``
            and siblings, apart from any lock's.
        permits: the number of permits, an ``int`` from 1 to 2**53 - 1.
        ttl: the lease length in seconds, from 0.01 to a year (default 30).
        auto_renew: whether the client's watchdog renews every lease while it is
            held (every third of the ttl). Default: ``True`` when no ``ttl`` is
            given, else ``False``.
        on_lost: called with the lease when a lease of this semaphore is lost.
        min_replicas: after each acquire, wait until this many replicas
            acknowledge the lease (``WAIT``); if fewer do within
            ``replica_timeout``, give the permits back and raise
            :class:`NotReplicatedError` (see :class:`Lock`). Default 0.
        replica_timeout: seconds, > 0 and at most a year, that acquire waits for
            replicas (default 1).
        replica_fsync: wait for the replicas' append-only file (``WAITAOF``) instead.
        prefix: the key prefix (default ``"tenure:"``); one whose first ``{`` is
            followed at once by ``}`` is refused.

    Raises:
        InvalidArgument: ``client`` is not a client this class accepts (a URL,
            ``None``, a client of the other API, a pipeline, a cluster client);
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
        prefix: str = "tenure:",
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
        # Until an acquire succeeds, a different count stored in Redis is an error.
        self._check = True
        # owner id -> the live leases it took through this object, oldest first
        self._held: dict[str, list[SemaphoreLease]] = {}
        # the leases of the open ``with semaphore:`` blocks
        self._blocks = _Holding(_PermitsOf(self, 1), None)

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
            WrongTypeError: a key of the semaphore holds a value of another type.
            UnsupportedServer: the server is older than Redis 6.2 / Valkey 7.2.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        n = semaphore_plans.check_n(n, self._permits)
        wait = lock_plans.check_acquire(blocking, timeout)
        owner = _driver.current_owner()
        plan = semaphore_plans.acquire(
            self._keys,
            new_token(owner),
            n,
            self._permits,
            self._opts.ttl,
            check=self._check,
            blocking=blocking,
            timeout=wait,
            now=time.monotonic,
        )
        grant = _driver.run(self._client, plan)
        if grant is None:
            return None
        self._check = False
        lease = SemaphoreLease(self, grant, n, owner)
        self._held.setdefault(owner, []).append(lease)
        lease._start()
        return lease

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
        asking for more permits than the new count is told at its next attempt
        (:class:`~tenure.InvalidArgument`).

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

    def info(self) -> semaphore_plans.SemaphoreInfo:
        """A snapshot of the semaphore in Redis: its count, free permits, holders
        (token, permits, seconds left) and the number of queued waiters.

        Raises:
            WrongTypeError: a key of the semaphore holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return _driver.run(self._client, semaphore_plans.inspect(self._keys, self._permits))

    def __call__(
        self, n: int = 1, *, timeout: float | None = None
    ) -> _Holding[SemaphoreLease]:
        """A context manager that acquires ``n`` permits with ``timeout`` seconds and
        releases them on exit.

        Raises:
            InvalidArgument: (on entry) a bad ``n`` or ``timeout``.
            AcquireTimeout: (on entry) the permits were not taken within ``timeout``.
        """
        return _Holding(_PermitsOf(self, n), timeout)

    def __enter__(self) -> SemaphoreLease:
        """Take one permit, waiting as long as it takes; the block's exit gives
        back exactly this lease.

        Raises:
            WrongTypeError: a key of the semaphore holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return self._blocks.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # the lease this block took, whatever else it took
        self._blocks.__exit__(exc_type, exc, tb)

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
            leases.remove(lease)
            if not leases:
                del self._held[lease._holder]
        _driver.unwatch(self._client, lease._watch)


# --- count-down latch -------------------------------------------------------


class CountDownLatch(PerProcess):
    """A distributed count-down latch: wait until a count, counted down by others,
    reaches zero.

    One party sets the count (:meth:`try_set_count`), others count it down as
    they finish their part (:meth:`count_down`), and any number of threads,
    tasks and processes :meth:`wait` until it is zero. A latch whose count is
    zero is open: every wait returns at once. The count lives in Redis and has
    no expiry (a lapse would open the latch), and it can be set again once it
    is zero, which makes the latch reusable.

    Waiting does not poll: a waiter subscribes to the latch's channel, then
    reads the count, then waits; the count reaching zero publishes one message
    that wakes every waiter of every process. A waiter that looks after the
    latch opened and was set again still returns ``True`` if it was waiting
    when it opened.

    Args:
        client: your ``redis.Redis`` or ``valkey.Valkey`` client
            (tenure adds one pub/sub connection per client while something waits).
        name: the latch's name; its keys are ``<prefix>{<name>}:latch`` and siblings.
        prefix: the key prefix (default ``"tenure:"``); one whose first ``{`` is
            followed at once by ``}`` is refused.

    Raises:
        InvalidArgument: ``client`` is not a client this class accepts (a URL,
            ``None``, a client of the other API, a pipeline, a cluster client);
            an empty or non-``str`` name or prefix.

    Example::

        done = CountDownLatch(client, "batch:7")
        done.try_set_count(3)
        ...  # three workers each call: done.count_down()
        if done.wait(timeout=60):
            publish_results()
    """

    def __init__(self, client: _driver.Client, name: str, *, prefix: str = "tenure:") -> None:
        self._client = _driver.check_client(client, "CountDownLatch")
        self._keys = latch_keys(name, prefix=prefix)
        self._seen: int | None = None  # the count at the last call, for repr

    @property
    def name(self) -> str:
        """The latch's name."""
        return self._keys.name

    def try_set_count(self, count: int) -> bool:
        """Set the count, if it is zero (the latch is open).

        Args:
            count: the new count, an ``int`` from 1 to 2**53 - 1.

        Returns:
            ``True`` if the count was set; ``False`` if it was not zero (nothing
            was changed).

        Raises:
            InvalidArgument: ``count`` is not an ``int`` from 1 to 2**53 - 1; nothing was sent.
            WrongTypeError: the latch's key holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        count = latch_plans.check_count(count)
        done = _driver.run(self._client, latch_plans.try_set_count(self._keys, count))
        if done:
            self._seen = count
        return done

    def count_down(self) -> int:
        """Count down by one. Reaching zero opens the latch and wakes every waiter;
        at zero already, nothing happens.

        Returns:
            The count left (0: the latch is open).

        Raises:
            WrongTypeError: a key of the latch holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        self._seen = _driver.run(self._client, latch_plans.count_down(self._keys))
        return self._seen

    def count(self) -> int:
        """The count now, as Redis says (0: the latch is open).

        Raises:
            WrongTypeError: a key of the latch holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return (self.info()).count

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the count is zero.

        Args:
            timeout: the longest wait in seconds, from 0 to a year; ``None`` waits without limit.

        Returns:
            ``True`` when the latch is open (at once if it is already); ``False``
            if ``timeout`` seconds passed first.

        Raises:
            InvalidArgument: ``timeout`` is negative or not a number; nothing was sent.
            WrongTypeError: a key of the latch holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        wait = None if timeout is None else check_seconds(timeout, "timeout", allow_zero=True)
        opened = _driver.run(self._client, latch_plans.wait(self._keys, wait, time.monotonic))
        if opened:
            self._seen = 0
        return opened

    def info(self) -> latch_plans.CountDownLatchInfo:
        """A snapshot of the latch in Redis: its count and opening number.

        Raises:
            WrongTypeError: a key of the latch holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        info = _driver.run(self._client, latch_plans.inspect(self._keys))
        self._seen = info.count
        return info

    def __repr__(self) -> str:
        seen = "not read yet" if self._seen is None else f"count={self._seen} at the last call"
        return f"<{type(self).__name__} {self.name!r} {seen}>"
