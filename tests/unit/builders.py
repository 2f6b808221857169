"""Per-reconcile scopes for the phase modules' unit tests, built in this one place.

A phase is an ``async (scope) -> Result``; its unit test builds the scope a reconcile would
have built, runs the phase (or a decision inside it) and reads what it left in the scope and
its object. Nothing here talks to an apiserver:

- ``pool_scope`` is the core MachinePool controller's ``Scope`` over a MachinePool body from
  ``tests.support.builders`` (a copy, as the reconciler's own), its Cluster, its Machines
  and the workload's Nodes. Its ``Env`` holds the Machine cache and the gates only, and
  its ``PoolMemory`` is empty: a path that reaches for more (a client call, a dynamic
  watch) fails here with an ``AttributeError``, which says that the path belongs
  to the integration tests, which run it against a real apiserver.
- ``engine_scope`` is the pool engine's ``PoolScope`` over an ``EngineEnv`` whose informers
  hold the objects given (filled as a watch fills them, through the informer's own store),
  whose provider is the Sim provider (its pure parts: strategy, template, instance ids) and
  whose backend is ``MemoryBackend``, a cloud in a dict. The env's client is ``None`` for the
  same reason as the reconciler above.

How a scope is constructed is the controllers' business and changes with them; when it does,
this module is the one to follow it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from tests.support.builders import CLUSTER, machine_pool, sim_machine_pool
from tests.support.resources import CLUSTERS, MACHINE_POOLS, MACHINES, SIM_MACHINES

from machinepool.api import constants as c
from machinepool.api.views import ClusterView, MachinePoolView, MachineView, SimMachinePoolView
from machinepool.controllers.common import WorkloadNodes
from machinepool.controllers.machinepool import watches
from machinepool.controllers.machinepool.scope import Env, PoolMemory, Scope
from machinepool.providers.pool.observe import ensure_adoption_index, ensure_member_indexes
from machinepool.providers.pool.scope import EngineEnv, PoolScope
from machinepool.providers.pool.types import Instance, InstanceSpec, InstanceState
from machinepool.providers.sim.provider import SimProvider
from machinepool.runtime import NODES, SECRETS, Informer, Obj, ObjectKey, Resource
from machinepool.simworld import DEFAULT_ZONES, Faults

__all__ = [
    "NAMESPACE",
    "MemoryBackend",
    "cached",
    "cluster",
    "engine_scope",
    "infra_machine",
    "instance",
    "machine",
    "node",
    "pool_scope",
]

NAMESPACE = "ns"
UID = "mp-uid"
"""The MachinePool's uid in every scope here: what owner references and adoption compare."""
CREATED = datetime(2026, 1, 1, tzinfo=UTC)


def cached(resource: Resource, objects: Iterable[Obj] = ()) -> Informer:
    """An informer of ``resource`` holding ``objects``, as its list would have stored them.

    Never started (it has no client): the store is filled the way a watch event fills it,
    so indexes and lookups are the informer's own.
    """
    informer = Informer(None, resource)  # type: ignore[arg-type]
    for obj in objects:
        informer._upsert(ObjectKey.of(obj), informer._prepare(copy.deepcopy(obj)))
    return informer


def cluster(name: str = CLUSTER, *, paused: bool = False) -> Obj:
    spec: Obj = {"paused": True} if paused else {}
    return {
        "apiVersion": CLUSTERS.api_version,
        "kind": CLUSTERS.kind,
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"{name}-uid"},
        "spec": spec,
    }


