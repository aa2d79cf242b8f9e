"""Draw the screenshots of ``tenure top`` and ``tenure dashboard`` in the docs
(``docs/img/top.png``, ``docs/img/dashboard.png``).

It starts an embedded Valkey, holds a few primitives in this process (a Lock
with a waiter, an RLock, a ReadWriteLock, a Semaphore, a closed latch), then
draws ``top``'s screen with rich (recorded as SVG) and the dashboard's page,
each turned into a PNG by headless Chromium (``make browser``). Run it from
the repository's root: ``python scripts/live_screenshots.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis
from rich.console import Console

from tenure import CountDownLatch, Lock, ReadWriteLock, RLock, Semaphore
from tenure._cli import build_parser
from tenure._cli.live import Watcher
from tenure._cli.screen import Screen
from tenure._server import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "img"
HEADLESS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars")


def wait_for(client: redis.Redis, name: str) -> None:
    """Queue for the Lock ``name`` until the server goes away."""
    with contextlib.suppress(redis.exceptions.ConnectionError):
        Lock(client, name, ttl=30).acquire(timeout=60)


def hold(client: redis.Redis) -> list[object]:
    """Hold a few primitives (and queue a waiter); what must stay referenced."""
    kept: list[object] = []
    orders = Lock(client, "orders:42", ttl=30)
    kept.append(orders.acquire())
    waiter = threading.Thread(target=wait_for, args=(client, "orders:42"), daemon=True)
    waiter.start()
    kept.append(waiter)
    kept.append(RLock(client, "reports", ttl=60).acquire())
    kept.append(ReadWriteLock(client, "catalog", ttl=45).read.acquire())
    gpus = Semaphore(client, "gpus", permits=4, ttl=120)
    kept.append(gpus.acquire(3))
    latch = CountDownLatch(client, "warmup")
    latch.try_set_count(3)
    latch.count_down()
    kept.append(latch)
    free = Lock(client, "nightly")
    lease = free.acquire()
    assert lease is not None
    lease.release()
    return kept


def chromium(*args: str) -> None:
    binary = shutil.which("chromium")
    if binary is None:
        sys.exit("Debian's chromium is needed: make browser")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [binary, *HEADLESS, f"--user-data-dir={profile}", *args],
            check=True,
            capture_output=True,
            timeout=120,
        )


def top_png(url: str) -> None:
    args = build_parser().parse_args(["--url", url, "top", "--sort", "held"])
    watcher = Watcher(url, prefix=args.prefix, pattern=args.pattern, count=args.scan_count)
    watcher.first()
    time.sleep(1.5)
    screen = Screen(args, watcher.read(), "redis://127.0.0.1:6379/0")
    watcher.close()
    console = Console(
        record=True, width=150, force_terminal=True, color_system="truecolor", file=io.StringIO()
    )
    console.print(screen.render(console.width))
    with tempfile.TemporaryDirectory() as tmp:
        svg = Path(tmp) / "top.svg"
        console.save_svg(str(svg), title="tenure top")
        box = re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg.read_text())
        assert box, "rich's SVG has no viewBox"
        page = Path(tmp) / "top.html"
        page.write_text(f'<body style="margin:0"><img src="{svg.name}"></body>')
        size = f"--window-size={math.ceil(float(box[1]))},{math.ceil(float(box[2]))}"
        chromium(f"--screenshot={OUT / 'top.png'}", size, page.as_uri())


def dashboard_png(url: str) -> None:
    board = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tenure",
            "--url",
            url,
            "dashboard",
            "--port",
            "0",
            "--sort",
            "held",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert board.stderr is not None
        line = board.stderr.readline()
        page = line.split("serving ", 1)[1].split()[0]
        chromium(
            f"--screenshot={OUT / 'dashboard.png'}",
            "--window-size=1400,420",
            "--virtual-time-budget=4000",
            page,
        )
    finally:
        board.send_signal(2)
        board.wait(15)


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    with ServerProcess() as server:
        client = redis.Redis.from_url(server.url)
        kept = hold(client)
        time.sleep(2)
        top_png(server.url)
        dashboard_png(server.url)
        del kept
    print(f"wrote {OUT / 'top.png'} and {OUT / 'dashboard.png'}")


if __name__ == "__main__":
    main()
