"""The asyncio facade. The synchronous facade is generated from this package.

One module per kind of lock (``lock``, ``fair``, ``rlock``, ``rwlock``,
``multi``, ``redlock``, ``fenced``, ``semaphore``, ``latch``, ``election``,
``redlock_election``) on shared ones, each importing only those after it:
``_holds`` (the reentrant holds of ``AsyncRLock`` and ``AsyncReadWriteLock``),
``_base`` (the lease options, the lease a lock object issues), ``_blocks``
(``async with`` blocks, decorated calls, ``current_lease()``) and ``_grants``
(an acquire's plan run, its grant made a lease or given back, its telemetry).
Edit the files of ``_async/``, then run ``python scripts/unasync.py`` to
regenerate ``_sync/`` from them, file by file (CI runs it with ``--check``).

Every constructor checks its ``client`` first (``_driver.check_client``), before
anything is sent. The docstrings name redis-py's exceptions
(``redis.exceptions.ConnectionError``); with a valkey-py client, the same errors
are valkey-py's own (``valkey.exceptions.ConnectionError``): tenure lets the
client library's connection errors through unchanged.

Only ``lock`` (``AsyncLock``, ``AsyncLease``, which the other kinds build on) is
imported with the package: every other kind's classes are imported on their
first use (``__getattr__``), with the modules only that kind needs (its plans,
a Redlock's fan-out), so that a program pays at import for the kinds it uses.
"""

import sys
from typing import TYPE_CHECKING

from ._base import DEFAULT_TTL as DEFAULT_TTL
from .lock import AsyncLease as AsyncLease
from .lock import AsyncLock as AsyncLock

if TYPE_CHECKING:  # imported on first use (__getattr__ below)
    from .election import AsyncElection as AsyncElection
    from .election import AsyncLeadership as AsyncLeadership
    from .fair import AsyncFairLock as AsyncFairLock
    from .fenced import AsyncFencedKey as AsyncFencedKey
    from .latch import AsyncCountDownLatch as AsyncCountDownLatch
    from .multi import AsyncMultiLease as AsyncMultiLease
    from .multi import AsyncMultiLock as AsyncMultiLock
    from .redlock import AsyncRedlock as AsyncRedlock
    from .redlock import AsyncRedlockLease as AsyncRedlockLease
    from .redlock_election import AsyncRedlockElection as AsyncRedlockElection
    from .redlock_election import AsyncRedlockLeadership as AsyncRedlockLeadership
    from .rlock import AsyncRLock as AsyncRLock
    from .rlock import AsyncRLockLease as AsyncRLockLease
    from .rwlock import AsyncReadWriteLease as AsyncReadWriteLease
    from .rwlock import AsyncReadWriteLock as AsyncReadWriteLock
    from .rwlock import AsyncReadWriteView as AsyncReadWriteView
    from .semaphore import AsyncSemaphore as AsyncSemaphore
    from .semaphore import AsyncSemaphoreLease as AsyncSemaphoreLease

#: The classes imported on their first use, by the module that defines them.
_LATER = {
    "AsyncCountDownLatch": "latch",
    "AsyncElection": "election",
    "AsyncFairLock": "fair",
    "AsyncFencedKey": "fenced",
    "AsyncLeadership": "election",
    "AsyncMultiLease": "multi",
    "AsyncMultiLock": "multi",
    "AsyncRLock": "rlock",
    "AsyncRLockLease": "rlock",
    "AsyncReadWriteLease": "rwlock",
    "AsyncReadWriteLock": "rwlock",
    "AsyncReadWriteView": "rwlock",
    "AsyncRedlock": "redlock",
    "AsyncRedlockLease": "redlock",
    "AsyncRedlockElection": "redlock_election",
    "AsyncRedlockLeadership": "redlock_election",
    "AsyncSemaphore": "semaphore",
    "AsyncSemaphoreLease": "semaphore",
}

if not TYPE_CHECKING:  # (a type checker reads the imports above, and no other name)

    def __getattr__(name: str) -> object:
        where = _LATER.get(name)
        if where == "rlock":
            from . import rlock as module
        elif where == "fair":
            from . import fair as module
        elif where == "rwlock":
            from . import rwlock as module
        elif where == "semaphore":
            from . import semaphore as module
        elif where == "latch":
            from . import latch as module
        elif where == "fenced":
            from . import fenced as module
        elif where == "multi":
            from . import multi as module
        elif where == "redlock":
            from . import redlock as module
        elif where == "election":
            from . import election as module
        elif where == "redlock_election":
            from . import redlock_election as module
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        # the classes of every such module imported by now (this one, and one it
        # imports: an election's fair lock), so that the package holds them from
        # now on; a module another thread is still importing has only some of
        # its names yet, and the others are looked up again when asked for
        loaded = {w: sys.modules.get(f"{__name__}.{w}") for w in set(_LATER.values())}
        found = ((n, getattr(loaded[w], n, None)) for n, w in _LATER.items() if loaded[w])
        globals().update({n: value for n, value in found if value is not None})
        return getattr(module, name)
