"""The pool engine's reconciler and its wiring onto a Manager.

``start_engine(mgr, cluster_cache, provider)`` registers the informers, the pool controller
(``PoolEngine``) and the infra machine controller (``InfraMachineReconciler``) for one provider;
providers call it from their ``setup``. A pool reconcile is ``runtime.drive`` over
``EngineSteps``: it reads the pool from the informer (or its own newer write of it,
``OwnReader``), snapshots it, adds the finalizer (the guard), runs the phases as a chain
(observe, decide, act, sync infra machines: each needs what the ones before it found; a phase
ends the pass by returning a ``Stop``), reports, and patches once: metadata+spec and status
separately, only what changed. Errors are raised after the patch, the shortest requeue wins
otherwise (``runtime.reconcile.phases``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from machinepool.api.kinds import CLUSTERS, MACHINE_POOLS, MACHINES
from machinepool.api.meta import deleted_for_move
from machinepool.api.views import ClusterView, EnginePoolView, MachinePoolView, MachineView
from machinepool.providers.pool.delete import delete_pool
from machinepool.providers.pool.inframachines import (
    InfraMachineReconciler,
    prune_records,
    sync_infra_machines,
)
from machinepool.providers.pool.observe import (
    PROVIDER_ID_INDEX,
    await_own_writes,
    ensure_adoption_index,
    ensure_member_indexes,
    ensure_provider_id_index,
    list_instances,
    load_owner,
    machine_ready,
    machine_to_pools,
    node_inputs,
    node_ready,
    pool_keys,
    read_nodes,
)
from machinepool.providers.pool.provider import PoolProvider
from machinepool.providers.pool.report import progress_only, report
from machinepool.providers.pool.scale import act, decide
from machinepool.providers.pool.scope import EngineEnv, PoolScope
from machinepool.providers.pool.types import CloudError
from machinepool.runtime import (
    NODES,
    ClusterCache,
    ClusterNotConnected,
    Controller,
    Manager,
    Obj,
    ObjectKey,
    Outcome,
    OwnReader,
    Patcher,
    Phase,
    ProgressSpacing,
    Result,
    Steps,
    Stop,
    Then,
    controller_owner,
    describe_error,
    metadata_and_spec,
    run_phases,
)

__all__ = ["PoolEngine", "start_engine"]

PHASES: tuple[Phase[PoolScope], ...] = (
    load_owner,
    list_instances,
    await_own_writes,
    read_nodes,
    decide,
    act,
    sync_infra_machines,
    prune_records,
)
"""A chain: run in order until one returns a ``Stop`` or fails; ``report`` follows (unless the
``Stop`` says nothing is to be written)."""


class PoolEngine(Steps[PoolScope]):
    """Reconciles one provider's infra pools (``runtime.drive`` over these steps)."""

    chain = True

    def __init__(self, env: EngineEnv) -> None:
        self.env = env
        self.kind = env.provider.pool_resource.kind
        self.controller: Controller | None = None
        self.reader = OwnReader(env.client, env.provider.pool_resource, env.pools)
        self._watched_clusters: set[ObjectKey] = set()
        self.spacing = ProgressSpacing()

    def forget(self, key: ObjectKey) -> None:
        self.env.memory.forget(key)

    def scope(self, key: ObjectKey, obj: Obj, patcher: Patcher) -> PoolScope | Stop:
        pool = EnginePoolView(obj)
        if pool.deleting:
            self.env.memory.of(key).rolling = False
            if self.env.provider.pool_finalizer not in (pool.metadata.finalizers or []):
                return Stop(then=Then.NOTHING)
        return PoolScope(env=self.env, key=key, pool=pool, memory=self.env.memory.of(key))

    def guards(self, scope: PoolScope) -> Sequence[Phase[PoolScope]]:
        return (release_moved,) if scope.pool.deleting else (add_finalizer,)

    def phases(self, scope: PoolScope) -> Sequence[Phase[PoolScope]]:
        return (delete_pool,) if scope.pool.deleting else PHASES

    async def report(self, scope: PoolScope, outcome: Outcome) -> Outcome:
        if scope.pool.deleting:
            return Outcome()
        for exc in outcome.errors:
            if not isinstance(exc, CloudError):
                scope.block("ReconcileError", describe_error(exc))
        return await run_phases(scope, (report,)) + Outcome(errors=scope.errors)

    def observed(self, scope: PoolScope) -> bool:
        # A blocked pool has not acted on its spec: its status does not claim the generation.
        return not scope.blocked

    def hold(self, scope: PoolScope, before: Obj, after: Obj) -> float:
        # The instances are made or deleted; only the report waits, computed afresh then.
        if scope.pool.deleting:
            return 0.0
        entries = len(scope.status.instances or [])
        return self.spacing.hold(scope.memory.written_at, entries, before, after, progress_only)

    def wrote(self, scope: PoolScope) -> None:
        if not scope.pool.deleting:
            scope.memory.written_at = self.spacing.now()

    async def finish(self, scope: PoolScope, outcome: Outcome) -> Outcome:
        if scope.pool.deleting:
            return outcome
        if scope.plan is not None:
            scope.memory.rolling = scope.rolling
        if outcome.then is Then.REPORT:
            await self._watch_nodes(scope)
        return outcome

    async def _watch_nodes(self, scope: PoolScope) -> None:
        """Have the workload cluster's Node events reach this pool's reconciles."""
        cluster = scope.cluster_key
        if cluster is None or cluster in self._watched_clusters or self.controller is None:
            return
        try:
            informer = await self.env.cluster_cache.watch(
                cluster,
                NODES,
                self.controller.handler(
                    partial(self._node_to_pool, cluster), node_inputs, paced=True
                ),
            )
        except ClusterNotConnected:
            return
        ensure_provider_id_index(informer)
        self._watched_clusters.add(cluster)

    def _node_to_pool(self, cluster: ObjectKey, node: Obj) -> list[ObjectKey]:
        provider_id = (node.get("spec") or {}).get("providerID")
        if not provider_id:
            return []
        # A Node not Ready may be an instance that broke, which the pool replaces. A Ready one
        # wakes nobody: a rollout's availability floor counts Ready Machines, whose watch
        # (``machine_turned_ready``) follows. Judged on the Node as the cache has it now (an
        # update maps the old and the new copy; the cache holds the new one).
        nodes = self.env.cluster_cache.get_informer_nowait(cluster, NODES)
        current = nodes.get(str(node["metadata"]["name"])) if nodes is not None else None
        if current is not None and node_ready(current):
            return []
        keys: list[ObjectKey] = []
        for machine in self.env.infra_machines.by_index(PROVIDER_ID_INDEX, str(provider_id)):
            keys.extend(infra_machine_to_pool(self.env, machine))
        return keys

    def machine_turned_ready(self, machine: Obj) -> list[ObjectKey]:
        """The pools in a rollout that a Machine's Ready change concerns: its floor counts
        Ready Machines. Outside a rollout nothing a pool decides depends on it."""
        return [
            k
            for k in _machine_to_pool(self.env, machine)
            if (kept := self.env.memory.get(k)) is not None and kept.rolling
        ]


