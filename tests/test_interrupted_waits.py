"""An interrupt (a signal handler's exception) in a sync wait leaves no lock
held: every other waiter of the same channel, latch or event still gets
through.

Python runs a signal handler as a call to C code returns; the interrupts here
are placed there by a profile function (which sees each such return), at each
return in turn of the wait, one per acquire."""

from __future__ import annotations

import contextlib
import gc
import linecache
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest
import redis

from tenure import CountDownLatch, Lock
from tenure._drivers import _sync


class _Alarm(Exception):
    """An ordinary exception class raised by a signal handler (an alarm's)."""


_STYLES: dict[str, type[BaseException]] = {"keyboard": KeyboardInterrupt, "exception": _Alarm}

#: The lines of the driver's ``_perform`` that wait (for a wake, a channel's
#: confirmation), and those that wait for a channel's confirmation (regular
#: expressions).
WAITS = r"\bwait_(set|wake|event)\("
READY = r"\bwait_set\(ch\.ready\b"
#: The line of ``_perform`` that waits for the wake (the hub's ``wait_wake``).
WAKE = r"\bhub\.wait_wake\("

#: How long a thread may take before the test calls it stuck, seconds.
STUCK = 10.0


@contextlib.contextmanager
def _profiled(profile: Callable[..., None]) -> Iterator[None]:
    """Run the block with ``profile`` as this thread's profile function, and the
    cyclic garbage collector off: a collection run inside the block would
    call finalizers (``__del__`` of garbage from earlier tests) in the frames
    the profile function watches, where the interrupt it raises is printed
    and dropped by Python, not passed to the call under test."""
    collecting = gc.isenabled()
    gc.disable()
    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(None)
        if collecting:
            gc.enable()


def _in_wait(frame: FrameType | None, marker: str) -> bool:
    """Whether ``frame`` runs (inside) the driver's ``_perform`` at a line
    that ``marker`` (a regular expression) matches."""
    while frame is not None:
        if frame.f_code is _sync._perform.__code__:
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
            return re.search(marker, line) is not None
        frame = frame.f_back
    return False


def _interrupt_at(
    window: int, marker: str, error: type[BaseException]
) -> tuple[Callable[..., None], list[int]]:
    """A profile function that raises ``error`` as the ``window``-th call to C
    code returns, of those made on ``_perform``'s line with ``marker``; and a
    list that is non-empty once it raised."""
    returns: list[int] = []
    fired: list[int] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "c_return" or fired or not _in_wait(frame, marker):
            return
        returns.append(1)
        if len(returns) == window:
            fired.append(1)
            raise error

    return profile, fired


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``call`` in a daemon thread (so a hang can't hang the test): the
    thread, and a list that gets its result or exception."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _joined(thread: threading.Thread, what: str) -> None:
    thread.join(STUCK)
    assert not thread.is_alive(), f"{what} is stuck (a lock left held by the interrupt?)"


def _wait_until_waiting(thread: threading.Thread, out: list[Any] | None = None) -> None:
    """Until ``thread`` waits in the driver (for its channel or a wake);
    ``out``: what its call returned or raised, shown if it ended first."""
    deadline = time.monotonic() + STUCK
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident or 0)
        if _in_wait(frame, WAITS):
            return
        if not thread.is_alive():
            raise AssertionError(f"the second waiter ended without waiting: {out}")
        time.sleep(0.01)
    raise AssertionError("the second waiter never waited")


def _interrupted(
    call: Callable[[], Any], window: int, marker: str, error: type[BaseException]
) -> bool:
    """Run ``call`` in a thread, interrupted at ``window`` (see
    :func:`_interrupt_at`); whether the interrupt fired (and reached the caller)."""
    profile, fired = _interrupt_at(window, marker, error)

    def interrupted() -> Any:
        with _profiled(profile):
            return call()

    thread, out = _in_thread(interrupted)
    _joined(thread, "the interrupted call")
    if fired:
        assert len(out) == 1 and isinstance(out[0], error), out
    return bool(fired)


