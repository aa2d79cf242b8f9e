"""The asyncio driver's calls on several servers at once (a Redlock's
masters): :func:`run_each` drives one plan per server in parallel within a
deadline, :func:`listen_each` listens on a wake channel on each, and
:func:`watch_with` renews leases with a watchdog of their owner's own (on a
quorum). Split from :mod:`._async`, whose connections, hub and watchdog it uses."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import redis.asyncio
import redis.asyncio.client
import redis.exceptions

from .._protocol import (
    Command,
    Eval,
    Pipeline,
    Plan,
    Status,
    parse_reply,
)
from . import _clients, _identity
from ._async import (
    _REDIS,
    SPARE_CONNECTIONS,
    Client,
    T,
    _Library,
    _library,
    _perform,
    _SendRenewals,
    _State,
    _state,
    _Watchdog,
    run,
)
from ._watchbook import Watch, Watchable

_own_watchdogs: weakref.WeakKeyDictionary[Any, tuple[int, Any, _Watchdog]] = (
    weakref.WeakKeyDictionary()
)


def watch_with(owner: object, lease: Watchable, renew: bool, send: _SendRenewals) -> Watch:
    """Watch ``lease`` with a watchdog of ``owner``'s own (one per owner, process
    and event loop), which renews with ``send`` instead of one client's pipeline
    (a Redlock's leases, renewed on a quorum of masters). Stop and unwatch with
    :func:`stop_renewing_with` and :func:`unwatch_with`. Call from a task."""
    loop = asyncio.get_running_loop()
    entry = _own_watchdogs.get(owner)
    if entry is None or entry[0] != _identity.generation() or entry[1] is not loop:
        entry = (_identity.generation(), loop, _Watchdog(None, _REDIS, _weakly(send)))
        _own_watchdogs[owner] = entry
    return entry[2].watch(lease, renew)


def _weakly(send: _SendRenewals) -> _SendRenewals:
    """``send``, a bound method of the watchdog's owner, without a strong
    reference to the owner: the watchdog is the value of the owner's weak entry,
    and through ``send`` it kept every owner (a Redlock per request) alive for
    good. A watched lease holds its owner, so the owner lives while it renews."""
    ref = weakref.WeakMethod(send)

    async def call(leases: list[Any]) -> list[tuple[Status, Any] | None]:
        bound = ref()
        return [None] * len(leases) if bound is None else await bound(leases)

    return call


def _own_watchdog(owner: object) -> _Watchdog | None:
    entry = _own_watchdogs.get(owner)
    return None if entry is None else entry[2]


def stop_renewing_with(owner: object, watch: Watch) -> None:
    """:func:`stop_renewing` for a lease watched by :func:`watch_with`."""
    dog = _own_watchdog(owner)
    if dog is not None:
        dog.stop_renewing(watch)


def unwatch_with(owner: object, watch: Watch) -> None:
    """:func:`unwatch` for a lease watched by :func:`watch_with`."""
    dog = _own_watchdog(owner)
    if dog is not None:
        dog.unwatch(watch)


async def run_each(jobs: Iterable[tuple[Client, Plan[Any]]], timeout: float) -> list[Any]:
    """Drive every plan on its client at the same time, each for at most
    ``timeout`` seconds; return, in order, each plan's result or the exception
    it raised (``TimeoutError`` when it ran out of time). A slow or paused
    server delays none of the others, and the whole call returns within
    ``timeout`` (and a scheduling delay).

    The plans may only yield :class:`Eval`, :class:`Command` and
    :class:`Pipeline` steps. Once every client was used (its server probed),
    each round of steps is written to every server first and the replies read
    after, in this task. A client not yet used, or whose server failed to
    answer (until it answers again), runs its plan in a task of its own
    instead, cancelled when the time is up.

    Raises:
        asyncio.CancelledError: the caller was cancelled (every job is).
    """
    todo = list(jobs)
    deadline = time.monotonic() + timeout
    results: list[Any] = [_NOT_DONE] * len(todo)
    alone: dict[int, asyncio.Task[Any]] = {}
    conns: dict[int, Any] = {}
    states: dict[int, _State] = {}
    for i, (client, plan) in enumerate(todo):
        if client not in _suspects:
            state = _state(client)
            if state.server is not None:
                conn = _take_connection(client, state)
                if conn is not None:
                    conns[i] = conn
                    states[i] = state
                    continue
        alone[i] = asyncio.ensure_future(_run_trusted(client, plan, timeout))
    try:
        await _scatter(todo, deadline, results, conns, states)
        if alone:
            await asyncio.wait(alone.values(), timeout=max(0.0, deadline - time.monotonic()))
    finally:
        for task in alone.values():
            task.cancel()
    for i, task in alone.items():
        if task.done() and not task.cancelled():
            error = task.exception()
            results[i] = error if error is not None else task.result()
        else:
            _suspects[todo[i][0]] = None
    for i, result in enumerate(results):
        if result is _NOT_DONE:
            if i not in alone:
                todo[i][1].close()
            results[i] = TimeoutError("no reply in time")
    return results


_NOT_DONE = object()

#: The clients whose server failed to answer :func:`run_each` in time (or at
#: all), until a call in a task of its own gets an answer again.
_suspects: weakref.WeakKeyDictionary[Any, None] = weakref.WeakKeyDictionary()


async def _run_trusted(client: Client, plan: Plan[T], timeout: float) -> T:
    """:func:`run` within ``timeout``; an answer (even an error reply) clears
    the client's suspicion."""
    try:
        async with asyncio.timeout(timeout):
            result = await run(client, plan)
    except (redis.exceptions.ConnectionError, TimeoutError):
        raise
    except Exception:
        _suspects.pop(client, None)
        raise
    _suspects.pop(client, None)
    return result


class _Fallback(Exception):
    """A reply the quick path of :func:`_scatter` leaves to the ordinary one."""


async def _scatter(
    jobs: list[tuple[Client, Plan[Any]]],
    deadline: float,
    results: list[Any],
    conns: dict[int, Any],
    states: dict[int, _State],
) -> None:
    """:func:`run_each`'s quick path for the jobs in ``conns`` (on the connection
    given there; ``states``: their clients'): each round's steps written to
    every server, then the replies read, until every plan is done or
    ``deadline``; results into ``results``."""
    steps: dict[int, Any] = {}

    def advance(i: int, reply: Any, error: BaseException | None) -> None:
        plan = jobs[i][1]
        try:
            steps[i] = plan.send(reply) if error is None else plan.throw(error)
        except StopIteration as stop:
            results[i] = stop.value
            steps.pop(i, None)
        except Exception as exc:
            results[i] = exc
            steps.pop(i, None)

    for i in conns:
        advance(i, None, None)
    while steps:
        sent: list[tuple[int, Any, Any]] = []
        packed: dict[tuple[int, Any, Any], Any] = {}  # the same step to every server: packed once
        try:
            for i, step in list(steps.items()):
                client = jobs[i][0]
                conn = conns[i]
                try:
                    key = _pack_key(conn, step)
                    data = packed.get(key)
                    if data is None:
                        data = packed[key] = conn.pack_commands(_commands(step))
                    if not _write_now(conn, data):
                        # connecting (the handshake) may block on a paused server
                        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                            await conn.send_packed_command(data)
                except Exception as exc:
                    del conns[i]
                    await _give_back(client, conn, broken=True)
                    _suspects[client] = None
                    advance(i, None, exc)
                    continue
                sent.append((i, conn, step))
            got = await _read_all(jobs, sent, deadline)
            total = len(sent)
            while sent:
                i, conn, step = sent[0]
                client = jobs[i][0]
                try:
                    raws = got[total - len(sent)]
                    if isinstance(raws, BaseException):
                        raise raws
                except Exception as exc:
                    sent.pop(0)
                    del conns[i]
                    await _give_back(client, conn, broken=True)
                    _suspects[client] = None
                    advance(i, None, exc)
                    continue
                sent.pop(0)
                try:
                    reply = _replies(step, raws)
                except _Fallback:
                    try:  # NOSCRIPT, or an error reply: the ordinary path says it right
                        reply = await _perform(client, step, [])
                    except Exception as exc:
                        advance(i, None, exc)
                        continue
                except Exception as exc:
                    advance(i, None, exc)
                    continue
                advance(i, reply, None)
        except BaseException:
            for i, conn, _ in sent:  # cut off: their replies would be read by the next user
                conns.pop(i, None)
                with contextlib.suppress(Exception):
                    await _give_back(jobs[i][0], conn, broken=True)
            raise
    for i, conn in conns.items():
        spare = states[i].spare
        if len(spare) < SPARE_CONNECTIONS:
            spare.append(conn)
        else:
            await conn.disconnect()


def _write_now(conn: Any, data: list[bytes]) -> bool:
    """Hand ``data`` to ``conn``'s transport at once, when it is connected, its
    write buffer is empty (nothing to drain: no wait) and it makes no health
    checks; ``False`` (nothing written) otherwise. What redis-py's
    ``send_packed_command`` does in that case, without the task and the timer
    its ``socket_timeout`` costs per call (each round is bounded by its own
    deadline)."""
    writer = getattr(conn, "_writer", None)
    if writer is None or not getattr(conn, "is_connected", False):
        return False
    if getattr(conn, "health_check_interval", 0):
        return False
    transport = writer.transport
    if transport.is_closing() or transport.get_write_buffer_size():
        return False
    writer.writelines(data)
    return True


def _take_connection(client: Client, state: _State) -> Any | None:
    """An idle, connected connection of :func:`_scatter` to ``client``'s server
    (made on the client's pool settings, outside the pool: no checkout per
    round), or ``None`` when there is none: then one is connected in a task of
    its own for the next rounds (connecting can block on a paused server), one
    at a time. ``state``: the client's."""
    while state.spare:
        conn = state.spare.pop()
        if getattr(conn, "is_connected", False):
            return conn
    if not state.connecting:
        state.connecting = True
        task = asyncio.ensure_future(_connect_spare(client, state))
        _connecting.add(task)
        task.add_done_callback(_connecting.discard)
    return None


#: The tasks connecting a spare connection (kept referenced until done).
_connecting: set[asyncio.Task[None]] = set()


async def _connect_spare(client: Client, state: _State) -> None:
    conn = client.connection_pool.make_connection()  # type: ignore[union-attr,no-untyped-call,unused-ignore]
    try:
        async with asyncio.timeout(SPARE_CONNECT_TIMEOUT):
            await conn.connect()
    except Exception:
        return
    finally:
        state.connecting = False
    await _give_back(client, conn, broken=False)


#: The longest wait (seconds) for a spare connection to be made.
SPARE_CONNECT_TIMEOUT = 30.0


async def _give_back(client: Client, conn: Any, *, broken: bool) -> None:
    """Keep ``conn`` for the next rounds unless ``broken`` (a reply may still be
    due on it: it is disconnected) or enough are kept."""
    spare = _state(client).spare
    if broken or len(spare) >= SPARE_CONNECTIONS:
        await conn.disconnect()
        return
    spare.append(conn)


def _pack_key(conn: Any, step: Any) -> tuple[int, Any, Any]:
    """What a packed step may be reused for: the same step, the same encoding."""
    encoder = getattr(conn, "encoder", None)
    return id(step), getattr(encoder, "encoding", None), getattr(encoder, "encoding_errors", None)


def _count(step: Any) -> int:
    """How many commands ``step`` sends (and so how many replies to read)."""
    if isinstance(step, Pipeline):
        return sum(_count(part) for part in step.steps)
    return 1


def _commands(step: Any) -> list[tuple[Any, ...]]:
    if isinstance(step, Eval):
        return [("EVALSHA", *_clients.evalsha_args(step))]
    if isinstance(step, Command):
        return [step.args]
    if isinstance(step, Pipeline):
        return [c for part in step.steps for c in _commands(part)]
    raise TypeError(f"run_each can't send {step!r}")


async def _read_all(
    jobs: list[tuple[Client, Plan[Any]]], sent: list[tuple[int, Any, Any]], deadline: float
) -> list[list[Any] | Exception]:
    """The raw replies to each entry ``(i, connection, step)`` of ``sent``, in
    order, or the exception reading them raised: read under one timeout for
    all (not one per connection); once it has run out, the entry it cut off
    fails with ``TimeoutError`` and each of the others gets
    :func:`_read_replies`' short wait (its replies may be here already)."""
    got: list[list[Any] | Exception] = []
    try:
        async with asyncio.timeout(max(0.001, deadline - time.monotonic())):
            for i, conn, step in sent:
                try:
                    got.append(await _read_raw(conn, _count(step), jobs[i][0]))
                except Exception as exc:
                    got.append(exc)
    except TimeoutError:
        got.append(TimeoutError("no reply in time"))
        for i, conn, step in sent[len(got) :]:
            library = _library(type(jobs[i][0]))
            try:
                got.append(await _read_replies(conn, _count(step), deadline, library))
            except Exception as exc:
                got.append(exc)
    return got


async def _read_raw(conn: Any, count: int, client: Client) -> list[Any]:
    """``count`` replies from ``conn``, an error reply in place of its reply,
    with no time limit of its own: the caller's bounds them all (an infinite
    ``timeout`` spares the timer redis-py's ``read_response`` otherwise sets
    for its ``socket_timeout`` on every call)."""
    error = _library(type(client)).response_error
    raws: list[Any] = []
    for _ in range(count):
        try:
            raws.append(await conn.read_response(timeout=math.inf))
        except error as exc:
            raws.append(exc)
    return raws


async def _read_replies(conn: Any, count: int, deadline: float, library: _Library) -> list[Any]:
    """``count`` replies from ``conn``, an error reply in place of its reply.

    Raises:
        TimeoutError: they did not all come before ``deadline``.
    """
    raws: list[Any] = []
    # past the deadline: only replies already here (a zero wait still reads them)
    async with asyncio.timeout(max(0.001, deadline - time.monotonic())):
        for _ in range(count):
            try:
                raws.append(await conn.read_response())
            except library.response_error as exc:
                raws.append(exc)
    return raws


def _replies(step: Any, raws: list[Any]) -> Any:
    """The reply of ``step`` from its raw replies (as :func:`_perform` gives it).

    Raises:
        _Fallback: a raw reply is an error (NOSCRIPT, NOPERM, ...).
    """
    for raw in raws:
        if isinstance(raw, Exception):
            raise _Fallback
    if isinstance(step, Eval):
        return parse_reply(step.script, raws[0])
    if isinstance(step, Command):
        return raws[0]
    replies: list[Any] = []
    for part, raw in zip(step.steps, raws, strict=True):
        if isinstance(part, Eval):
            try:
                raw = parse_reply(part.script, raw)
            except Exception as exc:
                raw = exc
        replies.append(raw)
    return replies


async def listen_each(
    clients: Iterable[Client], channel: str, event: asyncio.Event, timeout: float
) -> list[Callable[[], None] | None]:
    """Subscribe the wake hub of every client to the broadcast ``channel`` at the
    same time, each message (and each reconnection of a hub) setting ``event``;
    wait at most ``timeout`` seconds for the confirmations. Returns, per client,
    the function that stops listening, or ``None`` if its SUBSCRIBE failed or was
    not confirmed in time (then nothing is left listening on it). Call the
    functions when done: the channel then lingers and is unsubscribed."""

    async def one(client: Client) -> Callable[[], None] | None:
        hub = _state(client).hub
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
        return lambda: hub.unlisten(ch, event)

    return list(await asyncio.gather(*(one(client) for client in clients)))
