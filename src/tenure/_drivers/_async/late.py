"""What a lower module of the driver calls in a higher one, bound once the
package is imported (``__init__`` calls :func:`bind`): the hub dispatching a
hand-off runs a plan (``drive``) and, on a Redis Cluster, re-homes a channel
on the hub of its slot's new node (``state``); a cluster client's renewals
find its state (``state``) and send one script on its own (``send``), and
the watchdog sends its batch in one pipeline (``send``). The modules below
then import this one alone, so the package's imports stay acyclic
(import-linter's ``acyclic`` contract)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: ``drive._drive``, ``state._hub``, ``send._one``, ``send._pipeline``, ``state._state``
#: (set by :func:`bind`; calling one before is a bug of the package's import).
drive: Callable[..., Any]
hub: Callable[..., Any]
one: Callable[..., Any]
pipeline: Callable[..., Any]
state: Callable[..., Any]


def bind(**functions: Callable[..., Any]) -> None:
    """Bind the functions named above (every one, by name)."""
    missing = {"drive", "hub", "one", "pipeline", "state"} - functions.keys()
    if missing:
        raise TypeError(f"late.bind: {sorted(missing)} not given")
    globals().update(functions)
