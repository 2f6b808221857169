"""The delete phase: remove what a deleted MachinePool owns, then let it go.

Called by ``controller`` when the MachinePool has a deletionTimestamp (and not because
``clusterctl move`` took it to another management cluster: then only the finalizer goes).
Deletes the bootstrap
config and the infra pool and waits until both are gone (their informers' delete events bring
the MachinePool back); then, unless ``nodeDeletionTimeoutSeconds`` has passed since deletion
started, deletes the Nodes in ``status.nodeRefs`` whose providerID is no longer in
``spec.providerIDList`` (as upstream does: the Nodes of instances still listed are left to the
provider, whose instances are going with the infra pool); then drops the finalizer.
"""

from __future__ import annotations

from datetime import timedelta

from machinepool.api import constants as c
from machinepool.api.contract import BootstrapConfig, InfraMachinePool
from machinepool.api.meta import deleted_for_move, parse_time
from machinepool.api.views import MachinePoolView, ObjectView, ReferenceView
from machinepool.controllers.common import now, ref_text
from machinepool.controllers.machinepool import external, noderefs
from machinepool.controllers.machinepool.scope import ReferenceProblem, Scope
from machinepool.runtime import Result


def node_deletion_timed_out(mp: MachinePoolView) -> bool:
    """Whether ``nodeDeletionTimeoutSeconds`` (non-zero) passed since deletion began (pure)."""
    stamp = mp.metadata.deletion_timestamp
    timeout = mp.spec.template.spec.deletion.node_deletion_timeout_seconds
    if not stamp or not isinstance(timeout, int) or timeout == 0:
        return False
    try:
        started = parse_time(str(stamp))
    except ValueError:
        return False
    return started + timedelta(seconds=timeout) < now()


async def reconcile_delete(scope: Scope) -> Result:
    """Take the pool apart: its Machines, its bootstrap and infrastructure objects, the Nodes
    it no longer backs; then let it go."""
    mp = scope.mp
    if deleted_for_move(mp.raw):
        # clusterctl move: the pool lives on in the target cluster with what it owns.
        _release(mp)
        scope.deleting_message = "Moved by clusterctl"
        return Result()
    tspec = mp.spec.template.spec
    refs = [(tspec.bootstrap.config_ref, False), (tspec.infrastructure_ref, True)]
    remaining: list[str] = []
    for ref, is_infra in refs:
        if not ref.name:
            continue
        if await _delete_ref(scope, ref, is_infra):
            remaining.append(ref_text(str(ref.kind), scope.namespace, ref.name))
    if remaining:
        scope.deleting_message = "Waiting for " + " and ".join(remaining) + " to be deleted"
        return Result()
    if node_deletion_timed_out(mp):
        scope.deleting_message = "Node deletion timeout passed; leaving Nodes behind"
    else:
        scope.deleting_message = "Deleting retired Nodes"
        listed = set(mp.spec.provider_id_list or [])
        await noderefs.delete_retired_nodes(scope, mp.status.node_refs or [], listed)
    _release(mp)
    scope.deleting_message = "Deletion completed"
    return Result()


def _release(mp: MachinePoolView) -> None:
    """Drop our finalizer: the MachinePool may go."""
    finalizers = mp.metadata.finalizers or []
    mp.metadata.finalizers = [f for f in finalizers if f != c.MACHINE_POOL_FINALIZER]


async def _delete_ref(scope: Scope, ref: ReferenceView, is_infra: bool) -> bool:
    """Delete the referenced object; whether it still exists."""
    try:
        resource = await external.resolve(scope, ref)
    except ReferenceProblem:
        return False  # its kind is not served, so no such object can exist
    informer = await scope.env.watches.watch_referenced_kind(resource)
    obj = informer.get(ref.name, scope.namespace)
    if obj is None:
        if is_infra:
            scope.infra_pool_not_found = True
        else:
            scope.bootstrap_config_not_found = True
        return False
    if is_infra:
        infra = scope.infra_pool = InfraMachinePool(obj)
        if infra.replicas is not None:
            scope.mp.status.replicas = infra.replicas
    else:
        scope.bootstrap_config = BootstrapConfig(obj)
    if not ObjectView(obj).metadata.deletion_timestamp:
        await scope.env.client.delete(
            resource, ref.name, scope.namespace, uid=ObjectView(obj).metadata.uid
        )
    return True
