"""The per-reconcile state the pool engine's phases share.

Built by ``engine.PoolEngine.reconcile`` and handed to each phase in turn; each field's
comment names the phase that fills it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from machinepool.api.rollingupdate import RollingUpdate
from machinepool.api.views import (
    ClusterView,
    EngineMachineView,
    EnginePoolStatusView,
    EnginePoolView,
    MachinePoolView,
    MachineView,
)
from machinepool.providers.pool.capacity import ZoneShortages
from machinepool.providers.pool.expectations import Expectations
from machinepool.providers.pool.plan import Plan
from machinepool.providers.pool.provider import PoolProvider
from machinepool.providers.pool.types import Backend, Instance
from machinepool.runtime import (
    Client,
    ClusterCache,
    EventRecorder,
    Informer,
    KeyMemory,
    ObjectKey,
)

__all__ = ["EngineEnv", "PoolMemory", "PoolScope"]


@dataclass
class PoolMemory:
    """What the engine keeps about one pool from one pass to the next, all of it: one
    ``runtime.KeyMemory`` (``EngineEnv.memory``) holds it, and its one ``forget`` drops it when
    the pool lets go of its finalizer (``delete.delete_pool``) or is gone."""

    statuses_sent: dict[str, tuple[float, tuple[str, bool | None]]] = field(default_factory=dict)
    """Infra machine name -> when, and for which instance state and UpToDate, the engine last
    wrote its status, until the cache shows it (``inframachines.sync_infra_machines``)."""
    rolling: bool = False
    """The last plan depended on Node readiness (``PoolScope.rolling``): outside a rollout, a
    Node that is Ready changes no step a pool would take, and waking a 1,000-instance pool
    for each of its Nodes' joins kept the engine busy re-reading it; a scale-down reads
    readiness afresh when the MachinePool's spec wakes the pool. A Node that is not Ready
    wakes its pool always: its instance may have failed."""
    written_at: float | None = None
    """When the pool was last written: its progress reports are spaced out."""
    expected: Expectations = field(default_factory=Expectations)
    """What this engine (and its infra machine controller) wrote for the pool that the caches
    have yet to show (``observe.await_own_writes``)."""
    shortages: ZoneShortages = field(default_factory=ZoneShortages)
    """Failure domains that refused the pool a create for lack of capacity
    (``scale._full_domains``)."""


@dataclass(frozen=True)
class EngineEnv:
    """What every reconcile of one engine uses: clients, informers, the provider."""

    client: Client
    provider: PoolProvider
    cluster_cache: ClusterCache
    recorder: EventRecorder
    pools: Informer
    infra_machines: Informer
    machines: Informer
    machine_pools: Informer
    clusters: Informer
    memory: KeyMemory[PoolMemory] = field(default_factory=lambda: KeyMemory(PoolMemory))
    """What is kept about each pool from one pass to the next: the pool controller's and the
    infra machine controller's, which records the instances it terminates."""


@dataclass
class PoolScope:
    """One reconcile of one infra pool."""

    env: EngineEnv
    key: ObjectKey
    pool: EnginePoolView
    """The infra pool, mutated by phases through the view; ``pool.raw`` is patched once on
    exit, and is what the provider's hooks are given."""
    memory: PoolMemory
    """What was kept about this pool from the passes before (``env.memory.of(key)``)."""
    machine_pool: MachinePoolView | None = None
    """The owning MachinePool (observe.load_owner)."""
    cluster: ClusterView | None = None
    """Its Cluster (observe.load_owner)."""
    backend: Backend | None = None
    """observe.load_owner."""
    instances: list[Instance] = field(default_factory=list)
    """Every instance of the pool, terminated ones included, warm ones not
    (observe.list_instances)."""
    warm: list[Instance] = field(default_factory=list)
    """The warm pool's instances, booting or stopped: no infra machine, no Machine, not in
    providerIDList (observe.list_instances)."""
    warm_size: int = 0
    """Warm instances to keep (scale.decide)."""
    infra_machines: dict[str, EngineMachineView] = field(default_factory=dict)
    """Infra machines of the pool by name (= instance id) (observe.list_instances)."""
    machines: dict[str, MachineView] = field(default_factory=dict)
    """Owner Machines by infra machine name (observe.list_instances)."""
    unbacked_machines: list[MachineView] = field(default_factory=list)
    """The MachinePool's Machines whose infra machine of this provider is not in the cache
    (observe.list_instances): new ones the cache has not caught up with, or orphans."""
    ready_ids: set[str] | None = None
    """Provider IDs whose Node is Ready; None when Nodes could not be read (observe.nodes)."""
    replicas: int = 0
    """Desired instances (scale.decide)."""
    strategy: RollingUpdate | None = None
    """scale.decide."""
    template_hash: str = ""
    """scale.decide."""
    plan: Plan | None = None
    """scale.act."""
    planned: int = 0
    """Ordinals handed out to new instances this reconcile, not yet listed (scale.act)."""
    rolling: bool = False
    """Some active instance is outdated, so which Machines are Ready decides the next step
    (the availability floor of a rolling update): a Machine turning Ready wakes the pool only
    while this holds (scale.act)."""
    blocked: list[tuple[str, str]] = field(default_factory=list)
    """(reason, message) of problems that keep the pool from converging (any phase): what
    the report's Ready condition says, and why the status does not claim the generation.
    Not a way to stop: a phase stops the pass by returning a ``runtime.Stop``."""
    errors: list[Exception] = field(default_factory=list)
    """Failures a phase reports without stopping the chain (an instance create the cloud
    refused), raised with the phases' own errors after the patch."""

    @property
    def namespace(self) -> str:
        return self.key.namespace

    @property
    def status(self) -> EnginePoolStatusView:
        return self.pool.status

    @property
    def cluster_key(self) -> ObjectKey | None:
        if self.machine_pool is None:
            return None
        return ObjectKey(self.namespace, self.machine_pool.spec.cluster_name or "")

    def block(self, reason: str, message: str) -> None:
        self.blocked.append((reason, message))
