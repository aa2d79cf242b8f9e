"""What successful acquires return: the part of a lease shared by the sync and async APIs
(and by ``Lock`` and ``RLock``)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import itertools
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Generic, Protocol, TypeAlias, TypeVar, cast

from . import _telemetry
from ._drivers._identity import new_op, process_mark
from ._leasebook import LeaseLife, Phase
from ._plans.waiting import Grant, validity

_log = _telemetry.LOG
_callbacks_mutex = threading.Lock()

#: The tasks running ``async def`` on_lost callbacks (referenced until done).
_callback_tasks: set[asyncio.Task[Any]] = set()


def _a(name: str) -> str:
    """``name`` with its indefinite article: ``a Lock``, ``an AsyncLock``, ``an RLock``."""
    vowel = name[:1] in "AEIOU" or (name[:1] in "FHLMNRSX" and name[1:2].isupper())
    return f"{'an' if vowel else 'a'} {name}"


class PerProcess:
    """A primitive object (``Lock``, ``Semaphore``, ``CountDownLatch``, ...): it
    holds a client and this process's state (its leases, its waiters), so it
    refuses to be pickled or copied with a :class:`TypeError` that says so,
    rather than the client's own "cannot pickle '_thread.RLock'"."""

    __slots__ = ()

    #: What the object is made from, for the messages.
    _made_from: ClassVar[str] = "the client and name"

    #: Its logger and ``tenure.primitive`` (see :mod:`tenure._telemetry`),
    #: one per class, named after it (``AsyncLock`` and ``Lock``: ``lock``).
    _probe: ClassVar[_telemetry.Probe] = _telemetry.LEASE

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._probe = _telemetry.Probe(_telemetry.kind_of(cls.__name__))

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            f"{_a(type(self).__name__)} can't be pickled: it holds a client and "
            f"per-process state; create one in each process from {self._made_from}"
        )

    def __copy__(self) -> Any:
        raise TypeError(
            f"{_a(type(self).__name__)} can't be copied: it holds a client and "
            f"per-process state; share the object, or create another from {self._made_from}"
        )

    def __deepcopy__(self, memo: Any) -> Any:
        self.__copy__()


def close_unrun(awaitable: object) -> None:
    """Close ``awaitable`` (a coroutine a plain callback of the user's made,
    which nothing will await) before its body ran, if it can be closed: no
    "never awaited" warning, and its body never runs."""
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()


def run_all(*calls: Callable[[], object]) -> None:
    """Make each call, in order, whatever one raises (a callback's error, an
    interrupt, a log handler's); then raise the first error, if any: a loss
    is signalled to every callback and lease it concerns."""
    escaped: BaseException | None = None
    for call in calls:
        try:
            call()
        except BaseException as exc:
            if escaped is None:
                escaped = exc
    if escaped is not None:
        raise escaped


