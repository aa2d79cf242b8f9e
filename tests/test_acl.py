"""Redis ACL users: the least-privilege patterns README documents are enough, and a
missing key, channel or command permission is a clear ``PermissionDenied``
raised before anything in Redis changed (every key's DUMP is compared, read as
the default user)."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from tenure import (
    AsyncLock,
    CountDownLatch,
    Election,
    FencedKey,
    Lock,
    PermissionDenied,
    Semaphore,
)
from tenure._cli import main
from tenure._doctor import AclNeeds, acl_needs
from tenure._server import ServerProcess

MakeUser = Callable[..., redis.Redis]
_names = itertools.count(1)


@pytest.fixture
def acl_user(r: redis.Redis, server: ServerProcess) -> Iterator[MakeUser]:
    """``acl_user(*rules)``: a client logged in as a new user with ``rules``
    (key ``~``, channel ``&`` patterns; every command unless rules say otherwise)."""
    made: list[tuple[str, redis.Redis]] = []

    def make(*rules: str, commands: tuple[str, ...] = ("+@all",)) -> redis.Redis:
        name = f"acl-test-{next(_names)}"
        r.execute_command("ACL", "SETUSER", name, "reset", "on", ">pw", "resetchannels", *rules)  # type: ignore[no-untyped-call]
        r.execute_command("ACL", "SETUSER", name, *commands)  # type: ignore[no-untyped-call]
        client = redis.Redis.from_url(server.url, username=name, password="pw")
        made.append((name, client))
        return client

    yield make
    for name, client in made:
        client.close()
        r.execute_command("ACL", "DELUSER", name)  # type: ignore[no-untyped-call]


@pytest.fixture
def rule_user(r: redis.Redis, server: ServerProcess) -> Iterator[Callable[..., redis.Redis]]:
    """``rule_user(needs, *more)``: a client logged in as a new user made with
    exactly the rule the doctor prints for ``needs`` (then ``more`` rules)."""
    made: list[tuple[str, redis.Redis]] = []

    def make(needs: AclNeeds, *more: str) -> redis.Redis:
        name = f"acl-rule-{next(_names)}"
        rule = needs.rule(name).replace(">PASSWORD", ">pw").split()[2:]
        r.execute_command("ACL", "SETUSER", *rule, *more)  # type: ignore[no-untyped-call]
        client = redis.Redis.from_url(server.url, username=name, password="pw")
        made.append((name, client))
        return client

    yield make
    for name, client in made:
        client.close()
        r.execute_command("ACL", "DELUSER", name)  # type: ignore[no-untyped-call]


def _latch_opens(latch: CountDownLatch) -> None:
    """A waiter of ``latch`` (count 1) is woken by the count-down to zero."""
    assert latch.try_set_count(1)
    opened: list[bool] = []
    listener = threading.Thread(target=lambda: opened.append(latch.wait(timeout=10)))
    listener.start()
    time.sleep(0.3)
    assert latch.count_down() == 0
    listener.join(10)
    assert opened == [True]


def snapshot(r: redis.Redis) -> dict[bytes, bytes | None]:
    """Every key's DUMP (read as the default user)."""
    return {key: r.dump(key) for key in sorted(r.keys("*"))}  # type: ignore[misc]


def version(r: redis.Redis) -> tuple[int, ...]:
    info = r.info("server")
    if info.get("server_name") == "valkey":
        return (7, 2)  # Valkey 7.2+: every Redis 7 ACL feature
    return tuple(int(p) for p in str(info["redis_version"]).split(".")[:2])


def wait_for(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


# The rules docs/guide/servers.md's "ACL" section gives.
EXACT_LOCK = ("~orders:42", "~{orders:42}:key:*", "&{orders:42}:key:wake:*")
NAMED_LOCK = ("~tenure:{orders:42}", "~tenure:{orders:42}:*", "&tenure:{orders:42}:wake:*")
NAMED = ("~tenure:{orders:*}*", "&tenure:{orders:*}*")
FENCED = ("~orders:42:balance", "~{orders:42:balance}:fenced:seen")
SEMAPHORE = (
    "~tenure:{pool}:semaphore",
    "~tenure:{pool}:semaphore:*",
    "&tenure:{pool}:semaphore:wake:*",
)
LATCH = ("~tenure:{job}:latch", "~tenure:{job}:latch:*", "&tenure:{job}:latch:zero")


def test_the_docs_give_these_rules() -> None:
    page = (Path(__file__).parent.parent / "docs" / "guide" / "servers.md").read_text()
    for rule in (EXACT_LOCK, NAMED_LOCK, NAMED, FENCED, SEMAPHORE, LATCH):
        assert f"`{' '.join(rule)}`" in page


def _handoff(lock: Lock, other: Lock) -> None:
    """``other`` waits (in a thread) while ``lock`` is held, and gets it by hand-off."""
    lease = lock.acquire()
    assert lease is not None
    got: list[int] = []

    def wait() -> None:
        taken = other.acquire(timeout=10)
        assert taken is not None
        got.append(taken.fence)
        taken.release()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)  # let it queue
    started = time.monotonic()
    lease.release()
    waiter.join(10)
    assert got and got[0] > lease.fence
    assert time.monotonic() - started < 3  # handed off, not its lease-length timer


