"""What successful acquires return: the part of a lease shared by the sync and async APIs
(and by ``Lock`` and ``RLock``)."""

from __future__ import annotations

import time

from ._plans.lock import Grant


class LeaseBase:
    """The data of a lease and its client-side validity.

    Attributes:
        name: the lock's name (or exact key).
        owner: what Redis stores for the holder while the lease is held. For a
            ``Lock``, the lease's owner token, unguessable (two 128-bit random
            parts); for an ``RLock``, the holding thread's or task's owner id
            (128 random bits and a number), the field of the lock's hash.
        fence: the fencing token, an ``int`` that strictly increases across every
            successful acquire of this name (Kleppmann, "How to do distributed
            locking", 2016); an ``RLock`` re-entry shares its hold's fence. Pass
            it to the resource you protect and have it reject a write carrying a
            smaller fence than one it has seen.
        ttl: the lease length in seconds.
        expires_at: when the lease must be presumed expired, on the
            ``time.monotonic()`` clock: the moment the acquire was sent plus the
            ttl, less an allowance for clock drift (1 % of the ttl + 2 ms).
    """

    __slots__ = ("__weakref__", "_released", "expires_at", "fence", "name", "owner", "ttl")

    def __init__(self, name: str, grant: Grant) -> None:
        self.name = name
        self.owner = grant.token
        self.fence = grant.fence
        self.ttl = grant.ttl
        self.expires_at = grant.expires_at
        self._released = False

    @property
    def valid(self) -> bool:
        """``True`` while the lease is neither released nor past ``expires_at``."""
        return not self._released and time.monotonic() < self.expires_at

    @property
    def remaining(self) -> float:
        """Seconds until ``expires_at`` (0.0 once past it or released)."""
        return 0.0 if self._released else max(0.0, self.expires_at - time.monotonic())

    def __repr__(self) -> str:
        state = (
            "released"
            if self._released
            else (f"valid {self.remaining:.3f}s" if self.valid else "expired")
        )
        return f"<{type(self).__name__} {self.name!r} fence={self.fence} {state}>"