class LostSignal(Protocol):
    """What ``lease.lost`` is: a ``threading.Event`` (sync) or an ``asyncio.Event``."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...


class LostSignalBase:
    """The lost signal of a lease: ``lost``, ``lost_reason`` and ``on_lost``
    callbacks, shared by every kind of lease.

    Attributes:
        lost: set (once) when the lease is lost while held; never set for a
            lease released cleanly. A ``threading.Event`` for the sync API, an
            ``asyncio.Event`` for the async one.
    """

    __slots__ = ("_callbacks", "_event", "_life", "_make_event")

    def __init__(self, make_event: Callable[[], LostSignal], release_op: str | None = None) -> None:
        # The event is made when first asked for (most leases never are): see `lost`.
        self._make_event = make_event
        self._event: LostSignal | None = None
        # (release_op "": a lease that sends no release of its own, a MultiLease's)
        self._life = LeaseLife(process_mark(), new_op() if release_op is None else release_op)
        self._callbacks: list[Callable[[Any], object]] | None = None

    @property
    def lost(self) -> Any:
        """Set (once) when the lease is lost while held (see the class)."""
        event = self._event
        if event is None:
            with _callbacks_mutex:
                event = self._event
                if event is None:
                    event = self._event = self._make_event()
                    if self._life.phase is Phase.LOST:
                        event.set()
        return event

    @property
    def lost_reason(self) -> str | None:
        """Why the lease was lost (``None`` while it is not)."""
        return self._life.lost_reason

    def __copy__(self) -> Any:
        raise TypeError(
            f"{_a(type(self).__name__)} can't be copied: it is owned by the thread or task "
            "and process that acquired it"
        )

    def __deepcopy__(self, memo: Any) -> Any:
        self.__copy__()

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            f"{_a(type(self).__name__)} can't be pickled: it is owned by the thread or task "
            "and process that acquired it"
        )

    def on_lost(self, callback: Callable[[Any], object]) -> None:
        """Call ``callback(lease)`` once when the lease is lost (at once if it is).

        Callbacks run on the watchdog's thread (sync API) or in the event loop
        (async API); keep them short. An ``async def`` callback of an asyncio
        lease runs as a task of that loop. An exception in one is logged to
        the ``tenure`` logger and does not stop the others (of any class off
        the main thread, ``SystemExit`` too: it would only end that thread,
        the watchdog's; on the main thread an interrupt or exit is raised
        once the other callbacks ran).
        """
        with _callbacks_mutex:
            if self._life.phase is not Phase.LOST:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        self._run_callback(callback)

    def _signal_lost(self, reason: str) -> None:
        """Mark the lease lost (once; never after a clean release): set ``lost``,
        run the callbacks, then log and count it (after: whoever sees ``lost``
        set finds the callbacks run, as soon as before)."""
        with _callbacks_mutex:
            if not self._life.lose(reason):
                return
            callbacks, self._callbacks = self._callbacks or [], None
            event = self._event  # (one made later is made set)
        if event is not None:
            event.set()
        run_all(
            *(functools.partial(self._run_callback, callback) for callback in callbacks),
            functools.partial(_telemetry.lost, self, reason),
        )

    def _lose(self, reason: str) -> None:
        self._signal_lost(reason)

    # What every lease has, for __repr__ (each kind defines them).
    name: str
    fence: object

    @property
    def valid(self) -> bool:
        raise NotImplementedError

    @property
    def remaining(self) -> float:
        raise NotImplementedError

    def __repr__(self) -> str:
        phase = self._life.phase
        if phase is not Phase.HELD:
            state = phase.value
        else:
            state = f"valid {self.remaining:.3f}s" if self.valid else "expired"
        return f"<{type(self).__name__} {self.name!r} fence={self.fence} {state}>"

    def _run_callback(self, callback: Callable[[Any], object]) -> None:
        try:
            outcome = callback(self)
        except (KeyboardInterrupt, SystemExit):
            # Only the main thread runs signal handlers: elsewhere (the sync
            # watchdog's thread) an interrupt or exit is the callback's own,
            # and raised it would end that thread, and every renewal with it.
            if threading.current_thread() is threading.main_thread():
                raise
            _log.exception("tenure: on_lost callback %r failed for %r", callback, self)
            return
        except BaseException:  # (its own, of any class: a sync callback has no await to cancel)
            _log.exception("tenure: on_lost callback %r failed for %r", callback, self)
            return
        if inspect.iscoroutine(outcome):
            self._run_coroutine(callback, outcome)

    def _run_coroutine(self, callback: Callable[[Any], object], coro: Any) -> None:
        """Run the coroutine an ``async def`` callback returned, as a task of the
        event loop running here (the asyncio watchdog's, or the caller's of
        ``on_lost``); its error is logged as a callback's. With no loop running
        here (a sync lease's watchdog thread) it can't run: closed, and logged."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            _log.error(
                "tenure: on_lost callback %r of %r is a coroutine function, which only "
                "an asyncio lease can run",
                callback,
                self,
            )
            return
        task = loop.create_task(coro, name="tenure-on-lost")
        _callback_tasks.add(task)
        task.add_done_callback(lambda done: self._callback_done(callback, done))

    def _callback_done(self, callback: Callable[[Any], object], task: asyncio.Task[Any]) -> None:
        _callback_tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            _log.error(
                "tenure: on_lost callback %r failed for %r",
                callback,
                self,
                exc_info=(type(exc), exc, exc.__traceback__),
            )


