"""Deleting an infra pool: terminate every instance (even ones no infra machine ever
mapped), delete the infra machines, forget the records, then let the pool go.

Called by ``engine.PoolEngine`` when the pool has a deletionTimestamp.
"""

from __future__ import annotations

from machinepool.api import constants as c
from machinepool.api.conditions import set_condition
from machinepool.api.views import EngineMachineView
from machinepool.providers.pool.observe import pool_members
from machinepool.providers.pool.provider import SupportsPurge
from machinepool.providers.pool.scope import PoolScope
from machinepool.providers.pool.types import InstanceState
from machinepool.runtime import Result

__all__ = ["delete_pool"]

_WAIT = 1.0


async def delete_pool(scope: PoolScope) -> Result:
    """One pass of deletion; returns a requeue until nothing is left, then drops the finalizer."""
    env = scope.env
    backend = await env.provider.backend(scope.pool.raw)
    scope.backend = backend
    set_condition(
        scope.status.edit_conditions(), c.READY_CONDITION, False, c.DELETING_REASON, "deleting pool"
    )
    instances = await backend.list(scope.key.name)
    for instance in instances:
        if instance.state is not InstanceState.TERMINATED:
            await backend.delete(instance.id)
    remaining = 0
    for machine in map(EngineMachineView, pool_members(env.infra_machines, scope.key)):
        remaining += 1
        if not machine.deleting:
            await env.client.delete(
                env.provider.machine_resource,
                machine.metadata.name,
                scope.namespace,
                uid=machine.metadata.uid,
            )
    if remaining:
        return Result(requeue_after=_WAIT)
    if isinstance(backend, SupportsPurge):
        for instance in instances:
            await backend.purge(instance.id)
    meta = scope.pool.metadata
    meta.finalizers = [f for f in meta.finalizers or [] if f != env.provider.pool_finalizer]
    # Now, not when the pool is gone: a pool made again under its name before this engine
    # sees the deletion must not inherit what was kept about this one.
    env.memory.forget(scope.key)
    return Result()
