# GENERATED from _async/send.py by scripts/unasync.py: do not edit.
"""Script sending and cluster routing: ``EVALSHA`` on the quick path (a
connection of the pool's reserve, see :mod:`.reserve`) or through the client,
pipelines, the steps of a pinned block (see :mod:`.pins`), the routes of a
Redis Cluster client (a script to the node of its keys' slot, a pipeline with
``WAIT`` to its slot's master).

Part of the driver's single source: ``_sync/send.py`` is generated from this
file by ``scripts/unasync.py``.
"""

from __future__ import annotations

import contextlib
import itertools
import time
import weakref
from collections.abc import Callable, Collection
from typing import Any

from redis.backoff import ExponentialWithJitterBackoff

from ..._errors import PermissionDenied
from ..._protocol import (
    Command,
    Eval,
    Pipeline,
    acl_probe,
    command_refusal,
    key_refusal,
    mark_masterless,
    parse_reply,
    reply_or_error,
)
from .. import _clients, _internals
from .._clients import Fallback
from .._hubbook import is_noperm
from .._runtime_sync import sleep
from .library import _library
from .pins import _Pin, _pin_for, _repin
from .reserve import _discard, _node_reserve, _Reserve, _take, _wake_one
from .state import Client, _master_client, _state
from .statebase import _State


def _evalsha(client: Client, step: Eval, state: _State | None = None) -> Any:
    """EVALSHA of ``step`` (see :func:`_send`; ``state``: the client's, if the
    caller has it), a refusal by the server's ACL named (see :func:`_refusal`)."""
    try:
        return _send(client, step, state)
    except Exception as exc:
        denied = _refusal(client, step, exc)
        if denied is not None:
            raise denied from exc
        raise


def _refusal(client: Client, step: Eval, exc: BaseException) -> PermissionDenied | None:
    """The error naming what the user lacks when the server refused ``step``
    with ``NOPERM`` (``None`` for any other error): the first key it may not
    use, else the first of its script's commands, found by :func:`acl_probe`,
    else the command the refusal names."""
    if not is_noperm(exc):
        return None
    try:
        raw = _send(client, acl_probe(step))
    except Exception:
        raw = None
    denied = None if raw is None else key_refusal(step.script, raw)
    return denied or command_refusal(exc, step.script.name)


def _send(client: Client, step: Eval, state: _State | None = None) -> Any:
    """EVALSHA of ``step``; on NOSCRIPT, load the script and send it once more.
    On a Redis Cluster whose slot is split mid-migration, send it again, with a
    growing random pause, for up to :data:`_clients.SPLIT_PATIENCE` seconds.
    ``state``: the client's (looked up if not given)."""
    if not _clients.is_cluster(type(client)):
        if state is None:
            state = _state(client)
        if state.reserve is not None and state.server is not None:
            pin = _pin_for(client)
            try:
                return _quick(client, state.reserve, state.retries, step, pin=pin)
            except Fallback as fallback:
                if isinstance(fallback.__cause__, _library(type(client)).no_script):
                    # (the server lost its scripts: loaded first, not asked again)
                    if pin is not None and pin.conn is not None:
                        with contextlib.suppress(Fallback):
                            _load_on_pin(client, pin, _clients.source_of(step, False))
                            return _quick(client, state.reserve, state.retries, step, pin=pin)
                    client.script_load(_clients.source_of(step, False))
        try:  # (what evalsha sends, without its wrappers)
            return client.execute_command("EVALSHA", *_clients.evalsha_args(step))  # type: ignore[no-untyped-call,unused-ignore]
        except _library(type(client)).no_script:
            client.script_load(_clients.source_of(step, False))
            return client.evalsha(*_clients.evalsha_args(step, False))  # type: ignore[misc,unused-ignore]
    deadline = time.monotonic() + _clients.SPLIT_PATIENCE
    backoff = ExponentialWithJitterBackoff(base=0.02, cap=0.5)
    for failures in itertools.count(1):
        try:
            return _send_once(client, step, _state(client).sharded)
        except Exception as exc:
            if _clients.master_unreached(client, exc):
                mark_masterless(exc)  # (a waiting acquire tries again: see _plans.waiting)
            pause = backoff.compute(failures)
            if not _clients.split_slot(exc) or time.monotonic() + pause > deadline:
                raise
            sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover


