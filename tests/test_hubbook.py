"""The wake hub's bookkeeping, without Redis or threads."""

from __future__ import annotations

import threading
from typing import Any

from tenure._drivers._hubbook import LINGER, Channel, Dropped, HubBook, PassOn, WakeEach
from tenure._keys import lock_keys
from tenure._protocol import HandedOff, Recheck

KEYS = lock_keys("a", key=None, prefix="tenure:")


class Ch(Channel):
    def __init__(self, keys: Any) -> None:
        super().__init__(keys)
        self.ready: threading.Event = threading.Event()
        self.wake: threading.Event = threading.Event()


def test_subscribe_once_linger_then_unsubscribe() -> None:
    book = HubBook(Ch)
    ch, subscribe = book.enter("c", KEYS, "t1")
    assert subscribe
    same, again = book.enter("c", KEYS, "t1")
    assert same is ch and not again and ch.refs == 2
    book.leave(ch, "t1", now=10.0)
    book.leave(ch, "t1", now=10.0)
    assert book.stale(now=10.0 + LINGER / 2) == []  # lingering
    reused, subscribe = book.enter("c", KEYS, "t1")  # a new wait within LINGER: no SUBSCRIBE
    assert reused is ch and not subscribe
    book.leave(ch, "t1", now=20.0)
    assert book.stale(now=20.0 + LINGER) == ["c"]
    assert "c" in book.closing and not book.empty()
    assert book.route("unsubscribe", "c") is None
    assert book.empty()


def test_routes() -> None:
    book = HubBook(Ch)
    ch, _ = book.enter("c", KEYS, "t1")
    assert book.route("subscribe", "c") is ch.ready
    assert book.route("message", "c", "41 t1") is ch.wake
    assert ch.handoffs == {"t1": 41}  # the lock was handed to our waiting token
    # A token nobody here waits with (it gave up): release it to the next waiter.
    assert book.route("message", "c", "42 gone") == PassOn(KEYS, "gone")
    book.leave(ch, "t1", now=0.0)
    assert ch.handoffs == {}
    assert book.route("message", "c", "43 t1") == PassOn(KEYS, "t1")
    book.stale(now=LINGER)
    assert book.route("message", "c", "44 t1") == PassOn(KEYS, "t1")  # being unsubscribed
    assert book.route("message", "other", "45 t1") is None
    assert book.route("message", "c", "garbage") is None


def test_failed_subscribe_and_connection_loss() -> None:
    book = HubBook(Ch)
    book.enter("x", KEYS, "t")
    book.abort("x")
    assert book.empty()
    waiting, _ = book.enter("w", KEYS, "tw")
    idle, _ = book.enter("i", KEYS, "ti")
    book.leave(idle, "ti", now=0.0)
    assert not book.drop_idle()  # someone still waits: keep reconnecting
    # redis-py subscribes to both again: the idle one lingers, then goes
    assert list(book.channels) == ["w", "i"]
    assert book.stale(now=LINGER) == ["i"]
    book.leave(waiting, "tw", now=0.0)
    assert book.drop_idle() and book.empty()  # nobody waits: the reader stops


def test_wake_all() -> None:
    book = HubBook(Ch)
    a, _ = book.enter("a", KEYS, "ta")
    b, _ = book.enter("b", KEYS, "tb")
    book.wake_all()
    assert a.wake.is_set() and b.wake.is_set()


def test_channel_without_keys_passes_nothing_on() -> None:
    """A semaphore's waiter gives back a hand-off itself when it leaves, and a late
    message may concern permits an attempt already returned: never released here."""
    book = HubBook(Ch)
    ch, _ = book.enter("s", None, "t1")
    assert book.route("message", "s", "41 t1") is ch.wake and ch.handoffs == {"t1": 41}
    assert book.route("message", "s", "42 gone") is None
    book.leave(ch, "t1", now=0.0)
    assert book.route("message", "s", "43 t1") is None
    book.stale(now=LINGER)
    assert book.route("message", "s", "44 t1") is None  # being unsubscribed
    assert not book.empty() and book.route("unsubscribe", "s") is None and book.empty()


