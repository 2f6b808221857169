"""Engine phases that read the world: the owner MachinePool and Cluster, instances, infra
machines, owner Machines and Node readiness. Called in order by ``engine.PoolEngine``.
"""

from __future__ import annotations

import contextlib

from machinepool.api import constants as c
from machinepool.api.conditions import is_true, set_condition
from machinepool.api.meta import adoption_grace_left
from machinepool.api.views import (
    ClusterView,
    EngineMachineView,
    MachinePoolView,
    MachineView,
    ReferenceView,
)
from machinepool.providers.pool.scope import PoolScope
from machinepool.providers.pool.types import InstanceState
from machinepool.runtime import (
    NODES,
    ClusterNotConnected,
    Informer,
    Obj,
    ObjectKey,
    Result,
    Stop,
    Then,
    controller_owner,
    field_indexer,
)

__all__ = [
    "INFRA_REF_INDEX",
    "POOL_MEMBER_INDEX",
    "PROVIDER_ID_INDEX",
    "await_own_writes",
    "ensure_member_indexes",
    "infra_ref_key",
    "list_instances",
    "load_owner",
    "machine_ready",
    "machine_to_pools",
    "node_inputs",
    "owner_machines",
    "pool_keys",
    "pool_members",
    "read_nodes",
]

PROVIDER_ID_INDEX = "pool-engine.providerID"
POOL_MEMBER_INDEX = "pool-engine.pool"
"""Infra machines by ``namespace/name`` of each infra pool that owns them."""
INFRA_REF_INDEX = "pool-engine.infrastructureRef"
"""Machines by ``namespace/kind/name`` of their spec.infrastructureRef."""
MACHINE_POOL_INDEX = "pool-engine.machinePool"
"""Machines by ``namespace/name`` of the MachinePool that controls them."""
_CACHE_REQUEUE = 1.0


async def load_owner(scope: PoolScope) -> Result:
    """Find the owning MachinePool and its Cluster; stop when there is none or it is paused."""
    env = scope.env
    ref = controller_owner(scope.pool.raw)
    if ref is None or ref.get("kind") != "MachinePool":
        # A pool a MachinePool names waits for its adoption (the owner patch brings it back),
        # and a new one for the MachinePool usually applied a moment after it: in either
        # case a status now would be one more write per new pool, soon replaced; upstream's
        # providers write nothing while a pool has no owner.
        key = infra_ref_key(scope.namespace, env.provider.pool_resource.kind, scope.key.name)
        named = bool(env.machine_pools.by_index(INFRA_REF_INDEX, key))
        left = adoption_grace_left(scope.pool.raw)
        if named or left > 0:
            return Stop(requeue_after=None if named else left, then=Then.NOTHING)
        scope.block("WaitingForOwner", "waiting for a MachinePool to adopt this pool")
        return Stop()
    mp = env.machine_pools.get(str(ref.get("name", "")), scope.namespace)
    if mp is None:
        scope.block("WaitingForOwner", f"MachinePool {ref.get('name')} not found")
        return Stop()
    scope.machine_pool = MachinePoolView(mp)
    cluster_key = scope.cluster_key
    assert cluster_key is not None
    cluster = env.clusters.get(cluster_key.name, cluster_key.namespace)
    scope.cluster = ClusterView(cluster) if cluster is not None else None
    paused = _paused(scope)
    reason = c.PAUSED_REASON if paused else c.NOT_PAUSED_REASON
    set_condition(scope.status.edit_conditions(), c.PAUSED_CONDITION, paused, reason)
    if paused:
        return Stop()
    scope.backend = await env.provider.backend(scope.pool.raw)
    return Result()


def _paused(scope: PoolScope) -> bool:
    if scope.cluster is not None and scope.cluster.spec.paused:
        return True
    owners = [scope.pool, *([scope.machine_pool] if scope.machine_pool else [])]
    return any(c.PAUSED_ANNOTATION in (obj.metadata.annotations or {}) for obj in owners)


