"""MachinePool Machines: one Machine per infra machine when the provider opts in.

Called by ``controller``: ``reconcile_machines`` after ``infrastructure``. A provider opts in
by setting ``status.infrastructureMachineKind`` on its infra pool; its infra machines carry
the cluster-name and pool-name labels. Machines are written by server-side apply as
``machinepool-controller``, whole in one request (labels, owner, the Machine finalizer and the
infra machine's providerID), and only when they differ from what is wanted. This phase
deletes no Machine, as upstream's does not: a provider removes an instance through its
Machine, and a Machine whose infra machine vanished out of band (or lost the pool's labels)
stays, its InfrastructureReady saying so, for a person to look at (deleting it would drain
its Node and delete the infra machine it names). The Machines'
UpToDate condition is written by the Machine controller in its own status patch (upstream
writes it from the MachinePool controller, a second writer to the same list).
"""

from __future__ import annotations

import asyncio
from typing import Any

from machinepool.api import constants as c
from machinepool.api.constants import pool_name_label_value
from machinepool.api.kinds import MACHINES
from machinepool.api.meta import dig
from machinepool.controllers.common import group_of, is_deleting, set_up_to_date
from machinepool.controllers.machinepool import watches
from machinepool.controllers.machinepool.scope import Scope
from machinepool.runtime import Conflict, NotFound, Obj, Result
from machinepool.runtime.patch import Patcher

FIELD_MANAGER = "machinepool-controller"


def pool_labels(mp: Obj) -> dict[str, str]:
    """The labels that tie Machines and infra machines to ``mp``."""
    return {
        c.POOL_NAME_LABEL: pool_name_label_value(str(dig(mp, "metadata", "name", default=""))),
        c.CLUSTER_NAME_LABEL: str(dig(mp, "spec", "clusterName", default="")),
    }


def _matches(obj: Obj, namespace: str, labels: dict[str, str]) -> bool:
    have = dig(obj, "metadata", "labels", default={})
    return dig(obj, "metadata", "namespace") == namespace and all(
        have.get(k) == v for k, v in labels.items()
    )


def _controlled_elsewhere(machine: Obj, mp: Obj) -> bool:
    uid = dig(mp, "metadata", "uid")
    refs = dig(machine, "metadata", "ownerReferences", default=[])
    return any(isinstance(r, dict) and r.get("controller") and r.get("uid") != uid for r in refs)


