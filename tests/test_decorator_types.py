"""The types of the guards' decorators and of ``current_lease()``, as mypy
reads them: ``skip=True`` adds ``None`` to a decorated function's result
(``-> int`` becomes ``-> int | None``, a coroutine function's likewise),
without ``skip`` the function keeps its type, and ``current_lease()`` is the
guard's lease class.

This module is checked by ``mypy --strict`` with the rest of ``tests/``
(``make typecheck``): each ``assert_type`` below is a claim mypy verifies.
:func:`test_mypy_tells_skip_from_no_skip` runs mypy on a few wrong claims too,
so that a change that lost the ``None`` (or added it without ``skip``) fails
here whatever else mypy is run on.
"""

from __future__ import annotations

import asyncio
import os
import textwrap
from pathlib import Path
from typing import assert_type

import pytest
import redis
import redis.asyncio

from tenure import (
    AsyncLease,
    AsyncLock,
    AsyncSemaphore,
    AsyncSemaphoreLease,
    Lease,
    Lock,
    MultiLease,
    MultiLock,
    ReadWriteLease,
    ReadWriteLock,
    RLock,
    RLockLease,
    Semaphore,
    SemaphoreLease,
)
from tenure._server import ServerProcess

ROOT = Path(__file__).resolve().parent.parent


def _sync_types(client: redis.Redis) -> None:
    """The synchronous guards' decorators and leases, as typed."""
    lock = Lock(client, "types")

    @lock(timeout=0, skip=True)
    def skipped(x: int) -> int:
        assert_type(lock.current_lease(), Lease)
        return x

    @lock(timeout=0)
    def timed(x: int) -> int:
        return x

    @lock
    def plain(x: int) -> int:
        return x

    @lock(timeout=0, skip=False)
    def not_skipped(x: int) -> int:
        return x

    assert_type(skipped(1), int | None)
    assert_type(timed(1), int)
    assert_type(plain(1), int)
    assert_type(not_skipped(1), int)

    sem = Semaphore(client, "types-sem", permits=2)

    @sem(2, skip=True)
    def some() -> str:
        assert_type(sem.current_lease(), SemaphoreLease)
        return ""

    @sem(2)
    def always() -> str:
        return ""

    assert_type(some(), str | None)
    assert_type(always(), str)
    rlock, rw, multi = (
        RLock(client, "types-r"),
        ReadWriteLock(client, "types-rw"),
        MultiLock([lock]),
    )
    with rlock, rw.read, multi:
        assert_type(rlock.current_lease(), RLockLease)
        assert_type(rw.read.current_lease(), ReadWriteLease)
        assert_type(multi.current_lease(), MultiLease)

    flag = bool(os.environ.get("TENURE_TYPES_FLAG"))

    @lock(timeout=0, skip=flag)  # (not known: as if it might skip)
    def maybe() -> int:
        return 0

    assert_type(maybe(), int | None)


async def _async_types(client: redis.asyncio.Redis) -> None:
    """The asyncio guards' decorators and leases, as typed."""
    lock = AsyncLock(client, "types")

    @lock(timeout=0, skip=True)
    async def skipped(x: int) -> int:
        assert_type(lock.current_lease(), AsyncLease)
        return x

    @lock(timeout=0)
    async def timed(x: int) -> int:
        return x

    assert_type(await skipped(1), int | None)
    task = asyncio.create_task(skipped(1))  # (a coroutine, as create_task wants)
    assert_type(await task, int | None)
    assert_type(await timed(1), int)

    sem = AsyncSemaphore(client, "types-sem", permits=2)

    @sem(1, timeout=1, skip=True)
    async def some() -> bytes:
        assert_type(sem.current_lease(), AsyncSemaphoreLease)
        return b""

    assert_type(await some(), bytes | None)


def test_the_typed_decorators_decorate(server: ServerProcess) -> None:
    """The functions above run, on a server (``assert_type`` returns its
    argument at run time)."""
    client = redis.Redis.from_url(server.url)
    _sync_types(client)
    client.close()

    async def main() -> None:
        aclient = redis.asyncio.Redis.from_url(server.url)
        await _async_types(aclient)
        await aclient.aclose()

    asyncio.run(main())


#: Claims mypy must refuse, one a line (each line's number is checked).
WRONG = """\
    import redis
    import redis.asyncio
    from typing import assert_type
    from tenure import AsyncLock, Lock, Semaphore

    lock = Lock(redis.Redis(), "wrong")
    sem = Semaphore(redis.Redis(), "wrong", permits=1)
    alock = AsyncLock(redis.asyncio.Redis(), "wrong")

    @lock(skip=True)
    def skipped() -> int: return 1

    @lock(timeout=1)
    def kept() -> int: return 1

    @sem(1, skip=True)
    def sem_skipped() -> int: return 1

    @alock(skip=True)
    async def askipped() -> int: return 1

    async def use() -> None:
        assert_type(await askipped(), int | None)
        assert_type(await askipped(), int)  # wrong
    assert_type(skipped(), int | None)
    assert_type(skipped(), int)  # wrong
    assert_type(kept(), int)
    assert_type(kept(), int | None)  # wrong
    assert_type(sem_skipped(), int)  # wrong
    x: int = skipped()  # wrong
"""


@pytest.mark.once
def test_mypy_tells_skip_from_no_skip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mypy (the repository's settings) refuses exactly the wrong claims of
    :data:`WRONG`: so the ``assert_type`` checks of this module can fail."""
    from mypy import api

    source = tmp_path / "wrong.py"
    source.write_text(textwrap.dedent(WRONG))
    wrong = [i for i, line in enumerate(source.read_text().splitlines(), 1) if "# wrong" in line]
    monkeypatch.setenv("MYPYPATH", str(ROOT / "src"))  # (this tree's tenure)
    out, err, _ = api.run(
        [
            "--strict",
            "--no-incremental",
            "--cache-dir",
            os.devnull,
            "--python-version",
            "3.11",
            "--ignore-missing-imports",
            str(source),
        ]
    )
    errors = sorted(
        int(line.split(":")[1])
        for line in out.splitlines()
        if line.startswith(str(source)) and ": error:" in line
    )
    assert errors == wrong, out + err
