"""Owner identity: unguessable ids for this process, its threads and its tasks.

An owner id is ``<process id>.<n>``: the process id is 128 random bits from
the system's cryptographic source (``os.urandom``, what :mod:`secrets` draws
from), drawn again in a forked child (so the child owns none of the
parent's leases), and ``n`` numbers the threads and tasks of the process (a
thread's ident can be reused after it ends; ``n`` never is). A lease token is
its owner id, a colon and another 128 random bits, then the holder's label
(``;<encoded label>``, see :mod:`tenure._label`), if it has one.
"""

from __future__ import annotations

import itertools
import os

_process = [os.urandom(16).hex()]
_numbers = itertools.count(1)
_generation = [0]


def _after_fork() -> None:
    _process[0] = os.urandom(16).hex()
    _generation[0] += 1


os.register_at_fork(after_in_child=_after_fork)


def process_id() -> str:
    """This process's random id (128 bits, hex); new in a forked child."""
    return _process[0]


def generation() -> int:
    """A number that changes in a forked child (drivers drop inherited state on a change)."""
    return _generation[0]


def process_mark() -> tuple[int, int]:
    """What tells this process from a forked child: the generation and the
    process id (the pid also catches a fork that bypassed Python's fork hooks)."""
    return _generation[0], os.getpid()


def owner_of(number: int) -> str:
    """The owner id for the ``number``-th owner of the current process."""
    return f"{_process[0]}.{number}"


def next_number() -> int:
    """Number a new thread or task."""
    return next(_numbers)


def new_token(owner: str, suffix: str = "") -> str:
    """A lease token: ``owner``, a colon, 128 random bits (hex), and ``suffix``
    (the holder's label as :func:`tenure._label.label_suffix` gives it, or "")."""
    return f"{owner}:{os.urandom(16).hex()}{suffix}"


def new_op() -> str:
    """An id for one call that changes state (64 random bits, hex), so that a
    retry of it is recognised."""
    return os.urandom(8).hex()
