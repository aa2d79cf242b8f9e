"""``tenure run``: hold a lock while a command runs (a distributed ``flock(1)``),
or, with ``--leader``, run a command on one replica at a time (leader election).

The lock is a :class:`tenure.Lock` whose lease the client's watchdog renews
while the command runs (given several masters, a :class:`tenure.Redlock` over
them, renewed on a majority). The command gets the lease's fence and the lock's name
in its environment (``TENURE_FENCE``, ``TENURE_LOCK``; never the owner token).
The main thread starts the command, then watches three things until it ends:
the command's exit, the lease's ``lost`` event, and the signals sent to
``tenure run`` (SIGINT, SIGTERM, SIGHUP), which it forwards to the command.
Only the main thread sends signals to the command and reaps it, so a signal
can never reach a process that reused a reaped command's pid.

A lost lease stops the command: SIGTERM at once, SIGKILL after the grace
period. The lease is released when the command ends, whichever way it ends.

With ``--leader NAME``, every replica runs the same line: each stands as a
candidate of the :class:`tenure.Election` ``NAME`` (in the order they came),
the elected one runs the command with its term in ``TENURE_TERM`` (and
``TENURE_FENCE``), and the next candidate is elected when the command ends
(the term resigned) or the leader's lease ends (its ``tenure run`` killed or
stalled): one command at a time, the next one started within the ttl. Given
several masters, the election is a :class:`tenure.RedlockElection` over them
(some waiting candidate is elected, not the first).

A killed ``tenure run`` (SIGKILL, the OOM killer, a crash) takes its command
with it on Linux, so the command never outlives the lease it ran under into
the next holder's turn: the command is started through the exec shim
:mod:`tenure._pdeathsig`, which asks Linux to SIGKILL it when ``tenure run``
dies and then execs the command in its own place (same pid; one extra Python
start-up, ~20 ms). Only the command itself gets the signal: processes it
started live on unless they die with it (a shell wrapper should ``exec`` its
last command). A command that execs a set-user-ID program (``sudo``) loses the
tie (Linux clears it). Elsewhere than Linux, and where no shim can be run (a
frozen executable), the command is started directly and can outlive a killed
``tenure run`` until it ends by itself, as ``flock(1)``'s does.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import redis
import redis.exceptions

from ._api._sync import (
    Election,
    Leadership,
    Lease,
    Lock,
    Redlock,
    RedlockElection,
    RedlockLeadership,
    RedlockLease,
)
from ._errors import LockLostError, NoQuorumError, NotOwnedError
from ._keys import DEFAULT_PREFIX
from ._label import run_label

#: The signals forwarded to the command.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Seconds between looks at the command while it runs (a lost lease is seen at once).
POLL = 0.05
#: A shell's statuses for a command that was not found / could not be run.
EXIT_NOT_FOUND = 127
EXIT_CANNOT_RUN = 126
#: The exec shim that makes the command die with ``tenure run`` (see :mod:`tenure._pdeathsig`).
SHIM = Path(__file__).with_name("_pdeathsig.py")


def _shim_usable() -> bool:
    """Whether the command can be started through :data:`SHIM`: Linux, and a
    Python that can run a script by its path."""
    frozen = bool(getattr(sys, "frozen", False))
    return sys.platform == "linux" and bool(sys.executable) and not frozen and SHIM.is_file()


def _spawn(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start ``command`` with ``env``, through :data:`SHIM` where it is usable.

    Returns once the command runs (the shim exec'd it). Call from the thread
    that will wait for the command: Linux sends the parent-death signal when
    the thread that started the child ends.

    Raises:
        OSError: the command could not be started (``FileNotFoundError`` when
            it was not found), as ``subprocess.Popen`` raises it.
    """
    if not _shim_usable():
        return subprocess.Popen(command, env=env)
    read_end, write_end = os.pipe()
    lc_ctype = "=" + env["LC_CTYPE"] if "LC_CTYPE" in env else "-"
    shim = [sys.executable, "-I", "-S", str(SHIM), str(os.getpid()), str(write_end), lc_ctype]
    try:
        try:
            process = subprocess.Popen([*shim, "--", *command], env=env, pass_fds=(write_end,))
        finally:
            os.close(write_end)
        report = b""
        while chunk := os.read(read_end, 64):  # until the exec closes the shim's end
            report += chunk
    finally:
        os.close(read_end)
    if report:
        process.wait()  # the shim exits at once
        errno = int(report)
        raise OSError(errno, os.strerror(errno))  # FileNotFoundError for ENOENT
    return process


