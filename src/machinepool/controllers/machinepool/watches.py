"""Indexes over MachinePools and the mappers that turn other objects' events into
MachinePool keys: Clusters, Machines, referenced objects, infra machines and workload Nodes.

Used by ``controller.MachinePoolReconciler`` when it sets up (static) and discovers (dynamic)
watches. Index values are namespaced strings so that one informer can serve every namespace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from machinepool.api import constants as c
from machinepool.api.constants import pool_name_label_value
from machinepool.api.contract import BootstrapConfig, InfraMachine, InfraMachinePool
from machinepool.api.views import (
    MachinePoolSpecView,
    MachinePoolView,
    MachineView,
    NodeView,
    ObjectView,
)
from machinepool.controllers.common import group_of, node_inputs
from machinepool.controllers.machinepool.facts import COUNTED_CONDITIONS
from machinepool.runtime import (
    IndexFunc,
    Informer,
    Mapper,
    Obj,
    ObjectKey,
    controller_owner,
    metadata_and_spec,
)

BY_CLUSTER = "machinepool.core/cluster"
BY_REF = "machinepool.core/ref"
BY_POOL_LABEL = "machinepool.core/pool-label"
BY_PROVIDER_ID = "machinepool.core/provider-id"
BY_NODE_NAME = "machinepool.core/node-name"
BY_MEMBER_LABELS = "machinepool.core/member-labels"
"""On Machines and infra machines: the pool their cluster-name and pool-name labels name."""
BY_INFRA_PROVIDER_ID = "machinepool.core/infra-provider-id"
"""On referenced kinds: each ``spec.providerIDList`` entry of an infra pool."""


def _ns(obj: Obj) -> str:
    return str(ObjectView(obj).metadata.namespace or "")


def _cluster_key(mp: MachinePoolView) -> str:
    return f"{mp.metadata.namespace or ''}/{mp.spec.cluster_name or ''}"


def _cluster_prefix(mp: MachinePoolView) -> str:
    return _cluster_key(mp) + "/"


def ref_key(namespace: str, group: str, kind: str, name: str) -> str:
    return f"{namespace}/{group}/{kind}/{name}"


def _by_cluster(obj: Obj) -> list[str]:
    return [_cluster_key(MachinePoolView(obj))]


def _by_ref(obj: Obj) -> list[str]:
    mp = MachinePoolView(obj)
    spec = mp.spec.template.spec
    namespace = mp.metadata.namespace or ""
    return [
        ref_key(namespace, str(r.api_group), str(r.kind), r.name)
        for r in (spec.bootstrap.config_ref, spec.infrastructure_ref)
        if r.name
    ]


def _by_pool_label(obj: Obj) -> list[str]:
    return [pool_member_key(MachinePoolView(obj))]


def _by_provider_id(obj: Obj) -> list[str]:
    mp = MachinePoolView(obj)
    prefix = _cluster_prefix(mp)
    return [prefix + p for p in mp.spec.provider_id_list or [] if p]


def _by_node_name(obj: Obj) -> list[str]:
    mp = MachinePoolView(obj)
    prefix = _cluster_prefix(mp)
    refs = mp.status.node_refs or []
    return [prefix + str(r.get("name")) for r in refs if isinstance(r, dict) and r.get("name")]


POOL_INDEXERS: dict[str, IndexFunc] = {
    BY_CLUSTER: _by_cluster,
    BY_REF: _by_ref,
    BY_POOL_LABEL: _by_pool_label,
    BY_PROVIDER_ID: _by_provider_id,
    BY_NODE_NAME: _by_node_name,
}


def member_labels(obj: Obj) -> list[str]:
    """Index a Machine or infra machine under the pool its labels name (same value as
    ``BY_POOL_LABEL`` on the pool)."""
    labels = ObjectView(obj).metadata.labels or {}
    cluster, pool = labels.get(c.CLUSTER_NAME_LABEL), labels.get(c.POOL_NAME_LABEL)
    return [f"{_ns(obj)}/{cluster}/{pool}"] if cluster and pool else []


def pool_member_key(mp: MachinePoolView) -> str:
    """The ``BY_MEMBER_LABELS`` value of ``mp``'s Machines and infra machines (and
    ``BY_POOL_LABEL`` of ``mp``)."""
    return _cluster_prefix(mp) + pool_name_label_value(mp.metadata.name or "")


def infra_provider_ids(obj: Obj) -> list[str]:
    """Index an infra pool under each providerID it lists, namespaced."""
    return [f"{_ns(obj)}/{p}" for p in InfraMachinePool(obj).provider_id_list if p]


def machine_inputs(machine: Obj) -> tuple[object, ...]:
    """What a MachinePool reconcile reads from one of its Machines: the metadata and spec
    it applies and compares (finalizers included: a Machine is re-applied with the Machine
    finalizer when it lost it), deletion, the status of the conditions it counts, and the
    Node version it reports (``status.versions``).

    The Machine controller's other status writes (phase, nodeRef, NodeReady, messages,
    drain progress) change none of this, so they do not wake the pool (in a rollout they
    were most of its reconciles).
    """
    view = MachineView(machine)
    meta = view.metadata
    statuses: dict[object, object] = {}
    for cond in view.status.conditions or []:
        if isinstance(cond, dict):
            statuses[cond.get("type")] = cond.get("status")
    return (
        meta.labels,
        meta.annotations,
        meta.owner_references,
        meta.finalizers,
        meta.deletion_timestamp,
        view.spec.raw,
        tuple(statuses.get(t) for t in COUNTED_CONDITIONS),
        view.status.node_info.kubelet_version,
    )


def infra_machine_inputs(obj: Obj) -> tuple[object, ...]:
    """What a MachinePool reconcile reads from an infra machine: its labels (membership),
    spec (providerID) and whether it is outdated (``UpToDate`` False: the core's rollouts
    replace it). Not the provider's other status writes, and not its deletion: that follows
    the Machine's, which the pool already saw (its disappearance still wakes the pool)."""
    meta = obj.get("metadata") or {}
    return (meta.get("labels"), obj.get("spec"), InfraMachine(obj).outdated)


