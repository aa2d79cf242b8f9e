"""Every script touches one hash slot: what the scripts do, seen by the server.

``tests/test_keys.py`` proves that the key builders put every key and wake
channel of one primitive in one slot. This test checks what actually reaches
the server: every primitive (and ``MultiLock``'s parts, a ``Redlock`` over three
masters, ``FencedKey``, the operator's reads) is driven through acquire,
contention and hand-off, extend and release, for ordinary and odd names
(braces, an empty hash tag, a space, unicode, a long one), while ``MONITOR`` records every command.
For each script call: its ``KEYS`` hash to one slot; every key its commands
touch (``COMMAND GETKEYS``, asked of the server) is one of its ``KEYS``; and
every channel it publishes on hashes to that slot too. Every script of
:data:`tenure._scripts.ALL` must have been seen (``acl_keys``, which only asks
the ACL about the keys it is given as arguments and touches none, with its
arguments in one slot).
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from tenure import (
    CountDownLatch,
    Election,
    FairLock,
    FencedKey,
    Lock,
    MultiLock,
    PermissionDenied,
    ReadWriteLock,
    ReadWriteView,
    Redlock,
    RLock,
    Semaphore,
)
from tenure._drivers import _clients
from tenure._scripts import ALL
from tenure._server import ServerProcess

#: Names whose keys and channels must stay in one slot: braces anywhere, an
#: empty hash tag, a space, unicode, a percent sign, a long one.
NAMES = ["orders:42", "}x{", "a{}b", "}{x}", "a b é🔒 %7B", "n" * 300]

#: How long a waiter gets to queue before the holder lets go, seconds.
QUEUE = 0.15

_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{2}|.)", re.DOTALL)
_CONTROL = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b"}


def _unescape(text: bytes) -> bytes:
    """One argument of a MONITOR line, as sent (the server escapes quotes,
    backslashes, control and non-ASCII bytes)."""

    def one(m: re.Match[bytes]) -> bytes:
        c = m.group(1)
        if len(c) == 3 and c[:1] == b"x":
            return bytes([int(c[1:], 16)])
        return _CONTROL.get(c, c)

    return _ESCAPE.sub(one, text)


@dataclass
class Run:
    """One script call seen by MONITOR: its script, KEYS, ARGV and the commands it ran."""

    script: str
    keys: list[bytes]
    args: list[bytes]
    calls: list[list[bytes]] = field(default_factory=list)


class Monitor:
    """Records every command one server runs (a MONITOR connection read by a thread)."""

    def __init__(self, port: int) -> None:
        self.client = redis.Redis(port=port)
        self.lines: list[bytes] = []
        self._conn: Any = self.client.connection_pool.get_connection()
        self._conn.send_command("MONITOR")  # type: ignore[no-untyped-call]
        assert self._conn.read_response() in (b"OK", "OK")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            if self._conn.can_read(timeout=0.05):
                self.lines.append(self._conn.read_response())

    def stop(self) -> None:
        time.sleep(0.1)  # the last lines arrive
        self._stop.set()
        self._thread.join()
        self._conn.disconnect()
        self.client.close()

    def runs(self, names: dict[bytes, str]) -> list[Run]:
        """The script calls recorded (``names``: script name by SHA-1), with the
        commands each ran (MONITOR shows a script's own commands, marked ``lua``,
        right after its EVALSHA; a NOSCRIPT-refused EVALSHA shows none)."""
        runs: list[Run] = []
        current: Run | None = None
        for line in self.lines:
            head, _, rest = line.partition(b"] ")
            args = [_unescape(a) for a in _ARG.findall(rest)]
            if head.endswith(b" lua"):
                assert current is not None, line
                current.calls.append(args)
                continue
            current = None
            if args and args[0].upper() == b"EVALSHA":
                count = int(args[2])
                current = Run(names[args[1]], args[3 : 3 + count], args[3 + count :])
                runs.append(current)
        return runs


def _shas() -> dict[bytes, str]:
    return {
        variant.sha1.encode(): spec.name
        for spec in ALL
        for variant in (spec, _clients.sharded(spec))
    }


def _keys_of(client: redis.Redis, call: list[bytes]) -> list[bytes]:
    """The keys of one command, as the server finds them (none for TIME, PUBLISH, ...)."""
    try:
        keys = client.command_getkeys(*call)
    except redis.ResponseError:  # "no key arguments" / "invalid arguments"
        return []
    return [k if isinstance(k, bytes) else str(k).encode() for k in keys]


def _contend(make: Callable[[], Any], other: Callable[[], Any]) -> None:
    """``make()`` acquires; ``other()`` queues behind it; extend, read, release
    (a hand-off to the waiter, who releases too)."""
    holder = make()
    lease = holder.acquire(timeout=5)
    assert lease is not None
    done: list[bool] = []

    def wait() -> None:
        got = other().acquire(timeout=5)
        done.append(got is not None)
        if got is not None:
            got.release()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(QUEUE)
    # queued for sure, so that the release hands off (under load)
    deadline = time.monotonic() + 5
    while not _queued(holder) and time.monotonic() < deadline:
        time.sleep(0.01)
    lease.extend(5)
    if hasattr(holder, "info"):
        holder.info()
    lease.release()
    thread.join(10)
    assert done == [True]


def _queued(holder: Any) -> bool:
    """Whether a waiter is queued on ``holder``'s lock: its ``info()`` (a
    read-write view's lock's), or for a Redlock (no ``info``) its waiters on
    a quorum of its masters."""
    if hasattr(holder, "info"):
        return bool(holder.info().waiters >= 1)
    if isinstance(holder, ReadWriteView):
        return bool(holder.lock.info().waiters >= 1)
    assert isinstance(holder, Redlock), holder
    masters: tuple[redis.Redis, ...] = holder._clients  # type: ignore[assignment]
    queued = [m for m in masters if int(m.zcard(holder._keys.quorum)) >= 1]
    return len(queued) > len(masters) // 2


def _exercise(r: redis.Redis, r2: redis.Redis, name: str) -> None:
    """Every primitive named ``name``, through acquire, a hand-off, extend, read and release."""
    _contend(lambda: Lock(r, name, ttl=5), lambda: Lock(r2, name, ttl=5))
    _contend(lambda: Lock(r, key=name, ttl=5), lambda: Lock(r2, key=name, ttl=5))
    _contend(lambda: RLock(r, name, ttl=5), lambda: RLock(r2, name, ttl=5))
    _contend(lambda: FairLock(r, name, ttl=5), lambda: FairLock(r2, name, ttl=5))
    _contend(
        lambda: ReadWriteLock(r, name, ttl=5).read, lambda: ReadWriteLock(r2, name, ttl=5).write
    )
    _contend(lambda: Semaphore(r, name, 1, ttl=5), lambda: Semaphore(r2, name, 1, ttl=5))
    ReadWriteLock(r, name, ttl=5).info()
    # more permits while one waits: set_permits hands them out
    pool = Semaphore(r, name + "+", 1, ttl=5)
    held = pool.acquire()
    assert held is not None
    got: list[Any] = []
    thread = threading.Thread(
        target=lambda: got.append(Semaphore(r2, name + "+", 1, ttl=5).acquire(timeout=5))
    )
    thread.start()
    deadline = time.monotonic() + 5
    while pool.info().waiters < 1 and time.monotonic() < deadline:  # (queued: handed out)
        time.sleep(0.01)
    pool.set_permits(2)
    thread.join(10)
    assert got and got[0] is not None
    got[0].release()
    held.release()
    # a latch opened while one waits
    latch = CountDownLatch(r, name)
    assert latch.try_set_count(1)
    opened: list[bool] = []
    thread = threading.Thread(target=lambda: opened.append(CountDownLatch(r2, name).wait(5)))
    thread.start()
    time.sleep(QUEUE)
    latch.info()
    assert latch.count_down() == 0
    thread.join(10)
    assert opened == [True]
    # an election: elected, proclaimed, renewed, read, handed over by a resignation
    leading = Election(r, name, ttl=5).campaign(timeout=5)
    assert leading is not None
    leading.proclaim("v")
    leading.extend()  # (the renewal the watchdog sends)
    elected: list[Any] = []
    thread = threading.Thread(
        target=lambda: elected.append(Election(r2, name, ttl=5).campaign(timeout=5))
    )
    thread.start()
    deadline = time.monotonic() + 5
    while Election(r, name).info().waiters < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert Election(r, name).leader() is not None
    leading.resign()
    thread.join(10)
    assert elected and elected[0] is not None
    elected[0].resign()
    # MultiLock's parts, a fenced write
    lease = MultiLock([Lock(r, name, ttl=5), Lock(r, name + "/2", ttl=5)]).acquire(timeout=5)
    assert lease is not None
    FencedKey(r, name).set("v", fence=max(lease.fence))
    lease.release()


@pytest.fixture
def masters(make_server: Callable[..., ServerProcess]) -> Iterator[list[redis.Redis]]:
    clients = [redis.Redis(port=make_server().port) for _ in range(3)]
    yield clients
    for client in clients:
        client.close()


def test_every_script_touches_one_slot(
    r: redis.Redis, server: ServerProcess, masters: list[redis.Redis]
) -> None:
    r2 = redis.Redis(port=server.port)
    # a user who may touch only keys starting with "other": acl_keys tells why
    r.acl_setuser("slots-limited", enabled=True, passwords=["+pw"], keys=["other*"])
    r.execute_command("ACL", "SETUSER", "slots-limited", "+@all", "&*")  # type: ignore[no-untyped-call]
    limited = redis.Redis(port=server.port, username="slots-limited", password="pw")
    monitors = [Monitor(server.port)] + [
        Monitor(m.connection_pool.connection_kwargs["port"]) for m in masters
    ]
    try:
        for name in NAMES:
            _exercise(r, r2, name)
            redlock = functools.partial(Redlock, masters, name, ttl=5)
            _contend(redlock, redlock)
            with pytest.raises(PermissionDenied):
                Lock(limited, name, ttl=5).acquire(blocking=False)
    finally:
        for monitor in monitors:
            monitor.stop()
        limited.close()
        r2.close()
        r.acl_deluser("slots-limited")
    names = _shas()
    seen: set[str] = set()
    published = 0
    for monitor in monitors:
        for run in monitor.runs(names):
            seen.add(run.script)
            if not run.keys:  # acl_keys: the keys to check come as arguments
                assert run.script == "acl_keys" and run.calls == [], run
                keys = run.args[1 : 1 + int(run.args[0])]  # (then the script's commands)
                assert keys and len({key_slot(k) for k in keys}) == 1, run
                continue
            slot = key_slot(run.keys[0])
            assert {key_slot(k) for k in run.keys} == {slot}, run
            for call in run.calls:
                if call[0].upper() in (b"PUBLISH", b"SPUBLISH"):
                    published += 1
                    assert key_slot(call[1]) == slot, (run.script, call)
                    continue
                for key in _keys_of(r, call):
                    assert key in run.keys, (run.script, call, run.keys)
    assert seen == {spec.name for spec in ALL}, {spec.name for spec in ALL} - seen
    # (not vacuous: about 10 PUBLISH per name, 64 in all on a quiet machine;
    # under load a few hand-offs become plain acquires, 57 to 59 seen)
    assert published >= 8 * len(NAMES)
