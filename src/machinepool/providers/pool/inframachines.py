"""Infra machines: one per live instance, created and kept current by the engine, and the
controller that releases an instance when its infra machine is deleted.

``sync_infra_machines`` is an engine phase. ``InfraMachineReconciler`` is its own controller:
an infra machine carries the provider's finalizer, so deleting it (which the core Machine
controller does after draining the Node) terminates the instance before the object goes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

from machinepool.api import constants as c
from machinepool.api.conditions import remove_condition, set_condition
from machinepool.api.kinds import MACHINES
from machinepool.api.meta import deleted_for_move
from machinepool.api.views import EngineMachineView, MachineView
from machinepool.providers.pool.provider import SupportsPurge
from machinepool.providers.pool.scope import EngineEnv, PoolScope
from machinepool.providers.pool.types import Instance, InstanceState
from machinepool.runtime import (
    AlreadyExists,
    NotFound,
    Obj,
    ObjectKey,
    OwnReader,
    Patcher,
    Phase,
    Result,
    Steps,
    Stop,
    Then,
    gather_bounded,
)

__all__ = ["InfraMachineReconciler", "prune_records", "sync_infra_machines"]

ECHO_WAIT_SECONDS = 30.0
"""How long a status this engine wrote stands for the cache's older copy of it."""


async def sync_infra_machines(scope: PoolScope) -> Result:
    """Create missing infra machines, refresh their status, and clean up after instances that
    vanished out of band (through their Machine when there is one)."""
    live = {i.id: i for i in scope.instances if i.state is not InstanceState.TERMINATED}
    missing = [i for i in live.values() if i.id not in scope.infra_machines]
    # Only the infra machines whose status would change get a write, and a task for it: in a
    # pool of 1,000 nearly all are current, and a task each per reconcile was a quarter of
    # the engine's time. A status this engine wrote for the instance's state that the cache
    # does not show yet is not written again: the next pass can come before the watch brings
    # the echo (a new instance's events queue the pool, and a big pool's report may wait).
    now = time.monotonic()
    sent = scope.memory.statuses_sent
    unseen: dict[str, tuple[float, tuple[str, bool | None]]] = {}
    stale: list[tuple[str, dict[str, Any]]] = []
    for name, m in scope.infra_machines.items():
        if name not in live or m.deleting:
            continue
        if (status := _outdated_status(m, live[name], _up_to_date(scope, live[name]))) is None:
            continue
        last = sent.get(name)
        if (
            last is not None
            and last[1] == _mark(scope, live[name])
            and now - last[0] < ECHO_WAIT_SECONDS
        ):
            unseen[name] = last
        else:
            stale.append((name, status))
    # Independent writes, sent together (bounded): see runtime.gather_bounded.
    created = await gather_bounded(_create(scope, i) for i in missing)
    refreshed = await gather_bounded(_patch_status(scope, name, s) for name, s in stale)
    for instance, outcome in zip(missing, created, strict=True):
        if isinstance(outcome, BaseException):
            raise outcome
        scope.infra_machines[instance.id] = outcome
        unseen[instance.id] = (now, _mark(scope, live[instance.id]))
    for (name, _), failure in zip(stale, refreshed, strict=True):
        if isinstance(failure, BaseException):
            raise failure
        unseen[name] = (now, _mark(scope, live[name]))
    scope.memory.statuses_sent = unseen
    for name, machine in scope.infra_machines.items():
        if name not in live and not machine.deleting:
            await _release(scope, name, machine)
    for owner in scope.unbacked_machines:
        name = owner.spec.infrastructure_ref.name
        if not owner.deleting and name not in scope.infra_machines and name not in live:
            await _release_orphan(scope, owner)
    return Result()


