"""Generate the synchronous code from the asyncio code: the facade
``src/tenure/_api/_sync/`` from ``_api/_async/``, and the driver
``src/tenure/_drivers/_sync/`` from ``_drivers/_async/``.

Usage: ``python scripts/unasync.py`` writes ``_sync/X.py`` for every
``_async/X.py`` of each pair (and deletes a ``_sync/*.py`` that has no
source); ``--check`` only verifies that the committed folders are what this
script generates, and fails on a stale, missing or extra file (CI runs it).
Every rule of a pair must match at least once somewhere in its folder, so a
rule that no longer applies is caught.

A pair may name files that are written by hand in both folders (what truly
differs per flavour beyond the runtime modules' names: the fan-out's calls,
a task or a worker thread each): those are never
generated, and ``--check`` fails when one of them is missing from either
folder.

The rewrite is a short list of regular expressions (the approach of httpcore's
``scripts/unasync.py``): the code is regular, and the same rules also rewrite
the docstrings and their examples, which a token-based tool leaves untouched.
Each generated file starts with a line saying it is generated.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The facade's rules.
RULES: list[tuple[str, str]] = [
    (r"from \.\.\._drivers import _async as _driver", "from ..._drivers import _sync as _driver"),
    (
        r"from \.\.\._drivers\._async import fanout as _fanout",
        "from ..._drivers._sync import fanout as _fanout",
    ),
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\bawait ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\b_Async([A-Z]\w*)", r"_\1"),
    (r"\bAsync([A-Z]\w*)", r"\1"),
    (r"\bredis\.asyncio\.Redis\b", "redis.Redis"),
    (r"\bvalkey\.asyncio\.Valkey\b", "valkey.Valkey"),
    (r"\basyncio\.Lock\b", "threading.Lock"),
    (r"\basyncio\.Event\b", "threading.Event"),
    (r"(?m)^import asyncio$", "import threading"),
    (r"(?m)^_COROUTINES = True$", "_COROUTINES = False"),
    # a decorated function's type: a coroutine function's result, a plain one's
    (r"\bCoroutine\[Any, Any, (R(?: \| None)?)\]", r"\1"),
    (r"from collections\.abc import Callable, Coroutine", "from collections.abc import Callable"),
    (
        r"The asyncio facade\. The synchronous facade is generated from this package\.",
        "The synchronous facade. GENERATED from the asyncio facade (``_async/``): do not edit.",
    ),
]

#: The driver's rules: its shared modules take the synchronous runtime's
#: names (``_drivers/_runtime_sync.py``) where they take the asyncio one's.
DRIVER_RULES: list[tuple[str, str]] = [
    (r"from \.\._runtime_async import", "from .._runtime_sync import"),
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\bawait ", ""),
    (r"\bcontextlib\.asynccontextmanager\b", "contextlib.contextmanager"),
    (r"\bcollections\.abc\.AsyncIterator\b", "collections.abc.Iterator"),
    (r"Awaitable\[(list\[tuple\[Status, Any\] \| None\])\]", r"\1"),
    (r"from collections\.abc import Awaitable, Callable", "from collections.abc import Callable"),
    (
        r"The asyncio driver: ``redis\.asyncio\.Redis`` / ``valkey\.asyncio\.Valkey``\n"
        r"clients, tasks, ``asyncio`` waits\. The synchronous driver \(``_sync/``\) is\n"
        r"generated from this package's shared modules\.",
        "The synchronous driver: ``redis.Redis`` / ``valkey.Valkey`` clients,\n"
        "threads, waits no interrupt leaves locked. GENERATED from the asyncio\n"
        "driver (``_async/``), except the modules written by hand in both (see\n"
        "``scripts/unasync.py``).",
    ),
    # (last: the rules above name some of these)
    (r"\b(redis|valkey)\.asyncio\b", r"\1"),
]


@dataclass(frozen=True)
class Pair:
    """One folder generated from another."""

    source: Path
    target: Path
    rules: list[tuple[str, str]]
    #: files written by hand in both folders, never generated
    hand_written: frozenset[str] = frozenset()


PAIRS = [
    Pair(
        ROOT / "src" / "tenure" / "_api" / "_async",
        ROOT / "src" / "tenure" / "_api" / "_sync",
        RULES,
    ),
    Pair(
        ROOT / "src" / "tenure" / "_drivers" / "_async",
        ROOT / "src" / "tenure" / "_drivers" / "_sync",
        DRIVER_RULES,
        # what differs per flavour beyond the runtime modules' names
        frozenset({"calls.py"}),
    ),
]


def marker(name: str) -> str:
    """The first line of the generated ``_sync/<name>``."""
    return f"# GENERATED from _async/{name} by scripts/unasync.py: do not edit.\n"


def generate(name: str, text: str, rules: list[tuple[str, str]], matched: dict[str, int]) -> str:
    """Apply every rule to ``text`` (the source ``_async/<name>``), counting in
    ``matched`` how often each rule matched; prepend the generated marker."""
    for pattern, replacement in rules:
        text, count = re.subn(pattern, replacement, text)
        matched[pattern] = matched.get(pattern, 0) + count
    return marker(name) + text


def generate_all(pair: Pair) -> dict[str, str]:
    """Every generated file of ``pair.target``, by name, as generated from
    ``pair.source`` (its hand-written files left out).

    Raises:
        SystemExit: the source folder holds no ``.py`` file to generate from,
            or a rule matched nothing in the whole folder (a dead rule).
    """
    sources = sorted(p for p in pair.source.glob("*.py") if p.name not in pair.hand_written)
    if not sources:
        raise SystemExit(f"unasync: no .py file in {pair.source}")
    matched: dict[str, int] = {}
    out = {
        path.name: generate(path.name, path.read_text(), pair.rules, matched) for path in sources
    }
    for pattern, _ in pair.rules:
        if matched[pattern] == 0:
            raise SystemExit(f"unasync: rule {pattern!r} matched nothing (dead rule)")
    return out


def check(pair: Pair, expected: dict[str, str]) -> list[str]:
    """What differs between ``pair.target`` and what it should hold: a stale,
    missing or extra generated file, a hand-written file missing from either
    folder."""
    target = pair.target
    present = {path.name for path in target.glob("*.py")} if target.is_dir() else set()
    problems = [
        f"{name} is extra (no _async/{name})"
        for name in sorted(present - set(expected) - pair.hand_written)
    ]
    for name, text in expected.items():
        if name not in present:
            problems.append(f"{name} is missing")
        elif (target / name).read_text() != text:
            problems.append(f"{name} is stale")
    for name in sorted(pair.hand_written):
        for folder in (pair.source, target):
            if not (folder / name).is_file():
                problems.append(f"{name} is missing from {folder.name}/ (written by hand in both)")
    return problems


def write(pair: Pair, expected: dict[str, str]) -> None:
    """Write the generated files of ``pair.target``; delete those with no source."""
    target = pair.target
    target.mkdir(exist_ok=True)
    present = {path.name for path in target.glob("*.py")}
    for name in sorted(present - set(expected) - pair.hand_written):
        (target / name).unlink()
        print(f"unasync: removed {target / name} (no source)", file=sys.stderr)
    for name, text in expected.items():
        path = target / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


def main(argv: list[str]) -> int:
    """Write every pair's ``_sync/``, or with ``--check`` compare them and
    return 1 when one differs (a stale, missing or extra file)."""
    failed = False
    for pair in PAIRS:
        expected = generate_all(pair)
        if "--check" not in argv:
            write(pair, expected)
            continue
        for problem in check(pair, expected):
            print(f"{pair.target}: {problem}: run python scripts/unasync.py", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
