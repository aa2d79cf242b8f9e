"""A primitive held by another program with a token that is not UTF-8, written
straight into its keys (redis-py's ``Lock`` takes any bytes as its token,
``os.urandom(16)`` say), for the tests of the reads that show such a holder."""

from __future__ import annotations

import redis

from tenure import LockInfo, ReadWriteInfo, SemaphoreInfo

#: A foreign token that is not UTF-8, and how the reads show it: its bytes
#: escaped, so that it prints anywhere and is visibly no token of tenure's.
NOT_UTF8 = b"\xff\xfe\x80tok"
ESCAPED = "\\xff\\xfe\\x80tok"

#: The kinds :func:`hold_foreign` writes a holder into.
KINDS = ("Lock", "RLock", "FairLock", "ReadWriteLock", "Semaphore")

#: How long the foreign holder holds (ms).
HOLD_MS = 30_000


def hold_foreign(r: redis.Redis, kind: str, name: str, prefix: str = "tenure:") -> None:
    """Write :data:`NOT_UTF8` as the holder of the ``kind`` named ``name`` (a
    lease of :data:`HOLD_MS`), as a foreign program sharing its keys would."""
    base = f"{prefix}{{{name}}}"
    if kind in ("Lock", "FairLock"):
        r.set(base if kind == "Lock" else f"{base}:fair", NOT_UTF8, px=HOLD_MS)
    elif kind == "RLock":
        r.hset(f"{base}:rlock", NOT_UTF8, b"1")
        r.pexpire(f"{base}:rlock", HOLD_MS)
    elif kind == "ReadWriteLock":  # a write hold: "<count>|<fence>|<hold id>"
        field = b"w:" + NOT_UTF8
        r.hset(f"{base}:rwlock", mapping={field: b"1|5|hold", b"mode": b"write"})
        r.zadd(f"{base}:rwlock:holds", {field: _server_ms(r) + HOLD_MS})
    elif kind == "Semaphore":  # one permit: "<token>#<n>"
        r.zadd(f"{base}:semaphore", {NOT_UTF8 + b"#1": _server_ms(r) + HOLD_MS})
    else:
        raise AssertionError(kind)


def holder_of(info: object) -> str | None:
    """The (first) holder's token or owner id in an ``info()`` snapshot."""
    if isinstance(info, LockInfo):
        return info.holder
    if isinstance(info, ReadWriteInfo):
        return info.holders[0].owner if info.holders else None
    assert isinstance(info, SemaphoreInfo), info
    return info.holders[0].token if info.holders else None


def _server_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return seconds * 1000 + micros // 1000
