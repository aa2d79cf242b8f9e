"""How the fan-out's calls run in the synchronous flavour (written by hand
in both flavours, with the same names: see ``_async/calls.py``): a call of
the ordinary path runs on a worker thread of its own (:func:`start`, an idle
one reused), with the handle the calling thread reads and waits on without
entering a lock but by ``with`` (:class:`Call`); a round of the quick path
writes to each socket (:func:`write`), then reads the replies in the
calling thread as they come, one ``poll`` over the sockets
(:func:`collect`)."""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import select
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic

from .. import _internals
from .._fanout_shared import Round, count, is_fault
from .._runtime_sync import SafeEvent, exiting, spawn
from .state import T


class Call(Generic[T]):
    """A call handed to a worker thread (what ``concurrent.futures.Future``
    is to an executor), which the calling thread reads and waits for without
    entering a lock but by ``with``: ``Future`` guards its state with a
    ``Condition`` that Python code enters by calling its lock's acquire, and
    a signal handler that raises as that call returns leaves the lock held
    for good (the worker then blocks as it sets the result, and every later
    call on that server waits behind it). Waiting is on a
    :class:`~.._runtime_sync.SafeEvent`."""

    __slots__ = ("_callbacks", "_done", "_error", "_mutex", "_result", "_state")

    def __init__(self) -> None:
        self._state = "pending"  # then "running" and "done", or "cancelled"
        self._result: T | None = None
        self._error: BaseException | None = None
        self._done = SafeEvent()
        self._callbacks: list[Callable[[Call[T]], object]] = []
        self._mutex = threading.Lock()  # (entered only by ``with``)

    def start(self) -> bool:
        """On the worker: whether to run the call (not cancelled); it is running."""
        with self._mutex:
            if self._state != "pending":
                return False
            self._state = "running"
            return True

    def cancel(self) -> bool:
        """Cancel the call if it has not started: whether it never will run."""
        with self._mutex:
            if self._state != "pending":
                return self._state == "cancelled"
            self._state = "cancelled"
        self._finish()
        return True

    def end(self, result: T | None, error: BaseException | None) -> None:
        """On the worker: the call returned ``result`` or raised ``error``."""
        with self._mutex:
            self._result, self._error, self._state = result, error, "done"
        self._finish()

    def _finish(self) -> None:
        self._done.set()
        with self._mutex:
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            with contextlib.suppress(Exception):
                callback(self)

    def add_done_callback(self, callback: Callable[[Call[T]], object]) -> None:
        """Call ``callback`` with the call once it is done or cancelled (at once if it is)."""
        with self._mutex:
            if self._state in ("pending", "running"):
                self._callbacks.append(callback)
                return
        with contextlib.suppress(Exception):
            callback(self)

    def done(self) -> bool:
        """Whether it returned, raised or was cancelled."""
        return self._state in ("done", "cancelled")

    def cancelled(self) -> bool:
        return self._state == "cancelled"

    def exception(self) -> BaseException | None:
        """(Done) what it raised, or ``None``."""
        return self._error

    def result(self) -> T:
        """(Done, not raised) what it returned."""
        return self._result  # type: ignore[return-value]

    def wait(self, timeout: float) -> bool:
        return self._done.wait(timeout)


