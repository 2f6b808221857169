"""The simulated cloud's instances one by one, from the informer of its launch records.

A launch record (``records.launch_secret``) holds several instances; the sim provider and the
node simulator think in instances. ``Instances`` indexes the records informer by instance id,
by pool and by private address, and keeps each Secret's decoded records until its
resourceVersion changes or it is deleted, so a look-up neither scans nor decodes other
launches. ``InstanceEvents`` turns the informer's events of launches into events of the
instances they hold, so a change of one instance wakes only its own reconcile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from machinepool.runtime import EventHandler, FuncHandler, Informer, Obj, ObjectKey
from machinepool.simworld.records import (
    POOL_ANNOTATION,
    InstanceRecord,
    instance_entries,
    instance_ids,
    records_in,
)

__all__ = ["ADDRESS_INDEX", "INSTANCE_INDEX", "POOL_INDEX", "InstanceEvents", "Instances"]

INSTANCE_INDEX = "sim.instance"
"""Index of the records informer: ``namespace/instance-id`` of each instance a record holds."""
POOL_INDEX = "sim.pool"
"""Index of the records informer: ``namespace/pool`` of each record."""
ADDRESS_INDEX = "sim.address"
"""Index of the records informer: ``namespace/private-ip`` of each instance that has one."""


class Instances:
    """The instances of a records informer (see the module docstring)."""

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self._decoded: dict[ObjectKey, tuple[str, dict[str, InstanceRecord]]] = {}
        indexers: dict[str, Callable[[Obj], list[str]]] = {
            INSTANCE_INDEX: self._instance_keys,
            POOL_INDEX: self.pool_key,
            ADDRESS_INDEX: self._address_keys,
        }
        for name, keys in indexers.items():
            with contextlib.suppress(ValueError):  # another user of the informer added it
                informer.add_indexer(name, keys)
        informer.add_handler(FuncHandler(delete=self._forget))

    def __len__(self) -> int:
        """Records decoded and kept."""
        return len(self._decoded)

    def decode(self, secret: Obj) -> dict[str, InstanceRecord]:
        """The instances ``secret`` holds, by id (decoded once per resourceVersion)."""
        key = ObjectKey.of(secret)
        version = str(secret["metadata"].get("resourceVersion", ""))
        kept = self._decoded.get(key)
        if kept is None or kept[0] != version:
            try:
                decoded = {r.id: r for r in records_in(secret)}
            except ValueError:  # not a record this version can read: it holds nothing
                decoded = {}
            kept = (version, decoded)
            self._decoded[key] = kept
        return kept[1]

    def launch_of(self, namespace: str, instance_id: str) -> Obj | None:
        """The Secret holding ``instance_id``, as the informer has it now."""
        found = self.informer.by_index(INSTANCE_INDEX, f"{namespace}/{instance_id}")
        return found[0] if found else None

    def get(self, namespace: str, instance_id: str) -> InstanceRecord | None:
        """The record of one instance, as the informer has it now."""
        secret = self.launch_of(namespace, instance_id)
        return self.decode(secret).get(instance_id) if secret is not None else None

    def of_pool(self, namespace: str, pool: str) -> list[InstanceRecord]:
        """The records of ``pool`` in ``namespace``, as the informer has them now."""
        return [
            record
            for secret in self.informer.by_index(POOL_INDEX, f"{namespace}/{pool}")
            for record in self.decode(secret).values()
        ]

    def address_taken(self, namespace: str, address: str) -> bool:
        """Whether an instance in ``namespace`` holds private ``address``, as the informer has
        them now. A terminated instance, while it is kept as its pool's tombstone, holds its
        address too: in 16 million addresses that costs nothing, and a hostname is not handed
        to a new instance while its old Node may still be on its way out."""
        return bool(self.informer.by_index(ADDRESS_INDEX, f"{namespace}/{address}"))

    def _instance_keys(self, secret: Obj) -> list[str]:
        namespace = secret["metadata"].get("namespace", "")
        return [f"{namespace}/{i}" for i in instance_ids(secret)]

    def pool_key(self, secret: Obj) -> list[str]:
        """``namespace/pool`` of the launch ``secret`` (its ``POOL_INDEX`` value)."""
        meta = secret["metadata"]
        pool = (meta.get("annotations") or {}).get(POOL_ANNOTATION)
        if not pool:  # records written before the annotation carry the pool in instance.json
            pool = next((r.pool for r in self.decode(secret).values()), "")
        return [f"{meta.get('namespace', '')}/{pool}"] if pool else []

    def _address_keys(self, secret: Obj) -> list[str]:
        namespace = secret["metadata"].get("namespace", "")
        return [f"{namespace}/{r.private_ip}" for r in self.decode(secret).values() if r.private_ip]

    def _forget(self, secret: Obj) -> None:
        self._decoded.pop(ObjectKey.of(secret), None)


class InstanceEvents:
    """An ``EventHandler`` of a records informer that passes each event on to ``inner`` as
    events of the instances concerned, each a stub object named after its instance
    (``stub``): all of a launch's when it is added or deleted, and on an update only those it
    added, changed or dropped. The node simulator's reconcile key is the instance. Stubs carry
    no resourceVersion, so none is taken for an echo of the inner handler's own write."""

    def __init__(self, inner: EventHandler) -> None:
        self._inner = inner

    def on_add(self, obj: Obj, initial: bool = False) -> None:
        for instance_id in instance_ids(obj):
            self._inner.on_add(stub(obj, instance_id), initial)

    def on_update(self, old: Obj, new: Obj) -> None:
        before, after = set(instance_ids(old)), set(instance_ids(new))
        for instance_id in sorted(after - before):
            self._inner.on_add(stub(new, instance_id))
        for instance_id in sorted(before & after):
            if instance_entries(old, instance_id) != instance_entries(new, instance_id):
                self._inner.on_update(stub(old, instance_id), stub(new, instance_id))
        for instance_id in sorted(before - after):
            self._inner.on_delete(stub(old, instance_id))

    def on_delete(self, obj: Obj) -> None:
        for instance_id in instance_ids(obj):
            self._inner.on_delete(stub(obj, instance_id))


def stub(secret: Obj, instance_id: str) -> Obj:
    """An event's object for one instance of ``secret``: named after the instance, in the
    launch's namespace, with the launch itself under ``launch`` (its annotations too, so a
    launch deleted for ``clusterctl move`` says so of each of its instances)."""
    meta = secret["metadata"]
    return {
        "metadata": {
            "name": instance_id,
            "namespace": meta.get("namespace", ""),
            "annotations": meta.get("annotations") or {},
        },
        "launch": secret,
    }
