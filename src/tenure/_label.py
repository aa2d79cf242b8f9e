"""Holder labels: who holds a lease, in words an operator can read.

A label names the host, the process and the program of an owner, for example
``web-3 pid 4711 (celery worker)``. It identifies, it does not authorise: the
owner token stays the only proof of ownership. A label never holds a secret a
program was given on its command line: only the program's name and its first
argument that is a plain word are kept.
"""

from __future__ import annotations

import os
import re
import socket
import sys

#: The longest label kept, in characters; a longer one is cut.
MAX_LABEL = 96

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,31}")


def program_name(argv: list[str] | None = None) -> str:
    """The program's name from ``argv`` (default :data:`sys.argv`): its base
    name and its first argument when that is a plain word (``celery worker``),
    for ``python -m mod`` the module; ``"python"`` when nothing is known."""
    args = list(sys.argv if argv is None else argv)
    if not args or not args[0]:
        return "python"
    name = os.path.basename(args[0])
    if name == "-c":
        return "python -c"
    if name == "__main__.py":
        name = os.path.basename(os.path.dirname(args[0])) or "python"
    rest = args[1:]
    if rest and _WORD.fullmatch(rest[0]):
        return f"{name} {rest[0]}"
    return name


def default_label() -> str:
    """``<host> pid <pid> (<program>)``: the label of this process's owners
    (computed at each call, so a forked child shows its own pid)."""
    return clean_label(f"{socket.gethostname()} pid {os.getpid()} ({program_name()})")


def clean_label(label: str) -> str:
    """``label`` with control characters replaced by spaces and cut to
    :data:`MAX_LABEL` characters.

    Raises:
        TypeError: ``label`` is not a ``str``.
    """
    if not isinstance(label, str):
        raise TypeError(f"a holder label is a str, not {type(label).__name__}: {label!r}")
    text = "".join(" " if not ch.isprintable() else ch for ch in label).strip()
    return text[:MAX_LABEL]
