"""Move AWS pools made under the old group (CAPA's ``infrastructure.cluster.x-k8s.io``) to ours.

Our AWSMachinePool and AWSMachine were first served under CAPA's group, so the two
providers could not share a management cluster. ``move_to_group`` rewrites one namespace's
pools under ``infra_aws.GROUP`` without touching AWS: the objects are recreated with the same
names, spec and status (the Auto Scaling group is found again by ``status.asgName``, else the
pool's name, and the launch template by its name, so no instance is replaced), the pool
Machines' and the MachinePools' refs are repointed, and the old objects are released from their
finalizers and deleted. Called by ``machinepool aws move-group``, with the user's credentials
(not the provider's, which may not touch the old group); the steps around it (pause
the Clusters, upgrade the provider, unpause, delete the old CRDs) are in docs/operator-guide.md,
"Moving AWS pools to the new group".
"""

from __future__ import annotations

import contextlib
import dataclasses

from machinepool.api import constants as c
from machinepool.api.infra_aws import AWSMACHINEPOOLS, AWSMACHINES, GROUP, LEGACY_GROUP
from machinepool.api.kinds import CLUSTERS, MACHINE_POOLS, MACHINES
from machinepool.runtime import AlreadyExists, Client, NotFound, Obj, Resource

__all__ = ["LEGACY_AWSMACHINEPOOLS", "LEGACY_AWSMACHINES", "MoveError", "move_to_group"]

LEGACY_AWSMACHINEPOOLS = dataclasses.replace(AWSMACHINEPOOLS, group=LEGACY_GROUP)
LEGACY_AWSMACHINES = dataclasses.replace(AWSMACHINES, group=LEGACY_GROUP)
_KEPT_METADATA = ("name", "namespace", "labels", "annotations")


class MoveError(Exception):
    """A pool that cannot be moved now; the message says what to do first."""


async def move_to_group(client: Client, namespace: str) -> list[str]:
    """Move every old-group AWSMachinePool of ``namespace`` (and its AWSMachines) to ours.

    Every pool's Cluster must be paused (``spec.paused: true``), so that no controller acts on
    a pool while it is half moved. Returns the names of the pools moved; running it again once
    they are moved does nothing.
    """
    try:
        old_pools = (await client.list(LEGACY_AWSMACHINEPOOLS, namespace)).items
    except NotFound:  # the old CRD is gone already
        return []
    for pool in old_pools:
        cluster = (pool["metadata"].get("labels") or {}).get(c.CLUSTER_NAME_LABEL, "")
        obj = await client.get(CLUSTERS, cluster, namespace)
        if not (obj.get("spec") or {}).get("paused"):
            raise MoveError(
                f"Cluster {namespace}/{cluster} of AWSMachinePool {pool['metadata']['name']} is "
                "not paused: kubectl patch cluster "
                f'{cluster} -n {namespace} --type merge -p \'{{"spec":{{"paused":true}}}}\''
            )
    old_machines = (await client.list(LEGACY_AWSMACHINES, namespace)).items
    moved = []
    for pool in old_pools:
        name = pool["metadata"]["name"]
        new_pool = await _copy(client, AWSMACHINEPOOLS, pool, {})
        owned = [m for m in old_machines if _owned_by(m, pool)]
        for machine in owned:
            await _copy(client, AWSMACHINES, machine, {pool["metadata"]["uid"]: new_pool})
        await _repoint_machines(client, namespace, {m["metadata"]["name"] for m in owned})
        await _repoint_machine_pools(client, namespace, name)
        for old in [*owned, pool]:
            resource = LEGACY_AWSMACHINES if old in owned else LEGACY_AWSMACHINEPOOLS
            await _release(client, resource, old)
        moved.append(name)
    return moved


def _owned_by(machine: Obj, pool: Obj) -> bool:
    refs = machine["metadata"].get("ownerReferences") or []
    return any(r.get("uid") == pool["metadata"]["uid"] for r in refs)


async def _copy(client: Client, resource: Resource, old: Obj, new_owners: dict[str, Obj]) -> Obj:
    """``old`` recreated under ``resource``: metadata that carries meaning, spec, then status.

    Owner references to a moved pool (by its old uid) point at its copy in ``new_owners``.
    Finalizers are the new controller's, which it adds itself.
    """
    meta = {k: old["metadata"][k] for k in _KEPT_METADATA if k in old["metadata"]}
    owners = []
    for ref in old["metadata"].get("ownerReferences") or []:
        replacement = new_owners.get(str(ref.get("uid")))
        if replacement is not None:
            ref = {**ref, "apiVersion": replacement["apiVersion"]}
            ref["uid"] = replacement["metadata"]["uid"]
        owners.append(ref)
    meta["ownerReferences"] = owners
    body = {"metadata": meta, "spec": old.get("spec") or {}}
    name, namespace = meta["name"], meta["namespace"]
    try:
        created = await client.create(resource, body, namespace)
    except AlreadyExists:  # copied by an earlier run that stopped half way
        created = await client.get(resource, name, namespace)
    if old.get("status"):
        created = await client.patch(
            resource, name, {"status": old["status"]}, namespace, subresource="status"
        )
    return created


async def _repoint_machines(client: Client, namespace: str, aws_machines: set[str]) -> None:
    for machine in (await client.list(MACHINES, namespace)).items:
        ref = (machine.get("spec") or {}).get("infrastructureRef") or {}
        if (
            ref.get("apiGroup") == LEGACY_GROUP
            and ref.get("kind") == AWSMACHINES.kind
            and ref.get("name") in aws_machines
        ):
            patch = {"spec": {"infrastructureRef": {"apiGroup": GROUP}}}
            await client.patch(MACHINES, machine["metadata"]["name"], patch, namespace)


async def _repoint_machine_pools(client: Client, namespace: str, pool: str) -> None:
    for mp in (await client.list(MACHINE_POOLS, namespace)).items:
        ref = mp["spec"]["template"]["spec"].get("infrastructureRef") or {}
        if (
            ref.get("apiGroup") == LEGACY_GROUP
            and ref.get("kind") == AWSMACHINEPOOLS.kind
            and ref.get("name") == pool
        ):
            patch = {"spec": {"template": {"spec": {"infrastructureRef": {"apiGroup": GROUP}}}}}
            await client.patch(MACHINE_POOLS, mp["metadata"]["name"], patch, namespace)


async def _release(client: Client, resource: Resource, old: Obj) -> None:
    """Delete an old object without its controller (gone): its finalizers first, so it goes
    at once. The default propagation: nothing new names an old uid (Orphan would hold the
    object until the garbage collector has seen the old group)."""
    name, namespace = old["metadata"]["name"], old["metadata"]["namespace"]
    with contextlib.suppress(NotFound):  # gone already
        await client.patch(resource, name, {"metadata": {"finalizers": None}}, namespace)
        await client.delete(resource, name, namespace)
