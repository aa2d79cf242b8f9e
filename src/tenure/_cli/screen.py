"""``tenure top``'s screen: the table drawn by rich's ``Live``, and the keys
read from the terminal in cbreak mode (``q`` quits, ``s`` cycles the sort,
``a`` shows or hides the free primitives). Imported only when the table is
shown: rich is an optional dependency (``tenure[embedded]``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import sys
import termios
import time
import tty
from collections.abc import Iterator
from datetime import datetime
from types import FrameType
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .._views import shown as printable
from .._views.live import COLUMNS, SORT_COLUMN, Frame, cells, next_sort
from .live import Watcher, ticks, where


class _Keys:
    """The keys typed on a terminal, one at a time, with the terminal in
    cbreak mode while in the block (Ctrl-C still interrupts)."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd
        self._saved: list[Any] | None = None
        self._pending: list[str] = []  # keys read, not yet given

    def __enter__(self) -> _Keys:
        assert self.fd is not None
        self._saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None and self.fd is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)

    def read(self, timeout: float) -> str | None:
        """The next key typed within ``timeout`` seconds, or ``None`` (also for
        an escape sequence, which is dropped)."""
        if self.fd is None:
            time.sleep(timeout)
            return None
        if self._pending:
            return self._pending.pop(0)
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return None
        data = os.read(self.fd, 64)
        if not data:  # the terminal closed: no more keys
            self.fd = None
            return None
        # What follows an escape is a key's sequence (an arrow; F2 is ESC O Q),
        # none of top's keys: dropped, to the end of what was read with it.
        self._pending = list(data.decode(errors="replace").split("\x1b", 1)[0])
        return self._pending.pop(0) if self._pending else None


def _keys() -> contextlib.AbstractContextManager[_Keys | None]:
    """A reader of the keys when stdin is a terminal, else ``None`` (also when
    there is no stdin at all: ``sys.stdin`` is ``None`` when descriptor 0 is
    closed)."""
    if sys.stdin is not None and sys.stdin.isatty():
        return _Keys(sys.stdin.fileno())
    return contextlib.nullcontext()


def _cut(text: str, most: int) -> str:
    """``text`` cut to ``most`` characters, ending with an ellipsis when cut."""
    return text if len(text) <= most else text[: most - 1] + "…"


class Screen:
    """What ``top`` shows: the last frame read, and the error of the refreshes
    that failed since (the table is kept, dimmed); the sort; whether the free
    ones show."""

    def __init__(self, args: argparse.Namespace, frame: Frame, server: str) -> None:
        self.args = args
        self.server = server
        self.frame = frame
        self.failed: Frame | None = None
        self.sort: str = args.sort
        self.every: bool = args.all

    def update(self, frame: Frame) -> None:
        """Show ``frame``; one that failed keeps the last table, marked stale."""
        if frame.error is None:
            self.frame, self.failed = frame, None
        else:
            self.failed = frame

    def render(self, width: int) -> RenderableType:
        """The screen for a terminal ``width`` columns wide."""
        frame, args = self.frame, self.args
        at = datetime.fromtimestamp(frame.time).strftime("%H:%M:%S")
        rows = frame.shown(self.sort, self.every)
        title = Text.assemble(
            ("tenure top", "bold"),
            f"  {printable(self.server)}  prefix {printable(repr(args.prefix))}",
            f"  pattern {printable(repr(args.pattern))}  {at}",
        )
        parts: list[RenderableType] = [title]
        if self.failed is not None:
            error = printable(self.failed.error or "")
            parts.append(
                Text(
                    f"server unreachable: {error} (retrying; the table is of {at})",
                    style="bold red",
                )
            )
        else:
            hidden = "" if self.every else " (free ones hidden)"
            parts.append(Text(f"{len(rows)} shown of {len(frame.rows)}{hidden}, sort {self.sort}"))
        table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
        sorted_by = SORT_COLUMN[self.sort]
        headers = [f"{c} ▼" if c == sorted_by else c for c in COLUMNS]
        texts = [[printable(c) for c in cells(row)] for row in rows]
        # the holder, last and widest, is cut to what the other columns leave
        widths = [max([len(h), *(len(t[i]) for t in texts)]) for i, h in enumerate(headers)]
        room = max(12, width - sum(widths[:-1]) - 2 * (len(widths) - 1))
        for header in headers:
            table.add_column(header, no_wrap=True)
        for text in texts:
            table.add_row(*(Text(_cut(c, room)) for c in text), style="dim" if self.failed else "")
        parts.append(table)
        if not rows:
            parts.append(Text("no lock held" if not self.every else "no lock found", style="dim"))
        for message in frame.skipped:
            parts.append(Text(f"skipped {printable(message)}", style="yellow"))
        parts.append(Text("q quit  s sort  a all/held", style="dim"))
        return Group(*parts)

    def key(self, key: str) -> bool:
        """Act on ``key``; ``False`` to quit."""
        if key in ("q", "Q"):
            return False
        if key == "s":
            self.sort = next_sort(self.sort)
        elif key == "a":
            self.every = not self.every
        return True


#: The signals that end ``top`` as ``q`` does (the terminal given back as it
#: was: out of cbreak mode and the alternate screen), exiting ``128 + N``.
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _end(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _ended_by_signals() -> Iterator[None]:
    """In the block, :data:`ENDING_SIGNALS` raise ``SystemExit(128 + N)``, so that
    every block around the screen is left (their default ends the process where
    it is, the terminal left unusable); each handler is put back after. A signal
    ignored (``nohup``) or handled by someone else is left as it is."""
    previous = {
        signum: signal.signal(signum, _end)
        for signum in ENDING_SIGNALS
        if signal.getsignal(signum) is signal.SIG_DFL
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """In the block, Ctrl-C and :data:`ENDING_SIGNALS` wait (blocked), and come
    as it ends: the terminal's changes and the undoing of each are set up in
    it, so that an interrupt comes before the first change or after its undoing
    is due (rich's ``Live`` undoes its start only for an ``Exception``: an
    interrupt in its first draw would leave the alternate screen on)."""
    held = {signal.SIGINT, *ENDING_SIGNALS}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def show(watcher: Watcher, frame: Frame, args: argparse.Namespace) -> int:
    """Show ``frame``, then a new one every ``args.interval`` seconds, until
    ``q`` (or ``args.iterations`` refreshes); 0."""
    console = Console(highlight=False)
    screen = Screen(args, frame, where(watcher.url))
    due_times = ticks(args.interval, args.iterations)
    live = Live(
        screen.render(console.width),
        console=console,
        auto_refresh=False,
        screen=console.is_terminal and args.iterations is None,
        redirect_stdout=False,
        redirect_stderr=False,
    )
    with _ended_by_signals(), contextlib.ExitStack() as undo:
        with _signals_held():
            keys = undo.enter_context(_keys())
            undo.callback(live.stop)
            live.start(refresh=True)
        for due in due_times:
            # the keys typed are read before each refresh, even one already due
            # (a refresh slower than the interval: thousands of primitives, a
            # paused server), or q would never be read
            while True:
                left = max(0.0, due - time.monotonic())
                key = keys.read(left) if keys is not None else None
                if keys is None:
                    time.sleep(left)
                if key is None:
                    if time.monotonic() >= due:
                        break
                    continue
                if not screen.key(key):
                    return 0
                live.update(screen.render(console.width), refresh=True)
            screen.update(watcher.read())
            live.update(screen.render(console.width), refresh=True)
    return 0