class Workers:
    """Threads that run the fan-out's calls (``run_each``'s, ``listen_each``'s): an
    idle one is reused, else a new one starts, so that a call stuck on a paused
    server (until its socket timeout, if ever) never holds up the next ones. A
    thread idle for :data:`WORKER_IDLE` seconds ends."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None] | None]] = []

    def submit(
        self,
        fn: Callable[[], T],
        before: Callable[[Call[T]], object] | None = None,
    ) -> Call[T]:
        """Run ``fn`` on a worker thread: its future. ``before``, if given, is
        called with the future before ``fn`` is handed to a thread, so that
        the caller knows of every call that may run, whatever interrupts this
        one (a signal handler may raise as any call returns). Cut off, the
        call is cancelled if it has not started (it never will)."""
        future: Call[T] = Call()

        def call() -> None:
            if not future.start():
                return
            try:
                result = fn()
            except BaseException as exc:
                future.end(None, exc)
            else:
                future.end(result, None)

        try:
            if before is not None:
                before(future)
            with self._mutex:
                inbox = self._idle.pop() if self._idle else None
            if inbox is None:
                inbox = queue.SimpleQueue()
                inbox.put(call)  # (before the thread starts: it never waits for one lost)
                spawn(self._work, "tenure-parallel", inbox)
            else:
                inbox.put(call)
        except BaseException:
            # (a thread taken off the idle list whose call never came ends
            # after a second idle wait; one that ran it goes back to the list)
            future.cancel()
            raise
        return future

    def forget(self) -> None:
        """In a forked child: drop the parent's idle threads (they do not exist
        here; a call handed to one would never run) and a mutex one may have held."""
        self._mutex = threading.Lock()
        self._idle = []

    def _work(self, inbox: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        taken = False  # taken off the idle list, no job seen since
        while not exiting():
            try:
                job = inbox.get(timeout=WORKER_IDLE)
            except queue.Empty:
                with self._mutex:
                    if inbox in self._idle:
                        self._idle.remove(inbox)
                        return
                if taken:  # its job never came: the submit was cut off
                    return
                taken = True
                continue  # handed a job just now: take it
            taken = False
            if job is None:
                return
            job()
            job = None  # (its closure would keep its client alive while idle)
            with self._mutex:
                self._idle.append(inbox)


#: Seconds an idle worker thread of :func:`run_each` waits for work before it ends.
WORKER_IDLE = 30.0


_workers = Workers()
os.register_at_fork(after_in_child=_workers.forget)


def start(
    fn: Callable[..., T], *args: Any, before: Callable[[Call[T]], object] | None = None
) -> Call[T]:
    """Run ``fn(*args)`` on a worker thread (see :meth:`Workers.submit`, and
    ``before`` there)."""
    return _workers.submit(functools.partial(fn, *args), before)


def settle(fn: Callable[..., None], *args: Any) -> None:
    """Run ``fn(*args)``, a clean-up nobody waits for (closing a connection):
    now, in the calling thread (a failure of the library or the socket is
    ignored; an interrupt, of any class, is the caller's)."""
    try:
        fn(*args)
    except Exception as exc:
        if not is_fault(exc):
            raise


def wait_calls(calls: Iterable[Call[Any]], timeout: float) -> bool:
    """Wait until every one of ``calls`` is done, for at most ``timeout``
    seconds; whether they all are."""
    deadline = time.monotonic() + timeout
    for call in calls:
        left = deadline - time.monotonic()
        if left <= 0 or not call.wait(left):
            return False
    return True


def abandon(call: Call[Any]) -> None:
    """A call the caller no longer waits for: left to finish on its worker
    thread, its result dropped (a task, in the asyncio flavour, is cancelled)."""


def within(seconds: float) -> contextlib.nullcontext[None]:
    """Nothing: a call here is bounded by its socket timeouts (the asyncio
    flavour's is cut off after ``seconds``)."""
    return contextlib.nullcontext()


def write(conn: Any, data: list[bytes], deadline: float) -> None:
    """Write ``data`` on ``conn`` (connecting first if it must)."""
    conn.send_packed_command(data)


def sound(conn: Any) -> bool:
    """Whether an idle connection (no reply due on it) is still open: a socket
    with nothing to read (a server that closed it shows as something to read)."""
    if _internals.sock_of(conn) is None:
        return False
    try:
        return not conn.can_read(timeout=0)
    except Exception as exc:
        if not is_fault(exc):
            raise  # an interrupt, of any class, is the caller's
        return False


def collect(
    batch: Round, arrived: Callable[[int, list[Any]], bool]
) -> list[list[Any] | BaseException | None]:
    """Read ``batch`` (see :class:`~.._fanout_shared.Round`) in the calling
    thread: one ``poll`` watches every connection, and a connection is read
    only as far as its replies are here (one whose first replies, due from
    an earlier call, came but not the others never holds up the reading of
    the other servers)."""
    sent = batch.sent
    got: list[list[Any] | BaseException | None] = [None] * len(sent)
    raws: list[list[Any]] = [[] for _ in sent]
    poller = select.poll()
    by_fd: dict[int, int] = {}  # the polled descriptors' entries
    ready: list[int] = []
    for k, (_, conn, _) in enumerate(sent):
        fd = _internals.fileno_of(conn)
        if fd < 0 or fd in by_fd:  # can't be: read at the deadline at the latest
            ready.append(k)
            continue
        by_fd[fd] = k
        poller.register(fd, select.POLLIN)
    for k in list(by_fd.values()):
        # replies of an earlier call may wait in the parser's buffer, not the socket
        i, conn, step = sent[k]
        if batch.need[i] > count(step) and conn.can_read(timeout=0):
            ready.append(k)

    def unwatch(fd: int | None) -> None:
        if fd is not None:
            poller.unregister(fd)
            del by_fd[fd]

    while True:
        for k in ready:
            i, conn, _ = sent[k]
            fd = _internals.fileno_of(conn)
            watched = fd if by_fd.get(fd) == k else None  # (None: not polled)
            fresh = 0  # replies read in this turn
            try:
                while len(raws[k]) < batch.need[i]:
                    if watched is None:  # not polled: wait for each reply, to the deadline
                        if not conn.can_read(timeout=max(0.0, batch.deadline - time.monotonic())):
                            raise TimeoutError("no reply in time")
                    elif fresh and not conn.can_read(timeout=0):
                        break  # the others are not here yet: read the other servers
                    fresh += 1
                    try:
                        raws[k].append(conn.read_response())
                    except batch.errors[i] as exc:
                        raws[k].append(exc)
                    batch.read[i] = len(raws[k])
            except Exception as exc:
                if not is_fault(exc):
                    raise  # (cut off: the caller drops every connection)
                unwatch(watched)
                got[k] = exc
                continue
            if len(raws[k]) >= batch.need[i]:
                unwatch(watched)
                got[k] = raws[k]
                if arrived(k, raws[k]):
                    return got
        if not by_fd:
            return got
        events = poller.poll(max(0.0, batch.deadline - time.monotonic()) * 1000)
        if not events:  # the deadline passed
            for k in by_fd.values():
                got[k] = TimeoutError("no reply in time")
            return got
        ready = [by_fd[fd] for fd, _ in events]
