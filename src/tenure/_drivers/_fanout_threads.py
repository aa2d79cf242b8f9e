"""The worker threads of the synchronous fan-out (:mod:`._fanout_sync`): the
calls of its ordinary path and of its clean-ups, each on a thread of its own
(an idle one reused), and the handle the calling thread reads and waits on
without entering a lock but by ``with``."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Generic

from ._sync import SafeEvent, T, exiting, start_thread

__all__ = ["Call", "Workers", "WORKER_IDLE"]


class Call(Generic[T]):
    """A call handed to a worker thread (what ``concurrent.futures.Future``
    is to an executor), which the calling thread reads and waits for without
    entering a lock but by ``with``: ``Future`` guards its state with a
    ``Condition`` that Python code enters by calling its lock's acquire, and
    a signal handler that raises as that call returns leaves the lock held
    for good (the worker then blocks as it sets the result, and every later
    call on that server waits behind it). Waiting is on a
    :class:`~._sync.SafeEvent`."""

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
    """Threads that run calls for :func:`run_each` and :func:`listen_each`: an
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
                start_thread(self._work, "tenure-parallel", inbox)
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
