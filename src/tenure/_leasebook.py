"""The life of a lease: one owner for its state, shared by the sync and async APIs.

Pure: no I/O, no clock reads (times are passed in), no threads. The facade
asks a lease's :class:`LeaseLife` what an operation may do before it sends
anything, and tells it what Redis answered; the watchdog asks it whether a
renewal may be sent and whether its reply may move the deadline. Nothing else
writes a lease's state. :class:`LeaseBook` holds the leases of a process by
(client, lock key, owner), so that an acquire knows what the same owner holds
or left behind.

A lease is in one of four phases::

                 release sent            Redis released it
      HELD ───────────────────► RELEASING ─────────────────► RELEASED
        │                          │  ▲ │
        │ lost: the watchdog found │  └─┘ the release failed or was interrupted:
        │ it gone, its deadline    │      it may be sent again; never renewed
        │ passed, or an extend or  │
        │ release found it gone    │ lost (its deadline passed, or the
        ▼                          ▼ release found it gone)
       LOST ◄──────────────────────┘

What each phase allows (``-`` : refused with the error named):

================  =========  ==============  ==========================  ====================
phase             renewal    ``extend()``    ``release()``               a new acquire by the
                                                                         same owner
================  =========  ==============  ==========================  ====================
HELD              sent       sent            sent; → RELEASING           ``AlreadyHeldError``
                                                                         (Lock), re-entry
                                                                         (RLock)
RELEASING         never      NotOwnedError   sent again (the same call   first sends the
                                             is recognised by Redis)     release again
                                                                         (also HELD after a
                                                                         ``release()`` cut off
                                                                         before it began)
RELEASED          never      NotOwnedError   NotOwnedError               goes ahead
LOST              never      LockLostError   a token-checked delete is   first sends the
                                             sent, then LockLostError    token-checked delete
================  =========  ==============  ==========================  ====================

A lease is also inert outside the process that acquired it: in a forked
child every operation is refused with ``NotOwnedError`` and nothing is sent
(:meth:`LeaseLife.check_process`), and a lease cannot be copied or pickled.

A renewal's or an extend's reply moves the deadline only while the lease is
HELD: a renewal that was in flight when the release began never revives it.
"""

from __future__ import annotations

import enum
import os
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from ._errors import LockLostError, NotOwnedError


class Phase(enum.Enum):
    """Where a lease is in its life (see the module's table)."""

    HELD = "held"
    RELEASING = "releasing"
    RELEASED = "released"
    LOST = "lost"

    # A member is its only instance: hashing by identity is exact, and runs no
    # Python code when :data:`TRANSITIONS` is looked up.
    __hash__ = object.__hash__


class Release(enum.Enum):
    """What :meth:`LeaseLife.begin_release` tells the facade to do."""

    SEND = "send"  # send the release; report its outcome with done / failed / gone
    CLEAN_UP = "clean up"  # the lease is lost: send the token-checked delete, then raise


#: The phases from which each event moves a lease, and where to: every phase
#: change of a lease is one of these (:meth:`LeaseLife._move`). An event not
#: listed for a phase leaves the phase as it is (e.g. a second loss).
TRANSITIONS: dict[tuple[Phase, str], Phase] = {
    (Phase.HELD, "release sent"): Phase.RELEASING,
    (Phase.RELEASING, "release sent"): Phase.RELEASING,
    (Phase.RELEASING, "released"): Phase.RELEASED,
    (Phase.HELD, "released"): Phase.RELEASED,  # a hold ended by another lease's release
    (Phase.HELD, "lost"): Phase.LOST,
    (Phase.RELEASING, "lost"): Phase.LOST,
}


#: Transitions may come from the holder's thread and the watchdog's at once.
_mutex = threading.Lock()

#: A lease book's stores and drops (each a few C operations under it, no call:
#: no signal handler runs while it is held). A forked child gets a new one.
_book_mutex = threading.Lock()


def _after_fork() -> None:
    global _book_mutex
    _book_mutex = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