def _each_window(check: Callable[[int], bool], most: int = 40) -> int:
    """Run ``check(window)`` for windows 1, 2, ... until two in a row did not
    fire (past the wait's last call to C code), at most ``most``; how many fired."""
    fired = misses = 0
    window = 0
    while misses < 2 and window < most:
        window += 1
        if check(window):
            fired, misses = fired + 1, 0
        else:
            misses += 1
    return fired


@pytest.mark.parametrize("style", sorted(_STYLES))
def test_an_interrupted_wait_for_the_channel_strands_no_other_waiter(
    r: redis.Redis, style: str
) -> None:
    """A contended acquire interrupted as any call of its wait for the wake
    channel's confirmation returns: the next contender of the lock (the same
    process's, on the same channel) gets it once it is released, and the
    interrupted acquire holds nothing. Before, an interrupt as
    ``threading.Event.wait`` entered its condition left the condition's lock
    held: every later waiter, and the hub's reader, blocked on it for good."""
    error = _STYLES[style]

    def check(window: int) -> bool:
        name = f"wait-{style}-{window}"
        holder = Lock(r, name, ttl=30).acquire()
        assert holder is not None
        fired = _interrupted(
            lambda: Lock(r, name, ttl=30).acquire(timeout=0.5), window, READY, error
        )
        second, got = _in_thread(lambda: Lock(r, name, ttl=30).acquire(timeout=STUCK / 2))
        _wait_until_waiting(second)
        holder.release()
        _joined(second, "the next contender")
        assert len(got) == 1 and got[0] is not None and not isinstance(got[0], BaseException), got
        assert Lock(r, name).locked()
        got[0].release()
        assert not Lock(r, name).locked()  # (the interrupted acquire holds nothing)
        return fired

    assert _each_window(check) >= 1


def _until_waiting_or_done(thread: threading.Thread) -> None:
    """Until ``thread`` waits in the driver, or has ended."""
    deadline = time.monotonic() + STUCK
    while thread.is_alive() and time.monotonic() < deadline:
        if _in_wait(sys._current_frames().get(thread.ident or 0), WAITS):
            return
        time.sleep(0.002)


