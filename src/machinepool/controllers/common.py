"""Helpers both core controllers share: resources of the core kinds, Node readiness, owner
references and conditions. Our own kinds are read and written through their typed views
(``machinepool.api.views``); Nodes and owner references, through ``machinepool.api.meta``'s
``dig``. Reference resolution is ``machinepool.runtime.kube.resolver``'s.

Used by ``controllers.machinepool`` and ``controllers.machine``; kept here so those sibling
packages never import each other.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime

from machinepool.api import constants as c
from machinepool.api.conditions import Condition, set_condition
from machinepool.api.meta import parse_time
from machinepool.api.views import ClusterView, MachineView, NodeView, ObjectView
from machinepool.runtime import (
    Client,
    ClusterCache,
    ContractResolver,
    EventRecorder,
    Informer,
    Obj,
    ObjectKey,
)

__all__ = [
    "CoreEnv",
    "WorkloadNodes",
    "ensure_cluster_owner",
    "group_of",
    "is_deleting",
    "is_paused",
    "node_available",
    "node_conditions",
    "node_inputs",
    "node_ready",
    "node_ready_since",
    "node_version",
    "now",
    "ref_text",
    "set_paused_condition",
]


@dataclass(frozen=True)
class CoreEnv:
    """What every reconcile of a core controller uses, the same for all of them: each
    package's ``scope.Env`` adds its informers, watches and gates. A scope holds this, never
    its reconciler."""

    client: Client
    cluster_cache: ClusterCache
    resolver: ContractResolver
    recorder: EventRecorder


def now() -> datetime:
    return datetime.now(UTC)


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def is_deleting(obj: Obj) -> bool:
    """Whether ``obj`` (raw, any of our kinds) is being deleted; a view says ``.deleting``."""
    return ObjectView(obj).deleting


def ensure_cluster_owner(obj: ObjectView, cluster_name: str | None, cluster: ClusterView) -> None:
    """The cluster-name label (``cluster_name``: ``obj``'s ``spec.clusterName``) and a
    (non-controller) ownerReference to ``cluster``, as upstream's MachinePool and
    MachineHealthCheck reconcilers set them (pure)."""
    meta = obj.metadata
    labels = meta.labels
    if not isinstance(labels, dict):
        labels = meta.labels = {}
    labels[c.CLUSTER_NAME_LABEL] = str(cluster_name)
    api_version = cluster.api_version
    wanted = {
        "apiVersion": f"{c.CLUSTER_GROUP}/{c.V1BETA2}" if api_version is None else api_version,
        "kind": "Cluster",
        "name": cluster.metadata.name,
        "uid": cluster.metadata.uid,
    }
    refs = list(meta.owner_references or [])
    # Matched by group, kind and name, as upstream's EnsureOwnerRef does: a Cluster re-created
    # under the same name replaces its stale reference instead of adding a second one.
    same = [i for i, r in enumerate(refs) if isinstance(r, dict) and _same_owner(r, wanted)]
    if not same:
        meta.owner_references = [*refs, wanted]
    elif {k: refs[same[0]].get(k) for k in wanted} != wanted:
        refs[same[0]] = {**refs[same[0]], **wanted}
        meta.owner_references = refs


def _same_owner(ref: Obj, wanted: Obj) -> bool:
    def group(api_version: object) -> str:
        return str(api_version or "").rpartition("/")[0]

    return (
        group(ref.get("apiVersion")) == group(wanted["apiVersion"])
        and ref.get("kind") == wanted["kind"]
        and ref.get("name") == wanted["name"]
    )


def _cluster_paused(cluster: ClusterView | None) -> bool:
    return cluster is not None and bool(cluster.spec.paused)


def _annotated_paused(obj: ObjectView) -> bool:
    return c.PAUSED_ANNOTATION in (obj.metadata.annotations or {})


def is_paused(obj: ObjectView, cluster: ClusterView | None) -> bool:
    """Whether ``obj`` is paused: its Cluster's ``spec.paused``, or its own paused annotation."""
    return _cluster_paused(cluster) or _annotated_paused(obj)


def set_paused_condition(
    obj: ObjectView, conditions: list[Condition], cluster: ClusterView | None, kind: str
) -> bool:
    """Set the Paused condition in ``conditions`` (``obj``'s ``status.conditions``) from
    ``cluster.spec.paused`` and the paused annotation; True when the reconcile must stop
    here: paused. A missing Cluster (``None``) pauses nothing.

    Upstream's ``paused.EnsurePausedCondition`` also stops when the condition just turned
    NotPaused (or only its observedGeneration moved), to write it first; here the reconcile
    carries on and writes it with the rest of its status, in the same patch: a status
    request saved for every new object and every generation change, the same status in the
    end (issue 18)."""
    paused = is_paused(obj, cluster)
    generation = obj.metadata.generation
    if paused:
        why = ", ".join(  # upstream's words, both reasons when both hold
            text
            for holds, text in (
                (_cluster_paused(cluster), "Cluster spec.paused is set to true"),
                (_annotated_paused(obj), f"{kind} has the {c.PAUSED_ANNOTATION} annotation"),
            )
            if holds
        )
        set_condition(conditions, c.PAUSED_CONDITION, True, c.PAUSED_REASON, why, generation)
    else:
        set_condition(conditions, c.PAUSED_CONDITION, False, c.NOT_PAUSED_REASON, "", generation)
    return paused


def ref_text(kind: str, namespace: str, name: str) -> str:
    """How messages name an object: ``TestMachinePool ns/name``."""
    return f"{kind} {ObjectKey(namespace, name)}"


def node_conditions(node: Obj | None) -> list[Obj]:
    """A Node's conditions as stored; none for a Node not found."""
    return (NodeView(node).status.conditions or []) if node is not None else []


def node_version(node: Obj | None) -> str | None:
    """The Node's kubelet version (``status.nodeInfo.kubeletVersion``); none for a Node not
    found."""
    return NodeView(node).status.node_info.kubelet_version if node is not None else None


def node_ready_since(node: Obj | None) -> datetime | None:
    """When the Node's Ready condition became True, or ``None`` when it is not Ready."""
    for cond in node_conditions(node):
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            if cond.get("status") != "True":
                return None
            stamp = cond.get("lastTransitionTime")
            try:
                return parse_time(str(stamp)) if stamp else datetime.min.replace(tzinfo=UTC)
            except ValueError:
                return datetime.min.replace(tzinfo=UTC)
    return None


def node_ready(node: Obj | None) -> bool:
    return node_ready_since(node) is not None


def node_available(node: Obj | None, min_ready_seconds: int, at: datetime) -> bool:
    """Ready for at least ``min_ready_seconds`` at ``at`` (ready is enough when it is 0)."""
    since = node_ready_since(node)
    if since is None:
        return False
    return min_ready_seconds <= 0 or (at - since).total_seconds() >= min_ready_seconds


def node_inputs(node: Obj) -> tuple[object, ...]:
    """What the core controllers count from a Node (``Controller.watch``'s ``inputs``): its
    identity and providerID, when it turned Ready, and its kubelet version.

    Not its status heartbeats (at 10,000 Nodes with kubelet's 5-minute status period they
    alone would wake 33 reconciles a second), nor the marks the core writes itself (the
    ownership annotations, the removed uninitialized taint, the cordon): those are read
    when a reconcile runs for any other reason, and a Node arrives with them on its add.
    """
    ready = None
    for cond in node_conditions(node):
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            ready = (cond.get("status"), cond.get("lastTransitionTime"))
    return (
        NodeView(node).metadata.uid,
        NodeView(node).spec.provider_id,
        ready,
        NodeView(node).status.node_info.kubelet_version,
    )


NODE_BY_PROVIDER_ID = "machinepool.core/node-provider-id"


class WorkloadNodes:
    """A workload cluster's Nodes, found by name or by exact ``spec.providerID``.

    Both lookups go through the informer's store and an index, never a scan: with thousands
    of Nodes per cluster, a scan per reconcile is what a pool's reconcile would spend its
    time on. The index is added on first use (informers are shared, and rebuilt when the
    cluster's kubeconfig changes, so every view makes sure it is there).
    """

    def __init__(self, informer: Informer) -> None:
        with contextlib.suppress(ValueError):  # already indexed
            informer.add_indexer(NODE_BY_PROVIDER_ID, _node_provider_id)
        self._informer = informer

    def by_name(self, name: str) -> Obj | None:
        return self._informer.get(name)

    def by_provider_id(self, provider_id: str) -> Obj | None:
        found = self._informer.by_index(NODE_BY_PROVIDER_ID, provider_id)
        return found[0] if found else None


def _node_provider_id(node: Obj) -> list[str]:
    pid = NodeView(node).spec.provider_id
    return [str(pid)] if pid else []


def set_up_to_date(machine: MachineView) -> None:
    """UpToDate: True, or False while the Machine is being deleted (upstream's values for
    MachinePool Machines: the provider replaces outdated instances, so a live one is current).
    """
    conditions = machine.status.edit_conditions()
    generation = machine.metadata.generation
    if machine.deleting:
        set_condition(
            conditions,
            c.UP_TO_DATE_CONDITION,
            False,
            c.NOT_UP_TO_DATE_REASON,
            "Machine is being deleted",
            generation,
        )
    else:
        set_condition(conditions, c.UP_TO_DATE_CONDITION, True, c.UP_TO_DATE_REASON, "", generation)
