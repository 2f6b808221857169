"""Failure domains a cloud recently refused for lack of capacity.

A cloud runs out of an instance type in one zone now and then (EC2's
InsufficientInstanceCapacity) and says so only when asked to create. An Auto Scaling group
then launches in its other zones; the pool engine does the same: a create that fails with
``CapacityError`` marks its failure domain short for that pool, and plans place new instances
elsewhere until ``retry_after`` seconds have passed, when the domain is tried again (shortages
end without notice, and spreading wants the domain back).

The memory lives in the engine's process, not in the pool's status: losing it on a restart
costs one more refused create, which is how it was learnt in the first place.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from machinepool.runtime import ObjectKey

__all__ = ["SHORTAGE_RETRY_SECONDS", "ZoneShortages"]

SHORTAGE_RETRY_SECONDS = 120.0
"""How long a failure domain that refused a create is left alone before it is tried again."""


class ZoneShortages:
    """Per pool, the failure domains whose last create failed for lack of capacity.

    >>> shortages = ZoneShortages()
    >>> shortages.record(ObjectKey("ns", "pool"), "zone-a")
    >>> shortages.current(ObjectKey("ns", "pool"))
    frozenset({'zone-a'})
    """

    def __init__(
        self,
        retry_after: float = SHORTAGE_RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retry_after = retry_after
        self._clock = clock
        self._until: dict[ObjectKey, dict[str, float]] = {}

    def __len__(self) -> int:
        """Pools with a shortage remembered (expired ones go on the pool's next read)."""
        return len(self._until)

    def record(self, pool: ObjectKey, failure_domain: str) -> None:
        """``failure_domain`` refused a create of ``pool`` just now."""
        self._until.setdefault(pool, {})[failure_domain] = self._clock() + self.retry_after

    def current(self, pool: ObjectKey) -> frozenset[str]:
        """The domains of ``pool`` still short; forgets the ones whose time is up."""
        until = self._until.get(pool)
        if until is None:
            return frozenset()
        now = self._clock()
        short = {fd: t for fd, t in until.items() if t > now}
        if short:
            self._until[pool] = short
        else:
            del self._until[pool]
        return frozenset(short)

    def forget(self, pool: ObjectKey) -> None:
        """``pool`` is gone."""
        self._until.pop(pool, None)
