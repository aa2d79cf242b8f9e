"""Lua scripts, one ``.lua`` file per operation, loaded once as package data.

Each file starts with its contract (KEYS, ARGV with units, reply shapes). Every
script replies ``{status, value}`` with ``status`` a :class:`tenure._protocol.Status`.

Helpers several scripts need (the fence rule, the server clock) live once in
``_common.lua``: a script's line ``--@include _common.lua`` is replaced by that
file when the script is loaded, and the SHA-1 is that of the result.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib.resources import files


@dataclass(frozen=True, slots=True)
class ScriptSpec:
    """One Lua script: its file name (without ``.lua``), source and SHA-1."""

    name: str
    source: bytes
    sha1: str


INCLUDE = b"--@include _common.lua\n"


def _read(name: str) -> bytes:
    return files(__package__).joinpath(name).read_bytes()


def _load(name: str) -> ScriptSpec:
    source = _read(f"{name}.lua").replace(INCLUDE, _read("_common.lua"))
    return ScriptSpec(name, source, hashlib.sha1(source).hexdigest())


LOCK_ACQUIRE = _load("lock_acquire")
LOCK_RELEASE = _load("lock_release")
LOCK_EXTEND = _load("lock_extend")
LOCK_INSPECT = _load("lock_inspect")
RLOCK_ACQUIRE = _load("rlock_acquire")
RLOCK_RELEASE = _load("rlock_release")
RLOCK_EXTEND = _load("rlock_extend")
RLOCK_INSPECT = _load("rlock_inspect")
FENCED_SET = _load("fenced_set")
FAIR_ACQUIRE = _load("fair_acquire")
FAIR_RELEASE = _load("fair_release")
FAIR_INSPECT = _load("fair_inspect")

ALL = (
    LOCK_ACQUIRE,
    LOCK_RELEASE,
    LOCK_EXTEND,
    LOCK_INSPECT,
    RLOCK_ACQUIRE,
    RLOCK_RELEASE,
    RLOCK_EXTEND,
    RLOCK_INSPECT,
    FENCED_SET,
    FAIR_ACQUIRE,
    FAIR_RELEASE,
    FAIR_INSPECT,
)
