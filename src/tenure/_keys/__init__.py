"""The key schema: every key and pub/sub channel of every primitive.

Two rules hold for every possible name, exact key and prefix (the property
tests in ``tests/test_keys.py`` check both with generated strings):

- **One slot.** All keys and channels of one primitive hash to the Redis
  Cluster slot of its main key, so its scripts never fail with ``CROSSSLOT``.
- **Injective.** Two different primitives (kind, name or exact key, prefix)
  never share a key or a channel; :func:`parse_key` and :func:`parse_channel`
  read every key and channel back into the one primitive that uses it. The
  one exception is by design: an exact-key ``Lock`` whose key is a named
  ``Lock``'s main key *is* that lock (``Lock(key="tenure:{job}")`` and
  ``Lock(name="job")``) and uses its keys.

Named primitives
----------------

A primitive named ``orders:42`` under the prefix ``tenure:`` has the *base*
``tenure:{orders:42}`` for a ``Lock`` and ``tenure:{orders:42}:<kind>`` for
the other kinds, the kind being one of ``rlock``, ``fair``, ``rwlock``,
``semaphore``, ``latch``, ``election`` (:data:`MARKERS`). Every other key and channel is the
base, a colon and a role. The name between the braces is escaped
(:func:`escape`: ``%`` -> ``%25``, ``{`` -> ``%7B``, ``}`` -> ``%7D``; other
names, such as ``orders:42``, stay as they are), so the braces are the hash
tag and the last brace pair of every key: reading a key from its end finds
the name, whatever the prefix holds. The kind comes after the tag, so no
prefix can make one kind's keys look like another's (``Lock(name, prefix=
"tenure:rlock:")`` is not an ``RLock``). A prefix may hold braces, except an
empty pair ``{}`` before any other brace (Redis would then hash each key
whole); such a prefix is refused.

A ``Lock``::

    tenure:{orders:42}           the lock; value = holder's owner token
    tenure:{orders:42}:fence     the last fencing token minted
    tenure:{orders:42}:waiters   waiting processes (sorted set)
    tenure:{orders:42}:delay     the lock-delay guard: outlives an unreleased lease
    tenure:{orders:42}:released:<op>  the record of the clean release call <op>
                                 (120 s), so that the call retried after a lost
                                 reply is recognised
    tenure:{orders:42}:wake:<w>  pub/sub channel that wakes waiter <w>
    tenure:{orders:42}:quorum    a Redlock's waiters on this master (sorted set;
                                 see tenure._plans.redlock)

A reentrant lock (``RLock``, :func:`rlock_keys`)::

    tenure:{orders:42}:rlock           the lock: a hash {<owner id>: <hold count>}
                                       (one field while held); the key's PX is the lease
    tenure:{orders:42}:rlock:fence     the last fencing token minted
    tenure:{orders:42}:rlock:waiters   waiting owners (sorted set)
    tenure:{orders:42}:rlock:wake:<w>  pub/sub channel that wakes waiter <w>

(and ``…:rlock:delay`` as a ``Lock``'s; ``…:rlock:released`` is the
owner's last change, ``"<owner id>|<op id>"`` for 120 s, so that a call
retried after a lost reply is recognised). An ``RLock`` has
no exact-key mode: its hash is tenure's own protocol.

A fair lock (``FairLock``, :func:`fair_keys`)::

    tenure:{orders:42}:fair             the lock; value = holder's owner token
    tenure:{orders:42}:fair:fence       the last fencing token minted
    tenure:{orders:42}:fair:waiters     the queue: sorted set, score = arrival
                                        order, member = "<waiter>|<lease ms>|<token>"
    tenure:{orders:42}:fair:deadlines   sorted set, the same members, score = the
                                        server time (ms) at which each is dropped
    tenure:{orders:42}:fair:delay       the lock-delay guard (as a Lock's)
    tenure:{orders:42}:fair:released:<op>  the clean release call <op> (120 s)
    tenure:{orders:42}:fair:wake:<w>    pub/sub channel of one waiting thread or task

A read-write lock (``ReadWriteLock``, :func:`rwlock_keys`)::

    tenure:{orders:42}:rwlock             the lock: a hash {"mode": "read" | "write",
                                          "r:<owner id>" / "w:<owner id>":
                                          "<count>|<fence>|<hold id>"}, one field
                                          per hold; the key's PX is the latest expiry
    tenure:{orders:42}:rwlock:holds       each hold's expiry: sorted set, member =
                                          the hold's field, score = server ms
    tenure:{orders:42}:rwlock:fence       the last fence minted (by a write hold)
    tenure:{orders:42}:rwlock:waiters     waiting readers and writers, in one queue
    tenure:{orders:42}:rwlock:delay       the lock-delay guard of the write hold
    tenure:{orders:42}:rwlock:op:<owner>  the owner's last change (120 s), so that a
                                          call retried after a lost reply is recognised
    tenure:{orders:42}:rwlock:wake:<w>    pub/sub channel that wakes waiter <w>

A semaphore named ``pool`` (:func:`semaphore_keys`)::

    tenure:{pool}:semaphore           the holders: a sorted set with one member per
                                      held permit, "<lease token>#<i>" (i = 1..n for a
                                      lease of n permits), score = the lease's expiry
                                      in server milliseconds; the key's PX is the
                                      latest expiry
    tenure:{pool}:semaphore:permits   the permit count (a string holding an integer)
    tenure:{pool}:semaphore:fence     the last fencing token minted (one per acquire)
    tenure:{pool}:semaphore:waiters   waiting processes (sorted set)
    tenure:{pool}:semaphore:released:<op>  the clean release call <op> (120 s)
    tenure:{pool}:semaphore:wake:<w>  pub/sub channel that wakes waiter <w>

A leader election named ``jobs`` (``Election``, :func:`election_keys`): a fair
lock's keys (the candidates are its queue, the leader its holder, the term
its fence), and the leader's record, the change log and the change feed::

    tenure:{jobs}:election             the lock; value = the leader's owner token
    tenure:{jobs}:election:fence       the last term minted (a fence)
    tenure:{jobs}:election:waiters     the candidates (as a FairLock's queue)
    tenure:{jobs}:election:deadlines   the candidates' deadlines (as a FairLock's)
    tenure:{jobs}:election:delay       the lock-delay guard (as a Lock's)
    tenure:{jobs}:election:released:<op>  the clean release call <op> (120 s)
    tenure:{jobs}:election:record      the leader's record: a hash {token, term,
                                       label, value, has, since, state, end[, seq]}
    tenure:{jobs}:election:log         the last changes: a stream of entries
                                       {event, term, label, value, has, since[, seq]}
    tenure:{jobs}:election:wake:<w>    pub/sub channel of one candidate
    tenure:{jobs}:election:feed        pub/sub channel told of every change
    tenure:{jobs}:election:quorum      (a RedlockElection's masters) the candidates
                                       waiting on this master, as a Redlock's

(the record and the log are kept 7 days after their last write.)

A count-down latch named ``job`` (:func:`latch_keys`)::

    tenure:{job}:latch          the count (a string holding an integer); absent = zero
    tenure:{job}:latch:opened   a number that grows each time the count reaches zero
                                (seeded from the server's clock, as a fence)
    tenure:{job}:latch:by       the label of who set the count (encoded as in a
                                token); deleted with the count at zero
    tenure:{job}:latch:zero     pub/sub channel on which reaching zero wakes every waiter

Every key expires by itself within 10 minutes of the name's last use (or at
the end of a longer lease), except those kept on purpose: a semaphore's
``:permits`` (7 days after the last acquire or ``set_permits``), a latch's
count (and its ``:by``) while it is not zero, and a ``FencedKey``'s seen key. Fence keys live
10 minutes after each grant or renewal, or the lease if longer
(:data:`tenure._plans.common.FENCE_KEEP_MS` says what that costs), a latch's
``:opened`` 10 minutes. docs/guide/keys-and-memory.md lists each key's
lifetime and size, and ``tests/test_keys_left.py`` checks them.

Exact keys
----------

An exact-key ``Lock`` (``Lock(key=K)``) uses ``K`` itself as the lock (the
common ``SET key token NX PX`` protocol, shared with redis-py's ``Lock``) and
derives its other keys from all of ``K``, apart from every named primitive's
(the prefix plays no part):

- ``K`` holds no ``{``, ``}`` or ``%`` (``orders:42``): the base is
  ``{orders:42}:key``, so ``{orders:42}:key:fence``, ``…:key:waiters``,
  ``…:key:delay``, ``…:key:released:<op>``, ``…:key:chain`` and ``…:key:foreign``
  (tenure's hand-offs in a row and whether a foreign holder was seen lately,
  so that foreign clients get the key too: see ``lock_release.lua``) and
  channels ``{orders:42}:key:wake:<w>``. ``{orders:42}`` hashes as
  ``orders:42`` does.
- ``K`` is a named ``Lock``'s main key (``tenure:{orders:42}``, ``{job}``): it is
  that lock, with that lock's keys (``tenure:{orders:42}:fence`` ...), and hands
  off as that lock does (no chain key).
- Any other ``K`` (``app:{user:1}:lock``, ``a{}b``, ``}x{``): the base is
  ``{<tag>}:key:<escape(K)>``, where ``<tag>`` is the part of ``K`` that Redis
  hashes (its hash tag, or all of ``K``) when that holds no brace, and
  otherwise four characters from ``@A…O`` computed so that they hash to
  ``K``'s slot (:func:`tag_for_slot`). ``app:{user:1}:lock`` ->
  ``{user:1}:key:app:%7Buser:1%7D:lock:fence`` ...

A fenced resource (``FencedKey(K)``, :func:`fenced_keys`) keeps the largest
fence accepted in ``{K}:fenced:seen`` (or ``{<tag>}:fenced:<escape(K)>:seen``,
by the same rules, but never sharing a named lock's keys).

A key given by the user (an exact lock key, a fenced value's key) is used as
given: naming one of tenure's own keys there (say ``tenure:{job}:fence``) makes
that key shared, which tenure cannot prevent; :func:`parse_key` recognises
every key tenure derives.

Waiter ids ``<w>`` (hex, ``-`` and ``.``) and owner ids hold no brace.

The keys of a ``Lock`` and an ``RLock`` are built here; those of the other
kinds in :mod:`.kinds`, imported from here too (on first use).
"""

