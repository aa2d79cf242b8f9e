"""``async with`` blocks and decorated calls, for every kind of lock: the
guards (``async with lock(timeout=...)``, ``@lock``), the release on a block's
exit, the blocks open in the current context that ``current_lease()`` reads,
and a lease that enters itself (``async with lease:``)."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import (
    Any,
    Generic,
    Literal,
    NoReturn,
    ParamSpec,
    Protocol,
    Self,
    TypeVar,
    cast,
    overload,
)

from ..._drivers import _async as _driver
from ..._errors import AcquireTimeout, InvalidArgument, NotOwnedError
from ..._leasebook import LeaseLife, Phase
from ..._models import (
    OpenBlocks,
    PerProcess,
    block_enter,
    block_exit,
    close_unrun,
    entering_statement,
)
from ._grants import holder_of


class AsyncExitReleasable(Protocol):
    """What the release on a with-block's exit (:func:`_release_on_exit`) needs
    of the lease it releases: every lease of the facade (those on
    :class:`._base._AsyncHeldLease`, and ``AsyncMultiLease``), given by the blocks
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


def _refuse_awaitable(lock: Any, func: Callable[..., Any], result: Any) -> NoReturn:
    """Refuse a synchronous guard's call whose function returned an awaitable
    (its body would run once the block ended): closed unrun, if it can be."""
    close_unrun(result)
    raise InvalidArgument(
        f"{type(lock).__name__} {lock.name!r}: {func!r} returned an awaitable, whose body "
        "would run after the lock is released: decorate it with the asyncio flavour"
    )


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
        statement = entering_statement()  # (first: the acquire takes the statement's link)
        lease = await self._lock.acquire(timeout=self._timeout)
        if lease is None:
            raise AcquireTimeout(self._lock.name, self._timeout, await holder_of(self._lock))
        block = _Block(self._of, lease)
        self._open.push(_driver.current_owner(), block, statement)
        _open_here.set((*_open_here.get(), block))
        return lease

    def _decorate(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """``func`` run by each call in a block of this guard's lock and
        timeout (see the subclasses' ``__call__``).

        A generator function (or async generator function) is refused in
        both flavours: its call only makes the generator, so the block would
        end before the first line of its body ran, and the body run unguarded;
        and, in the synchronous flavour, each call of a plain function that
        returns an awaitable (a coroutine: a lambda or a wrapper of a
        coroutine function), for the same reason.

        Raises:
            InvalidArgument: ``func`` is not a function of this guard's flavour,
                or is a generator function; (a call) it returned an awaitable.
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
                    result = await func(*args, **kwargs)
                    if not _COROUTINES and inspect.isawaitable(result):
                        _refuse_awaitable(self._lock, func, result)
                    return result
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
        statement: int | None = None,
    ) -> None:
        block = self._open.pop(_driver.current_owner(), statement)
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
        statement: int | None = None,
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
        statement: int | None = None,
    ) -> None:
        # (the guard's exit itself, off the class: this statement's, not one of its own)
        await _AsyncGuard.__aexit__(self._blocks(), exc_type, exc, tb, statement)


class _AsyncEntersItself(_AsyncReleasedOnExit):
    """``async with lease:`` returns the lease and releases it on exit."""

    __slots__ = ()

    @block_enter
    async def __aenter__(self) -> Self:
        return self
