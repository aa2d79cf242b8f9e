"""Every test that the documentation names as the proof of a claim exists.

The pages under ``docs/``, the README and CONTRIBUTING.md name tests as
``tests/test_x.py::test_name`` and, after such a reference, as ``::test_name``:
a test of one of the files named before it in the same section (the text
under one heading). A renamed or deleted test would leave a claim with no
proof behind it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.once

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md")])
#: ``tests/x.py::name``, ``::name`` (a test function; a parametrized id is cut
#: off) or a test file named alone, ``tests/x.py``.
REFERENCE = re.compile(r"(tests/[\w/]+\.py)?(?:::(test_\w+))?")


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    }


def references(text: str) -> list[tuple[tuple[str, ...], str]]:
    """(the files it may be in, test name) of every reference in ``text``: its
    own file, or for a bare ``::name`` the files named before it in its section,
    latest first."""
    found: list[tuple[tuple[str, ...], str]] = []
    for section in re.split(r"^#+ ", text, flags=re.M):
        named: list[str] = []
        for match in REFERENCE.finditer(section):
            if not match.group(2):
                if match.group(1):
                    named.insert(0, match.group(1))
            elif match.group(1):
                named.insert(0, match.group(1))
                found.append(((match.group(1),), match.group(2)))
            elif named:
                found.append((tuple(dict.fromkeys(named)), match.group(2)))
            else:
                raise AssertionError(f"::{match.group(2)} comes before any tests/ file is named")
    return found


def test_references_are_read_in_their_section() -> None:
    text = (
        "# A\nsee `tests/test_a.py::test_one`, `tests/test_c.py::test_z`, then `::test_two`\n"
        "# B\n`tests/test_b.py::test_x`, in `tests/test_d.py`: `::test_w`"
    )
    assert references(text) == [
        (("tests/test_a.py",), "test_one"),
        (("tests/test_c.py",), "test_z"),
        (("tests/test_c.py", "tests/test_a.py"), "test_two"),
        (("tests/test_b.py",), "test_x"),
        (("tests/test_d.py", "tests/test_b.py"), "test_w"),
    ]
    with pytest.raises(AssertionError, match="test_y"):
        references("# A\nsee `::test_y`")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_test_named_in_the_docs_exists(doc: Path) -> None:
    missing = []
    for files, name in references(doc.read_text()):
        if not any((ROOT / f).exists() and name in _tests_in(ROOT / f) for f in files):
            missing.append(f"{files[0]}::{name}")
    assert not missing, f"{doc.name} names tests that do not exist: {missing}"