def test_least_privilege_exact_key_lock_and_fenced_key(r: redis.Redis, acl_user: MakeUser) -> None:
    user = acl_user(*EXACT_LOCK, *FENCED)
    _handoff(Lock(user, key="orders:42", ttl=5), Lock(user, key="orders:42", ttl=5))
    with Lock(user, key="orders:42") as lease:
        FencedKey(user, "orders:42:balance").set("10", lease.fence)
    assert r.get("orders:42:balance") == b"10"


def test_least_privilege_named_lock(acl_user: MakeUser) -> None:
    user = acl_user(*NAMED_LOCK)
    _handoff(Lock(user, "orders:42", ttl=5), Lock(user, "orders:42", ttl=5))
    family = acl_user(*NAMED)
    _handoff(Lock(family, "orders:7", ttl=5), Lock(family, "orders:7", ttl=5))


def test_least_privilege_semaphore_and_latch(r: redis.Redis, acl_user: MakeUser) -> None:
    user = acl_user(*SEMAPHORE, *LATCH)
    sem = Semaphore(user, "pool", permits=1, ttl=5)
    lease = sem.acquire()
    assert lease is not None
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(bool(sem.acquire(timeout=10))))
    waiter.start()
    time.sleep(0.3)
    lease.release()
    waiter.join(10)
    assert got == [True]

    _latch_opens(CountDownLatch(user, "job"))


def _no_channels(acl_user: MakeUser) -> redis.Redis:
    return acl_user("~*")  # every key, no channel


def test_release_with_a_queued_waiter_needs_the_channel(r: redis.Redis, acl_user: MakeUser) -> None:
    user = _no_channels(acl_user)
    lease = Lock(user, key="orders:42", ttl=5).acquire()  # taking a free lock needs no channel
    assert lease is not None
    waiter = threading.Thread(target=lambda: Lock(r, key="orders:42").acquire(timeout=2))
    waiter.start()
    wait_for(lambda: r.zcard("{orders:42}:key:waiters") == 1)
    before = snapshot(r)
    with pytest.raises(PermissionDenied) as caught:
        lease.release()
    assert snapshot(r) == before  # the lock is still held, the waiter still queued
    assert caught.value.permission == "channel"
    assert caught.value.target.startswith("{orders:42}:key:wake:")
    assert caught.value.target in str(caught.value)
    waiter.join(10)


def test_a_semaphore_release_with_a_queued_waiter_needs_the_channel(
    r: redis.Redis, acl_user: MakeUser
) -> None:
    user = _no_channels(acl_user)
    lease = Semaphore(user, "pool", permits=1, ttl=5).acquire()
    assert lease is not None
    waiter = threading.Thread(target=lambda: Semaphore(r, "pool", permits=1).acquire(timeout=2))
    waiter.start()
    wait_for(lambda: r.zcard("tenure:{pool}:semaphore:waiters") == 1)
    before = snapshot(r)
    with pytest.raises(PermissionDenied) as caught:
        lease.release()
    assert snapshot(r) == before  # the permit is still held, the waiter still queued
    assert caught.value.permission == "channel"
    assert caught.value.target.startswith("tenure:{pool}:semaphore:wake:")
    waiter.join(10)


def test_count_down_to_zero_needs_the_channel(r: redis.Redis, acl_user: MakeUser) -> None:
    user = _no_channels(acl_user)
    assert CountDownLatch(r, "job").try_set_count(2)
    assert CountDownLatch(user, "job").count_down() == 1  # not zero: nobody is told
    before = snapshot(r)
    with pytest.raises(PermissionDenied) as caught:
        CountDownLatch(user, "job").count_down()
    assert snapshot(r) == before
    assert (caught.value.permission, caught.value.target) == ("channel", "tenure:{job}:latch:zero")


def test_a_wait_without_the_channel_fails_at_once(r: redis.Redis, acl_user: MakeUser) -> None:
    user = _no_channels(acl_user)
    holder = Lock(r, key="orders:42", ttl=5).acquire()
    assert holder is not None
    before = snapshot(r)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            Lock(user, key="orders:42").acquire(timeout=8)
        except BaseException as exc:
            errors.append(exc)

    started = time.monotonic()
    waiter = threading.Thread(target=wait)
    waiter.start()
    waiter.join(10)
    assert time.monotonic() - started < 4  # not the 8 s timeout, nor the lease
    assert len(errors) == 1 and isinstance(errors[0], PermissionDenied)
    assert errors[0].permission == "channel"
    assert errors[0].target.startswith("{orders:42}:key:wake:")
    assert snapshot(r) == before  # not queued


