"""Election and AsyncElection against real servers: one leader at a time (checked
with terms and an external register that refuses stale terms), failover when
the leader dies, stalls, resigns or loses its connection, and observers that
see every change in term order."""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from _election_tasks import (
    tasks_take_turns,
    work_cancelled_when_lost,
    work_ends_before_a_cancelled_call,
)
from _election_workers import campaign_rounds
from redis.backoff import ConstantBackoff
from redis.retry import Retry

from tenure import (
    AlreadyHeldError,
    AsyncElection,
    AsyncFencedKey,
    Election,
    ElectionEvent,
    InvalidArgument,
    Leadership,
    LockLostError,
    NotOwnedError,
)
from tenure._cli import main
from tenure._drivers import _sync as _driver
from tenure._plans import election as election_plans
from tenure._scripts import FAIR_RELEASE
from tenure._server import ServerProcess

SPAWN = multiprocessing.get_context("spawn")
MakeServer = Callable[..., ServerProcess]
TESTS = Path(__file__).resolve().parent

#: Retries that outlast a server restart, for the clients of the restart test.
RESTART_RETRY: dict[str, Any] = {"backoff": ConstantBackoff(0.05), "retries": 100}


def wait_until(check: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting {what}"
        time.sleep(0.005)


def candidates(r: redis.Redis, name: str) -> int:
    return int(r.zcard(f"tenure:{{{name}}}:election:waiters"))


class Candidate(threading.Thread):
    """A thread that campaigns (its own client) and records when it was elected."""

    def __init__(self, url: str, name: str, ttl: float = 5.0, label: str = "next") -> None:
        super().__init__(daemon=True)
        self.election = Election(redis.Redis.from_url(url), name, ttl=ttl, label=label)
        self.leadership: Leadership | None = None
        self.at = 0.0

    def run(self) -> None:
        self.leadership = self.election.campaign(timeout=30)
        self.at = time.monotonic()

    def elected(self, timeout: float = 30.0) -> Leadership:
        self.join(timeout)
        assert self.leadership is not None, "the candidate was not elected"
        return self.leadership


class Observer(threading.Thread):
    """A thread that collects an election's changes (its own client)."""

    def __init__(self, client: redis.Redis, name: str) -> None:
        super().__init__(daemon=True)
        self.events: list[ElectionEvent] = []
        self.iterator = Election(client, name).observe(timeout=5)

    def run(self) -> None:
        for event in self.iterator:
            self.events.append(event)

    def changes(self) -> list[tuple[str, int]]:
        return [(e.change, e.term) for e in self.events]

    def until(self, count: int, timeout: float = 10.0) -> list[tuple[str, int]]:
        what = f"for {count} events: {self.changes()}"
        wait_until(lambda: len(self.events) >= count, timeout, what)
        return self.changes()


def subscribed(r: redis.Redis, name: str) -> bool:
    return bool(r.pubsub_channels(f"tenure:{{{name}}}:election:feed"))


def in_term_order(events: list[ElectionEvent]) -> bool:
    return all(a.term <= b.term for a, b in itertools.pairwise(events))


# --- basics ---------------------------------------------------------------------------------


def test_campaign_proclaim_leader_resign(r: redis.Redis) -> None:
    election = Election(r, "basics", ttl=5, label="alpha")
    assert election.leader() is None
    leadership = election.campaign()
    assert leadership is not None and leadership.term > 0
    assert leadership.label == "alpha"
    lead = election.leader()
    assert lead is not None
    assert (lead.label, lead.term, lead.value) == ("alpha", leadership.term, None)
    assert lead.since > 0 and lead.ttl is not None and 0 < lead.ttl <= 5
    election.proclaim("10.0.0.7:8080")
    assert election.leader().value == b"10.0.0.7:8080"  # type: ignore[union-attr]
    leadership.proclaim(b"\xff\x00binary")
    assert election.leader().value == b"\xff\x00binary"  # type: ignore[union-attr]
    assert election.info().fence == leadership.term
    election.resign()
    assert election.leader() is None
    with pytest.raises(NotOwnedError):
        election.proclaim("after")
    again = election.campaign()
    assert again is not None and again.term > leadership.term
    again.resign()


def test_a_proclaim_retried_with_its_call_id_is_made_once(r: redis.Redis) -> None:
    election = Election(r, "retried", ttl=5)
    leadership = election.campaign()
    assert leadership is not None
    keys = election._keys
    for _ in range(2):  # the same call twice: a retry after its reply was lost
        plan = election_plans.announce(
            keys, leadership.owner, leadership.term, "a", b"v", op="0123abcd"
        )
        _driver.run(r, plan)
    entries: Any = r.xrange(keys.log)
    assert [e[1][b"event"] for e in entries] == [b"elected", b"proclaimed"]
    leadership.proclaim("v")  # another call: made
    entries = r.xrange(keys.log)
    assert len(entries) == 3
    leadership.resign()


def test_context_manager_resigns_and_terms_grow(r: redis.Redis) -> None:
    election = Election(r, "blocks", ttl=5)
    terms = []
    for _ in range(3):
        leadership = election.campaign()
        assert leadership is not None
        with leadership:
            terms.append(leadership.term)
    assert terms == sorted(set(terms))
    assert election.leader() is None


def _logged(r: redis.Redis, name: str) -> list[str]:
    """The changes in the election's log, oldest first."""
    log = r.xrange(f"tenure:{{{name}}}:election:log")
    return [fields[b"event"].decode() for _, fields in log]  # type: ignore[index,union-attr]


def _lost_the_resignation(r: redis.Redis) -> None:
    """The server lost its scripts, then another program loaded the fair
    lock's release (any FairLock's), but not the resignation's."""
    r.script_flush()
    r.script_load(FAIR_RELEASE.source)


@pytest.mark.parametrize("pool", ["quick path", "blocking pool"])
def test_a_resignation_is_logged_when_the_server_lost_its_script(
    r: redis.Redis, url: str, pool: str
) -> None:
    """The release that follows a resignation in one round trip never runs
    before it: a server without the resignation's script still logs the term
    resigned (not lost, as its release would have made it)."""
    if pool == "quick path":
        client = redis.Redis.from_url(url)
    else:  # (no quick path: the client's own pipeline)
        client = redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(url))
    leadership = Election(client, "flushed", ttl=5).campaign(timeout=5)
    assert leadership is not None
    _lost_the_resignation(r)
    leadership.resign()
    assert _logged(r, "flushed") == ["elected", "resigned"]
    again = Election(client, "flushed", ttl=5).campaign(timeout=5)
    assert again is not None
    again.resign()
    assert _logged(r, "flushed") == ["elected", "resigned"] * 2
    client.close()