def test_broadcast_sets_every_listener_and_lingers() -> None:
    book = HubBook(Ch)
    a, b = threading.Event(), threading.Event()
    ch, subscribe = book.listen("z", a)
    same, again = book.listen("z", b)
    assert subscribe and same is ch and not again and ch.refs == 2
    assert book.route("subscribe", "z") is ch.ready
    route = book.route("message", "z", "1712345678901234")  # any payload wakes
    assert isinstance(route, WakeEach)
    route.set()
    assert a.is_set() and b.is_set() and not ch.wake.is_set()
    a.clear()
    book.unlisten(ch, b, now=1.0)
    assert ch.listeners == {a} and ch.idle_since is None
    book.wake_all()  # a failed read wakes listeners too
    assert a.is_set()
    book.unlisten(ch, a, now=2.0)
    assert book.route("message", "z", "x") is None  # nobody listens: nothing to do
    assert book.stale(now=2.0 + LINGER) == ["z"]


def test_redis_62_permission_probe_wakes_no_listener() -> None:
    """On Redis 6.2 a script checks that it may publish on a channel by publishing
    "probe" there (a Redlock waiter's own attempt probes its own channel): that
    must not wake the listener, or it would poll."""
    book = HubBook(Ch)
    event = threading.Event()
    book.listen("w", event)
    book.route("subscribe", "w")
    assert book.route("message", "w", "probe") is None
    assert isinstance(book.route("message", "w", "recheck 0"), WakeEach)


def test_a_liveness_probe_wakes_no_waiter() -> None:
    """A semaphore script asks whether the waiter at its queue's head still lives by
    publishing "probe" on its channel (dropped if nobody hears it): a live waiter
    must neither wake nor see a hand-off in it."""
    book = HubBook(Ch)
    for keys in (None, KEYS):
        ch, _ = book.enter("h", keys, "t1")
        assert book.route("message", "h", "probe") is None
        assert not ch.wake.is_set() and ch.handoffs == {} and ch.recheck is None
        book.leave(ch, "t1", now=0.0)


def test_a_late_hand_off_to_a_plan_that_took_the_lock_itself_is_not_passed_on() -> None:
    """A release hands the lock to t1 while t1's own retry is in flight; the retry
    finds t1 holding the lock and the plan ends with it. The hand-off message,
    read after that, must not release the lock t1 now holds."""
    book = HubBook(Ch)
    ch, _ = book.enter("c", KEYS, "t1")
    book.enter("c", KEYS, "t2")
    book.leave(ch, "t1", now=0.0, granted=True)
    assert book.route("message", "c", "41 t1") is None
    book.leave(ch, "t2", now=0.0)  # gave up: a hand-off to it goes on to the next waiter
    assert book.route("message", "c", "42 t2") == PassOn(KEYS, "t2")
    for i in range(2000):  # only the recent ones are remembered
        book.leave(*book.enter("c", KEYS, f"k{i}")[:1], f"k{i}", now=0.0, granted=True)
    assert book.route("message", "c", "43 k0") == PassOn(KEYS, "k0")
    assert book.route("message", "c", "44 k1999") is None


def test_a_reconnection_wakes_everyone_once_subscribed_again() -> None:
    """Messages published while the connection was down are lost: the server's
    confirmation of each channel's new SUBSCRIBE wakes its waiters and listeners
    (not the reconnection itself, which comes before the subscription)."""
    book = HubBook(Ch)
    lock, _ = book.enter("w", KEYS, "t")
    heard = threading.Event()
    latch, _ = book.listen("z", heard)
    idle, _ = book.enter("i", KEYS, "ti")
    for name, ch in (("w", lock), ("z", latch), ("i", idle)):
        assert book.route("subscribe", name) is ch.ready  # the first subscription wakes nobody
    book.leave(idle, "ti", now=0.0)
    assert book.stale(now=LINGER) == ["i"]  # UNSUBSCRIBE sent, not confirmed yet
    assert not lock.wake.is_set() and not heard.is_set()
    # redis-py reconnects and subscribes again to all it knew, "i" included
    book.reconnected()
    assert book.strays(["w", "z", "i"]) == ["i"] and "i" in book.closing  # to unsubscribe again
    assert not lock.wake.is_set() and not heard.is_set()  # not before the confirmation
    route = book.route("subscribe", "w")
    assert isinstance(route, WakeEach)
    route.set()
    assert lock.wake.is_set() and lock.ready.is_set() and not heard.is_set()
    route = book.route("subscribe", "z")
    assert isinstance(route, WakeEach)
    route.set()
    assert heard.is_set()
    assert book.route("subscribe", "i") is None
    assert book.route("subscribe", "w") is lock.ready  # once per reconnection
    assert book.route("unsubscribe", "i") is None and "i" not in book.closing


