"""The wake hub's bookkeeping, without Redis or threads."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from tenure._drivers._hubbook import LINGER, HubBook
from tenure._keys import LockKeys, lock_keys

KEYS = lock_keys("a", key=None, prefix="tenure:")


@dataclass(eq=False)
class Ch:
    keys: LockKeys
    refs: int = 0
    idle_since: float | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)


def test_subscribe_once_linger_then_unsubscribe() -> None:
    book = HubBook(Ch)
    ch, subscribe = book.enter("c", KEYS)
    assert subscribe
    same, again = book.enter("c", KEYS)
    assert same is ch and not again and ch.refs == 2
    book.leave(ch, now=10.0)
    book.leave(ch, now=10.0)
    assert book.stale(now=10.0 + LINGER / 2) == []  # lingering
    reused, subscribe = book.enter("c", KEYS)  # a new wait within LINGER: no SUBSCRIBE
    assert reused is ch and not subscribe
    book.leave(ch, now=20.0)
    assert book.stale(now=20.0 + LINGER) == ["c"]
    assert "c" in book.closing and not book.empty()
    assert book.route("unsubscribe", "c") is None
    assert book.empty()


def test_routes() -> None:
    book = HubBook(Ch)
    ch, _ = book.enter("c", KEYS)
    assert book.route("subscribe", "c") is ch.ready
    assert book.route("message", "c") is ch.wake
    book.leave(ch, now=0.0)
    assert book.route("message", "c") == KEYS  # nobody waits: pass the hand-off on
    book.stale(now=LINGER)
    assert book.route("message", "c") == KEYS  # still, while being unsubscribed
    assert book.route("message", "other") is None


def test_failed_subscribe_and_connection_loss() -> None:
    book = HubBook(Ch)
    book.enter("x", KEYS)
    book.abort("x")
    assert book.empty()
    waiting, _ = book.enter("w", KEYS)
    idle, _ = book.enter("i", KEYS)
    book.leave(idle, now=0.0)
    assert not book.drop_idle()  # someone still waits: keep reconnecting
    assert list(book.channels) == ["w"]
    book.leave(waiting, now=0.0)
    assert book.drop_idle() and book.empty()


def test_wake_all() -> None:
    book = HubBook(Ch)
    a, _ = book.enter("a", KEYS)
    b, _ = book.enter("b", KEYS)
    book.wake_all()
    assert a.wake.is_set() and b.wake.is_set()
