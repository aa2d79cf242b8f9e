"""The key schema: one slot per primitive and no key or channel shared by two
primitives, for every name, exact key and prefix (generated), and the same on
a real server for names full of braces."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from hypothesis import example, given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from tenure import (
    CountDownLatch,
    FairLock,
    FencedKey,
    InvalidArgument,
    Lock,
    ReadWriteLock,
    RLock,
    Semaphore,
)
from tenure._keys import (
    KeyInfo,
    LatchKeys,
    RWLockKeys,
    escape,
    fair_keys,
    fenced_keys,
    hash_slot,
    latch_keys,
    lock_keys,
    parse_channel,
    parse_key,
    rlock_keys,
    rwlock_keys,
    semaphore_keys,
    tag_for_slot,
    unescape,
)

NAMED = ("Lock", "RLock", "FairLock", "ReadWriteLock", "Semaphore", "CountDownLatch")
BUILDERS = {
    "RLock": rlock_keys,
    "FairLock": fair_keys,
    "ReadWriteLock": rwlock_keys,
    "Semaphore": semaphore_keys,
    "CountDownLatch": latch_keys,
}
WAITER = "3f2a9c1e-0b7d44aa.12"  # the shape of a hub's waiter id
OWNER = "3f2a9c1e0b7d44aa3f2a9c1e0b7d44aa.7"  # the shape of an owner id
OP = "9f86d081884c7d65"  # a release call id (new_op())


@dataclass(frozen=True)
class Prim:
    """One primitive: a named one (kind, name, prefix), an exact-key Lock
    ("Lock", key) or a FencedKey ("FencedKey", key)."""

    kind: str
    name: str | None = None
    key: str | None = None
    prefix: str | None = None


def derived(p: Prim) -> tuple[str, dict[str, str], dict[str, str]]:
    """``(main key, {derived key: role}, {channel: role})`` of ``p``; the main key
    of an exact-key Lock or FencedKey is the user's and is not in the dict."""
    if p.kind == "FencedKey":
        assert p.key is not None
        value, seen = fenced_keys(p.key)
        return value, {seen: "seen"}, {}
    if p.kind == "Lock":
        keys: Any = lock_keys(p.name, key=p.key, prefix=p.prefix or "")
    else:
        assert p.name is not None and p.prefix is not None
        keys = BUILDERS[p.kind](p.name, prefix=p.prefix)
    if isinstance(keys, LatchKeys):
        roles = {keys.count: "lock", keys.opened: "opened", keys.by: "by"}
        return keys.count, roles, {keys.channel: "zero"}
    roles = {keys.fence: "fence", keys.waiters: "waiters", keys.delay: "delay"}
    if isinstance(keys, RWLockKeys):
        roles[keys.holds] = "holds"
        roles[keys.last_op(OWNER)] = "op"
    else:
        roles[keys.released] = "released"
        if p.kind in ("Lock", "FairLock", "Semaphore"):
            roles[keys.release_record(OP)] = "record"
    for extra in ("permits", "deadlines", "chain", "foreign"):  # chain, foreign: exact keys
        if getattr(keys, extra, ""):
            roles[getattr(keys, extra)] = extra
    if canonical(p).key is None:  # a named Lock's main key
        roles[keys.lock] = "lock"
    return keys.lock, roles, {keys.wake_prefix + WAITER: "wake"}


def canonical(p: Prim) -> Prim:
    """The primitive ``p`` is: an exact-key Lock on a named Lock's main key is
    that named Lock."""
    if p.kind == "Lock" and p.key is not None:
        info = parse_key(p.key)
        if info is not None and info.kind == "Lock" and info.role == "lock":
            return Prim("Lock", info.name, None, info.prefix)
    return p


def expected(p: Prim, role: str) -> KeyInfo:
    c = canonical(p)
    if role == "record":  # a release call's record: role "released", the op its detail
        return KeyInfo(c.kind, c.name, c.key, c.prefix, "released", OP)
    detail = {"op": OWNER, "wake": WAITER}.get(role, "")
    return KeyInfo(c.kind, c.name, c.key, c.prefix, role, detail)