from __future__ import annotations

import binascii
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

from .._errors import InvalidArgument

#: The key prefix of a named primitive made without ``prefix``.
DEFAULT_PREFIX = "tenure:"

#: The marker after the hash tag of each named kind ("" for a ``Lock``).
MARKERS: dict[str, str] = {
    "Lock": "",
    "RLock": "rlock",
    "FairLock": "fair",
    "ReadWriteLock": "rwlock",
    "Semaphore": "semaphore",
    "CountDownLatch": "latch",
    "Election": "election",
}

#: The marker of an exact-key ``Lock``'s derived keys.
EXACT_MARKER = "key"

#: The marker of a ``FencedKey``'s derived key.
FENCED_MARKER = "fenced"

#: The roles of each kind's derived keys (besides the main key, ``"lock"``). A
#: ``ReadWriteLock`` also has ``op:<owner>`` keys, a ``Lock``, a ``FairLock``,
#: a ``Semaphore`` and an ``Election`` ``released:<op>`` keys (role ``"released"``, the detail
#: the op); the channels are ``wake:<w>`` (a latch's: ``zero``; an election
#: also has ``feed``).
ROLES: dict[str, frozenset[str]] = {
    "Lock": frozenset({"fence", "waiters", "delay", "released", "chain", "foreign", "quorum"}),
    "RLock": frozenset({"fence", "waiters", "delay", "released"}),
    "FairLock": frozenset({"fence", "waiters", "deadlines", "delay", "released"}),
    "ReadWriteLock": frozenset({"holds", "fence", "waiters", "delay"}),
    "Semaphore": frozenset({"permits", "fence", "waiters", "delay", "released"}),
    "CountDownLatch": frozenset({"opened", "by"}),
    "Election": frozenset(
        {"fence", "waiters", "deadlines", "delay", "released", "record", "log", "quorum"}
    ),
    "FencedKey": frozenset({"seen"}),
}

