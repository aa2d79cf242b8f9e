"""``AsyncMultiLock``: several locks taken as one, all of them or none."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..._drivers import _async as _driver
from ..._drivers._identity import process_mark
from ..._errors import InvalidArgument, LockLostError, NotOwnedError
from ..._info import MultiLockInfo, MultiPartInfo
from ..._leasebook import Phase
from ..._models import LostSignalBase, Started, collect_into, link, take_block_link
from ..._plans import lock as lock_plans
from ..._plans import multi as multi_plans
from ..._plans.waiting import Grant
from ..._protocol import is_interrupt, result_lost_with
from ..._units import check_ttl
from . import _steps
from ._base import _check_callback
from ._blocks import _AsyncBlocks, _AsyncEntersItself
from ._grants import _watched
from .lock import AsyncLease, AsyncLock
from .rlock import AsyncRLock, AsyncRLockLease

#: Seconds after an attempt at all the parts together found a part busy
#: during which a waiting acquire of any multi-lock with that part (in this
#: process) skips that attempt (it would most likely fail: a round trip lost,
#: and one more to release what it took) and takes the parts one by one at once.
BUSY_MEMORY = 1.0

#: Until when (``time.monotonic()``) each part found busy is presumed busy
#: still (see :data:`BUSY_MEMORY`), by (id of its connection pool, lock key).
_busy: dict[tuple[int, str], float] = {}

#: How many entries :data:`_busy` keeps before the expired ones are dropped.
_BUSY_ENTRIES = 1024

_AsyncPart = AsyncLock | AsyncRLock
_AsyncPartLease = AsyncLease | AsyncRLockLease


def _server_of(client: object) -> str:
    """Which server a client talks to, the same in every process that names it
    alike: ``host:port/db`` or ``unix:path/db``; for a client without one
    connection pool (a cluster client), its type and ``id`` (this process only);
    for a Sentinel ``master_for`` client, ``sentinel:<service name>/db`` (its
    pool's host is not the master's, which the Sentinels name when it connects)."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return f"{type(client).__name__}@{id(client):x}"
    db = kwargs.get("db", 0)
    service = getattr(pool, "service_name", None)
    if isinstance(service, str):
        return f"sentinel:{service}/{db}"
    if kwargs.get("path"):
        return f"unix:{kwargs['path']}/{db}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{db}"


def _grants_of(group: Sequence[int], results: Sequence[object]) -> dict[int, Grant]:
    """The parts of ``group`` whose result in ``results`` (in the group's
    order) is a grant, or an error that cut a grant off (see
    ``result_lost_with``), with the grant."""
    grants: dict[int, Grant] = {}
    for i, result in zip(group, results, strict=False):
        if isinstance(result, BaseException):
            result = result_lost_with(result)
        if isinstance(result, Grant):
            grants[i] = result
    return grants


async def _release_quietly(leases: Sequence[_AsyncPartLease]) -> None:
    """Release ``leases`` in reverse order, each whatever the others do
    (an interruption or cancellation, of any exception class, is raised once
    all were released)."""
    errors = await _release_together(list(reversed(leases)))
    _raise_first([e for e in errors if is_interrupt(e)])


async def _release_together(leases: list[_AsyncPartLease]) -> list[BaseException]:
    """Release ``leases``, in this order, each whatever the others do; return
    the errors. The held leases of one connection pool (one server) are
    released together, in one round trip, where the first of them comes; the
    others (a release retried, a lost lease's clean-up, a Redis Cluster's)
    one by one, as ``release()`` does."""
    errors: list[BaseException] = []
    units: list[list[_AsyncPartLease]] = []
    groups: dict[int, list[_AsyncPartLease]] = {}
    for lease in leases:
        pool = _driver.batch_key(lease._lock._client)
        if pool is None or lease._life.phase is not Phase.HELD:
            units.append([lease])
        elif id(pool) in groups:
            groups[id(pool)].append(lease)
        else:
            units.append(groups.setdefault(id(pool), [lease]))
    for unit in units:
        alone = unit if len(unit) == 1 else []
        begun: list[_AsyncPartLease] = []
        for lease in unit if not alone else ():
            try:
                if lease._release_begin():
                    begun.append(lease)
                else:  # lost meanwhile (the watchdog): its clean-up, alone
                    alone.append(lease)
            except BaseException as exc:
                errors.append(exc)
        if begun:
            plans = [lease._release_plan() for lease in begun]
            results = await _driver.run_together(begun[0]._lock._client, plans)
            for lease, result in zip(begun, results, strict=True):
                try:
                    lease._release_end(result)
                except BaseException as exc:
                    errors.append(exc)
        for lease in alone:
            try:
                await lease.release()
            except BaseException as exc:
                errors.append(exc)
    return errors