def test_a_reconnection_forgets_channels_that_go() -> None:
    book = HubBook(Ch)
    ch, _ = book.enter("w", KEYS, "t")
    book.enter("x", KEYS, "tx")
    book.reconnected()
    book.abort("x")
    book.leave(ch, "t", now=0.0)
    book.stale(now=LINGER)
    assert not book.rewake
    again, subscribe = book.enter("w", KEYS, "t")
    assert subscribe and book.route("subscribe", "w") is again.ready


def test_recheck_is_recorded_for_the_channel_and_never_passed_on() -> None:
    """ "recheck <ms>": a release handed the lock to another waiter, which holds it
    for its claim window only; this waiter is to try again when that ends."""
    book = HubBook(Ch)
    ch, _ = book.enter("c", KEYS, "t1")
    assert book.route("message", "c", "recheck 1000") is ch.wake and ch.recheck == 1.0
    assert book.route("message", "c", "recheck 400") is ch.wake and ch.recheck == 0.4
    assert book.route("message", "c", "recheck 900") is ch.wake and ch.recheck == 0.4
    assert book.woken(ch, "t1", True) == Recheck(0.4)
    assert ch.recheck is None and book.woken(ch, "t1", True) is True
    # a hand-off to the plan wins over a recheck; a timeout ignores a recheck
    book.route("message", "c", "recheck 1000")
    book.route("message", "c", "77 t1")
    assert book.woken(ch, "t1", True) == HandedOff(77) and ch.recheck == 1.0
    assert book.woken(ch, "t1", False) is False and ch.recheck is None
    # never a release of "1000" (no token), never for an unknown channel
    assert book.route("message", "c", "recheck x") is None
    assert book.route("message", "other", "recheck 1000") is None
    book.route("message", "c", "recheck 1000")
    book.wake_all()  # a reconnection: retry now, not within a claim window
    assert book.woken(ch, "t1", True) is True


def test_a_refused_subscribe_is_the_oldest_unconfirmed_one() -> None:
    book = HubBook(Ch)
    first, _ = book.enter("a", KEYS, "t1")
    second, _ = book.enter("b", KEYS, "t2")
    third, _ = book.enter("c", KEYS, "t3")
    assert book.route("subscribe", "a") is first.ready
    assert book.refused() == ("b", second)  # replies come in order: "b" was refused
    assert second.refused == "b" and not first.refused and not third.refused
    assert "b" not in book.channels
    assert book.route("subscribe", "c") is third.ready
    assert book.refused() == ("", None)  # nothing pending
    book.reconnected()  # every channel is subscribed again: pending again
    assert book.refused() == ("a", first)


def test_a_dropped_channel_is_adopted_by_another_book() -> None:
    """A Redis Cluster slot moved: the server's unasked ``sunsubscribe`` makes
    the book forget the channel and hand its record, waiters and all, to the
    book of the slot's new owner, whose subscription's confirmation wakes them."""
    old, new = HubBook(Ch), HubBook(Ch)
    ch, _ = old.enter("c", KEYS, "t1")
    old.route("subscribe", "c")
    dropped = old.route("unsubscribe", "c")
    assert dropped == Dropped("c", ch) and "c" not in old.channels and old.empty()
    assert new.adopt("c", ch)
    assert not new.adopt("c", ch)  # already there: nothing to subscribe
    woken = new.route("subscribe", "c")
    assert isinstance(woken, WakeEach) and ch.wake in woken.events
    new.leave(ch, "t1", now=0.0)  # the waiter leaves through the record's new book
    assert new.stale(now=LINGER) == ["c"]