# Text with braces, empty tags, escapes, colons, role and kind words and unicode.
PARTS = st.sampled_from(
    ["{", "}", "{}", "%", "%7B", "%25", ":", "a", "job", "fence", "key", "rlock", "é", "🔒"]
)
TEXT = st.lists(PARTS | st.text(st.characters(exclude_categories=["Cs"]), max_size=3)).map("".join)
NAMES = TEXT.filter(bool)
PREFIXES = TEXT.filter(
    lambda s: not (s.find("{") >= 0 and s[s.find("{") + 1 : s.find("{") + 2] == "}")
)
PRIMS = st.one_of(
    st.builds(Prim, st.sampled_from(NAMED), NAMES, st.none(), PREFIXES),
    st.builds(Prim, st.just("Lock"), st.none(), NAMES),
    st.builds(Prim, st.just("FencedKey"), st.none(), NAMES),
)


@settings(max_examples=400, deadline=None)
@given(PRIMS)
@example(Prim("Lock", "}x{", None, "tenure:"))
@example(Prim("Lock", None, "a{}b"))
@example(Prim("Lock", None, "}x{"))
@example(Prim("FencedKey", None, "a{}b"))
@example(Prim("Semaphore", "{}", None, "x{"))
def test_every_key_and_channel_of_a_primitive_shares_its_slot(p: Prim) -> None:
    main, keys, channels = derived(p)
    slot = key_slot(main.encode())
    assert hash_slot(main) == slot
    for k in (*keys, *channels):
        assert key_slot(k.encode()) == slot, (p, k)


@settings(max_examples=400, deadline=None)
@given(PRIMS)
@example(Prim("Lock", None, "{job}"))
@example(Prim("Lock", None, "job"))
@example(Prim("Lock", "job", None, ""))
@example(Prim("Lock", "x", None, "tenure:rlock:"))
@example(Prim("Lock", None, "tenure:{a}:fence"))
def test_every_key_and_channel_reads_back_as_its_primitive(p: Prim) -> None:
    """A left inverse: no key or channel can belong to two primitives."""
    _, keys, channels = derived(p)
    for k, role in keys.items():
        assert parse_key(k) == expected(p, role), k
    for ch, role in channels.items():
        assert parse_channel(ch) == expected(p, role), ch


@settings(max_examples=600, deadline=None)
@given(PRIMS, PRIMS)
@example(Prim("Lock", None, "job"), Prim("Lock", None, "{job}"))
@example(Prim("Lock", None, "job"), Prim("Lock", "job", None, ""))
@example(Prim("FencedKey", None, "job"), Prim("FencedKey", None, "{job}"))
@example(Prim("Lock", "x", None, "t:rlock:"), Prim("RLock", "x", None, "t:"))
@example(Prim("Lock", "a}b", None, "t:"), Prim("Lock", "a", None, "t:"))
@example(Prim("Lock", None, "tenure:{a}"), Prim("Lock", "a", None, "tenure:"))
def test_two_primitives_share_no_key_or_channel(a: Prim, b: Prim) -> None:
    assert_disjoint(a, b)


def assert_disjoint(a: Prim, b: Prim) -> None:
    """``a`` and ``b`` share no key or channel, unless they are the same primitive."""
    main_a, keys_a, channels_a = derived(a)
    main_b, keys_b, channels_b = derived(b)
    if canonical(a) == canonical(b):  # the same primitive: the same keys
        assert (keys_a, channels_a) == (keys_b, channels_b)
        return
    assert not set(keys_a) & set(keys_b)
    assert not set(channels_a) & set(channels_b)
    # A key the user names is shared only if it is one of tenure's own keys.
    for main, keys in ((main_a, keys_b), (main_b, keys_a)):
        assert main not in keys or parse_key(main) is not None


def near(text: str) -> st.SearchStrategy[Prim]:
    """Primitives named, or keyed, by ``text`` or ``text`` with braces, under
    prefixes that end like a kind: likely to collide in a bad schema."""
    texts = st.sampled_from([text, "{" + text + "}", text + "}", "{" + text])
    prefixes = st.sampled_from(["", "t:", "t:rlock:", "t:{", "{t}:"])
    return st.one_of(
        st.builds(Prim, st.sampled_from(NAMED), texts, st.none(), prefixes),
        st.builds(Prim, st.sampled_from(["Lock", "FencedKey"]), st.none(), texts),
    )


