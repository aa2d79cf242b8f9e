"""Generate the synchronous facade ``src/tenure/_api/_sync.py`` from ``_async.py``.

Usage: ``python scripts/unasync.py`` writes the file; ``--check`` only verifies
that the committed file is what this script generates (CI runs it). Every rule
must match at least once, so a rule that no longer applies is caught.

The rewrite is a short list of regular expressions (the approach of httpcore's
``scripts/unasync.py``): the facade is thin and regular, and the same rules
also rewrite the docstrings and their examples, which a token-based tool leaves
untouched.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "tenure" / "_api" / "_async.py"
TARGET = ROOT / "src" / "tenure" / "_api" / "_sync.py"

RULES: list[tuple[str, str]] = [
    (r"from \.\._drivers import _async as _driver", "from .._drivers import _sync as _driver"),
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
        r"The asyncio facade\. The synchronous facade is generated from this file\.",
        "The synchronous facade. GENERATED from ``_async.py``: do not edit.",
    ),
]


def generate(text: str) -> str:
    """Apply every rule to ``text``; raise ``SystemExit`` if a rule matched nothing."""
    for pattern, replacement in RULES:
        text, count = re.subn(pattern, replacement, text)
        if count == 0:
            raise SystemExit(f"unasync: rule {pattern!r} matched nothing (dead rule)")
    return text


def main(argv: list[str]) -> int:
    """Write ``_sync.py``, or with ``--check`` compare it and return 1 when stale."""
    expected = generate(SOURCE.read_text())
    if "--check" in argv:
        if TARGET.read_text() != expected:
            print(f"{TARGET} is stale: run python scripts/unasync.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(expected)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
