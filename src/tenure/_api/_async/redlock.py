"""``AsyncRedlock``: one lock over N independent masters (Redlock), and its lease.

The decisions (quorum, validity, back-off, what a wake costs) are
:mod:`tenure._plans.redlock`'s, and the acquire's rounds and the release
round are plans (:mod:`tenure._plans.rounds`); this module performs their
steps (each round sent to every master at once, ``_fanout.run_each``) and
keeps the lease.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from ... import _telemetry
from ..._drivers import _async as _driver
from ..._drivers._async import fanout as _fanout
from ..._drivers._identity import new_op, new_token, process_id, process_mark
from ..._errors import (
    AlreadyHeldError,
    InvalidArgument,
    LockLostError,
    NoQuorumError,
    NotOwnedError,
)
from ..._keys import DEFAULT_PREFIX, lock_keys
from ..._label import holder_text
from ..._leasebook import Phase, Release
from ..._plans import lock as lock_plans
from ..._plans import redlock as plans
from ..._plans import rounds
from ..._plans.common import FENCE_KEEP_MS
from ..._plans.fanout import (
    ClearWake,
    Fan,
    Fanned,
    FanPlan,
    FanStep,
    Listen,
    SendLate,
    Sleep,
    StopListening,
    WaitWoken,
)
from ..._plans.waiting import Grant
from ..._protocol import Eval, Pipeline, Status, Step
from ..._units import check_seconds, check_ttl
from . import _steps
from ._base import _AsyncHeldLease, _LeaseOptions, check_label, label_of
from ._blocks import _AsyncBlocks
from ._grants import _watched
from .multi import _server_of

T = TypeVar("T")


class AsyncRedlockLease(_AsyncHeldLease["AsyncRedlock"]):
    """A held :class:`AsyncRedlock`: returned by a successful :meth:`AsyncRedlock.acquire`.

    Like :class:`AsyncLease`: truthy, ``async with lease:`` releases it, ``valid``
    and ``remaining`` tell on this process's monotonic clock whether it may be
    trusted (the validity of the Redlock algorithm: the ttl less the time the
    acquire took and the drift allowance), and ``lost`` is set (and the
    ``on_lost`` callbacks run) when a quorum of masters no longer holds it or
    its deadline passed before a renewal reached a quorum. ``owner`` is the
    token every master holds; ``fence`` is the largest fence the quorum minted
    (see :class:`AsyncRedlock` for what it promises).
    """

    __slots__ = ("_holder", "_reached")

    def __init__(
        self, lock: AsyncRedlock, grant: Grant, holder: str, reached: frozenset[int]
    ) -> None:
        super().__init__(lock, grant)
        self._holder = holder
        self._reached = reached  # the masters an acquire of this token was sent to

    async def release(self) -> None:
        """Release the lock on every master at once (token-checked on each).

        From the moment this is called the lease is never renewed again. A
        release that reached too few masters may be called again (each master
        recognises the same call).

        Raises:
            LockLostError: the lease was lost (``lost`` is set), or a quorum of
                masters no longer held it; it was deleted wherever it was held.
            NotOwnedError: the lease was already released, or this is not the
                process that acquired it (a forked child).
            NoQuorumError: too few masters answered to tell (the lease ends by
                its ttl at the latest; ``release()`` may be called again).
        """
        self._life.asked = True  # first, no call before it: see LeaseLife.asked
        life = self._life
        life.check_process(self.name, self.fence, process_mark(), "release")
        if life.begin_release(self.name, self.fence) is Release.CLEAN_UP:
            await self._clean_up()
            self._end_lost()
        self._stop_renewing()
        lock = self._lock
        t = await lock._release_round(
            self.owner, life.release_op, range(lock._n), late=self._reached, last=True
        )
        done = plans.released_ok(t, lock._n)
        if done is None:
            raise plans.no_quorum(self.name, "release", t, lock._n)
        if not done:
            self._lose("can't release: the lease expired on a quorum of masters before release")
            await self._end_lost_named(True)
        self._released_one(None)
        _telemetry.released(self, self._lock._probe)

    async def extend(self, seconds: float | None = None) -> None:
        """Reset the lease to end ``seconds`` from now (default: its ttl) on a quorum
        of masters (sent to all at once).

        Args:
            seconds: the new remaining lease, in seconds, from 0.01 to a year.

        Raises:
            InvalidArgument: ``seconds`` is not a number of seconds from 0.01 to a year.
            LockLostError: the lease was lost: a quorum of masters no longer
                holds it, or its deadline passed; the lease ends.
            NotOwnedError: the lease was released (or its release attempted),
                or this is not the process that acquired it.
            NoQuorumError: too few masters answered to tell; nothing is known
                (the watchdog, if it renews, keeps trying until the deadline).
        """
        seconds = self.ttl if seconds is None else check_ttl(seconds, "seconds")
        life = self._life
        life.check_process(self.name, self.fence, process_mark(), "extend")
        try:
            life.begin_extend(self.name, self.fence)
        except LockLostError:
            self._end_lost()
        lock = self._lock
        sent_at = time.monotonic()
        step = plans.renewal(lock._keys, self.owner, seconds, self.ttl, lock._fence_keep_ms)
        t = await lock._round([step] * lock._n)
        try:
            expires_at = plans.extended_until(t, lock._n, self.name, self.fence, seconds, sent_at)
        except NotOwnedError as exc:
            self._lose(exc.reason)
            await self._end_lost_named(True)
        self._extended(seconds, expires_at)

    async def _clean_up(self) -> None:
        """Send the release of a lease this process gave up on (lost, or whose
        release did not complete) to every master, quietly; only replies from
        masters mark it cleaned up. A release that a quorum answered ends the
        lease (released, or lost if too many no longer held it); with fewer
        answers it stays to be finished by the owner's next acquire."""
        life = self._life
        if life.phase is Phase.HELD:  # a release() cut off before it began
            life.begin_release(self.name, self.fence)
        if life.phase is Phase.RELEASING:
            self._stop_renewing()
        lock = self._lock
        t = await lock._release_round(
            self.owner, life.release_op, range(lock._n), late=self._reached, last=True
        )
        if len(t.failed) < lock._n:
            life.cleaned = True
        if life.phase is not Phase.RELEASING:
            return
        done = plans.released_ok(t, lock._n)
        if done is False:
            self._lose("can't release: the lease expired on a quorum of masters before release")
        if done is not None:
            life.released()
            self._end()

    def _renewal(self) -> Eval:
        """One master's renewal of the lease (the watchdog sends it to every master)."""
        lock = self._lock
        return plans.renewal(lock._keys, self.owner, self.ttl, self.ttl, lock._fence_keep_ms)

    def _start_watch(self, renew: bool) -> None:
        self._watch = _fanout.watch_shared(self, renew, _renew_quorums)

    def _stop_renewing(self) -> None:
        if self._watch is not None:
            _fanout.stop_renewing_shared(self._watch)