async def add_finalizer(scope: PoolScope) -> Result:
    """Add the provider's pool finalizer, alone in its write, before anything is made."""
    meta, finalizer = scope.pool.metadata, scope.env.provider.pool_finalizer
    finalizers = meta.finalizers or []
    if finalizer in finalizers:
        return Result()
    meta.finalizers = [*finalizers, finalizer]
    return Stop(then=Then.WRITE)


async def release_moved(scope: PoolScope) -> Result:
    """Let a pool clusterctl move deleted go: it and its instances live on in the target
    cluster."""
    if not deleted_for_move(scope.pool.raw):
        return Result()
    meta, finalizer = scope.pool.metadata, scope.env.provider.pool_finalizer
    meta.finalizers = [f for f in meta.finalizers or [] if f != finalizer]
    return Stop(then=Then.WRITE)


def infra_machine_to_pool(env: EngineEnv, machine: Obj) -> list[ObjectKey]:
    return pool_keys(machine, env.provider.pool_resource.kind)


async def start_engine(
    mgr: Manager, cluster_cache: ClusterCache, provider: PoolProvider, *, concurrency: int = 4
) -> PoolEngine:
    """Register informers and controllers for ``provider``'s pools and infra machines."""
    cache = mgr.cache
    env = EngineEnv(
        client=mgr.client,
        provider=provider,
        cluster_cache=cluster_cache,
        recorder=mgr.event_recorder(provider.component),
        pools=await cache.get_informer(provider.pool_resource),
        infra_machines=await cache.get_informer(provider.machine_resource),
        machines=await cache.get_informer(MACHINES),
        machine_pools=await cache.get_informer(MACHINE_POOLS),
        clusters=await cache.get_informer(CLUSTERS),
    )
    ensure_provider_id_index(env.infra_machines)
    ensure_member_indexes(env.infra_machines, provider.pool_resource.kind, env.machines)
    ensure_adoption_index(env.machine_pools)
    engine = PoolEngine(env)
    ctrl = mgr.new_controller(f"{provider.component}-pool", engine, concurrency=concurrency)
    engine.controller = ctrl
    # Status writes (this engine's own on pools and infra machines, the core's MachinePool
    # status, the Machine controller's conditions) change nothing a pool reconcile reads.
    # The watches of a pool's members (infra machines, Machines, Nodes, the cloud's instance
    # records) are paced, as the core's are: each member of a big pool changing would
    # otherwise re-read the whole pool and rewrite its status, a list of every instance,
    # back to back. Its pool, MachinePool and Cluster changing is not: that is what a user or
    # an autoscaler just asked for.
    ctrl.watch(env.pools, inputs=metadata_and_spec)
    ctrl.watch(
        env.infra_machines,
        lambda m: infra_machine_to_pool(env, m),
        metadata_and_spec,
        paced=True,
    )
    ctrl.watch(env.machines, lambda m: _machine_to_pool(env, m), metadata_and_spec, paced=True)
    ctrl.watch(
        env.machines,
        engine.machine_turned_ready,
        lambda m: machine_ready(MachineView(m)),
        paced=True,
    )
    ctrl.watch(env.machine_pools, lambda mp: _machine_pool_to_pool(env, mp), metadata_and_spec)
    ctrl.watch(env.clusters, lambda cl: _cluster_to_pools(env, cl))
    machines = mgr.new_controller(
        f"{provider.component}-machine", InfraMachineReconciler(env), concurrency=concurrency
    )
    machines.watch(env.infra_machines)
    return engine


