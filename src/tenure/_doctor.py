"""``tenure doctor``: the server settings that break locks, each with what to do.

:func:`gather_facts` asks the server (``INFO`` sections, ``CONFIG GET
appendfsync``, ``CLUSTER INFO``, ``ACL WHOAMI`` and ``ACL DRYRUN``); a reply
the server refuses (denied by ACL, command renamed or missing) becomes
:class:`CantCheck`, reported as "can't check X", never a crash. That is the
only I/O: :func:`diagnose` turns the :class:`Facts` into :class:`Finding` s, so
every rule is tested with canned replies.

A finding is ``ok``, a ``note`` (worth knowing, including every check that
could not be made) or a ``hazard`` (a setting under which a lock can be lost
or granted twice). ``tenure doctor`` exits with status 1 when there is a
hazard, 0 otherwise.

JSON (``doctor --json``; stable: new keys may be added, none removed or
renamed)::

    {"server": {"name": "valkey", "version": "9.1.2", "mode": "standalone"} | null,
     "hazards": 1,
     "findings": [{"check": "appendonly", "level": "ok" | "note" | "hazard",
                   "message": "...", "advice": "..."}, ...]}

``check`` is one of ``version``, ``appendonly``, ``appendfsync``,
``maxmemory-policy``, ``replication``, ``replica``, ``replicas``,
``replication-lag``, ``cluster``, ``acl``, ``sentinel`` (on a Sentinel: the
masters it monitors; a Sentinel gets only this and ``version``), and with ``--name`` / ``--key``
``acl-primitive`` (whether the user has every key, channel and command
permission that primitive needs: :func:`acl_needs`, checked with ``ACL
DRYRUN``) and ``acl-rule`` (the ``ACL SETUSER`` rule a least-privilege user
needs for it).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

import redis
import redis.exceptions

from . import _scripts as scripts
from ._errors import InvalidArgument, UnsupportedServer
from ._keys import (
    fair_keys,
    fenced_keys,
    latch_keys,
    lock_keys,
    rlock_keys,
    rwlock_keys,
    semaphore_keys,
)
from ._ops import glob_escape
from ._plans.server import parse_info
from ._scripts import LOCK_ACQUIRE, ScriptSpec


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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
    Needed("HEXISTS", ("{rlock}", "owner"), "script"),
    Needed("HGETALL", ("{rlock}",), "script"),
    Needed("HINCRBY", ("{rlock}", "owner", "1"), "script"),
    Needed("DECR", ("{lock}",), "script"),
    Needed("ZREMRANGEBYSCORE", ("{waiters}", "-inf", "1"), "script"),
    Needed("ZREMRANGEBYRANK", ("{waiters}", "0", "-1001"), "script"),
    Needed("HSETNX", ("{rlock}", "mode", "read"), "script"),
    Needed("HDEL", ("{rlock}", "owner"), "script"),
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


def identify(server: Reply, replication: Reply) -> ServerIdentity | None:
    """Name, version and mode from ``INFO server`` and ``INFO replication``."""
    if isinstance(server, CantCheck):
        return None
    name = str(server.get("server_name") or "redis").lower()
    version = str(server.get(f"{name}_version") or server.get("redis_version") or "?")
    mode = str(server.get("server_mode") or server.get("redis_mode") or "standalone")
    if not isinstance(replication, CantCheck) and replication.get("role") == "slave":
        mode = "replica"
    return ServerIdentity(name, version, mode)


def check_version(server: Reply) -> Finding:
    """Whether tenure supports this server (Redis >= 6.2, Valkey >= 7.2)."""
    if isinstance(server, CantCheck):
        return _cant("version", server)
    try:
        info = parse_info(dict(server))
    except UnsupportedServer as exc:
        return Finding("version", Level.HAZARD, str(exc), "upgrade the server")
    if _is_sentinel(server):
        return Finding(
            "version",
            Level.HAZARD,
            "this is a Sentinel, not a data server: it keeps no locks",
            "point tenure at the master the Sentinels name",
        )
    return Finding("version", Level.OK, f"{info.name} {'.'.join(map(str, info.version))}")


def _is_sentinel(server: Reply) -> bool:
    return not isinstance(server, CantCheck) and "sentinel" in (
        server.get("server_mode"),
        server.get("redis_mode"),
    )


def check_sentinel(masters: Reply | None) -> Finding:
    """What a Sentinel monitors: the services whose master a client should use."""
    if masters is None or isinstance(masters, CantCheck):
        why = masters.reason if isinstance(masters, CantCheck) else "not asked"
        return Finding("sentinel", Level.NOTE, f"can't list the masters it monitors: {why}")
    if not masters:
        return Finding("sentinel", Level.NOTE, "this Sentinel monitors no master")
    named = [
        f"{name!s} (master {_text(state.get('ip', '?'))}:{_text(state.get('port', '?'))})"
        for name, state in sorted(masters.items())
    ]
    first = sorted(masters)[0]
    return Finding(
        "sentinel",
        Level.NOTE,
        f"it monitors {', '.join(named)}; after a failover it names the new master",
        f"give tenure the client of redis.sentinel.Sentinel([...]).master_for({first!r}), "
        "which follows failovers, and acquire with min_replicas=1 (README, Sentinel)",
    )


def check_persistence(persistence: Reply, appendfsync: str | CantCheck) -> list[Finding]:
    """The ``appendonly`` and ``appendfsync`` rules: a restart must not forget or
    roll back locks."""
    if isinstance(persistence, CantCheck):
        return [_cant("appendonly", persistence)]
    if not int(persistence.get("aof_enabled", 0) or 0):
        return [
            Finding(
                "appendonly",
                Level.HAZARD,
                "AOF is off: a restart (crash, OOM kill, upgrade) forgets every held lock, so "
                "a lock can be granted twice. RDB snapshots do not help: they roll back to the "
                "last snapshot. Fences still increase (they are seeded from the server's TIME), "
                "so resources that check fences stay safe.",
                "set appendonly yes and appendfsync always (in the config file too), or "
                "restart a crashed server only after the longest lock ttl has passed",
            )
        ]
    if isinstance(appendfsync, CantCheck):
        return [_cant("appendfsync", appendfsync)]
    if appendfsync != "always":
        return [
            Finding(
                "appendfsync",
                Level.HAZARD,
                f"appendfsync is {appendfsync}: a crash loses the writes not yet synced "
                "(up to a second, or more with 'no'), so a restart can roll back a lock "
                "just granted and grant it again",
                "set appendfsync always, or restart a crashed server only after the "
                "longest lock ttl has passed",
            )
        ]
    return [Finding("appendonly", Level.OK, "AOF on, appendfsync always")]


def check_eviction(memory: Reply) -> Finding:
    """The ``maxmemory-policy`` rule: no eviction of keys with a ttl (every held lock)."""
    if isinstance(memory, CantCheck):
        return _cant("maxmemory-policy", memory)
    policy = _text(memory.get("maxmemory_policy", "noeviction"))
    limit = int(memory.get("maxmemory", 0) or 0)
    advice = "set maxmemory-policy noeviction (keep locks on a server that is not a cache)"
    if policy == "noeviction":
        how = "writes fail when memory is full, and no lock is evicted"
        return Finding("maxmemory-policy", Level.OK, f"noeviction: {how}")
    what = "any key" if policy.startswith("allkeys-") else "keys with a ttl (every held lock)"
    if limit <= 0:
        return Finding(
            "maxmemory-policy",
            Level.NOTE,
            f"maxmemory-policy is {policy}, but no maxmemory is set, so nothing is evicted "
            f"yet; with a limit it would evict {what}",
            advice,
        )
    return Finding(
        "maxmemory-policy",
        Level.HAZARD,
        f"maxmemory is {limit} bytes and maxmemory-policy {policy} evicts {what} when memory "
        "is full: a held lock (or its fence key) can vanish and be granted again",
        advice,
    )


def _replica_fields(value: object) -> dict[str, str]:
    """A ``slaveN`` line of ``INFO replication``, parsed or not."""
    if isinstance(value, Mapping):
        return {str(k): _text(v) for k, v in value.items()}
    pairs = (p.split("=", 1) for p in _text(value).split(",") if "=" in p)
    return {k: v for k, v in pairs}


#: Replication lag (s) above which a replica is a hazard.
MAX_LAG = 1


def check_replication(replication: Reply) -> list[Finding]:
    """The server's role and its replicas: a replica is read-only for locks, and a
    lagging replica promoted by a failover has lost the recent locks."""
    if isinstance(replication, CantCheck):
        return [_cant("replication", replication)]
    if replication.get("role") == "slave":
        master = f"{_text(replication.get('master_host', '?'))}:"
        master += _text(replication.get("master_port", "?"))
        link = _text(replication.get("master_link_status", "?"))
        return [
            Finding(
                "replica",
                Level.HAZARD,
                f"this server is a replica of {master} (link {link}): it is read-only, and "
                "locks must be taken on the master",
                f"point tenure at the master, {master}",
            )
        ]
    count = int(replication.get("connected_slaves", 0) or 0)
    if count == 0:
        return [Finding("replicas", Level.OK, "no replicas")]
    replicas = []
    findings = []
    for i in range(count):
        fields = _replica_fields(replication.get(f"slave{i}", ""))
        where = f"{fields.get('ip', '?')}:{fields.get('port', '?')}"
        state, lag = fields.get("state", "?"), fields.get("lag", "?")
        replicas.append(f"{where} ({state}, lag {lag}s)")
        lagging = lag.isdigit() and int(lag) > MAX_LAG
        if state != "online" or lagging:
            findings.append(
                Finding(
                    "replication-lag",
                    Level.HAZARD,
                    f"replica {where} is {state} with a lag of {lag}s: a failover to it "
                    "loses the locks granted meanwhile",
                    "find why the replica falls behind (network, load, a stopped process)",
                )
            )
    findings.insert(
        0,
        Finding(
            "replicas",
            Level.NOTE,
            f"{count} replica(s): {', '.join(replicas)}. Replication is asynchronous: a "
            "failover can lose a lock granted just before it",
            "acquire with min_replicas=1 (the lease is on a replica when acquire returns), "
            "and use fences where correctness matters (README, Safety)",
        ),
    )
    return findings


def check_cluster(cluster: Reply, cluster_info: Reply | None) -> Finding:
    """Whether the server is in a cluster, and whether the cluster is ``ok``."""
    if isinstance(cluster, CantCheck):
        return _cant("cluster", cluster)
    if not int(cluster.get("cluster_enabled", 0) or 0):
        return Finding("cluster", Level.OK, "not a cluster")
    if cluster_info is None or isinstance(cluster_info, CantCheck):
        return _cant("cluster", cluster_info or CantCheck("CLUSTER INFO not asked"))
    state = _text(cluster_info.get("cluster_state", "?"))
    if state != "ok":
        return Finding(
            "cluster",
            Level.HAZARD,
            f"cluster_state is {state}: the cluster refuses commands, and locks can't be taken",
            "fix the cluster (CLUSTER INFO, CLUSTER NODES): every slot must be served",
        )
    return Finding("cluster", Level.OK, "cluster state ok (each lock's keys share a hash slot)")


def check_acl(acl: AclCheck | CantCheck) -> list[Finding]:
    """Whether the connected user may run every command in :data:`NEEDED_COMMANDS`
    (``WAIT`` / ``WAITAOF``, needed only with ``min_replicas``, make a note)."""
    if isinstance(acl, CantCheck):
        return [Finding("acl", Level.NOTE, f"check skipped: {acl.reason}")]
    uses = {n.command: n.used_by for n in NEEDED_COMMANDS}
    library = {c: why for c, why in acl.denied.items() if uses.get(c) in ("script", "client")}
    cli = {c: why for c, why in acl.denied.items() if uses.get(c) == "cli"}
    replicas = {
        c: why
        for c, why in acl.denied.items()
        if uses.get(c) == "replicas" and not _unknown_command(why)
    }
    findings: list[Finding] = []
    if library:
        listed = "; ".join(f"{c}: {why}" for c, why in library.items())
        findings.append(
            Finding(
                "acl",
                Level.HAZARD,
                f"user {acl.user!r} may not run what tenure needs: {listed}",
                f"grant them, e.g. ACL SETUSER {acl.user} "
                + " ".join("+" + c.lower().replace(" ", "|") for c in library)
                + ", with key and channel patterns that cover tenure's prefix "
                "(tenure doctor --name NAME prints them)",
            )
        )
    elif cli:
        findings.append(
            Finding(
                "acl",
                Level.NOTE,
                f"user {acl.user!r} may run what the library needs, but not "
                f"{', '.join(cli)} (tenure ls / inspect)",
            )
        )
    else:
        findings.append(
            Finding("acl", Level.OK, f"user {acl.user!r} may run every command tenure needs")
        )
    if replicas:
        findings.append(
            Finding(
                "acl",
                Level.NOTE,
                f"user {acl.user!r} may not run {' / '.join(replicas)}: an acquire with "
                "min_replicas (WAIT; WAITAOF with replica_fsync) would fail",
                "grant " + " ".join("+" + c.lower() for c in replicas) + " if you use min_replicas",
            )
        )
    return findings


def _unknown_command(reply: str) -> bool:
    """Whether an ``ACL DRYRUN`` reply says the server has no such command
    (``WAITAOF`` before Redis 7.2)."""
    text = reply.lower()
    return "unknown command" in text or "not found" in text


# --- the permissions of one primitive ---------------------------------------------------------

#: The scripts each kind runs (a FairLock extends its lease as a Lock does).
KIND_SCRIPTS: dict[str, tuple[ScriptSpec, ...]] = {
    "Lock": (scripts.LOCK_ACQUIRE, scripts.LOCK_RELEASE, scripts.LOCK_EXTEND, scripts.LOCK_INSPECT),
    "RLock": (
        scripts.RLOCK_ACQUIRE,
        scripts.RLOCK_RELEASE,
        scripts.RLOCK_EXTEND,
        scripts.RLOCK_INSPECT,
    ),
    "FairLock": (
        scripts.FAIR_ACQUIRE,
        scripts.FAIR_RELEASE,
        scripts.LOCK_EXTEND,
        scripts.FAIR_INSPECT,
    ),
    "ReadWriteLock": (
        scripts.RWLOCK_ACQUIRE,
        scripts.RWLOCK_RELEASE,
        scripts.RWLOCK_EXTEND,
        scripts.RWLOCK_INSPECT,
    ),
    "Semaphore": (
        scripts.SEMAPHORE_ACQUIRE,
        scripts.SEMAPHORE_RELEASE,
        scripts.SEMAPHORE_EXTEND,
        scripts.SEMAPHORE_SET_PERMITS,
        scripts.SEMAPHORE_INSPECT,
    ),
    "CountDownLatch": (scripts.LATCH_SET, scripts.LATCH_COUNT_DOWN, scripts.LATCH_INSPECT),
    "FencedKey": (scripts.FENCED_SET,),
}

#: ``--kind`` values of ``tenure doctor`` and the kinds they name.
KIND_NAMES: dict[str, str] = {
    "lock": "Lock",
    "rlock": "RLock",
    "fair": "FairLock",
    "rwlock": "ReadWriteLock",
    "semaphore": "Semaphore",
    "latch": "CountDownLatch",
    "fenced": "FencedKey",
}

#: A waiter id standing for every waiter in the sample wake channel.
SAMPLE_WAITER = "0123abcd-0123abcd"


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


def acl_needs(
    kind: str, *, name: str | None = None, key: str | None = None, prefix: str = "tenure:"
) -> AclNeeds:
    """The permissions a primitive needs: ``kind`` one of :data:`KIND_SCRIPTS`, given
    by ``name`` (under ``prefix``), or by exact ``key`` (a ``Lock`` or a
    ``FencedKey``).

    Raises:
        InvalidArgument: an unknown kind, both or neither of ``name`` and ``key``,
            a ``key`` for a kind that has no exact-key mode, or a bad name/prefix.
    """
    if kind not in KIND_SCRIPTS:
        raise InvalidArgument(f"unknown kind {kind!r}; one of {', '.join(KIND_SCRIPTS)}")
    if (name is None) == (key is None):
        raise InvalidArgument("give exactly one of a name or a key")
    if key is not None and kind not in ("Lock", "FencedKey"):
        raise InvalidArgument(f"a {kind} has no exact-key mode: give its name")
    if kind == "FencedKey" and key is None:
        raise InvalidArgument("a FencedKey is given by its key")
    commands = {c for spec in KIND_SCRIPTS[kind] for c in spec.commands}
    commands |= {"EVALSHA", "SCRIPT LOAD", "INFO"}
    channels: tuple[str, ...]
    if kind == "FencedKey":
        assert key is not None
        value, seen = fenced_keys(key)
        commands |= {"GET"}
        commands.discard("PUBLISH")
        return AclNeeds(
            f"FencedKey({key!r})",
            (value, seen),
            (),
            (glob_escape(value), glob_escape(seen)),
            (),
            tuple(sorted(commands)),
            (),
        )
    commands |= {"SUBSCRIBE", "UNSUBSCRIBE"}
    label = f"{kind}(key={key!r})" if key is not None else f"{kind}({name!r}, prefix={prefix!r})"
    if kind == "CountDownLatch":
        assert name is not None
        latch = latch_keys(name, prefix=prefix)
        base, keys, channels = latch.count, (latch.count, latch.opened), (latch.channel,)
        channel_patterns = (glob_escape(latch.channel),)
    else:
        if kind == "Lock":
            lk = lock_keys(name, key=key, prefix=prefix)
        elif kind == "RLock":
            lk = rlock_keys(str(name), prefix=prefix)
        elif kind == "FairLock":
            lk = fair_keys(str(name), prefix=prefix)
        elif kind == "ReadWriteLock":
            lk = rwlock_keys(str(name), prefix=prefix)
        else:
            lk = semaphore_keys(str(name), prefix=prefix)
        base = lk.wake_prefix[: -len(":wake:")]
        extra = [
            getattr(lk, role) for role in ("deadlines", "holds", "permits") if hasattr(lk, role)
        ]
        if kind == "ReadWriteLock":
            keys = (lk.lock, lk.fence, lk.waiters, lk.delay, *extra, lk.released + ":owner")
        else:
            keys = (lk.lock, lk.fence, lk.waiters, lk.delay, lk.released, *extra)
        channels = (lk.wake_prefix + SAMPLE_WAITER,)
        channel_patterns = (glob_escape(lk.wake_prefix) + "*",)
    # the main key (an exact key apart from its helpers, or the base) and the helpers
    key_patterns = (glob_escape(keys[0]), glob_escape(base) + ":*")
    return AclNeeds(label, keys, channels, key_patterns, channel_patterns, tuple(sorted(commands)))


def _probe_args(command: str, needs: AclNeeds) -> tuple[str, ...]:
    """A command line of ``command`` for ``ACL DRYRUN``: its sample arguments in
    :data:`NEEDED_COMMANDS`, on ``needs``' first key and channel (``EVALSHA``
    with every key)."""
    main = needs.keys[0]
    channel = needs.channels[0] if needs.channels else "tenure-doctor"
    if command == "EVALSHA":
        return ("EVALSHA", LOCK_ACQUIRE.sha1, str(len(needs.keys)), *needs.keys)
    sample = {n.command: n.args for n in NEEDED_COMMANDS}.get(command, ("{lock}",))
    values = {"{channel}": channel, "{sha}": LOCK_ACQUIRE.sha1}
    keys = ("{lock}", "{fence}", "{waiters}", "{rlock}")
    args = (values.get(a, main if a in keys else a) for a in sample)
    return (*command.split(), *args)


def acl_probes(needs: AclNeeds) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(permission, target, command line)`` for each ``ACL DRYRUN`` that checks
    ``needs``: ``read`` / ``write`` per key, ``channel`` per channel (PUBLISH and
    SUBSCRIBE), ``command`` per command, ``optional`` per ``min_replicas`` command."""
    probes: list[tuple[str, str, tuple[str, ...]]] = []
    for k in needs.keys:
        probes.append(("read", k, ("GET", k)))
        probes.append(("write", k, ("SET", k, "x")))
    for ch in needs.channels:
        probes.append(("channel", ch, ("PUBLISH", ch, "x")))
        probes.append(("channel", ch, ("SUBSCRIBE", ch)))
    for c in needs.commands:
        probes.append(("command", c, _probe_args(c, needs)))
    for c in needs.optional:
        probes.append(("optional", c, _probe_args(c, needs)))
    return probes


