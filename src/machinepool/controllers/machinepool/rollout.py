"""Rollouts by the core: outdated pool Machines replaced drained, within budgets (ours).

Upstream leaves a MachinePool's rolling update to its infrastructure provider, and the clouds
replace instances without draining them. A pool whose MachinePool carries
``machinepool.cluster.x-k8s.io/rollout: Core`` is rolled here instead, through its Machines:
the core decides which outdated Machine goes and when, and deletes it, so the Machine
controller drains its Node (PodDisruptionBudgets, pre-drain and pre-terminate hooks, the
pool's drain timeout) before the infrastructure machine, and with it the instance, goes.

The MachinePool contract gives the core no way to grow the infra pool (it sizes itself from
``spec.replicas``), so a surge needs the pool's help: the core marks an outdated Machine
(``c.REPLACE_MACHINE_ANNOTATION``), a pool that honours the mark stops counting it and boots a
replacement while it keeps serving (the pool engine does, and a Sim pool with strategy
``OnDelete`` replaces nothing on its own), and the core deletes the marked Machine once the
Ready Machines left without it stay at or above ``spec.replicas - maxUnavailable``. A pool
that ignores the mark (it replaces only what is gone) is rolled by ``maxUnavailable`` alone:
then the budget needs room below replicas. Budgets are annotations with a Deployment's
meaning (``api.rollingupdate.rollout_budgets``): ``rollout-max-surge`` Machines marked at once
(default 1, a percentage rounds up), ``rollout-max-unavailable`` below replicas (default 0, a
percentage rounds down), validated at admission.

A Machine is outdated when its infra machine says ``UpToDate: False`` (a pool that leaves
replacing to the core reports it), or when the pool's template names a version and the
Machine runs another. Ready is what ``readyReplicas`` counts: the Machine's Ready condition,
and its Node's. Victims go in the order a scale-down picks them: ``cluster.x-k8s.io/delete-
machine`` annotated first, then not Ready, then the oldest.

``plan_rollout`` decides (pure; property-tested in tests/unit/test_core_rollout.py);
``reconcile_rollout``, run by ``controller`` after ``remediation``, acts and leaves what it
waits for in ``RollingOut``. It decides from the Machines as its own last writes left them,
not as the cache may still show them: a pass that saw a fresh mark but not the delete issued
beside it would count the deleted Machine as serving and take a second one. A pool that no
longer opts in has the marks taken off its live Machines, so none is left uncounted for a
rollout no one runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from machinepool.api import constants as c
from machinepool.api.kinds import MACHINES
from machinepool.api.rollingupdate import InvalidStrategy, rollout_budgets
from machinepool.api.views import MachinePoolView, MachineView
from machinepool.controllers.common import node_ready
from machinepool.controllers.machinepool.scope import Scope
from machinepool.runtime import Conflict, NotFound, Obj, Result, cache_caught_up

__all__ = [
    "RolloutMachine",
    "RolloutStep",
    "enabled",
    "plan_rollout",
    "reconcile_rollout",
    "release_marks",
    "rolling_out_condition",
    "with_own_writes",
]


def enabled(mp: MachinePoolView) -> bool:
    """The pool opted into rollouts by the core."""
    return (mp.metadata.annotations or {}).get(c.ROLLOUT_ANNOTATION) == c.ROLLOUT_CORE


# -- the decision (pure) --------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutMachine:
    """One pool Machine as the rollout sees it."""

    name: str
    up_to_date: bool
    ready: bool
    """Its Machine and its Node are Ready (what readyReplicas counts)."""
    deleting: bool = False
    marked: bool = False
    """It carries the rollout's replace mark: its replacement is on its way."""
    delete_requested: bool = False
    """It carries ``cluster.x-k8s.io/delete-machine``."""
    created: str = ""
    """Its creationTimestamp (RFC 3339 sorts as time does)."""

    @property
    def available(self) -> bool:
        """Serving: Ready and not being deleted (a marked one still serves)."""
        return self.ready and not self.deleting


@dataclass
class RolloutStep:
    """What to do now: outdated Machines to mark for replacement, and Machines to delete."""

    mark: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    outdated: int = 0
    """Outdated Machines neither marked nor deleting, after this step."""
    marked: int = 0
    """Marked Machines not yet deleting, after this step."""
    waiting: str = ""
    """What the rollout waits for, when it holds back."""


