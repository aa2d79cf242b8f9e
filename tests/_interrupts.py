"""A connection class that raises ``KeyboardInterrupt`` at a chosen point of
its next call, once: how a test interrupts a tenure call for real (the server
is real; only the interrupt is placed by hand)."""

from __future__ import annotations

from typing import Any

import redis


class InterruptedCall(redis.Connection):
    """Raises KeyboardInterrupt once armed (a class attribute, shared by every
    connection of the class): ``"reply"`` instead of reading the next reply
    (the command was sent: the server runs it, and its reply is left unread
    on the socket), ``"send"`` instead of sending the next command (the
    server never sees it)."""

    armed = ""

    def send_packed_command(self, *args: Any, **kwargs: Any) -> None:
        if InterruptedCall.armed == "send":
            InterruptedCall.armed = ""
            raise KeyboardInterrupt
        super().send_packed_command(*args, **kwargs)  # type: ignore[no-untyped-call]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if InterruptedCall.armed == "reply":
            InterruptedCall.armed = ""
            raise KeyboardInterrupt
        return super().read_response(*args, **kwargs)
