"""What the fan-out of both flavours (``_async/fanout.py`` and the
``_sync/fanout.py`` generated from it) shares and needs no I/O: the steps it
may send and how their replies are read, the results of a plan it did not
wait for or did not send, the count of broken connections, the book of the
calls in flight on each client with the clean-up steps queued behind them,
the watchdogs shared by every lock of a kind. Each is given what differs
per flavour (a lock or a null context, the scope)."""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .._errors import TenureError
from .._plans.redlock import Late
from .._protocol import Command, Eval, Pipeline, Plan, parse_reply
from . import _identity
from ._clients import Fallback
from ._watchbook import Watch, Watchable

#: A plan's place in the results of ``run_each`` while it is not done.
NOT_DONE = object()

#: The most steps ``send_late`` queues for one client (the later ones are dropped).
MAX_LATE = 16

#: The most replies left unread on one connection of the quick path.
MAX_DUE = 16


#: A round's entry on the quick path: (job index, connection, step).
Sent = tuple[int, Any, Any]


@dataclass(eq=False)
class Round:
    """A round of ``run_each``'s quick path, written, whose replies a flavour's
    ``collect`` reads by ``deadline``: on the connection of each entry
    ``(i, connection, step)`` of ``sent``, ``need[i]`` replies (an error
    reply, of the class ``errors[i]``, in place of its reply), ``read[i]``
    of them read so far. ``collect`` returns, for each entry in order, its
    replies, or the exception reading them raised (``TimeoutError`` once
    ``deadline`` passed), or ``None`` for those it did not read because its
    ``arrived`` (called with the entry's index and replies as they are all
    read) returned ``True``."""

    sent: list[Sent]
    deadline: float
    need: dict[int, int]
    errors: dict[int, type[Exception]]
    read: dict[int, int] = field(default_factory=dict)


class NotYet(TimeoutError):
    """The result of a plan ``run_each`` stopped waiting for (it had
    ``enough``): its reply is still due, and the server may yet run it."""


class Unsent(TimeoutError):
    """The result of a plan ``run_each`` did not send at all: an earlier call
    to that server is still in flight (a paused server?), or a clean-up must
    not overtake one. The server never sees it; a call that must still reach
    it (a release) can be queued behind the earlier one with ``send_late``."""


def is_fault(exc: BaseException) -> bool:
    """Whether ``exc``, raised in the calling thread or task by one server's
    call, is that server's failure (its connection, an error reply, tenure's
    reading of it): counted as one server's outcome. Any other exception
    (one a signal handler raised, such as a program's
    ``AlarmTimeout(Exception)``) cuts the whole call off, as
    ``KeyboardInterrupt`` or a cancellation does, so that the caller gives
    back what the call may have taken."""
    library_error = type(exc).__module__.partition(".")[0] in ("redis", "valkey")
    return library_error or isinstance(exc, OSError | TenureError | Fallback)


def no_answer(response_error: type[Exception], error: BaseException) -> bool:
    """Whether ``error``, what a call raised, says the server did not answer
    (not an error reply, ``response_error`` of its library, nor tenure's own
    verdict on a reply, nor a call never sent)."""
    return not isinstance(error, response_error | TenureError | Unsent)


def advance(
    jobs: list[tuple[Any, Plan[Any]]],
    steps: dict[int, Any],
    results: list[Any],
    i: int,
    reply: Any,
    error: BaseException | None,
) -> None:
    """Give job ``i``'s plan ``reply`` (or throw ``error`` into it): its next
    step into ``steps``, or, once it is done, its result (or the server's
    fault it raised) into ``results``. An exception that is no server's
    fault (:func:`is_fault`) is raised."""
    plan = jobs[i][1]
    try:
        steps[i] = plan.send(reply) if error is None else plan.throw(error)
    except StopIteration as stop:
        results[i] = stop.value
        steps.pop(i, None)
    except Exception as exc:
        if not is_fault(exc):
            raise
        results[i] = exc
        steps.pop(i, None)


def pack_key(conn: Any, step: Any) -> tuple[int, Any, Any]:
    """What a packed step may be reused for: the same step, the same encoding."""
    encoder = getattr(conn, "encoder", None)
    return id(step), getattr(encoder, "encoding", None), getattr(encoder, "encoding_errors", None)


