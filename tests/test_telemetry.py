"""Logs, metrics and spans (``tenure._telemetry``), on real servers.

The loggers are read with ``caplog``; the metrics and spans with
OpenTelemetry's SDK (an ``InMemoryMetricReader`` and an
``InMemorySpanExporter``), whose providers each test hands to
``configure_telemetry`` and takes back (the ``otel`` fixture), never the
process's global ones. Without OpenTelemetry (its import blocked, in a child
process) nothing of it is imported and nothing is allocated per call.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import redis.asyncio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from tenure import (
    AlreadyHeldError,
    AsyncLock,
    FairLock,
    InvalidArgument,
    Lock,
    LockLostError,
    ReadWriteLock,
    RLock,
    Semaphore,
    configure_telemetry,
)
from tenure import _telemetry as tel
from tenure._drivers import _async as _async_driver
from tenure._drivers import _sync as _sync_driver
from tenure._server import ServerProcess

MakeServer = Callable[..., ServerProcess]


def _wait_until(check: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _system(r: redis.Redis) -> str:
    """What ``db.system.name`` should say of the test server."""
    return "valkey" if "valkey_version" in r.info("server") else "redis"


def _records(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    return [rec for rec in caplog.records if rec.name == logger]


def _about(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    """The ``tenure.lock`` records of the lock ``name`` (an earlier test's
    lease may be lost while this one runs)."""
    return [rec for rec in _records(caplog, "tenure.lock") if f"{name!r}" in rec.getMessage()]


def _no_secret(caplog: pytest.LogCaptureFixture, *secrets: str) -> None:
    for rec in caplog.records:
        text = rec.getMessage()
        for secret in secrets:
            assert secret not in text, text


# -- logging ---------------------------------------------------------------------


def test_the_tenure_logger_has_a_null_handler() -> None:
    handlers = logging.getLogger("tenure").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


def test_acquire_and_release_are_logged_at_debug(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tenure")
    lease = Lock(r, "orders", ttl=5).acquire()
    assert lease is not None
    time.sleep(0.05)
    lease.release()
    got = [rec.getMessage() for rec in _about(caplog, "orders")]
    assert len(got) == 2, got
    assert got[0].startswith(f"acquired 'orders' fence={lease.fence} waited=")
    assert got[1].startswith(f"released 'orders' fence={lease.fence} held=")
    held = float(got[1].rpartition("held=")[2].rstrip("s"))
    assert 0.05 <= held < 2
    assert all(rec.levelno == logging.DEBUG for rec in _records(caplog, "tenure.lock"))
    _no_secret(caplog, lease.owner)


def test_each_primitive_logs_to_its_own_logger(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tenure")
    for lock in (
        RLock(r, "p1"),
        FairLock(r, "p2"),
        Semaphore(r, "p3", 2),
        ReadWriteLock(r, "p4").write,
    ):
        lease = lock.acquire()
        assert lease is not None
        lease.release()
    names = {rec.name for rec in caplog.records if "acquired" in rec.getMessage()}
    assert names == {
        "tenure.rlock",
        "tenure.fair_lock",
        "tenure.semaphore",
        "tenure.read_write_lock",
    }


def test_a_hand_off_is_logged(r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="tenure")
    lock = Lock(r, "handed", ttl=5)
    lease = lock.acquire()
    assert lease is not None
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(lock.acquire(timeout=5)))
    waiter.start()
    _wait_until(lambda: r.zcard("tenure:{handed}:waiters") > 0)  # queued
    lease.release()
    waiter.join()
    second = got[0]
    assert second is not None
    second.release()
    messages = [rec.getMessage() for rec in _about(caplog, "handed")]
    handed = [m for m in messages if m.endswith("(handed off)")]
    assert len(handed) == 1, messages
    assert handed[0].startswith(f"acquired 'handed' fence={second.fence} waited=")
    assert messages[1] == "waiting for 'handed'"  # (the holder's release: before or after)
    _no_secret(caplog, lease.owner, second.owner)


def test_a_timeout_and_a_busy_lock_are_logged(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tenure.lock")
    lock = Lock(r, "busy", ttl=5)
    lease = lock.acquire()
    assert lease is not None
    other: list[Any] = []

    def attempts() -> None:
        other.append(lock.acquire(blocking=False))
        other.append(lock.acquire(timeout=0.1))

    t = threading.Thread(target=attempts)
    t.start()
    t.join()
    assert other == [None, None]
    messages = [rec.getMessage() for rec in _about(caplog, "busy")]
    assert "'busy' is busy: not taken (no wait)" in messages
    assert any(m.startswith("'busy' not taken: gave up after 0.1") for m in messages), messages
    lease.release()


def test_a_lost_lease_is_a_warning_without_on_lost(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tenure")
    lease = Lock(r, "vanishing", ttl=0.6, auto_renew=True).acquire()
    assert lease is not None
    r.delete("tenure:{vanishing}")  # behind the holder's back
    assert lease.lost.wait(3)
    _wait_until(lambda: _about(caplog, "vanishing"))  # (logged after the callbacks)
    lost = _about(caplog, "vanishing")
    assert len(lost) == 1 and lost[0].levelno == logging.WARNING
    assert lost[0].getMessage() == (
        f"lease of 'vanishing' lost (fence={lease.fence}): "
        "the renewal found the lease gone from Redis"
    )
    _no_secret(caplog, lease.owner)


def test_a_renewal_failure_is_a_warning(
    make_server: MakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tenure")
    server = make_server()
    client = redis.Redis.from_url(server.url, socket_timeout=0.5)
    lease = Lock(client, "outage", ttl=1.2, auto_renew=True).acquire()
    assert lease is not None
    server.stop()
    assert lease.lost.wait(5)
    # (only this test's records: an earlier test's lease may be lost meanwhile)
    _wait_until(lambda: _about(caplog, "outage"))  # (logged after the callbacks)
    failed = _records(caplog, "tenure.watchdog")
    assert failed and all(rec.levelno == logging.WARNING for rec in failed)
    assert all("renewal failed" in rec.getMessage() for rec in failed)
    assert [rec.getMessage() for rec in _about(caplog, "outage")] == [
        f"lease of 'outage' lost (fence={lease.fence}): "
        "its deadline passed before a renewal reached Redis"
    ]
    client.close()


def test_a_pubsub_reconnection_is_a_warning(
    r: redis.Redis, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tenure")
    holder = Lock(r, "reconnect", ttl=15).acquire()
    assert holder is not None
    retrying = redis.Redis.from_url(
        url, retry=Retry(ExponentialWithJitterBackoff(base=0.01, cap=1.0), 10)
    )
    got: list[Any] = []
    waiter = threading.Thread(
        target=lambda: got.append(Lock(retrying, "reconnect", ttl=15).acquire(timeout=10))
    )
    waiter.start()
    _wait_until(lambda: r.pubsub_channels("*{reconnect}*"))
    assert int(r.client_kill_filter(_type="pubsub")) >= 1
    _wait_until(lambda: _records(caplog, "tenure.hub"))
    holder.release()
    waiter.join()
    assert got[0] is not None
    got[0].release()
    hub = _records(caplog, "tenure.hub")
    assert all(rec.levelno == logging.WARNING for rec in hub)
    port = url.rpartition(":")[2].split("/")[0]
    assert any(
        "pub/sub connection to" in rec.getMessage() and port in rec.getMessage() for rec in hub
    ), [rec.getMessage() for rec in hub]
    retrying.close()


def test_an_asyncio_acquire_is_logged(url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="tenure")

    async def main() -> int:
        client = redis.asyncio.Redis.from_url(url)
        try:
            lease = await AsyncLock(client, "async-orders", ttl=5).acquire()
            assert lease is not None
            await lease.release()
            return lease.fence
        finally:
            await client.aclose()

    fence = asyncio.run(main())
    messages = [rec.getMessage() for rec in _about(caplog, "async-orders")]
    assert messages[0].startswith(f"acquired 'async-orders' fence={fence} waited=")
    assert messages[1].startswith(f"released 'async-orders' fence={fence} held=")


def test_nothing_watches_with_the_logger_off_and_no_provider(r: redis.Redis) -> None:
    # (this process has OpenTelemetry's API but no provider configured)
    lock = Lock(r, "quiet")
    assert not logging.getLogger("tenure.lock").isEnabledFor(logging.DEBUG)
    assert not tel.sink().on
    assert tel.acquiring(lock, True) is None


def test_an_interrupt_while_an_acquire_is_logged_gives_the_lease_back(
    r: redis.Redis, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG, logger="tenure")

    def interrupted(self: tel.Acquire, lease: Any) -> None:
        raise KeyboardInterrupt  # (a signal handler's, as the outcome is logged)

    monkeypatch.setattr(tel.Acquire, "done", interrupted)
    lock = Lock(r, "cut-off", ttl=30)
    with pytest.raises(KeyboardInterrupt):
        lock.acquire()
    assert not lock.locked()  # released, not held for 30 s by a lease nobody has
    monkeypatch.undo()
    lease = lock.acquire(blocking=False)
    assert lease is not None
    lease.release()


class _FailingHandler(logging.Handler):
    """A handler whose ``emit`` raises (a log sink that is down), where the
    standard handlers report their own errors through ``handleError``."""

    def emit(self, record: logging.LogRecord) -> None:
        raise RuntimeError("the log sink is down")


@pytest.fixture
def failing_handler() -> Iterator[None]:
    handler = _FailingHandler()
    logger = logging.getLogger("tenure")
    logger.addHandler(handler)
    yield
    logger.removeHandler(handler)


@pytest.mark.usefixtures("failing_handler")
def test_a_failing_log_handler_does_not_stop_the_watchdog(url: str) -> None:
    """A loss is logged (WARNING) on the watchdog's thread: a handler that
    raises there neither ends the watchdog (the client's other lease goes on
    being renewed) nor keeps the loss from the other leases of an ``RLock``
    hold."""
    client = redis.Redis.from_url(url)
    fine = Lock(client, "fine", ttl=0.6, auto_renew=True).acquire()
    rlock = RLock(client, "short", ttl=0.2)  # not renewed: lost at its deadline
    outer, inner = rlock.acquire(), rlock.acquire()
    assert fine is not None and outer is not None and inner is not None
    assert outer.lost.wait(1) and inner.lost.wait(0.1)
    time.sleep(1.3)  # two ttls more
    assert fine.valid and not fine.lost.is_set(), fine.lost_reason
    fine.release()


def test_a_renewal_record_that_raises_still_signals_the_loss(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The renewal that finds a lease gone stops watching it: its loss is
    signalled even when recording the renewals raises (a meter provider's
    counter that fails), not left unsignalled for good; the failure is
    logged, not raised out of the watchdog's thread."""

    def failing(batch: Any, replies: Any) -> None:
        raise RuntimeError("the meter is broken")

    monkeypatch.setattr(tel, "renewals", failing)
    lease = Lock(r, "recorded", ttl=0.6, auto_renew=True).acquire()
    assert lease is not None
    r.delete("tenure:{recorded}")
    with caplog.at_level("WARNING", logger="tenure"):
        assert lease.lost.wait(1), "the loss was never signalled"
    assert "gone" in (lease.lost_reason or "")
    assert any("recording the renewals failed" in m for m in caplog.messages)


