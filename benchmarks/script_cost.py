"""Where an uncontended ``Lock`` cycle's server time goes: the server's own time
per ``EVALSHA`` (``INFO commandstats``, µs per call) of tenure's
``lock_acquire.lua`` + ``lock_release.lua`` as sent, of the same two scripts
without their ACL guard, and of the leanest scripts that still do what a
tenure ``Lock`` promises uncontended (the lock-delay check, ``SET NX PX``, a
fence ``max(last + 1, TIME µs)``; a token-checked release recorded for a
retried call, the lock-delay guard deleted), against the raw floor's
compare-and-delete ``EVALSHA`` (its ``SET NX PX`` is no script); and, for a
contended hand-off, the server's time for a waiter's attempt that queues and
the release that hands the lock to it, with and without the ACL guard. The
lease's token carries a holder label, as every tenure lease's does by default;
one row sends a token without it.

The calls are pipelined (1,000 cycles per pipeline) so that no round trip is
timed: only the server's time per call. Every variant is measured in 21
rounds, the variants' rounds interleaved (the order rotated each round) so
that a burst of other work on a shared machine falls on all of them alike,
each round from a flushed script cache; a row is the lower quartile of its
rounds.

Usage::

    .venv/bin/python benchmarks/script_cost.py
    .venv/bin/python benchmarks/script_cost.py --server /usr/bin/redis-server
    .venv/bin/python benchmarks/script_cost.py --only-primitives
    PYTHONPATH=<an older tree>/src .venv/bin/python benchmarks/script_cost.py --without-promises
    .venv/bin/python benchmarks/script_cost.py --against <another tree>/src

``--against`` measures another tree's ``Lock`` scripts (an uncontended cycle and
a contended hand-off) in the same server and the same interleaved rounds as
this tree's, for an A/B that a burst of other work can't tilt.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import redis

from tenure._protocol import parse_reply
from tenure._scripts import LOCK_ACQUIRE, LOCK_RELEASE, Status
from tenure._server import ServerProcess

#: The leanest acquire with a tenure Lock's uncontended promises (KEYS and ARGV
#: as lock_acquire.lua's).
LEAN_ACQUIRE = """
local delayed = redis.call('PTTL', KEYS[4])
if delayed > 0 and redis.call('EXISTS', KEYS[1]) == 0 then return {2, delayed} end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then return {2, 0} end
local now = redis.call('TIME')
local fence = math.max(tonumber(now[1]) * 1000000 + tonumber(now[2]),
                       (tonumber(redis.call('GET', KEYS[2])) or 0) + 1)
redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[5])
return fence
"""

#: The leanest release with a tenure Lock's promises (KEYS and ARGV as
#: lock_release.lua's): token-checked, the call recorded for a retry.
LEAN_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {4, 0} end
redis.call('SET', KEYS[5], '1', 'PX', 120000)
redis.call('DEL', KEYS[1], KEYS[4])
return 0
"""

#: The anchor: a reentrant lock as Redisson's ``RedissonLock`` keeps it (a hash
#: of owner -> hold count, its expiry the lease), re-written here from its
#: documented protocol. KEYS: the lock, the release channel, the release's
#: record; the record (one string per release call, PX ``ARGV[4]``) answers a
#: retried release as the first time.
ANCHOR_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return false
end
return redis.call('PTTL', KEYS[1])
"""

#: The anchor with a fence: as above, and a counter ``INCR`` per acquire that
#: takes the lock (Redisson's ``RFencedLock``); KEYS[2] is the counter.
ANCHOR_FENCED_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return redis.call('INCR', KEYS[2])
end
return redis.call('PTTL', KEYS[1])
"""

ANCHOR_RELEASE = """
local done = redis.call('GET', KEYS[3])
if done then return tonumber(done) end
if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 0 then return false end
if redis.call('HINCRBY', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[3], 0, 'PX', ARGV[4])
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], ARGV[1])
redis.call('SET', KEYS[3], 1, 'PX', ARGV[4])
return 1
"""

FLOOR_RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)


def ok(reply: Any) -> bool:
    """Whether a script's ``reply`` is OK (a bare number, or ``{1, value}``)."""
    return isinstance(reply, int) or reply[0] == 1