def count(step: Any) -> int:
    """How many commands ``step`` sends (and so how many replies to read)."""
    if isinstance(step, Pipeline):
        return sum(count(part) for part in step.steps)
    return 1


def replies(step: Any, raws: list[Any]) -> Any:
    """The reply of ``step`` from its raw replies (as the driver's ordinary
    path gives it).

    Raises:
        Fallback: a raw reply is an error (NOSCRIPT, NOPERM, ...).
    """
    for raw in raws:
        if isinstance(raw, Exception):
            raise Fallback
    if isinstance(step, Eval):
        return parse_reply(step.script, raws[0])
    if isinstance(step, Command):
        return raws[0]
    out: list[Any] = []
    for part, raw in zip(step.steps, raws, strict=True):
        if isinstance(part, Eval):
            try:
                raw = parse_reply(part.script, raw)
            except Exception as exc:
                if not is_fault(exc):
                    raise
                raw = exc
        out.append(raw)
    return out


def pool_of(client: Any) -> Any:
    """What breaks are counted by: the client's connection pool (or the client)."""
    return getattr(client, "connection_pool", None) or client


class Servers:
    """What ``run_each`` saw of each server: the clients whose server failed
    to answer in time (or at all), until a call of the ordinary path gets an
    answer again (a suspect server gets no second such call while one is in
    flight, and is not waited for once ``enough`` others answered); and how
    many times it found the connection to each pool's server broken (a kept
    connection the server had closed, a call that failed to connect, write
    or read, or no answer in time). Behind a broken connection may be
    another server process (a restart, a failover, an address that now
    leads elsewhere): a Redlock asks such a master who it is again."""

    def __init__(self) -> None:
        self._suspects: weakref.WeakKeyDictionary[Any, None] = weakref.WeakKeyDictionary()
        self._by_pool: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._total = 0

    def breaks(self, client: Any) -> int:
        """How many times the connection to ``client``'s server was found
        broken (counted per connection pool)."""
        return self._by_pool.get(pool_of(client), 0)

    def broken(self) -> int:
        """How many breaks were seen in all, any server: while it does not
        move, no :meth:`breaks` did."""
        return self._total

    def broke(self, client: Any) -> None:
        """The connection to ``client``'s server was found broken."""
        where = pool_of(client)
        self._by_pool[where] = self._by_pool.get(where, 0) + 1
        self._total += 1

    def suspected(self, client: Any) -> bool:
        """Whether ``client``'s server failed to answer ``run_each`` in time
        and has not answered since."""
        return client in self._suspects

    def failed(self, client: Any) -> None:
        """``client``'s server failed to answer (in time): suspect, and its
        connection broken."""
        self._suspects[client] = None
        self.broke(client)

    def answered(self, client: Any) -> None:
        """``client``'s server answered (an error reply too): no longer suspect."""
        self._suspects.pop(client, None)

    def forget(self) -> None:
        """In a forked child: the parent's suspicions (its calls never end here)."""
        self._suspects.clear()


def keep(fan: Any, conn: Any, due: int, most: int) -> bool:
    """Keep ``conn`` in ``fan`` (a pool's reserve for ``run_each``) for
    the next calls on its pool, ``due`` replies still to read on it first (by
    the next call on its server, whichever client of the pool makes it).
    Whether it was kept: not when ``most`` are kept already, nor when too
    many replies are due on it (:data:`MAX_DUE`: a server that stopped
    answering; what was written still runs, in order, if it resumes); one
    not kept is the caller's to drop."""
    if due:
        if len(fan.owed) < most and due <= MAX_DUE:
            fan.owed.append((conn, due))
            return True
    elif len(fan.idle) < most:
        fan.idle.append(conn)
        return True
    return False


class Call(Protocol):
    """A call in flight in a task or on a worker thread of its own (which
    :meth:`LateBook.track` follows; one of ``listen_each``)."""

    def done(self) -> bool: ...

    def add_done_callback(self, fn: Callable[[Any], object], /) -> None: ...

    def cancelled(self) -> bool: ...

    def exception(self) -> BaseException | None: ...

    def result(self) -> Any: ...


