"""The per-reconcile ``Scope`` of a pool-owned Machine, shared by ``controller``, ``status``
and ``drain``; what every reconcile uses is the frozen ``Env`` (not the reconciler, which no
phase module imports)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from machinepool.api.views import ClusterView, MachineView
from machinepool.controllers.common import CoreEnv
from machinepool.runtime import (
    Informer,
    Obj,
    ObjectKey,
    Resource,
)


class MachineWatches(Protocol):
    """What a reconcile starts watching as it meets it, and the pool taints it reads (the
    reconciler's: ``controller.MachineReconciler``)."""

    async def infra_informer(self, resource: Resource) -> Informer: ...

    async def nodes(self, cluster: ObjectKey) -> Informer: ...

    def pool_taints(self, machine: MachineView) -> list[Obj] | None: ...


@dataclass(frozen=True)
class Env(CoreEnv):
    """What every pool-Machine reconcile uses, the same for all of them."""

    drain_rules: Informer
    """MachineDrainRules, read by each drain round."""
    watches: MachineWatches


@dataclass
class Scope:
    env: Env
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
