"""Holder labels on real servers: every primitive's leases carry their
holder's label (inside the token, an RLock's field, a read-write hold's id),
and ``info()``, ``tenure inspect``, ``ls``, ``release --force`` and the lease
errors show it. Odd labels are cleaned and cut, and never change who owns
what. (The pure encoding: ``tests/test_label.py``.)"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio

from tenure import (
    AcquireTimeout,
    AsyncFairLock,
    AsyncLock,
    AsyncReadWriteLock,
    AsyncRLock,
    AsyncSemaphore,
    FairLock,
    InvalidArgument,
    Lock,
    LockLostError,
    MultiLock,
    ReadWriteLock,
    Redlock,
    RLock,
    Semaphore,
)
from tenure._cli import main
from tenure._label import (
    MAX_ENCODED,
    SEPARATOR,
    clean_label,
    default_label,
    label_suffix,
    split_holder,
)
from tenure._server import ServerProcess

LABEL = "web-3 pid 4711 (celery worker)"
#: A label with everything a separator or a terminal could trip on, 10 KB long.
ODD = "a b:c.d;e|f#g%h+i~j\nk\tl\x00m — ünïcödé 日本 🔒 " + "x" * 10_000
#: What is shown of it: cleaned, then cut where its encoding in a token ends.
ODD_SHOWN = split_holder("0.1" + label_suffix(ODD))[1]


def in_thread(take: Callable[[], Any]) -> Any:
    """``take()``'s result, run in a thread of its own (another owner)."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(take()))
    thread.start()
    thread.join(10)
    return out[0]


def text(value: object) -> str:
    """A reply of a client that answers bytes, as text."""
    assert isinstance(value, bytes), value
    return value.decode()


def tenure(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str]:
    """Run ``tenure --url URL ARGS`` in-process: (exit status, stdout)."""
    status = main(["--url", url, *args])
    out, _ = capsys.readouterr()
    return status, out