def plan_rollout(
    machines: Sequence[RolloutMachine], replicas: int, surge: int, unavailable: int
) -> RolloutStep:
    """The next step of a rollout (see the module docstring).

    No step takes the serving Machines below ``replicas - unavailable`` (nor lower than they
    are, when already below); at most ``surge`` Machines are marked at once; and at most
    ``max(1, unavailable)`` Machines drain at once, so Machines that are not Ready (say a
    whole pool whose Nodes went NotReady together) are not all taken in one step.
    """
    step = RolloutStep()
    floor = replicas - unavailable
    available = sum(1 for m in machines if m.available)
    draining = sum(1 for m in machines if m.deleting)
    drain_room = max(1, unavailable)
    marked = sorted((m for m in machines if m.marked and not m.deleting), key=_age)
    kept: list[RolloutMachine] = []
    for m in marked:  # a marked Machine goes once the others serve without it
        if draining < drain_room and (not m.ready or available - 1 >= floor):
            step.delete.append(m.name)
            draining += 1
            available -= 1 if m.ready else 0
        else:
            kept.append(m)
    victims = sorted(
        (m for m in machines if not m.up_to_date and not m.deleting and not m.marked),
        key=lambda m: (not m.delete_requested, m.ready, _age(m)),
    )
    left: list[RolloutMachine] = []
    for victim in victims:
        if not victim.ready and draining < drain_room:
            step.delete.append(victim.name)  # it serves no one: nothing to wait for
            draining += 1
        elif len(kept) + len(step.mark) < surge:
            step.mark.append(victim.name)
        elif victim.ready and draining < drain_room and available - 1 >= floor:
            step.delete.append(victim.name)
            draining += 1
            available -= 1
        else:
            left.append(victim)  # its turn comes; one not Ready behind it may go first
    step.outdated = len(left)
    step.marked = len(kept) + len(step.mark)
    if left or kept:
        step.waiting = (
            f"{len(left) + len(kept)} outdated Machine(s) wait: {step.marked} marked while"
            f" their replacements boot (rollout-max-surge {surge}), {available} Ready of at"
            f" least {floor} (spec.replicas - rollout-max-unavailable)"
        )
    return step


def _age(m: RolloutMachine) -> tuple[str, str]:
    return (m.created, m.name)


# -- the phase ------------------------------------------------------------------------------


async def reconcile_rollout(scope: Scope) -> Result:
    """Plan one step for an opted-in pool and carry it out; take our marks off otherwise."""
    if not scope.has_machine_pool_machines:
        return Result()
    mp = scope.mp
    if not enabled(mp):
        await release_marks(scope, scope.machines)
        return Result()
    try:
        surge, unavailable = rollout_budgets(mp.metadata.annotations or {}, mp.spec.replicas or 0)
    except InvalidStrategy as exc:
        scope.rollout = RolloutStep(waiting=f"{exc}; fix the annotation")
        return Result()
    if scope.nodes is None:
        scope.rollout = RolloutStep(waiting="Node readiness unknown; nothing is replaced")
        return Result()
    scope.machines = with_own_writes(scope.machines, scope.memory.rolled)
    step = plan_rollout(
        [_rollout_machine(scope, m) for m in scope.machines],
        mp.spec.replicas or 0,
        surge,
        unavailable,
    )
    scope.rollout = step
    by_name = {m.metadata.name: m for m in scope.machines}
    await _each(
        [
            *(_mark(scope, by_name[n]) for n in step.mark),
            *(_delete(scope, by_name[n]) for n in step.delete),
        ]
    )
    if step.mark:
        await scope.env.recorder.event(
            mp.raw,
            "Normal",
            "ReplacingMachines",
            f"marked outdated Machine(s) {', '.join(sorted(step.mark))} for replacement; each"
            " serves until its replacement is Ready",
        )
    if step.delete:
        await scope.env.recorder.event(
            mp.raw,
            "Normal",
            "RollingOutMachines",
            f"deleting outdated Machine(s) {', '.join(sorted(step.delete))}: drained first",
        )
    return Result()


async def release_marks(scope: Scope, machines: Sequence[MachineView]) -> None:
    """Take the rollout's mark off every live Machine that carries it (the pool counts it
    again)."""
    await _each([_unmark(scope, m) for m in machines if _marked(m) and not m.deleting])


