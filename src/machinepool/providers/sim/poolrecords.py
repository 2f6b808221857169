"""One pool's instance records, from the shared records informer.

``PoolRecords`` answers a pool's backend from ``machinepool.simworld.Instances`` (the informer
indexed by instance, pool and private address, each launch decoded once per version) and
keeps each pool's highest ordinal, which a scale-down asks for per instance. ``SimProvider``
builds one and hands each backend the records of its pool and the address check.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from machinepool.runtime import FuncHandler, Informer, Obj
from machinepool.simworld.instances import POOL_INDEX, Instances
from machinepool.simworld.records import InstanceRecord, instance_ids

__all__ = ["OnePool", "PoolRecords"]


class PoolRecords:
    """The decoded records of one pool at a time (see the module docstring)."""

    def __init__(self, informer: Informer) -> None:
        self.instances = Instances(informer)
        self._tops: dict[str, int] = {}
        """``namespace/pool`` -> its highest ordinal, once asked for (see ``top_index``)."""
        informer.add_handler(FuncHandler(add=self._raise_top, delete=self._forget))

    def __len__(self) -> int:
        """Launches decoded and kept."""
        return len(self.instances)

    def of_pool(self, namespace: str, pool: str) -> list[InstanceRecord]:
        """The records of ``pool`` in ``namespace``, as the informer has them now."""
        return self.instances.of_pool(namespace, pool)

    def get(self, namespace: str, instance_id: str) -> InstanceRecord | None:
        """The record of one instance, as the informer has it now."""
        return self.instances.get(namespace, instance_id)

    def top_index(self, namespace: str, pool: str) -> int:
        """The highest ordinal of ``pool``'s records (0 with none).

        Kept once asked for: raised as launches arrive, looked up again when a launch holding
        the highest leaves. Ordinals only grow and the highest stays as a tombstone, so a pool
        of 1,000 deleting its instances one by one does not read its 1,000 records for each.
        """
        key = f"{namespace}/{pool}"
        top = self._tops.get(key)
        if top is None:
            top = max((r.index for r in self.of_pool(namespace, pool)), default=0)
            self._tops[key] = top
        return top

    def of(self, namespace: str, pool: str) -> OnePool:
        """``pool``'s records, for its backend."""
        return OnePool(self, namespace, pool)

    def address_taken(self, namespace: str, address: str) -> bool:
        """Whether an instance in ``namespace`` holds private ``address``
        (``Instances.address_taken``)."""
        return self.instances.address_taken(namespace, address)

    def _raise_top(self, secret: Obj) -> None:
        for key in self.instances.pool_key(secret):
            if key in self._tops:
                with contextlib.suppress(ValueError):
                    top = max(r.index for r in self.instances.decode(secret).values())
                    self._tops[key] = max(self._tops[key], top)

    def _forget(self, secret: Obj) -> None:
        for key in self.instances.pool_key(secret):
            if key in self._tops:  # a launch left: look again when next asked
                del self._tops[key]


@dataclass(frozen=True)
class OnePool:
    """One pool's records (``PoolRecords.of``): what its ``SimBackend`` reads."""

    records: PoolRecords
    namespace: str
    pool: str

    def all(self) -> list[InstanceRecord]:
        return self.records.of_pool(self.namespace, self.pool)

    def get(self, instance_id: str) -> InstanceRecord | None:
        record = self.records.get(self.namespace, instance_id)
        return record if record is not None and record.pool == self.pool else None

    def top_index(self) -> int:
        return self.records.top_index(self.namespace, self.pool)

    def launch(self, name: str) -> Obj | None:
        secret = self.records.instances.informer.get(name, self.namespace)
        if secret is None or self.records.instances.pool_key(secret) != [self._key]:
            return None
        return secret

    def empty_launches(self) -> list[Obj]:
        return [
            secret
            for secret in self.records.instances.informer.by_index(POOL_INDEX, self._key)
            if not instance_ids(secret)
        ]

    @property
    def _key(self) -> str:
        return f"{self.namespace}/{self.pool}"