def test_an_asked_unsubscribe_is_not_a_drop() -> None:
    book = HubBook(Ch)
    ch, _ = book.enter("c", KEYS, "t1")
    book.leave(ch, "t1", now=0.0)
    book.stale(now=LINGER)
    assert book.route("unsubscribe", "c") is None  # the confirmation of our own
    assert book.route("unsubscribe", "never") is None


def test_drop_all_keeps_the_channels_someone_waits_on() -> None:
    book = HubBook(Ch)
    busy, _ = book.enter("busy", KEYS, "t1")
    idle, _ = book.enter("idle", KEYS, "t2")
    book.leave(idle, "t2", now=0.0)
    assert book.drop_all() == {"busy": busy}
    assert book.empty() and not book.pending


class _Unscanned(dict[str, Ch]):
    """A book's channels that may be looked up one by one but not scanned."""

    def items(self) -> Any:
        raise AssertionError("stale() scanned every channel")

    def values(self) -> Any:
        raise AssertionError("stale() scanned every channel")

    def __iter__(self) -> Any:
        raise AssertionError("stale() scanned every channel")


def test_stale_looks_only_at_idle_channels_longest_idle_first() -> None:
    """A reader calls stale() after every message: it looks at the channels
    nobody waits on, the longest idle first, and never at every channel (a
    message then costs the same whether the process waits on one lock or ten
    thousand)."""
    book = HubBook(Ch)
    book.channels = _Unscanned()
    busy = [book.enter(f"busy{i}", KEYS, "t")[0] for i in range(50)]
    a, _ = book.enter("a", KEYS, "ta")
    b, _ = book.enter("b", KEYS, "tb")
    c, _ = book.enter("c", KEYS, "tc")
    book.leave(b, "tb", now=1.0)
    book.leave(a, "ta", now=2.0)
    book.leave(c, "tc", now=3.0)
    assert list(book.idle) == ["b", "a", "c"]
    assert book.stale(now=1.0 + LINGER / 2) == []
    again, subscribe = book.enter("a", KEYS, "ta")  # in use again: no longer idle
    assert again is a and not subscribe and list(book.idle) == ["b", "c"]
    assert book.stale(now=2.0 + LINGER) == ["b"]  # c lingers on
    assert book.stale(now=3.0 + LINGER) == ["c"]
    assert not book.idle and "a" in book.channels and len(busy) == 50
    book.leave(a, "ta", now=4.0)
    forgotten = book.forget("a")  # (a Redis Cluster slot moved): skipped, not unsubscribed here
    assert forgotten is a and book.stale(now=4.0 + LINGER) == [] and not book.idle


def test_an_adopted_idle_channel_lingers_then_goes() -> None:
    """A channel another node's hub dropped, whose plans all left meanwhile,
    is adopted idle: it is unsubscribed once its linger ends, not kept forever."""
    old = HubBook(Ch)
    ch, _ = old.enter("m", KEYS, "t")
    old.leave(ch, "t", now=5.0)
    record = old.forget("m")
    book = HubBook(Ch)
    assert book.adopt("m", record)
    assert book.stale(now=5.0 + LINGER / 2) == []
    assert book.stale(now=5.0 + LINGER) == ["m"]


def test_a_recheck_no_sooner_than_the_wait_ends_wakes_nobody() -> None:
    """A recheck asks the waiter to try again within a claim window: when the
    wait in progress ends by then anyway (and the waiter then tries again),
    its thread or task is not woken for it; otherwise, or with no wait in
    progress, it is woken and told, as before."""
    book = HubBook(Ch)
    ch, _ = book.enter("c", KEYS, "t")
    ch.wait_until = 10.5
    assert book.route("message", "c", "recheck 1000", now=10.0) is None
    assert ch.recheck is None  # nothing recorded: its own timer comes first
    assert book.route("message", "c", "recheck 400", now=10.0) is ch.wake
    assert ch.recheck == 0.4
    assert book.woken(ch, "t", True) == Recheck(0.4)
    ch.wait_until = None  # between two waits: always told
    assert book.route("message", "c", "recheck 1000", now=10.0) is ch.wake
    assert book.woken(ch, "t", True) == Recheck(1.0)
    ch.wait_until = 10.5
    assert book.route("message", "c", "recheck 1000") is ch.wake  # no clock given: told