def _due(lease: _AsyncPartLease) -> bool:
    """Whether a part's release is still to be sent: neither RELEASED nor
    LOST and cleaned up."""
    life = lease._life
    return not (life.phase is Phase.RELEASED or (life.phase is Phase.LOST and life.cleaned))


def _found_busy(where: tuple[int, str]) -> None:
    """An attempt at all the parts found the part ``where`` busy (see :data:`_busy`)."""
    now = time.monotonic()
    if len(_busy) >= _BUSY_ENTRIES:
        for key, until in list(_busy.items()):
            if until <= now:
                _busy.pop(key, None)
    _busy[where] = now + BUSY_MEMORY


def _raise_first(errors: list[BaseException]) -> None:
    """Raise the first error (an interruption or cancellation, of any exception
    class, before any other), with the others attached to it as notes."""
    if not errors:
        return
    first = next((e for e in errors if is_interrupt(e)), errors[0])
    for other in errors:
        if other is not first:
            first.add_note(f"also: {type(other).__name__}: {other}")
    raise first


class AsyncMultiLease(_AsyncEntersItself, LostSignalBase):
    """All the parts of an :class:`AsyncMultiLock`, held together: returned by a
    successful :meth:`AsyncMultiLock.acquire`.

    A multi-lease is truthy. It holds one lease per part (``leases``), each
    renewed, extended and lost as that part's lease is.

    Attributes:
        name: the multi-lock's name (its parts' names joined by ``" + "``).
        owner: the thread's or task's owner id that holds it.
        leases: the parts' leases, in the order the parts were given to the
            multi-lock.
        fence: the parts' fences, a tuple in that same order (``fence[i]`` is
            the fence of part ``i``). Each part's fence increases on its own;
            give each protected resource the fence of the part that guards it.
        lost: set as soon as any part's lease is lost (an ``asyncio.Event``;
            ``on_lost`` callbacks run then). The other parts are still held
            until :meth:`release`.
    """

    lost: asyncio.Event
    fence: tuple[int, ...]
    __slots__ = ("_multi", "fence", "leases", "name", "owner")

    def __init__(
        self, multi: AsyncMultiLock, owner: str, leases: tuple[_AsyncPartLease, ...]
    ) -> None:
        super().__init__(_driver.new_event, "")  # (its parts' leases send the releases)
        self._multi = multi
        self.name = multi.name
        self.owner = owner
        self.leases = leases
        self.fence = tuple(lease.fence for lease in leases)
        for lease in leases:
            lease._life.whole = self._life  # (a release asked of this is asked of each part)
            lease.on_lost(self._part_lost)

    def _part_lost(self, lease: _AsyncPartLease) -> None:
        self._signal_lost(f"part {lease.name!r} was lost: {lease.lost_reason}")

    @property
    def valid(self) -> bool:
        """``True`` while the multi-lease is neither released nor lost and every
        part's lease is valid."""
        if not self._life.held:
            return False
        return all(lease.valid for lease in self.leases)

    @property
    def expires_at(self) -> float:
        """The earliest of the parts' ``expires_at`` (on ``time.monotonic()``)."""
        return min(lease.expires_at for lease in self.leases)

    @property
    def remaining(self) -> float:
        """Seconds until the first part's lease must be presumed expired (0.0 once
        released or lost)."""
        if not self._life.held:
            return 0.0
        return min(lease.remaining for lease in self.leases)

    async def release(self) -> None:
        """Release every part, in the reverse of the order they were taken, each
        whatever the others do: the parts on one connection pool (one server)
        together, in one round trip.

        Raises:
            LockLostError: a part's lease was lost (``lost`` is set); every
                other part was released all the same.
            NotOwnedError: the multi-lease was already released.
            redis.exceptions.ConnectionError: a part could not be released;
                calling ``release()`` again releases the parts not yet released.

        When several parts fail, the first error is raised (a cancellation or
        interruption before any other), and the others are attached to it as
        notes (``exc.__notes__``).

        A release that does not complete (an error, a cancellation or an
        interrupt of any exception class, at any point of the call) leaves the
        multi-lease unreleased until every part's release is done: calling
        ``release()`` again releases the parts not yet released, and so does
        the owner's next acquire of the multi-lock or of a part.
        """
        self._life.asked = True  # first, no call before it: see LeaseLife.asked, .whole
        life = self._life
        life.check_process(self.name, None, process_mark(), "release")
        life.begin_release(self.name, None)
        if life.cleaned:  # lost, and its parts' releases were sent already
            raise LockLostError(self.name, None, f"lease lost: {life.lost_reason}")
        due = [lease for lease in reversed(self._multi._in_order(self.leases)) if _due(lease)]
        errors = await _release_together(due)
        self._settle()
        _raise_first(errors)
        if life.phase is Phase.LOST:
            raise LockLostError(self.name, None, f"lease lost: {life.lost_reason}")

    def _release_due(self) -> bool:
        """See :class:`._blocks.AsyncExitReleasable`: the release did nothing,
        or a part's release is still due."""
        return self._life.phase is Phase.HELD or self._parts_due()

    def _parts_due(self) -> bool:
        """Whether a release was asked and a part's release is still due (a
        part left HELD is renewed by the watchdog, one left RELEASING may hold
        until its ttl, until ``release()`` again or the owner's next acquire)."""
        return self._life.asked_or_left and any(_due(lease) for lease in self.leases)

    def _settle(self) -> None:
        """Once no part's release is due any more, the multi-lease is over:
        released (cleaned up, if lost). Until then it stays as it is (never
        released while a part may still hold)."""
        if any(_due(lease) for lease in self.leases):
            return  # release() may be called again; the owner's next acquire finishes it
        life = self._life
        if life.phase is Phase.LOST:
            life.cleaned = True
        else:
            life.released()
        self._multi._forget(self)  # (if cut off before: the owner's next acquire does it)

    async def _clean_up(self) -> None:
        """Finish a release of the multi-lease that was asked for and did not
        complete (the owner acquires again): send the release of each part
        still due, quietly (as a part's ``_clean_up``). An interrupt, of any
        exception class, is raised (what is left stays due)."""
        for lease in reversed(self._multi._in_order(self.leases)):
            if _due(lease):
                await lease._clean_up()
        self._settle()

    async def extend(self, seconds: float | None = None) -> None:
        """Reset every part's lease to end ``seconds`` from now (default: each
        part's ttl), each whatever the others do.

        Raises:
            InvalidArgument: ``seconds`` is not a number of seconds from 0.01 to a
                year; nothing was sent.
            LockLostError: a part's lease was lost (``lost`` is set).
            NotOwnedError: the multi-lease was released.
            redis.exceptions.ConnectionError: a part could not be extended.

        When several parts fail, the first error is raised, with the others as
        notes.
        """
        if seconds is not None:
            check_ttl(seconds, "seconds")
        self._life.check_process(self.name, None, process_mark(), "extend")
        self._life.begin_extend(self.name, None)
        errors: list[BaseException] = []
        for lease in self._multi._in_order(self.leases):
            try:
                await lease.extend(seconds)
            except BaseException as exc:
                errors.append(exc)
        _raise_first(errors)


