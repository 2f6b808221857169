"""One pool's instance records from the shared records informer, each decoded once.

The records informer holds every instance Secret of the cluster; a pool reconcile needs only
its own pool's. ``PoolRecords`` indexes the informer by pool and keeps each Secret's decoded
``InstanceRecord`` until the Secret's resourceVersion changes or it is deleted, so a reconcile
neither scans nor decodes other pools' records. ``SimProvider`` builds one and hands each
backend the records of its pool.
"""

from __future__ import annotations

import contextlib

from machinepool.runtime import FuncHandler, Informer, Obj, ObjectKey
from machinepool.sim.records import POOL_ANNOTATION, InstanceRecord

__all__ = ["RECORD_POOL_INDEX", "PoolRecords"]

RECORD_POOL_INDEX = "sim.pool"
"""Index of the records informer: ``namespace/pool`` of each record."""


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
        with contextlib.suppress(ValueError):  # the index is there already
            informer.add_indexer(RECORD_POOL_INDEX, _pool_key)
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

    def _forget(self, secret: Obj) -> None:
        self._decoded.pop(ObjectKey.of(secret), None)
