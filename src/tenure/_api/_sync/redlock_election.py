# GENERATED from _async/redlock_election.py by scripts/unasync.py: do not edit.
"""``RedlockElection``: leader election over N independent masters, that
holds while a majority of them do; ``RedlockLeadership``, its leader's
lease.

The campaign is an :class:`Redlock` on the election's own keys of every
master; the decisions (what a quorum accepted, who leads, what an observer
delivers) are :mod:`tenure._plans.redlock_election`'s; this module sends each
master's plan to all of them at once (``_fanout.run_each``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Callable, Sequence
from typing import Any, ClassVar

from ..._drivers import _sync as _driver
from ..._drivers._sync import fanout as _fanout
from ..._drivers._identity import new_op
from ..._errors import NoQuorumError, NotOwnedError
from ..._info import ElectionEvent, Leader
from ..._keys import DEFAULT_PREFIX, ElectionKeys, election_keys
from ..._label import default_label
from ..._models import Work
from ..._plans import election as election_plans
from ..._plans import redlock as redlock_plans
from ..._plans import redlock_election as plans
from ..._plans.waiting import Grant
from ..._protocol import Eval, Plan
from ..._units import check_seconds
from .election import _RETRY, _RETRY_MAX, R, _Candidacy, _check_callbacks, _check_label
from .redlock import Redlock, RedlockLease


class RedlockLeadership(RedlockLease):
    """The leader's lease over the masters: returned by a won
    :meth:`RedlockElection.campaign`.

    It is an :class:`RedlockLease` on the election's keys: truthy, renewed
    on a quorum by the watchdog, ``lost`` set (and ``on_deposed`` called) once
    no quorum holds it, released on every master by :meth:`resign` or at the
    end of an ``with`` block. ``term`` is its fence, announced on a
    quorum of masters before the campaign returned: larger than every earlier
    leader's (see ``docs/guide/election.md``).
    """

    __slots__ = ("_numbering", "_sequence")

    _lock: _ElectionRedlock

    def __init__(
        self, lock: Redlock, grant: Grant, holder: str, reached: frozenset[int]
    ) -> None:
        super().__init__(lock, grant, holder, reached)
        self._sequence = 0  # the number of the last value proclaimed in the term
        #: taken and read under this mutex only (nothing else inside): proclaims
        #: at once, from threads or tasks, each send a number of their own, in order
        self._numbering = threading.Lock()

    @property
    def term(self) -> int:
        """The term: this leadership's fence, larger than every earlier leader's."""
        return self.fence

    @property
    def label(self) -> str:
        """The label this leader announced."""
        return self._lock._leader_label

    def proclaim(self, value: bytes | str) -> None:
        """Publish ``value`` for observers on every master (see
        :meth:`RedlockElection.proclaim`).

        Raises:
            InvalidArgument: ``value`` is not ``bytes`` or ``str``, or longer
                than 4096 bytes; nothing was sent.
            NotOwnedError: a majority of the masters refused it: this
                leadership ended there (deposed).
            NoQuorumError: too few masters answered to tell; the value may be
                on a minority of them, where no reader takes it. The message
                names what each master that gave an error said.
            WrongTypeError: a key of the election holds a value of another type
                on so many masters that the others can't make a quorum (on
                fewer, those masters are outvoted).
        """
        data = election_plans.check_value(value)
        with self._numbering:
            self._sequence += 1
            seq = self._sequence
        self._lock._announce(self, data, seq)

    def resign(self) -> None:
        """Step down: end the term on every master (observers see
        ``resigned``) and release the lease there; a waiting candidate is
        elected.

        Raises:
            NotOwnedError: the leadership was already released.
            LockLostError: it was lost before (a quorum no longer held it).
            NoQuorumError: too few masters answered to tell (it ends by its
                ttl at the latest; ``resign()`` may be called again).
        """
        self.release()

    def _renewal(self) -> Eval:
        """One master's renewal (the watchdog sends it to every master): it
        keeps the term's record there as long as the lease."""
        lock = self._lock
        return election_plans.renewal(
            lock._ekeys, self.owner, self.ttl, ttl=self.ttl, fence_keep_ms=lock._fence_keep_ms
        )

    def release(self) -> None:
        """Resign (see :meth:`resign`): the term ends on every master, then the
        lease is released there."""
        self._life.asked = True  # first, no call before it: see LeaseLife.asked
        self._lock._end_term(self)
        super().release()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} term={self.fence} label={self.label!r}>"