def unlisten_late(listen: Call) -> None:
    """(A done callback) stop the listening a call of ``listen_each`` started,
    if it did: the caller gave up waiting for it (cut off, or out of time)."""
    if not listen.cancelled() and listen.exception() is None:
        stop = listen.result()
        if stop is not None:
            stop()


#: What :meth:`LateBook.queue` did with a step: dropped (too many wait),
#: queued behind calls in flight, or queued with none to wait for.
Queued = Literal["dropped", "behind", "ready"]


class LateBook:
    """The calls of ``run_each`` in flight on each client (on a worker thread
    or in a task of its own), and the steps ``send_late`` queued for each
    client, each with the time (``time.monotonic()``) after which it is
    dropped and the calls it waits for: every call in flight on that client
    when it was queued (any of them may be the one it undoes), until each
    one ended; none started later (a busy server's later calls never hold it
    up). The fan-out records each call before it is handed over
    (:meth:`track`), and sends the steps :meth:`take` gives. ``mutex``
    guards the book (a lock for threads, a null context for one event
    loop)."""

    def __init__(self, mutex: Callable[[], contextlib.AbstractContextManager[Any]]) -> None:
        self._make_mutex = mutex
        self.mutex = mutex()
        self._calls: weakref.WeakKeyDictionary[Any, list[Call]] = weakref.WeakKeyDictionary()
        self._late: weakref.WeakKeyDictionary[Any, list[tuple[Late, float, list[Call]]]] = (
            weakref.WeakKeyDictionary()
        )

    def track(self, client: Any, call: Call, deliver: Callable[[Any], None]) -> None:
        """``call`` on ``client`` is (about to be) in flight; once it is done,
        it is forgotten, no step waits for it, and ``deliver(client)`` sends
        the steps that waited for it. The done callback holds ``client`` by a
        weak reference: a done call keeps its callbacks, and its exception's
        traceback the frames that held the client; kept in the book by the
        client, either would keep the client, its pool and connections, for
        good."""
        with self.mutex:
            self._calls.setdefault(client, []).append(call)
        call.add_done_callback(functools.partial(self._done, weakref.ref(client), deliver))

    def _done(self, ref: weakref.ref[Any], deliver: Callable[[Any], None], call: Call) -> None:
        client = ref()
        if client is None:
            return
        with self.mutex:
            calls = self._calls.get(client)
            if calls is not None:
                calls[:] = [c for c in calls if c is not call and not c.done()]
                if not calls:
                    del self._calls[client]
            for _, _, behind in self._late.get(client, ()):
                behind[:] = [c for c in behind if c is not call and not c.done()]
        deliver(client)

    def busy(self, client: Any) -> bool:
        """Whether a call on ``client`` is still in flight."""
        return bool(self.in_flight(client))

    def in_flight(self, client: Any) -> list[Call]:
        """The calls on ``client`` still in flight."""
        with self.mutex:
            return [call for call in self._calls.get(client, ()) if not call.done()]

    def queue(self, client: Any, step: Late, until: float) -> Queued:
        """Queue ``step`` for ``client``, behind every call in flight there now."""
        with self.mutex:
            queued = self._late.setdefault(client, [])
            if len(queued) >= MAX_LATE:
                return "dropped"
            behind = [call for call in self._calls.get(client, ()) if not call.done()]
            queued.append((step, until, behind))
            return "behind" if behind else "ready"

    def any_ready(self, client: Any) -> bool:
        """Whether a step queued for ``client`` waits for no call any more."""
        with self.mutex:
            return any(_ready(behind) for _, _, behind in self._late.get(client, ()))

    def take(self, client: Any, now: float) -> list[tuple[Late, float]]:
        """The steps queued for ``client`` that wait for no call any more and
        are still wanted at ``now``, with their ``until``, off the queue (the
        others stay queued, those no longer wanted are dropped)."""
        with self.mutex:
            queued = self._late.pop(client, [])
            ready = [
                (step, until) for step, until, behind in queued if until > now and _ready(behind)
            ]
            rest = [entry for entry in queued if entry[1] > now and not _ready(entry[2])]
            if rest:
                self._late[client] = rest
        return ready

    def pending(self) -> bool:
        """Whether any call is in flight or any step queued, on any client."""
        with self.mutex:
            return bool(self._late) or any(
                not call.done() for calls in self._calls.values() for call in calls
            )

    def forget(self) -> None:
        """In a forked child: the parent's calls never end here (their clients
        would stay busy for good), nor are its steps sent; a new mutex (the
        parent's may have been held)."""
        self.mutex = self._make_mutex()
        self._calls.clear()
        self._late.clear()


