"""The node-refs phase: match workload Nodes to the pool's providerIDList, count ready and
available replicas, label the Nodes as the pool's, and delete Nodes the provider retired.

Called by ``controller`` after ``machines``. Matching is by exact string equality of
``Node.spec.providerID`` with a providerIDList entry, so pools whose IDs share a suffix
(``.../vmss-a/virtualMachines/1`` and ``.../vmss-aa/virtualMachines/1``) never mix.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from datetime import datetime

from machinepool.api import constants as c
from machinepool.api.conditions import set_v1beta1_condition
from machinepool.api.views import MachinePoolView, NodeView
from machinepool.controllers.common import (
    WorkloadNodes,
    node_available,
    node_ready,
    node_ready_since,
    now,
)
from machinepool.controllers.machinepool.scope import Scope, set_v1beta1_counters
from machinepool.controllers.poolnode import is_uninitialized_taint, pool_node_changes
from machinepool.runtime import (
    NODES,
    Conflict,
    ExpectedError,
    NotFound,
    Obj,
    Result,
    get_logger,
)

log = get_logger(__name__)
WAIT_FOR_REPLICAS = 30.0
"""Seconds between checks while replicas are not all ready (upstream's interval)."""


@dataclass
class NodeRefs:
    """Nodes matched to a providerIDList, in list order."""

    refs: list[Obj] = field(default_factory=list)
    ready: int = 0
    available: int = 0


def match_nodes(
    provider_ids: list[str], node_map: dict[str, Obj], min_ready_seconds: int, at: datetime
) -> NodeRefs:
    """Walk ``provider_ids`` in order and match Nodes by exact providerID (pure)."""
    result = NodeRefs()
    for pid in provider_ids:
        node = node_map.get(pid) if pid else None
        if node is None:
            continue
        if node_ready(node):
            result.ready += 1
            if node_available(node, min_ready_seconds, at):
                result.available += 1
        result.refs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": NodeView(node).metadata.name,
                "uid": NodeView(node).metadata.uid,
            }
        )
    return result


def desired_node_patch(node: Obj, mp: MachinePoolView, pool_metadata: bool = False) -> Obj | None:
    """The merge patch that marks ``node`` as ``mp``'s, or ``None`` if it already is (pure).

    Adds the four ownership annotations and drops the uninitialized taint; with
    ``pool_metadata`` (gate ``MachinePoolNodeTaints``) it also keeps the template's taints and
    its labels in upstream's Node label domains there (``poolnode``). Every other label,
    annotation and taint is kept.
    """
    want = {
        c.NODE_CLUSTER_NAME_ANNOTATION: mp.spec.cluster_name or "",
        c.NODE_CLUSTER_NAMESPACE_ANNOTATION: mp.metadata.namespace or "",
        c.NODE_OWNER_KIND_ANNOTATION: "MachinePool",
        c.NODE_OWNER_NAME_ANNOTATION: mp.metadata.name or "",
    }
    have = NodeView(node).metadata.annotations or {}
    meta: Obj = {}
    annotations: Obj = {k: v for k, v in want.items() if have.get(k) != v}
    taints = NodeView(node).spec.taints or []
    kept = [t for t in taints if not is_uninitialized_taint(t)]
    if pool_metadata:
        template = mp.spec.template
        pool = pool_node_changes(node, kept, template.spec.taints, template.metadata.labels)
        annotations.update(pool.annotations)
        if pool.labels:
            meta["labels"] = pool.labels
        kept = pool.taints if pool.taints is not None else kept
    if annotations:
        meta["annotations"] = annotations
    patch: Obj = {}
    if kept != taints:
        # Taints are a list a merge patch replaces whole: guard it with the resourceVersion.
        meta["resourceVersion"] = NodeView(node).metadata.resource_version
        patch["spec"] = {"taints": kept}
    if meta:
        patch["metadata"] = meta
    return patch or None


def _by_provider_id(nodes: WorkloadNodes, provider_ids: list[str]) -> dict[str, Obj]:
    found = {pid: nodes.by_provider_id(pid) for pid in provider_ids}
    return {pid: node for pid, node in found.items() if node is not None}


