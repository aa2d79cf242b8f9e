"""The asyncio driver's calls on several servers at once (a Redlock's
masters): :func:`run_each` drives one plan per server in parallel within a
deadline, :func:`listen_each` listens on a wake channel on each, and
:func:`watch_shared` renews leases with a watchdog shared by every lock of
the kind (on a quorum of each lease's masters). Split from :mod:`._async`,
whose connections, hub and watchdog it uses."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import select
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

import redis.exceptions

from .._plans import redlock as redlock_plans
from .._protocol import Plan
from . import _clients, _internals
from ._async import (
    REDIS,
    SPARE_CONNECTIONS,
    Client,
    Fan,
    SendRenewals,
    T,
    Watchdog,
    library_of,
    perform,
    run,
    state_of,
)
from ._fanout_shared import (
    NOT_DONE,
    Fallback,
    LateBook,
    NotYet,
    Servers,
    SharedDogs,
    Unsent,
    advance,
    commands,
    count,
    is_fault,
    keep,
    no_answer,
    pack_key,
    replies,
    unlisten_late,
)
from ._watchbook import Watch, Watchable

__all__ = [
    "run_each",
    "NotYet",
    "Unsent",
    "send_late",
    "is_fault",
    "suspected",
    "breaks",
    "broken",
    "listen_each",
    "watch_shared",
    "stop_renewing_shared",
    "unwatch_shared",
]

#: The shared watchdogs of each event loop, one per renewal function (a
#: Redlock's, which renews any set of leases on their masters' quorums).
_dogs = SharedDogs(
    functools.partial(Watchdog, None, REDIS), asyncio.get_running_loop, contextlib.nullcontext
)


def watch_shared(lease: Watchable, renew: bool, send: SendRenewals) -> Watch:
    """Watch ``lease`` with the event loop's watchdog for ``send`` (one per
    ``send``, process and event loop, whatever the number of locks: a single
    task, which ends :data:`~._watchbook.LINGER` seconds after its last lease),
    which renews each batch of due leases with ``send`` instead of one client's
    pipeline (a Redlock's leases, renewed on a quorum of their masters).
    ``send`` must be a module-level function (it is the key). Stop and unwatch
    with :func:`stop_renewing_shared` and :func:`unwatch_shared`. Call from a task."""
    return _dogs.watch(lease, renew, send)


#: :func:`stop_renewing` for a lease watched by :func:`watch_shared`.
stop_renewing_shared = _dogs.stop_renewing

#: :func:`unwatch` for a lease watched by :func:`watch_shared`.
unwatch_shared = _dogs.unwatch


async def run_each(
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
    ``timeout`` (and a scheduling delay).

    ``enough``, if given, is called with the results so far (a plan not done
    yet has an object of no other use there) each time a plan of the quick
    path finishes; once it returns ``True`` the call returns without waiting
    for the other replies of the quick path: those plans are closed and their
    result is a :class:`NotYet`. Their replies are still read, by the next call
    on that server: its commands are written on the same connection, after the
    ones whose replies are due, so that the server runs them in order (a
    release sent next runs after the acquire whose reply was not waited for).
    The replies already here are read first, so a slow server is waited for
    only while no other reply is here.

    The plans may only yield :class:`Eval`, :class:`Command` and
    :class:`Pipeline` steps. Once every client was used (its server probed),
    each round of steps is written to every server first and the replies read
    after, in this task. A client not yet used, or whose server failed to
    answer (until it answers again), runs its plan in a task of its own
    instead, cancelled when the time is up; but once ``enough`` says so, a
    task on a server under suspicion is not waited for (its result is a
    :class:`NotYet`) and is left to end by its own timeout, and while it runs
    that client's next plans fail at once with ``TimeoutError`` (no task piles
    up behind a paused server).

    The connections of the rounds in this task are checked out of each client's
    pool and kept between calls by tenure for the pool (in this event loop),
    shared by every client of the pool (one dropped loses none of them): at
    most :data:`SPARE_CONNECTIONS` per pool, and at most a quarter of its
    ``max_connections`` (none for a ``BlockingConnectionPool`` or a
    single-connection client: their plans all run the ordinary way); each one
    dropped (the server closed it, did not answer in time, or owes too many
    replies) is closed and given back to the pool, which connects it again for
    its next user. They count against the pool's ``max_connections``.

    ``behind``: a plan for a client with a call still in flight in a task of
    its own (suspect or not: the first round of a fresh client, or a call
    that found no connection of the quick path kept, cut off) is not sent
    but :class:`Unsent`, so that the caller queues it behind that call with
    :func:`send_late` (for a clean-up release: it never overtakes the
    acquire it undoes). A cancelled task is not done yet: it may still be
    sending (a cancellation is only a request, and a library may finish
    the write it was in before it sees it).

    ``need``: the fewest plans that must be sent for the call to be of use
    (a quorum). When fewer can be sent at once because a server under
    suspicion still has a call in flight, each such plan waits (within
    ``timeout``, sending nothing meanwhile) for the calls in flight there to
    end, and is sent if one of them got an answer: servers that answer again
    after a stall of this process (every server a suspect at once) are not
    counted out while this process's own calls are in flight there.

    Every connection a call takes for the quick path is kept for the next
    calls or dropped, whichever way the call ends (cancelled or cut off by
    an interrupt too: those still in the call's hands are then closed and
    given back to their pools by tasks of their own).

    Raises:
        asyncio.CancelledError: the caller was cancelled (every job is).
        Exception: a plan's exception that is not its server's fault
            (:func:`is_fault`: one a signal handler raised), as the call
            ends (the jobs still running are cancelled).
    """
    todo = list(jobs)
    deadline = time.monotonic() + timeout
    results: list[Any] = [NOT_DONE] * len(todo)
    alone: dict[int, asyncio.Task[Any]] = {}
    conns: dict[int, Any] = {}  # the connections taken, until each is kept or dropped
    due: dict[int, int] = {}  # replies due on conns[i] before its own
    fans: dict[int, Fan] = {}  # the pool's connections conns[i] belongs to
    suspects: set[int] = set()  # the jobs in ``alone`` whose server is under suspicion
    unwaited: set[int] = set()
    held: list[int] = []  # the jobs on a suspect server with a call still in flight
    try:
        for i, (client, plan) in enumerate(todo):
            if behind and not suspected(client) and _book.busy(client):
                # a call still in flight there, which this one must not overtake
                plan.close()
                results[i] = Unsent("an earlier call is still in flight there: not sent")
                continue
            if not suspected(client):
                state = state_of(client)
                fan = state.fan
                if state.server is not None and fan is not None:
                    taken = _take_connection(client, fan)
                    if taken is not None:
                        conns[i], due[i] = taken
                        fans[i] = fan
                        continue
            else:
                if _book.busy(client):
                    held.append(i)  # no second call for it while one waits there (paused?)
                    continue
                suspects.add(i)
            alone[i] = _watched(client, asyncio.ensure_future(_run_trusted(client, plan, timeout)))
        wait_held = sum(1 for r in results if r is NOT_DONE) - len(held) < need
        for i in held:
            client, plan = todo[i]
            if wait_held:
                suspects.add(i)
                after = _after(client, plan, _book.in_flight(client), timeout)
                alone[i] = _watched(client, asyncio.ensure_future(after))
            else:
                plan.close()
                results[i] = Unsent(_HELD)
        await _scatter(todo, deadline, results, conns, fans, due, enough)
        if enough is not None and enough(results):
            # enough answered: a server under suspicion (paused?) is not waited
            # for; its call ends by its own timeout, as it would have here
            unwaited = {i for i in suspects if not alone[i].done()}
        waited = [task for i, task in alone.items() if i not in unwaited]
        if waited:
            await asyncio.wait(waited, timeout=max(0.0, deadline - time.monotonic()))
    except BaseException:
        unwaited = set()
        for i in list(conns):  # cut off: a reply may still be due on each
            _let_go(todo[i][0], fans[i], conns.pop(i))
        raise
    finally:
        for i, task in alone.items():
            if i in unwaited:
                _lingering.add(task)
                task.add_done_callback(_lingered)
            else:
                task.cancel()
    for i, task in alone.items():
        if i in unwaited:
            results[i] = NotYet("no reply waited for: enough others answered")
        elif task.done() and not task.cancelled():
            error = task.exception()
            if error is not None and not is_fault(error):
                raise error  # (a signal handler's, in that task: the caller's interrupt)
            results[i] = error if error is not None else task.result()
            if error is not None and _no_answer(todo[i][0], error):
                _servers.broke(todo[i][0])
        else:
            _servers.failed(todo[i][0])
    for i, result in enumerate(results):
        if result is NOT_DONE:
            if i not in alone:
                todo[i][1].close()
            results[i] = TimeoutError("no reply in time")
    return results


#: The calls of :func:`run_each` on a suspect server left to end by their own
#: timeout (kept referenced until done).
_lingering: set[asyncio.Task[Any]] = set()


#: The calls of :func:`run_each` in a task of its own for each client that have
#: not ended yet (while one runs on a server under suspicion, no other is
#: started for it), and the steps :func:`send_late` queued behind them.
_book = LateBook(contextlib.nullcontext)


def _lingered(task: asyncio.Task[Any]) -> None:
    _lingering.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: nobody waits for its result


Sent = tuple[int, Any, Any]


def send_late(client: Client, step: redlock_plans.Late, until: float) -> bool:
    """Send ``step`` to ``client``'s server after the calls still in flight
    there in tasks of their own (the one stuck there that made a plan
    :class:`Unsent`, or any other: each may be the one it undoes), once each
    of them ended (the server answered, failed, or the call timed out), and
    none started later (a busy server's later calls never hold it up);
    dropped if that is after ``until`` (``time.monotonic()``) or if
    :data:`~._fanout_shared.MAX_LATE` steps already wait. The queued steps
    go in one round trip, which waits for the server's answer until the last
    one's ``until`` (while it waits, that client's next calls of
    :func:`run_each` are :class:`Unsent` again if it is under suspicion). If
    no call is in flight there, it is sent now the same way. For calls whose
    only purpose is to undo (a release): the server runs them after the
    calls before them. Returns whether it was queued. Call from a task."""
    queued = _book.queue(client, step, until)
    if queued == "ready":
        _deliver(client)
    return queued != "dropped"


def _watched(client: Client, task: asyncio.Task[Any]) -> asyncio.Task[Any]:
    """``task``, a call of :func:`run_each` on ``client`` in a task of its
    own, in the book until it ends (a step :func:`send_late` queues waits for
    it); then forgotten, and the steps that waited for it go."""
    _book.track(client, task, _deliver)
    return task


def _deliver(client: Client) -> None:
    """Send the steps queued for ``client`` by :func:`send_late` whose calls
    waited for have all ended (those still wanted), in one round trip, in a
    task of its own that the next ones queue behind."""
    if not _book.any_ready(client):
        return  # none yet: each goes once the calls it waits for ended
    now = time.monotonic()
    steps = _book.take(client, now)
    if not steps:
        return
    plan = redlock_plans.late_plan([step for step, _ in steps])
    wait = max(until for _, until in steps) - now
    task = _watched(client, asyncio.ensure_future(_run_trusted(client, plan, wait)))
    _lingering.add(task)
    task.add_done_callback(_lingered)


#: The clients whose server failed to answer :func:`run_each` in time (or at
#: all), until a call in a task of its own gets an answer again; and how many times
#: :func:`run_each` found the connection to each pool's server broken (a
#: Redlock asks such a master who it is again).
_servers = Servers()
breaks, broken, suspected = _servers.breaks, _servers.broken, _servers.suspected


def _no_answer(client: Client, error: BaseException) -> bool:
    """Whether ``error``, what a call on ``client`` raised, says the server did
    not answer (not an error reply, nor tenure's own verdict on a reply)."""
    return no_answer(library_of(type(client)).response_error, error)


#: Why a plan :func:`run_each` held back was not sent.
_HELD = "no reply in time (an earlier call still waits): not sent"


async def _after(client: Client, plan: Plan[T], calls: list[Any], timeout: float) -> T:
    """:func:`_run_trusted` of ``plan`` once ``calls`` (in flight on
    ``client``'s suspect server) all ended within ``timeout``, if the server
    answered one of them since; otherwise :class:`Unsent`, nothing sent."""
    started = time.monotonic()
    try:
        _, pending = await asyncio.wait(calls, timeout=timeout)
        if pending or suspected(client):
            raise Unsent(_HELD)
    except BaseException:
        plan.close()
        raise
    return await _run_trusted(client, plan, timeout - (time.monotonic() - started))


async def _run_trusted(client: Client, plan: Plan[T], timeout: float) -> T:
    """:func:`run` within ``timeout``; an answer (even an error reply) clears
    the client's suspicion."""
    try:
        async with asyncio.timeout(timeout):
            result = await run(client, plan)
    except (redis.exceptions.ConnectionError, TimeoutError):
        raise
    except Exception:
        _servers.answered(client)
        raise
    _servers.answered(client)
    return result


async def _scatter(
    jobs: list[tuple[Client, Plan[Any]]],
    deadline: float,
    results: list[Any],
    conns: dict[int, Any],
    fans: dict[int, Fan],
    due: dict[int, int],
    enough: Callable[[list[Any]], bool] | None,
) -> None:
    """:func:`run_each`'s quick path for the jobs in ``conns`` (on the
    connection given there, ``due[i]`` replies to read on it first; ``fans``:
    the kept connections of their pools): each round's steps written to every
    server, then the replies read, until every plan is done, ``enough`` says
    so, or ``deadline``; results into ``results``. A connection leaves
    ``conns`` as it is dropped or kept: cut off, the caller drops those
    still there."""
    steps: dict[int, Any] = {}
    step_on = functools.partial(advance, jobs, steps, results)

    def arrived(sent: list[Sent], parsed: dict[int, Any], k: int, raws: Any) -> bool:
        """Entry ``k`` of ``sent`` was read: advance its plan now if its reply
        parses (into ``parsed``); whether that is ``enough``."""
        i, _, step = sent[k]
        try:
            reply = replies(step, raws)
        except Exception:
            return False  # an error reply: after the reads
        parsed[k] = reply
        step_on(i, reply, None)
        return enough is not None and i not in steps and enough(results)

    for i in conns:
        step_on(i, None, None)
    stopped = False
    while steps and not stopped:
        sent: list[tuple[int, Any, Any]] = []
        packed: dict[tuple[int, Any, Any], Any] = {}  # the same step to every server: packed once
        for i, step in list(steps.items()):
            client = jobs[i][0]
            conn = conns[i]
            try:
                key = pack_key(conn, step)
                data = packed.get(key)
                if data is None:
                    data = packed[key] = conn.pack_commands(commands(step, _clients.evalsha_args))
                if not _internals.write_now(conn, data):
                    # connecting (the handshake) may block on a paused server
                    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                        await conn.send_packed_command(data)
            except Exception as exc:
                if not is_fault(exc):
                    raise  # (cut off: the caller drops the connections)
                del conns[i]
                due.pop(i, None)
                await _drop(client, fans[i], conn)
                _servers.failed(client)
                step_on(i, None, exc)
                continue
            sent.append((i, conn, step))
        parsed: dict[int, Any] = {}  # replies parsed (and their plans advanced) while reading
        got = await _read_all(jobs, sent, deadline, due, functools.partial(arrived, sent, parsed))
        for k, (i, conn, step) in enumerate(sent):
            client = jobs[i][0]
            raws = got[k]
            if raws is None:  # not read: enough others answered
                stopped = True
                continue
            if isinstance(raws, BaseException):
                del conns[i]
                due.pop(i, None)
                await _drop(client, fans[i], conn)
                _servers.failed(client)
                step_on(i, None, raws)
                continue
            due.pop(i, None)
            if k in parsed:
                continue
            try:
                reply = replies(step, raws)
            except Fallback:
                try:  # NOSCRIPT, or an error reply: the ordinary path says it right
                    reply = await perform(client, step, [])
                except Exception as exc:
                    if not is_fault(exc):
                        raise
                    step_on(i, None, exc)
                    continue
            except Exception as exc:
                if not is_fault(exc):
                    raise
                step_on(i, None, exc)
                continue
            step_on(i, reply, None)
        if stopped:  # the unread replies are read by the next call on each connection
            for k, (i, _, step) in enumerate(sent):
                if got[k] is None:
                    due[i] = due.get(i, 0) + count(step)
            for i in list(steps):
                jobs[i][1].close()
                results[i] = NotYet("no reply waited for: enough others answered")
            steps.clear()
    for i in list(conns):  # (no wait in this loop: nothing can cut it off)
        _keep(jobs[i][0], fans[i], conns.pop(i), due.get(i, 0))


def _keep(client: Client, fan: Fan, conn: Any, due: int) -> None:
    """:func:`~._fanout_shared.keep` ``conn`` (``due``: the replies still due
    on it) for the next calls on its pool, or let it go."""
    if not keep(fan, conn, due, SPARE_CONNECTIONS):
        _let_go(client, fan, conn)


def _let_go(client: Client, fan: Fan, conn: Any) -> None:
    """:func:`_drop` ``conn`` in a task of its own (a caller cut off or
    cancelled can't wait for it, and nothing can cut it off half-way)."""
    _background(_drop(client, fan, conn))


def _take_connection(client: Client, fan: Fan) -> tuple[Any, int] | None:
    """An idle, connected connection of :func:`_scatter` to ``client``'s server
    (checked out of the client's pool once, then kept for the pool in ``fan``,
    shared by every client of the pool: no checkout per call), with the number
    of replies still due on it (read before the next call's own; a connection
    that owes some is taken first, so that the server runs the next call after
    them); or ``None`` when there is none: then, unless ``fan`` keeps all it
    may, one is checked out in a task of its own for the next calls (the pool
    may connect it, which can block on a paused server), one at a time. A
    kept connection the server closed (idle timeout, ``CLIENT KILL``,
    restart) is given back to the pool, not used."""
    stale: list[Any] = []
    taken: tuple[Any, int] | None = None
    while fan.owed and taken is None:
        conn, count = fan.owed.pop()
        if getattr(conn, "is_connected", False):
            taken = conn, count
        else:
            stale.append(conn)
    while fan.spare and taken is None:
        conn = fan.spare.pop()
        if _sound(conn):
            taken = conn, 0
        else:
            stale.append(conn)
    for conn in stale:
        _background(_drop(client, fan, conn))
    if stale:
        _servers.broke(client)
    if taken is not None:
        return taken
    if not fan.connecting and fan.open < fan.most:
        fan.connecting = True
        fan.open += 1
        _background(_check_out(client, fan))
    return None


def _sound(conn: Any) -> bool:
    """Whether an idle connection (no reply due on it) is still open: connected,
    nothing in its read buffer, no end of stream seen, and nothing to read on
    its socket (a server that closed it, and the loop did not see it yet)."""
    if not getattr(conn, "is_connected", False):
        return False
    reader = _internals.reader_of(conn)
    if reader is not None and (reader.at_eof() or _internals.buffered(conn)):
        return False
    writer = _internals.writer_of(conn)
    sock = writer.get_extra_info("socket") if writer is not None else None
    if sock is None:
        return True
    try:
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


#: The tasks that check a connection out or give one back (kept referenced until done).
_connecting: set[asyncio.Task[None]] = set()


def _background(work: Coroutine[Any, Any, None]) -> None:
    task = asyncio.ensure_future(work)
    _connecting.add(task)
    task.add_done_callback(_connecting.discard)


async def _check_out(client: Client, fan: Fan) -> None:
    """A connection of ``client``'s pool for :func:`_scatter`'s next calls
    (counted in ``fan.open`` by the caller), within
    :data:`SPARE_CONNECT_TIMEOUT`."""
    conn = None
    try:
        async with asyncio.timeout(SPARE_CONNECT_TIMEOUT):
            checkout = _clients.checkout(client.connection_pool, _clients.library_of(type(client)))  # type: ignore[union-attr]
            conn = await checkout
    except Exception:
        pass  # (too many connections, the server down: the ordinary path says so)
    finally:
        fan.connecting = False
        if conn is None:
            fan.open -= 1
    if conn is None:
        return
    if not keep(fan, conn, 0, SPARE_CONNECTIONS):
        await _drop(client, fan, conn)


#: The longest wait (seconds) for a spare connection to be checked out.
SPARE_CONNECT_TIMEOUT = 30.0


async def _drop(client: Client, fan: Fan, conn: Any) -> None:
    """Close ``conn`` (a reply may still be due on it) and give it back to
    ``client``'s pool, which connects it again for its next user: the pool
    counts the connections it handed out, and a connection never given back
    would take one of its ``max_connections`` for good."""
    try:
        await conn.disconnect()
    finally:
        fan.open -= 1
        with contextlib.suppress(KeyError):  # (a pool that forgot it: reset)
            await client.connection_pool.release(conn)  # type: ignore[union-attr]


async def _read_all(
    jobs: list[tuple[Client, Plan[Any]]],
    sent: list[tuple[int, Any, Any]],
    deadline: float,
    due: dict[int, int],
    arrived: Callable[[int, list[Any]], bool],
) -> list[list[Any] | Exception | None]:
    """The raw replies to each entry ``(i, connection, step)`` of ``sent``, in
    order (less the ``due[i]`` replies read first), or the exception reading
    them raised, or ``None`` for those not read because ``arrived`` (called
    with each entry's index and replies as they are read) returned ``True``.
    Replies already here are read first, then the others in order, under one
    timeout for all (not one per connection); once it has run out, the entry
    it cut off fails with ``TimeoutError`` and each of the others gets
    :func:`_read_replies`' short wait (its replies may be here already)."""
    got: list[list[Any] | Exception | None] = [None] * len(sent)
    left = list(range(len(sent)))
    reading = -1
    try:
        async with asyncio.timeout(max(0.001, deadline - time.monotonic())):
            while left:
                k = next((k for k in left if _internals.buffered(sent[k][1])), -1)
                if k < 0 and len(left) > 1:
                    await _internals.until_data([sent[k][1] for k in left])
                    k = next((k for k in left if _internals.buffered(sent[k][1])), -1)
                if k < 0:
                    k = left[0]
                left.remove(k)
                i, conn, step = sent[k]
                skip = due.get(i, 0)
                reading = k
                try:
                    raws = (await _read_raw(conn, skip + count(step), jobs[i][0]))[skip:]
                except Exception as exc:
                    if not is_fault(exc):
                        raise  # (cut off: the caller drops every connection)
                    got[k] = exc
                    continue
                reading = -1
                got[k] = raws
                if arrived(k, raws):
                    return got
    except TimeoutError:
        if reading >= 0:
            got[reading] = TimeoutError("no reply in time")
        for k in left:
            i, conn, step = sent[k]
            skip = due.get(i, 0)
            error = library_of(type(jobs[i][0])).response_error
            try:
                got[k] = (await _read_replies(conn, skip + count(step), deadline, error))[skip:]
            except Exception as exc:
                if not is_fault(exc):
                    raise
                got[k] = exc
    return got


async def _read_raw(conn: Any, n: int, client: Client) -> list[Any]:
    """``n`` replies from ``conn``, an error reply in place of its reply,
    with no time limit of its own: the caller's bounds them all (an infinite
    ``timeout`` spares the timer redis-py's ``read_response`` otherwise sets
    for its ``socket_timeout`` on every call)."""
    error = library_of(type(client)).response_error
    raws: list[Any] = []
    for _ in range(n):
        try:
            raws.append(await conn.read_response(timeout=math.inf))
        except error as exc:
            raws.append(exc)
    return raws


async def _read_replies(conn: Any, n: int, deadline: float, error: type[Exception]) -> list[Any]:
    """``n`` replies from ``conn``, an error reply (``error``) in place of its reply.

    Raises:
        TimeoutError: they did not all come before ``deadline``.
    """
    raws: list[Any] = []
    # past the deadline: only replies already here (a zero wait still reads them)
    async with asyncio.timeout(max(0.001, deadline - time.monotonic())):
        for _ in range(n):
            try:
                raws.append(await conn.read_response())
            except error as exc:
                raws.append(exc)
    return raws


async def listen_each(
    clients: Iterable[Client], channel: str, event: asyncio.Event, timeout: float
) -> list[Callable[[], None] | None]:
    """Subscribe the wake hub of every client to the broadcast ``channel`` at the
    same time, each message (and each reconnection of a hub) setting ``event``;
    wait at most ``timeout`` seconds for the confirmations. Returns, per client,
    the function that stops listening, or ``None`` if its SUBSCRIBE failed or was
    not confirmed in time (then nothing is left listening on it). Call the
    functions when done: the channel then lingers and is unsubscribed.
    Cancelled or interrupted, it stops every listen itself (once done)."""

    async def one(client: Client) -> Callable[[], None] | None:
        hub = state_of(client).hub
        try:
            async with asyncio.timeout(timeout):
                ch = await hub.listen(channel, event)
        except Exception:
            return None
        try:
            async with asyncio.timeout(timeout):
                await ch.ready.wait()
        except TimeoutError:
            hub.unlisten(ch, event)
            return None
        except BaseException:  # cancelled: nothing may be left listening either
            hub.unlisten(ch, event)
            raise
        return lambda: hub.unlisten(ch, event)

    listens = [asyncio.ensure_future(one(client)) for client in clients]
    try:
        return list(await asyncio.gather(*listens))
    except BaseException:  # cancelled: nothing may be left listening either
        for listen in listens:
            listen.add_done_callback(unlisten_late)
        raise
