"""``scripts/unasync.py``: ``_api/_sync/`` is generated from ``_api/_async/`` file by
file, and ``--check`` fails on a stale, missing or extra file and on a dead rule.

Each test runs the script on a copy of the two folders (the script finds them
from its own place), so the tree itself is never touched."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.once

ROOT = Path(__file__).resolve().parent.parent
API = Path("src") / "tenure" / "_api"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the script and of ``_async/`` and ``_sync/`` (their ``.py`` files)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "unasync.py", tmp_path / "scripts")
    for folder in ("_async", "_sync"):
        (tmp_path / API / folder).mkdir(parents=True)
        for path in (ROOT / API / folder).glob("*.py"):
            shutil.copy(path, tmp_path / API / folder)
    return tmp_path


def unasync(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = tree / "scripts" / "unasync.py"
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=60
    )


def test_the_committed_folder_is_current_and_marked_generated(tree: Path) -> None:
    assert unasync(tree, "--check").returncode == 0
    sources = sorted(p.name for p in (tree / API / "_async").glob("*.py"))
    assert sources == sorted(p.name for p in (tree / API / "_sync").glob("*.py"))
    assert {"__init__.py", "_base.py", "lock.py"} <= set(sources)
    for name in sources:
        first = (tree / API / "_sync" / name).read_text().splitlines()[0]
        assert first.startswith("# GENERATED") and "do not edit" in first, name


@pytest.mark.parametrize("change", ["stale", "missing", "extra"])
def test_check_fails_until_the_folder_is_generated_again(tree: Path, change: str) -> None:
    sync = tree / API / "_sync"
    if change == "stale":
        (sync / "latch.py").write_text((sync / "latch.py").read_text() + "# edited\n")
    elif change == "missing":
        (sync / "fenced.py").unlink()
    else:
        (sync / "barrier.py").write_text("# no source\n")
    failed = unasync(tree, "--check")
    assert failed.returncode == 1 and f"is {change}" in failed.stderr, failed.stderr
    assert unasync(tree).returncode == 0
    assert unasync(tree, "--check").returncode == 0
    assert not (sync / "barrier.py").exists()


def test_a_rule_that_matches_nothing_in_the_whole_folder_is_an_error(tree: Path) -> None:
    for path in (tree / API / "_async").glob("*.py"):
        if path.name != "latch.py":  # no asyncio.Event, no __aenter__ ...
            path.unlink()
    failed = unasync(tree, "--check")
    assert failed.returncode != 0 and "dead rule" in failed.stderr, failed.stderr