def desired_machine(mp: Obj, infra_machine: Obj, node: Obj | None) -> Obj:
    """The Machine that mirrors ``infra_machine`` (pure; unit-tested)."""
    meta = mp.get("metadata") or {}
    template_meta = dig(mp, "spec", "template", "metadata", default={})
    labels = {
        **c.inherited_labels(meta.get("labels")),
        **(template_meta.get("labels") or {}),
        **pool_labels(mp),
    }
    spec: Obj = {
        "clusterName": dig(mp, "spec", "clusterName", default=""),
        "bootstrap": {"dataSecretName": ""},
        "infrastructureRef": {
            "apiGroup": group_of(str(infra_machine.get("apiVersion", ""))),
            "kind": infra_machine.get("kind", ""),
            "name": dig(infra_machine, "metadata", "name"),
        },
    }
    # The providerID and failure domain the Machine controller would copy from the infra
    # machine, sent in the create so the Machine needs no spec write of its own.
    provider_id = dig(infra_machine, "spec", "providerID")
    if provider_id:
        spec["providerID"] = str(provider_id)
    failure_domain = dig(infra_machine, "spec", "failureDomain")
    if failure_domain:
        spec["failureDomain"] = str(failure_domain)
    version = dig(node, "status", "nodeInfo", "kubeletVersion")
    if version:
        spec["version"] = str(version)
    # Not upstream: the pool's deletion limits and minReadySeconds travel with each Machine so
    # that draining a pool Machine honours the pool's nodeDrainTimeoutSeconds.
    template_spec = dig(mp, "spec", "template", "spec", default={})
    for key in ("deletion", "minReadySeconds"):
        if template_spec.get(key) is not None:
            spec[key] = template_spec[key]
    return {
        "apiVersion": f"{c.CLUSTER_GROUP}/{c.V1BETA2}",
        "kind": "Machine",
        "metadata": {
            "name": dig(infra_machine, "metadata", "name"),
            "namespace": meta.get("namespace"),
            "labels": labels,
            "annotations": dict(template_meta.get("annotations") or {}),
            # The Machine controller's finalizer, in the create as upstream's MachineSet
            # does: one request instead of a create and a patch for each new Machine.
            "finalizers": [c.MACHINE_FINALIZER],
            "ownerReferences": [
                {
                    "apiVersion": mp.get("apiVersion", f"{c.CLUSTER_GROUP}/{c.V1BETA2}"),
                    "kind": "MachinePool",
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def _contains(have: Any, want: Any) -> bool:
    """Whether ``have`` already holds everything in ``want`` (what apply would not change).

    An empty map or list wanted is held by an absent one: the apiserver drops empty
    ``annotations: {}`` on write, so comparing them strictly would re-apply every Machine on
    every pass, and each apply would wake the MachinePool again.
    """
    if have is None and want in ({}, []):
        return True
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_contains(have.get(k), v) for k, v in want.items())
    if isinstance(want, list) and all(isinstance(w, str) for w in want):
        # A set (finalizers): others may add theirs, and apply merges rather than replaces.
        return isinstance(have, list) and set(want) <= set(have)
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(have) == len(want)
            and all(_contains(h, w) for h, w in zip(have, want, strict=True))
        )
    return bool(have == want)


async def reconcile_machines(scope: Scope) -> Result:
    """Keep one pool Machine per infrastructure machine the provider reports."""
    r = scope.reconciler
    labels = pool_labels(scope.mp)
    member_key = watches.pool_member_key(scope.mp)
    scope.machines = [
        m
        for m in r.machines.by_index(watches.BY_MEMBER_LABELS, member_key)
        if _matches(m, scope.namespace, labels) and not _controlled_elsewhere(m, scope.mp)
    ]
    kind = dig(scope.infra_pool, "status", "infrastructureMachineKind")
    if not kind or scope.infra_pool is None or is_deleting(scope.mp):
        return Result()
    resource = await r.client.resource(str(scope.infra_pool.get("apiVersion", "")), str(kind))
    informer = await r.watch_infra_machine_kind(resource)
    infra_machines = [
        m
        for m in informer.by_index(watches.BY_MEMBER_LABELS, member_key)
        if _matches(m, scope.namespace, labels)
    ]
    by_name = {str(dig(m, "metadata", "name")): m for m in scope.machines}
    wanted: list[tuple[Obj | None, Obj]] = []
    for infra_machine in infra_machines:
        existing = by_name.get(str(dig(infra_machine, "metadata", "name")))
        if existing is not None and is_deleting(existing):
            continue
        pid = dig(infra_machine, "spec", "providerID")
        node = scope.nodes.by_provider_id(str(pid)) if pid and scope.nodes else None
        want = desired_machine(scope.mp, infra_machine, node)
        if (
            existing is not None
            and not r.machines_up_to_date
            and not dig(existing, "spec", "version")
        ):
            # A Machine created before its Node joined gets its version from our Machine
            # controller, with the nodeRef the same Node brings (one spec write and one status
            # write that observes it); applied from here as well, the two would race to write
            # the same value, and the Machine's status would need another write for the
            # generation. Beside upstream, whose Machine controller does not, it is ours.
            want["spec"].pop("version", None)
        if existing is None or not _contains(existing, want):
            wanted.append((existing, want))
    # Independent writes: sent together, so a pool of new instances costs one round trip.
    outcomes = await asyncio.gather(
        *(r.client.apply(MACHINES, want, field_manager=FIELD_MANAGER) for _, want in wanted),
        return_exceptions=True,
    )
    errors: list[str] = []
    causes: list[Exception] = []
    for (existing, want), applied in zip(wanted, outcomes, strict=True):
        if isinstance(applied, Exception):
            errors.append(f"failed to apply Machine {want['metadata']['name']}: {applied}")
            causes.append(applied)
        elif isinstance(applied, BaseException):
            raise applied
        elif existing is None:
            scope.machines.append(applied)
        else:
            scope.machines[scope.machines.index(existing)] = applied
    if errors:
        raise ExceptionGroup("; ".join(errors), causes)
    return Result()


async def set_machines_up_to_date(scope: Scope) -> Result:
    """UpToDate on every pool Machine, as upstream's MachinePool controller writes it; only
    beside upstream, whose Machine controller does not (ours writes it in its own status)."""
    client = scope.reconciler.client
    stale = []
    for i, machine in enumerate(scope.machines):
        updated = {**machine, "status": dict(machine.get("status") or {})}
        updated["status"]["conditions"] = [
            dict(x) for x in updated["status"].get("conditions") or []
        ]
        set_up_to_date(updated)
        if updated["status"]["conditions"] != dig(machine, "status", "conditions", default=[]):
            stale.append((i, machine, updated))
    outcomes = await asyncio.gather(
        *(Patcher(client, MACHINES, machine).patch(updated) for _, machine, updated in stale),
        return_exceptions=True,
    )
    errors: list[Exception] = []
    for (i, _, _), outcome in zip(stale, outcomes, strict=True):
        if isinstance(outcome, (NotFound, Conflict)):
            continue  # gone, or changed since our copy: its own event brings the pool back
        if isinstance(outcome, Exception):
            errors.append(outcome)
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            scope.machines[i] = outcome
    if errors:
        raise ExceptionGroup("failed to set UpToDate on pool Machines", errors)
    return Result()
