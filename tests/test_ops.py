"""Pure tests of the operator commands' logic: key grouping, reading a lock with
canned replies, and every doctor rule on canned INFO / CONFIG replies. No Redis."""

from __future__ import annotations

import re
import sys
from collections.abc import Generator
from importlib.resources import files
from typing import Any

import pytest

from tenure._doctor import (
    NEEDED_COMMANDS,
    AclCheck,
    CantCheck,
    Facts,
    Level,
    check_acl,
    check_cluster,
    check_eviction,
    check_persistence,
    check_replication,
    check_version,
    diagnose,
    dryrun_args,
    identify,
    print_report,
    report_lines,
)
from tenure._errors import InvalidArgument
from tenure._keys import LatchKeys, LockKeys
from tenure._ops import (
    LockView,
    Target,
    Waiter,
    describe,
    glob_escape,
    group_keys,
    ls_table,
    parse_key,
    parse_waiters,
    read_lock,
    target,
    targets,
)
from tenure._protocol import Command, Eval, Status
from tenure._scripts import LOCK_INSPECT, RLOCK_INSPECT

# --- keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        ("tenure:{orders:42}", ("Lock", "orders:42", "lock")),
        ("tenure:{orders:42}:fence", ("Lock", "orders:42", "fence")),
        ("tenure:{orders:42}:waiters", ("Lock", "orders:42", "waiters")),
        ("tenure:rlock:{jobs}", ("RLock", "jobs", "lock")),
        ("tenure:rlock:{jobs}:fence", ("RLock", "jobs", "fence")),
        ("tenure:rlock:{jobs}:waiters", ("RLock", "jobs", "waiters")),
        # A name may hold braces and colons: the suffix decides.
        ("tenure:{a}:fence}", ("Lock", "a}:fence", "lock")),
        ("tenure:{a}:fence}:fence", ("Lock", "a}:fence", "fence")),
        ("tenure:{}", None),
        ("tenure:{x}:other", None),
        ("tenure:plain", None),
        ("tenure:sem:{x}", None),
        ("other:{x}", None),
    ],
)
def test_parse_key(key: str, parsed: tuple[str, str, str] | None) -> None:
    assert parse_key(key, "tenure:") == parsed


def test_group_keys_groups_siblings_and_filters_by_name() -> None:
    keys: list[str | bytes] = [
        b"tenure:{orders:1}",
        b"tenure:{orders:1}:fence",
        b"tenure:{orders:1}:waiters",
        b"tenure:{orders:2}:fence",
        b"tenure:rlock:{orders:1}",
        b"tenure:{jobs}",
        b"tenure:\xff{bad}",
        "tenure:unrelated",
    ]
    groups = group_keys(keys, prefix="tenure:", pattern="orders:*")
    assert [(g.kind, g.name, sorted(g.roles)) for g in groups] == [
        ("Lock", "orders:1", ["fence", "lock", "waiters"]),
        ("RLock", "orders:1", ["lock"]),
        ("Lock", "orders:2", ["fence"]),
    ]
    assert [g.name for g in group_keys(keys, prefix="tenure:")] == [
        "jobs",
        "orders:1",
        "orders:1",
        "orders:2",
    ]
    assert group_keys(keys, prefix="tenure:", pattern="ORDERS:*") == []


def test_glob_escape() -> None:
    assert glob_escape("app[1]*?\\:") == "app\\[1\\]\\*\\?\\\\:"
    assert glob_escape("tenure:") == "tenure:"


def main_key(t: Target) -> str:
    return t.keys.count if isinstance(t.keys, LatchKeys) else t.keys.lock


def test_targets() -> None:
    every = targets("x", key=None, prefix="p:")
    assert [(t.kind, main_key(t)) for t in every] == [
        ("Lock", "p:{x}"),
        ("RLock", "p:rlock:{x}"),
        ("FairLock", "p:fair:{x}"),
        ("ReadWriteLock", "p:rwlock:{x}"),
        ("Semaphore", "p:semaphore:{x}"),
        ("CountDownLatch", "p:latch:{x}"),
    ]
    [exact] = targets(None, key="k", prefix="p:")
    assert isinstance(exact.keys, LockKeys)
    assert (exact.kind, exact.keys.lock, exact.keys.fence) == ("Lock", "k", "{k}:fence")
    for kind in ("RLock", "FairLock", "ReadWriteLock", "Semaphore", "CountDownLatch"):
        with pytest.raises(InvalidArgument, match="only a Lock has an exact key"):
            target(kind, "x", key="k", prefix="p:")
    with pytest.raises(InvalidArgument):
        targets(None, key=None, prefix="p:")


