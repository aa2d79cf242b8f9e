"""What the doctor reports: findings, their levels, and the facts it learned."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from .._keys import lock_keys, rlock_keys
from .._ops import glob_escape
from .._scripts import LOCK_ACQUIRE


@dataclass(frozen=True, slots=True)
class Needed:
    """A command tenure needs, with sample arguments for ``ACL DRYRUN``.

    ``used_by`` is ``"script"`` (called inside tenure's Lua scripts, which the
    server checks against the user's ACL too), ``"client"`` (sent by the
    library), ``"replicas"`` (sent only with ``min_replicas``: ``WAIT``, or
    ``WAITAOF`` with ``replica_fsync``) or ``"cli"`` (only ``tenure ls`` /
    ``inspect``). Placeholders in
    ``args``: ``{lock}`` ``{fence}`` ``{waiters}`` ``{channel}`` (a ``Lock``'s
    keys and wake channel), ``{rlock}`` (an ``RLock``'s hash), ``{sha}`` (a
    script's SHA-1) and ``{prefix}*`` (a ``SCAN`` pattern for the prefix).
    """

    command: str
    args: tuple[str, ...]
    used_by: Literal["script", "client", "replicas", "cli"]


#: Every command tenure sends or its scripts call: the one list, checked against
#: the ``.lua`` files by the tests.
NEEDED_COMMANDS: tuple[Needed, ...] = (
    Needed("EVALSHA", ("{sha}", "3", "{lock}", "{fence}", "{waiters}", "t"), "client"),
    Needed("SCRIPT LOAD", ("return 1",), "client"),
    Needed("INFO", ("server",), "client"),
    Needed("SUBSCRIBE", ("{channel}",), "client"),
    Needed("UNSUBSCRIBE", ("{channel}",), "client"),
    Needed("TYPE", ("{lock}",), "script"),
    Needed("GET", ("{fence}",), "script"),
    Needed("SET", ("{lock}", "token", "NX", "PX", "1000"), "script"),
    Needed("DEL", ("{lock}",), "script"),
    Needed("EXISTS", ("{lock}",), "script"),
    Needed("PTTL", ("{lock}",), "script"),
    Needed("PEXPIRE", ("{lock}", "1000"), "script"),
    Needed("PEXPIREAT", ("{lock}", "4102444800000"), "script"),
    Needed("TIME", (), "script"),
    Needed("ZADD", ("{waiters}", "NX", "1", "member"), "script"),
    Needed("ZREM", ("{waiters}", "member"), "script"),
    Needed("ZPOPMIN", ("{waiters}",), "script"),
    Needed("ZCARD", ("{waiters}",), "script"),
    Needed("ZRANGE", ("{waiters}", "0", "9", "WITHSCORES"), "script"),
    Needed("ZRANGEBYSCORE", ("{waiters}", "-inf", "1"), "script"),
    Needed("ZSCORE", ("{waiters}", "member"), "script"),
    Needed("PUBLISH", ("{channel}", "message"), "script"),
    Needed("HSET", ("{rlock}", "owner", "1"), "script"),
    Needed("HGET", ("{rlock}", "owner"), "script"),
    Needed("HMGET", ("{rlock}", "mode", "owner"), "script"),
    Needed("MGET", ("{lock}", "{fence}"), "script"),
    Needed("HGETALL", ("{rlock}",), "script"),
    Needed("HINCRBY", ("{rlock}", "owner", "1"), "script"),
    Needed("DECR", ("{lock}",), "script"),
    Needed("ZREMRANGEBYSCORE", ("{waiters}", "-inf", "1"), "script"),
    Needed("HSETNX", ("{rlock}", "mode", "read"), "script"),
    Needed("HDEL", ("{rlock}", "owner"), "script"),
    Needed("XADD", ("{lock}", "MAXLEN", "64", "*", "event", "elected"), "script"),
    Needed("XRANGE", ("{lock}", "-", "+", "COUNT", "1"), "script"),
    Needed("XREVRANGE", ("{lock}", "+", "-", "COUNT", "1"), "script"),
    Needed("WAIT", ("0", "0"), "replicas"),
    Needed("WAITAOF", ("0", "0", "0"), "replicas"),
    Needed("SCAN", ("0", "MATCH", "{prefix}*"), "cli"),
)


def dryrun_args(needed: Needed, prefix: str) -> tuple[str, ...]:
    """The command line to pass to ``ACL DRYRUN <user>`` for ``needed``, with keys
    and a channel of a lock under ``prefix``."""
    keys = lock_keys("tenure-doctor", key=None, prefix=prefix)
    values = {
        "{lock}": keys.lock,
        "{fence}": keys.fence,
        "{waiters}": keys.waiters,
        "{channel}": keys.wake_prefix + "doctor",
        "{rlock}": rlock_keys("tenure-doctor", prefix=prefix).lock,
        "{sha}": LOCK_ACQUIRE.sha1,
        "{prefix}*": glob_escape(prefix) + "*",
    }
    return (*needed.command.split(), *(values.get(a, a) for a in needed.args))


class Level(StrEnum):
    """How bad a finding is. Only a hazard makes ``doctor`` exit with status 1."""

    OK = "ok"
    NOTE = "note"
    HAZARD = "hazard"


@dataclass(frozen=True, slots=True)
class Finding:
    """One result of the doctor: ``check`` names the setting or check."""

    check: str
    level: Level
    message: str
    advice: str = ""

    def to_json(self) -> dict[str, str]:
        """This finding as a JSON object."""
        return {
            "check": self.check,
            "level": self.level.value,
            "message": self.message,
            "advice": self.advice,
        }


@dataclass(frozen=True, slots=True)
class CantCheck:
    """A reply the server would not give (denied, renamed, unknown), and why."""

    reason: str


@dataclass(frozen=True, slots=True)
class AclCheck:
    """``ACL DRYRUN`` results: the connected user, and each denied command with the reason."""

    user: str
    denied: Mapping[str, str]


Reply = Mapping[str, Any] | CantCheck


@dataclass(frozen=True, slots=True)
class AclNeeds:
    """Every permission one primitive needs from the Redis user.

    ``keys``: each key the primitive uses (for a ``ReadWriteLock``, one owner's
    last-op key stands for all); ``channels``: a wake channel (one waiter's
    stands for all) or a latch's channel, empty for a ``FencedKey``;
    ``key_patterns`` / ``channel_patterns``: the ACL glob patterns (``~`` /
    ``&``, without the sign) that cover exactly them; ``commands``: what the
    library sends and its scripts call, upper case (``"SCRIPT LOAD"``);
    ``optional``: what only ``min_replicas`` needs.
    """

    label: str
    keys: tuple[str, ...]
    channels: tuple[str, ...]
    key_patterns: tuple[str, ...]
    channel_patterns: tuple[str, ...]
    commands: tuple[str, ...]
    optional: tuple[str, ...] = ("WAIT", "WAITAOF")

    def rule(self, user: str = "app") -> str:
        """The ``ACL SETUSER`` command that gives ``user`` exactly these
        permissions (a password still to set; without :attr:`optional`, see
        :meth:`advice`)."""
        parts = [f"ACL SETUSER {user} on >PASSWORD resetkeys resetchannels"]
        parts += [_cli_word(f"~{p}") for p in self.key_patterns]
        parts += [_cli_word(f"&{p}") for p in self.channel_patterns]
        parts.append("-@all")
        parts += ["+" + c.lower().replace(" ", "|") for c in self.commands]
        return " ".join(parts)

    def advice(self, user: str = "app") -> str:
        """:meth:`rule`, and what ``min_replicas`` adds to it."""
        text = self.rule(user)
        if self.optional:
            text += (
                "; with min_replicas add +wait (with replica_fsync +waitaof, a command of "
                "Redis 7.2+ and Valkey)"
            )
        return text


def _cli_word(word: str) -> str:
    """ACL pattern ``word`` as one argument of a ``redis-cli`` command line. The
    server refuses a pattern with white space in it, so each white-space
    character becomes ``?`` (any one character: the pattern is a little wider);
    then the word is as it is when it has no quote, backslash or unprintable
    character, else in double quotes with ``redis-cli``'s escapes (``\\"``,
    ``\\\\``, ``\\xHH``)."""
    word = "".join("?" if c.isspace() else c for c in word)
    if word and not any(c.isspace() or c in "\"'\\" or not c.isprintable() for c in word):
        return word
    out = []
    for c in word:
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif not c.isprintable() and ord(c) < 256:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


@dataclass(frozen=True, slots=True)
class PrimitiveAcl:
    """``ACL DRYRUN`` of :func:`acl_probes` for one primitive: the user and each
    denied probe as ``(permission, target, reason)``."""

    needs: AclNeeds
    user: str
    denied: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True, slots=True)
class Facts:
    """What the doctor learned from the server; each part may be :class:`CantCheck`."""

    server: Reply
    persistence: Reply
    memory: Reply
    replication: Reply
    cluster: Reply
    cluster_info: Reply | None = None
    appendfsync: str | CantCheck = CantCheck("not asked")
    acl: AclCheck | CantCheck = CantCheck("not asked")
    primitive: tuple[AclNeeds, PrimitiveAcl | CantCheck] | None = None
    #: a Sentinel's ``SENTINEL MASTERS``, by service name (asked of a Sentinel only)
    sentinel_masters: Reply | None = None


@dataclass(frozen=True, slots=True)
class ServerIdentity:
    """The server's name (``redis`` / ``valkey``), version and mode
    (``standalone``, ``cluster``, ``replica`` or ``sentinel``)."""

    name: str
    version: str
    mode: str

    def __str__(self) -> str:
        return f"{self.name} {self.version} ({self.mode})"


@dataclass(frozen=True, slots=True)
class Report:
    """The doctor's verdict."""

    server: ServerIdentity | None
    findings: tuple[Finding, ...]

    @property
    def hazards(self) -> int:
        """How many findings are hazards."""
        return sum(f.level is Level.HAZARD for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON object (see the module docstring)."""
        server = None
        if self.server is not None:
            s = self.server
            server = {"name": s.name, "version": s.version, "mode": s.mode}
        return {
            "server": server,
            "hazards": self.hazards,
            "findings": [f.to_json() for f in self.findings],
        }


def _cant(check: str, why: CantCheck) -> Finding:
    return Finding(check, Level.NOTE, f"can't check {check}: {why.reason}")