@settings(max_examples=300, deadline=None)
@given(NAMES.flatmap(lambda t: st.tuples(near(t), near(t))))
def test_two_primitives_with_the_same_text_share_no_key(pair: tuple[Prim, Prim]) -> None:
    assert_disjoint(*pair)


@given(st.integers(0, 16383))
def test_tag_for_slot(slot: int) -> None:
    tag = tag_for_slot(slot)
    assert len(tag) == 4 and set(tag) <= set("@ABCDEFGHIJKLMNO")
    assert key_slot(tag.encode()) == slot == key_slot(f"x{{{tag}}}y".encode())


@given(TEXT)
def test_escape_is_brace_free_and_reversible(text: str) -> None:
    escaped = escape(text)
    assert "{" not in escaped and "}" not in escaped
    assert unescape(escaped) == (text or None)


def test_ordinary_names_keep_readable_keys() -> None:
    assert lock_keys("orders:42", key=None, prefix="tenure:").lock == "tenure:{orders:42}"
    assert lock_keys("orders:42", key=None, prefix="tenure:").fence == "tenure:{orders:42}:fence"
    assert rlock_keys("orders:42", prefix="tenure:").lock == "tenure:{orders:42}:rlock"
    assert lock_keys("a{b}", key=None, prefix="t:").lock == "t:{a%7Bb%7D}"
    assert lock_keys(None, key="orders:42", prefix="t:").fence == "{orders:42}:key:fence"
    assert lock_keys(None, key="orders:42", prefix="t:").chain == "{orders:42}:key:chain"
    assert lock_keys(None, key="tenure:{j}", prefix="t:").chain == ""  # a named Lock's key
    assert fenced_keys("orders:42:state")[1] == "{orders:42:state}:fenced:seen"


@pytest.mark.parametrize("prefix", ["{}", "a{}b{c}", "x{}:"])
def test_a_prefix_with_an_empty_first_tag_is_refused(prefix: str) -> None:
    with pytest.raises(InvalidArgument, match="empty hash tag"):
        lock_keys("a", key=None, prefix=prefix)
    with pytest.raises(InvalidArgument, match="empty hash tag"):
        semaphore_keys("a", prefix=prefix)


# --- on a real server ---------------------------------------------------------------------


def other(r: redis.Redis) -> redis.Redis:
    """Another client (its own wake hub) on the same server."""
    return redis.Redis(connection_pool=r.connection_pool)


def wait_until(check: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@contextmanager
def in_thread(fn: Callable[[], Any]) -> Iterator[list[Any]]:
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(fn()), daemon=True)
    t.start()
    try:
        yield got
    finally:
        t.join(10)


@pytest.mark.parametrize(
    "held",
    [
        pytest.param({"key": "{job}"}, id="exact-key-{job}"),
        pytest.param({"name": "job", "prefix": ""}, id="name-job-prefix-empty"),
    ],
)
def test_releasing_an_unrelated_lock_hands_nothing_over(r: redis.Redis, held: Any) -> None:
    """The issue: `job` and `{job}` shared their queue and wake channels, so
    releasing `job` handed `{job}` to its waiter while its holder's lease ran."""
    first = Lock(r, ttl=10, **held).acquire()
    assert first is not None
    unrelated = Lock(other(r), key="job", ttl=10).acquire()
    assert unrelated is not None
    waiter = Lock(other(r), ttl=10, **held)
    with in_thread(lambda: waiter.acquire(timeout=8)) as got:
        wait_until(lambda: r.zcard(waiter._keys.waiters) > 0)  # it queued
        unrelated.release()
        time.sleep(0.5)
        assert got == [] and first.valid  # nobody was handed the held lock
        assert r.get("{job}") == first.owner.encode()
        first.release()
        wait_until(lambda: got != [])
    assert got[0] is not None and r.get("{job}") == got[0].owner.encode()
    got[0].release()