async def _create(scope: PoolScope, instance: Instance) -> EngineMachineView:
    env = scope.env
    mp = scope.machine_pool
    assert mp is not None
    pool_meta = scope.pool.metadata
    pool_api_version = scope.pool.api_version
    body: Obj = {
        "apiVersion": env.provider.machine_resource.api_version,
        "kind": env.provider.machine_resource.kind,
        "metadata": {
            "name": instance.id,
            "namespace": scope.namespace,
            "labels": {
                **c.inherited_labels(pool_meta.labels),
                c.CLUSTER_NAME_LABEL: mp.spec.cluster_name or "",
                c.POOL_NAME_LABEL: c.pool_name_label_value(mp.metadata.name),
            },
            "ownerReferences": [
                {
                    "apiVersion": env.provider.pool_resource.api_version
                    if pool_api_version is None
                    else pool_api_version,
                    "kind": env.provider.pool_resource.kind,
                    "name": pool_meta.name,
                    "uid": pool_meta.uid,
                }
            ],
            "finalizers": [env.provider.machine_finalizer],
        },
        "spec": {
            "providerID": instance.provider_id,
            "instanceID": instance.id,
            "failureDomain": instance.failure_domain,
        },
    }
    try:
        created = await env.client.create(env.provider.machine_resource, body, scope.namespace)
    except AlreadyExists:
        created = await env.client.get(env.provider.machine_resource, instance.id, scope.namespace)
    machine = EngineMachineView(created)
    if (status := _outdated_status(machine, instance, _up_to_date(scope, instance))) is not None:
        await _patch_status(scope, instance.id, status)
    return machine


def _up_to_date(scope: PoolScope, instance: Instance) -> bool | None:
    """The infra machine's UpToDate: whether ``instance`` runs the pool's current template,
    reported only under strategy OnDelete, where someone else (the core's rollout) decides
    which instance goes and must know; ``None`` (no condition) otherwise, as the engine
    replaces outdated instances itself then, and the flip of every old one would be a write
    per replaced instance that no one reads."""
    if scope.strategy is None or not scope.strategy.on_delete or not scope.template_hash:
        return None
    return instance.template_hash == scope.template_hash


def _mark(scope: PoolScope, instance: Instance) -> tuple[str, bool | None]:
    return (instance.state.value, _up_to_date(scope, instance))


def _machine_status(
    machine: EngineMachineView, instance: Instance, up_to_date: bool | None
) -> dict[str, Any]:
    """The whole status an infra machine of ``instance`` should have (sent as one patch)."""
    status: dict[str, Any] = {
        "ready": instance.state is InstanceState.RUNNING,
        "instanceState": instance.state.value,
        "initialization": {"provisioned": True},
        "conditions": list(machine.status.conditions or []),
    }
    running = instance.state is InstanceState.RUNNING
    reason = c.READY_REASON if running else c.NOT_READY_REASON
    message = "" if running else f"instance is {instance.state.value}"
    set_condition(status["conditions"], c.READY_CONDITION, running, reason, message)
    if up_to_date is None:
        remove_condition(status["conditions"], c.UP_TO_DATE_CONDITION)
    elif up_to_date:
        set_condition(status["conditions"], c.UP_TO_DATE_CONDITION, True, c.UP_TO_DATE_REASON, "")
    else:
        set_condition(
            status["conditions"],
            c.UP_TO_DATE_CONDITION,
            False,
            c.NOT_UP_TO_DATE_REASON,
            "instance runs an older template of its pool; it is replaced once its Machine is"
            " deleted (strategy OnDelete)",
        )
    return status


def _outdated_status(
    machine: EngineMachineView, instance: Instance, up_to_date: bool | None
) -> dict[str, Any] | None:
    """The status ``machine`` should have, or ``None`` when it has it already (pure)."""
    current = machine.status.raw or {}
    desired = _machine_status(machine, instance, up_to_date)
    return None if all(current.get(k) == v for k, v in desired.items()) else desired


async def _patch_status(scope: PoolScope, name: str, status: dict[str, Any]) -> None:
    env = scope.env
    await env.client.patch(
        env.provider.machine_resource,
        name,
        {"status": status},
        scope.namespace,
        subresource="status",
    )


async def _release(scope: PoolScope, name: str, machine: EngineMachineView) -> None:
    """The instance is gone: delete its Machine (which drains and deletes the rest), or the
    infra machine itself when no Machine was ever made for it."""
    env = scope.env
    owner = scope.machines.get(name)
    if owner is not None:
        if not owner.deleting:
            await env.client.delete(MACHINES, name, scope.namespace, uid=owner.metadata.uid)
        return
    await env.client.delete(
        env.provider.machine_resource, name, scope.namespace, uid=machine.metadata.uid
    )


