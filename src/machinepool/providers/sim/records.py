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

from machinepool.runtime import FuncHandler, Informer, Obj, ObjectKey
from machinepool.sim.records import ADDRESS_ANNOTATION, POOL_ANNOTATION, InstanceRecord

__all__ = ["RECORD_ADDRESS_INDEX", "RECORD_POOL_INDEX", "PoolRecords"]

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
        for name, keys in ((RECORD_POOL_INDEX, _pool_key), (RECORD_ADDRESS_INDEX, _address_key)):
            with contextlib.suppress(ValueError):  # the index is there already
                informer.add_indexer(name, keys)
        informer.add_handler(FuncHandler(delete=self._forget))

    def __len__(self) -> int:
        """Records decoded and kept."""
        return len(self._decoded)

    def of_pool(self, namespace: str, pool: str) -> list[InstanceRecord]:
        """The records of ``pool`` in ``namespace``, as the informer has them now."""
        records = []
        for secret in self._informer.by_index(RECORD_POOL_INDEX, f"{namespace}/{pool}"):
            key = ObjectKey.of(secret)
            version = str(secret["metadata"].get("resourceVersion", ""))
            kept = self._decoded.get(key)
            if kept is None or kept[0] != version:
                kept = (version, InstanceRecord.from_secret(secret))
                self._decoded[key] = kept
            records.append(kept[1])
        return records

    def address_taken(self, namespace: str, address: str) -> bool:
        """Whether a record in ``namespace`` holds private ``address``, as the informer has
        them now. A terminated instance's record, while it is kept as the pool's tombstone,
        holds its address too: in 16 million addresses that costs nothing, and a hostname is
        not handed to a new instance while its old Node may still be on its way out."""
        return bool(self._informer.by_index(RECORD_ADDRESS_INDEX, f"{namespace}/{address}"))

    def _forget(self, secret: Obj) -> None:
        self._decoded.pop(ObjectKey.of(secret), None)