def without_acl_guard(source: str) -> str:
    """``source`` (lock_acquire.lua or lock_release.lua as sent) with its ACL
    guard's calls replaced by ``nil``, and its quick paths' checks passing at
    once (nothing else changed)."""
    out, n = re.subn(r"acl_commands\(\) or acl_channels\([^\n]*\)\n", "nil\n", source)
    out, m = re.subn(r"acl_need\(\{[^}]*\}\)", "nil", out)
    # (every check passes: the paths that check only some commands still run)
    out, k = re.subn(
        r"local check = redis\.acl_check_cmd\n", "local check = function() return true end\n", out
    )
    if not n or not m or not k:
        raise SystemExit("script_cost: the ACL guard's calls no longer match the script")
    return out


#: Benchmark-only builds of the Lock scripts, each with one promise switched off
#: (a substitution of the built source: (pattern, replacement) pairs, each of
#: which must match), to price each promise on the uncontended cycle.
PROMISES: dict[str, tuple[list[tuple[str, str]], list[tuple[str, str]]]] = {
    "the fence (GET, TIME, SET of the fence key)": (
        [
            (r"local last = redis\.pcall\('GET', KEYS\[2\]\)", "local last = false"),
            (r"(?<!function )next_fence\(last\)", "1"),
            (r"next_fence_at\(last, now_us\(\)\)", "1"),
            (r" *redis\.call\('SET', KEYS\[2\], fence, 'PX', ARGV\[5\]\)[^\n]*\n", ""),
        ],
        [],
    ),
    "the lock-delay (PTTL of its key; its DEL)": (
        [
            (r"local delayed = redis\.call\('PTTL', KEYS\[4\]\)", "local delayed = -2"),
            (r"  delay_after\(KEYS\[4\], ARGV\[1\], ARGV\[3\], [^\n]*, delayed\)\n", ""),
        ],
        [(r"redis\.call\('DEL', KEYS\[1\], KEYS\[4\]\)", "redis.call('DEL', KEYS[1])")],
    ),
    "the release's retry record (SET of the call's record key)": (
        [],
        [
            (r"release_noted\(KEYS\[5\], ARGV\[6\]\)  -- the first write\n", ""),
            (r"if ARGV\[6\] ~= '' then redis\.call\('SET', KEYS\[5\][^\n]*\n", ""),
        ],
    ),
    "the queue check of a release (ZCARD)": (
        [],
        [(r"local waiting = redis\.pcall\('ZCARD', KEYS\[2\]\)\n", "local waiting = 0\n")],
    ),
}


def switched_off(source: str, rules: list[tuple[str, str]]) -> str:
    """``source`` with each of ``rules`` applied; every rule must match."""
    for pattern, replacement in rules:
        source, count = re.subn(pattern, replacement, source)
        if count == 0:
            raise SystemExit(f"script_cost: {pattern!r} no longer matches the script")
    return source


#: Rounds of each measure (a pipeline each), and cycles per round.
ROUNDS, CYCLES = 21, 1000


def interleaved(
    measures: dict[str, Callable[[int], float]], rounds: int = ROUNDS
) -> dict[str, float]:
    """Each of ``measures`` (a round's µs, given the round's number) run
    ``rounds`` times, round by round in turn, the order rotated each round, so
    that a burst of other work on the shared box falls on all of them alike:
    the lower quartile of each one's rounds."""
    times: dict[str, list[float]] = {label: [] for label in measures}
    order = list(measures)
    for n in range(rounds):
        order = order[1:] + order[:1]
        for label in order:
            times[label].append(measures[label](n))
    return {label: statistics.quantiles(t, n=4)[0] for label, t in times.items()}


def loaded(r: redis.Redis, *sources: str) -> list[str]:
    """The SHA-1s of ``sources``, loaded into a server whose script cache was
    flushed first (only the scripts measured in the server's Lua heap)."""
    r.script_flush()
    return [r.script_load(source) for source in sources]


def anchor_per_call(r: redis.Redis, acquire: str) -> Callable[[int], float]:
    """A round: the server's µs per EVALSHA of the anchor's ``acquire`` and its
    release in turn (a pipeline of CYCLES cycles)."""
    owner = "f723fa15-eb45-be50-5031-b65fcf3054fc:1"
    keys_a = ("anchor{c}", "anchor{c}:fence")

    def one(n: int) -> float:
        sha_a, sha_r = loaded(r, acquire, ANCHOR_RELEASE)
        r.config_resetstat()
        pipe = r.pipeline(transaction=False)
        for i in range(CYCLES):
            pipe.evalsha(sha_a, 2, *keys_a, 10000, owner)
            latch = f"anchor{{c}}:unlock:{sha_a}:{n}:{i}"  # (a fresh record per release)
            pipe.evalsha(sha_r, 3, "anchor{c}", "anchor{c}:channel", latch, 0, 10000, owner, 13000)
        replies = pipe.execute()
        if replies[1::2] != [1] * CYCLES:  # every release released (none a replay)
            raise RuntimeError(f"unexpected replies {replies[:2]!r}")
        return float(r.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])

    return one


