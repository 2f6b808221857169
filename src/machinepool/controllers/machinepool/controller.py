"""The MachinePool reconciler: one reconcile per MachinePool key, phases over a shared Scope.

Built by ``machinepool.controllers.machinepool.setup``. A reconcile is ``runtime.drive`` over
``PoolSteps``: it reads the MachinePool and its Cluster from the informer cache, adds the
finalizer, honours pause (the guards), runs the phases (every phase runs even if an earlier one
failed), computes status and phase (``update_status``), and patches once (spec and status
separately, only what changed), as ``runtime.reconcile.phases`` lays out. Problems with
references (missing Cluster, config or infra pool, an infra pool controlled by someone else)
become conditions and wait for a watch, not a backoff (``ReferenceProblem`` is terminal).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from machinepool.api import constants as c
from machinepool.api.conditions import set_v1beta1_condition
from machinepool.api.kinds import CLUSTERS, MACHINE_POOLS, MACHINES
from machinepool.api.views import ClusterView, MachinePoolView
from machinepool.controllers.common import (
    WorkloadNodes,
    ensure_cluster_owner,
    is_paused,
    node_inputs,
    set_paused_condition,
)
from machinepool.controllers.machinepool import remediation, rollout, status, watches
from machinepool.controllers.machinepool.bootstrap import reconcile_bootstrap
from machinepool.controllers.machinepool.delete import reconcile_delete
from machinepool.controllers.machinepool.infrastructure import reconcile_infrastructure
from machinepool.controllers.machinepool.noderefs import reconcile_node_refs
from machinepool.controllers.machinepool.poolmachines import (
    reconcile_machines,
    set_machines_up_to_date,
)
from machinepool.controllers.machinepool.scope import Env, PoolMemory, Scope
from machinepool.runtime import (
    NODES,
    ClusterCache,
    ClusterNotConnected,
    ContractResolver,
    Controller,
    IndexFunc,
    Informer,
    KeyMemory,
    Manager,
    Obj,
    ObjectKey,
    Outcome,
    OwnReader,
    Patcher,
    Phase,
    ProgressSpacing,
    Resource,
    Result,
    Steps,
    Stop,
    Then,
    get_logger,
)

CONTROLLER_NAME = "machinepool"
COMPONENT = "machinepool-controller"

log = get_logger(__name__)


class MachinePoolReconciler:
    """Reconciles MachinePools; owns the dynamic watches their references need."""

    def __init__(
        self,
        mgr: Manager,
        cluster_cache: ClusterCache,
        *,
        concurrency: int = 1,
        machines_up_to_date: bool = False,
        pool_node_taints: bool = False,
    ) -> None:
        self.machines_up_to_date = machines_up_to_date
        self.pool_node_taints = pool_node_taints
        self.client = mgr.client
        self.cache = mgr.cache
        self.cluster_cache = cluster_cache
        self.resolver = ContractResolver(mgr.client)
        self.recorder = mgr.event_recorder(COMPONENT)
        self.controller: Controller = mgr.new_controller(
            CONTROLLER_NAME, self.reconcile, concurrency=concurrency
        )
        self.pools: Informer
        self.clusters: Informer
        self.machines: Informer
        self._watched: set[Resource] = set()
        self._referenced: list[Informer] = []
        """Informers of referenced kinds (bootstrap configs, infra pools), for Node mapping."""
        self._watched_clusters: set[ObjectKey] = set()
        self._lock = asyncio.Lock()
        self.memory = KeyMemory(PoolMemory)
        """What is kept about each pool from one pass to the next."""
        self.steps: PoolSteps

    async def start_watches(self) -> None:
        """Informers and watches known up front: MachinePools, Clusters, Machines."""
        self.pools = await self.cache.get_informer(MACHINE_POOLS)
        for name, fn in watches.POOL_INDEXERS.items():
            self.pools.add_indexer(name, fn)
        self.clusters = await self.cache.get_informer(CLUSTERS)
        self.machines = await self.cache.get_informer(MACHINES)
        _index(self.machines, watches.BY_MEMBER_LABELS, watches.member_labels)
        # Only this controller writes a MachinePool's status and providerIDList; its own
        # writes need no event.
        self.controller.watch(self.pools, inputs=watches.pool_inputs)
        self.controller.watch(self.clusters, watches.cluster_to_pools(self.pools))
        # Paced, as are the watches of the pool's members below (infra machines, Nodes, the
        # referenced objects): each Machine of a big pool turning Ready, each of its Nodes
        # joining, would otherwise re-read the whole pool, back to back, while the Machine
        # controller waits for the same event loop. A change to the MachinePool itself is not
        # paced: it is what a user or an autoscaler just asked for; nor is a referenced object
        # turning ready (``watches.referenced_readiness``).
        self.controller.watch(
            self.machines, watches.machine_to_pool(self.pools), watches.machine_inputs, paced=True
        )
        env = Env(
            client=self.client,
            cluster_cache=self.cluster_cache,
            resolver=self.resolver,
            recorder=self.recorder,
            machines=self.machines,
            watches=self,
            machines_up_to_date=self.machines_up_to_date,
            pool_node_taints=self.pool_node_taints,
        )
        # From the cache, as upstream reads, but never older than our own last write: the
        # patch on exit is a diff against this copy (see runtime.OwnReader).
        reader = OwnReader(self.client, MACHINE_POOLS, self.pools)
        self.steps = PoolSteps(env, reader, self.clusters, self.memory)

    # -- dynamic watches ------------------------------------------------------------------

    async def watch_referenced_kind(self, resource: Resource) -> Informer:
        """The informer of a referenced kind; changes map to the MachinePool that owns or
        names the object."""
        informer = await self.cache.get_informer(resource)
        async with self._lock:
            if resource not in self._watched:
                self._watched.add(resource)
                _index(informer, watches.BY_INFRA_PROVIDER_ID, watches.infra_provider_ids)
                self._referenced.append(informer)
                self.controller.watch(
                    informer,
                    watches.referenced_to_pool(self.pools),
                    watches.referenced_inputs,
                    paced=True,
                    at_once=watches.referenced_readiness,
                )
        return informer

    async def watch_infra_machine_kind(self, resource: Resource) -> Informer:
        """The informer of an infra machine kind; changes map to the pool by its labels."""
        informer = await self.cache.get_informer(resource)
        async with self._lock:
            if resource not in self._watched:
                self._watched.add(resource)
                _index(informer, watches.BY_MEMBER_LABELS, watches.member_labels)
                self.controller.watch(
                    informer,
                    watches.labels_to_pool(self.pools),
                    watches.infra_machine_inputs,
                    paced=True,
                )
        return informer

    async def workload_nodes(self, cluster: ObjectKey) -> WorkloadNodes | None:
        """The workload cluster's Nodes, watched (once per cluster) for this controller.

        ``None`` when the workload cluster cannot be reached; the caller reports it.
        """
        key = cluster
        try:
            nodes = await self.cluster_cache.get_informer(key, NODES)
            if key not in self._watched_clusters:
                mapper = watches.node_to_pool(self.pools, key, lambda: self._referenced)
                inputs = watches.pool_node_inputs if self.pool_node_taints else node_inputs
                handler = self.controller.handler(mapper, inputs, paced=True)
                await self.cluster_cache.watch(key, NODES, handler)
                self._watched_clusters.add(key)
        except ClusterNotConnected as exc:
            log.info("workload cluster not reachable", cluster=str(key), error=str(exc))
            return None
        return WorkloadNodes(nodes)

    # -- reconcile ------------------------------------------------------------------------

    async def reconcile(self, key: ObjectKey) -> Result:
        return await self.steps.reconcile(key)


class PoolSteps(Steps[Scope]):
    """One MachinePool reconcile, as ``runtime.drive`` runs it: independent phases (a missing
    bootstrap config does not keep Nodes from being counted, so every phase runs and every
    condition is current), the status summed up, progress reports spaced out."""

    kind = "MachinePool"

    def __init__(
        self, env: Env, reader: OwnReader, clusters: Informer, memory: KeyMemory[PoolMemory]
    ) -> None:
        self.env = env
        self.reader = reader
        self.clusters = clusters
        self.memory = memory
        self.spacing = ProgressSpacing()

    def forget(self, key: ObjectKey) -> None:
        self.memory.forget(key)

    def scope(self, key: ObjectKey, obj: Obj, patcher: Patcher) -> Scope | Stop:
        obj.setdefault("status", {})
        mp = MachinePoolView(obj)
        cluster_name = mp.spec.cluster_name or ""
        cluster = self.clusters.get(cluster_name, key.namespace)
        if cluster is None:
            _report_missing_cluster(mp, key.namespace, cluster_name)
            return Stop(then=Then.WRITE)  # the Cluster watch brings us back when it appears
        return Scope(self.env, self.memory.of(key), mp, ClusterView(cluster))

    def guards(self, scope: Scope) -> Sequence[Phase[Scope]]:
        return (add_finalizer, stop_if_paused)

    def phases(self, scope: Scope) -> Sequence[Phase[Scope]]:
        return _phases(scope.mp, self.env.machines_up_to_date)

    async def report(self, scope: Scope, outcome: Outcome) -> Outcome:
        update_status(scope)
        return Outcome()

    def hold(self, scope: Scope, before: Obj, after: Obj) -> float:
        entries = len(scope.mp.spec.provider_id_list or [])
        last = scope.memory.written_at
        return self.spacing.hold(last, entries, before, after, status.progress_only)

    def wrote(self, scope: Scope) -> None:
        scope.memory.written_at = self.spacing.now()


async def add_finalizer(scope: Scope) -> Result:
    """Add the finalizer, before anything is made for the pool, as upstream adds it."""
    mp = scope.mp
    finalizers = mp.metadata.finalizers or []
    if mp.deleting or c.MACHINE_POOL_FINALIZER in finalizers:
        return Result()
    # The Cluster owner and label (metadata; nothing is made) go in the same patch, so a new
    # pool's metadata costs one write, not two; but not while paused, where upstream's
    # reconcile stops before it sets them.
    mp.metadata.finalizers = [*finalizers, c.MACHINE_POOL_FINALIZER]
    if not is_paused(mp, scope.cluster):
        ensure_cluster_owner(mp, mp.spec.cluster_name or "", scope.cluster)
    return Stop(then=Then.WRITE)


async def stop_if_paused(scope: Scope) -> Result:
    """Set the Paused condition; paused, stop with it alone. Not paused, the condition is
    written with the rest of the status (see ``set_paused_condition``)."""
    mp = scope.mp
    if set_paused_condition(mp, mp.status.edit_conditions(), scope.cluster, "MachinePool"):
        return Stop(then=Then.WRITE)
    return Result()


def _index(informer: Informer, name: str, fn: IndexFunc) -> None:
    """Add an index to a shared informer unless a previous call did."""
    with contextlib.suppress(ValueError):
        informer.add_indexer(name, fn)


def _phases(mp: MachinePoolView, machines_up_to_date: bool) -> list[Phase[Scope]]:
    if mp.deleting:
        return [set_owner_and_labels, reconcile_delete]
    phases: list[Phase[Scope]] = [
        set_owner_and_labels,
        reconcile_bootstrap,
        reconcile_infrastructure,
        reconcile_machines,
        remediation.reconcile_remediation,
        rollout.reconcile_rollout,
        reconcile_node_refs,
    ]
    return [*phases, set_machines_up_to_date] if machines_up_to_date else phases


async def set_owner_and_labels(scope: Scope) -> Result:
    """Label the MachinePool with its Cluster's name and make the Cluster an owner."""
    ensure_cluster_owner(scope.mp, scope.mp.spec.cluster_name, scope.cluster)
    return Result()


