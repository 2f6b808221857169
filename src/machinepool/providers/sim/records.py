"""One pool's instance records from the shared records informer, each decoded once.

The records informer holds every instance Secret of the cluster; a pool reconcile needs only
its own pool's. ``PoolRecords`` indexes the informer by pool and keeps each Secret's decoded
``InstanceRecord`` until the Secret's resourceVersion changes or it is deleted, so a reconcile
neither scans nor decodes other pools' records. A second index, of private addresses by
namespace, lets a backend check an address is free across every pool of the namespace in one
look-up (``address_taken``). ``SimProvider`` builds one and hands each backend the records of
its pool and that check.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from machinepool.runtime import FuncHandler, Informer, Obj, ObjectKey
from machinepool.sim.records import ADDRESS_ANNOTATION, POOL_ANNOTATION, InstanceRecord

__all__ = ["RECORD_ADDRESS_INDEX", "RECORD_POOL_INDEX", "OnePool", "PoolRecords"]

RECORD_POOL_INDEX = "sim.pool"
"""Index of the records informer: ``namespace/pool`` of each record."""
RECORD_ADDRESS_INDEX = "sim.address"
"""Index of the records informer: ``namespace/private-ip`` of each record that has one."""


def _address_key(secret: Obj) -> list[str]:
    meta = secret.get("metadata") or {}
    address = (meta.get("annotations") or {}).get(ADDRESS_ANNOTATION)
    return [f"{meta.get('namespace', '')}/{address}"] if address else []


def _pool_key(secret: Obj) -> list[str]:
    meta = secret.get("metadata") or {}
    pool = (meta.get("annotations") or {}).get(POOL_ANNOTATION)
    if not pool:  # records written before the annotation carry the pool in instance.json
        try:
            pool = InstanceRecord.from_secret(secret).pool
        except ValueError:
            return []
    return [f"{meta.get('namespace', '')}/{pool}"] if pool else []


class PoolRecords:
    """The decoded records of one pool at a time (see the module docstring)."""

    def __init__(self, informer: Informer) -> None:
        self._informer = informer
        self._decoded: dict[ObjectKey, tuple[str, InstanceRecord]] = {}
        self._tops: dict[str, int] = {}
        """``namespace/pool`` -> its highest ordinal, once asked for (see ``top_index``)."""
        for name, keys in ((RECORD_POOL_INDEX, _pool_key), (RECORD_ADDRESS_INDEX, _address_key)):
            with contextlib.suppress(ValueError):  # the index is there already
                informer.add_indexer(name, keys)
        informer.add_handler(FuncHandler(add=self._raise_top, delete=self._forget))

    def __len__(self) -> int:
        """Records decoded and kept."""
        return len(self._decoded)

    def of_pool(self, namespace: str, pool: str) -> list[InstanceRecord]:
        """The records of ``pool`` in ``namespace``, as the informer has them now."""
        return [
            self._decode(secret)
            for secret in self._informer.by_index(RECORD_POOL_INDEX, f"{namespace}/{pool}")
        ]

    def get(self, namespace: str, instance_id: str) -> InstanceRecord | None:
        """The record of one instance, as the informer has it now."""
        secret = self._informer.get(instance_id, namespace)
        return self._decode(secret) if secret is not None else None

    def top_index(self, namespace: str, pool: str) -> int:
        """The highest ordinal of ``pool``'s records (0 with none).

        Kept once asked for: raised as records arrive, looked up again when the highest
        leaves. Ordinals only grow and the highest stays as a tombstone, so a pool of 1,000
        deleting its instances one by one does not read its 1,000 records for each.
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

    def _decode(self, secret: Obj) -> InstanceRecord:
        key = ObjectKey.of(secret)
        version = str(secret["metadata"].get("resourceVersion", ""))
        kept = self._decoded.get(key)
        if kept is None or kept[0] != version:
            kept = (version, InstanceRecord.from_secret(secret))
            self._decoded[key] = kept
        return kept[1]

    def address_taken(self, namespace: str, address: str) -> bool:
        """Whether a record in ``namespace`` holds private ``address``, as the informer has
        them now. A terminated instance's record, while it is kept as the pool's tombstone,
        holds its address too: in 16 million addresses that costs nothing, and a hostname is
        not handed to a new instance while its old Node may still be on its way out."""
        return bool(self._informer.by_index(RECORD_ADDRESS_INDEX, f"{namespace}/{address}"))

    def _raise_top(self, secret: Obj) -> None:
        for key in _pool_key(secret):
            if key in self._tops:
                with contextlib.suppress(ValueError):
                    self._tops[key] = max(self._tops[key], self._decode(secret).index)

    def _forget(self, secret: Obj) -> None:
        decoded = self._decoded.pop(ObjectKey.of(secret), None)
        for key in _pool_key(secret):
            top = self._tops.get(key)
            if top is None:
                continue
            try:
                index = decoded[1].index if decoded else InstanceRecord.from_secret(secret).index
            except ValueError:
                index = top
            if index >= top:  # the highest left: look again when next asked
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
