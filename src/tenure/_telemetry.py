"""tenure's logs, metrics and traces: the loggers, and a facade over
OpenTelemetry that is a shared no-op without it.

Loggers (``docs/guide/operating.md``): ``tenure`` (a ``NullHandler``: the
application decides where records go), one child per primitive
(``tenure.lock``, ``tenure.rlock``, ``tenure.fair_lock``,
``tenure.read_write_lock``, ``tenure.semaphore``, ``tenure.count_down_latch``,
``tenure.multi_lock``, ``tenure.redlock``; a lease's records go to its lock's
logger), ``tenure.watchdog`` and ``tenure.hub``. Acquires, releases and
hand-offs are DEBUG; a lost lease, a failed renewal and a pub/sub
reconnection are WARNING. No record carries a token, an owner id or a
password.

Metrics and spans go through OpenTelemetry's API when it is installed (the
``otel`` extra) and a provider is configured, globally or with
:func:`configure_telemetry`. Until then every call site costs one check: the
current sink (:data:`NOOP`, shared, stateless) says it is off, and nothing is
imported or allocated. OpenTelemetry is imported at the first acquire, only if
it is installed; with no provider configured yet, each acquire looks at the
API's two globals (no call) until one is set.

The call sites pass the objects they have (a lock object, a lease); what this
module reads of them is duck-typed (``name``, ``fence``, ``acquired_at``, the
lock object's ``_probe``), so it imports nothing of tenure but its errors and
sits below every layer that logs.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
import threading
import time
from typing import Any

from ._errors import InvalidArgument

#: tenure's root logger: a ``NullHandler``, so that a library's records go
#: nowhere until the application configures logging (and never to
#: ``logging.lastResort``'s stderr).
LOG = logging.getLogger("tenure")
LOG.addHandler(logging.NullHandler())

#: The watchdog's logger: renewal failures (WARNING).
WATCHDOG = logging.getLogger("tenure.watchdog")

#: The wake hub's logger: pub/sub connection failures and reconnections (WARNING).
HUB = logging.getLogger("tenure.hub")

DEBUG = logging.DEBUG
WARNING = logging.WARNING

# -- names -----------------------------------------------------------------------

#: Metric and span names, and attribute keys (OpenTelemetry semantic-convention style).
ACQUIRE_DURATION = "tenure.lock.acquire.duration"
HOLD_DURATION = "tenure.lock.hold.duration"
ACQUIRES = "tenure.lock.acquires"
WAITERS = "tenure.lock.waiters"
LOST = "tenure.lease.lost"
RENEWALS = "tenure.lease.renewals"
SPAN = "tenure.acquire"
WAIT_EVENT = "tenure.wait"
HANDOFF_EVENT = "tenure.hand_off"

PRIMITIVE = "tenure.primitive"
LOCK_NAME = "tenure.lock.name"
OUTCOME = "tenure.lock.acquire.outcome"
RENEWAL_OUTCOME = "tenure.renewal.outcome"
FENCE = "tenure.lock.fence"
DB_SYSTEM = "db.system.name"

#: An acquire's outcomes: taken by an attempt; handed over by a release; the
#: wait ran out (``None``); one attempt only (``blocking=False``) found it
#: busy (``None``); an exception.
GRANTED, HANDED_OFF, TIMED_OUT, DENIED, ERROR = (
    "granted",
    "handed_off",
    "timed_out",
    "denied",
    "error",
)
OUTCOMES = (GRANTED, HANDED_OFF, TIMED_OUT, DENIED, ERROR)

#: A renewal's outcomes (one per lease of a batch): Redis renewed it; the call
#: failed (it is tried again); it found the lease gone (or too late).
RENEWED, RENEWAL_FAILED, RENEWAL_LOST = "renewed", "failed", "lost"

#: Histogram bucket boundaries (seconds) advised for the two durations: from a
#: round trip on a local network to minutes.
BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)


def kind_of(class_name: str) -> str:
    """A primitive's attribute value and logger suffix, from its class name:
    ``AsyncReadWriteLock`` and ``ReadWriteLock`` give ``read_write_lock``,
    ``RLock`` gives ``rlock``."""
    name = class_name.removeprefix("Async").removeprefix("_")
    if name == "RLock":
        return "rlock"
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and not name[i - 1].isupper():
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


class Probe:
    """One primitive's instrumentation: its ``tenure.primitive`` value and its
    logger (``tenure.<kind>``). Every lock class has one (``_probe``)."""

    __slots__ = ("kind", "log")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.log = logging.getLogger(f"tenure.{kind}")

    def __repr__(self) -> str:
        return f"<Probe {self.kind}>"


#: The probe of a lease whose lock object has none.
LEASE = Probe("lease")


def address(pool: Any) -> str:
    """Where a connection pool connects, for a log record: ``host:port`` or
    the socket's path (its ``connection_kwargs``; never a password)."""
    kwargs = getattr(pool, "connection_kwargs", None) or {}
    path = kwargs.get("path")
    if path:
        return str(path)
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