def _report_missing_cluster(mp: MachinePoolView, namespace: str, name: str) -> None:
    message = (
        f"Cluster {namespace}/{name} does not exist; create it, or recreate this MachinePool"
        f" with spec.clusterName naming an existing Cluster"
    )
    set_v1beta1_condition(
        mp.status.v1beta1.edit_conditions(),
        c.V1BETA1_READY_CONDITION,
        False,
        "ClusterNotFound",
        message,
        c.SEVERITY_ERROR,
    )
    status.apply_conditions(mp, {c.AVAILABLE_CONDITION: ("False", "ClusterDoesNotExist", message)})


def update_status(scope: Scope) -> None:
    """Counters, conditions and phase at the end of every reconcile."""
    mp = scope.mp
    has_machines = scope.has_machine_pool_machines
    machines = scope.machine_facts()
    if scope.infra_pool is not None:
        status.set_replica_counters(mp, has_machines, machines, _referenced_nodes(scope))
    values = _ref_conditions(scope)
    values.update(status.replica_conditions(mp))
    values.update(status.machine_conditions(has_machines, machines))
    values.update(remediation.remediating_condition(scope))
    values.update(rollout.rolling_out_condition(scope))
    values[c.DELETING_CONDITION] = status.deleting_condition(mp, scope.deleting_message)
    status.apply_conditions(mp, values)
    status.set_v1beta1_ready(mp)
    mp.status.phase = status.compute_phase(mp)


