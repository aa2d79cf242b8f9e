"""Decisions of :class:`tenure.MultiLock`: several locks (its parts) taken as
one, all of them or none. Pure: the parts and their leases are the facade's
(a part's acquire is that lock's own, with its waiting, lease and
watchdog); this module decides in what order they are taken, when the
parts of one server are tried together, when to start over and what to give
back. Its plans yield the steps below, which the facade performs (the loop
``_api/_async/_steps.py``: ``drive``); leases are opaque to them.

All or nothing. An acquire first tries every part at once without waiting
(:class:`TakeTogether`: the parts of one connection pool in one round trip),
unless a waiting acquire found one of its parts busy that way a moment ago.
If that got them all, done; if not, the facade has already released what
it took and a waiting acquire takes the parts one by one (:class:`TakePart`)
in a fixed order (:func:`order`), so that two multi-locks over overlapping
parts never wait for each other in a circle. A part not taken in time gives
back every part taken, in reverse order (:class:`GiveBack`), and the acquire
returns ``None``. A part whose lease ran out while later parts were awaited
(a short ttl without renewal) makes it give everything back and start over
within the same timeout. Anything that cuts the acquire off (an interrupt
of any class, a cancellation, a part's error) gives back what it holds
before it is raised, until the parts are handed over to the caller.
"""

from __future__ import annotations

from collections.abc import Generator, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .waiting import Clock

L = TypeVar("L")


@dataclass(frozen=True, slots=True)
class TakeTogether:
    """One attempt at every part, without waiting: those of one connection
    pool together, in one round trip. Reply: the parts' leases in the
    acquire order, or ``None`` if a part was busy (then none is held). A
    part's error is raised (the parts taken were given back)."""


@dataclass(frozen=True, slots=True)
class TakePart:
    """Acquire part ``part`` (its index in the parts as given): without
    waiting if not ``blocking``, else for at most ``timeout`` seconds
    (``None``: no limit). Reply: its lease, or ``None`` if not taken."""

    part: int
    blocking: bool
    timeout: float | None


@dataclass(frozen=True, slots=True)
class GiveBack:
    """Release ``leases`` in reverse order, each whatever the others do; an
    interrupt (of any class) among them is raised once all were released,
    the parts' other errors are not. Reply: ``None``."""

    leases: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class AllValid:
    """Whether every lease of ``leases`` is still valid (not lost, not run
    out on this process's clock). Reply: ``bool``."""

    leases: tuple[Any, ...]


MultiStep = TakeTogether | TakePart | GiveBack | AllValid
MultiPlan = Generator[MultiStep, Any, L]


def order(places: Sequence[tuple[str, str]]) -> tuple[int, ...]:
    """The acquire order of the parts, by each part's place (its lock key,
    then its server's ``host:port/db``): the same in every process, whatever
    order the parts were given in."""
    return tuple(sorted(range(len(places)), key=places.__getitem__))


def groups(
    ordered: Sequence[int], pools: Sequence[Hashable | None]
) -> tuple[tuple[int, ...], ...] | None:
    """The parts (in the acquire ``ordered``) that :class:`TakeTogether` tries
    in one round trip: those of one connection pool (``pools[i]``; ``None``:
    a part that goes alone, a Redis Cluster client's), each group where its
    first part comes in the order. ``None`` when no two parts share a pool
    (one by one then costs the same)."""
    found: dict[tuple[bool, Hashable], list[int]] = {}
    for i in ordered:
        pool = pools[i]
        found.setdefault((False, i) if pool is None else (True, pool), []).append(i)
    together = tuple(tuple(group) for group in found.values())
    return together if len(together) < len(pools) else None


def acquire(
    ordered: Sequence[int],
    grouped: bool,
    busy: bool,
    blocking: bool,
    timeout: float | None,
    held: list[L],
    *,
    now: Clock,
) -> MultiPlan[list[L] | None]:
    """Take every part, or none: the leases in the acquire order, or ``None``
    (holding none) if they were not all taken within ``timeout`` seconds
    (``None``: no limit; one attempt at each if not ``blocking``).

    ``grouped``: some parts share a connection pool (see :func:`groups`),
    so a first attempt at all of them together costs less; ``busy``: such an
    attempt found one of these parts busy a moment ago, so a waiting acquire
    goes to the parts one by one at once (the attempt would most likely fail).

    The leases are appended to ``held`` (the caller's list) before they are
    returned: from then on the caller gives them back if anything cuts it
    off; until then, what cuts the plan off gives back what it holds."""
    deadline = None if timeout is None else now() + timeout
    taken: list[L] | None = None
    try:
        if grouped and not (blocking and busy):
            taken = yield TakeTogether()
            if taken is None and not blocking:
                return None
        while True:
            if taken is None:
                taken = yield from take_all(ordered, blocking, deadline, now=now)
                if taken is None:
                    return None
            if (yield AllValid(tuple(taken))):
                break
            # a part's lease ran out while later parts were awaited: start over
            yield GiveBack(tuple(taken))
            taken = None
            if not blocking or (deadline is not None and now() >= deadline):
                return None
        held.extend(taken)  # the caller's to give back from here on
        return taken
    except GeneratorExit:  # closed by its driver: no step may follow
        raise
    except BaseException:
        # interrupted or cancelled with parts taken: the caller never gets
        # them, so they are given back now, not left until their ttl
        if taken and not held:
            yield GiveBack(tuple(taken))
        raise


def take_all(
    ordered: Sequence[int], blocking: bool, deadline: float | None, *, now: Clock
) -> MultiPlan[list[Any] | None]:
    """Take the parts one by one in the acquire order (each within what is
    left of ``deadline``, on ``now``'s clock; without waiting if not
    ``blocking``); ``None``, holding none, if one was not taken in time.
    Cut off, it gives back the parts it took, then raises."""
    taken: list[Any] = []
    try:
        for i in ordered:
            if not blocking:
                lease = yield TakePart(i, False, None)
            else:
                left = None if deadline is None else max(0.0, deadline - now())
                lease = yield TakePart(i, True, left)
            if lease is None:
                if taken:
                    yield GiveBack(tuple(taken))
                return None
            taken.append(lease)
    except GeneratorExit:  # closed by its driver: no step may follow
        raise
    except BaseException:
        if taken:
            yield GiveBack(tuple(taken))
        raise
    return taken
