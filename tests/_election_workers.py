"""Functions run in worker processes by the election tests (spawned, so they
live in an importable module)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import redis

from tenure import Election, FencedKey, NotOwnedError


def campaign_rounds(url: str, name: str, rounds: int, index: int) -> list[tuple[int, int]]:
    """Lead ``rounds`` terms of ``name`` one after another; in each, check that
    nobody else is inside (``<name>:inside``, counted in Redis) and write the
    external register ``<name>:register`` with the term (it refuses a stale
    term). Returns ``(term, index)`` per term led."""
    client = redis.Redis.from_url(url)
    election = Election(client, name, ttl=5, label=f"worker-{index}")
    register = FencedKey(client, f"{name}:register")
    led = []
    for _ in range(rounds):
        leadership = election.campaign(timeout=60)
        assert leadership is not None
        with leadership:
            assert client.incr(f"{name}:inside") == 1, "two leaders at once"
            register.set(f"{index}", fence=leadership.term)
            time.sleep(0.002)
            assert client.decr(f"{name}:inside") == 0
            led.append((leadership.term, index))
    return led


def lead_until_poked(url: str, name: str, ttl: float, folder: str) -> None:
    """Lead ``name`` (label ``"victim"``), proclaim ``"first"``, write the term to
    ``<folder>/term``, then wait; once ``<folder>/poke`` exists (after a
    SIGSTOP and SIGCONT, say), proclaim ``"late"`` and write what happened to
    ``<folder>/outcome`` (``refused`` or ``accepted``), and exit."""
    here = Path(folder)
    election = Election(redis.Redis.from_url(url), name, ttl=ttl, label="victim")
    leadership = election.campaign(timeout=30)
    assert leadership is not None
    leadership.proclaim("first")
    (here / "term.tmp").write_text(f"{leadership.term} {os.getpid()}")
    (here / "term.tmp").rename(here / "term")
    while not (here / "poke").exists():
        time.sleep(0.01)
    try:
        leadership.proclaim("late")
        outcome = "accepted"
    except NotOwnedError:
        outcome = "refused"
    lost = "lost" if leadership.lost.is_set() else "held"
    (here / "outcome.tmp").write_text(f"{outcome} {lost}")
    (here / "outcome.tmp").rename(here / "outcome")


def redlock_campaign_rounds(
    urls: list[str], name: str, rounds: int, index: int, live: int
) -> list[tuple[float, float, int]]:
    """Lead ``rounds`` terms of the RedlockElection ``name`` over ``urls``, one
    after another; in each, check that nobody else is inside (``<name>:inside``,
    counted on the master ``live``) and write the external register
    ``<name>:register`` there with the term (it refuses a stale term).
    Returns ``(elected, resigning, term)`` per term led (monotonic clock)."""
    from tenure import RedlockElection

    clients = [redis.Redis.from_url(url) for url in urls]
    election = RedlockElection(clients, name, ttl=2, label=f"worker-{index}")
    register = FencedKey(clients[live], f"{name}:register")
    led = []
    for _ in range(rounds):
        leadership = election.campaign(timeout=60)
        assert leadership is not None
        with leadership:
            elected = time.monotonic()
            assert clients[live].incr(f"{name}:inside") == 1, "two leaders at once"
            register.set(f"{index}", fence=leadership.term)
            time.sleep(0.002)
            assert clients[live].decr(f"{name}:inside") == 0
            led.append((elected, time.monotonic(), leadership.term))
    return led


def redlock_lead_forever(urls: list[str], name: str, ttl: float, elected: Any) -> None:
    """Lead the RedlockElection ``name`` over ``urls`` (label ``"doomed"``),
    set ``elected``, then sleep until killed."""
    from tenure import RedlockElection

    clients = [redis.Redis.from_url(url) for url in urls]
    leadership = RedlockElection(clients, name, ttl=ttl, label="doomed").campaign(timeout=30)
    assert leadership is not None
    elected.set()
    time.sleep(3600)