def _refs_still_valid(scope: Scope) -> bool:
    """Whether every nodeRef still names the same Node, and that Node's instance is still
    listed. A provider that swaps an instance in one step leaves the counts as they were;
    only the second check sends the pool down the full path to retire the old Node."""
    nodes = scope.nodes
    if nodes is None:
        return False
    listed = set(scope.mp.spec.provider_id_list or [])
    for ref in scope.mp.status.node_refs or []:
        node = nodes.by_name(str(ref.get("name")))
        if node is None or NodeView(node).metadata.uid != ref.get("uid"):
            return False
        if NodeView(node).spec.provider_id not in listed:
            return False
    return True


async def reconcile_node_refs(scope: Scope) -> Result:
    """Match provider IDs to workload Nodes and count the Ready and available ones."""
    mp = scope.mp
    replicas = mp.status.replicas or 0
    ready = mp.status.v1beta1.ready_replicas or 0
    node_refs = mp.status.node_refs or []
    conditions = mp.status.v1beta1.edit_conditions()
    available = mp.status.v1beta1.available_replicas or 0
    # Unlike upstream, a pool with ready-but-not-yet-available Nodes takes the full path, so
    # the minReadySeconds requeue actually updates availableReplicas.
    if (
        replicas == ready
        and available == ready
        and len(node_refs) == ready
        and _refs_still_valid(scope)
    ):
        set_v1beta1_condition(conditions, c.V1BETA1_REPLICAS_READY_CONDITION, True)
        # status.replicas may have caught up since the counters were written (a scale-down
        # whose list shrank first): keep unavailable = replicas - available true here too.
        set_v1beta1_counters(mp, ready=ready, available=available, unavailable=0)
        await patch_nodes(scope, node_refs)  # only Nodes still missing our marks
        return requeue_for_min_ready_seconds(scope)
    provider_ids = list(mp.spec.provider_id_list or [])
    if not provider_ids and mp.spec.replicas != 0:
        return Result()  # no instances listed yet
    await delete_retired_nodes(scope, node_refs, set(provider_ids))
    if scope.nodes is None:
        if not provider_ids and not node_refs:
            return Result()  # an empty pool: nothing to match, nothing to retire
        raise ExpectedError(f"cannot read the Nodes of workload cluster {scope.cluster_key}")
    min_ready = mp.spec.template.spec.min_ready_seconds or 0
    found = match_nodes(provider_ids, _by_provider_id(scope.nodes, provider_ids), min_ready, now())
    if not found.refs and provider_ids:
        return Result()  # a Node event brings us back when one registers
    set_v1beta1_counters(
        mp, ready=found.ready, available=found.available, unavailable=replicas - found.available
    )
    if found.refs != node_refs:
        # Left out when empty, as upstream's omitempty list is.
        mp.status.node_refs = found.refs or None
        names = ", ".join(str(r["name"]) for r in found.refs[:10])
        more = f" and {len(found.refs) - 10} more" if len(found.refs) > 10 else ""
        await scope.env.recorder.event(
            mp.raw,
            "Normal",
            "SuccessfulSetNodeRefs",
            f"Set {len(found.refs)} nodeRefs: {names}{more}",
        )
    await patch_nodes(scope, found.refs)
    if replicas != found.ready or len(found.refs) != found.ready:
        set_v1beta1_condition(
            conditions,
            c.V1BETA1_REPLICAS_READY_CONDITION,
            False,
            c.V1BETA1_WAITING_FOR_REPLICAS_READY_REASON,
            f"{found.ready} of {replicas} replicas ready, {len(found.refs)} Nodes matched",
            c.SEVERITY_INFO,
        )
        return Result(requeue_after=WAIT_FOR_REPLICAS)
    set_v1beta1_condition(conditions, c.V1BETA1_REPLICAS_READY_CONDITION, True)
    return requeue_for_min_ready_seconds(scope)


