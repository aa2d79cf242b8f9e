"""A Celery task that runs at most once at a time across every worker.

``rebuild_report`` runs its work in a call decorated with the tenure ``Lock``
``report``, which reads its lease (``report_lock.current_lease()``) and passes
the lease's fence to the write that ends it: the report is stored with
a ``FencedKey``, which refuses a write whose fence is smaller than one it has
already accepted. A second copy of the task that finds the lock held waits at
most ``wait`` seconds (none by default) and then returns ``{"skipped": True}``
without running.

Why the watchdog and the fence matter: a worker that is killed (``kill -9``,
the OOM killer, a hard time limit) never releases its lock. Its lease ends
``TTL`` seconds after the last renewal (the watchdog renews it every third of
``TTL`` while the task runs, so ``TTL`` can be short however long the task),
and the next task runs. A worker that was only paused (a stop signal, a long
GC pause, a frozen VM) may wake up after that and finish its work: its lease
has ended and a newer holder has written, so its write is refused
(``StaleFenceError``) instead of overwriting the newer report. A lock that is a
key with a fixed expiry (celery-once's; celery-singleton's, which has none by
default) keeps the task from running until that expiry after a kill, and lets
a worker that wakes up late write.

Run it from ``examples/`` (broker, result backend and locks on one server)::

    REDIS_URL=redis://localhost:6379/0 celery -A celery_app worker --concurrency=2
    python -c 'import celery_app; print(celery_app.rebuild_report.delay(1).get())'

``tests/test_celery.py`` starts real workers on a test server, enqueues
overlapping tasks and checks that runs never overlap, that fences increase,
that a duplicate is skipped, and what happens when a worker is killed or paused.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from celery import Celery

from tenure import FencedKey, Lock, LockLostError, StaleFenceError

REDIS_URL = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
#: How long a dead worker's lock outlives it, in seconds.
TTL = float(os.environ.get("REPORT_LOCK_TTL", "30"))

app = Celery("celery_app", broker=REDIS_URL, backend=REDIS_URL)
client = redis.Redis.from_url(REDIS_URL)
report_lock = Lock(client, "report", ttl=TTL, auto_renew=True)
report = FencedKey(client, "report:body")


def journal(event: str, run: int, fence: int) -> None:
    """Note an event of a run in the list ``report:journal`` (the test reads it)."""
    entry = {"event": event, "run": run, "fence": fence, "at": time.time()}
    client.rpush("report:journal", json.dumps(entry))


@app.task
def rebuild_report(run: int, work: float = 0.2, wait: float = 0) -> dict[str, Any]:
    """Build the report (``work`` seconds of sleep here) and store it, unless
    another worker holds the lock for ``wait`` seconds more.

    Returns ``{"run", "fence"}`` when it ran, ``{"run", "skipped": True}`` when
    the lock stayed held, and ``{"run", "fence", "lost": True, "written"}``
    when the lease ended before the work did (the worker was paused for longer
    than ``TTL``): ``written`` is false when its write was refused because a
    newer holder had written.
    """
    written = False

    # Each call holds the lock (released at the end, whatever happens); one
    # that does not get it within ``wait`` (timeout=0: one attempt) returns
    # None without running.
    @report_lock(timeout=wait, skip=True)
    def rebuild() -> int:
        nonlocal written
        fence = report_lock.current_lease().fence  # this call's lease
        journal("start", run, fence)
        time.sleep(work)  # the work
        report.set(f"report of run {run}", fence=fence)
        written = True
        journal("end", run, fence)
        return fence

    try:
        fence = rebuild()  # (typed int | None: None when skipped)
    except (StaleFenceError, LockLostError) as exc:  # the write refused, or the lease lost
        return {"run": run, "fence": exc.fence, "lost": True, "written": written}
    if fence is None:
        return {"run": run, "skipped": True}
    return {"run": run, "fence": fence}