def _send_once(client: Client, step: Eval, shard: bool) -> Any:
    """EVALSHA of ``step`` on a cluster client: on the quick path of the node
    owning its keys (see :func:`_node_quick`), else through the cluster
    client; on NOSCRIPT, load the script on the node owning its keys only
    (the client's ``SCRIPT LOAD`` goes to every master, and fails on a dead
    one) and send it once more."""
    if step.keys:
        reply = _node_quick(client, step, shard)
        if reply is not _NOT_SENT:
            return reply
    try:
        return client.evalsha(*_clients.evalsha_args(step, shard))  # type: ignore[misc,unused-ignore]
    except _library(type(client)).no_script:
        source = _clients.source_of(step, shard)
        if step.keys:
            cluster: Any = client
            node = cluster.get_node_from_key(step.keys[0])
            cluster.execute_command("SCRIPT LOAD", source, target_nodes=node)
        else:  # sent to any node: loaded on every one
            client.script_load(source)
        return client.evalsha(*_clients.evalsha_args(step, shard))  # type: ignore[misc,unused-ignore]


_NOT_SENT = object()


def _node_quick(client: Client, step: Eval, shard: bool) -> Any:
    """``EVALSHA`` of ``step`` on the quick path of the cluster node that owns
    its first key's slot (in the cluster client's slot map), on the reserve
    of that node's own pool (see :func:`_quick`, :func:`.reserve._node_reserve`);
    :data:`_NOT_SENT` when it takes none, or when the node answered that the
    slot is not (or no longer entirely) its own, did not have the script, or
    failed: the cluster client then sends it (and follows the redirect,
    loads the script, refreshes its map)."""
    found = _node_reserve(client, step)
    if found is None:
        return _NOT_SENT
    node_client, reserve = found
    try:
        return _quick(node_client, reserve, True, step, shard)
    except Fallback:
        return _NOT_SENT
    except Exception as exc:
        if _clients.redirected(exc) or "CLUSTERDOWN" in str(exc):
            return _NOT_SENT
        raise


def _quick(
    client: Client,
    reserve: _Reserve,
    retries: bool,
    step: Eval,
    shard: bool = False,
    pin: _Pin | None = None,
) -> Any:
    """``EVALSHA`` of ``step`` written and read on a connection of the quick
    path (see :func:`_clients.quick_connections`): checked out of the client's
    pool the first time, then kept in the pool's ``reserve``, idle between
    calls. When all the reserve may hold are busy, the call waits for one,
    first come first served (so tenure's calls never use more of the pool
    than that; the pool's checkout and the client's per-command wrappers cost
    more than the script itself).

    Raises:
        Fallback: the server does not have the script (NOSCRIPT), or a
            connection could not be made or failed (it is closed, to connect
            again at its next use; see :func:`_clients.connection_fault`) and
            the client's retry policy ``retries``: the ordinary path sends it
            (again: tenure's scripts are safe to run twice, as a retry after a
            lost reply already runs them).
        The reply's error (a ``ResponseError``), as the ordinary path raises
        it; a connection error when the client does not retry.
        Any other exception (a cancellation, an interrupt of any class)
        closes the connection (a reply may still be due on it) and goes on
        as it is.

    With a ``pin`` (see :func:`one_connection`), it is sent on the pinned
    connection, and the connection stays pinned after a whole reply.
    """

    def pack(conn: Any) -> tuple[list[bytes], int]:
        parts = _clients.packed_evalsha(conn, step, shard)
        return (parts if len(parts) == 1 else [b"".join(parts)]), 1  # (one write)

    (raw,) = _exchange(client, reserve, retries, pin, pack)
    if isinstance(raw, Exception):
        if isinstance(raw, _library(type(client)).no_script):
            raise Fallback from raw
        raise raw
    return raw


def _quick_together(
    client: Client,
    reserve: _Reserve,
    retries: bool,
    steps: list[Eval],
    pin: _Pin | None = None,
    shard: bool = False,
) -> list[Any]:
    """The replies of ``steps`` written back to back on a connection of the
    quick path (one write), read in order (an error reply in its place).
    Raises :class:`Fallback` as :func:`_quick` does, and on a NOSCRIPT
    reply (its cause). With a ``pin``, on the pinned connection, as
    :func:`_quick` does."""

    def pack(conn: Any) -> tuple[list[bytes], int]:
        parts = [part for step in steps for part in _clients.packed_evalsha(conn, step, shard)]
        return [b"".join(parts)], len(steps)  # (one write, not one per part)

    raws = _exchange(client, reserve, retries, pin, pack)
    no_script = _library(type(client)).no_script
    for raw in raws:
        if isinstance(raw, no_script):
            raise Fallback from raw
    return raws


