"""Server capability detection: what the server is and whether tenure supports it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._errors import UnsupportedServer
from .._protocol import Command, Plan

MINIMUM = {"redis": (6, 2), "valkey": (7, 2)}


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What a server said of itself: ``name`` is ``"redis"`` or ``"valkey"``."""

    name: str
    version: tuple[int, ...]
    mode: str

    def __str__(self) -> str:
        return f"{self.name} {'.'.join(map(str, self.version))} ({self.mode})"


def _version(text: object) -> tuple[int, ...]:
    return tuple(int(p) for p in str(text).split(".") if p.isdigit())


def parse_info(info: dict[str, Any]) -> ServerInfo:
    """Read name, version and mode from ``INFO server`` (as parsed by redis-py).

    Raises:
        UnsupportedServer: older than Redis 6.2 or Valkey 7.2.
    """
    name = str(info.get("server_name") or "redis").lower()
    version = _version(info.get(f"{name}_version") or info.get("redis_version", "0"))
    # Valkey 8+ says server_mode; Redis (and older Valkey) redis_mode
    mode = info.get("server_mode") or info.get("redis_mode") or "standalone"
    server = ServerInfo(name, version, str(mode))
    minimum = MINIMUM.get(name, MINIMUM["redis"])
    if version[:2] < minimum:
        raise UnsupportedServer(
            f"{server} is not supported: tenure needs Redis >= 6.2 or Valkey >= 7.2"
        )
    return server


def probe() -> Plan[ServerInfo]:
    """Ask the server what it is. One round trip, done once per client."""
    info = yield Command(("INFO", "server"))
    return parse_info(info)