async def list_instances(scope: PoolScope) -> Result:
    """Instances from the backend; infra machines and owner Machines from the caches."""
    assert scope.backend is not None
    env = scope.env
    listed = await scope.backend.list(scope.key.name)
    scope.instances = [i for i in listed if not i.warm]
    scope.warm = [i for i in listed if i.warm]
    members = [EngineMachineView(m) for m in pool_members(env.infra_machines, scope.key)]
    scope.infra_machines = {m.metadata.name: m for m in members}
    infra_kind = env.provider.machine_resource.kind
    for name in scope.infra_machines:
        ref = f"{scope.namespace}/{infra_kind}/{name}"
        for machine in env.machines.by_index(INFRA_REF_INDEX, ref):
            scope.machines[name] = MachineView(machine)
    if scope.machine_pool is not None:
        owner = str(ObjectKey(scope.namespace, scope.machine_pool.metadata.name or ""))
        for member in map(MachineView, env.machines.by_index(MACHINE_POOL_INDEX, owner)):
            points_at = member.spec.infrastructure_ref
            if points_at.kind == infra_kind and points_at.name not in scope.infra_machines:
                scope.unbacked_machines.append(member)
    return Result()


async def await_own_writes(scope: PoolScope) -> Result:
    """Stop here while the caches do not yet show what this engine wrote for the pool
    (``PoolMemory.expected``): a plan, or an infra machine made for a listed instance, is only as
    good as the view it is made from. The events that show the writes queue the pool; the
    requeue is for a watch that loses them."""
    env = scope.env

    def machine(name: str) -> MachineView | None:
        obj = env.machines.get(name, scope.namespace)
        return MachineView(obj) if obj is not None else None

    listed = {
        i.id: i.state is not InstanceState.TERMINATED for i in [*scope.instances, *scope.warm]
    }
    warm = {i.id for i in scope.warm}
    if not scope.memory.expected.unmet(machine=machine, instances=listed, warm=warm):
        return Result()
    return Stop(requeue_after=_CACHE_REQUEUE, then=Then.NOTHING)


def pool_members(infra_machines: Informer, pool: ObjectKey) -> list[Obj]:
    """The infra machines an ownerReference ties to ``pool``, by name (raw: the AWS provider
    lists its own kind with it)."""
    members = infra_machines.by_index(POOL_MEMBER_INDEX, str(pool))
    return sorted(members, key=lambda m: str(m["metadata"]["name"]))


def ensure_member_indexes(infra_machines: Informer, pool_kind: str, machines: Informer) -> None:
    """Index infra machines by their ``pool_kind`` owners (``POOL_MEMBER_INDEX``) and Machines
    by their infrastructureRef (``INFRA_REF_INDEX``), once per informer."""

    def owners(obj: Obj) -> list[str]:
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        return [
            str(ObjectKey(namespace, str(ref.get("name", ""))))
            for ref in meta.get("ownerReferences") or []
            if ref.get("kind") == pool_kind
        ]

    with contextlib.suppress(ValueError):  # already there
        infra_machines.add_indexer(POOL_MEMBER_INDEX, owners)
    with contextlib.suppress(ValueError):
        machines.add_indexer(INFRA_REF_INDEX, _infrastructure_ref)
    with contextlib.suppress(ValueError):
        machines.add_indexer(MACHINE_POOL_INDEX, _controlling_machine_pool)


def ensure_adoption_index(machine_pools: Informer) -> None:
    """Index MachinePools by the infra pool they reference (``INFRA_REF_INDEX``): whether a
    pool with no owner yet is about to be adopted (``load_owner``)."""
    with contextlib.suppress(ValueError):  # already there
        machine_pools.add_indexer(INFRA_REF_INDEX, _pool_infrastructure_ref)


def _pool_infrastructure_ref(obj: Obj) -> list[str]:
    pool = MachinePoolView(obj)
    return _ref_keys(pool.metadata.namespace, pool.spec.template.spec.infrastructure_ref)


def _controlling_machine_pool(machine: Obj) -> list[str]:
    ref = controller_owner(machine)
    if ref is None or ref.get("kind") != "MachinePool":
        return []
    namespace = str((machine.get("metadata") or {}).get("namespace") or "")
    return [str(ObjectKey(namespace, str(ref.get("name", ""))))]