#: The kinds whose clean release calls leave a ``released:<op>`` record.
_RECORDED = frozenset({"Lock", "FairLock", "Semaphore", "Election"})
_KIND_OF_MARKER = {marker: kind for kind, marker in MARKERS.items() if marker}
_WAITER = re.compile(r"[0-9a-f.\-]+")
_OP = re.compile(r"[0-9a-f]+")
_ESCAPED = re.compile(r"(?:[^%{}]|%25|%7B|%7D)+")
_ESCAPES = {"%": "%25", "{": "%7B", "}": "%7D"}
_UNESCAPES = {v: k for k, v in _ESCAPES.items()}


def escape(text: str) -> str:
    """``text`` with ``%``, ``{`` and ``}`` written ``%25``, ``%7B``, ``%7D``: no brace
    is left, and different texts stay different."""
    return re.sub(r"[%{}]", lambda m: _ESCAPES[m.group()], text)


def unescape(text: str) -> str | None:
    """The text whose :func:`escape` is ``text``, or ``None`` if there is none
    (``text`` empty, holding a brace, or a ``%`` not starting ``%25``/``%7B``/``%7D``)."""
    if not _ESCAPED.fullmatch(text):
        return None
    return re.sub(r"%(?:25|7B|7D)", lambda m: _UNESCAPES[m.group()], text)


