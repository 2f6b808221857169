"""Engine phases that change the pool: decide the target, then create and delete.

``decide`` validates the input (replicas, strategy, failure domains) and works out the desired
count, honouring ``replicas-managed-by``; ``act`` plans one step (``plan.plan``), deletes
victims through their owner Machines and creates instances through the backend.
Called in order by ``engine.PoolEngine``.
"""

from __future__ import annotations

import base64
import itertools
from collections import Counter

from machinepool.api import constants as c
from machinepool.api.kinds import MACHINE_POOLS, MACHINES
from machinepool.api.rollingupdate import InvalidStrategy, parse_strategy
from machinepool.api.views import MachinePoolView, MachineView
from machinepool.providers.pool.observe import machine_ready
from machinepool.providers.pool.plan import Member, Plan, PlanInput, plan
from machinepool.providers.pool.provider import SupportsWarmPool
from machinepool.providers.pool.scope import PoolScope
from machinepool.providers.pool.types import (
    CapacityError,
    CloudError,
    InstanceSpec,
    InstanceState,
    SupportsStart,
)
from machinepool.runtime import SECRETS, NotFound, Result, gather_bounded

__all__ = ["act", "created_message", "decide", "deleting_message", "failed_message"]

_BOOTING_REQUEUE = 2.0


async def decide(scope: PoolScope) -> Result:
    """Desired count, strategy and template hash; invalid input blocks with a clear message."""
    assert scope.machine_pool is not None
    spec = scope.machine_pool.spec
    replicas = 1 if spec.replicas is None else spec.replicas
    if replicas < 0:
        scope.block(
            "InvalidReplicas",
            f"MachinePool spec.replicas is {replicas}; it must be 0 or more",
        )
        return Result()
    try:
        scope.strategy = parse_strategy(scope.env.provider.strategy(scope.pool.raw))
    except InvalidStrategy as exc:
        scope.block("InvalidStrategy", str(exc))
        scope.strategy = None
        return Result()
    if _externally_managed(scope.machine_pool):
        replicas = _observed_size(scope)
        await _write_back_replicas(scope, replicas)
    scope.replicas = replicas
    provider = scope.env.provider
    if isinstance(provider, SupportsWarmPool):
        scope.warm_size = provider.warm_pool_size(scope.pool.raw, replicas)
    version = spec.template.spec.version or ""
    scope.template_hash, _ = scope.env.provider.template(scope.pool.raw, version)
    return Result()


def _externally_managed(mp: MachinePoolView) -> bool:
    value = (mp.metadata.annotations or {}).get(c.REPLICAS_MANAGED_BY_ANNOTATION)
    return value is not None and value != "false"  # exactly upstream's test: "False" manages


def _observed_size(scope: PoolScope) -> int:
    return sum(
        1
        for i in scope.instances
        if i.state is not InstanceState.TERMINATED and not _member_deleting(scope, i.id)
    )


async def _write_back_replicas(scope: PoolScope, replicas: int) -> None:
    """Something else owns the size: report it in MachinePool.spec.replicas, never change it."""
    assert scope.machine_pool is not None
    if scope.machine_pool.spec.replicas == replicas:
        return
    await scope.env.client.patch(
        MACHINE_POOLS,
        scope.machine_pool.metadata.name,
        {"spec": {"replicas": replicas}},
        scope.namespace,
    )


def _member_deleting(scope: PoolScope, name: str) -> bool:
    machine, infra_machine = scope.machines.get(name), scope.infra_machines.get(name)
    return (machine is not None and machine.deleting) or (
        infra_machine is not None and infra_machine.deleting
    )


def _members(scope: PoolScope) -> list[Member]:
    ready = scope.ready_ids or set()
    members = []
    pool = ((instance, False) for instance in scope.instances)
    warm_pool = ((instance, True) for instance in scope.warm)
    for instance, warm in itertools.chain(pool, warm_pool):
        if instance.state is InstanceState.TERMINATED and not warm:
            continue
        machine = scope.machines.get(instance.id)  # none for a warm instance
        annotations = (machine.metadata.annotations if machine else None) or {}
        # Marked by the core's rollout: replaced now, deleted by the core (drained) once its
        # replacement is Ready; it serves until then but no longer counts towards replicas.
        replacing = c.REPLACE_MACHINE_ANNOTATION in annotations
        deleting = _member_deleting(scope, instance.id) or replacing
        members.append(
            Member(
                id=instance.id,
                state=instance.state,
                failure_domain=instance.failure_domain,
                created=instance.created,
                up_to_date=instance.template_hash == scope.template_hash,
                # The core's MachinePool readyReplicas counts Ready Machines, and a Machine
                # turns Ready some time after its Node: counting the Node alone let a
                # rollout delete an old Machine before its replacement counted there, and
                # readyReplicas fell below replicas with maxUnavailable 0 (496 of 500 at
                # 4 x 500). A MachineDeployment's rollout waits for its Machines too.
                ready=instance.provider_id in ready
                and machine is not None
                and machine_ready(machine),
                deleting=deleting,
                delete_requested=c.DELETE_MACHINE_ANNOTATION in annotations,
                has_machine=machine is not None and not deleting,
                warm=warm,
            )
        )
    return members


