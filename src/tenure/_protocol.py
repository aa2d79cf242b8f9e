"""Steps that plans yield to drivers, script reply statuses, and the one reply parser.

A plan is a generator: it yields a step, the driver performs it and sends the
reply back (or throws the step's exception into the plan). The reply for each
step type is given in the step's docstring.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Generator, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ._errors import PermissionDenied, ProtocolError, TenureError, WrongTypeError
from ._keys import LockKeys
from ._scripts import ACL_KEYS, ScriptSpec
from ._scripts import Status as Status  # defined beside the scripts, which use its names

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Eval:
    """Run ``script`` atomically. Reply: ``(Status, value)`` from :func:`parse_reply`."""

    script: ScriptSpec
    keys: tuple[str, ...]
    args: tuple[str | bytes | int, ...]


@dataclass(frozen=True, slots=True)
class Command:
    """Run one plain Redis command. Reply: redis-py's parsed reply."""

    args: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Contend:
    """Become this process's one contender for a lock, for the lease ``token``.

    The driver subscribes the client's wake hub to the lock's wake channel for
    this process (``keys.wake_prefix`` + the hub's waiter id), noting that
    hand-offs to ``token`` are for this plan, and waits for the subscription to
    be confirmed; then it takes the process-local gate for the lock, waiting at
    most ``timeout`` seconds (``None``: no limit). Both are held until the plan
    ends. Reply: the waiter id (``str``) once the gate is taken, or ``None`` if
    the wait ran out.

    ``pass_on``: whether a hand-off to a token that no plan of this process
    waits with any more (it gave up) is released by the hub, so that the lock
    goes on to the next waiter. A primitive sets it ``False`` when its waiter
    leaving gives back a hand-off in the same script call, and a late message
    may concern a lease that an attempt has already returned.
    With ``own_channel``, the plan waits as itself rather than as its process's
    one contender (a fair queue, where each thread or task has its own place):
    the driver subscribes a wake channel of the plan's own, ``wake_prefix`` + a
    waiter id new for this plan (the hub's waiter id, a dot and a number), and
    replies with that id; nobody else takes its gate, so only the subscription
    is waited for.
    """

    keys: LockKeys
    token: str
    timeout: float | None
    pass_on: bool = True
    own_channel: bool = False


@dataclass(frozen=True, slots=True)
class Listening:
    """Ask whether this process already listens for the lock (it waited on it
    within the last second). Reply: ``bool``. A plan that gets ``True`` queues
    at once instead of first trying without queueing, a round trip that would
    almost surely fail."""

    keys: LockKeys


@dataclass(frozen=True, slots=True)
class HandedOff:
    """A :class:`WaitWake` reply: a release handed the lock to our token with ``fence``."""

    fence: int


@dataclass(frozen=True, slots=True)
class Recheck:
    """A :class:`WaitWake` reply: a release handed the lock to another waiter,
    which holds it only for its claim window unless it extends it: try again at
    most ``seconds`` from now (if that waiter stalled, the lock is free then)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Subscribe:
    """Listen on a broadcast ``channel`` (one message wakes every listener) until the
    plan ends.

    The driver subscribes the client's wake hub to ``channel`` (one subscription
    per process, shared by every plan listening on it) and waits for the
    subscription to be confirmed, at most ``timeout`` seconds (``None``: no
    limit). From then on every message on the channel, and every reconnection
    of the hub (messages may have been lost), wakes the plan's next
    :class:`WaitWake`. Reply: ``True`` once confirmed, ``False`` if the wait ran out.
    """

    channel: str
    timeout: float | None


@dataclass(frozen=True, slots=True)
class WaitWake:
    """Wait until the plan's channel (its :class:`Contend` or :class:`Subscribe`) is
    woken or ``timeout`` seconds pass (``None``: no limit).

    Reply: :class:`HandedOff` if a release handed the lock to the plan's token,
    :class:`Recheck` if a release handed it to another waiter and asked this
    one to try again within a claim window, ``True`` if woken otherwise (retry
    now), ``False`` on timeout. A listener of
    a broadcast channel is woken by any message since its :class:`Subscribe` or
    its last ``WaitWake``, so none is missed between two waits.
    """

    timeout: float | None


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Send ``steps`` in order on one connection, in one round trip (not a
    transaction). Commands that act on "this connection's writes", such as
    ``WAIT``, see the writes of the steps before them.

    Reply: a list, one item per step: an :class:`Eval`'s ``(Status, value)``, a
    :class:`Command`'s reply, or the exception that step raised (a
    ``WrongTypeError``, or the server's error reply).

    ``ordered``: a script call may run only after the ones before it ran (a
    pipeline runs every command it is sent, so without it a call refused with
    NOSCRIPT would not stop the next): the driver has the scripts of the calls
    that others follow on the server before the pipeline runs.
    """

    steps: tuple[Eval | Command, ...]
    ordered: bool = False


