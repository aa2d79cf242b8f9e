# GENERATED from _async/drive.py by scripts/unasync.py: do not edit.
"""Plan driving: run a plan (or several side by side) to its result, step by
step, and clean up what it held (its channels, its place at the gate)
whatever ends it.

Part of the driver's single source: ``_sync/drive.py`` is generated from
this file by ``scripts/unasync.py``. What differs per flavour (the waits, the
gate, the cancellation guard) comes from the runtime module.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

from ... import _telemetry
from ..._plans import server as server_plans
from ..._protocol import (
    Command,
    Contend,
    Eval,
    HandedOff,
    Listening,
    Pipeline,
    Plan,
    Step,
    Subscribe,
    WaitWake,
    command_refusal,
    note_result,
    parse_reply,
)
from .. import _clients
from .._clients import Fallback
from .._hubbook import confirm_wait, is_noperm, refusal
from .._runtime_sync import (
    Event,
    acquire,
    cancel_requests,
    new_event,
    owns,
    swallowed,
    wait_set,
)
from .._watchbook import Watch, Watchable
from .hub import _Hub
from .hubbase import _Channel, wait_event
from .pins import _let_pin_go, _pin_for
from .send import _evalsha, _load_on_pin, _pipeline, _quick_together, _refusal
from .state import Client, T, _hub, _state
from .statebase import _State


def run(client: Client, plan: Plan[T]) -> T:
    """Drive ``plan`` to its result with ``client``; the first call probes the server.

    Raises whatever the plan raises, and the client library's connection errors.
    """
    state = _state(client)
    if state.server is None:
        _probe(client, state)
    return _drive(client, plan, state)


def server_name(client: Client) -> str:
    """What serves ``client``: ``"redis"`` or ``"valkey"``, as its first
    call's probe found (before it: as its client library suggests)."""
    server = _state(client).server
    if server is not None:
        return server.name
    return "valkey" if type(client).__module__.startswith("valkey") else "redis"


def batch_key(client: Client) -> object | None:
    """What :func:`run_together` shares among clients: their connection pool
    (plans of clients with the same pool may be run together, on a client
    of any of them); ``None`` for a Redis Cluster client (its calls go to
    the node of each key's slot)."""
    if _clients.is_cluster(type(client)):
        return None
    return getattr(client, "connection_pool", None)


def run_together(client: Client, plans: list[Plan[Any]]) -> list[Any]:
    """Drive ``plans`` side by side with ``client``: each round, the script
    calls the plans yield (one each) are written back to back on one
    connection and their replies read in order, one round trip for them all
    (the quick path's connection, else a pipeline of the client's). Return,
    in order, each plan's result or the exception it raised; each plan runs
    to its end whatever the others do (a cancellation is thrown into every
    plan whose call was in flight, which then cleans up as it would alone,
    its clean-up calls sent together in the next round).

    The plans may yield :class:`Eval`, :class:`Command`, :class:`Pipeline`
    and :class:`Listening` steps (the others are thrown back as a
    ``TypeError``). On a Redis Cluster client, or for one plan, the plans
    run one after the other (an interruption then closes those not started).
    """
    state = _state(client)
    if state.server is None:
        _probe(client, state)
    one_by_one = len(plans) == 1 or _clients.is_cluster(type(client))
    results: list[Any] = [None] * len(plans)
    replies: list[Any] = [None] * len(plans)
    errors: list[BaseException | None] = [None] * len(plans)
    live: list[int] = [] if one_by_one else list(range(len(plans)))
    try:
        try:
            for i, plan in enumerate(plans if one_by_one else []):
                try:
                    results[i] = _drive(client, plan)
                except Exception as exc:
                    results[i] = exc
                except BaseException as exc:
                    results[i] = exc
                    for j in range(i + 1, len(plans)):
                        results[j] = exc  # (not started: closed below)
                    break
            while live:
                going: list[int] = []
                due: list[int] = []
                steps: list[Eval] = []
                for i in live:
                    plan, error = plans[i], errors[i]
                    try:
                        if error is None:
                            step = plan.send(replies[i])
                        else:
                            errors[i] = None
                            step = plan.throw(error)
                    except StopIteration as stop:
                        results[i] = stop.value
                        continue
                    except BaseException as exc:
                        results[i] = exc
                        continue
                    going.append(i)
                    if type(step) is Eval:
                        due.append(i)
                        steps.append(step)
                        continue
                    asked = cancel_requests()
                    try:
                        if not isinstance(step, Command | Pipeline | Listening):
                            raise TypeError(f"run_together runs no {type(step).__name__} step")
                        replies[i] = _perform(client, step, [])
                    except BaseException as exc:
                        errors[i] = exc
                    else:
                        errors[i] = swallowed(asked)
                live = going
                if not steps:
                    continue
                asked = cancel_requests()
                try:
                    answers = _send_together(client, state, steps)
                except BaseException as exc:
                    for i in due:
                        errors[i] = exc
                    continue
                if (cancel := swallowed(asked)) is not None:
                    for i in due:
                        errors[i] = cancel
                    continue
                for i, answer in zip(due, answers, strict=True):
                    if isinstance(answer, BaseException):
                        errors[i] = answer
                    else:
                        replies[i] = answer
        finally:
            for plan in plans:
                plan.close()
    except BaseException as exc:
        # cut off (an interrupt at a loop's jump back, where Python runs
        # signal handlers, between rounds, or in the plans' close): the
        # results the plans returned go with the error (see note_result)
        note_result(exc, list(results))
        raise
    return results


