"""Status of a MachinePool: replica counters, versions, phase and conditions.

Pure functions over raw objects (unit-tested in tests/unit/test_core_status.py), plus
``update_status``, which ``controller`` calls once at the end of every reconcile whatever the
phases did. v1beta1 conditions live in ``status.deprecated.v1beta1.conditions``; v1beta2
conditions in ``status.conditions``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from machinepool.api import constants as c
from machinepool.api.conditions import set_condition, set_v1beta1_summary
from machinepool.api.contract import Referenced
from machinepool.api.core_v1beta2 import MachinePoolPhase
from machinepool.api.views import MachinePoolView
from machinepool.controllers.common import node_version
from machinepool.controllers.machinepool.facts import MachineFacts
from machinepool.runtime import Obj, reports_progress

INVALID_REFERENCE_REASON = "InvalidReference"
"""A reference that cannot be used: not set, kind not served, or controlled by another owner."""


def set_v1beta1_ready(mp: MachinePoolView) -> None:
    set_v1beta1_summary(
        mp.status.v1beta1.edit_conditions(),
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
    mp: MachinePoolView,
    has_machines: bool,
    machines: list[MachineFacts],
    nodes_by_name: dict[str, Obj],
) -> None:
    """The v1beta2 counters and versions, as upstream computes them."""
    status = mp.status
    if not has_machines:
        status.ready_replicas = status.available_replicas = status.replicas
        status.up_to_date_replicas = mp.spec.replicas
        versions = [
            str(node_version(nodes_by_name.get(str(ref.get("name")))) or "")
            for ref in status.node_refs or []
            if isinstance(ref, dict)
        ]
        status.versions = aggregate_versions(versions) or None
        return

    # One pass over a pool's Machines (a thousand, each reconcile), not one per counter.
    counted = (c.READY_CONDITION, c.AVAILABLE_CONDITION, c.UP_TO_DATE_CONDITION)
    counts = dict.fromkeys(counted, 0)
    for m in machines:
        for type_ in counted:
            if m.condition_is(type_, "True"):
                counts[type_] += 1
    status.ready_replicas = counts[c.READY_CONDITION]
    status.available_replicas = counts[c.AVAILABLE_CONDITION]
    status.up_to_date_replicas = counts[c.UP_TO_DATE_CONDITION]
    status.versions = aggregate_versions([m.version for m in machines]) or None


# --- what a write says ----------------------------------------------------------------------

_NEWS = (
    c.AVAILABLE_CONDITION,
    c.BOOTSTRAP_CONFIG_READY_CONDITION,
    c.INFRASTRUCTURE_READY_CONDITION,
    c.PAUSED_CONDITION,
    c.DELETING_CONDITION,
)
"""Condition types whose status turning is news, never held back as progress."""


def settled(obj: Obj) -> bool:
    """Whether the pool is where its spec wants it: Running, every desired replica there,
    ready, available and up to date, and each one's Node referenced."""
    mp = MachinePoolView(obj)
    status, want = mp.status, mp.spec.replicas
    return (
        status.phase == c.PHASE_RUNNING
        and isinstance(want, int)
        and status.replicas == want
        and status.ready_replicas == want
        and status.available_replicas == want
        and status.up_to_date_replicas == want
        and len(status.node_refs or []) == want
    )


def progress_only(before: Obj, after: Obj) -> bool:
    """Whether writing ``after`` over the snapshot ``before`` only reports how far a change
    under way has come (``runtime.reports_progress``): a pool's such writes are spaced
    out (``controller``). Its providerIDList may differ; a reference turning provisioned or a
    failure being set is news."""
    if not reports_progress(
        before, after, spec_fields=("providerIDList",), settled=settled, news=_NEWS
    ):
        return False
    old, new = MachinePoolView(before).status, MachinePoolView(after).status
    return (
        old.initialization.infrastructure_provisioned
        == new.initialization.infrastructure_provisioned
        and old.initialization.bootstrap_data_secret_created
        == new.initialization.bootstrap_data_secret_created
        and old.v1beta1.failure_reason == new.v1beta1.failure_reason
        and old.v1beta1.failure_message == new.v1beta1.failure_message
    )


# --- phase ---------------------------------------------------------------------------------


