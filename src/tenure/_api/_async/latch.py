"""``AsyncCountDownLatch``: wait until a count, counted down by others, reaches zero."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..._drivers import _async as _driver
from ..._keys import DEFAULT_PREFIX, latch_keys
from ..._label import SEPARATOR
from ..._models import PerProcess
from ..._plans import latch as latch_plans
from ..._units import check_seconds
from ._base import check_label, label_of

if TYPE_CHECKING:  # (the snapshot types are imported on first use)
    from ..._info import CountDownLatchInfo


class AsyncCountDownLatch(PerProcess):
    """A distributed count-down latch: wait until a count, counted down by others,
    reaches zero.

    One party sets the count (:meth:`try_set_count`), others count it down as
    they finish their part (:meth:`count_down`), and any number of threads,
    tasks and processes :meth:`wait` until it is zero. A latch whose count is
    zero is open: every wait returns at once. The count lives in Redis and has
    no expiry (a lapse would open the latch), and it can be set again once it
    is zero, which makes the latch reusable.

    Waiting does not poll: a waiter reads the count (at zero it returns at
    once, subscribing to nothing); else it subscribes to the latch's channel,
    reads the count again, then waits; the count reaching zero publishes one
    message that wakes every waiter of every process. A waiter that looks after the
    latch opened and was set again still returns ``True`` if it was waiting
    when it opened.

    Args:
        client: your ``redis.asyncio.Redis`` or ``valkey.asyncio.Valkey`` client
            (tenure adds one pub/sub connection per client while something waits).
        name: the latch's name; its keys are ``<prefix>{<name>}:latch`` and siblings.
        prefix: the key prefix (default ``"tenure:"``); one whose first ``{`` is
            followed at once by ``}`` is refused.
        label: who sets the count, in words an operator reads in ``info()``,
            ``tenure inspect``, ``ls``, ``top`` and the dashboard while the count
            is not zero. Default: ``<host> pid <pid> (<program>)``. Control
            characters become spaces and it is cut to 96 characters; ``""``
            stores none. :meth:`try_set_count` stores it beside the count (one
            small key, deleted with the count at zero): counting down costs no
            extra command.

    Raises:
        InvalidArgument: ``client`` is not a client this class accepts (a URL,
            ``None``, a client of the other API, a pipeline, a valkey-py cluster client);
            an empty or non-``str`` name or prefix; a ``label`` that is not a ``str``.

    Example::

        done = AsyncCountDownLatch(client, "batch:7")
        await done.try_set_count(3)
        ...  # three workers each call: await done.count_down()
        if await done.wait(timeout=60):
            await publish_results()
    """

    def __init__(
        self,
        client: _driver.Client,
        name: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        label: str | None = None,
    ) -> None:
        self._client = _driver.check_client(client, "AsyncCountDownLatch")
        self._keys = latch_keys(name, prefix=prefix)
        self._label = check_label(label)
        self._seen: int | None = None  # the count at the last call, for repr

    @property
    def name(self) -> str:
        """The latch's name."""
        return self._keys.name

    async def try_set_count(self, count: int) -> bool:
        """Set the count, if it is zero (the latch is open), and record this
        latch's ``label`` as who set it (until the count reaches zero).

        Args:
            count: the new count, an ``int`` from 1 to 2**53 - 1.

        Returns:
            ``True`` if the count was set; ``False`` if it was not zero (nothing
            was changed).

        Raises:
            InvalidArgument: ``count`` is not an ``int`` from 1 to 2**53 - 1; nothing was sent.
            WrongTypeError: a key of the latch holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        count = latch_plans.check_count(count)
        label = label_of(self._label).removeprefix(SEPARATOR)
        done = await _driver.run(self._client, latch_plans.try_set_count(self._keys, count, label))
        if done:
            self._seen = count
        return done

    async def count_down(self) -> int:
        """Count down by one. Reaching zero opens the latch and wakes every waiter;
        at zero already, nothing happens.

        Returns:
            The count left (0: the latch is open).

        Raises:
            WrongTypeError: a key of the latch holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        self._seen = await _driver.run(self._client, latch_plans.count_down(self._keys))
        return self._seen

    async def count(self) -> int:
        """The count now, as Redis says (0: the latch is open).

        Raises:
            WrongTypeError: a key of the latch holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        return (await self.info()).count

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until the count is zero.

        Args:
            timeout: the longest wait in seconds, from 0 to a year; ``None`` waits without limit.

        Returns:
            ``True`` when the latch is open (at once if it is already); ``False``
            if ``timeout`` seconds passed first.

        Raises:
            InvalidArgument: ``timeout`` is negative or not a number; nothing was sent.
            WrongTypeError: a key of the latch holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        wait = None if timeout is None else check_seconds(timeout, "timeout", allow_zero=True)
        opened = await _driver.run(self._client, latch_plans.wait(self._keys, wait, time.monotonic))
        if opened:
            self._seen = 0
        return opened

    async def info(self) -> CountDownLatchInfo:
        """A snapshot of the latch in Redis: its count, opening number and
        who set the count (:attr:`CountDownLatchInfo.label`).

        Raises:
            WrongTypeError: a key of the latch holds a value of another type.
            redis.exceptions.ConnectionError: Redis could not be reached.
        """
        info = await _driver.run(self._client, latch_plans.inspect(self._keys))
        self._seen = info.count
        return info

    def __repr__(self) -> str:
        seen = "not read yet" if self._seen is None else f"count={self._seen} at the last call"
        return f"<{type(self).__name__} {self.name!r} {seen}>"