Step = Eval | Command | Listening | Contend | Subscribe | WaitWake | Pipeline
Plan = Generator[Step, Any, T]


def text(value: object) -> str:
    """A reply item, key, channel name or message as ``str``: ``bytes`` decoded
    as UTF-8 (redis-py gives ``bytes`` unless the client decodes responses),
    anything else by ``str()``. The one decoding helper of the package.

    Bytes that are not UTF-8 (another program's value: every value tenure
    writes is text) are escaped, ``b"\\xff"`` read as ``"\\xff"``, so that a
    read never fails on them and shows them on any terminal; tenure's own
    tokens contain no backslash, so an escaped value is never taken for one.
    Within :func:`strict_text`, they raise ``UnicodeDecodeError`` instead.
    """
    if not isinstance(value, bytes):
        return str(value)
    try:
        return value.decode()
    except UnicodeDecodeError:
        if _strict.get():
            raise
        return value.decode(errors="backslashreplace")


def _text(value: object) -> object:
    # bytes decoded, numbers and nested replies kept as they are
    return text(value) if isinstance(value, bytes) else value


#: Whether :func:`text` refuses bytes that are not UTF-8 (see :func:`strict_text`).
_strict: ContextVar[bool] = ContextVar("tenure_strict_text", default=False)


@contextlib.contextmanager
def strict_text() -> Iterator[None]:
    """Make :func:`text` raise ``UnicodeDecodeError`` on bytes that are not
    UTF-8, in this thread or task, for reads whose values are sent back to
    the server (a forced release's tokens): an escaped value is another
    value, which would match nothing there."""
    reset = _strict.set(True)
    try:
        yield
    finally:
        _strict.reset(reset)


_STATUSES = {int(s): s for s in Status}


def parse_reply(script: ScriptSpec, raw: object) -> tuple[Status, Any]:
    """Map a raw ``{status, value}`` script reply to ``(Status, value)``; a
    bare integer ``n`` is ``(OK, n)`` when ``n >= 0`` (a script's common
    reply, which spares the server a table), else ``(BUSY, -2 - n)`` (a busy
    reply's number, ``-1`` or more: a lock's pttl, say).

    Bytes values are decoded to ``str``; nested lists are decoded one level deep.

    Raises:
        WrongTypeError: the script reported a key holding another type.
        PermissionDenied: the script reported a permission the connected user
            lacks (``{9, {permission, name}}``, see ``_acl.lua``); it wrote nothing.
        ProtocolError: the reply has another shape or an unknown status.
    """
    if type(raw) is int:
        return (Status.OK, raw) if raw >= 0 else (Status.BUSY, -2 - raw)
    if not isinstance(raw, list | tuple) or len(raw) != 2:
        raise ProtocolError(f"{script.name}: unexpected reply {raw!r}")
    status = _STATUSES.get(raw[0])
    if status is None:
        raise ProtocolError(f"{script.name}: unknown status in reply {raw!r}")
    value = raw[1]
    if type(value) is int and status is not Status.WRONG_TYPE and status is not Status.DENIED:
        return status, value  # the common reply, {status, number}
    value = [_text(v) for v in value] if isinstance(value, list) else _text(value)
    if status is Status.WRONG_TYPE:
        raise WrongTypeError(str(value))
    if status is Status.DENIED:
        if not isinstance(value, list) or len(value) != 2:
            raise ProtocolError(f"{script.name}: unexpected reply {raw!r}")
        raise PermissionDenied(str(value[0]), str(value[1]), script.name)
    return status, value


