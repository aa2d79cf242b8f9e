"""Random-signal fault harness: interrupts at random points of every primitive.

For each primitive (Lock, RLock, FairLock, Semaphore, ReadWriteLock read and
write, CountDownLatch, MultiLock over two servers, Redlock over three masters;
and, sync only, a Lock used as ``with lock(timeout=...)`` blocks, the alarm
landing in their enter and exit)
and each interrupt style, a child process runs acquire / hold / release in a
loop for ``--seconds`` while a thread (asyncio: a task) of the same process,
never interrupted, contends for the same name. With hiredis as redis-py's
parser (checked), so that a crash in C shows as the child dying of a signal.

- sync, ``keyboard`` / ``exception``: a one-shot ``setitimer`` fires at a
  random point of each call; the ``SIGALRM`` handler raises
  ``KeyboardInterrupt``, or ``AlarmTimeout``, an ``Exception`` subclass, as
  a timeout library would. Python runs handlers in the main thread only.
- asyncio, ``cancel`` / ``timeout``: the loop's task is cancelled at a random
  point of each call, by a timer's ``task.cancel()`` or an expiring
  ``asyncio.timeout()``.

What it checks, with the alarms off:

- **stranded**: after each iteration in which the loop holds nothing (every
  lease acquire returned was released), Redis must hold nothing of the
  loop's owner: a holder, a permit, a read or write hold (or a queued place
  of a FairLock, counted apart as ``queued``) under the loop's owner id is
  something the library left behind. The harness's own part is excluded by
  construction: a lease that acquire *returned* is always released in a
  ``finally``, and an alarm that lands in the harness's own frames (before
  the call began, after it returned, in the bookkeeping) is not raised.
  A Redlock's clean-up round returns once a quorum of masters answered; a
  slower master gets the release late (behind a call still in flight
  there), within the per-master timeout. So for Redlock the check first
  waits, alarms off, up to that timeout plus 0.25 s for the owner's holds
  to go (counted as ``late``, not a failure); only what is still held
  then is stranded (a real one stays until its ttl).
- **unfinished**: a release that was interrupted leaves the lease RELEASING;
  every other such lease is left to the owner's next acquire, which must
  send the release again (``src/tenure/_leasebook.py``); still held after
  that acquire returned counts here. The others (and a lease still HELD: its
  release was cut off before it began) are released again at once.
- **overlaps**: each holder adds its weight to a counter key while it holds
  (1 for an exclusive hold, its permits for a semaphore, 1000 for a writer
  against 1 per reader); a sum over the limit is two holders at once.
- **crash**: the child died of a signal (e.g. ``SIGSEGV``), or hung (it is
  killed after ``--seconds`` plus a grace, its threads' stacks dumped), or
  the contender did not stop.
- at the end, with the contender stopped: the name must be free in Redis.

``swallowed`` counts interrupts raised in the library that never reached
the loop; ``already-held`` counts ``AlreadyHeldError`` raised to an owner
that held nothing it knew of; ``pool-broken`` counts redis-py's pool handing
out a connection whose connect() was interrupted (repaired, not tenure's);
``errors`` names any other exception (``--verbose``). The exit status is 1
if any cell stranded, overlapped, left a release unfinished, crashed or hung.
``make fault-signals`` runs the full grid (38 cells, about 5 minutes);
``--quick`` runs each cell for 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import io
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from types import FrameType
from typing import Any, TypeVar

import redis
import redis.asyncio
import redis.utils

from tenure import (
    AlreadyHeldError,
    AsyncCountDownLatch,
    AsyncFairLock,
    AsyncLock,
    AsyncMultiLock,
    AsyncReadWriteLock,
    AsyncRedlock,
    AsyncRLock,
    AsyncSemaphore,
    CountDownLatch,
    FairLock,
    Lock,
    MultiLock,
    NotOwnedError,
    ReadWriteLock,
    Redlock,
    RLock,
    Semaphore,
)
from tenure._drivers._async import current_owner as async_owner
from tenure._drivers._async import fanout as _fanout_async
from tenure._drivers._sync import current_owner
from tenure._drivers._sync import fanout as _fanout_sync
from tenure._server import ServerProcess

KINDS = (
    "lock",
    "lock-with",
    "rlock",
    "fair",
    "semaphore",
    "rw-read",
    "rw-write",
    "latch",
    "multi",
    "redlock",
)
#: The kinds only the sync cells run (``lock-with``: a ``with`` block's enter
#: and exit, where a signal handler may raise at any instruction; an
#: ``async with`` is cut off only at its awaits, as the ``lock`` cells are).
SYNC_ONLY = ("lock-with",)
STYLES = ("keyboard", "exception")  # sync: what the SIGALRM handler raises
ASYNC_STYLES = ("cancel", "timeout")  # asyncio: task.cancel() or asyncio.timeout()
T = TypeVar("T")
#: 0 under --control: the same loops and checks with no interrupt, which must pass
ARMED = [1.0]
#: Servers a kind needs (MultiLock's parts are on two, Redlock's masters three).
SERVERS = {"multi": 2, "redlock": 3}

TTL = 2.0  # renewed by the watchdog: a stranded lease the watchdog keeps shows as `renewed`
SETTLE_GRACE = 0.25  # beyond a Redlock's per-master timeout, for a loaded machine
ACQUIRE_TIMEOUT = 0.3
PERMITS = 2
WRITER = 1000  # a writer's weight on the overlap counter; a reader's is 1
NAME = "sig"
COUNTER = "harness:holding"


class AlarmTimeout(Exception):
    """What a timeout library's alarm raises: an ``Exception``, not a ``BaseException``."""


INTERRUPTS: tuple[type[BaseException], ...] = (KeyboardInterrupt, AlarmTimeout)