# -- the sinks -------------------------------------------------------------------


class _Sink:
    """Where metrics and spans go. ``on``: whether anything is recorded; when
    it is not, :meth:`current` says which sink to use from now on."""

    on = False
    lock_names = False
    #: whether :meth:`current` may give another sink (else it never will)
    pending = False

    def current(self) -> _Sink:
        return self


class _Off(_Sink):
    """OpenTelemetry is not installed, or telemetry was turned off: nothing is
    ever recorded."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<tenure telemetry: off>"


#: The shared no-op sink.
NOOP: _Sink = _Off()


class _Unresolved(_Sink):
    """Nothing looked for OpenTelemetry yet: the first acquire does."""

    __slots__ = ()
    pending = True

    def current(self) -> _Sink:
        return _resolve()


class _Awaiting(_Sink):
    """OpenTelemetry's API is installed and no provider is configured: each
    acquire looks at the API's two globals until one is set."""

    __slots__ = ("_metrics", "_trace")
    pending = True

    def __init__(self, trace_module: Any, metrics_module: Any) -> None:
        self._trace = trace_module
        self._metrics = metrics_module

    def current(self) -> _Sink:
        if self._trace._TRACER_PROVIDER is None and self._metrics._METER_PROVIDER is None:
            return self
        with _RESOLVING:
            if _SINK is not self:  # (resolved meanwhile)
                return _SINK
            return _use(_Otel(None, None, _SETTINGS.lock_names))


class _Settings:
    __slots__ = ("lock_names", "meter_provider", "tracer_provider")

    def __init__(self) -> None:
        self.meter_provider: Any = None
        self.tracer_provider: Any = None
        self.lock_names = False


_SETTINGS = _Settings()
_SINK: _Sink = _Unresolved()


def _use(sink: _Sink) -> _Sink:
    global _SINK
    _SINK = sink
    return sink


#: Held while a sink is resolved: one set of instruments at a time.
_RESOLVING = threading.Lock()

#: The environment variables that name OpenTelemetry's global providers (the
#: API loads them when first asked for one, leaving its globals unset until then).
_PROVIDER_VARIABLES = ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")


def _resolve() -> _Sink:
    """The sink of the current settings (see the module docstring)."""
    with _RESOLVING:
        if not _SINK.pending:  # (resolved meanwhile)
            return _SINK
        return _resolve_now()


def _resolve_now() -> _Sink:
    s = _SETTINGS
    try:
        from opentelemetry import trace
    except ImportError:
        return _use(NOOP)
    configured = s.meter_provider is not None or s.tracer_provider is not None
    if configured or any(name in os.environ for name in _PROVIDER_VARIABLES):
        return _use(_Otel(s.meter_provider, s.tracer_provider, s.lock_names))
    try:
        from opentelemetry.metrics import _internal as metrics_internal

        waiting = _Awaiting(trace, metrics_internal)
        waiting.current()  # (the names are there)
    except (ImportError, AttributeError):
        # an API whose globals moved: its own proxies forward to a provider
        # configured later (a few calls per acquire meanwhile)
        return _use(_Otel(None, None, s.lock_names))
    return _use(waiting).current()


def configure_telemetry(
    *,
    meter_provider: Any = None,
    tracer_provider: Any = None,
    lock_names: bool = False,
    enabled: bool = True,
) -> None:
    """Say where tenure's metrics and spans go.

    By default (without a call) they go to OpenTelemetry's global providers
    once the application configured them, and nowhere while it has not, or
    when OpenTelemetry is not installed. The settings apply to every primitive
    of the process from the next call on.

    Args:
        meter_provider: an OpenTelemetry ``MeterProvider`` to use instead of
            the global one (``None``: the global one).
        tracer_provider: a ``TracerProvider`` to use instead of the global one.
        lock_names: whether metrics carry each lock's name
            (``tenure.lock.name``). Off by default: a metric's series multiply
            with its attributes' values, and an application may use
            unboundedly many names (one per order, per user). Spans always
            carry the name.
        enabled: ``False``: record nothing (the loggers are unaffected).

    Raises:
        InvalidArgument: ``lock_names`` or ``enabled`` is not a ``bool``.
    """
    if not isinstance(lock_names, bool) or not isinstance(enabled, bool):
        raise InvalidArgument(
            f"lock_names and enabled must be True or False, not {lock_names!r}, {enabled!r}"
        )
    s = _SETTINGS
    s.meter_provider, s.tracer_provider, s.lock_names = meter_provider, tracer_provider, lock_names
    _use(_Unresolved() if enabled else NOOP)


