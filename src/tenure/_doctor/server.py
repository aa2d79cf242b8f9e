"""The server checks: version, persistence, eviction, replication, cluster, ACL;
and on a Sentinel, what it monitors."""

from __future__ import annotations

from collections.abc import Mapping

from .._errors import UnsupportedServer
from .._plans.server import parse_info
from .._protocol import text
from .findings import (
    NEEDED_COMMANDS,
    AclCheck,
    CantCheck,
    Finding,
    Level,
    Reply,
    ServerIdentity,
    _cant,
)


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


def is_sentinel(server: Reply) -> bool:
    """Whether ``INFO server`` is a Sentinel's."""
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
        f"{name!s} (master {text(state.get('ip', '?'))}:{text(state.get('port', '?'))})"
        for name, state in sorted(masters.items())
    ]
    first = sorted(masters)[0]
    return Finding(
        "sentinel",
        Level.NOTE,
        f"it monitors {', '.join(named)}; after a failover it names the new master",
        f"give tenure the client of redis.sentinel.Sentinel([...]).master_for({first!r}), "
        "which follows failovers, and acquire with min_replicas=1 "
        "(docs/guide/servers.md, Sentinel)",
    )


def check_version(server: Reply) -> Finding:
    """Whether tenure supports this server (Redis >= 6.2, Valkey >= 7.2)."""
    if isinstance(server, CantCheck):
        return _cant("version", server)
    try:
        info = parse_info(dict(server))
    except UnsupportedServer as exc:
        return Finding("version", Level.HAZARD, str(exc), "upgrade the server")
    if is_sentinel(server):
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
    policy = text(memory.get("maxmemory_policy", "noeviction"))
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
        return {str(k): text(v) for k, v in value.items()}
    pairs = (p.split("=", 1) for p in text(value).split(",") if "=" in p)
    return {k: v for k, v in pairs}


#: Replication lag (s) above which a replica is a hazard.
MAX_LAG = 1


def check_replication(replication: Reply) -> list[Finding]:
    """The server's role and its replicas: a replica is read-only for locks, and a
    lagging replica promoted by a failover has lost the recent locks."""
    if isinstance(replication, CantCheck):
        return [_cant("replication", replication)]
    if replication.get("role") == "slave":
        master = f"{text(replication.get('master_host', '?'))}:"
        master += text(replication.get("master_port", "?"))
        link = text(replication.get("master_link_status", "?"))
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
            "and use fences where correctness matters (docs/safety-in-plain-words.md)",
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
    state = text(cluster_info.get("cluster_state", "?"))
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