def requeue_for_min_ready_seconds(scope: Scope) -> Result:
    """Come back when the next ready-but-not-yet-available Node turns available.

    Nodes send no event when minReadySeconds pass, so this is the one timer the count needs.
    """
    mp = scope.mp
    min_ready = mp.spec.template.spec.min_ready_seconds or 0
    if min_ready <= 0 or scope.nodes is None or scope.has_machine_pool_machines:
        return Result()
    at = now()
    waits: list[float] = []
    for pid in mp.spec.provider_id_list or []:
        since = node_ready_since(scope.nodes.by_provider_id(str(pid)))
        if since is None:
            continue
        remaining = min_ready - (at - since).total_seconds()
        if remaining > 0:
            waits.append(min(float(min_ready), max(1.0, math.ceil(remaining))))
    return Result(requeue_after=min(waits)) if waits else Result()


async def delete_retired_nodes(scope: Scope, node_refs: list[Obj], provider_ids: set[str]) -> None:
    """Delete the Nodes in ``node_refs`` whose providerID left ``provider_ids`` (a provider
    retires an instance by dropping its ID); Nodes without a providerID are left alone.

    Called on every pass of the node-refs phase and once more when the MachinePool is deleted.
    """
    refs = [r for r in node_refs if isinstance(r, dict) and r.get("name")]
    if not refs:
        return
    r = scope.env
    nodes = await r.cluster_cache.get_informer(scope.cluster_key, NODES)
    for ref in refs:
        node = nodes.get(str(ref["name"]))
        if node is None:
            continue
        pid = NodeView(node).spec.provider_id
        if not pid or pid in provider_ids:
            continue
        if await r.cluster_cache.delete_once(scope.cluster_key, NODES, node):
            log.info(
                "deleted a Node the pool no longer lists",
                node=str(ref["name"]),
                machinepool=str(scope.key),
            )


def _left_to_machines(scope: Scope) -> set[str]:
    """providerIDs of the Nodes the Machine controller marks: those of the live, unpaused
    Machines this pool controls, while our Machine controller runs (not beside upstream).

    It writes everything the pool would there, and drops the taint too, in one patch per
    Node; the pool writing its share as well would be a second patch, or a lost lock when
    both read the Node before either wrote."""
    if scope.env.machines_up_to_date:
        return set()
    uid = scope.mp.metadata.uid
    return {
        m.provider_id
        for m in scope.machine_facts()
        if m.provider_id and m.controller_uid == uid and not m.deleting and not m.paused
    }


async def patch_nodes(scope: Scope, refs: list[Obj]) -> None:
    r = scope.env
    left = _left_to_machines(scope)
    due: list[tuple[Obj, Obj]] = []
    for ref in refs:
        node = scope.nodes.by_name(str(ref.get("name"))) if scope.nodes else None
        if node is None or str(NodeView(node).spec.provider_id) in left:
            continue
        patch = desired_node_patch(node, scope.mp, r.pool_node_taints)
        if patch is not None:
            due.append((node, patch))
    outcomes = await asyncio.gather(
        *(_patch_node(scope, node, patch) for node, patch in due),
        return_exceptions=True,
    )
    failed: BaseException | None = None
    for (node, _), outcome in zip(due, outcomes, strict=True):
        name = NodeView(node).metadata.name
        if isinstance(outcome, BaseException) and not isinstance(outcome, NotFound):
            await r.recorder.event(
                scope.mp.raw,
                "Warning",
                "FailedSetNodeRef",
                f"Failed to patch Node {name}: {outcome}",
            )
            failed = failed or outcome
    if failed is not None:
        raise failed


async def _patch_node(scope: Scope, node: Obj, patch: Obj) -> None:
    """Patch a Node (once for this view of it: ``ClusterCache.patch_once``); on a stale
    resourceVersion re-read it once and patch what is still due."""
    cache = scope.env.cluster_cache
    try:
        await cache.patch_once(scope.cluster_key, NODES, node, patch)
    except Conflict:
        client = await cache.get_client(scope.cluster_key)
        name = str(NodeView(node).metadata.name)
        again = desired_node_patch(
            await client.get(NODES, name), scope.mp, scope.env.pool_node_taints
        )
        if again is not None:
            await client.patch(NODES, name, again)
