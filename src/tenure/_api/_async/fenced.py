"""``AsyncFencedKey``: a value in Redis that only a current lock holder can overwrite."""

from __future__ import annotations

from ..._drivers import _async as _driver
from ..._errors import InvalidArgument
from ..._keys import fenced_keys
from ..._models import PerProcess
from ..._plans import fenced as fenced_plans


class AsyncFencedKey(PerProcess):
    """A value in Redis that only a current lock holder can overwrite.

    Every write carries the writer's fence (``lease.fence``). The key accepts a
    write only if its fence is at least as large as every fence it accepted
    before, so a holder whose lease ended while it was paused, and whose
    successor has written since, is refused instead of overwriting newer data
    (Kleppmann, "How to do distributed locking", 2016). Equal fences are
    accepted: one holder may write many times. The check and the write are one
    atomic script. For resources outside Redis, make the same check there, e.g.
    in SQL: ``UPDATE t SET v = :v, fence = :fence WHERE id = :id AND fence <= :fence``.

    Args:
        client: your ``redis.asyncio.Redis`` or ``valkey.asyncio.Valkey`` client.
        key: the resource's Redis key (a string value). The largest fence
            accepted is kept beside it, in the same hash slot
            (``{<key>}:fenced:seen``, or a name made from the whole key when it
            holds braces or ``%``).

    Raises:
        InvalidArgument: ``client`` is not a client this class accepts (a URL,
            ``None``, a client of the other API, a pipeline, a valkey-py cluster client);
            ``key`` is not a non-empty ``str``.

    Example::

        orders = AsyncFencedKey(client, "orders:42:state")
        async with AsyncLock(client, "orders:42") as lease:
            await orders.set("charged", fence=lease.fence)
    """

    _made_from = "the client and key"

    def __init__(self, client: _driver.Client, key: str) -> None:
        self._client = _driver.check_client(client, "AsyncFencedKey")
        self._key, self._seen_key = fenced_keys(key)

    @property
    def key(self) -> str:
        """The resource's Redis key."""
        return self._key

    async def set(self, value: str | bytes, fence: int) -> None:
        """Store ``value`` if ``fence`` is at least the largest fence accepted so far.

        Args:
            value: the new value (``str`` or ``bytes``).
            fence: the writer's fence, a non-negative ``int`` (``lease.fence``).

        Raises:
            StaleFenceError: a write with a larger fence was accepted before: the
                writer's lease has ended. Nothing was written.
            InvalidArgument: ``fence`` is not a non-negative ``int`` or ``value``
                is not ``str``/``bytes``; nothing was sent.
            WrongTypeError: the key holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        fence = fenced_plans.check_fence(fence)
        if not isinstance(value, str | bytes):
            raise InvalidArgument(f"value must be str or bytes, not {type(value).__name__}")
        plan = fenced_plans.fenced_set(self._key, self._seen_key, value, fence)
        await _driver.run(self._client, plan)

    async def seen(self) -> int:
        """The largest fence this key has accepted (0 before any fenced write).

        Raises:
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return await _driver.run(self._client, fenced_plans.seen(self._seen_key))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._key!r}>"