def test_primitive_names() -> None:
    kinds = {
        name: tel.kind_of(name)
        for name in (
            "Lock",
            "AsyncRLock",
            "FairLock",
            "AsyncReadWriteLock",
            "Semaphore",
            "CountDownLatch",
            "MultiLock",
            "AsyncRedlock",
        )
    }
    assert kinds == {
        "Lock": "lock",
        "AsyncRLock": "rlock",
        "FairLock": "fair_lock",
        "AsyncReadWriteLock": "read_write_lock",
        "Semaphore": "semaphore",
        "CountDownLatch": "count_down_latch",
        "MultiLock": "multi_lock",
        "AsyncRedlock": "redlock",
    }


# -- OpenTelemetry ---------------------------------------------------------------


@dataclass
class Otel:
    reader: InMemoryMetricReader
    spans: InMemorySpanExporter
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        """Each data point of metric ``name``: its attributes and the point."""
        data = self.reader.get_metrics_data()
        found = []
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            found.append((dict(point.attributes or {}), point))
        return found

    def counts(self, name: str, key: str, *, lock: str | None = None) -> dict[str, int]:
        """A counter's (or histogram's) total by the value of attribute
        ``key`` (of the lock named ``lock`` only, if given)."""
        out: dict[str, int] = {}
        for attrs, point in self.points(name):
            if lock is not None and attrs.get(tel.LOCK_NAME) != lock:
                continue
            n = point.count if hasattr(point, "count") else point.value
            out[attrs.get(key, "")] = out.get(attrs.get(key, ""), 0) + n
        return out

    def acquires(self) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name == tel.SPAN]


