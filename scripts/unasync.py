"""Generate the synchronous facade ``src/tenure/_api/_sync/`` from ``_async/``.

Usage: ``python scripts/unasync.py`` writes ``_sync/X.py`` for every
``_async/X.py`` (and deletes a ``_sync/*.py`` that has no source); ``--check``
only verifies that the committed folder is what this script generates, and
fails on a stale, missing or extra file (CI runs it). Every rule must match at
least once somewhere in the folder, so a rule that no longer applies is caught.

The rewrite is a short list of regular expressions (the approach of httpcore's
``scripts/unasync.py``): the facade is thin and regular, and the same rules
also rewrite the docstrings and their examples, which a token-based tool leaves
untouched. Each generated file starts with a line saying it is generated.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "tenure" / "_api" / "_async"
TARGET = ROOT / "src" / "tenure" / "_api" / "_sync"

RULES: list[tuple[str, str]] = [
    (r"from \.\.\._drivers import _async as _driver", "from ..._drivers import _sync as _driver"),
    (
        r"from \.\.\._drivers import _fanout_async as _fanout",
        "from ..._drivers import _fanout_sync as _fanout",
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
    (
        r"The asyncio facade\. The synchronous facade is generated from this package\.",
        "The synchronous facade. GENERATED from the asyncio facade (``_async/``): do not edit.",
    ),
]


def marker(name: str) -> str:
    """The first line of the generated ``_sync/<name>``."""
    return f"# GENERATED from _async/{name} by scripts/unasync.py: do not edit.\n"


def generate(name: str, text: str, matched: dict[str, int]) -> str:
    """Apply every rule to ``text`` (the source ``_async/<name>``), counting in
    ``matched`` how often each rule matched; prepend the generated marker."""
    for pattern, replacement in RULES:
        text, count = re.subn(pattern, replacement, text)
        matched[pattern] = matched.get(pattern, 0) + count
    return marker(name) + text


def generate_all() -> dict[str, str]:
    """Every file of ``_sync/``, by name, as generated from ``_async/``.

    Raises:
        SystemExit: ``_async/`` holds no ``.py`` file, or a rule matched
            nothing in the whole folder (a dead rule).
    """
    sources = sorted(SOURCE.glob("*.py"))
    if not sources:
        raise SystemExit(f"unasync: no .py file in {SOURCE}")
    matched: dict[str, int] = {}
    out = {path.name: generate(path.name, path.read_text(), matched) for path in sources}
    for pattern, _ in RULES:
        if matched[pattern] == 0:
            raise SystemExit(f"unasync: rule {pattern!r} matched nothing (dead rule)")
    return out


def main(argv: list[str]) -> int:
    """Write ``_sync/``, or with ``--check`` compare it and return 1 when it
    differs (a stale, missing or extra file)."""
    expected = generate_all()
    present = {path.name for path in TARGET.glob("*.py")} if TARGET.is_dir() else set()
    if "--check" in argv:
        problems = [
            f"{name} is extra (no _async/{name})" for name in sorted(present - set(expected))
        ]
        for name, text in expected.items():
            if name not in present:
                problems.append(f"{name} is missing")
            elif (TARGET / name).read_text() != text:
                problems.append(f"{name} is stale")
        for problem in problems:
            print(f"{TARGET}: {problem}: run python scripts/unasync.py", file=sys.stderr)
        return 1 if problems else 0
    TARGET.mkdir(exist_ok=True)
    for name in sorted(present - set(expected)):
        (TARGET / name).unlink()
        print(f"unasync: removed {TARGET / name} (no source)", file=sys.stderr)
    for name, text in expected.items():
        path = TARGET / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
