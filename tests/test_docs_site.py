"""The docs site: it builds without a warning, its code runs as written, and
every public name has a reference entry.

The site is also checked as a reader meets it: no link of any built page is
broken (a missing file, or an anchor no element has), and in a real browser,
Debian's Chromium run headless (``make browser`` installs it), the home page
renders, the ``Lock`` reference shows its methods, and the search finds a name.

The code blocks run here are every ``python`` block of the README, the quick
start, the migration page and the guide pages (``docs/guide/*.md``), and the
quick start's ``sh`` blocks: the blocks of one page in order, the Python ones
in one namespace, against a server started with ``tenure server start`` (in a
private ``XDG_RUNTIME_DIR``) and named by ``REDIS_URL``, as the quick start
tells the reader to do, with ``tenure`` on the ``PATH``. A block that can't run
here (it needs servers of the reader's own: five masters, a Sentinel group)
follows a line ``<!-- docs: not run (why) -->``.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

import tenure

pytestmark = pytest.mark.once

ROOT = Path(__file__).resolve().parent.parent
#: The pages whose code runs as written.
PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "quickstart.md",
    ROOT / "docs" / "migration.md",
    *sorted((ROOT / "docs" / "guide").glob("*.md")),
]
NOT_RUN = "<!-- docs: not run"
#: How many blocks of those pages may be marked not to run.
MOST_NOT_RUN = 5
FENCE = re.compile(r"^```(\w*)")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the block's first code line, 1-based
    language: str
    code: str
    run: bool


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page`` that start at the left margin, in order."""
    found = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        start = i + 1
        end = start
        while not lines[end].startswith("```"):
            end += 1
        before = next((line for line in reversed(lines[:i]) if line.strip()), "")
        code = "\n".join(lines[start:end]) + "\n"
        run = not before.startswith(NOT_RUN)
        found.append(Block(page, start + 1, match[1], code, run))
        i = end + 1
    return found


def runnable(block: Block) -> bool:
    quickstart = block.page.name == "quickstart.md"
    return block.run and (block.language == "python" or (quickstart and block.language == "sh"))


def test_blocks_are_read_with_their_marks(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n```python\nx = 1\n```\n\n<!-- docs: not run (no) -->\n```sh\nls\n\nls\n```\n"
    )
    assert blocks(page) == [
        Block(page, 4, "python", "x = 1\n", True),
        Block(page, 9, "sh", "ls\n\nls\n", False),
    ]


def test_few_blocks_are_left_unrun() -> None:
    unrun = [f"{b.page.name}:{b.line}" for page in PAGES for b in blocks(page) if not b.run]
    assert len(unrun) <= MOST_NOT_RUN, unrun
    assert sum(runnable(b) for page in PAGES for b in blocks(page)) >= 12


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built with ``mkdocs build --strict`` into a temporary directory."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    return out


def test_the_site_builds_with_every_page(site: Path) -> None:
    for page in ("index", "quickstart", "safety-in-plain-words", "migration", "changelog"):
        assert (site / f"{page}.html").is_file(), page
    guide = {p.stem for p in (ROOT / "docs" / "guide").glob("*.md")}
    assert guide and {p.stem for p in (site / "guide").glob("*.html")} == guide
    home = (site / "index.html").read_text()
    assert "fencing token per acquire" in home  # the README's table, included
    assert "--8&lt;--" not in home and "--8<--" not in home


def test_every_public_name_has_a_reference_entry(site: Path) -> None:
    reference = "".join(p.read_text() for p in (site / "reference").glob("*.html"))
    missing = [name for name in tenure.__all__ if f'id="tenure.{name}"' not in reference]
    assert not missing
    # shown by their public names, with the shared arguments filled in
    assert not re.search(r'id="tenure\._', reference)
    assert "{lease_args}" not in reference and "{client}" not in reference
    primitives = (site / "reference" / "primitives.html").read_text()
    assert "your <code>redis.Redis</code> or <code>valkey.Valkey</code> client" in primitives


def test_the_cli_reference_has_every_command(site: Path) -> None:
    from tenure._cli import build_parser

    page = (site / "reference" / "cli.html").read_text()
    commands = next(a for a in build_parser()._actions if a.dest == "command")
    assert commands.choices
    for name in commands.choices:
        assert f"tenure {name}" in page, name
    assert "tenure server start" in page