class LeaseLife:
    """The state of one lease: its :class:`Phase`, why it was lost, the process
    that acquired it and the id of its release call.

    Attributes:
        phase: the lease's phase.
        lost_reason: why it was lost (``None`` unless ``phase`` is LOST).
        process: what identified the acquiring process (``_identity.process_mark()``);
            any other value is a forked child.
        cleaned: (LOST) a token-checked delete was sent for it.
        release_op: the id of the lease's release call: every attempt to
            release the lease (a retry by redis-py, a second ``release()``
            after a failure, two threads at once) sends this one, so that
            Redis tells a retry of it from a release by anyone else.
        asked: ``release()`` was called. It is the call's first act, a plain
            store with no call before it (where Python may run a signal
            handler), so an interrupt of the call at any later point, even
            before it reached :meth:`begin_release`, leaves a lease whose
            release is :attr:`unfinished`.
        whole: the life of the lease this one is a part of (a MultiLease's),
            or ``None``. A release asked of the whole (its :attr:`asked`, one
            store for every part) is asked of each part, so that an
            interrupt before a part's own ``release()`` set its flag still
            leaves that part's release :attr:`unfinished`.
        block: a weak reference to the exit of the ``with`` statement that
            entered the lease (see ``tenure._models.block_exit``), or
            ``None``. The statement holds that exit until it is done with it,
            so once the reference is dead the block is left: its release is
            asked, whether or not the exit's call got as far as asking it (an
            interrupt may cut the exit off at its first instruction).
    """

    __slots__ = (
        "asked",
        "block",
        "cleaned",
        "lost_reason",
        "phase",
        "process",
        "release_op",
        "whole",
    )

    def __init__(self, process: Hashable, release_op: str) -> None:
        self.phase = Phase.HELD
        self.lost_reason: str | None = None
        self.process = process
        self.cleaned = False
        self.release_op = release_op
        self.asked = False
        self.whole: LeaseLife | None = None
        self.block: Callable[[], object] | None = None

    def _move(self, event: str, reason: str | None = None) -> bool:
        """Move the phase as :data:`TRANSITIONS` says for ``event`` (the caller
        holds ``_mutex``); a move to LOST records ``reason`` first. Returns
        whether the table has a move for the phase."""
        after = TRANSITIONS.get((self.phase, event))
        if after is None:
            return False
        if after is Phase.LOST:
            self.lost_reason = reason
        self.phase = after
        return True

    @property
    def held(self) -> bool:
        """Whether the lease is HELD (renewals and extends may be sent)."""
        return self.phase is Phase.HELD

    @property
    def unfinished(self) -> bool:
        """Whether a release of the lease was asked for and did not complete:
        RELEASING, or HELD after a ``release()`` cut off before it began, or
        after the ``with`` block that entered it was left without its exit
        releasing it (the owner's next acquire sends it first), its own or its
        whole's."""
        phase = self.phase
        if phase is Phase.RELEASING:
            return True
        if phase is not Phase.HELD:
            return False
        whole = self.whole
        return self.asked or self.block_left or (whole is not None and whole.asked_or_left)

    @property
    def block_left(self) -> bool:
        """Whether the ``with`` statement that entered the lease is over (see
        :attr:`block`): a lease still HELD then is one whose exit was cut off."""
        block = self.block
        return block is not None and block() is None

    @property
    def asked_or_left(self) -> bool:
        """Whether a release was asked (:attr:`asked`) or the block left."""
        return self.asked or self.block_left

    @property
    def left_behind(self) -> bool:
        """Whether Redis may still hold the lease although this process gave it
        up: its release :attr:`unfinished`, or LOST and not cleaned up (the
        owner's next acquire sends its release first)."""
        return self.unfinished or (self.phase is Phase.LOST and not self.cleaned)

    def check_process(self, name: str, fence: object, process: Hashable, what: str) -> None:
        """Refuse ``what`` in a process other than the one that acquired the lease.

        Raises:
            NotOwnedError: ``process`` is not the lease's (a forked child).
        """
        if process != self.process:
            raise NotOwnedError(
                name,
                fence if isinstance(fence, int) else None,
                f"can't {what}: the lease belongs to the process that acquired it "
                "(this is a forked child)",
            )

    def begin_release(self, name: str, fence: int | None) -> Release:
        """A ``release()`` begins: what to send. From now on the lease is never
        renewed.

        Raises:
            NotOwnedError: the lease was released already; nothing is to be sent.
        """
        with _mutex:
            if self._move("release sent"):
                return Release.SEND
            if self.phase is Phase.LOST:
                return Release.CLEAN_UP
        raise NotOwnedError(name, fence, "can't release: already released")

    def begin_extend(self, name: str, fence: int | None) -> None:
        """An ``extend()`` begins.

        Raises:
            NotOwnedError: the lease was released, or its release was attempted.
            LockLostError: the lease is lost.
        """
        if self.phase is Phase.HELD:
            return
        if self.phase is Phase.LOST:
            raise LockLostError(name, fence, f"lease lost: {self.lost_reason}")
        what = "already released" if self.phase is Phase.RELEASED else "its release was attempted"
        raise NotOwnedError(name, fence, f"can't extend: {what}")

    def released(self) -> bool:
        """Redis released the lease (or the hold it belongs to ended). Returns
        whether the lease had been lost meanwhile (then it stays LOST)."""
        with _mutex:
            self._move("released")
            return self.phase is Phase.LOST

    def lose(self, reason: str) -> bool:
        """The lease is lost. Returns whether this changed the phase (only then
        fire the lost signal): never after a clean release, nor twice."""
        with _mutex:
            return self._move("lost", reason)

    def may_move_deadline(self) -> bool:
        """Whether a renewal's or an extend's reply may move the deadline."""
        return self.phase is Phase.HELD