def _otel(lock_names: bool = False) -> tuple[Otel, MeterProvider]:
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[reader])
    configure_telemetry(
        meter_provider=meter_provider, tracer_provider=tracer_provider, lock_names=lock_names
    )
    return Otel(reader, exporter, tracer_provider, meter_provider), meter_provider


@pytest.fixture
def otel() -> Iterator[Otel]:
    """SDK providers given to tenure for the test (the globals untouched), taken back after."""
    made, meter_provider = _otel()
    yield made
    configure_telemetry()
    meter_provider.shutdown()
    made.tracer_provider.shutdown()


def test_acquires_by_outcome(r: redis.Redis, otel: Otel) -> None:
    lock = Lock(r, "outcomes", ttl=5)
    lease = lock.acquire()
    assert lease is not None
    with pytest.raises(AlreadyHeldError):
        lock.acquire()
    other: list[Any] = []

    def attempts() -> None:
        other.append(lock.acquire(blocking=False))
        other.append(lock.acquire(timeout=0.05))
        other.append(lock.acquire(timeout=5))

    t = threading.Thread(target=attempts)
    t.start()
    _wait_until(lambda: len(other) == 2)
    time.sleep(0.1)
    # the third attempt waits: one waiter in this process
    assert sum(point.value for _, point in otel.points(tel.WAITERS)) == 1
    lease.release()
    t.join()
    assert other[:2] == [None, None] and other[2] is not None
    other[2].release()
    assert otel.counts(tel.ACQUIRES, tel.OUTCOME) == {
        "granted": 1,
        "error": 1,
        "denied": 1,
        "timed_out": 1,
        "handed_off": 1,
    }
    durations = {attrs[tel.OUTCOME]: point for attrs, point in otel.points(tel.ACQUIRE_DURATION)}
    assert durations["handed_off"].sum >= 0.1  # it waited for the release
    assert durations["timed_out"].sum >= 0.05
    assert durations["granted"].sum < 1
    for attrs, _ in otel.points(tel.ACQUIRES):
        assert attrs[tel.PRIMITIVE] == "lock"
        assert attrs[tel.DB_SYSTEM] == _system(r)
        assert tel.LOCK_NAME not in attrs  # (off by default: bounded cardinality)
    # the waiters of this process: none left
    assert sum(point.value for _, point in otel.points(tel.WAITERS)) == 0
    assert otel.counts(tel.HOLD_DURATION, tel.PRIMITIVE) == {"lock": 2}


