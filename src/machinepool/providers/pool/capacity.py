"""Failure domains a cloud recently refused for lack of capacity.

A cloud runs out of an instance type in one zone now and then (EC2's
InsufficientInstanceCapacity) and says so only when asked to create. An Auto Scaling group
then launches in its other zones; the pool engine does the same: a create that fails with
``CapacityError`` marks its failure domain short for that pool, and plans place new instances
elsewhere until ``retry_after`` seconds have passed, when the domain is tried again (shortages
end without notice, and spreading wants the domain back).

The memory lives in the engine's process, one ``ZoneShortages`` in each pool's
``PoolMemory.shortages`` (dropped with the rest of the pool's memory by its one
``KeyMemory.forget``), not in the pool's status: losing it on a restart costs one more refused
create, which is how it was learnt in the first place.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["SHORTAGE_RETRY_SECONDS", "ZoneShortages"]

SHORTAGE_RETRY_SECONDS = 120.0
"""How long a failure domain that refused a create is left alone before it is tried again."""


class ZoneShortages:
    """One pool's failure domains whose last create failed for lack of capacity.

    >>> shortages = ZoneShortages()
    >>> shortages.record("zone-a")
    >>> shortages.current()
    frozenset({'zone-a'})
    """

    def __init__(
        self,
        retry_after: float = SHORTAGE_RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retry_after = retry_after
        self._clock = clock
        self._until: dict[str, float] = {}
        """Failure domain -> when it is tried again."""

    def record(self, failure_domain: str) -> None:
        """``failure_domain`` refused a create just now."""
        self._until[failure_domain] = self._clock() + self.retry_after

    def current(self) -> frozenset[str]:
        """The domains still short; forgets the ones whose time is up."""
        if not self._until:
            return frozenset()
        now = self._clock()
        self._until = {fd: t for fd, t in self._until.items() if t > now}
        return frozenset(self._until)
