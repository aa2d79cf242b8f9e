"""The only I/O of the doctor: asking the server, then :func:`diagnose`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis
import redis.exceptions

from .._keys import DEFAULT_PREFIX
from .._protocol import text
from .acl import acl_probes, check_primitive_acl
from .findings import (
    NEEDED_COMMANDS,
    AclCheck,
    AclNeeds,
    CantCheck,
    Facts,
    PrimitiveAcl,
    Reply,
    Report,
    dryrun_args,
)
from .server import (
    check_acl,
    check_cluster,
    check_eviction,
    check_persistence,
    check_replication,
    check_sentinel,
    check_version,
    identify,
    is_sentinel,
)


def diagnose(facts: Facts) -> Report:
    """Turn the server's replies into findings (no I/O). A Sentinel gets only
    the version and sentinel findings: its other settings hold no locks."""
    if is_sentinel(facts.server):
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
        user = text(user)
    pipe = client.pipeline(transaction=False)
    for line in lines:
        pipe.execute_command("ACL", "DRYRUN", user, *line)  # type: ignore[no-untyped-call]
    replies = pipe.execute(raise_on_error=False)
    first = replies[0]
    if isinstance(first, redis.exceptions.NoPermissionError):
        return CantCheck(f"user {user!r} may not run ACL DRYRUN ({first})")
    if isinstance(first, redis.exceptions.ResponseError):
        message = str(first)
        if "dryrun" in message.lower():
            return CantCheck(
                "this server has no ACL DRYRUN (it came in Redis 7.0); on Redis 6.2 tenure's "
                "scripts check keys and channels before they write, but can't check commands"
            )
        return CantCheck(f"ACL DRYRUN failed: {message}")
    return user, [str(r) if isinstance(r, Exception) else text(r) for r in replies]


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
    for (what, target, _), reply in zip(probes, replies, strict=True):
        if reply != "OK" and (what, target) not in {(w, t) for w, t, _ in denied}:
            denied.append((what, target, reply))
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
    return text(reply[name])


def _cluster_info(client: redis.Redis) -> Reply:
    reply = _ask(client.execute_command, "CLUSTER", "INFO")
    if isinstance(reply, CantCheck | Mapping):
        return reply
    lines = (line.split(":", 1) for line in text(reply).splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in lines}


def gather_facts(
    client: redis.Redis,
    *,
    prefix: str = DEFAULT_PREFIX,
    needs: AclNeeds | None = None,
    acl_user: str | None = None,
) -> Facts:
    """Ask the server everything :func:`diagnose` looks at; with ``needs``, also
    whether the user (``acl_user``, else the connected one) has every
    permission of that primitive. A reply the server refuses becomes
    :class:`CantCheck`; connection errors propagate."""
    server = _info(client, "server")
    if is_sentinel(server):
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
