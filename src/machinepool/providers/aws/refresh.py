"""Instance refresh phase: start the refresh a new launch template version asked for.

``launchtemplate`` marks ``InstanceRefreshStarted=False`` with reason ``InstanceRefreshPending``
(written to status at once) when a version changed more than the user data; this phase, run
after the group is reconciled, starts the refresh and marks the condition True. A refresh that
someone else started in the meantime is cancelled first, so the newest template wins.
``refreshPreferences.disable`` turns refreshes off entirely. The helpers are also used by
``launchtemplate`` to cancel a running refresh before making a new version.
"""

from __future__ import annotations

from typing import Any

from machinepool.api import conditions as cond
from machinepool.providers.aws.cloud import AWSError
from machinepool.providers.aws.scope import INSTANCE_REFRESH_STARTED, Scope
from machinepool.runtime import Result

__all__ = ["ACTIVE_STATES", "active_refresh", "reconcile_refresh", "refresh_disabled"]

ACTIVE_STATES = frozenset({"Pending", "InProgress", "Cancelling", "RollbackInProgress"})
_PENDING_REASON = "InstanceRefreshPending"


def refresh_disabled(scope: Scope) -> bool:
    return bool(scope.spec.refresh_preferences.disable)


async def active_refresh(scope: Scope) -> dict[str, Any] | None:
    """The group's refresh that is still running or being cancelled, if any."""
    out = await scope.aws.call(
        "autoscaling", "describe_instance_refreshes", AutoScalingGroupName=scope.asg_name
    )
    for refresh in out.get("InstanceRefreshes") or []:
        if refresh.get("Status") in ACTIVE_STATES:
            return dict(refresh)
    return None


def _preferences(scope: Scope) -> dict[str, Any]:
    prefs = scope.spec.refresh_preferences
    out: dict[str, Any] = {}
    for value, param in (
        (prefs.instance_warmup, "InstanceWarmup"),
        (prefs.min_healthy_percentage, "MinHealthyPercentage"),
        (prefs.max_healthy_percentage, "MaxHealthyPercentage"),
    ):
        if value is not None:
            out[param] = value
    return out


async def _start(scope: Scope) -> None:
    prefs = scope.spec.refresh_preferences
    params: dict[str, Any] = {
        "AutoScalingGroupName": scope.asg_name,
        "Strategy": prefs.strategy or "Rolling",
    }
    if _preferences(scope):
        params["Preferences"] = _preferences(scope)
    out = await scope.aws.call("autoscaling", "start_instance_refresh", **params)
    scope.mark(INSTANCE_REFRESH_STARTED, True)
    await scope.recorder.event(
        scope.pool,
        "Normal",
        "InstanceRefreshStarted",
        f"started instance refresh {out.get('InstanceRefreshId')} for launch template version "
        f"{scope.latest_version}",
    )


async def reconcile_refresh(scope: Scope) -> Result:
    """Start the pending instance refresh, cancelling a foreign one first."""
    pending = cond.get_condition(scope.status.conditions, INSTANCE_REFRESH_STARTED)
    if scope.group is None or pending is None or pending.get("reason") != _PENDING_REASON:
        return Result()
    if refresh_disabled(scope):
        cond.remove_condition(scope.status.edit_conditions(), INSTANCE_REFRESH_STARTED)
        return Result()
    try:
        active = await active_refresh(scope)
        if active is not None:
            if active.get("Status") in ("Pending", "InProgress"):
                await scope.aws.call(
                    "autoscaling", "cancel_instance_refresh", AutoScalingGroupName=scope.asg_name
                )
            scope.busy = True  # start once the cancellation is through; stay pending
            return Result()
        await _start(scope)
    except AWSError as exc:
        if exc.code.startswith("InstanceRefreshInProgress"):
            scope.busy = True
            return Result()
        # Stay pending (the refresh is still owed) with the AWS error in the message.
        scope.mark(
            INSTANCE_REFRESH_STARTED,
            False,
            _PENDING_REASON,
            f"starting the instance refresh failed: {exc.summary}",
            "Error",
        )
        raise
    return Result()