def _exchange(
    client: Client,
    reserve: _Reserve,
    retries: bool,
    pin: _Pin | None,
    pack: Callable[[Any], tuple[list[bytes], int]],
) -> list[Any]:
    """What ``pack(connection)`` packs written at once on a connection of the
    quick path of ``reserve`` (the pinned one, if ``pin``, of that reserve,
    has one), and the raw replies of the ``count`` commands it says it packed,
    read in order (an error reply in its place). Raises :class:`Fallback` as
    :func:`_quick` does; with a ``pin``, the connection stays pinned after
    whole replies."""
    raws: list[Any] = []
    sound = False  # every reply was read: the connection may be used again as it is
    if pin is not None and pin.conn is not None:
        conn, pin.conn = pin.conn, None  # (no call: see below)
    else:
        conn = _take(client, reserve, retries)
    try:  # (at once: no call between, where an interrupt could lose the connection)
        packed, count = pack(conn)
        conn.send_packed_command(packed)
        for _ in range(count):
            try:
                raws.append(conn.read_response())
            except _library(type(client)).response_error as exc:  # a whole reply was read
                raws.append(exc)
        sound = True
    except Exception as exc:
        if retries and _clients.connection_fault(exc):
            raise Fallback from exc
        raise  # (an interrupt of any class: never swallowed by a second send)
    finally:  # (whatever interrupts what: the connection is given back or let go)
        if sound:
            if pin is None:
                reserve.idle.append(conn)  # (no call before it, where an interrupt could lose it)
                _wake_one(reserve)
            else:
                _repin(pin, conn)
        else:
            _discard(client, reserve, conn)
    return raws


def _on_pin(client: Client, pin: _Pin, commands: list[tuple[Any, ...]]) -> list[Any]:
    """``commands`` written at once on the pinned connection (if none is, on one
    the quick path takes, then pinned), their raw replies read in order (an
    error reply in its place). Raises :class:`Fallback` as :func:`_quick` does."""
    retries = _state(client).retries

    def pack(conn: Any) -> tuple[list[bytes], int]:
        return conn.pack_commands(commands), len(commands)

    return _exchange(client, pin.reserve, retries, pin, pack)


def _load_on_pin(client: Client, pin: _Pin, source: bytes) -> None:
    """``SCRIPT LOAD`` of ``source`` on the pinned connection's server (its
    error reply raised)."""
    (raw,) = _on_pin(client, pin, [("SCRIPT", "LOAD", source)])
    if isinstance(raw, Exception):
        raise raw


def _pipeline(client: Client, step: Pipeline, *, shard: bool = False) -> list[Any]:
    """Send a :class:`Pipeline` step's steps in one round trip, on one connection.
    A script that another script follows is loaded first, in the same write
    (see :func:`_followed`). After NOSCRIPT the scripts are loaded and the
    whole pipeline is sent again (the steps of a pipeline are idempotent:
    lease rewrites and waits).
    On a Redis Cluster client each step is sent on its own (to its slot's node),
    its error in its place, except a pipeline with ``WAIT`` (``min_replicas``):
    see :func:`_on_master`. ``shard``: ``client`` is one master of a cluster
    with sharded pub/sub (every step's keys in its slots), sent the scripts'
    sharded variants."""
    if _clients.is_cluster(type(client)):
        if _clients.on_one_connection(step):
            return _on_master(client, step)
        return [_one(client, part) for part in step.steps]
    # (only what WAITs must follow the writes on their connection)
    pin = _pin_for(client) if not shard and _clients.on_one_connection(step) else None
    state = None if shard else _state(client)
    # a pipeline with scripts that must be on the server before it runs goes
    # on the quick path, whose connection knows which scripts ran on it
    quick = state is not None and state.server is not None and bool(_followed(step))

    def send() -> list[Any]:
        nonlocal pin
        reserve = pin.reserve if pin is not None else None
        if reserve is None and quick and state is not None:
            reserve = state.reserve
        if reserve is not None and state is not None:
            try:
                raws = _exchange(
                    client, reserve, state.retries, pin, lambda conn: _in_order(conn, step, ran)
                )
                return raws[len(raws) - len(step.steps) :]  # (the SCRIPT LOADs' replies dropped)
            except Fallback:  # (its connection failed: the client's own way)
                pin = None
                ran.clear()
        loads = _loads(step, shard, ())
        with client.pipeline(transaction=False) as pipe:
            for source in loads:
                pipe.execute_command("SCRIPT", "LOAD", source)
            for part in step.steps:
                if isinstance(part, Eval):
                    pipe.evalsha(*_clients.evalsha_args(part, shard))
                else:
                    pipe.execute_command(*part.args)
            return list(pipe.execute(raise_on_error=False))[len(loads) :]

    ran: list[set[str]] = []  # (the scripts run on the quick path's connection: see _in_order)

    raws = send()
    no_script = _library(type(client)).no_script
    lost = any(isinstance(raw, no_script) for raw in raws)
    if ran and lost:
        ran[-1].clear()  # (the server lost its scripts: none is known to be there)
    elif ran:
        ran[-1].update(
            part.script.sha1
            for part, raw in zip(step.steps, raws, strict=True)
            if isinstance(part, Eval) and not isinstance(raw, Exception)
        )
    if lost:
        for spec in {part.script for part in step.steps if isinstance(part, Eval)}:
            source = (_clients.sharded(spec) if shard else spec).source
            if pin is not None:
                try:
                    _load_on_pin(client, pin, source)
                    continue
                except Fallback:  # (its connection failed: the client's own way)
                    pin = None
            client.script_load(source)
        raws = send()
    replies: list[Any] = []
    for part, raw in zip(step.steps, raws, strict=True):
        if isinstance(part, Eval) and isinstance(raw, Exception):
            raw = _refusal(client, part, raw) or raw
        if isinstance(part, Eval) and not isinstance(raw, Exception):
            raw = reply_or_error(part.script, raw)
        replies.append(raw)
    return replies