def test_fenced_keys_on_job_and_braced_job_are_independent(r: redis.Redis) -> None:
    plain, braced = FencedKey(r, "job"), FencedKey(r, "{job}")
    plain.set("by 100", fence=100)
    braced.set("by 5", fence=5)  # was refused: both kept their fence in {job}:fence-seen
    assert (plain.seen(), braced.seen()) == (100, 5)
    assert r.get("job") == b"by 100" and r.get("{job}") == b"by 5"


def test_exact_key_on_a_named_locks_key_is_that_lock(r: redis.Redis) -> None:
    named = Lock(r, "job", ttl=5, prefix="")
    lease = named.acquire()
    assert lease is not None
    exact = Lock(other(r), key="{job}", ttl=5)
    with in_thread(lambda: exact.acquire(blocking=False)) as got:
        pass
    assert got == [None]  # held: the same lock
    lease.release()
    with in_thread(lambda: exact.acquire(blocking=False)) as got:
        pass
    assert got[0] is not None and r.get("{job}") == got[0].owner.encode()


def test_a_prefix_ending_like_a_kind_makes_no_other_kind(r: redis.Redis) -> None:
    """``Lock("x", prefix="tenure:rlock:")`` shared the RLock "x"'s hash key."""
    held = RLock(r, "x", ttl=5).acquire()
    lease = Lock(other(r), "x", ttl=5, prefix="tenure:rlock:").acquire(blocking=False)
    assert held is not None and lease is not None  # two primitives, both held
    lease.release()
    held.release()


WEIRD = ["}x{", "a{}b"]


def one_slot(r: redis.Redis) -> None:
    keys: list[bytes] = r.keys("*")  # type: ignore[assignment]
    assert keys and len({key_slot(k) for k in keys}) == 1, keys


@pytest.mark.parametrize("name", WEIRD)
@pytest.mark.parametrize("kind", ["Lock", "key", "RLock", "FairLock", "ReadWriteLock", "Semaphore"])
def test_locks_named_with_braces_hand_over_to_a_waiter(
    r: redis.Redis, kind: str, name: str
) -> None:
    def make(client: redis.Redis) -> Any:
        if kind == "key":
            return Lock(client, key=name, ttl=10)
        if kind == "ReadWriteLock":
            return ReadWriteLock(client, name, ttl=10).write
        if kind == "Semaphore":
            return Semaphore(client, name, 1, ttl=10)
        return {"Lock": Lock, "RLock": RLock, "FairLock": FairLock}[kind](client, name, ttl=10)

    first = make(r).acquire()
    assert first is not None
    waiter = make(other(r))
    with in_thread(lambda: waiter.acquire(timeout=8)) as got:
        time.sleep(0.2)
        one_slot(r)
        assert got == []
        started = time.monotonic()
        first.release()
        wait_until(lambda: got != [])
        assert got[0] is not None and time.monotonic() - started < 3  # woken, not timed out
    one_slot(r)
    got[0].release()


@pytest.mark.parametrize("name", WEIRD)
def test_latch_named_with_braces_opens(r: redis.Redis, name: str) -> None:
    latch = CountDownLatch(r, name)
    assert latch.try_set_count(1)
    with in_thread(lambda: CountDownLatch(other(r), name).wait(timeout=8)) as got:
        time.sleep(0.2)
        latch.count_down()
        wait_until(lambda: got != [])
    assert got == [True]
    one_slot(r)


@pytest.mark.parametrize("key", ["{%7B}:", "{job}:", "{job}:rlock:", "tenure:{a}:fair:"])
def test_a_key_ending_in_a_colon_is_no_main_key(key: str) -> None:
    """An exact key that ends where a role would begin is no named lock's main
    key (its derived keys would read back as nobody's): it gets keys of its own."""
    assert parse_key(key) is None
    keys = lock_keys(None, key=key, prefix="tenure:")
    for derived in (keys.fence, keys.waiters, keys.delay, keys.released, keys.chain):
        info = parse_key(derived)
        assert info is not None and info.kind == "Lock" and info.key == key, derived
