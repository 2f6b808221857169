"""The engine's last phase: providerIDList, status and conditions of the infra pool.

Runs on every reconcile, even when an earlier phase failed, so the pool always says why it
is not converging. The list is sorted so patches are stable, and it holds every live instance,
so ``ready`` (once true) stays true while scaling: core keeps copying the list. Warm-pool
instances are listed apart (``status.warmInstances``), never in providerIDList.
"""

from __future__ import annotations

from typing import Any

from machinepool.api import constants as c
from machinepool.api.conditions import set_condition, statuses
from machinepool.api.views import EngineInstanceEntry, EnginePoolView
from machinepool.providers.pool.provider import SupportsCapacity
from machinepool.providers.pool.scope import PoolScope
from machinepool.providers.pool.types import Instance, InstanceState
from machinepool.runtime import Obj, Result, reports_progress

__all__ = ["progress_only", "report"]


async def report(scope: PoolScope) -> Result:
    """Write what the pool is: its providerIDList, instances, capacity, readiness and
    conditions."""
    live = [i for i in scope.instances if i.state is not InstanceState.TERMINATED]
    if scope.backend is not None:
        ids = sorted(i.provider_id for i in live)
        if ids or scope.pool.spec.provider_id_list:
            # Absent and empty say the same; turning one into the other is a write per pool.
            scope.pool.spec.provider_id_list = ids
        status = scope.status
        status.replicas = len(live)
        status.instances = [_entry(scope, i) for i in sorted(live, key=lambda i: i.id)]
        warm = [_entry(scope, i) for i in sorted(scope.warm, key=lambda i: i.id)]
        if warm or status.warm_instances:
            status.warm_instances = warm
    status = scope.status
    provider = scope.env.provider
    status.infrastructure_machine_kind = provider.machine_resource.kind
    if isinstance(provider, SupportsCapacity):
        status.capacity = dict(provider.capacity(scope.pool.raw))
    provisioned = bool((status.initialization or {}).get("provisioned"))
    ready = scope.backend is not None and (provisioned or not _blocking(scope))
    status.ready = ready
    if ready:
        status.initialization = {"provisioned": True}
    _conditions(scope, ready)
    return Result()


def _entry(scope: PoolScope, i: Instance) -> EngineInstanceEntry:
    return {
        "instanceID": i.id,
        "providerID": i.provider_id,
        "failureDomain": i.failure_domain,
        "state": i.state.value,
        "upToDate": i.template_hash == scope.template_hash,
    }


def _blocking(scope: PoolScope) -> bool:
    return any(reason != "CloudError" for reason, _ in scope.blocked)


def _conditions(scope: PoolScope, ready: bool) -> None:
    conditions = scope.status.edit_conditions()
    if scope.blocked:
        reason, message = scope.blocked[0]
        messages = "; ".join(m for _, m in scope.blocked)
        set_condition(conditions, c.READY_CONDITION, False, reason, messages or message)
    else:
        set_condition(
            conditions, c.READY_CONDITION, ready, c.READY_REASON if ready else c.NOT_READY_REASON
        )
    counts = _counts(scope)
    step = scope.plan
    # Scaling up while the pool holds fewer instances than it wants, counted after this
    # step's creates: the step that creates the last one reports the end of the scale-up in
    # the same write, rather than one more write per pool on the next reconcile.
    staying = counts["live"] - counts["deleting"]
    creating = step is not None and staying < scope.replicas
    deleting = bool(step and step.delete) or counts["deleting"] > 0
    rolling = counts["outdated"] > 0
    set_condition(
        conditions,
        c.SCALING_UP_CONDITION,
        creating,
        c.SCALING_UP_REASON if creating else c.NOT_SCALING_UP_REASON,
        f"scaling up from {staying} to {scope.replicas} instance(s)" if creating else "",
    )
    set_condition(
        conditions,
        c.SCALING_DOWN_CONDITION,
        deleting,
        c.SCALING_DOWN_REASON if deleting else c.NOT_SCALING_DOWN_REASON,
        f"{counts['deleting']} instance(s) being deleted" if deleting else "",
    )
    waiting = "; ".join(step.waiting) if step else ""
    set_condition(
        conditions,
        c.ROLLING_OUT_CONDITION,
        rolling,
        c.ROLLING_OUT_REASON if rolling else c.NOT_ROLLING_OUT_REASON,
        f"{counts['outdated']} outdated instance(s) to replace. {waiting}".strip()
        if rolling
        else "",
    )


def _counts(scope: PoolScope) -> dict[str, Any]:
    outdated = deleting = live = 0
    for instance in scope.instances:
        if instance.state is InstanceState.TERMINATED:
            continue
        live += 1
        if scope.template_hash and instance.template_hash != scope.template_hash:
            outdated += 1
        machine, infra_machine = (
            scope.machines.get(instance.id),
            scope.infra_machines.get(instance.id),
        )
        if (machine is not None and machine.deleting) or (
            infra_machine is not None and infra_machine.deleting
        ):
            deleting += 1
    return {"outdated": outdated, "deleting": deleting, "live": live}


_CHANGES = (c.SCALING_UP_CONDITION, c.SCALING_DOWN_CONDITION, c.ROLLING_OUT_CONDITION)


def settled(pool: Obj) -> bool:
    """Whether the pool is Ready with no change under way: not scaling, not rolling out,
    every instance running."""
    status = EnginePoolView(pool).status
    have = statuses(status.conditions)
    return (
        have.get(c.READY_CONDITION) == "True"
        and all(have.get(t) != "True" for t in _CHANGES)
        and all(i.get("state") == InstanceState.RUNNING for i in status.instances or [])
    )


def progress_only(before: Obj, after: Obj) -> bool:
    """Whether writing ``after`` over the snapshot ``before`` only reports how far a change
    under way has come (``runtime.reports_progress``), for the engine to space out: its
    providerIDList, instances and counts. Ready or Paused turning, and a new
    capacity (what an autoscaler scales up from zero by), are news."""
    return (
        reports_progress(
            before,
            after,
            spec_fields=("providerIDList",),
            settled=settled,
            news=(c.READY_CONDITION, c.PAUSED_CONDITION),
        )
        and EnginePoolView(before).status.capacity == EnginePoolView(after).status.capacity
    )
