"""The built wheel carries the Lua scripts, the type marker and the console script."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tenure._scripts import ALL, expand

pytestmark = pytest.mark.once

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_contains_scripts_and_marker(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("tenure-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for spec in ALL:
            shipped = zf.read(f"tenure/_scripts/{spec.name}.lua")
            assert expand(shipped, lambda name: zf.read(f"tenure/_scripts/{name}")) == spec.source
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "tenure = tenure._cli:main" in zf.read(entry_points).decode()
    assert "tenure/py.typed" in names and "tenure/_api/_sync.py" in names