def _referenced_nodes(scope: Scope) -> dict[str, Obj]:
    """The Nodes ``status.nodeRefs`` names, by name (those that exist)."""
    if scope.nodes is None:
        return {}
    found: dict[str, Obj] = {}
    for ref in scope.mp.status.node_refs or []:
        name = str(ref.get("name")) if isinstance(ref, dict) else ""
        node = scope.nodes.by_name(name) if name else None
        if node is not None:
            found[name] = node
    return found


def _ref_conditions(scope: Scope) -> dict[str, tuple[str, str, str]]:
    mp = scope.mp
    tspec = mp.spec.template.spec
    init = mp.status.initialization
    bootstrap_ref = tspec.bootstrap.config_ref
    bootstrap = status.RefFacts(
        bootstrap_ref.kind or "",
        scope.bootstrap_config,
        scope.bootstrap_config_not_found,
        scope.bootstrap_problem,
    )
    infra = status.RefFacts(
        tspec.infrastructure_ref.kind or "",
        scope.infra_pool,
        scope.infra_pool_not_found,
        scope.infra_problem,
    )
    data_secret_created = bool(init.bootstrap_data_secret_created)
    provisioned = bool(init.infrastructure_provisioned)
    return {
        c.BOOTSTRAP_CONFIG_READY_CONDITION: status.ref_condition(
            bootstrap,
            data_secret_created,
            "status.initialization.dataSecretCreated",
            mp.deleting and data_secret_created,
            defined=bool(bootstrap_ref.raw) or bool(scope.bootstrap_problem),
        ),
        c.INFRASTRUCTURE_READY_CONDITION: status.ref_condition(
            infra, provisioned, "status.initialization.provisioned", provisioned
        ),
    }