class _ElectionRedlock(Redlock):
    """The Redlock of an election: its keys on each master are the election's,
    its leases leaderships; it sends the election's scripts to every master."""

    _lease_class = RedlockLeadership
    #: a grant or a renewal keeps each master's fence as long as the record
    #: (where an announcement raised it to the term): terms stay above the
    #: last leader's however long the election then stays idle
    _fence_keep_ms = election_plans.KEEP_MS

    def __init__(
        self,
        clients: Sequence[_driver.Client],
        name: str,
        label: str,
        *,
        ttl: float | None,
        on_lost: Callable[[RedlockLeadership], object] | None,
        master_timeout: float | None,
        prefix: str,
    ) -> None:
        super().__init__(
            clients,
            name,
            ttl=ttl,
            auto_renew=True,
            on_lost=on_lost,  # type: ignore[arg-type]
            master_timeout=master_timeout,
            prefix=prefix,
            label=label,
        )
        # the election's keys on every master (not a Lock's of the same name),
        # so that its scripts find the leader's token where they look for it
        self._keys = self._ekeys = election_keys(name, prefix=prefix)
        self._leader_label = label

    def _on_every(self, plan: Callable[[int], Plan[Any]]) -> list[Any]:
        """Run ``plan(i)`` on master ``i``, every master at once, within the
        per-master timeout: each plan's result, or its exception."""
        jobs = [(client, plan(i)) for i, client in enumerate(self._clients)]
        return _fanout.run_each(jobs, self._timeout, need=redlock_plans.quorum(self._n))

    def _announce(self, lease: RedlockLeadership, value: bytes | None, seq: int) -> None:
        """Announce ``lease``'s term (``value`` ``None``, ``seq`` 0) or proclaim
        ``value`` as its ``seq``-th value, on every master; done on a quorum
        (:func:`tenure._plans.redlock_election.verdict`)."""
        op = "" if value is None else new_op()  # (a retried proclaim is made once)
        keys, label = self._ekeys, self._leader_label
        results = self._on_every(
            lambda _: election_plans.announce(
                keys, lease.owner, lease.fence, label, value, None, op, seq
            )
        )
        what = "the announcement" if value is None else "the proclaim"
        plans.verdict(results, self._n, self.name, lease.fence, what)

    def _end_term(self, lease: RedlockLeadership) -> None:
        """End ``lease``'s term in every master's record (best effort: a
        master that missed it ends it ``lost`` once its lease there ends)."""
        keys = self._ekeys
        self._on_every(lambda _: election_plans.end_term(keys, lease.owner, lease.fence))

    def _read_all(self, after: Sequence[str] = ()) -> list[Any]:
        """Read every master (its log after ``after[i]``, if given)."""
        self._identify()
        keys = self._ekeys
        return self._on_every(lambda i: election_plans.read(keys, after[i] if after else ""))

    def _history(self, reads: list[Any]) -> list[Any] | None:
        """Every master's log (:func:`tenure._plans.redlock_election.history`),
        when ``reads`` alone can't tell the latest value a majority held."""
        if not plans.needs_history(reads, self._n):
            return None
        keys = self._ekeys
        return self._on_every(lambda _: plans.history(keys))


