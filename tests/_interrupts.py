"""How a test interrupts a tenure call for real (the server is real; only the
interrupt is placed by hand): a connection class that raises
``KeyboardInterrupt`` at a chosen point of its next call, once, and a
stand-in for a method that raises instead of it, once."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

import redis


class InterruptedCall(redis.Connection):
    """Raises ``error`` (KeyboardInterrupt unless set) once armed (class
    attributes, shared by every connection of the class): ``"reply"`` instead
    of reading the next reply (the command was sent: the server runs it, and
    its reply is left unread on the socket), ``"send"`` instead of sending the
    next command (the server never sees it)."""

    armed = ""
    error: type[BaseException] = KeyboardInterrupt

    def send_packed_command(self, *args: Any, **kwargs: Any) -> None:
        if InterruptedCall.armed == "send":
            InterruptedCall.armed = ""
            raise InterruptedCall.error
        super().send_packed_command(*args, **kwargs)  # type: ignore[no-untyped-call]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if InterruptedCall.armed == "reply":
            InterruptedCall.armed = ""
            raise InterruptedCall.error
        return super().read_response(*args, **kwargs)


def raise_once(
    method: Callable[..., Any],
    error: type[BaseException] = KeyboardInterrupt,
    on_call: int = 1,
    *,
    main_thread: bool = False,
) -> tuple[Callable[..., Any], list[int]]:
    """A stand-in for ``method`` (a plain or ``async def`` function, to be set
    on its class with ``monkeypatch.setattr``) that raises ``error`` instead
    of calling it on its ``on_call``-th call, once, and calls it otherwise;
    and a list that is non-empty once it raised. With ``main_thread``, only
    the main thread's calls count (where a signal handler runs: another
    thread's call, a wake hub reconnecting, say, is made as it is)."""
    calls: list[int] = []
    fired: list[int] = []

    def due() -> bool:
        if main_thread and threading.current_thread() is not threading.main_thread():
            return False
        calls.append(1)
        if len(calls) == on_call:
            fired.append(1)
            return True
        return False

    if inspect.iscoroutinefunction(method):

        async def stand_in_async(*args: Any, **kwargs: Any) -> Any:
            if due():
                raise error
            return await method(*args, **kwargs)

        return stand_in_async, fired

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        if due():
            raise error
        return method(*args, **kwargs)

    return stand_in, fired