def pool_node_inputs(node: Obj) -> tuple[object, ...]:
    """What the pool reads from a Node with gate ``MachinePoolNodeTaints`` on:
    ``common.node_inputs`` and the labels, annotations and taints it keeps in line with the
    pool's template (``poolnode``), so a Node someone edited is put back at once. The echo of
    its own patch costs one reconcile that finds the Node in line; heartbeats still wake
    nothing."""
    meta = node.get("metadata") or {}
    return (
        *node_inputs(node),
        meta.get("labels"),
        meta.get("annotations"),
        NodeView(node).spec.taints,
    )


def pool_inputs(mp: Obj) -> tuple[object, ...]:
    """What wakes a MachinePool's own reconcile: ``metadata_and_spec`` without
    ``spec.providerIDList``, which only this controller writes (copied from the infra pool,
    whose change already woke it)."""
    spec = MachinePoolView(mp).spec.raw or {}
    written = MachinePoolSpecView.provider_id_list.key
    rest = {k: v for k, v in spec.items() if k != written}
    return (*metadata_and_spec(mp)[:-1], rest)


def referenced_inputs(obj: Obj) -> tuple[object, ...]:
    """What a MachinePool reconcile reads from its bootstrap config or infra pool: all but
    the per-instance detail a provider reports (``status.instances``) and conditions other
    than Ready, which a provider rewrites as instances come and go."""
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    assert isinstance(status, dict)
    kept = {k: v for k, v in status.items() if k not in ("instances", "conditions")}
    ready = [
        cond
        for cond in status.get("conditions") or []
        if isinstance(cond, dict) and cond.get("type") == c.READY_CONDITION
    ]
    return (metadata_and_spec(obj), kept, ready, status.get("deprecated"))


def referenced_readiness(obj: Obj) -> tuple[object, ...]:
    """What of a bootstrap config or infra pool moves its MachinePool's phase, and changes
    about once in the object's life: its data Secret (created, named) and its provisioning.
    A change of these is not paced: a pool waits on it, and no other event of the object
    would share the reconcile it costs."""
    config, pool = BootstrapConfig(obj), InfraMachinePool(obj)
    return (config.data_secret_created, config.data_secret_name, pool.provisioned)