# --- reading a lock ------------------------------------------------------------------------


def drive(plan: Generator[Any, Any, Any], replies: list[Any]) -> tuple[list[Any], Any]:
    """Run ``plan`` on canned replies: (the steps it yielded, its result)."""
    steps = [plan.send(None)]
    for reply in replies:
        try:
            steps.append(plan.send(reply))
        except StopIteration as stop:
            return steps, stop.value
    raise AssertionError(f"the plan wants more replies after {steps}")


def test_parse_waiters_flat_or_paired() -> None:
    now = (1000, 500_000)  # 1000.5 s
    flat = [b"hub-1|10000|own.1:tok", b"999500000", b"garbage", b"1000000000"]
    paired = [[b"hub-1|10000|own.1:tok", 999_500_000.0], [b"garbage", 1_000_000_000.0]]
    for raw in (flat, paired):
        assert parse_waiters(raw, now) == (
            Waiter("hub-1", "own.1:tok", 10.0, 1.0),
            Waiter("", "garbage", None, 0.5),
        )
    assert parse_waiters([], now) == ()


def test_read_lock_with_waiters() -> None:
    lock = target("Lock", "orders", prefix="tenure:")
    steps, view = drive(
        read_lock(lock, waiting=5),
        [
            (Status.OK, ["own.1:tok", 9500, 77, 1]),
            [[b"hub|3000|own.2:tok", 1_000_000.0]],
            (3, 0),
        ],
    )
    assert isinstance(steps[0], Eval) and steps[0].script is LOCK_INSPECT
    assert steps[1] == Command(("ZRANGE", "tenure:{orders}:waiters", "0", "4", "WITHSCORES"))
    assert steps[2] == Command(("TIME",))
    assert view == LockView(
        "Lock",
        "orders",
        "tenure:{orders}",
        "own.1:tok",
        1,
        9500,
        77,
        1,
        (Waiter("hub", "own.2:tok", 3.0, 2.0),),
    )
    assert view.held and view.exists and view.ttl == 9.5
    assert view.to_json()["waiting"] == [
        {"waiter": "hub", "holder": "own.2:tok", "lease": 3.0, "queued_for": 2.0}
    ]


def test_read_an_rlock_without_waiters_is_one_call() -> None:
    rlock = target("RLock", "jobs", prefix="tenure:")
    steps, view = drive(read_lock(rlock, waiting=5), [(Status.OK, ["own.1", 2, -1, 5, 0, 0])])
    assert len(steps) == 1 and steps[0].script is RLOCK_INSPECT
    assert (view.kind, view.holder, view.count, view.ttl) == ("RLock", "own.1", 2, None)
    assert view.to_json(waiting=False) == {
        "kind": "RLock",
        "name": "jobs",
        "key": "tenure:rlock:{jobs}",
        "held": True,
        "holder": "own.1",
        "count": 2,
        "ttl": None,
        "fence": 5,
        "waiters": 0,
    }


def test_a_lock_exists_while_any_key_does() -> None:
    free = LockView("Lock", "n", "k", "", 0, -2, 0, 0)
    assert not free.exists and not free.held and free.ttl is None
    assert LockView("Lock", "n", "k", "", 0, -2, 12, 0).exists  # its fence key is left
    assert LockView("Lock", "n", "k", "", 0, -2, 0, 1).exists  # a waiter is queued


def test_text_output() -> None:
    held = LockView("RLock", "jobs", "tenure:rlock:{jobs}", "own.1", 2, 1500, 9, 0)
    free = LockView("Lock", "orders", "tenure:{orders}", "", 0, -2, 8, 0)
    assert describe(held)[:3] == [
        "RLock 'jobs' (key tenure:rlock:{jobs})",
        "  holder   own.1 (hold count 2)",
        "  ttl      1.50s",
    ]
    assert "  holder   free" in describe(free)
    rows = [line.split() for line in ls_table([held, free])]
    assert rows == [
        ["KIND", "NAME", "HOLDER", "TTL", "FENCE", "WAITERS"],
        ["RLock", "jobs", "own.1", "x2", "1.50s", "9", "0"],
        ["Lock", "orders", "free", "-", "8", "0"],
    ]


# --- doctor --------------------------------------------------------------------------------


