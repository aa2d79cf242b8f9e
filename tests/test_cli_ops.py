"""The operator commands on real servers: ``inspect``, ``ls``, ``release --force``, ``doctor``.

Each command is called in-process through :func:`tenure._cli.main`; its output is
read with ``capsys``. The doctor's hazards each get a server started with the
setting that causes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import pytest
import redis
from _not_utf8 import ESCAPED, KINDS, NOT_UTF8, hold_foreign

from tenure import (
    CountDownLatch,
    FairLock,
    Lease,
    Lock,
    LockLostError,
    NotOwnedError,
    ReadWriteLock,
    RLock,
    Semaphore,
)
from tenure._cli import main
from tenure._label import default_label, holder_text, split_holder
from tenure._server import ServerProcess, server_version
from tenure._views import view_of

MakeServer = Callable[..., ServerProcess]
T = TypeVar("T")

#: Server settings under which the doctor finds no hazard.
SAFE = ("--appendonly", "yes", "--appendfsync", "always")


def tenure(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    """Run ``tenure --url URL ARGS`` in-process: (exit status, stdout, stderr)."""
    status = main(["--url", url, *args])
    out, err = capsys.readouterr()
    return status, out, err


def tenure_json(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, Any]:
    """Run a command with ``--json``: (exit status, parsed stdout)."""
    status, out, err = tenure(capsys, url, *args, "--json")
    assert out, f"no JSON printed (exit status {status}): {err}"
    return status, json.loads(out)


def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


class Waiter(threading.Thread):
    """A thread that waits for a Lock (its own client) and records when it got it."""

    def __init__(self, url: str, name: str, ttl: float = 10.0, timeout: float = 30.0) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.lock = Lock(self.client, name, ttl=ttl)
        self.timeout = timeout
        self.lease: Lease | None = None
        self.got_at = 0.0

    def run(self) -> None:
        self.lease = self.lock.acquire(timeout=self.timeout)
        self.got_at = time.monotonic()

    def finish(self) -> Lease:
        self.join(self.timeout)
        assert self.lease is not None, "the waiter did not get the lock"
        self.lease.release()
        self.client.close()
        return self.lease


def waiters(r: redis.Redis, name: str, prefix: str = "tenure:") -> int:
    return int(r.zcard(f"{prefix}{{{name}}}:waiters"))


# --- inspect -------------------------------------------------------------------------------


def test_inspect_a_held_lock_with_a_waiter(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lease = Lock(r, "orders:42", ttl=30).acquire()
    assert lease
    waiter = Waiter(url, "orders:42", ttl=12)
    waiter.start()
    wait_until(lambda: waiters(r, "orders:42") == 1)

    status, data = tenure_json(capsys, url, "inspect", "orders:42")
    assert status == 0
    assert data["name"] == "orders:42" and data["prefix"] == "tenure:"
    [lock] = data["locks"]
    assert lock["kind"] == "Lock" and lock["key"] == "tenure:{orders:42}"
    assert lock["held"] is True and lock["holder"] == lease.owner and lock["count"] == 1
    assert lock["fence"] == lease.fence
    assert 25 < lock["ttl"] <= 30
    assert lock["waiters"] == 1
    [queued] = lock["waiting"]
    # the lease a hand-off gives it: its claim window (then extended to its 12 s)
    assert queued["lease"] == 1.0 and queued["holder"] != lease.owner
    assert 0 <= queued["queued_for"] < 10

    status, out, _ = tenure(capsys, url, "inspect", "orders:42")
    assert status == 0
    assert f"holder   {holder_text(lease.owner)}" in out
    assert f"holder   {default_label()} [{split_holder(lease.owner)[0]}]" in out
    assert f"fence    {lease.fence}" in out
    assert "waiters  1" in out and holder_text(queued["holder"]) in out

    lease.release()
    waiter.finish()


def test_inspect_an_rlock_held_twice(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rlock = RLock(r, "jobs", ttl=20)
    first, second = rlock.acquire(), rlock.acquire()
    assert first and second

    status, data = tenure_json(capsys, url, "inspect", "jobs")
    assert status == 0
    [lock] = data["locks"]  # no Lock named "jobs" exists
    assert lock["kind"] == "RLock" and lock["key"] == "tenure:{jobs}:rlock"
    assert lock["holder"] == first.owner and lock["count"] == 2
    assert lock["fence"] == first.fence and 15 < lock["ttl"] <= 20
    _, out, _ = tenure(capsys, url, "inspect", "jobs")
    assert "(hold count 2)" in out
    second.release()
    first.release()


def test_inspect_nothing_exits_1(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = tenure(capsys, url, "inspect", "nothing-here")
    assert status == 1 and out == ""
    assert "no lock 'nothing-here' under prefix 'tenure:'" in err
    status, data = tenure_json(capsys, url, "inspect", "nothing-here")
    assert status == 1 and data["locks"] == []


def test_inspect_a_free_lock_an_exact_key_and_a_prefix(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lease = Lock(r, "was-held", ttl=5).acquire()
    assert lease
    lease.release()  # only the fence key is left
    status, data = tenure_json(capsys, url, "inspect", "was-held")
    assert status == 0
    [lock] = data["locks"]
    assert lock["held"] is False and lock["holder"] is None and lock["ttl"] is None
    assert lock["fence"] == lease.fence and lock["waiters"] == 0

    exact = Lock(r, key="legacy:job", ttl=5).acquire()
    assert exact
    status, data = tenure_json(capsys, url, "inspect", "--key", "legacy:job")
    assert status == 0
    assert [(x["key"], x["holder"]) for x in data["locks"]] == [("legacy:job", exact.owner)]

    mine = Lock(r, "app-lock", ttl=5, prefix="app:").acquire()
    assert mine
    assert tenure(capsys, url, "inspect", "app-lock")[0] == 1
    status, data = tenure_json(capsys, url, "inspect", "app-lock", "--prefix", "app:")
    assert status == 0 and data["locks"][0]["key"] == "app:{app-lock}"


def test_inspect_needs_a_name_or_a_key(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert tenure(capsys, url, "inspect")[0] == 2
    status, _, err = tenure(capsys, url, "inspect", "a", "--key", "b")
    assert status == 2 and "exactly one" in err
    status, _, err = tenure(capsys, url, "inspect", "")
    assert status == 2 and "name must not be empty" in err


def test_inspect_a_key_of_another_type(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    r.hset("a-hash", "f", "v")
    status, _, err = tenure(capsys, url, "inspect", "--key", "a-hash")
    assert status == 2 and "a-hash" in err


# --- ls ------------------------------------------------------------------------------------


def test_ls_finds_the_locks_matching_a_pattern_among_many_keys(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    one, two = (Lock(r, f"orders:{i}", ttl=30).acquire() for i in (1, 2))
    freed = Lock(r, "orders:3", ttl=30).acquire()
    assert freed
    freed.release()
    rlease = RLock(r, "orders:9", ttl=30).acquire()
    other = Lock(r, "jobs:1", ttl=30).acquire()
    elsewhere = Lock(r, "orders:5", ttl=30, prefix="other:").acquire()
    assert one and two and rlease and other and elsewhere
    r.mset({f"unrelated:{i}": i for i in range(500)})
    r.mset({f"tenure:not-a-lock:{i}": i for i in range(50)})
    r.config_resetstat()

    status, data = tenure_json(capsys, url, "ls", "orders:*", "--scan-count", "20")
    assert status == 0
    rows = {(x["kind"], x["name"]): x for x in data["locks"]}
    assert sorted(rows) == [
        ("Lock", "orders:1"),
        ("Lock", "orders:2"),
        ("Lock", "orders:3"),
        ("RLock", "orders:9"),
    ]
    assert rows["Lock", "orders:1"]["holder"] == one.owner
    assert rows["Lock", "orders:3"]["held"] is False
    assert rows["Lock", "orders:3"]["fence"] == freed.fence
    assert rows["RLock", "orders:9"]["count"] == 1
    assert "waiting" not in rows["Lock", "orders:1"]
    # 600-odd keys at 20 a call: the scan went through many cursors.
    assert r.info("commandstats")["cmdstat_scan"]["calls"] >= 10

    status, out, _ = tenure(capsys, url, "ls", "orders:*")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == ["KIND", "NAME", "HOLDER", "TTL", "FENCE", "WAITERS"]
    assert [line.split()[:2] for line in lines[1:]] == [
        ["Lock", "orders:1"],
        ["Lock", "orders:2"],
        ["Lock", "orders:3"],
        ["RLock", "orders:9"],
    ]
    assert lines[3].split()[2] == "free"
    assert "jobs:1" not in out

    status, out, _ = tenure(capsys, url, "ls")
    assert "jobs:1" in out and "orders:5" not in out
    status, data = tenure_json(capsys, url, "ls", "--prefix", "other:")
    assert [x["name"] for x in data["locks"]] == ["orders:5"]


def test_ls_with_no_locks(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = tenure(capsys, url, "ls")
    assert status == 0 and "no locks under prefix 'tenure:' match '*'" in out
    status, data = tenure_json(capsys, url, "ls", "x*")
    assert status == 0 and data == {"prefix": "tenure:", "pattern": "x*", "locks": []}


def test_ls_skips_a_lock_whose_key_has_another_type(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    r.rpush("tenure:{odd}", "x")
    assert Lock(r, "fine", ttl=5).acquire()
    status, out, err = tenure(capsys, url, "ls")
    assert status == 0 and "fine" in out and "odd" not in out
    assert "skipped Lock 'odd'" in err


def test_ls_and_top_name_a_primitive_whose_name_is_not_utf8(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Keys under the prefix whose name is not UTF-8 (another program's: every
    name tenure takes is text, sent as UTF-8) are not read as a primitive but
    named among the skipped, the name as a bytes literal (the same bytes
    back), never left out unseen."""
    r.set(b"tenure:{\xffbad}", b"token", px=30_000)
    r.set(b"tenure:{\xffbad}:fence", b"12")
    assert Lock(r, "fine", ttl=5).acquire()
    status, out, err = tenure(capsys, url, "ls")
    assert status == 0 and "fine" in out and "bad" not in out, out
    (line,) = (x for x in err.splitlines() if "bad" in x)
    assert line.startswith("tenure ls: skipped Lock b'\\xffbad': "), line
    assert "not UTF-8" in line, line
    status = main(["--url", url, "top", "--json-lines", "--all", "-n", "1"])
    out, err = capsys.readouterr()
    assert status == 0, err
    frame = json.loads(out)
    assert [x["name"] for x in frame["locks"]] == ["fine"]
    assert [x for x in frame["skipped"] if x.startswith("Lock b'\\xffbad': ")], frame