def _ready(behind: list[Call]) -> bool:
    """Whether every call a queued step waits for has ended."""
    return all(call.done() for call in behind)


class Dog(Protocol):
    """A watchdog :class:`SharedDogs` shares (either driver's)."""

    def watch(self, lease: Watchable, renew: bool) -> Watch: ...

    def stop_renewing(self, watch: Watch) -> None: ...

    def unwatch(self, watch: Watch) -> None: ...


class Process:
    """The scope of the shared watchdogs of threads (an event loop is the scope of tasks')."""


PROCESS = Process()


class SharedDogs:
    """The watchdogs shared by every lock of a kind: one per renewal function
    (the key), process and scope (``scope()``: the running event loop, or
    ``None`` for the process: :data:`PROCESS`), made by ``make(send)``; and
    the one each lease was given to (a fork, another loop or a new watchdog
    never gets a lease's later calls). ``mutex`` guards both (as
    :class:`LateBook`'s). The watchdogs of a scope that ``ended`` (a closed
    event loop) are dropped as another scope's are made: an idle watchdog
    still refers to its loop (its wake-up does), so the loop, a weak key,
    would otherwise never go."""

    def __init__(
        self,
        make: Callable[[Any], Dog],
        scope: Callable[[], Any],
        mutex: Callable[[], contextlib.AbstractContextManager[Any]],
        ended: Callable[[Any], bool],
    ) -> None:
        self._make, self._scope, self._make_mutex = make, scope, mutex
        self._ended = ended
        self._mutex = mutex()
        self._dogs: weakref.WeakKeyDictionary[Any, dict[Any, tuple[int, Dog]]] = (
            weakref.WeakKeyDictionary()
        )  # per scope and renewal function: (generation, watchdog)
        self._dog_of: weakref.WeakKeyDictionary[Watch, Dog] = weakref.WeakKeyDictionary()

    def watch(self, lease: Watchable, renew: bool, send: Any) -> Watch:
        """Watch ``lease`` with the scope's watchdog for ``send``."""
        here = self._scope()
        scope = PROCESS if here is None else here
        with self._mutex:
            dogs = self._dogs.get(scope)
            if dogs is None:
                self._sweep()
                dogs = self._dogs[scope] = {}
            entry = dogs.get(send)
            if entry is None or entry[0] != _identity.generation():
                entry = dogs[send] = (_identity.generation(), self._make(send))
        watch = entry[1].watch(lease, renew)
        with self._mutex:
            self._dog_of[watch] = entry[1]
        return watch

    def _sweep(self) -> None:
        """Drop the watchdogs of the scopes that ended, and their watches'
        entries (each holds its lease, so its weak key would never go).
        Called with the mutex held."""
        gone: list[Dog] = []
        for scope in [key for key in self._dogs if key is not PROCESS and self._ended(key)]:
            gone += [dog for _, dog in self._dogs.pop(scope).values()]
        if gone:
            for watch in [watch for watch, dog in self._dog_of.items() if dog in gone]:
                del self._dog_of[watch]

    def stop_renewing(self, watch: Watch) -> None:
        """Stop renewing a lease watched by :meth:`watch`."""
        with self._mutex:
            dog = self._dog_of.get(watch)
        if dog is not None:
            dog.stop_renewing(watch)

    def unwatch(self, watch: Watch) -> None:
        """Stop watching a lease watched by :meth:`watch`."""
        with self._mutex:
            dog = self._dog_of.pop(watch, None)
        if dog is not None:
            dog.unwatch(watch)

    def forget(self) -> None:
        """In a forked child: forget the parent's watchdogs (their threads are
        not here, a mutex of theirs may be held) and its mutex."""
        self._mutex = self._make_mutex()
        self._dogs.clear()
        self._dog_of.clear()