def _followed(step: Pipeline) -> list[Eval]:
    """The script calls of an ``ordered`` ``step`` that another script call
    follows (none for a pipeline whose calls stand each alone, such as a
    batch of renewals). A pipeline runs every command it is sent, so a
    script refused with NOSCRIPT (the server lost its scripts, or never had
    that one) would not stop the next one: an election's release would hand
    the lock on before the resignation it follows was logged. Their scripts
    are loaded first, in the same write, unless they ran on that connection
    already."""
    if not step.ordered:
        return []
    calls = [part for part in step.steps if isinstance(part, Eval)]
    return calls[:-1]


def _loads(step: Pipeline, shard: bool, ran: Collection[str]) -> list[bytes]:
    """The sources to ``SCRIPT LOAD`` ahead of ``step``: the scripts of its
    :func:`_followed` calls that are not in ``ran`` (SHA-1s), once each
    (their sharded variants with ``shard``)."""
    sources: dict[str, bytes] = {}
    for part in _followed(step):
        spec = _clients.sharded(part.script) if shard else part.script
        if spec.sha1 not in ran:
            sources[spec.sha1] = spec.source
    return list(sources.values())


def _in_order(conn: Any, step: Pipeline, ran: list[set[str]]) -> tuple[list[bytes], int]:
    """``step``'s commands packed for ``conn``, after the ``SCRIPT LOAD`` commands
    of :func:`_loads` that ``conn`` needs; the scripts that ran on it
    appended to ``ran`` (for the caller to update with what runs now)."""
    here = _ran_on(conn)
    ran.append(here)
    loads = _loads(step, False, here)
    commands = [("SCRIPT", "LOAD", source) for source in loads] + _clients.commands(step)
    return conn.pack_commands(commands), len(commands)


def _ran_on(conn: Any) -> set[str]:
    """The SHA-1s of the scripts known to have run on ``conn`` since it last
    connected. Kept on the connection with its socket: a new socket (after a
    reconnection, perhaps to a server that restarted and lost its scripts)
    starts an empty set. (A ``SCRIPT FLUSH`` while it stays connected is not
    seen: a script it flushed is known to be there until a call finds it
    missing.)"""
    sock = _internals.writer_of(conn) or _internals.sock_of(conn)
    kept = getattr(conn, "_tenure_scripts", None)
    if sock is not None and kept is not None and kept[0]() is sock:
        return kept[1]  # type: ignore[no-any-return]
    here: set[str] = set()
    if sock is not None:
        with contextlib.suppress(AttributeError, TypeError):
            conn._tenure_scripts = (weakref.ref(sock), here)
    return here


#: How many times a pipeline sent to a slot's master is sent again after the
#: node answered that it does not serve the slot (the slot map is refreshed
#: in between).
REDIRECTED_TRIES = 3


def _on_master(client: Any, step: Pipeline) -> list[Any]:
    """Send a pipeline that must share one connection (a write, then ``WAIT``)
    to the master of its first script's slot, on a client of that master (see
    :func:`.state._master_client`), in one round trip. If the
    node answers that the slot is not (or no longer entirely) its own
    (``MOVED``, ``ASK``, ``TRYAGAIN``: a migration, a failover), the cluster
    client's slot map is refreshed and the whole pipeline sent again (its
    steps are idempotent), up to :data:`REDIRECTED_TRIES` times in all."""
    key = _clients.first_key(step)
    state = _state(client)
    replies: list[Any] = []
    for attempt in range(REDIRECTED_TRIES):
        node = client.get_node_from_key(key) if key is not None else client.get_default_node()
        master = _master_client(client, state, node)
        replies = _pipeline(master, step, shard=state.sharded)
        if not any(_clients.redirected(reply) for reply in replies):
            break
        if attempt + 1 < REDIRECTED_TRIES:
            sleep(0.05 * (attempt + 1))
            client.nodes_manager.initialize()
    return replies


def _one(client: Client, part: Eval | Command) -> Any:
    """One step of a pipeline sent on its own: its parsed reply, or its error."""
    try:
        if isinstance(part, Eval):
            return parse_reply(part.script, _evalsha(client, part))
        return client.execute_command(*part.args)  # type: ignore[no-untyped-call,unused-ignore]
    except Exception as exc:
        return exc
