"""The wake hub's bookkeeping, without Redis or threads."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from tenure._drivers._hubbook import LINGER, HubBook, PassOn
from tenure._keys import LockKeys, lock_keys

KEYS = lock_keys("a", key=None, prefix="tenure:")


@dataclass(eq=False)
class Ch:
    keys: LockKeys
    refs: int = 0
    idle_since: float | None = None
    tokens: set[str] = field(default_factory=set)
    handoffs: dict[str, int] = field(default_factory=dict)
    ready: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)


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
    assert list(book.channels) == ["w"]
    book.leave(waiting, "tw", now=0.0)
    assert book.drop_idle() and book.empty()


def test_wake_all() -> None:
    book = HubBook(Ch)
    a, _ = book.enter("a", KEYS, "ta")
    b, _ = book.enter("b", KEYS, "tb")
    book.wake_all()
    assert a.wake.is_set() and b.wake.is_set()
