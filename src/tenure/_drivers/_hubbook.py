"""The bookkeeping of a wake hub, shared by both drivers: no I/O, no waiting.

A hub holds one pub/sub connection for a client in a process. Each lock that
the process waits on has a wake channel; the channel is subscribed when its
first waiter enters, stays subscribed for ``LINGER`` seconds after its last
waiter left (so a process that waits again soon pays no SUBSCRIBE round trip),
and is then unsubscribed by the hub's reader. A release hands the lock to a
waiting token and says so on the channel ("<fence> <token>"), and tells the
next waiter "recheck <ms>" (the new holder's claim window: if it stalled, the
lock is free when that ends); the hub gives the fence to the plan waiting with
that token (the recheck to whichever plan waits on the channel), or, if none
does any more (it gave up meanwhile), releases the lock again so that it goes
on to the next waiter, with its kind's pass-on plan (:class:`PassOn`; unless
the channel was entered without ``keys``, or the token's plan ended holding
the lock: its own attempt found the lock handed to it before the message
arrived; then nothing is done). When no channel is left, the reader closes the
pub/sub connection and stops; the next wait starts a new one.

A broadcast channel (a count-down latch reaching zero) is listened on by any
number of plans of the process, each with its own event: every message on it
sets all of them, and each plan clears only its own, so that no wake is lost
between two waits.

Reconnection. A message published while the pub/sub connection was down is
lost, so every reconnection wakes every waiter and listener to check Redis
again, but only once its channel is subscribed again: redis-py re-sends
SUBSCRIBE for each channel when it reconnects (and calls the hub first, see
:meth:`HubBook.reconnected`), and the server's confirmation of that SUBSCRIBE
is what wakes the channel's plans. A release before that confirmation is seen
by the plan's next attempt; a release after it is published to the hub. Waking
at the reconnection itself would leave a gap (a release between the attempt
and the new subscription would be lost again). The first connection of a hub
wakes nobody: redis-py (5.x to 8.x) registers the hub's callback after the
pool connected, so it is called only when a connection is made *again*.
Channels that redis-py subscribed again but the hub no longer listens on
(their UNSUBSCRIBE was lost with the connection) are unsubscribed again
(:meth:`HubBook.strays`), so that they do not keep the connection open.

A SUBSCRIBE the server refuses (``NOPERM``: the user's ACL does not allow the
wake channel) is answered in order, so it concerns the oldest subscription not
yet confirmed (:meth:`HubBook.refused`): that channel is forgotten, marked
``refused`` and its plans woken, and each raises ``PermissionDenied`` at once
rather than waiting out its timeout with no wake-up ever coming.

Sentinel. A client from ``Sentinel.master_for()`` gets its connections from a
pool that asks the Sentinels for the master whenever it connects. A failover
that closes the hub's connection is a reconnection as above; one that does not
(the old master made a replica, which closes only normal connections, or a
master gone silent) is noticed by the driver: when the pool has learned another
master than the one the hub's connection talks to (:func:`._clients.left_master`),
it closes that connection, and the next read reconnects, to the new master.

Redis Cluster. A node's hub listens by sharded pub/sub on the channels of the
slots that node serves. When a slot moves to another node (``CLUSTER SETSLOT
... NODE``, the end of a migration) the server tells its sharded subscribers
``sunsubscribe`` for that slot's channels, unasked; and after a failover the
old master's connection is gone. Either way the hub forgets the channels
(:meth:`HubBook.route` returns :class:`Dropped`; :meth:`HubBook.drop_all`)
and the driver gives each channel's record, with its waiters, to the hub of
the node that owns the slot now (:meth:`HubBook.adopt`), after refreshing the
cluster client's slot map, retrying with a backoff while no node has it (a
failover in progress). The adopted channel is subscribed there and, as after a
reconnection, its confirmation wakes its waiters to check Redis again (a
release published while it was not subscribed is lost). Meanwhile the waiters
wait for a wake or their holder's PTTL, as always.

A read that fails (redis-py gave up reconnecting, or does not retry) wakes
every waiter at once too (:meth:`HubBook.wake_all`), so that a waiter whose
server is gone gets its connection error now; the channels are kept for the
reconnection, unless nobody waits any more (:meth:`HubBook.drop_idle`: the
reader then stops).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from .._errors import PermissionDenied
from .._keys import LockKeys
from .._protocol import HandedOff, Plan, Recheck

#: What a script publishes on a channel to check, on Redis 6.2, that the user
#: may publish there (``_acl.lua``): never a wake.
ACL_PROBE = "probe"

#: Seconds a wake channel stays subscribed after its last waiter left.
LINGER = 1.0

#: How many tokens whose plans ended holding the lock (granted) a hub
#: remembers, so that a hand-off message arriving after such a plan ended is
#: not passed on.
GRANTED_REMEMBERED = 1024

#: Longest wait for the server to confirm a wake subscription, seconds. Past it
#: the waiter goes on anyway and relies on its lease-length timer.
SUBSCRIBE_CONFIRM_WAIT = 5.0


def confirm_wait(timeout: float | None) -> float:
    """How long a waiter with ``timeout`` seconds left waits for its subscription."""
    return SUBSCRIBE_CONFIRM_WAIT if timeout is None else min(timeout, SUBSCRIBE_CONFIRM_WAIT)


def is_noperm(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's ``NOPERM`` error reply (the client
    library's ``NoPermissionError``: an ACL refused the command), or a script's
    error that carries one."""
    if type(exc).__name__ == "NoPermissionError":
        return True
    # A script that re-raised a refused command's error (Redis 6.2, see
    # _common.lua's wrong()) comes back as a plain error reply with its text;
    # a command a script ran without checking it first (a read before its
    # first write: nothing was written) as "ACL failure in script".
    text = str(exc)
    return type(exc).__name__ == "ResponseError" and (
        "NOPERM" in text or "can't run this command" in text or "ACL failure in script" in text
    )