class LeaseBook:
    """The leases of this process, by (client id, lock key, owner id): the
    latest lease each owner took of each lock, whichever lock object issued it.

    An acquire asks it what the same owner has there: a HELD lease (so the
    first attempt settles ``AlreadyHeldError`` alone), or one whose release
    failed or which was lost before it was cleaned up (so the acquire sends
    the token-checked release first and never answers ``AlreadyHeldError`` for
    a lease this process gave up or declared lost). Entries go with their lease
    (weak references).
    """

    def __init__(self) -> None:
        # A weak reference per key (a dead one reads as no lease); dead ones
        # are dropped when the book has doubled since it was last swept.
        self._leases: dict[Hashable, weakref.ref[Any]] = {}
        self._swept_at = 0

    def put(self, key: Hashable, lease: Any) -> None:
        """``lease`` (with a ``_life``) is the latest of ``key``."""
        ref = weakref.ref(lease)
        with _book_mutex:  # (one store: no call inside, where a handler may run)
            self._leases[key] = ref
        if len(self._leases) > 2 * self._swept_at + 64:
            self._sweep()

    def _sweep(self) -> None:
        """Drop the entries of leases gone; never one put meanwhile (each
        is checked and dropped under the mutex, which no call holds)."""
        for key, ref in list(self._leases.items()):
            if ref() is None:
                with _book_mutex:
                    if self._leases.get(key) is ref:
                        del self._leases[key]
        self._swept_at = len(self._leases)

    def get(self, key: Hashable) -> Any | None:
        """The latest lease of ``key``, or ``None``."""
        ref = self._leases.get(key)
        return None if ref is None else ref()

    def held(self, key: Hashable) -> bool:
        """Whether the latest lease of ``key`` is HELD."""
        lease = self.get(key)
        return lease is not None and lease._life.held

    def look_up(self, key: Hashable) -> tuple[Any | None, bool]:
        """:meth:`left_behind` and :meth:`held` of ``key``, in one look-up."""
        lease = self.get(key)
        if lease is None:
            return None, False
        life: LeaseLife = lease._life
        if life.left_behind:
            return lease, False
        return None, life.held

    def left_behind(self, key: Hashable) -> Any | None:
        """The latest lease of ``key`` if Redis may still hold it although this
        process gave it up: its release unfinished (:attr:`LeaseLife.unfinished`),
        or LOST and not cleaned up."""
        lease = self.get(key)
        if lease is None:
            return None
        return lease if lease._life.left_behind else None