def _failed(what: str) -> None:
    """OpenTelemetry (a meter's instrument, a span processor) raised while
    ``what``: logged (WARNING, on ``tenure``), never the lock operation's error."""
    LOG.warning("tenure telemetry: %s failed", what, exc_info=True)


def sink() -> _Sink:
    """The sink metrics and spans go to now (:data:`NOOP` without OpenTelemetry)."""
    return _SINK.current()


#: The blocking acquires under way in this process, by their attributes (as
#: a sorted tuple): the attributes and the count.
_WAITING: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], int]] = {}
_WAITING_MUTEX = threading.Lock()


def _waiter(attrs: dict[str, str], delta: int) -> None:
    """A blocking acquire of ``attrs`` began (``+1``) or ended (``-1``)."""
    key = tuple(sorted(attrs.items()))
    with _WAITING_MUTEX:
        n = _WAITING.get(key, (attrs, 0))[1] + delta
        _WAITING[key] = (attrs, n)


def _observe_waiters(options: Any) -> Any:
    """``tenure.lock.waiters``' callback: the count of each set of attributes."""
    from opentelemetry.metrics import Observation

    with _WAITING_MUTEX:
        counts = list(_WAITING.values())
    return [Observation(n, attrs) for attrs, n in counts]


class _Otel(_Sink):
    """Metrics and spans through OpenTelemetry's API (``None`` providers: the
    global ones)."""

    on = True

    def __init__(self, meter_provider: Any, tracer_provider: Any, lock_names: bool) -> None:
        from opentelemetry import metrics, trace

        version = str(getattr(sys.modules.get("tenure"), "__version__", ""))
        get_meter = metrics.get_meter if meter_provider is None else meter_provider.get_meter
        get_tracer = trace.get_tracer if tracer_provider is None else tracer_provider.get_tracer
        meter = get_meter("tenure", version)
        self.tracer = get_tracer("tenure", version)
        self.lock_names = lock_names
        advice = {"explicit_bucket_boundaries_advisory": list(BUCKETS)}
        self.acquire_duration = meter.create_histogram(
            ACQUIRE_DURATION,
            unit="s",
            description="How long acquires took, from the call to its outcome.",
            **advice,
        )
        self.hold_duration = meter.create_histogram(
            HOLD_DURATION,
            unit="s",
            description="How long leases were held, from the acquire to the release.",
            **advice,
        )
        self.acquires = meter.create_counter(
            ACQUIRES, unit="{acquire}", description="Acquires, by outcome."
        )
        # (observed when read: an acquire's start and end cost a dict update,
        # not two measurements; a meter registers an instrument's callbacks
        # once, so the counts are the module's, whichever sink counts)
        meter.create_observable_up_down_counter(
            WAITERS,
            callbacks=[_observe_waiters],
            unit="{waiter}",
            description="Acquires in this process that may wait (blocking) and have not ended.",
        )
        self.lost = meter.create_counter(
            LOST, unit="{lease}", description="Leases lost while held."
        )
        self.renewals = meter.create_counter(
            RENEWALS, unit="{renewal}", description="Watchdog renewals, by outcome."
        )
        self._attrs: dict[tuple[str, str, str, str], dict[str, str]] = {}
        from opentelemetry.context import attach, detach
        from opentelemetry.trace import Status, StatusCode, set_span_in_context

        self.attach, self.detach, self.in_context = attach, detach, set_span_in_context
        self.error_status = Status(StatusCode.ERROR)

    def attrs(self, kind: str, system: str, name: str, outcome: str = "") -> dict[str, str]:
        """The metric attributes of a primitive ``kind`` on ``system``, of
        ``name`` if this sink has ``lock_names``, with ``outcome`` (an
        acquire's or a renewal's) if given: one dict per combination, shared,
        never changed."""
        if not self.lock_names:
            name = ""
        key = (kind, system, name, outcome)
        found = self._attrs.get(key)
        if found is None:
            found = {PRIMITIVE: kind}
            if system:
                found[DB_SYSTEM] = system
            if name:
                found[LOCK_NAME] = name
            if outcome:
                found[OUTCOME if outcome in OUTCOMES else RENEWAL_OUTCOME] = outcome
            self._attrs[key] = found
        return found

    def __repr__(self) -> str:
        return f"<tenure telemetry: OpenTelemetry lock_names={self.lock_names}>"


