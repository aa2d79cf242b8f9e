"""Holder labels: who holds a lease, in words an operator can read.

A label names the host, the process and the program of an owner, for example
``web-3 pid 4711 (celery worker)``. It identifies, it does not authorise: the
owner token stays the only proof of ownership. A label never holds a secret a
program was given on its command line: only the program's name and its first
argument that is a plain word are kept.

A label travels inside what a lease stores (no extra key, no extra command):
a lease token is ``<owner id>:<random>`` then :data:`SEPARATOR` and the label
encoded by :func:`encode_label` (a ReadWriteLock's hold id and an RLock's
holder field the same way). The encoding writes only ``A-Z a-z 0-9`` and
``-_.~()@,/=[]+%``: never ``:``, ``|``, ``#``, ``;``, a space or a control
character, the separators the scripts and plans split stored values on, so
an owner's prefix, a waiter member's fields and a semaphore member's ``#``
count read as they did. :func:`split_holder` gives a stored value's bare
part and its label back (``None`` for a value without one: an older tenure's
token, a foreign client's).

This module imports no clock, socket or thread: the plans and the operator's
views decode labels with it.
"""

from __future__ import annotations

import os
import re
import sys
from urllib.parse import quote, unquote

#: The longest label kept, in characters; a longer one is cut.
MAX_LABEL = 96

#: The longest encoded label a token carries, in characters (the encoding of
#: a label of :data:`MAX_LABEL` plain characters fits; one of many escaped
#: characters is cut at a whole character).
MAX_ENCODED = 160

#: What separates a stored value's bare part from its encoded label.
SEPARATOR = ";"

# the characters kept as they are (besides letters, digits and "_.-~"); a
# space is written "+", everything else (a "+" too) as %XX of its UTF-8
_SAFE = "()@,/=[] "
# what a bare part looks like: an owner id, a token, a hold id (lowercase hex)
_BARE = re.compile(r"[0-9a-f]+(?:\.[0-9]+)?(?::[0-9a-f]+)?")
_ENCODED = re.compile(r"[A-Za-z0-9\-_.~()@,/=\[\]+%]*")

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,31}")


def program_name(argv: list[str] | None = None) -> str:
    """The program's name from ``argv`` (default :data:`sys.argv`): its base
    name and its first argument when that is a plain word (``celery worker``),
    for ``python -m mod`` the module; ``"python"`` when nothing is known."""
    args = list(sys.argv if argv is None else argv)
    if not args or not args[0]:
        return "python"
    name = os.path.basename(args[0])
    if name in ("-c", "-"):
        return f"python {name}"  # a program given on the command line or stdin
    if name == "__main__.py":
        name = os.path.basename(os.path.dirname(args[0])) or "python"
    rest = args[1:]
    if rest and _WORD.fullmatch(rest[0]):
        return f"{name} {rest[0]}"
    return name


def command_words(command: list[str], words: int = 3) -> str:
    """A command line in plain words: its program's base name and the first
    ``words - 1`` arguments after it while each is a plain word (``python
    manage.py send_report``); nothing from the first other argument on (an
    option, a URL, a path, a quoted text), where secrets usually are."""
    if not command:
        return ""
    kept = [os.path.basename(command[0]) or command[0]]
    for arg in command[1:words]:
        if not _WORD.fullmatch(arg):
            break
        kept.append(arg)
    return " ".join(kept)


def host_name() -> str:
    """This machine's name (``uname``'s node name; where there is none, the
    ``COMPUTERNAME`` variable), or ``"localhost"``."""
    if hasattr(os, "uname"):
        return os.uname().nodename or "localhost"
    return os.environ.get("COMPUTERNAME") or "localhost"


def run_label(command: list[str]) -> str:
    """The label of ``tenure run``'s lease: ``<host> pid <pid> (tenure run:
    <command in plain words>)``, cut to :data:`MAX_LABEL`."""
    return clean_label(f"{host_name()} pid {os.getpid()} (tenure run: {command_words(command)})")


def default_label() -> str:
    """``<host> pid <pid> (<program>)``: the label of this process's owners
    (computed at each call, so a forked child shows its own pid)."""
    return clean_label(f"{host_name()} pid {os.getpid()} ({program_name()})")


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


def encode_label(label: str) -> str:
    """``label`` (cleaned by :func:`clean_label`) as it travels in a token:
    letters, digits and ``-_.~()@,/=[]`` kept, a space as ``+``, any other
    character as ``%XX`` of its UTF-8; at most :data:`MAX_ENCODED` characters,
    cut at a whole character. ``""`` for an empty label."""
    text = clean_label(label)
    out = quote(text, safe=_SAFE).replace(" ", "+")
    if len(out) <= MAX_ENCODED:
        return out
    parts: list[str] = []
    size = 0
    for ch in text:
        piece = quote(ch, safe=_SAFE).replace(" ", "+")
        if size + len(piece) > MAX_ENCODED:
            break
        parts.append(piece)
        size += len(piece)
    return "".join(parts)


def label_suffix(label: str | None) -> str:
    """What a token (or hold id, or holder field) ends with for ``label``:
    :data:`SEPARATOR` and :func:`encode_label`'s text; ``""`` when ``label``
    is empty (no label). ``None`` is this process's :func:`default_label`.

    Raises:
        TypeError: ``label`` is neither ``None`` nor a ``str``.
    """
    if label is None:
        return default_suffix()
    encoded = encode_label(label)
    return SEPARATOR + encoded if encoded else ""


_default: list[tuple[int, str]] = []


def default_suffix() -> str:
    """:func:`label_suffix` of :func:`default_label`, computed once per process
    (a forked child computes its own: its pid differs)."""
    pid = os.getpid()
    if not _default or _default[0][0] != pid:
        _default[:] = [(pid, label_suffix(default_label()))]
    return _default[0][1]


def split_holder(stored: str) -> tuple[str, str | None]:
    """A stored token, holder field or hold id, split into its bare part and
    its label: ``("<owner>:<random>", "web-3 pid 4711 (celery worker)")``.
    A value that carries no label (an older tenure's, a foreign client's, or
    one whose tail is not an encoded label) is returned whole, with ``None``."""
    bare, sep, encoded = stored.partition(SEPARATOR)
    if not sep or not _BARE.fullmatch(bare) or not _ENCODED.fullmatch(encoded):
        return stored, None
    return bare, decode_label(encoded)


def decode_label(encoded: str) -> str | None:
    """The label :func:`encode_label` wrote as ``encoded`` (cleaned by
    :func:`clean_label`), or ``None`` when it is empty or is no encoded label."""
    if not _ENCODED.fullmatch(encoded):
        return None
    return clean_label(unquote(encoded.replace("+", " "), errors="replace")) or None


def holder_label(stored: str | None) -> str | None:
    """The label a stored token, holder field or hold id carries, or ``None``."""
    return None if not stored else split_holder(stored)[1]


def holder_text(stored: str, label: str | None = None, *, short: bool = False) -> str:
    """A holder for people: ``web-3 pid 4711 (celery worker) [<bare token>]``
    (with ``short``, the label alone), or the stored value as it is when it
    carries no label. ``label``: the holder's label when the caller has it
    apart from ``stored`` (a ReadWriteLock's hold, whose label is its id's)."""
    bare, own = split_holder(stored)
    label = label or own
    if label is None:
        return stored
    return label if short else f"{label} [{bare}]"