class AsyncRedlock(_AsyncBlocks[AsyncRedlockLease]):
    """A lock over N independent masters that holds while a majority of them
    hold it (the Redlock algorithm of redis.io's "Distributed Locks with Redis").

    The masters are N (odd, at least 3) Redis or Valkey servers that share
    nothing: no replication, no cluster. An acquire sends the same unguessable
    token to all of them at once, each call bounded by a per-master timeout far
    below the ttl (``master_timeout``), so a dead or paused master never stalls
    it. The lock is held when a quorum (``N // 2 + 1``) granted it and the lease
    is still valid: ``ttl`` less the time the acquire took and a drift allowance
    (1 % of the ttl + 2 ms). The acquire returns as soon as a quorum granted it,
    without waiting for the slower masters (the validity counts from the moment
    the acquire was sent, so that wait would buy nothing): their replies are
    read by the next call on each, whose commands go on the same connection
    after the acquire, so that a release reaches a slow or paused master after
    the acquire it may yet grant (the lease's release and renewals go to every
    master anyway; a release that a master did not answer in time, or that
    can't be sent there because an earlier call is still stuck, is sent again
    once that call ends, for up to a ttl). Otherwise it is released on every
    master that granted it (or did not answer) at once, and the acquire tries
    again. It survives
    ``N // 2`` masters down; with more down, acquire raises
    :class:`NoQuorumError` (after three rounds in a row without enough answers,
    so that a brief stall of the client is not taken for an outage).
    ``release`` is token-checked on every master; ``extend`` and the watchdog
    (``auto_renew``) renew on a quorum, and a lease that no quorum holds any
    more is lost (``lease.lost``, ``on_lost``).

    Each master holds an ordinary :class:`Lock` of the same name (same keys,
    same scripts: ``tenure inspect`` on one master shows it). Waiting does not
    poll: a waiter listens on every master, a release wakes the first waiter
    queued on each master (at most N waiters per release, however many wait),
    and a waiter also tries again when the earliest lease it saw ends. Two
    waiters that each got a minority back off for a random delay.

    The fence. Each master mints ``max(last + 1, its TIME in µs)``; the lease's
    ``fence`` is the largest its quorum minted: the masters that granted it
    before the acquire returned (a master that grants it later, after the
    quorum, mints a larger fence nobody hears of; leaving it out weakens
    nothing below, which needs only one master shared by two quorums, and the
    quorum that answered is a quorum). Any two quorums share a master,
    and on it the later holder's fence is larger, so the later lease's fence is
    larger than the earlier one's *as long as the masters' clocks agree to
    within the time between the two grants* (the clock part dominates). It is
    not a consensus counter: a master whose clock runs ahead can make a fence
    that a later holder's quorum does not exceed, and a master restarted
    without persistence forgets that it granted a lease (delay its restart by a
    ttl, as the Redlock page says). This is the debate between Kleppmann ("How
    to do distributed locking", 2016: Redlock's safety rests on bounded clock
    drift, pauses and network delays, and it has no strictly monotonic fencing
    token) and antirez ("Is Redlock safe?", 2016: the validity check after the
    acquire covers pauses and delays before it; the clocks need only bounded
    drift, not synchrony). Use the fence as a best-effort guard with a
    resource that rejects older fences; where a stalled holder must never
    write after its lease ended, use a consensus system.

    Independent masters. Two clients of one server (two dbs of it, or two
    addresses: ``localhost`` and ``127.0.0.1``, a unix socket and a TCP port)
    would count one server twice in a quorum. The same client or address
    twice is refused here; other duplicates by what each server says of
    itself: before its first lock write (or ``locked()``, ``owned()``) the
    Redlock asks every master its ``run_id`` (``INFO server``, which the
    driver's first-call probe already needs), and asks a master again once
    its connection was seen broken (a restart changes the ``run_id``; an
    address may then lead to another server). Two masters with one
    ``run_id`` make that call raise :class:`InvalidArgument`, leaving nothing
    taken (a grant of that acquire is given back). Not detected: a master
    that has not answered yet (asked again by each later call until it
    does: until then its grant may count); a server behind a proxy that
    answers ``INFO`` itself or gives no ``run_id`` (then only the addresses
    are compared); an address that comes to lead to another master's server
    while its connections stay open (a connection tenure sees closed or
    failing is checked again); and a replica of another master, or two
    masters replicating one another (each has its own ``run_id``: they are
    not independent either).

    Args:
        clients: the N masters, one ``redis.asyncio.Redis`` or
            ``valkey.asyncio.Valkey`` client each (a sequence).
        name: the lock's name; its keys on each master are a :class:`Lock`'s.
        ttl: the lease length in seconds, from 0.01 to a year (default 30).
        auto_renew: whether a watchdog renews every lease on a quorum while it
            is held (every third of the ttl). Default: ``True`` when no ``ttl``
            is given, else ``False``.
        on_lost: called with the lease when a lease is lost.
        master_timeout: the longest wait for one master's reply in each round,
            seconds; default 1/20 of the ttl, from 0.05 to 0.5 s (never above
            half the ttl).
        prefix: the key prefix (default ``"tenure:"``).
        label: who holds, in words an operator reads (``tenure inspect`` on
            a master, lease errors); default ``<host> pid <pid> (<program>)``,
            ``""`` for none (see :class:`Lock`). Each master's token carries it.

    Raises:
        InvalidArgument: ``clients`` is not a sequence of N clients of this API
            (N odd and at least 3), or holds the same client (or the same
            address, in any db) twice; a bad name, ttl, ``auto_renew``, ``on_lost``,
            ``master_timeout``, prefix or label. (One server under two addresses is
            refused by the first call: see above.)

    Example::

        lock = AsyncRedlock([r1, r2, r3, r4, r5], "orders:42", ttl=10)
        async with lock as lease:
            await charge(order, fence=lease.fence)
    """

    #: The class of the leases it issues (a RedlockElection's are leaderships).
    _lease_class: type[AsyncRedlockLease] = AsyncRedlockLease
    #: How long a grant or a renewal keeps each master's fence key (ms).
    _fence_keep_ms: int = FENCE_KEEP_MS

    def __init__(
        self,
        clients: Sequence[_driver.Client],
        name: str,
        *,
        ttl: float | None = None,
        auto_renew: bool | None = None,
        on_lost: Callable[[AsyncRedlockLease], object] | None = None,
        master_timeout: float | None = None,
        prefix: str = DEFAULT_PREFIX,
        label: str | None = None,
    ) -> None:
        if isinstance(clients, str | bytes) or not isinstance(clients, Sequence):
            raise InvalidArgument(f"clients must be a sequence of clients, not {clients!r}")
        self._n = plans.check_count(len(clients))
        seen: dict[object, int] = {}
        for i, client in enumerate(clients):
            _driver.check_client(client, "AsyncRedlock")
            # the server without its db: two dbs of one server are one master
            server = _server_of(client).rsplit("/", 1)[0]
            for where in (id(client), server):
                if where in seen:
                    raise InvalidArgument(
                        f"clients[{seen[where]}] and clients[{i}] are the same master "
                        f"({server}): a Redlock needs independent masters"
                    )
                seen[where] = i
        self._clients: tuple[_driver.Client, ...] = tuple(clients)
        self._client = self._clients[0]
        self._keys = lock_keys(name, key=None, prefix=prefix)
        self._opts = _LeaseOptions.check(ttl, auto_renew, on_lost, adaptive=False)
        self._label = check_label(label)
        if master_timeout is None:
            self._timeout = plans.master_timeout(self._opts.ttl)
        else:
            self._timeout = check_seconds(master_timeout, "master_timeout")
        self._leases: dict[str, AsyncRedlockLease] = {}
        # who each master is (its run_id; None: not asked yet, or it did not
        # answer), with the fan-out's count of its broken connections when asked
        self._ids: list[str | None] = [None] * self._n
        self._ids_at = [0] * self._n
        # the fan-out's count of broken connections when every master was known
        # (-1: not all known): while it does not move, there is nobody to ask
        self._known_at = -1

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._keys.name

    @property
    def ttl(self) -> float:
        """The lease length in seconds."""
        return self._opts.ttl

    @property
    def clients(self) -> tuple[_driver.Client, ...]:
        """The masters' clients, in the order given."""
        return self._clients

    @property
    def quorum(self) -> int:
        """How many masters must hold the lock: ``N // 2 + 1``."""
        return plans.quorum(self._n)

    async def acquire(
        self, blocking: bool = True, timeout: float | None = None
    ) -> AsyncRedlockLease | None:
        """Take the lock on a quorum of masters for the calling thread or task.

        A lease of the caller whose release did not complete (cut off by an
        interrupt or a cancellation), or that was lost, is released on every
        master first (never ``AlreadyHeldError`` for it).

        Args:
            blocking: wait for the lock if it is held (default). With ``False``,
                make one round.
            timeout: the longest wait in seconds, from 0 to a year; ``None`` waits
                without limit. Not allowed with ``blocking=False``.

        Returns:
            An :class:`AsyncRedlockLease` (truthy), or ``None`` if the lock was
            not taken in time (then nothing is left held).

        Raises:
            InvalidArgument: a bad ``blocking`` or ``timeout``; nothing was sent.
                Or two masters are one server (the same ``run_id``; the error
                names both clients' addresses and the ``run_id``): nothing was
                taken (a grant is given back).
            AlreadyHeldError: the caller already holds this lock.
            NoQuorumError: fewer than a quorum of masters answered within the
                per-master timeout, in three rounds in a row (one round when
                ``blocking=False`` or when the timeout ran out); what was
                granted was released.
            WrongTypeError: a key of the lock holds a value of another type on
                so many masters that the others can't make a quorum (what was
                granted was released). On fewer, those masters count as not
                answering: outvoted when the others grant it, named by the
                ``NoQuorumError`` when too few answered.
        """
        wait = lock_plans.check_acquire(blocking, timeout)
        return await _watched(
            self, blocking, _driver.server_name, lambda: self._acquire(blocking, wait)
        )

    async def _acquire(self, blocking: bool, wait: float | None) -> AsyncRedlockLease | None:
        """:meth:`acquire`'s work, its arguments checked."""
        owner = _driver.current_owner()
        held = self._leases.get(owner)
        if held is not None:
            life = held._life
            if life.left_behind:
                # a lease of ours that the masters may still hold (its release
                # cut off, or lost): released on every master before the take,
                # which never returns while our old token holds a master
                await held._clean_up()
            elif life.held:
                raise AlreadyHeldError(self.name)
        await self._identify()
        granted: list[tuple[Grant, frozenset[int]]] = []  # set by _take with its grant
        lease = None
        try:
            token = new_token(owner, label_of(self._label))
            taken = await self._take(token, blocking, wait, granted)
            if taken is None:
                return None
            grant, reached = taken
            # a master whose connection broke during the take may be another
            # server now: asked again before the lease is handed out (a
            # duplicate gives the grant back, below)
            await self._identify()
            lease = self._lease_class(self, grant, owner, reached)
            self._leases[owner] = lease
            await lease._start()
        except BaseException:
            # a grant never outlives an interrupted acquire: cut off from the
            # caller (an interrupt or cancellation as _take returns it, or while
            # the lease is made or started), it is given back on every master
            if granted:
                with contextlib.suppress(Exception):
                    if lease is not None:
                        await lease.release()
                    else:
                        grant, reached = granted[0]
                        await self._release_round(
                            grant.token, "", range(self._n), late=reached, quick=True, last=True
                        )
            raise
        return lease

    async def _take(
        self,
        token: str,
        blocking: bool,
        timeout: float | None,
        granted: list[tuple[Grant, frozenset[int]]],
    ) -> tuple[Grant, frozenset[int]] | None:
        """Rounds until a quorum grants ``token`` (the plan
        :func:`tenure._plans.rounds.take`): the grant, and the masters an
        attempt was sent to (its release goes to them even behind a call
        stuck there: see :meth:`_release_round`).

        The grant is appended to ``granted`` before it is returned: from then
        on the caller gives it back if anything cuts it off (a signal handler
        may run as any call returns, this one's too). Cancelled (or failing)
        before that while it may hold something, the plan releases ``token``
        and leaves the queues in one round (bounded by the per-master
        timeout) before it raises."""
        plan = rounds.take(
            self._keys,
            self._n,
            self._opts.ttl,
            token,
            blocking,
            timeout,
            granted,
            master_timeout=self._timeout,
            now=time.monotonic,
            rand=random.random,
            new_waiter=_new_waiter,
            fence_keep=self._fence_keep_ms,
        )
        grant = await self._drive(plan)
        return grant

    async def _identify(self) -> None:
        """Ask each master not known yet which server process it is (``INFO
        server``'s ``run_id``), all at once within the per-master timeout: at
        the first call, and again for a master whose connection broke since
        (a restart, a failover, an address that now leads to another server).
        A master under suspicion (paused?) is not waited for: it is asked
        again by the next call. Free while every master is known and no
        connection broke.

        Raises:
            InvalidArgument: two masters are one server process (the same
                ``run_id``: one server by two addresses, or in two dbs).
        """
        if self._known_at == _fanout.broken():
            return
        clients = self._clients
        ask = [
            i
            for i, client in enumerate(clients)
            if self._ids[i] is None or _fanout.breaks(client) != self._ids_at[i]
        ]
        known_at = _fanout.broken()
        if ask:
            marks = [_fanout.breaks(clients[i]) for i in ask]
            wait = [k for k, i in enumerate(ask) if not _fanout.suspected(clients[i])]
            replies = await _fanout.run_each(
                [(clients[i], plans.identify()) for i in ask],
                self._timeout,
                lambda replies: all(plans.answered(replies[k]) for k in wait),
            )
            for k, i in enumerate(ask):
                self._ids[i] = plans.identity(replies[k])
                self._ids_at[i] = marks[k]
        same = plans.same_server(self._ids)
        if same is not None:
            i, j = same
            run_id = self._ids[i] or ""
            self._ids[i] = self._ids[j] = None  # asked again by the next call
            self._known_at = -1
            raise plans.same_server_error(
                i, _server_of(clients[i]), j, _server_of(clients[j]), run_id
            )
        self._known_at = known_at if None not in self._ids else -1

    async def _round(
        self, steps: Sequence[Step], enough: Callable[[list[Any]], bool] | None = None
    ) -> plans.Tally:
        """Send ``steps[i]`` to master ``i``, all at once, and sort the replies
        (those there once ``enough`` says so: see ``run_each``)."""
        return plans.tally(await self._send_on(range(self._n), steps, enough))

    async def _send_on(
        self,
        masters: Sequence[int],
        steps: Sequence[Step],
        enough: Callable[[list[Any]], bool] | None = None,
        *,
        behind: bool = False,
    ) -> list[Any]:
        """Send ``steps[k]`` to master ``masters[k]``, all at once: the replies
        (``behind``: see ``run_each``; ``need``: what a quorum needs of them)."""
        jobs = [(self._clients[i], plans.one(step)) for i, step in zip(masters, steps, strict=True)]
        need = plans.quorum(self._n) - (self._n - len(jobs))
        return await _fanout.run_each(jobs, self._timeout, enough, behind=behind, need=need)

    async def _release_round(
        self,
        token: str,
        op: str,
        masters: Sequence[int],
        wake: bool = True,
        *,
        late: Collection[int] = (),
        queued: str = "",
        quick: bool = False,
        last: bool = False,
    ) -> plans.Tally:
        """Release ``token`` on ``masters`` at once, and wake the queues' heads
        (the plan :func:`tenure._plans.rounds.release_round`, whose arguments
        these are)."""
        plan = rounds.release_round(
            self._keys,
            self._n,
            self._opts.ttl,
            token,
            op,
            masters,
            wake,
            late=late,
            queued=queued,
            quick=quick,
            last=last,
            now=time.monotonic,
        )
        return await self._drive(plan)

    async def _drive(self, plan: FanPlan[T]) -> T:
        """Drive a plan of rounds on the masters (:mod:`tenure._plans.fanout`
        steps); whatever it left listening is stopped when it ends."""
        fan = _Rounds(self)
        try:
            return await _steps.drive(plan, fan.perform)
        finally:
            fan.stop()

    async def locked(self) -> bool:
        """Whether a quorum of masters holds the lock for one holder now (a snapshot).

        Raises:
            NoQuorumError: too few masters answered to tell (the ones that did
                not answer could make a quorum for a holder, or for none).
            InvalidArgument: two masters are one server (see :meth:`acquire`).
        """
        return (await self._holder()) is not None

    async def owned(self) -> bool:
        """Whether the calling thread or task holds the lock on a quorum of masters now.

        Raises:
            NoQuorumError: too few masters answered to tell.
            InvalidArgument: two masters are one server (see :meth:`acquire`).
        """
        lease = self._leases.get(_driver.current_owner())
        if lease is None:
            return False
        return (await self._holder()) == lease.owner

    async def _held_by(self) -> str:
        """Who holds the lock on a quorum of masters, in words, for an error
        message (``held by web-3 pid 4711 (celery worker) [<token>]``, or
        ``free``); reads every master within the per-master timeout.

        Raises:
            NoQuorumError: too few masters answered to tell.
        """
        holder = await self._holder()
        return "free" if holder is None else f"held by {holder_text(holder)}"

    async def _holder(self) -> str | None:
        """The token a quorum of masters holds the lock with, or ``None``."""
        await self._identify()
        jobs = [(client, lock_plans.inspect(self._keys)) for client in self._clients]
        need = plans.quorum(self._n)
        states: list[Any] = await _fanout.run_each(jobs, self._timeout, need=need)
        holders = [s.holder for s in states if isinstance(s, lock_plans.LockState)]
        known, holder = plans.quorum_holder(holders, self._n)
        if not known:
            failed = sum(1 for s in states if not isinstance(s, lock_plans.LockState))
            answered = self._n - failed
            raise NoQuorumError(
                f"Redlock {self.name!r}: can't tell who holds it: {answered} of {self._n} "
                f"masters answered within the per-master timeout, the others could make "
                f"a quorum of {plans.quorum(self._n)}"
            )
        return holder

    async def release(self) -> None:
        """Release the calling thread's or task's lease (see :meth:`AsyncRedlockLease.release`).

        Raises:
            NotOwnedError: the caller holds no lease of this lock.
            NoQuorumError: too few masters answered to tell.
        """
        await self._lease().release()

    async def extend(self, seconds: float | None = None) -> None:
        """Extend the calling thread's or task's lease (see :meth:`AsyncRedlockLease.extend`).

        Raises:
            InvalidArgument: ``seconds`` is not a number of seconds from 0.01 to a year.
            NotOwnedError: the caller holds no lease of this lock, or it was lost.
            NoQuorumError: too few masters answered to tell.
        """
        await self._lease().extend(seconds)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.name!r} masters={self._n} ttl={self._opts.ttl:g}s"
            f" held_here={len(self._leases)}>"
        )

    def _lease(self) -> AsyncRedlockLease:
        lease = self._leases.get(_driver.current_owner())
        if lease is None:
            raise NotOwnedError(self.name, None, "not held by this thread or task")
        return lease

    def _forget(self, lease: AsyncRedlockLease) -> None:
        if self._leases.get(lease._holder) is lease:
            # (two threads releasing one lease both end it: never a KeyError)
            self._leases.pop(lease._holder, None)
        if lease._watch is not None:
            _fanout.unwatch_shared(lease._watch)