@dataclass
class Counts:
    """One cell's results (the child prints them as JSON lines as it goes)."""

    kind: str
    style: str
    api: str = "sync"
    iterations: int = 0
    acquired: int = 0
    raised: int = 0  # interrupts the handler raised (in the library's frames)
    ignored: int = 0  # alarms that landed in the harness's own frames
    caught: int = 0  # interrupts that reached the loop
    stranded: int = 0
    queued: int = 0  # a FairLock queue place of the loop's owner left behind
    renewed: int = 0  # a stranded hold still there after 3 ttls: renewed for ever
    release_interrupted: int = 0
    release_left_held: int = 0  # the interrupted release left the hold in Redis (allowed)
    unfinished: int = 0
    late: int = 0  # (Redlock) checks that waited for a late release first (see ``settling``)
    overlaps: int = 0
    already_held: int = 0
    pool_broken: int = 0  # redis-py's pool kept a half-connected connection (AttributeError)
    timeouts: int = 0
    contender_holds: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    final_free: bool | None = None
    done: bool = False
    crash: str = ""

    def error(self, where: str, exc: BaseException) -> None:
        key = f"{where}:{type(exc).__name__}"
        self.errors[key] = self.errors.get(key, 0) + 1
        if self.errors[key] == 1:
            self.note(f"{key}: {exc!r}"[:300])

    def note(self, text: str) -> None:
        if len(self.notes) < 20:
            self.notes.append(text)

    @property
    def swallowed(self) -> int:
        """Interrupts raised in the library that never reached the loop."""
        return self.raised - self.caught

    @property
    def failed(self) -> bool:
        return bool(
            self.stranded
            or self.renewed
            or self.unfinished
            or self.overlaps
            or self.crash
            or self.final_free is False
            or not self.done
        )


# -- the interrupt ---------------------------------------------------------------


class Alarm:
    """A one-shot ``SIGALRM`` at a random point of the next library call. The
    handler raises only while armed, so an alarm that lands in the harness's
    own bookkeeping (or after the call returned) is ignored."""

    def __init__(self, style: str, counts: Counts, rng: random.Random) -> None:
        self.error: type[BaseException] = KeyboardInterrupt if style == "keyboard" else AlarmTimeout
        self.counts = counts
        self.rng = rng
        self.armed = False
        self.where = ""  # where the last interrupt was raised
        signal.signal(signal.SIGALRM, self._handler)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if not self.armed:
            return
        self.armed = False
        if frame is not None and frame.f_code.co_filename == __file__:
            # Landed in the harness's own frame: before the call began, or after
            # it returned and before its result was stored (a lease the loop
            # would never see). Not the library's window: not raised.
            self.counts.ignored += 1
            return
        if frame is not None and os.path.basename(frame.f_code.co_filename) == "weakref.py":
            # A weak reference's callback, run by the interpreter as an object
            # dies: Python prints and drops whatever it raises ("Exception
            # ignored in"), so an interrupt there never reaches anyone's code.
            self.counts.ignored += 1
            return
        if in_finalizer(frame):
            # The same for an object's __del__ (a client library's connection
            # or pipeline collected while the library runs), at any depth.
            self.counts.ignored += 1
            return
        self.counts.raised += 1
        self.where = (
            f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} " if frame else ""
        )
        self.where += frame.f_code.co_name if frame else "?"
        if frame is not None:
            # the library frames above it, innermost first: who was waiting
            chain = [
                f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                for f in reversed(traceback.extract_stack(frame))
                if "tenure" in f.filename
            ]
            self.where += " <- " + " <- ".join(chain[1:6]) if chain[1:] else ""
        raise self.error("alarm")

    def arm(self, chance: float = 0.8) -> None:
        if self.rng.random() < chance * ARMED[0]:
            self.armed = True
            signal.setitimer(signal.ITIMER_REAL, self.rng.uniform(0.00005, 0.002))

    def disarm(self) -> None:
        self.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)

    @contextmanager
    def off(self) -> Iterator[None]:
        was = self.armed
        self.disarm()
        try:
            yield
        finally:
            self.armed = was


