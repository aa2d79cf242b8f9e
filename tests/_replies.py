"""A client whose script replies can be lost on purpose: the server ran the
call, the client sees a ConnectionError (and redis-py retries it, or not)."""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


class LosesReply(redis.Connection):
    """Drops the reply of the next EVALSHA of the script whose SHA-1 is in
    ``armed`` (once; ``armed`` is then ""): the server ran it, the client sees a
    ConnectionError."""

    armed = ""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        # (what every send comes to: tenure's quick path packs its own); noted
        # after the send, which may first connect (and send the handshake)
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]
        data = command if isinstance(command, bytes | str) else b"".join(command)
        self._last = data.encode() if isinstance(data, str) else data

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        reply = super().read_response(*args, **kwargs)
        last = getattr(self, "_last", b"")
        if LosesReply.armed and b"\r\nEVALSHA\r\n$40\r\n" + LosesReply.armed.encode() in last:
            LosesReply.armed = ""
            self.disconnect()  # type: ignore[no-untyped-call]
            raise redis.exceptions.ConnectionError("reply lost (test)")
        return reply


def losing_client(url: str, *, retries: int) -> redis.Redis:
    """A client on ``url`` whose replies :class:`LosesReply` may drop, retrying a
    failed call ``retries`` times (0: the caller sees the lost reply)."""
    client = redis.Redis.from_url(url, retry=Retry(NoBackoff(), retries))
    client.connection_pool.connection_class = LosesReply
    return client