def test_an_acquire_span_is_the_callers_child_with_wait_and_hand_off_events(
    r: redis.Redis, otel: Otel
) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    lock = Lock(r, "traced", ttl=5)
    lease = lock.acquire()
    assert lease is not None
    got: list[Any] = []

    def waits() -> None:
        with tracer.start_as_current_span("job"):
            got.append(lock.acquire(timeout=5))

    t = threading.Thread(target=waits)
    t.start()
    _wait_until(lambda: r.zcard("tenure:{traced}:waiters") > 0)
    lease.release()
    t.join()
    second = got[0]
    assert second is not None
    second.release()
    job = next(s for s in otel.spans.get_finished_spans() if s.name == "job")
    first, handed = otel.acquires()
    assert first.parent is None
    assert handed.parent is not None and handed.parent.span_id == job.context.span_id
    assert [e.name for e in handed.events] == [tel.WAIT_EVENT, tel.HANDOFF_EVENT]
    assert handed.events[1].attributes == {tel.FENCE: second.fence}
    assert handed.attributes == {
        tel.PRIMITIVE: "lock",
        tel.LOCK_NAME: "traced",
        tel.DB_SYSTEM: _system(r),
        tel.OUTCOME: "handed_off",
        tel.FENCE: second.fence,
    }
    assert first.events == ()
    assert first.attributes is not None and first.attributes[tel.OUTCOME] == "granted"
    for span in (first, handed):
        assert second.owner not in str(span.attributes) and lease.owner not in str(span.attributes)