class AsyncMultiLock(_AsyncBlocks[AsyncMultiLease]):
    """Several locks taken as one: all of them, or none.

    The parts may be any mix of :class:`AsyncLock`, :class:`AsyncRLock` and
    :class:`AsyncFairLock` objects, on one client or on several (different
    servers). An acquire first makes one attempt at every part without
    waiting, the parts on one connection pool (one server; not a Redis Cluster
    client's) together in one round trip; a release of them is one round trip
    too. If a part is busy, the parts that attempt took are released (one more
    round trip) and an acquire that waits takes the parts one by one, in a
    fixed order sorted by lock key and then server (``host:port/db``), whatever
    order they were given in: two multi-locks over overlapping parts then never
    wait for each other in a circle (no deadlock; nothing is held while the
    first attempt runs, which does not wait). For a second after a first
    attempt found a part busy, a waiting acquire with that part (by any
    multi-lock of this process) goes straight to the parts one by one. If a
    part is not taken in time, the parts already taken are released, in
    reverse order, and the acquire returns ``None``: nothing is left held.
    ``timeout`` is one budget for the whole acquire, not per part.

    A part whose lease ran out while later parts were being waited for (a part
    with a short ``ttl`` and no renewal) makes the acquire release everything
    and start over, within the same timeout. Parts created without a ``ttl`` are
    renewed by their client's watchdog, so this does not happen to them.

    Each part keeps its own semantics: its own lease, ttl, renewal, fence and
    lost signal; a part that is an ``AsyncRLock`` already held by the caller is
    entered again. The :class:`AsyncMultiLease` returned covers them all.

    Args:
        locks: the parts, at least one; no two of them the same lock (the same
            lock key on the same server).
        on_lost: called with the multi-lease when any part of it is lost.

    Raises:
        InvalidArgument: ``locks`` is empty or not a sequence, holds something
            that is not an ``AsyncLock``, ``AsyncRLock`` or ``AsyncFairLock``, or
            holds the same lock twice; or ``on_lost`` is not callable.

    Example::

        both = AsyncMultiLock([AsyncLock(client, "account:1"), AsyncLock(client, "account:2")])
        async with both as lease:
            await transfer(1, 2, fences=lease.fence)
    """

    def __init__(
        self,
        locks: Sequence[AsyncLock | AsyncRLock],
        *,
        on_lost: Callable[[AsyncMultiLease], object] | None = None,
    ) -> None:
        if isinstance(locks, str | bytes) or not isinstance(locks, Sequence):
            raise InvalidArgument(f"locks must be a sequence of locks, not {locks!r}")
        if not locks:
            raise InvalidArgument("locks must hold at least one lock")
        seen: dict[tuple[str, str], int] = {}
        for i, part in enumerate(locks):
            if not isinstance(part, AsyncLock | AsyncRLock):
                raise InvalidArgument(
                    f"locks[{i}] must be one of AsyncLock, AsyncRLock, AsyncFairLock, not {part!r}"
                )
            where = (part._keys.lock, _server_of(part._client))
            if where in seen:
                raise InvalidArgument(
                    f"locks[{seen[where]}] and locks[{i}] are the same lock "
                    f"({where[0]!r} on {where[1]})"
                )
            seen[where] = i
        self._parts: tuple[_AsyncPart, ...] = tuple(locks)
        # the acquire order: by lock key, then server (the same in every process)
        self._order = multi_plans.order(list(seen))  # (seen: in the parts' order)
        # each part's place in the acquire order
        self._place = tuple(sorted(range(len(locks)), key=self._order.__getitem__))
        self._name = " + ".join(part.name for part in self._parts)
        # the parts of each connection pool (one server), in the acquire order,
        # by the first one's place in it: tried together, one round trip each
        pools = [_driver.batch_key(part._client) for part in self._parts]
        self._groups = multi_plans.groups(
            self._order, [None if p is None else id(p) for p in pools]
        )
        # each part's entry in _busy
        self._where = tuple(
            (id(_driver.batch_key(part._client) or part._client), part._keys.lock)
            for part in self._parts
        )
        self._on_lost = _check_callback(on_lost)
        self._leases: dict[str, AsyncMultiLease] = {}

    @property
    def name(self) -> str:
        """The parts' names, in the order given, joined by ``" + "``."""
        return self._name

    @property
    def locks(self) -> tuple[AsyncLock | AsyncRLock, ...]:
        """The parts, in the order given."""
        return self._parts

    async def acquire(
        self, blocking: bool = True, timeout: float | None = None
    ) -> AsyncMultiLease | None:
        """Take every part for the calling thread or task, or none of them. A
        release of the caller's multi-lease that did not complete (cut off by
        an error or an interrupt) is finished first.

        Args:
            blocking: wait for the parts that are held (default). With
                ``False``, make one attempt at each part (those of one server
                together), and give up (releasing what was taken) if one is held.
            timeout: the longest wait in seconds for the whole acquire, from 0 to a year;
                ``None`` waits without limit. Not allowed with ``blocking=False``.

        Returns:
            An :class:`AsyncMultiLease` (truthy) holding every part, or ``None``
            if they were not all taken in time; then none is held.

        Raises:
            InvalidArgument: a bad ``blocking`` or ``timeout``; nothing was sent.
            AlreadyHeldError: the caller already holds a part that is an
                ``AsyncLock`` or ``AsyncFairLock`` (the parts taken were released).
            NotReplicatedError: as a part's acquire raises it; the parts taken
                were released.
            WrongTypeError: likewise.
            UnsupportedServer: likewise.
            redis.exceptions.ConnectionError: likewise.
        """
        wait = lock_plans.check_acquire(blocking, timeout)
        return await _watched(self, blocking, None, lambda: self._acquire(blocking, wait))

    async def _acquire(self, blocking: bool, wait: float | None) -> AsyncMultiLease | None:
        """:meth:`acquire`'s work, its arguments checked."""
        owner = _driver.current_owner()
        left = self._leases.get(owner)
        if left is not None and left._life.asked_or_left:
            # the owner's last release of it did not complete: finish it first
            # (its parts' own acquires would too), so that the multi-lease ends
            await left._clean_up()
        block = take_block_link()  # (the multi-lease's, not a part's)
        held: list[_AsyncPartLease] = []  # the parts, once the plan hands them over
        # every part's lease as it starts, before its acquire returns: a lease
        # whose return an interrupt cut off (on its way to the plan) is known
        started = Started()
        collect_into(started)
        lease = None
        try:
            grouped = self._groups is not None
            busy = blocking and grouped and bool(_busy) and self._busy()
            plan = multi_plans.acquire(
                self._order, grouped, busy, blocking, wait, held, now=time.monotonic
            )
            taken = await _steps.drive(plan, functools.partial(self._perform, owner))
            started.open = False  # (every part is the plan's now, or given back)
            if taken is None:
                return None
            lease = AsyncMultiLease(self, owner, tuple([taken[at] for at in self._place]))
            self._leases[owner] = lease
            if block is not None:
                link(lease, block)
            if self._on_lost is not None:
                lease.on_lost(self._on_lost)
        except BaseException:
            # interrupted or cancelled with the parts handed over: the caller
            # never gets them, so they are given back now, not left until their ttl
            if lease is not None and self._leases.get(owner) is lease:
                del self._leases[owner]
            started.open = False
            unseen = [one for one in started if one._life.held and one not in held]
            if held or unseen:
                await _release_quietly([*held, *unseen])
            raise
        return lease

    async def _perform(self, owner: str, step: multi_plans.MultiStep) -> Any:
        """Perform a step of the acquire's plan (:mod:`tenure._plans.multi`) for ``owner``."""
        if isinstance(step, multi_plans.TakePart):
            part = self._parts[step.part]
            if not step.blocking:
                return await part.acquire(blocking=False)
            return await part.acquire(timeout=step.timeout)
        if isinstance(step, multi_plans.AllValid):
            return all(lease.valid for lease in step.leases)
        if isinstance(step, multi_plans.GiveBack):
            await _release_quietly(step.leases)
            return None
        if isinstance(step, multi_plans.TakeTogether):
            return await self._take_together(owner)
        raise TypeError(f"not a step of a multi-lock's acquire: {step!r}")

    def _busy(self) -> bool:
        """Whether an attempt at all the parts found one of them busy within
        the last :data:`BUSY_MEMORY` seconds (in this process)."""
        now = time.monotonic()
        for where in self._where:
            until = _busy.get(where)
            if until is not None:
                if until > now:
                    return True
                _busy.pop(where, None)
        return False

    async def _take_together(self, owner: str) -> list[_AsyncPartLease] | None:
        """One attempt at every part, without waiting: those of one connection
        pool (one server) together, in one round trip. The parts in the acquire
        order, or ``None`` (holding none) if one was busy.

        Raises:
            AlreadyHeldError, NotReplicatedError, WrongTypeError, ...: as a
                part's acquire raises them; the parts taken were released.
        """
        assert self._groups is not None
        taken: dict[int, _AsyncPartLease] = {}
        errors: list[BaseException] = []
        busy = False
        # the grants not yet made leases, and the leases not yet started: given
        # back if an interruption or cancellation cuts them off from the caller
        granted: dict[int, Grant] = {}
        made: dict[int, _AsyncPartLease] = {}
        try:
            for group in self._groups:
                parts = [self._parts[i] for i in group]
                # a grant, its wait for replicas and its give-back reach one server
                replicated = any(part._opts.replicas is not None for part in parts)
                async with _driver.one_connection(parts[0]._client, replicated):
                    plans = [await part._prepare(owner, False, None) for part in parts]
                    try:
                        results = await _driver.run_together(parts[0]._client, plans)
                    except BaseException as exc:
                        lost = result_lost_with(exc)
                        if lost is not None:  # (the plans' results, cut off by exc)
                            granted.update(_grants_of(group, lost))
                        raise
                    granted.update(_grants_of(group, results))
                    for i, part, result in zip(group, parts, results, strict=True):
                        if isinstance(result, Grant):
                            made[i] = part._granted(owner, result)
                            del granted[i]
                            try:
                                await made[i]._start()  # (it releases itself if it fails)
                            except BaseException as exc:
                                errors.append(exc)
                            else:
                                taken[i] = made[i]
                            del made[i]
                        elif isinstance(result, BaseException):
                            errors.append(result)
                        else:
                            busy = True
                            _found_busy(self._where[i])
                if errors or busy:
                    break
        except BaseException as exc:
            errors.append(exc)
        if granted or made:
            await self._give_back(owner, granted, [made[i] for i in made if i not in taken])
        leases = [taken[i] for i in self._order if i in taken]
        if errors or busy:
            released = await _release_together(list(reversed(leases)))
            # (a release's error is not raised, as _release_quietly's)
            _raise_first(errors + [e for e in released if is_interrupt(e)])
            return None
        return leases

    async def _give_back(
        self, owner: str, granted: dict[int, Grant], made: list[_AsyncPartLease]
    ) -> None:
        """Give back (best effort) grants that never became leases (part index
        -> grant) and leases that never started."""
        for i, grant in granted.items():
            with contextlib.suppress(Exception):
                part = self._parts[i]
                await _driver.run(part._client, part._give_back(grant, owner))
        for lease in made:
            with contextlib.suppress(Exception):
                await lease.release()

    def _in_order(self, leases: tuple[_AsyncPartLease, ...]) -> list[_AsyncPartLease]:
        """A multi-lease's part leases (given in the parts' order) in the acquire order."""
        return [leases[i] for i in self._order]

    async def release(self) -> None:
        """Release the calling thread's or task's multi-lease (see
        :meth:`AsyncMultiLease.release`).

        Raises:
            NotOwnedError: the caller holds no multi-lease of this object, or a
                part of it was lost (``LockLostError``).
            redis.exceptions.ConnectionError: a part could not be released.
        """
        await self._lease().release()

    async def extend(self, seconds: float | None = None) -> None:
        """Extend every part of the calling thread's or task's multi-lease (see
        :meth:`AsyncMultiLease.extend`).

        Raises:
            InvalidArgument: ``seconds`` is not a number of seconds from 0.01 to a year.
            NotOwnedError: the caller holds no multi-lease of this object, or a
                part of it was lost (``LockLostError``).
            redis.exceptions.ConnectionError: a part could not be extended.
        """
        await self._lease().extend(seconds)

    async def locked(self) -> bool:
        """Whether any part is held by anyone now, so that an acquire would
        wait (a snapshot; it may change at once).

        Raises:
            WrongTypeError: a key of a part holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        for part in self._parts:
            if await part.locked():
                return True
        return False

    async def owned(self) -> bool:
        """Whether the calling thread or task holds every part through this
        multi-lock, as Redis says now.

        Raises:
            WrongTypeError: a key of a part holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        if _driver.current_owner() not in self._leases:
            return False
        for part in self._parts:
            if not await part.owned():
                return False
        return True

    async def info(self) -> MultiLockInfo:
        """A snapshot of the parts, in the order given: for each, whether anyone
        holds it, and the fence of the caller's lease of it.

        Raises:
            WrongTypeError: a key of a part holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        lease = self._leases.get(_driver.current_owner())
        parts = []
        for i, part in enumerate(self._parts):
            fence = lease.fence[i] if lease is not None else None
            kind = type(part).__name__
            parts.append(
                MultiPartInfo(kind, part.name, part._keys.lock, await part.locked(), fence)
            )
        return MultiLockInfo(lease is not None and lease.valid, tuple(parts))

    def __repr__(self) -> str:
        parts = ", ".join(f"{type(p).__name__}({p.name!r})" for p in self._parts)
        return f"<{type(self).__name__} [{parts}] held_here={len(self._leases)}>"

    def _lease(self) -> AsyncMultiLease:
        lease = self._leases.get(_driver.current_owner())
        if lease is None:
            raise NotOwnedError(self.name, None, "not held by this thread or task")
        return lease

    def _forget(self, lease: AsyncMultiLease) -> None:
        if self._leases.get(lease.owner) is lease:
            self._leases.pop(lease.owner, None)  # (never a KeyError: see AsyncLock._forget)