def hashed_part(key: str) -> str:
    """The part of ``key`` that Redis Cluster hashes: the text between the first
    ``{`` and the first ``}`` after it if that is not empty, else all of ``key``."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def hash_slot(key: str) -> int:
    """The Redis Cluster slot of ``key`` (0..16383): CRC16 (XMODEM) of the UTF-8
    bytes of :func:`hashed_part`, modulo 16384.

    Raises:
        UnicodeEncodeError: ``key`` holds a lone surrogate.
    """
    return binascii.crc_hqx(hashed_part(key).encode(), 0) & 0x3FFF


# CRC16 is linear: flipping bit b of a fixed-length message flips a fixed set of
# bits of its CRC. Tags are 4 characters 0x40 | n (n = 0..15, "@A...O"): the 16
# low-nibble bits reach every 14-bit slot; _BASIS holds, per pivot bit of the
# slot, the reduced slot vector and the nibble bits that flip it.
_TAG_BASE = b"@@@@"


def _tag_basis() -> list[tuple[int, int, int]]:
    start = binascii.crc_hqx(_TAG_BASE, 0)
    basis: dict[int, tuple[int, int]] = {}
    for i in range(4 * len(_TAG_BASE)):
        flipped = bytearray(_TAG_BASE)
        flipped[i // 4] ^= 1 << (i % 4)
        vector, mask = (binascii.crc_hqx(bytes(flipped), 0) ^ start) & 0x3FFF, 1 << i
        for pivot in sorted(basis, reverse=True):
            if vector >> pivot & 1:
                vector, mask = vector ^ basis[pivot][0], mask ^ basis[pivot][1]
        if vector:
            basis[vector.bit_length() - 1] = (vector, mask)
    if len(basis) != 14:  # pragma: no cover - a property of CRC16, checked by the tests
        raise AssertionError("the tag bits do not reach every slot")
    return [(pivot, *basis[pivot]) for pivot in sorted(basis, reverse=True)]


_BASIS = _tag_basis()
_TAG_START = binascii.crc_hqx(_TAG_BASE, 0) & 0x3FFF


def tag_for_slot(slot: int) -> str:
    """A 4-character hash tag (characters ``@A…O``) that hashes to ``slot`` (0..16383)."""
    want, mask = (slot ^ _TAG_START) & 0x3FFF, 0
    for pivot, vector, bits in _BASIS:
        if want >> pivot & 1:
            want, mask = want ^ vector, mask ^ bits
    return "".join(chr(0x40 | (mask >> (4 * i) & 0xF)) for i in range(len(_TAG_BASE)))


def _check_utf8(value: str, what: str) -> None:
    """Raise ``InvalidArgument`` if ``value`` can't be written as UTF-8 (it holds a
    lone surrogate, such as ``"\\udc80"`` from ``os.fsdecode`` of a bad byte):
    Redis keys are bytes, and the client encodes every str as UTF-8."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            f"{what} {value!r} can't be encoded as UTF-8 "
            f"({value[exc.start : exc.end]!r} at index {exc.start} is a lone surrogate)"
        ) from None


