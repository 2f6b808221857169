"""Conditions of a pool-owned Machine from its Node (NodeReady, Ready, Available), UpToDate,
and its phase.

Pure functions (unit-tested in tests/unit/test_core_machine_status.py), called by
``controller`` on every reconcile of a Machine that is not being deleted. The MachinePool
controller counts these conditions for its ready and available replicas.
"""

from __future__ import annotations

import math
from datetime import datetime

from machinepool.api import constants as c
from machinepool.api.conditions import set_condition
from machinepool.api.meta import dig, ensure
from machinepool.controllers.common import node_available, node_ready, node_ready_since
from machinepool.runtime import Obj


def set_node_conditions(machine: Obj, node: Obj | None, at: datetime) -> float | None:
    """Set NodeReady, Ready and Available; return seconds until Available may turn True."""
    conditions = ensure(machine, "status").setdefault("conditions", [])
    generation = dig(machine, "metadata", "generation")
    min_ready = int(dig(machine, "spec", "minReadySeconds", default=0) or 0)
    if node is None:
        msg = "Waiting for a Node with the Machine's providerID"
        for type_ in (c.NODE_READY_CONDITION, c.READY_CONDITION, c.AVAILABLE_CONDITION):
            reason = (
                c.NODE_DOES_NOT_EXIST_REASON
                if type_ == c.NODE_READY_CONDITION
                else (c.NOT_READY_REASON if type_ == c.READY_CONDITION else c.NOT_AVAILABLE_REASON)
            )
            set_condition(conditions, type_, False, reason, msg, generation)
        return None
    name = dig(node, "metadata", "name")
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


def _node_ready(node: Obj) -> tuple[str, str, str]:
    """NodeReady as upstream words it: the Node's own Ready status, and its message when not
    True."""
    for cond in dig(node, "status", "conditions", default=[]):
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            word = str(cond.get("status", "Unknown"))
            reason = {"True": c.NODE_READY_REASON, "False": c.NODE_NOT_READY_REASON}.get(
                word, c.NODE_READY_UNKNOWN_REASON
            )
            message = cond.get("message") if word != "True" else ""
            return word, reason, f"* Node.Ready: {message}" if message else ""
    return "Unknown", c.NODE_READY_UNKNOWN_REASON, "* Node.Ready: Condition not yet reported"


def set_infrastructure_provisioned(machine: Obj, infra_machine: Obj | None) -> None:
    """``status.initialization.infrastructureProvisioned``: True once the infra machine said
    provisioned (v1beta2 contract) or ready (v1beta1) and the Machine has its providerID; it
    never turns back, as upstream's does not."""
    provisioned = dig(infra_machine, "status", "initialization", "provisioned") or dig(
        infra_machine, "status", "ready"
    )
    if provisioned is True and dig(machine, "spec", "providerID"):
        ensure(machine, "status", "initialization")["infrastructureProvisioned"] = True


def set_phase(machine: Obj) -> None:
    status = ensure(machine, "status")
    if dig(machine, "metadata", "deletionTimestamp"):
        status["phase"] = "Deleting"
    elif dig(status, "nodeRef", "name"):
        status["phase"] = "Running"
    elif dig(machine, "spec", "providerID"):
        status["phase"] = "Provisioned"
    else:
        status["phase"] = "Provisioning"
