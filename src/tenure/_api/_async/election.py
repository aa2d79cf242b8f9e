"""``AsyncElection``: leader election on a fair lock, with a proclaimed value and
a change feed; ``AsyncLeadership``, the leader's lease."""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar, Generic, TypeVar

from ..._drivers import _async as _driver
from ..._drivers._clients import connection_fault
from ..._drivers._identity import new_op
from ..._errors import InvalidArgument, LockLostError, NotOwnedError
from ..._info import ElectionEvent, FairLockInfo, Leader
from ..._keys import DEFAULT_PREFIX, ElectionKeys, election_keys
from ..._label import clean_label, default_label
from ..._models import AsyncWork, PerProcess, _AsyncWhileHeld, close_unrun
from ..._plans import election as election_plans
from ..._plans import fair as fair_plans
from ..._plans.common import extended
from ..._plans.waiting import Grant
from ..._protocol import Eval, Plan
from ..._units import check_seconds
from ._base import _BOOK, _AsyncHeldLease
from ._docs import shared_args
from .fair import AsyncFairLock
from .lock import AsyncLease

R = TypeVar("R")
#: A leadership: an election's lease (one server's, or a quorum's of masters).
L = TypeVar("L", bound="_AsyncHeldLease[Any]")

#: How long an observer waits before it reads again after a connection fault,
#: seconds (doubling up to :data:`_RETRY_MAX`).
_RETRY = 0.05
_RETRY_MAX = 1.0

#: How long an observer waits for its subscription to be confirmed before it
#: asks again, seconds.
_CONFIRM = 10.0


def _check_callbacks(on_elected: object, on_deposed: object) -> None:
    """Validate ``on_elected=`` and ``on_deposed=``: ``None`` or callable.

    Raises:
        InvalidArgument: naming the one that is not.
    """
    for name, fn in (("on_elected", on_elected), ("on_deposed", on_deposed)):
        if fn is not None and not callable(fn):
            raise InvalidArgument(f"{name} must be callable, not {fn!r}")
    if inspect.iscoroutinefunction(on_elected):
        raise InvalidArgument(_ON_ELECTED_PLAIN.format(on_elected))


#: Why ``on_elected`` is a plain function: it runs before ``campaign`` returns.
_ON_ELECTED_PLAIN = (
    "on_elected runs in the campaigning call, before campaign returns: a plain "
    "function, not one whose call makes a coroutine ({!r})"
)


def _check_label(value: object) -> str:
    """Validate ``label=``: a ``str`` that UTF-8 can encode, returned with its
    control characters made spaces and cut to 96 characters (as every holder
    label: :func:`tenure._label.clean_label`).

    Raises:
        InvalidArgument: otherwise.
    """
    if not isinstance(value, str):
        raise InvalidArgument(f"label must be a str, not {type(value).__name__} {value!r}")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise InvalidArgument(f"label {value[:40]!r} can't be encoded as UTF-8") from None
    return clean_label(value)


