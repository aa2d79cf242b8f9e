"""The packages as a user gets them, and the redis-py range pyproject.toml allows.

``python -m build`` makes the sdist, then the wheel from the sdist (so a file
missing from the sdist breaks the wheel). Both must pass ``twine check``; the
wheel carries the Lua scripts, the type marker, the console script and the
licence, and installs with its ``[embedded]`` extra into a fresh virtual
environment (its dependencies from the machine's package index, as ``make
demo`` gets them; pip's cache makes that quick after ``make test`` installed
them once) where ``tenure demo --quick`` runs. The oldest redis-py allowed by
``dependencies`` runs the Lock tests.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.version import Version

import tenure
from tenure._scripts import ALL, build

pytestmark = pytest.mark.once

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path


def _clean_env() -> dict[str, str]:
    """This process's environment without PYTHONPATH, so that nothing from the
    checkout (``src``) is imported by a process that must use an installed tenure."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dist]:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    version = tenure.__version__  # (the one version source, see pyproject.toml)
    (sdist,) = out.glob(f"tenure-{version}.tar.gz")
    (wheel,) = out.glob(f"tenure-{version}-py3-none-any.whl")
    yield Dist(sdist, wheel)


@pytest.mark.timeout(300)
def test_build_makes_an_sdist_and_a_wheel_that_pass_twine_check(dist: Dist) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dist.sdist), str(dist.wheel)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout
    with tarfile.open(dist.sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for needed in ("LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "Makefile"):
        assert needed in names, f"{needed} missing from the sdist"


@pytest.mark.timeout(300)
def test_wheel_contains_scripts_marker_and_licence(dist: Dist) -> None:
    with zipfile.ZipFile(dist.wheel) as zf:
        names = set(zf.namelist())
        for spec in ALL:
            shipped = build(spec.name, lambda name: zf.read(f"tenure/_scripts/{name}"))
            assert shipped.source == spec.source
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "tenure = tenure._cli:main" in zf.read(entry_points).decode()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        licence = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
        assert "Copyright (c) 2026 tenure developers" in zf.read(licence).decode()
    assert "tenure/py.typed" in names and "tenure/_api/_sync/lock.py" in names
    for page in ("index.html", "dashboard.js", "dashboard.css"):  # tenure dashboard's
        assert f"tenure/_cli/static/{page}" in names
    assert "License-Expression: MIT" in metadata
    assert f"Version: {tenure.__version__}" in metadata
    for classifier in ("Operating System :: POSIX", "Programming Language :: Python :: 3.13"):
        assert f"Classifier: {classifier}" in metadata
    assert "Provides-Extra: valkey" in metadata
    assert f"Requires-Dist: {PROJECT['dependencies'][0]}" in metadata


@pytest.mark.timeout(300)
def test_wheel_installs_into_a_fresh_venv_where_the_demo_runs(dist: Dist, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    bin_ = venv / "bin"
    env = _clean_env()
    done = subprocess.run(
        [str(bin_ / "python"), "-m", "pip", "install", "-q", f"{dist.wheel}[embedded]"],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # The tenure that runs is the one installed from the built wheel.
    where = subprocess.run(
        [str(bin_ / "python"), "-c", "import tenure; print(tenure.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert Path(where).is_relative_to(venv), where
    demo = subprocess.run(
        [str(bin_ / "tenure"), "demo", "--quick"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=180,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "lost updates" in demo.stdout


#: Watchdog tests that lean on redis-py's reconnection (the Lock tests cover
#: scripts, pipelines and both pub/sub clients).
_WATCHDOG_TESTS = (
    "test_renewal_survives_killed_connections",
    "test_a_short_outage_does_not_lose_the_lease",
)


def _redis_floor() -> str:
    (spec,) = [d for d in PROJECT["dependencies"] if re.match(r"redis\b", d)]
    match = re.fullmatch(r"redis>=([0-9.]+)", spec)
    assert match, f"expected a plain lower bound on redis, got {spec!r}"
    return match.group(1)


@pytest.mark.timeout(300)
def test_lock_tests_pass_on_the_oldest_redis_py_allowed(tmp_path: Path) -> None:
    floor = _redis_floor()
    target = tmp_path / "redis-floor"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps"]
    done = subprocess.run(
        [*pip, "--target", str(target), f"redis=={floor}"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(target), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    seen = subprocess.run(
        [sys.executable, "-c", "import redis; print(redis.__version__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert Version(seen) == Version(floor), seen
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
        + ["tests/test_lock.py", "tests/test_internals.py"]
        + [f"tests/test_watchdog.py::{name}" for name in _WATCHDOG_TESTS],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=280,
    )
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]


def test_public_classes_say_they_are_tenures() -> None:
    """A traceback prints ``tenure.InvalidArgument``, ``help(tenure.Lock)`` says
    module ``tenure``; an error still pickles (found by its public name)."""
    import pickle
    import traceback

    import tenure

    classes = [getattr(tenure, name) for name in tenure.__all__]
    classes = [c for c in classes if isinstance(c, type)]
    assert len(classes) > 40
    assert [c.__name__ for c in classes if c.__module__ != "tenure"] == []
    error = tenure.InvalidArgument("ttl must be positive, got -1")
    text = "".join(traceback.format_exception_only(type(error), error))
    again = pickle.loads(pickle.dumps(error))
    assert text.startswith("tenure.InvalidArgument: ttl must be positive")
    assert type(again) is tenure.InvalidArgument and str(again) == str(error)