#: A lease token without a holder label (as an older tenure's, or ``label=""``).
TOKEN = "f723fa15eb45be505031b65fcf3054fc.2:1455a695238de7461ec1afb3db057194"
#: The same with a typical label (``tenure._label.label_suffix``).
LABELLED = TOKEN + ";web-3+pid+4711+(celery+worker)"


def per_call(
    r: redis.Redis, acquire: str, release: str, token: str = LABELLED
) -> Callable[[int], float]:
    """A round: the server's µs per EVALSHA of ``acquire`` and ``release`` in
    turn (a pipeline of CYCLES cycles), the lease's token ``token``."""
    keys_a = ("tenure:{c}", "tenure:{c}:fence", "tenure:{c}:waiters", "tenure:{c}:delay")
    args_a = (token, token.split(":")[0] + ":", 10000, "", 600000, 0, "tenure:{c}:wake:")
    keys_r = ("tenure:{c}", "tenure:{c}:waiters", "tenure:{c}:fence", "tenure:{c}:delay")
    tag = hashlib.sha1(f"{acquire}{release}{token}".encode()).hexdigest()[:8]

    def one(n: int) -> float:
        sha_a, sha_r = loaded(r, acquire, release)
        r.config_resetstat()
        pipe = r.pipeline(transaction=False)
        for i in range(CYCLES):
            pipe.evalsha(sha_a, 4, *keys_a, *args_a)
            op = f"{tag}{n:x}.{i:06x}"  # (a fresh record per release)
            record = f"tenure:{{c}}:released:{op}"
            pipe.evalsha(sha_r, 5, *keys_r, record, token, "tenure:{c}:wake:", 600000, "", 0, op)
        replies = pipe.execute()
        if not (ok(replies[0]) and replies[1] == 0):
            raise RuntimeError(f"unexpected replies {replies[:2]!r}")
        return float(r.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])

    return one


def floor_per_call(r: redis.Redis, rounds: int = 5) -> tuple[float, float]:
    """The raw floor's server µs per cycle: its ``SET NX PX`` and its EVALSHA."""
    r.script_flush()  # (only the scripts measured in the server's Lua heap)
    sha = r.script_load(FLOOR_RELEASE)
    sets, evals = [], []
    for _ in range(rounds):
        r.config_resetstat()
        pipe = r.pipeline(transaction=False)
        for _ in range(2000):
            pipe.set("floor", "token", nx=True, px=10000)
            pipe.evalsha(sha, 1, "floor", "token")
        pipe.execute()
        stats = r.info("commandstats")
        sets.append(float(stats["cmdstat_set"]["usec_per_call"]))
        evals.append(float(stats["cmdstat_evalsha"]["usec_per_call"]))
    return statistics.median(sets), statistics.median(evals)