def test_an_async_resignation_is_logged_when_the_server_lost_its_script(
    r: redis.Redis, url: str
) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        leadership = await AsyncElection(client, "flushed", ttl=5).campaign(timeout=5)
        assert leadership is not None
        _lost_the_resignation(r)
        await leadership.resign()
        await client.aclose()

    asyncio.run(main())
    assert _logged(r, "flushed") == ["elected", "resigned"]


def test_bad_values_are_refused_by_name(r: redis.Redis) -> None:
    election = Election(r, "values", ttl=5)
    leadership = election.campaign()
    assert leadership is not None
    with pytest.raises(InvalidArgument, match="value must be bytes or str, not int 42"):
        leadership.proclaim(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"value 'xxxx.* is 5000 bytes"):
        leadership.proclaim("x" * 5000)
    with pytest.raises(InvalidArgument, match="label must be a str"):
        Election(r, "values", label=7)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="UTF-8"):
        Election(r, "values", label="\udc80")
    with pytest.raises(InvalidArgument, match="on_deposed must be callable, not 3"):
        Election(r, "values", on_deposed=3)  # type: ignore[arg-type]
    assert Election(r, "values", label="web 1\n").label == "web 1"
    assert len(Election(r, "values", label="x" * 200).label) == 96
    assert election.leader().value is None  # type: ignore[union-attr]
    leadership.resign()


def test_on_elected_and_on_deposed(r: redis.Redis, url: str) -> None:
    calls: list[tuple[str, int]] = []
    election = Election(
        r,
        "callbacks",
        ttl=1,
        on_elected=lambda lead: calls.append(("elected", lead.term)),
        on_deposed=lambda lead: calls.append(("deposed", lead.term)),
    )
    leadership = election.campaign()
    assert leadership is not None
    assert calls == [("elected", leadership.term)]
    r.delete("tenure:{callbacks}:election")  # the lease is gone: the watchdog finds out
    assert leadership.lost.wait(3)
    wait_until(lambda: len(calls) == 2)
    assert calls[1] == ("deposed", leadership.term)