def levels(findings: list[Any]) -> dict[str, Level]:
    return {f.check: f.level for f in findings}


def test_persistence_rules() -> None:
    off = check_persistence({"aof_enabled": 0}, "always")
    assert levels(off) == {"appendonly": Level.HAZARD}
    assert "granted twice" in off[0].message and "appendonly yes" in off[0].advice
    everysec = check_persistence({"aof_enabled": 1}, "everysec")
    assert levels(everysec) == {"appendfsync": Level.HAZARD}
    assert "everysec" in everysec[0].message
    assert levels(check_persistence({"aof_enabled": 1}, "always")) == {"appendonly": Level.OK}
    unknown = check_persistence({"aof_enabled": 1}, CantCheck("denied"))
    assert levels(unknown) == {"appendfsync": Level.NOTE}
    assert unknown[0].message == "can't check appendfsync: denied"
    assert levels(check_persistence(CantCheck("x"), "always")) == {"appendonly": Level.NOTE}


@pytest.mark.parametrize(
    ("maxmemory", "policy", "level"),
    [
        (0, "noeviction", Level.OK),
        (100, "noeviction", Level.OK),
        (0, "volatile-lru", Level.NOTE),
        (100, "volatile-lru", Level.HAZARD),
        (100, "volatile-ttl", Level.HAZARD),
        (100, "allkeys-lfu", Level.HAZARD),
        (100, "allkeys-random", Level.HAZARD),
    ],
)
def test_eviction_rule(maxmemory: int, policy: str, level: Level) -> None:
    finding = check_eviction({"maxmemory": maxmemory, "maxmemory_policy": policy})
    assert (finding.check, finding.level) == ("maxmemory-policy", level)
    if policy.startswith("allkeys"):
        assert "any key" in finding.message
    assert check_eviction(CantCheck("no")).level is Level.NOTE


def test_replication_rules() -> None:
    assert levels(check_replication({"role": "master", "connected_slaves": 0})) == {
        "replicas": Level.OK
    }
    healthy = {
        "role": "master",
        "connected_slaves": 2,
        "slave0": {"ip": "10.0.0.2", "port": 6379, "state": "online", "offset": 5, "lag": 0},
        "slave1": "ip=10.0.0.3,port=6380,state=online,offset=5,lag=1",  # unparsed form
    }
    [note] = check_replication(healthy)
    assert (note.check, note.level) == ("replicas", Level.NOTE)
    assert "10.0.0.2:6379 (online, lag 0s)" in note.message
    assert "10.0.0.3:6380 (online, lag 1s)" in note.message
    lagging = dict(healthy, slave1="ip=10.0.0.3,port=6380,state=online,offset=5,lag=7")
    syncing = dict(healthy, slave0={"ip": "10.0.0.2", "port": 6379, "state": "wait_bgsave"})
    for info, where in ((lagging, "10.0.0.3:6380"), (syncing, "10.0.0.2:6379")):
        found = check_replication(info)
        assert [(f.check, f.level) for f in found] == [
            ("replicas", Level.NOTE),
            ("replication-lag", Level.HAZARD),
        ]
        assert where in found[1].message
    replica = {"role": "slave", "master_host": "10.0.0.1", "master_port": 6379}
    [hazard] = check_replication(dict(replica, master_link_status="up"))
    assert (hazard.check, hazard.level) == ("replica", Level.HAZARD)
    assert "replica of 10.0.0.1:6379 (link up)" in hazard.message
    assert "10.0.0.1:6379" in hazard.advice


def test_cluster_rule() -> None:
    assert check_cluster({"cluster_enabled": 0}, None).level is Level.OK
    assert check_cluster({"cluster_enabled": 1}, {"cluster_state": "ok"}).level is Level.OK
    failing = check_cluster({"cluster_enabled": 1}, {"cluster_state": "fail"})
    assert failing.level is Level.HAZARD and "fail" in failing.message
    assert check_cluster({"cluster_enabled": 1}, CantCheck("renamed")).level is Level.NOTE


def test_acl_rule() -> None:
    assert check_acl(AclCheck("app", {})).level is Level.OK
    denied = check_acl(AclCheck("app", {"EVALSHA": "no permissions", "SCAN": "no"}))
    assert denied.level is Level.HAZARD
    assert "EVALSHA: no permissions" in denied.message and "SCAN" not in denied.message
    assert "ACL SETUSER app +evalsha" in denied.advice
    cli_only = check_acl(AclCheck("app", {"SCAN": "no"}))
    assert cli_only.level is Level.NOTE and "SCAN" in cli_only.message
    skipped = check_acl(CantCheck("this server has no ACL DRYRUN (it came in Redis 7.0)"))
    assert skipped.level is Level.NOTE and skipped.message.startswith("check skipped:")


