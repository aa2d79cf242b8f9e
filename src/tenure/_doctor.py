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
``replication-lag``, ``cluster``, ``acl``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

import redis
import redis.exceptions

from ._errors import UnsupportedServer
from ._keys import lock_keys, rlock_keys
from ._ops import glob_escape
from ._plans.server import parse_info
from ._scripts import LOCK_ACQUIRE


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class Needed:
    """A command tenure needs, with sample arguments for ``ACL DRYRUN``.

    ``used_by`` is ``"script"`` (called inside tenure's Lua scripts, which the
    server checks against the user's ACL too), ``"client"`` (sent by the
    library) or ``"cli"`` (only ``tenure ls`` / ``inspect``). Placeholders in
    ``args``: ``{lock}`` ``{fence}`` ``{waiters}`` ``{channel}`` (a ``Lock``'s
    keys and wake channel), ``{rlock}`` (an ``RLock``'s hash), ``{sha}`` (a
    script's SHA-1) and ``{prefix}*`` (a ``SCAN`` pattern for the prefix).
    """

    command: str
    args: tuple[str, ...]
    used_by: Literal["script", "client", "cli"]


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
    Needed("TIME", (), "script"),
    Needed("ZADD", ("{waiters}", "NX", "1", "member"), "script"),
    Needed("ZREM", ("{waiters}", "member"), "script"),
    Needed("ZPOPMIN", ("{waiters}",), "script"),
    Needed("ZCARD", ("{waiters}",), "script"),
    Needed("ZSCORE", ("{waiters}", "member"), "script"),
    Needed("ZRANGEBYSCORE", ("{waiters}", "-inf", "1"), "script"),
    Needed("PUBLISH", ("{channel}", "message"), "script"),
    Needed("HSET", ("{rlock}", "owner", "1"), "script"),
    Needed("HGET", ("{rlock}", "owner"), "script"),
    Needed("HEXISTS", ("{rlock}", "owner"), "script"),
    Needed("HGETALL", ("{rlock}",), "script"),
    Needed("HINCRBY", ("{rlock}", "owner", "1"), "script"),
    Needed("SCAN", ("0", "MATCH", "{prefix}*"), "cli"),
    Needed("ZRANGE", ("{waiters}", "0", "9", "WITHSCORES"), "script"),
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
    if info.mode == "sentinel" or server.get("server_mode") == "sentinel":
        return Finding(
            "version",
            Level.HAZARD,
            "this is a Sentinel, not a data server: it keeps no locks",
            "point tenure at the master the Sentinels name",
        )
    return Finding("version", Level.OK, f"{info.name} {'.'.join(map(str, info.version))}")


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
            "use fences where correctness matters (README, Safety)",
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


def check_acl(acl: AclCheck | CantCheck) -> Finding:
    """Whether the connected user may run every command in :data:`NEEDED_COMMANDS`."""
    if isinstance(acl, CantCheck):
        return Finding("acl", Level.NOTE, f"check skipped: {acl.reason}")
    uses = {n.command: n.used_by for n in NEEDED_COMMANDS}
    library = {c: why for c, why in acl.denied.items() if uses.get(c) != "cli"}
    cli = {c: why for c, why in acl.denied.items() if uses.get(c) == "cli"}
    if library:
        listed = "; ".join(f"{c}: {why}" for c, why in library.items())
        return Finding(
            "acl",
            Level.HAZARD,
            f"user {acl.user!r} may not run what tenure needs: {listed}",
            f"grant them, e.g. ACL SETUSER {acl.user} "
            + " ".join("+" + c.lower().replace(" ", "|") for c in library)
            + ", with key and channel patterns that cover tenure's prefix",
        )
    if cli:
        return Finding(
            "acl",
            Level.NOTE,
            f"user {acl.user!r} may run what the library needs, but not "
            f"{', '.join(cli)} (tenure ls / inspect)",
        )
    return Finding("acl", Level.OK, f"user {acl.user!r} may run every command tenure needs")


def diagnose(facts: Facts) -> Report:
    """Turn the server's replies into findings (no I/O)."""
    findings = [
        check_version(facts.server),
        *check_persistence(facts.persistence, facts.appendfsync),
        check_eviction(facts.memory),
        *check_replication(facts.replication),
        check_cluster(facts.cluster, facts.cluster_info),
        check_acl(facts.acl),
    ]
    return Report(identify(facts.server, facts.replication), tuple(findings))


def _ask(call: Any, *args: Any) -> Any:
    """``call(*args)``, or :class:`CantCheck` if the server refused (denied, renamed)."""
    try:
        return call(*args)
    except redis.exceptions.ResponseError as exc:
        return CantCheck(f"the server refused: {exc}")


def _dryruns(client: redis.Redis, prefix: str) -> AclCheck | CantCheck:
    user = _ask(client.execute_command, "ACL", "WHOAMI")
    if isinstance(user, CantCheck):
        return user
    user = _text(user)
    pipe = client.pipeline(transaction=False)
    for needed in NEEDED_COMMANDS:
        pipe.execute_command(  # type: ignore[no-untyped-call]
            "ACL", "DRYRUN", user, *dryrun_args(needed, prefix)
        )
    replies = pipe.execute(raise_on_error=False)
    first = replies[0]
    if isinstance(first, redis.exceptions.NoPermissionError):
        return CantCheck(f"user {user!r} may not run ACL DRYRUN ({first})")
    if isinstance(first, redis.exceptions.ResponseError):
        text = str(first)
        if "dryrun" in text.lower():
            return CantCheck("this server has no ACL DRYRUN (it came in Redis 7.0)")
        return CantCheck(f"ACL DRYRUN failed: {text}")
    denied: dict[str, str] = {}
    for needed, reply in zip(NEEDED_COMMANDS, replies, strict=True):
        text = str(reply) if isinstance(reply, Exception) else _text(reply)
        if text != "OK":
            denied[needed.command] = text
    return AclCheck(user, denied)


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


def gather_facts(client: redis.Redis, *, prefix: str = "tenure:") -> Facts:
    """Ask the server everything :func:`diagnose` looks at. A reply the server
    refuses becomes :class:`CantCheck`; connection errors propagate."""
    cluster = _info(client, "cluster")
    cluster_on = not isinstance(cluster, CantCheck) and int(cluster.get("cluster_enabled", 0))
    return Facts(
        server=_info(client, "server"),
        persistence=_info(client, "persistence"),
        memory=_info(client, "memory"),
        replication=_info(client, "replication"),
        cluster=cluster,
        cluster_info=_cluster_info(client) if cluster_on else None,
        appendfsync=_config(client, "appendfsync"),
        acl=_dryruns(client, prefix),
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