class LeaseBase(LostSignalBase):
    """The data of a lease and its client-side validity.

    Attributes:
        name: the lock's name (or exact key).
        owner: what Redis stores for the holder while the lease is held. For a
            ``Lock``, the lease's owner token, unguessable (two 128-bit random
            parts); for an ``RLock``, the holding thread's or task's owner id
            (128 random bits and a number), the field of the lock's hash.
        fence: the fencing token, an ``int`` that strictly increases across every
            successful acquire of this name (Kleppmann, "How to do distributed
            locking", 2016); an ``RLock`` re-entry shares its hold's fence. Pass
            it to the resource you protect and have it reject a write carrying a
            smaller fence than one it has seen.
        ttl: the lease length in seconds.
        acquired_at: when the acquire that granted the lease was sent, on the
            ``time.monotonic()`` clock.
        expires_at: when the lease must be presumed expired, on the
            ``time.monotonic()`` clock: the moment the last acquire or renewal
            was sent plus the ttl, less an allowance for clock drift (1 % of the
            ttl + 2 ms). The watchdog moves it on at every renewal. A lease
            handed over by a release starts with a claim window of at most
            1 s in Redis (``HANDOFF_CLAIM``), which the watchdog extends to the
            ttl 50 ms after the hand-off if the lease is still held then
            (``CLAIM_GRACE``; a shorter hold costs no extend): until then
            ``expires_at`` is the window's end.
        lost: set when the lease is lost while held: the watchdog found it gone
            from Redis, or its deadline (``expires_at``) passed before a renewal
            reached Redis, or a ``release``/``extend`` found it gone. A
            ``threading.Event`` for the sync API (``lease.lost.wait(timeout)``),
            an ``asyncio.Event`` for the async one (``await lease.lost.wait()``).
            Never set for a lease released cleanly.
    """

    fence: int
    __slots__ = (
        "__weakref__",
        "_claim",
        "_watch",
        "acquired_at",
        "expires_at",
        "fence",
        "name",
        "owner",
        "ttl",
    )

    def __init__(self, name: str, grant: Grant, make_event: Callable[[], LostSignal]) -> None:
        super().__init__(make_event)
        self.name = name
        self.owner = grant.token
        self.fence = grant.fence
        self.ttl = grant.ttl
        self.expires_at = grant.expires_at
        self.acquired_at = grant.expires_at - validity(grant.claim or grant.ttl)
        # A hand-off's claim window (s), which the watchdog extends to the ttl
        # soon after (and then sets to 0.0); until then extends check the lease's drift
        # allowance against the window, which Redis holds, not the ttl.
        self._claim = grant.claim
        self._watch: Any = None  # the driver's watchdog entry

    @property
    def _given_up(self) -> bool:
        """(The watchdog's) whether this process gave the lease up and its
        release did not complete (see ``LeaseLife.unfinished``)."""
        return self._life.unfinished

    @property
    def _redis_ttl(self) -> float:
        """The lease Redis holds (s): a hand-off's claim window until the watchdog
        extends it to the ttl, then the ttl."""
        return self._claim or self.ttl

    @property
    def valid(self) -> bool:
        """``True`` while the lease is held (neither released, nor being released,
        nor lost) and not past ``expires_at``."""
        return self._life.held and time.monotonic() < self.expires_at

    @property
    def remaining(self) -> float:
        """Seconds until ``expires_at`` (0.0 once past it, released, being released
        or lost)."""
        if not self._life.held:
            return 0.0
        return max(0.0, self.expires_at - time.monotonic())


T = TypeVar("T")


class OpenBlocks(Generic[T]):
    """The leases of the open ``with`` blocks of one guard (``lock``,
    ``lock(timeout=...)``, ``semaphore(n)``), in the order they were entered, each
    with the owner (thread or task) that entered it and the number of its
    ``with`` statement (see :func:`entering_statement`). A block's exit takes
    the block its statement entered, whichever owner runs it (an async
    generator closed by another task, a generator closed in another thread);
    an exit that names no open block's statement (an ``ExitStack``'s, or
    ``__exit__`` called by hand) takes a block entered the same way, by no
    statement (a statement's block is left by that statement's exit): the
    innermost of the calling owner's, or else of all; only if no such block
    is open, the innermost open block of the calling owner, or else of all,
    so that no lease is left held and renewed for good."""

    __slots__ = ("_mutex", "_open")

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._open: list[tuple[str, int | None, T]] = []

    def push(self, owner: str, lease: T, statement: int | None = None) -> None:
        """A block of ``owner`` was entered with ``lease`` by ``statement``."""
        with self._mutex:
            self._open.append((owner, statement, lease))

    def pop(self, owner: str, statement: int | None = None) -> T | None:
        """The lease of the block ``owner`` leaves by the exit of ``statement``
        (``None`` if none is open)."""
        with self._mutex:
            if statement is not None:
                for i, (_, entered_by, lease) in enumerate(self._open):
                    if entered_by == statement:
                        del self._open[i]
                        return lease
            for unnamed_only in (True, False):
                for of_owner in (True, False):
                    for i in range(len(self._open) - 1, -1, -1):
                        entered_in, entered_by, _ = self._open[i]
                        if (entered_in == owner or not of_owner) and (
                            entered_by is None or not unnamed_only
                        ):
                            return self._open.pop(i)[2]
            return None