def _send_together(client: Client, state: _State, steps: list[Eval]) -> list[Any]:
    """The script calls ``steps`` in one round trip, on one connection: each
    one's parsed reply, or the exception it raised (its error reply, a
    ``WrongTypeError``, a ``PermissionDenied``). On the quick path (see
    :func:`_quick`): written back to back on one of its connections, the
    replies read in order; after NOSCRIPT (every reply read first), a failed
    connection or a full quick path, a pipeline of the client's (which loads
    the scripts and sends them all again, as a retry would)."""
    reserve = state.reserve
    if reserve is not None:
        pin = _pin_for(client)
        raws: list[Any] | None = None
        try:
            raws = _quick_together(client, reserve, state.retries, steps, pin)
        except Fallback:
            if pin is not None and pin.conn is not None:  # (NOSCRIPT: loaded there, sent again)
                with contextlib.suppress(Fallback):
                    for spec in {step.script for step in steps}:
                        _load_on_pin(client, pin, spec.source)
                    raws = _quick_together(client, reserve, state.retries, steps, pin)
        if raws is not None:
            answers: list[Any] = []
            for step, raw in zip(steps, raws, strict=True):
                if isinstance(raw, Exception):
                    answers.append(_refusal(client, step, raw) or raw)
                    continue
                # one answer per step, appended once: an interrupt (of any
                # class) after the append goes to the caller, not in the list
                try:
                    answer: Any = parse_reply(step.script, raw)
                except Exception as exc:
                    answer = exc
                answers.append(answer)
            return answers
    return _pipeline(client, Pipeline(tuple(steps)))


def _probe(client: Client, state: _State) -> None:
    """Probe the server once (calls made at once share one probe)."""
    with state.probing:
        if state.server is not None:
            return
        try:
            server = _drive(client, server_plans.probe())
        except Exception as exc:
            denied = command_refusal(exc, "the server probe") if is_noperm(exc) else None
            if denied is not None:
                raise denied from exc
            raise
        if _clients.is_cluster(type(client)):
            state.sharded = _clients.sharded_pubsub(server.name, server.version)
        state.server = server


class _Contention:
    """A plan's wait on a channel (a ``Contend``, or a ``Subscribe``'s listener)."""

    def __init__(self, ch: _Channel, token: str, *, listener: Event | None = None) -> None:
        self.ch = ch
        self.token = token
        self.entered = False
        #: whether the runner held the channel's gate before this contention
        #: asked for it (True until that was read: nothing to give back before).
        #: An interrupt (a signal handler's KeyboardInterrupt) between the gate's
        #: acquire and ``entered``'s store leaves ``entered`` False while the
        #: thread holds the gate: the clean-up gives it back when the thread holds
        #: it and did not before, or the process's other waiters would stall on
        #: it (see the runtime's ``owns``).
        self.owned_before = True
        self.listener = listener  # set for a Subscribe: its own wake event

    @property
    def hub(self) -> _Hub:
        """The hub that holds the channel now (see ``_Channel.home``)."""
        return self.ch.home  # type: ignore[no-any-return]


#: The steps that wait (for a wake, a contention, a subscription): a block of
#: :func:`one_connection` keeps no connection through them.
_WAITS = (WaitWake, Contend, Subscribe)