def in_finalizer(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside an object's ``__del__``, whose exceptions
    Python prints and drops."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


# -- the primitives --------------------------------------------------------------


@dataclass
class Kind:
    """How the loop and its contender use one primitive, and how Redis shows it."""

    acquire: Callable[[float], Any]  # the loop's: a lease or None
    contend: Callable[[float], Any]  # the contender's (its own objects, the same clients)
    weight: int  # the loop's weight on the overlap counter
    contender_weight: Callable[[], int]
    limit: int  # the largest legal sum; writers are checked apart
    holders: Callable[[], list[str]]  # who holds what, in Redis (owner ids or tokens)
    queued: Callable[[], list[str]] = lambda: []
    #: how long a release may still be landing after its call returned (Redlock:
    #: one round returns once a quorum answered; the others get it late)
    settle: float = 0.0
    #: whether the library still has calls in flight or releases queued behind
    #: them (Redlock: an acquire cut off on a worker thread or task may land
    #: after the interrupt, its release queued behind it)
    in_flight: Callable[[], bool] = lambda: False
    #: the loop's ``with`` block of ``timeout`` seconds (``lock(timeout=...)``), if any
    block: Callable[[float], Any] | None = None


#: The classes of each API (the asyncio twins' calls return coroutines).
SYNC: dict[str, Any] = {
    "Lock": Lock,
    "RLock": RLock,
    "FairLock": FairLock,
    "Semaphore": Semaphore,
    "ReadWriteLock": ReadWriteLock,
    "MultiLock": MultiLock,
    "Redlock": Redlock,
}
ASYNC: dict[str, Any] = {
    "Lock": AsyncLock,
    "RLock": AsyncRLock,
    "FairLock": AsyncFairLock,
    "Semaphore": AsyncSemaphore,
    "ReadWriteLock": AsyncReadWriteLock,
    "MultiLock": AsyncMultiLock,
    "Redlock": AsyncRedlock,
}


def fanout_in_flight(asyncio_api: bool) -> bool:
    """Whether a Redlock call of this process is still on its way to a master
    (on a worker thread or task of the fan-out) or a release waits behind one."""
    if asyncio_api:
        return _fanout_async._book.pending()
    return _fanout_sync._book.pending()


def build(
    kind: str, clients: list[Any], inspect: list[redis.Redis], api: dict[str, Any] = SYNC
) -> Kind:
    """The loop's and the contender's objects for ``kind`` (on ``clients``,
    of ``api``'s classes), and what reads Redis (sync, on ``inspect``: other
    connections, the loop's pool may have been interrupted mid-connect)."""
    opts: dict[str, Any] = {"ttl": TTL, "auto_renew": True}
    Lock_, MultiLock_ = api["Lock"], api["MultiLock"]

    def lock_holders(name: str, client: redis.Redis) -> list[str]:
        holder = Lock(client, name).info().holder
        return [holder] if holder else []

    if kind in ("lock", "lock-with", "rlock", "fair"):
        name = {"lock": "Lock", "lock-with": "Lock", "rlock": "RLock", "fair": "FairLock"}[kind]
        cls: Any = api[name]
        mine, theirs, seen = (
            cls(clients[0], NAME, **opts),
            cls(clients[0], NAME, **opts),
            SYNC[cls.__name__.removeprefix("Async")](inspect[0], NAME),
        )

        def fair_queue() -> list[str]:
            return [w.owner for w in seen.info().queue] if kind == "fair" else []

        def one_holder() -> list[str]:
            holder = seen.info().holder
            return [holder] if holder else []

        return Kind(
            lambda t: mine.acquire(timeout=t),
            lambda t: theirs.acquire(timeout=t),
            1,
            lambda: 1,
            1,
            one_holder,
            fair_queue,
            block=lambda t: mine(timeout=t),
        )
    if kind == "semaphore":
        sem = api["Semaphore"](clients[0], NAME, PERMITS, **opts)
        other = api["Semaphore"](clients[0], NAME, PERMITS, **opts)
        seen_sem = Semaphore(inspect[0], NAME, PERMITS)
        return Kind(
            lambda t: sem.acquire(PERMITS, timeout=t),
            lambda t: other.acquire(timeout=t),
            PERMITS,
            lambda: 1,
            PERMITS,
            lambda: [h.token for h in seen_sem.info().holders],
        )
    if kind in ("rw-read", "rw-write"):
        rw = api["ReadWriteLock"](clients[0], NAME, **opts)
        other_rw = api["ReadWriteLock"](clients[0], NAME, **opts)
        seen_rw = ReadWriteLock(inspect[0], NAME)
        writing = kind == "rw-write"
        turn = random.Random(7)
        last = [1]

        def contend(t: float) -> Any:
            # the contender alternates at random between reading and writing
            write = turn.random() < 0.5
            last[0] = WRITER if write else 1
            return (other_rw.write if write else other_rw.read).acquire(timeout=t)

        return Kind(
            lambda t: (rw.write if writing else rw.read).acquire(timeout=t),
            contend,
            WRITER if writing else 1,
            lambda: last[0],
            WRITER,
            lambda: [h.owner for h in seen_rw.info().holders],
        )
    if kind == "multi":
        multi = MultiLock_([Lock_(clients[0], "sig-a", **opts), Lock_(clients[1], "sig-b", **opts)])
        other_multi = MultiLock_(
            [Lock_(clients[0], "sig-a", **opts), Lock_(clients[1], "sig-b", **opts)]
        )
        return Kind(
            lambda t: multi.acquire(timeout=t),
            lambda t: other_multi.acquire(timeout=t),
            1,
            lambda: 1,
            1,
            lambda: lock_holders("sig-a", inspect[0]) + lock_holders("sig-b", inspect[1]),
        )
    if kind == "redlock":
        red = api["Redlock"](clients, NAME, **opts)
        other_red = api["Redlock"](clients, NAME, **opts)
        return Kind(
            lambda t: red.acquire(timeout=t),
            lambda t: other_red.acquire(timeout=t),
            1,
            lambda: 1,
            1,
            lambda: [h for c in inspect for h in lock_holders(NAME, c)],
            settle=red._timeout + SETTLE_GRACE,
            in_flight=lambda: fanout_in_flight(api is ASYNC),
        )
    raise ValueError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")


# -- the child: one cell ---------------------------------------------------------


def tokens_of(lease: Any) -> set[str]:
    """What Redis holds for ``lease``: its token or owner id (a MultiLease: its parts')."""
    parts = getattr(lease, "leases", None)
    leases = parts if parts is not None else (lease,)
    return {str(part.owner) for part in leases}


def begun(lease: Any) -> bool:
    """Whether an interrupted release got as far as leaving HELD. One cut off
    as the call began (its first line: no different from an interrupt just
    before the call) is the caller's to send again, never left pending."""
    return phase_of(lease) != "held"


def phase_of(lease: Any) -> str:
    """The lease's phase (``src/tenure/_leasebook.py``), for the notes."""
    life = getattr(lease, "_life", None)
    phase = getattr(life, "phase", None)
    return str(getattr(phase, "value", phase))


def ours(holders: list[str], owner: str) -> list[str]:
    """The holders that are the loop's owner (its owner id, or one of its tokens)."""
    return [h for h in holders if h == owner or h.startswith(owner + ":")]


class Cell:
    def __init__(self, kind: str, style: str, urls: list[str], seconds: float, seed: int) -> None:
        self.kind = kind
        self.counts = Counts(kind, style)
        self.rng = random.Random(seed)
        self.seconds = seconds
        self.clients = [redis.Redis.from_url(u) for u in urls]
        self.inspect = [redis.Redis.from_url(u, socket_timeout=5) for u in urls]
        self.counter = self.inspect[0]
        self.alarm = Alarm(style, self.counts, self.rng)
        self.owner = current_owner()
        self.settled_how = ""  # what the last acquire that returned did
        self.phases: dict[int, str] = {}
        self.pending_phases = ""  # a pending lease's phase when its release was cut
        self.stop = threading.Event()
        self.last_report = 0.0

    def report(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last_report > 0.5:
            self.last_report = now
            print(json.dumps(asdict(self.counts)), flush=True)

    # the overlap counter: the loop's own bookkeeping, never interrupted
    def enter(self, weight: int, limit: int, lease: Any) -> None:
        total = int(self.counter.incrby(COUNTER, weight))
        exclusive = weight == WRITER or limit == 1
        if (total > limit or (exclusive and total != weight)) and lease.valid:
            self.counts.overlaps += 1
            self.counts.note(f"overlap: weight {weight}, counter {total}")

    def leave(self, weight: int) -> None:
        self.counter.decrby(COUNTER, weight)

    def contender(self, kind: Kind) -> None:
        rng = random.Random(self.rng.random())
        while not self.stop.is_set():
            try:
                lease = kind.contend(0.2)
            except Exception as exc:
                self.counts.error("contender", exc)
                time.sleep(0.01)
                continue
            if lease is None:
                continue
            weight = kind.contender_weight()
            try:
                self.counts.contender_holds += 1
                self.enter(weight, kind.limit, lease)
                time.sleep(rng.uniform(0, 0.002))
                self.leave(weight)
            finally:
                try:
                    lease.release()
                except Exception as exc:
                    self.counts.error("contender-release", exc)
            time.sleep(rng.uniform(0, 0.003))

    def settling(self, kind: Kind, began: float) -> bool:
        """Whether to wait on (alarms off) for a release still landing: a
        Redlock whose round returned once a quorum answered sends it to the
        others late, within its per-master timeout (``kind.settle``, plus a
        grace). True while that time has not run out and something of the
        loop's owner is held or a call of the library is still on its way (an
        acquire cut off on a worker thread may land after the interrupt, its
        release queued behind it); what is still held then is the check's."""
        if time.monotonic() >= began + kind.settle:
            return False
        return kind.in_flight() or bool(ours(kind.holders(), self.owner))

    def settle(self, kind: Kind) -> None:
        began = time.monotonic()
        if self.settling(kind, began):
            self.counts.late += 1
            while self.settling(kind, began):
                time.sleep(0.005)

    def wait_until_clear(self, kind: Kind, found: list[str]) -> bool:
        """Wait (alarms off) for what was stranded to end by its ttl; False if
        it outlives 3 ttls (the watchdog renews it)."""
        deadline = time.monotonic() + 3 * TTL + 1
        while time.monotonic() < deadline:
            if not set(found) & set(kind.holders() + kind.queued()):
                return True
            time.sleep(0.05)
        return False

    def check(self, kind: Kind, pending_tokens: set[str]) -> bool:
        """After an iteration that left the loop holding nothing: Redis holds
        nothing of the loop's owner. False to stop the cell (a renewed strand)."""
        held = list(dict.fromkeys(ours(kind.holders(), self.owner)))  # once per token
        queued = ours(kind.queued(), self.owner)
        unfinished = [
            h for h in held if h in pending_tokens or (h == self.owner and pending_tokens)
        ]
        # (an RLock or read-write hold is the owner id itself)
        stranded = [h for h in held if h not in unfinished]
        for h in unfinished:
            self.counts.unfinished += 1
            self.counts.note(
                f"unfinished release: {h} (still held after the next acquire,"
                f" which {self.settled_how}; the lease was {self.pending_phases}"
                " when its release was interrupted)"
            )
        for h in stranded:
            self.counts.stranded += 1
            self.counts.note(
                f"stranded at iteration {self.counts.iterations}: {h}"
                f" (last interrupt in {self.alarm.where})"
            )
        if queued:
            self.counts.queued += 1
            self.counts.note(
                f"queued place left at iteration {self.counts.iterations}"
                f" (last interrupt in {self.alarm.where})"
            )
        if not stranded and not queued:
            return True  # an unfinished release is released again next
        if not self.wait_until_clear(kind, stranded + queued):
            self.counts.renewed += 1
            self.counts.note("a stranded hold outlived 3 ttls: stopping the cell")
            return False
        return True

    def swallowed(self, call: str, raised: int) -> None:
        """A call returned although an interrupt was raised in it: note where."""
        if self.counts.raised != raised:
            self.counts.note(f"{call} swallowed an interrupt raised in {self.alarm.where}")

    def release(self, lease: Any, pending: list[Any], kind: Kind) -> bool:
        """Release ``lease`` under a random alarm. An interrupted release is left
        RELEASING for the next acquire (every other time, when no other is
        pending), or sent again at once. True if it was left pending."""
        raised = self.counts.raised
        self.alarm.arm()
        try:
            lease.release()
            self.swallowed("release", raised)
        except INTERRUPTS:
            self.alarm.disarm()
            self.counts.caught += 1
            self.counts.release_interrupted += 1
            self.phases[id(lease)] = phase_of(lease)
            if ours(kind.holders(), self.owner):
                self.counts.release_left_held += 1
            if self.counts.release_interrupted % 2 and not pending and begun(lease):
                pending.append(lease)
                return True
            self.release_quietly(lease)
        except NotOwnedError as exc:
            self.alarm.disarm()
            self.counts.error("release", exc)
        except Exception as exc:  # e.g. NoQuorumError: sent again at once
            self.alarm.disarm()
            self.counts.error("release", exc)
            self.release_quietly(lease)
        finally:
            self.alarm.disarm()
        return False

    def repair_pools(self) -> None:
        """redis-py's pool can keep a connection whose connect() was interrupted
        before its parser was set up (every later use raises AttributeError,
        docs/safety.md, "Interrupted acquire"): redis-py's, not tenure's. The
        idle connections are closed so the run goes on (counted as pool_broken)."""
        self.counts.pool_broken += 1
        for client in self.clients:
            client.connection_pool.disconnect(inuse_connections=False)

    def release_quietly(self, lease: Any) -> None:
        """Release with the alarms off; a lease already released is fine, and
        another error is counted (what it left is the next check's to find)."""
        with self.alarm.off():
            try:
                lease.release()
            except NotOwnedError:
                pass
            except Exception as exc:
                self.counts.error("release-again", exc)

    def run_locks(self, kind: Kind) -> None:
        pending: list[Any] = []  # at most one lease whose release was interrupted
        end = time.monotonic() + self.seconds
        while time.monotonic() < end:
            self.counts.iterations += 1
            lease: Any = None
            settled = False  # the acquire returned or refused: the pending lease is judged
            pended = False
            try:
                raised = self.counts.raised
                self.alarm.arm()
                try:
                    lease = kind.acquire(ACQUIRE_TIMEOUT)
                    settled = True
                    self.settled_how = "timed out" if lease is None else "returned a lease"
                    self.swallowed("acquire", raised)
                except AlreadyHeldError as exc:
                    settled = True
                    self.settled_how = "raised AlreadyHeldError"
                    self.counts.already_held += 1
                    self.counts.note(f"AlreadyHeldError: {exc}"[:200])
                finally:
                    self.alarm.disarm()
                if settled and lease is None:
                    self.counts.timeouts += 1
                if lease is not None:
                    self.counts.acquired += 1
                    self.enter(kind.weight, kind.limit, lease)
                    time.sleep(self.rng.uniform(0, 0.002))
                    self.leave(kind.weight)
            except INTERRUPTS:
                self.counts.caught += 1
            except Exception as exc:
                self.counts.error("acquire", exc)
                if isinstance(exc, AttributeError):
                    self.repair_pools()
            finally:
                self.alarm.disarm()
                if lease is not None:
                    pended = self.release(lease, pending, kind)
            if pended or (pending and not settled):
                continue  # judged after the next acquire that returns
            tokens = {t for p in pending for t in tokens_of(p)}
            self.pending_phases = ", ".join(self.phases.pop(id(p), "?") for p in pending)
            self.settle(kind)
            if not self.check(kind, tokens):
                break
            for p in pending:
                self.release_quietly(p)
            pending.clear()
            self.report()
        for p in pending:
            self.release_quietly(p)

    def run_blocks(self, kind: Kind) -> None:
        """Each iteration is one ``with lock(timeout=...)`` block; the alarm is
        armed as the block is entered and again as its body ends, so that it
        lands in the block's enter (the acquire, and the instructions around
        it) or in its exit (before or inside the release). A block cut off
        may leave its lease to the owner's next acquire (never renewed: see
        docs/safety.md, "Interrupted release"): so the check runs after each
        block that was neither cut off nor followed a cut-off one without an
        acquire of its own in between (the next block's acquire sends that
        release first). At the end, a last block (alarms off) does the same."""
        assert kind.block is not None
        end = time.monotonic() + self.seconds
        cut = False  # a block was cut off since the last check
        while time.monotonic() < end:
            self.counts.iterations += 1
            entered = False
            escaped = False
            try:
                self.alarm.arm()
                with kind.block(ACQUIRE_TIMEOUT) as lease:
                    self.alarm.disarm()
                    entered = True
                    self.counts.acquired += 1
                    self.enter(kind.weight, kind.limit, lease)
                    time.sleep(self.rng.uniform(0, 0.002))
                    self.leave(kind.weight)
                    self.alarm.arm()
            except INTERRUPTS:
                self.counts.caught += 1
                escaped = True
            except TimeoutError:  # AcquireTimeout: the acquire ended without the lock
                self.counts.timeouts += 1
            except AlreadyHeldError as exc:
                self.counts.already_held += 1
                self.counts.note(f"AlreadyHeldError: {exc}"[:200])
                escaped = True
            except Exception as exc:
                self.counts.error("block", exc)
                escaped = True
            finally:
                self.alarm.disarm()
            if escaped:
                cut = True
                continue
            if cut and not entered:
                continue  # (a timed-out acquire: the left lease is judged after the next)
            cut = False
            self.settle(kind)
            if not self.check(kind, set()):
                break
            self.report()
        if cut:
            with self.alarm.off(), kind.block(ACQUIRE_TIMEOUT):
                pass

    def run_latch(self) -> None:
        """Each iteration sets the count to 1 if it is 0, counts down and waits
        (interrupted at random); then, alarms off, the count is 0 or 1 (once
        counted down again, 0) and a wait returns True at once."""
        latch = CountDownLatch(self.clients[0], NAME)
        seen = CountDownLatch(self.inspect[0], NAME)
        end = time.monotonic() + self.seconds
        while time.monotonic() < end:
            self.counts.iterations += 1
            try:
                self.alarm.arm()
                latch.try_set_count(1)
                latch.count_down()
                if latch.wait(timeout=ACQUIRE_TIMEOUT):
                    self.counts.acquired += 1
                else:
                    self.counts.timeouts += 1
                self.alarm.disarm()
            except INTERRUPTS:
                self.alarm.disarm()
                self.counts.caught += 1
            except Exception as exc:
                self.alarm.disarm()
                self.counts.error("latch", exc)
            self.alarm.disarm()
            count = seen.count()
            if count not in (0, 1):
                self.counts.stranded += 1
                self.counts.note(f"latch count {count} at iteration {self.counts.iterations}")
            if count:
                seen.count_down()
            if not latch.wait(timeout=2.0):
                self.counts.stranded += 1
                self.counts.note(f"open latch not seen at iteration {self.counts.iterations}")
            self.report()

    def latch_waiter(self) -> None:
        latch = CountDownLatch(self.clients[0], NAME)
        while not self.stop.is_set():
            try:
                if latch.wait(timeout=0.2):
                    self.counts.contender_holds += 1
                time.sleep(0.002)
            except Exception as exc:
                self.counts.error("contender", exc)
                time.sleep(0.01)

    def run(self) -> None:
        parser = type(self.clients[0].connection_pool.get_connection()._parser).__name__
        if "Hiredis" not in parser or not redis.utils.HIREDIS_AVAILABLE:
            self.counts.note(f"hiredis is not redis-py's parser here ({parser})")
        if self.kind == "latch":
            kind = None
            helper = threading.Thread(target=self.latch_waiter, daemon=True)
        else:
            kind = build(self.kind, self.clients, self.inspect)
            helper = threading.Thread(target=self.contender, args=(kind,), daemon=True)
        helper.start()
        try:
            if kind is None:
                self.run_latch()
            elif self.kind == "lock-with":
                self.run_blocks(kind)
            else:
                self.run_locks(kind)
        finally:
            self.alarm.disarm()
            self.stop.set()
        helper.join(3)
        if helper.is_alive():
            self.counts.crash = "contender hung"
            with tempfile.TemporaryFile("w+") as f:
                faulthandler.dump_traceback(f, all_threads=True)
                f.seek(0)
                stacks = f.read()
            self.counts.note(f"the contender did not stop within 3 s:\n{stacks[-3000:]}")
        if kind is not None:
            time.sleep(0.05)
        self.finish(kind)

    def finish(self, kind: Kind | None) -> None:
        """The end of a cell: whether Redis holds nothing of it (a latch: open)."""
        if kind is not None:
            left = kind.holders() + kind.queued()
            self.counts.final_free = not left
            if left:
                self.counts.note(f"held at the end: {left}")
        else:
            self.counts.final_free = CountDownLatch(self.inspect[0], NAME).count() == 0
        self.counts.done = True
        self.report(force=True)


class AsyncCell(Cell):
    """The same loop on the asyncio API, where the interrupt is the loop's
    task cancelled at a random point of each call: by ``task.cancel()`` from
    a timer (style ``cancel``) or by ``asyncio.timeout()`` (style ``timeout``).
    A cancellation reaches the task only at an ``await``, so one that comes
    after the call returned is never raised (the timer is cancelled first):
    every one raised landed in the library. The contender is a task of the
    same loop, never cancelled."""

    def __init__(self, kind: str, style: str, urls: list[str], seconds: float, seed: int) -> None:
        super().__init__(kind, style, urls, seconds, seed)
        self.counts.api = "async"
        self.style = style
        self.aclients = [redis.asyncio.Redis.from_url(u) for u in urls]
        self.done_waiting = asyncio.Event()

    async def interrupted(self, call: Callable[[], Awaitable[T]], chance: float = 0.8) -> T:
        """``await call()``, cancelled at a random point (with ``chance``).
        Raises CancelledError (``cancel``) or TimeoutError (``timeout``) when
        the cancellation reached the caller; one the library swallowed is
        counted as raised and not caught."""
        if self.rng.random() >= chance * ARMED[0]:
            return await call()
        delay = self.rng.uniform(0.00005, 0.002)
        task = asyncio.current_task()
        assert task is not None
        if self.style == "timeout":
            async with asyncio.timeout(None) as cm:
                cm.reschedule(asyncio.get_running_loop().time() + delay)
                try:
                    return await call()
                finally:
                    if cm.expired():
                        self.counts.raised += 1

        def cancel() -> None:
            self.counts.raised += 1
            task.cancel()

        handle = asyncio.get_running_loop().call_later(delay, cancel)
        try:
            result = await call()
        finally:
            handle.cancel()
        if task.cancelling():
            task.uncancel()  # swallowed by the library: counted as raised, not caught
        return result

    def caught_one(self, exc: BaseException) -> None:
        self.counts.caught += 1
        tb, last = exc.__traceback__, None
        while tb is not None:  # the innermost frame of tenure or redis-py it went through
            name = tb.tb_frame.f_code.co_filename
            if f"{os.sep}tenure{os.sep}" in name or f"{os.sep}redis{os.sep}" in name:
                last = tb
            tb = tb.tb_next
        if last is not None:
            code = last.tb_frame.f_code
            where = f"{os.path.basename(code.co_filename)}:{last.tb_lineno} {code.co_name}"
            self.alarm.where = where
        task = asyncio.current_task()
        if self.style == "cancel" and task is not None and task.cancelling():
            task.uncancel()

    async def contend(self, kind: Kind) -> None:
        rng = random.Random(self.rng.random())
        while not self.stop.is_set():
            try:
                lease = await kind.contend(0.2)
            except Exception as exc:
                self.counts.error("contender", exc)
                await asyncio.sleep(0.01)
                continue
            if lease is None:
                continue
            weight = kind.contender_weight()
            try:
                self.counts.contender_holds += 1
                self.enter(weight, kind.limit, lease)
                await asyncio.sleep(rng.uniform(0, 0.002))
                self.leave(weight)
            finally:
                try:
                    await lease.release()
                except Exception as exc:
                    self.counts.error("contender-release", exc)
            await asyncio.sleep(rng.uniform(0, 0.003))

    async def release_async(self, lease: Any, pending: list[Any], kind: Kind) -> bool:
        try:
            await self.interrupted(lease.release)
        except (asyncio.CancelledError, TimeoutError) as exc:
            self.caught_one(exc)
            self.counts.release_interrupted += 1
            self.phases[id(lease)] = phase_of(lease)
            if ours(kind.holders(), self.owner):
                self.counts.release_left_held += 1
            if self.counts.release_interrupted % 2 and not pending and begun(lease):
                pending.append(lease)
                return True
            await self.release_quietly_async(lease)
        except NotOwnedError as exc:
            self.counts.error("release", exc)
        except Exception as exc:  # e.g. NoQuorumError: sent again at once
            self.counts.error("release", exc)
            await self.release_quietly_async(lease)
        return False

    async def release_quietly_async(self, lease: Any) -> None:
        try:
            await lease.release()
        except NotOwnedError:
            pass
        except Exception as exc:
            self.counts.error("release-again", exc)

    async def run_locks_async(self, kind: Kind) -> None:
        pending: list[Any] = []
        end = time.monotonic() + self.seconds
        while time.monotonic() < end:
            self.counts.iterations += 1
            lease: Any = None
            settled = pended = False
            try:
                try:
                    lease = await self.interrupted(lambda: kind.acquire(ACQUIRE_TIMEOUT))
                    settled = True
                    self.settled_how = "timed out" if lease is None else "returned a lease"
                except AlreadyHeldError as exc:
                    settled = True
                    self.settled_how = "raised AlreadyHeldError"
                    self.counts.already_held += 1
                    self.counts.note(f"AlreadyHeldError: {exc}"[:200])
                if settled and lease is None:
                    self.counts.timeouts += 1
                if lease is not None:
                    self.counts.acquired += 1
                    self.enter(kind.weight, kind.limit, lease)
                    await asyncio.sleep(self.rng.uniform(0, 0.002))
                    self.leave(kind.weight)
            except (asyncio.CancelledError, TimeoutError) as exc:
                self.caught_one(exc)
            except Exception as exc:
                self.counts.error("acquire", exc)
                if isinstance(exc, AttributeError):
                    self.counts.pool_broken += 1
                    for client in self.aclients:
                        await client.connection_pool.disconnect(inuse_connections=False)
            finally:
                if lease is not None:
                    pended = await self.release_async(lease, pending, kind)
            if pended or (pending and not settled):
                continue
            tokens = {t for p in pending for t in tokens_of(p)}
            self.pending_phases = ", ".join(self.phases.pop(id(p), "?") for p in pending)
            began = time.monotonic()
            if self.settling(kind, began):  # (the loop's tasks send late releases)
                self.counts.late += 1
                while self.settling(kind, began):
                    await asyncio.sleep(0.005)
            if not self.check(kind, tokens):
                break
            for p in pending:
                await self.release_quietly_async(p)
            pending.clear()
            self.report()
            await asyncio.sleep(0)  # the contender's turn
        for p in pending:
            await self.release_quietly_async(p)

    async def run_latch_async(self) -> None:
        latch = AsyncCountDownLatch(self.aclients[0], NAME)
        seen = CountDownLatch(self.inspect[0], NAME)

        async def once() -> bool:
            await latch.try_set_count(1)
            await latch.count_down()
            return await latch.wait(timeout=ACQUIRE_TIMEOUT)

        end = time.monotonic() + self.seconds
        while time.monotonic() < end:
            self.counts.iterations += 1
            try:
                if await self.interrupted(once):
                    self.counts.acquired += 1
                else:
                    self.counts.timeouts += 1
            except (asyncio.CancelledError, TimeoutError) as exc:
                self.caught_one(exc)
            except Exception as exc:
                self.counts.error("latch", exc)
            count = seen.count()
            if count not in (0, 1):
                self.counts.stranded += 1
                self.counts.note(f"latch count {count} at iteration {self.counts.iterations}")
            if count:
                seen.count_down()
            if not await latch.wait(timeout=2.0):
                self.counts.stranded += 1
                self.counts.note(f"open latch not seen at iteration {self.counts.iterations}")
            self.report()
            await asyncio.sleep(0)

    async def latch_waiter_async(self) -> None:
        latch = AsyncCountDownLatch(self.aclients[0], NAME)
        while not self.stop.is_set():
            try:
                if await latch.wait(timeout=0.2):
                    self.counts.contender_holds += 1
                await asyncio.sleep(0.002)
            except Exception as exc:
                self.counts.error("contender", exc)
                await asyncio.sleep(0.01)

    async def run_async(self) -> None:
        self.owner = async_owner()
        kind = None
        if self.kind == "latch":
            helper = asyncio.create_task(self.latch_waiter_async())
        else:
            kind = build(self.kind, self.aclients, self.inspect, ASYNC)
            helper = asyncio.create_task(self.contend(kind))
        try:
            if kind is None:
                await self.run_latch_async()
            else:
                await self.run_locks_async(kind)
        finally:
            self.stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(helper), 3)
        except TimeoutError:
            self.counts.crash = "contender hung"
            stack = io.StringIO()
            helper.print_stack(file=stack)
            self.counts.note(f"the contender did not stop within 3 s:\n{stack.getvalue()[-3000:]}")
        if kind is not None:
            await asyncio.sleep(0.05)
        self.finish(kind)

    def run(self) -> None:
        asyncio.run(self.run_async())


def child(args: argparse.Namespace) -> int:
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    cell = AsyncCell if args.api[0] == "async" else Cell
    if args.control:
        ARMED[0] = 0.0
    cell(args.kind[0], args.style[0], args.urls, args.seconds, args.seed).run()
    return 0


# -- the parent: the grid --------------------------------------------------------


def run_cell(
    api: str,
    kind: str,
    style: str,
    urls: list[str],
    seconds: float,
    seed: int,
    verbose: bool,
    control: bool = False,
) -> Counts:
    for url in urls:
        redis.Redis.from_url(url).flushall()
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--api", api]
    cmd += ["--kind", kind, "--style", style]
    cmd += ["--seconds", str(seconds), "--seed", str(seed), "--urls", *urls]
    cmd += ["--control"] if control else []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    grace = seconds + 3 * TTL + 8
    try:
        out, err = proc.communicate(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)  # faulthandler: every thread's stack
        time.sleep(1)
        proc.kill()
        out, err = proc.communicate()
        counts = last_counts(out, api, kind, style)
        counts.crash = f"hung (killed after {grace:.0f} s)"
        counts.note(err[-2000:])
        return counts
    counts = last_counts(out, api, kind, style)
    if proc.returncode < 0:
        counts.crash = signal.Signals(-proc.returncode).name
    elif proc.returncode > 0 or not counts.done:
        counts.crash = counts.crash or f"exit {proc.returncode}"
    if counts.crash:
        counts.note(err[-2000:])
    elif verbose and err.strip():
        counts.note(err[-1000:])
    return counts


def last_counts(out: str, api: str, kind: str, style: str) -> Counts:
    for line in reversed(out.splitlines()):
        with suppress(ValueError, TypeError):
            return Counts(**json.loads(line))
    return Counts(kind, style, api)


COLUMNS = (
    "api",
    "kind",
    "style",
    "iterations",
    "raised",
    "caught",
    "swallowed",
    "stranded",
    "queued",
    "renewed",
    "unfinished",
    "overlaps",
    "already_held",
    "pool_broken",
    "release_interrupted",
    "release_left_held",
    "acquired",
    "contender_holds",
    "crash",
)
HEADERS = (
    "api",
    "primitive",
    "style",
    "iter",
    "intr",
    "caught",
    "swallowed",
    "stranded",
    "queued",
    "renewed",
    "unfinished",
    "overlap",
    "already-held",
    "pool-broken",
    "rel-intr",
    "rel-held",
    "acq",
    "contender",
    "crash",
)


def table(rows: list[Counts]) -> str:
    cells = [list(HEADERS)]
    for c in rows:
        line = [str(getattr(c, k)) for k in COLUMNS]
        if c.kind == "latch":
            line[COLUMNS.index("overlaps")] = "-"
        if c.final_free is False:
            line[COLUMNS.index("stranded")] += " (end: held)"
        cells.append(line)
    widths = [max(len(r[i]) for r in cells) for i in range(len(HEADERS))]
    lines = [
        "| " + " | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) + " |" for r in cells
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--kind", action="append", choices=KINDS, help="a primitive (repeatable)")
    ap.add_argument(
        "--style",
        action="append",
        choices=STYLES + ASYNC_STYLES,
        help="an interrupt (repeatable): keyboard, exception (sync); cancel, timeout (asyncio)",
    )
    ap.add_argument("--api", action="append", choices=("sync", "async"), help="default both")
    ap.add_argument("--seconds", type=float, default=6.0, help="per cell (default 6)")
    ap.add_argument("--quick", action="store_true", help="2 s per cell")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument(
        "--control",
        action="store_true",
        help="the same cells without interrupts: a check of the harness, which must pass",
    )
    ap.add_argument("--json", help="also write every cell's counts to this file")
    ap.add_argument("--verbose", action="store_true", help="show each cell's notes")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--urls", nargs="*", default=[], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.seconds <= 0:
        ap.error(f"--seconds must be positive, not {args.seconds}")
    if args.child:
        return child(args)
    seconds = 2.0 if args.quick else args.seconds
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    kinds = args.kind or list(KINDS)
    grid = [
        (api, style)
        for api, styles in (("sync", STYLES), ("async", ASYNC_STYLES))
        if api in (args.api or ("sync", "async"))
        for style in styles
        if style in (args.style or styles)
    ]
    if not grid:
        ap.error(f"no interrupt style {args.style} belongs to the API {args.api}")
    need = max(SERVERS.get(k, 1) for k in kinds)
    binary = os.environ.get("TENURE_SERVER") or None
    servers = [ServerProcess(binary).start() for _ in range(need)]
    print(
        f"signal harness: seed {seed}, {seconds:g} s per cell, hiredis "
        f"{'on' if redis.utils.HIREDIS_AVAILABLE else 'OFF'}, redis-py {redis.__version__}",
        flush=True,
    )
    rows: list[Counts] = []
    try:
        for kind in kinds:
            urls = [s.url for s in servers[: SERVERS.get(kind, 1)]]
            for api, style in grid:
                if api == "async" and kind in SYNC_ONLY:
                    continue
                counts = run_cell(api, kind, style, urls, seconds, seed, args.verbose, args.control)
                rows.append(counts)
                flag = "FAIL" if counts.failed else "ok"
                print(
                    f"  {api:5} {kind:9} {style:9} {flag}: {counts.iterations} iterations, "
                    f"{counts.raised} interrupts, {counts.stranded} stranded, "
                    f"{counts.overlaps} overlaps{', ' + counts.crash if counts.crash else ''}",
                    flush=True,
                )
                if args.verbose or counts.failed:
                    for text in counts.notes:
                        print("      " + text.replace("\n", "\n      "), flush=True)
                    for key, n in counts.errors.items():
                        print(f"      error {key} x{n}", flush=True)
    finally:
        for s in servers:
            s.close()
    print()
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(c) for c in rows], f, indent=1)
    failed = [f"{c.api}/{c.kind}/{c.style}" for c in rows if c.failed]
    print(
        f"\n{len(failed)} of {len(rows)} cells failed{': ' + ', '.join(failed) if failed else ''}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
