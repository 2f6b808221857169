"""What the engine's last step wrote that its caches may not show yet.

A plan is only as good as its view. The engine deletes Machines and creates instances, then
plans again a moment later from informers; an informer that has not yet seen those writes
(its watch is behind, or it is re-listing after a 410 through an API server answering 429s)
shows the deleted Machine as still serving and the new instance as missing. Planned from that
view, the next step finds one instance too many and deletes a young, not-yet-Ready one as
surplus, then replaces it, and so on: a rollout that should never scale down churns.

So, as Kubernetes' ReplicaSet controller keeps "expectations" and Cluster API's MachineSet
waits for its cache to show the Machines it created or deleted, the engine remembers what its
last step did to each pool and does not plan that pool again until the caches show it all, or
``ttl`` seconds have passed (a cache that far behind is a fault of its own; the step is not
held forever). Satisfied means: a deleted Machine is gone from the cache, replaced by another
of its name, or shows its deletionTimestamp; a created instance is listed.

The memory lives in the engine's process: after a restart the informers start from a fresh
list, which shows every write made before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from machinepool.api.views import MachineView
from machinepool.runtime import ObjectKey

__all__ = ["EXPECTATION_TTL_SECONDS", "Expectations"]

EXPECTATION_TTL_SECONDS = 60.0
"""How long a pool waits for its caches to show its last step before planning regardless."""


@dataclass
class _Step:
    deleted: dict[str, str] = field(default_factory=dict)
    """Machine name -> uid of the Machine deleted."""
    created: set[str] = field(default_factory=set)
    """Instance ids created."""
    until: float = 0.0


class Expectations:
    """Per pool, the Machine deletions and instance creations its caches have yet to show.

    >>> clock = iter([0.0, 1.0, 2.0]).__next__
    >>> expect = Expectations(ttl=60, clock=clock)
    >>> pool = ObjectKey("ns", "pool")
    >>> expect.created(pool, ["i-1"])
    >>> expect.unmet(pool, machine=lambda name: None, instances={"i-0"})
    ['instance i-1 to be listed']
    >>> expect.unmet(pool, machine=lambda name: None, instances={"i-0", "i-1"})
    []
    """

    def __init__(
        self,
        ttl: float = EXPECTATION_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self._clock = clock
        self._steps: dict[ObjectKey, _Step] = {}

    def __len__(self) -> int:
        """Pools with writes their caches have not shown yet (as of their last check)."""
        return len(self._steps)

    def deleted(self, pool: ObjectKey, machine: str, uid: str) -> None:
        """The engine just deleted ``machine`` (of ``uid``) for ``pool``."""
        self._step(pool).deleted[machine] = uid

    def created(self, pool: ObjectKey, instance_ids: Iterable[str]) -> None:
        """The engine just created ``instance_ids`` for ``pool``."""
        self._step(pool).created.update(instance_ids)

    def unmet(
        self,
        pool: ObjectKey,
        *,
        machine: Callable[[str], MachineView | None],
        instances: set[str],
    ) -> list[str]:
        """What of ``pool``'s last step the caches do not show yet, said for a condition:
        ``machine(name)`` is the Machine cache's copy, ``instances`` the listed instance ids.
        Forgets what they show, and the whole step once its time is up."""
        step = self._steps.get(pool)
        if step is None:
            return []
        if self._clock() >= step.until:
            del self._steps[pool]
            return []
        for name, uid in list(step.deleted.items()):
            seen = machine(name)
            if seen is None or seen.metadata.uid != uid or seen.deleting:
                del step.deleted[name]
        step.created -= instances
        if not step.deleted and not step.created:
            del self._steps[pool]
            return []
        return [f"Machine {name} to be deleted" for name in sorted(step.deleted)] + [
            f"instance {iid} to be listed" for iid in sorted(step.created)
        ]

    def forget(self, pool: ObjectKey) -> None:
        """``pool`` is gone."""
        self._steps.pop(pool, None)

    def _step(self, pool: ObjectKey) -> _Step:
        step = self._steps.setdefault(pool, _Step())
        step.until = self._clock() + self.ttl
        return step
