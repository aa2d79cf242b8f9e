# GENERATED from _async/fanout.py by scripts/unasync.py: do not edit.
"""The driver's calls on several servers at once (a Redlock's masters):
:func:`run_each`, :func:`send_late`, :func:`listen_each`, :func:`watch_shared`.

Part of the driver's single source: ``_sync/fanout.py`` is generated from
this file by ``scripts/unasync.py``. How a call runs on its own (a task, a
worker thread) and how a round's replies are read (the event loop, one
``poll``) is each flavour's hand-written :mod:`.calls`; what needs no I/O is
in :mod:`.._fanout_shared`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..._plans import redlock as redlock_plans
from ..._protocol import Plan
from .. import _clients
from .._clients import Fallback
from .._fanout_shared import (
    NOT_DONE,
    LateBook,
    NotYet,
    Round,
    Sent,
    Servers,
    SharedDogs,
    Unsent,
    advance,
    count,
    is_fault,
    keep,
    no_answer,
    pack_key,
    replies,
    unlisten_late,
)
from .._runtime_sync import (
    Event,
    cancel_requests,
    closed,
    ended,
    home,
    new_mutex,
    swallowed,
    wait_set,
)
from .._watchbook import Watch, Watchable
from .calls import abandon, collect, settle, sound, start, wait_calls, within, write
from .drive import _perform, run
from .library import _REDIS, _library
from .reserve import SPARE_CONNECTIONS, _Reserve
from .state import Client, T, _state
from .watchdog import _SendRenewals, _Watchdog

__all__ = [
    "run_each",
    "NotYet",
    "Unsent",
    "send_late",
    "busy",
    "is_fault",
    "suspected",
    "breaks",
    "broken",
    "listen_each",
    "watch_shared",
    "stop_renewing_shared",
    "unwatch_shared",
]

#: The shared watchdogs of the process (and event loop), one per renewal
#: function (a Redlock's, which renews any set of leases on their masters'
#: quorums).
_dogs = SharedDogs(functools.partial(_Watchdog, None, _REDIS), home, new_mutex, ended)


#: ``watch_shared(lease, renew, send)``: watch ``lease`` with the watchdog
#: for ``send``, a module-level function that renews each batch of due
#: leases instead of one client's pipeline (a Redlock's, on a quorum of
#: their masters): one runner per ``send``, process and event loop, whatever
#: the number of locks, which ends :data:`~.._watchbook.LINGER` seconds after
#: its last lease. ``stop_renewing_shared`` and ``unwatch_shared`` are
#: :func:`stop_renewing` and :func:`unwatch` for a lease it watches.
watch_shared: Callable[[Watchable, bool, _SendRenewals], Watch] = _dogs.watch
stop_renewing_shared, unwatch_shared = _dogs.stop_renewing, _dogs.unwatch

#: The calls of :func:`run_each` of the ordinary path on each client (each in
#: a task, or on a worker thread, of its own) that have not ended yet (while
#: one runs on a server under suspicion, no other is started for it), and the
#: steps :func:`send_late` queued behind them.
_book = LateBook(new_mutex)
#: ``busy(client)``: whether a call of :func:`run_each`'s ordinary path (or
#: of :func:`send_late`) is still in flight on ``client``.
busy = _book.busy

#: The clients whose server failed to answer :func:`run_each` in time (or at
#: all), until a call of the ordinary path gets an answer again; and how many
#: times :func:`run_each` found the connection to each pool's server broken
#: (a Redlock asks such a master who it is again).
_servers = Servers()
breaks, broken, suspected = _servers.breaks, _servers.broken, _servers.suspected

#: Why a plan :func:`run_each` held back was not sent.
_HELD = "no reply in time (an earlier call still waits): not sent"


def run_each(
    jobs: Iterable[tuple[Client, Plan[Any]]],
    timeout: float,
    enough: Callable[[list[Any]], bool] | None = None,
    *,
    behind: bool = False,
    need: int = 0,
) -> list[Any]:
    """Drive every plan on its client at the same time, each for at most
    ``timeout`` seconds; return, in order, each plan's result or the exception
    it raised (``TimeoutError`` when it ran out of time). A slow or paused
    server delays none of the others, and the whole call returns within
    ``timeout`` (and a scheduling delay). The plans may only yield
    :class:`Eval`, :class:`Command` and :class:`Pipeline` steps.

    The quick path, once a client's server was probed: each round's steps
    are written to every server, then the replies read by the caller, those
    already here first (:func:`.calls.collect`), on connections kept for
    each pool (in this event loop), shared by every client of the pool: at
    most :data:`SPARE_CONNECTIONS`, and at most a quarter of its
    ``max_connections`` (none for a ``BlockingConnectionPool`` or a
    single-connection client). One dropped (the server closed it, did not
    answer in time, or owes too many replies; or the call was cut off while
    it held it) is closed and given back to the pool.

    ``enough``, if given, is called with the results so far (a plan not done
    yet has an object of no other use there) each time a plan of the quick
    path finishes; once it returns ``True`` the call returns without waiting
    for the others: those plans are closed and their result is a
    :class:`NotYet`. Their replies are read by the next call on that
    connection, whose commands the server runs after them (a release sent
    next runs after the acquire whose reply was not waited for).

    The ordinary path, for a client not probed yet, one whose server failed
    to answer (a suspect, until it answers again) or a pool that lends no
    connection: the plan runs as a call of its own (:func:`.calls.start`: a
    task, cancelled when the time is up; or a worker thread, left to finish,
    its result dropped). Once ``enough`` says so, a call on a suspect is not
    waited for (a :class:`NotYet`); while it runs, that client's next plans
    are :class:`Unsent` (no call piles up behind a paused server).

    ``behind``: a plan for a client with a call of the ordinary path still in
    flight is :class:`Unsent` too, so that the caller queues it behind that
    call with :func:`send_late` (a clean-up release never overtakes the
    acquire it undoes; a cancelled task may still be sending).

    ``need``: the fewest plans that must be sent for the call to be of use
    (a quorum). When fewer can be sent at once because a suspect still has a
    call in flight, each such plan waits (within ``timeout``, sending nothing
    meanwhile) for the calls in flight there to end, and is sent if one of
    them got an answer (after a stall of this process, every server a
    suspect at once).

    Raises:
        asyncio.CancelledError: the caller was cancelled (every job is).
        Exception: a plan's exception that is not its server's fault
            (:func:`is_fault`: one a signal handler raised), as the call
            ends (the jobs still running are cancelled).
    """
    todo = list(jobs)
    asked = cancel_requests()
    deadline = time.monotonic() + timeout
    results: list[Any] = [NOT_DONE] * len(todo)
    alone: dict[int, Any] = {}  # the calls of the ordinary path
    conns: dict[int, Any] = {}  # the connections taken, until each is kept or dropped
    due: dict[int, int] = {}  # replies due on conns[i] before its own
    fans: dict[int, _Reserve] = {}  # the reserve conns[i] belongs to
    suspects: set[int] = set()  # the jobs in ``alone`` whose server is under suspicion
    unwaited: set[int] = set()
    held: list[int] = []  # the jobs on a suspect server with a call still in flight
    try:
        # (a connection taken here is dropped if an interrupt cuts the call off)
        for i, (client, plan) in enumerate(todo):
            suspect = suspected(client)
            if (suspect or behind) and _book.busy(client):
                if behind:  # a call still in flight there, which this one must not overtake
                    plan.close()
                    results[i] = Unsent("an earlier call is still in flight there: not sent")
                else:
                    held.append(i)  # no second call for it while one waits there (paused?)
                continue
            state = _state(client)
            if suspect:
                suspects.add(i)
            elif (
                state.server is not None
                and state.fan is not None
                and _take_connection(client, state.fan, conns, due, fans, i)
            ):
                continue
            in_flight = functools.partial(_in_flight, client)
            alone[i] = start(_run_trusted, client, plan, deadline, before=in_flight)
        wait_held = sum(1 for r in results if r is NOT_DONE) - len(held) < need
        for i in held:
            client, plan = todo[i]
            if wait_held:
                suspects.add(i)
                calls = _book.in_flight(client)
                in_flight = functools.partial(_in_flight, client)
                alone[i] = start(_after, client, plan, calls, deadline, before=in_flight)
            else:
                plan.close()
                results[i] = Unsent(_HELD)
        _scatter(todo, deadline, results, conns, fans, due, enough)
        if enough is not None and enough(results):
            # enough answered: a server under suspicion (paused?) is not waited
            # for; its call ends by its own timeout, as it would have here
            unwaited = {i for i in suspects if not alone[i].done()}
        wait_calls(
            [call for i, call in alone.items() if i not in unwaited], deadline - time.monotonic()
        )
    except BaseException:
        unwaited = set()
        for i in list(conns):  # cut off: a reply may still be due on each
            _cut_off(todo[i][0], fans[i], conns, i)
        raise
    finally:
        for i, call in alone.items():
            if i not in unwaited:
                abandon(call)
    for i, call in alone.items():
        if i in unwaited:
            results[i] = NotYet("no reply waited for: enough others answered")
        elif call.done() and not call.cancelled() and type(call.exception()) is not TimeoutError:
            error = call.exception()
            if error is not None and not is_fault(error):
                raise error  # (a signal handler's, in that task: the caller's interrupt)
            results[i] = error if error is not None else call.result()
            if error is not None and no_answer(_library(type(todo[i][0])).response_error, error):
                _servers.broke(todo[i][0])  # (not an error reply, nor tenure's verdict on one)
        else:  # no reply in time (the call's own time ran out, or it is cut off)
            _servers.failed(todo[i][0])
    for i, result in enumerate(results):
        if result is NOT_DONE:
            if i not in alone:
                todo[i][1].close()
            results[i] = TimeoutError("no reply in time")
    if (cancel := swallowed(asked)) is not None:
        # a cancellation a call in this task returned through (redis-py's send
        # under asyncio.wait_for, on Python 3.11): raised as if it came now;
        # every reply was read, so the caller gives back what the jobs took
        raise cancel
    return results


def send_late(client: Client, step: redlock_plans.Late, until: float) -> bool:
    """Send ``step`` (a clean-up: a release) to ``client``'s server once every
    call of the ordinary path in flight there now ended (any may be the one
    it undoes; none started later holds it up), or now if none is; dropped
    if that is after ``until`` (``time.monotonic()``) or if
    :data:`~.._fanout_shared.MAX_LATE` steps already wait. The queued steps
    go in one round trip, a call of its own that waits for the answer until
    the last one's ``until`` (meanwhile the client is busy: see
    :func:`run_each`). Returns whether it was queued."""
    queued = _book.queue(client, step, until)
    if queued == "ready":
        _deliver(client)
    return queued != "dropped"


def _in_flight(client: Client, call: Any) -> None:
    """``call`` of the ordinary path on ``client``, known before it first
    runs (a release never overtakes a call an interrupt kept the caller from
    hearing of): later steps queue behind it, and go once it ends."""
    _book.track(client, call, _deliver)


def _deliver(client: Client) -> None:
    """Send the steps queued for ``client`` whose calls waited for all ended,
    as a call of its own (which takes them off the queue: a hand-over cut
    off by an interrupt leaves them queued for the next one)."""
    if not _book.any_ready(client):
        return  # none yet: each goes once the calls it waits for ended
    start(_send_queued, client, before=functools.partial(_in_flight, client))


def _send_queued(client: Client) -> Any:
    """Send the steps queued for ``client`` that are still wanted, until the
    last one's ``until``."""
    now = time.monotonic()
    steps = _book.take(client, now)
    if not steps:
        return None
    plan = redlock_plans.late_plan([step for step, _ in steps])
    return _run_trusted(client, plan, max(until for _, until in steps))


