"""The exec shim of ``tenure run`` on Linux: the command dies with its supervisor.

``tenure run`` starts its command as::

    python -I -S _pdeathsig.py PARENT_PID REPORT_FD LC_CTYPE -- CMD [ARG ...]

and this script, run by its path (``-I -S``: no ``tenure`` import, no site
packages, no ``PYTHON*`` variables; only the standard library), then:

1. asks Linux for SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``);
2. checks that its parent is still ``PARENT_PID`` (the pid of ``tenure run``):
   if ``tenure run`` died before step 1, nothing would send the signal, so the
   shim kills itself instead;
3. undoes what Python's start-up did to the process that the command must not
   inherit: SIGPIPE and SIGXFSZ ignored (put back to their defaults, as
   ``subprocess`` does for its children), SIGINT caught (put back to its default
   unless it was ignored), and ``LC_CTYPE`` set by the C-locale coercion of
   PEP 538 (``LC_CTYPE`` is given as ``-``, unset, or ``=VALUE``);
4. execs ``CMD`` (searched in ``PATH``) in its own place: same pid, same
   parent, same standard streams. The parent-death signal survives the exec.

If ``CMD`` cannot be exec'd, the shim writes the ``errno`` (decimal ASCII) to
the pipe ``REPORT_FD`` (closed on a successful exec, so ``tenure run`` reads an
empty report then) and exits with 127 (not found) or 126. A failing ``prctl``
is reported on stderr and the command still runs, without the guarantee.

The shim runs no thread, which is why this is safe where a ``preexec_fn`` in
``tenure run`` (whose watchdog thread runs) is not. Linux sends the signal when
the *thread* that started the child ends: ``tenure run`` starts it from the
thread that then waits for it to end, so that is when ``tenure run`` dies.
Linux clears the parent-death signal when the command execs a set-user-ID or
set-group-ID program or one with file capabilities (``sudo``, for one): such a
command is not tied to ``tenure run``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

#: prctl(2) option: the signal sent to this process when its parent dies.
PR_SET_PDEATHSIG = 1
#: Exit statuses when the command cannot be exec'd (as a shell's).
EXIT_NOT_FOUND = 127
EXIT_CANNOT_RUN = 126
#: Exit status for a bad command line (the shim is internal to tenure run).
EXIT_USAGE = 2


def _say(message: str) -> None:
    os.write(2, f"tenure run: {message}\n".encode(errors="replace"))


def set_parent_death_signal(signum: int) -> str | None:
    """Ask Linux for ``signum`` when the parent dies; the error's text, or ``None``."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        done = libc.prctl(PR_SET_PDEATHSIG, *(ctypes.c_ulong(a) for a in (signum, 0, 0, 0)))
    except (OSError, AttributeError) as exc:
        return str(exc)
    return None if done == 0 else os.strerror(ctypes.get_errno())


def main(argv: list[str]) -> int:
    """Run the shim on ``argv`` (``sys.argv[1:]``); returns only if the command
    could not be exec'd (its exit status)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    if len(argv) < 5 or argv[3] != "--" or not argv[4]:
        _say("usage: _pdeathsig.py PARENT_PID REPORT_FD LC_CTYPE -- CMD [ARG ...]")
        return EXIT_USAGE
    parent, report, lc_ctype, command = int(argv[0]), int(argv[1]), argv[2], argv[4:]
    os.set_inheritable(report, False)

    problem = set_parent_death_signal(signal.SIGKILL)
    if problem is not None:
        _say(f"{command[0]!r} will not die with tenure run (prctl: {problem})")
    if os.getppid() != parent:  # tenure run died before prctl: nothing would kill us
        os.kill(os.getpid(), signal.SIGKILL)

    for signum in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(signum, signal.SIG_DFL)
    env = dict(os.environ)
    if lc_ctype == "-":
        env.pop("LC_CTYPE", None)
    else:
        env["LC_CTYPE"] = lc_ctype.removeprefix("=")
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        os.write(report, str(exc.errno or 0).encode())
        return EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
