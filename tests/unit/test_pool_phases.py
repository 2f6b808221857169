"""The pool engine's phase modules, each over a scope ``builders.engine_scope`` made: the
engine's informers hold the objects a test gives, its backend is a cloud in a dict, and no
apiserver is involved. Writes to the apiserver (infra machines created, Machines deleted,
replicas written back) are the e2e tests' (``tests/e2e/test_sim_pool.py``); ``plan`` and
``strategy`` have their own modules (``test_pool_plan.py``, ``test_pool_strategy.py``), and
here they are fed from a scope as ``scale.act`` feeds them."""

from __future__ import annotations

import dataclasses
import time

import pytest
from tests.support.builders import machine_pool, sim_machine_pool
from tests.support.conditions import condition
from tests.unit.builders import (
    NAMESPACE,
    MemoryBackend,
    cluster,
    engine_scope,
    infra_machine,
    instance,
    machine,
)

from machinepool.api import constants as c
from machinepool.api.rollingupdate import DeletePolicy
from machinepool.providers.pool import delete, inframachines, observe, scale
from machinepool.providers.pool.capacity import ZoneShortages
from machinepool.providers.pool.engine import PoolEngine
from machinepool.providers.pool.inframachines import InfraMachineReconciler
from machinepool.providers.pool.scope import PoolMemory, PoolScope
from machinepool.providers.pool.types import InstanceState
from machinepool.runtime import ObjectKey, Result, Stop, Then

KEY = ObjectKey(NAMESPACE, "pool")


async def _owned(scope: PoolScope) -> PoolScope:
    assert await observe.load_owner(scope) == Result()
    return scope


# -- observe --------------------------------------------------------------------------------


async def test_an_owned_pool_finds_its_machine_pool_cluster_and_backend() -> None:
    backend = MemoryBackend()
    scope = await _owned(engine_scope(backend=backend))
    assert scope.machine_pool is not None
    assert scope.machine_pool.metadata.name == "pool"
    assert scope.cluster is not None
    assert scope.backend is backend
    paused = condition(scope.pool.raw, c.PAUSED_CONDITION)
    assert (paused["status"], paused["reason"]) == ("False", c.NOT_PAUSED_REASON)


async def test_a_paused_cluster_stops_the_pool_at_its_paused_condition() -> None:
    scope = engine_scope(clusters=[cluster(paused=True)])
    assert await observe.load_owner(scope) == Stop()
    assert scope.backend is None, "no cloud call while paused"
    paused = condition(scope.pool.raw, c.PAUSED_CONDITION)
    assert (paused["status"], paused["reason"]) == ("True", c.PAUSED_REASON)


async def test_a_pool_a_machine_pool_names_waits_quietly_for_its_adoption() -> None:
    scope = engine_scope(owned=False)
    stop = await observe.load_owner(scope)
    assert isinstance(stop, Stop)
    assert stop.then is Then.NOTHING
    assert scope.blocked == []


async def test_a_pool_nothing_adopts_says_it_waits_for_an_owner() -> None:
    stranger = machine_pool(NAMESPACE, "pool", infrastructure="elsewhere")
    scope = engine_scope(owned=False, mp=stranger)
    assert await observe.load_owner(scope) == Stop()
    assert scope.blocked == [("WaitingForOwner", "waiting for a MachinePool to adopt this pool")]


async def test_instances_are_matched_to_their_infra_machines_and_machines() -> None:
    backend = MemoryBackend.of(instance(1), instance(2), instance(3, warm=True))
    scope = await _owned(
        engine_scope(
            backend=backend,
            infra_machines=[infra_machine("i-1"), infra_machine("i-2")],
            machines=[machine("i-1", infra="i-1"), machine("orphan", infra="i-9")],
        )
    )
    assert await observe.list_instances(scope) == Result()
    assert [i.id for i in scope.instances] == ["i-1", "i-2"]
    assert [i.id for i in scope.warm] == ["i-3"]
    assert sorted(scope.infra_machines) == ["i-1", "i-2"]
    assert list(scope.machines) == ["i-1"]
    assert [m.metadata.name for m in scope.unbacked_machines] == ["orphan"]