def tenure_json(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> Any:
    status, out = tenure(capsys, url, *args, "--json")
    assert status == 0, out
    return json.loads(out)


def labels_of(entry: dict[str, Any]) -> set[str | None]:
    """Every label one JSON entry of ``inspect`` shows: its holder's, its
    holders' and its waiters'."""
    found = {entry["label"]}
    found |= {h["label"] for h in entry.get("holders", [])}
    found |= {w["label"] for w in entry.get("waiting", [])}
    return found


# --- info(), every primitive, sync and asyncio ----------------------------------------------


@pytest.mark.parametrize("label", [None, LABEL, ODD], ids=["default", "custom", "odd"])
def test_info_shows_the_label_of_every_sync_primitive(r: redis.Redis, label: str | None) -> None:
    expected = default_label() if label is None else split_holder("0.1" + label_suffix(label))[1]
    lock = Lock(r, "l", ttl=10, label=label)
    with lock as lease:
        info = lock.info()
        assert info.label == expected and info.holder == lease.owner
    fair = FairLock(r, "f", ttl=10, label=label)
    with fair as lease:
        info = fair.info()
        assert info.label == expected and info.holder == lease.owner
    rlock = RLock(r, "r", ttl=10, label=label)
    with rlock as outer, rlock as inner:  # reentrancy whatever the label holds
        info = rlock.info()
        assert info.label == expected and info.holder == outer.owner == inner.owner
        assert info.hold_count == 2 and rlock.hold_count() == 2
    assert not rlock.locked()
    rw = ReadWriteLock(r, "rw", ttl=10, label=label)
    with rw.write, rw.read, rw.read:  # a writer that reads too, twice
        holds = rw.info().holders
        assert {(h.mode, h.count, h.label) for h in holds} == {
            ("write", 1, expected),
            ("read", 2, expected),
        }
    assert not rw.info().holders
    sem = Semaphore(r, "s", 3, ttl=10, label=label)
    with sem(2) as lease:
        (holder,) = sem.info().holders
        assert holder.label == expected and holder.token == lease.owner and holder.permits == 2
    assert not sem.info().holders


def test_info_shows_the_label_of_every_asyncio_primitive(url: str) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        try:
            lock = AsyncLock(client, "l", ttl=10, label=LABEL)
            async with lock as lease:
                info = await lock.info()
                assert info.label == LABEL and info.holder == lease.owner
            fair = AsyncFairLock(client, "f", ttl=10, label=ODD)
            async with fair:
                assert (await fair.info()).label == ODD_SHOWN
            rlock = AsyncRLock(client, "r", ttl=10)
            async with rlock, rlock:
                info = await rlock.info()
                assert info.label == default_label() and info.hold_count == 2
            rw = AsyncReadWriteLock(client, "rw", ttl=10, label=LABEL)
            async with rw.read, rw.read:
                (hold,) = (await rw.info()).holders
                assert (hold.mode, hold.count, hold.label) == ("read", 2, LABEL)
            sem = AsyncSemaphore(client, "s", 2, ttl=10, label=LABEL)
            async with sem:
                (holder,) = (await sem.info()).holders
                assert holder.label == LABEL
        finally:
            await client.aclose()

    asyncio.run(main())


def test_an_empty_label_stores_none_and_a_bad_one_is_refused(r: redis.Redis) -> None:
    lock = Lock(r, "plain", ttl=10, label="")
    with lock as lease:
        assert SEPARATOR not in lease.owner and r.get("tenure:{plain}") == lease.owner.encode()
        assert lock.info().label is None
    rlock = RLock(r, "plain", ttl=10, label="")
    with rlock as held:
        assert r.hgetall("tenure:{plain}:rlock") == {held.owner.encode(): b"1"}
    for kind in (Lock, RLock, FairLock, ReadWriteLock):
        with pytest.raises(InvalidArgument, match="label must be a str"):
            kind(r, "bad", label=b"bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="label must be a str"):
        Semaphore(r, "bad", 2, label=42)  # type: ignore[arg-type]


def test_an_odd_label_is_stored_cleaned_and_capped(r: redis.Redis) -> None:
    with Lock(r, "odd", ttl=10, label=ODD) as lease:
        stored = text(r.get("tenure:{odd}"))
        assert stored == lease.owner and len(stored) < 32 + 8 + 32 + 200
        bare, label = split_holder(stored)
        assert bare.count(":") == 1 and label == ODD_SHOWN
        assert ODD_SHOWN is not None and clean_label(ODD).startswith(ODD_SHOWN)
        assert len(stored.partition(SEPARATOR)[2]) <= MAX_ENCODED
        for separator in ("|", "#", " ", "\n", "%3B;"):
            assert separator not in stored.partition(SEPARATOR)[2]
    with RLock(r, "odd", ttl=10, label=ODD) as held:
        (field,) = r.hgetall("tenure:{odd}:rlock")
        assert text(field).startswith(held.owner + SEPARATOR)
    assert not r.exists("tenure:{odd}:rlock")


def test_two_labels_of_one_owner_share_its_reentrant_holds(r: redis.Redis) -> None:
    first, second = RLock(r, "same", ttl=10, label="first"), RLock(r, "same", ttl=10, label="two")
    with first as a, second as b:  # one owner (this thread): a re-entry, not a wait
        assert a.owner == b.owner and a.fence == b.fence
        assert first.info().label == "first" and first.hold_count() == 2
    assert not first.locked()
    rw_a, rw_b = ReadWriteLock(r, "same", ttl=10, label="a"), ReadWriteLock(r, "same", label="b")
    with rw_a.write, rw_b.read, rw_b.write:  # a writer re-enters, and reads
        holds = {(h.mode, h.count, h.label) for h in rw_a.info().holders}
        assert holds == {("write", 2, "a"), ("read", 1, "b")}
    assert not rw_a.info().holders


def test_a_waiter_hands_on_its_label(r: redis.Redis, url: str) -> None:
    """A hand-off (the release sets the waiter's token, or an RLock's field
    from the waiter's queue member) keeps the waiter's label."""
    rlock = RLock(r, "handed", ttl=10, label="first")
    outer = rlock.acquire()
    assert outer
    got: list[str | None] = []

    def wait() -> None:
        client = redis.Redis.from_url(url)
        other = RLock(client, "handed", ttl=10, label="second")
        with other:
            got.append(other.info().label)
        client.close()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.3)
    outer.release()
    thread.join(10)
    assert got == ["second"]


# --- the operator commands ------------------------------------------------------------------


def test_inspect_ls_and_release_show_every_kinds_label(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = Lock(r, "job", ttl=30, label=LABEL).acquire()
    rlock = RLock(r, "job", ttl=30, label=LABEL).acquire()
    leases = [
        lock,
        rlock,
        FairLock(r, "job", ttl=30, label=LABEL).acquire(),
        ReadWriteLock(r, "job", ttl=30, label=LABEL).write.acquire(),
        Semaphore(r, "job", 2, ttl=30, label=LABEL).acquire(),
    ]
    assert all(leases) and lock and rlock
    data = tenure_json(capsys, url, "inspect", "job")
    kinds = {entry["kind"]: entry for entry in data["locks"] if entry["kind"] != "CountDownLatch"}
    assert set(kinds) == {"Lock", "RLock", "FairLock", "ReadWriteLock", "Semaphore"}
    for entry in kinds.values():
        assert entry["label"] == LABEL, entry
    assert kinds["RLock"]["holder"] == rlock.owner  # the owner id, as before
    assert kinds["ReadWriteLock"]["holders"][0]["label"] == LABEL
    assert kinds["Semaphore"]["holders"][0]["label"] == LABEL
    status, out = tenure(capsys, url, "inspect", "job")
    assert status == 0
    assert out.count(f"{LABEL} [") >= 5, out
    assert f"holder   {LABEL} [{split_holder(lock.owner)[0]}]" in out
    assert f"{LABEL} [{rlock.owner}] (hold count 1)" in out

    listed = tenure_json(capsys, url, "ls")["locks"]
    assert {e["kind"]: e["label"] for e in listed} == dict.fromkeys(kinds, LABEL)
    status, out = tenure(capsys, url, "ls")
    assert status == 0 and sum(LABEL in line for line in out.splitlines()) == 5

    for flag in ("", "--rlock", "--fair", "--rwlock", "--semaphore"):
        status, out = tenure(capsys, url, "release", "--force", *filter(None, [flag]), "job")
        assert status == 0 and f"removed  {'' if flag else 'holder '}" in out
        assert f"{LABEL} [" in out, out


def test_release_force_json_and_a_token_without_its_label(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sem = Semaphore(r, "pool", 2, ttl=30, label=LABEL)
    a, b = sem.acquire(), sem.acquire()
    assert a and b
    bare = split_holder(a.owner)[0]
    status, out = tenure(capsys, url, "release", "--force", "--semaphore", "--token", bare, "pool")
    assert status == 0 and f"removed  lease {LABEL} [{bare}]" in out
    assert [h.token for h in sem.info().holders] == [b.owner]
    lease = Lock(r, "one", ttl=30, label=LABEL).acquire()
    assert lease
    done = tenure_json(capsys, url, "release", "--force", "one")
    assert done["released"] and done["kind"] == "Lock" and done["name"] == "one"
    assert done["removed"] == [
        {
            "holder": lease.owner,
            "label": LABEL,
            "count": 1,
            "ttl": done["removed"][0]["ttl"],
            "fence": lease.fence,
        }
    ]
    assert done["before"]["label"] == LABEL and not done["after"]["held"]
    assert done["after"]["label"] is None
    rw = ReadWriteLock(r, "one", ttl=30, label=LABEL)
    assert rw.read.acquire()
    done = tenure_json(capsys, url, "release", "--force", "--rwlock", "one")
    assert [(h["mode"], h["label"]) for h in done["removed"]] == [("read", LABEL)]


def test_an_older_tenures_token_shows_as_before(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Holders without a label (an older tenure, a foreign client) show their
    token as they are, and a forced release still removes them."""
    old = "0123456789abcdef0123456789abcdef.1:fedcba9876543210fedcba9876543210"
    r.set("tenure:{old}", old, px=30_000)
    r.hset("tenure:{old}:rlock", "0123456789abcdef0123456789abcdef.2", 2)
    r.pexpire("tenure:{old}:rlock", 30_000)
    r.set("tenure:{foreign}", "a;b c", px=30_000)  # not a tenure token: no label read in it
    data = tenure_json(capsys, url, "inspect", "old")
    assert {(e["kind"], e["holder"], e["label"]) for e in data["locks"]} == {
        ("Lock", old, None),
        ("RLock", "0123456789abcdef0123456789abcdef.2", None),
    }
    status, out = tenure(capsys, url, "inspect", "old")
    assert status == 0 and f"holder   {old}\n" in out
    assert Lock(r, "old").info().label is None
    assert Lock(r, key="tenure:{foreign}").info().holder == "a;b c"
    assert tenure_json(capsys, url, "inspect", "foreign")["locks"][0]["label"] is None
    status, out = tenure(capsys, url, "release", "--force", "--rlock", "old")
    assert status == 0 and not r.exists("tenure:{old}:rlock")
    status, out = tenure(capsys, url, "release", "--force", "old")
    assert status == 0 and f"removed  holder {old}" in out and not r.exists("tenure:{old}")


# --- lease errors ---------------------------------------------------------------------------


def test_a_timeout_names_the_holder(r: redis.Redis) -> None:
    assert in_thread(Lock(r, "busy", ttl=30, label=LABEL).acquire)
    with pytest.raises(AcquireTimeout) as caught, Lock(r, "busy")(timeout=0.05):
        pass
    assert caught.value.holder is not None and caught.value.holder.startswith(f"held by {LABEL}")
    assert f"(held by {LABEL}, lease left 2" in str(caught.value)
    assert in_thread(ReadWriteLock(r, "busy", ttl=30, label="reader").read.acquire)
    with (
        pytest.raises(AcquireTimeout, match=r"held by reader \(read\), lease left"),
        ReadWriteLock(r, "busy").write(timeout=0.05),
    ):
        pass
    assert in_thread(Semaphore(r, "busy", 1, ttl=30, label="permit").acquire)
    with (
        pytest.raises(AcquireTimeout, match="held by permit, lease left"),
        Semaphore(r, "busy", 1)(timeout=0.05),
    ):
        pass


def test_a_lost_lease_names_who_holds_the_lock_now(r: redis.Redis) -> None:
    lease = Lock(r, "stolen", ttl=30).acquire()
    assert lease
    r.delete("tenure:{stolen}")
    thief = Lock(r, "stolen", ttl=30, label="web-9 pid 1 (thief)").acquire()
    assert thief
    with pytest.raises(LockLostError) as caught:
        lease.extend()
    assert caught.value.holder is not None
    assert "now held by web-9 pid 1 (thief), lease left" in str(caught.value)
    rlease = RLock(r, "gone", ttl=30).acquire()
    assert rlease
    r.delete("tenure:{gone}:rlock")
    with pytest.raises(LockLostError, match="; now free"):
        rlease.release()


async def timed_out(lock: AsyncLock) -> None:
    async with lock(timeout=0.05):
        pass


def test_async_errors_name_the_holder(url: str) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        try:
            held = await AsyncLock(client, "busy", ttl=30, label=LABEL).acquire()
            assert held
            with pytest.raises(AcquireTimeout, match=r"held by web-3 pid 4711 \(celery worker\)"):
                # (another task: another owner)
                await asyncio.create_task(timed_out(AsyncLock(client, "busy")))
            await client.delete("tenure:{busy}")
            other = await asyncio.create_task(
                AsyncLock(client, "busy", ttl=30, label="next").acquire()
            )
            assert other
            with pytest.raises(LockLostError, match="now held by next"):
                await held.release()
        finally:
            await client.aclose()

    asyncio.run(main())


# --- Redlock, MultiLock and tenure run ------------------------------------------------------


def test_a_redlock_and_a_multilock_carry_the_label(
    r: redis.Redis, make_server: Callable[..., ServerProcess]
) -> None:
    clients = [redis.Redis.from_url(make_server().url) for _ in range(3)]
    try:
        with Redlock(clients, "red", ttl=10, label=LABEL) as lease:
            assert split_holder(lease.owner)[1] == LABEL
            for client in clients:
                assert Lock(client, "red").info().label == LABEL
            # a timeout names the holder a quorum of masters shows
            with (
                pytest.raises(AcquireTimeout, match=re.escape(f"(held by {LABEL} [")) as caught,
                Redlock(clients, "red")(timeout=0.05),
            ):
                pass
            assert caught.value.holder is not None and lease.owner.split(";")[0] in (
                caught.value.holder
            )
        # a lease a quorum no longer holds: its error names who holds it now
        gone = Redlock(clients, "red", ttl=10).acquire()
        assert gone is not None
        for client in clients:
            client.delete("tenure:{red}")
        with (
            Redlock(clients, "red", ttl=10, label="the next holder"),
            pytest.raises(LockLostError, match=re.escape("held by the next holder [")),
        ):
            gone.extend()
    finally:
        for client in clients:
            client.close()
    multi = MultiLock([Lock(r, "p1", ttl=10, label="p1"), RLock(r, "p2", ttl=10)])
    with multi:
        assert Lock(r, "p1").info().label == "p1"
        assert RLock(r, "p2").info().label == default_label()


def test_tenure_run_labels_its_lease_with_the_command(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    seen = tmp_path / "seen"
    script = (
        "import json, redis, sys; from tenure import Lock; "
        f"r = redis.Redis.from_url({url!r}); "
        "open(sys.argv[1], 'w').write(Lock(r, 'nightly').info().label or '')"
    )
    secret = "postgres://user:hunter2@db/x"
    python = sys.executable
    status = main(["--url", url, "run", "nightly", "--", python, "-c", script, str(seen), secret])
    capsys.readouterr()
    assert status == 0
    label = seen.read_text()
    program = os.path.basename(python)
    assert label == f"{os.uname().nodename} pid {os.getpid()} (tenure run: {program})"
    assert "hunter2" not in label


def test_the_commands_show_asyncio_leases_labels(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Leases of the asyncio twins, an odd label among them, read by the
    commands (which run while the leases are held)."""

    async def main_() -> None:
        client = redis.asyncio.Redis.from_url(url)
        try:
            held = [
                await AsyncLock(client, "aio", ttl=30, label=ODD).acquire(),
                await AsyncRLock(client, "aio", ttl=30, label=LABEL).acquire(),
                await AsyncFairLock(client, "aio", ttl=30, label=LABEL).acquire(),
                await AsyncReadWriteLock(client, "aio", ttl=30, label=LABEL).read.acquire(),
                await AsyncSemaphore(client, "aio", 2, ttl=30, label=LABEL).acquire(),
            ]
            assert all(held)
            data = tenure_json(capsys, url, "inspect", "aio")
            labels = {e["kind"]: labels_of(e) for e in data["locks"]}
            assert labels.pop("CountDownLatch", None) in (None, {None})
            assert labels == {
                "Lock": {ODD_SHOWN},
                "RLock": {LABEL},
                "FairLock": {LABEL},
                "ReadWriteLock": {LABEL},
                "Semaphore": {LABEL},
            }
            status, out = tenure(capsys, url, "inspect", "aio")  # the Lock first
            assert status == 0
            lock_lines = out.split("\n\n")[0].splitlines()
            assert lock_lines[1].startswith("  holder   a b:c.d;e|f#g%h+i~j k")  # one line
            assert lock_lines[2].startswith("  ttl ")
            status, out = tenure(capsys, url, "ls")
            assert status == 0 and len(out.splitlines()) == 1 + 5
            done = tenure_json(capsys, url, "release", "--force", "--semaphore", "aio")
            assert [h["label"] for h in done["removed"]] == [LABEL]
        finally:
            await client.aclose()

    asyncio.run(main_())
