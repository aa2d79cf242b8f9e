"""``tenure dashboard`` on real servers: its HTTP answers, and its page in a real
browser (Debian's Chromium, headless; ``make browser`` installs it).

The browser check loads a harness page that shows the dashboard in a frame
(served through the harness's own server, so that its script may read the
frame) and waits for each state in turn: the lock the test holds appears
with its holder; after the test releases it, it is gone; while the test has
stopped the Redis server, the page says so; once the server is back, the page
shows it again. After each state the harness asks the test to act and waits
for its answer, and the page's load event is held back until the end, so that
``chromium --dump-dom`` prints what the harness saw.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import pytest
import redis

from tenure import Lock
from tenure._server import ServerProcess

pytestmark = pytest.mark.once

MakeServer = Callable[..., ServerProcess]
T = TypeVar("T")
STATIC = Path(__file__).resolve().parent.parent / "src" / "tenure" / "_cli" / "static"


def held(lease: T | None) -> T:
    assert lease is not None
    return lease


class Dashboard:
    """``tenure --url URL dashboard --port 0 ARGS`` running; ``base`` is its URL."""

    def __init__(self, url: str, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tenure", "--url", url, "dashboard", "--port", "0", *args],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.process.stderr is not None
        line = self.process.stderr.readline()
        match = re.search(r"serving (http://\S+/) ", line)
        assert match, line + self.process.stderr.read()
        self.base = match[1]

    def get(self, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(self.base + path.lstrip("/"), headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=15) as answer:
                return answer.status, dict(answer.headers), answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def locks(self, query: str = "") -> Any:
        status, _, body = self.get("api/locks" + query)
        assert status == 200, body
        return json.loads(body)

    def stop(self) -> int:
        """Ctrl-C it; its exit status."""
        self.process.send_signal(2)
        try:
            return self.process.wait(15)
        finally:
            if self.process.stderr:
                self.process.stderr.close()


@pytest.fixture
def board(url: str) -> Iterator[Dashboard]:
    dashboard = Dashboard(url, "--interval", "0.2")
    yield dashboard
    if dashboard.process.poll() is None:
        dashboard.stop()


def test_the_dashboard_serves_its_page_and_the_table_as_json(
    board: Dashboard, r: redis.Redis
) -> None:
    lease = held(Lock(r, "orders:42", ttl=30, label="web-3 job 42").acquire())
    held(Lock(r, "free").acquire()).release()
    data = board.locks()
    assert data["error"] is None and data["shown"] == 1 and data["total"] == 2
    (lock,) = data["locks"]
    assert lock["name"] == "orders:42" and lock["holder"] == lease.owner
    table = data["table"]
    assert table["columns"][:2] == ["NAME", "KIND"] and table["columns"][-1] == "HOLDER"
    assert table["sorts"]["HELD FOR"] == "held" and "HOLDER" not in table["sorts"]
    (row,) = table["rows"]
    assert row["key"] == "tenure:{orders:42}" and row["cells"][-1] == "web-3 job 42"
    assert data["interval"] == 0.2 and data["server"].startswith("redis://127.0.0.1:")
    every = board.locks("?all=1&sort=fence")
    assert every["sort"] == "fence" and [x["name"] for x in every["locks"]] == ["free", "orders:42"]
    status, _, _ = board.get("api/locks?sort=holder")
    assert status == 400

    status, headers, page = board.get("/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'src="dashboard.js"' in page
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    for name in ("dashboard.js", "dashboard.css"):
        status, _, body = board.get(name)
        assert status == 200 and body == (STATIC / name).read_bytes()
    assert board.get("nothing-here")[0] == 404
    assert board.stop() == 0


def test_the_page_needs_nothing_from_the_network() -> None:
    for path in STATIC.iterdir():
        text = path.read_text()
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I), path.name
        assert "innerHTML" not in text, path.name  # text goes in as text


def test_the_dashboard_is_read_only_and_answers_only_a_loopback_host(board: Dashboard) -> None:
    assert board.get("api/locks", Host="attacker.example")[0] == 403
    assert board.get("/", Host="127.0.0.1.nip.io:80")[0] == 403
    assert board.get("api/locks", Host="localhost:1")[0] == 200
    split = urlsplit(board.base)
    assert split.hostname and split.port
    for method in ("POST", "PUT", "DELETE"):
        conn = http.client.HTTPConnection(split.hostname, split.port, timeout=10)
        conn.request(method, "/api/locks", body=b"")
        assert conn.getresponse().status == 501, method
        conn.close()


def test_the_dashboard_fails_at_once_without_a_server(make_server: MakeServer) -> None:
    server = make_server()
    server.stop()
    done = subprocess.run(
        [sys.executable, "-m", "tenure", "--url", server.url, "dashboard", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "Connection refused" in done.stderr


# --- in a browser ---------------------------------------------------------------------------

HARNESS = """<!doctype html>
<html><head><meta charset="utf-8"><title>harness</title></head><body>
<iframe id="board" src="/board/" width="1200" height="500"></iframe>
<pre id="seen"></pre>
<script>
const OWNER = %(owner)s;
function row(doc, key) {
  return Array.from(doc.querySelectorAll('#locks tbody tr')).find(tr => tr.dataset.key === key);
}
const STEPS = [
  ['held', doc => { const tr = row(doc, 'tenure:{orders:42}');
                    return tr && tr.innerText.includes(OWNER); }],
  ['released', doc => doc.body.dataset.state === 'ok' && !row(doc, 'tenure:{orders:42}')
                      && !doc.getElementById('empty').hidden],
  ['error', doc => doc.body.dataset.state === 'error'
                   && doc.getElementById('status').innerText.includes('server unreachable')],
  ['recovered', doc => doc.body.dataset.state === 'ok' && !!row(doc, 'tenure:{after}')],
];
const seen = document.getElementById('seen');
async function run() {
  for (const [name, check] of STEPS) {
    const deadline = Date.now() + 20000;
    for (;;) {
      const doc = document.getElementById('board').contentDocument;
      let ok = false;
      try { ok = !!(doc && doc.body && check(doc)); } catch (e) { ok = false; }
      if (ok) break;
      if (Date.now() > deadline) {
        seen.textContent += 'timed out waiting for ' + name + ': '
          + (doc && doc.body ? doc.body.innerText : '(no page)') + '\\n';
        await fetch('/__done__');
        return;
      }
      await new Promise(resolve => setTimeout(resolve, 50));
    }
    seen.textContent += name + '\\n';
    await fetch('/__step__?name=' + name);  // the test acts, then answers
  }
  await fetch('/__done__');
}
run();
</script>
<img src="/__wait__" alt="">
</body></html>"""

GIF = bytes.fromhex(
    "47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b"
)


class _Harness(http.server.ThreadingHTTPServer):
    daemon_threads = True
    board: str
    page: bytes
    steps: queue.Queue[str]
    go: queue.Queue[str]
    done: threading.Event


class _HarnessHandler(http.server.BaseHTTPRequestHandler):
    server: _Harness

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path == "/harness.html":
            self._send(200, self.server.page, "text/html", {})
        elif parts.path.startswith("/board/"):  # the dashboard, from this origin
            target = self.server.board + self.path[len("/board/") :]
            try:
                with urllib.request.urlopen(target, timeout=15) as answer:
                    self._send(answer.status, answer.read(), answer.headers["Content-Type"], {})
            except OSError:
                self._send(502, b"dashboard gone", "text/plain", {})
        elif parts.path == "/__step__":
            self.server.steps.put(parse_qs(parts.query)["name"][0])
            self.server.go.get(timeout=60)
            self._send(200, b"", "text/plain", {})
        elif parts.path == "/__done__":
            self.server.done.set()
            self._send(200, b"", "text/plain", {})
        elif parts.path == "/__wait__":
            self.server.done.wait(90)
            self._send(200, GIF, "image/gif", {})
        else:
            self._send(404, b"", "text/plain", {})

    def _send(self, status: int, body: bytes, kind: str, headers: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def chromium(tmp_path: Path) -> list[str]:
    """The headless browser's command line, with a profile of its own."""
    binary = shutil.which("chromium")
    if binary is None:
        pytest.skip("Debian's chromium is not installed (make browser)")
    return [
        binary,
        "--headless",
        "--no-sandbox",  # the tests may run as root
        "--disable-gpu",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1280,800",
    ]


