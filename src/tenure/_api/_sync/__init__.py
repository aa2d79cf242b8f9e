# GENERATED from _async/__init__.py by scripts/unasync.py: do not edit.
"""The synchronous facade. GENERATED from the asyncio facade (``_async/``): do not edit.

One module per kind of lock (``lock``, ``fair``, ``rlock``, ``rwlock``,
``multi``, ``redlock``, ``fenced``, ``semaphore``, ``latch``, ``election``,
``redlock_election``) on shared ones, each importing only those after it:
``_holds`` (the reentrant holds of ``RLock`` and ``ReadWriteLock``),
``_base`` (the lease options, the lease a lock object issues), ``_blocks``
(``with`` blocks, decorated calls, ``current_lease()``) and ``_grants``
(an acquire's plan run, its grant made a lease or given back, its telemetry).
Edit the files of ``_async/``, then run ``python scripts/unasync.py`` to
regenerate ``_sync/`` from them, file by file (CI runs it with ``--check``).

Every constructor checks its ``client`` first (``_driver.check_client``), before
anything is sent. The docstrings name redis-py's exceptions
(``redis.exceptions.ConnectionError``); with a valkey-py client, the same errors
are valkey-py's own (``valkey.exceptions.ConnectionError``): tenure lets the
client library's connection errors through unchanged.

Only ``lock`` (``Lock``, ``Lease``, which the other kinds build on) is
imported with the package: every other kind's classes are imported on their
first use (``__getattr__``), with the modules only that kind needs (its plans,
a Redlock's fan-out), so that a program pays at import for the kinds it uses.
"""

import sys
from typing import TYPE_CHECKING

from ._base import DEFAULT_TTL as DEFAULT_TTL
from .lock import Lease as Lease
from .lock import Lock as Lock

if TYPE_CHECKING:  # imported on first use (__getattr__ below)
    from .election import Election as Election
    from .election import Leadership as Leadership
    from .fair import FairLock as FairLock
    from .fenced import FencedKey as FencedKey
    from .latch import CountDownLatch as CountDownLatch
    from .multi import MultiLease as MultiLease
    from .multi import MultiLock as MultiLock
    from .redlock import Redlock as Redlock
    from .redlock import RedlockLease as RedlockLease
    from .redlock_election import RedlockElection as RedlockElection
    from .redlock_election import RedlockLeadership as RedlockLeadership
    from .rlock import RLock as RLock
    from .rlock import RLockLease as RLockLease
    from .rwlock import ReadWriteLease as ReadWriteLease
    from .rwlock import ReadWriteLock as ReadWriteLock
    from .rwlock import ReadWriteView as ReadWriteView
    from .semaphore import Semaphore as Semaphore
    from .semaphore import SemaphoreLease as SemaphoreLease

#: The classes imported on their first use, by the module that defines them.
_LATER = {
    "CountDownLatch": "latch",
    "Election": "election",
    "FairLock": "fair",
    "FencedKey": "fenced",
    "Leadership": "election",
    "MultiLease": "multi",
    "MultiLock": "multi",
    "RLock": "rlock",
    "RLockLease": "rlock",
    "ReadWriteLease": "rwlock",
    "ReadWriteLock": "rwlock",
    "ReadWriteView": "rwlock",
    "Redlock": "redlock",
    "RedlockLease": "redlock",
    "RedlockElection": "redlock_election",
    "RedlockLeadership": "redlock_election",
    "Semaphore": "semaphore",
    "SemaphoreLease": "semaphore",
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
