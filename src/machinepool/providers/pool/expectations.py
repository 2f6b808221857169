"""What the engine wrote that its caches may not show yet.

A pool's view joins three informers (instance records, infra machines, Machines) that may
each be behind, by a slow watch or by a re-list after a 410 through an API server answering
429s. Two such views go wrong:

- the engine deleted a Machine or created an instance, and plans again from a cache that
  shows neither: one instance too many, and a young, not-yet-Ready one is deleted as surplus;
- the infra machine controller terminated an instance and its infra machine and Machine went,
  while the records cache still lists the instance as running: an instance with neither, which
  the engine would take for a new one, giving it a new infra machine (and the core a new
  Machine) and counting it towards replicas.

So, as Kubernetes' ReplicaSet controller keeps "expectations" and Cluster API's MachineSet
waits for its cache to show the Machines it created or deleted, the engine remembers per pool
what it did and reconciles that pool only once the caches show it all, or ``ttl`` seconds have
passed (a cache that far behind is a fault of its own; nothing is held forever). Shown means:
a deleted Machine is gone from the cache, replaced by another of its name, or has its
deletionTimestamp; a created instance is listed; a terminated one is not listed as live.

The memory lives in the engine's process: after a restart the informers start from a fresh
list, which shows every write made before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from machinepool.api.views import MachineView
from machinepool.runtime import ObjectKey

__all__ = ["EXPECTATION_TTL_SECONDS", "Expectations"]

EXPECTATION_TTL_SECONDS = 60.0
"""How long a pool waits for its caches to show what was written before going on regardless."""


@dataclass
class _Step:
    deleted: dict[str, str] = field(default_factory=dict)
    """Machine name -> uid of the Machine deleted."""
    created: set[str] = field(default_factory=set)
    """Instance ids created."""
    terminated: set[str] = field(default_factory=set)
    """Instance ids terminated."""
    started: set[str] = field(default_factory=set)
    """Warm instance ids started into the pool."""
    until: float = 0.0


class Expectations:
    """Per pool, the Machine deletions, instance creations and terminations its caches have
    yet to show.

    >>> clock = iter([0.0, 1.0, 2.0]).__next__
    >>> expect = Expectations(ttl=60, clock=clock)
    >>> pool = ObjectKey("ns", "pool")
    >>> expect.created(pool, ["i-1"])
    >>> expect.unmet(pool, machine=lambda name: None, instances={"i-0": True})
    ['instance i-1 to be listed']
    >>> expect.unmet(pool, machine=lambda name: None, instances={"i-0": True, "i-1": True})
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

    def terminated(self, pool: ObjectKey, instance_id: str) -> None:
        """The infra machine controller just terminated ``instance_id`` of ``pool``."""
        self._step(pool).terminated.add(instance_id)

    def started(self, pool: ObjectKey, instance_ids: Iterable[str]) -> None:
        """The engine just started the warm instances ``instance_ids`` of ``pool``."""
        self._step(pool).started.update(instance_ids)

    def unmet(
        self,
        pool: ObjectKey,
        *,
        machine: Callable[[str], MachineView | None],
        instances: Mapping[str, bool],
        warm: Collection[str] = frozenset(),
    ) -> list[str]:
        """What of ``pool``'s writes the caches do not show yet, in words:
        ``machine(name)`` is the Machine cache's copy, ``instances`` maps each listed
        instance id to whether it is live (not terminated), ``warm`` holds the ids of those
        still in the warm pool. Forgets what they show, and
        everything once its time is up."""
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
        step.created -= instances.keys()
        step.terminated = {i for i in step.terminated if instances.get(i, False)}
        step.started &= set(warm)
        if not (step.deleted or step.created or step.terminated or step.started):
            del self._steps[pool]
            return []
        return (
            [f"Machine {name} to be deleted" for name in sorted(step.deleted)]
            + [f"instance {iid} to be listed" for iid in sorted(step.created)]
            + [f"instance {iid} to be listed as terminated" for iid in sorted(step.terminated)]
            + [f"instance {iid} to be listed as started" for iid in sorted(step.started)]
        )

    def forget(self, pool: ObjectKey) -> None:
        """``pool`` is gone."""
        self._steps.pop(pool, None)

    def _step(self, pool: ObjectKey) -> _Step:
        step = self._steps.setdefault(pool, _Step())
        step.until = self._clock() + self.ttl
        return step