# -- scale ----------------------------------------------------------------------------------


async def test_negative_replicas_block_the_pool_with_what_to_set() -> None:
    scope = await _owned(engine_scope(mp=machine_pool(NAMESPACE, "pool", replicas=-1)))
    await scale.decide(scope)
    assert scope.blocked == [
        ("InvalidReplicas", "MachinePool spec.replicas is -1; it must be 0 or more")
    ]


async def test_an_invalid_strategy_blocks_the_pool_and_plans_nothing() -> None:
    pool = sim_machine_pool(NAMESPACE, "pool")
    pool["spec"]["strategy"] = {"rollingUpdate": {"maxSurge": "lots"}}
    scope = await _owned(engine_scope(pool))
    await scale.decide(scope)
    assert scope.strategy is None
    assert [reason for reason, _ in scope.blocked] == ["InvalidStrategy"]
    assert await scale.act(scope) == Result()
    assert scope.plan is None


async def test_decide_takes_the_size_strategy_and_template_from_the_pool() -> None:
    pool = sim_machine_pool(NAMESPACE, "pool")
    pool["spec"]["strategy"] = {"rollingUpdate": {"maxSurge": 2, "deletePolicy": "Newest"}}
    scope = await _owned(engine_scope(pool, mp=machine_pool(NAMESPACE, "pool", replicas=4)))
    await scale.decide(scope)
    assert scope.replicas == 4
    assert scope.strategy is not None
    assert scope.strategy.resolve(4) == (2, 0)
    assert scope.strategy.delete_policy is DeletePolicy.NEWEST
    assert scope.template_hash
    assert scope.blocked == []


async def test_an_externally_managed_size_is_what_the_cloud_runs() -> None:
    mp = machine_pool(
        NAMESPACE, "pool", replicas=2, annotations={c.REPLICAS_MANAGED_BY_ANNOTATION: "asg"}
    )
    backend = MemoryBackend.of(
        instance(1), instance(2), instance(3, state=InstanceState.TERMINATED)
    )
    scope = await _owned(engine_scope(mp=mp, backend=backend))
    await observe.list_instances(scope)
    await scale.decide(scope)  # 2 live instances = spec.replicas: nothing to write back
    assert scope.replicas == 2


async def test_members_count_a_ready_node_only_with_its_machine_ready() -> None:
    ready = {c.READY_CONDITION: "True"}
    backend = MemoryBackend.of(instance(1), instance(2), instance(3, template_hash="old"))
    scope = await _owned(
        engine_scope(
            backend=backend,
            infra_machines=[infra_machine(f"i-{n}") for n in (1, 2, 3)],
            machines=[
                machine("i-1", infra="i-1", conditions=ready),
                machine("i-2", infra="i-2", annotations={c.DELETE_MACHINE_ANNOTATION: ""}),
                machine("i-3", infra="i-3", conditions=ready),
            ],
        )
    )
    await observe.list_instances(scope)
    await scale.decide(scope)
    scope.ready_ids = {i.provider_id for i in scope.instances}
    members = {m.id: m for m in scale._members(scope)}
    assert members["i-1"].ready
    assert not members["i-2"].ready, "its Node is Ready, its Machine not yet"
    assert members["i-2"].delete_requested
    assert not members["i-3"].up_to_date
    assert scale._why_delete(scope, members["i-2"]) == "marked for deletion"
    assert scale._why_delete(scope, members["i-3"]) == "replaced by an up-to-date instance"


async def test_unknown_failure_domains_block_and_only_offered_ones_are_used() -> None:
    mp = machine_pool(NAMESPACE, "pool", failure_domains=["zone-a", "zone-x"])
    scope = await _owned(engine_scope(mp=mp))
    assert scale._failure_domains(scope) == ["zone-a"]
    ((reason, message),) = scope.blocked
    assert reason == "UnknownFailureDomain"
    assert "zone-x" in message
    assert "zone-a, zone-b, zone-c" in message


