"""Lua scripts, one ``.lua`` file per operation, loaded once as package data.

Each file starts with its contract (KEYS, ARGV with units, reply shapes). Every
script replies ``{status, value}`` with ``status`` a :class:`tenure._protocol.Status`.

Helpers several scripts need (the fence rule, the server clock) live once in
``_common.lua``: a script's line ``--@include _common.lua`` is replaced by that
file when the script is loaded, and the SHA-1 is that of the result. Any other
helper file (a name starting with ``_``) is included the same way, e.g.
``--@include _rwlock.lua`` for the read-write lock's scripts.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files


@dataclass(frozen=True, slots=True)
class ScriptSpec:
    """One Lua script: its file name (without ``.lua``), source and SHA-1."""

    name: str
    source: bytes
    sha1: str


INCLUDE = b"--@include _common.lua\n"

_INCLUDE_LINE = re.compile(rb"^--@include (_[A-Za-z0-9_]+\.lua)\n", re.MULTILINE)


def _read(name: str) -> bytes:
    return files(__package__).joinpath(name).read_bytes()


def expand(source: bytes, read: Callable[[str], bytes]) -> bytes:
    """``source`` with each line ``--@include _<helper>.lua`` replaced by that
    file, as ``read(file name)`` gives it (helpers include nothing themselves)."""
    return _INCLUDE_LINE.sub(lambda m: read(m.group(1).decode()), source)


def _load(name: str) -> ScriptSpec:
    source = expand(_read(f"{name}.lua"), _read)
    return ScriptSpec(name, source, hashlib.sha1(source).hexdigest())


LOCK_ACQUIRE = _load("lock_acquire")
LOCK_RELEASE = _load("lock_release")
LOCK_EXTEND = _load("lock_extend")
LOCK_INSPECT = _load("lock_inspect")
RLOCK_ACQUIRE = _load("rlock_acquire")
RLOCK_RELEASE = _load("rlock_release")
RLOCK_EXTEND = _load("rlock_extend")
RLOCK_INSPECT = _load("rlock_inspect")
RWLOCK_ACQUIRE = _load("rwlock_acquire")
RWLOCK_RELEASE = _load("rwlock_release")
RWLOCK_EXTEND = _load("rwlock_extend")
RWLOCK_INSPECT = _load("rwlock_inspect")
FENCED_SET = _load("fenced_set")

ALL = (
    LOCK_ACQUIRE,
    LOCK_RELEASE,
    LOCK_EXTEND,
    LOCK_INSPECT,
    RLOCK_ACQUIRE,
    RLOCK_RELEASE,
    RLOCK_EXTEND,
    RLOCK_INSPECT,
    RWLOCK_ACQUIRE,
    RWLOCK_RELEASE,
    RWLOCK_EXTEND,
    RWLOCK_INSPECT,
    FENCED_SET,
)
