# GENERATED from _async/_docs.py by scripts/unasync.py: do not edit.
"""The constructor arguments that several kinds of lock share, documented once.

A class docstring's ``Args:`` names where the shared paragraphs go with two
placeholders, each on a line of its own: ``{client}``, and ``{lease_args}`` for
every argument of :data:`LEASE_ARGS` that the class's ``__init__`` takes, in
the order it takes them. :func:`shared_args`, applied to the class, fills them
in from :data:`SHARED`, so ``help()`` and ``__doc__`` show the whole text.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T", bound=type)

#: The doc paragraph of each shared constructor argument (without its name).
SHARED: dict[str, str] = {
    "client": (
        "your ``redis.Redis`` or ``valkey.Valkey`` client (its pool, TLS"
        " and ACL settings are used as they are; tenure adds one pub/sub connection per"
        " client while something waits)."
    ),
    "ttl": "the lease length in seconds, from 0.01 to a year (default 30).",
    "auto_renew": (
        "whether the client's watchdog renews every lease while it is held (every third"
        " of the ttl). Default: ``True`` when no ``ttl`` is given, else ``False``. Without"
        " renewal a lease lasts its ttl unless extended, and its ``lost`` signal is set"
        " when its deadline passes."
    ),
    "on_lost": (
        "called with the lease when a lease is lost (see :meth:`tenure.LeaseBase.on_lost`)."
    ),
    "lock_delay": (
        "seconds, from 0 to a year (default 0): after a lease ends without a release"
        " (its holder died or stalled), the name stays unavailable for this much longer,"
        " so that the dead holder's in-flight writes drain before the next holder starts"
        " (Chubby's lock-delay). A release frees the name at once. Every user of a name"
        " should give the same value."
    ),
    "min_replicas": (
        "after each acquire, wait until this many replicas acknowledge the lease"
        " (``WAIT``, on the connection that made the grant, so on the server that"
        " made it); if fewer do within ``replica_timeout``, release it there and raise"
        " :class:`NotReplicatedError`."
        " Default 0: don't wait. This narrows, but does not close, the window in which"
        " a failover forgets a lock."
    ),
    "replica_timeout": (
        "seconds, > 0 and at most a year, that acquire waits for replicas (default 1)."
    ),
    "replica_fsync": (
        "wait until the replicas wrote the lease to their append-only file"
        " (``WAITAOF``; Redis >= 7.2 or Valkey) instead."
    ),
    "prefix": (
        'the key prefix (default ``"tenure:"``); one whose first ``{`` is followed at'
        " once by ``}`` is refused."
    ),
    "label": (
        "who holds, in words an operator reads in ``info()``, ``tenure inspect``, ``ls``,"
        " ``release --force`` and lease errors (like python-redis-lock's ``id``). Default:"
        " ``<host> pid <pid> (<program>)``. Control characters become spaces and it is cut"
        ' to 96 characters; ``""`` stores none. It travels inside each lease\'s token: it'
        " identifies, it never proves ownership, and it costs no extra command."
    ),
}

#: The lease arguments, in the order the constructors take them.
LEASE_ARGS = (
    "ttl",
    "auto_renew",
    "on_lost",
    "lock_delay",
    "min_replicas",
    "replica_timeout",
    "replica_fsync",
    "prefix",
    "label",
)

#: What ``{ttl}`` adds when the class takes an :class:`AdaptiveTTL`.
ADAPTIVE = (
    " Or an :class:`AdaptiveTTL`, to set each lease's length from this process's recent"
    " hold durations of the name."
)

_PLACEHOLDER = re.compile(r"^( *)\{(client|lease_args)\}$", re.M)


def _entry(name: str, text: str, indent: str) -> str:
    """``name: text`` wrapped, its first line at ``indent``, the others 4 deeper."""
    return textwrap.fill(
        f"{name}: {text}",
        width=88,
        initial_indent=indent,
        subsequent_indent=indent + "    ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def shared_args(*, adaptive: bool = True, **notes: str) -> Callable[[T], T]:
    """A class decorator that fills the shared-argument placeholders of the
    class's docstring (see the module's docstring).

    Args:
        adaptive: whether ``ttl`` may be an :class:`AdaptiveTTL` (its doc says so).
        notes: by argument name, a sentence that this class adds to the
            argument's shared paragraph.

    Raises:
        ValueError: (when the class is made) a note for an argument with no
            shared paragraph, or a docstring with no placeholder.
    """
    unknown = set(notes) - set(SHARED)
    if unknown:
        raise ValueError(f"no shared paragraph for {sorted(unknown)}")

    def paragraph(name: str) -> str:
        text = SHARED[name] + (ADAPTIVE if name == "ttl" and adaptive else "")
        return f"{text} {notes[name]}" if name in notes else text

    def fill(cls: T) -> T:
        params = inspect.signature(cls).parameters
        # (an argument the class documents itself keeps its own paragraph)
        own = set(re.findall(r"^ +(\w+): ", cls.__doc__ or "", re.M))
        lease = [name for name in params if name in LEASE_ARGS and name not in own]

        def block(match: re.Match[str]) -> str:
            indent, what = match.group(1), match.group(2)
            names = lease if what == "lease_args" else [what]
            return "\n".join(_entry(name, paragraph(name), indent) for name in names)

        doc, count = _PLACEHOLDER.subn(block, cls.__doc__ or "")
        if count == 0:
            raise ValueError(f"{cls.__name__}'s docstring has no shared-argument placeholder")
        cls.__doc__ = doc
        return cls

    return fill