async def test_a_step_is_planned_from_the_scope_as_act_plans_it() -> None:
    scope = await _owned(engine_scope(mp=machine_pool(NAMESPACE, "pool", replicas=3)))
    await observe.list_instances(scope)
    await scale.decide(scope)
    scope.ready_ids = set()
    step = scale._plan(scope, scale._members(scope))
    assert len(step.create) == 3
    assert sorted(step.create) == ["zone-a", "zone-b", "zone-c"], "spread over the zones"


def test_step_messages_name_what_they_did() -> None:
    assert scale.deleting_message(["m1"], "scale down to 2") == (
        "Deleting Machine m1 (scale down to 2); its Node is drained first"
    )
    many = scale.deleting_message([f"m{i}" for i in range(12)], "why")
    assert many.startswith("Deleting 12 Machines (why): m0, m1")
    assert "and 2 more" in many
    assert scale.failed_message(["i-1", "i-2"], "boom") == (
        "creating 2 instances failed: boom; i-1, i-2"
    )


# -- capacity -------------------------------------------------------------------------------


async def test_a_zone_out_of_capacity_is_full_until_its_retry_time() -> None:
    clock = [100.0]
    backend = MemoryBackend.of(instance(1, zone="zone-b"), zones={"zone-a": None, "zone-b": 1})
    scope = await _owned(engine_scope(backend=backend))
    scope.memory.shortages = ZoneShortages(retry_after=60.0, clock=lambda: clock[0])
    await observe.list_instances(scope)
    members = scale._members(scope)
    assert scale._full_domains(scope, members) == {"zone-b"}, "its declared capacity"
    scope.memory.shortages.record("zone-a")
    assert scale._full_domains(scope, members) == {"zone-a", "zone-b"}
    clock[0] += 61
    assert scale._full_domains(scope, members) == {"zone-b"}, "tried again"


# -- memory ---------------------------------------------------------------------------------


async def test_forgetting_a_pool_drops_everything_kept_about_it() -> None:
    """What the engine keeps about a pool, its infra machine controller's record of an
    instance it terminated included, goes with the one ``forget``: a scope made afterwards for
    the same key remembers nothing (a map kept beside ``EngineEnv.memory`` would)."""
    backend = MemoryBackend.of(instance(1, zone="zone-a"), zones={"zone-a": None})
    scope = await _owned(engine_scope(backend=backend))
    engine = PoolEngine(scope.env)
    kept = scope.memory
    await InfraMachineReconciler(scope.env).terminate_instance(
        observe.EngineMachineView(infra_machine("i-1"))
    )
    backend.instances["i-1"] = instance(1, zone="zone-a")  # the records cache is behind
    kept.expected.created(["i-2"])
    kept.shortages.record("zone-a")
    kept.statuses_sent["i-1"] = (time.monotonic(), ("running", None))
    kept.rolling = True
    kept.written_at = time.monotonic()
    filled = {"expected", "shortages", "statuses_sent", "rolling", "written_at"}
    assert {f.name for f in dataclasses.fields(PoolMemory)} == filled, "fill each field above"
    await observe.list_instances(scope)
    assert await observe.await_own_writes(scope) == Stop(requeue_after=1.0, then=Then.NOTHING)
    assert scale._full_domains(scope, scale._members(scope)) == {"zone-a"}

    engine.forget(KEY)
    fresh = engine.scope(KEY, scope.pool.raw, None)  # type: ignore[arg-type]
    assert isinstance(fresh, PoolScope)
    fresh = await _owned(fresh)
    await observe.list_instances(fresh)
    assert await observe.await_own_writes(fresh) == Result(), "nothing expected"
    assert scale._full_domains(fresh, scale._members(fresh)) == frozenset(), "no zone short"
    assert fresh.memory.statuses_sent == {}
    assert (fresh.memory.rolling, fresh.memory.written_at) == (False, None)


# -- machines -------------------------------------------------------------------------------


async def test_infra_machines_in_step_with_their_instances_get_no_write() -> None:
    backend = MemoryBackend.of(instance(1))
    current = inframachines._machine_status(
        observe.EngineMachineView(infra_machine("i-1")), instance(1), None
    )
    scope = await _owned(
        engine_scope(backend=backend, infra_machines=[infra_machine("i-1", status=current)])
    )
    await observe.list_instances(scope)
    assert await inframachines.sync_infra_machines(scope) == Result()
    assert scope.memory.statuses_sent == {}


