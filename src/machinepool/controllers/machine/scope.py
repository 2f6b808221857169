"""The per-reconcile ``Scope`` of a pool-owned Machine, shared by ``controller``, ``status``
and ``drain``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from machinepool.api.meta import dig
from machinepool.runtime import Obj, ObjectKey

if TYPE_CHECKING:
    from machinepool.controllers.machine.controller import MachineReconciler


@dataclass
class Scope:
    reconciler: MachineReconciler
    """Client, caches, recorder, dynamic watches."""
    machine: Obj
    """The Machine (a private copy; phases mutate it). Set by controller."""
    cluster: Obj
    """Its Cluster, from the cache (read-only). Set by controller."""
    node: Obj | None = None
    """Its workload Node, found by nodeRef name or providerID. Set by observe."""
    infra_machine: Obj | None = None
    """Its infra machine. Set by observe."""
    infra_machine_not_found: bool = False
    """The infrastructureRef names nothing (any more). Set by observe."""

    @property
    def key(self) -> ObjectKey:
        return ObjectKey.of(self.machine)

    @property
    def cluster_key(self) -> ObjectKey:
        return ObjectKey(
            self.key.namespace, str(dig(self.machine, "spec", "clusterName", default=""))
        )

    @property
    def text(self) -> str:
        return f"Machine {self.key}"
