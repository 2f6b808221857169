"""Bad input and edge cases: missing Cluster, bootstrap config or infra pool, an infra pool
controlled by another owner (each a condition naming the object, converging once fixed);
pools whose providerIDs share a suffix; minReadySeconds; the node-deletion timeout and which
Nodes deletion takes; scale to and from zero; and a 50-replica pool."""

from __future__ import annotations

import base64

from tests.support import eventually
from tests.support.conditions import condition
from tests.support.resources import CLUSTERS, MACHINE_POOLS

from machinepool.api import constants as c
from machinepool.api.views import MachinePoolView
from machinepool.controllers.machinepool.delete import node_deletion_timed_out
from machinepool.runtime import NODES, SECRETS

from .conftest import TEST_POOLS, Env

AZ = "azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachineScaleSets"


async def test_missing_cluster_is_reported_then_converges(env: Env) -> None:
    await env.kubeadm_config("boot", ready=True)
    await env.infra_pool("pool")
    await env.machine_pool("pool", bootstrap="boot", cluster="late")
    mp = await env.pool_until("pool", lambda o: bool(condition(o, "Ready", v1beta1=True)))
    ready = condition(mp, "Ready", v1beta1=True)
    assert ready["reason"] == "ClusterNotFound"
    assert f"Cluster {env.namespace}/late does not exist" in ready["message"]
    secret = await env.client.get(SECRETS, f"{env.cluster_name}-kubeconfig", env.namespace)
    await env.client.create(
        SECRETS,
        {"metadata": {"name": "late-kubeconfig"}, "data": secret["data"]},
        env.namespace,
    )
    await env.client.create(
        CLUSTERS,
        {"apiVersion": CLUSTERS.api_version, "kind": "Cluster", "metadata": {"name": "late"}},
        env.namespace,
    )
    mp = await env.pool_until("pool", lambda o: o["status"].get("phase") == c.PHASE_PROVISIONING)
    assert c.MACHINE_POOL_FINALIZER in mp["metadata"]["finalizers"]
    assert base64.b64decode(secret["data"]["value"])  # kubeconfig never copied into status
    assert "kubeconfig" not in str(mp["status"])


async def test_missing_references_are_reported_then_converge(env: Env) -> None:
    await env.machine_pool("pool", bootstrap="boot")
    mp = await env.pool_until(
        "pool", lambda o: condition(o, c.INFRASTRUCTURE_READY_CONDITION).get("status") == "False"
    )
    boot = condition(mp, c.BOOTSTRAP_CONFIG_READY_CONDITION)
    assert (boot["reason"], boot["message"]) == (
        c.OBJECT_DOES_NOT_EXIST_REASON,
        "KubeadmConfig does not exist",
    )
    infra = condition(mp, c.INFRASTRUCTURE_READY_CONDITION)
    assert infra["reason"] == c.OBJECT_DOES_NOT_EXIST_REASON
    v1 = condition(mp, c.V1BETA1_INFRASTRUCTURE_READY_CONDITION, v1beta1=True)
    assert v1["reason"] == c.V1BETA1_INCORRECT_EXTERNAL_REF_REASON
    assert "TestMachinePool" in v1["message"]
    await env.kubeadm_config("boot", ready=True)
    await env.infra_pool("pool")
    # Provisioning follows from the bootstrap config alone; wait until the infra pool, created
    # after it, has been found (and so adopted) too.
    mp = await env.pool_until(
        "pool",
        lambda o: (
            o["status"].get("phase") == c.PHASE_PROVISIONING
            and condition(o, c.INFRASTRUCTURE_READY_CONDITION).get("reason")
            != c.OBJECT_DOES_NOT_EXIST_REASON
        ),
    )
    assert condition(mp, c.BOOTSTRAP_CONFIG_READY_CONDITION)["status"] == "True"
    pool = await env.client.get(TEST_POOLS, "pool", env.namespace)
    assert pool["metadata"]["ownerReferences"][0]["name"] == "pool"