class RedlockElection(_Candidacy[RedlockLeadership]):
    """Leader election over N independent masters: one leader at a time, that
    holds while a majority of the masters do (it survives ``N // 2`` of them
    down), the other candidates waiting to take over.

    The masters are those of an :class:`Redlock` (N odd, at least 3,
    sharing nothing), given the same way. :meth:`campaign` takes the
    election's lock on a quorum of the masters as a Redlock does, then
    announces its term on a quorum before it returns; :meth:`proclaim` and
    :meth:`resign` are sent to every master and done on a quorum. Readers
    (:meth:`leader`, :meth:`observe`) believe only what a majority of the
    masters holds: a stale record on a minority (a master that was down, one
    that missed a proclaim) is never returned.

    What differs from :class:`Election` (one server): the candidates are
    not served in arrival order (each master has a queue of its own): a
    resignation elects *some* waiting candidate, woken at once. The term is
    the largest fence the leader's quorum minted, and the announcement raises
    each master's fence to it, so terms increase from leader to leader without
    relying on the clocks; a master restarted without its data must stay out
    for a ttl (as every Redlock's), or it may grant the leadership that a
    quorum gave someone else. There is no ``min_replicas`` (the masters are
    the copies) and no ``info()``.

    Args:
        clients: the N masters, one ``redis.Redis`` or
            ``valkey.Valkey`` client each (a sequence).
        name: the election's name; its keys on each master are an
            :class:`Election`'s.
        label: who this candidate is, for people (see :class:`Election`).
        on_elected: called with the :class:`RedlockLeadership` when this
            object wins a campaign (before ``campaign`` returns; a plain
            function: an ``def`` one is refused; if it raises, the
            leadership is resigned and ``campaign`` raises its error).
        on_deposed: called with the leadership when it is lost (not on a
            resignation).
        ttl: the leader's lease length in seconds, from 0.01 to a year
            (default 30), renewed on a quorum by the watchdog while it leads.
        master_timeout: the longest wait for one master's reply in each
            round, seconds (see :class:`Redlock`).
        prefix: the key prefix (default ``"tenure:"``).

    Raises:
        InvalidArgument: ``clients`` is not a sequence of N clients of this API
            (N odd and at least 3), or holds one master twice; a bad name,
            label, ttl, ``on_elected``, ``on_deposed``, ``master_timeout`` or
            prefix.

    Example::

        election = RedlockElection([r1, r2, r3, r4, r5], "scheduler", ttl=10)
        with election.campaign() as leadership:
            leadership.proclaim("10.0.0.7:8080")
            schedule(fence=leadership.term)
    """

    _made_from = "the clients and name"

    #: An announcement refused by a majority (the term ended first), or that
    #: too few masters answered: resign and stand again.
    _again: ClassVar[tuple[type[Exception], ...]] = (NotOwnedError, NoQuorumError)

    def __init__(
        self,
        clients: Sequence[_driver.Client],
        name: str,
        *,
        label: str | None = None,
        on_elected: Callable[[RedlockLeadership], object] | None = None,
        on_deposed: Callable[[RedlockLeadership], object] | None = None,
        ttl: float | None = None,
        master_timeout: float | None = None,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        self._label = _check_label(default_label() if label is None else label)
        _check_callbacks(on_elected, on_deposed)
        self._on_elected = on_elected
        self._lock = _ElectionRedlock(
            clients,
            name,
            self._label,
            ttl=ttl,
            on_lost=on_deposed,
            master_timeout=master_timeout,
            prefix=prefix,
        )
        self._keys: ElectionKeys = self._lock._ekeys

    @property
    def ttl(self) -> float:
        """The leader's lease length, seconds (renewed on a quorum while it leads)."""
        return self._lock.ttl

    @property
    def clients(self) -> tuple[_driver.Client, ...]:
        """The masters' clients, in the order given."""
        return self._lock.clients

    @property
    def quorum(self) -> int:
        """How many masters make a majority: ``N // 2 + 1``."""
        return self._lock.quorum

    def campaign(self, timeout: float | None = None) -> RedlockLeadership | None:
        """Stand for election and wait until this thread or task leads.

        The candidate takes the election's lock on a quorum of the masters (an
        :meth:`Redlock.acquire`: woken by a resignation, or trying again
        when the leader's lease would end), then announces its term on every
        master (observers see ``elected``) and calls ``on_elected``. An
        announcement that a quorum did not take (the lease ended first, or
        too few masters answered) is resigned, and the candidate stands again.

        Args:
            timeout: the longest wait in seconds, from 0 to a year; ``None``
                waits without limit.

        Returns:
            The :class:`RedlockLeadership`, or ``None`` if not elected in time.

        Raises:
            InvalidArgument: a bad ``timeout``; nothing was sent. Or two
                masters are one server (see :class:`Redlock`).
            AlreadyHeldError: the caller leads this election already.
            NoQuorumError: too few masters answered (see :meth:`Redlock.acquire`).
            WrongTypeError: a key of the election holds a value of another type
                on so many masters that fewer than a quorum answered (on fewer,
                those masters are outvoted, as by a Redlock's acquire).
        """
        return self._campaign(timeout)

    def _take(self, timeout: float | None) -> RedlockLeadership | None:
        lease = self._lock.acquire(timeout=timeout)
        assert lease is None or isinstance(lease, RedlockLeadership)
        return lease

    def _announce_term(self, lease: RedlockLeadership) -> None:
        self._lock._announce(lease, None, 0)

    def proclaim(self, value: bytes | str) -> None:
        """Publish ``value`` (``bytes``, or ``str`` sent as UTF-8; at most 4096
        bytes) as this term's next value, on every master: :meth:`leader`
        returns it and observers see ``proclaimed`` once a majority holds it.
        Each master checks that the caller's lease holds the election there.

        Raises:
            InvalidArgument: ``value`` is not ``bytes`` or ``str``, or too long.
            NotOwnedError: the caller does not lead (never did, resigned, or
                was deposed: a majority refused).
            NoQuorumError: too few masters answered to tell.
            WrongTypeError: see :meth:`RedlockLeadership.proclaim`.
        """
        self._leadership().proclaim(value)

    def resign(self) -> None:
        """Step down (see :meth:`RedlockLeadership.resign`).

        Raises:
            NotOwnedError: the caller does not lead.
            NoQuorumError: too few masters answered to tell.
        """
        self._leadership().resign()

    def leader(self) -> Leader | None:
        """Who leads now, as a majority of the masters says: the term recorded
        on (its lease holding the lock) by a majority, with the latest value
        a majority holds (``sequence`` says which); ``None`` when no term is
        on on a majority.

        Raises:
            NoQuorumError: fewer than a quorum of the masters answered.
            WrongTypeError: a key of the election holds a value of another type
                on so many masters that fewer than a quorum answered (on fewer,
                those masters are outvoted, as by a Redlock's acquire).
            InvalidArgument: two masters are one server (see :class:`Redlock`).
        """
        reads = self._lock._read_all()
        logs = self._lock._history(reads)
        return plans.quorum_leader(reads, self._lock._n, self.name, logs)

    def observe(self, timeout: float | None = None) -> Iterator[ElectionEvent]:
        """The changes of the election, as a majority of the masters holds
        them: an iterator (in asyncio, an async one) of
        :class:`tenure.ElectionEvent`, in ``(term, sequence)`` order, each once.

        The first event is the current state (the quorum's leader, if any).
        The observer listens on every master's feed and reads every master's
        log when any of them publishes, or when the leader's lease would end;
        a change is delivered once a majority of the masters logged it (what
        a minority holds alone is never delivered). When fewer than a quorum
        answer, it reads again (0.05 s, doubling to 1 s).

        Args:
            timeout: end the iteration once no change came for this many
                seconds (``None``, the default: never). The current state is
                read first all the same: with ``0``, it alone (a snapshot).

        Raises:
            InvalidArgument: a bad ``timeout``.
            WrongTypeError: a key of the election holds a value of another type
                on so many masters that fewer than a quorum answered (on fewer,
                those masters are outvoted, as by a Redlock's acquire).
        """
        if timeout is not None:
            timeout = check_seconds(timeout, "timeout", allow_zero=True)
        lock = self._lock
        cursor = plans.QuorumCursor(lock._n)
        wake = _driver.new_event()
        retry = _RETRY
        quiet_until = None if timeout is None else time.monotonic() + timeout
        stops = _fanout.listen_each(lock._clients, self._keys.channel, wake, lock._timeout)
        try:
            tried = False  # (the current state is read once, whatever the timeout)
            while True:
                left = None if quiet_until is None else quiet_until - time.monotonic()
                if left is not None and left <= 0:
                    if tried:
                        return
                    left = 0.0
                tried = True
                wake.clear()  # (a change published from here on reads again)
                reads = lock._read_all(cursor.after)
                events = cursor.take(reads, lock._history(reads))
                for event in events:
                    yield event
                if events and timeout is not None:
                    quiet_until = time.monotonic() + timeout
                if cursor.more(reads):
                    continue
                self._listen_again(stops, reads, wake)
                if len(plans.answered(reads)) >= lock.quorum:
                    retry, wait = _RETRY, cursor.wait(reads)
                else:
                    wait, retry = retry, min(retry * 2, _RETRY_MAX)
                if left is not None:
                    wait = left if wait is None else min(wait, left)
                _driver.wait_event(wake, wait)
        finally:
            for stop in stops:
                if stop is not None:
                    stop()

    def _listen_again(
        self, stops: list[Callable[[], None] | None], reads: list[Any], wake: Any
    ) -> None:
        """Listen on the feed of each master not listened on (its subscription
        failed: it was down) that answered ``reads``."""
        lock = self._lock
        again = [
            i
            for i, stop in enumerate(stops)
            if stop is None and not isinstance(reads[i], Exception)
        ]
        if again:
            clients = [lock._clients[i] for i in again]
            got = _fanout.listen_each(clients, self._keys.channel, wake, lock._timeout)
            for i, stop in zip(again, got, strict=True):
                stops[i] = stop

    def run_while_leader(self, fn: Work[R], timeout: float | None = None) -> R | None:
        """Campaign, then run ``fn(leadership)`` while leading, and resign when
        it returns (as :meth:`Election.run_while_leader`: an asyncio
        ``fn`` is cancelled as soon as the leadership is lost; a thread's
        ``fn`` must watch ``leadership.lost``).

        Returns:
            What ``fn`` returned, or ``None`` if not elected within ``timeout``.

        Raises:
            LockLostError: the leadership was lost while ``fn`` ran.
        """
        return self._run_while_leader(fn, timeout)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.name!r} masters={len(self.clients)} "
            f"label={self._label!r} ttl={self.ttl:g}s>"
        )

    def _leadership(self) -> RedlockLeadership:
        lease = self._lock._leases.get(_driver.current_owner())
        if not isinstance(lease, RedlockLeadership):
            raise NotOwnedError(self.name, None, "this thread or task does not lead")
        return lease