def node(
    name: str,
    provider_id: str,
    *,
    ready: bool = True,
    since: datetime = CREATED,
    version: str = "v1.34.0",
) -> Obj:
    """A workload Node with its Ready condition (turned ``since``), as its kubelet reports
    it."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"{name}-uid"},
        "spec": {"providerID": provider_id},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            ],
            "nodeInfo": {"kubeletVersion": version},
        },
    }


def machine(
    name: str,
    *,
    pool: str = "pool",
    conditions: Mapping[str, str] | None = None,
    provider_id: str = "",
    deleting: bool = False,
    annotations: Mapping[str, str] | None = None,
    resource_version: str = "1",
    infra: str = "",
) -> Obj:
    """A pool Machine controlled by the MachinePool ``pool`` of ``pool_scope``, with
    ``conditions`` (type -> status), owning the SimMachine ``infra`` when given."""
    meta: Obj = {
        "name": name,
        "namespace": NAMESPACE,
        "uid": f"{name}-uid",
        "resourceVersion": resource_version,
        "labels": {c.POOL_NAME_LABEL: pool, c.CLUSTER_NAME_LABEL: CLUSTER},
        "annotations": dict(annotations or {}),
        "ownerReferences": [{"kind": "MachinePool", "name": pool, "uid": UID, "controller": True}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: Obj = {"clusterName": CLUSTER}
    if provider_id:
        spec["providerID"] = provider_id
    if infra:
        spec["infrastructureRef"] = {
            "apiGroup": c.INFRASTRUCTURE_GROUP,
            "kind": SIM_MACHINES.kind,
            "name": infra,
        }
    return {
        "apiVersion": MACHINES.api_version,
        "kind": MACHINES.kind,
        "metadata": meta,
        "spec": spec,
        "status": {
            "conditions": [
                {
                    "type": type_,
                    "status": status,
                    "reason": "Test",
                    "lastTransitionTime": f"2026-01-01T00:00:0{i}Z",
                }
                for i, (type_, status) in enumerate((conditions or {}).items())
            ]
        },
    }


def pool_scope(
    mp: Obj | None = None,
    *,
    cluster_obj: Obj | None = None,
    machines: Iterable[Obj] = (),
    nodes: Iterable[Obj] | None = None,
    cached_machines: Iterable[Obj] = (),
    **fields: Any,
) -> Scope:
    """The core controller's scope for ``mp`` (default: ``machine_pool(NAMESPACE, "pool")``
    with a uid), its Cluster, its ``machines`` and, unless ``None``, the workload ``nodes``;
    the Machine cache holds ``cached_machines`` (``scope.env``: it and the gates, no more).
    ``fields`` set any other field of ``Scope`` (``infra_pool``, ``bootstrap_config``...)."""
    body = copy.deepcopy(mp if mp is not None else machine_pool(NAMESPACE, "pool"))
    body["metadata"].setdefault("uid", UID)
    machine_cache = cached(MACHINES, cached_machines)
    machine_cache.add_indexer(watches.BY_MEMBER_LABELS, watches.member_labels)
    # The Machine cache (indexed as the reconciler indexes it) and the gates only: anything
    # else a phase reaches for (client, resolver, recorder, dynamic watches) is missing, and
    # the test fails there: that path is the integration tests'.
    env = Env(
        client=None,  # type: ignore[arg-type]
        cluster_cache=None,  # type: ignore[arg-type]
        resolver=None,  # type: ignore[arg-type]
        recorder=None,  # type: ignore[arg-type]
        machines=machine_cache,
        watches=None,  # type: ignore[arg-type]
        machines_up_to_date=False,
        pool_node_taints=False,
    )
    return Scope(
        env=env,
        memory=PoolMemory(),
        mp=MachinePoolView(body),
        cluster=ClusterView(cluster_obj or cluster()),
        machines=[MachineView(copy.deepcopy(m)) for m in machines],
        nodes=None if nodes is None else WorkloadNodes(cached(NODES, nodes)),
        **fields,
    )


def instance(
    index: int,
    *,
    state: InstanceState = InstanceState.RUNNING,
    zone: str = "zone-a",
    template_hash: str = "",
    warm: bool = False,
) -> Instance:
    """Instance ``i-<index>`` of the pool, providerID ``sim://ns/pool/i-<index>``."""
    return Instance(
        id=f"i-{index}",
        provider_id=f"sim://{NAMESPACE}/pool/i-{index}",
        failure_domain=zone,
        state=state,
        template_hash=template_hash,
        created=CREATED,
        index=index,
        warm=warm,
    )


def infra_machine(name: str, *, pool: str = "pool", status: Obj | None = None) -> Obj:
    """A SimMachine of the SimMachinePool ``pool``, as the engine creates one per instance."""
    return {
        "apiVersion": SIM_MACHINES.api_version,
        "kind": SIM_MACHINES.kind,
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"{name}-uid",
            "ownerReferences": [
                {"apiVersion": SIM_MACHINES.api_version, "kind": "SimMachinePool", "name": pool}
            ],
        },
        "spec": {"providerID": f"sim://{NAMESPACE}/{pool}/{name}", "instanceID": name},
        "status": status or {},
    }