async def test_infra_pool_of_another_owner_is_refused_until_the_ref_is_fixed(env: Env) -> None:
    await env.kubeadm_config("boot", ready=True)
    await env.kubeadm_config("boot2", ready=True)
    await env.infra_pool("shared")
    await env.machine_pool("first", bootstrap="boot", infra="shared")
    await env.pool_until("first", lambda o: o["status"].get("phase") == c.PHASE_PROVISIONING)
    await env.machine_pool("second", bootstrap="boot2", infra="shared")
    mp = await env.pool_until(
        "second",
        lambda o: (
            condition(o, c.INFRASTRUCTURE_READY_CONDITION).get("reason") == "InvalidReference"
        ),
    )
    message = condition(mp, c.INFRASTRUCTURE_READY_CONDITION)["message"]
    assert f"TestMachinePool {env.namespace}/shared is already controlled by MachinePool first" in (
        message
    )
    await env.infra_pool("own")
    await env.client.patch(
        MACHINE_POOLS,
        "second",
        {"spec": {"template": {"spec": {"infrastructureRef": {"name": "own"}}}}},
        env.namespace,
    )
    mp = await env.pool_until(
        "second",
        lambda o: (
            condition(o, c.INFRASTRUCTURE_READY_CONDITION).get("reason") == c.NOT_READY_REASON
        ),
    )
    assert mp["status"]["phase"] == c.PHASE_PROVISIONING


async def test_suffix_sharing_provider_ids_and_min_ready_seconds(env: Env) -> None:
    a, aa = f"{AZ}/vmss-a/virtualMachines/1", f"{AZ}/vmss-aa/virtualMachines/1"
    for name, pid in (("a", a), ("aa", aa)):
        await env.kubeadm_config(name, ready=True)
        await env.infra_pool(name)
        await env.infra_provider_ids(name, [pid])
        await env.infra_status(name, ready=True, replicas=1)
    await env.machine_pool("a", bootstrap="a", template={"minReadySeconds": 2})
    await env.machine_pool("aa", bootstrap="aa")
    await env.node("node-aa", aa)
    await env.node("node-a", a)
    mp_a = await env.pool_until("a", lambda o: o["status"].get("phase") == c.PHASE_RUNNING)
    mp_aa = await env.pool_until("aa", lambda o: o["status"].get("phase") == c.PHASE_RUNNING)
    assert [r["name"] for r in mp_a["status"]["nodeRefs"]] == ["node-a"]
    assert [r["name"] for r in mp_aa["status"]["nodeRefs"]] == ["node-aa"]
    # Available only once Ready for minReadySeconds; no Node event marks that moment.
    mp_a = await env.pool_until(
        "a", lambda o: o["status"]["deprecated"]["v1beta1"].get("availableReplicas") == 1
    )
    # Zero is left out, as upstream's omitempty counter is.
    assert "unavailableReplicas" not in mp_a["status"]["deprecated"]["v1beta1"]


async def test_a_listed_swap_whose_counters_were_not_written_still_retires_the_node(
    env: Env,
) -> None:
    """A reconcile that copied a swapped instance list (one instance for another) may have its
    spec written and its status not, say if the apiserver restarts between the two: the next
    reconcile finds the list already copied and the old counts (2 of 2 ready, 2 nodeRefs)
    intact. It must still delete the Node whose instance left the list and name the new one;
    a shortcut that trusts nodeRefs while their Nodes exist would keep both as they were."""
    ids = ["test:///r/0", "test:///r/1"]
    swapped = [ids[0], "test:///r/2"]
    await env.kubeadm_config("boot", ready=True)
    await env.infra_pool("pool")
    await env.infra_provider_ids("pool", ids)
    await env.infra_status("pool", ready=True, replicas=2)
    await env.node("r0", ids[0])
    await env.node("r1", ids[1])
    await env.node("r2", swapped[1])
    await env.machine_pool("pool", replicas=2, bootstrap="boot")
    await env.pool_until(
        "pool",
        lambda o: (
            [r["name"] for r in o["status"].get("nodeRefs", [])] == ["r0", "r1"]
            and o["status"]["deprecated"]["v1beta1"].get("readyReplicas") == 2
        ),
    )
    # The Cluster paused holds every reconcile while both lists are written as that spec
    # patch would have left them.
    await env.client.patch(CLUSTERS, env.cluster_name, {"spec": {"paused": True}}, env.namespace)
    await env.pool_until("pool", lambda o: condition(o, c.PAUSED_CONDITION).get("status") == "True")
    await env.infra_provider_ids("pool", swapped)
    await env.client.patch(
        MACHINE_POOLS, "pool", {"spec": {"providerIDList": swapped}}, env.namespace
    )
    await env.client.patch(CLUSTERS, env.cluster_name, {"spec": {"paused": False}}, env.namespace)
    mp = await env.pool_until(
        "pool", lambda o: [r["name"] for r in o["status"].get("nodeRefs", [])] == ["r0", "r2"]
    )
    assert mp["status"]["deprecated"]["v1beta1"]["readyReplicas"] == 2
    assert await env.nodes.until("r1", lambda n: n is None) is None