def _drive(client: Client, plan: Plan[T], state: _State | None = None) -> T:
    held: list[_Contention] = []
    reply: Any = None
    error: BaseException | None = None
    sending = False  # (for a plan that is not a generator: its send is running)
    granted = False  # the plan ended holding what it waited for
    result: Any = None
    try:
        while True:
            try:
                # One try around the whole loop, its jump back included (where
                # Python runs signal handlers): an interrupt anywhere between a
                # reply and the plan's next step is thrown into the plan, which
                # cleans up. The handlers make no calls (a call is where a
                # signal handler may run again).
                while True:
                    sending = True
                    step = plan.send(reply) if error is None else plan.throw(error)
                    sending = False
                    error = None
                    asked = cancel_requests()
                    if type(step) is Eval:  # (the common step, without _perform's dispatch)
                        reply = parse_reply(step.script, _evalsha(client, step, state))
                    else:
                        reply = _perform(client, step, held)
                    if (error := swallowed(asked)) is not None:
                        reply = None
            except StopIteration as stop:
                try:
                    ended = plan.gi_frame is None  # type: ignore[attr-defined]
                except AttributeError:
                    ended = sending
                if ended:  # the plan returned
                    granted, result = stop.value is not None, stop.value
                    return stop.value  # type: ignore[no-any-return]
                reply, error = None, stop
            except BaseException as exc:
                try:
                    ended = plan.gi_frame is None  # type: ignore[attr-defined]
                except AttributeError:
                    ended = sending
                if ended:
                    raise  # the plan raised it, after its own clean-up
                # from the driver (or a cancellation): the plan has not seen it
                reply, error = None, exc
    finally:
        try:
            try:
                for c in reversed(held):
                    if c.listener is not None:
                        c.hub.unlisten(c.ch, c.listener)
                        continue
                    if c.entered or (not c.owned_before and owns(c.ch.gate)):
                        c.ch.gate.release()
                    c.hub.leave(c.ch, c.token, granted)
            finally:
                plan.close()
        except BaseException as exc:
            # (an interrupt here, even as plan.close() returns, where Python
            # runs signal handlers): the caller may still give the result back
            if granted:
                note_result(exc, result)
            raise


def _perform(client: Client, step: Step, held: list[_Contention]) -> Any:
    if type(step) is Listening:  # (every acquire's first step)
        return _hub(client, step.keys.wake_prefix).listening(step.keys.wake_prefix)
    if isinstance(step, Eval):
        return parse_reply(step.script, _evalsha(client, step))
    if type(step) in _WAITS:
        _let_pin_go()  # (a wait keeps no connection checked out)
    if isinstance(step, WaitWake):
        c = held[-1]
        if c.listener is None:
            ch = c.ch
            ch.wait_until = math.inf if step.timeout is None else time.monotonic() + step.timeout
            try:
                woken = c.hub.wait_wake(ch, step.timeout)
            finally:
                ch.wait_until = None
        else:
            woken = wait_event(c.listener, step.timeout)
        refusal(c.ch)
        wake = c.hub.woken(c.ch, c.token, woken)
        if type(wake) is HandedOff:
            _telemetry.handed_off(wake.fence)
        return wake
    if isinstance(step, Contend):
        _telemetry.waiting()
        hub = _hub(client, step.keys.wake_prefix)
        started = time.monotonic()
        keys = step.keys if step.pass_on else None
        waiter = hub.own_waiter() if step.own_channel else hub.waiter
        ch = hub.enter(keys, step.keys.wake_prefix + waiter, step.token)
        c = _Contention(ch, step.token)
        held.append(c)
        wait_set(ch.ready, confirm_wait(step.timeout))
        refusal(ch)
        c.owned_before = owns(ch.gate)
        left = None if step.timeout is None else step.timeout - (time.monotonic() - started)
        c.entered = acquire(ch.gate, left)
        return waiter if c.entered else None
    if isinstance(step, Subscribe):
        hub = _hub(client, step.channel)
        event = new_event()
        ch = hub.listen(step.channel, event)
        held.append(_Contention(ch, "", listener=event))
        confirmed = wait_set(ch.ready, step.timeout)
        refusal(ch)
        return confirmed
    if isinstance(step, Command):
        return client.execute_command(*step.args)  # type: ignore[no-untyped-call,unused-ignore]
    if isinstance(step, Pipeline):
        return _pipeline(client, step)
    raise TypeError(f"unknown step {step!r}")


def watch(client: Client, lease: Watchable, renew: bool) -> Watch:
    """Watch ``lease`` with the client's watchdog (renewing it if ``renew``) until
    :func:`unwatch`; its ``_lose`` is called when it is lost (in the asyncio
    flavour: call from a task)."""
    return _state(client).watchdog.watch(lease, renew)


def stop_renewing(client: Client, watch: Watch) -> None:
    """Never renew ``watch``'s lease again (its release was attempted); its
    deadline is still watched."""
    if watch.renewable:  # (else there is nothing to stop)
        (watch.dog or _state(client).watchdog).stop_renewing(watch)


def unwatch(client: Client, watch: Watch | None) -> None:
    """Stop watching a lease (released or lost); ``None``: a lease whose start
    was cut off before it was watched, which has nothing to stop."""
    if watch is not None:
        (watch.dog or _state(client).watchdog).unwatch(watch)