def _failure_domains(scope: PoolScope) -> list[str]:
    """The MachinePool's failure domains the backend knows; all of the backend's when unset."""
    assert scope.machine_pool is not None
    assert scope.backend is not None
    offered = list(scope.backend.failure_domains())
    wanted = list(scope.machine_pool.spec.failure_domains or [])
    if not wanted:
        return offered
    unknown = [fd for fd in wanted if fd not in offered]
    if unknown:
        scope.block(
            "UnknownFailureDomain",
            f"MachinePool spec.failureDomains lists {', '.join(unknown)}, which the"
            f" infrastructure does not offer; use one of: {', '.join(offered)}",
        )
    return [fd for fd in wanted if fd in offered]


def _full_domains(scope: PoolScope, members: list[Member]) -> frozenset[str]:
    assert scope.backend is not None
    counts: dict[str, int] = {}
    for m in members:
        if m.active:
            counts[m.failure_domain] = counts.get(m.failure_domain, 0) + 1
    declared = {
        fd
        for fd, capacity in scope.backend.failure_domains().items()
        if capacity is not None and counts.get(fd, 0) >= capacity
    }
    return frozenset(declared | scope.memory.shortages.current())


async def act(scope: PoolScope) -> Result:
    """Plan one step and carry it out (nothing when ``decide`` found the input invalid)."""
    if scope.strategy is None or scope.backend is None:
        return Result()
    members = _members(scope)
    step = _plan(scope, members)
    if _picks_unmarked(step, members):
        await _read_machines(scope)
        members = _members(scope)
        step = _plan(scope, members)
    scope.rolling = any(m.active and not m.up_to_date for m in members)
    scope.plan = step
    by_id = {m.id: m for m in members}
    deleted: dict[str, list[str]] = {}
    for victim in step.delete:
        await _delete_machine(scope, victim)
        deleted.setdefault(_why_delete(scope, by_id.get(victim)), []).append(victim)
    for why, names in deleted.items():
        await scope.env.recorder.event(
            scope.pool.raw, "Normal", "SuccessfulDelete", deleting_message(names, why)
        )
    if step.delete_warm:
        await _delete_warm(scope, step.delete_warm)
    if step.start or step.create or step.create_warm:
        data = await _bootstrap_data(scope)
        if data is None:
            scope.block(
                "WaitingForBootstrapData",
                "MachinePool spec.template.spec.bootstrap.dataSecretName is not set or its"
                " Secret has no data yet",
            )
            return Result(requeue_after=_BOOTING_REQUEUE)
        if step.start:
            await _start_instances(scope, step.start, data)
        specs = _specs(scope, step.create, data) + _specs(scope, step.create_warm, data, warm=True)
        await _create_instances(scope, specs)
    booting = any(m.state is InstanceState.PENDING for m in members)
    return Result(requeue_after=_BOOTING_REQUEUE) if booting or step.create else Result()


def _plan(scope: PoolScope, members: list[Member]) -> Plan:
    assert scope.strategy is not None
    surge, unavailable = scope.strategy.resolve(scope.replicas)
    on_delete = scope.strategy.on_delete
    return plan(
        PlanInput(
            members=members,
            replicas=scope.replicas,
            # OnDelete: no surge of its own (the core's rollout holds its outdated Machines
            # while their replacements boot), so a replacement is only a deleted one's.
            surge=0 if on_delete else surge,
            unavailable=unavailable,
            delete_policy=scope.strategy.delete_policy,
            failure_domains=_failure_domains(scope),
            full_domains=_full_domains(scope, members),
            nodes_known=scope.ready_ids is not None,
            seed=str(scope.pool.metadata.uid or ""),
            warm_size=scope.warm_size if isinstance(scope.backend, SupportsStart) else 0,
            replace_outdated=not on_delete,
        )
    )


def _picks_unmarked(step: Plan, members: list[Member]) -> bool:
    """The step removes an up-to-date instance whose Machine the cache shows unmarked: a
    scale-down victim chosen by policy (a rollout's victims are outdated ones)."""
    by_id = {m.id: m for m in members}
    return any(
        (m := by_id.get(victim)) is not None
        and m.active
        and m.up_to_date
        and not m.delete_requested
        for victim in step.delete
    )