def test_the_json_reference_has_each_commands_shape(site: Path) -> None:
    page = (site / "reference" / "json.html").read_text()
    for key in ("waiting_writers", "queued_for", "findings", "hazards", "held_for_at_least"):
        assert key in page, key


@pytest.fixture(scope="module")
def shared_server() -> Iterator[dict[str, str]]:
    """The environment of the quick start: ``tenure server start``'s URL in
    ``REDIS_URL``, and ``tenure`` on the ``PATH``; the server is stopped after."""
    runtime = tempfile.mkdtemp(prefix="tds", dir="/tmp")  # a unix socket's path is short
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "XDG_RUNTIME_DIR": runtime,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("REDIS_URL", None)
    tenure_cli = [sys.executable, "-m", "tenure"]
    started = subprocess.run(
        [*tenure_cli, "server", "start"], env=env, capture_output=True, text=True, timeout=60
    )
    assert started.returncode == 0, started.stderr
    env["REDIS_URL"] = started.stdout.strip()
    try:
        yield env
    finally:
        subprocess.run([*tenure_cli, "server", "stop"], env=env, capture_output=True, timeout=60)
        shutil.rmtree(runtime, ignore_errors=True)


#: The pages with code that runs (some guide pages have none: console output, tables).
CODE_PAGES = [page for page in PAGES if any(map(runnable, blocks(page)))]


def test_the_pages_with_code_are_found() -> None:
    names = {str(page.relative_to(ROOT)) for page in CODE_PAGES}
    assert {"README.md", "docs/quickstart.md", "docs/guide/locks.md"} <= names