@dataclass(frozen=True, slots=True)
class PrimitiveAcl:
    """``ACL DRYRUN`` of :func:`acl_probes` for one primitive: the user and each
    denied probe as ``(permission, target, reason)``."""

    needs: AclNeeds
    user: str
    denied: tuple[tuple[str, str, str], ...]


def check_primitive_acl(needs: AclNeeds, acl: PrimitiveAcl | CantCheck) -> list[Finding]:
    """Whether the user has every permission ``needs`` lists, and the least-privilege rule."""
    rule = Finding(
        "acl-rule",
        Level.NOTE,
        f"a least-privilege user for {needs.label} needs: {needs.advice()}",
    )
    if isinstance(acl, CantCheck):
        return [
            Finding("acl-primitive", Level.NOTE, f"can't check {needs.label}: {acl.reason}"),
            rule,
        ]
    # a command's probe refused for its key or channel is reported by that one's probe
    denied = [
        d
        for d in acl.denied
        if d[0] not in ("command", "optional")
        or not d[2].rstrip("'\" ").endswith(("key", "channel"))
    ]
    required = [d for d in denied if d[0] != "optional"]
    optional = [d for d in denied if d[0] == "optional" and not _unknown_command(d[2])]
    findings: list[Finding] = []
    if required:
        names = {"read": "read key", "write": "write key", "channel": "channel"}
        listed = "; ".join(
            f"{names[what]} {target!r}" if what in names else f"command {target}"
            for what, target, _ in required
        )
        findings.append(
            Finding(
                "acl-primitive",
                Level.HAZARD,
                f"user {acl.user!r} lacks what {needs.label} needs: {listed}",
                "give the user the rule below (tenure raises PermissionDenied, before any "
                "write, where one is missing)",
            )
        )
    else:
        findings.append(
            Finding(
                "acl-primitive",
                Level.OK,
                f"user {acl.user!r} has every key, channel and command permission "
                f"{needs.label} needs",
            )
        )
    if optional:
        findings.append(
            Finding(
                "acl-primitive",
                Level.NOTE,
                f"user {acl.user!r} may not run {' / '.join(t for _, t, _ in optional)}: "
                "min_replicas (WAIT; WAITAOF with replica_fsync) would fail",
            )
        )
    findings.append(rule)
    return findings