async def test_a_status_sent_for_the_same_state_is_not_sent_again_before_its_echo() -> None:
    backend = MemoryBackend.of(instance(1))
    scope = await _owned(engine_scope(backend=backend, infra_machines=[infra_machine("i-1")]))
    await observe.list_instances(scope)
    sent = (time.monotonic(), ("running", None))
    scope.memory.statuses_sent = {"i-1": sent}
    assert await inframachines.sync_infra_machines(scope) == Result()  # no client: nothing written
    assert scope.memory.statuses_sent == {"i-1": sent}


def test_an_infra_machines_status_follows_its_instances_state() -> None:
    view = observe.EngineMachineView(infra_machine("i-1"))
    status = inframachines._machine_status(view, instance(1, state=InstanceState.PENDING), None)
    assert status["ready"] is False
    assert status["instanceState"] == "pending"
    ready = condition({"status": status}, c.READY_CONDITION)
    assert (ready["status"], ready["message"]) == ("False", "instance is pending")


async def test_terminated_records_are_pruned_but_the_highest_ordinal_is_kept() -> None:
    gone = InstanceState.TERMINATED
    backend = MemoryBackend.of(
        instance(1, state=gone), instance(2, state=gone), instance(3), instance(4, state=gone)
    )
    scope = await _owned(engine_scope(backend=backend, infra_machines=[infra_machine("i-2")]))
    await observe.list_instances(scope)
    assert await inframachines.prune_records(scope) == Result()
    assert backend.purged == ["i-1"], "i-2 has its infra machine still, i-4 the top ordinal"


# -- delete ---------------------------------------------------------------------------------


async def test_deleting_a_pool_ends_its_instances_then_drops_the_finalizer() -> None:
    backend = MemoryBackend.of(instance(1), instance(2, state=InstanceState.TERMINATED))
    scope = engine_scope(backend=backend)
    scope.memory.shortages.record("zone-a")
    assert await delete.delete_pool(scope) == Result()
    assert backend.deleted == ["i-1"]
    assert sorted(backend.purged) == ["i-1", "i-2"]
    assert scope.pool.metadata.finalizers == []
    assert KEY not in scope.env.memory, "all it kept about the pool forgotten with its finalizer"
    ready = condition(scope.pool.raw, c.READY_CONDITION)
    assert (ready["status"], ready["reason"]) == ("False", c.DELETING_REASON)


async def test_a_pool_waits_for_its_infra_machines_to_go() -> None:
    going = infra_machine("i-1")
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    scope = engine_scope(backend=MemoryBackend.of(instance(1)), infra_machines=[going])
    result = await delete.delete_pool(scope)
    assert result.requeue_after == pytest.approx(1.0)
    assert scope.pool.metadata.finalizers, "kept until its infra machines are gone"


def test_an_infra_machine_says_whether_its_instance_is_up_to_date_only_when_asked() -> None:
    """Under OnDelete the core's rollout reads UpToDate from the infra machine; otherwise the
    engine writes none (and removes one left by an earlier OnDelete)."""
    view = observe.EngineMachineView(infra_machine("i-1"))
    old = inframachines._machine_status(view, instance(1), False)
    assert condition({"status": old}, c.UP_TO_DATE_CONDITION)["status"] == "False"
    after = observe.EngineMachineView(infra_machine("i-1", status=old))
    cleared = inframachines._machine_status(after, instance(1), None)
    assert all(x["type"] != c.UP_TO_DATE_CONDITION for x in cleared["conditions"])


async def test_decide_reads_an_on_delete_strategy() -> None:
    pool = sim_machine_pool(NAMESPACE, "pool")
    pool["spec"]["strategy"] = {"type": "OnDelete"}
    scope = await _owned(engine_scope(pool))
    await scale.decide(scope)
    assert scope.strategy is not None
    assert scope.strategy.on_delete
    assert scope.blocked == []