async def _read_machines(scope: PoolScope) -> None:
    """Replace the cached owner Machines with the API server's, before a scale-down chooses.

    The cluster autoscaler marks the Machine it wants gone (``delete-machine``) and then
    lowers the size: two writes that reach this engine on two watches. When the MachinePool's
    arrives first, the cache shows no mark and the policy would pick another instance, which
    cannot be undone: the Node the autoscaler chose stays and one it kept is drained. A read
    by label sees every write made before the size changed. Only steps that remove an unmarked
    up-to-date instance pay it: one list per scale-down, none in a rollout or a settled pool.
    The AWS provider reads its candidates the same way.
    """
    assert scope.machine_pool is not None
    mp = scope.machine_pool
    selector = (
        f"{c.POOL_NAME_LABEL}={c.pool_name_label_value(mp.metadata.name or '')},"
        f"{c.CLUSTER_NAME_LABEL}={mp.spec.cluster_name or ''}"
    )
    listed = await scope.env.client.list(MACHINES, scope.namespace, label_selector=selector)
    infra_kind = scope.env.provider.machine_resource.kind
    fresh: dict[str, MachineView] = {}
    for obj in listed.items:
        machine = MachineView(obj)
        ref = machine.spec.infrastructure_ref
        if ref.kind == infra_kind and ref.name in scope.infra_machines:
            fresh[str(ref.name)] = machine
    scope.machines = fresh


# One Event per step and kind of change, naming at most this many objects: a step changes up
# to ``plan.BURST`` instances, and one Event for each would pass the recorder's per-object spam
# filter (25, then one per 5 minutes) only for the first few steps of a big pool.
_NAMED = 10


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMED])
    return shown if len(names) <= _NAMED else f"{shown} and {len(names) - _NAMED} more"


def deleting_message(names: list[str], why: str) -> str:
    """The ``SuccessfulDelete`` note for the Machines one step deletes for one reason."""
    if len(names) == 1:
        return f"Deleting Machine {names[0]} ({why}); its Node is drained first"
    return (
        f"Deleting {len(names)} Machines ({why}): {_listed(names)}; their Nodes are drained first"
    )


def created_message(specs: list[InstanceSpec], version: str) -> str:
    """The ``SuccessfulCreate`` note for the instances one step created: how many, at which
    version, how many in each failure domain, and their ids."""
    version = version or "no version"
    if len(specs) == 1:
        zone = specs[0].failure_domain or "the default zone"
        return f"Created instance {specs[0].instance_id} in {zone} ({version})"
    zones = Counter(spec.failure_domain or "the default zone" for spec in specs)
    where = ", ".join(f"{zone} {n}" for zone, n in zones.items())
    ids = _listed([spec.instance_id for spec in specs])
    return f"Created {len(specs)} instances ({version}): {where}; {ids}"


def failed_message(ids: list[str], error: str) -> str:
    """The ``CloudError`` condition message and ``FailedCreate`` note for the instances one
    step could not create for one reason: a flaky cloud refuses many creates of a step alike,
    and one line each would bury the condition and pass the Event filter only at first."""
    if len(ids) == 1:
        return f"creating instance {ids[0]} failed: {error}"
    return f"creating {len(ids)} instances failed: {error}; {_listed(ids)}"


def _why_delete(scope: PoolScope, victim: Member | None) -> str:
    if victim is not None and victim.delete_requested:
        return "marked for deletion"
    if victim is not None and not victim.up_to_date:
        return "replaced by an up-to-date instance"
    return f"scale down to {scope.replicas}"


async def _delete_machine(scope: PoolScope, name: str) -> None:
    """Scale-down goes through the owner Machine: core drains the Node, then deletes the infra
    machine, whose finalizer terminates the instance."""
    machine = scope.machines[name]
    uid = machine.metadata.uid or ""
    await scope.env.client.delete(MACHINES, name, scope.namespace, uid=uid)
    scope.memory.expected.deleted(name, uid)


async def _bootstrap_data(scope: PoolScope) -> tuple[bytes, str] | None:
    assert scope.machine_pool is not None
    name = scope.machine_pool.spec.template.spec.bootstrap.data_secret_name
    if not name:
        return None
    try:
        secret = await scope.env.client.get(SECRETS, name, scope.namespace)
    except NotFound:
        return None
    value = (secret.get("data") or {}).get("value")
    if not value:
        return None
    return base64.b64decode(value), f"{name}@{secret['metadata'].get('resourceVersion', '')}"


