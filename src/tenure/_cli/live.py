"""What ``tenure top`` and ``tenure dashboard`` share: their options, and the
:class:`Watcher` that reads the server once a refresh.

A refresh is ``ls``'s read (:func:`tenure._ops.list_locks`: a ``SCAN`` of
every master, then each primitive's inspect plan) and the server's clock,
made into rows by :mod:`tenure._views.live`. A refresh that fails (the server
restarts, a failover) gives a frame with the error, and the next one
connects again.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import redis
import redis.exceptions

from .. import _ops
from .._keys import check_prefix
from .._views.live import SORTS, Frame, HeldClock
from .common import _add_prefix, _positive_int, _seconds

#: How long a refresh waits for the server's answer to one call, in seconds.
CALL_TIMEOUT = 5.0

#: The seconds between refreshes unless ``--interval`` says otherwise.
INTERVAL = 1.0


def add_live_options(parser: argparse.ArgumentParser) -> None:
    """The options ``top`` and ``dashboard`` share: PATTERN, ``--prefix``,
    ``--interval``, ``--sort``, ``--all`` and ``--scan-count``."""
    parser.add_argument(
        "pattern", nargs="?", default="*", metavar="PATTERN", help="a glob on the names"
    )
    _add_prefix(parser)
    parser.add_argument(
        "--interval",
        type=_seconds("--interval", allow_zero=False),
        default=INTERVAL,
        metavar="SECONDS",
        help=f"seconds between refreshes (default {INTERVAL:g})",
    )
    parser.add_argument(
        "--sort",
        choices=SORTS,
        default="name",
        help="the order of the rows: name; held (longest held first); ttl (soonest to "
        "expire first); waiters (most first); fence (newest first). Default: name",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="show every primitive found, the free ones too (default: only those held, "
        "waited for, or closed latches)",
    )
    parser.add_argument(
        "--scan-count",
        type=_positive_int,
        default=_ops.SCAN_COUNT,
        metavar="N",
        help=f"keys asked for per SCAN call (default {_ops.SCAN_COUNT})",
    )


def where(url: str) -> str:
    """The server of ``url`` for a title, without its user or password:
    ``redis://127.0.0.1:6379/0``, ``unix:///run/valkey.sock``."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


class Watcher:
    """Reads the primitives under a prefix, one frame a call, connecting again
    after a failed refresh. Not thread-safe: one caller at a time."""

    def __init__(self, url: str, *, prefix: str, pattern: str, count: int) -> None:
        check_prefix(prefix)
        self.url = url
        self.prefix = prefix
        self.pattern = pattern
        self.count = count
        self._client: redis.Redis | redis.cluster.RedisCluster | None = None
        self._clock = HeldClock()

    def _read(self) -> Frame:
        at = time.time()
        if self._client is None:
            self._client = _ops.connect(self.url, socket_timeout=CALL_TIMEOUT)
        views, skipped = _ops.list_locks(
            self._client, prefix=self.prefix, pattern=self.pattern, count=self.count
        )
        now = _ops.server_time(self._client)
        return Frame(at, tuple(self._clock.rows(views, now)), tuple(skipped))

    def first(self) -> Frame:
        """The first frame; a server that can't be read raises, as ``ls`` would.

        Raises:
            redis.exceptions.RedisError: the server could not be read.
        """
        try:
            return self._read()
        except BaseException:
            self.close()
            raise

    def read(self) -> Frame:
        """A frame; if the server could not be read, one holding the error (the
        client is dropped, and the next call connects again)."""
        try:
            return self._read()
        except (
            redis.exceptions.RedisError,
            redis.exceptions.RedisClusterException,
            OSError,
        ) as exc:
            self.close()
            return Frame(time.time(), error=f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        """Close the client (a later read opens another)."""
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(redis.exceptions.RedisError, OSError):
                client.close()


def ticks(interval: float, iterations: int | None) -> Iterator[float]:
    """The monotonic deadline of each refresh after the first, ``interval``
    apart (skipping those already past), ``iterations - 1`` of them if given."""
    due = time.monotonic()
    done = 1
    while iterations is None or done < iterations:
        due += interval
        due = max(due, time.monotonic())
        yield due
        done += 1