def test_a_failed_acquire_span_records_the_error(r: redis.Redis, otel: Otel) -> None:
    lock = Lock(r, "twice")
    lease = lock.acquire()
    assert lease is not None
    with pytest.raises(AlreadyHeldError):
        lock.acquire()
    lease.release()
    span = otel.acquires()[1]
    assert span.status.status_code.name == "ERROR"
    assert [e.name for e in span.events] == ["exception"]


def test_lost_leases_and_renewals_are_counted(r: redis.Redis) -> None:
    # (by name: an earlier test's lease may be renewed or lost meanwhile)
    made, meter_provider = _otel(lock_names=True)
    try:
        lease = Lock(r, "renewed", ttl=0.6, auto_renew=True).acquire()
        assert lease is not None
        time.sleep(0.5)  # a renewal (every 0.2 s)
        r.delete("tenure:{renewed}")
        assert lease.lost.wait(3)
        _wait_until(lambda: made.points(tel.LOST))  # (counted after the callbacks)
        renewals = made.counts(tel.RENEWALS, tel.RENEWAL_OUTCOME, lock="renewed")
        assert renewals["renewed"] >= 1 and renewals["lost"] == 1, renewals
        assert made.counts(tel.LOST, tel.PRIMITIVE, lock="renewed") == {"lock": 1}
    finally:
        configure_telemetry()
        meter_provider.shutdown()


def test_per_name_attributes_are_a_switch(r: redis.Redis) -> None:
    made, meter_provider = _otel(lock_names=True)
    try:
        lease = Lock(r, "named").acquire()
        assert lease is not None
        lease.release()
        (attrs, _), *_ = made.points(tel.ACQUIRES)
        assert attrs[tel.LOCK_NAME] == "named"
    finally:
        configure_telemetry()
        meter_provider.shutdown()


def test_every_primitive_is_recorded(r: redis.Redis, otel: Otel) -> None:
    for lock in (
        RLock(r, "k1"),
        FairLock(r, "k2"),
        Semaphore(r, "k3", 2),
        ReadWriteLock(r, "k4").read,
    ):
        lease = lock.acquire()
        assert lease is not None
        lease.release()
    assert otel.counts(tel.ACQUIRES, tel.PRIMITIVE) == {
        "rlock": 1,
        "fair_lock": 1,
        "semaphore": 1,
        "read_write_lock": 1,
    }


def test_an_asyncio_acquire_is_recorded(url: str, otel: Otel) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        try:
            lease = await AsyncLock(client, "async-traced").acquire()
            assert lease is not None
            await lease.release()
        finally:
            await client.aclose()

    asyncio.run(main())
    (span,) = otel.acquires()
    assert span.attributes is not None and span.attributes[tel.LOCK_NAME] == "async-traced"
    assert otel.counts(tel.ACQUIRES, tel.OUTCOME) == {"granted": 1}


