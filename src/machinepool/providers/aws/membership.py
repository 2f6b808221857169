"""Machines phase: providerIDs, one AWSMachine per instance, and drain-safe scale-down.

Run last by ``controller.reconcile``. It writes ``spec.providerIDList`` (sorted) and the
replica/instance status from the group's live instances, and marks the pool ready once that
list covers every InService instance. Each instance gets an AWSMachine (named
``<pool>-<instance-id>`` so a retried create finds it, labelled cluster-name and pool-name,
owned by the AWSMachinePool without being controlled by it): core turns those into Machines.

Scale-down: when the group's desired capacity exceeds what the MachinePool asks for, victims
are chosen by the pool engine's ``order_victims`` (one ordering for every provider) among
instances whose Machine exists, and their Machines are deleted. The Machine controller drains
the Node and deletes the AWSMachine, whose finalizer (``awsmachine``) terminates the instance
with a decrement. An AWSMachine without an owner Machine is never a victim. An instance that
vanished out of band loses its Machine (or its AWSMachine, when no Machine was made yet).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from machinepool.api import conditions as cond
from machinepool.api import constants as c
from machinepool.api.infra_aws import AWS_MACHINE_FINALIZER, AWSMACHINES, GROUP_VERSION
from machinepool.api.kinds import MACHINES
from machinepool.api.views import AWSMachineView, MachineView
from machinepool.providers.aws import plan
from machinepool.providers.aws.cloud import GroupInstance
from machinepool.providers.aws.scope import Scope
from machinepool.providers.pool import DeletePolicy, InstanceState, Member, order_victims
from machinepool.providers.pool.observe import owner_machines
from machinepool.runtime import AlreadyExists, NotFound, Result

__all__ = ["aws_machine_name", "fresh_owners", "owner_machine", "reconcile_machines"]

_GONE_STATES = frozenset(
    {
        "Terminating",
        "Terminating:Wait",
        "Terminating:Proceed",
        "Terminated",
        "Detaching",
        "Detached",
    }
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def aws_machine_name(pool: str, instance_id: str) -> str:
    """Deterministic AWSMachine name of an instance (at most 253 characters)."""
    return f"{pool[: 252 - len(instance_id)]}-{instance_id}"


def _ec2_state(lifecycle: str) -> str:
    if lifecycle == "InService":
        return "running"
    if lifecycle.startswith("Pending"):
        return "pending"
    if lifecycle == "Standby":
        return "stopped"
    return "shutting-down"


def owner_machine(
    scope: Scope,
    aws_machine: AWSMachineView,
    fresh: Mapping[str, MachineView] | None = None,
) -> MachineView | None:
    """The Machine whose spec.infrastructureRef names ``aws_machine`` (its owner Machine).

    Looked up in ``fresh`` (AWSMachine name -> Machine, ``fresh_owners``) when given, else in
    the Machine informer by the pool engine's ``INFRA_REF_INDEX``, as the engine finds the
    owner Machines of its infra machines.
    """
    name = str(aws_machine.metadata.name)
    if fresh is not None:
        return fresh.get(name)
    found = owner_machines(scope.machines, AWSMACHINES.kind, aws_machine.raw)
    return MachineView(found[0]) if found else None


def fresh_owners(machines: Iterable[dict[str, Any]]) -> dict[str, MachineView]:
    """AWSMachine name -> the Machine whose infrastructureRef names it, of ``machines``."""
    owners: dict[str, MachineView] = {}
    for obj in machines:
        machine = MachineView(obj)
        ref = machine.spec.infrastructure_ref
        if ref.kind == AWSMACHINES.kind and ref.name:
            owners[str(ref.name)] = machine
    return owners


def _new_aws_machine(scope: Scope, instance: GroupInstance) -> dict[str, Any]:
    iid, zone = str(instance["InstanceId"]), str(instance["AvailabilityZone"])
    meta = scope.pool["metadata"]
    spec: dict[str, Any] = {
        "providerID": plan.provider_id(zone, iid),
        "instanceID": iid,
        "failureDomain": zone,
    }
    if instance.get("InstanceType"):
        spec["instanceType"] = instance["InstanceType"]
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "AWSMachine",
        "metadata": {
            "name": aws_machine_name(scope.name, iid),
            "namespace": scope.namespace,
            "labels": {
                **c.inherited_labels(meta.get("labels")),
                c.CLUSTER_NAME_LABEL: scope.cluster_name,
                c.POOL_NAME_LABEL: scope.pool_label,
            },
            "finalizers": [AWS_MACHINE_FINALIZER],
            "ownerReferences": [
                {
                    "apiVersion": GROUP_VERSION,
                    "kind": "AWSMachinePool",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def _machine_status(instance: GroupInstance) -> dict[str, Any]:
    lifecycle = str(instance.get("LifecycleState", ""))
    return {"ready": lifecycle == "InService", "instanceState": _ec2_state(lifecycle)}


async def _ensure_aws_machine(
    scope: Scope, instance: GroupInstance, existing: AWSMachineView | None
) -> None:
    status = _machine_status(instance)
    if existing is None:
        body = _new_aws_machine(scope, instance)
        try:
            created = await scope.client.create(AWSMACHINES, body, scope.namespace)
        except AlreadyExists:
            created = await scope.client.get(AWSMACHINES, body["metadata"]["name"], scope.namespace)
        existing = AWSMachineView(created)
    current = existing.status.raw or {}
    if any(current.get(k) != v for k, v in status.items()):
        await scope.client.patch(
            AWSMACHINES,
            existing.metadata.name,
            {"status": status},
            scope.namespace,
            subresource="status",
        )


async def _remove_vanished(scope: Scope, aws_machine: AWSMachineView) -> None:
    """The instance is gone: delete its Machine (core cleans up), else the AWSMachine."""
    meta = aws_machine.metadata
    machine = owner_machine(scope, aws_machine)
    scope.log.info(
        "instance vanished; removing its Machine",
        awsmachine=meta.name,
        machine=(machine.metadata.name or "") if machine is not None else "",
    )
    try:
        if machine is not None:
            if not machine.deleting:
                await scope.client.delete(MACHINES, machine.metadata.name, meta.namespace)
        elif not aws_machine.deleting:
            await scope.client.delete(AWSMACHINES, meta.name, meta.namespace)
    except NotFound:
        pass


async def _sync_aws_machines(scope: Scope, live: list[GroupInstance]) -> None:
    by_pid = {str(m.spec.provider_id): m for m in scope.aws_machines}
    live_pids = set()
    for instance in live:
        pid = plan.provider_id(instance["AvailabilityZone"], instance["InstanceId"])
        live_pids.add(pid)
        existing = by_pid.get(pid)
        if existing is not None and existing.deleting:
            continue
        await _ensure_aws_machine(scope, instance, existing)
    for pid, aws_machine in by_pid.items():
        if pid not in live_pids:
            await _remove_vanished(scope, aws_machine)


async def _launch_times(scope: Scope, ids: list[str]) -> dict[str, datetime]:
    if not ids:
        return {}
    out = await scope.aws.call("ec2", "describe_instances", InstanceIds=ids)
    times: dict[str, datetime] = {}
    for reservation in out.get("Reservations") or []:
        for inst in reservation.get("Instances") or []:
            launched = inst.get("LaunchTime")
            if isinstance(launched, datetime):
                times[str(inst["InstanceId"])] = launched
    return times


def _machine_ready_false(machine: MachineView) -> bool:
    ready = cond.get_condition(machine.status.conditions, c.READY_CONDITION)
    return ready is not None and ready.get("status") == cond.FALSE


async def _candidates(scope: Scope, live: list[GroupInstance]) -> tuple[list[Member], int]:
    """Removable instances with their Machines, and how many are already on their way out."""
    by_pid = {str(m.spec.provider_id): m for m in scope.aws_machines}
    # The one live read of this phase, kept on purpose: victims are chosen right before
    # Machines are deleted, which cannot be undone, and the informer may not yet show a Machine
    # this controller deleted a moment ago (nor a delete-machine annotation just set): acting
    # on that would remove one instance too many, or the wrong one. It runs only while the
    # group is above its target, never in a settled pool's reconcile. A list by label, as no
    # index of the API server's can select a pool's Machines; the informer's INFRA_REF_INDEX
    # serves every other lookup of an owner Machine.
    selector = f"{c.POOL_NAME_LABEL}={scope.pool_label},{c.CLUSTER_NAME_LABEL}={scope.cluster_name}"
    listed = await scope.client.list(MACHINES, scope.namespace, label_selector=selector)
    fresh = fresh_owners(listed.items)
    times = await _launch_times(scope, [str(i["InstanceId"]) for i in live])
    candidates: list[Member] = []
    leaving = 0
    for instance in live:
        iid = str(instance["InstanceId"])
        aws_machine = by_pid.get(plan.provider_id(instance["AvailabilityZone"], iid))
        if aws_machine is None:
            # No AWSMachine in the snapshot: just launched, or on its way out. Either way not
            # removable now; counting it as leaving errs towards removing too few, never too many.
            leaving += 1
            continue
        machine = owner_machine(scope, aws_machine, fresh)
        if aws_machine.deleting or (machine is not None and machine.deleting):
            leaving += 1
            continue
        if machine is None:
            # No Machine in the fresh list: not made yet (never a victim: its Node could not
            # be drained), or deleted since the snapshot of the group and of the AWSMachines
            # was taken, its instance terminated with a decrement that the group's
            # DesiredCapacity above does not show yet. Counted as leaving, for the second case:
            # it errs towards removing too few, never one instance too many.
            leaving += 1
            continue
        annotations = machine.metadata.annotations or {}
        version = str((instance.get("LaunchTemplate") or {}).get("Version") or "")
        candidates.append(
            Member(
                id=str(machine.metadata.name),
                state=InstanceState.RUNNING,
                # One domain for all: the group balances its zones itself (AZRebalance), so
                # victims are ordered by the pool engine's rules without the zone spread.
                failure_domain="",
                created=times.get(iid, _EPOCH),
                up_to_date=not scope.latest_version or version == scope.latest_version,
                ready=instance.get("LifecycleState") == "InService"
                and instance.get("HealthStatus", "Healthy") == "Healthy"
                and not _machine_ready_false(machine),
                delete_requested=c.DELETE_MACHINE_ANNOTATION in annotations,
                has_machine=True,
            )
        )
    return candidates, leaving


async def _scale_down(scope: Scope, live: list[GroupInstance]) -> None:
    if scope.group is None or plan.replicas_managed_externally(
        scope.machine_pool.metadata.annotations
    ):
        return
    target = plan.desired_capacity(
        scope.machine_pool.spec.replicas,
        scope.min_size,
        scope.max_size,
    )
    excess = int(scope.group.get("DesiredCapacity") or 0) - target
    if excess <= 0:
        return
    scope.busy = True
    candidates, leaving = await _candidates(scope, live)
    victims = order_victims(candidates, DeletePolicy.OLDEST)[: max(0, excess - leaving)]
    scope.log.info(
        "scaling down through Machines",
        target=target,
        excess=excess,
        leaving=leaving,
        victims=[v.id for v in victims],
    )
    for victim in victims:
        try:
            await scope.client.delete(MACHINES, victim.id, scope.namespace)
        except NotFound:
            continue
        await scope.recorder.event(
            scope.pool,
            "Normal",
            "ScalingDown",
            f"deleting Machine {victim.id} to scale {scope.asg_name} down to {target}",
        )


async def reconcile_machines(scope: Scope) -> Result:
    """providerIDList, replicas, ready; AWSMachines per instance; scale-down through Machines."""
    if scope.group is None:
        scope.status.ready = False
        return Result()
    live = [
        i for i in scope.group.get("Instances") or [] if i.get("LifecycleState") not in _GONE_STATES
    ]
    ids = sorted(plan.provider_id(i["AvailabilityZone"], i["InstanceId"]) for i in live)
    scope.spec.provider_id_list = ids
    scope.status.replicas = len(ids)
    scope.status.instances = [{"instanceID": iid} for iid in sorted(i["InstanceId"] for i in live)]
    scope.status.infrastructure_machine_kind = "AWSMachine"
    in_service = {
        plan.provider_id(i["AvailabilityZone"], i["InstanceId"])
        for i in live
        if i.get("LifecycleState") == "InService"
    }
    scope.status.ready = in_service <= set(ids)
    if len(live) != int(scope.group.get("DesiredCapacity") or 0) or len(in_service) != len(live):
        scope.busy = True
    await _sync_aws_machines(scope, live)
    await _scale_down(scope, live)
    return Result()