def diagnose(facts: Facts) -> Report:
    """Turn the server's replies into findings (no I/O). A Sentinel gets only
    the version and sentinel findings: its other settings hold no locks."""
    if _is_sentinel(facts.server):
        return Report(
            identify(facts.server, facts.replication),
            (check_version(facts.server), check_sentinel(facts.sentinel_masters)),
        )
    findings = [
        check_version(facts.server),
        *check_persistence(facts.persistence, facts.appendfsync),
        check_eviction(facts.memory),
        *check_replication(facts.replication),
        check_cluster(facts.cluster, facts.cluster_info),
    ]
    if facts.primitive is None:
        findings += check_acl(facts.acl)
    else:  # the primitive's own check covers every command, with its keys
        findings += check_primitive_acl(*facts.primitive)
    return Report(identify(facts.server, facts.replication), tuple(findings))


def _ask(call: Any, *args: Any) -> Any:
    """``call(*args)``, or :class:`CantCheck` if the server refused (denied, renamed)."""
    try:
        return call(*args)
    except redis.exceptions.ResponseError as exc:
        return CantCheck(f"the server refused: {exc}")


def _dryrun_all(
    client: redis.Redis, user: str | None, lines: list[tuple[str, ...]]
) -> tuple[str, list[str]] | CantCheck:
    """``ACL DRYRUN <user>`` of each command line (``user``: the connected one when
    ``None``): the user and each reply as text (``"OK"`` when allowed)."""
    if user is None:
        user = _ask(client.execute_command, "ACL", "WHOAMI")
        if isinstance(user, CantCheck):
            return user
        user = _text(user)
    pipe = client.pipeline(transaction=False)
    for line in lines:
        pipe.execute_command("ACL", "DRYRUN", user, *line)  # type: ignore[no-untyped-call]
    replies = pipe.execute(raise_on_error=False)
    first = replies[0]
    if isinstance(first, redis.exceptions.NoPermissionError):
        return CantCheck(f"user {user!r} may not run ACL DRYRUN ({first})")
    if isinstance(first, redis.exceptions.ResponseError):
        text = str(first)
        if "dryrun" in text.lower():
            return CantCheck(
                "this server has no ACL DRYRUN (it came in Redis 7.0); on Redis 6.2 tenure's "
                "scripts check keys and channels before they write, but can't check commands"
            )
        return CantCheck(f"ACL DRYRUN failed: {text}")
    return user, [str(r) if isinstance(r, Exception) else _text(r) for r in replies]


