"""The classes of each client library (redis-py or valkey-py) that the driver
uses on a client's connection pool: the library's client, the hub's PubSub,
the errors it catches, its pool class.

Part of the driver's single source: ``_sync/library.py`` is generated from
this file by ``scripts/unasync.py``. The PubSub mixins are the hub's
(``_Reconnects``) and the runtime's (``ShardedPubSub``: what valkey-py's
asyncio PubSub lacks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import redis.asyncio
import redis.asyncio.client
import redis.exceptions

from .. import _clients
from .._runtime_async import ShardedPubSub
from .hub import _Reconnects

if TYPE_CHECKING:
    from .hub import _HubPubSub
    from .state import Client


@dataclass(frozen=True, slots=True)
class _Library:
    """The classes of one client library (redis-py or valkey-py) the driver uses."""

    #: makes a client of the library: ``client(connection_pool=pool)``
    client: Callable[..., Client]
    #: the hub's PubSub: ``pubsub(connection_pool=pool)``
    pubsub: Callable[..., _HubPubSub]
    #: what ``EVALSHA`` raises for a script the server does not have
    no_script: type[Exception]
    #: what reading an error reply raises
    response_error: type[Exception]
    #: its connection pool class (a cluster hub's pool to one node)
    pool: Callable[..., Any]
    #: the base class of its errors
    error: type[Exception]


class _RedisHubPubSub(_Reconnects, redis.asyncio.client.PubSub):
    """redis-py's PubSub, telling its hub when the connection is made again."""


_REDIS = _Library(
    redis.asyncio.Redis,
    _RedisHubPubSub,
    redis.exceptions.NoScriptError,
    redis.exceptions.ResponseError,
    redis.asyncio.ConnectionPool,
    redis.exceptions.RedisError,
)


@cache
def _library_named(name: _clients.Library) -> _Library:
    if name == "redis":
        return _REDIS
    import valkey.asyncio
    import valkey.asyncio.client
    import valkey.exceptions

    class _ValkeyHubPubSub(_Reconnects, ShardedPubSub, valkey.asyncio.client.PubSub):
        """valkey-py's PubSub, with sharded pub/sub, telling its hub when the
        connection is made again."""

    return _Library(
        valkey.asyncio.Valkey,
        _ValkeyHubPubSub,
        valkey.exceptions.NoScriptError,
        valkey.exceptions.ResponseError,
        valkey.asyncio.ConnectionPool,
        valkey.exceptions.ValkeyError,
    )


@cache
def _library(cls: type) -> _Library:
    """The classes of the library that the client class ``cls`` belongs to."""
    return _library_named(_clients.library_of(cls))