@pytest.mark.parametrize("style", sorted(_STYLES))
def test_an_interrupted_leading_wait_strands_no_other_waiter(
    r: redis.Redis, style: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A contended acquire whose thread reads the hub's connection itself (it
    leads: see ``_Hub.wait_wake``), interrupted as any call of its wait for
    the wake returns, before or while it reads and routes the hand-off: the
    lock still reaches the next contender of the process, the hub still
    routes its wake, and the interrupted acquire holds nothing."""
    error = _STYLES[style]
    leads: list[int] = []
    lead = _sync._Hub._lead

    def counted(self: Any, *args: Any) -> Any:
        leads.append(1)
        return lead(self, *args)

    monkeypatch.setattr(_sync._Hub, "_lead", counted)

    def check(window: int) -> bool:
        name = f"lead-{style}-{window}"
        holder = Lock(r, name, ttl=30).acquire()
        assert holder is not None
        # a plain wait first: once its wake is routed the reader rests, and
        # the next wait of the process leads
        warm, warmed = _in_thread(lambda: Lock(r, name, ttl=30).acquire(timeout=STUCK / 2))
        _wait_until_waiting(warm, warmed)
        holder.release()
        _joined(warm, "the first contender")
        assert len(warmed) == 1 and warmed[0] is not None, warmed
        profile, fired = _interrupt_at(window, WAKE, error)

        def interrupted() -> Any:
            with _profiled(profile):
                return Lock(r, name, ttl=30).acquire(timeout=STUCK / 2)

        thread, out = _in_thread(interrupted)
        _until_waiting_or_done(thread)
        warmed[0].release()
        _joined(thread, "the interrupted acquire")
        assert len(out) == 1, out
        if fired:
            assert isinstance(out[0], error), out
        else:
            assert out[0] is not None and not isinstance(out[0], BaseException), out
            out[0].release()
        second, got = _in_thread(lambda: Lock(r, name, ttl=30).acquire(timeout=STUCK / 2))
        _joined(second, "the next contender")
        assert len(got) == 1 and got[0] is not None and not isinstance(got[0], BaseException), got
        third, again = _in_thread(lambda: Lock(r, name, ttl=30).acquire(timeout=STUCK / 2))
        _wait_until_waiting(third, again)
        got[0].release()
        _joined(third, "a contender after it")
        assert len(again) == 1 and again[0] is not None, again
        again[0].release()
        assert not Lock(r, name).locked()  # (the interrupted acquire holds nothing)
        return bool(fired)

    assert _each_window(check, most=150) >= 1
    assert leads, "no wait led"


@pytest.mark.parametrize("style", sorted(_STYLES))
def test_an_interrupted_latch_wait_strands_no_other_waiter(r: redis.Redis, style: str) -> None:
    """A latch wait interrupted as any call of its wait for the channel's
    confirmation returns: another wait on the latch still returns once it
    opens. Before, the first interrupt left the channel event's lock held."""
    error = _STYLES[style]

    def check(window: int) -> bool:
        latch = CountDownLatch(r, f"wait-{style}-{window}")
        assert latch.try_set_count(1)
        fired = _interrupted(lambda: latch.wait(timeout=0.5), window, READY, error)
        second, opened = _in_thread(lambda: latch.wait(timeout=STUCK / 2))
        _wait_until_waiting(second)
        assert latch.count_down() == 0
        _joined(second, "the other latch wait")
        assert opened == [True]
        return fired

    assert _each_window(check) >= 1


@pytest.mark.parametrize("style", sorted(_STYLES))
@pytest.mark.parametrize("method", ["wait", "set"])
def test_an_interrupted_event_call_leaves_it_working(style: str, method: str) -> None:
    """The driver's event (a lease's ``lost``, a channel's confirmation, a
    listener's wake) interrupted as any call of ``wait`` or ``set`` returns:
    other threads still wait on it, set and clear it, and a ``set`` wakes
    its waiter."""
    error = _STYLES[style]
    code = getattr(_sync.SafeEvent, method).__code__

    def check(window: int) -> bool:
        event = _sync.new_event()
        assert isinstance(event, threading.Event)
        returns: list[int] = []
        fired: list[int] = []

        def profile(frame: FrameType, kind: str, arg: Any) -> None:
            inside: FrameType | None = frame
            while inside is not None and inside.f_code is not code:
                inside = inside.f_back
            if kind != "c_return" or fired or inside is None:
                return
            returns.append(1)
            if len(returns) == window:
                fired.append(1)
                raise error

        def interrupted() -> None:
            with _profiled(profile), contextlib.suppress(error):
                getattr(event, method)(*((0.05,) if method == "wait" else ()))

        first, _ = _in_thread(interrupted)
        _joined(first, "the interrupted call")
        event.clear()
        waiter, woken = _in_thread(lambda: event.wait(STUCK / 2))
        time.sleep(0.02)
        setter, _ = _in_thread(event.set)
        _joined(setter, "set")
        _joined(waiter, "wait")
        assert woken == [True]
        return bool(fired)

    assert _each_window(check) >= 1


def _in_take(frame: FrameType | None) -> bool:
    """Whether ``frame`` is the quick path's ``_take``, or a call it made (of a
    function it names: not a finalizer that happened to run in it)."""
    take = _sync._take.__code__
    return frame is not None and (
        frame.f_code is take
        or (
            frame.f_back is not None
            and frame.f_back.f_code is take
            and frame.f_code.co_name in take.co_names
        )
    )