def per_handoff(r: redis.Redis, acquire: str, release: str) -> Callable[[int], float]:
    """A round: the server's µs per contended hand-off: a waiter's attempt that
    finds the lock held and queues, then the holder's release that hands the
    lock to it (a PUBLISH to a wake channel the caller keeps subscribed: see
    :func:`main`), two owners taking turns (a pipeline of CYCLES hand-offs)."""
    keys_a = ("tenure:{h}", "tenure:{h}:fence", "tenure:{h}:waiters", "tenure:{h}:delay")
    keys_r = (
        "tenure:{h}",
        "tenure:{h}:waiters",
        "tenure:{h}:fence",
        "tenure:{h}:delay",
        "tenure:{h}:released",
    )
    tokens = {w: f"{w * 32}.1:{w * 8}" for w in "ab"}

    def attempt(pipe: Any, sha: str, waiter: str, member: str) -> None:
        token = tokens[waiter]
        owner = token.split(":")[0] + ":"
        pipe.evalsha(sha, 4, *keys_a, token, owner, 10000, member, 600000, 0, WAKE_PREFIX)

    def one(n: int) -> float:
        sha_a, sha_r = loaded(r, acquire, release)
        r.delete(*keys_a, *keys_r)
        first = r.pipeline(transaction=False)
        attempt(first, sha_a, "a", "")
        if not ok(first.execute()[0]):
            raise RuntimeError("the first holder did not get the lock")
        pipe = r.pipeline(transaction=False)
        for i in range(CYCLES // 2):
            for waiter, holder in (("b", "a"), ("a", "b")):
                attempt(pipe, sha_a, waiter, f"w{waiter}|1000|{tokens[waiter]}")
                args = (tokens[holder], WAKE_PREFIX, 600000, "", 0, f"op{holder}{n}.{i}")
                pipe.evalsha(sha_r, 5, *keys_r, *args)
        r.config_resetstat()
        replies = pipe.execute()
        queued = parse_reply(LOCK_ACQUIRE, replies[0])[0]
        if queued is not Status.BUSY or parse_reply(LOCK_RELEASE, replies[1]) != (Status.OK, 1):
            raise RuntimeError(f"unexpected replies {replies[:2]!r}")
        usec = float(r.info("commandstats")["cmdstat_evalsha"]["usec"])
        return usec / (len(replies) / 2)

    return one


#: The wake channels' prefix of :func:`per_handoff`'s waiters.
WAKE_PREFIX = "tenure:{h}:wake:"


#: The commands that are no script's own (the benchmark's INFO, CONFIG
#: RESETSTAT, SCRIPT LOAD/FLUSH calls, the scripts' EVALSHA itself).
NOT_SCRIPTS_OWN = ("cmdstat_evalsha", "cmdstat_info", "cmdstat_config", "cmdstat_script")


def inside(r: redis.Redis) -> float:
    """The server's µs per ``EVALSHA`` since the last ``CONFIG RESETSTAT`` spent
    in the commands the scripts ran (``INFO commandstats`` counts a script's
    commands both on their own rows and within its ``EVALSHA``'s); the rest of
    an ``EVALSHA``'s time is the script machinery: Lua, the conversion of each
    call's arguments and reply, the ``KEYS``/``ARGV`` tables."""
    stats = r.info("commandstats")
    own = sum(float(v["usec"]) for k, v in stats.items() if not k.startswith(NOT_SCRIPTS_OWN))
    return own / float(stats["cmdstat_evalsha"]["calls"])


def split(
    r: redis.Redis,
    measure: Callable[[int], float],
    parts: list[tuple[float, float]],
    calls: int = 1,
) -> Callable[[int], float]:
    """``measure`` (a round's µs per ``calls`` ``EVALSHA`` calls), recording in
    ``parts`` each round's µs per ``EVALSHA`` in the commands (:func:`inside`)
    and in the rest."""

    def one(n: int) -> float:
        us = measure(n)
        own = inside(r)
        parts.append((own, us / calls - own))
        return us

    return one


def per_cycle(r: redis.Redis, cycle: Callable[[], object], n: int = 1000) -> Callable[[int], float]:
    """A round: the server's µs per call of ``cycle`` (one primitive's
    uncontended cycle through the public API, unpipelined): every command's
    time in ``INFO commandstats`` over ``n`` cycles, less the ``INFO`` calls'
    own."""
    for _ in range(50):
        cycle()  # (scripts loaded, quick-path connections made)

    def one(_: int) -> float:
        r.config_resetstat()
        for _ in range(n):
            cycle()
        stats = r.info("commandstats")
        return sum(float(v["usec"]) for k, v in stats.items() if k != "cmdstat_info") / n

    return one


#: Rounds of each primitive's cycles (:func:`primitives`), interleaved.
PRIMITIVE_ROUNDS = 9


def primitives(url: str) -> dict[str, float]:
    """Server µs per uncontended cycle of each primitive, through its public
    API: the lower quartile of :data:`PRIMITIVE_ROUNDS` rounds of 1,000
    cycles, the primitives' rounds interleaved (as :func:`interleaved`), so
    that a burst of other work on a shared machine falls on all of them
    alike and the ratios to ``Lock``'s hold within one run."""
    from tenure import (
        CountDownLatch,
        FairLock,
        Lock,
        MultiLock,
        ReadWriteLock,
        RLock,
        Semaphore,
    )

    client = redis.Redis.from_url(url)
    r = redis.Redis.from_url(url)
    lock, rlock, fair = Lock(client, "p-lock"), RLock(client, "p-rlock"), FairLock(client, "p-fair")
    rw, sem = ReadWriteLock(client, "p-rw"), Semaphore(client, "p-sem", 2)
    latch = CountDownLatch(client, "p-latch")
    other = redis.Redis.from_url(url)  # (a second pool: MultiLock's parts one by one)
    multi = MultiLock([Lock(client, "p-m1"), Lock(other, "p-m2")])

    def latch_cycle() -> None:
        latch.try_set_count(1)
        latch.count_down()

    cycles: dict[str, Callable[[], object]] = {
        "Lock": lambda: lock.acquire().release(),  # type: ignore[union-attr]
        "RLock": lambda: rlock.acquire().release(),  # type: ignore[union-attr]
        "FairLock": lambda: fair.acquire().release(),  # type: ignore[union-attr]
        "ReadWriteLock read": lambda: rw.read.acquire().release(),  # type: ignore[union-attr]
        "ReadWriteLock write": lambda: rw.write.acquire().release(),  # type: ignore[union-attr]
        "Semaphore": lambda: sem.acquire().release(),  # type: ignore[union-attr]
        "CountDownLatch (set, count down)": latch_cycle,
        "MultiLock of 2": lambda: multi.acquire().release(),  # type: ignore[union-attr]
    }
    out = interleaved(
        {name: per_cycle(r, cycle) for name, cycle in cycles.items()}, PRIMITIVE_ROUNDS
    )
    for c in (client, r, other):
        c.close()
    return out


def print_primitives(title: str, kinds: dict[str, float]) -> None:
    """The table of :func:`primitives`' ``kinds``, headed ``title``."""
    print(f"{title}: server µs per uncontended cycle through the public API")
    print("(acquire + release, not pipelined; every command's time in INFO commandstats;")
    print(f"the lower quartile of {PRIMITIVE_ROUNDS} interleaved rounds of 1,000 cycles)")
    print("| primitive | µs per cycle | x Lock's |")
    print("|---|--:|--:|")
    for label, us in kinds.items():
        print(f"| {label} | {us:.1f} | {us / kinds['Lock']:.2f} |")


def lock_sources(src: str) -> tuple[str, str]:
    """The ``Lock``'s acquire and release scripts as the tree at ``src`` (its
    ``src`` folder) builds them."""
    code = (
        "import json, sys; from tenure._scripts import LOCK_ACQUIRE as a, LOCK_RELEASE as r; "
        "json.dump([a.source.decode(), r.source.decode()], sys.stdout)"
    )
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, check=True, text=True
    )
    acquire, release = json.loads(out.stdout)
    return acquire, release


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", help="redis-server/valkey-server to start")
    parser.add_argument(
        "--without-promises",
        action="store_true",
        help="no benchmark-only builds (for an older tree's scripts: PYTHONPATH=<it>/src)",
    )
    parser.add_argument(
        "--only-primitives",
        action="store_true",
        help="only the table of every primitive's uncontended cycle",
    )
    parser.add_argument(
        "--against",
        metavar="SRC",
        help="another tree's src folder: its Lock cycle and hand-off in the same rounds",
    )
    args = parser.parse_args(argv)
    against = lock_sources(args.against) if args.against else None
    with ServerProcess(args.server) as server:
        r = redis.Redis.from_url(server.url)
        info = r.info("server")
        name = info.get("server_name") or "redis"
        if args.only_primitives:
            version = info.get("valkey_version") or info["redis_version"]
            print_primitives(f"{name} {version}", primitives(server.url))
            return 0
        acquire, release = LOCK_ACQUIRE.source.decode(), LOCK_RELEASE.source.decode()
        bare_a, bare_r = without_acl_guard(acquire), without_acl_guard(release)
        parts: dict[str, list[tuple[float, float]]] = {
            label: []
            for label in (
                "tenure `Lock`, as sent",
                "the leanest scripts",
                "Redisson's, fenced",
                "tenure, a contended hand-off",
            )
        }
        rows_in = {
            "tenure's scripts, as sent": split(
                r, per_call(r, acquire, release), parts["tenure `Lock`, as sent"]
            ),
            "the same, a token without a label": per_call(r, acquire, release, token=TOKEN),
            "the same without the ACL guard": per_call(r, bare_a, bare_r),
            "leanest scripts with the same uncontended promises": split(
                r, per_call(r, LEAN_ACQUIRE, LEAN_RELEASE), parts["the leanest scripts"]
            ),
        }
        anchors_in = {
            "Redisson's RedissonLock, re-written (hash lock, release record)": anchor_per_call(
                r, ANCHOR_ACQUIRE
            ),
            "the same with RFencedLock's fence (INCR)": split(
                r, anchor_per_call(r, ANCHOR_FENCED_ACQUIRE), parts["Redisson's, fenced"]
            ),
        }
        promises_in = {
            label: per_call(r, switched_off(bare_a, rules_a), switched_off(bare_r, rules_r))
            for label, (rules_a, rules_r) in PROMISES.items()
            if not args.without_promises
        }
        listener = r.pubsub()  # type: ignore[no-untyped-call]
        listener.subscribe(WAKE_PREFIX + "wa", WAKE_PREFIX + "wb")  # (the hand-offs' waiters)
        try:
            times = interleaved(
                {
                    **rows_in,
                    **anchors_in,
                    **promises_in,
                    "handoff": split(
                        r,
                        per_handoff(r, acquire, release),
                        parts["tenure, a contended hand-off"],
                        calls=2,
                    ),
                    "handoff without the ACL guard": per_handoff(r, bare_a, bare_r),
                    **(
                        {
                            "against": per_call(r, *against),
                            "handoff against": per_handoff(r, *against),
                        }
                        if against
                        else {}
                    ),
                }
            )
        finally:
            listener.close()
        rows = {label: times[label] for label in rows_in}
        anchors = {label: times[label] for label in anchors_in}
        base = rows["the same without the ACL guard"]
        promises = {"the ACL guard": rows["tenure's scripts, as sent"] - base}
        promises.update({label: base - times[label] for label in promises_in})
        handoffs = {
            "tenure's scripts, as sent": times["handoff"],
            "the same without the ACL guard": times["handoff without the ACL guard"],
        }
        floor_set, floor_eval = floor_per_call(r)
        kinds = primitives(server.url)
    print(f"{name} {info.get('valkey_version') or info['redis_version']}: server µs per cycle")
    print(f"(the lower quartile of {ROUNDS} interleaved rounds of {CYCLES:,} pipelined cycles)")
    print("| scripts | µs per EVALSHA | µs per cycle (2 calls) |")
    print("|---|--:|--:|")
    for label, us in rows.items():
        print(f"| {label} | {us:.1f} | {2 * us:.1f} |")
    print(f"| raw floor (SET NX PX + EVALSHA) | {floor_eval:.1f} | {floor_set + floor_eval:.1f} |")
    for label, us in anchors.items():
        print(f"| {label} | {us:.1f} | {2 * us:.1f} |")
    print()
    print("What each promise costs an uncontended cycle (server µs per cycle, measured by")
    print("switching it off alone in a benchmark-only build of the scripts without the")
    print("ACL guard; the guard's own row against the scripts as sent)")
    print("| promise | µs per cycle | share of the cycle as sent |")
    print("|---|--:|--:|")
    whole = 2 * rows["tenure's scripts, as sent"]
    for label, us in promises.items():
        print(f"| {label} | {2 * us:.1f} | {2 * us / whole:.0%} |")
    print()
    print("Where a cycle's server time goes: the commands the scripts run (their own rows")
    print("in INFO commandstats) and the rest of each EVALSHA (Lua, each call's argument")
    print("and reply conversion, the KEYS and ARGV tables); µs per cycle or hand-off (2")
    print("calls), lower quartiles")
    print("| scripts | the commands | the rest |")
    print("|---|--:|--:|")
    for label, rounds in parts.items():
        own = statistics.quantiles([p[0] for p in rounds], n=4)[0]
        rest = statistics.quantiles([p[1] for p in rounds], n=4)[0]
        print(f"| {label} | {2 * own:.1f} | {2 * rest:.1f} |")
    print()
    print_primitives("Every primitive", kinds)
    print()
    print("Contended: server µs per hand-off (a waiter's attempt that queues + the release")
    print("that hands the lock to it)")
    print("| scripts | µs per hand-off (2 calls) |")
    print("|---|--:|")
    for label, us in handoffs.items():
        print(f"| {label} | {us:.1f} |")
    print()
    print("A contended hand-off against an uncontended cycle (the same rounds)")
    print("| scripts | µs per cycle | µs per hand-off | hand-off ÷ cycle |")
    print("|---|--:|--:|--:|")
    cycle = 2 * rows["tenure's scripts, as sent"]
    print(
        f"| this tree's | {cycle:.1f} | {times['handoff']:.1f} | {times['handoff'] / cycle:.2f} |"
    )
    if against:
        cycle = 2 * times["against"]
        handoff = times["handoff against"]
        print(f"| {args.against}'s | {cycle:.1f} | {handoff:.1f} | {handoff / cycle:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