@dataclass
class MemoryBackend:
    """A cloud in a dict: what the engine's ``Backend`` protocol asks, nothing more. It plays
    the part of the cloud (the Sim cloud, EC2), not of the Kubernetes API."""

    instances: dict[str, Instance] = field(default_factory=dict)
    zones: Mapping[str, int | None] = field(default_factory=lambda: dict.fromkeys(DEFAULT_ZONES))
    deleted: list[str] = field(default_factory=list)
    purged: list[str] = field(default_factory=list)

    async def create(self, spec: InstanceSpec) -> Instance:
        made = Instance(
            id=spec.instance_id,
            provider_id=f"sim://{spec.pool_id}/{spec.instance_id}",
            failure_domain=spec.failure_domain,
            state=InstanceState.PENDING,
            template_hash=spec.template_hash,
            created=CREATED,
            index=spec.index,
        )
        return self.instances.setdefault(made.id, made)

    async def list(self, pool_id: str) -> list[Instance]:
        return list(self.instances.values())

    async def delete(self, instance_id: str) -> None:
        self.deleted.append(instance_id)
        if instance_id in self.instances:
            gone = replace(self.instances[instance_id], state=InstanceState.TERMINATED)
            self.instances[instance_id] = gone

    async def purge(self, instance_id: str) -> None:
        self.purged.append(instance_id)
        self.instances.pop(instance_id, None)

    def failure_domains(self) -> Mapping[str, int | None]:
        return self.zones

    @classmethod
    def of(cls, *instances: Instance, **kw: Any) -> MemoryBackend:
        return cls({i.id: i for i in instances}, **kw)


class _MemoryProvider(SimProvider):
    """The Sim provider, whose backend is ``MemoryBackend``: its strategy, template and
    instance ids are the Sim provider's own."""

    def __init__(self, backend: MemoryBackend) -> None:
        async def no_faults(_namespace: str) -> Faults:
            return Faults()

        super().__init__(None, cached(SECRETS), DEFAULT_ZONES, faults=no_faults)  # type: ignore[arg-type]
        self.memory = backend

    async def backend(self, pool: Obj) -> MemoryBackend:  # type: ignore[override]
        return self.memory


def engine_scope(
    infra_pool: Obj | None = None,
    *,
    mp: Obj | None = None,
    owned: bool = True,
    clusters: Iterable[Obj] | None = None,
    infra_machines: Iterable[Obj] = (),
    machines: Iterable[Obj] = (),
    backend: MemoryBackend | None = None,
    **fields: Any,
) -> PoolScope:
    """The pool engine's scope for the SimMachinePool ``infra_pool`` (default:
    ``sim_machine_pool(NAMESPACE, "pool")``), controlled by the MachinePool ``mp`` unless not
    ``owned``; the env's informers hold ``mp``, ``clusters`` (default: its Cluster),
    ``infra_machines`` and ``machines``; the scope's ``memory`` is the env's for the pool
    (``env.memory.of(key)``), empty. ``fields`` set any other field of ``PoolScope``
    (``machine_pool`` is left for ``observe.load_owner`` to fill unless given)."""
    mp_body = copy.deepcopy(mp if mp is not None else machine_pool(NAMESPACE, "pool"))
    mp_body["metadata"].setdefault("uid", UID)
    pool = copy.deepcopy(
        infra_pool if infra_pool is not None else sim_machine_pool(NAMESPACE, "pool")
    )
    meta = pool["metadata"]
    meta.setdefault("uid", "infra-uid")
    meta.setdefault("finalizers", [SimProvider.pool_finalizer])
    if owned:
        meta["ownerReferences"] = [
            {
                "apiVersion": MACHINE_POOLS.api_version,
                "kind": "MachinePool",
                "name": mp_body["metadata"]["name"],
                "uid": mp_body["metadata"]["uid"],
                "controller": True,
            }
        ]
    memory = backend or MemoryBackend()
    machine_informer = cached(MACHINES, machines)
    infra_informer = cached(SIM_MACHINES, infra_machines)
    pools_informer = cached(MACHINE_POOLS, [mp_body])
    ensure_member_indexes(infra_informer, SimProvider.pool_resource.kind, machine_informer)
    ensure_adoption_index(pools_informer)
    env = EngineEnv(
        client=None,  # type: ignore[arg-type]
        provider=_MemoryProvider(memory),
        cluster_cache=None,  # type: ignore[arg-type]
        recorder=None,  # type: ignore[arg-type]
        pools=cached(SimProvider.pool_resource, [pool]),
        infra_machines=infra_informer,
        machines=machine_informer,
        machine_pools=pools_informer,
        clusters=cached(CLUSTERS, [cluster()] if clusters is None else clusters),
    )
    key = ObjectKey.of(pool)
    return PoolScope(
        env=env, key=key, pool=SimMachinePoolView(pool), memory=env.memory.of(key), **fields
    )
