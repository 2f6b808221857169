"""Status of a MachinePool: replica counters, versions, phase and conditions.

Pure functions over raw objects (unit-tested in tests/unit/test_core_status.py), plus
``update_status``, which ``controller`` calls once at the end of every reconcile whatever the
phases did. v1beta1 conditions live in ``status.deprecated.v1beta1.conditions``; v1beta2
conditions in ``status.conditions``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from machinepool.api import constants as c
from machinepool.api.conditions import (
    get_condition,
    is_true,
    set_condition,
    set_v1beta1_summary,
)
from machinepool.api.meta import dig, ensure
from machinepool.controllers.common import is_deleting
from machinepool.runtime import Obj

INVALID_REFERENCE_REASON = "InvalidReference"
"""A reference that cannot be used: not set, kind not served, or controlled by another owner."""


def v1beta1_conditions(mp: Obj) -> list[Obj]:
    """``status.deprecated.v1beta1.conditions`` of ``mp``, created if missing."""
    holder = ensure(mp, "status", "deprecated", "v1beta1")
    conditions = holder.get("conditions")
    if not isinstance(conditions, list):
        conditions = holder["conditions"] = []
    return conditions


def v1beta2_conditions(mp: Obj) -> list[Obj]:
    status = ensure(mp, "status")
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        conditions = status["conditions"] = []
    return conditions


def set_v1beta1_ready(mp: Obj) -> None:
    set_v1beta1_summary(
        v1beta1_conditions(mp),
        (
            c.V1BETA1_BOOTSTRAP_READY_CONDITION,
            c.V1BETA1_INFRASTRUCTURE_READY_CONDITION,
            c.V1BETA1_REPLICAS_READY_CONDITION,
        ),
    )


# --- counters ------------------------------------------------------------------------------


_SEMVER = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+([0-9A-Za-z.-]+))?$")


def _version_key(version: str) -> tuple[Any, ...]:
    """Sort key: semantic versions first, in semver order (v1.9 before v1.10, a pre-release
    before its release), then the rest by text; equal versions keep their text order."""
    match = _SEMVER.match(version)
    if match is None:
        return (1, version)
    major, minor, patch, pre, _build = match.groups()
    pre_key = (
        (1,)
        if pre is None
        else (0, *((0, int(p)) if p.isdigit() else (1, p) for p in pre.split(".")))
    )
    return (0, int(major), int(minor), int(patch), pre_key, version)


def aggregate_versions(versions: list[str]) -> list[Obj]:
    """``[{version, replicas}]`` in semantic-version order, as upstream sorts status.versions."""
    counts = Counter(v for v in versions if v)
    return [{"version": v, "replicas": counts[v]} for v in sorted(counts, key=_version_key)]


def set_replica_counters(
    mp: Obj, has_machines: bool, machines: list[Obj], nodes_by_name: dict[str, Obj]
) -> None:
    """The v1beta2 counters and versions, as upstream computes them."""
    status = ensure(mp, "status")
    if not has_machines:
        replicas = status.get("replicas")
        status["readyReplicas"] = replicas
        status["availableReplicas"] = replicas
        status["upToDateReplicas"] = dig(mp, "spec", "replicas")
        versions = [
            str(
                dig(
                    nodes_by_name.get(str(ref.get("name"))),
                    "status",
                    "nodeInfo",
                    "kubeletVersion",
                    default="",
                )
            )
            for ref in status.get("nodeRefs") or []
            if isinstance(ref, dict)
        ]
        _set_or_drop(status, "versions", aggregate_versions(versions) or None)
        for key in ("readyReplicas", "availableReplicas", "upToDateReplicas"):
            _set_or_drop(status, key, status.get(key))
        return

    def count(type_: str) -> int:
        return sum(1 for m in machines if is_true(dig(m, "status", "conditions"), type_))

    status["readyReplicas"] = count(c.READY_CONDITION)
    status["availableReplicas"] = count(c.AVAILABLE_CONDITION)
    status["upToDateReplicas"] = count(c.UP_TO_DATE_CONDITION)
    # A Machine's Node knows best what it runs (upstream prefers it to the Machine's spec).
    versions = [
        str(
            dig(m, "status", "nodeInfo", "kubeletVersion", default="")
            or dig(m, "spec", "version", default="")
        )
        for m in machines
    ]
    _set_or_drop(status, "versions", aggregate_versions(versions) or None)


def _set_or_drop(holder: Obj, key: str, value: Any) -> None:
    if value is None:
        holder.pop(key, None)
    else:
        holder[key] = value


# --- phase ---------------------------------------------------------------------------------


def compute_phase(mp: Obj) -> str:
    """The phase, by upstream's rules (later rules win). Never ``Failed``: upstream's v1beta2
    API deprecates it ("won't be set anymore by controllers"); a terminal failure shows in
    ``status.deprecated.v1beta1.failureReason``/``failureMessage`` and the conditions."""
    status: Obj = mp["status"] if isinstance(mp.get("status"), dict) else {}
    phase = str(status.get("phase") or "") or c.PHASE_PENDING
    init: Obj = dig(status, "initialization", default={})
    provisioned = bool(init.get("infrastructureProvisioned"))
    if init.get("bootstrapDataSecretCreated") and not provisioned:
        phase = c.PHASE_PROVISIONING
    if status.get("nodeRefs"):
        phase = c.PHASE_PROVISIONED
    desired = dig(mp, "spec", "replicas")
    ready = int(dig(status, "deprecated", "v1beta1", "readyReplicas", default=0) or 0)
    if provisioned and isinstance(desired, int):
        if desired == ready:
            phase = c.PHASE_RUNNING
        elif _managed_externally(mp):
            phase = c.PHASE_SCALING
        else:
            phase = c.PHASE_SCALING_UP if desired > ready else c.PHASE_SCALING_DOWN
    if is_deleting(mp):
        phase = c.PHASE_DELETING
    return phase


def _managed_externally(mp: Obj) -> bool:
    annotations = dig(mp, "metadata", "annotations", default={})
    value = annotations.get(c.REPLICAS_MANAGED_BY_ANNOTATION)
    return value is not None and value != "false"  # exactly upstream's test: "False" manages


# --- v1beta2 conditions --------------------------------------------------------------------


@dataclass(frozen=True)
class RefFacts:
    """What the phases learned about one referenced object, for its condition."""

    kind: str
    obj: Obj | None
    not_found: bool
    problem: str = ""


def ref_condition(
    facts: RefFacts,
    ready: bool,
    ready_field: str,
    deleted: bool,
    *,
    defined: bool = True,
    provided_reason: str = c.BOOTSTRAP_DATA_SECRET_PROVIDED_REASON,
) -> tuple[str, str, str]:
    """(status, reason, message) of BootstrapConfigReady or InfrastructureReady (pure).

    Mirrors the object's own Ready condition when it has one; otherwise falls back to the
    contract field, as upstream does.
    """
    if not defined:
        return "True", provided_reason, ""
    if facts.problem:
        return "False", INVALID_REFERENCE_REASON, facts.problem
    if facts.obj is not None:
        cond = get_condition(dig(facts.obj, "status", "conditions", default=[]), c.READY_CONDITION)
        if (
            cond is not None
            and "severity" not in cond
            and cond.get("status") in ("True", "False", "Unknown")
        ):
            reason = str(cond.get("reason") or "")
            if not reason:
                reason = c.READY_REASON if cond["status"] == "True" else c.NOT_READY_REASON
            return str(cond["status"]), reason, str(cond.get("message") or "")
        if ready:
            return "True", c.READY_REASON, ""
        return "False", c.NOT_READY_REASON, f"{facts.kind} {ready_field} is false"
    if not facts.not_found:
        return "Unknown", c.INTERNAL_ERROR_REASON, "Please check controller logs for errors"
    if deleted:
        return "False", c.OBJECT_DELETED_REASON, f"{facts.kind} has been deleted"
    return "False", c.OBJECT_DOES_NOT_EXIST_REASON, f"{facts.kind} does not exist"


def _aggregate(
    machines: list[Obj], type_: str, reasons: tuple[str, str, str], what: str
) -> tuple[str, str, str]:
    """Aggregate a Machine condition over ``machines`` into (status, reason, message)."""
    true_reason, false_reason, unknown_reason = reasons
    if not machines:
        return "True", c.NO_REPLICAS_REASON, ""
    falses, unknowns = [], []
    for m in machines:
        cond = get_condition(dig(m, "status", "conditions", default=[]), type_)
        status = cond.get("status") if cond else "Unknown"
        name = str(dig(m, "metadata", "name"))
        if status == "False":
            falses.append(name)
        elif status != "True":
            unknowns.append(name)
    if falses:
        return "False", false_reason, _names_message(sorted(falses), f"not {what}")
    if unknowns:
        return "Unknown", unknown_reason, _names_message(sorted(unknowns), f"{what} unknown")
    return "True", true_reason, ""


def _names_message(names: list[str], state: str) -> str:
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    noun = "Machine" if len(names) == 1 else "Machines"
    verb = "is" if len(names) == 1 else "are"
    return f"{noun} {shown} {verb} {state}"


def replica_conditions(mp: Obj) -> dict[str, tuple[str, str, str]]:
    """Available, ScalingUp and ScalingDown from the counters (pure)."""
    desired = dig(mp, "spec", "replicas")
    status: Obj = mp["status"] if isinstance(mp.get("status"), dict) else {}
    current = int(status.get("replicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    out: dict[str, tuple[str, str, str]] = {}
    if not isinstance(desired, int):
        waiting = ("Unknown", c.WAITING_FOR_REPLICAS_SET_REASON, "Waiting for spec.replicas set")
        return {
            c.AVAILABLE_CONDITION: waiting,
            c.SCALING_UP_CONDITION: waiting,
            c.SCALING_DOWN_CONDITION: waiting,
        }
    if is_deleting(mp):
        out[c.AVAILABLE_CONDITION] = ("False", c.DELETING_REASON, "MachinePool is being deleted")
    elif available >= desired:
        out[c.AVAILABLE_CONDITION] = ("True", c.AVAILABLE_REASON, "")
    else:
        out[c.AVAILABLE_CONDITION] = (
            "False",
            c.NOT_AVAILABLE_REASON,
            f"{available} available replicas, at least {desired} required",
        )
    if desired > current:
        out[c.SCALING_UP_CONDITION] = (
            "True",
            c.SCALING_UP_REASON,
            f"Scaling up from {current} to {desired} replicas",
        )
    else:
        out[c.SCALING_UP_CONDITION] = ("False", c.NOT_SCALING_UP_REASON, "")
    if desired < current:
        out[c.SCALING_DOWN_CONDITION] = (
            "True",
            c.SCALING_DOWN_REASON,
            f"Scaling down from {current} to {desired} replicas",
        )
    else:
        out[c.SCALING_DOWN_CONDITION] = ("False", c.NOT_SCALING_DOWN_REASON, "")
    return out


def machine_conditions(has_machines: bool, machines: list[Obj]) -> dict[str, tuple[str, str, str]]:
    """MachinesReady and MachinesUpToDate; only with MachinePool Machines (Remediating:
    ``remediation.remediating_condition``)."""
    if not has_machines:
        return {}
    return {
        c.MACHINES_READY_CONDITION: _aggregate(
            machines,
            c.READY_CONDITION,
            (c.READY_REASON, c.NOT_READY_REASON, c.READY_UNKNOWN_REASON),
            "ready",
        ),
        c.MACHINES_UP_TO_DATE_CONDITION: _aggregate(
            machines,
            c.UP_TO_DATE_CONDITION,
            (c.UP_TO_DATE_REASON, c.NOT_UP_TO_DATE_REASON, c.UP_TO_DATE_UNKNOWN_REASON),
            "up-to-date",
        ),
    }


def deleting_condition(mp: Obj, waiting_for: str) -> tuple[str, str, str]:
    if not is_deleting(mp):
        return "False", c.NOT_DELETING_REASON, ""
    return "True", c.DELETING_REASON, waiting_for or "Deletion in progress"


def apply_conditions(mp: Obj, values: dict[str, tuple[str, str, str]]) -> None:
    """Write v1beta2 conditions in the MachinePool's condition order."""
    conditions = v1beta2_conditions(mp)
    generation = dig(mp, "metadata", "generation")
    for type_ in c.MACHINE_POOL_CONDITIONS:
        if type_ in values:
            status, reason, message = values[type_]
            set_condition(conditions, type_, status, reason, message, generation)