def refusal(ch: Channel) -> None:
    """Raise ``PermissionDenied`` if the server refused ``ch``'s SUBSCRIBE.

    Raises:
        PermissionDenied: the user's ACL does not allow the channel (or the
            SUBSCRIBE command).
    """
    if ch.refused:
        raise PermissionDenied("channel", ch.refused, "SUBSCRIBE")


def wake_all_of(ch: Channel) -> None:
    """Wake every plan of ``ch``: to check Redis again, or, its SUBSCRIBE
    refused, to raise (see :func:`refusal`)."""
    ch.ready.set()
    ch.wake.set()
    for event in list(ch.listeners):
        event.set()


class Settable(Protocol):
    """An event: ``threading.Event`` or ``asyncio.Event``."""

    def set(self) -> None: ...


class Channel:
    """A channel's record, as the book needs it; a driver's record (with its
    flavour's events, the gate and the hub that holds it) extends it and sets
    ``ready`` and ``wake``."""

    #: set when the server confirmed the subscription
    ready: Settable
    #: the wake-up of the one plan that waits on it
    wake: Settable

    def __init__(self, keys: LockKeys | None) -> None:
        #: None: hand-offs to tokens nobody waits with are not passed on
        self.keys = keys
        #: the channel's name (set by the book)
        self.name = ""
        self.refs = 0
        self.idle_since: float | None = None
        #: the lease tokens of this process's plans waiting on the lock
        self.tokens: set[str] = set()
        #: token -> fence, for locks handed to a waiting token
        self.handoffs: dict[str, int] = {}
        #: seconds: a release asked the waiter to retry within them
        self.recheck: float | None = None
        #: when the wait in progress on the channel ends anyway (time.monotonic();
        #: None: no wait in progress, or one the driver does not tell)
        self.wait_until: float | None = None
        #: the events of plans listening on a broadcast channel
        self.listeners: set[Settable] = set()
        #: the channel's name once the server refused its SUBSCRIBE (ACL)
        self.refused = ""


C = TypeVar("C", bound=Channel)


