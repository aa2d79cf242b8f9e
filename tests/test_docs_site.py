"""The docs site: it builds without a warning, its code runs as written, and
every public name has a reference entry.

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
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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
    for key in ("waiting_writers", "queued_for", "findings", "hazards"):
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