def test_waiters_are_counted_after_the_same_provider_is_given_again(
    r: redis.Redis, otel: Otel
) -> None:
    # (a meter registers an instrument's callback once: the second is ignored)
    configure_telemetry(meter_provider=otel.meter_provider, tracer_provider=otel.tracer_provider)
    lock = Lock(r, "again", ttl=5)
    lease = lock.acquire()
    assert lease is not None
    t = threading.Thread(target=lambda: lock.acquire(timeout=5).release())  # type: ignore[union-attr]
    t.start()
    _wait_until(lambda: r.zcard("tenure:{again}:waiters") > 0)
    assert sum(point.value for _, point in otel.points(tel.WAITERS)) == 1
    lease.release()
    t.join()
    assert sum(point.value for _, point in otel.points(tel.WAITERS)) == 0


def test_a_bad_setting_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="lock_names"):
        configure_telemetry(lock_names="yes")  # type: ignore[arg-type]


def test_turned_off_records_nothing(r: redis.Redis, otel: Otel) -> None:
    configure_telemetry(enabled=False)
    assert tel.sink() is tel.NOOP
    lease = Lock(r, "off").acquire()
    assert lease is not None
    lease.release()
    assert otel.acquires() == [] and otel.points(tel.ACQUIRES) == []


# -- without OpenTelemetry -------------------------------------------------------

_BLOCKED = """
import importlib.abc, sys

class NoOtel(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"blocked: {name}")
        return None

sys.meta_path.insert(0, NoOtel())
"""

_CYCLES = """
import gc, logging, sys, tracemalloc
import redis
from tenure import Lock, _telemetry

r = redis.Redis.from_url(sys.argv[1])
lock = Lock(r, "no-otel", ttl=5)

def cycles(n):
    for _ in range(n):
        lock.acquire().release()

cycles(20)  # (first calls: the server's probe, the sink resolved)
gc.collect()
tracemalloc.start(5)
before = tracemalloc.take_snapshot()
cycles(200)
after = tracemalloc.take_snapshot()
grown = [
    stat for stat in after.compare_to(before, "filename")
    if stat.traceback[0].filename.endswith("_telemetry.py") and stat.size_diff > 0
]
assert _telemetry.sink() is _telemetry.NOOP, _telemetry.sink()
assert _telemetry.acquiring(lock, True) is None
assert grown == [], grown
# a DEBUG logger still logs, with no OpenTelemetry
logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(name)s %(message)s")
cycles(1)
print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
"""


def test_without_opentelemetry_nothing_is_imported_or_allocated(url: str) -> None:
    code = textwrap.dedent(_BLOCKED) + textwrap.dedent(_CYCLES)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code, url], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "[]", done.stdout
    assert any(line.startswith("tenure.lock acquired 'no-otel'") for line in lines), lines


def _hold(url: str, name: str) -> None:
    """Take the lock ``name`` (in a thread of its own: another owner) for 15 s."""
    held: list[Any] = []
    taker = threading.Thread(
        target=lambda: held.append(Lock(redis.Redis.from_url(url), name, ttl=15).acquire())
    )
    taker.start()
    taker.join()
    assert held[0] is not None


def _about_server(caplog: pytest.LogCaptureFixture, url: str) -> list[logging.LogRecord]:
    """The ``tenure.hub`` records of the server at ``url``."""
    port = url.rpartition(":")[2].split("/")[0]
    return [rec for rec in _records(caplog, "tenure.hub") if f":{port}" in rec.getMessage()]


def test_the_hub_of_a_closed_client_stops_quietly(
    make_server: Callable[..., ServerProcess], caplog: pytest.LogCaptureFixture
) -> None:
    """A client the program closed while its hub still listened on a channel
    (lingering after a wait): the hub stops, at DEBUG, and connects no more."""
    caplog.set_level(logging.DEBUG, logger="tenure")
    url = make_server().url
    _hold(url, "closed")
    client = redis.Redis.from_url(url)
    assert Lock(client, "closed", ttl=5).acquire(timeout=0.2) is None
    hub = _sync_driver._state(client).hub
    assert hub._pubsub is not None  # (its channel lingers)
    client.close()
    _wait_until(lambda: hub._pubsub is None)
    time.sleep(0.3)
    logged = _about_server(caplog, url)
    assert logged and all(rec.levelno == logging.DEBUG for rec in logged), logged
    assert all("made again" not in rec.getMessage() for rec in logged)
    assert hub._pubsub is None


