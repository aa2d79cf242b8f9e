"""``scripts/unasync.py``: ``_api/_sync/`` is generated from ``_api/_async/`` file by
file, and ``_drivers/_sync/`` from ``_drivers/_async/`` but for the modules
written by hand in both; ``--check`` fails on a stale, missing or extra file,
on a hand-written module missing from either folder and on a dead rule.

Each test runs the script on a copy of the folders (the script finds them
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
DRIVERS = Path("src") / "tenure" / "_drivers"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the script and of the ``_async/`` and ``_sync/`` folders of the
    facade and of the driver (their ``.py`` files)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "unasync.py", tmp_path / "scripts")
    for parent in (API, DRIVERS):
        for folder in ("_async", "_sync"):
            (tmp_path / parent / folder).mkdir(parents=True)
            for path in (ROOT / parent / folder).glob("*.py"):
                shutil.copy(path, tmp_path / parent / folder)
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


#: The driver's modules written by hand in both folders (what differs per flavour).
HAND_WRITTEN = {"calls.py"}


def test_the_drivers_shared_modules_are_generated_and_the_others_left_alone(tree: Path) -> None:
    sync = tree / DRIVERS / "_sync"
    names = {p.name for p in sync.glob("*.py")}
    assert names == {p.name for p in (tree / DRIVERS / "_async").glob("*.py")}
    assert {"__init__.py", "drive.py", "send.py", "pins.py", "watchdog.py"} | HAND_WRITTEN <= names
    for name in names:
        first = (sync / name).read_text().splitlines()[0]
        assert first.startswith("# GENERATED") == (name not in HAND_WRITTEN), name
    calls = (sync / "calls.py").read_text()
    (sync / "hub.py").write_text("# edited\n")
    assert unasync(tree).returncode == 0
    assert (sync / "calls.py").read_text() == calls  # (never rewritten)
    assert (sync / "hub.py").read_text().startswith("# GENERATED")
    assert unasync(tree, "--check").returncode == 0


@pytest.mark.parametrize("folder", ["_async", "_sync"])
def test_check_fails_when_a_hand_written_driver_module_is_missing(tree: Path, folder: str) -> None:
    (tree / DRIVERS / folder / "calls.py").unlink()
    failed = unasync(tree, "--check")
    assert failed.returncode == 1 and "calls.py is missing from" in failed.stderr, failed.stderr


def test_check_fails_on_a_stale_generated_driver_module(tree: Path) -> None:
    send = tree / DRIVERS / "_sync" / "send.py"
    send.write_text(send.read_text() + "# edited\n")
    failed = unasync(tree, "--check")
    assert failed.returncode == 1 and "send.py is stale" in failed.stderr, failed.stderr
