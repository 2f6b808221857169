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

The memory lives in the engine's process, one ``Expectations`` in each pool's
``PoolMemory.expected`` (so the one ``KeyMemory.forget`` of the pool drops it with the rest):
after a restart the informers start from a fresh list, which shows every write made before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping

from machinepool.api.views import MachineView

__all__ = ["EXPECTATION_TTL_SECONDS", "Expectations"]

EXPECTATION_TTL_SECONDS = 60.0
"""How long a pool waits for its caches to show what was written before going on regardless."""


class Expectations:
    """One pool's Machine deletions, instance creations, terminations and starts its caches
    have yet to show; each write gives them all ``ttl`` seconds more.

    >>> clock = iter([0.0, 1.0, 2.0]).__next__
    >>> expect = Expectations(ttl=60, clock=clock)
    >>> expect.created(["i-1"])
    >>> expect.unmet(machine=lambda name: None, instances={"i-0": True})
    ['instance i-1 to be listed']
    >>> expect.unmet(machine=lambda name: None, instances={"i-0": True, "i-1": True})
    []
    """

    def __init__(
        self,
        ttl: float = EXPECTATION_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self._clock = clock
        self._deleted: dict[str, str] = {}
        """Machine name -> uid of the Machine deleted."""
        self._created: set[str] = set()
        """Instance ids created."""
        self._terminated: set[str] = set()
        """Instance ids terminated."""
        self._started: set[str] = set()
        """Warm instance ids started into the pool."""
        self._until = 0.0

    @property
    def pending(self) -> bool:
        """Writes the caches had not shown yet at the last ``unmet``."""
        return bool(self._deleted or self._created or self._terminated or self._started)

    def deleted(self, machine: str, uid: str) -> None:
        """The engine just deleted ``machine`` (of ``uid``)."""
        self._deleted[machine] = uid
        self._extend()

    def created(self, instance_ids: Iterable[str]) -> None:
        """The engine just created ``instance_ids``."""
        self._created.update(instance_ids)
        self._extend()

    def terminated(self, instance_id: str) -> None:
        """The infra machine controller just terminated ``instance_id``."""
        self._terminated.add(instance_id)
        self._extend()

    def started(self, instance_ids: Iterable[str]) -> None:
        """The engine just started the warm instances ``instance_ids``."""
        self._started.update(instance_ids)
        self._extend()

    def unmet(
        self,
        *,
        machine: Callable[[str], MachineView | None],
        instances: Mapping[str, bool],
        warm: Collection[str] = frozenset(),
    ) -> list[str]:
        """What of the pool's writes the caches do not show yet, in words:
        ``machine(name)`` is the Machine cache's copy, ``instances`` maps each listed
        instance id to whether it is live (not terminated), ``warm`` holds the ids of those
        still in the warm pool. Forgets what they show, and everything once its time is up."""
        if not self.pending:
            return []
        if self._clock() >= self._until:
            self._clear()
            return []
        for name, uid in list(self._deleted.items()):
            seen = machine(name)
            if seen is None or seen.metadata.uid != uid or seen.deleting:
                del self._deleted[name]
        self._created -= instances.keys()
        self._terminated = {i for i in self._terminated if instances.get(i, False)}
        self._started &= set(warm)
        return (
            [f"Machine {name} to be deleted" for name in sorted(self._deleted)]
            + [f"instance {iid} to be listed" for iid in sorted(self._created)]
            + [f"instance {iid} to be listed as terminated" for iid in sorted(self._terminated)]
            + [f"instance {iid} to be listed as started" for iid in sorted(self._started)]
        )

    def _extend(self) -> None:
        self._until = self._clock() + self.ttl

    def _clear(self) -> None:
        self._deleted.clear()
        self._created.clear()
        self._terminated.clear()
        self._started.clear()
