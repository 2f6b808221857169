"""Health of one target (a Machine and its Node) and the remediation brake, as pure functions.

Called by ``controller``: ``evaluate`` decides, for a Machine at a given moment, whether it is
unhealthy (and why, in upstream's words), healthy, or not yet decided (with when to look
again); ``remediation_allowed`` applies ``triggerIf``. Nothing here does I/O, so the rules are
unit-tested directly (tests/unit/test_healthcheck_targets.py).

The rules are upstream Cluster API v1.14's (``core/reconcilers/machinehealthcheck``): a Machine
is unhealthy when it carries the remediate-machine annotation, when one of its Machine
conditions or its Node's conditions has held an unhealthy status past its timeout, when its
Node is gone, or when it has had no Node for ``nodeStartupTimeoutSeconds`` counted from the
latest of its creation, the Cluster's control plane initialization and infrastructure
readiness. Nothing is judged before the Cluster's control plane is initialized and its
infrastructure ready.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from machinepool.api import constants as c
from machinepool.api.conditions import get_condition
from machinepool.api.healthcheck import parse_unhealthy_range, scaled_int_or_percent
from machinepool.api.meta import parse_time
from machinepool.api.views import (
    ClusterView,
    MachineHealthCheckChecksView,
    MachineHealthCheckRemediationView,
    MachineView,
)
from machinepool.controllers.common import node_conditions
from machinepool.runtime import Obj

__all__ = [
    "Health",
    "Target",
    "Verdict",
    "cluster_ready_for_checks",
    "evaluate",
    "remediation_allowed",
]


class Health(Enum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    PENDING = "pending"
    """Not unhealthy yet, but will be checked again (a timeout is running), or the Machine is
    going away: counts as not healthy for ``triggerIf``, as upstream counts it."""


@dataclass
class Target:
    """A Machine the selector matches, with its Node (when it has one)."""

    machine: Obj
    node: Obj | None
    node_missing: bool = False
    """The Machine names a Node (status.nodeRef) that the workload cluster no longer has."""


@dataclass
class Verdict:
    """What ``evaluate`` found for one target."""

    health: Health
    reason: str = ""
    """v1beta2 reason of HealthCheckSucceeded=False."""
    v1beta1_reason: str = ""
    message: str = ""
    v1beta1_message: str = ""
    next_check: float = 0.0
    """Seconds until the target could turn unhealthy; 0 when nothing is running."""
    messages: list[str] = field(default_factory=list)


def _time(value: object) -> datetime | None:
    try:
        return parse_time(str(value)) if value else None
    except ValueError:
        return None


def _is_true(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> bool:
    cond = get_condition(conditions or [], type_)
    return cond is not None and cond.get("status") == "True"


def _true_since(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> datetime | None:
    cond = get_condition(conditions or [], type_)
    if cond is None or cond.get("status") != "True":
        return None
    return _time(cond.get("lastTransitionTime"))


def cluster_ready_for_checks(cluster: Obj) -> bool:
    """Upstream judges no worker before the control plane is initialized and the Cluster's
    infrastructure is ready (conditions; our registered Clusters also set the flags)."""
    status = ClusterView(cluster).status
    cp = _is_true(status.conditions, c.CONTROL_PLANE_INITIALIZED_CONDITION) or bool(
        status.initialization.control_plane_initialized
    )
    infra = _is_true(status.conditions, c.INFRASTRUCTURE_READY_CONDITION) or bool(
        status.initialization.infrastructure_provisioned
    )
    return cp and infra


def _duration(seconds: int) -> str:
    """Go's ``time.Duration.String()`` for whole seconds: 5m0s, 1h0m0s, 30s."""
    if seconds == 0:
        return "0s"
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{s}s"
    if m:
        return f"{m}m{s}s"
    return f"{s}s"


def _condition_checks(
    conditions: Sequence[Mapping[str, Any]], checks: list[Obj], what: str, at: datetime
) -> tuple[list[str], float]:
    """Messages of checks that failed, and seconds until the next one would."""
    failed: list[str] = []
    waits: list[float] = []
    for check in checks:
        cond = get_condition(conditions, str(check.get("type", "")))
        if cond is None or cond.get("status") != check.get("status"):
            continue
        timeout = int(check.get("timeoutSeconds") or 0)
        since = _time(cond.get("lastTransitionTime")) or at
        if since + timedelta(seconds=timeout) < at:
            failed.append(
                f"Condition {check.get('type')} on {what} is reporting status "
                f"{check.get('status')} with reason {cond.get('reason') or ''} for more than "
                f"{_duration(timeout)}"
            )
            continue
        wait = timeout - (at - since).total_seconds() + 1
        if wait > 0:
            waits.append(wait)
    return failed, (0.0 if failed or not waits else min(waits))