@pytest.mark.parametrize("page", CODE_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_code_of_the_page_runs(
    page: Path, shared_server: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("REDIS_URL", shared_server["REDIS_URL"])
    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in filter(runnable, blocks(page)):
        where = f"{page.relative_to(ROOT)}:{block.line}"
        if block.language == "sh":
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block.code],
                env=shared_server,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, f"{where}\n{done.stdout}\n{done.stderr}"
        else:
            code = compile("\n" * (block.line - 1) + block.code, str(page), "exec")
            with contextlib.redirect_stdout(io.StringIO()):
                exec(code, namespace)


class _Page(HTMLParser):
    """The ids of one HTML page and the links (``href``, ``src``) it has."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and (name == "id" or (tag == "a" and name == "name")):
                self.ids.add(value)
            elif value and name in ("href", "src"):
                self.links.append(value)


def broken_links(site: Path) -> list[str]:
    """``page: link`` for every link of the built ``site`` to a file that does not
    exist, or to an anchor that its page lacks. Links to other sites are not
    followed; ``/x`` is ``x`` at the site's root (as a server serves it)."""
    site = site.resolve()
    pages = {path: _Page(path.read_text()) for path in site.rglob("*.html")}
    broken = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                continue
            base = site if parts.path.startswith("/") else path.parent
            target = (base / unquote(parts.path).lstrip("/")).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            anchor = unquote(parts.fragment)
            if not target.is_file() or (
                anchor and target in pages and anchor not in pages[target].ids
            ):
                broken.append(f"{path.relative_to(site)}: {link}")
    return broken


def test_broken_links_are_found(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "index.html").write_text(
        '<a href="sub/a.html#here">ok</a> <a href="sub/a.html#gone">anchor</a>'
        ' <img src="/missing.png"> <a href="https://example.com/x">out</a> <a href="#top">self</a>'
    )
    (tmp_path / "sub" / "a.html").write_text('<h1 id="here">A</h1><a href="../index.html">up</a>')
    assert broken_links(tmp_path) == [
        "index.html: sub/a.html#gone",
        "index.html: /missing.png",
        "index.html: #top",
    ]


def test_no_link_of_the_site_is_broken(site: Path) -> None:
    assert not broken_links(site)


#: A page of the test's own beside the site: it opens a page of the site in a
#: frame and watches it until the text of ``selector`` there matches ``ready``
#: (the search runs in a worker, after the page's load); then it tells the
#: server, which only then sends an image the page has been loading all along,
#: so the page's load (when the browser dumps the DOM) waits for the frame's
#: answer; the image's ``onload`` copies what the frame shows into the page.
HARNESS = """<!doctype html><html><body>
<iframe id="page" src="{src}" style="width:1200px;height:900px"></iframe>
<script>
  function watch() {{
    var frame = document.getElementById('page').contentDocument;
    var shown = frame && frame.querySelector('{selector}');
    if (shown && new RegExp('{ready}').test(shown.innerText)) fetch('/__ready__');
    else setTimeout(watch, 50);
  }}
  watch();
  function copy() {{
    var frame = document.getElementById('page').contentDocument;
    var out = document.createElement('pre');
    out.id = 'seen';
    out.textContent = frame.querySelector('{selector}').innerText + '\\n' +
      Array.from(frame.querySelectorAll('{selector} a')).map(a => a.href).join('\\n');
    document.body.appendChild(out);
  }}
</script>
<img src="/__wait__" onload="copy()">
</body></html>"""
#: The longest the server holds the image back (the check then sees what the
#: frame shows by then, and fails).
WAIT_MOST = 30.0
GIF = bytes.fromhex(
    "47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b"
)


class _SiteServer(http.server.ThreadingHTTPServer):
    """The site's server; ``ready`` is set when the harness saw its answer."""

    ready: threading.Event


class _SiteHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the site, the harness (``/__check__.html?src=...&selector=...&ready=...``),
    its signal (``/__ready__``) and the image it waits for (``/__wait__``)."""

    server: _SiteServer

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path == "/__check__.html":
            self.server.ready.clear()  # the checks run one at a time
            query = {k: unquote(v) for k, v in (p.split("=", 1) for p in parts.query.split("&"))}
            self._send(HARNESS.format(**query).encode(), "text/html")
        elif parts.path == "/__ready__":
            self.server.ready.set()
            self._send(b"", "text/plain")
        elif parts.path == "/__wait__":
            self.server.ready.wait(WAIT_MOST)
            self._send(GIF, "image/gif")
        else:
            super().do_GET()

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The site's URL, served over HTTP (the search's worker does not run from files)."""
    handler = functools.partial(_SiteHandler, directory=str(site))
    server = _SiteServer(("127.0.0.1", 0), handler)
    server.ready = threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The headless browser's command line, with a profile of its own."""
    binary = shutil.which("chromium")
    if binary is None:
        pytest.skip("Debian's chromium is not installed (make browser)")
    profile = tmp_path_factory.mktemp("chromium")
    return [
        binary,
        "--headless",
        "--no-sandbox",  # the tests may run as root
        "--disable-gpu",
        f"--user-data-dir={profile}",
        "--window-size=1280,900",
    ]


def _dom(chromium: list[str], url: str) -> str:
    done = subprocess.run(
        [*chromium, "--dump-dom", url], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_home_page_renders_in_a_browser(
    chromium: list[str], served: str, tmp_path: Path
) -> None:
    dom = _dom(chromium, f"{served}/index.html")
    assert "fencing token per acquire" in dom
    assert 'data-md-component="search"' in dom
    assert "Quick start" in dom and "Safety in plain words" in dom  # the navigation
    shot = tmp_path / "home.png"
    done = subprocess.run(
        [*chromium, f"--screenshot={shot}", f"{served}/index.html"],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000  # a page drawn, not a blank one


def test_the_lock_reference_renders_in_a_browser(chromium: list[str], served: str) -> None:
    dom = _dom(chromium, f"{served}/reference/primitives.html")
    for anchor in ("tenure.Lock", "tenure.Lock.acquire", "tenure.Lock.release"):
        assert f'id="{anchor}"' in dom, anchor
    assert "AcquireTimeout" in dom


def test_the_search_finds_a_name_in_a_browser(chromium: list[str], served: str) -> None:
    query = "src=/index.html%3Fq%3DNoQuorumError&selector=.md-search-result&ready=matching"
    dom = _dom(chromium, f"{served}/__check__.html?{query}")
    seen = dom.split('<pre id="seen">', 1)[1].split("</pre>", 1)[0]
    assert re.match(r"\d+ matching documents?\n", seen), seen  # not "No matching documents"
    assert f"{served}/reference/" in seen, seen  # the API reference is searched
