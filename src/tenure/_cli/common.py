"""What the commands share: exit statuses, the server a command talks to, argument types."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Literal

import redis
import redis.cluster
import redis.exceptions

from .. import _ops
from .._errors import InvalidArgument
from .._keys import DEFAULT_PREFIX
from .._units import check_seconds, check_ttl

#: Exit status for a bad command line or an unusable server (argparse uses 2 too).
EXIT_USAGE = 2
#: Exit status after Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130
#: ``tenure run``: the lock was not taken (``--no-wait``, ``--wait`` ran out); the
#: command did not run. EX_TEMPFAIL of sysexits.h; ``--conflict-exit-code`` changes it.
EXIT_CONFLICT = 75
#: ``tenure run``: the lease was lost while the command ran (the command was stopped,
#: or it ended and the release found the lock gone).
EXIT_LOST = 76

#: Which server a command gets when no URL is given: ``"private"``, an embedded
#: server of its own, stopped when it ends; ``"shared"``, the user's shared
#: embedded server (started if none runs); ``"existing"``, the shared server if
#: it runs (else the command fails, saying how to start one or give a URL);
#: ``"none"``, no server at all (the handler gets a :class:`Server` with an
#: empty URL).
Embedded = Literal["private", "shared", "existing", "none"]


@dataclass(frozen=True)
class Server:
    """The server a command works on."""

    url: str
    embedded: bool


Handler = Callable[[argparse.Namespace, Server], int]

#: A command's check of its line before any server is opened for it: the exit
#: status after saying why it can't run, or ``None`` (a bad name raises
#: ``InvalidArgument``).
Check = Callable[[argparse.Namespace], int | None]


def _seconds(what: str, *, allow_zero: bool, lease: bool = False) -> Callable[[str], float]:
    """A parser of a duration option ``what``, in the API's range (``_units``:
    Limits; a ``lease`` is at least its shortest), so that a bad one is a usage
    error before any server is reached or started."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        try:
            if lease:
                return check_ttl(value, what)
            return check_seconds(value, what, allow_zero=allow_zero)
        except InvalidArgument as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _exit_status(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 0 <= value <= 255:
        raise argparse.ArgumentTypeError(f"an exit status is 0 to 255, not {value}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


class _CountedUrl(argparse.Action):
    """``--url``: the last one given, and every one given (``url_given``), so
    that several are an error (or, before ``run``, a Redlock) rather than all but
    the last silently dropped."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        seen: list[str] = list(getattr(namespace, "url_given", None) or [])
        namespace.url_given = [*seen, str(values)]
        setattr(namespace, self.dest, values)


def _client(server: Server) -> closing[redis.Redis | redis.cluster.RedisCluster]:
    """A client for the server; a cluster client when it is in cluster mode."""
    return closing(_ops.connect(server.url))


def _add_prefix(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prefix",
        default=DEFAULT_PREFIX,
        help=f"the key prefix the locks were made with (default {DEFAULT_PREFIX!r})",
    )


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _one_lock(args: argparse.Namespace, command: str) -> str | None:
    """An error message unless exactly one of NAME and --key was given."""
    if (args.name is None) == (args.key is None):
        return f"tenure {command}: give a lock NAME or --key KEY (exactly one)"
    return None