def check_name(value: object, what: str) -> str:
    """Return ``value`` if it is a non-empty ``str`` that UTF-8 can encode.

    Raises:
        InvalidArgument: otherwise; the message names ``what`` and the value.
    """
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, not {type(value).__name__} {value!r}")
    if not value:
        raise InvalidArgument(f"{what} must not be empty")
    _check_utf8(value, what)
    return value


def _prefix_ok(prefix: str) -> bool:
    start = prefix.find("{")
    return start < 0 or prefix[start + 1 : start + 2] != "}"


def check_prefix(prefix: object) -> str:
    """Return ``prefix`` if it is a ``str`` that keeps a primitive's keys in one slot.

    Raises:
        InvalidArgument: ``prefix`` is not a ``str``, can't be encoded as UTF-8,
            or its first ``{`` is followed at once by ``}`` (Redis would hash
            every key whole, scattering one primitive's keys over several
            cluster slots).
    """
    if not isinstance(prefix, str):
        raise InvalidArgument(f"prefix must be a str, not {type(prefix).__name__} {prefix!r}")
    _check_utf8(prefix, "prefix")
    if not _prefix_ok(prefix):
        raise InvalidArgument(
            f"prefix {prefix!r} starts an empty hash tag '{{}}': Redis would hash each key "
            "whole and one lock's keys would not share a cluster slot"
        )
    return prefix


def _named_base(kind: str, name: object, prefix: object) -> tuple[str, str]:
    """``(name, base)`` of the ``kind`` primitive ``name`` under ``prefix``."""
    prefix = check_prefix(prefix)
    name = check_name(name, "name")
    base = f"{prefix}{{{escape(name)}}}"
    marker = MARKERS[kind]
    return name, (f"{base}:{marker}" if marker else base)


def _exact_base(key: str, marker: str) -> str:
    """The base of the keys derived from the exact key ``key`` (see the module docstring)."""
    if not any(c in key for c in "{}%"):
        return f"{{{key}}}:{marker}"
    tag = hashed_part(key)
    if "{" in tag or "}" in tag:
        tag = tag_for_slot(hash_slot(key))
    return f"{{{tag}}}:{marker}:{escape(key)}"


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """What :func:`parse_key` or :func:`parse_channel` read from a key or channel.

    ``kind`` is one of :data:`MARKERS`' kinds or ``"FencedKey"``; a named
    primitive has ``name`` and ``prefix`` (``key`` is ``None``), an exact-key
    ``Lock`` or a ``FencedKey`` has ``key`` (``name`` and ``prefix`` are
    ``None``). ``role`` is ``"lock"`` for a named primitive's main key, one of
    :data:`ROLES` (``"released"`` with ``detail`` = the op for a release
    record), ``"op"`` (a ReadWriteLock owner's last-op key, ``detail`` =
    the owner id), ``"wake"`` (a channel, ``detail`` = the waiter id) or
    ``"zero"`` (a latch's channel).
    """

    kind: str
    name: str | None
    key: str | None
    prefix: str | None
    role: str
    detail: str = ""


def _split(text: str) -> tuple[str, str, str] | None:
    """``(prefix, escaped tag, rest)`` of a key or channel tenure derives: its last
    brace pair is the tag, and the rest holds no brace."""
    end = text.rfind("}")
    start = text.rfind("{", 0, end) if end >= 0 else -1
    if start < 0 or end == start + 1 or "}" in text[start + 1 : end]:
        return None
    return text[:start], text[start + 1 : end], text[end + 1 :]


