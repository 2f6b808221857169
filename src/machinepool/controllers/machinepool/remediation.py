"""Remediation of MachinePool Machines that a health check marked (``OwnerRemediated=False``).

A MachineHealthCheck (ours, or upstream's beside upstream Cluster API) only marks Machines; the
owner remediates. Upstream's MachinePool never does, so a dead pool node stays dead. Here the
``reconcile_remediation`` phase, run by ``controller`` after ``machines`` has filled
``scope.machines``, deletes marked pool Machines through the same drain-safe Machine deletion
as scale-down (cordon, drain, infra machine, Node); the provider then replaces the instance,
since the pool's desired size did not change. ``remediating_condition`` reports the work as
the MachinePool's ``Remediating`` condition.

The bound: at most ``max_in_flight`` marked Machines are being deleted at once, from the
``machinepool.cluster.x-k8s.io/max-in-flight-remediations`` annotation (an integer, or a
percentage of spec.replicas rounded down, at least 1), default 1. One at a time is what the
pool engine's own budget allows by default (maxUnavailable 0 and maxSurge 1 resolve to one
replacement in flight), so remediation never takes more Ready nodes away at once than a
rolling update would; Machines waiting for their turn say so (``RemediationDeferred``).

A Machine is deleted only while both ``OwnerRemediated`` and ``HealthCheckSucceeded`` are
False: one that recovered before its turn is spared. A condition write that loses its
optimistic lock (the Machine changed since the pool's copy) fails the reconcile as a
``Conflict``, which the runtime retries: the mark, or the deletion after it, is not lost.
Nothing runs while the pool is paused (the controller stops before the phases).
"""

from __future__ import annotations

import asyncio

from machinepool.api import constants as c
from machinepool.api.conditions import get_condition, set_condition
from machinepool.api.kinds import MACHINES
from machinepool.api.views import MachinePoolView, MachineView
from machinepool.controllers.machinepool.facts import MachineFacts
from machinepool.controllers.machinepool.scope import Scope
from machinepool.runtime import Conflict, NotFound, Result, copy_obj
from machinepool.runtime.kube.patch import Patcher

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "marked",
    "max_in_flight",
    "reconcile_remediation",
    "remediating_condition",
]

DEFAULT_MAX_IN_FLIGHT = 1


def _owner_marked(machine: MachineFacts) -> bool:
    """Marked for remediation by its owner (``OwnerRemediated=False``)."""
    return machine.condition_is(c.OWNER_REMEDIATED_CONDITION, "False")


def marked(machine: MachineFacts) -> bool:
    """Marked for remediation by its owner and still failing its health check."""
    return _owner_marked(machine) and machine.condition_is(
        c.HEALTH_CHECK_SUCCEEDED_CONDITION, "False"
    )


def max_in_flight(mp: MachinePoolView) -> int:
    """The bound from the annotation (see the module docstring); bad values fall back to 1."""
    annotations = mp.metadata.annotations or {}
    raw = str(annotations.get(c.MAX_IN_FLIGHT_REMEDIATIONS_ANNOTATION, "")).strip()
    if raw.endswith("%") and raw[:-1].isdigit():
        replicas = mp.spec.replicas
        return max(1, int(raw[:-1]) * (1 if replicas is None else replicas) // 100)
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return DEFAULT_MAX_IN_FLIGHT


async def reconcile_remediation(scope: Scope) -> Result:
    """Delete marked Machines, oldest mark first, while fewer than the bound are in flight."""
    if not scope.has_machine_pool_machines:
        return Result()
    facts = scope.facts
    marks = [m for m in scope.machines if _owner_marked(facts(m))]
    in_flight = [m for m in marks if facts(m).deleting]
    waiting = sorted(
        (m for m in marks if not facts(m).deleting and marked(facts(m))),
        key=lambda m: (_marked_at(m), m.metadata.name),
    )
    room = max(0, max_in_flight(scope.mp) - len(in_flight))
    now_victims, deferred = waiting[:room], waiting[room:]
    limit = max_in_flight(scope.mp)
    message = f"{len(in_flight) + len(now_victims)} remediation(s) in flight, at most {limit}"
    outcomes = await asyncio.gather(
        *(_remediate(scope, m) for m in now_victims),
        *(_defer(scope, m, f"Waiting for its turn: {message}") for m in deferred),
        return_exceptions=True,
    )
    # A Machine gone meanwhile needs nothing more. A conflict (the Machine changed since our
    # copy, say a status write of the Machine controller, which need not wake the pool) must
    # not be dropped: raised, it retries the pool, and the mark or deletion is not lost.
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
            raise outcome  # cancellation
    failures = [o for o in outcomes if isinstance(o, Exception) and not isinstance(o, NotFound)]
    if failures and all(isinstance(o, Conflict) for o in failures):
        raise failures[0]
    if failures:
        raise RuntimeError(
            "remediation: " + "; ".join(f"{type(o).__name__}: {o}" for o in failures)
        ) from failures[0]
    return Result()


def _marked_at(machine: MachineView) -> str:
    cond = get_condition(machine.status.conditions, c.OWNER_REMEDIATED_CONDITION)
    return str((cond or {}).get("lastTransitionTime") or "")


async def _set_owner_remediated(
    scope: Scope, view: MachineView, reason: str, message: str
) -> MachineView:
    machine = view.raw
    updated = copy_obj(machine)
    if not set_condition(
        MachineView(updated).status.edit_conditions(),
        c.OWNER_REMEDIATED_CONDITION,
        False,
        reason,
        message,
        view.metadata.generation,
    ):
        return view
    # Not rebased: a newer copy may no longer be marked, and the deletion rests on this read.
    patcher = Patcher(scope.env.client, MACHINES, machine, rebase=False)
    return MachineView(await patcher.patch(updated))


async def _defer(scope: Scope, machine: MachineView, message: str) -> None:
    await _set_owner_remediated(scope, machine, c.REMEDIATION_DEFERRED_REASON, message)


async def _remediate(scope: Scope, machine: MachineView) -> None:
    """Say why first (the provider reads the reason: no scale-down), then delete."""
    name = machine.metadata.name
    machine = await _set_owner_remediated(
        scope, machine, c.MACHINE_DELETING_REASON, "Machine is deleting"
    )
    await scope.env.client.delete(MACHINES, name, scope.namespace, uid=machine.metadata.uid)
    await scope.env.recorder.event(
        scope.mp.raw,
        "Normal",
        "RemediatingMachine",
        f"deleting unhealthy Machine {name} (marked by a health check); "
        "the provider replaces its instance",
    )


def remediating_condition(scope: Scope) -> dict[str, tuple[str, str, str]]:
    """``Remediating``: True with the count and names while marked Machines exist."""
    if not scope.has_machine_pool_machines:
        return {}
    names = sorted(m.name for m in scope.machine_facts() if _owner_marked(m))
    if not names:
        return {c.REMEDIATING_CONDITION: ("False", c.NOT_REMEDIATING_REASON, "")}
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    noun = "Machine" if len(names) == 1 else "Machines"
    return {
        c.REMEDIATING_CONDITION: (
            "True",
            c.REMEDIATING_REASON,
            f"Remediating {len(names)} {noun}: {shown} (at most {max_in_flight(scope.mp)} "
            "at a time)",
        )
    }