#: What :func:`parse_reply` raises for a reply it refuses.
REPLY_ERRORS = (WrongTypeError, PermissionDenied, ProtocolError)


def reply_or_error(script: ScriptSpec, raw: object) -> Any:
    """:func:`parse_reply` of one step of a pipeline, or the error it raised for
    that reply (the pipeline's other replies still count); anything else that
    escapes (an interrupt while parsing) propagates."""
    try:
        return parse_reply(script, raw)
    except REPLY_ERRORS as exc:
        return exc


#: The modules of the client libraries' own errors (redis-py's ``RedisError``
#: and ``RedisClusterException`` families, valkey-py's twins).
_CLIENT_ERRORS = frozenset({"redis.exceptions", "valkey.exceptions"})


def client_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an error of the client library (an error reply, a
    lost connection, a slot no node serves) or of the socket (``OSError``,
    timeouts included). Told by the module of its classes, so that no client
    library is imported here."""
    if isinstance(exc, OSError):
        return True
    return any(cls.__module__ in _CLIENT_ERRORS for cls in type(exc).__mro__)


def is_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` cut a call short from outside: anything but what a call
    to Redis itself raises (tenure's own errors, which say what a reply
    said, and :func:`client_error`). A ``KeyboardInterrupt``, a cancellation,
    and just as well an ordinary ``Exception`` raised by a signal handler:
    after one, what the call did is unknown, and it is never swallowed."""
    return not (isinstance(exc, TenureError) or client_error(exc))


@contextlib.contextmanager
def failed_calls_suppressed() -> Iterator[None]:
    """Suppress what a best-effort call to Redis may fail with (its reply's
    error, a client or socket error), never an interrupt of any class
    (:func:`is_interrupt`)."""
    try:
        yield
    except Exception as exc:
        if is_interrupt(exc):
            raise


_REFUSED_COMMAND = re.compile(r"permissions? to (?:run|access) the '([^']+)' command", re.I)


def command_refusal(exc: BaseException, operation: str) -> PermissionDenied | None:
    """The error for a ``NOPERM`` reply ``exc`` that names a command the user may
    not run (``EVALSHA``, ``INFO``, ...), or ``None`` when it names none."""
    text = str(exc)
    found = _REFUSED_COMMAND.search(text)
    if found is not None:
        return PermissionDenied("command", found.group(1).upper(), operation)
    if "can't run this command" in text:  # Redis 6.2, inside a script: unnamed
        return PermissionDenied("command", "one of the script's commands", operation)
    return None


def acl_probe(step: Eval) -> Eval:
    """The :data:`ACL_KEYS` call that finds what the user lacks for ``step``,
    which the server refused with ``NOPERM``: ``step``'s keys, then the
    commands its script may run (sent with no KEYS: it needs no permission
    but EVALSHA's)."""
    keys = tuple(str(k) for k in step.keys)
    return Eval(ACL_KEYS, (), (len(keys), *keys, *step.script.commands))


def key_refusal(script: ScriptSpec, raw: object) -> PermissionDenied | None:
    """The error for an EVALSHA of ``script`` that the server refused with
    ``NOPERM`` (which names no key, nor, on Redis 7.0, a command a script
    ran), from ``raw``, the reply of :func:`acl_probe`: the first key the
    user may not read or write, else the first of the script's commands it
    may not run, or ``None`` if all are allowed (the refusal was another:
    the EVALSHA command itself, say)."""
    try:
        parse_reply(ACL_KEYS, raw)
    except PermissionDenied as exc:
        return PermissionDenied(exc.permission, exc.target, script.name)
    except ProtocolError:
        return None
    return None


