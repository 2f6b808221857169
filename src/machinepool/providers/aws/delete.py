"""Deletion phase of an AWSMachinePool: the group (with its instances), then the template.

Run by ``controller.reconcile`` when the pool has a deletionTimestamp, after ``asg.observe``.
The group is force-deleted (AWS terminates its instances) and the phase waits until it is
gone; then the launch template is deleted, the pool's AWSMachines are let go (their Machine
when one exists, so core cleans up the Node; the AWSMachine otherwise) and the finalizer is
removed.
"""

from __future__ import annotations

from machinepool.api import constants as c
from machinepool.api.infra_aws import AWS_MACHINE_POOL_FINALIZER, AWSMACHINES
from machinepool.api.kinds import MACHINES
from machinepool.providers.aws.cloud import AWSError
from machinepool.providers.aws.launchtemplate import find_template
from machinepool.providers.aws.membership import owner_machine
from machinepool.providers.aws.scope import ASG_READY, LAUNCH_TEMPLATE_READY, Scope
from machinepool.runtime import NotFound, Result

__all__ = ["reconcile_delete"]

_DELETING = "Delete in progress"


async def _delete_group(scope: Scope) -> bool:
    """Start deleting the group; True while it still exists."""
    if scope.group is None:
        return False
    scope.status.ready = False
    if scope.group.get("Status") == _DELETING:
        scope.mark(ASG_READY, False, "ASGDeletionInProgress", "", c.SEVERITY_WARNING)
        return True
    try:
        await scope.aws.call(
            "autoscaling",
            "delete_auto_scaling_group",
            AutoScalingGroupName=scope.asg_name,
            ForceDelete=True,
        )
    except AWSError as exc:
        if exc.not_found:
            return False
        raise scope.fail(ASG_READY, "ASGDeletionFailed", exc) from exc
    scope.mark(ASG_READY, False, "ASGDeletionInProgress", "", c.SEVERITY_WARNING)
    await scope.recorder.event(
        scope.pool, "Normal", "ASGDeleted", f"deleting Auto Scaling group {scope.asg_name}"
    )
    return True


async def _delete_template(scope: Scope) -> None:
    try:
        template = await find_template(scope)
        if template is None:
            return
        await scope.aws.call(
            "ec2", "delete_launch_template", LaunchTemplateId=template["LaunchTemplateId"]
        )
    except AWSError as exc:
        if exc.not_found:
            return
        raise scope.fail(LAUNCH_TEMPLATE_READY, "LaunchTemplateDeletionFailed", exc) from exc
    await scope.recorder.event(
        scope.pool,
        "Normal",
        "LaunchTemplateDeleted",
        f"deleted launch template {template.get('LaunchTemplateName')}",
    )


async def _release_aws_machines(scope: Scope) -> None:
    for aws_machine in scope.aws_machines:
        machine = owner_machine(scope, aws_machine)
        try:
            if machine is not None:
                if not machine.deleting:
                    await scope.client.delete(MACHINES, machine.metadata.name, scope.namespace)
            elif not aws_machine.deleting:
                await scope.client.delete(AWSMACHINES, aws_machine.metadata.name, scope.namespace)
        except NotFound:
            continue


async def reconcile_delete(scope: Scope) -> Result:
    """Delete group and template; drop the finalizer once both are gone."""
    if not scope.has_finalizer:
        return Result()
    if await _delete_group(scope):
        scope.busy = True
        return Result()
    await _delete_template(scope)
    await _release_aws_machines(scope)
    meta = scope.view.metadata
    meta.finalizers = [f for f in meta.finalizers or [] if f != AWS_MACHINE_POOL_FINALIZER]
    return Result()
