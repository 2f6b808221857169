"""The core MachinePool controller's phase modules, each over a scope ``builders.pool_scope``
made: what a phase decides from what it was given, with no apiserver. Paths that write to
one (adoption, Node patches, Machine applies, deletions) are the integration tests'
(``tests/integration/controllers``); pure helpers the phases share are in
``test_core_status.py``."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta

import pytest
from tests.support.builders import machine_pool
from tests.support.conditions import condition
from tests.unit.builders import NAMESPACE, machine, node, pool_scope

from machinepool.api import constants as c
from machinepool.api.contract import InfraMachinePool
from machinepool.controllers.machinepool import (
    bootstrap,
    delete,
    infrastructure,
    noderefs,
    poolmachines,
    remediation,
    status,
)
from machinepool.controllers.machinepool.scope import ReferenceProblem
from machinepool.runtime import Result


def _pool(**spec: object) -> dict[str, object]:
    return machine_pool(NAMESPACE, "pool", spec=dict(spec))


def _infra(
    replicas: int, ids: list[str], *, ready: bool = True, mpm: bool = False
) -> InfraMachinePool:
    status_: dict[str, object] = {"ready": ready, "replicas": replicas}
    if mpm:
        status_["infrastructureMachineKind"] = "SimMachine"
    return InfraMachinePool(
        {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "SimMachinePool",
            "metadata": {"name": "pool", "namespace": NAMESPACE},
            "spec": {"providerIDList": ids},
            "status": status_,
        }
    )


# -- bootstrap ------------------------------------------------------------------------------


async def test_bootstrap_without_a_config_takes_a_given_data_secret_as_created() -> None:
    body = machine_pool(NAMESPACE, "pool", template={"bootstrap": {"dataSecretName": "my-data"}})
    scope = pool_scope(body)
    assert await bootstrap.reconcile_bootstrap(scope) == Result()
    assert scope.mp.status.initialization.bootstrap_data_secret_created is True
    ready = condition(scope.mp.raw, c.V1BETA1_BOOTSTRAP_READY_CONDITION, v1beta1=True)
    assert ready["status"] == "True"


async def test_bootstrap_with_neither_config_nor_data_secret_says_which_to_set() -> None:
    scope = pool_scope(machine_pool(NAMESPACE, "pool", template={"bootstrap": {}}))
    with pytest.raises(ReferenceProblem, match="configRef nor dataSecretName"):
        await bootstrap.reconcile_bootstrap(scope)
    assert "set one of them" in scope.bootstrap_problem
    assert scope.mp.status.initialization.bootstrap_data_secret_created is None


# -- infrastructure -------------------------------------------------------------------------


async def test_infrastructure_without_a_reference_is_a_reference_problem() -> None:
    scope = pool_scope(machine_pool(NAMESPACE, "pool", template={"infrastructureRef": {}}))
    with pytest.raises(ReferenceProblem, match="infrastructureRef is not set"):
        await infrastructure.reconcile_infrastructure(scope)
    assert scope.infra_problem == "spec.template.spec.infrastructureRef is not set; set it"


def test_a_ready_infra_pools_list_and_replicas_are_copied_and_the_counters_reset() -> None:
    scope = pool_scope(_pool(replicas=2))
    infrastructure._copy_from_provider(scope, _infra(2, ["sim://a", "sim://b"]))
    mp = scope.mp
    assert mp.spec.provider_id_list == ["sim://a", "sim://b"]
    assert mp.status.replicas == 2
    assert scope.provider_ids_observed
    v1 = mp.status.v1beta1
    assert (v1.ready_replicas, v1.available_replicas, v1.unavailable_replicas) == (None, None, 2)


def test_an_empty_list_while_instances_exist_is_not_copied() -> None:
    body = _pool(replicas=2, providerIDList=["sim://a", "sim://b"])
    scope = pool_scope(body)
    infrastructure._copy_from_provider(scope, _infra(2, []))
    assert scope.mp.spec.provider_id_list == ["sim://a", "sim://b"], "kept until listed"
    assert not scope.provider_ids_observed


def test_an_infra_pool_gone_after_being_provisioned_is_a_terminal_failure() -> None:
    scope = pool_scope()
    scope.mp.status.initialization.infrastructure_provisioned = True
    infrastructure._not_found(scope, scope.mp.spec.template.spec.infrastructure_ref)
    v1 = scope.mp.status.v1beta1
    assert v1.failure_reason == "InvalidConfiguration"
    assert "has been deleted after being ready" in str(v1.failure_message)
    ready = condition(scope.mp.raw, c.V1BETA1_INFRASTRUCTURE_READY_CONDITION, v1beta1=True)
    assert (ready["status"], ready["reason"]) == ("False", c.V1BETA1_INCORRECT_EXTERNAL_REF_REASON)


# -- machines -------------------------------------------------------------------------------


async def test_a_pool_counts_its_machines_unless_another_pool_controls_them() -> None:
    stolen = machine("stolen")
    stolen["metadata"]["ownerReferences"][0]["uid"] = "another-pool"
    loose = machine("loose")
    loose["metadata"]["ownerReferences"] = []
    elsewhere = machine("elsewhere", pool="other")
    cache = [machine("m1"), stolen, loose, elsewhere]
    scope = pool_scope(cached_machines=cache, infra_pool=_infra(1, []))
    assert await poolmachines.reconcile_machines(scope) == Result()
    assert sorted(m.metadata.name for m in scope.machines) == ["loose", "m1"]


async def test_a_machine_just_created_counts_before_the_cache_shows_it() -> None:
    scope = pool_scope(cached_machines=[machine("m1")], infra_pool=_infra(2, []))
    made = machine("m2")
    scope.memory.applied = {"m2": (time.monotonic(), made)}
    await poolmachines.reconcile_machines(scope)
    assert sorted(m.metadata.name for m in scope.machines) == ["m1", "m2"]


def test_nodes_of_live_machines_are_left_to_the_machine_controller() -> None:
    live = machine("m1", provider_id="sim://a")
    going = machine("m2", provider_id="sim://b", deleting=True)
    paused = machine("m3", provider_id="sim://c", annotations={c.PAUSED_ANNOTATION: ""})
    scope = pool_scope(machines=[live, going, paused])
    assert noderefs._left_to_machines(scope) == {"sim://a"}
    scope.env = dataclasses.replace(scope.env, machines_up_to_date=True)  # beside upstream
    assert noderefs._left_to_machines(scope) == set()


# -- node refs ------------------------------------------------------------------------------


async def test_node_refs_wait_while_no_instance_is_listed() -> None:
    body = _pool(replicas=1)
    body["status"] = {"replicas": 1}  # the provider counts an instance it has not listed yet
    scope = pool_scope(body, nodes=[])
    assert await noderefs.reconcile_node_refs(scope) == Result()
    assert scope.mp.status.node_refs is None


def test_node_refs_stay_valid_only_while_each_names_the_same_listed_node() -> None:
    body = _pool(providerIDList=["sim://a"])
    body["status"] = {"nodeRefs": [{"kind": "Node", "name": "n-a", "uid": "n-a-uid"}]}
    assert noderefs._refs_still_valid(pool_scope(body, nodes=[node("n-a", "sim://a")]))
    recreated = node("n-a", "sim://a")
    recreated["metadata"]["uid"] = "another"
    assert not noderefs._refs_still_valid(pool_scope(body, nodes=[recreated]))
    assert not noderefs._refs_still_valid(pool_scope(body, nodes=[node("n-a", "sim://b")]))
    assert not noderefs._refs_still_valid(pool_scope(body)), "Nodes unreadable"


def test_a_node_ready_for_less_than_min_ready_seconds_brings_the_pool_back_then() -> None:
    since = datetime.now(UTC) - timedelta(seconds=4)
    body = machine_pool(
        NAMESPACE, "pool", template={"minReadySeconds": 10}, spec={"providerIDList": ["sim://a"]}
    )
    scope = pool_scope(body, nodes=[node("n-a", "sim://a", since=since)])
    requeue = noderefs.requeue_for_min_ready_seconds(scope).requeue_after
    assert requeue is not None
    assert 5 <= requeue <= 7
    old = pool_scope(body, nodes=[node("n-a", "sim://a")])
    assert noderefs.requeue_for_min_ready_seconds(old) == Result(), "available already"


# -- remediation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotation", "replicas", "want"),
    [(None, 5, 1), ("3", 5, 3), ("40%", 5, 2), ("10%", 5, 1), ("0", 5, 1), ("lots", 5, 1)],
)
def test_remediations_in_flight_are_bounded_by_the_annotation(
    annotation: str | None, replicas: int, want: int
) -> None:
    annotations = (
        {} if annotation is None else {c.MAX_IN_FLIGHT_REMEDIATIONS_ANNOTATION: annotation}
    )
    body = machine_pool(NAMESPACE, "pool", replicas=replicas, annotations=annotations)
    assert remediation.max_in_flight(pool_scope(body).mp) == want


def _marked(name: str, healthy: str = "False") -> dict[str, object]:
    return machine(
        name,
        conditions={
            c.OWNER_REMEDIATED_CONDITION: "False",
            c.HEALTH_CHECK_SUCCEEDED_CONDITION: healthy,
        },
    )


def test_remediating_names_the_marked_machines_and_the_bound() -> None:
    machines = [_marked("m1"), _marked("m2", healthy="True"), machine("m3")]
    scope = pool_scope(machines=machines, infra_pool=_infra(3, [], mpm=True))
    facts = {m.name: remediation.marked(m) for m in scope.machine_facts()}
    assert facts == {"m1": True, "m2": False, "m3": False}, "recovered before its turn: spared"
    (value,) = remediation.remediating_condition(scope).values()
    assert value == (
        "True",
        c.REMEDIATING_REASON,
        "Remediating 2 Machines: m1, m2 (at most 1 at a time)",
    )
    calm = pool_scope(machines=[machine("m3")], infra_pool=_infra(1, [], mpm=True))
    assert remediation.remediating_condition(calm) == {
        c.REMEDIATING_CONDITION: ("False", c.NOT_REMEDIATING_REASON, "")
    }


async def test_remediation_needs_machine_pool_machines() -> None:
    scope = pool_scope(machines=[_marked("m1")], infra_pool=_infra(1, []))
    assert await remediation.reconcile_remediation(scope) == Result()
    assert remediation.remediating_condition(scope) == {}


# -- delete ---------------------------------------------------------------------------------


def _deleting(**template: object) -> dict[str, object]:
    body = machine_pool(NAMESPACE, "pool", template=dict(template))
    body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    body["metadata"]["finalizers"] = [c.MACHINE_POOL_FINALIZER, "other"]
    return body


async def test_a_pool_moved_by_clusterctl_only_lets_go() -> None:
    body = _deleting()
    body["metadata"]["annotations"] = {c.DELETE_FOR_MOVE_ANNOTATION: ""}
    scope = pool_scope(body)
    assert await delete.reconcile_delete(scope) == Result()
    assert scope.mp.metadata.finalizers == ["other"]
    assert scope.deleting_message == "Moved by clusterctl"


async def test_a_pool_with_nothing_left_and_its_node_timeout_passed_leaves_its_nodes() -> None:
    body = _deleting(
        bootstrap={"dataSecretName": "d"},
        infrastructureRef={},
        deletion={"nodeDeletionTimeoutSeconds": 1},
    )
    scope = pool_scope(body)
    assert delete.node_deletion_timed_out(scope.mp)
    assert await delete.reconcile_delete(scope) == Result()
    assert scope.mp.metadata.finalizers == ["other"]
    assert scope.deleting_message == "Deletion completed"


# -- status ---------------------------------------------------------------------------------


def test_counters_of_a_pool_with_machines_count_their_conditions_and_versions() -> None:
    ready = {c.READY_CONDITION: "True", c.AVAILABLE_CONDITION: "True"}
    machines = [
        machine("m1", conditions={**ready, c.UP_TO_DATE_CONDITION: "True"}),
        machine("m2", conditions=ready),
        machine("m3", conditions={c.READY_CONDITION: "False"}),
    ]
    scope = pool_scope(_pool(replicas=3), machines=machines)
    status.set_replica_counters(scope.mp, True, scope.machine_facts(), {})
    s = scope.mp.status
    assert (s.ready_replicas, s.available_replicas, s.up_to_date_replicas) == (2, 2, 1)
    conditions = status.machine_conditions(True, scope.machine_facts())
    assert conditions[c.MACHINES_READY_CONDITION] == (
        "False",
        c.NOT_READY_REASON,
        "Machine m3 is not ready",
    )