def _after(client: Client, plan: Plan[T], calls: list[Any], deadline: float) -> T:
    """:func:`_run_trusted` of ``plan`` once ``calls`` (in flight on
    ``client``'s suspect server) all ended by ``deadline``, if the server
    answered one of them since; otherwise :class:`Unsent`, nothing sent."""
    try:
        if not wait_calls(calls, deadline - time.monotonic()) or suspected(client):
            raise Unsent(_HELD)
    except BaseException:
        plan.close()
        raise
    return _run_trusted(client, plan, deadline)


def _run_trusted(client: Client, plan: Plan[T], deadline: float) -> T:
    """:func:`run` by ``deadline`` (in asyncio; see :func:`.calls.within`); an
    answer (even an error reply) clears the client's suspicion; no answer (a
    lost connection, a timeout of either library or of the deadline) does not."""
    try:
        with within(deadline - time.monotonic()):
            result = run(client, plan)
    except Exception as exc:
        if not no_answer(_library(type(client)).response_error, exc):
            _servers.answered(client)
        raise
    _servers.answered(client)
    return result


def _scatter(
    jobs: list[tuple[Client, Plan[Any]]],
    deadline: float,
    results: list[Any],
    conns: dict[int, Any],
    fans: dict[int, _Reserve],
    due: dict[int, int],
    enough: Callable[[list[Any]], bool] | None,
) -> None:
    """:func:`run_each`'s quick path for the jobs in ``conns`` (``due[i]``
    replies to read first on ``conns[i]``, of the reserve ``fans[i]``), until
    every plan is done, ``enough`` says so, or ``deadline``. A connection
    leaves ``conns`` as it is dropped or kept: cut off, the caller drops
    those still there."""
    steps: dict[int, Any] = {}
    step_on = functools.partial(advance, jobs, steps, results)

    def arrived(sent: list[Sent], parsed: set[int], k: int, raws: list[Any]) -> bool:
        """Entry ``k`` of ``sent`` was read: advance its plan now if its reply
        parses (then ``k`` goes into ``parsed``); whether that is ``enough``."""
        i, _, step = sent[k]
        try:
            reply = replies(step, raws[due.get(i, 0) :])
        except Exception as exc:
            if not is_fault(exc):
                raise  # (an interrupt, of any class: cut off, the caller drops the connections)
            return False  # an error reply: after the reads
        parsed.add(k)
        step_on(i, reply, None)
        return enough is not None and i not in steps and enough(results)

    for i in conns:
        step_on(i, None, None)
    stopped = False
    while steps and not stopped:
        sent: list[Sent] = []
        packed: dict[tuple[int, Any, Any], Any] = {}  # the same step to every server: packed once
        for i, step in list(steps.items()):
            conn = conns[i]
            try:
                key = pack_key(conn, step)
                data = packed.get(key)
                if data is None:
                    data = packed[key] = conn.pack_commands(_clients.commands(step))
                write(conn, data, deadline)
            except Exception as exc:
                if not is_fault(exc):
                    raise  # (cut off: the caller drops the connections)
                _failed(jobs[i][0], fans[i], conns, due, i)
                step_on(i, None, exc)
                continue
            sent.append((i, conn, step))
        parsed: set[int] = set()  # replies parsed (and their plans advanced) while reading
        need = {i: due.get(i, 0) + count(step) for i, _, step in sent}
        errors = {i: _library(type(jobs[i][0])).response_error for i, _, _ in sent}
        batch = Round(sent, deadline, need, errors)
        got = collect(batch, functools.partial(arrived, sent, parsed))
        for k, (i, _, step) in enumerate(sent):
            client = jobs[i][0]
            raws = got[k]
            if raws is None:  # not read: enough others answered
                stopped = True  # (read by the next call on that connection)
                due[i] = need[i] - batch.read.get(i, 0)
                continue
            skip = due.pop(i, 0)
            if isinstance(raws, BaseException):
                _failed(client, fans[i], conns, due, i)
                step_on(i, None, raws)
                continue
            if k in parsed:
                continue
            try:
                try:
                    reply = replies(step, raws[skip:])
                except Fallback:  # NOSCRIPT, or an error reply: the ordinary path says it right
                    reply = _perform(client, step, [])
            except Exception as exc:
                if not is_fault(exc):
                    raise
                step_on(i, None, exc)
                continue
            step_on(i, reply, None)
        if stopped:
            for i in list(steps):
                jobs[i][1].close()
                results[i] = NotYet("no reply waited for: enough others answered")
            steps.clear()
    for i in list(conns):  # (each leaves conns once it is kept or dropped)
        _keep(jobs[i][0], fans[i], conns[i], due.get(i, 0), conns, i)


