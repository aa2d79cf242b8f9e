# GENERATED from _async/fair.py by scripts/unasync.py: do not edit.
"""``FairLock``: an ``Lock`` that serves its waiters in the order they came."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..._drivers import _sync as _driver
from ..._drivers._identity import new_token
from ..._keys import DEFAULT_PREFIX, fair_keys
from ..._plans import fair as fair_plans
from ..._plans.waiting import Grant
from ..._protocol import Plan
from ._base import label_of
from ._docs import shared_args
from .lock import Lease, Lock

if TYPE_CHECKING:  # (imported on first use)
    from ..._adaptive import AdaptiveTTL
    from ..._info import FairLockInfo


@shared_args()
class FairLock(Lock):
    """A distributed mutual-exclusion lock that serves its waiters in the order they came.

    Like :class:`Lock` (a lease, a fencing token, the watchdog and the
    lost signal, lock-delay, ``min_replicas``, an idempotent release), but first
    come, first served: every waiting thread or task takes its own place in a
    queue in Redis (not one per process, as ``Lock``'s), and the lock goes
    to the head of the queue only. A release hands the lock straight to the
    head and wakes it alone, on a wake channel of its own, so a hand-off costs
    the same few commands however many wait. An acquire that does not wait
    (``blocking=False``), or the first attempt of one that does, never takes
    the lock while others are queued, even when it is free.

    A waiter's place is that of its first queueing call, as it reached Redis:
    an acquire that finds the lock busy subscribes to its wake channel and then
    queues (one round trip after its first attempt), so waiters that start
    within a round trip of each other may be served in either order.

    Dead waiters time out. Each queued waiter has a deadline in Redis, the
    server's ``TIME`` plus ``waiter_timeout`` (never a client's clock), and
    keeps its place by calling again before it: a waiting acquire calls at
    least every third of ``waiter_timeout`` (and at every wake-up), and each
    call moves its deadline on. Every acquire and release first drops the
    waiters whose deadline has passed, so a waiter whose process died (or
    stalled past its deadline) holds up the queue for ``waiter_timeout`` at
    most; a release also skips at once a head whose process is gone (its wake
    channel has no subscriber). A stalled waiter that comes back queues again,
    at the back.

    Args:
        {client}
        name: the lock's name; its keys are ``<prefix>{<name>}:fair`` and
            siblings, apart from any ``Lock``'s or ``RLock``'s. There
            is no exact-key mode.
        waiter_timeout: seconds, from 0.003 to a year (default 5): a queued waiter that has not
            called again for this long is dropped from the queue. Live waiters
            call again every third of it, so keep it well above a round trip
            and above the pauses your processes may take.
        {lease_args}

    Raises:
        InvalidArgument: ``client`` is not a client this class accepts (a URL,
            ``None``, a client of the other API, a pipeline, a valkey-py cluster client);
            an empty or non-``str`` name or prefix; a ttl or
            ``waiter_timeout`` out of that range; a bad
            ``auto_renew``, ``on_lost``, ``lock_delay``, ``min_replicas``,
            ``replica_timeout`` or ``replica_fsync``.

    Example::

        lock = FairLock(client, "orders:42", ttl=10)
        with lock as lease:  # after everyone who asked before us
            charge(order, fence=lease.fence)
    """

    def __init__(
        self,
        client: _driver.Client,
        name: str,
        *,
        ttl: float | AdaptiveTTL | None = None,
        auto_renew: bool | None = None,
        on_lost: Callable[[Lease], object] | None = None,
        waiter_timeout: float = fair_plans.WAITER_TIMEOUT,
        lock_delay: float = 0.0,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        replica_fsync: bool = False,
        prefix: str = DEFAULT_PREFIX,
        label: str | None = None,
    ) -> None:
        _driver.check_client(client, "FairLock")
        keys = fair_keys(name, prefix=prefix)
        self._waiter_timeout = fair_plans.check_waiter_timeout(waiter_timeout)
        super().__init__(
            client,
            name,
            ttl=ttl,
            auto_renew=auto_renew,
            on_lost=on_lost,
            lock_delay=lock_delay,
            min_replicas=min_replicas,
            replica_timeout=replica_timeout,
            replica_fsync=replica_fsync,
            prefix=prefix,
            label=label,
        )
        self._keys = self._fair = keys

    @property
    def waiter_timeout(self) -> float:
        """Seconds after which a queued waiter that has not called again is dropped."""
        return self._waiter_timeout

    # Re-declared for its docstring alone: a fair acquire waits in line.
    def acquire(
        self, blocking: bool = True, timeout: float | None = None
    ) -> Lease | None:
        """Take the lock for the calling thread or task, after every waiter queued before it.

        Args:
            blocking: wait for the lock, in line, if it is held or others wait
                (default). With ``False``, make one attempt, which fails while
                anyone is queued.
            timeout: the longest wait in seconds, from 0 to a year; ``None`` waits without
                limit. Not allowed with ``blocking=False``. A waiter that gives
                up leaves the queue.

        Returns:
            An :class:`Lease` (truthy) whose ``fence`` is larger than any
            earlier holder's, or ``None`` if the lock was not taken in time.

        Raises:
            InvalidArgument: a bad ``blocking`` or ``timeout``; nothing was sent.
            AlreadyHeldError: the caller already holds this lock.
            NotReplicatedError: ``min_replicas`` replicas did not acknowledge the
                new lease in time (or the server the wait reached did not hold
                it); it was released, on the server that granted it (best
                effort: else it ends by its ttl).
            WrongTypeError: a key of the lock holds a value of another type.
            UnsupportedServer: the server is older than Redis 6.2 / Valkey 7.2.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return super().acquire(blocking, timeout)

    def info(self, limit: int = 100) -> FairLockInfo:
        """A snapshot of the lock: its holder, the lease left, the last fence, and
        the first ``limit`` queued waiters in the order they will be served, each
        with its deadline.

        A holder another program wrote as bytes that are not UTF-8 is shown
        with those bytes escaped (``b"\\xff"`` as ``"\\xff"``).

        Raises:
            InvalidArgument: ``limit`` is not an ``int`` from 0 to 2**53 - 1; nothing was sent.
            WrongTypeError: a key of the lock holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        plan = fair_plans.inspect(self._fair, fair_plans.check_limit(limit))
        return _driver.run(self._client, plan)

    def __repr__(self) -> str:
        held = len(self._leases)
        return (
            f"<{type(self).__name__} {self.name!r} ttl={self._opts.ttl:g}s "
            f"waiter_timeout={self._waiter_timeout:g}s held_here={held}>"
        )

    def _acquire_plan(
        self, owner: str, blocking: bool, timeout: float | None, maybe_held: bool
    ) -> Plan[Grant | None]:
        return fair_plans.acquire(
            self._fair,
            owner,
            new_token(owner, label_of(self._label)),
            self.ttl,
            blocking=blocking,
            timeout=timeout,
            now=time.monotonic,
            waiter_timeout=self._waiter_timeout,
            delay_ms=self._opts.delay_ms,
        )

    def _release_plan(self, token: str, fence: int, op: str) -> Plan[None]:
        return fair_plans.release(self._fair, token, fence, self._opts.delay_ms, op=op)
