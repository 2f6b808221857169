"""Pure status logic of the core MachinePool controller: phase, counters, conditions, node
matching and node patches, Machine templates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.unit import builders

from machinepool.api import constants as c
from machinepool.api.contract import InfraMachine, Referenced
from machinepool.api.meta import format_time
from machinepool.api.views import ClusterView, MachinePoolView, MachineView, ObjectView
from machinepool.controllers import common
from machinepool.controllers.machine import drain, volumes
from machinepool.controllers.machine import status as machine_status
from machinepool.controllers.machinepool import delete, noderefs, poolmachines, status
from machinepool.controllers.machinepool.facts import MachineFacts

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


def pool(**status_: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "generation": 2},
        "spec": {"clusterName": "c", "replicas": 2, "template": {"spec": {}}},
        "status": status_,
    }


def node(name: str, pid: str, *, ready: bool = True, since: datetime = NOW) -> dict[str, Any]:
    return builders.node(name, pid, ready=ready, since=since, version="v1.31.0")


@pytest.mark.parametrize(
    ("status_", "replicas", "annotations", "deleting", "want"),
    [
        ({}, 2, {}, False, c.PHASE_PENDING),
        (
            {"initialization": {"bootstrapDataSecretCreated": True}},
            2,
            {},
            False,
            c.PHASE_PROVISIONING,
        ),
        ({"nodeRefs": [{"name": "n"}]}, 2, {}, False, c.PHASE_PROVISIONED),
        (
            {
                "initialization": {"infrastructureProvisioned": True},
                "deprecated": {"v1beta1": {"readyReplicas": 2}},
            },
            2,
            {},
            False,
            c.PHASE_RUNNING,
        ),
        ({"initialization": {"infrastructureProvisioned": True}}, 2, {}, False, c.PHASE_SCALING_UP),
        (
            {
                "initialization": {"infrastructureProvisioned": True},
                "deprecated": {"v1beta1": {"readyReplicas": 3}},
            },
            2,
            {},
            False,
            c.PHASE_SCALING_DOWN,
        ),
        (
            {"initialization": {"infrastructureProvisioned": True}},
            2,
            {c.REPLICAS_MANAGED_BY_ANNOTATION: "autoscaler"},
            False,
            c.PHASE_SCALING,
        ),
        (
            {"initialization": {"infrastructureProvisioned": True}},
            2,
            {c.REPLICAS_MANAGED_BY_ANNOTATION: "false"},
            False,
            c.PHASE_SCALING_UP,
        ),
        (  # only "false" itself means unmanaged, as upstream's annotation test reads it
            {"initialization": {"infrastructureProvisioned": True}},
            2,
            {c.REPLICAS_MANAGED_BY_ANNOTATION: "False"},
            False,
            c.PHASE_SCALING,
        ),
        (  # a terminal failure leaves the phase to upstream's rules: never Failed
            {
                "initialization": {"infrastructureProvisioned": True},
                "deprecated": {"v1beta1": {"failureReason": "InvalidConfiguration"}},
            },
            0,
            {},
            False,
            c.PHASE_RUNNING,
        ),
        ({"nodeRefs": [{"name": "n"}]}, 2, {}, True, c.PHASE_DELETING),
        ({"initialization": {"infrastructureProvisioned": True}}, 0, {}, False, c.PHASE_RUNNING),
    ],
)
def test_phase(status_: Any, replicas: int, annotations: Any, deleting: bool, want: str) -> None:
    mp = pool(**status_)
    mp["spec"]["replicas"] = replicas
    mp["metadata"]["annotations"] = annotations
    if deleting:
        mp["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert status.compute_phase(MachinePoolView(mp)) == want


def test_counters_without_machines_follow_replicas_and_node_versions() -> None:
    mp = pool(replicas=2, nodeRefs=[{"name": "a"}, {"name": "b"}])
    nodes = {"a": node("a", "x://a"), "b": node("b", "x://b")}
    status.set_replica_counters(MachinePoolView(mp), False, [], nodes)
    assert mp["status"]["readyReplicas"] == 2
    assert mp["status"]["availableReplicas"] == 2
    assert mp["status"]["upToDateReplicas"] == 2
    assert mp["status"]["versions"] == [{"version": "v1.31.0", "replicas": 2}]


def test_counters_with_machines_count_conditions() -> None:
    def machine(ready: str, available: str, version: str) -> dict[str, Any]:
        return {
            "spec": {"version": version},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": ready},
                    {"type": "Available", "status": available},
                    {"type": "UpToDate", "status": "True"},
                ]
            },
        }

    mp = pool(replicas=3)
    ms = [
        machine("True", "True", "v1.31.0"),
        machine("True", "False", "v1.31.0"),
        machine("False", "False", "v1.30.0"),
    ]
    facts = [MachineFacts.of(MachineView(m)) for m in ms]
    status.set_replica_counters(MachinePoolView(mp), True, facts, {})
    assert (
        mp["status"]["readyReplicas"],
        mp["status"]["availableReplicas"],
        mp["status"]["upToDateReplicas"],
    ) == (2, 1, 3)
    assert mp["status"]["versions"] == [
        {"version": "v1.30.0", "replicas": 1},
        {"version": "v1.31.0", "replicas": 2},
    ]


def test_replica_conditions() -> None:
    mp = pool(replicas=1, availableReplicas=1)
    got = status.replica_conditions(MachinePoolView(mp))
    assert got[c.SCALING_UP_CONDITION] == (
        "True",
        c.SCALING_UP_REASON,
        "Scaling up from 1 to 2 replicas",
    )
    assert got[c.SCALING_DOWN_CONDITION][0] == "False"
    assert got[c.AVAILABLE_CONDITION] == (
        "False",
        c.NOT_AVAILABLE_REASON,
        "1 available replicas, at least 2 required",
    )
    mp["spec"].pop("replicas")
    assert (
        status.replica_conditions(MachinePoolView(mp))[c.AVAILABLE_CONDITION][1]
        == c.WAITING_FOR_REPLICAS_SET_REASON
    )


def test_ref_condition_cases() -> None:
    facts = status.RefFacts("TestMachinePool", None, True)
    assert status.ref_condition(facts, False, "f", False)[1] == c.OBJECT_DOES_NOT_EXIST_REASON
    assert status.ref_condition(facts, False, "f", True)[1] == c.OBJECT_DELETED_REASON
    bad = status.RefFacts("TestMachinePool", None, False, "is already controlled by X")
    assert status.ref_condition(bad, False, "f", False) == (
        "False",
        status.INVALID_REFERENCE_REASON,
        "is already controlled by X",
    )
    obj = {"status": {}}
    assert status.ref_condition(
        status.RefFacts("K", Referenced(obj), False), False, "status.x", False
    ) == (
        "False",
        c.NOT_READY_REASON,
        "K status.x is false",
    )
    obj = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Fine"}]}}
    assert status.ref_condition(status.RefFacts("K", Referenced(obj), False), False, "f", False)[
        :2
    ] == (
        "True",
        "Fine",
    )
    assert status.ref_condition(facts, False, "f", False, defined=False)[0] == "True"


def test_aggregate_machine_conditions_name_the_machines() -> None:
    ms = [
        MachineFacts.of(MachineView({"metadata": {"name": n}, "status": {"conditions": [ready]}}))
        for n, ready in (
            ("a", {"type": "Ready", "status": "True"}),
            ("b", {"type": "Ready", "status": "False"}),
            ("c", {"type": "Ready", "status": "False"}),
        )
    ]
    got = status.machine_conditions(True, ms)[c.MACHINES_READY_CONDITION]
    assert got == ("False", c.NOT_READY_REASON, "Machines b, c are not ready")
    assert (
        status.machine_conditions(True, [])[c.MACHINES_READY_CONDITION][1] == c.NO_REPLICAS_REASON
    )
    assert status.machine_conditions(False, ms) == {}


def test_exact_provider_id_matching_with_shared_suffixes() -> None:
    a = "azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachineScaleSets/vmss-a/virtualMachines/1"
    aa = a.replace("vmss-a/", "vmss-aa/")
    nodes = {aa: node("other-pool-node", aa), a: node("mine", a, ready=False)}
    got = noderefs.match_nodes([a], nodes, 0, NOW)
    assert [r["name"] for r in got.refs] == ["mine"]
    assert (got.ready, got.available) == (0, 0)


def test_min_ready_seconds_gates_available() -> None:
    nodes = {
        "x://1": node("n1", "x://1", since=NOW - timedelta(seconds=5)),
        "x://2": node("n2", "x://2", since=NOW - timedelta(seconds=30)),
    }
    got = noderefs.match_nodes(["x://1", "x://2", "x://missing"], nodes, 10, NOW)
    assert (len(got.refs), got.ready, got.available) == (2, 2, 1)


def test_node_patch_keeps_foreign_marks_and_is_none_when_done() -> None:
    mp = pool()
    n = node("n", "x://n")
    n["metadata"]["annotations"] = {"foreign": "keep"}
    n["metadata"]["resourceVersion"] = "7"
    n["spec"]["taints"] = [
        {"key": c.UNINITIALIZED_TAINT_KEY, "effect": "NoSchedule"},
        {"key": "mine", "effect": "NoExecute"},
    ]
    patch = noderefs.desired_node_patch(n, MachinePoolView(mp))
    assert patch is not None
    assert patch["spec"]["taints"] == [{"key": "mine", "effect": "NoExecute"}]
    assert patch["metadata"]["resourceVersion"] == "7"
    assert "foreign" not in patch["metadata"]["annotations"]
    n["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    n["spec"]["taints"] = patch["spec"]["taints"]
    assert noderefs.desired_node_patch(n, MachinePoolView(mp)) is None


def test_desired_machine_hashes_long_pool_names_and_copies_template() -> None:
    mp = pool()
    mp["metadata"]["name"] = "p" * 70
    mp["spec"]["template"]["metadata"] = {"labels": {"team": "a"}, "annotations": {"note": "x"}}
    mp["spec"]["template"]["spec"]["deletion"] = {"nodeDrainTimeoutSeconds": 3}
    infra = {"apiVersion": "infra.example/v1", "kind": "FooMachine", "metadata": {"name": "m"}}
    got = poolmachines.desired_machine(MachinePoolView(mp), InfraMachine(infra), node("n", "x://n"))
    assert got["metadata"]["labels"][c.POOL_NAME_LABEL].startswith("hash_")
    assert got["metadata"]["labels"]["team"] == "a"
    assert got["metadata"]["annotations"] == {"note": "x"}
    assert got["spec"]["infrastructureRef"] == {
        "apiGroup": "infra.example",
        "kind": "FooMachine",
        "name": "m",
    }
    assert got["spec"]["version"] == "v1.31.0"
    assert got["spec"]["bootstrap"] == {"dataSecretName": ""}
    assert got["spec"]["deletion"] == {"nodeDrainTimeoutSeconds": 3}
    assert got["metadata"]["ownerReferences"][0]["controller"] is True


def test_node_deletion_timeout() -> None:
    mp = pool()
    mp["metadata"]["deletionTimestamp"] = "2000-01-01T00:00:00Z"
    assert not delete.node_deletion_timed_out(MachinePoolView(mp))  # no timeout set
    mp["spec"]["template"]["spec"]["deletion"] = {"nodeDeletionTimeoutSeconds": 10}
    assert delete.node_deletion_timed_out(MachinePoolView(mp))
    mp["spec"]["template"]["spec"]["deletion"] = {"nodeDeletionTimeoutSeconds": 0}
    assert not delete.node_deletion_timed_out(MachinePoolView(mp))


def test_drain_skips_daemonset_and_mirror_pods() -> None:
    ds = {"metadata": {"ownerReferences": [{"kind": "DaemonSet", "controller": True}]}}
    mirror = {"metadata": {"annotations": {drain.MIRROR_ANNOTATION: "x"}}}
    assert not drain.should_evict(ds)
    assert not drain.should_evict(mirror)
    assert drain.should_evict({"metadata": {}})


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (None, "Drain"),
        ("skip", "Skip"),
        ("Skip", "Skip"),
        ("wait-completed", "WaitCompleted"),
        ("WaitCompleted", "WaitCompleted"),
        ("wait--completed", "Drain"),
        ("later", "Drain"),
    ],
)
def test_drain_label_read_as_upstream_reads_it(value: str | None, want: str) -> None:
    labels = {} if value is None else {c.POD_DRAIN_LABEL: value}
    assert drain.drain_behaviour({"metadata": {"labels": labels}}) == want


def test_drain_knows_an_unreachable_node_by_ready_unknown() -> None:
    def node(status: str) -> dict[str, Any]:
        return {"status": {"conditions": [{"type": "Ready", "status": status}]}}

    assert drain.node_unreachable(node("Unknown"))
    assert not drain.node_unreachable(node("False"))
    assert not drain.node_unreachable(node("True"))
    assert not drain.node_unreachable({"status": {}})


@pytest.mark.parametrize(
    ("deleted_ago", "left"),
    [(-1.0, 3.0), (0.0, 2.0), (1.5, 0.5), (2.0, 0.0), (10.0, -8.0)],
)
def test_terminating_pod_on_unreachable_node_is_let_go_two_seconds_on(
    deleted_ago: float, left: float
) -> None:
    """Upstream waits while the whole seconds since the deletionTimestamp are at most 1."""
    stamp = (NOW - timedelta(seconds=deleted_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    pod = {"metadata": {"deletionTimestamp": stamp}}
    assert drain.seconds_until_skipped(pod, NOW) == pytest.approx(left)
    assert drain.seconds_until_skipped({"metadata": {}}, NOW) is None


def test_machine_node_conditions_wait_for_min_ready_seconds() -> None:
    m: dict[str, Any] = {"metadata": {"generation": 1}, "spec": {"minReadySeconds": 10}}
    wait = machine_status.set_node_conditions(MachineView(m), node("n", "x://n", since=NOW), NOW)
    assert wait == 10
    conds = {x["type"]: x for x in m["status"]["conditions"]}
    assert conds["Ready"]["status"] == "True"
    assert conds["Available"]["reason"] == c.WAITING_FOR_MIN_READY_SECONDS_REASON
    assert machine_status.set_node_conditions(MachineView(m), None, NOW) is None
    assert {x["type"]: x["status"] for x in m["status"]["conditions"]}["Ready"] == "Unknown"


def test_an_absent_map_holds_an_empty_one_so_idle_machines_are_not_reapplied() -> None:
    from machinepool.controllers.machinepool.poolmachines import _contains

    have = {"metadata": {"name": "m", "labels": {"a": "b"}}, "spec": {"version": "v1"}}
    want = {"metadata": {"name": "m", "labels": {"a": "b"}, "annotations": {}}, "spec": {}}
    assert _contains(have, want)
    assert not _contains(have, {"metadata": {"annotations": {"x": "y"}}})


def test_status_versions_are_in_semantic_version_order() -> None:
    got = status.aggregate_versions(["v1.10.0", "v1.9.2", "v1.10.0", "v1.10.0-rc.1", "weird", ""])
    assert got == [
        {"version": "v1.9.2", "replicas": 1},
        {"version": "v1.10.0-rc.1", "replicas": 1},
        {"version": "v1.10.0", "replicas": 2},
        {"version": "weird", "replicas": 1},
    ]


def test_a_recreated_cluster_replaces_its_stale_owner_reference() -> None:
    cluster = {"apiVersion": "cluster.x-k8s.io/v1beta2", "metadata": {"name": "c", "uid": "new"}}
    other = {"apiVersion": "example.com/v1", "kind": "Cluster", "name": "c", "uid": "x"}
    stale = {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "name": "c", "uid": "old"}
    mp: dict[str, Any] = {"metadata": {"ownerReferences": [other, stale]}, "spec": {}}
    common.ensure_cluster_owner(ObjectView(mp), None, ClusterView(cluster))
    assert mp["metadata"]["ownerReferences"] == [
        other,
        {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c", "uid": "new"},
    ]
    fresh: dict[str, Any] = {"metadata": {}, "spec": {"clusterName": "c"}}
    common.ensure_cluster_owner(ObjectView(fresh), "c", ClusterView(cluster))
    assert [r["uid"] for r in fresh["metadata"]["ownerReferences"]] == ["new"]


def test_new_machine_is_created_whole_with_finalizer_and_provider_id() -> None:
    """One apply creates the Machine complete: the Machine controller then needs no
    finalizer patch and no spec patch of its own."""
    infra = {
        "apiVersion": "infra.example/v1",
        "kind": "FooMachine",
        "metadata": {"name": "m"},
        "spec": {"providerID": "x://m"},
    }
    got = poolmachines.desired_machine(MachinePoolView(pool()), InfraMachine(infra), None)
    assert got["metadata"]["finalizers"] == [c.MACHINE_FINALIZER]
    assert got["spec"]["providerID"] == "x://m"
    assert "version" not in got["spec"], "no Node yet: no kubelet version"
    # Another controller's finalizer next to ours is not a difference worth an apply.
    have = {**got, "metadata": {**got["metadata"], "finalizers": ["other", c.MACHINE_FINALIZER]}}
    assert poolmachines._contains(have, got)
    assert not poolmachines._contains(
        {**got, "metadata": {**got["metadata"], "finalizers": []}}, got
    )


def test_a_created_machine_counts_until_the_cache_shows_it_or_its_wait_runs_out() -> None:
    """A pass that comes before the Machine watch brings a create's echo takes the Machine as
    created, rather than as absent and to be applied again; once the cache shows the name, or
    after ``APPLIED_TTL_SECONDS``, the cache decides."""
    import time
    from types import SimpleNamespace

    from machinepool.controllers.machinepool.scope import PoolMemory

    made = {"metadata": {"name": "m1", "namespace": "ns", "resourceVersion": "7"}}
    memory = PoolMemory(applied={"m1": (time.monotonic(), made)})
    scope: Any = SimpleNamespace(memory=memory, machines=[])
    assert [m.metadata.name for m in poolmachines._created_not_cached(scope)] == ["m1"]
    long_ago = time.monotonic() - poolmachines.APPLIED_TTL_SECONDS - 1
    memory.applied["m1"] = (long_ago, made)
    assert poolmachines._created_not_cached(scope) == [], "waited long enough: the cache decides"
    memory.applied["m1"] = (time.monotonic(), made)
    scope.machines = [MachineView(dict(made))]
    assert poolmachines._created_not_cached(scope) == [], "the cache shows it"
    assert memory.applied == {}


def test_machine_controller_sets_up_to_date_in_its_own_status() -> None:
    m: dict[str, Any] = {"metadata": {"generation": 1}, "spec": {}}
    common.set_up_to_date(MachineView(m))
    (cond,) = [x for x in m["status"]["conditions"] if x["type"] == c.UP_TO_DATE_CONDITION]
    assert (cond["status"], cond["reason"]) == ("True", c.UP_TO_DATE_REASON)
    m["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    common.set_up_to_date(MachineView(m))
    (cond,) = [x for x in m["status"]["conditions"] if x["type"] == c.UP_TO_DATE_CONDITION]
    assert (cond["status"], cond["reason"]) == ("False", c.NOT_UP_TO_DATE_REASON)


def test_pool_wakes_only_for_machine_changes_it_counts() -> None:
    """The MachinePool's Machine watch ignores the Machine controller's other status writes
    (phase, nodeRef, NodeReady, messages) and wakes on Ready, Available, UpToDate, deletion,
    labels and spec."""
    from machinepool.controllers.machinepool import watches

    def machine(**conds: str) -> dict[str, Any]:
        return {
            "metadata": {"name": "m", "labels": {"a": "b"}},
            "spec": {"providerID": "x://m"},
            "status": {
                "phase": "Provisioned",
                "conditions": [{"type": t, "status": s, "message": ""} for t, s in conds.items()],
            },
        }

    base = machine(Ready="False", NodeReady="False")
    noise = machine(Ready="False", NodeReady="True")
    noise["status"]["phase"] = "Running"
    noise["status"]["nodeRef"] = {"name": "n"}
    noise["status"]["conditions"][0]["message"] = "Node n is not Ready"
    assert watches.machine_inputs(base) == watches.machine_inputs(noise)
    assert watches.machine_inputs(base) != watches.machine_inputs(machine(Ready="True"))
    assert watches.machine_inputs(base) != watches.machine_inputs(
        machine(Ready="False", UpToDate="True")
    )
    deleting = machine(Ready="False", NodeReady="False")
    deleting["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert watches.machine_inputs(base) != watches.machine_inputs(deleting)
    # A health check's marks ask the pool for remediation: they must wake it.
    marked = machine(Ready="False", NodeReady="False", OwnerRemediated="False")
    assert watches.machine_inputs(base) != watches.machine_inputs(marked)


def test_node_heartbeat_wakes_no_core_controller() -> None:
    from machinepool.controllers.common import node_inputs

    n = node("n", "x://n")
    beat = node("n", "x://n")
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2025-01-01T12:05:00Z"
    beat["metadata"]["resourceVersion"] = "99"
    assert node_inputs(n) == node_inputs(beat)
    assert node_inputs(n) != node_inputs(node("n", "x://n", ready=False))
    assert node_inputs(n) != node_inputs(node("n", "x://n", since=NOW + timedelta(seconds=5)))


def test_pool_is_not_woken_by_its_own_writes() -> None:
    """A MachinePool's own status and providerIDList writes (only the core writes them) do
    not wake it; a change of what a user or autoscaler writes does."""
    from machinepool.controllers.machinepool import watches

    mp = pool(phase="Provisioning")
    own = pool(phase="Running", readyReplicas=2)
    own["spec"]["providerIDList"] = ["x://a", "x://b"]
    assert watches.pool_inputs(mp) == watches.pool_inputs(own)
    scaled = pool(phase="Provisioning")
    scaled["spec"]["replicas"] = 5
    assert watches.pool_inputs(mp) != watches.pool_inputs(scaled)
    paused = pool(phase="Provisioning")
    paused["metadata"]["annotations"] = {c.PAUSED_ANNOTATION: "true"}
    assert watches.pool_inputs(mp) != watches.pool_inputs(paused)


def test_machine_node_ready_follows_the_nodes_own_ready_condition_as_upstream_words_it() -> None:
    def node_ready(n: dict[str, Any]) -> dict[str, Any]:
        m: dict[str, Any] = {"metadata": {"generation": 2}, "spec": {}}
        machine_status.set_node_conditions(MachineView(m), n, NOW)
        return next(x for x in m["status"]["conditions"] if x["type"] == "NodeReady")

    ready = node_ready(node("n", "x://n"))
    assert (ready["status"], ready["reason"], ready["message"]) == ("True", "NodeReady", "")
    assert ready["observedGeneration"] == 2
    down = node("n", "x://n", ready=False)
    down["status"]["conditions"][0]["message"] = "kubelet stopped posting node status"
    got = node_ready(down)
    assert (got["status"], got["reason"]) == ("False", "NodeNotReady")
    assert got["message"] == "* Node.Ready: kubelet stopped posting node status"
    silent = node("n", "x://n")
    silent["status"]["conditions"] = []
    got = node_ready(silent)
    assert (got["status"], got["reason"]) == ("Unknown", "NodeReadyUnknown")


def test_infrastructure_provisioned_is_recorded_once_and_never_taken_back() -> None:
    m: dict[str, Any] = {"metadata": {}, "spec": {"providerID": "sim:///a/i-1"}}
    machine_status.set_infrastructure_provisioned(MachineView(m), {"status": {}})
    assert "initialization" not in m.get("status", {})
    machine_status.set_infrastructure_provisioned(
        MachineView(m), {"status": {"initialization": {"provisioned": True}}}
    )
    assert m["status"]["initialization"] == {"infrastructureProvisioned": True}
    machine_status.set_infrastructure_provisioned(MachineView(m), None)
    assert m["status"]["initialization"] == {"infrastructureProvisioned": True}


def test_a_live_pool_machine_reports_upstreams_other_conditions() -> None:
    m: dict[str, Any] = {
        "metadata": {"generation": 1},
        "spec": {"bootstrap": {"dataSecretName": ""}, "infrastructureRef": {"kind": "SimMachine"}},
    }
    infra = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": ""}]}}
    healthy = node("n", "x://n")
    for type_ in ("MemoryPressure", "DiskPressure", "PIDPressure"):
        healthy["status"]["conditions"].append({"type": type_, "status": "False"})
    machine_status.set_machine_conditions(MachineView(m), infra, healthy)
    got = {x["type"]: (x["status"], x["reason"]) for x in m["status"]["conditions"]}
    assert got == {
        "BootstrapConfigReady": ("True", "DataSecretProvided"),
        "InfrastructureReady": ("True", "Ready"),
        "NodeHealthy": ("True", "NodeHealthy"),
        "Deleting": ("False", "NotDeleting"),
        "Updating": ("False", "NotUpdating"),
    }


def test_node_healthy_names_what_is_wrong_with_the_node() -> None:
    m: dict[str, Any] = {"metadata": {}, "spec": {}}
    sick = node("n", "x://n", ready=False)
    sick["status"]["conditions"] += [
        {"type": "MemoryPressure", "status": "True", "message": "low memory"},
        {"type": "DiskPressure", "status": "False"},
    ]
    machine_status.set_machine_conditions(MachineView(m), None, sick)
    cond = next(x for x in m["status"]["conditions"] if x["type"] == "NodeHealthy")
    assert (cond["status"], cond["reason"]) == ("False", "NodeNotHealthy")
    assert cond["message"].splitlines() == [
        "* Node.Ready: Condition is False",
        "* Node.MemoryPressure: low memory",
        "* Node.PIDPressure: Condition not yet reported",
    ]
    gone = next(x for x in m["status"]["conditions"] if x["type"] == "InfrastructureReady")
    assert (gone["status"], gone["reason"]) == ("False", "ObjectDoesNotExist")


def _pv(name: str, handle: str, claim: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"csi": {"driver": "csi.test", "volumeHandle": handle}}
    if claim is not None:
        ns, _, claim_name = claim.partition("/")
        spec["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": ns, "name": claim_name}
    return {"metadata": {"name": name}, "spec": spec}


def test_attached_volumes_matched_to_claims_less_those_of_pods_left_on_the_node() -> None:
    node = {
        "status": {
            "volumesAttached": [
                {"name": "kubernetes.io/csi/csi.test^h1"},
                {"name": "kubernetes.io/csi/csi.test^h2"},
                {"name": "kubernetes.io/csi/csi.test^gone"},
            ]
        }
    }
    attachments = [{"spec": {"source": {"persistentVolumeName": n}}} for n in ("pv3", "pv9")]
    pvs = [_pv("pv1", "h1", "a/data"), _pv("pv2", "h2", "b/logs"), _pv("pv3", "h3", None)]
    daemon = {
        "metadata": {"namespace": "b"},
        "spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "logs"}}]},
    }

    found = volumes.attached(node, attachments, pvs, [daemon])

    assert found.claims == ["a/data"]
    assert found.volumes_without_claim == ["pv3"]
    assert found.node_names_without_volume == ["kubernetes.io/csi/csi.test^gone"]
    assert found.attachment_names_without_volume == ["pv9"]
    assert found.message("2026-01-01T00:00:00Z") == (
        "Waiting for Node volumes to be detached (started at 2026-01-01T00:00:00Z)\n"
        "* PersistentVolumeClaims: a/data\n"
        "* PersistentVolumes without a .spec.claimRef to a PersistentVolumeClaim: pv3\n"
        "* Node with .status.volumesAttached entries not matching a PersistentVolume: "
        "kubernetes.io/csi/csi.test^gone\n"
        "* VolumeAttachment with .spec.source.persistentVolumeName not matching a "
        "PersistentVolume: pv9"
    )
    assert not volumes.attached({"status": {}}, [], pvs, [])


def test_machine_without_node_says_whether_its_node_is_gone_or_not_yet_there() -> None:
    pid = "sim:///zone-a/pool-1"
    waiting: dict[str, Any] = {"metadata": {"generation": 1}, "spec": {"providerID": pid}}
    machine_status.set_node_conditions(MachineView(waiting), None, NOW)
    conds = {x["type"]: x for x in waiting["status"]["conditions"]}
    for kind in ("NodeReady", "NodeHealthy"):
        assert (conds[kind]["status"], conds[kind]["reason"]) == ("Unknown", "InspectionFailed")
        assert conds[kind]["message"] == f"Waiting for a Node with spec.providerID {pid} to exist"
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("Unknown", "ReadyUnknown")
    assert conds["Ready"]["message"] == f"* NodeHealthy: {conds['NodeHealthy']['message']}"
    assert (conds["Available"]["status"], conds["Available"]["reason"]) == ("False", "NotReady")

    gone: dict[str, Any] = {
        "metadata": {"generation": 1},
        "spec": {"providerID": pid, "infrastructureRef": {"kind": "SimMachine"}},
        "status": {
            "nodeRef": {"name": "pool-1"},
            "initialization": {"infrastructureProvisioned": True},
        },
    }
    machine_status.set_machine_conditions(MachineView(gone), None, None)
    machine_status.set_node_conditions(MachineView(gone), None, NOW)
    conds = {x["type"]: x for x in gone["status"]["conditions"]}
    assert (conds["NodeHealthy"]["status"], conds["NodeHealthy"]["reason"]) == (
        "False",
        "NodeDeleted",
    )
    assert conds["Ready"]["message"] == (
        "* InfrastructureReady: SimMachine has been deleted while the Machine still exists\n"
        "* NodeHealthy: Node pool-1 has been deleted while the Machine still exists"
    )
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("False", "NotReady")


def _v1(machine: dict[str, Any], type_: str) -> dict[str, Any]:
    conds = machine["status"]["deprecated"]["v1beta1"]["conditions"]
    return next(x for x in conds if x["type"] == type_)


def _pool_machine(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "m", "namespace": "ns", "generation": 1},
        "spec": {"infrastructureRef": {"kind": "SimMachine", "name": "m"}, **spec},
        "status": {},
    }


def test_machine_v1beta1_infrastructure_ready_mirrors_or_falls_back() -> None:
    machine = _pool_machine(providerID="sim:///1")
    infra: dict[str, Any] = {"status": {"initialization": {"provisioned": False}}}
    machine_status.set_v1beta1_infrastructure_ready(MachineView(machine), infra)
    got = _v1(machine, "InfrastructureReady")
    assert (got["status"], got["reason"], got["severity"]) == (
        "False",
        "WaitingForInfrastructure",
        "Info",
    )
    infra["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "Ready"}]
    machine_status.set_v1beta1_infrastructure_ready(MachineView(machine), infra)
    assert _v1(machine, "InfrastructureReady")["status"] == "True"
    machine_status.set_v1beta1_infrastructure_ready(MachineView(machine), None)
    assert _v1(machine, "InfrastructureReady")["status"] == "True", "left as it was"


def test_machine_v1beta1_node_healthy_reasons_and_severities() -> None:
    infra = {"metadata": {}}
    machine = _pool_machine()
    machine_status.set_v1beta1_node_healthy(MachineView(machine), infra, None)
    got = _v1(machine, "NodeHealthy")
    assert (got["reason"], got["severity"]) == ("WaitingForNodeRef", "Info")
    machine["spec"]["providerID"] = "sim:///1"
    machine_status.set_v1beta1_node_healthy(MachineView(machine), infra, None)
    got = _v1(machine, "NodeHealthy")
    assert (got["reason"], got["severity"]) == ("NodeProvisioning", "Warning")
    sick = {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "DiskPressure", "status": "True"},
            ]
        }
    }
    machine_status.set_v1beta1_node_healthy(MachineView(machine), infra, sick)
    got = _v1(machine, "NodeHealthy")
    assert (got["status"], got["reason"], got["severity"], got["message"]) == (
        "False",
        "NodeConditionsFailed",
        "Warning",
        "Node condition Ready is False. Node condition DiskPressure is True",
    )
    machine_status.set_v1beta1_node_healthy(
        MachineView(machine), {"metadata": {"deletionTimestamp": "x"}}, sick
    )
    assert _v1(machine, "NodeHealthy")["reason"] == "Deleting"
    machine["status"]["nodeRef"] = {"name": "n"}
    machine_status.set_v1beta1_node_healthy(MachineView(machine), infra, None)
    got = _v1(machine, "NodeHealthy")
    assert (got["reason"], got["severity"]) == ("NodeNotFound", "Error")
    silent: dict[str, Any] = {"status": {}}
    machine_status.set_v1beta1_node_healthy(MachineView(machine), infra, silent)
    assert _v1(machine, "NodeHealthy")["status"] == "True", "upstream: nothing reported is healthy"


def test_machine_v1beta1_ready_sums_up_infrastructure_and_counts_steps_without_provider_id() -> (
    None
):
    machine = _pool_machine()
    machine_status.set_v1beta1_infrastructure_ready(MachineView(machine), {"status": {}})
    machine_status.set_v1beta1_node_healthy(MachineView(machine), {}, None)
    machine_status.set_v1beta1_ready(MachineView(machine))
    got = _v1(machine, "Ready")
    assert (got["status"], got["reason"], got["message"]) == (
        "False",
        "WaitingForInfrastructure",
        "0 of 2 completed",
    )
    machine["spec"]["providerID"] = "sim:///1"
    machine_status.set_v1beta1_ready(MachineView(machine))
    assert "message" not in _v1(machine, "Ready")
    machine["status"]["deprecated"]["v1beta1"]["conditions"].append(
        {"type": "DrainingSucceeded", "status": "False", "severity": "Warning", "reason": "D"}
    )
    machine_status.set_v1beta1_ready(MachineView(machine))
    assert _v1(machine, "Ready")["reason"] == "D", "a Warning outranks an Info"


def _deleted_machine(deleted_ago: timedelta, drain_ago: timedelta | None = None) -> MachineView:
    status_: dict[str, Any] = {}
    if drain_ago is not None:
        status_["deletion"] = {"nodeDrainStartTime": format_time(NOW - drain_ago)}
    meta = {"generation": 2, "deletionTimestamp": format_time(NOW - deleted_ago)}
    return MachineView({"metadata": meta, "spec": {}, "status": status_})


@pytest.mark.parametrize(
    ("deleted_ago", "drain_ago", "message", "want"),
    [
        (timedelta(minutes=3), timedelta(minutes=3), "", "in progress, stage: DrainingNode"),
        (
            timedelta(minutes=16),
            timedelta(minutes=2),
            "evictions refused: default/web: Cannot evict pod as it would violate the pod's"
            " disruption budget.",
            "in progress since more than 15m, stage: DrainingNode",
        ),
        (
            timedelta(minutes=16),
            timedelta(minutes=6),
            "Draining Node: 2 pods remaining, waiting for completion: default/batch,"
            " evictions refused: default/web: Cannot evict pod as it would violate the pod's"
            " disruption budget.",
            "in progress since more than 15m, stage: DrainingNode, delay likely due to"
            " PodDisruptionBudgets, Pods not completed yet",
        ),
        (
            timedelta(minutes=16),
            timedelta(minutes=6),
            "Draining Node: 1 pods remaining, waiting for deletion: default/db,"
            " evictions refused: default/x: namespace is terminating",
            "in progress since more than 15m, stage: DrainingNode, delay likely due to"
            " Pods not terminating, Pod eviction errors",
        ),
    ],
)
def test_a_long_deletion_says_so_in_upstreams_words(
    deleted_ago: timedelta, drain_ago: timedelta, message: str, want: str
) -> None:
    machine = _deleted_machine(deleted_ago, drain_ago)
    deleting = {"type": "Deleting", "status": "True", "reason": "DrainingNode", "message": message}

    got = machine_status.deletion_summary(machine, deleting, NOW)

    assert got == f"Machine deletion in progress{want.removeprefix('in progress')}"
    # Upstream's coarse threshold holds for any stage, not only a drain.
    hooks = {"type": "Deleting", "reason": "WaitingForPreTerminateHook"}
    long_ago = _deleted_machine(timedelta(hours=1))
    assert machine_status.deletion_summary(long_ago, hooks, NOW) == (
        "Machine deletion in progress since more than 15m, stage: WaitingForPreTerminateHook"
    )
