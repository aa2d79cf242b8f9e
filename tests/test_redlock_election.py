"""RedlockElection over five independent server processes: one leader at a
time with two masters down (threads, processes, tasks; an external register
refuses stale terms), terms raised on a quorum and increasing across leaders
and restarts, a deposed leader refused, and readers that believe only the
quorum while a minority holds something else."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import inspect
import multiprocessing
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest
import redis
import redis.asyncio
import test_redlock
from _election_tasks import (
    tasks_take_turns,
    work_cancelled_when_lost,
    work_ends_before_a_cancelled_call,
)
from _election_workers import redlock_campaign_rounds, redlock_lead_forever
from _workers import Hold, check_history

from tenure import (
    AlreadyHeldError,
    AsyncRedlockElection,
    ElectionEvent,
    InvalidArgument,
    LockLostError,
    NoQuorumError,
    NotOwnedError,
    RedlockElection,
    RedlockLeadership,
    WrongTypeError,
    _ops,
)
from tenure._api._sync import redlock_election as _sync_election
from tenure._drivers import _sync as _driver
from tenure._keys import election_keys
from tenure._plans import election as election_plans
from tenure._plans.common import FENCE_KEEP_MS
from tenure._server import ServerProcess

pytestmark = pytest.mark.once

SPAWN = multiprocessing.get_context("spawn")

#: Redlock's tests' fixtures: five masters for the module, and a client per
#: master (each running and flushed) for each test.
masters = test_redlock.masters
clients = test_redlock.clients


def _keys(name: str) -> Any:
    return election_keys(name, prefix="tenure:")


class Watch(threading.Thread):
    """Collect a RedlockElection's changes in a thread."""

    def __init__(self, clients: list[redis.Redis], name: str, quiet: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.events: list[ElectionEvent] = []
        self.iterator = RedlockElection(clients, name).observe(timeout=quiet)

    def run(self) -> None:
        for event in self.iterator:
            self.events.append(event)

    def seen(self) -> list[tuple[str, int, bytes | None, int]]:
        return [(e.change, e.term, e.value, e.sequence) for e in self.events]


def test_arguments_are_checked(clients: list[redis.Redis]) -> None:
    with pytest.raises(InvalidArgument, match="odd number"):
        RedlockElection(clients[:4], "x")
    with pytest.raises(InvalidArgument, match="label"):
        RedlockElection(clients, "x", label=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="on_elected"):
        RedlockElection(clients, "x", on_elected=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="on_deposed must be callable, not 3"):
        RedlockElection(clients, "x", on_deposed=3)  # type: ignore[arg-type]
    election = RedlockElection(clients, "x", ttl=2)
    assert election.quorum == 3 and election.clients == tuple(clients) and election.ttl == 2


def test_the_term_is_raised_on_every_master_and_values_go_to_a_quorum(
    clients: list[redis.Redis],
) -> None:
    keys = _keys("cycle")
    # three masters (any quorum has one) mint fences far above the clock's:
    # the term, the largest its quorum minted, is above the two others' fences
    high = int(time.time() * 1e6) + 10**12
    for c in clients[:3]:
        c.set(keys.fence, high)
    election = RedlockElection(clients, "cycle", ttl=2, label="a")
    leadership = election.campaign(timeout=5)
    assert isinstance(leadership, RedlockLeadership)
    term = leadership.term
    assert term > high
    for c in clients:  # announced everywhere, every master's fence raised to the term
        record = c.hgetall(keys.record)
        assert record[b"term"] == str(term).encode() and record[b"state"] == b"active"
        assert int(c.get(keys.fence) or 0) >= term
    assert [int(c.get(keys.fence) or 0) for c in clients[3:]] == [term, term]
    leadership.proclaim("v1")
    leadership.proclaim(b"v2")
    lead = election.leader()
    assert lead is not None
    assert (lead.label, lead.term, lead.value, lead.sequence) == ("a", term, b"v2", 2)
    assert 0 < (lead.ttl or 0) <= 2
    election.resign()
    assert election.leader() is None
    for c in clients:
        record = c.hgetall(keys.record)
        assert (record[b"state"], record[b"end"]) == (b"ended", b"resigned")
    with pytest.raises(NotOwnedError):
        election.proclaim("after")
    following = election.campaign(timeout=5)
    assert following is not None and following.term > term
    following.resign()


def test_terms_increase_after_the_fences_minted_by_grants_expire(
    clients: list[redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = _keys("idle")
    # three masters (a clock ahead, say) mint fences far above the others'
    high = int(time.time() * 1e6) + 10**12
    for c in clients[:3]:
        c.set(keys.fence, high)
    election = RedlockElection(clients, "idle", ttl=0.3)
    first = election.campaign(timeout=5)
    assert first is not None and first.term > high
    time.sleep(0.5)  # (renewed by the watchdog)
    first.resign()
    _idle(clients, keys.fence)
    following = election.campaign(timeout=5)
    assert following is not None and following.term > first.term
    following.resign()
    # a candidate granted the lock on every master that dies before it announces
    doomed = RedlockElection(clients, "idle", ttl=0.3)
    with monkeypatch.context() as patch:
        patch.setattr(RedlockElection, "_announce_term", _interrupted)
        with pytest.raises(KeyboardInterrupt):
            doomed.campaign(timeout=5)
    _idle(clients, keys.fence)
    last = election.campaign(timeout=5)
    assert last is not None and last.term > following.term
    last.resign()


def _idle(clients: list[redis.Redis], fence: str) -> None:
    """The election idle past the keep of a grant's fence (FENCE_KEEP_MS):
    a fence key that would have expired by then is gone."""
    for c in clients:
        if 0 <= c.pttl(fence) <= FENCE_KEEP_MS:
            c.delete(fence)


def _interrupted(*_: object) -> None:
    raise KeyboardInterrupt


def _threads(urls: list[str], name: str, count: int, rounds: int, live: int) -> list[Hold]:
    results: list[list[tuple[float, float, int]]] = []
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            results.append(redlock_campaign_rounds(urls, name, rounds, index, live))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not errors, errors
    return [hold for led in results for hold in led]


def test_one_leader_at_a_time_among_threads_with_two_of_five_down(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    masters[0].stop()
    masters[3].stop()
    holds = _threads([s.url for s in masters], "threads", 4, 5, live=1)
    assert len(holds) == 20
    check_history(holds)  # no two terms overlap, and terms strictly increase
    assert int(clients[1].get("threads:inside") or 0) == 0


def test_one_leader_at_a_time_among_processes_with_two_of_five_down(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    masters[1].stop()
    masters[4].stop()
    urls = [s.url for s in masters]
    with ProcessPoolExecutor(3, mp_context=SPAWN) as pool:
        futures = [pool.submit(redlock_campaign_rounds, urls, "procs", 4, i, 2) for i in range(3)]
        holds = [h for f in futures for h in f.result(timeout=90)]
    assert len(holds) == 12
    check_history(holds)
    assert int(clients[2].get("procs:inside") or 0) == 0


def test_one_leader_at_a_time_among_tasks_with_two_of_five_down(
    masters: list[ServerProcess], clients: list[redis.Redis]
) -> None:
    masters[2].stop()
    masters[3].stop()

    async def main() -> list[Hold]:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        elections = [
            AsyncRedlockElection(aclients, "tasks", ttl=2, label=f"task-{i}") for i in range(4)
        ]
        holds = await tasks_take_turns(elections, 4)
        for c in aclients:
            await c.aclose()
        return holds

    holds = asyncio.run(main())
    assert len(holds) == 16
    check_history(holds)


def test_terms_increase_across_leaders_and_masters_restarted_empty(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    ttl = 0.5
    terms: list[int] = []
    for restarted in ((0, 1), (2, 3), (4, 0)):
        election = RedlockElection(clients, "restart", ttl=ttl)
        leadership = election.campaign(timeout=5)
        assert leadership is not None
        terms.append(leadership.term)
        leadership.resign()
        for i in restarted:
            masters[i].stop()
        time.sleep(ttl)  # a master restarted without its data stays out for a ttl
        for i in restarted:
            masters[i].start()
    last = RedlockElection(clients, "restart", ttl=ttl).campaign(timeout=5)
    assert last is not None
    terms.append(last.term)
    last.resign()
    assert terms == sorted(set(terms)), terms


def test_a_deposed_leaders_proclaim_is_refused_and_readers_follow_the_quorum(
    clients: list[redis.Redis],
) -> None:
    keys = _keys("depose")
    deposed: list[RedlockLeadership] = []
    first = RedlockElection(
        clients, "depose", ttl=1, label="first", on_deposed=deposed.append
    ).campaign(timeout=5)
    assert first is not None
    first.proclaim("first")
    # its lease ends on a quorum (as a pause past its ttl would end it)
    for c in clients[:3]:
        c.delete(keys.lock)
    second_election = RedlockElection(clients, "depose", ttl=1, label="second")
    second = second_election.campaign(timeout=5)
    assert second is not None and second.term > first.term
    # masters 3 and 4 still hold the first term on, with its value: a minority
    assert [c.hget(keys.record, "label") for c in clients[3:]] == [b"first", b"first"]
    lead = RedlockElection(clients, "depose").leader()
    assert lead is not None and (lead.label, lead.term, lead.value) == ("second", second.term, None)
    with pytest.raises(NotOwnedError):
        first.proclaim("late")
    again = RedlockElection(clients, "depose").leader()
    assert again is not None and (again.label, again.value) == ("second", None)
    assert first.lost.wait(3) and deposed == [first]  # (its renewals found it gone)
    second.resign()


def test_leader_and_observe_believe_the_quorum_not_a_stale_minority(
    clients: list[redis.Redis],
) -> None:
    name = "stale"
    keys = _keys(name)
    watch = Watch(clients, name, quiet=1.0)
    watch.start()
    time.sleep(0.3)  # (listening)
    election = RedlockElection(clients, name, ttl=2, label="a")
    leadership = election.campaign(timeout=5)
    assert leadership is not None
    term = leadership.term
    # what masters 3 and 4 hold before the proclaim, to put back after it:
    # two masters that missed it
    saved = [
        {key: (c.dump(key) or b"", c.pttl(key)) for key in (keys.record, keys.log)}
        for c in clients[3:]
    ]
    leadership.proclaim("one")
    for c, keys_saved in zip(clients[3:], saved, strict=True):
        for key, (dump, pttl) in keys_saved.items():
            c.restore(key, max(pttl, 0), dump, replace=True)
    # a proclaim that reached two masters only (its leader failed before the others)
    for c in clients[:2]:
        plan = election_plans.announce(keys, leadership.owner, term, "a", b"minority", seq=2)
        _driver.run(c, plan)
    values = [base64.b64decode(c.hget(keys.record, "value") or b"") for c in clients]
    assert values == [b"minority", b"minority", b"one", b"", b""]
    lead = election.leader()
    assert lead is not None and (lead.term, lead.value, lead.sequence) == (term, b"one", 1)
    leadership.resign()
    watch.join(10)  # (it ends once quiet for a second)
    assert watch.seen() == [
        ("elected", term, None, 0),
        ("proclaimed", term, b"one", 1),
        ("resigned", term, b"one", 1),
    ]


def test_observe_with_no_time_gives_the_current_state(clients: list[redis.Redis]) -> None:
    """As Election.observe: the current state first, whatever the timeout."""
    leadership = RedlockElection(clients, "snap", ttl=30).campaign(timeout=5)
    assert leadership is not None
    events = list(RedlockElection(clients, "snap").observe(timeout=0))
    assert [(e.change, e.term) for e in events] == [("elected", leadership.term)]
    leadership.resign()


def test_readers_never_take_a_value_that_only_minorities_held(
    clients: list[redis.Redis],
) -> None:
    name = "minorities"
    keys = _keys(name)
    election = RedlockElection(clients, name, ttl=5, label="a")
    leadership = election.campaign(timeout=5)
    assert leadership is not None
    term = leadership.term

    def reach(masters: list[redis.Redis], value: bytes, seq: int) -> None:
        # a proclaim that reached these masters only (NoQuorumError for its leader)
        for c in masters:
            plan = election_plans.announce(keys, leadership.owner, term, "a", value, seq=seq)
            _driver.run(c, plan)

    def first_seen() -> tuple[bytes | None, int]:
        event = next(iter(RedlockElection(clients, name).observe(timeout=0.5)))
        return event.value, event.sequence

    def read() -> tuple[bytes | None, int]:
        lead = election.leader()
        assert lead is not None and lead.term == term
        return lead.value, lead.sequence

    reach(clients[:1], b"v1", 1)
    reach(clients[1:3], b"v2", 2)
    # only the announcement was ever on a majority
    assert read() == first_seen() == (None, 0)
    leadership._sequence = 3
    leadership.proclaim("v4")  # on every master
    reach(clients[:2], b"v5", 5)
    reach(clients[2:4], b"v6", 6)
    # the masters' logs tell that v4, not v5 nor v6, was the last on a majority
    assert read() == first_seen() == (b"v4", 4)
    leadership.resign()


def test_proclaims_at_once_from_two_threads_take_distinct_sequences(
    clients: list[redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads proclaiming on one leadership, each switched out (as the
    interpreter may switch threads between any two lines) just before its
    proclaim is sent: each sends a sequence of its own, and the next
    proclaim one above both."""
    election = RedlockElection(clients, "together", ttl=5, label="a")
    leadership = election.campaign(timeout=5)
    assert leadership is not None
    sent: list[int] = []
    announce = _sync_election._ElectionRedlock._announce

    def record(lock: Any, lease: Any, value: bytes | None, seq: int) -> None:
        sent.append(seq)
        announce(lock, lease, value, seq)

    monkeypatch.setattr(_sync_election._ElectionRedlock, "_announce", record)
    proclaim = RedlockLeadership.proclaim
    lines, first = inspect.getsourcelines(proclaim)
    (sends,) = (first + i for i, line in enumerate(lines) if "_announce(" in line)
    both = threading.Barrier(2, timeout=5)

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code is not proclaim.__code__:
            return None

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "line" and frame.f_lineno == sends:
                both.wait()  # (the other thread's proclaim has come as far)
            return local

        return local

    threading.settrace(tracer)
    try:
        threads = [threading.Thread(target=leadership.proclaim, args=(v,)) for v in ("x", "y")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    finally:
        threading.settrace(None)
    assert sorted(sent) == [1, 2], sent
    leadership.proclaim("z")
    lead = election.leader()
    assert lead is not None and (lead.value, lead.sequence) == (b"z", 3)
    leadership.resign()


def test_a_minoritys_stray_keys_do_not_stop_the_election(clients: list[redis.Redis]) -> None:
    """Every key of the election holding another type on two masters of five
    (a stray write, a name clash): a quorum of the others elects, proclaims,
    reads and resigns all the same (a Redlock's acquire outvotes such a master
    too); on three of five, the wrong type is named."""
    first = RedlockElection(clients, "stray", ttl=5).campaign(timeout=5)
    assert first is not None
    first.proclaim("before")
    first.resign()
    names = sorted(k.decode() for k in clients[2].keys("tenure:{stray}*"))  # type: ignore[union-attr]
    assert len(names) >= 3, names  # (the election's keys, as its writes left them)
    for c in clients:
        c.flushall()

    def spoil(client: redis.Redis) -> None:
        for k in names:
            client.delete(k)
            client.rpush(k, "x")

    for c in clients[:2]:
        spoil(c)
    election = RedlockElection(clients, "stray", ttl=5)
    leadership = election.campaign(timeout=5)
    assert leadership is not None
    leadership.proclaim("v")
    lead = election.leader()
    assert lead is not None and (lead.term, lead.value) == (leadership.term, b"v")
    leadership.resign()
    assert election.leader() is None
    for c in clients[:2]:
        assert c.lrange(names[0], 0, -1) == [b"x"]  # (left as it was)
    spoil(clients[2])
    with pytest.raises(WrongTypeError):
        election.leader()


def test_a_minoritys_stray_keys_and_a_paused_master_are_too_few_answers(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """The record holding another type on two masters of five (outvoted,
    were the others to answer) and a third master paused: too few answered,
    which the error says, naming what each master that failed said."""
    keys = _keys("stray-paused")
    election = RedlockElection(clients, "stray-paused", ttl=5, master_timeout=0.2)
    leadership = election.campaign(timeout=5)
    assert leadership is not None
    for c in clients[:2]:
        c.delete(keys.record)
        c.rpush(keys.record, "x")
    masters[2].pause()
    try:
        with pytest.raises(NoQuorumError, match="2 accepted it") as proclaimed:
            leadership.proclaim("v")
        assert "WrongTypeError" in str(proclaimed.value)
        assert "1 did not answer" in str(proclaimed.value), proclaimed.value
        with pytest.raises(NoQuorumError, match="2 of 5 masters answered") as read:
            election.leader()
        assert "WrongTypeError" in str(read.value)
    finally:
        masters[2].resume()
    deadline = time.monotonic() + 3
    while True:  # once the paused master answers, the two are outvoted
        try:
            leadership.proclaim("v")
            break
        except NoQuorumError:  # (its earlier call still waits)
            assert time.monotonic() < deadline
            time.sleep(0.05)
    leadership.resign()


def test_the_operator_tools_see_a_redlock_elections_candidates(
    clients: list[redis.Redis],
) -> None:
    """``tenure inspect`` and ``ls`` of one master count the candidates that
    queue there (a RedlockElection's queue of its own on each master)."""
    leadership = RedlockElection(clients, "seen", ttl=10, label="A").campaign(timeout=5)
    assert leadership is not None
    other = RedlockElection(clients, "seen", ttl=10, label="B")
    won: list[Any] = []
    waiter = threading.Thread(target=lambda: won.append(other.campaign(timeout=3)))
    waiter.start()
    try:
        deadline = time.monotonic() + 2
        queue = _keys("seen").quorum
        while not clients[0].zcard(queue) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert clients[0].zcard(queue) == 1
        views, _ = _ops.inspect(clients[0], _ops.targets("seen", key=None, prefix="tenure:"))
        (view,) = (v for v in views if v.kind == "Election")
        assert view.held and view.waiters == 1, view
    finally:
        leadership.resign()
        waiter.join(5)
        for got in won:
            if got is not None:
                got.resign()


def test_leader_needs_a_quorum_to_answer(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    election = RedlockElection(clients, "few", ttl=1, master_timeout=0.1)
    for i in (0, 1, 2):
        masters[i].stop()
    with pytest.raises(NoQuorumError, match="2 of 5 masters answered"):
        election.leader()


def test_asyncio_observe_and_leader(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    async def main() -> list[tuple[str, int, bytes | None, int]]:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        election = AsyncRedlockElection(aclients, "aobs", ttl=2, label="t")
        seen: list[tuple[str, int, bytes | None, int]] = []

        async def follow() -> None:
            async for event in AsyncRedlockElection(aclients, "aobs").observe(timeout=1.0):
                seen.append((event.change, event.term, event.value, event.sequence))

        task = asyncio.create_task(follow())
        await asyncio.sleep(0.3)
        leadership = await election.campaign(timeout=5)
        assert leadership is not None
        await leadership.proclaim("here")
        lead = await election.leader()
        assert lead is not None and (lead.value, lead.sequence) == (b"here", 1)
        await election.resign()
        assert await election.leader() is None
        await task
        for c in aclients:
            await c.aclose()
        return seen

    seen = asyncio.run(main())
    assert [(change, value, seq) for change, _, value, seq in seen] == [
        ("elected", None, 0),
        ("proclaimed", b"here", 1),
        ("resigned", b"here", 1),
    ]
    assert len({term for _, term, _, _ in seen}) == 1


class _AsyncSwallowOnSend(redis.asyncio.Connection):
    """Once armed for a task (a class attribute), its next command sent in
    that task is sent, then the task's cancellation is requested and
    swallowed: what ``asyncio.wait_for`` (redis-py's send under a socket
    timeout) does on Python 3.11 when the cancel lands as the write completes."""

    armed: asyncio.Task[Any] | None = None

    async def send_packed_command(self, *args: Any, **kwargs: Any) -> None:
        await super().send_packed_command(*args, **kwargs)
        task = asyncio.current_task()
        if task is not None and task is _AsyncSwallowOnSend.armed:
            _AsyncSwallowOnSend.armed = None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0)


def test_a_cancel_swallowed_as_a_campaign_sends_is_not_lost(
    clients: list[redis.Redis], masters: list[ServerProcess]
) -> None:
    """A campaign whose cancellation a send swallowed (see
    :class:`_AsyncSwallowOnSend`) still ends cancelled: no leadership comes
    back to a caller that stopped waiting, held and renewed for nobody."""

    async def main() -> None:
        mine = [
            redis.asyncio.Redis(
                connection_pool=redis.asyncio.ConnectionPool(
                    host="127.0.0.1", port=s.port, connection_class=_AsyncSwallowOnSend
                )
            )
            for s in masters
        ]
        election = AsyncRedlockElection(mine, "swallow", ttl=1, master_timeout=0.5)
        try:
            first = await election.campaign(timeout=5)  # (every master probed)
            assert first is not None
            await first.resign()
            for master in clients:  # the next round's scripts take the ordinary path once more
                master.script_flush()
            task = asyncio.ensure_future(election.campaign(timeout=5))
            _AsyncSwallowOnSend.armed = task
            outcome = await asyncio.gather(task, return_exceptions=True)
            assert isinstance(outcome[0], asyncio.CancelledError), outcome
            assert await election.leader() is None
            lock = _keys("swallow").lock
            deadline = time.monotonic() + 0.5  # (what it took is given back at once)
            while any(master.exists(lock) for master in clients):
                assert time.monotonic() < deadline, "the lock is held for nobody"
                await asyncio.sleep(0.01)
        finally:
            _AsyncSwallowOnSend.armed = None
            for c in mine:
                await c.aclose()

    asyncio.run(main())


# --- the single-server election's behaviour, over five masters with two down ----------------


@pytest.fixture
def live(clients: list[redis.Redis], masters: list[ServerProcess]) -> list[redis.Redis]:
    """Every master's client, masters 0 and 4 down: the clients of the live ones."""
    masters[0].stop()
    masters[4].stop()
    return clients[1:4]


def _depose(live: list[redis.Redis], name: str) -> None:
    """End the leader's lease on every live master (a quorum of three)."""
    for c in live:
        c.delete(_keys(name).lock)


def test_a_dead_leader_is_lost_for_observers_and_replaced_within_its_ttl(
    clients: list[redis.Redis], masters: list[ServerProcess], live: list[redis.Redis]
) -> None:
    ttl = 1.0
    urls = [s.url for s in masters]
    watch = Watch(clients, "dead", quiet=ttl + 1.5)
    watch.start()
    elected = SPAWN.Event()
    doomed = SPAWN.Process(target=redlock_lead_forever, args=(urls, "dead", ttl, elected))
    doomed.start()
    try:
        assert elected.wait(30)
        first = RedlockElection(clients, "dead").leader()
        assert first is not None and first.label == "doomed"
        doomed.kill()
        killed = time.monotonic()
        leadership = RedlockElection(clients, "dead", ttl=ttl, label="next").campaign(timeout=5)
        took = time.monotonic() - killed
    finally:
        doomed.kill()
        doomed.join()
    assert leadership is not None and leadership.term > first.term
    assert took < ttl + 0.5, took
    leadership.resign()
    watch.join(10)
    assert [(change, term) for change, term, _, _ in watch.seen()] == [
        ("elected", first.term),
        ("lost", first.term),
        ("elected", leadership.term),
        ("resigned", leadership.term),
    ]


def test_on_elected_on_deposed_and_a_second_campaign(
    clients: list[redis.Redis], live: list[redis.Redis]
) -> None:
    calls: list[tuple[str, int]] = []
    election = RedlockElection(
        clients,
        "callbacks",
        ttl=1,
        on_elected=lambda lead: calls.append(("elected", lead.term)),
        on_deposed=lambda lead: calls.append(("deposed", lead.term)),
    )
    leadership = election.campaign(timeout=5)
    assert leadership is not None and calls == [("elected", leadership.term)]
    with pytest.raises(AlreadyHeldError):
        election.campaign(timeout=0)
    _depose(live, "callbacks")
    assert leadership.lost.wait(3)
    assert calls[1:] == [("deposed", leadership.term)]
    with pytest.raises(NotOwnedError):
        leadership.proclaim("late")

    def refuse(leadership: RedlockLeadership) -> None:
        raise RuntimeError("not today")

    with pytest.raises(RuntimeError, match="not today"):
        RedlockElection(clients, "refused", ttl=5, on_elected=refuse).campaign(timeout=5)
    assert RedlockElection(clients, "refused").leader() is None


def test_run_while_leader_resigns_or_signals_the_lost_leadership(
    clients: list[redis.Redis], live: list[redis.Redis]
) -> None:
    election = RedlockElection(clients, "srun", ttl=1)
    term = election.run_while_leader(lambda leadership: leadership.term, timeout=5)
    assert term is not None and election.leader() is None  # resigned

    def work(leadership: RedlockLeadership) -> None:
        _depose(live, "srun")
        while not leadership.lost.wait(0.05):  # the stop signal
            pass

    started = time.monotonic()
    with pytest.raises(LockLostError):
        election.run_while_leader(work, timeout=5)
    assert time.monotonic() - started < 3


def test_asyncio_run_while_leader_cancels_the_work_when_lost(
    masters: list[ServerProcess], live: list[redis.Redis]
) -> None:
    async def main() -> None:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        election = AsyncRedlockElection(aclients, "arun", ttl=1)

        async def depose() -> None:
            _depose(live, "arun")

        assert await work_cancelled_when_lost(election, depose)
        for c in aclients:
            await c.aclose()

    asyncio.run(main())


def test_asyncio_a_cancelled_run_while_leader_ends_its_work_first(
    masters: list[ServerProcess],
) -> None:
    async def main() -> None:
        aclients = [redis.asyncio.Redis.from_url(s.url) for s in masters]
        election = AsyncRedlockElection(aclients, "acancel", ttl=5)
        assert await work_ends_before_a_cancelled_call(election) == ["cleaned"]
        for c in aclients:
            await c.aclose()

    asyncio.run(main())


def test_a_quiet_leader_keeps_its_record_on_every_master_past_the_keep_time(
    clients: list[redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    # as on one server: the renewals keep each master's record of the term on
    # (the record and the log otherwise end KEEP_MS after their last write)
    monkeypatch.setattr(election_plans, "KEEP_MS", 1000)
    election = RedlockElection(clients, "quiet", ttl=0.5, label="quiet-one")
    leadership = election.campaign(timeout=5)
    assert leadership is not None
    leadership.proclaim("where")
    watch = Watch(clients, "quiet", quiet=2.5)
    watch.start()
    time.sleep(2.5)
    assert not leadership.lost.is_set()
    lead = RedlockElection(clients, "quiet").leader()
    assert lead is not None
    assert (lead.label, lead.term, lead.value) == ("quiet-one", leadership.term, b"where")
    watch.join(10)
    assert watch.seen() == [("proclaimed", leadership.term, b"where", 1)]
    leadership.resign()


def test_a_proclaim_after_a_resignation_cut_off_is_refused(
    clients: list[redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the term's end reached every master, then an interrupt cut the release
    # off: the masters still hold the lease's token, but the term is over, so
    # a proclaim must be refused, not written where no reader takes it
    end_term = _sync_election._ElectionRedlock._end_term

    def cut_off(self: Any, lease: Any) -> None:
        end_term(self, lease)
        raise KeyboardInterrupt

    election = RedlockElection(clients, "cut", ttl=5, label="first")
    leadership = election.campaign(timeout=5)
    assert leadership is not None
    leadership.proclaim("before")
    with monkeypatch.context() as patch:
        patch.setattr(_sync_election._ElectionRedlock, "_end_term", cut_off)
        with pytest.raises(KeyboardInterrupt):
            leadership.resign()
    assert election.leader() is None
    with pytest.raises(NotOwnedError):
        leadership.proclaim("after")
    for c in clients:
        assert c.hget(_keys("cut").record, "value") == base64.b64encode(b"before")
    leadership.resign()  # (the release, finished)
