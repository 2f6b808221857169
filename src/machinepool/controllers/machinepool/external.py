"""Fetching and adopting the objects a MachinePool references (bootstrap config, infra pool).

Called by the ``bootstrap`` and ``infrastructure`` phases. The version of a reference comes
from the target CRD's contract label; the object is read from a shared informer of its kind,
which also makes the reconciler watch that kind from then on. Adoption makes the MachinePool
the controller owner (with blockOwnerDeletion) and sets the cluster-name label, in one patch
and only when something is missing.
"""

from __future__ import annotations

from machinepool.api import constants as c
from machinepool.api.contract import Referenced
from machinepool.api.views import MachinePoolView, ObjectView, ReferenceView
from machinepool.controllers.common import ref_text
from machinepool.controllers.machinepool.scope import ReferenceProblem, Scope
from machinepool.runtime import Conflict, NotFound, Obj, Resource


async def resolve(scope: Scope, ref: ReferenceView) -> Resource:
    """The served resource of a ``{apiGroup, kind}`` reference; a ReferenceProblem if none."""
    group, kind = ref.api_group or "", ref.kind or ""
    try:
        return await scope.env.resolver.resolve(group, kind)
    except NotFound as exc:
        raise ReferenceProblem(
            f"kind {kind} in API group {group or '<empty>'} is not served: install its CRD or"
            f" fix the reference"
        ) from exc


async def get_and_adopt(scope: Scope, ref: ReferenceView) -> Obj:
    """The referenced object, adopted by the MachinePool.

    Raises ``NotFound`` when it does not exist and ``ReferenceProblem`` when it cannot be used
    (kind not served, or controlled by another owner).
    """
    resource = await resolve(scope, ref)
    informer = await scope.env.watches.watch_referenced_kind(resource)
    name = ref.name or ""
    text = ref_text(resource.kind, scope.namespace, name)
    obj = informer.get(name, scope.namespace)
    if obj is None:
        raise NotFound(404, "NotFound", f"{text} does not exist")
    owner = _other_controller(obj, scope.mp)
    if owner:
        raise ReferenceProblem(
            f"{text} is already controlled by {owner}; reference an object of this"
            f" MachinePool's own"
        )
    return await _adopt(scope, resource, obj)


def _other_controller(obj: Obj, mp: MachinePoolView) -> str:
    uid = mp.metadata.uid
    for ref in ObjectView(obj).metadata.owner_references or []:
        if isinstance(ref, dict) and ref.get("controller") and ref.get("uid") != uid:
            return f"{ref.get('kind')} {ref.get('name')}"
    return ""


def _owner_ref(mp: MachinePoolView) -> Obj:
    return {
        "apiVersion": mp.api_version or f"{c.CLUSTER_GROUP}/{c.V1BETA2}",
        "kind": "MachinePool",
        "name": mp.metadata.name,
        "uid": mp.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


async def _adopt(scope: Scope, resource: Resource, obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    refs = [r for r in meta.get("ownerReferences") or [] if isinstance(r, dict)]
    want = _owner_ref(scope.mp)
    mine = [r for r in refs if r.get("uid") == want["uid"]]
    cluster_name = scope.mp.spec.cluster_name or ""
    labels = meta.get("labels") or {}
    patch: Obj = {"metadata": {"resourceVersion": meta.get("resourceVersion")}}
    if not mine or any(r != want for r in mine) or len(mine) > 1:
        others = [r for r in refs if r.get("uid") != want["uid"]]
        patch["metadata"]["ownerReferences"] = [*others, want]
    if labels.get(c.CLUSTER_NAME_LABEL) != cluster_name:
        patch["metadata"]["labels"] = {c.CLUSTER_NAME_LABEL: cluster_name}
    if len(patch["metadata"]) == 1:
        return obj
    try:
        return await scope.env.client.patch(resource, str(meta.get("name")), patch, scope.namespace)
    except Conflict:
        # The cache was behind; the next reconcile (triggered by that newer version) adopts.
        return obj


def copy_failures(scope: Scope, obj: Referenced) -> None:
    """Carry a referenced object's terminal failure into the MachinePool's v1beta1 status.

    Upstream means to do this but its nil checks are inverted, so it never does; this does
    what was intended, in the words its Machine controller uses for the same copy.
    """
    v1 = scope.mp.status.v1beta1
    if obj.failure_reason:
        v1.failure_reason = obj.failure_reason
    if obj.failure_message:
        v1.failure_message = obj.failure_detected()