def _failed(
    client: Client, fan: _Reserve, conns: dict[int, Any], due: dict[int, int], i: int
) -> None:
    """Job ``i``'s connection failed (or no answer in time): dropped, its server suspect."""
    due.pop(i, None)
    _drop(client, fan, conns[i], conns, i)
    _servers.failed(client)


def _keep(
    client: Client,
    fan: _Reserve,
    conn: Any,
    due: int,
    book: dict[int, Any] | None = None,
    at: int = 0,
) -> None:
    """:func:`~.._fanout_shared.keep` ``conn`` (``due``: the replies still due
    on it) for the next calls on its pool, or drop it; ``book[at]``, if given,
    is ``conn``, the caller's until then. Kept, it leaves ``book`` only once
    it is in ``fan`` (between the two, :func:`_cut_off` finds it there)."""
    with fan.mutex:
        kept = keep(fan, conn, due, SPARE_CONNECTIONS)
    if book is not None:
        del book[at]
    if not kept:
        settle(_drop, client, fan, conn)


def _cut_off(client: Client, fan: _Reserve, conns: dict[int, Any], i: int) -> None:
    """``conns[i]``, taken by a :func:`run_each` that was cut off: dropped (a
    reply may still be due on it), unless the interrupt came as it was being
    taken from ``fan`` or given back to it (it is in ``fan`` still, or
    already): then it stays there, as it is."""
    conn = conns[i]
    with fan.mutex:  # (idle, or owing replies)
        held = any(c is conn for c in fan.idle) or any(c is conn for c, _ in fan.owed)
    del conns[i]
    if not held:
        settle(_drop, client, fan, conn)


