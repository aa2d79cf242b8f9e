"""What every kind of lock shares: the default ttl, the process's lease book,
the checked lease options, ``async with`` blocks and the lease a lock object issues."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Generic,
    Literal,
    NoReturn,
    ParamSpec,
    Protocol,
    Self,
    TypeGuard,
    TypeVar,
    cast,
    overload,
)

from ... import _telemetry
from ..._drivers import _async as _driver
from ..._drivers._identity import process_mark
from ..._errors import AcquireTimeout, InvalidArgument, LockLostError, NotOwnedError
from ..._label import default_suffix, label_suffix
from ..._leasebook import LeaseBook, LeaseLife, Phase, Release
from ..._models import (
    LeaseBase,
    OpenBlocks,
    PerProcess,
    block_enter,
    block_exit,
    link_to_block,
    note_started,
)
from ..._plans import replicas as replica_plans
from ..._plans.waiting import Grant
from ..._protocol import Eval, Plan, is_interrupt, result_lost_with
from ..._units import check_seconds, check_ttl, to_ms

if TYPE_CHECKING:  # (imported on first use: see _is_adaptive)
    from ..._adaptive import AdaptiveTTL

#: The lease length, in seconds, of a lock created without ``ttl``.
DEFAULT_TTL = 30.0

#: The latest lease of each (client, lock key, owner) taken in this process,
#: whichever ``AsyncLock`` object took it: a second acquire by the same owner
#: asks Redis first instead of queueing behind this process's other waiters,
#: and first cleans up a lease it left behind (lost, or its release failed).
_BOOK = LeaseBook()


G = TypeVar("G", bound=Grant)


async def _take_grant(
    lock: Any,
    plan: Plan[G | None],
    hold: Callable[[G], Any],
    give_back: Callable[[G], Plan[Any]],
    replicated: bool = False,
    blocking: bool = True,
) -> Any:
    """Run an acquire ``plan`` of ``lock`` (a lock object: its ``_client``,
    ``name`` and ``_probe``); the lease ``hold`` makes of its grant (``None``
    when it returned none), once the lease's ``_start`` is done. The acquire
    is logged and recorded (:mod:`tenure._telemetry`) when anything watches:
    ``blocking`` tells a wait that ran out from one attempt that found the
    lock busy.

    A ``replicated`` lease (``min_replicas``) is granted, waited for and, if
    that fails, given back on one connection (see the driver's
    ``one_connection``): the ``WAIT`` counts the replicas of the server that
    made the grant, and the give-back reaches that server, even if the
    client's pool has meanwhile learned of another master (a failover).

    A grant its caller would never see is given back (best effort) before the
    error is raised: an interrupt or cancellation between the plan's grant
    and the lease's return (the driver's clean-up, the lease's making, its
    start), or a start that failed: the lease's own release if it was made,
    else the ``give_back`` plan of the grant (a release of its token). Without
    this the lock stayed held under a token nobody used until its ttl ran
    out (a ``Lock``'s owner got ``AlreadyHeldError`` meanwhile).
    """
    client = lock._client
    watched = _telemetry.acquiring(lock, blocking, _driver.server_name)
    if watched is None:
        return await _held_after(client, plan, hold, give_back, replicated)
    try:
        lease = await _held_after(client, plan, hold, give_back, replicated)
    except BaseException as exc:
        watched.failed(exc)
        raise
    await _report(watched, lease)
    return lease


async def _watched(
    lock: object, blocking: bool, server: Any, take: Callable[[], Coroutine[Any, Any, R]]
) -> R:
    """``take()``, an acquire's work, with its outcome reported to the
    telemetry (:func:`_report`): a lock of several servers or parts, whose
    acquire is not :func:`_take_grant`'s."""
    watched = _telemetry.acquiring(lock, blocking, server)
    if watched is None:
        return await take()
    try:
        lease = await take()
    except BaseException as exc:
        watched.failed(exc)
        raise
    await _report(watched, lease)
    return lease


async def _report(watched: _telemetry.Acquire, lease: Any) -> None:
    """``watched.done(lease)``: an acquire's outcome logged and recorded. A
    lease whose caller would never see it (an interrupt, of any class, while
    it is recorded) is released first (best effort), as in :func:`_take_grant`."""
    try:
        watched.done(lease)
    except BaseException:
        if lease is not None:
            with contextlib.suppress(Exception):
                await lease.release()
        raise


async def _held_after(
    client: Any,
    plan: Plan[G | None],
    hold: Callable[[G], Any],
    give_back: Callable[[G], Plan[Any]],
    replicated: bool,
) -> Any:
    """:func:`_take_grant`'s work."""
    if not replicated:
        return await _grant_and_hold(client, plan, hold, give_back)
    lease = None
    try:
        async with _driver.one_connection(client):
            lease = await _grant_and_hold(client, plan, hold, give_back)
    except BaseException:
        # a lease made, then cut off from its caller as the block ended
        # (an interrupt in the block's exit): released, not left renewed
        if lease is not None:
            with contextlib.suppress(Exception):
                await lease.release()
        raise
    return lease


async def _grant_and_hold(
    client: Any,
    plan: Plan[G | None],
    hold: Callable[[G], Any],
    give_back: Callable[[G], Plan[Any]],
) -> Any:
    """:func:`_held_after`'s work, on one connection or not."""
    try:
        grant = await _driver.run(client, plan)
    except BaseException as exc:
        lost: G | None = result_lost_with(exc)
        if lost is not None:
            with contextlib.suppress(Exception):
                await _driver.run(client, give_back(lost))
        raise
    if grant is None:
        return None
    lease = None
    try:
        lease = hold(grant)
        await lease._start()
    except BaseException:
        with contextlib.suppress(Exception):
            if lease is not None:
                await lease.release()  # (a start that failed released it already)
            else:
                await _driver.run(client, give_back(grant))
        raise
    return lease


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


async def holder_of(lock: object) -> str | None:
    """Who holds ``lock`` now, in words (:func:`tenure._info.held_by` of its
    ``info()``, or of its read-write lock's; a Redlock's holder on a quorum of
    its masters), read with one more call: for an
    error message, never on the hot path. ``None`` when it has no such
    snapshot or the call failed."""
    read: Any = (
        getattr(lock, "_held_by", None)  # (a Redlock: its quorum's holder, in words)
        or getattr(lock, "info", None)
        or getattr(getattr(lock, "lock", None), "info", None)
    )
    if read is None:
        return None
    try:
        answer = await read()
    except Exception as exc:
        if is_interrupt(exc):  # (of any class: never swallowed)
            raise
        return None
    if isinstance(answer, str):
        return answer
    from ..._info import held_by  # (an error's words: loaded on first use)

    return held_by(answer)


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


class AsyncExitReleasable(Protocol):
    """What the release on a with-block's exit (:func:`_release_on_exit`) needs
    of the lease it releases: every lease of the facade (those on
    :class:`_AsyncHeldLease`, and ``AsyncMultiLease``), given by the blocks
    of :class:`_AsyncHolding` or entered itself (:class:`_AsyncEntersItself`)."""

    async def release(self) -> None: ...

    def _release_due(self) -> bool:
        """Whether a release is still due once ``release()`` was cut off: the
        lease is still held (the release did nothing), or a part's release is
        due."""


L = TypeVar("L", bound=AsyncExitReleasable)
L_co = TypeVar("L_co", bound=AsyncExitReleasable, covariant=True)


class _AsyncAcquirer(Protocol[L_co]):
    @property
    def name(self) -> str: ...

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> L_co | None: ...


#: Whether this facade's guards decorate coroutine functions (the asyncio
#: facade) or plain ones (the synchronous facade, generated).
_COROUTINES = True

#: A function a guard decorates.
F = TypeVar("F", bound=Callable[..., Any])
#: The parameters and the result of a function a guard decorates with ``skip``.
P = ParamSpec("P")
R = TypeVar("R")


class _Block(Generic[L]):
    """One open block of a guard (a ``with`` block, or a decorated call): its
    lease, the object whose ``current_lease()`` gives it (``of``: the lock,
    the read or write view, the semaphore), and whether it is still open."""

    __slots__ = ("lease", "of", "open")

    def __init__(self, of: object, lease: L) -> None:
        self.of = of
        self.lease = lease
        self.open = True

    @property
    def current(self) -> bool:
        """Whether ``current_lease()`` may give this block's lease: the block is
        open and its lease neither released nor due for release (its release
        asked or under way, or the statement that entered it over: an
        interrupt cut its enter off after the acquire, and its exit never ran).
        A lost lease stays current: its ``lost`` says so."""
        if not self.open:
            return False
        life = getattr(self.lease, "_life", None)
        if not isinstance(life, LeaseLife):
            return True
        return life.phase is not Phase.RELEASED and not life.unfinished


#: The open blocks of every guard of this facade in the current context (a
#: thread's; a task's, which the tasks it starts inherit), innermost last:
#: what ``current_lease()`` reads. A block closed in another context (an
#: async generator closed by another task) stays listed in its own, closed,
#: until that context's next block exit drops it.
_open_here: contextvars.ContextVar[tuple[_Block[Any], ...]] = contextvars.ContextVar(
    "tenure_open_blocks", default=()
)


def _current_lease(of: object, name: str) -> Any:
    """The lease of the innermost block of ``of`` open in the current context
    (see :meth:`_AsyncBlocks.current_lease`).

    Raises:
        NotOwnedError: no block of ``of`` is open here.
    """
    for block in reversed(_open_here.get()):
        if block.of is of and block.current:
            return block.lease
    raise NotOwnedError(name, None, "no block or decorated call of this object is open here")


class _AsyncGuard(Generic[L]):
    """``async with lock(timeout=...)``: acquire on entry, release that lease on
    exit; and, called with a function, a decorator that runs each call of it in
    such a block (``@lock(timeout=...)``): :class:`_AsyncHolding`, or
    :class:`_AsyncSkipping` with ``skip``.

    One object may be entered by several threads or tasks at once, and nested:
    each block's exit releases the lease that block's entry took (see
    :class:`tenure._models.OpenBlocks`). ``skip``: a decorated call that does
    not get the lock in time returns ``None`` without running (a block can't
    be skipped: entering one raises :class:`~tenure.InvalidArgument`). Each
    open block is also listed in its context for ``current_lease()`` (of
    ``of``: the lock, by default)."""

    #: whether a decorated call that does not get the lock in time is skipped
    _SKIPS = False

    def __init__(
        self, lock: _AsyncAcquirer[L], timeout: float | None, of: object | None = None
    ) -> None:
        self._lock = lock
        self._timeout = timeout
        self._of = lock if of is None else of
        self._open: OpenBlocks[_Block[L]] = OpenBlocks()

    @block_enter
    async def __aenter__(self) -> L:
        if self._SKIPS:
            raise InvalidArgument(
                f"skip=True: a block of {self._lock.name!r} can't be skipped "
                "(it only applies to a decorated function)"
            )
        lease = await self._lock.acquire(timeout=self._timeout)
        if lease is None:
            raise AcquireTimeout(self._lock.name, self._timeout, await holder_of(self._lock))
        block = _Block(self._of, lease)
        self._open.push(_driver.current_owner(), block)
        _open_here.set((*_open_here.get(), block))
        return lease

    def _decorate(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """``func`` run by each call in a block of this guard's lock and
        timeout (see the subclasses' ``__call__``).

        A generator function (or async generator function) is refused in
        both flavours: its call only makes the generator, so the block would
        end before the first line of its body ran, and the body run unguarded.

        Raises:
            InvalidArgument: ``func`` is not a function of this guard's flavour,
                or is a generator function.
        """
        if (
            not callable(func)
            or inspect.iscoroutinefunction(func) is not _COROUTINES
            or inspect.isgeneratorfunction(func)
            or inspect.isasyncgenfunction(func)
        ):
            kind = (
                "a coroutine function (no async generator)"
                if _COROUTINES
                else "a plain function (no coroutine function, no generator)"
            )
            raise InvalidArgument(
                f"{type(self._lock).__name__} {self._lock.name!r} decorates {kind}, not {func!r}"
            )

        skip = self._SKIPS
        holding = _AsyncHolding(self._lock, self._timeout, self._of) if skip else self

        @functools.wraps(func)
        async def guarded(*args: Any, **kwargs: Any) -> Any:
            entered = False
            try:
                async with holding:
                    entered = True
                    return await func(*args, **kwargs)
            except AcquireTimeout:
                if skip and not entered:
                    return None  # (not the function's own AcquireTimeout)
                raise

        return guarded

    def __call__(
        self, func: Callable[P, Coroutine[Any, Any, R]], /
    ) -> Callable[P, Coroutine[Any, Any, R | None]]:
        """Decorate ``func`` (of this guard's flavour: ``async def`` for an
        asyncio guard, a plain function for a synchronous one): each call
        acquires the lock (as a ``with`` block of this guard), runs ``func``,
        and releases it, whatever ``func`` raises; with ``skip``, a call that
        does not get the lock in time returns ``None`` and does not run it.
        Inside the call, the lock's ``current_lease()`` is the call's lease.

        Raises:
            InvalidArgument: ``func`` is not a function of this guard's flavour.
            AcquireTimeout: (each call, without ``skip``) the lock was not
                taken within the timeout.
        """
        return self._decorate(func)

    @block_exit
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        block = self._open.pop(_driver.current_owner())
        if block is None:
            raise NotOwnedError(self._lock.name, None, "no block of this guard is open")
        try:
            await _release_on_exit(block.lease)
        finally:
            block.open = False  # (first, one store: no longer current, wherever listed)
            listed = _open_here.get()
            if any(not b.current for b in listed):
                _open_here.set(tuple(b for b in listed if b.current))


class _AsyncHolding(_AsyncGuard[L]):
    """A guard (see :class:`_AsyncGuard`) whose decorated calls wait for the
    lock, or raise :class:`~tenure.AcquireTimeout`: a decorated function
    keeps its type."""

    def __call__(
        self, func: Callable[P, Coroutine[Any, Any, R]], /
    ) -> Callable[P, Coroutine[Any, Any, R]]:
        """See :meth:`_AsyncGuard.__call__` (never skipped).

        Raises:
            InvalidArgument: ``func`` is not a function of this guard's flavour.
            AcquireTimeout: (each call) the lock was not taken within the timeout.
        """
        return self._decorate(func)


class _AsyncSkipping(_AsyncGuard[L]):
    """A guard of ``skip=True`` (see :class:`_AsyncGuard`): a decorated call
    that does not get the lock in time returns ``None`` without running; its
    type says so (``-> int`` becomes ``-> int | None``)."""

    _SKIPS = True


async def _release_on_exit(lease: AsyncExitReleasable) -> None:
    """``lease.release()`` as a block ends. An interrupt (or cancellation), of
    any exception class, that comes as the call begins, before the release did
    anything, would leave the lease held with nobody to release it (the block
    is gone), and renewed by the watchdog for as long as the process lives (its
    owner's next acquire of a ``Lock`` then raises ``AlreadyHeldError``): the
    release is made once more, best effort, before the interrupt goes on. So
    is a multi-lease's whose release stopped with a part's release still due
    (see its ``_parts_due``). (A release refused before it began, in a forked
    child, is refused again.)"""
    try:
        await lease.release()
    except BaseException:
        if lease._release_due():
            with contextlib.suppress(Exception):
                await lease.release()
        raise


class _AsyncReleasedOnExit:
    """``async with``: ``release()`` on exit."""

    __slots__ = ()

    async def release(self) -> None:
        raise NotImplementedError

    def _release_due(self) -> bool:
        """See :class:`AsyncExitReleasable` (nothing is due of an object with
        no lease life)."""
        return False

    @block_exit
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await _release_on_exit(self)


class _AsyncBlocks(PerProcess, _AsyncReleasedOnExit, Generic[L]):
    """``async with lock`` and ``async with lock(timeout=...)``, for every lock class."""

    @property
    def name(self) -> str:
        raise NotImplementedError

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> L | None:
        raise NotImplementedError

    @overload
    def __call__(self, func: F, /) -> F: ...

    @overload
    def __call__(
        self, func: None = None, /, *, timeout: float | None = None, skip: Literal[False] = False
    ) -> _AsyncHolding[L]: ...

    @overload
    def __call__(
        self, func: None = None, /, *, timeout: float | None = None, skip: Literal[True]
    ) -> _AsyncSkipping[L]: ...

    @overload
    def __call__(
        self, func: None = None, /, *, timeout: float | None = None, skip: bool
    ) -> _AsyncGuard[L]: ...

    def __call__(
        self, func: F | None = None, /, *, timeout: float | None = None, skip: bool = False
    ) -> F | _AsyncGuard[L]:
        """A context manager that acquires with ``timeout`` seconds (``None``:
        as long as it takes; ``0``: one attempt) and releases on exit; also a
        decorator (``@lock(timeout=5)``: each call of the function runs in such
        a block; ``skip=True``: a call that does not get the lock in time
        returns ``None`` without running, and the decorated function's type
        says so: ``-> int`` becomes ``-> int | None``). Called with a function
        (``@lock``), it decorates it, waiting as long as it takes. Inside a
        block or a decorated call, :meth:`current_lease` is its lease.

        Raises:
            InvalidArgument: (decorating) a function of the other flavour;
                (on entry) ``skip=True`` on a block.
            AcquireTimeout: (on entry, or each decorated call without
                ``skip``) the lock was not taken within ``timeout``.
        """
        if func is not None:
            return cast(F, self._blocks()(func))
        if skip:
            return _AsyncSkipping(self, timeout)
        return _AsyncHolding(self, timeout)

    def current_lease(self) -> L:
        """The lease of the innermost ``async with`` block of this object (``async with
        lock:``, ``async with lock(timeout=...):``) or call of a function it decorates
        that is open in the calling thread or task (a task started inside one
        inherits it): how a decorated function reaches its lease and fence.
        No I/O.

        Raises:
            NotOwnedError: no such block or call is open here (a lease taken
                by ``acquire()`` is not a block's: use it directly).
        """
        return cast(L, _current_lease(self, self.name))

    def _blocks(self) -> _AsyncHolding[L]:
        """The guard of ``async with lock:`` blocks (made on first use)."""
        guard: _AsyncHolding[L] | None = self.__dict__.get("_guard")
        if guard is None:
            guard = self.__dict__.setdefault("_guard", _AsyncHolding(self, None))
        return guard

    @block_enter
    async def __aenter__(self) -> L:
        return await self._blocks().__aenter__()

    @block_exit
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._blocks().__aexit__(exc_type, exc, tb)


class _AsyncEntersItself(_AsyncReleasedOnExit):
    """``async with lease:`` returns the lease and releases it on exit."""

    __slots__ = ()

    @block_enter
    async def __aenter__(self) -> Self:
        return self


class _AsyncIssuer(Protocol):
    """What a lease needs of the lock object that issued it."""

    _client: _driver.Client
    _opts: _LeaseOptions
    _probe: ClassVar[_telemetry.Probe]

    @property
    def name(self) -> str: ...

    def _forget(self, lease: Any) -> None: ...


LockT = TypeVar("LockT", bound=_AsyncIssuer)


class _AsyncHeldLease(_AsyncEntersItself, LeaseBase, Generic[LockT]):
    """A lease issued by a lock object (``_lock``): ``release``, ``extend``, the
    watchdog's renewal and the start of its life, written once on the hooks each
    kind supplies: its plans (``_release_plan``, ``_extend_plan``,
    ``_renewal``) and what a release, a new deadline, the end and a loss do to
    it (``_released_one``, ``_extended``, ``_end``, ``_lose``).

    The docstrings of ``release`` and ``extend`` are :class:`AsyncLease`'s; a
    kind whose text differs overrides them to say its own.
    """

    lost: asyncio.Event
    __slots__ = ("_lock",)

    def __init__(self, lock: LockT, grant: Grant) -> None:
        super().__init__(lock.name, grant, _driver.new_event)
        self._lock = lock

    def _release_due(self) -> bool:
        """See :class:`AsyncExitReleasable`: the release did nothing."""
        return self._life.phase is Phase.HELD

    async def release(self) -> None:
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
            await self._clean_up()
            await self._end_lost_named(self._life.cleaned)
        try:
            left = await _driver.run(self._lock._client, self._release_plan())
        except NotOwnedError as exc:
            self._lose(exc.reason)
            await self._end_lost_named(True)
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

    async def extend(self, seconds: float | None = None) -> None:
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
            expires_at = await _driver.run(self._lock._client, self._extend_plan(seconds))
        except NotOwnedError as exc:
            self._lose(exc.reason)
            await self._end_lost_named(True)
        self._extended(seconds, expires_at)

    async def _clean_up(self) -> None:
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
            left = await _driver.run(self._lock._client, self._release_plan())
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

    async def _start(self) -> None:
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
            await _driver.run(self._lock._client, plan)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.release()
            raise

    def _end_lost(self) -> NoReturn:
        """The lease is lost: end it and say so."""
        reason = self._life.lost_reason
        self._end()
        raise LockLostError(self.name, self.fence, f"lease lost: {reason}")

    async def _end_lost_named(self, answered: bool) -> NoReturn:
        """:meth:`_end_lost`, its error naming who holds the lock now when
        ``answered`` (Redis just answered: one more call won't hang on a
        server that is down)."""
        try:
            self._end_lost()
        except LockLostError as exc:
            if answered:
                exc.name_holder(await holder_of(self._lock))
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