def _machine_to_pool(env: EngineEnv, machine: Obj) -> list[ObjectKey]:
    """Through its infra machine; for a Machine whose infra machine the cache does not hold,
    through its MachinePool (see ``machines._release_orphan``)."""
    provider = env.provider
    keys = machine_to_pools(
        machine, env.infra_machines, provider.machine_resource.kind, provider.pool_resource.kind
    )
    if keys:
        return keys
    owner = controller_owner(machine)
    if owner is None or owner.get("kind") != "MachinePool":
        return []
    namespace = str((machine.get("metadata") or {}).get("namespace") or "")
    mp = env.machine_pools.get(str(owner.get("name", "")), namespace)
    return _machine_pool_to_pool(env, mp) if mp is not None else []


def _machine_pool_to_pool(env: EngineEnv, obj: Obj) -> list[ObjectKey]:
    mp = MachinePoolView(obj)
    ref = mp.spec.template.spec.infrastructure_ref
    if ref.kind != env.provider.pool_resource.kind:
        return []
    return [ObjectKey(mp.metadata.namespace or "", ref.name or "")]


def _cluster_to_pools(env: EngineEnv, cluster: Obj) -> list[ObjectKey]:
    meta = ClusterView(cluster).metadata
    keys = []
    for mp in env.machine_pools.list(meta.namespace or ""):
        if MachinePoolView(mp).spec.cluster_name == meta.name:
            keys.extend(_machine_pool_to_pool(env, mp))
    return keys