# -- ``with`` blocks whose exit is cut off ---------------------------------------
#
# An interrupt (a signal handler's exception) may come at the first instruction
# of a block's ``__exit__``, before any line of it ran: no code of the exit can
# note that the block is left. What can: the statement itself. Python looks up
# ``__enter__`` and then ``__exit__`` on the manager's type (calling their
# ``__get__``), keeps the bound exit on the frame's stack for the whole block,
# then calls the enter; it drops the exit once the block is done with it,
# called to its end or cut off. So each statement gets an exit object of its
# own (:class:`BlockExit`), and the lease its enter returns keeps a weak
# reference to it (``LeaseLife.block``): dead, the block is left, and a lease
# still HELD is one whose exit was cut off, its release due (the owner's next
# acquire sends it; the watchdog never renews it). Entered another way (an
# ``ExitStack``, which reads the methods off the class; or ``__enter__`` called
# by hand), a lease is linked to nothing and stays the caller's to release.

_pending = threading.local()  # .exit: the exit looked up last (weakly), .target: its manager's id


#: The numbers of ``with`` statements (a :class:`BlockExit`'s ``statement``).
_statements = itertools.count(1)


class BlockExit(functools.partial[Any]):
    """The exit of one ``with`` statement: the manager's exit function bound to
    the manager and to the statement's number (its ``statement`` keyword, by
    which a guard's exit finds the block that statement entered); the lease
    entered by the statement refers to it weakly (see above). Called, it runs
    no Python frame of its own (a partial is called in C), so no frame ever
    holds it: a traceback of an interrupt cut into the exit, however long the
    program keeps it, keeps the manager, never the statement's exit, and the
    block counts as left once the statement let go."""

    __slots__ = ()