def test_an_async_wait_without_the_channel_fails_at_once(
    r: redis.Redis, acl_user: MakeUser, server: ServerProcess
) -> None:
    user = _no_channels(acl_user)
    name = user.acl_whoami()
    holder = Lock(r, "jobs", ttl=5).acquire()
    assert holder is not None
    before = snapshot(r)

    async def wait() -> PermissionDenied:
        client = redis.asyncio.Redis.from_url(server.url, username=name, password="pw")
        try:
            with pytest.raises(PermissionDenied) as caught:
                await AsyncLock(client, "jobs").acquire(timeout=8)
            return caught.value
        finally:
            await client.aclose()

    started = time.monotonic()
    error = asyncio.run(wait())
    assert time.monotonic() - started < 4
    assert error.permission == "channel" and error.target.startswith("tenure:{jobs}:wake:")
    assert snapshot(r) == before


def test_a_missing_helper_key_is_named(r: redis.Redis, acl_user: MakeUser) -> None:
    user = acl_user("~orders:42", "~orders:42:balance", "&*")
    with pytest.raises(PermissionDenied) as caught:
        Lock(user, key="orders:42").acquire(blocking=False)
    assert caught.value.permission in ("read", "key")
    assert caught.value.target.startswith("{orders:42}:key:")
    assert caught.value.target in str(caught.value)
    with pytest.raises(PermissionDenied) as caught:
        FencedKey(user, "orders:42:balance").set("1", 1)
    assert caught.value.target == "{orders:42:balance}:fenced:seen"
    assert snapshot(r) == {}


def test_a_read_only_helper_key_is_named(r: redis.Redis, acl_user: MakeUser) -> None:
    if version(r) < (7, 0):
        pytest.skip("Redis 6.2's ACL has no read-only key patterns (%R~)")
    waiters, delay = "~{orders:42}:key:waiters", "~{orders:42}:key:delay"
    user = acl_user("~orders:42", waiters, delay, "%R~{orders:42}:key:fence", "&*")
    with pytest.raises(PermissionDenied) as caught:
        Lock(user, key="orders:42").acquire(blocking=False)
    assert (caught.value.permission, caught.value.target) == ("write", "{orders:42}:key:fence")
    assert snapshot(r) == {}


def test_a_missing_command_is_named(r: redis.Redis, acl_user: MakeUser) -> None:
    if version(r) < (7, 0):
        pytest.skip("Redis 6.2 has no redis.acl_check_cmd: a script can't check a command")
    user = acl_user("~*", "&*", commands=("+@all", "-zadd"))
    with pytest.raises(PermissionDenied) as caught:  # (the lock is free: ZADD is not run)
        Lock(user, key="orders:42").acquire(blocking=False)
    assert (caught.value.permission, caught.value.target) == ("command", "ZADD")
    assert snapshot(r) == {}


def test_an_uncontended_cycle_checks_only_what_it_may_run(
    r: redis.Redis, acl_user: MakeUser
) -> None:
    """A named Lock's acquire that does not queue and its release with nobody
    queued check only the commands they may run after their first write: a
    user without ZPOPMIN (what only a hand-off runs) takes and releases the
    lock; a release that would hand it over is refused whole, naming ZPOPMIN,
    with the lock still held and the waiter still queued."""
    if version(r) < (7, 0):
        pytest.skip("Redis 6.2 has no redis.acl_check_cmd: a script can't check a command")
    user = acl_user("~*", "&*", commands=("+@all", "-zpopmin"))
    lock = Lock(user, "lean", ttl=5)
    lease = lock.acquire(blocking=False)
    assert lease is not None
    lease.release()
    assert not r.exists("tenure:{lean}")
    lease = lock.acquire(blocking=False)
    assert lease is not None
    waiter = threading.Thread(target=lambda: Lock(r, "lean").acquire(timeout=3))
    waiter.start()
    wait_for(lambda: r.zcard("tenure:{lean}:waiters") == 1)
    before = snapshot(r)
    with pytest.raises(PermissionDenied) as caught:
        lease.release()
    assert (caught.value.permission, caught.value.target) == ("command", "ZPOPMIN")
    assert snapshot(r) == before  # still held, the waiter still queued
    r.delete("tenure:{lean}")  # (the waiter takes it as its own timer fires)
    waiter.join(10)


