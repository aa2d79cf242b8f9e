"""tenure: distributed locks, leases and synchronization primitives for Redis and Valkey.

Every primitive comes as a synchronous class and an ``Async*`` twin with the
same arguments and semantics. The safety model: docs/safety-in-plain-words.md.
"""

from typing import TYPE_CHECKING

from ._api._sync import DEFAULT_TTL as DEFAULT_TTL
from ._api._sync import Lease as Lease
from ._api._sync import Lock as Lock
from ._errors import AcquireTimeout as AcquireTimeout
from ._errors import AlreadyHeldError as AlreadyHeldError
from ._errors import InvalidArgument as InvalidArgument
from ._errors import LockLostError as LockLostError
from ._errors import LockUpgradeError as LockUpgradeError
from ._errors import NoQuorumError as NoQuorumError
from ._errors import NotOwnedError as NotOwnedError
from ._errors import NotReplicatedError as NotReplicatedError
from ._errors import PermissionDenied as PermissionDenied
from ._errors import ProtocolError as ProtocolError
from ._errors import StaleFenceError as StaleFenceError
from ._errors import TenureError as TenureError
from ._errors import UnsupportedServer as UnsupportedServer
from ._errors import WrongTypeError as WrongTypeError
from ._models import LeaseBase as LeaseBase
from ._telemetry import configure_telemetry as configure_telemetry

if TYPE_CHECKING:  # imported on first use (__getattr__ below)
    from ._adaptive import AdaptiveTTL as AdaptiveTTL
    from ._api._async import AsyncCountDownLatch as AsyncCountDownLatch
    from ._api._async import AsyncElection as AsyncElection
    from ._api._async import AsyncFairLock as AsyncFairLock
    from ._api._async import AsyncFencedKey as AsyncFencedKey
    from ._api._async import AsyncLeadership as AsyncLeadership
    from ._api._async import AsyncLease as AsyncLease
    from ._api._async import AsyncLock as AsyncLock
    from ._api._async import AsyncMultiLease as AsyncMultiLease
    from ._api._async import AsyncMultiLock as AsyncMultiLock
    from ._api._async import AsyncReadWriteLease as AsyncReadWriteLease
    from ._api._async import AsyncReadWriteLock as AsyncReadWriteLock
    from ._api._async import AsyncReadWriteView as AsyncReadWriteView
    from ._api._async import AsyncRedlock as AsyncRedlock
    from ._api._async import AsyncRedlockElection as AsyncRedlockElection
    from ._api._async import AsyncRedlockLeadership as AsyncRedlockLeadership
    from ._api._async import AsyncRedlockLease as AsyncRedlockLease
    from ._api._async import AsyncRLock as AsyncRLock
    from ._api._async import AsyncRLockLease as AsyncRLockLease
    from ._api._async import AsyncSemaphore as AsyncSemaphore
    from ._api._async import AsyncSemaphoreLease as AsyncSemaphoreLease
    from ._api._sync import CountDownLatch as CountDownLatch
    from ._api._sync import Election as Election
    from ._api._sync import FairLock as FairLock
    from ._api._sync import FencedKey as FencedKey
    from ._api._sync import Leadership as Leadership
    from ._api._sync import MultiLease as MultiLease
    from ._api._sync import MultiLock as MultiLock
    from ._api._sync import ReadWriteLease as ReadWriteLease
    from ._api._sync import ReadWriteLock as ReadWriteLock
    from ._api._sync import ReadWriteView as ReadWriteView
    from ._api._sync import Redlock as Redlock
    from ._api._sync import RedlockElection as RedlockElection
    from ._api._sync import RedlockLeadership as RedlockLeadership
    from ._api._sync import RedlockLease as RedlockLease
    from ._api._sync import RLock as RLock
    from ._api._sync import RLockLease as RLockLease
    from ._api._sync import Semaphore as Semaphore
    from ._api._sync import SemaphoreLease as SemaphoreLease
    from ._info import CountDownLatchInfo as CountDownLatchInfo
    from ._info import ElectionEvent as ElectionEvent
    from ._info import FairLockInfo as FairLockInfo
    from ._info import FairWaiter as FairWaiter
    from ._info import Leader as Leader
    from ._info import LockInfo as LockInfo
    from ._info import MultiLockInfo as MultiLockInfo
    from ._info import MultiPartInfo as MultiPartInfo
    from ._info import ReadWriteHolder as ReadWriteHolder
    from ._info import ReadWriteInfo as ReadWriteInfo
    from ._info import SemaphoreHolder as SemaphoreHolder
    from ._info import SemaphoreInfo as SemaphoreInfo