# -- the call sites --------------------------------------------------------------

#: The acquire under way in this thread or task, while one is watched (for the
#: driver's :func:`waiting` and :func:`handed_off`).
_CURRENT: contextvars.ContextVar[Acquire | None] = contextvars.ContextVar(
    "tenure_acquire", default=None
)


class Acquire:
    """One acquire being watched (logged at DEBUG, or recorded): made by
    :func:`acquiring` only when something watches."""

    __slots__ = (
        "attrs",
        "blocking",
        "context",
        "handoff",
        "lock",
        "probe",
        "sink",
        "span",
        "started",
        "system",
        "var",
        "waited",
    )

    def __init__(self, lock: Any, probe: Probe, sink: _Sink, blocking: bool, system: Any) -> None:
        self.lock, self.probe, self.sink, self.blocking = lock, probe, sink, blocking
        #: a function of the client giving ``db.system.name`` (asked again as the
        #: acquire ends: a client's first call is what probes its server)
        self.system = system
        self.started = time.monotonic()
        self.waited: float | None = None
        self.handoff: int | None = None
        self.span: Any = None
        self.context: Any = None
        self.attrs: dict[str, str] | None = None
        if isinstance(sink, _Otel):
            self.attrs = sink.attrs(probe.kind, self._system(), lock.name)
            if blocking:
                _waiter(self.attrs, 1)
            try:
                span = sink.tracer.start_span(SPAN, attributes={PRIMITIVE: probe.kind})
                if span.is_recording():
                    span.set_attribute(LOCK_NAME, lock.name)
                    self.span = span
                    self.context = sink.attach(sink.in_context(span))
            except Exception:
                _failed("starting an acquire's span")
        self.var = _CURRENT.set(self)

    def _system(self) -> str:
        system = self.system
        return "" if system is None else str(system(self.lock._client))

    def waiting(self) -> None:
        """The acquire found the lock busy and now waits for it (once)."""
        if self.waited is not None:
            return
        self.waited = time.monotonic()
        if self.span is not None:
            self.span.add_event(WAIT_EVENT)
        if self.probe.log.isEnabledFor(DEBUG):
            self.probe.log.debug("waiting for %r", self.lock.name)

    def handed_off(self, fence: int) -> None:
        """A release handed the lock to this acquire with ``fence``."""
        self.handoff = fence
        if self.span is not None:
            self.span.add_event(HANDOFF_EVENT, {FENCE: fence})

    def done(self, lease: Any) -> None:
        """The acquire returned ``lease`` (``None``: not taken)."""
        took = time.monotonic() - self.started
        name = self.lock.name
        if lease is None:
            outcome = TIMED_OUT if self.blocking else DENIED
        elif self.handoff is not None and self.handoff == getattr(lease, "fence", None):
            outcome = HANDED_OFF
        else:
            outcome = GRANTED
        log = self.probe.log
        if log.isEnabledFor(DEBUG):
            if lease is None and outcome == DENIED:
                log.debug("%r is busy: not taken (no wait)", name)
            elif lease is None:
                log.debug("%r not taken: gave up after %.3fs", name, took)
            else:
                log.debug(
                    "acquired %r fence=%s waited=%.3fs%s",
                    name,
                    lease.fence,
                    took,
                    " (handed off)" if outcome == HANDED_OFF else "",
                )
        self._end(outcome, took, None if lease is None else lease.fence)

    def failed(self, exc: BaseException) -> None:
        """The acquire raised ``exc``."""
        took = time.monotonic() - self.started
        log = self.probe.log
        if log.isEnabledFor(DEBUG):
            # (the class only: a message may carry what a log must not)
            log.debug(
                "acquire of %r failed after %.3fs: %s", self.lock.name, took, type(exc).__name__
            )
        self._end(ERROR, took, None, exc)

    def _end(self, outcome: str, took: float, fence: Any, exc: BaseException | None = None) -> None:
        try:
            _CURRENT.reset(self.var)
        except ValueError:  # (reset in another context: a generator moved)
            _CURRENT.set(None)
        sink = self.sink
        if not isinstance(sink, _Otel):
            return
        assert self.attrs is not None
        if self.blocking:
            _waiter(self.attrs, -1)
        system = self._system()
        if system:
            self.lock._system = system  # (what its leases' metrics say)
        attrs = sink.attrs(self.probe.kind, system, self.lock.name, outcome)
        try:
            sink.acquire_duration.record(took, attrs)
            sink.acquires.add(1, attrs)
        except Exception:
            _failed("recording an acquire")
        span = self.span
        if span is None:
            return
        try:
            if system:
                span.set_attribute(DB_SYSTEM, system)
            span.set_attribute(OUTCOME, outcome)
            if fence is not None:
                span.set_attribute(FENCE, fence)
            if exc is not None:
                span.record_exception(exc)
                span.set_status(sink.error_status)
            span.end()
        except Exception:
            _failed("ending an acquire's span")
        finally:
            # (detached in another context: never the caller's error)
            with contextlib.suppress(Exception):
                sink.detach(self.context)


