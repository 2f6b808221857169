"""Auto Scaling group phases: observe the group, create it once, keep its settings current.

``observe`` runs first in every reconcile (``controller``): the group is looked up by the name
recorded in status (the pool's name before that) and must carry this cluster's ownership tag.
``reconcile_group`` creates the group when missing, recording its name in status before the
create call, so a crash between the two calls finds the same group again instead of making a
second one; otherwise it updates only the settings that differ.

Sizes: scale-up writes the desired capacity directly. Scale-down never lowers it here: the
``machines`` phase deletes Machines (which drain their Nodes) and the AWSMachine finalizer
terminates each instance with a decrement. For the same reason a lowered maxSize is only
applied once the desired capacity has come down to it, since AWS would otherwise terminate
instances itself, undrained. With ``replicas-managed-by`` set, the group's desired capacity is
never written; it is copied into the MachinePool instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from machinepool.api import constants as c
from machinepool.api.kinds import MACHINE_POOLS
from machinepool.api.views import MachinePoolView
from machinepool.providers.aws import plan
from machinepool.providers.aws.cloud import AutoScalingGroup, AWSError
from machinepool.providers.aws.scope import ASG_READY, Scope
from machinepool.runtime import Result

__all__ = ["LAST_APPLIED_TAGS_ANNOTATION", "observe", "reconcile_group"]

LAST_APPLIED_TAGS_ANNOTATION = "sigs.k8s.io/cluster-api-provider-aws-last-applied-tags"


async def observe(scope: Scope) -> Result:
    """Fill ``scope.group`` (None when there is no group); refuse a group we do not own."""
    try:
        out = await scope.aws.call(
            "autoscaling", "describe_auto_scaling_groups", AutoScalingGroupNames=[scope.asg_name]
        )
    except AWSError as exc:
        raise scope.fail(ASG_READY, "ASGNotFound", exc) from exc
    groups = out.get("AutoScalingGroups") or []
    if not groups:
        scope.group = None
        return Result()
    group = cast(AutoScalingGroup, dict(groups[0]))
    tags = {t.get("Key"): t.get("Value") for t in group.get("Tags") or []}
    if tags.get(plan.cluster_tag(scope.cluster_name)) != plan.OWNED:
        raise scope.fail(
            ASG_READY,
            "ASGNotOwned",
            AWSError(
                "describe_auto_scaling_groups",
                "ASGNotOwned",
                f"Auto Scaling group {scope.asg_name} exists but is not tagged "
                f"{plan.cluster_tag(scope.cluster_name)}=owned; rename the AWSMachinePool",
            ),
        )
    scope.group = group
    return Result()


def _target(scope: Scope) -> int:
    return plan.desired_capacity(
        scope.machine_pool.spec.replicas,
        scope.min_size,
        scope.max_size,
    )


def _external(scope: Scope) -> bool:
    return plan.replicas_managed_externally(scope.machine_pool.metadata.annotations)


def _launch_template_params(scope: Scope) -> dict[str, Any]:
    """LaunchTemplate or MixedInstancesPolicy, always at $Latest so new instances get it."""
    ref = {"LaunchTemplateId": scope.template_id, "Version": "$Latest"}
    mixed = scope.spec.mixed_instances_policy
    if not mixed.raw:
        return {"LaunchTemplate": ref}
    policy: dict[str, Any] = {"LaunchTemplate": {"LaunchTemplateSpecification": ref}}
    overrides = [{"InstanceType": o["instanceType"]} for o in mixed.overrides or []]
    if overrides:
        policy["LaunchTemplate"]["Overrides"] = overrides
    dist = mixed.instances_distribution or {}
    if dist:
        policy["InstancesDistribution"] = {k[:1].upper() + k[1:]: v for k, v in dist.items()}
    return {"MixedInstancesPolicy": policy}


def _settings(scope: Scope) -> dict[str, Any]:
    """Group settings that come straight from the spec (for create and update)."""
    spec = scope.spec
    params: dict[str, Any] = {"MinSize": scope.min_size}
    subnets = [s["id"] for s in spec.subnets or [] if s.get("id")]
    if subnets:
        params["VPCZoneIdentifier"] = ",".join(sorted(subnets))
    else:
        params["AvailabilityZones"] = sorted(spec.availability_zones or [])
    if spec.default_cool_down:
        params["DefaultCooldown"] = plan.duration_seconds(spec.default_cool_down)
    if spec.default_instance_warmup:
        params["DefaultInstanceWarmup"] = plan.duration_seconds(spec.default_instance_warmup)
    params["CapacityRebalance"] = bool(spec.capacity_rebalance)
    params.update(_launch_template_params(scope))
    return params


def _tag_list(name: str, tags: Mapping[str, str]) -> list[dict[str, Any]]:
    return [
        {
            "ResourceId": name,
            "ResourceType": "auto-scaling-group",
            "Key": k,
            "Value": v,
            "PropagateAtLaunch": True,
        }
        for k, v in sorted(tags.items())
    ]


async def _create(scope: Scope) -> None:
    tags = plan.ownership_tags(scope.cluster_name, scope.asg_name, scope.spec.additional_tags)
    params = _settings(scope)
    params.update(
        AutoScalingGroupName=scope.asg_name,
        MaxSize=scope.max_size,
        DesiredCapacity=_target(scope),
        Tags=_tag_list(scope.asg_name, tags),
    )
    try:
        await scope.aws.call("autoscaling", "create_auto_scaling_group", **params)
    except AWSError as exc:
        if not exc.already_exists:  # made by an earlier attempt: observe finds it
            raise
    scope.pool["metadata"].setdefault("annotations", {})[LAST_APPLIED_TAGS_ANNOTATION] = json.dumps(
        scope.spec.additional_tags or {}, sort_keys=True
    )
    await scope.recorder.event(
        scope.pool, "Normal", "ASGCreated", f"created Auto Scaling group {scope.asg_name}"
    )


def _differs(group: Mapping[str, Any], key: str, value: Any) -> bool:
    if key == "VPCZoneIdentifier":
        have = sorted(s for s in str(group.get(key) or "").split(",") if s)
        return have != sorted(value.split(","))
    if key == "AvailabilityZones":
        return bool(value) and sorted(group.get(key) or []) != value
    if key == "LaunchTemplate":
        lt = group.get("LaunchTemplate") or {}
        return (
            lt.get("LaunchTemplateId") != value["LaunchTemplateId"]
            or lt.get("Version") != "$Latest"
        )
    if key == "MixedInstancesPolicy":
        return _mixed_key(group.get(key) or {}) != _mixed_key(value)
    return bool(group.get(key) != value)


def _mixed_key(policy: Mapping[str, Any]) -> tuple[Any, ...]:
    lt = policy.get("LaunchTemplate") or {}
    spec = lt.get("LaunchTemplateSpecification") or {}
    overrides = tuple(str(o.get("InstanceType")) for o in lt.get("Overrides") or [])
    dist = tuple(
        sorted((k, str(v)) for k, v in (policy.get("InstancesDistribution") or {}).items())
    )
    return (spec.get("LaunchTemplateId"), overrides, dist)


async def _update(scope: Scope, group: Mapping[str, Any]) -> None:
    wanted = _settings(scope)
    desired = int(group.get("DesiredCapacity") or 0)
    max_size = scope.max_size
    if not _external(scope):
        # Lowering MaxSize below the desired capacity would make AWS terminate undrained.
        max_size = max(max_size, desired)
        target = _target(scope)
        if target > desired:
            wanted["DesiredCapacity"] = target
            scope.busy = True
    wanted["MaxSize"] = max_size
    changed = {k: v for k, v in wanted.items() if _differs(group, k, v)}
    if "MixedInstancesPolicy" in changed or "LaunchTemplate" in changed:
        changed.update(_launch_template_params(scope))
    if changed:
        await scope.aws.call(
            "autoscaling",
            "update_auto_scaling_group",
            AutoScalingGroupName=scope.asg_name,
            **changed,
        )
        if "DesiredCapacity" in changed:
            await scope.recorder.event(
                scope.pool,
                "Normal",
                "ScalingUp",
                f"desired capacity of {scope.asg_name} {desired} -> {changed['DesiredCapacity']}",
            )


async def _copy_replicas_back(scope: Scope, group: Mapping[str, Any]) -> None:
    """The autoscaler owns the size: MachinePool.spec.replicas follows the group."""
    desired = int(group.get("DesiredCapacity") or 0)
    if scope.machine_pool.spec.replicas == desired:
        return
    name, namespace = scope.machine_pool.metadata.name, scope.machine_pool.metadata.namespace
    patched = await scope.client.patch(
        MACHINE_POOLS, name, {"spec": {"replicas": desired}}, namespace
    )
    scope.machine_pool = MachinePoolView(patched)
    await scope.recorder.event(
        scope.pool,
        "Normal",
        "ReplicasCopiedFromASG",
        f"MachinePool {name} replicas set to the group's desired capacity {desired}",
    )


async def _reconcile_tags(scope: Scope, group: Mapping[str, Any]) -> None:
    """Create or update missing tags; delete additional tags removed from the spec."""
    wanted = plan.ownership_tags(scope.cluster_name, scope.asg_name, scope.spec.additional_tags)
    have = {t["Key"]: t["Value"] for t in group.get("Tags") or []}
    stale = {k: v for k, v in wanted.items() if have.get(k) != v}
    if stale:
        await scope.aws.call(
            "autoscaling", "create_or_update_tags", Tags=_tag_list(scope.asg_name, stale)
        )
    annotations = scope.pool["metadata"].setdefault("annotations", {})
    applied = json.loads(annotations.get(LAST_APPLIED_TAGS_ANNOTATION) or "{}")
    removed = sorted(k for k in applied if k not in wanted and k in have)
    if removed:
        await scope.aws.call(
            "autoscaling",
            "delete_tags",
            Tags=[
                {"ResourceId": scope.asg_name, "ResourceType": "auto-scaling-group", "Key": k}
                for k in removed
            ],
        )
    annotations[LAST_APPLIED_TAGS_ANNOTATION] = json.dumps(
        scope.spec.additional_tags or {}, sort_keys=True
    )


async def reconcile_group(scope: Scope) -> Result:
    """Create the group, or bring its settings, size and tags in line with the spec."""
    if scope.template_id is None:
        return Result()  # the launch template phase failed and said why
    try:
        if not scope.status.asg_name:
            scope.status.asg_name = scope.asg_name
            await scope.checkpoint()
        if scope.group is None:
            await _create(scope)
            await observe(scope)
            scope.busy = True
        else:
            await _update(scope, scope.group)
            await _reconcile_tags(scope, scope.group)
            if _external(scope):
                await _copy_replicas_back(scope, scope.group)
    except AWSError as exc:
        reason = "ASGProvisionFailed" if scope.group is None else "ASGReconcileFailed"
        raise scope.fail(ASG_READY, reason, exc) from exc
    if scope.group is None:
        scope.mark(
            ASG_READY, False, "ASGNotFound", f"waiting for group {scope.asg_name}", c.SEVERITY_INFO
        )
        return Result()
    scope.spec.provider_id = scope.group.get("AutoScalingGroupARN")
    scope.status.asg_status = scope.group.get("Status") or None  # None: left out
    scope.mark(ASG_READY, True)
    return Result()
