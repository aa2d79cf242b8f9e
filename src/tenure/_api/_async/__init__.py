"""The asyncio facade. The synchronous facade is generated from this package.

One module per kind of lock (``lock``, ``fair``, ``rlock``, ``rwlock``,
``multi``, ``redlock``, ``fenced``, ``semaphore``, ``latch``, ``election``) on
two shared ones: ``_base``
(the lease options, ``async with`` blocks, the lease a lock object issues) and
``_holds`` (the reentrant holds of ``AsyncRLock`` and ``AsyncReadWriteLock``).
Edit the files of ``_async/``, then run ``python scripts/unasync.py`` to
regenerate ``_sync/`` from them, file by file (CI runs it with ``--check``).

Every constructor checks its ``client`` first (``_driver.check_client``), before
anything is sent. The docstrings name redis-py's exceptions
(``redis.exceptions.ConnectionError``); with a valkey-py client, the same errors
are valkey-py's own (``valkey.exceptions.ConnectionError``): tenure lets the
client library's connection errors through unchanged.
"""

from ._base import DEFAULT_TTL as DEFAULT_TTL
from .election import AsyncElection as AsyncElection
from .election import AsyncLeadership as AsyncLeadership
from .fair import AsyncFairLock as AsyncFairLock
from .fenced import AsyncFencedKey as AsyncFencedKey
from .latch import AsyncCountDownLatch as AsyncCountDownLatch
from .lock import AsyncLease as AsyncLease
from .lock import AsyncLock as AsyncLock
from .multi import AsyncMultiLease as AsyncMultiLease
from .multi import AsyncMultiLock as AsyncMultiLock
from .redlock import AsyncRedlock as AsyncRedlock
from .redlock import AsyncRedlockLease as AsyncRedlockLease
from .rlock import AsyncRLock as AsyncRLock
from .rlock import AsyncRLockLease as AsyncRLockLease
from .rwlock import AsyncReadWriteLease as AsyncReadWriteLease
from .rwlock import AsyncReadWriteLock as AsyncReadWriteLock
from .rwlock import AsyncReadWriteView as AsyncReadWriteView
from .semaphore import AsyncSemaphore as AsyncSemaphore
from .semaphore import AsyncSemaphoreLease as AsyncSemaphoreLease
