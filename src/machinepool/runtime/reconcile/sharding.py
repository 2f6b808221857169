"""Sharding primitives: a consistent-hash ring over live shard Leases, and the old shard's side
of handing an object over.

Replicas of one manager divide objects among themselves through the apiserver alone (the
design follows the open-source kubernetes-controller-sharding project: shard Leases for
membership, a shard label that each replica's informers select on, and a drain label for a
hand-over that the old shard acknowledges):

- every replica holds a Lease of its own, labelled with the ring's name (``LiveLeases`` reads
  which of them are alive, judged on this process's clock as ``LeaderElector`` judges);
- a key maps to a replica by ``HashRing``: adding or removing one of N members moves about
  1/N of the keys;
- to move objects away from a live replica, the assigner labels them with the drain label
  (``requested``); the old replica's controller sees that label on its next turn for a key
  and, instead of reconciling, acknowledges (``Handover.release``: the label becomes
  ``acknowledged``); only when all are acknowledged may the assigner give them to their new
  shard. The acknowledgement runs in the controller's worker, so it is ordered after any
  reconcile of the same key that was already under way.

This module knows no Cluster API kinds: which objects belong together is the assigner's
business (``machinepool.controllers.sharding``).
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass

from machinepool.runtime.kube.client import Client, Obj, Resource
from machinepool.runtime.kube.errors import NotFound
from machinepool.runtime.kube.informer import Informer
from machinepool.runtime.kube.keys import ObjectKey
from machinepool.runtime.telemetry.logging import KVLogger, get_logger


def _point(value: str) -> int:
    return int.from_bytes(hashlib.sha256(value.encode()).digest()[:8], "big")


class HashRing:
    """Consistent hashing of string keys over ``members``, ``vnodes`` points per member.

    >>> HashRing(["a", "b", "c"]).owner("default/cluster-1") in {"a", "b", "c"}
    True
    """

    def __init__(self, members: Iterable[str], vnodes: int = 128) -> None:
        self.members = frozenset(members)
        ring = sorted((_point(f"{m}#{i}"), m) for m in self.members for i in range(vnodes))
        self._points = [p for p, _ in ring]
        self._owners = [m for _, m in ring]

    def owner(self, key: str) -> str | None:
        """The member that owns ``key`` (``None`` on an empty ring)."""
        if not self._points:
            return None
        i = bisect.bisect(self._points, _point(key)) % len(self._points)
        return self._owners[i]


DRAIN_REQUESTED = "requested"
"""The drain label's value set by the assigner: stop reconciling this object."""
DRAIN_ACKNOWLEDGED = "acknowledged"
"""The drain label's value set by the old shard: it no longer reconciles this object."""


@dataclass(frozen=True)
class ShardLabels:
    """The label keys of a ring: ``shard`` (value: the shard's name) and ``drain``."""

    shard: str
    drain: str


def labels_of(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


class Handover:
    """The old shard's side of a hand-over, called by a ``Controller`` before each reconcile
    of its primary kind (see the module docstring).

    ``acknowledging`` collects the primary kinds of this process's controllers: the assigner
    waits for an acknowledgement only from kinds that have a controller to give one.
    """

    def __init__(self, client: Client, labels: ShardLabels, logger: KVLogger | None = None) -> None:
        self.client = client
        self.labels = labels
        self.acknowledging: set[Resource] = set()
        self.log = logger or get_logger(__name__)

    def register(self, resource: Resource) -> None:
        self.acknowledging.add(resource)

    async def release(self, informer: Informer, key: ObjectKey) -> bool:
        """Whether the object is being drained away; if so, acknowledge it (once).

        The acknowledgement only changes the drain label (``DRAIN_REQUESTED`` becomes
        ``DRAIN_ACKNOWLEDGED``): the object stays in this shard's cache, so reconciles of its
        neighbours that are not drained yet still find it, and nothing of it is reconciled
        here any more. The assigner moves the shard label once every object is acknowledged.
        """
        obj = informer.get_key(key)
        drain = labels_of(obj).get(self.labels.drain) if obj is not None else None
        if drain is None:
            return False
        if drain != DRAIN_ACKNOWLEDGED:
            patch = {"metadata": {"labels": {self.labels.drain: DRAIN_ACKNOWLEDGED}}}
            with contextlib.suppress(NotFound):  # gone already: nothing left to hand over
                await self.client.patch(informer.resource, key.name, patch, key.namespace or None)
            self.log.info("handed over", kind=informer.resource.kind, key=str(key))
        return True


class LiveLeases:
    """The holders of a ring's Leases that are alive.

    A Lease is alive while its record (holder, renewTime, duration) changed less than its
    ``leaseDurationSeconds`` ago, as seen on this process's monotonic clock; a Lease seen for
    the first time counts as just renewed. So a replica that stopped renewing is dead one
    lease duration after its last renewal was observed, whatever the clocks of the machines.
    """

    def __init__(self, informer: Informer) -> None:
        self._informer = informer
        self._seen: dict[ObjectKey, tuple[tuple[str, str, str], float]] = {}

    def _observe(self, now: float) -> dict[ObjectKey, tuple[str, float, float]]:
        """key -> (holder, seconds since the record changed, duration)."""
        out: dict[ObjectKey, tuple[str, float, float]] = {}
        present = set()
        for lease in self._informer.list():
            key = ObjectKey.of(lease)
            present.add(key)
            spec = lease.get("spec") or {}
            record = (
                str(spec.get("holderIdentity") or ""),
                str(spec.get("renewTime") or ""),
                str(spec.get("leaseDurationSeconds") or ""),
            )
            seen = self._seen.get(key)
            if seen is None or seen[0] != record:
                seen = (record, now)
                self._seen[key] = seen
            duration = float(spec.get("leaseDurationSeconds") or 0)
            out[key] = (record[0], now - seen[1], duration)
        for gone in set(self._seen) - present:
            del self._seen[gone]
        return out

    def live(self, now: float | None = None) -> frozenset[str]:
        """The identities holding a Lease that has not expired."""
        now = time.monotonic() if now is None else now
        return frozenset(
            holder
            for holder, age, duration in self._observe(now).values()
            if holder and age < duration
        )

    def expired(self, older_than: float, now: float | None = None) -> list[ObjectKey]:
        """Leases silent (or released) for more than ``older_than`` seconds: dead replicas'."""
        now = time.monotonic() if now is None else now
        return [key for key, (_h, age, _d) in self._observe(now).items() if age > older_than]