def _new_waiter() -> str:
    """A Redlock waiter's id: its wake channel's suffix, and its queue member's head."""
    return f"{process_id()[:8]}-{new_op()}"


class _Rounds:
    """Performs the steps of one plan of rounds of ``lock`` (see
    :mod:`tenure._plans.fanout`), and holds its wake and its listening."""

    __slots__ = ("_lock", "_stops", "_wake")

    def __init__(self, lock: AsyncRedlock) -> None:
        self._lock = lock
        self._wake = _driver.new_event()
        self._stops: list[Callable[[], None] | None] = []

    async def perform(self, step: FanStep) -> Any:
        lock = self._lock
        if isinstance(step, Fan):
            clients = lock._clients
            busy = frozenset(k for k, i in enumerate(step.masters) if _fanout.busy(clients[i]))
            results = await lock._send_on(step.masters, step.steps, step.enough, behind=step.behind)
            unsent = (k for k, r in enumerate(results) if isinstance(r, _fanout.Unsent))
            return Fanned(results, frozenset(unsent), busy)
        if isinstance(step, ClearWake):
            self._wake.clear()
        elif isinstance(step, WaitWoken):
            return await _driver.wait_event(self._wake, step.timeout)
        elif isinstance(step, Sleep):
            await _driver.sleep(step.seconds)
        elif isinstance(step, Listen):
            listen = _fanout.listen_each(lock._clients, step.channel, self._wake, lock._timeout)
            self._stops.extend(await listen)
        elif isinstance(step, StopListening):
            self.stop()
            return self._wake.is_set()
        elif isinstance(step, SendLate):
            for i in step.masters:
                _fanout.send_late(lock._clients[i], step.step, step.until)
        else:
            raise TypeError(f"not a step of a plan of rounds: {step!r}")
        return None

    def stop(self) -> None:
        """Stop listening (each listening once, whatever cuts this off)."""
        while self._stops:
            stop = self._stops.pop()
            if stop is not None:
                stop()


