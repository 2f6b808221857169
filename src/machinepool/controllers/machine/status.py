"""Conditions of a pool-owned Machine from its Node (NodeReady, Ready, Available), UpToDate,
its v1beta1 conditions (upstream still writes them in ``status.deprecated.v1beta1``, and
v1beta1 clients read a Machine's readiness there), and its phase.

Pure functions (unit-tested in tests/unit/test_core_machine_status.py), called by
``controller`` on every reconcile of a Machine that is not being deleted. The MachinePool
controller counts these conditions for its ready and available replicas.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from machinepool.api import constants as c
from machinepool.api.conditions import (
    Condition,
    mirror_v1beta1,
    set_condition,
    set_v1beta1_condition,
    set_v1beta1_summary,
)
from machinepool.api.contract import InfraMachine
from machinepool.api.meta import dig, parse_time
from machinepool.api.views import MachineView, NodeView
from machinepool.controllers.common import (
    node_available,
    node_conditions,
    node_ready,
    node_ready_since,
)
from machinepool.runtime import Obj


def set_node_conditions(machine: MachineView, node: Obj | None, at: datetime) -> float | None:
    """Set NodeReady, Ready and Available; return seconds until Available may turn True."""
    conditions = machine.status.edit_conditions()
    generation = machine.metadata.generation
    min_ready = int(machine.spec.min_ready_seconds or 0)
    if node is None:
        word, reason, message = _without_node(machine)
        for type_ in (c.NODE_READY_CONDITION, c.NODE_HEALTHY_CONDITION):
            set_condition(conditions, type_, word, reason, message, generation)
        set_condition(conditions, c.READY_CONDITION, *_not_ready(conditions), generation)
        set_condition(conditions, c.AVAILABLE_CONDITION, False, c.NOT_READY_REASON, "", generation)
        return None
    name = NodeView(node).metadata.name
    ready = node_ready(node)
    node_reason = c.READY_REASON if ready else c.NOT_READY_REASON
    set_condition(conditions, c.NODE_READY_CONDITION, *_node_ready(node), generation)
    set_condition(
        conditions,
        c.READY_CONDITION,
        ready,
        node_reason,
        "" if ready else f"Node {name} is not Ready",
        generation,
    )
    available = node_available(node, min_ready, at)
    if available:
        set_condition(conditions, c.AVAILABLE_CONDITION, True, c.AVAILABLE_REASON, "", generation)
        return None
    since = node_ready_since(node)
    if since is None:
        set_condition(
            conditions,
            c.AVAILABLE_CONDITION,
            False,
            c.NOT_AVAILABLE_REASON,
            f"Node {name} is not Ready",
            generation,
        )
        return None
    set_condition(
        conditions,
        c.AVAILABLE_CONDITION,
        False,
        c.WAITING_FOR_MIN_READY_SECONDS_REASON,
        f"Ready for less than minReadySeconds ({min_ready}s)",
        generation,
    )
    return max(1.0, math.ceil(min_ready - (at - since).total_seconds()))


def _without_node(machine: MachineView) -> tuple[str, str, str]:
    """NodeReady and NodeHealthy of a live Machine without a Node, as upstream words them: a
    Node it had is gone (False), or none has registered with its providerID yet (Unknown)."""
    name = machine.status.node_ref.name
    if name:
        return (
            "False",
            c.NODE_DELETED_REASON,
            f"Node {name} has been deleted while the Machine still exists",
        )
    pid = machine.spec.provider_id
    if pid:
        message = f"Waiting for a Node with spec.providerID {pid} to exist"
    else:
        kind = machine.spec.infrastructure_ref.kind or "InfraMachine"
        message = f"Waiting for {kind} to report spec.providerID"
    return "Unknown", c.INSPECTION_FAILED_REASON, message


_READY_INPUTS = (c.INFRASTRUCTURE_READY_CONDITION, c.NODE_HEALTHY_CONDITION)
"""What a Machine without a Node sums up in Ready (its bootstrap data is the pool's)."""


def _not_ready(conditions: list[Condition]) -> tuple[str, str, str]:
    """Ready of a Machine without a Node: False if any input is False, else Unknown, with a
    ``* Type: message`` line per input that is not True, as upstream's summary writes it."""
    found = {x.get("type"): x for x in conditions if isinstance(x, dict)}
    bad = [found[t] for t in _READY_INPUTS if t in found and found[t].get("status") != "True"]
    lines = [f"* {x['type']}: {x.get('message') or x.get('reason')}" for x in bad]
    if any(x.get("status") == "False" for x in bad):
        return "False", c.NOT_READY_REASON, "\n".join(lines)
    return "Unknown", c.READY_UNKNOWN_REASON, "\n".join(lines)


def _node_ready(node: Obj) -> tuple[str, str, str]:
    """NodeReady as upstream words it: the Node's own Ready status, and its message when not
    True."""
    for cond in node_conditions(node):
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            word = str(cond.get("status", "Unknown"))
            reason = {"True": c.NODE_READY_REASON, "False": c.NODE_NOT_READY_REASON}.get(
                word, c.NODE_READY_UNKNOWN_REASON
            )
            message = cond.get("message") if word != "True" else ""
            return word, reason, f"* Node.Ready: {message}" if message else ""
    return "Unknown", c.NODE_READY_UNKNOWN_REASON, "* Node.Ready: Condition not yet reported"


_NODE_HEALTH = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
"""The Node conditions NodeHealthy sums up; Ready is good when True, the pressures when False."""


def _node_healthy(node: Obj) -> tuple[str, str, str]:
    """NodeHealthy as upstream sums up a Node: False on any bad condition, Unknown on any
    unknown or unreported one, each named in the message."""
    found = {cond.get("type"): cond for cond in node_conditions(node) if isinstance(cond, dict)}
    bad = unknown = 0
    lines: list[str] = []
    texts: set[str] = set()
    for type_ in _NODE_HEALTH:
        cond = found.get(type_)
        if cond is None:
            lines.append(f"* Node.{type_}: Condition not yet reported")
            unknown += 1
            continue
        word = str(cond.get("status"))
        if word == ("True" if type_ == "Ready" else "False"):
            continue
        text = str(cond.get("message") or f"Condition is {word}")
        texts.add(text)
        lines.append(f"* Node.{type_}: {text}")
        if word == "Unknown":
            unknown += 1
        else:
            bad += 1
    reported = sum(1 for line in lines if not line.endswith("Condition not yet reported"))
    if reported > 1 and len(texts) == 1:
        lines = [f"* Node.AllConditions: {next(iter(texts))}"]
    if bad:
        return "False", c.NODE_NOT_HEALTHY_REASON, "\n".join(lines)
    if unknown:
        return "Unknown", c.NODE_HEALTH_UNKNOWN_REASON, "\n".join(lines)
    return "True", c.NODE_HEALTHY_REASON, ""


def _infrastructure_ready(machine: MachineView, infra_machine: Obj | None) -> tuple[str, str, str]:
    """InfrastructureReady: the infra machine's Ready condition mirrored, else its
    provisioned flag; when it is gone, whether it had been provisioned."""
    kind = str(machine.spec.infrastructure_ref.kind or "InfraMachine")
    provisioned = bool(machine.status.initialization.infrastructure_provisioned)
    if infra_machine is None:
        if provisioned:
            return (
                "False",
                c.OBJECT_DELETED_REASON,
                f"{kind} has been deleted"
                + ("" if machine.deleting else " while the Machine still exists"),
            )
        return "False", c.OBJECT_DOES_NOT_EXIST_REASON, f"{kind} does not exist"
    for cond in dig(infra_machine, "status", "conditions", default=[]):
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            word = str(cond.get("status", "Unknown"))
            reason = str(cond.get("reason") or c.NO_REASON_REPORTED)
            if word == "True" and reason == c.NO_REASON_REPORTED:
                reason = c.READY_REASON
            return word, reason, str(cond.get("message") or "")
    if provisioned:
        return "True", c.READY_REASON, ""
    return "False", c.NOT_READY_REASON, f"{kind} status.initialization.provisioned is false"


def set_machine_conditions(
    machine: MachineView, infra_machine: Obj | None, node: Obj | None
) -> None:
    """The rest of upstream's conditions of a live pool Machine: BootstrapConfigReady (a pool
    Machine has no bootstrap config of its own: the pool's data secret is given),
    InfrastructureReady, NodeHealthy, Deleting and Updating (no in-place updates here)."""
    conditions = machine.status.edit_conditions()
    generation = machine.metadata.generation
    if not machine.spec.bootstrap.config_ref.raw:
        set_condition(
            conditions,
            c.BOOTSTRAP_CONFIG_READY_CONDITION,
            True,
            c.BOOTSTRAP_DATA_SECRET_PROVIDED_REASON,
            "",
            generation,
        )
    set_condition(
        conditions,
        c.INFRASTRUCTURE_READY_CONDITION,
        *_infrastructure_ready(machine, infra_machine),
        generation,
    )
    if node is not None:
        set_condition(conditions, c.NODE_HEALTHY_CONDITION, *_node_healthy(node), generation)
    set_condition(conditions, c.DELETING_CONDITION, False, c.NOT_DELETING_REASON, "", generation)
    set_condition(conditions, c.UPDATING_CONDITION, False, c.NOT_UPDATING_REASON, "", generation)


def set_deleting_conditions(
    machine: MachineView, infra_machine: Obj | None, node: Obj | None, at: datetime
) -> None:
    """The conditions of a Machine being deleted, as upstream keeps them: those of a live
    Machine for its current generation (the deletion moved it), but Ready and Available
    False while the deletion runs, Ready saying which stage it is at (upstream's summary of
    its Deleting condition, which ``controller`` sets)."""
    conditions = machine.status.edit_conditions()
    deleting = next(
        (x for x in conditions if isinstance(x, dict) and x.get("type") == c.DELETING_CONDITION),
        None,
    )
    # Upstream's other conditions, kept current; its Deleting condition stays as set.
    kept = deleting.copy() if deleting is not None else None
    set_machine_conditions(machine, infra_machine, node)
    set_node_conditions(machine, node, at)
    if kept is not None:
        conditions[:] = [kept if x.get("type") == c.DELETING_CONDITION else x for x in conditions]
    generation = machine.metadata.generation
    lines = [f"* {c.DELETING_CONDITION}: {deletion_summary(machine, kept, at)}"]
    found = {x.get("type"): x for x in conditions if isinstance(x, dict)}
    for type_ in _READY_INPUTS:
        x = found.get(type_)
        if x is not None and x.get("status") != "True":
            lines.append(f"* {type_}: {x.get('message') or x.get('reason')}")
    message = "\n".join(lines)
    set_condition(conditions, c.READY_CONDITION, False, c.NOT_READY_REASON, message, generation)
    set_condition(conditions, c.AVAILABLE_CONDITION, False, c.NOT_READY_REASON, "", generation)


def set_infrastructure_provisioned(machine: MachineView, infra_machine: Obj | None) -> None:
    """``status.initialization.infrastructureProvisioned``: True once the infra machine said
    provisioned (v1beta2 contract) or ready (v1beta1) and the Machine has its providerID; it
    never turns back, as upstream's does not."""
    provisioned = dig(infra_machine, "status", "initialization", "provisioned") or dig(
        infra_machine, "status", "ready"
    )
    if provisioned is True and machine.spec.provider_id:
        machine.status.initialization.infrastructure_provisioned = True


def set_phase(machine: MachineView) -> None:
    status = machine.status
    if machine.deleting:
        status.phase = "Deleting"
    elif status.node_ref.name:
        status.phase = "Running"
    elif machine.spec.provider_id:
        status.phase = "Provisioned"
    else:
        status.phase = "Provisioning"


# --- v1beta1 -------------------------------------------------------------------------------


def infra_provisioned(infra_machine: Obj | None) -> bool:
    """Whether the infra machine says it is provisioned: ``status.initialization.provisioned``
    (v1beta2 contract) or ``status.ready`` (v1beta1)."""
    provisioned = dig(infra_machine, "status", "initialization", "provisioned")
    if provisioned is None:
        provisioned = dig(infra_machine, "status", "ready")
    return provisioned is True


def set_v1beta1_infrastructure_ready(machine: MachineView, infra_machine: Obj | None) -> None:
    """The v1beta1 InfrastructureReady: the infra machine's Ready mirrored, else whether it is
    provisioned (not: ``WaitingForInfrastructure``, or ``Deleting`` once the Machine is).
    Without an infra machine it is left as it was, as upstream leaves it, until the deletion
    finds it gone (``set_v1beta1_infrastructure_deleted``)."""
    if infra_machine is None:
        return
    deleting = machine.deleting
    mirror_v1beta1(
        machine.status.v1beta1.edit_conditions(),
        c.V1BETA1_INFRASTRUCTURE_READY_CONDITION,
        infra_machine,
        infra_provisioned(infra_machine),
        c.V1BETA1_DELETING_REASON
        if deleting
        else c.V1BETA1_WAITING_FOR_INFRASTRUCTURE_FALLBACK_REASON,
    )


def set_v1beta1_infrastructure_deleted(machine: MachineView) -> None:
    """InfrastructureReady False, ``Deleted``: the deletion found the infra machine gone."""
    set_v1beta1_condition(
        machine.status.v1beta1.edit_conditions(),
        c.V1BETA1_INFRASTRUCTURE_READY_CONDITION,
        False,
        c.V1BETA1_DELETED_REASON,
        "",
        c.SEVERITY_INFO,
    )


_NODE_PRESSURES = ("MemoryPressure", "DiskPressure", "PIDPressure")


def _v1beta1_node_health(node: Obj) -> tuple[str, str]:
    """Upstream's v1beta1 reading of a Node's health: False when Ready is False or a pressure
    is True, Unknown only when all four are Unknown, True otherwise (a Node that reports
    nothing counts as healthy); the message names each condition that is not as it should be,
    in the Node's order."""
    bad = unknown = 0
    parts: list[str] = []
    for cond in node_conditions(node):
        if not isinstance(cond, dict):
            continue
        type_, word = cond.get("type"), cond.get("status")
        good = "True" if type_ == "Ready" else "False"
        if (type_ != "Ready" and type_ not in _NODE_PRESSURES) or word == good:
            continue
        parts.append(f"Node condition {type_} is {word}")
        if word == "Unknown":
            unknown += 1
        else:
            bad += 1
    message = ". ".join(parts)
    if bad:
        return "False", message
    return ("True" if unknown < 4 else "Unknown"), message


def set_v1beta1_node_healthy(
    machine: MachineView, infra_machine: Obj | None, node: Obj | None
) -> None:
    """The v1beta1 NodeHealthy, with upstream's reasons and severities: no providerID yet
    (``WaitingForNodeRef``), no Node yet (``NodeProvisioning``) or no more (``NodeNotFound``,
    an Error), the infra machine going (``Deleting``), else the Node's own conditions. A
    deleted Machine whose Node is gone keeps what it said last."""
    conditions = machine.status.v1beta1.edit_conditions()
    type_ = c.V1BETA1_NODE_HEALTHY_CONDITION
    deleting = machine.deleting
    if not machine.spec.provider_id:
        set_v1beta1_condition(
            conditions, type_, False, c.V1BETA1_WAITING_FOR_NODE_REF_REASON, "", c.SEVERITY_INFO
        )
    elif node is None:
        if deleting:
            return
        if machine.status.node_ref.name:
            set_v1beta1_condition(
                conditions, type_, False, c.V1BETA1_NODE_NOT_FOUND_REASON, "", c.SEVERITY_ERROR
            )
        else:
            set_v1beta1_condition(
                conditions,
                type_,
                False,
                c.V1BETA1_NODE_PROVISIONING_REASON,
                "Waiting for a node with matching ProviderID to exist",
                c.SEVERITY_WARNING,
            )
    elif infra_machine is None or InfraMachine(infra_machine).deleting:
        set_v1beta1_condition(
            conditions, type_, False, c.V1BETA1_DELETING_REASON, "", c.SEVERITY_INFO
        )
    else:
        word, message = _v1beta1_node_health(node)
        reason = "" if word == "True" else c.V1BETA1_NODE_CONDITIONS_FAILED_REASON
        severity = c.SEVERITY_WARNING if word == "False" else ""
        set_v1beta1_condition(conditions, type_, word, reason, message, severity)


_V1BETA1_READY_INPUTS = (
    c.V1BETA1_INFRASTRUCTURE_READY_CONDITION,
    c.V1BETA1_BOOTSTRAP_READY_CONDITION,
    c.V1BETA1_HEALTH_CHECK_SUCCEEDED_CONDITION,
    c.V1BETA1_OWNER_REMEDIATED_CONDITION,
    c.V1BETA1_DRAINING_SUCCEEDED_CONDITION,
)
"""What upstream's v1beta1 Ready of a Machine sums up, in its order of precedence
(infrastructure problems first; NodeHealthy is not among them)."""

_V1BETA1_PROVISIONING_STEPS = (
    c.V1BETA1_BOOTSTRAP_READY_CONDITION,
    c.V1BETA1_INFRASTRUCTURE_READY_CONDITION,
)


def set_v1beta1_ready(machine: MachineView) -> None:
    """The v1beta1 Ready summary, on every reconcile that gets past pausing; while a live
    Machine has no providerID its message counts the provisioning steps done."""
    counting = not machine.deleting and not machine.spec.provider_id
    set_v1beta1_summary(
        machine.status.v1beta1.edit_conditions(),
        _V1BETA1_READY_INPUTS,
        steps=_V1BETA1_PROVISIONING_STEPS if counting else (),
    )


LONG_DELETION = timedelta(minutes=15)
"""How long a deletion runs before the Ready summary stresses it (upstream's threshold: a
coarse "more than 15m", so that many Machines' summaries still read alike and aggregate)."""
LONG_DRAIN = timedelta(minutes=5)
"""How long a drain of such a deletion runs before the summary names what likely holds it."""


def deletion_summary(machine: MachineView, deleting: Condition | None, at: datetime) -> str:
    """The Deleting line of a deleted Machine's Ready summary, as upstream words it: the
    stage (the Deleting condition's reason); past 15 minutes, that it has taken that long;
    and for a drain running past 5 minutes of those, what likely delays it."""
    if deleting is None:
        return "Machine deletion in progress"
    stage = deleting.get("reason")
    since = machine.metadata.deletion_timestamp
    if not since or at - parse_time(str(since)) <= LONG_DELETION:
        return f"Machine deletion in progress, stage: {stage}"
    text = f"Machine deletion in progress since more than 15m, stage: {stage}"
    drain_start = machine.status.deletion.node_drain_start_time
    if stage != c.DRAINING_NODE_REASON or not drain_start:
        return text
    if at - parse_time(str(drain_start)) <= LONG_DRAIN:
        return text
    # What the drain's message (drain.DrainResult.message) says holds it: refusals by a
    # PodDisruptionBudget are named as such, other refusals as eviction errors.
    said = str(deleting.get("message") or "").lower()
    budgets = "disruption budget" in said
    delays = [
        delay
        for delay, shown in (
            ("PodDisruptionBudgets", budgets),
            ("Pods not terminating", "waiting for deletion:" in said),
            ("Pod eviction errors", "evictions refused:" in said and not budgets),
            ("Pods not completed yet", "waiting for completion:" in said),
        )
        if shown
    ]
    return f"{text}, delay likely due to {', '.join(delays)}" if delays else text