def test_version_and_identity() -> None:
    valkey = {"server_name": "valkey", "valkey_version": "9.1.2", "redis_version": "7.2.4"}
    assert check_version(dict(valkey, server_mode="standalone")).level is Level.OK
    old = check_version({"redis_version": "6.0.9", "redis_mode": "standalone"})
    assert old.level is Level.HAZARD and "6.0.9" in old.message
    assert (
        check_version({"redis_version": "7.0.15", "redis_mode": "sentinel"}).level is Level.HAZARD
    )
    assert str(identify(dict(valkey, server_mode="cluster"), {"role": "master"})) == (
        "valkey 9.1.2 (cluster)"
    )
    redis7 = {"redis_version": "7.0.15", "redis_mode": "standalone"}
    assert str(identify(redis7, {"role": "slave"})) == "redis 7.0.15 (replica)"
    assert identify(CantCheck("denied"), {}) is None


def safe_facts(**changes: Any) -> Facts:
    facts: dict[str, Any] = {
        "server": {"redis_version": "7.0.15", "redis_mode": "standalone"},
        "persistence": {"aof_enabled": 1},
        "memory": {"maxmemory": 0, "maxmemory_policy": "noeviction"},
        "replication": {"role": "master", "connected_slaves": 0},
        "cluster": {"cluster_enabled": 0},
        "appendfsync": "always",
        "acl": AclCheck("default", {}),
    }
    return Facts(**(facts | changes))


def test_only_hazards_count() -> None:
    assert diagnose(safe_facts()).hazards == 0
    notes = diagnose(safe_facts(appendfsync=CantCheck("denied"), acl=CantCheck("6.2")))
    assert notes.hazards == 0
    assert {f.level for f in notes.findings} == {Level.OK, Level.NOTE}
    bad = diagnose(safe_facts(persistence={"aof_enabled": 0}, memory={"maxmemory": 1,
                   "maxmemory_policy": "allkeys-lru"}))  # fmt: skip
    assert bad.hazards == 2
    data = bad.to_json()
    assert data["server"] == {"name": "redis", "version": "7.0.15", "mode": "standalone"}
    assert data["hazards"] == 2
    assert {f["check"] for f in data["findings"] if f["level"] == "hazard"} == {
        "appendonly",
        "maxmemory-policy",
    }
    text = [line for _, line in report_lines(bad)]
    assert text[0] == "server: redis 7.0.15 (standalone)"
    assert any(line.startswith("HAZARD  appendonly") for line in text)
    assert text[-1].startswith("2 hazards")


def lua_commands() -> set[str]:
    """Every command a ``.lua`` script calls (redis.call / redis.pcall)."""
    found: set[str] = set()
    for entry in files("tenure._scripts").iterdir():
        if entry.name.endswith(".lua"):
            found |= set(re.findall(r"redis\.p?call\('([A-Za-z]+)'", entry.read_text()))
    return {c.upper() for c in found}


def test_the_needed_commands_are_those_the_scripts_call() -> None:
    listed = {n.command for n in NEEDED_COMMANDS if n.used_by == "script"}
    assert listed == lua_commands()
    assert len({n.command for n in NEEDED_COMMANDS}) == len(NEEDED_COMMANDS)


def test_dryrun_args_use_the_prefix() -> None:
    by_name = {n.command: n for n in NEEDED_COMMANDS}
    assert dryrun_args(by_name["SCRIPT LOAD"], "p:") == ("SCRIPT", "LOAD", "return 1")
    assert dryrun_args(by_name["HGET"], "p:") == ("HGET", "p:rlock:{tenure-doctor}", "owner")
    assert dryrun_args(by_name["PUBLISH"], "p:")[1].startswith("p:{tenure-doctor}:wake:")
    assert dryrun_args(by_name["SCAN"], "a*:") == ("SCAN", "0", "MATCH", "a\\*:*")


def test_the_report_prints_without_rich(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report = diagnose(safe_facts(persistence={"aof_enabled": 0}))
    monkeypatch.setitem(sys.modules, "rich.console", None)  # import fails: no rich
    print_report(report)
    assert capsys.readouterr().out == "".join(text + "\n" for _, text in report_lines(report))
