"""Group settings phase: suspended processes, lifecycle hooks and the warm pool, exactly as
the spec says.

Run by ``controller.reconcile`` once the group exists. Processes listed in
``spec.suspendProcesses`` are suspended and every other process is resumed (so removing one
from the spec resumes it); lifecycle hooks are created, updated and deleted to match
``spec.lifecycleHooks``; the warm pool is put when ``spec.warmPool`` differs from what
DescribeWarmPool says, and deleted when the spec has none. Empty lists are never sent:
Suspend/ResumeProcesses with no names would act on every process.
"""

from __future__ import annotations

from machinepool.api import conditions as cond
from machinepool.providers.aws import plan
from machinepool.providers.aws.cloud import AWSError
from machinepool.providers.aws.scope import ASG_READY, LIFECYCLE_HOOK_READY, Scope
from machinepool.runtime import Result

__all__ = ["reconcile_group_settings"]


async def _processes(scope: Scope) -> None:
    assert scope.group is not None
    current = [p["ProcessName"] for p in scope.group.get("SuspendedProcesses") or []]
    desired = plan.suspended_processes(scope.spec.suspend_processes)
    suspend, resume = plan.process_changes(desired, current)
    if suspend:
        await scope.aws.call(
            "autoscaling",
            "suspend_processes",
            AutoScalingGroupName=scope.asg_name,
            ScalingProcesses=suspend,
        )
    if resume:
        await scope.aws.call(
            "autoscaling",
            "resume_processes",
            AutoScalingGroupName=scope.asg_name,
            ScalingProcesses=resume,
        )


async def _hooks(scope: Scope) -> None:
    spec_hooks = scope.spec.lifecycle_hooks or []
    try:
        out = await scope.aws.call(
            "autoscaling", "describe_lifecycle_hooks", AutoScalingGroupName=scope.asg_name
        )
        changes = plan.hook_changes(spec_hooks, out.get("LifecycleHooks") or [])
        for params in changes.put:
            await scope.aws.call(
                "autoscaling", "put_lifecycle_hook", AutoScalingGroupName=scope.asg_name, **params
            )
        for name in changes.delete:
            await scope.aws.call(
                "autoscaling",
                "delete_lifecycle_hook",
                AutoScalingGroupName=scope.asg_name,
                LifecycleHookName=name,
            )
    except AWSError as exc:
        raise scope.fail(LIFECYCLE_HOOK_READY, "LifecycleHookReconcileFailed", exc) from exc
    if spec_hooks:
        scope.mark(LIFECYCLE_HOOK_READY, True)
    else:
        cond.remove_condition(scope.status.edit_conditions(), LIFECYCLE_HOOK_READY)


async def _warm_pool(scope: Scope) -> None:
    desired = plan.warm_pool_params(scope.spec.warm_pool)
    out = await scope.aws.call(
        "autoscaling", "describe_warm_pool", AutoScalingGroupName=scope.asg_name
    )
    current = out.get("WarmPoolConfiguration") or None
    if desired is None:
        if current is not None and current.get("Status") != "PendingDelete":
            await scope.aws.call(
                "autoscaling", "delete_warm_pool", AutoScalingGroupName=scope.asg_name
            )
        return
    if plan.warm_pool_differs(desired, current):
        await scope.aws.call(
            "autoscaling", "put_warm_pool", AutoScalingGroupName=scope.asg_name, **desired
        )


async def reconcile_group_settings(scope: Scope) -> Result:
    """Suspend/resume processes, put/delete lifecycle hooks and the warm pool to match the
    spec."""
    if scope.group is None:
        return Result()
    try:
        await _processes(scope)
    except AWSError as exc:
        raise scope.fail(ASG_READY, "SuspendProcessesFailed", exc) from exc
    await _hooks(scope)
    try:
        await _warm_pool(scope)
    except AWSError as exc:
        raise scope.fail(ASG_READY, "WarmPoolReconcileFailed", exc) from exc
    return Result()