def evaluate(
    target: Target, cluster: Obj, checks: Obj, at: datetime, startup_timeout: int
) -> Verdict:
    """The health of ``target`` at ``at`` under ``checks`` (``spec.checks``)."""
    machine = MachineView(target.machine)
    if c.REMEDIATE_MACHINE_ANNOTATION in (machine.metadata.annotations or {}):
        return Verdict(
            Health.UNHEALTHY,
            c.HAS_REMEDIATE_ANNOTATION_REASON,
            c.V1BETA1_HAS_REMEDIATE_ANNOTATION_REASON,
            "Health check failed: marked for remediation via "
            f"{c.REMEDIATE_MACHINE_ANNOTATION} annotation",
            "Marked for remediation via remediate-machine annotation",
        )
    if not cluster_ready_for_checks(cluster):
        return Verdict(Health.PENDING)
    machine_failed, machine_wait = _condition_checks(
        machine.status.conditions or [],
        list(MachineHealthCheckChecksView(checks).unhealthy_machine_conditions or []),
        "Machine",
        at,
    )
    node_reason, v1_reason, node_failed, node_wait = _node_checks(
        target, cluster, checks, at, startup_timeout
    )
    if not machine_failed and not node_failed:
        waits = [w for w in (machine_wait, node_wait) if w > 0]
        if waits:
            return Verdict(Health.PENDING, next_check=min(waits))
        if machine.deleting or target.node is None:
            return Verdict(Health.PENDING)
        return Verdict(Health.HEALTHY)
    if machine_failed:
        node_reason, v1_reason = c.UNHEALTHY_MACHINE_REASON, c.V1BETA1_UNHEALTHY_MACHINE_REASON
    messages = machine_failed + node_failed
    message = "Health check failed:\n" + "\n".join(f"  * {m}" for m in messages)
    v1_message = "" if v1_reason == c.V1BETA1_NODE_NOT_FOUND_REASON else "; ".join(messages)
    return Verdict(Health.UNHEALTHY, node_reason, v1_reason, message, v1_message)


def _node_checks(
    target: Target, cluster: Obj, checks: Obj, at: datetime, startup_timeout: int
) -> tuple[str, str, list[str], float]:
    machine = MachineView(target.machine)
    if target.node_missing:
        name = machine.status.node_ref.name or ""
        return (
            c.NODE_DELETED_REASON,
            c.V1BETA1_NODE_NOT_FOUND_REASON,
            [f"Node {name} has been deleted"],
            0.0,
        )
    if target.node is None:
        if startup_timeout == 0:
            return "", "", [], 0.0
        since = _time(machine.metadata.creation_timestamp) or at
        cluster_conditions = ClusterView(cluster).status.conditions
        for later in (
            _true_since(cluster_conditions, c.CONTROL_PLANE_INITIALIZED_CONDITION),
            _true_since(cluster_conditions, c.INFRASTRUCTURE_READY_CONDITION),
            _true_since(machine.status.conditions, c.INFRASTRUCTURE_READY_CONDITION),
        ):
            if later is not None and later > since:
                since = later
        if since + timedelta(seconds=startup_timeout) < at:
            return (
                c.NODE_STARTUP_TIMEOUT_REASON,
                c.V1BETA1_NODE_STARTUP_TIMEOUT_REASON,
                [f"Node failed to report startup in {_duration(startup_timeout)}"],
                0.0,
            )
        return "", "", [], startup_timeout - (at - since).total_seconds() + 1
    failed, wait = _condition_checks(
        node_conditions(target.node),
        list(MachineHealthCheckChecksView(checks).unhealthy_node_conditions or []),
        "Node",
        at,
    )
    if failed:
        return c.UNHEALTHY_NODE_REASON, c.V1BETA1_UNHEALTHY_NODE_REASON, failed, 0.0
    return "", "", [], wait


def remediation_allowed(remediation: Obj, expected: int, healthy: int) -> tuple[bool, int, str]:
    """(allowed, remediationsAllowed, why not) for ``spec.remediation`` as upstream computes it.

    Unhealthy is everything not healthy (targets still starting count too). ``ValueError``
    when ``triggerIf`` cannot be read (the webhook refuses such objects; old ones may exist).
    """
    trigger = MachineHealthCheckRemediationView(remediation).trigger_if
    unhealthy = expected - healthy
    in_range = trigger.unhealthy_in_range
    if in_range:
        low, high = parse_unhealthy_range(str(in_range))
        allowed = low <= unhealthy <= high
        why = (
            "Remediation is not allowed, the number of not started or unhealthy machines does "
            f"not fall within the range (total: {expected}, unhealthy: {unhealthy}, "
            f"unhealthyRange: {in_range})"
        )
        return allowed, max(0, high - unhealthy), "" if allowed else why
    limit = trigger.unhealthy_less_than_or_equal_to
    if limit is None:
        limit = "100%"
    most = scaled_int_or_percent(limit, expected)
    allowed = unhealthy <= most
    why = (
        "Remediation is not allowed, the number of not started or unhealthy machines exceeds "
        f"maxUnhealthy (total: {expected}, unhealthy: {unhealthy}, maxUnhealthy: {limit})"
    )
    return allowed, max(0, most - unhealthy), "" if allowed else why