def compute_phase(mp: MachinePoolView) -> MachinePoolPhase:
    """The phase, by upstream's rules (later rules win). Never ``Failed``: upstream's v1beta2
    API deprecates it ("won't be set anymore by controllers"); a terminal failure shows in
    ``status.deprecated.v1beta1.failureReason``/``failureMessage`` and the conditions."""
    status = mp.status
    phase = status.phase or c.PHASE_PENDING
    init = status.initialization
    provisioned = bool(init.infrastructure_provisioned)
    if init.bootstrap_data_secret_created and not provisioned:
        phase = c.PHASE_PROVISIONING
    if status.node_refs:
        phase = c.PHASE_PROVISIONED
    desired = mp.spec.replicas
    ready = status.v1beta1.ready_replicas or 0
    if provisioned and isinstance(desired, int):
        if desired == ready:
            phase = c.PHASE_RUNNING
        elif _managed_externally(mp):
            phase = c.PHASE_SCALING
        else:
            phase = c.PHASE_SCALING_UP if desired > ready else c.PHASE_SCALING_DOWN
    if mp.deleting:
        phase = c.PHASE_DELETING
    return phase


def _managed_externally(mp: MachinePoolView) -> bool:
    value = (mp.metadata.annotations or {}).get(c.REPLICAS_MANAGED_BY_ANNOTATION)
    return value is not None and value != "false"  # exactly upstream's test: "False" manages


# --- v1beta2 conditions --------------------------------------------------------------------


@dataclass(frozen=True)
class RefFacts:
    """What the phases learned about one referenced object, for its condition."""

    kind: str
    obj: Referenced | None
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
        cond = facts.obj.ready_condition
        if cond is not None and cond.get("status") in ("True", "False", "Unknown"):
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
    machines: list[tuple[str, Mapping[object, object]]],
    type_: str,
    reasons: tuple[str, str, str],
    what: str,
) -> tuple[str, str, str]:
    """Aggregate a Machine condition over ``machines`` (name and condition statuses of
    each) into (status, reason, message)."""
    true_reason, false_reason, unknown_reason = reasons
    if not machines:
        return "True", c.NO_REPLICAS_REASON, ""
    falses, unknowns = [], []
    for name, have in machines:
        status = have.get(type_, "Unknown")
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


def replica_conditions(mp: MachinePoolView) -> dict[str, tuple[str, str, str]]:
    """Available, ScalingUp and ScalingDown from the counters (pure)."""
    desired = mp.spec.replicas
    current = mp.status.replicas or 0
    available = mp.status.available_replicas or 0
    out: dict[str, tuple[str, str, str]] = {}
    if not isinstance(desired, int):
        waiting = ("Unknown", c.WAITING_FOR_REPLICAS_SET_REASON, "Waiting for spec.replicas set")
        return {
            c.AVAILABLE_CONDITION: waiting,
            c.SCALING_UP_CONDITION: waiting,
            c.SCALING_DOWN_CONDITION: waiting,
        }
    if mp.deleting:
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


def machine_conditions(
    has_machines: bool, machines: list[MachineFacts]
) -> dict[str, tuple[str, str, str]]:
    """MachinesReady and MachinesUpToDate; only with MachinePool Machines (Remediating:
    ``remediation.remediating_condition``)."""
    if not has_machines:
        return {}
    named = [(m.name, m.conditions) for m in machines]
    return {
        c.MACHINES_READY_CONDITION: _aggregate(
            named,
            c.READY_CONDITION,
            (c.READY_REASON, c.NOT_READY_REASON, c.READY_UNKNOWN_REASON),
            "ready",
        ),
        c.MACHINES_UP_TO_DATE_CONDITION: _aggregate(
            named,
            c.UP_TO_DATE_CONDITION,
            (c.UP_TO_DATE_REASON, c.NOT_UP_TO_DATE_REASON, c.UP_TO_DATE_UNKNOWN_REASON),
            "up-to-date",
        ),
    }


def deleting_condition(mp: MachinePoolView, waiting_for: str) -> tuple[str, str, str]:
    if not mp.deleting:
        return "False", c.NOT_DELETING_REASON, ""
    return "True", c.DELETING_REASON, waiting_for or "Deletion in progress"


def apply_conditions(mp: MachinePoolView, values: dict[str, tuple[str, str, str]]) -> None:
    """Write v1beta2 conditions in the MachinePool's condition order."""
    conditions = mp.status.edit_conditions()
    generation = mp.metadata.generation
    for type_ in c.MACHINE_POOL_CONDITIONS:
        if type_ in values:
            status, reason, message = values[type_]
            set_condition(conditions, type_, status, reason, message, generation)