def _dryruns(client: redis.Redis, prefix: str, user: str | None = None) -> AclCheck | CantCheck:
    lines = [dryrun_args(needed, prefix) for needed in NEEDED_COMMANDS]
    done = _dryrun_all(client, user, lines)
    if isinstance(done, CantCheck):
        return done
    user, replies = done
    denied = {
        n.command: text for n, text in zip(NEEDED_COMMANDS, replies, strict=True) if text != "OK"
    }
    return AclCheck(user, denied)


def _primitive_dryruns(
    client: redis.Redis, needs: AclNeeds, user: str | None
) -> PrimitiveAcl | CantCheck:
    probes = acl_probes(needs)
    done = _dryrun_all(client, user, [line for _, _, line in probes])
    if isinstance(done, CantCheck):
        return done
    user, replies = done
    denied: list[tuple[str, str, str]] = []
    for (what, target, _), text in zip(probes, replies, strict=True):
        if text != "OK" and (what, target) not in {(w, t) for w, t, _ in denied}:
            denied.append((what, target, text))
    return PrimitiveAcl(needs, user, tuple(denied))


def _info(client: redis.Redis, section: str) -> Reply:
    reply = _ask(client.info, section)
    return reply if isinstance(reply, CantCheck) else dict(reply)


def _config(client: redis.Redis, name: str) -> str | CantCheck:
    reply = _ask(client.config_get, name)
    if isinstance(reply, CantCheck):
        return reply
    if name not in reply:
        return CantCheck(f"CONFIG GET {name} returned nothing")
    return _text(reply[name])