class _AsyncCandidacy(PerProcess, Generic[L]):
    """What the candidates of every election share: a campaign that announces
    the term before it returns (standing again when the term ended first),
    and the work run while leading."""

    __slots__ = ()

    _on_elected: Callable[[L], object] | None
    _keys: ElectionKeys
    _label: str

    #: The errors of an announcement after which the candidate resigns and
    #: stands again: its term ended before it was announced.
    _again: ClassVar[tuple[type[Exception], ...]] = (NotOwnedError,)

    @property
    def name(self) -> str:
        """The election's name."""
        return self._keys.name

    @property
    def label(self) -> str:
        """This candidate's label."""
        return self._label

    async def _take(self, timeout: float | None) -> L | None:
        """Wait up to ``timeout`` seconds for the election's lease."""
        raise NotImplementedError

    async def _announce_term(self, lease: L) -> None:
        """Announce ``lease``'s term (observers see ``elected``)."""
        raise NotImplementedError

    async def _campaign(self, timeout: float | None) -> L | None:
        """:meth:`AsyncElection.campaign`: a leadership whose term is
        announced, or ``None`` once ``timeout`` ran out."""
        if timeout is not None:
            timeout = check_seconds(timeout, "timeout", allow_zero=True)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            lease = await self._take(left)
            if lease is None:
                return None
            try:
                await self._announce_term(lease)
            except self._again:
                # its term ended (or, over several masters, reached too few)
                # before it was announced: it is not a leader; stand again
                await self._let_go(lease)
                continue
            except BaseException:
                await self._let_go(lease)  # (the call was cut off)
                raise
            if self._on_elected is not None:
                # outside the announcement's handler: whatever on_elected
                # raises (a refusal of its own included) ends the campaign
                try:
                    outcome = self._on_elected(lease)
                    if inspect.isawaitable(outcome):  # (a lambda making a coroutine)
                        close_unrun(outcome)
                        raise InvalidArgument(_ON_ELECTED_PLAIN.format(self._on_elected))
                except BaseException:
                    await self._let_go(lease)
                    raise
            return lease

    async def _let_go(self, lease: L) -> None:
        """Release ``lease`` (best effort: else it ends by its ttl)."""
        with contextlib.suppress(Exception):
            await lease.release()

    async def _run_while_leader(self, fn: AsyncWork[R], timeout: float | None) -> R | None:
        """:meth:`AsyncElection.run_while_leader`."""
        leadership = await self._campaign(timeout)
        if leadership is None:
            return None
        async with leadership:
            done, result = await _AsyncWhileHeld.run(fn, leadership)
            if not done or leadership.lost.is_set():
                raise LockLostError(self.name, leadership.fence, "the leadership was lost")
            return result  # type: ignore[no-any-return]