async def _release_orphan(scope: PoolScope, machine: MachineView) -> None:
    """Delete a Machine of the pool whose infra machine and instance are both gone.

    The core makes a pool Machine for each infra machine it sees; one whose infra machine
    went before the Machine did (deleted out of band, or a Machine applied from a cache that
    still showed a deleted infra machine) would wait for a Node forever, since the engine
    releases instances only through their infra machines. The caches may lag a new infra
    machine, so only one the API does not have either is taken for gone.
    """
    env = scope.env
    name = machine.spec.infrastructure_ref.name
    try:
        await env.client.get(env.provider.machine_resource, name, scope.namespace)
        return
    except NotFound:
        pass
    with contextlib.suppress(NotFound):
        await env.client.delete(
            MACHINES, machine.metadata.name or "", scope.namespace, uid=machine.metadata.uid
        )
    await env.recorder.event(
        scope.pool.raw,
        "Normal",
        "SuccessfulDelete",
        f"Deleting Machine {machine.metadata.name}: its {env.provider.machine_resource.kind}"
        f" {name} and its instance are gone",
    )


class InfraMachineReconciler(Steps[EngineMachineView]):
    """Terminates an instance when its infra machine is deleted, then lets the object go:
    ``runtime.drive`` over these steps, a chain over the infra machine itself (its view is the
    scope), the finalizer's release written on exit (locked to the copy's resourceVersion, a
    list, so a stale copy cannot undo a change)."""

    chain = True

    def __init__(self, env: EngineEnv) -> None:
        self.env = env
        self.kind = env.provider.machine_resource.kind
        self.reader = OwnReader(env.client, env.provider.machine_resource, env.infra_machines)

    def scope(self, key: ObjectKey, obj: Obj, patcher: Patcher) -> EngineMachineView | Stop:
        machine = EngineMachineView(obj)
        finalizers = machine.metadata.finalizers or []
        if not machine.deleting or self.env.provider.machine_finalizer not in finalizers:
            return Stop(then=Then.NOTHING)
        return machine

    def phases(self, scope: EngineMachineView) -> Sequence[Phase[EngineMachineView]]:
        return (self.terminate_instance, self.release_finalizer)

    def observed(self, scope: EngineMachineView) -> bool:
        return False  # nothing in the status is computed here

    async def terminate_instance(self, machine: EngineMachineView) -> Result:
        """Terminate the infra machine's instance (not one clusterctl move deleted: it lives
        on in the target cluster, and so does its instance)."""
        env = self.env
        pool = _pool_of(env, machine)
        instance_id = str(machine.spec.instance_id or machine.metadata.name)
        if pool is not None and not deleted_for_move(machine.raw):
            backend = await env.provider.backend(pool)
            await backend.delete(instance_id)
            env.memory.of(ObjectKey.of(pool)).expected.terminated(instance_id)
        return Result()

    async def release_finalizer(self, machine: EngineMachineView) -> Result:
        """Let the infra machine go: its instance is terminated."""
        meta, finalizer = machine.metadata, self.env.provider.machine_finalizer
        meta.finalizers = [f for f in meta.finalizers or [] if f != finalizer]
        return Result()


def _pool_of(env: EngineEnv, machine: EngineMachineView) -> Obj | None:
    kind = env.provider.pool_resource.kind
    namespace = machine.metadata.namespace or ""
    for ref in machine.metadata.owner_references or []:
        if ref.get("kind") == kind:
            return env.pools.get(str(ref.get("name", "")), namespace)
    return None


async def prune_records(scope: PoolScope) -> Result:
    """Forget terminated instances whose infra machine is gone, keeping the one with the
    highest ordinal so ids are never reused."""
    backend = scope.backend
    if not isinstance(backend, SupportsPurge):
        return Result()
    top = max((i.index for i in [*scope.instances, *scope.warm]), default=0)
    for instance in scope.instances:
        if (
            instance.state is InstanceState.TERMINATED
            and instance.index != top
            and instance.id not in scope.infra_machines
        ):
            await backend.purge(instance.id)
    return Result()