def _parse(text: str, channel: bool) -> KeyInfo | None:
    split = _split(text)
    if split is None:
        return None
    prefix, tag, rest = split
    if rest.endswith(":"):
        return None  # (a role is never empty: ``{x}:`` is no main key, nor ``{x}:rlock:``)
    if rest == "" or rest.startswith(":"):
        head, _, tail = rest[1:].partition(":")
        if head in (EXACT_MARKER, FENCED_MARKER):
            return _parse_exact(prefix, tag, head, tail, channel)
        name = unescape(tag)
        if name is None or not _prefix_ok(prefix):
            return None
        kind = _KIND_OF_MARKER.get(head)
        if kind is None:  # a Lock: the rest is a role
            kind, tail = "Lock", rest[1:]
        found = _role(kind, tail, channel)
        if found is None:
            return None
        return KeyInfo(kind, name, None, prefix, *found)
    return None


def _role(kind: str, text: str, channel: bool) -> tuple[str, str] | None:
    """``(role, detail)`` of the role part ``text`` of a ``kind`` key or channel."""
    if channel:
        if kind == "CountDownLatch":
            return ("zero", "") if text == "zero" else None
        if kind == "Election" and text == "feed":
            return ("feed", "")
        if kind == "FencedKey":
            return None
        head, _, waiter = text.partition(":")
        return ("wake", waiter) if head == "wake" and _WAITER.fullmatch(waiter) else None
    if text == "":
        return ("lock", "") if kind in MARKERS else None
    if text in ROLES[kind]:
        return text, ""
    head, _, detail = text.partition(":")
    if kind == "ReadWriteLock" and head == "op" and detail:
        return "op", detail
    if kind in _RECORDED and head == "released" and _OP.fullmatch(detail):
        return "released", detail
    return None


def _parse_exact(prefix: str, tag: str, marker: str, tail: str, channel: bool) -> KeyInfo | None:
    if prefix:
        return None
    kind = "Lock" if marker == EXACT_MARKER else "FencedKey"
    found = _role(kind, tail, channel)
    if found is not None and found[0] != "lock":
        key: str | None = tag if "%" not in tag else None  # {K}:<marker>:<role>
    else:  # {<tag>}:<marker>:<escape(K)>:<role>, the role one part or two
        last = tail.rfind(":")
        second = tail.rfind(":", 0, last)
        for cut in (second,) if channel else (last, second):
            found = _role(kind, tail[cut + 1 :], channel) if cut > 0 else None
            key = unescape(tail[:cut]) if found is not None and found[0] != "lock" else None
            base = "{" + tag + "}:" + marker + ":" + tail[:cut]
            if key is not None and _exact_base(key, marker) == base:
                break
        else:
            return None
    if key is None or found is None:
        return None
    return KeyInfo(kind, None, key, None, *found)


def parse_key(key: str) -> KeyInfo | None:
    """The primitive and role of ``key`` if it is a key tenure derives, else ``None``.

    An exact-key ``Lock``'s own key and a ``FencedKey``'s value key are the
    user's and are not recognised, unless the exact key is a named ``Lock``'s
    main key (then that ``Lock`` is returned). Inverse of the builders below:
    ``parse_key(lock_keys("a", key=None, prefix="p:").fence)`` names the ``Lock``
    ``"a"`` under ``"p:"`` with role ``"fence"``.
    """
    return _parse(key, channel=False)


def parse_channel(channel: str) -> KeyInfo | None:
    """The primitive of a wake channel (``wake_prefix`` + waiter id, or a latch's
    channel), else ``None``."""
    return _parse(channel, channel=True)


@dataclass(frozen=True, slots=True)
class LockKeys:
    """Redis keys and the wake-channel prefix of one lock.

    ``chain`` and ``foreign`` are ``""``, except for an exact-key ``Lock`` (a key
    foreign clients may share): the key that counts its hand-offs in a row and
    marks the window in which the key is left to foreign clients, and the key
    that says a foreign holder was seen lately (``lock_release.lua``).
    ``quorum`` is a ``Lock``'s only (``""`` for the other kinds): the queue of
    :class:`tenure.Redlock` waiters on one master (see :mod:`tenure._plans.redlock`).
    """

    name: str
    lock: str
    fence: str
    waiters: str
    wake_prefix: str
    delay: str
    released: str
    chain: str = field(default="", kw_only=True)
    foreign: str = field(default="", kw_only=True)
    quorum: str = field(default="", kw_only=True)

    def release_record(self, op: str) -> str:
        """The key of the record of the release call ``op`` (``<released>:<op>``,
        see ``release_noted`` in ``_common.lua``); for ``""`` (a call never
        retried, which records nothing) the ``released`` key itself."""
        return f"{self.released}:{op}" if op else self.released