class AsyncLeadership(AsyncLease):
    """The leader's lease: returned by a won :meth:`AsyncElection.campaign`.

    It is an :class:`AsyncLease` of the election's fair lock: truthy, renewed by
    the watchdog while held, ``lost`` set (and ``on_deposed`` called) as soon
    as it is known lost, released by :meth:`resign` or at the end of an
    ``async with`` block. ``term`` is its fence: larger than every earlier
    leader's, so that what the leader writes elsewhere can be checked against
    newer leaders' writes (see ``docs/guide/election.md``).
    """

    __slots__ = ()

    _lock: _AsyncElectionLock

    @property
    def term(self) -> int:
        """The term: this leadership's fence, larger than every earlier leader's."""
        return self.fence

    @property
    def label(self) -> str:
        """The label this leader announced."""
        return self._lock._leader_label

    async def proclaim(self, value: bytes | str) -> None:
        """Publish ``value`` for observers (see :meth:`AsyncElection.proclaim`).

        Raises:
            InvalidArgument: ``value`` is not ``bytes`` or ``str``, or longer
                than 4096 bytes; nothing was sent.
            NotOwnedError: this leadership ended (its lease expired or was
                released, and perhaps another leader was elected): refused,
                nothing was written.
            NotReplicatedError: (``min_replicas``) fewer replicas acknowledged
                the value in time (it was written on the master).
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        await self._lock._announce(self, election_plans.check_value(value))

    def _extend_plan(self, seconds: float) -> Plan[float]:
        lock = self._lock
        step = self._renewal_for(seconds)
        return extended(step, lock._ekeys.name, self.fence, seconds, time.monotonic)

    def _renewal(self) -> Eval:
        return self._renewal_for(self.ttl)

    def _renewal_for(self, seconds: float) -> Eval:
        """The renewal for ``seconds``: it keeps the term's record as long as the lease."""
        return election_plans.renewal(
            self._lock._ekeys,
            self.owner,
            seconds,
            ttl=self._redis_ttl,
            delay_ms=self._lock._opts.delay_ms,
        )

    async def resign(self) -> None:
        """Step down: end the term (observers see ``resigned``) and release the
        lease; the next candidate in line is elected at once.

        Raises:
            NotOwnedError: the leadership was already released.
            LockLostError: it was lost before (its term ended without a resignation).
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        await self.release()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} term={self.fence} label={self.label!r}>"


class _AsyncElectionLock(AsyncFairLock):
    """The fair lock of an election: its keys are the election's, its leases
    are leaderships, and its release ends the term in the record first."""

    def __init__(
        self,
        client: _driver.Client,
        name: str,
        label: str,
        *,
        ttl: float | None,
        on_lost: Callable[[AsyncLease], object] | None,
        waiter_timeout: float,
        lock_delay: float,
        min_replicas: int,
        replica_timeout: float,
        replica_fsync: bool,
        prefix: str,
    ) -> None:
        keys = election_keys(name, prefix=prefix)
        super().__init__(
            client,
            name,
            ttl=ttl,
            auto_renew=True,
            on_lost=on_lost,
            waiter_timeout=waiter_timeout,
            lock_delay=lock_delay,
            min_replicas=min_replicas,
            replica_timeout=replica_timeout,
            replica_fsync=replica_fsync,
            prefix=prefix,
            label=label,
        )
        self._keys = self._fair = self._ekeys = keys
        #: the label as announced (the tokens carry it encoded, as every lease's)
        self._leader_label = label

    def _granted(self, owner: str, grant: Grant) -> AsyncLeadership:
        lease = AsyncLeadership(self, grant, owner)
        _BOOK.put((id(self._client), self._keys.lock, owner), lease)
        # last, a plain store with no call after it: a lease whose making an
        # interrupt cut off (its grant given back) is never the owner's here
        self._leases[owner] = lease
        return lease

    def _release_plan(self, token: str, fence: int, op: str) -> Plan[None]:
        return election_plans.release(self._ekeys, token, fence, self._opts.delay_ms, op=op)

    async def _announce(self, lease: AsyncLeadership, value: bytes | None = None) -> None:
        """Announce ``lease``'s term (``value`` ``None``) or proclaim ``value``;
        with ``min_replicas``, wait for the replicas on the connection that
        made the grant, as an acquire does."""
        replicas = self._opts.replicas
        op = "" if value is None else new_op()  # (a retried proclaim is made once)
        plan = election_plans.announce(
            self._ekeys, lease.owner, lease.fence, self._leader_label, value, replicas, op
        )
        async with _driver.one_connection(self._client, replicas is not None):
            await _driver.run(self._client, plan)


@shared_args(adaptive=False)
class AsyncElection(_AsyncCandidacy[AsyncLeadership]):
    """Leader election: one leader at a time among every candidate of a name,
    the others waiting in line to take over.

    Each candidate calls :meth:`campaign`, which waits (in arrival order, woken
    by notification: no polling) until it leads, and returns its
    :class:`AsyncLeadership`: a lease of the election's fair lock, renewed by
    the watchdog, whose ``term`` (its fence) is larger than every earlier
    leader's. Leadership ends when the leader resigns (:meth:`resign`, or the
    end of an ``async with`` block), or when its lease ends (its process died,
    stalled past the ttl, or lost its connection for longer): the next
    candidate in line is elected at once, or when the lease runs out.

    The leader may :meth:`proclaim` a small value (its address, say), fenced by
    its term: once deposed, its proclaims are refused. Anyone may read the
    :meth:`leader` (label, term, value) or :meth:`observe` the changes
    (elected, proclaimed, resigned, lost), in term order.

    A term protects what the leader writes only where the writes are checked
    against it (a :class:`FencedKey`, a database row with the term): a paused
    leader may go on acting after its lease ended until it looks at ``lost``.

    Args:
        {client}
        name: the election's name; its keys are ``<prefix>{<name>}:election``
            and siblings, apart from every lock's.
        label: who this candidate is, for people (``leader()``, ``observe()``,
            ``tenure leader``, ``tenure inspect``); control characters become
            spaces, and it is cut to 96 characters. Default: host, pid and
            program (``web-3 pid 4711 (celery worker)``).
        on_elected: called with the :class:`AsyncLeadership` when this object
            wins a campaign (in the campaigning task, before ``campaign``
            returns; a plain function, keep it short: an ``async def`` one is
            refused). If it raises, the leadership is resigned and
            ``campaign`` raises its error.
        on_deposed: called with the leadership when it is lost (not on a
            resignation); see :meth:`tenure.LeaseBase.on_lost`.
        waiter_timeout: seconds, from 0.003 to a year (default 5): a waiting
            candidate that has not called again for this long leaves the line
            (see :class:`AsyncFairLock`).
        {lease_args}

    Raises:
        InvalidArgument: ``client`` is not a client this class accepts; an empty
            or non-``str`` name or prefix; a bad label, ttl, ``waiter_timeout``,
            ``on_elected``, ``on_deposed``, ``lock_delay``, ``min_replicas``,
            ``replica_timeout`` or ``replica_fsync``.

    Example::

        election = AsyncElection(client, "scheduler", ttl=10)
        async with await election.campaign() as leadership:
            await leadership.proclaim("10.0.0.7:8080")
            await schedule(fence=leadership.term)
    """

    _made_from = "the client and name"

    def __init__(
        self,
        client: _driver.Client,
        name: str,
        *,
        label: str | None = None,
        on_elected: Callable[[AsyncLeadership], object] | None = None,
        on_deposed: Callable[[AsyncLeadership], object] | None = None,
        waiter_timeout: float = fair_plans.WAITER_TIMEOUT,
        ttl: float | None = None,
        lock_delay: float = 0.0,
        min_replicas: int = 0,
        replica_timeout: float = 1.0,
        replica_fsync: bool = False,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        self._client = _driver.check_client(client, "AsyncElection")
        self._label = _check_label(default_label() if label is None else label)
        _check_callbacks(on_elected, on_deposed)
        self._on_elected = on_elected
        self._lock = _AsyncElectionLock(
            client,
            name,
            self._label,
            ttl=ttl,
            on_lost=on_deposed,  # type: ignore[arg-type]
            waiter_timeout=waiter_timeout,
            lock_delay=lock_delay,
            min_replicas=min_replicas,
            replica_timeout=replica_timeout,
            replica_fsync=replica_fsync,
            prefix=prefix,
        )
        self._keys: ElectionKeys = self._lock._ekeys

    @property
    def ttl(self) -> float:
        """The leader's lease length, seconds (renewed by the watchdog while it leads)."""
        return self._lock.ttl

    async def campaign(self, timeout: float | None = None) -> AsyncLeadership | None:
        """Stand for election and wait until this thread or task leads.

        Candidates are served in the order they came (a fair lock's queue); the
        wait ends when the leader before resigns (at once) or its lease ends.
        Once elected, the term is announced (observers see ``elected``) and
        ``on_elected`` is called.

        Args:
            timeout: the longest wait in seconds, from 0 to a year; ``None``
                waits without limit. A candidate that gives up leaves the line.

        Returns:
            The :class:`AsyncLeadership`, or ``None`` if not elected in time.

        Raises:
            InvalidArgument: a bad ``timeout``; nothing was sent.
            AlreadyHeldError: the caller leads this election already.
            NotReplicatedError: ``min_replicas`` replicas did not acknowledge the
                new lease, or its announcement, in time; it was released.
            WrongTypeError: a key of the election holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return await self._campaign(timeout)

    async def _take(self, timeout: float | None) -> AsyncLeadership | None:
        lease = await self._lock.acquire(timeout=timeout)
        assert lease is None or isinstance(lease, AsyncLeadership)
        return lease

    async def _announce_term(self, lease: AsyncLeadership) -> None:
        await self._lock._announce(lease)

    async def proclaim(self, value: bytes | str) -> None:
        """Publish ``value`` (``bytes``, or ``str`` sent as UTF-8; at most 4096
        bytes) as this term's value: :meth:`leader` returns it and observers
        see ``proclaimed``. Only the calling thread's or task's current
        leadership may: the write checks, in Redis, that its lease holds the
        election with its term.

        Raises:
            InvalidArgument: ``value`` is not ``bytes`` or ``str``, or too long.
            NotOwnedError: the caller does not lead (never did, resigned, or
                was deposed: refused, nothing was written).
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        await self._leadership().proclaim(value)

    async def resign(self) -> None:
        """Step down (see :meth:`AsyncLeadership.resign`).

        Raises:
            NotOwnedError: the caller does not lead.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        await self._leadership().resign()

    async def leader(self) -> Leader | None:
        """Who leads now: a :class:`tenure.Leader` (label, term, value, since,
        ttl), or ``None`` when nobody does. A term whose lease ended is
        recorded ``lost`` by this read. For a moment after a grant, before the
        new leader announced itself, its label is ``""``.

        Raises:
            WrongTypeError: a key of the election holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        state = await _driver.run(self._client, election_plans.read(self._keys))
        return state.leader

    async def info(self, limit: int = 100) -> FairLockInfo:
        """A snapshot of the election's lock: the leader's lease token, its
        lease left, the last term (``fence``) and the first ``limit`` candidates
        in line, in the order they will be elected.

        Raises:
            InvalidArgument: ``limit`` is not an ``int`` from 0 to 2**53 - 1; nothing was sent.
            WrongTypeError: a key of the election holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return await self._lock.info(limit)

    async def observe(self, timeout: float | None = None) -> AsyncIterator[ElectionEvent]:
        """The changes of the election, as they happen: an async iterator of
        :class:`tenure.ElectionEvent` (``elected``, ``proclaimed``,
        ``resigned``, ``lost``), in term order, each once.

        The first event is the current state (the leader, if any). The
        observer subscribes to the election's feed, then reads the change log
        after the last change it saw, so nothing falls between: a lost
        subscription is made again (and the log read again), and a Redis that
        can't be reached is tried again (0.05 s, doubling to 1 s). A term that
        ends with no successor publishes nothing: an idle observer reads again
        when the leader's lease would end. Compare terms, not labels: the same
        process may lead several terms.

        Args:
            timeout: end the iteration once no change came for this many
                seconds (``None``, the default: never; stop an asyncio observer
                by cancelling its task, a thread's by breaking out of the loop).
                The current state is read first all the same: with ``0``, it
                alone (a snapshot).

        Raises:
            InvalidArgument: a bad ``timeout``.
            WrongTypeError: a key of the election holds a value of another type.
        """
        if timeout is not None:
            timeout = check_seconds(timeout, "timeout", allow_zero=True)
        cursor = election_plans.Cursor()
        retry = _RETRY
        quiet_until = None if timeout is None else time.monotonic() + timeout
        tried = False  # (the current state is read once, whatever the timeout)
        while True:
            left = None if quiet_until is None else quiet_until - time.monotonic()
            if left is not None and left <= 0:
                if tried:
                    return
                left = 0.0
            tried = True
            try:
                plan = election_plans.watch(self._keys, cursor, _CONFIRM, left)
                state = await _driver.run(self._client, plan)
            except Exception as exc:
                if not connection_fault(exc):
                    raise
                await _driver.sleep(retry)
                retry = min(retry * 2, _RETRY_MAX)
                continue
            retry = _RETRY
            if state is None:
                continue
            events = cursor.take(state)
            for event in events:
                yield event
            if events and timeout is not None:
                quiet_until = time.monotonic() + timeout

    async def run_while_leader(self, fn: AsyncWork[R], timeout: float | None = None) -> R | None:
        """Campaign, then run ``fn(leadership)`` while leading, and resign when
        it returns.

        With asyncio (``AsyncElection``), ``fn`` is an ``async def`` function:
        it runs as a task of its own, cancelled as soon as the leadership is
        lost. With threads (``Election``), ``fn`` runs in the calling thread,
        which Python can't interrupt safely: it must watch the stop signal
        ``leadership.lost`` (a ``threading.Event``: check ``is_set()``
        between steps, or wait on it with ``lost.wait(seconds)`` instead of
        sleeping) and return when it is set. Either way, a lost leadership
        then raises :class:`LockLostError`; an exception of ``fn`` resigns and
        propagates.

        Args:
            fn: a function of the leadership (see above).
            timeout: the longest wait to be elected (see :meth:`campaign`).

        Returns:
            What ``fn`` returned, or ``None`` if not elected within ``timeout``.

        Raises:
            LockLostError: the leadership was lost while ``fn`` ran.
        """
        return await self._run_while_leader(fn, timeout)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} label={self._label!r} ttl={self.ttl:g}s>"

    def _leadership(self) -> AsyncLeadership:
        lease = self._lock._leases.get(_driver.current_owner())
        if not isinstance(lease, AsyncLeadership):
            raise NotOwnedError(self.name, None, "this thread or task does not lead")
        return lease