def _cluster_info(client: redis.Redis) -> Reply:
    reply = _ask(client.execute_command, "CLUSTER", "INFO")
    if isinstance(reply, CantCheck | Mapping):
        return reply
    lines = (line.split(":", 1) for line in _text(reply).splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in lines}


def gather_facts(
    client: redis.Redis,
    *,
    prefix: str = "tenure:",
    needs: AclNeeds | None = None,
    acl_user: str | None = None,
) -> Facts:
    """Ask the server everything :func:`diagnose` looks at; with ``needs``, also
    whether the user (``acl_user``, else the connected one) has every
    permission of that primitive. A reply the server refuses becomes
    :class:`CantCheck`; connection errors propagate."""
    server = _info(client, "server")
    if _is_sentinel(server):
        not_asked = CantCheck("a Sentinel")
        masters = _ask(client.sentinel_masters)
        return Facts(server, not_asked, not_asked, not_asked, not_asked, sentinel_masters=masters)
    cluster = _info(client, "cluster")
    cluster_on = not isinstance(cluster, CantCheck) and int(cluster.get("cluster_enabled", 0))
    return Facts(
        server=server,
        persistence=_info(client, "persistence"),
        memory=_info(client, "memory"),
        replication=_info(client, "replication"),
        cluster=cluster,
        cluster_info=_cluster_info(client) if cluster_on else None,
        appendfsync=_config(client, "appendfsync"),
        acl=_dryruns(client, prefix, acl_user) if needs is None else CantCheck("see acl-primitive"),
        primitive=None if needs is None else (needs, _primitive_dryruns(client, needs, acl_user)),
    )


