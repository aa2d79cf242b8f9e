# GENERATED from _async/__init__.py by scripts/unasync.py: do not edit.
"""The synchronous facade. GENERATED from the asyncio facade (``_async/``): do not edit.

One module per kind of lock (``lock``, ``fair``, ``rlock``, ``rwlock``,
``multi``, ``redlock``, ``fenced``, ``semaphore``, ``latch``, ``election``) on
two shared ones: ``_base``
(the lease options, ``with`` blocks, the lease a lock object issues) and
``_holds`` (the reentrant holds of ``RLock`` and ``ReadWriteLock``).
Edit the files of ``_async/``, then run ``python scripts/unasync.py`` to
regenerate ``_sync/`` from them, file by file (CI runs it with ``--check``).

Every constructor checks its ``client`` first (``_driver.check_client``), before
anything is sent. The docstrings name redis-py's exceptions
(``redis.exceptions.ConnectionError``); with a valkey-py client, the same errors
are valkey-py's own (``valkey.exceptions.ConnectionError``): tenure lets the
client library's connection errors through unchanged.
"""

from ._base import DEFAULT_TTL as DEFAULT_TTL
from .election import Election as Election
from .election import Leadership as Leadership
from .fair import FairLock as FairLock
from .fenced import FencedKey as FencedKey
from .latch import CountDownLatch as CountDownLatch
from .lock import Lease as Lease
from .lock import Lock as Lock
from .multi import MultiLease as MultiLease
from .multi import MultiLock as MultiLock
from .redlock import Redlock as Redlock
from .redlock import RedlockLease as RedlockLease
from .rlock import RLock as RLock
from .rlock import RLockLease as RLockLease
from .rwlock import ReadWriteLease as ReadWriteLease
from .rwlock import ReadWriteLock as ReadWriteLock
from .rwlock import ReadWriteView as ReadWriteView
from .semaphore import Semaphore as Semaphore
from .semaphore import SemaphoreLease as SemaphoreLease
