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
import json
import time
from typing import Any

from machinepool.api import constants as c
from machinepool.api.constants import pool_name_label_value
from machinepool.api.contract import InfraMachine
from machinepool.api.kinds import MACHINES
from machinepool.api.views import MachinePoolView, MachineView, ObjectView
from machinepool.controllers.common import group_of, node_version, set_up_to_date
from machinepool.controllers.machinepool import watches
from machinepool.controllers.machinepool.scope import Scope
from machinepool.runtime import Conflict, NotFound, Obj, Result
from machinepool.runtime.kube.patch import Patcher

FIELD_MANAGER = "machinepool-controller"

APPLIED_TTL_SECONDS = 60.0
"""How long a Machine this controller created stands in for the cache's copy it waits for."""


def pool_labels(mp: MachinePoolView) -> dict[str, str]:
    """The labels that tie Machines and infra machines to ``mp``."""
    return {
        c.POOL_NAME_LABEL: pool_name_label_value(mp.metadata.name or ""),
        c.CLUSTER_NAME_LABEL: mp.spec.cluster_name or "",
    }


def desired_machine(mp: MachinePoolView, infra_machine: InfraMachine, node: Obj | None) -> Obj:
    """The Machine that mirrors ``infra_machine`` (pure; unit-tested)."""
    meta = mp.metadata
    template = mp.spec.template
    labels = {
        **c.inherited_labels(meta.labels),
        **(template.metadata.labels or {}),
        **pool_labels(mp),
    }
    infra = infra_machine.raw
    spec: Obj = {
        "clusterName": mp.spec.cluster_name or "",
        "bootstrap": {"dataSecretName": ""},
        "infrastructureRef": {
            "apiGroup": group_of(str(infra.get("apiVersion", ""))),
            "kind": infra.get("kind", ""),
            "name": infra_machine.name,
        },
    }
    # The providerID and failure domain the Machine controller would copy from the infra
    # machine, sent in the create so the Machine needs no spec write of its own.
    if infra_machine.provider_id:
        spec["providerID"] = infra_machine.provider_id
    if infra_machine.failure_domain:
        spec["failureDomain"] = infra_machine.failure_domain
    version = node_mark(node)
    if version:
        spec["version"] = str(version)
    # Not upstream: the pool's deletion limits and minReadySeconds travel with each Machine so
    # that draining a pool Machine honours the pool's nodeDrainTimeoutSeconds.
    template_spec = template.spec
    if template_spec.deletion.raw is not None:
        spec["deletion"] = template_spec.deletion.raw
    if template_spec.min_ready_seconds is not None:
        spec["minReadySeconds"] = template_spec.min_ready_seconds
    return {
        "apiVersion": f"{c.CLUSTER_GROUP}/{c.V1BETA2}",
        "kind": "Machine",
        "metadata": {
            "name": infra_machine.name,
            "namespace": meta.namespace,
            "labels": labels,
            "annotations": dict(template.metadata.annotations or {}),
            # The Machine controller's finalizer, in the create as upstream's MachineSet
            # does: one request instead of a create and a patch for each new Machine.
            "finalizers": [c.MACHINE_FINALIZER],
            "ownerReferences": [
                {
                    "apiVersion": mp.api_version or f"{c.CLUSTER_GROUP}/{c.V1BETA2}",
                    "kind": "MachinePool",
                    "name": meta.name,
                    "uid": meta.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def template_mark(mp: MachinePoolView) -> str:
    """What ``desired_machine`` reads from ``mp``, as one comparable value (held to what it
    reads by ``tests/unit/test_core_machine_marks.py``)."""
    meta, template = mp.metadata, mp.spec.template
    read = [
        meta.name,
        meta.namespace,
        meta.uid,
        meta.labels,
        mp.api_version,
        mp.spec.cluster_name,
        template.metadata.labels,
        template.metadata.annotations,
        template.spec.deletion.raw,
        template.spec.min_ready_seconds,
    ]
    return json.dumps(read, sort_keys=True)


def node_mark(node: Obj | None) -> str | None:
    """What ``desired_machine`` reads from the Node of an infra machine: its kubelet's
    version."""
    return node_version(node)


_JSON = dict[str, Any] | list[Any] | str | int | float | bool | None
"""A JSON value as decoded (typed so that a view passed by mistake is a type error)."""


def _contains(have: _JSON, want: _JSON) -> bool:
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
    r = scope.env
    # The member index is keyed by namespace and the pool and cluster labels: what it
    # returns is the pool's, by those, without a second look at each one.
    member_key = watches.pool_member_key(scope.mp)
    uid = scope.mp.metadata.uid
    scope.machines = [
        machine
        for m in r.machines.by_index(watches.BY_MEMBER_LABELS, member_key)
        if scope.facts(machine := MachineView(m)).controller_uid in ("", uid)
    ]
    scope.machines += _created_not_cached(scope)
    infra_pool = scope.infra_pool
    kind = infra_pool.infrastructure_machine_kind if infra_pool is not None else ""
    if not kind or infra_pool is None or scope.mp.deleting:
        return Result()
    resource = await r.client.resource(str(infra_pool.raw.get("apiVersion", "")), kind)
    informer = await r.watches.watch_infra_machine_kind(resource)
    infra_machines = informer.by_index(watches.BY_MEMBER_LABELS, member_key)
    scope.infra_machines = {m.name: m for m in map(InfraMachine, infra_machines)}
    by_name = {m.metadata.name: m for m in scope.machines}
    wanted: list[tuple[MachineView | None, Obj]] = []
    template = template_mark(scope.mp)
    seen = scope.memory.in_sync
    in_sync: dict[str, tuple[object, ...]] = {}
    for obj in infra_machines:
        infra_machine = InfraMachine(obj)
        existing = by_name.get(infra_machine.name)
        if existing is not None and existing.deleting:
            continue
        if existing is None and infra_machine.deleting:
            # On its way out, it needs no owner. Its Machine may have gone already while this
            # cache still shows it: a Machine applied now would outlive it and wait for a
            # Node that will never come.
            continue
        pid = infra_machine.provider_id
        node = scope.nodes.by_provider_id(pid) if pid and scope.nodes else None
        mark = None
        if existing is not None:
            # Everything desired_machine reads: a Machine found in sync with the same inputs
            # is in sync still, and a pool of 1,000 is not rebuilt and compared each pass.
            mark = (
                existing.metadata.resource_version,
                ObjectView(obj).metadata.resource_version,
                node_mark(node),
                template,
            )
            if seen.get(infra_machine.name) == mark:
                in_sync[infra_machine.name] = mark
                continue
        want = desired_machine(scope.mp, infra_machine, node)
        if existing is not None and not r.machines_up_to_date and not existing.spec.version:
            # A Machine created before its Node joined gets its version from our Machine
            # controller, with the nodeRef the same Node brings (one spec write and one status
            # write that observes it); applied from here as well, the two would race to write
            # the same value, and the Machine's status would need another write for the
            # generation. Beside upstream, whose Machine controller does not, it is ours.
            want["spec"].pop("version", None)
        if existing is None or not _contains(existing.raw, want):
            wanted.append((existing, want))
        elif mark is not None:
            in_sync[infra_machine.name] = mark
    scope.memory.in_sync = in_sync
    # Independent writes: sent together, so a pool of new instances costs one round trip.
    outcomes = await asyncio.gather(
        *(r.client.apply(MACHINES, want, field_manager=FIELD_MANAGER) for _, want in wanted),
        return_exceptions=True,
    )
    errors: list[str] = []
    causes: list[Exception] = []
    created = scope.memory.applied
    for (existing, want), applied in zip(wanted, outcomes, strict=True):
        if isinstance(applied, Exception):
            errors.append(f"failed to apply Machine {want['metadata']['name']}: {applied}")
            causes.append(applied)
        elif isinstance(applied, BaseException):
            raise applied
        elif existing is None:
            scope.machines.append(MachineView(applied))
            created[str(want["metadata"]["name"])] = (time.monotonic(), applied)
        else:
            scope.machines[scope.machines.index(existing)] = MachineView(applied)
    if errors:
        raise ExceptionGroup("; ".join(errors), causes)
    return Result()


def _created_not_cached(scope: Scope) -> list[MachineView]:
    """The Machines this controller created for the pool that the cache does not show yet,
    as the server answered the create.

    The next pass may come before the Machine watch brings a create's echo: each new
    instance's event queues the pool, and a big pool's report may not be written, which
    was the pause that let the cache catch up. Taken for absent, such a Machine would be
    applied again, a write the apiserver handles in full. Once the cache shows the name,
    or after ``APPLIED_TTL_SECONDS`` (a watch that far behind is a fault of its own), the
    cache decides, as the pool engine's expectations do."""
    created = scope.memory.applied
    if not created:
        return []
    cached = {m.metadata.name for m in scope.machines}
    now = time.monotonic()
    for name in [
        n for n, (at, _) in created.items() if n in cached or now - at > APPLIED_TTL_SECONDS
    ]:
        del created[name]
    return [MachineView(obj) for _, obj in created.values()]


async def set_machines_up_to_date(scope: Scope) -> Result:
    """UpToDate on every pool Machine, as upstream's MachinePool controller writes it; only
    beside upstream, whose Machine controller does not (ours writes it in its own status)."""
    client = scope.env.client
    stale = []
    for i, view in enumerate(scope.machines):
        machine = view.raw
        updated = {**machine, "status": dict(machine.get("status") or {})}
        updated["status"]["conditions"] = [
            dict(x) for x in updated["status"].get("conditions") or []
        ]
        set_up_to_date(MachineView(updated))
        if updated["status"]["conditions"] != (view.status.conditions or []):
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
            scope.machines[i] = MachineView(outcome)
    if errors:
        raise ExceptionGroup("failed to set UpToDate on pool Machines", errors)
    return Result()