@dataclass(frozen=True)
class WakeEach:
    """A message on a broadcast channel: set every listener's event."""

    events: tuple[Settable, ...]

    def set(self) -> None:
        for event in self.events:
            event.set()


@dataclass(frozen=True)
class PassOn:
    """A lock was handed to ``token``, which no plan here waits with: release it."""

    keys: LockKeys
    token: str

    def plan(self) -> Plan[None]:
        """The plan that releases it, so that it goes on to the next waiter: the
        ``pass_on`` of the kind whose keys these are (looked up in the registry,
        :func:`tenure._plans.kinds.of_keys`), or nothing for a kind that has
        none (its waiters give back such a hand-off themselves)."""
        # (the registry, every kind's plans with it, loads at the first pass-on)
        from .._plans.kinds import of_keys

        kind = of_keys(self.keys)
        if kind is None or kind.pass_on is None:
            return _nothing()
        return kind.pass_on(self.keys, self.token)


def _nothing() -> Plan[None]:
    """A plan that does nothing."""
    return None
    yield  # a generator


@dataclass(frozen=True)
class Dropped(Generic[C]):
    """The server dropped the subscription of ``channel`` without being asked
    (a Redis Cluster slot moved to another node): the book forgot it; ``record``
    (with its waiters) is for the hub of the slot's new owner to adopt."""

    channel: str
    record: C


