"""The per-reconcile ``Scope`` of a pool-owned Machine, shared by ``controller``, ``status``
and ``drain``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from machinepool.api.views import ClusterView, MachineView
from machinepool.runtime import Obj, ObjectKey

if TYPE_CHECKING:
    from machinepool.controllers.machine.controller import MachineReconciler


@dataclass
class Scope:
    reconciler: MachineReconciler
    """Client, caches, recorder, dynamic watches."""
    machine: MachineView
    """The Machine (a private copy; phases mutate it through the view, and the patch on exit
    diffs ``machine.raw``). Set by controller."""
    cluster: ClusterView
    """Its Cluster, from the cache (read-only). Set by controller."""
    node: Obj | None = None
    """Its workload Node (not our kind: raw), found by nodeRef name or providerID. Set by
    observe."""
    infra_machine: Obj | None = None
    """Its infra machine. Set by observe."""
    infra_machine_not_found: bool = False
    """The infrastructureRef names nothing (any more). Set by observe."""

    @property
    def key(self) -> ObjectKey:
        return ObjectKey.of(self.machine.raw)

    @property
    def cluster_key(self) -> ObjectKey:
        return ObjectKey(self.key.namespace, str(self.machine.spec.cluster_name or ""))

    @property
    def text(self) -> str:
        return f"Machine {self.key}"