def _infrastructure_ref(obj: Obj) -> list[str]:
    machine = MachineView(obj)
    return _ref_keys(machine.metadata.namespace, machine.spec.infrastructure_ref)


def _ref_keys(namespace: str | None, ref: ReferenceView) -> list[str]:
    """The ``INFRA_REF_INDEX`` values of an object in ``namespace`` whose infrastructureRef
    is ``ref``: none while it names nothing."""
    if not ref.name:
        return []
    return [infra_ref_key(str(namespace or ""), str(ref.kind or ""), str(ref.name))]


def infra_ref_key(namespace: str, kind: str, name: str) -> str:
    """The ``INFRA_REF_INDEX`` value of a Machine, or a MachinePool, whose infrastructureRef
    is ``kind``/``name``."""
    return f"{namespace}/{kind}/{name}"


def owner_machines(machines: Informer, infra_kind: str, infra_machine: Obj) -> list[Obj]:
    """The Machines whose spec.infrastructureRef names ``infra_machine`` (``INFRA_REF_INDEX``,
    which ``ensure_member_indexes`` adds): its owner Machine, when core made one."""
    meta = infra_machine["metadata"]
    key = infra_ref_key(str(meta.get("namespace") or ""), infra_kind, str(meta["name"]))
    return machines.by_index(INFRA_REF_INDEX, key)


def pool_keys(infra_machine: Obj, pool_kind: str) -> list[ObjectKey]:
    """The pools of kind ``pool_kind`` an ownerReference ties ``infra_machine`` to: where a
    change of an infra machine is queued (every provider's pool controller maps it so)."""
    meta = infra_machine.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    return [
        ObjectKey(namespace, str(ref.get("name", "")))
        for ref in meta.get("ownerReferences") or []
        if ref.get("kind") == pool_kind
    ]


def machine_to_pools(
    machine: Obj, infra_machines: Informer, infra_kind: str, pool_kind: str
) -> list[ObjectKey]:
    """The pools of the infra machine a Machine's infrastructureRef names (from the informer):
    where a change of a pool Machine is queued."""
    view = MachineView(machine)
    ref = view.spec.infrastructure_ref
    if ref.kind != infra_kind:
        return []
    infra = infra_machines.get(str(ref.name or ""), str(view.metadata.namespace or ""))
    return pool_keys(infra, pool_kind) if infra is not None else []


async def read_nodes(scope: PoolScope) -> Result:
    """Which instances have a Ready Node; unknown (None) when the workload is unreachable."""
    cluster = scope.cluster_key
    if cluster is None:
        return Result()
    try:
        nodes = await scope.env.cluster_cache.get_informer(cluster, NODES)
    except ClusterNotConnected as exc:
        scope.block("WorkloadClusterUnreachable", str(exc))
        return Result(requeue_after=10)
    ensure_provider_id_index(nodes)
    ready: set[str] = set()
    for instance in scope.instances:
        for node in nodes.by_index(PROVIDER_ID_INDEX, instance.provider_id):
            if node_ready(node):
                ready.add(instance.provider_id)
    scope.ready_ids = ready
    return Result()


def ensure_provider_id_index(informer: Informer) -> None:
    """Add the providerID index once (informers are shared; the name is ours)."""
    with contextlib.suppress(ValueError):  # already there
        informer.add_indexer(PROVIDER_ID_INDEX, field_indexer("spec.providerID"))


def node_ready(node: Obj) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def machine_ready(machine: MachineView) -> bool:
    """The Machine's v1beta2 ``Ready`` condition is true: what MachinePool ``readyReplicas``
    counts, and what a rollout's availability floor counts on (see ``plan``)."""
    return is_true(machine.status.conditions, c.READY_CONDITION)


def node_inputs(node: Obj) -> tuple[object, bool]:
    """What a pool reconcile reads from a Node: its providerID and whether it is Ready (the
    ``inputs`` of the engine's Node watch, so heartbeats do not wake pools)."""
    return (node.get("spec") or {}).get("providerID"), node_ready(node)
