"""Import rules that import-linter can't state (it forbids modules, not names),
checked on the source with ``ast``:

- the facade (``tenure._api``) uses no private name of the driver packages
  ``tenure._drivers._sync`` and ``tenure._drivers._async``, nor of their
  fan-out modules (``fanout``): neither imported (``from ._sync import _x``)
  nor read off the module (``_driver._x``, ``_fanout._x``).
- no module of tenure but ``_drivers/_internals.py`` names a private
  attribute of redis-py's or valkey-py's objects (a connection's socket,
  streams and packer, a retry's count, a PubSub's key normalisation).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "tenure"
DRIVERS = {
    "tenure._drivers._sync",
    "tenure._drivers._async",
    "tenure._drivers._sync.fanout",
    "tenure._drivers._async.fanout",
}

#: The library attributes only ``_internals`` may name.
LIBRARY_PRIVATES = {
    "_sock",
    "_reader",
    "_writer",
    "_buffer",
    "_waiter",
    "_command_packer",
    "_retries",
    "_normalize_keys",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(path: Path, node: ast.ImportFrom) -> str:
    """The absolute module an ``import from`` names (its relative level resolved)."""
    if not node.level:
        return node.module or ""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _checked() -> list[Path]:
    return sorted((PACKAGE / "_api").rglob("*.py"))


def private_driver_names(path: Path, source: str | None = None) -> Iterator[str]:
    """Each private name of a driver module that ``path`` (or ``source``, as
    if it were there) imports or reads."""
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    aliases: set[str] = set()  # the names the driver modules are bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = _resolve(path, node)
            for alias in node.names:
                if module in DRIVERS and alias.name.startswith("_"):
                    yield f"{path.name}:{node.lineno}: from {module} import {alias.name}"
                if f"{module}.{alias.name}" in DRIVERS:
                    aliases.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in DRIVERS and alias.asname:
                    aliases.add(alias.asname)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
        ):
            yield f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}"


def library_privates(path: Path) -> Iterator[str]:
    """Each place ``path`` names a library's private attribute (as an
    attribute of anything but ``self``/``cls``, or as a string)."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in LIBRARY_PRIVATES:
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                yield f"{path.name}:{node.lineno}: .{node.attr}"
        elif isinstance(node, ast.Constant) and node.value in LIBRARY_PRIVATES:
            yield f"{path.name}:{node.lineno}: {node.value!r}"


@pytest.mark.once
@pytest.mark.parametrize("path", _checked(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_facade_uses_no_private_driver_name(path: Path) -> None:
    assert list(private_driver_names(path)) == []


@pytest.mark.once
def test_the_check_finds_private_driver_names() -> None:
    """The check itself: each way of reaching a private name is found, a
    public one is not (a module beside the drivers, for its relative imports)."""
    source = (
        "from ._sync import run, _state\n"
        "from tenure._drivers._async import _perform as perform\n"
        "from . import _sync as driver\n"
        "from ._async import fanout as _fanout\n"
        "driver._library(object)\n"
        "driver.run\n"
        "_fanout._book\n"
        "_fanout.run_each\n"
    )
    found = list(private_driver_names(PACKAGE / "_drivers" / "_fanout_probe.py", source))
    assert [hit.split(": ", 1)[1] for hit in found] == [
        "from tenure._drivers._sync import _state",
        "from tenure._drivers._async import _perform",
        "_fanout._book",
        "driver._library",
    ]


@pytest.mark.once
def test_only_internals_names_a_librarys_private_attributes() -> None:
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "_drivers" / "_internals.py"
        for hit in library_privates(path)
    ]
    assert found == []
    # (and the check sees what _internals names)
    assert len(list(library_privates(PACKAGE / "_drivers" / "_internals.py"))) >= len(
        LIBRARY_PRIVATES
    )