def _keys(pools: Iterable[Obj]) -> list[ObjectKey]:
    return [ObjectKey.of(p) for p in pools]


def cluster_to_pools(pools: Informer) -> Mapper:
    def mapper(cluster: Obj) -> list[ObjectKey]:
        name = ObjectView(cluster).metadata.name or ""
        return _keys(pools.by_index(BY_CLUSTER, f"{_ns(cluster)}/{name}"))

    return mapper


def machine_to_pool(pools: Informer) -> Mapper:
    """A Machine maps to its controlling MachinePool, or by its pool labels."""

    def mapper(machine: Obj) -> list[ObjectKey]:
        owner = controller_owner(machine)
        if owner is not None:
            if owner.get("kind") != "MachinePool" or group_of(str(owner.get("apiVersion"))) != (
                c.CLUSTER_GROUP
            ):
                return []
            return [ObjectKey(_ns(machine), str(owner.get("name")))]
        return list(labels_to_pool(pools)(machine))

    return mapper


def _referrers(pools: Informer, obj: Obj) -> list[ObjectKey]:
    """The controlling MachinePool of ``obj`` and every MachinePool that references it.

    Only pools in this manager's cache count: under a watch filter or a shard ring, configs
    and infra pools may be read unfiltered, and an owner this manager does not hold would
    otherwise cost a reconcile that finds nothing.
    """
    keys: list[ObjectKey] = []
    owner = controller_owner(obj)
    if owner is not None and owner.get("kind") == "MachinePool":
        owner_key = ObjectKey(_ns(obj), str(owner.get("name")))
        if pools.get_key(owner_key) is not None:
            keys.append(owner_key)
    key = ref_key(
        _ns(obj),
        group_of(str(obj.get("apiVersion", ""))),
        str(obj.get("kind")),
        str(ObjectView(obj).metadata.name),
    )
    keys.extend(k for k in _keys(pools.by_index(BY_REF, key)) if k not in keys)
    return keys


def referenced_to_pool(pools: Informer) -> Mapper:
    """A bootstrap config or infra pool maps to its controlling MachinePool and to every
    MachinePool that references it (one not adopted yet, or just created)."""

    def mapper(obj: Obj) -> list[ObjectKey]:
        return _referrers(pools, obj)

    return mapper


def labels_to_pool(pools: Informer) -> Mapper:
    """An object labelled cluster-name and pool-name maps to that MachinePool."""

    def mapper(obj: Obj) -> list[ObjectKey]:
        labels = ObjectView(obj).metadata.labels or {}
        cluster, pool = labels.get(c.CLUSTER_NAME_LABEL), labels.get(c.POOL_NAME_LABEL)
        if not cluster or not pool:
            return []
        return _keys(pools.by_index(BY_POOL_LABEL, f"{_ns(obj)}/{cluster}/{pool}"))

    return mapper


def node_to_pool(
    pools: Informer, cluster: ObjectKey, infra_pools: Callable[[], Iterable[Informer]]
) -> Mapper:
    """A workload Node of ``cluster`` maps to the MachinePool listing its providerID, or
    naming it in nodeRefs (a Node whose providerID changed or was cleared).

    A Node often registers before its pool's providerIDList has it: the infra pool lists the
    instance first, and the core copies the list on its next pass. Such a Node maps to the
    pool of the infra pool (of ``infra_pools()``, the informers of referenced kinds) that
    lists it, so it is neither missed nor sent to every pool of the cluster.
    """
    prefix = f"{cluster.namespace}/{cluster.name}/"

    def mapper(node: Obj) -> list[ObjectKey]:
        keys: list[ObjectKey] = []
        pid = NodeView(node).spec.provider_id
        if pid:
            keys.extend(_keys(pools.by_index(BY_PROVIDER_ID, prefix + str(pid))))
        name = NodeView(node).metadata.name or ""
        keys.extend(k for k in _keys(pools.by_index(BY_NODE_NAME, prefix + name)) if k not in keys)
        if not keys and pid:
            listed = f"{cluster.namespace}/{pid}"
            for informer in infra_pools():
                for infra in informer.by_index(BY_INFRA_PROVIDER_ID, listed):
                    keys.extend(k for k in _referrers(pools, infra) if k not in keys)
        return keys

    return mapper