def _take_connection(
    client: Client,
    fan: _Reserve,
    conns: dict[int, Any],
    due: dict[int, int],
    fans: dict[int, _Reserve],
    i: int,
) -> bool:
    """Take a connection of ``fan`` to ``client``'s server for job ``i`` of
    :func:`_scatter`: into ``conns[i]``, with the replies still due on it in
    ``due[i]`` (one that owes some is taken first: the server runs the next
    call after them) and ``fan`` in ``fans[i]``; whether one was. When none
    is idle, unless ``fan`` holds all it may, one is checked out of the pool
    by a call of its own (connecting may block on a paused server), one at a
    time. A kept connection the server closed (idle timeout, ``CLIENT
    KILL``, restart) is given back to the pool, not used.

    A connection is the caller's before it leaves ``fan`` (an interrupt
    between the two finds it in both: :func:`_cut_off` leaves it in ``fan``),
    and one found closed leaves ``fan`` as it is dropped: none is lost to
    both, nor left in ``fan`` once given back to the pool."""
    stale: list[Any] = []
    try:
        with fan.mutex:
            while fan.owed:
                conn, owed = fan.owed[-1]
                if not closed(conn):
                    conns[i], due[i], fans[i] = conn, owed, fan
                    fan.owed.pop()
                    return True
                stale.append(conn)
                fan.owed.pop()
            while fan.idle:
                conn = fan.idle[-1]  # (kept while it is checked: an interrupt loses none)
                if sound(conn):
                    conns[i], due[i], fans[i] = conn, 0, fan
                    fan.idle.pop()
                    return True
                stale.append(conn)
                fan.idle.pop()
            if fan.connecting or fan.open - len(stale) >= fan.most:
                return False
            fan.connecting = True
            fan.open += 1
    finally:
        if stale:
            with fan.mutex:  # (each may still be there, if an interrupt came first)
                fan.idle[:] = [c for c in fan.idle if not any(c is s for s in stale)]
                fan.owed[:] = [o for o in fan.owed if not any(o[0] is s for s in stale)]
            cut: BaseException | None = None
            for conn in stale:
                try:
                    settle(_drop, client, fan, conn)
                except BaseException as exc:  # (an interrupt: the others are dropped too)
                    cut = cut or exc
            _servers.broke(client)
            if cut is not None:
                raise cut
    checked_out = functools.partial(_checked_out, client, fan)
    start(_check_out, client, before=lambda call: call.add_done_callback(checked_out))
    return False