def test_an_uncontended_read_write_cycle_checks_only_what_it_may_run(
    r: redis.Redis, acl_user: MakeUser
) -> None:
    """A read-write hold begun by an attempt that does not queue, and its release
    with nobody queued, check only the commands they may run after their first
    write: a user without HDEL (what only a release that leaves other holds or
    hands the lock on runs) takes and releases either mode; a release that
    would hand the lock on is refused whole, naming HDEL, with the hold still
    there and the waiter still queued."""
    from tenure import ReadWriteLock

    if version(r) < (7, 0):
        pytest.skip("Redis 6.2 has no redis.acl_check_cmd: a script can't check a command")
    user = acl_user("~*", "&*", commands=("+@all", "-hdel"))
    rw = ReadWriteLock(user, "lean", ttl=5)
    for view in (rw.read, rw.write):
        lease = view.acquire(blocking=False)
        assert lease is not None
        lease.release()
        assert not r.exists("tenure:{lean}:rwlock")
    lease = rw.write.acquire(blocking=False)
    assert lease is not None
    waiter = threading.Thread(target=lambda: ReadWriteLock(r, "lean").read.acquire(timeout=3))
    waiter.start()
    wait_for(lambda: r.zcard("tenure:{lean}:rwlock:waiters") == 1)
    before = snapshot(r)
    with pytest.raises(PermissionDenied) as caught:
        lease.release()
    assert (caught.value.permission, caught.value.target) == ("command", "HDEL")
    assert snapshot(r) == before  # still held, the waiter still queued
    r.delete("tenure:{lean}:rwlock", "tenure:{lean}:rwlock:holds")  # (the waiter's timer takes it)
    waiter.join(10)


def test_an_uncontended_semaphore_cycle_checks_only_what_it_may_run(
    r: redis.Redis, acl_user: MakeUser
) -> None:
    """A Semaphore's acquire that does not queue and its release with nobody
    queued check only the commands they may run after their first write: a
    user without TYPE (what only a call that finds waiters or ended leases
    runs) takes and gives back permits; a release that would hand them on is
    refused whole, naming TYPE, with the permit still held and the waiter still
    queued."""
    if version(r) < (7, 0):
        pytest.skip("Redis 6.2 has no redis.acl_check_cmd: a script can't check a command")
    user = acl_user("~*", "&*", commands=("+@all", "-type"))
    sem = Semaphore(user, "lean", permits=1, ttl=5)
    lease = sem.acquire(blocking=False)
    assert lease is not None
    lease.release()
    assert not r.exists("tenure:{lean}:semaphore")
    lease = sem.acquire(blocking=False)
    assert lease is not None
    waiter = threading.Thread(target=lambda: Semaphore(r, "lean", permits=1).acquire(timeout=3))
    waiter.start()
    wait_for(lambda: r.zcard("tenure:{lean}:semaphore:waiters") == 1)
    before = snapshot(r)
    with pytest.raises(PermissionDenied) as caught:
        lease.release()
    assert (caught.value.permission, caught.value.target) == ("command", "TYPE")
    assert snapshot(r) == before  # still held, the waiter still queued
    r.delete("tenure:{lean}:semaphore")  # (the waiter's timer takes it)
    waiter.join(10)


# --- tenure doctor --name / --key ------------------------------------------------------------


def test_the_doctors_rules_are_enough(
    r: redis.Redis, rule_user: Callable[..., redis.Redis]
) -> None:
    """Users made with exactly the rule the doctor prints (commands too) can use
    each primitive, waits and hand-offs included."""
    lock_user = rule_user(acl_needs("Lock", key="orders:42"))
    _handoff(Lock(lock_user, key="orders:42", ttl=5), Lock(lock_user, key="orders:42", ttl=5))
    named_user = rule_user(acl_needs("Lock", name="jobs"))
    _handoff(Lock(named_user, "jobs", ttl=5), Lock(named_user, "jobs", ttl=5))
    fenced_user = rule_user(acl_needs("FencedKey", key="orders:42:balance"))
    FencedKey(fenced_user, "orders:42:balance").set("7", 1)
    assert r.get("orders:42:balance") == b"7"
    sem_user = rule_user(acl_needs("Semaphore", name="pool"))
    sem = Semaphore(sem_user, "pool", permits=1, ttl=5)
    lease = sem.acquire()
    assert lease is not None
    lease.release()
    _latch_opens(CountDownLatch(rule_user(acl_needs("CountDownLatch", name="job")), "job"))


def test_the_doctors_rule_is_enough_for_an_election(
    r: redis.Redis, rule_user: Callable[..., redis.Redis]
) -> None:
    """A user made with the doctor's rule for an election campaigns, proclaims,
    observes (the feed channel) and hands over to the next candidate."""
    needs = acl_needs("Election", name="jobs")
    assert "tenure:{jobs}:election:feed" in needs.channel_patterns
    user = rule_user(needs)
    first = Election(user, "jobs", ttl=5, label="a").campaign(timeout=5)
    assert first is not None
    first.proclaim("addr")
    events = Election(user, "jobs").observe()
    assert next(events).value == b"addr"
    second: list[Any] = []
    waiter = threading.Thread(
        target=lambda: second.append(Election(user, "jobs", ttl=5).campaign(timeout=5))
    )
    waiter.start()
    wait_for(lambda: r.zcard("tenure:{jobs}:election:waiters") == 1)
    first.resign()
    waiter.join(10)
    assert second and second[0] is not None
    assert [next(events).change, next(events).change] == ["resigned", "elected"]
    second[0].resign()