def _specs(
    scope: PoolScope, domains: list[str], data: tuple[bytes, str], *, warm: bool = False
) -> list[InstanceSpec]:
    """Specs of new instances in ``domains``, with ids from the next free ordinals (warm
    instances' included, so no id is used twice) and the current bootstrap data."""
    assert scope.machine_pool is not None
    payload, version_tag = data
    version = scope.machine_pool.spec.template.spec.version or ""
    template_hash, attributes = scope.env.provider.template(scope.pool.raw, version)
    taken = [*scope.instances, *scope.warm]
    next_index = max((i.index for i in taken), default=0) + 1 + scope.planned
    scope.planned += len(domains)
    return [
        InstanceSpec(
            pool_id=scope.key.name,
            instance_id=scope.env.provider.instance_id(scope.pool.raw, next_index + offset),
            index=next_index + offset,
            failure_domain=domain,
            template_hash=template_hash,
            version=version,
            bootstrap_data=payload,
            bootstrap_version=version_tag,
            attributes=attributes,
            warm=warm,
        )
        for offset, domain in enumerate(domains)
    ]


async def _start_instances(scope: PoolScope, ids: list[str], data: tuple[bytes, str]) -> None:
    """Start warm instances into the pool, with the current bootstrap data; the next
    reconcile lists them as members and gives each its infra machine."""
    backend = scope.backend
    assert isinstance(backend, SupportsStart)
    payload, version_tag = data
    outcomes = await gather_bounded([backend.start(i, payload, version_tag) for i in ids])
    started = []
    for instance_id, outcome in zip(ids, outcomes, strict=True):
        if isinstance(outcome, CloudError):
            scope.block("CloudError", f"starting warm instance {instance_id} failed: {outcome}")
            scope.errors.append(outcome)
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            started.append(instance_id)
    if started:
        scope.memory.expected.started(started)
        await scope.env.recorder.event(
            scope.pool.raw,
            "Normal",
            "SuccessfulStart",
            f"Started {len(started)} warm instance(s): {_listed(started)}",
        )


async def _delete_warm(scope: PoolScope, ids: list[str]) -> None:
    """Terminate warm instances directly: they have no Node to drain and no Machine."""
    assert scope.backend is not None
    outcomes = await gather_bounded([scope.backend.delete(i) for i in ids])
    for instance_id, outcome in zip(ids, outcomes, strict=True):
        if isinstance(outcome, CloudError):
            scope.errors.append(outcome)
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            scope.memory.expected.terminated(instance_id)


async def _create_instances(scope: PoolScope, specs: list[InstanceSpec]) -> None:
    """Create the instances of ``specs`` (``_specs``) through the backend."""
    assert scope.backend is not None
    if not specs:
        return
    version = specs[0].version
    # Ids come from ordinals fixed above, so the calls are independent: sent together (at
    # most CALLS_IN_FLIGHT at once), a step of 100 instances costs a few round trips, not
    # 100 in a row while every other pool waits for this worker.
    backend = scope.backend
    outcomes = await gather_bounded([backend.create(spec) for spec in specs])
    created: list[InstanceSpec] = []
    refused: dict[str, list[str]] = {}
    unexpected: BaseException | None = None
    for spec, outcome in zip(specs, outcomes, strict=True):
        if isinstance(outcome, CloudError):
            elsewhere = ""
            if isinstance(outcome, CapacityError):
                # As an Auto Scaling group does: launch in the other zones for a while.
                scope.memory.shortages.record(outcome.failure_domain)
                elsewhere = (
                    "; new instances go to other failure domains for"
                    f" {scope.memory.shortages.retry_after:.0f} s"
                )
            refused.setdefault(f"{outcome}{elsewhere}", []).append(spec.instance_id)
            scope.errors.append(outcome)
        elif isinstance(outcome, BaseException):
            # Raised once the instances that were made are counted and told of.
            unexpected = unexpected or outcome
        else:
            (scope.warm if outcome.warm else scope.instances).append(outcome)
            scope.memory.expected.created([outcome.id])
            created.append(spec)
    for error, ids in refused.items():
        message = failed_message(ids, error)
        scope.block("CloudError", message)
        await scope.env.recorder.event(
            scope.pool.raw, "Warning", "FailedCreate", message[:1].upper() + message[1:]
        )
    members = [spec for spec in created if not spec.warm]
    warm = [spec for spec in created if spec.warm]
    if members:
        await scope.env.recorder.event(
            scope.pool.raw, "Normal", "SuccessfulCreate", created_message(members, version)
        )
    if warm:
        # Told apart: a warm instance is no member of the pool until it is started.
        await scope.env.recorder.event(
            scope.pool.raw,
            "Normal",
            "SuccessfulCreateWarm",
            f"{created_message(warm, version)}, into the warm pool",
        )
    if unexpected is not None:
        raise unexpected