#: The longest wait (seconds) for a spare connection to be checked out (asyncio).
SPARE_CONNECT_TIMEOUT = 30.0


def _check_out(client: Client) -> Any:
    """A connection of ``client``'s pool for :func:`_scatter`'s next calls."""
    with within(SPARE_CONNECT_TIMEOUT):
        return _clients.checkout(client.connection_pool, _clients.library_of(type(client)))  # type: ignore[union-attr]


def _checked_out(client: Client, fan: _Reserve, call: Any) -> None:
    """(Once the call of :func:`_check_out` is done, or cancelled before it
    ran) keep the connection it got in ``fan`` (counted in ``fan.open``);
    none (too many connections, the server down): the next call may start
    another."""
    conn = None if call.cancelled() or call.exception() is not None else call.result()
    with fan.mutex:
        fan.connecting = False
        if conn is None:
            fan.open -= 1
    if conn is not None:
        _keep(client, fan, conn, 0)


def _drop(
    client: Client, fan: _Reserve, conn: Any, book: dict[int, Any] | None = None, at: int = 0
) -> None:
    """Close ``conn`` (a reply may still be due on it) and give it back to
    ``client``'s pool, which connects it again for its next user: the pool
    counts the connections it handed out, and a connection never given back
    would take one of its ``max_connections`` for good. ``book[at]``, if
    given, is ``conn``, the caller's until its drop has begun."""
    try:
        if book is not None:
            del book[at]
        conn.disconnect()
    finally:
        with fan.mutex:
            fan.open -= 1
        with contextlib.suppress(KeyError):  # (a pool that forgot it: reset)
            client.connection_pool.release(conn)  # type: ignore[union-attr]