def test_acl_needs_patterns() -> None:
    exact = acl_needs("Lock", key="orders:42")
    assert exact.key_patterns == ("orders:42", "{orders:42}:key:*")
    assert exact.channel_patterns == ("{orders:42}:key:wake:*",)
    named = acl_needs("Semaphore", name="pool", prefix="app:")
    assert named.key_patterns == ("app:{pool}:semaphore", "app:{pool}:semaphore:*")
    assert named.channel_patterns == ("app:{pool}:semaphore:wake:*",)
    assert acl_needs("FencedKey", key="a*b").key_patterns == ("a\\*b", "{a\\*b}:fenced:seen")
    braces = acl_needs("Lock", key="app:{user:1}:lock")
    assert braces.key_patterns == ("app:{user:1}:lock", "{user:1}:key:app:%7Buser:1%7D:lock:*")
    assert "ZPOPMIN" in exact.commands and "ZPOPMIN" not in named.commands
    for needs in (exact, named):
        assert {"EVALSHA", "SUBSCRIBE", "PUBLISH", "ZADD"} <= set(needs.commands)
        assert needs.optional == ("WAIT", "WAITAOF")
        assert "+wait" not in needs.rule() and "add +wait" in needs.advice()


def test_doctor_names_what_a_user_lacks(
    r: redis.Redis, server: ServerProcess, acl_user: MakeUser, capsys: pytest.CaptureFixture[str]
) -> None:
    user = acl_user("~orders:42", "~{orders:42}:key:*", commands=("+@all", "-zpopmin", "-wait"))
    name = user.acl_whoami()
    name = name.decode() if isinstance(name, bytes) else str(name)
    status = main(
        ["--url", server.url, "doctor", "--key", "orders:42", "--acl-user", name, "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    found = {(f["check"], f["level"]): f["message"] for f in report["findings"]}
    rule = found[("acl-rule", "note")]
    assert "~orders:42 ~{orders:42}:key:* &{orders:42}:key:wake:*" in rule
    assert "add +wait" in rule
    if version(r) < (7, 0):
        assert "no ACL DRYRUN" in found[("acl-primitive", "note")]
        return
    assert status == 1
    lacks = found[("acl-primitive", "hazard")]
    assert "channel '{orders:42}:key:wake:" in lacks and "command ZPOPMIN" in lacks
    assert "read key" not in lacks and "write key" not in lacks  # the keys are there
    assert "WAIT" in found[("acl-primitive", "note")]
    status = main(["--url", server.url, "doctor", "--key", "orders:42", "--json"])
    report = json.loads(capsys.readouterr().out)
    levels = {f["check"]: f["level"] for f in report["findings"]}
    assert levels["acl-primitive"] == "ok"  # the default user has everything


def test_min_replicas_without_wait_is_named(r: redis.Redis, acl_user: MakeUser) -> None:
    user = acl_user("~*", "&*", commands=("+@all", "-wait"))
    lock = Lock(user, key="orders:42", min_replicas=1, replica_timeout=0.2)
    with pytest.raises(PermissionDenied) as caught:
        lock.acquire(blocking=False)
    assert (caught.value.permission, caught.value.target) == ("command", "WAIT")
    assert not r.exists("orders:42")  # the lease was given back, as after too few replicas


# --- found by a hostile run ---------------------------------------------------------


def test_the_doctors_rule_runs_in_redis_cli_for_a_name_with_white_space(
    r: redis.Redis, server: ServerProcess
) -> None:
    """The printed rule is one redis-cli command line even for odd names."""
    import shutil
    import subprocess

    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("no redis-cli")
    host, port = server.url.split("//")[1].split("/")[0].rsplit(":", 1)
    try:
        for name in ("nightly report", 'tab\there "q"'):
            rule = acl_needs("Lock", name=name).rule("acl-odd").replace(">PASSWORD", ">pw")
            done = subprocess.run(
                [cli, "-h", host, "-p", port], input=rule + "\n", capture_output=True, text=True
            )
            assert done.stdout.strip() == "OK", (rule, done.stdout, done.stderr)
            user = redis.Redis.from_url(server.url, username="acl-odd", password="pw")
            _handoff(Lock(user, name, ttl=5), Lock(user, name, ttl=5))
            user.close()
    finally:
        r.execute_command("ACL", "DELUSER", "acl-odd")  # type: ignore[no-untyped-call]


def test_another_names_key_is_named_with_the_doctors_own_rule(
    r: redis.Redis, rule_user: Callable[..., redis.Redis]
) -> None:
    """The rule grants no +eval: the refused key is still named (found with EVALSHA)."""
    user = rule_user(acl_needs("Lock", name="a"))
    before = snapshot(r)
    with pytest.raises(PermissionDenied) as caught:
        Lock(user, "b", ttl=5).acquire(blocking=False)
    assert caught.value.target.startswith("tenure:{b}") and "key" in str(caught.value)
    assert snapshot(r) == before


@pytest.mark.parametrize("command", ["evalsha", "info", "get"])
def test_a_missing_basic_command_is_a_permission_error(
    r: redis.Redis, acl_user: MakeUser, command: str
) -> None:
    """Not redis-py's NoPermissionError, nor (Redis 6.2, a refused GET) a wrong type."""
    user = acl_user("~*", "&*", commands=("+@all", f"-{command}"))
    before = snapshot(r)
    with pytest.raises(PermissionDenied) as caught:
        Lock(user, "basic", ttl=5).acquire(blocking=False)
    assert caught.value.permission == "command"
    if version(r) >= (7, 0) or command != "get":
        assert caught.value.target == command.upper()
    else:  # Redis 6.2 does not name a command refused inside a script, nor
        # check commands before the script writes (documented in README's ACL)
        assert "script" in caught.value.target
        return
    assert snapshot(r) == before


@pytest.mark.parametrize("command", ["pttl", "zcard"])
def test_a_read_refused_before_the_first_write_is_a_permission_error(
    r: redis.Redis, acl_user: MakeUser, command: str
) -> None:
    """A command a script runs before its first write without checking it
    first (the lock-delay's PTTL of an acquire, the queue's ZCARD of a
    release): refused, it is PermissionDenied naming it (Redis 6.2 names
    none: it can't check a command), not the client library's error, and
    nothing was written."""
    user = acl_user("~*", "&*", commands=("+@all", f"-{command}"))
    lock = Lock(user, "read-first", ttl=5)
    lease = Lock(r, "read-first", ttl=5).acquire() if command == "pttl" else lock.acquire()
    assert lease is not None
    if command == "pttl":
        lease.release()
    before = snapshot(r)
    with pytest.raises(PermissionDenied) as caught:
        if command == "pttl":
            lock.acquire(blocking=False)
        else:
            lease.release()
    assert caught.value.permission == "command"
    if version(r) >= (7, 0):
        assert caught.value.target == command.upper()
    else:
        assert "script" in caught.value.target
    assert snapshot(r) == before


@pytest.mark.parametrize("op", ["acquire", "release"])
@pytest.mark.parametrize("command", ["get", "set"])
@pytest.mark.parametrize("kind", ["Lock", "RLock", "FairLock"])
def test_a_command_refused_unchecked_is_named_not_a_key(
    r: redis.Redis, acl_user: MakeUser, kind: str, command: str, op: str
) -> None:
    """A command a script runs without checking it first (a quick path's GET
    or SET), refused, is PermissionDenied naming that command (Redis 7.0's
    refusal names none: the client asks the server which of the script's
    commands the user lacks), not a key the user may read and write; nothing
    was written."""
    from tenure import FairLock, RLock

    if version(r) < (7, 0):
        pytest.skip("Redis 6.2 has no redis.acl_check_cmd: a script can't check a command")
    user = acl_user("~*", "&*")
    kinds: dict[str, Callable[..., Any]] = {"Lock": Lock, "RLock": RLock, "FairLock": FairLock}
    lock = kinds[kind](user, "unchecked", ttl=5)
    lease = lock.acquire(blocking=False) if op == "release" else None
    username = user.connection_pool.connection_kwargs["username"]
    r.execute_command("ACL", "SETUSER", username, f"-{command}")  # type: ignore[no-untyped-call]
    before = snapshot(r)
    with pytest.raises(PermissionDenied) as caught:
        if lease is None:
            lock.acquire(blocking=False)
        else:
            lease.release()
    assert (caught.value.permission, caught.value.target) == ("command", command.upper())
    assert snapshot(r) == before


def test_a_refused_fence_read_writes_nothing_even_on_redis_62(
    r: redis.Redis, acl_user: MakeUser
) -> None:
    """A Lock's acquire whose user may not GET reads the fence key before it
    takes the lock: refused, nothing is written, even on Redis 6.2, which
    can't check a command up front (not a lock held by a token the caller
    was told it did not get)."""
    user = acl_user("~*", "&*", commands=("+@all", "-get"))
    before = snapshot(r)
    with pytest.raises(PermissionDenied) as caught:
        Lock(user, "fence-read", ttl=30).acquire(blocking=False)
    assert caught.value.permission == "command"
    assert snapshot(r) == before


@pytest.mark.parametrize("mode", ["read", "write"])
def test_a_read_write_release_refused_writes_nothing_even_on_redis_62(
    r: redis.Redis, acl_user: MakeUser, mode: str
) -> None:
    """A ReadWriteLock hold's last release by a user who may not DEL is
    refused with nothing written, even on Redis 6.2 (which can't check a
    command up front): not its retry record written and the hold kept, which
    a retry of the same call would then take for done."""
    from tenure import ReadWriteLock

    user = acl_user("~*", "&*", commands=("+@all", "-del"))
    lease = getattr(ReadWriteLock(user, "no-del", ttl=30), mode).acquire(blocking=False)
    assert lease is not None
    before = snapshot(r)
    with pytest.raises(PermissionDenied) as caught:
        lease.release()
    assert caught.value.permission == "command"  # (Redis 6.2 can't say which)
    assert snapshot(r) == before


def test_an_rlock_hold_never_lacks_its_expiry(r: redis.Redis, acl_user: MakeUser) -> None:
    """An RLock's first hold by a user who may not PEXPIRE is refused with
    nothing written, even on Redis 6.2 (which can't check a command up
    front): not a hold without expiry, which no one would ever end."""
    from tenure import RLock

    user = acl_user("~*", "&*", commands=("+@all", "-pexpire"))
    with pytest.raises(PermissionDenied):
        RLock(user, "forever", ttl=5).acquire(blocking=False)
    assert not r.exists("tenure:{forever}:rlock")
    assert all(r.pttl(key) > 0 for key in r.keys("*"))


@pytest.mark.parametrize("queued", [False, True])
@pytest.mark.parametrize("mode", ["read", "write"])
def test_a_read_write_hold_never_lacks_its_expiry(
    r: redis.Redis, acl_user: MakeUser, mode: str, queued: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ReadWriteLock's first hold by a user who may not PEXPIREAT is refused
    with no hold written, even on Redis 6.2 (which can't check a command up
    front), by the acquire script alone: the give-back of a failed attempt
    that follows is best effort (the process may die first), and a hold (the
    lock hash, the holds key) without expiry would stay until someone else
    takes the lock. ``queued``: the hold is taken by an attempt that queued
    (a dead writer's lock-delay kept it out first)."""
    from tenure import ReadWriteLock
    from tenure._plans import rwlock as rwlock_plans

    def never(self: object, member: str, in_flight: bool) -> Iterator[Any]:
        yield from ()  # (the give-back does not come)

    monkeypatch.setattr(rwlock_plans._RWContender, "leave", never)
    user = acl_user("~*", "&*", commands=("+@all", "-pexpireat"))
    if queued:
        r.set("tenure:{forever}:rwlock:delay", "dead", px=200)
    with pytest.raises(PermissionDenied):
        getattr(ReadWriteLock(user, "forever", ttl=5), mode).acquire(timeout=3)
    assert not r.exists("tenure:{forever}:rwlock", "tenure:{forever}:rwlock:holds")
    assert all(r.pttl(key) > 0 for key in r.keys("*"))


def test_a_prefix_with_an_exact_key_is_refused(r: redis.Redis) -> None:
    from tenure import InvalidArgument

    with pytest.raises(InvalidArgument, match="prefix='app:' can't go with key='k'"):
        Lock(r, key="k", prefix="app:")
    Lock(r, key="k", prefix="tenure:")  # the default, given: no harm


@pytest.mark.parametrize("kind", ["Semaphore", "ReadWriteLock", "Lock", "FairLock", "RLock"])
def test_a_waiter_that_may_not_publish_is_never_queued(
    r: redis.Redis, rule_user: Callable[..., redis.Redis], kind: str
) -> None:
    """Without +publish, a waiting acquire is refused before it queues itself:
    no entry is left for a release to hand the lock to."""
    from tenure import FairLock, ReadWriteLock, RLock

    user = rule_user(acl_needs(kind, name="pool"), "-publish")
    holders: dict[str, Callable[[], Any]] = {
        "Semaphore": lambda: Semaphore(r, "pool", 1, ttl=30).acquire(),
        "ReadWriteLock": lambda: ReadWriteLock(r, "pool", ttl=30).write.acquire(),
        "Lock": lambda: Lock(r, "pool", ttl=30).acquire(),
        "FairLock": lambda: FairLock(r, "pool", ttl=30).acquire(),
        "RLock": lambda: RLock(r, "pool", ttl=30).acquire(),
    }
    waiters: dict[str, Callable[[], Any]] = {
        "Semaphore": lambda: Semaphore(user, "pool", 1, ttl=30),
        "ReadWriteLock": lambda: ReadWriteLock(user, "pool", ttl=30).read,
        "Lock": lambda: Lock(user, "pool", ttl=30),
        "FairLock": lambda: FairLock(user, "pool", ttl=30),
        "RLock": lambda: RLock(user, "pool", ttl=30),
    }
    taken: list[Any] = []  # held by another owner (thread)
    t = threading.Thread(target=lambda: taken.append(holders[kind]()))
    t.start()
    t.join()
    held, waiting = taken[0], waiters[kind]()
    assert held is not None
    before = snapshot(r)
    with pytest.raises(PermissionDenied, match="PUBLISH"):
        waiting.acquire(timeout=1)
    assert snapshot(r) == before  # not queued
    held.release()


#: Per kind: its class, its waiters key and wake prefix for the name "deep",
#: and its deadlines key (a FairLock's waiter is live while its deadline is ahead).
_QUEUES: dict[str, tuple[str, str, str | None]] = {
    "Lock": ("tenure:{deep}:waiters", "tenure:{deep}:wake:", None),
    "RLock": ("tenure:{deep}:rlock:waiters", "tenure:{deep}:rlock:wake:", None),
    "FairLock": (
        "tenure:{deep}:fair:waiters",
        "tenure:{deep}:fair:wake:",
        "tenure:{deep}:fair:deadlines",
    ),
}

#: The other kinds whose release hands on to several waiters: a member per
#: waiter id (a reader; one permit).
_OTHER_QUEUES: dict[str, tuple[str, str, str]] = {
    "ReadWriteLock": (
        "tenure:{deep}:rwlock:waiters",
        "tenure:{deep}:rwlock:wake:",
        "{w}|5000|r:tok-{w}:1",
    ),
    "Semaphore": (
        "tenure:{deep}:semaphore:waiters",
        "tenure:{deep}:semaphore:wake:",
        "{w}|5000|1|tok-{w}",
    ),
}


def _queue(r: redis.Redis, kind: str, *waiters: str) -> None:
    """Queue ``waiters`` (waiter ids, first served first) on ``kind``'s lock "deep"."""
    queue, _, deadlines = _QUEUES[kind]
    for i, w in enumerate(waiters, 1):
        member = f"{w}|5000|tok-{w}"
        r.zadd(queue, {member: i})
        if deadlines:
            r.zadd(deadlines, {member: int(time.time() * 1000) + 60_000})


@pytest.mark.parametrize("kind", list(_QUEUES))
def test_a_release_may_hand_past_waiters_it_may_not_tell(
    r: redis.Redis, acl_user: MakeUser, kind: str
) -> None:
    """A release checks up front the channels of the first two waiters; a
    waiter further back that it may not tell (reached when those two are
    gone) is dropped as one nobody hears, and the release completes: it
    never stops half-way."""
    from tenure import FairLock, RLock

    kinds: dict[str, Any] = {"Lock": Lock, "RLock": RLock, "FairLock": FairLock}
    queue, prefix, _ = _QUEUES[kind]
    user = acl_user("~*", f"&{prefix}gone*", f"&{prefix}live*")
    lease = kinds[kind](user, "deep", ttl=30).acquire()
    assert lease is not None
    _queue(r, kind, "gone1", "gone2", "far3")  # nobody listens to any of them
    lease.release()
    assert r.zcard(queue) == 0  # all three dropped: none could be told
    assert kinds[kind](r, "deep", ttl=30).locked() is False


@pytest.mark.parametrize("kind", list(_QUEUES))
def test_a_hand_off_skips_telling_a_next_waiter_it_may_not_tell(
    r: redis.Redis, acl_user: MakeUser, kind: str
) -> None:
    """The waiter after the one handed the lock is told to recheck only when
    the releasing user may tell it; otherwise it stays queued untold (it looks
    again when its own wait ends) and the hand-off stands."""
    from tenure import FairLock, RLock

    kinds: dict[str, Any] = {"Lock": Lock, "RLock": RLock, "FairLock": FairLock}
    queue, prefix, _ = _QUEUES[kind]
    user = acl_user("~*", f"&{prefix}gone*", f"&{prefix}live*")
    lease = kinds[kind](user, "deep", ttl=30).acquire()
    assert lease is not None
    listener = r.pubsub()  # type: ignore[no-untyped-call]
    listener.subscribe(f"{prefix}live2")
    assert listener.get_message(timeout=5) is not None  # (the subscription's confirmation)
    try:
        _queue(r, kind, "gone1", "live2", "far3")
        lease.release()
        told = listener.get_message(timeout=5)
        if told is not None and told["data"] == b"probe":  # (Redis 6.2's check)
            told = listener.get_message(timeout=5)
        assert told is not None and told["data"].endswith(b" tok-live2")
        queued: list[bytes] = r.zrange(queue, 0, -1)  # type: ignore[assignment]
        assert [m.split(b"|")[0] for m in queued] == [b"far3"]
        lock_key = queue.removesuffix(":waiters")
        if kind == "RLock":  # a hash {owner: hold count}
            assert r.hgetall(lock_key) == {b"tok-live2": b"1"}
        else:
            assert r.get(lock_key) == b"tok-live2"
    finally:
        listener.close()


@pytest.mark.parametrize("kind", list(_OTHER_QUEUES))
def test_a_grant_round_passes_over_waiters_it_may_not_tell(
    r: redis.Redis, acl_user: MakeUser, kind: str
) -> None:
    """A ReadWriteLock's or Semaphore's release may hand on to several waiters
    in one round; a waiter beyond the two whose channels it checked up front
    that the releasing user may not tell is passed over as a gone one, and
    the release completes: it never stops half-way."""
    from tenure import ReadWriteLock

    queue, prefix, form = _OTHER_QUEUES[kind]
    user = acl_user("~*", f"&{prefix}gone*", f"&{prefix}live*")
    lease: Any = (
        Semaphore(user, "deep", 1, ttl=30).acquire()
        if kind == "Semaphore"
        else ReadWriteLock(user, "deep", ttl=30).write.acquire()
    )
    assert lease is not None
    for i, w in enumerate(("gone1", "gone2", "far3"), 1):
        r.zadd(queue, {form.format(w=w): i})
    lease.release()
    assert r.zcard(queue) == 0  # all three dropped: none could be told
    assert r.exists(queue.removesuffix(":waiters")) == 0  # nobody holds it