def test_the_hub_of_a_closed_asyncio_client_stops_quietly(
    make_server: Callable[..., ServerProcess], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tenure")
    url = make_server().url
    _hold(url, "closed")

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        assert await AsyncLock(client, "closed", ttl=5).acquire(timeout=0.2) is None
        hub = _async_driver._state(client).hub
        assert hub._pubsub is not None  # (its channel lingers)
        await client.aclose()
        deadline = time.monotonic() + 5
        while hub._pubsub is not None:
            assert time.monotonic() < deadline, "the hub still reads"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        assert hub._pubsub is None

    asyncio.run(main())
    logged = _about_server(caplog, url)
    assert logged and all(rec.levelno == logging.DEBUG for rec in logged), logged
    assert all("made again" not in rec.getMessage() for rec in logged)


# -- telemetry that fails --------------------------------------------------------


class _BrokenInstrument:
    def add(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the meter is broken")

    record = add


class _BrokenMeter:
    def create_histogram(self, *args: Any, **kwargs: Any) -> _BrokenInstrument:
        return _BrokenInstrument()

    create_counter = create_histogram

    def create_observable_up_down_counter(self, *args: Any, **kwargs: Any) -> None:
        return None


class _BrokenMeterProvider:
    """A meter provider whose instruments raise on every measurement."""

    def get_meter(self, *args: Any, **kwargs: Any) -> _BrokenMeter:
        return _BrokenMeter()


class _BrokenSpanProcessor(SimpleSpanProcessor):
    """A span processor that raises when a span starts (``at="start"``) or ends."""

    def __init__(self, at: str) -> None:
        super().__init__(InMemorySpanExporter())
        self.at = at

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if self.at == "start":
            raise RuntimeError("the span processor is broken")

    def on_end(self, span: Any) -> None:
        if self.at == "end":
            raise RuntimeError("the span processor is broken")


@pytest.fixture(params=["meter", "span start", "span end"])
def broken_telemetry(request: pytest.FixtureRequest) -> Iterator[None]:
    """Providers given to tenure whose instruments, or span processor, raise."""
    tracer_provider = TracerProvider()
    if request.param == "meter":
        configure_telemetry(meter_provider=_BrokenMeterProvider())
    else:
        tracer_provider.add_span_processor(_BrokenSpanProcessor(request.param.split()[1]))
        configure_telemetry(tracer_provider=tracer_provider)
    yield
    configure_telemetry()
    tracer_provider.shutdown()


def test_telemetry_that_raises_changes_no_outcome(
    r: redis.Redis, broken_telemetry: None, caplog: pytest.LogCaptureFixture
) -> None:
    """A meter or span processor that raises: acquires return their lease (or
    raise their own error), releases release, a loss is signalled (and raised
    by the release that finds it), and the failure is logged."""
    lock = Lock(r, "broken", ttl=5)
    with caplog.at_level("WARNING", logger="tenure"):
        lease = lock.acquire()
        assert lease is not None
        with pytest.raises(AlreadyHeldError):
            lock.acquire(timeout=0.1)
        denied: list[object] = []
        other = threading.Thread(target=lambda: denied.append(lock.acquire(blocking=False)))
        other.start()
        other.join(10)
        assert denied == [None]
        lease.release()
        assert not r.exists("tenure:{broken}")
        lost = lock.acquire()
        assert lost is not None
        r.delete("tenure:{broken}")
        with pytest.raises(LockLostError):
            lost.release()
        assert lost.lost.is_set()
    assert any("tenure telemetry" in m for m in caplog.messages), caplog.messages


def test_asyncio_telemetry_that_raises_changes_no_outcome(url: str, broken_telemetry: None) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        lock = AsyncLock(client, "abroken", ttl=5)
        lease = await lock.acquire()
        assert lease is not None
        await lease.release()
        assert not await client.exists("tenure:{abroken}")
        await client.aclose()

    asyncio.run(main())
