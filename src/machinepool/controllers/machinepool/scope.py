"""The per-reconcile ``Scope``: what the phases of one MachinePool reconcile share.

Built by ``controller.PoolSteps.scope`` (run by ``runtime.drive``); each phase module reads
and fills it. Every field says which phase fills it. A phase reports a failure by raising: the
others still run (``runtime.run_phases``). What every reconcile uses (client, caches, the
dynamic watches, gates) is the frozen ``Env``; what is kept about one pool from one pass to
the next is its ``PoolMemory``. Neither points back at the reconciler, so no phase module
imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from machinepool.api.contract import BootstrapConfig, InfraMachine, InfraMachinePool
from machinepool.api.views import ClusterView, MachinePoolView, MachineView
from machinepool.controllers.common import CoreEnv, WorkloadNodes
from machinepool.controllers.machinepool.facts import FactsCache, MachineFacts, PassFacts
from machinepool.runtime import (
    ExpectedError,
    Informer,
    Obj,
    ObjectKey,
    Resource,
    TerminalError,
)

if TYPE_CHECKING:
    from machinepool.controllers.machinepool.rollout import RolloutStep


class ReferenceProblem(TerminalError, ExpectedError):
    """An object the MachinePool names is missing or not ours to take.

    Reported as a condition; terminal, so not retried with backoff, because a watch on the
    referenced kind (or on Clusters) brings the MachinePool back as soon as the object changes.
    """


class PoolWatches(Protocol):
    """The watches a reconcile starts as it meets a kind or a workload cluster (the
    reconciler's: ``controller.MachinePoolReconciler``)."""

    async def watch_referenced_kind(self, resource: Resource) -> Informer: ...

    async def watch_infra_machine_kind(self, resource: Resource) -> Informer: ...

    async def workload_nodes(self, cluster: ObjectKey) -> WorkloadNodes | None: ...


@dataclass(frozen=True)
class Env(CoreEnv):
    """What every MachinePool reconcile uses, the same for all of them."""

    machines: Informer
    """Machines, indexed by the pool-member labels (``watches.BY_MEMBER_LABELS``)."""
    watches: PoolWatches
    machines_up_to_date: bool
    """Write UpToDate on pool Machines here, as upstream's MachinePool controller does: only
    when no Machine controller of ours writes it (beside upstream)."""
    pool_node_taints: bool
    """Gate ``MachinePoolNodeTaints``: keep the template's taints and managed labels on the
    Nodes this controller patches (``poolnode``)."""


@dataclass
class PoolMemory:
    """What is kept about one MachinePool from one pass to the next (``runtime.KeyMemory``:
    forgotten, all of it, when the pool is gone)."""

    in_sync: dict[str, tuple[object, ...]] = field(default_factory=dict)
    """Its Machines found in sync with their infra machines, by name, with what that was
    decided from (``machines.reconcile_machines``)."""
    applied: dict[str, tuple[float, Obj]] = field(default_factory=dict)
    """The Machines it created that the Machine cache may not show yet, by name, with when
    and as the server answered (``machines.reconcile_machines``)."""
    facts: FactsCache = field(default_factory=FactsCache)
    """Its Machines' facts (``facts``)."""
    rolled: dict[str, Obj | None] = field(default_factory=dict)
    """The Machines a core rollout marked or deleted, by name, as the server answered
    (``None``: deleted outright), until the Machine cache shows as much (``rollout``)."""
    written_at: float | None = None
    """When it was last written: its progress reports are spaced out
    (``runtime.reconcile.spacing``)."""


@dataclass
class Scope:
    """State shared by the phases of one reconcile."""

    env: Env
    """Client, caches, event recorder, dynamic watches, gates."""
    memory: PoolMemory
    """What was kept about this pool from the passes before."""
    mp: MachinePoolView
    """The MachinePool being reconciled (a private copy; phases mutate it through the view,
    and the patch on exit diffs ``mp.raw``). Set by controller."""
    cluster: ClusterView
    """Its Cluster. Set by controller (its absence stops the reconcile before the scope)."""
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
    infra_machines: dict[str, InfraMachine] = field(default_factory=dict)
    """The infra machines the provider reports for the pool, by name. Set by machines."""
    rollout: RolloutStep | None = None
    """The step of a rollout by the core, for RollingOut. Set by rollout."""
    deleting_message: str = ""
    """What deletion waits for, for the Deleting condition. Set by delete."""

    @cached_property
    def facts(self) -> PassFacts:
        """This pass's ``MachineFacts``, kept in ``memory`` from the pass before (begun on
        first use: a pass a guard stops asks for none, and keeps those of the pass before)."""
        return self.memory.facts.for_pass()

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
