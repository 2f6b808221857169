"""The per-reconcile ``Scope``: what the phases of one MachinePool reconcile share.

Built by ``controller.MachinePoolReconciler.reconcile``; each phase module reads and fills it.
Every field says which phase fills it. A phase reports a failure by raising: the others still
run (``runtime.run_phases``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from machinepool.api.contract import BootstrapConfig, InfraMachinePool
from machinepool.api.views import ClusterView, MachinePoolView, MachineView
from machinepool.controllers.common import WorkloadNodes
from machinepool.controllers.machinepool.facts import MachineFacts, PassFacts
from machinepool.runtime import ExpectedError, ObjectKey, TerminalError

if TYPE_CHECKING:
    from machinepool.controllers.machinepool.controller import MachinePoolReconciler


class ReferenceProblem(TerminalError, ExpectedError):
    """An object the MachinePool names is missing or not ours to take.

    Reported as a condition; terminal, so not retried with backoff, because a watch on the
    referenced kind (or on Clusters) brings the MachinePool back as soon as the object changes.
    """


@dataclass
class Scope:
    """State shared by the phases of one reconcile."""

    reconciler: MachinePoolReconciler
    """The reconciler: client, caches, event recorder and dynamic watches."""
    mp: MachinePoolView
    """The MachinePool being reconciled (a private copy; phases mutate it through the view,
    and the patch on exit diffs ``mp.raw``). Set by controller."""
    cluster: ClusterView
    """Its Cluster. Set by controller."""
    bootstrap_config: BootstrapConfig | None = None
    """The bootstrap config once fetched and adopted. Set by bootstrap."""
    bootstrap_config_not_found: bool = False
    """The configRef names nothing. Set by bootstrap (and delete)."""
    bootstrap_problem: str = ""
    """Why the bootstrap config cannot be used, for the condition. Set by bootstrap."""
    infra_pool: InfraMachinePool | None = None
    """The infrastructure pool once fetched and adopted. Set by infrastructure (and delete)."""
    infra_pool_not_found: bool = False
    """The infrastructureRef names nothing. Set by infrastructure (and delete)."""
    infra_problem: str = ""
    """Why the infra pool cannot be used, for the condition. Set by infrastructure."""
    nodes: WorkloadNodes | None = None
    """The workload cluster's Nodes; ``None`` when unreadable. Set by infrastructure."""
    provider_ids_observed: bool = False
    """providerIDList was copied from a ready infra pool this pass. Set by infrastructure."""
    machines: list[MachineView] = field(default_factory=list)
    """MachinePool Machines (pool and cluster labels, ours or uncontrolled). Set by machines."""
    deleting_message: str = ""
    """What deletion waits for, for the Deleting condition. Set by delete."""
    facts: PassFacts = field(default_factory=lambda: PassFacts({}, {}))
    """This pass's ``MachineFacts``, kept by the reconciler from the pass before. Set by
    controller."""

    def machine_facts(self) -> list[MachineFacts]:
        """The facts of ``machines``, in order."""
        return self.facts.all(self.machines)

    @property
    def key(self) -> ObjectKey:
        return ObjectKey.of(self.mp.raw)

    @property
    def namespace(self) -> str:
        return self.key.namespace

    @property
    def cluster_key(self) -> ObjectKey:
        return ObjectKey(self.namespace, self.mp.spec.cluster_name or "")

    @property
    def has_machine_pool_machines(self) -> bool:
        """The provider opted into MachinePool Machines (infrastructureMachineKind is set)."""
        return self.infra_pool is not None and bool(self.infra_pool.infrastructure_machine_kind)

    @property
    def text(self) -> str:
        return f"MachinePool {self.key}"


def set_v1beta1_counters(
    mp: MachinePoolView, *, ready: int, available: int, unavailable: int
) -> None:
    """The deprecated v1beta1 replica counters; a zero is left out, as upstream's ``omitempty``
    int32 fields are."""
    v1 = mp.status.v1beta1
    v1.ready_replicas = ready or None
    v1.available_replicas = available or None
    v1.unavailable_replicas = unavailable or None