#: The attribute :func:`mark_masterless` sets on an exception.
_MASTERLESS = "_tenure_masterless"


def mark_masterless(exc: BaseException) -> None:
    """Note on ``exc``, a client library's error from a step sent to a Redis
    Cluster, that the master of the step's slot could not be reached (its
    node down, the slot without a master during a failover, the slot map not
    yet naming the new one): the errors the cluster client retries itself,
    after refreshing its slot map, until its retries run out. The step may
    have run, or not. A plan that waits may send it again later (see
    :func:`masterless`); any other lets it go to its caller as it is."""
    vars(exc)[_MASTERLESS] = True


def masterless(exc: BaseException) -> bool:
    """Whether a driver marked ``exc`` with :func:`mark_masterless`."""
    return getattr(exc, _MASTERLESS, False) is True


#: The attribute :func:`note_result` sets on an exception.
_RESULT = "_tenure_result"


def note_result(exc: BaseException, value: object) -> None:
    """The driver's side of the result hand-over: attach to ``exc`` what a
    plan returned just before ``exc`` cut the driver off from its caller (an
    interrupt, of any class, in the driver's clean-up after a plan returned
    a grant, or between the rounds of plans run together).

    The contract between the two sides: the drivers
    (``_drivers/_async/drive.py``: ``_drive`` attaches the grant of the plan
    that returned one, ``run_together`` the list of results so far, one per
    plan; the generated ``_drivers/_sync/drive.py`` the same) call this and
    re-raise ``exc``; the facade (``_api/_async/_grants.py``:
    ``_grant_and_hold``; ``_api/_async/multi.py``; and their generated
    ``_sync`` twins) reads it back with :func:`result_lost_with` and gives
    back whatever that result holds before ``exc`` goes on, so no grant is
    left held with nobody to release it. Nothing else reads or writes the
    attribute."""
    vars(exc)[_RESULT] = value


def result_lost_with(exc: BaseException) -> Any:
    """The facade's side of the result hand-over (see :func:`note_result`):
    the result of a plan that ``exc`` cut off from its caller after the plan
    returned it, or ``None``."""
    return vars(exc).get(_RESULT)


class Watchable(Protocol):
    """The lease hand-over from the facade to the driver's watchdog: what the
    watchdog needs of a lease.

    The two sides: the facade's leases implement it (``_api/_async/_base.py``:
    ``_AsyncHeldLease``; the holds of ``_api/_async/_holds.py``; Redlock's
    leases; their generated ``_sync`` twins) and give themselves to
    ``watch``; the drivers' watchdogs (``_drivers/_async/watchdog.py``,
    ``_drivers/_sync/watchdog.py``, the fan-out's shared ones) and their
    pure book (``_drivers/_watchbook.py``) call nothing else of a lease. The
    underscored members are the watchdog's only: no user calls them."""

    @property
    def ttl(self) -> float: ...

    @property
    def expires_at(self) -> float: ...

    #: The claim window (seconds) Redis holds a handed-over lease for until its
    #: first extend; 0.0 for a lease Redis holds for its ttl. Its extends check
    #: the lease's drift allowance against this window while it is set, and the
    #: watch book sets it to 0.0 once the claim extend succeeded.
    _claim: float

    @property
    def _given_up(self) -> bool:
        """Whether the owner gave the lease up without its release completing
        (the ``with`` block that entered it was left with its exit cut off):
        never renewed again, it ends by its ttl unless the owner's next
        acquire releases it first."""

    def _renewal(self) -> Eval:
        """The script call that renews the lease for its ttl."""

    def _renewed(self, expires_at: float) -> None:
        """A renewal succeeded: the lease may be trusted until ``expires_at``."""

    def _lose(self, reason: str) -> None:
        """The lease is lost: fire its signal (idempotent)."""
