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

The classes on several locks or servers at once (``multi``, ``redlock``,
``redlock_election``) and the election's are imported on their first use
(``__getattr__``), so that an import of the package does not pay for them.
"""

from typing import TYPE_CHECKING

from ._base import DEFAULT_TTL as DEFAULT_TTL
from .fair import AsyncFairLock as AsyncFairLock
from .fenced import AsyncFencedKey as AsyncFencedKey
from .latch import AsyncCountDownLatch as AsyncCountDownLatch
from .lock import AsyncLease as AsyncLease
from .lock import AsyncLock as AsyncLock
from .rlock import AsyncRLock as AsyncRLock
from .rlock import AsyncRLockLease as AsyncRLockLease
from .rwlock import AsyncReadWriteLease as AsyncReadWriteLease
from .rwlock import AsyncReadWriteLock as AsyncReadWriteLock
from .rwlock import AsyncReadWriteView as AsyncReadWriteView
from .semaphore import AsyncSemaphore as AsyncSemaphore
from .semaphore import AsyncSemaphoreLease as AsyncSemaphoreLease

if TYPE_CHECKING:  # imported on first use (__getattr__ below)
    from .election import AsyncElection as AsyncElection
    from .election import AsyncLeadership as AsyncLeadership
    from .multi import AsyncMultiLease as AsyncMultiLease
    from .multi import AsyncMultiLock as AsyncMultiLock
    from .redlock import AsyncRedlock as AsyncRedlock
    from .redlock import AsyncRedlockLease as AsyncRedlockLease
    from .redlock_election import AsyncRedlockElection as AsyncRedlockElection
    from .redlock_election import AsyncRedlockLeadership as AsyncRedlockLeadership

#: The classes imported on their first use, by the module that defines them.
_LATER = {
    "AsyncElection": "election",
    "AsyncLeadership": "election",
    "AsyncMultiLease": "multi",
    "AsyncMultiLock": "multi",
    "AsyncRedlock": "redlock",
    "AsyncRedlockLease": "redlock",
    "AsyncRedlockElection": "redlock_election",
    "AsyncRedlockLeadership": "redlock_election",
}

if not TYPE_CHECKING:  # (a type checker reads the imports above, and no other name)

    def __getattr__(name: str) -> object:
        where = _LATER.get(name)
        if where == "multi":
            from . import multi as module
        elif where == "redlock":
            from . import redlock as module
        elif where == "election":
            from . import election as module
        elif where == "redlock_election":
            from . import redlock_election as module
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        # all of the module's classes, so that the package holds them from now on
        globals().update({n: getattr(module, n) for n, w in _LATER.items() if w == where})
        return globals()[name]