def listen_each(
    clients: Iterable[Client], channel: str, event: Event, timeout: float
) -> list[Callable[[], None] | None]:
    """Subscribe the wake hub of every client to the broadcast ``channel`` at
    the same time (each a call of its own), each message (and each
    reconnection of a hub) setting ``event``; wait at most ``timeout``
    seconds for the confirmations. Returns, per client, the function that
    stops listening (call it when done: the channel then lingers and is
    unsubscribed), or ``None`` if its SUBSCRIBE failed or was not confirmed
    in time (nothing is left listening on it). Cut off, it stops every
    listen itself (once done)."""
    calls: list[Any] = []
    try:  # (each listen known before it first runs: see .calls.start)
        for client in clients:
            start(_listen, client, channel, event, timeout, before=calls.append)
        wait_calls(calls, timeout)
    except BaseException:  # cut off: nothing may be left listening either
        for call in calls:
            call.add_done_callback(unlisten_late)
        raise
    out: list[Callable[[], None] | None] = []
    for call in calls:
        done = call.done() and not call.cancelled() and call.exception() is None
        out.append(call.result() if done else None)
        if not done:  # a SUBSCRIBE still in flight: stop listening once it is done
            call.add_done_callback(unlisten_late)
    return out


def _listen(
    client: Client, channel: str, event: Event, timeout: float
) -> Callable[[], None] | None:
    """:func:`listen_each` on one client."""
    hub = _state(client).hub
    try:
        with within(timeout):
            ch = hub.listen(channel, event)
    except Exception:
        return None
    try:
        ready = wait_set(ch.ready, timeout)
    except BaseException:  # cut off: nothing may be left listening either
        hub.unlisten(ch, event)
        raise
    if not ready:
        hub.unlisten(ch, event)
        return None
    return lambda: hub.unlisten(ch, event)


def _after_fork() -> None:
    """In a forked child: forget the parent's calls in flight (they never
    end here), its suspicions and its shared watchdogs (not running here)."""
    _dogs.forget()
    _servers.forget()
    _book.forget()


os.register_at_fork(after_in_child=_after_fork)