class HubBook(Generic[C]):
    """Channels by name, their waiter counts, and channels being unsubscribed."""

    def __init__(self, make: Callable[[LockKeys | None], C]) -> None:
        self.make = make
        self.channels: dict[str, C] = {}
        self.closing: dict[str, LockKeys | None] = {}
        self.granted: dict[str, None] = {}  # oldest first
        # channels subscribed again after a reconnection: their confirmation wakes everyone
        self.rewake: set[str] = set()
        # channels whose SUBSCRIBE is not confirmed yet, oldest first
        self.pending: dict[str, None] = {}
        # the channels nobody waits or listens on, lingering, the longest idle
        # first: what :meth:`stale` looks at (never every channel, so that a
        # message costs the reader the same however many channels it listens on)
        self.idle: dict[str, None] = {}

    def enter(self, channel: str, keys: LockKeys | None, token: str) -> tuple[C, bool]:
        """Count a waiter (waiting with ``token``) in; return its channel and
        whether to SUBSCRIBE now. ``keys`` is ``None`` for a primitive whose
        hand-offs are not passed on (see :meth:`route`)."""
        ch, new = self._count_in(channel, keys)
        ch.tokens.add(token)
        return ch, new

    def listen(self, channel: str, event: Settable) -> tuple[C, bool]:
        """Count a listener of broadcast ``channel`` in, woken by setting ``event``;
        return the channel and whether to SUBSCRIBE now."""
        ch, new = self._count_in(channel, None)
        ch.listeners.add(event)
        return ch, new

    def _count_in(self, channel: str, keys: LockKeys | None) -> tuple[C, bool]:
        ch = self.channels.get(channel)
        new = ch is None
        if ch is None:
            ch = self.channels[channel] = self.make(keys)
            ch.name = channel
            self.closing.pop(channel, None)
            self.pending[channel] = None
        ch.refs += 1
        ch.idle_since = None
        self.idle.pop(channel, None)
        return ch, new

    def abort(self, channel: str) -> None:
        """The SUBSCRIBE for a new channel failed: forget the channel."""
        self.channels.pop(channel, None)
        self.rewake.discard(channel)
        self.pending.pop(channel, None)

    def refused(self) -> tuple[str, C | None]:
        """The server refused a SUBSCRIBE (``NOPERM``): replies come in order, so
        it is the oldest one not yet confirmed. Forget that channel, set its
        ``refused`` to its name and return its name and the channel, whose plans the driver
        wakes (each then raises ``PermissionDenied``) and which it unsubscribes;
        ``("", None)`` when no SUBSCRIBE is pending."""
        if not self.pending:
            return "", None
        name = next(iter(self.pending))
        self.pending.pop(name)
        self.rewake.discard(name)
        ch = self.channels.pop(name, None)
        if ch is not None:
            ch.refused = name
        return name, ch

    def leave(self, ch: C, token: str, now: float, granted: bool = False) -> None:
        """Count a waiter out; the channel lingers from ``now``. ``granted``: its plan
        ended holding the lock, so a late hand-off message to ``token`` must not be
        passed on (that would release the lock it holds)."""
        ch.tokens.discard(token)
        ch.handoffs.pop(token, None)
        if granted:
            self.granted[token] = None
            if len(self.granted) > GRANTED_REMEMBERED:
                del self.granted[next(iter(self.granted))]
        self._count_out(ch, now)

    def unlisten(self, ch: C, event: Settable, now: float) -> None:
        """Count a listener out; the channel lingers from ``now``."""
        ch.listeners.discard(event)
        self._count_out(ch, now)

    def _count_out(self, ch: C, now: float) -> None:
        ch.refs -= 1
        if ch.refs == 0:
            ch.idle_since = now
            self.idle.pop(ch.name, None)  # (to the end: the longest idle stay first)
            self.idle[ch.name] = None

    def stale(self, now: float) -> list[str]:
        """Channels idle for ``LINGER`` seconds: moved to closing, to UNSUBSCRIBE.
        Looks only at the idle channels, the longest idle first, up to the
        first one still lingering."""
        looked: list[str] = []
        for name in self.idle:
            ch = self.channels.get(name)
            if ch is not None and ch.idle_since is not None and now - ch.idle_since < LINGER:
                break
            looked.append(name)
        names = []
        for name in looked:
            del self.idle[name]
            ch = self.channels.get(name)
            if ch is not None and ch.idle_since is not None:  # (else gone, or in use again)
                names.append(name)
        for name in names:
            self.closing[name] = self.channels.pop(name).keys
            self.rewake.discard(name)
            self.pending.pop(name, None)
        return names

    def route(
        self, kind: str, channel: str, data: str = "", now: float | None = None
    ) -> Settable | PassOn | Dropped[C] | None:
        """What a pub/sub message of ``kind`` on ``channel`` with ``data`` asks for.

        Returns the event to set (a subscription confirmed, a hand-off recorded
        for the waiting token, a recheck recorded for the channel's waiter, or a
        broadcast for every listener; a subscription confirmed after
        :meth:`reconnected` wakes every waiter and listener of the channel), a
        :class:`PassOn` (a lock handed to a token nobody here waits with, on a
        channel entered with keys), a :class:`Dropped` (an unsubscription the
        book did not ask for, of a channel it listens on: forgotten here), or
        ``None`` (nothing to do: also a recheck that asks the waiter to try
        again no sooner than the wait in progress ends anyway, ``now`` being
        ``time.monotonic()``: it then tries again all the same).
        """
        if kind == "unsubscribe":
            if self.closing.pop(channel, False) is False and channel in self.channels:
                return Dropped(channel, self.forget(channel))
            return None
        ch = self.channels.get(channel)
        if kind == "subscribe":
            self.pending.pop(channel, None)
            if ch is None:
                return None
            if channel in self.rewake:  # subscribed again after a reconnection
                self.rewake.discard(channel)
                return WakeEach((ch.ready, ch.wake, *ch.listeners))
            return ch.ready
        if kind == "message" and ch is not None and ch.listeners:
            if data == ACL_PROBE:
                return None  # Redis 6.2's permission check, not a wake
            return WakeEach(tuple(ch.listeners))
        fence, _, token = data.partition(" ")
        if kind == "message" and fence == "recheck":
            if ch is None or not token.isdigit():
                return None
            seconds = int(token) / 1000
            if now is not None and ch.wait_until is not None and now + seconds >= ch.wait_until:
                return None  # (its thread or task is not woken for nothing)
            ch.recheck = seconds if ch.recheck is None else min(ch.recheck, seconds)
            return ch.wake
        if kind != "message" or not fence.isdigit() or not token:
            return None
        if ch is not None and token in ch.tokens:
            ch.handoffs[token] = int(fence)
            return ch.wake
        if token in self.granted:
            return None  # its plan took the lock itself and holds it
        keys = ch.keys if ch is not None else self.closing.get(channel)
        return PassOn(keys, token) if keys is not None else None

    def woken(self, ch: C, token: str, woken: bool) -> bool | HandedOff | Recheck:
        """The reply to a :class:`~tenure._protocol.WaitWake` of the plan waiting
        with ``token`` on ``ch`` (after its wake event was cleared): the hand-off
        to it, else the recheck asked of it (only if ``woken``), else ``woken``."""
        fence = ch.handoffs.pop(token, None)
        if fence is not None:
            return HandedOff(fence)
        recheck, ch.recheck = ch.recheck, None
        return Recheck(recheck) if woken and recheck is not None else woken

    def empty(self) -> bool:
        """Nothing subscribed and nothing being unsubscribed: the reader may stop."""
        return not self.channels and not self.closing

    def drop_idle(self) -> bool:
        """The connection failed. If nobody waits on any channel, forget every
        channel and return ``True``: the reader stops (closing the connection)
        instead of reconnecting for nobody. Otherwise keep them all (redis-py
        subscribes to each again when it reconnects; idle ones are unsubscribed
        when their linger ends) and return ``False``."""
        if any(ch.refs for ch in self.channels.values()):
            return False
        self.drop_all()
        return True

    def forget(self, channel: str) -> C:
        """Stop listening on ``channel`` (the server no longer serves it here) and
        return its record, waiters and all, for another hub to :meth:`adopt`."""
        self.rewake.discard(channel)
        self.pending.pop(channel, None)
        return self.channels.pop(channel)

    def drop_all(self) -> dict[str, C]:
        """The connection failed on a Redis Cluster node: forget every channel and
        return those that a plan still waits or listens on, by name, for the
        hubs of their slots' owners to :meth:`adopt`."""
        waited_on = {name: ch for name, ch in self.channels.items() if ch.refs}
        self.channels.clear()
        self.closing.clear()
        self.rewake.clear()
        self.pending.clear()
        self.idle.clear()
        return waited_on

    def adopt(self, channel: str, ch: C) -> bool:
        """Listen on ``channel`` with a record another hub forgot (see
        :class:`Dropped`); its subscription's confirmation will wake all its
        plans, which check Redis again. Returns whether to SUBSCRIBE now:
        ``False`` when the book already has a record for the channel (a plan
        entered it here meanwhile: the caller wakes the adopted record's plans,
        which check Redis again; their later waits on it are capped by the
        holder's PTTL)."""
        if channel in self.channels:
            return False
        self.channels[channel] = ch
        ch.name = channel
        if ch.refs == 0:  # (its plans left meanwhile: it lingers here)
            ch.idle_since = ch.idle_since if ch.idle_since is not None else 0.0
            self.idle[channel] = None
        self.closing.pop(channel, None)
        self.pending[channel] = None
        self.rewake.add(channel)
        return True

    def reconnected(self) -> None:
        """The pub/sub connection is being made again (not its first connection):
        messages may have been lost while it was down. Call before redis-py
        sends SUBSCRIBE again, so that no confirmation is read first.

        Each channel's next subscription confirmation will wake all its waiters
        and listeners (see :meth:`route`).
        """
        self.rewake.update(self.channels)
        self.pending.update(dict.fromkeys(self.channels))

    def strays(self, resubscribed: Iterable[str]) -> list[str]:
        """Of the channels redis-py subscribed again after a reconnection, those
        the book does not listen on (they were being unsubscribed): to
        UNSUBSCRIBE again. They are closing until that is confirmed."""
        extra = [name for name in resubscribed if name not in self.channels]
        for name in extra:
            self.closing.setdefault(name, None)
        return extra

    def wake_all(self) -> None:
        """Let every waiter and listener retry at once (the connection failed:
        a waiter whose server is gone gets its error now, not after a lease)."""
        for ch in list(self.channels.values()):
            ch.recheck = None  # retry now, not within a claim window
            ch.wake.set()
            for event in list(ch.listeners):
                event.set()
