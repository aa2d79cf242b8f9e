"""Lua scripts, one ``.lua`` file per operation, package data built once, on first use.

Each file starts with its contract (KEYS, ARGV with units, reply shapes). Every
script replies ``{status, value}`` with ``status`` a :class:`Status`, or, for
``OK`` with a number, the bare number, and for ``BUSY`` with a number ``n``
(``n >= -1``), the bare ``-2 - n`` (a table costs the server about a
microsecond per call to build and send; ``parse_reply`` reads either). Statuses
are written by name: ``_common.lua``, which every script includes, has a line ``--@status``
that the loader replaces by one local per member of :class:`Status` (``local
OK, BUSY, ... = 1, 2, ...``), so that the scripts and the Python side can't
disagree on a number.

Helpers several scripts need live once in files whose names start with ``_``
(the fence rule and the server clock in ``_common.lua``; an election's record
and log in ``_election.lua``; the semaphore's holders
and queue in ``_semaphore.lua``, a lease's permits in ``_permits.lua``; the
read-write lock's holds in ``_rwlock.lua``); the fence rule as lines a quick
path runs inline, calling no function, in ``_fence_last.lua`` and
``_fence_now.lua``. A script's line ``--@include <file>`` is replaced by that file when the script
is loaded (included files include nothing), and the SHA-1 is that of the result.

Every script includes ``_acl.lua`` and calls its guard (``acl_commands``, or
``acl_denied`` with the channels it may publish to; on a path known to run only
some of its commands after its first write, ``acl_need`` with those) before it
writes anything (see that file): the loader replaces its ``--@acl`` line by the commands the
script may run (:func:`script_commands`; for the read-only ``*_inspect``
scripts only the reading ones), which are also :attr:`ScriptSpec.commands`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING


class Status(IntEnum):
    """The first element of every script reply (a Lua local of the same name in
    every script, see the module; mirrored in each ``.lua`` header)."""

    OK = 1
    BUSY = 2
    OWNED_BY_CALLER = 3
    NOT_OWNED = 4
    WRONG_TYPE = 5
    STALE = 6
    PERMITS_DIFFER = 7
    TOO_MANY = 8
    DENIED = 9


@dataclass(frozen=True, slots=True)
class ScriptSpec:
    """One Lua script: its file name (without ``.lua``), source and SHA-1, the
    Redis commands it may run (upper case, sorted) and whether it may write."""

    name: str
    source: bytes
    sha1: str
    commands: tuple[str, ...] = ()
    writes: bool = True

    if not TYPE_CHECKING:  # (for mypy, no attribute is looked up here)

        def __getattr__(self, attr: str) -> object:
            # Called only for a field never set: a script of the package
            # (:func:`_load`) is built on the first look at one of these.
            if attr not in _BUILT_FIELDS:
                raise AttributeError(attr)
            built = build(self.name, _read)
            for part in _BUILT_FIELDS:
                object.__setattr__(self, part, getattr(built, part))
            return getattr(self, attr)


#: The fields of a :class:`ScriptSpec` that :func:`_load` leaves to its first use.
_BUILT_FIELDS = ("source", "sha1", "commands")


INCLUDE = re.compile(rb"^--@include (_\w+\.lua)\n", re.MULTILINE)
ACL_MARKER = re.compile(rb"^--@acl\n", re.MULTILINE)
STATUS_MARKER = re.compile(rb"^--@status\n", re.MULTILINE)
LATER_MARKER = re.compile(rb"^--@later\n", re.MULTILINE)

#: What ``_common.lua``'s ``--@status`` line becomes: a local per :class:`Status`.
STATUS_LOCALS = (
    f"local {', '.join(s.name for s in Status)} = {', '.join(str(s.value) for s in Status)}\n"
).encode()
CALL = re.compile(rb"redis\.p?call\('([A-Z]+)'")

#: Commands that only read (the others a script runs may write).
READ_COMMANDS = frozenset(
    {"EXISTS", "GET", "HGET", "HGETALL", "HLEN", "HMGET", "MGET", "PTTL", "TIME", "TYPE"}
    | {"ZCARD", "ZCOUNT", "ZRANGE", "ZRANGEBYSCORE", "ZSCORE"}
)


def expand(source: bytes, read: Callable[[str], bytes]) -> bytes:
    """Replace each ``--@include <file>`` line of ``source`` by ``read(<file>)``."""
    return INCLUDE.sub(lambda m: read(m.group(1).decode()), source)


def _read(name: str) -> bytes:
    return files(__package__).joinpath(name).read_bytes()


FUNCTION = re.compile(rb"^local function (\w+)\(.*?^end$", re.MULTILINE | re.DOTALL)
COMMENT = re.compile(rb"--[^\n]*")
WORD = re.compile(rb"\w+")
STRING = re.compile(rb"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")


def _used(source: bytes) -> tuple[bytes, dict[bytes, bytes]]:
    """The body of an expanded script without comments and top-level functions,
    and the top-level functions it uses (and they use, and so on), by name."""
    source = COMMENT.sub(b"", source)
    functions = {m.group(1): m.group(0) for m in FUNCTION.finditer(source)}
    body = FUNCTION.sub(b"", source)
    used: dict[bytes, bytes] = {}
    todo = [body]
    while todo:
        words = set(WORD.findall(STRING.sub(b"", todo.pop())))  # (a name in a string is no use)
        for fn in sorted(words & functions.keys() - used.keys()):
            used[fn] = functions[fn]
            todo.append(functions[fn])
    return body, used


def script_commands(source: bytes) -> set[str]:
    """The commands an expanded script may run: those its body calls, and those
    of the top-level functions it uses (and they use, and so on); an included
    helper the script never uses does not count."""
    body, used = _used(source)
    return {m.decode() for text in (body, *used.values()) for m in CALL.findall(text)}


def deferred(source: bytes) -> bytes:
    """``source`` (an expanded script) with the top-level functions defined
    above its first ``--@later`` line that the code above that line never
    uses (itself or through the functions it uses) moved to that line, in
    their order, and so on for each next ``--@later`` line: the script's
    first lines (its quick paths) then run without making the closures only
    the rest needs. A function left above uses only functions left above, so
    each is still defined before its first use. Without the line, ``source``
    as it is."""
    marker = LATER_MARKER.search(source)
    if marker is None:
        return source
    head, tail = source[: marker.start()], source[marker.end() :]
    _, used = _used(head)
    later: list[bytes] = []

    def keep(m: re.Match[bytes]) -> bytes:
        if m.group(1) in used:
            return m.group(0)
        later.append(m.group(0))
        return b""

    head = FUNCTION.sub(keep, head)
    return head + deferred(b"\n\n".join(later) + b"\n" + tail)


def without_unused(source: bytes) -> bytes:
    """``source`` (an expanded script) without the top-level functions it never
    uses: every call of a script runs its whole chunk, and each function left
    in it is made again (a closure) at every call."""
    _, used = _used(source)
    return FUNCTION.sub(lambda m: m.group(0) if m.group(1) in used else b"", source)


_LOADED: list[ScriptSpec] = []


@cache
def sharded(spec: ScriptSpec) -> ScriptSpec:
    """The Redis Cluster variant of the loaded script ``spec`` (see :func:`build`),
    or ``spec`` itself when it names no ``PUBLISH`` (not even in its ACL guard)."""
    if b"'PUBLISH'" not in spec.source:
        return spec
    return build(spec.name, _read, sharded=True)


def _load(name: str) -> ScriptSpec:
    """The script ``name`` of the package's files, added to :data:`ALL`; built
    (:func:`build`) when its source, SHA-1 or commands are first read, so that
    an import builds none and a program builds only the scripts it sends."""
    spec = object.__new__(ScriptSpec)
    object.__setattr__(spec, "name", name)
    object.__setattr__(spec, "writes", _writes(name))
    _LOADED.append(spec)
    return spec


def _writes(name: str) -> bool:
    """Whether the script ``name`` may write (all but the ``*_inspect`` ones)."""
    return not name.endswith("_inspect")


def build(name: str, read: Callable[[str], bytes], *, sharded: bool = False) -> ScriptSpec:
    """The script ``name`` as tenure sends it, from the files ``read`` returns
    (``<name>.lua`` and its includes): includes expanded, and the ACL guard's
    command list in place of its ``--@acl`` line, and the :class:`Status` locals
    in place of ``_common.lua``'s ``--@status`` line. ``sharded``: the variant a
    Redis Cluster client sends, every ``PUBLISH`` an ``SPUBLISH`` (its wake
    reaches the subscribers of the slot's node), with its own command list and
    SHA-1.

    Raises:
        ValueError: the script does not include ``_common.lua`` (it would have no
            status names), or includes it twice.
    """
    source = expand(read(f"{name}.lua"), read)
    if sharded:
        source = source.replace(b"'PUBLISH'", b"'SPUBLISH'")  # the ACL guard's probe too
    source, found = STATUS_MARKER.subn(lambda _: STATUS_LOCALS, source)
    if found != 1:
        raise ValueError(f"{name}.lua must include _common.lua once (its status names)")
    source = without_unused(source)
    writes = _writes(name)
    commands = sorted(script_commands(source))
    if not writes:
        commands = [c for c in commands if c in READ_COMMANDS]
    table = ", ".join(f"'{c}'" for c in commands)
    # (a function, not a table: only a path that checks every command builds it;
    # and made, as every helper, only where the script's paths need it)
    acl = f"local function acl_command_list()\n  return {{{table}}}\nend\n"
    source = deferred(without_unused(ACL_MARKER.sub(lambda _: acl.encode(), source)))
    return ScriptSpec(name, source, hashlib.sha1(source).hexdigest(), tuple(commands), writes)


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
SEMAPHORE_ACQUIRE = _load("semaphore_acquire")
SEMAPHORE_RELEASE = _load("semaphore_release")
SEMAPHORE_EXTEND = _load("semaphore_extend")
SEMAPHORE_SET_PERMITS = _load("semaphore_set_permits")
SEMAPHORE_INSPECT = _load("semaphore_inspect")
LATCH_SET = _load("latch_set")
LATCH_COUNT_DOWN = _load("latch_count_down")
LATCH_INSPECT = _load("latch_inspect")
FAIR_ACQUIRE = _load("fair_acquire")
FAIR_RELEASE = _load("fair_release")
FAIR_INSPECT = _load("fair_inspect")
ELECTION_ANNOUNCE = _load("election_announce")
ELECTION_RESIGN = _load("election_resign")
ELECTION_READ = _load("election_read")
ELECTION_RENEW = _load("election_renew")
REDLOCK_WAKE = _load("redlock_wake")
ACL_KEYS = _load("acl_keys")

#: Every script above, in the order loaded (one ``_load`` line per script).
ALL = tuple(_LOADED)