# --- text output ----------------------------------------------------------------------------

_LABELS = {Level.OK: "ok", Level.NOTE: "note", Level.HAZARD: "HAZARD"}
_STYLES = {Level.OK: "green", Level.NOTE: "yellow", Level.HAZARD: "bold red"}
_WIDTH = 100


def report_lines(report: Report) -> list[tuple[Level | None, str]]:
    """The report as text lines, each with the level that colours it (``None``: plain)."""
    server = str(report.server) if report.server else "unknown (INFO server refused)"
    lines: list[tuple[Level | None, str]] = [(None, f"server: {server}")]
    column = max(len(f.check) for f in report.findings) + 2
    indent = " " * (8 + column)
    for f in report.findings:
        head = f"{_LABELS[f.level]:<8}{f.check:<{column}}"
        text = textwrap.fill(f.message, _WIDTH, initial_indent=head, subsequent_indent=indent)
        lines.append((f.level, text))
        if f.advice and f.level is not Level.OK:
            advice = textwrap.fill(
                "what to do: " + f.advice, _WIDTH, initial_indent=indent, subsequent_indent=indent
            )
            lines.append((None, advice))
    n = report.hazards
    if n:
        verdict = (
            f"{n} hazard{'s' if n > 1 else ''}: a lock on this server can be lost or granted twice"
        )
        lines.append((Level.HAZARD, verdict))
    else:
        lines.append((Level.OK, "no hazards found"))
    return lines


def print_report(report: Report) -> None:
    """Print the report on stdout, coloured by rich when it is installed and stdout
    is a terminal."""
    lines = report_lines(report)
    try:
        from rich.console import Console
        from rich.text import Text
    except ModuleNotFoundError:
        for _, text in lines:
            print(text)
        return
    console = Console(highlight=False, soft_wrap=True)
    for level, text in lines:
        console.print(Text(text, style=_STYLES[level] if level else ""))