@pytest.mark.parametrize("kind", KINDS)
def test_ls_top_and_inspect_show_a_holder_not_utf8_escaped(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """A primitive whose holder another program wrote as bytes that are not
    UTF-8 (no token tenure makes) is shown by ls, top and inspect with those
    bytes escaped, no traceback; release --force refuses it (the escaped text
    is another value than the one stored) and leaves it as it was."""
    hold_foreign(r, kind, "odd")
    before = {k: r.dump(k) for k in r.scan_iter()}
    assert Lock(r, "fine", ttl=5).acquire()
    status, out, err = tenure(capsys, url, "ls")
    assert status == 0 and "fine" in out and "odd" in out and not err, (out, err)
    (row,) = (x for x in out.splitlines() if "odd" in x)
    assert ESCAPED in row, row
    status = main(["--url", url, "top", "--json-lines", "--all", "-n", "1"])
    out, err = capsys.readouterr()
    assert status == 0, err
    frame = json.loads(out)
    assert not frame["skipped"], frame
    assert [x["holder"] for x in frame["locks"] if x["name"] == "odd"] == [ESCAPED], frame
    status, out, err = tenure(capsys, url, "inspect", "odd")
    assert status == 0 and ESCAPED in out and not err, (status, out, err)
    status, data = tenure_json(capsys, url, "inspect", "odd")
    assert status == 0 and [x["holder"] for x in data["locks"]] == [ESCAPED], data
    flag = view_of(kind).release_flag
    status, out, err = tenure(capsys, url, "release", "--force", *([flag] if flag else []), "odd")
    assert status == 2 and f"{kind} 'odd': " in err and "not UTF-8" in err, (status, err)
    assert "Traceback" not in err
    assert {k: r.dump(k) for k in r.scan_iter() if b"fine" not in k} == before


def test_inspect_shows_an_exact_keys_redis_py_token_not_utf8_escaped(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An exact key held by redis-py's Lock with a token that is not UTF-8:
    inspect --key shows it escaped; release --force --key refuses it."""
    assert r.lock("legacy:bin", timeout=30).acquire(blocking=False, token=NOT_UTF8)
    status, out, err = tenure(capsys, url, "inspect", "--key", "legacy:bin")
    assert status == 0 and ESCAPED in out and not err, (status, out, err)
    status, data = tenure_json(capsys, url, "inspect", "--key", "legacy:bin")
    assert [(x["key"], x["holder"]) for x in data["locks"]] == [("legacy:bin", ESCAPED)], data
    status, out, err = tenure(capsys, url, "release", "--force", "--key", "legacy:bin")
    assert status == 2 and "Lock 'legacy:bin': " in err and "not UTF-8" in err, (status, err)
    assert r.get("legacy:bin") == NOT_UTF8


@pytest.mark.parametrize("kind", ["Lock", "RLock", "FairLock"])
def test_views_name_a_fence_key_beyond_any_fence(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """A fence key holding an integer no fence is (2^70: beyond 2^53, where the
    scripts' numbers stop being exact) is another type to the views, as to an
    acquire: skipped and named, not shown as some other number."""
    made = {"Lock": Lock, "RLock": RLock, "FairLock": FairLock}[kind]
    assert made(r, "big", ttl=30).acquire()
    (fence,) = (k.decode() for k in r.keys("*fence*"))  # type: ignore[union-attr]
    r.set(fence, str(2**70))
    status, out, err = tenure(capsys, url, "ls")
    assert status == 0 and "big" not in out, out
    assert f"skipped {kind} 'big'" in err and f"'{fence}'" in err, err
    status, out, err = tenure(capsys, url, "inspect", "big")
    assert str(2**63) not in out and f"'{fence}'" in err, (out, err)
    assert r.get(fence) == str(2**70).encode()  # read, not written


def test_ls_inspect_and_release_names_with_braces(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Names with braces are escaped in the keys; the tools show and break them by name."""
    lock = Lock(r, "}x{", ttl=30).acquire()
    rlease = RLock(r, "a{}b", ttl=30).acquire()
    permit = Semaphore(r, "a{}b", 2, ttl=30).acquire()
    assert lock and rlease and permit
    assert CountDownLatch(r, "{%}").try_set_count(1)
    status, data = tenure_json(capsys, url, "ls")
    assert status == 0
    assert sorted((x["kind"], x["name"], x["key"]) for x in data["locks"]) == [
        ("CountDownLatch", "{%}", "tenure:{%7B%25%7D}:latch"),
        ("Lock", "}x{", "tenure:{%7Dx%7B}"),
        ("RLock", "a{}b", "tenure:{a%7B%7Db}:rlock"),
        ("Semaphore", "a{}b", "tenure:{a%7B%7Db}:semaphore"),
    ]
    status, data = tenure_json(capsys, url, "inspect", "a{}b")
    assert status == 0
    assert [(x["kind"], x["holder"]) for x in data["locks"]] == [
        ("RLock", rlease.owner),
        ("Semaphore", permit.owner),
    ]
    assert tenure(capsys, url, "release", "--force", "}x{")[0] == 0
    assert tenure(capsys, url, "release", "--force", "--rlock", "a{}b")[0] == 0
    assert tenure(capsys, url, "release", "--force", "--semaphore", "a{}b")[0] == 0
    assert not r.exists("tenure:{%7Dx%7B}", "tenure:{a%7B%7Db}:rlock")
    assert r.zcard("tenure:{a%7B%7Db}:semaphore") == 0


# --- release --force -----------------------------------------------------------------------


def test_release_without_force_refuses_and_changes_nothing(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lease = Lock(r, "stuck", ttl=30).acquire()
    assert lease
    status, out, err = tenure(capsys, url, "release", "stuck")
    assert status == 2 and out == ""
    assert "add --force" in err
    assert r.get("tenure:{stuck}") == lease.owner.encode()
    lease.release()


def hold_and_die(url: str, name: str, ttl: float) -> tuple[str, int]:
    """A process takes the lock and exits without releasing it: (its token, fence)."""
    code = (
        "import os, sys, redis, tenure\n"
        "lease = tenure.Lock(redis.Redis.from_url(sys.argv[1]), sys.argv[2],"
        " ttl=float(sys.argv[3])).acquire()\n"
        "print(lease.owner, lease.fence, flush=True)\n"
        "os._exit(0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, url, name, str(ttl)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    token, fence = done.stdout.split()
    return token, int(fence)


def test_release_force_hands_a_dead_owners_lock_to_the_waiter(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    token, fence = hold_and_die(url, "stuck", ttl=60)
    waiter = Waiter(url, "stuck", timeout=30)
    waiter.start()
    wait_until(lambda: waiters(r, "stuck") == 1)

    forced_at = time.monotonic()
    status, out, _ = tenure(capsys, url, "release", "--force", "stuck")
    assert status == 0
    lease = waiter.finish()
    assert waiter.got_at - forced_at < 5, "the waiter slept on instead of being handed the lock"
    assert lease.fence > fence
    assert f"removed  holder {holder_text(token)}" in out
    assert f"fence    {fence}" in out
    assert f"handed to the first waiter: {holder_text(lease.owner)}" in out
    ttl_left = float(out.split("ttl left ")[1].split("s")[0])
    assert 50 < ttl_left <= 60


def test_release_force_of_a_lock_nobody_holds_exits_1(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = tenure(capsys, url, "release", "--force", "nobody")
    assert status == 1 and "Lock 'nobody' is not held" in err

    rlease = RLock(r, "re", ttl=30).acquire()
    assert rlease
    status, _, err = tenure(capsys, url, "release", "--force", "re")
    assert status == 1 and "add --rlock" in err
    assert RLock(r, "re").hold_count() == 1
    rlease.release()


def test_release_force_of_an_rlock_held_twice(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rlock = RLock(r, "re", ttl=30)
    first, second = rlock.acquire(), rlock.acquire()
    assert first and second
    status, out, _ = tenure(capsys, url, "release", "--force", "--rlock", "re")
    assert status == 0
    assert f"removed  holder {default_label()} [{first.owner}] (hold count 2)" in out
    assert "now free" in out
    assert not rlock.locked()
    with pytest.raises(NotOwnedError):
        second.release()


def test_release_force_of_an_exact_key(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lease = Lock(r, key="legacy:job", ttl=30).acquire()
    assert lease
    status, out, _ = tenure(capsys, url, "release", "--force", "--key", "legacy:job")
    assert status == 0 and holder_text(lease.owner) in out
    assert r.exists("legacy:job") == 0
    status, _, err = tenure(capsys, url, "release", "--force", "--rlock", "--key", "legacy:job")
    assert status == 2 and "--rlock and --key" in err


# --- every other kind: FairLock, ReadWriteLock, Semaphore, CountDownLatch -------------------


class Held(Protocol):
    """What every kind's lease has: a holder id in Redis, a fence, a release."""

    @property
    def owner(self) -> str: ...

    @property
    def fence(self) -> int: ...

    def release(self) -> None: ...


class Acquirer(threading.Thread):
    """A thread that waits for a lease through a client of its own, as another
    process would, and records when it got it."""

    def __init__(
        self, url: str, take: Callable[[redis.Redis], Held | None], timeout: float = 20.0
    ) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.take = take
        self.timeout = timeout
        self.lease: Held | None = None
        self.got = threading.Event()
        self.got_at = 0.0

    def run(self) -> None:
        self.lease = self.take(self.client)
        self.got_at = time.monotonic()
        self.got.set()

    def wait_lease(self) -> Held:
        assert self.got.wait(self.timeout + 5), "the waiter never returned"
        assert self.lease is not None, "the waiter did not get the lock"
        return self.lease

    def done(self) -> None:
        self.wait_lease().release()
        self.join(5)
        self.client.close()


def in_thread(fn: Callable[[], T]) -> T:
    """``fn()`` called in a new thread: another owner than the calling thread."""
    out: list[T] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(10)
    return out[0]


def queued(r: redis.Redis, key: str, n: int = 1) -> None:
    """Wait until ``n`` waiters are queued in the waiters key ``key``."""
    wait_until(lambda: r.zcard(key) == n)


def test_inspect_every_kind_of_one_name_held_then_free(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fair = FairLock(r, "res", ttl=30).acquire()
    rw = ReadWriteLock(r, "res", ttl=30)
    mine, again = rw.read.acquire(), rw.read.acquire()
    theirs = in_thread(lambda: ReadWriteLock(r, "res", ttl=20).read.acquire())
    sem = Semaphore(r, "res", permits=3, ttl=30)
    two, one = sem.acquire(2), sem.acquire(1)
    latch = CountDownLatch(r, "res")
    assert fair and mine and again and theirs and two and one and latch.try_set_count(2)
    waiters = [
        Acquirer(url, lambda c: FairLock(c, "res", ttl=12).acquire(timeout=20)),
        Acquirer(url, lambda c: ReadWriteLock(c, "res", ttl=12).write.acquire(timeout=20)),
        Acquirer(url, lambda c: Semaphore(c, "res", permits=3, ttl=12).acquire(2, timeout=20)),
    ]
    for waiter in waiters:
        waiter.start()
    for kind in ("fair", "rwlock", "semaphore"):
        queued(r, f"tenure:{{res}}:{kind}:waiters")

    status, data = tenure_json(capsys, url, "inspect", "res")
    assert status == 0
    found = {x["kind"]: x for x in data["locks"]}
    assert list(found) == ["FairLock", "ReadWriteLock", "Semaphore", "CountDownLatch"]

    f = found["FairLock"]
    assert (f["key"], f["holder"], f["count"], f["fence"]) == (
        "tenure:{res}:fair",
        fair.owner,
        1,
        fair.fence,
    )
    assert 25 < f["ttl"] <= 30 and f["waiters"] == 1
    [head] = f["waiting"]
    # the lease a hand-off gives it: its claim window (then extended to its 12 s)
    assert head["lease"] == 1.0 and head["holder"] != fair.owner and 0 < head["deadline"] <= 5

    w = found["ReadWriteLock"]
    assert (w["mode"], w["waiting_writers"], w["fence"]) == ("read", 1, mine.fence)
    assert sorted((h["owner"], h["mode"], h["count"]) for h in w["holders"]) == sorted(
        [(mine.owner, "read", 2), (theirs.owner, "read", 1)]
    )
    assert 25 < w["ttl"] <= 30  # the last hold to end
    assert [x["mode"] for x in w["waiting"]] == ["write"]

    s = found["Semaphore"]
    assert (s["key"], s["permits"], s["available"], s["fence"]) == (
        "tenure:{res}:semaphore",
        3,
        0,
        one.fence,
    )
    assert sorted((h["token"], h["permits"]) for h in s["holders"]) == sorted(
        [(two.owner, 2), (one.owner, 1)]
    )
    assert [x["permits"] for x in s["waiting"]] == [2]

    latched = found["CountDownLatch"]
    assert (latched["count"], latched["open"], latched["held"]) == (2, False, False)

    status, out, _ = tenure(capsys, url, "inspect", "res")
    assert status == 0
    assert "FairLock 'res' (key tenure:{res}:fair)" in out
    assert f"    read   {default_label()} [{mine.owner}] (hold count 2" in out
    assert "  waiters  1 (1 writer)" in out and "    1. write " in out
    assert "  permits  3 (0 available)" in out and f"    {holder_text(two.owner)} (2 permits" in out
    assert "  count    2 (closed)" in out

    # Released by their holders, every kind is handed on, then left free.
    fair.release()
    again.release()
    mine.release()
    in_thread(theirs.release)
    two.release()
    one.release()
    for waiter in waiters:
        waiter.done()
    assert latch.count_down() == 1 and latch.count_down() == 0
    status, data = tenure_json(capsys, url, "inspect", "res")
    assert status == 0
    found = {x["kind"]: x for x in data["locks"]}
    assert list(found) == ["FairLock", "ReadWriteLock", "Semaphore", "CountDownLatch"]
    assert not any(x["held"] for x in found.values())
    assert found["FairLock"]["fence"] > fair.fence and found["FairLock"]["ttl"] is None
    assert found["ReadWriteLock"]["mode"] is None and found["ReadWriteLock"]["holders"] == []
    assert found["Semaphore"]["available"] == 3 and found["Semaphore"]["holders"] == []
    assert found["CountDownLatch"]["open"] is True and found["CountDownLatch"]["opened"] > 0
    _, out, _ = tenure(capsys, url, "inspect", "res")
    assert "  holder   free" in out and "  mode     free" in out
    assert "  holders  none" in out and "  count    0 (open)" in out


def test_ls_lists_every_kind_one_row_each(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    held_fair = FairLock(r, "fair-held", ttl=30).acquire()
    freed_fair = FairLock(r, "fair-free", ttl=30).acquire()
    writer = ReadWriteLock(r, "rw-held", ttl=30).write.acquire()
    freed_rw = ReadWriteLock(r, "rw-free", ttl=30).write.acquire()
    held_sem = Semaphore(r, "sem-held", permits=2, ttl=30).acquire()
    freed_sem = Semaphore(r, "sem-free", permits=2, ttl=30).acquire()
    assert held_fair and freed_fair and writer and freed_rw and held_sem and freed_sem
    freed_fair.release()
    freed_rw.release()
    freed_sem.release()
    assert CountDownLatch(r, "latch-closed").try_set_count(2)
    opened = CountDownLatch(r, "latch-open")
    assert opened.try_set_count(1) and opened.count_down() == 0
    queued_sem = Acquirer(
        url, lambda c: Semaphore(c, "sem-held", permits=2, ttl=5).acquire(2, timeout=20)
    )
    queued_sem.start()
    queued(r, "tenure:{sem-held}:semaphore:waiters")

    status, data = tenure_json(capsys, url, "ls")
    assert status == 0
    rows = {(x["kind"], x["name"]): x for x in data["locks"]}
    assert list(rows) == [  # one row each, whatever sibling keys each has; by name
        ("FairLock", "fair-free"),
        ("FairLock", "fair-held"),
        ("CountDownLatch", "latch-closed"),
        ("CountDownLatch", "latch-open"),
        ("ReadWriteLock", "rw-free"),
        ("ReadWriteLock", "rw-held"),
        ("Semaphore", "sem-free"),
        ("Semaphore", "sem-held"),
    ]
    assert not any("waiting" in x for x in rows.values())
    assert rows["FairLock", "fair-held"]["holder"] == held_fair.owner
    assert rows["FairLock", "fair-free"]["held"] is False
    assert rows["FairLock", "fair-free"]["fence"] == freed_fair.fence
    assert rows["ReadWriteLock", "rw-held"]["mode"] == "write"
    assert rows["ReadWriteLock", "rw-held"]["holder"] == writer.owner
    assert rows["ReadWriteLock", "rw-free"]["fence"] == freed_rw.fence
    assert rows["Semaphore", "sem-held"]["holders"][0]["token"] == held_sem.owner
    assert rows["Semaphore", "sem-held"]["waiters"] == 1
    assert rows["Semaphore", "sem-free"]["available"] == 2
    assert rows["CountDownLatch", "latch-closed"]["count"] == 2
    assert rows["CountDownLatch", "latch-closed"]["label"] == default_label()
    assert rows["CountDownLatch", "latch-open"]["open"] is True

    status, out, _ = tenure(capsys, url, "ls")
    assert status == 0
    holder = {tuple(line.split()[:2]): line.split()[2:] for line in out.splitlines()[1:]}
    text = {k: " ".join(v) for k, v in holder.items()}
    assert holder["FairLock", "fair-free"][0] == "free"
    # ls names a holder by its label alone
    assert text["ReadWriteLock", "rw-held"].startswith(f"{default_label()} (write) ")
    assert text["Semaphore", "sem-held"].startswith(f"{default_label()} x1 (1/2) ")
    assert holder["Semaphore", "sem-held"][-1] == "1"  # waiters
    assert holder["Semaphore", "sem-free"][:2] == ["free", "(0/2)"]
    # a latch names who set it
    assert text["CountDownLatch", "latch-closed"].startswith(f"count 2, set by {default_label()} ")
    assert holder["CountDownLatch", "latch-open"] == ["open", "-", "-", "-"]

    status, data = tenure_json(capsys, url, "ls", "sem-*")
    assert [x["name"] for x in data["locks"]] == ["sem-free", "sem-held"]
    held_sem.release()
    queued_sem.done()


def test_release_force_of_a_fair_lock_hands_it_to_the_head_of_the_queue(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stuck = FairLock(r, "fq", ttl=60).acquire()
    assert stuck
    first = Acquirer(url, lambda c: FairLock(c, "fq", ttl=10).acquire(timeout=20))
    first.start()
    queued(r, "tenure:{fq}:fair:waiters")
    second = Acquirer(url, lambda c: FairLock(c, "fq", ttl=10).acquire(timeout=20))
    second.start()
    queued(r, "tenure:{fq}:fair:waiters", 2)

    forced_at = time.monotonic()
    status, out, _ = tenure(capsys, url, "release", "--force", "--fair", "fq")
    assert status == 0
    lease = first.wait_lease()
    assert first.got_at - forced_at < 5, "the head slept on instead of being handed the lock"
    assert not second.got.is_set()  # behind it in the queue
    assert lease.fence > stuck.fence
    assert out.splitlines()[:3] == [
        "released FairLock 'fq' (key tenure:{fq}:fair)",
        f"  removed  holder {holder_text(stuck.owner)}",
        f"  fence    {stuck.fence}",
    ]
    assert f"handed to the first waiter: {holder_text(lease.owner)} (fence {lease.fence})" in out
    first.done()
    second.done()


def test_release_force_of_a_read_write_lock_removes_every_hold(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rw = ReadWriteLock(r, "doc", ttl=60)
    mine, again = rw.read.acquire(), rw.read.acquire()
    theirs = in_thread(lambda: ReadWriteLock(r, "doc", ttl=60).read.acquire())
    assert mine and again and theirs
    writer = Acquirer(url, lambda c: ReadWriteLock(c, "doc", ttl=10).write.acquire(timeout=20))
    writer.start()
    queued(r, "tenure:{doc}:rwlock:waiters")

    forced_at = time.monotonic()
    status, out, _ = tenure(capsys, url, "release", "--force", "--rwlock", "doc")
    assert status == 0
    lease = writer.wait_lease()
    assert writer.got_at - forced_at < 5, "the writer slept on instead of being handed the lock"
    me = default_label()
    assert f"  removed  read hold of {me} [{mine.owner}] (hold count 2, fence {mine.fence}" in out
    assert f"  removed  read hold of {me} [{theirs.owner}] (hold count 1" in out
    assert f"  handed to a waiter: {me} [{lease.owner}] (write, fence {lease.fence})" in out
    assert f"  now write-held by {me} [{lease.owner}]" in out
    with pytest.raises(LockLostError):
        again.release()
    writer.done()

    # A writer that also reads (two holds): both go, and the readers waiting come in together.
    held = rw.write.acquire()
    reading = rw.read.acquire()
    assert held and reading
    readers = [
        Acquirer(url, lambda c: ReadWriteLock(c, "doc", ttl=10).read.acquire(timeout=20))
        for _ in range(2)
    ]
    for reader in readers:
        reader.start()
    queued(r, "tenure:{doc}:rwlock:waiters", 2)
    forced_at = time.monotonic()
    status, out, _ = tenure(capsys, url, "release", "--force", "--rwlock", "doc")
    assert status == 0
    for reader in readers:
        reader.wait_lease()
        assert reader.got_at - forced_at < 5
    lines = [line for line in out.splitlines() if "removed" in line]
    assert lines[0].startswith(f"  removed  write hold of {default_label()} [{held.owner}]")
    assert lines[1].startswith(f"  removed  read hold of {default_label()} [{held.owner}]")
    assert "  now read-held by 2 owners" in out
    for reader in readers:
        reader.done()


def test_release_force_of_a_semaphore_one_lease_or_every_one(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sem = Semaphore(r, "pool", permits=2, ttl=60)
    a, b = sem.acquire(), sem.acquire()
    assert a and b
    waiter = Acquirer(url, lambda c: Semaphore(c, "pool", permits=2, ttl=10).acquire(2, timeout=20))
    waiter.start()
    queued(r, "tenure:{pool}:semaphore:waiters")

    status, out, _ = tenure(
        capsys, url, "release", "--force", "--semaphore", "--token", a.owner, "pool"
    )
    assert status == 0
    assert f"  removed  lease {holder_text(a.owner)} (1 permit, ttl left" in out
    assert split_holder(b.owner)[0] not in out
    assert "  now 1 of 2 permits held" in out
    _, data = tenure_json(capsys, url, "inspect", "pool")
    [state] = data["locks"]
    assert [h["token"] for h in state["holders"]] == [b.owner] and state["waiters"] == 1
    assert not waiter.got.is_set()  # it asked for both permits

    status, _, err = tenure(
        capsys, url, "release", "--force", "--semaphore", "--token", "x", "pool"
    )
    assert status == 1 and "Semaphore 'pool' has no lease 'x'" in err

    forced_at = time.monotonic()
    status, out, _ = tenure(capsys, url, "release", "--force", "--semaphore", "pool")
    assert status == 0
    lease = waiter.wait_lease()
    assert waiter.got_at - forced_at < 5, "the waiter slept on instead of being handed permits"
    assert f"  removed  lease {holder_text(b.owner)} (1 permit" in out
    assert f"  handed to a waiter: {holder_text(lease.owner)} (2 permits)" in out
    waiter.done()
    status, _, err = tenure(capsys, url, "release", "--force", "--semaphore", "pool")
    assert status == 1 and "Semaphore 'pool' is not held" in err


def test_release_refuses_without_force_and_a_latch_always(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fair = FairLock(r, "guard", ttl=30).acquire()
    writer = ReadWriteLock(r, "guard", ttl=30).write.acquire()
    permit = Semaphore(r, "guard", permits=1, ttl=30).acquire()
    assert fair and writer and permit and CountDownLatch(r, "gate").try_set_count(1)
    for flag in ("--fair", "--rwlock", "--semaphore"):
        status, out, err = tenure(capsys, url, "release", flag, "guard")
        assert status == 2 and out == "" and "add --force" in err
    _, data = tenure_json(capsys, url, "inspect", "guard")
    assert [x["holder"] for x in data["locks"]] == [fair.owner, writer.owner, permit.owner]

    status, _, err = tenure(capsys, url, "release", "--force", "--latch", "gate")
    assert status == 2 and "a CountDownLatch is not a lock" in err
    status, _, err = tenure(capsys, url, "release", "--force", "gate")
    assert status == 1 and "the CountDownLatch 'gate' is not a lock" in err
    assert CountDownLatch(r, "gate").count() == 1
    status, _, err = tenure(capsys, url, "release", "--force", "--token", "t", "guard")
    assert status == 2 and "add --semaphore" in err
    status, _, err = tenure(capsys, url, "release", "--force", "--fair", "--key", "k")
    assert status == 2 and "--fair and --key" in err
    with pytest.raises(SystemExit) as exited:
        tenure(capsys, url, "release", "--force", "--fair", "--rwlock", "guard")
    assert exited.value.code == 2

    status, _, err = tenure(capsys, url, "release", "--force", "guard")
    assert status == 1 and "(the FairLock 'guard' is held: add --fair)" in err
    status, _, err = tenure(capsys, url, "release", "--force", "--rlock", "guard")
    assert status == 1 and "use --fair instead of --rlock" in err


# --- doctor --------------------------------------------------------------------------------


def doctor(capsys: pytest.CaptureFixture[str], url: str) -> tuple[int, str, dict[str, Any]]:
    """Run the doctor twice, as text and as JSON: (status, text, {check: finding})."""
    status, out, _ = tenure(capsys, url, "doctor")
    status_json, data = tenure_json(capsys, url, "doctor")
    assert status_json == status
    assert (data["hazards"] > 0) == (status == 1)
    return status, out, {f["check"]: f for f in data["findings"]}


def hazards(findings: dict[str, Any]) -> set[str]:
    return {check for check, f in findings.items() if f["level"] == "hazard"}


def redis_62() -> bool:
    binary = os.environ.get("TENURE_SERVER")
    return bool(binary) and "v=6." in server_version(binary or "")


def test_doctor_on_a_safe_server(
    make_server: MakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_server(args=SAFE)
    status, out, findings = doctor(capsys, server.url)
    assert status == 0, out
    assert hazards(findings) == set()
    assert out.startswith("server: ")
    assert "(standalone)" in out.splitlines()[0]
    assert "no hazards found" in out
    assert findings["appendonly"]["level"] == "ok"


def test_doctor_no_aof(make_server: MakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    server = make_server(args=("--appendonly", "no"))
    status, out, findings = doctor(capsys, server.url)
    assert status == 1
    assert hazards(findings) == {"appendonly"}
    assert "HAZARD  appendonly" in out and "what to do: set appendonly yes" in out


def test_doctor_appendfsync_everysec(
    make_server: MakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_server(args=("--appendonly", "yes", "--appendfsync", "everysec"))
    status, out, findings = doctor(capsys, server.url)
    assert status == 1
    assert hazards(findings) == {"appendfsync"}
    assert "HAZARD  appendfsync" in out and "everysec" in out


def test_doctor_eviction_of_keys_with_a_ttl(
    make_server: MakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_server(args=(*SAFE, "--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"))
    status, out, findings = doctor(capsys, server.url)
    assert status == 1
    assert hazards(findings) == {"maxmemory-policy"}
    assert "volatile-lru" in findings["maxmemory-policy"]["message"]
    assert "HAZARD  maxmemory-policy" in out


def test_doctor_a_user_who_may_not_run_evalsha(
    make_server: MakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    if redis_62():
        pytest.skip("Redis 6.2 has no ACL DRYRUN: the doctor skips the ACL check there")
    server = make_server(args=SAFE)
    admin = redis.Redis.from_url(server.url)
    admin.acl_setuser(
        "app", enabled=True, passwords=["+secret"], keys=["*"], channels=["*"],
        categories=["+@all"], commands=["-evalsha"],
    )  # fmt: skip
    status, out, findings = doctor(capsys, server.url.replace("//", "//app:secret@"))
    assert status == 1
    assert hazards(findings) == {"acl"}
    assert "EVALSHA" in findings["acl"]["message"] and "'app'" in findings["acl"]["message"]
    assert "HAZARD  acl" in out
    admin.close()


def test_doctor_checks_it_cant_make_are_notes(
    make_server: MakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_server(args=SAFE)
    admin = redis.Redis.from_url(server.url)
    admin.acl_setuser(
        "ops", enabled=True, passwords=["+secret"], keys=["*"], channels=["*"],
        categories=["+@all"], commands=["-config", "-acl"],
    )  # fmt: skip
    status, out, findings = doctor(capsys, server.url.replace("//", "//ops:secret@"))
    assert status == 0, out
    assert findings["appendfsync"]["level"] == "note"
    assert "can't check appendfsync" in out
    assert findings["acl"]["level"] == "note" and "skipped" in findings["acl"]["message"]
    admin.close()


def test_doctor_skips_the_acl_check_on_redis_62(
    make_server: MakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    if not redis_62():
        pytest.skip("only Redis 6.2 lacks ACL DRYRUN")
    status, _, findings = doctor(capsys, make_server(args=SAFE).url)
    assert status == 0
    assert "no ACL DRYRUN" in findings["acl"]["message"]


def test_doctor_on_a_master_and_its_replica(
    make_server: MakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    master = make_server(args=(*SAFE, "--repl-diskless-sync-delay", "0"))
    replica = make_server(args=(*SAFE, "--replicaof", "127.0.0.1", str(master.port)))
    client = redis.Redis.from_url(master.url)

    def online() -> bool:
        first = client.info("replication").get("slave0")
        return isinstance(first, dict) and first.get("state") == "online"

    wait_until(online, timeout=20)

    status, out, findings = doctor(capsys, master.url)
    assert status == 0, out
    assert findings["replicas"]["level"] == "note"
    assert f"127.0.0.1:{replica.port} (online" in findings["replicas"]["message"]

    status, out, findings = doctor(capsys, replica.url)
    assert status == 1
    assert hazards(findings) == {"replica"}
    assert f"replica of 127.0.0.1:{master.port}" in findings["replica"]["message"]
    assert "(replica)" in out.splitlines()[0]

    replica.pause()  # no acks: the master sees the replica's lag grow
    try:
        time.sleep(3.5)
        status, out, findings = doctor(capsys, master.url)
    finally:
        replica.resume()
    assert status == 1
    assert hazards(findings) == {"replication-lag"}
    assert f"127.0.0.1:{replica.port}" in findings["replication-lag"]["message"]
    client.close()


def test_doctor_a_cluster_node_without_slots(
    make_server: MakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_server(args=(*SAFE, "--cluster-enabled", "yes"))
    status, out, findings = doctor(capsys, server.url)
    assert status == 1
    assert hazards(findings) == {"cluster"}
    assert "cluster_state is fail" in findings["cluster"]["message"]
    assert "(cluster)" in out.splitlines()[0]


def test_doctor_unreachable_server_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", "redis://127.0.0.1:1/0", "doctor"]) == 2
    assert "tenure:" in capsys.readouterr().err