class _Interrupted(BaseException):
    """A forwarded signal arrived while no command was running (waiting for the lock)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Signals:
    """Handlers for :data:`FORWARDED` while ``tenure run`` works.

    While ``raising`` (waiting for the lock) a signal raises
    :class:`_Interrupted`; afterwards it is queued for the main loop, which
    forwards it to the command. Handlers are only installed on the main thread
    (elsewhere Python does not allow it; signals then keep their handlers).
    The controlling terminal, if any, tells whether Ctrl-C reached the command
    already (see :meth:`reaches_command`).
    """

    def __init__(self) -> None:
        self.raising = True
        self._pending: list[int] = []
        self._old: dict[int, Any] = {}
        self._tty: int | None = None

    def install(self) -> None:
        """Install the handlers (main thread only) and open the controlling terminal."""
        with contextlib.suppress(OSError):
            self._tty = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
        if threading.current_thread() is threading.main_thread():
            for signum in FORWARDED:
                self._old[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        """Put back the handlers :meth:`install` replaced; close the terminal."""
        self.raising = False
        while self._old:
            signum, old = self._old.popitem()
            signal.signal(signum, old)
        if self._tty is not None:
            os.close(self._tty)
            self._tty = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.raising:
            raise _Interrupted(signum)
        self._pending.append(signum)

    def take(self) -> list[int]:
        """The signals received since the last call, oldest first."""
        taken, self._pending = self._pending, []
        return taken

    def reaches_command(self, signum: int) -> bool:
        """Whether the command got ``signum`` already. A SIGINT while we are in the
        foreground of our controlling terminal is taken to come from Ctrl-C, which
        the terminal sends to the whole foreground process group, the command
        included. (So a ``kill -INT`` from elsewhere at that time is not passed
        on; SIGTERM and SIGHUP always are.)"""
        if signum != signal.SIGINT or self._tty is None:
            return False
        try:
            return os.tcgetpgrp(self._tty) == os.getpgrp()
        except OSError:
            return False


#: The longest socket (and connect) timeout of ``tenure run``'s clients:
#: redis-py's own default.
SOCKET_TIMEOUT = 5.0
#: The shortest: a server slower than this to answer is taken for one that
#: does not (a healthy one answers in well under a millisecond).
SHORTEST_SOCKET_TIMEOUT = 0.5


def socket_timeout(ttl: float, wait: float | None) -> float:
    """The socket and connect timeout for ``tenure run``'s clients, bounded by
    the command's own deadlines (a URL's ``socket_timeout`` still wins).

    At most a third of ``ttl``: a renewal that waits longer for a server that
    does not answer leaves no time for another before the lease runs out. At
    most an eighth of ``wait`` (0 for one attempt, ``None`` for no limit): once
    the wait has run out, leaving the queue and the clean-up after it failed
    are up to four calls one after another against a server that does not
    answer (each the quick path's, then the client's own), so a run gives up
    within half its wait after it (2 s for a wait under 4 s) rather than four
    of redis-py's 5 s timeouts after it. At least
    :data:`SHORTEST_SOCKET_TIMEOUT`, at most :data:`SOCKET_TIMEOUT`."""
    longest = min(SOCKET_TIMEOUT, ttl / 3, math.inf if wait is None else wait / 8)
    return max(SHORTEST_SOCKET_TIMEOUT, longest)


def _say(err: TextIO, message: str) -> None:
    print(f"tenure run: {message}", file=err, flush=True)


def _signal_name(signum: int) -> str:
    return signal.Signals(signum).name


def run(
    client: redis.Redis | Sequence[redis.Redis],
    name: str,
    command: Sequence[str],
    *,
    ttl: float,
    blocking: bool = True,
    wait: float | None = None,
    prefix: str = DEFAULT_PREFIX,
    grace: float = 10.0,
    conflict_status: int,
    lost_status: int,
    err: TextIO | None = None,
    leader: bool = False,
) -> int:
    """Take the lock ``name``, run ``command`` while holding it, release it
    (with ``leader``: win the election ``name``, run ``command`` while leading,
    resign).

    Args:
        client: the client on the server that holds the lock, or several
            clients (an odd number, at least 3): a :class:`tenure.Redlock` over
            those independent masters is held instead.
        name: the lock's name.
        command: the program and its arguments (run without a shell).
        ttl: the lease length in seconds; the watchdog renews it every ttl/3.
        blocking: wait for the lock if it is held; with ``False``, one attempt.
        wait: the longest wait in seconds (``None``: without limit).
        prefix: the lock's key prefix.
        grace: seconds between SIGTERM and SIGKILL when the lease is lost.
        conflict_status: the status when the lock was not taken in time.
        lost_status: the status when the lease was lost while the command ran.
        err: where messages go (default ``sys.stderr``).
        leader: stand in the :class:`tenure.Election` ``name`` instead (a
            :class:`tenure.RedlockElection` given several clients); the command
            gets ``TENURE_TERM``.

    Returns:
        The command's exit status (128 + the signal's number if a signal killed
        it), or ``conflict_status`` (the command did not run), or
        ``lost_status``, or 127 / 126 when the command was not found / could not
        be started, or 128 + the signal's number when a signal interrupted the
        wait for the lock.

    Raises:
        InvalidArgument: a bad name, prefix or ttl; clients not an odd number, at
            least 3, of independent masters.
        NoQuorumError: (several clients) fewer than a majority of the masters
            answered while taking the lock.
        redis.exceptions.ConnectionError: the server could not be reached while
            taking the lock.
        redis.exceptions.TimeoutError: the server did not answer in time while
            taking the lock (a stopped server, a cut-off network).
    """
    out = err if err is not None else sys.stderr
    label = run_label(list(command))
    lock: Lock | Redlock | Election | RedlockElection
    what = f"the election {name!r}" if leader else f"the lock {name!r}"
    if isinstance(client, redis.Redis):
        if leader:
            lock = Election(client, name, ttl=ttl, prefix=prefix, label=label)
        else:
            lock = Lock(client, name, ttl=ttl, auto_renew=True, prefix=prefix, label=label)
    elif leader:
        lock = RedlockElection(client, name, ttl=ttl, prefix=prefix, label=label)
    else:
        lock = Redlock(client, name, ttl=ttl, auto_renew=True, prefix=prefix, label=label)
    signals = _Signals()
    try:
        signals.install()
        if isinstance(lock, Election | RedlockElection):
            lease: Lease | RedlockLease | None = lock.campaign(wait if blocking else 0.0)
        else:
            lease = lock.acquire(blocking=blocking, timeout=wait if blocking else None)
        signals.raising = False
        if lease is None:
            if not blocking:
                why = "is led by another candidate" if leader else "is held by another owner"
            elif wait is not None:
                why = f"was not {'won' if leader else 'taken'} within {wait:g}s"
            else:
                why = "was not won" if leader else "was not taken"
            _say(out, f"{what} {why}; {command[0]!r} not run")
            return conflict_status
        return _Supervisor(lease, command, signals, grace, out).run(lost_status)
    except _Interrupted as exc:
        # Raised only while waiting for the lock, or just after it was taken.
        signals.raising = False
        with contextlib.suppress(NotOwnedError, redis.exceptions.RedisError):
            if isinstance(lock, Election | RedlockElection):
                lock.resign()
            else:
                lock.release()
        _say(out, f"{_signal_name(exc.signum)} while waiting for {what}")
        return 128 + exc.signum
    finally:
        signals.restore()


class _Supervisor:
    """Runs the command while the lease is held; then releases the lease."""

    def __init__(
        self,
        lease: Lease | RedlockLease,
        command: Sequence[str],
        signals: _Signals,
        grace: float,
        err: TextIO,
    ) -> None:
        self.lease = lease
        self.command = list(command)
        self.signals = signals
        self.grace = grace
        self.err = err
        self.lost_reported = False

    def run(self, lost_status: int) -> int:
        try:
            status = self._run_command()
        finally:
            self._release()
        return lost_status if self.lost_reported else status

    def _run_command(self) -> int:
        lease = self.lease
        env = dict(os.environ, TENURE_FENCE=str(lease.fence), TENURE_LOCK=lease.name)
        if isinstance(lease, Leadership | RedlockLeadership):
            del env["TENURE_LOCK"]
            env.update(TENURE_TERM=str(lease.term), TENURE_ELECTION=lease.name)
        if not self.command[0]:  # as a shell says it (the shim would take it for its usage)
            _say(self.err, "'': command not found")
            return EXIT_NOT_FOUND
        try:
            process = _spawn(self.command, env)
        except FileNotFoundError:
            _say(self.err, f"{self.command[0]}: command not found")
            return EXIT_NOT_FOUND
        except OSError as exc:
            _say(self.err, f"{self.command[0]}: {exc.strerror or exc}")
            return EXIT_CANNOT_RUN
        kill_at: float | None = None
        while (code := process.poll()) is None:
            for signum in self.signals.take():
                if not self.signals.reaches_command(signum):
                    process.send_signal(signum)
            if kill_at is None:
                if lease.lost.is_set():
                    self._report_lost(f"stopping {self.command[0]!r} (pid {process.pid})")
                    process.terminate()
                    kill_at = time.monotonic() + self.grace
                    continue
                lease.lost.wait(POLL)
            else:
                if time.monotonic() >= kill_at:
                    what = f"{self.command[0]!r} still runs {self.grace:g}s after SIGTERM"
                    _say(self.err, f"{what}: SIGKILL")
                    process.kill()
                    kill_at = float("inf")
                time.sleep(POLL)
        return code if code >= 0 else 128 - code

    def _report_lost(self, then: str) -> None:
        lease = self.lease
        self.lost_reported = True
        if isinstance(lease, Leadership | RedlockLeadership):
            what = f"the leadership of {lease.name!r} (term {lease.term})"
        else:
            what = f"the lock {lease.name!r} (fence {lease.fence})"
        _say(self.err, f"lost {what}: {lease.lost_reason}; {then}")

    def _release(self) -> None:
        """Release the lease; report it lost if the release finds it so."""
        try:
            self.lease.release()
        except LockLostError:
            if not self.lost_reported:
                self._report_lost(f"{self.command[0]!r} ended without it")
        except (redis.exceptions.RedisError, NoQuorumError) as exc:
            # (several masters: too few answered to tell; it ends by its ttl)
            lease = self.lease
            leading = isinstance(lease, Leadership | RedlockLeadership)
            what = "the leadership of" if leading else "the lock"
            _say(
                self.err,
                f"could not release {what} {lease.name!r} ({exc}); "
                f"it expires within {lease.ttl:g}s",
            )