@pytest.mark.parametrize("style", sorted(_STYLES))
def test_an_interrupt_waiting_for_a_quick_connection_strands_no_other_call(
    server: Any, style: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script call that waits for a connection of the quick path (all it
    may keep are busy), interrupted as any call of its wait returns: a later
    call that waits for one still gets it (or, after its patience, takes the
    ordinary path). Before, an interrupt as the wait entered its
    ``threading.Condition`` left the condition's lock held: every later
    call that had to wait blocked on it for good."""
    error = _STYLES[style]
    monkeypatch.setattr(_sync.reserve, "QUICK_PATIENCE", 0.25)

    def check(window: int) -> bool:
        client = redis.Redis.from_url(server.url, max_connections=4)  # (the quick path keeps 1)
        pinned, done = threading.Event(), threading.Event()

        def pin() -> None:  # the quick path's one connection, kept busy
            with _sync.one_connection(client):
                lease = Lock(client, f"pin-{style}-{window}").acquire()
                assert lease is not None
                pinned.set()
                done.wait(STUCK)
            lease.release()

        holder, _ = _in_thread(pin)
        assert pinned.wait(STUCK)
        returns: list[int] = []
        fired: list[int] = []

        def profile(frame: FrameType, kind: str, arg: Any) -> None:
            if kind != "c_return" or fired or not _in_take(frame):
                return
            returns.append(1)
            if len(returns) == window:
                fired.append(1)
                raise error

        def interrupted() -> Any:
            with _profiled(profile):
                return Lock(client, f"first-{style}-{window}").acquire(blocking=False)

        first, out = _in_thread(interrupted)
        _joined(first, "the interrupted call")
        if fired:
            assert isinstance(out[0], error), out
        elif out[0] is not None:
            out[0].release()
        second, got = _in_thread(lambda: Lock(client, f"second-{style}-{window}").acquire())
        deadline = time.monotonic() + STUCK
        while time.monotonic() < deadline:  # until it waits for the connection
            frame = sys._current_frames().get(second.ident or 0)
            while frame is not None and frame.f_code is not _sync._take.__code__:
                frame = frame.f_back
            if frame is not None or not second.is_alive():
                break
            time.sleep(0.005)
        done.set()
        _joined(holder, "the call holding the connection")
        _joined(second, "the next call waiting for a connection")
        assert len(got) == 1 and got[0] is not None and not isinstance(got[0], BaseException), got
        got[0].release()
        client.close()
        return bool(fired)

    assert _each_window(check) >= 1


@pytest.mark.parametrize("style", sorted(_STYLES))
def test_a_set_cut_short_still_wakes_the_waiting_threads(style: str) -> None:
    """A ``set`` of the driver's event interrupted as any of its calls returns
    (before it woke every waiter): threads already waiting, without a
    timeout, still return within ``EVENT_RECHECK``."""
    error = _STYLES[style]
    code = _sync.SafeEvent.set.__code__

    def check(window: int) -> bool:
        event = _sync.new_event()
        waiters = [_in_thread(event.wait) for _ in range(2)]
        while len(event._waiters) < 2:  # type: ignore[attr-defined]
            time.sleep(0.005)
        returns: list[int] = []
        fired: list[int] = []

        def profile(frame: FrameType, kind: str, arg: Any) -> None:
            if kind != "c_return" or fired or frame.f_code is not code:
                return
            returns.append(1)
            if len(returns) == window:
                fired.append(1)
                raise error

        def interrupted() -> None:
            with _profiled(profile), contextlib.suppress(error):
                event.set()

        setter, _ = _in_thread(interrupted)
        _joined(setter, "the interrupted set")
        for thread, woken in waiters:
            thread.join(_sync.EVENT_RECHECK + 2)
            assert not thread.is_alive(), "a waiter missed the set"
            assert woken == [True]
        return bool(fired)

    assert _each_window(check) >= 1