def test_the_page_follows_the_locks_and_survives_a_server_restart(
    chromium: list[str], make_server: MakeServer
) -> None:
    server = make_server()
    client = redis.Redis.from_url(server.url)
    lease = held(Lock(client, "orders:42", ttl=30, label="web-3 <b>job</b> 42").acquire())
    board = Dashboard(server.url, "--interval", "0.2")
    harness = _Harness(("127.0.0.1", 0), _HarnessHandler)
    harness.board = board.base
    harness.page = (HARNESS % {"owner": json.dumps("web-3 <b>job</b> 42")}).encode()
    harness.steps, harness.go, harness.done = queue.Queue(), queue.Queue(), threading.Event()
    threading.Thread(target=harness.serve_forever, daemon=True).start()
    page = f"http://127.0.0.1:{harness.server_address[1]}/harness.html"
    browser = subprocess.Popen(
        [*chromium, "--dump-dom", page],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    actions: dict[str, Callable[[], object]] = {
        "held": lease.release,
        "released": server.stop,
        "error": lambda: (server.start(), held(Lock(client, "after", ttl=30).acquire())),
        "recovered": lambda: None,
    }
    try:
        for expected, act in actions.items():
            try:
                step = harness.steps.get(timeout=60)
            except queue.Empty:
                break  # the harness timed out: its report says where
            assert step == expected
            act()
            harness.go.put(step)
        dom, err = browser.communicate(timeout=120)
    finally:
        browser.kill()
        harness.shutdown()
        harness.server_close()
        assert board.stop() == 0
    seen = dom.split('<pre id="seen">', 1)[1].split("</pre>", 1)[0] if dom else err
    assert seen.split("\n") == ["held", "released", "error", "recovered", ""], seen


class _CountingHarness(_Harness):
    asked: int


class _CountingHandler(_HarnessHandler):
    """The harness's handler, counting the page's asks for ``api/locks``."""

    server: _CountingHarness

    def do_GET(self) -> None:
        if urlsplit(self.path).path == "/board/api/locks":
            self.server.asked += 1  # (one handler thread at a time: the page awaits each)
        super().do_GET()


IDLE_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>harness</title></head><body>
<iframe src="/board/" width="1200" height="500"></iframe>
<script>setTimeout(function () { fetch('/__done__'); }, 3000);</script>
<img src="/__wait__" alt="">
</body></html>"""


def test_the_page_waits_an_interval_longer_than_a_browser_timer(
    chromium: list[str], url: str
) -> None:
    """An interval past setTimeout's limit (2^31 - 1 ms, about 24.8 days; the
    CLI takes up to 365 days) must not make the page ask again at once, in a
    loop."""
    board = Dashboard(url, "--interval", "3000000")
    harness = _CountingHarness(("127.0.0.1", 0), _CountingHandler)
    harness.board, harness.page, harness.asked = board.base, IDLE_PAGE.encode(), 0
    harness.done = threading.Event()
    threading.Thread(target=harness.serve_forever, daemon=True).start()
    page = f"http://127.0.0.1:{harness.server_address[1]}/harness.html"
    try:
        subprocess.run([*chromium, "--dump-dom", page], capture_output=True, text=True, timeout=120)
    finally:
        harness.shutdown()
        harness.server_close()
        assert board.stop() == 0
    assert harness.asked == 1