async def test_scale_to_and_from_zero(env: Env) -> None:
    await env.kubeadm_config("boot", ready=True)
    await env.infra_pool("pool", ready=True, replicas=0)
    await env.machine_pool("pool", replicas=0, bootstrap="boot")
    mp = await env.pool_until("pool", lambda o: o["status"].get("phase") == c.PHASE_RUNNING)
    assert mp["status"].get("replicas") == 0
    assert not mp["status"].get("nodeRefs")
    await env.client.patch(MACHINE_POOLS, "pool", {"spec": {"replicas": 1}}, env.namespace)
    await env.pool_until("pool", lambda o: o["status"].get("phase") == c.PHASE_SCALING_UP)
    await env.infra_provider_ids("pool", ["test:///z/0"])
    await env.infra_status("pool", replicas=1)
    await env.node("z0", "test:///z/0")
    await env.pool_until(
        "pool",
        lambda o: (
            o["status"].get("phase") == c.PHASE_RUNNING
            and len(o["status"].get("nodeRefs", [])) == 1
        ),
    )
    await env.client.patch(MACHINE_POOLS, "pool", {"spec": {"replicas": 0}}, env.namespace)
    await env.pool_until("pool", lambda o: o["status"].get("phase") == c.PHASE_SCALING_DOWN)
    await env.infra_provider_ids("pool", [])
    await env.infra_status("pool", replicas=0)
    await env.pool_until(
        "pool",
        lambda o: o["status"].get("phase") == c.PHASE_RUNNING and o["status"].get("replicas") == 0,
    )
    assert await env.nodes.until("z0", lambda n: n is None) is None


async def test_node_deletion_timeout_leaves_nodes_behind(env: Env) -> None:
    await env.kubeadm_config("boot", ready=True)
    await env.infra_pool("pool")
    await env.client.patch(
        TEST_POOLS, "pool", {"metadata": {"finalizers": ["test/hold"]}}, env.namespace
    )
    await env.infra_provider_ids("pool", ["test:///t/0"])
    await env.infra_status("pool", ready=True, replicas=1)
    await env.node("t0", "test:///t/0")
    await env.machine_pool(
        "pool", bootstrap="boot", template={"deletion": {"nodeDeletionTimeoutSeconds": 1}}
    )
    await env.pool_until("pool", lambda o: o["status"].get("phase") == c.PHASE_RUNNING)
    await env.client.delete(MACHINE_POOLS, "pool", env.namespace)
    mp = await env.pool_until("pool", lambda o: o["status"].get("phase") == c.PHASE_DELETING)
    assert "Waiting for" in condition(mp, c.DELETING_CONDITION)["message"]
    # Retire t0 (see the next test), so that only the timeout keeps it.
    await _retire_while_deleting(env, "pool", [])
    await eventually(
        lambda: node_deletion_timed_out(MachinePoolView(mp)), "the node-deletion timeout", within=10
    )
    await env.client.patch(TEST_POOLS, "pool", {"metadata": {"finalizers": None}}, env.namespace)
    assert await env.pools.until("pool", lambda o: o is None) is None
    assert await env.wclient.get(NODES, "t0"), "the Node outlived the timeout"


async def test_deletion_deletes_only_nodes_whose_provider_id_left_the_list(env: Env) -> None:
    ids = ["test:///r/0", "test:///r/1"]
    await env.kubeadm_config("boot", ready=True)
    await env.infra_pool("pool")
    await env.client.patch(
        TEST_POOLS, "pool", {"metadata": {"finalizers": ["test/hold"]}}, env.namespace
    )
    await env.infra_provider_ids("pool", ids)
    await env.infra_status("pool", ready=True, replicas=2)
    await env.node("r0", ids[0])
    await env.node("r1", ids[1])
    await env.machine_pool("pool", replicas=2, bootstrap="boot")
    await env.pool_until(
        "pool",
        lambda o: (
            o["status"].get("phase") == c.PHASE_RUNNING
            and [r["name"] for r in o["status"].get("nodeRefs", [])] == ["r0", "r1"]
        ),
    )
    await env.client.delete(MACHINE_POOLS, "pool", env.namespace)
    await env.pool_until("pool", lambda o: o["status"].get("phase") == c.PHASE_DELETING)
    await _retire_while_deleting(env, "pool", ids[:1])
    await env.client.patch(TEST_POOLS, "pool", {"metadata": {"finalizers": None}}, env.namespace)
    assert await env.pools.until("pool", lambda o: o is None) is None
    assert await env.nodes.until("r1", lambda n: n is None) is None
    # Still listed: its instance goes with the infra pool, and its Node is the cloud's to remove.
    assert await env.wclient.get(NODES, "r0"), "the Node of a listed instance was deleted"