__version__ = "0.1.0"

__all__ = [
    "AcquireTimeout",
    "AdaptiveTTL",
    "AlreadyHeldError",
    "AsyncCountDownLatch",
    "AsyncElection",
    "AsyncFairLock",
    "AsyncFencedKey",
    "AsyncLeadership",
    "AsyncLease",
    "AsyncLock",
    "AsyncMultiLease",
    "AsyncMultiLock",
    "AsyncRLock",
    "AsyncRLockLease",
    "AsyncReadWriteLease",
    "AsyncReadWriteLock",
    "AsyncReadWriteView",
    "AsyncRedlock",
    "AsyncRedlockElection",
    "AsyncRedlockLeadership",
    "AsyncRedlockLease",
    "AsyncSemaphore",
    "AsyncSemaphoreLease",
    "CountDownLatch",
    "CountDownLatchInfo",
    "DEFAULT_TTL",
    "Election",
    "ElectionEvent",
    "FairLock",
    "FairLockInfo",
    "FairWaiter",
    "FencedKey",
    "InvalidArgument",
    "Leader",
    "Leadership",
    "Lease",
    "LeaseBase",
    "Lock",
    "LockInfo",
    "LockLostError",
    "LockUpgradeError",
    "MultiLease",
    "MultiLock",
    "MultiLockInfo",
    "MultiPartInfo",
    "NoQuorumError",
    "NotOwnedError",
    "NotReplicatedError",
    "PermissionDenied",
    "ProtocolError",
    "RLock",
    "RLockLease",
    "ReadWriteHolder",
    "ReadWriteInfo",
    "ReadWriteLease",
    "ReadWriteLock",
    "ReadWriteView",
    "Redlock",
    "RedlockElection",
    "RedlockLeadership",
    "RedlockLease",
    "Semaphore",
    "SemaphoreHolder",
    "SemaphoreInfo",
    "SemaphoreLease",
    "StaleFenceError",
    "TenureError",
    "UnsupportedServer",
    "WrongTypeError",
    "configure_telemetry",
]

# The names of __all__ not imported above are imported on their first use
# (__getattr__ below): the asyncio classes (a program that uses only the
# synchronous ones never imports the asyncio facade and driver), every kind
# but Lock (see ``_api/_async/__init__.py``: a program pays for the kinds it
# uses), the snapshot types that ``info()`` returns (``_info``, imported by
# the first ``info()`` too), and ``AdaptiveTTL``.
_LATER = tuple(name for name in __all__ if name not in globals())

#: The names of _LATER that ``_info`` defines (its classes).
_SNAPSHOTS = frozenset(
    {
        "CountDownLatchInfo",
        "ElectionEvent",
        "FairLockInfo",
        "FairWaiter",
        "Leader",
        "LockInfo",
        "MultiLockInfo",
        "MultiPartInfo",
        "ReadWriteHolder",
        "ReadWriteInfo",
        "SemaphoreHolder",
        "SemaphoreInfo",
    }
)


def _name_public(names: tuple[str, ...], module: dict[str, object]) -> None:
    """Bind ``names`` here from ``module``, each class named tenure's."""
    # The public classes say they are tenure's: a traceback prints
    # ``tenure.InvalidArgument`` and ``help(tenure.Lock)`` names the module
    # ``tenure``, not the private module that defines it (each is importable
    # from here, so pickle finds it here too); a class of _LATER once imported.
    for name in names:
        public = module[name]
        if isinstance(public, type):
            public.__module__ = __name__
        globals()[name] = public


_name_public(tuple(n for n in __all__ if n not in _LATER), globals())

if not TYPE_CHECKING:  # (a type checker reads the imports above, and no other name)

    def __getattr__(name: str) -> object:
        if name not in _LATER:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        if name.startswith("Async"):
            from ._api import _async as home
        elif name in _SNAPSHOTS:
            from . import _info as home
        elif name == "AdaptiveTTL":
            from . import _adaptive as home
        else:
            from ._api import _sync as home
        public = getattr(home, name)
        # and every other class that module holds by now
        _name_public(tuple(n for n in _LATER if n in vars(home)), vars(home))
        return public


def __dir__() -> list[str]:
    return sorted({*globals(), *_LATER})