def acquiring(lock: Any, blocking: bool, system: Any = None) -> Acquire | None:
    """An acquire of ``lock`` (a lock object with ``name``, ``_client`` and
    ``_probe``) begins: its :class:`Acquire`, or ``None`` when nothing watches
    (no sink on, the primitive's logger not at DEBUG). ``system``: a function
    of the client giving ``db.system.name`` (called only when recording)."""
    current = _SINK
    if current.pending:
        current = current.current()
    probe: Probe = lock._probe
    if current.on or probe.log.isEnabledFor(DEBUG):
        return Acquire(lock, probe, current, blocking, system)
    return None


def waiting() -> None:
    """(The driver's) the acquire under way here begins to wait."""
    record = _CURRENT.get()
    if record is not None:
        record.waiting()


def handed_off(fence: int) -> None:
    """(The driver's) a release handed the lock to the acquire under way here."""
    record = _CURRENT.get()
    if record is not None:
        record.handed_off(fence)


def _probe_of(lease: Any) -> Probe:
    """The probe of ``lease``'s lock object (a multi-lease's: its multi-lock's)."""
    owner = getattr(lease, "_lock", None) or getattr(lease, "_multi", None)
    probe: Probe = getattr(owner, "_probe", LEASE)
    return probe


def _system_of(lease: Any) -> str:
    """The ``db.system.name`` the last recorded acquire of ``lease``'s lock found."""
    system: str = getattr(getattr(lease, "_lock", None), "_system", "")
    return system


def released(lease: Any, probe: Probe) -> None:
    """``lease`` (of a primitive whose probe is ``probe``) was released (its
    hold time is recorded)."""
    current = _SINK
    log = probe.log
    if not current.on and not log.isEnabledFor(DEBUG):
        return
    held = time.monotonic() - lease.acquired_at
    if log.isEnabledFor(DEBUG):
        log.debug("released %r fence=%s held=%.3fs", lease.name, lease.fence, held)
    if isinstance(current, _Otel):
        attrs = current.attrs(probe.kind, _system_of(lease), lease.name)
        try:
            current.hold_duration.record(held, attrs)
        except Exception:
            _failed("recording a hold")


def lost(lease: Any, reason: str) -> None:
    """``lease`` was lost while held, for ``reason`` (WARNING, always)."""
    probe = _probe_of(lease)
    log = probe.log
    if log.isEnabledFor(logging.WARNING):
        log.warning("lease of %r lost (fence=%s): %s", lease.name, lease.fence, reason)
    current = _SINK
    if isinstance(current, _Otel):
        attrs = current.attrs(probe.kind, _system_of(lease), lease.name)
        try:
            current.lost.add(1, attrs)
        except Exception:
            _failed("counting a lost lease")


def renewals(batch: list[Any], replies: list[Any]) -> None:
    """The watchdog's renewal of ``batch`` (its watches, each with a
    ``lease``) had ``replies`` (``(Status, value)``, or ``None``: the call
    failed): one count per lease, renewed, failed or lost (the renewal found
    the lease gone)."""
    current = _SINK
    if not isinstance(current, _Otel):
        return
    for watch, reply in zip(batch, replies, strict=True):
        if reply is None:
            outcome = RENEWAL_FAILED
        elif getattr(reply[0], "name", None) == "OK":
            outcome = RENEWED
        else:
            outcome = RENEWAL_LOST
        lease = watch.lease
        probe = _probe_of(lease)
        current.renewals.add(1, current.attrs(probe.kind, _system_of(lease), lease.name, outcome))
