"""The synchronous driver's calls on several servers at once (a Redlock's
masters): :func:`run_each` drives one plan per server in parallel within a
deadline, :func:`listen_each` listens on a wake channel on each, and
:func:`watch_shared` renews leases with a watchdog shared by every lock of
the kind (on a quorum of each lease's masters). Split from :mod:`._sync`,
whose connections, hub and watchdog it uses."""

from __future__ import annotations

import contextlib
import functools
import os
import select
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import redis.exceptions

from .._plans import redlock as redlock_plans
from .._protocol import Plan
from . import _clients, _internals
from ._fanout_shared import (
    NOT_DONE,
    PROCESS,
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
from ._fanout_threads import Call, Workers
from ._sync import (
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

#: The process's shared watchdogs, one per renewal function (a Redlock's,
#: which renews any set of leases on their masters' quorums).
_dogs = SharedDogs(functools.partial(Watchdog, None, REDIS), lambda: PROCESS, threading.Lock)


def watch_shared(lease: Watchable, renew: bool, send: SendRenewals) -> Watch:
    """Watch ``lease`` with the process's watchdog for ``send`` (one per
    ``send`` and process, whatever the number of locks: a single thread, which
    ends :data:`~._watchbook.LINGER` seconds after its last lease), which
    renews each batch of due leases with ``send`` instead of one client's
    pipeline (a Redlock's leases, renewed on a quorum of their masters).
    ``send`` must be a module-level function (it is the key). Stop and unwatch
    with :func:`stop_renewing_shared` and :func:`unwatch_shared`."""
    return _dogs.watch(lease, renew, send)


#: :func:`stop_renewing` for a lease watched by :func:`watch_shared`.
stop_renewing_shared = _dogs.stop_renewing

#: :func:`unwatch` for a lease watched by :func:`watch_shared`.
unwatch_shared = _dogs.unwatch


def _wait(calls: Iterable[Call[Any]], timeout: float) -> None:
    """Wait until every one of ``calls`` is done, for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    for call in calls:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        call.wait(left)


_workers = Workers()


def run_each(
    jobs: Iterable[tuple[Client, Plan[Any]]],
    timeout: float,
    enough: Callable[[list[Any]], bool] | None = None,
    *,
    behind: bool = False,
    need: int = 0,
) -> list[Any]:
    """:func:`._fanout_async.run_each` on threads: the same arguments,
    results and rules (``enough``, ``behind``, ``need``, a slow server waited for by
    none of the others, the connections of the quick path kept for each pool
    or dropped), in this flavour's way. Each round of the quick path is
    written to every server, then the replies read, in the calling thread
    (one ``poll`` over the sockets; a server that does not answer in time has
    its connection dropped). A plan of the ordinary path runs on a worker
    thread of its own (:class:`~._fanout_threads.Workers`): a call still
    stuck when the time is up is left to finish there, its result dropped;
    while it is stuck, that client's next plans are :class:`Unsent`, so that
    no thread piles up behind a paused server. With ``behind``, a plan for a
    client with any call still in flight on a worker thread is
    :class:`Unsent` (the caller queues it with :func:`send_late`).
    """
    return _scatter(list(jobs), time.monotonic() + timeout, enough, behind, least=need)


#: The calls made on a worker thread for each client that have not returned
#: yet (while one has not, no other is started for a suspect client: a paused
#: server, no socket timeout), and the steps :func:`send_late` queued behind them.
_book = LateBook(threading.Lock)


def send_late(client: Client, step: redlock_plans.Late, until: float) -> bool:
    """:func:`._fanout_async.send_late` on threads: ``step`` waits for
    every call in flight on ``client``'s server on a worker thread when it
    is queued, then the queued steps go in one round trip on a worker
    thread (while it waits for the answer, that client's next calls of
    :func:`run_each` are :class:`Unsent` again if under suspicion or
    ``behind``). Returns whether it was queued."""
    queued = _book.queue(client, step, until)
    if queued == "ready":
        _deliver(client)
    return queued != "dropped"


def _in_flight(client: Client, future: Call[Any]) -> None:
    """``future`` is a call on a worker thread for ``client`` (later calls
    queue behind it until it returns), known before the call is handed
    over: a release never overtakes a call of which an interrupt kept the
    caller from hearing, whatever other calls to that server start or end
    meanwhile (each one is waited for, not only the last)."""
    _book.track(client, future, _deliver)


def _deliver(client: Client) -> None:
    """Send the steps queued for ``client`` by :func:`send_late` whose calls
    waited for have all returned (those still wanted), in one round trip, on
    a worker thread that the next ones queue behind. The worker takes them
    off the queue: a hand-over cut off by an interrupt leaves them queued for
    the next delivery, never lost."""
    if not _book.any_ready(client):
        return  # none yet: each goes once the calls it waits for returned
    _workers.submit(functools.partial(_send_queued, client), functools.partial(_in_flight, client))


def _send_queued(client: Client) -> Any:
    """On a worker thread: send the steps queued for ``client`` that are still wanted."""
    steps = [step for step, _ in _book.take(client, time.monotonic())]
    if not steps:
        return None
    return _run_trusted(client, redlock_plans.late_plan(steps))


def _scatter(
    jobs: list[tuple[Client, Plan[Any]]],
    deadline: float,
    enough: Callable[[list[Any]], bool] | None = None,
    behind: bool = False,
    least: int = 0,
) -> list[Any]:
    """:func:`run_each` on one thread: each round's steps written to every
    server, then the replies read, until every plan is done, ``enough`` says
    so, or ``deadline`` (``least``: :func:`run_each`'s ``need``)."""
    results: list[Any] = [NOT_DONE] * len(jobs)
    steps: dict[int, Any] = {}
    threaded: dict[int, Call[Any]] = {}
    conns: dict[int, Any] = {}
    due: dict[int, int] = {}  # replies due on conns[i] before its own
    fans: dict[int, Fan] = {}  # the pool's connections conns[i] belongs to
    suspects: set[int] = set()  # the jobs in ``threaded`` whose server is under suspicion
    held: list[int] = []  # the jobs on a suspect server with a call still in flight
    step_on = functools.partial(advance, jobs, steps, results)

    try:
        # (a connection taken here is dropped if an interrupt cuts the loop off)
        for i, (client, plan) in enumerate(jobs):
            suspect = suspected(client)
            if (suspect or behind) and _book.busy(client):
                # a call still stuck on that server (paused): no second thread for
                # it; or one still in flight that this one must not overtake
                if behind:
                    plan.close()
                    results[i] = Unsent(_HELD)
                else:
                    held.append(i)
                continue
            if not suspect:
                state = state_of(client)
                fan = state.fan
                if state.server is not None and fan is not None:
                    taken = _take_connection(client, fan)
                    if taken is not None:
                        conns[i], due[i] = taken
                        fans[i] = fan
                        continue
            if suspect:
                suspects.add(i)
            threaded[i] = _workers.submit(
                functools.partial(_run_trusted, client, plan), functools.partial(_in_flight, client)
            )
        wait_held = sum(1 for r in results if r is NOT_DONE) - len(held) < least
        for i in held:
            client, plan = jobs[i]
            if wait_held:
                suspects.add(i)
                after = functools.partial(_after, client, plan, _book.in_flight(client), deadline)
                threaded[i] = _workers.submit(after, functools.partial(_in_flight, client))
            else:
                plan.close()
                results[i] = Unsent(_HELD)
        for i in range(len(jobs)):
            if i not in threaded and results[i] is NOT_DONE:
                step_on(i, None, None)
        stopped = False
        while steps and not stopped:
            sent: list[tuple[int, Any, Any]] = []
            packed: dict[
                tuple[int, Any, Any], Any
            ] = {}  # the same step to every server: packed once
            for i, step in list(steps.items()):
                client = jobs[i][0]
                conn = conns[i]
                try:
                    key = pack_key(conn, step)
                    data = packed.get(key)
                    if data is None:
                        data = packed[key] = conn.pack_commands(
                            commands(step, _clients.evalsha_args)
                        )
                    conn.send_packed_command(data)
                except Exception as exc:
                    if not is_fault(exc):
                        raise  # (cut off: the connections are dropped below)
                    del conns[i]
                    _drop(client, fans[i], conn)
                    _servers.failed(client)
                    step_on(i, None, exc)
                    continue
                sent.append((i, conn, step))
            unread = {i for i, _, _ in sent}
            need = {i: due.get(i, 0) + count(step) for i, _, step in sent}
            read: dict[int, int] = {}  # replies read so far on each connection
            errors = {i: library_of(type(jobs[i][0])).response_error for i, _, _ in sent}
            for (i, conn, step), got in _collect(sent, deadline, need, read, errors):
                unread.discard(i)
                client = jobs[i][0]
                skip = due.pop(i, 0)
                if isinstance(got, BaseException):
                    del conns[i]
                    _drop(client, fans[i], conn)
                    _servers.failed(client)
                    step_on(i, None, got)
                    continue
                raws = got[skip:]
                try:
                    reply = replies(step, raws)
                except Fallback:
                    try:  # NOSCRIPT, or an error reply: the ordinary path says it right
                        reply = perform(client, step, [])
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
                if enough is not None and i not in steps and unread and enough(results):
                    stopped = True
                    break
            if stopped:  # the unread replies are read by the next call on each connection
                for i, conn, _ in sent:
                    if i in unread:  # less the replies already read (an earlier call's)
                        due.pop(i, None)
                        del conns[i]
                        _give_back(jobs[i][0], fans[i], conn, need[i] - read.get(i, 0))
                for i in list(steps):
                    jobs[i][1].close()
                    results[i] = NotYet("no reply waited for: enough others answered")
                steps.clear()
    except BaseException:
        for i, conn in conns.items():  # cut off: a reply may still be due on each
            with contextlib.suppress(Exception):
                _drop(jobs[i][0], fans[i], conn)
        raise
    for i, conn in conns.items():
        _give_back(jobs[i][0], fans[i], conn, due.get(i, 0))
    unwaited: set[int] = set()
    if enough is not None and enough(results):
        # enough answered: a server under suspicion (paused?) is not waited
        # for; its call goes on on its worker thread, its result dropped
        unwaited = {i for i in suspects if not threaded[i].done()}
    waited = [future for i, future in threaded.items() if i not in unwaited]
    if waited:
        _wait(waited, max(0.0, deadline - time.monotonic()))
    for i, future in threaded.items():
        if i in unwaited:
            results[i] = NotYet("no reply waited for: enough others answered")
        elif future.done():
            error = future.exception()
            results[i] = error if error is not None else future.result()
            if error is not None and _no_answer(jobs[i][0], error):
                _servers.broke(jobs[i][0])
        else:
            _servers.failed(jobs[i][0])
    for i, result in enumerate(results):
        if result is NOT_DONE:
            if i not in threaded:
                jobs[i][1].close()
            results[i] = TimeoutError("no reply in time")
    return results


def _take_connection(client: Client, fan: Fan) -> tuple[Any, int] | None:
    """:func:`._fanout_async._take_connection` under :data:`_spare_mutex`
    (a kept connection is checked while it is still kept: an interrupt
    loses none); the connection missing is checked out on a worker thread."""
    stale: list[Any] = []
    try:
        with _spare_mutex:
            while fan.owed:
                conn, count = fan.owed.pop()
                if _internals.sock_of(conn) is not None:
                    return conn, count
                stale.append(conn)
            while fan.spare:
                conn = fan.spare[-1]  # (kept while it is checked: an interrupt loses none)
                sound = _sound(conn)
                fan.spare.pop()
                if sound:
                    return conn, 0
                stale.append(conn)
            if fan.connecting or fan.open - len(stale) >= fan.most:
                return None
            fan.connecting = True
            fan.open += 1
    finally:
        for conn in stale:
            _drop(client, fan, conn)
        if stale:
            _servers.broke(client)
    _workers.submit(
        functools.partial(_check_out, client, fan),
        lambda future: future.add_done_callback(functools.partial(_not_checked_out, fan)),
    )
    return None


def _not_checked_out(fan: Fan, future: Call[Any]) -> None:
    """A check-out an interrupt cut off before it began: the next call may start one."""
    if future.cancelled():
        with _spare_mutex:
            fan.connecting = False
            fan.open -= 1


def _sound(conn: Any) -> bool:
    """Whether an idle connection (no reply due on it) is still open: a socket
    with nothing to read (a server that closed it shows as something to read)."""
    if _internals.sock_of(conn) is None:
        return False
    try:
        return not conn.can_read(timeout=0)
    except Exception as exc:
        if not is_fault(exc):
            raise  # an interrupt, of any class, is the caller's
        return False


def _check_out(client: Client, fan: Fan) -> None:
    """On a worker thread: a connection of ``client``'s pool for
    :func:`_scatter`'s next calls (counted in ``fan.open`` by the caller)."""
    conn = None
    try:
        conn = _clients.checkout(client.connection_pool, _clients.library_of(type(client)))  # type: ignore[union-attr]
    except Exception:
        pass  # (too many connections, the server down: the ordinary path says so)
    finally:
        with _spare_mutex:
            fan.connecting = False
            if conn is None:
                fan.open -= 1
    if conn is not None:
        _give_back(client, fan, conn)


def _give_back(client: Client, fan: Fan, conn: Any, due: int = 0) -> None:
    """:func:`~._fanout_shared.keep` ``conn`` (``due``: the replies still due
    on it) for the next calls on its pool, or drop it."""
    with _spare_mutex:
        kept = keep(fan, conn, due, SPARE_CONNECTIONS)
    if not kept:
        _drop(client, fan, conn)


def _drop(client: Client, fan: Fan, conn: Any) -> None:
    """:func:`._fanout_async._drop` (close ``conn``, give it back to
    ``client``'s pool), in the calling thread."""
    try:
        conn.disconnect()
        client.connection_pool.release(conn)  # type: ignore[union-attr]
    finally:
        with _spare_mutex:
            fan.open -= 1


#: Guards every pool's :class:`~._sync.Fan` (see :func:`._sync._fan_for`).
_spare_mutex = threading.Lock()


#: The clients whose server failed to answer :func:`run_each` in time (or at
#: all), until a call on a worker thread gets an answer again; and how many times
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


def _after(client: Client, plan: Plan[T], calls: list[Any], deadline: float) -> T:
    """On a worker thread: :func:`_run_trusted` of ``plan`` once ``calls`` (in
    flight on ``client``'s suspect server) all ended by ``deadline``, if the
    server answered one of them since; otherwise :class:`Unsent`, nothing sent."""
    try:
        _wait(calls, deadline - time.monotonic())
        if not all(call.done() for call in calls) or suspected(client):
            raise Unsent(_HELD)
    except BaseException:
        plan.close()
        raise
    return _run_trusted(client, plan)


def _run_trusted(client: Client, plan: Plan[T]) -> T:
    """:func:`run`; an answer (even an error reply) clears the client's suspicion."""
    try:
        result = run(client, plan)
    except redis.exceptions.ConnectionError:
        raise
    except Exception:
        _servers.answered(client)
        raise
    _servers.answered(client)
    return result


Sent = tuple[int, Any, Any]


def _collect(
    sent: list[Sent],
    deadline: float,
    need: dict[int, int],
    taken: dict[int, int],
    errors: dict[int, type[Exception]],
) -> Iterator[tuple[Sent, list[Any] | BaseException]]:
    """The entries ``(i, connection, step)`` of ``sent`` as their ``need[i]``
    replies (an error reply in place of its reply) are all read, each with
    them; or with the exception reading them raised (``TimeoutError`` once
    ``deadline`` passed). One ``poll`` watches every connection, and a
    connection is read only as far as its replies are here: one whose first
    replies (due from an earlier call) came, but not the others, never holds
    up the reading of the other servers. ``taken[i]``: how many replies were
    read so far on entry ``i``'s connection (for the caller that stops early)."""
    poller = select.poll()
    by_fd: dict[int, Sent] = {}
    got: dict[int, list[Any]] = {}
    ready: list[Sent] = []
    for entry in sent:
        i, conn, _ = entry
        got[i] = []
        watched = _internals.fileno_of(conn)
        if watched < 0 or watched in by_fd:  # can't be: read at the deadline at the latest
            ready.append(entry)
            continue
        by_fd[watched] = entry
        poller.register(watched, select.POLLIN)
    for entry in list(by_fd.values()):
        # replies of an earlier call may wait in the parser's buffer, not the socket
        if need[entry[0]] > count(entry[2]) and entry[1].can_read(timeout=0):
            ready.append(entry)
    while True:
        for entry in ready:
            i, conn, _ = entry
            fd = _fd_of(by_fd, entry)
            raws = got[i]
            fresh = 0  # replies read in this turn
            try:
                while len(raws) < need[i]:
                    if fd is None:  # not watched: wait for each reply, to the deadline
                        if not conn.can_read(timeout=max(0.0, deadline - time.monotonic())):
                            raise TimeoutError("no reply in time")
                    elif fresh and not conn.can_read(timeout=0):
                        break  # the others are not here yet: read the other servers
                    fresh += 1
                    try:
                        raws.append(conn.read_response())
                    except errors[i] as exc:
                        raws.append(exc)
                    taken[i] = len(raws)
            except Exception as exc:
                if not is_fault(exc):
                    raise  # (cut off: the caller drops every connection)
                if fd is not None:
                    poller.unregister(fd)
                    del by_fd[fd]
                yield entry, exc
                continue
            if len(raws) >= need[i]:
                if fd is not None:
                    poller.unregister(fd)
                    del by_fd[fd]
                yield entry, raws
        if not by_fd:
            return
        events = poller.poll(max(0.0, deadline - time.monotonic()) * 1000)
        if not events:  # the deadline passed
            for entry in by_fd.values():
                yield entry, TimeoutError("no reply in time")
            return
        ready = [by_fd[fd] for fd, _ in events]


def _fd_of(by_fd: dict[int, Sent], entry: Sent) -> int | None:
    """The polled descriptor of ``entry``'s connection (``None``: not polled)."""
    fd = _internals.fileno_of(entry[1])
    return fd if by_fd.get(fd) is entry else None


def listen_each(
    clients: Iterable[Client], channel: str, event: threading.Event, timeout: float
) -> list[Callable[[], None] | None]:
    """:func:`._fanout_async.listen_each` on worker threads (``event``:
    a :class:`threading.Event`, set by each hub's reader thread)."""

    def one(client: Client) -> Callable[[], None] | None:
        hub = state_of(client).hub
        ch = hub.listen(channel, event)
        if not ch.ready.wait(timeout):
            hub.unlisten(ch, event)
            return None
        return lambda: hub.unlisten(ch, event)

    futures: list[Call[Callable[[], None] | None]] = []
    try:  # (each listen known before it is handed over: see Workers.submit)
        for client in clients:
            _workers.submit(functools.partial(one, client), futures.append)
        _wait(futures, timeout)
    except BaseException:  # interrupted: nothing may be left listening either
        for future in futures:
            future.add_done_callback(unlisten_late)
        raise
    out: list[Callable[[], None] | None] = []
    for future in futures:
        if future.done() and future.exception() is None:
            out.append(future.result())
            continue
        out.append(None)
        # a SUBSCRIBE still in flight: stop listening once it is done
        future.add_done_callback(unlisten_late)
    return out


def _after_fork() -> None:
    """In a forked child: forget the parent's worker threads, its calls in
    flight on them (they never finish here: their clients would stay suspect
    for good) and its suspicions; a new mutex for the spare connections; the
    parent's shared watchdogs (their threads do not exist here, and a mutex of
    theirs may be held: a parent's lease is never sent to one)."""
    global _spare_mutex
    _workers.forget()
    _dogs.forget()
    _servers.forget()
    _book.forget()
    _spare_mutex = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)