async def _retire_while_deleting(env: Env, pool: str, ids: list[str]) -> None:
    """Shorten the deleting pool's providerIDList, leaving its nodeRefs: what a provider's
    retirement leaves when the pool is deleted before its Node was (a deleting pool copies
    nothing from the provider, so the test writes what that copy would have)."""
    await env.client.patch(
        MACHINE_POOLS, pool, {"spec": {"providerIDList": ids or None}}, env.namespace
    )
    await env.pool_until(pool, lambda o: (o["spec"].get("providerIDList") or []) == ids)


async def test_fifty_replicas_reach_running(env: Env) -> None:
    n = 50
    ids = [f"test:///big/{i}" for i in range(n)]
    await env.kubeadm_config("boot", ready=True)
    await env.infra_pool("big")
    await env.machine_pool("big", replicas=n, bootstrap="boot")
    await env.pool_until("big", lambda o: o["status"].get("phase") == c.PHASE_PROVISIONING)
    writes_before = len(env.writes)
    metric = env.mgr.metrics.reconcile_total
    before = sum(
        s.value
        for s in metric.collect()[0].samples
        if s.name.endswith("_total") and s.labels.get("controller") == "machinepool"
    )
    await env.infra_provider_ids("big", ids)
    await env.infra_status("big", ready=True, replicas=n)
    for i, pid in enumerate(ids):
        await env.node(f"big-{i}", pid)
    mp = await env.pool_until("big", lambda o: o["status"].get("phase") == c.PHASE_RUNNING)
    assert len(mp["status"]["nodeRefs"]) == n
    after = sum(
        s.value
        for s in metric.collect()[0].samples
        if s.name.endswith("_total") and s.labels.get("controller") == "machinepool"
    )
    writes = [w for w in env.writes[writes_before:] if w[1] == "machinepools"]
    print(
        f"\n50 replicas to Running: {int(after - before)} reconciles, {len(writes)} MachinePool"
        f" writes by the controller, {len(env.writes) - writes_before} management API writes"
        f" in all (the test's own included; Node patches go to the workload cluster)"
    )


async def test_infra_pool_deleted_after_ready_is_reported_never_as_phase_failed(env: Env) -> None:
    pid = "test:///f/0"
    await env.kubeadm_config("boot", ready=True)
    await env.infra_pool("pool")
    await env.infra_provider_ids("pool", [pid])
    await env.infra_status("pool", ready=True, replicas=1)
    await env.node("f0", pid)
    await env.machine_pool("pool", bootstrap="boot")
    await env.pool_until("pool", lambda o: o["status"].get("phase") == c.PHASE_RUNNING)

    await env.client.delete(TEST_POOLS, "pool", env.namespace)
    mp = await env.pool_until(
        "pool",
        lambda o: (
            bool(o["status"]["deprecated"]["v1beta1"].get("failureReason"))
            and condition(o, c.INFRASTRUCTURE_READY_CONDITION).get("status") == "False"
        ),
    )
    # Upstream's phase rules, as upstream's v1beta2 API asks ("Failed" is deprecated there and
    # set by no controller); the failure is in the fields and conditions below.
    assert mp["status"]["phase"] == c.PHASE_RUNNING
    v1 = mp["status"]["deprecated"]["v1beta1"]
    assert v1["failureReason"] == "InvalidConfiguration"
    assert v1["failureMessage"] == (
        f"MachinePool infrastructure resource TestMachinePool {env.namespace}/pool"
        " has been deleted after being ready"
    )
    infra = condition(mp, c.V1BETA1_INFRASTRUCTURE_READY_CONDITION, v1beta1=True)
    assert (infra["status"], infra["reason"]) == ("False", c.V1BETA1_INCORRECT_EXTERNAL_REF_REASON)
    assert condition(mp, "Ready", v1beta1=True)["status"] == "False"
    infra = condition(mp, c.INFRASTRUCTURE_READY_CONDITION)
    assert (infra["reason"], infra["message"]) == (
        c.OBJECT_DELETED_REASON,
        "TestMachinePool has been deleted",
    )