async def _renew_quorums(leases: list[Any]) -> list[tuple[Status, Any] | None]:
    """The shared watchdog's renewal of ``leases`` (of any Redlocks): one
    pipeline per master that holds some of them, all masters at once (the
    longest per-master timeout of their locks); each lease renewed when a
    quorum of its own masters renewed it. The round returns once every lease's
    outcome is known (a paused or slow master is not waited for: a lease of
    another lock, with a shorter ttl, is not kept waiting for it either)."""
    steps: list[Eval] = [lease._renewal() for lease in leases]
    groups: dict[int, tuple[_driver.Client, list[int]]] = {}
    for k, lease in enumerate(leases):
        for client in lease._lock._clients:
            groups.setdefault(id(client), (client, []))[1].append(k)
    masters = list(groups.values())

    def outcomes(replies: list[Any]) -> list[tuple[Status, Any] | None]:
        columns: list[list[Any]] = [[] for _ in leases]
        for (_, ks), reply in zip(masters, replies, strict=True):
            for j, k in enumerate(ks):
                if isinstance(reply, list):
                    columns[k].append(reply[j])
                elif isinstance(reply, BaseException):
                    columns[k].append(reply)
                else:  # not in yet
                    columns[k].append(_PENDING)
        return [
            plans.renewed(plans.tally(column), lease._lock._n)
            for column, lease in zip(columns, leases, strict=True)
        ]

    replies = await _fanout.run_each(
        [(client, plans.one(Pipeline(tuple(steps[k] for k in ks)))) for client, ks in masters],
        max(lease._lock._timeout for lease in leases),
        lambda replies: all(outcome is not None for outcome in outcomes(replies)),
    )
    return outcomes(replies)


#: A master's reply not in yet, as :func:`_renew_quorums` counts it.
_PENDING = TimeoutError("no reply yet")