def rolling_out_condition(scope: Scope) -> dict[str, tuple[str, str, str]]:
    """``RollingOut`` for an opted-in pool: True while outdated Machines remain, with what the
    rollout waits for (upstream's MachinePool has no such condition)."""
    step = scope.rollout
    if step is None or not enabled(scope.mp):
        return {}
    if step.outdated or step.marked or step.delete or step.waiting:
        message = step.waiting or (
            f"replacing outdated Machines: {len(step.delete)} being deleted, {step.marked}"
            " marked while their replacements boot"
        )
        return {c.ROLLING_OUT_CONDITION: ("True", c.ROLLING_OUT_REASON, message)}
    return {c.ROLLING_OUT_CONDITION: ("False", c.NOT_ROLLING_OUT_REASON, "")}


def with_own_writes(
    machines: Sequence[MachineView], rolled: dict[str, Obj | None]
) -> list[MachineView]:
    """``machines`` (the cache's) with the rollout's writes the cache does not show yet.

    ``rolled`` holds, by uid, each Machine the rollout marked or deleted as the server
    answered, or ``None`` for one deleted outright; an entry goes once the cache is as new
    as it (or no longer holds the Machine), so it lives for one watch event's lag.
    """
    if not rolled:
        return list(machines)
    fresh: list[MachineView] = []
    for view in machines:
        uid = view.metadata.uid or ""
        if uid not in rolled:
            fresh.append(view)
            continue
        own = rolled[uid]
        if own is None:
            continue  # gone from the server; the cache has yet to hear
        if cache_caught_up(view.raw, own) is False:
            fresh.append(MachineView(own))
        else:
            del rolled[uid]
            fresh.append(view)
    for uid in set(rolled) - {m.metadata.uid for m in machines}:
        del rolled[uid]
    return fresh


def _marked(machine: MachineView) -> bool:
    return c.REPLACE_MACHINE_ANNOTATION in (machine.metadata.annotations or {})


def _rollout_machine(scope: Scope, machine: MachineView) -> RolloutMachine:
    facts = scope.facts(machine)
    infra = scope.infra_machines.get(machine.spec.infrastructure_ref.name or "")
    wanted = (scope.mp.spec.template.spec.version or "").removeprefix("v")
    running = facts.version.removeprefix("v")
    outdated = (infra is not None and infra.outdated) or bool(
        wanted and running and running != wanted
    )
    nodes = scope.nodes
    node = nodes.by_provider_id(facts.provider_id) if nodes and facts.provider_id else None
    annotations = machine.metadata.annotations or {}
    return RolloutMachine(
        name=facts.name,
        up_to_date=not outdated,
        ready=node_ready(node) and facts.condition_is(c.READY_CONDITION, "True"),
        deleting=facts.deleting,
        marked=_marked(machine),
        delete_requested=c.DELETE_MACHINE_ANNOTATION in annotations,
        created=str(machine.metadata.creation_timestamp or ""),
    )


async def _mark(scope: Scope, machine: MachineView) -> None:
    """Against the copy the decision read: a Machine that changed since is decided again."""
    meta = machine.metadata
    body = {
        "metadata": {
            "resourceVersion": meta.resource_version,
            "annotations": {c.REPLACE_MACHINE_ANNOTATION: "rollout"},
        }
    }
    marked = await scope.env.client.patch(MACHINES, meta.name or "", body, scope.namespace)
    scope.memory.rolled[meta.uid or ""] = marked


async def _unmark(scope: Scope, machine: MachineView) -> None:
    body = {"metadata": {"annotations": {c.REPLACE_MACHINE_ANNOTATION: None}}}
    await scope.env.client.patch(MACHINES, machine.metadata.name or "", body, scope.namespace)


async def _delete(scope: Scope, machine: MachineView) -> None:
    meta = machine.metadata
    answer = await scope.env.client.delete(MACHINES, meta.name or "", scope.namespace, uid=meta.uid)
    deleting = answer is not None and bool((answer.get("metadata") or {}).get("deletionTimestamp"))
    scope.memory.rolled[meta.uid or ""] = answer if deleting else None


async def _each(calls: list[Coroutine[Any, Any, None]]) -> None:
    """Run independent writes together; a Machine gone meanwhile needs nothing more, and a
    conflict (it changed since the decision read it) retries the pool."""
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
            raise outcome
    failures = [o for o in outcomes if isinstance(o, Exception) and not isinstance(o, NotFound)]
    if failures and all(isinstance(o, Conflict) for o in failures):
        raise failures[0]
    if failures:
        raise ExceptionGroup("rollout", failures)