class _ExitOf:
    """Decorates a manager's ``__exit__`` / ``__aexit__``: looked up on an
    instance, a :class:`BlockExit` of its own, made the pending one of the
    thread; looked up on the class, the plain function."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self._fn
        exit_ = BlockExit(self._fn, instance, statement=next(_statements))
        # (the manager by id: the thread keeps nothing alive; while the exit
        # lives, so does its manager, whose id is then no other's)
        _pending.exit, _pending.target = weakref.ref(exit_), id(instance)
        return exit_


class _EnterOf:
    """Decorates a manager's ``__enter__`` / ``__aenter__``: looked up on an
    instance, it clears the thread's pending exit; called, it takes the exit
    looked up since (the statement's, if it was a ``with`` statement) at once,
    before any other code of the thread can look one up, and links the lease
    the enter returns to it."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self._fn
        _pending.exit = None
        return functools.partial(_enter, self._fn, instance)


F = TypeVar("F", bound=Callable[..., Any])


def block_exit(fn: F) -> F:
    """Decorate a manager's ``__exit__`` / ``__aexit__`` (see :class:`_ExitOf`);
    typed as the method it decorates, which it behaves as."""
    return cast(F, _ExitOf(fn))


def block_enter(fn: F) -> F:
    """Decorate a manager's ``__enter__`` / ``__aenter__`` (see :class:`_EnterOf`);
    typed as the method it decorates, which it behaves as."""
    return cast(F, _EnterOf(fn))


#: The exit of the ``with`` statement whose enter is acquiring (see
#: :func:`link_to_block`), or ``None``: a context variable, so that the task
#: of an ``async with`` keeps its own across awaits.
_block_link: contextvars.ContextVar[Callable[[], object] | None] = contextvars.ContextVar(
    "tenure_block_link", default=None
)


def entering_statement() -> int | None:
    """The number of the ``with`` statement whose enter runs now (its exit's
    ``statement``), or ``None`` (entered another way)."""
    ref = _block_link.get()
    exit_ = None if ref is None else ref()
    if isinstance(exit_, functools.partial):  # (a BlockExit)
        number: int | None = exit_.keywords.get("statement")
        return number
    return None


def take_block_link() -> Callable[[], object] | None:
    """The exit of the ``with`` statement whose enter is acquiring now, if any,
    taken (a later lease of the same acquire, a part's, does not see it)."""
    ref = _block_link.get()
    if ref is not None:
        _block_link.set(None)
    return ref


def link_to_block(lease: object) -> None:
    """Link ``lease`` to the ``with`` statement whose enter is acquiring it, if
    any. An acquire calls it as the lease starts, inside the part where an
    interrupt gives the grant back: from then on a block cut off before its
    enter returned (an interrupt as the acquire returns) gives it up too."""
    ref = take_block_link()
    if ref is not None:
        link(lease, ref)


class Started(list[Any]):
    """The leases started by an acquire that collects them (a MultiLock's,
    for its parts), while it is ``open``: closed by one attribute store, which
    no interrupt can cut in two."""

    open = True


#: The collector of the acquire in progress (see :func:`collect_into`), or ``None``.
_started: contextvars.ContextVar[Started | None] = contextvars.ContextVar(
    "tenure_started", default=None
)


def note_started(lease: object) -> None:
    """``lease`` starts (inside its acquire, where an interrupt gives a grant
    back): the acquire in progress that collects leases knows of it from now
    on, whatever cuts its return off."""
    started = _started.get()
    if started is not None and started.open:
        started.append(lease)


def collect_into(started: Started) -> None:
    """Collect in ``started``, until it is closed, the leases started from now
    on in this thread or task (and the tasks it starts)."""
    _started.set(started)


def _enter(fn: Callable[..., Any], instance: object) -> Any:
    """Call the enter ``fn`` of ``instance``; link the lease it returns (or, for
    an ``async with``, its coroutine returns) to the pending exit of the
    statement, if it is ``instance``'s: a lease entered itself at once; a
    lock's acquire as its lease starts (see :func:`link_to_block`)."""
    exit_ref: Callable[[], object] | None = getattr(_pending, "exit", None)
    if exit_ref is not None:
        _pending.exit = None
        if getattr(_pending, "target", None) != id(instance):
            exit_ref = None
    if exit_ref is None:
        return fn(instance)
    if isinstance(getattr(instance, "_life", None), LeaseLife):
        link(instance, exit_ref)
        return fn(instance)
    token = _block_link.set(exit_ref)
    try:
        result = fn(instance)
    except BaseException:
        _block_link.reset(token)
        raise
    if inspect.isawaitable(result):
        return _linked(result, exit_ref, token)
    _block_link.reset(token)
    link(result, exit_ref)
    return result


async def _linked(
    entered: Awaitable[Any], exit_ref: Callable[[], object], token: contextvars.Token[Any]
) -> Any:
    try:
        lease = await entered
    finally:
        _block_link.reset(token)
    link(lease, exit_ref)
    return lease


def link(lease: object, exit_ref: Callable[[], object]) -> None:
    """Link ``lease`` (a lease, or anything else: then nothing) to the exit
    ``exit_ref`` refers to, if that exit still lives."""
    life = getattr(lease, "_life", None)
    if isinstance(life, LeaseLife) and exit_ref() is not None:
        life.block = exit_ref


class _AsyncWhileHeld:
    """How the asyncio ``run_while_leader`` runs its work: as a task, cancelled
    as soon as the lease's ``lost`` is set (its sync twin :class:`_WhileHeld`)."""

    @staticmethod
    async def run(fn: Callable[[Any], Awaitable[Any]], lease: Any) -> tuple[bool, Any]:
        """Run ``fn(lease)``; return ``(True, its result)``, or ``(False, None)``
        when the lease was lost first (the work was cancelled, and waited for)."""
        work = asyncio.ensure_future(fn(lease))
        lost = asyncio.ensure_future(lease.lost.wait())
        try:
            await asyncio.wait((work, lost), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            # the caller was cancelled: the work ends before the call does
            # (and so before the leadership is resigned)
            work.cancel()
            await asyncio.wait((work,))
            if not work.cancelled():
                work.exception()  # (retrieved: the caller's cancellation wins)
            raise
        finally:
            lost.cancel()
        if work.done():
            return True, work.result()
        work.cancel()
        try:
            await work
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # (the caller was cancelled too)
        return False, None


class _WhileHeld:
    """How the sync ``run_while_leader`` runs its work: in the calling thread,
    which Python can't interrupt safely; the work watches ``lease.lost`` (a
    ``threading.Event``) and returns when it is set."""

    @staticmethod
    def run(fn: Callable[[Any], Any], lease: Any) -> tuple[bool, Any]:
        """Run ``fn(lease)``; return ``(True, its result)``."""
        return True, fn(lease)


R = TypeVar("R")

#: The work of the asyncio ``run_while_leader``: an ``async def`` function of the leadership.
AsyncWork: TypeAlias = Callable[[Any], Awaitable[R]]

#: The work of the sync ``run_while_leader``: a function of the leadership.
Work: TypeAlias = Callable[[Any], R]