# --- one leader at a time --------------------------------------------------------------------


def test_one_leader_among_threads(url: str, r: redis.Redis) -> None:
    with_threads: list[list[tuple[int, int]]] = []
    workers = [
        threading.Thread(target=lambda i=i: with_threads.append(campaign_rounds(url, "t", 5, i)))
        for i in range(4)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    terms = [term for led in with_threads for term, _ in led]
    assert len(terms) == 20 and len(set(terms)) == 20
    assert int(r.get("t:inside") or 0) == 0


def test_one_leader_among_processes(url: str, r: redis.Redis) -> None:
    with ProcessPoolExecutor(3, mp_context=SPAWN) as pool:
        led = [
            f.result(90) for f in [pool.submit(campaign_rounds, url, "p", 4, i) for i in range(3)]
        ]
    terms = [term for each in led for term, _ in each]
    assert len(set(terms)) == 12
    # every worker led, and the register holds the last term's writer
    assert all(len(each) == 4 for each in led)
    last = max((t, i) for each in led for t, i in each)
    assert r.get("p:register") == str(last[1]).encode()


def test_one_leader_among_tasks(url: str) -> None:
    async def main() -> list[int]:
        client = redis.asyncio.Redis.from_url(url)
        register = AsyncFencedKey(client, "a:register")
        elections = [AsyncElection(client, "a", ttl=5, label=f"task-{i}") for i in range(4)]

        async def write(i: int, term: int) -> None:
            await register.set(str(i), fence=term)

        holds = await tasks_take_turns(elections, 5, write)
        await client.aclose()
        return [term for _, _, term in holds]

    terms = asyncio.run(main())
    assert len(terms) == 20 and terms == sorted(set(terms))


# --- failover ---------------------------------------------------------------------------------


def _victim(url: str, name: str, ttl: float, folder: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start a process that leads ``name`` (see ``lead_until_poked``); return it
    and its term once it leads."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from _election_workers import lead_until_poked;"
        "lead_until_poked(sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(TESTS), url, name, str(ttl), str(folder)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    wait_until(lambda: (folder / "term").exists(), 30, "for the victim to lead")
    return proc, int((folder / "term").read_text().split()[0])


def test_leader_killed_the_next_candidate_takes_over_within_the_ttl(
    url: str, r: redis.Redis, tmp_path: Path
) -> None:
    victim, term = _victim(url, "kill", 1.0, tmp_path)
    observer = Observer(redis.Redis.from_url(url), "kill")
    observer.start()
    assert observer.until(1) == [("proclaimed", term)]
    candidate = Candidate(url, "kill", ttl=5)
    candidate.start()
    wait_until(lambda: candidates(r, "kill") == 1, what="for the candidate to queue")
    killed = time.monotonic()
    victim.kill()
    victim.wait(10)
    leadership = candidate.elected()
    assert candidate.at - killed < 1.0 + 0.5, "not elected within the ttl"
    assert leadership.term > term
    assert observer.until(3)[1:] == [("lost", term), ("elected", leadership.term)]
    leadership.resign()


def test_paused_leader_is_replaced_and_its_proclaim_refused(
    url: str, r: redis.Redis, tmp_path: Path
) -> None:
    victim, term = _victim(url, "pause", 0.5, tmp_path)
    try:
        candidate = Candidate(url, "pause", ttl=5)
        candidate.start()
        wait_until(lambda: candidates(r, "pause") == 1, what="for the candidate to queue")
        victim.send_signal(signal.SIGSTOP)
        leadership = candidate.elected(10)
        assert leadership.term > term
        leadership.proclaim("second")
        victim.send_signal(signal.SIGCONT)
        (tmp_path / "poke").touch()
        wait_until(lambda: (tmp_path / "outcome").exists(), 10, "for the victim's proclaim")
        # refused in Redis, whatever the victim's watchdog had seen by then
        assert (tmp_path / "outcome").read_text().split()[0] == "refused"
        lead = Election(r, "pause").leader()
        assert lead is not None and (lead.term, lead.value) == (leadership.term, b"second")
        leadership.resign()
    finally:
        victim.send_signal(signal.SIGCONT)
        victim.kill()
        victim.wait(10)


def test_resignation_hands_over_at_once(url: str, r: redis.Redis) -> None:
    first = Election(r, "resign", ttl=30).campaign()
    assert first is not None
    candidate = Candidate(url, "resign")
    candidate.start()
    wait_until(lambda: candidates(r, "resign") == 1)
    resigned = time.monotonic()
    first.resign()
    second = candidate.elected()
    assert candidate.at - resigned < 0.5
    assert second.term > first.term
    second.resign()


def test_leader_that_loses_its_connection_is_deposed(
    url: str, r: redis.Redis, server: ServerProcess
) -> None:
    r.execute_command("ACL", "SETUSER", "leader", "reset", "on", ">pw", "~*", "&*", "+@all")  # type: ignore[no-untyped-call]
    client = redis.Redis.from_url(server.url, username="leader", password="pw")
    deposed = threading.Event()
    election = Election(client, "conn", ttl=1, on_deposed=lambda _: deposed.set())
    leadership = election.campaign()
    assert leadership is not None
    candidate = Candidate(url, "conn")
    candidate.start()
    wait_until(lambda: candidates(r, "conn") == 1)
    try:
        # its connections are cut, and it can't connect again
        r.execute_command("ACL", "SETUSER", "leader", "off")  # type: ignore[no-untyped-call]
        r.client_kill_filter(user="leader")
        second = candidate.elected(10)
        assert second.term > leadership.term
        assert deposed.wait(5) and leadership.lost.is_set()
    finally:
        r.execute_command("ACL", "SETUSER", "leader", "on")  # type: ignore[no-untyped-call]
    with pytest.raises(NotOwnedError):
        leadership.proclaim("too late")
    second.resign()
    r.execute_command("ACL", "DELUSER", "leader")  # type: ignore[no-untyped-call]


def test_forced_release_deposes_the_leader(
    url: str, r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    leadership = Election(r, "forced", ttl=1, label="stuck").campaign()
    assert leadership is not None
    candidate = Candidate(url, "forced")
    candidate.start()
    wait_until(lambda: candidates(r, "forced") == 1)
    assert main(["--url", url, "release", "--force", "--election", "forced"]) == 0
    out = capsys.readouterr().out
    assert "removed" in out and "handed to the first waiter" in out
    second = candidate.elected(5)
    assert second.term > leadership.term
    with pytest.raises(NotOwnedError):
        leadership.proclaim("deposed")
    assert leadership.lost.wait(3)
    entries: Any = r.xrange("tenure:{forced}:election:log")
    assert [e[1][b"event"] for e in entries][-2:] == [b"lost", b"elected"]
    second.resign()


# --- observers --------------------------------------------------------------------------------


def test_observer_sees_every_change_in_term_order(url: str, r: redis.Redis) -> None:
    a = Election(r, "watch", ttl=5, label="a")
    first = a.campaign()
    assert first is not None
    first.proclaim("x")
    observer = Observer(redis.Redis.from_url(url), "watch")
    observer.start()
    assert observer.until(1) == [("proclaimed", first.term)]  # where it stands
    first.proclaim("y")
    candidate = Candidate(url, "watch", label="b")
    candidate.start()
    wait_until(lambda: candidates(r, "watch") == 1)
    first.resign()
    second = candidate.elected()
    # a lost subscription: the observer subscribes again and reads the log
    assert r.client_kill_filter(_type="pubsub") >= 1
    second.proclaim("z")
    second.resign()
    t1, t2 = first.term, second.term
    assert observer.until(6) == [
        ("proclaimed", t1),
        ("proclaimed", t1),
        ("resigned", t1),
        ("elected", t2),
        ("proclaimed", t2),
        ("resigned", t2),
    ]
    assert [e.value for e in observer.events] == [b"x", b"y", b"y", None, b"z", b"z"]
    assert [e.label for e in observer.events] == ["a"] * 3 + ["b"] * 3
    time.sleep(0.2)
    assert len(observer.events) == 6  # each once


def test_an_observer_that_starts_first_sees_the_election(url: str, r: redis.Redis) -> None:
    observer = Observer(redis.Redis.from_url(url), "first")
    observer.start()
    wait_until(lambda: subscribed(r, "first"))
    time.sleep(0.1)  # (its first read made: else it starts from the standing state)
    leadership = Election(r, "first", ttl=5).campaign()
    assert leadership is not None
    leadership.resign()
    assert observer.until(2) == [("elected", leadership.term), ("resigned", leadership.term)]


def test_observer_starts_with_the_current_leader_and_sees_an_expiry(r: redis.Redis) -> None:
    leadership = Election(r, "late", ttl=0.5, label="old").campaign()
    assert leadership is not None
    leadership.proclaim("here")
    observer = Observer(r, "late")
    observer.start()
    assert observer.until(1) == [("proclaimed", leadership.term)]
    assert observer.events[0].value == b"here"
    # a leader that stops renewing: nobody publishes, the observer finds out
    r.pexpire("tenure:{late}:election", 1)
    assert observer.until(2, timeout=3) == [
        ("proclaimed", leadership.term),
        ("lost", leadership.term),
    ]


def test_observer_across_a_server_restart(make_server: MakeServer) -> None:
    s = make_server()
    retrying = redis.Redis.from_url(s.url, retry=Retry(**RESTART_RETRY))
    leadership = Election(retrying, "restart", ttl=1, label="before").campaign()
    assert leadership is not None
    observer = Observer(redis.Redis.from_url(s.url, retry=Retry(**RESTART_RETRY)), "restart")
    observer.start()
    assert observer.until(1) == [("elected", leadership.term)]
    s.restart()  # no persistence: the election's keys are gone
    assert leadership.lost.wait(5)
    after = Election(retrying, "restart", ttl=5, label="after").campaign(timeout=10)
    assert after is not None and after.term > leadership.term
    assert observer.until(3) == [
        ("elected", leadership.term),
        ("lost", leadership.term),
        ("elected", after.term),
    ]
    assert in_term_order(observer.events)
    after.resign()


def test_async_observe(url: str) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        election = AsyncElection(client, "aobs", ttl=5, label="a")
        seen: list[tuple[str, int]] = []
        leadership = await election.campaign()
        assert leadership is not None

        async def watch() -> None:
            async for event in AsyncElection(client, "aobs").observe():
                seen.append((event.change, event.term))

        watcher = asyncio.create_task(watch())
        while not seen:  # where it stands
            await asyncio.sleep(0.005)
        await leadership.proclaim("v")
        await leadership.resign()
        while len(seen) < 3:
            await asyncio.sleep(0.005)
        watcher.cancel()
        await client.aclose()
        t = leadership.term
        assert seen == [("elected", t), ("proclaimed", t), ("resigned", t)]

    asyncio.run(asyncio.wait_for(main(), 20))


# --- run_while_leader ----------------------------------------------------------------------------


def test_async_run_while_leader_cancels_the_work_when_lost(url: str) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        election = AsyncElection(client, "arun", ttl=1)
        assert await election.run_while_leader(_answer) == 42
        assert await election.leader() is None  # resigned
        # deposed at once: its lease's key deleted
        assert await work_cancelled_when_lost(
            election, lambda: client.delete("tenure:{arun}:election")
        )
        await client.aclose()

    asyncio.run(main())


async def _answer(leadership: Any) -> int:
    return 42


def test_a_cancelled_run_while_leader_ends_its_work_first(url: str) -> None:
    """The caller's task cancelled while the work runs: the work is cancelled
    and has ended (its cleanup too) when the call raises, and the leadership
    is resigned after it."""

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        election = AsyncElection(client, "acancel", ttl=5)
        assert await work_ends_before_a_cancelled_call(election) == ["cleaned"]
        assert await election.run_while_leader(_answer, timeout=1) == 42
        await client.aclose()

    asyncio.run(main())


def test_sync_run_while_leader_signals_the_work(r: redis.Redis) -> None:
    election = Election(r, "srun", ttl=1)
    term = election.run_while_leader(lambda leadership: leadership.term)
    assert term is not None and term > 0
    steps: list[int] = []

    def work(leadership: Leadership) -> None:
        r.delete("tenure:{srun}:election")
        while not leadership.lost.wait(0.05):  # the stop signal
            steps.append(1)

    started = time.monotonic()
    with pytest.raises(LockLostError):
        election.run_while_leader(work)
    assert time.monotonic() - started < 3


def test_observe_ends_after_a_quiet_timeout(r: redis.Redis) -> None:
    leadership = Election(r, "quiet", ttl=30).campaign()
    assert leadership is not None
    started = time.monotonic()
    events = list(Election(r, "quiet").observe(timeout=0.3))
    assert [(e.change, e.term) for e in events] == [("elected", leadership.term)]
    assert 0.3 <= time.monotonic() - started < 2
    leadership.resign()


def test_observe_with_no_time_gives_the_current_state(r: redis.Redis) -> None:
    """The first event is the current state, whatever the timeout: with 0,
    only that (a snapshot), and none when nobody leads."""
    assert list(Election(r, "snap").observe(timeout=0)) == []
    leadership = Election(r, "snap", ttl=30).campaign()
    assert leadership is not None
    events = list(Election(r, "snap").observe(timeout=0))
    assert [(e.change, e.term) for e in events] == [("elected", leadership.term)]
    leadership.resign()


def test_campaigning_again_while_leading_is_refused(r: redis.Redis) -> None:
    election = Election(r, "twice", ttl=5)
    leadership = election.campaign()
    assert leadership is not None
    with pytest.raises(AlreadyHeldError):
        election.campaign(timeout=0)
    # another thread is another candidate: it waits its turn
    assert in_thread(lambda: election.campaign(timeout=0.05)) is None
    leadership.resign()


def test_run_while_leader_resigns_when_the_work_raises(r: redis.Redis) -> None:
    election = Election(r, "raises", ttl=5)

    def fail(leadership: Leadership) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        election.run_while_leader(fail)
    assert election.leader() is None
    assert Election(r, "raises").run_while_leader(lambda _: "next", timeout=1) == "next"


def in_thread(fn: Callable[[], Any]) -> Any:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(10)
    return out[0]


def test_a_failing_on_elected_resigns(r: redis.Redis) -> None:
    def refuse(leadership: Leadership) -> None:
        raise RuntimeError("not today")

    with pytest.raises(RuntimeError, match="not today"):
        Election(r, "refused", ttl=5, on_elected=refuse).campaign()
    assert Election(r, "refused").leader() is None


def test_an_on_elected_raising_a_refusal_ends_the_campaign(r: redis.Redis) -> None:
    # a NotOwnedError of on_elected's own (another lease it touched) is its
    # error, not the announcement's: campaign raises it, and stands no more
    calls: list[int] = []

    def refuse(leadership: Leadership) -> None:
        calls.append(leadership.term)
        if len(calls) == 1:  # (once: a campaign that stood again would then win)
            raise NotOwnedError("elsewhere", None, "on_elected's own refusal")

    election = Election(r, "refused-own", ttl=5, on_elected=refuse)
    with pytest.raises(NotOwnedError, match="on_elected's own refusal"):
        election.campaign(timeout=2)
    assert len(calls) == 1
    assert Election(r, "refused-own").leader() is None


def test_an_on_elected_that_makes_a_coroutine_is_refused(r: redis.Redis, url: str) -> None:
    """on_elected runs before campaign returns, in the campaigning call: an
    ``async def`` one is refused when given; a plain one that returns a
    coroutine (which nothing would run) resigns and raises at the campaign."""

    async def elected(leadership: Any) -> None:
        pass

    for cls, client in ((Election, r), (AsyncElection, redis.asyncio.Redis.from_url(url))):
        with pytest.raises(InvalidArgument, match="on_elected runs in the campaigning call"):
            cls(client, "coro-elected", on_elected=elected)  # type: ignore[arg-type]
    election = Election(r, "coro-elected", ttl=5, on_elected=lambda lead: elected(lead))
    with pytest.raises(InvalidArgument, match="on_elected runs in the campaigning call"):
        election.campaign(timeout=2)
    assert Election(r, "coro-elected").leader() is None


def test_a_quiet_leader_keeps_its_record_past_the_keep_time(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the record and the log outlive their last write by KEEP_MS (a week):
    # a leader that leads longer without a write must not be forgotten, so
    # the watchdog's renewals keep them (here KEEP_MS made 1 s)
    monkeypatch.setattr(election_plans, "KEEP_MS", 1000)
    election = Election(r, "quiet", ttl=0.5, label="quiet-one")
    leadership = election.campaign(timeout=5)
    assert leadership is not None
    leadership.proclaim("where")
    seen: list[tuple[str, bytes | None]] = []
    observer = threading.Thread(
        target=lambda: seen.extend(
            (e.change, e.value) for e in Election(r, "quiet").observe(timeout=2.5)
        )
    )
    observer.start()
    time.sleep(2.5)
    assert not leadership.lost.is_set()
    lead = Election(r, "quiet").leader()
    assert lead is not None
    assert (lead.label, lead.term, lead.value) == ("quiet-one", leadership.term, b"where")
    observer.join(10)
    assert seen == [("proclaimed", b"where")]  # (the state as it stands, then nothing)
    leadership.resign()