def fenced_keys(key: str) -> tuple[str, str]:
    """The keys of a fenced resource: the value's key and, in its hash slot, the
    key holding the largest fence accepted (``{<key>}:fenced:seen``, or
    ``{<tag>}:fenced:<escaped key>:seen``; see the module docstring).

    Raises:
        InvalidArgument: ``key`` is not a non-empty ``str``.
    """
    key = check_name(key, "key")
    return key, _exact_base(key, FENCED_MARKER) + ":seen"


def lock_keys(name: str | None, *, key: str | None, prefix: str) -> LockKeys:
    """Build the keys of a lock given by ``name`` (under ``prefix``) or by exact ``key``.

    Raises:
        InvalidArgument: both or neither of ``name`` and ``key`` given, or either is
            not a non-empty ``str``, or ``prefix`` is not a ``str`` or starts an
            empty hash tag (:func:`check_prefix`).
    """
    check_prefix(prefix)
    if (name is None) == (key is None):
        raise InvalidArgument("give exactly one of name or key=")
    if key is not None:
        key = check_name(key, "key")
        info = parse_key(key)
        if info is not None and info.kind == "Lock" and info.role == "lock":
            # a named Lock's main key: that lock
            return replace(_siblings(key, key, key), quorum=key + ":quorum")
        base = _exact_base(key, EXACT_MARKER)
        keys = _siblings(key, key, base)
        return replace(
            keys, chain=base + ":chain", foreign=base + ":foreign", quorum=base + ":quorum"
        )
    name, base = _named_base("Lock", name, prefix)
    return replace(_siblings(name, base, base), quorum=base + ":quorum")


def _siblings(name: str, lock: str, base: str) -> LockKeys:
    return _lock_family(LockKeys, name, lock, base)


_K = TypeVar("_K", bound=LockKeys)


def _lock_family(cls: type[_K], name: str, lock: str, base: str, *roles: str) -> _K:
    """``cls``'s keys of ``name``: the main key ``lock``, a lock's sibling keys
    at ``base``, then ``base:<role>`` for each of ``roles`` (``cls``' further
    fields, in their order)."""
    return cls(
        name,
        lock,
        base + ":fence",
        base + ":waiters",
        base + ":wake:",
        base + ":delay",
        base + ":released",
        *(f"{base}:{role}" for role in roles),
    )


def rlock_keys(name: str, *, prefix: str) -> LockKeys:
    """Build the keys of a reentrant lock ``name`` under ``prefix``
    (``<prefix>{<name>}:rlock`` and its roles), apart from every ``Lock``'s keys.

    Raises:
        InvalidArgument: ``name`` is not a non-empty ``str``, or ``prefix`` is not
            a ``str`` or starts an empty hash tag.
    """
    name, base = _named_base("RLock", name, prefix)
    return _siblings(name, base, base)


if TYPE_CHECKING:  # imported on first use (__getattr__ below)
    from .kinds import ElectionKeys as ElectionKeys
    from .kinds import FairKeys as FairKeys
    from .kinds import LatchKeys as LatchKeys
    from .kinds import RWLockKeys as RWLockKeys
    from .kinds import SemaphoreKeys as SemaphoreKeys
    from .kinds import election_keys as election_keys
    from .kinds import fair_keys as fair_keys
    from .kinds import latch_keys as latch_keys
    from .kinds import rwlock_keys as rwlock_keys
    from .kinds import semaphore_keys as semaphore_keys

#: The names :mod:`.kinds` defines, imported from here on their first use.
_LATER = frozenset(
    {
        "ElectionKeys",
        "FairKeys",
        "LatchKeys",
        "RWLockKeys",
        "SemaphoreKeys",
        "election_keys",
        "fair_keys",
        "latch_keys",
        "rwlock_keys",
        "semaphore_keys",
    }
)

if not TYPE_CHECKING:  # (a type checker reads the imports above)

    def __getattr__(name: str) -> object:
        if name not in _LATER:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from . import kinds

        return getattr(kinds, name)
