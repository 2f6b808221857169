"""MachinePool Machines: created per infra machine (long pool names hashed into the label),
counted for status, and deleted drain-safely: a PodDisruptionBudget blocks eviction until the
drain timeout, then the infra machine and the Node go and the Machine is released. Deletion
waits for pre-drain and pre-terminate hooks and for the Node's volumes to be detached, does
nothing while the Cluster or the Machine is paused, and does not wait on an unreachable Node for
pods its kubelet will never end. A change to the pool's template reaches its Machines. A
Machine whose infra machine vanished out of band is kept, and says why. As upstream: v1beta1
conditions beside the v1beta2 ones; no drain or volume wait once the infra machine is going;
the Node left alone while the Cluster is being deleted; a Machine whose Cluster does not exist
left untouched."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from tests.support import eventually
from tests.support.conditions import condition
from tests.support.resources import CLUSTERS, MACHINE_POOLS, MACHINES

from machinepool.api import constants as c
from machinepool.api.kinds import MACHINE_DRAIN_RULES
from machinepool.api.meta import dig
from machinepool.runtime import (
    NODES,
    PDBS,
    PERSISTENT_VOLUMES,
    PODS,
    AlreadyExists,
    Client,
    Obj,
    Resource,
)

from .conftest import (
    INFRA_GROUP,
    TEST_CONTROL_PLANES,
    TEST_MACHINES,
    TEST_POOLS,
    Env,
    _now,
)

LONG = "workers-" + "x" * 70  # not a valid label value: the pool-name label is a hash


async def _running_pod(
    wclient: Client, name: str, node: str, labels: dict[str, str] | None = None
) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "guarded", **(labels or {})}},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": "example.invalid/app:1"}],
        },
    }
    for _ in range(100):  # the default ServiceAccount appears shortly after cluster start
        try:
            await wclient.create(PODS, body, "default")
            break
        except Exception:
            await asyncio.sleep(0.2)
    # A healthy pod (Ready): the PDB protects it. Unready pods may be evicted anyway.
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": _now()}
    status = {"phase": "Running", "conditions": [ready]}
    await wclient.patch(PODS, name, {"status": status}, "default", subresource="status")


async def _blocking_pdb(wclient: Client) -> None:
    pdb = await wclient.create(
        PDBS,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
        "default",
    )
    # No disruption controller runs in the test cluster: report what it would.
    status: Obj = {
        "observedGeneration": pdb["metadata"]["generation"],
        "disruptionsAllowed": 0,
        "currentHealthy": 1,
        "desiredHealthy": 1,
        "expectedPods": 1,
    }
    await wclient.patch(PDBS, "guard", {"status": status}, "default", subresource="status")


async def _deleting_for(env: Env, reason: str) -> Obj | None:
    """Machine m0 once its Deleting condition gives ``reason`` for what it waits on."""
    return await env.machines.until(
        "m0", lambda m: condition(m, c.DELETING_CONDITION).get("reason") == reason
    )


async def test_machines_created_counted_and_drained_past_a_pdb(env: Env) -> None:
    pid = "test:///mpm/0"
    await env.kubeadm_config("boot", ready=True)
    await env.infra_pool("infra")
    await env.infra_provider_ids("infra", [pid])
    await env.infra_status("infra", ready=True, replicas=1, infrastructureMachineKind="TestMachine")
    await env.infra_machine("m0", LONG, pid)
    await env.node("n0", pid)
    await env.machine_pool(
        LONG,
        replicas=1,
        infra="infra",
        bootstrap="boot",
        template={"deletion": {"nodeDrainTimeoutSeconds": 3}},
    )

    machine = await env.machines.until(
        "m0", lambda m: m is not None and condition(m, c.READY_CONDITION).get("status") == "True"
    )
    assert machine is not None
    owner = machine["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("MachinePool", LONG, True)
    assert machine["metadata"]["labels"][c.POOL_NAME_LABEL].startswith("hash_")
    assert machine["metadata"]["labels"][c.CLUSTER_NAME_LABEL] == env.cluster_name
    assert machine["spec"]["infrastructureRef"] == {
        "apiGroup": INFRA_GROUP,
        "kind": "TestMachine",
        "name": "m0",
    }
    assert machine["spec"]["bootstrap"] == {"dataSecretName": ""}
    assert machine["spec"]["providerID"] == pid
    assert machine["status"]["nodeRef"]["name"] == "n0"
    assert c.MACHINE_FINALIZER in machine["metadata"]["finalizers"]
    mp = await env.pool_until(
        LONG,
        lambda o: (
            o["status"].get("phase") == c.PHASE_RUNNING
            and o["status"].get("readyReplicas") == 1
            and condition(o, c.MACHINES_READY_CONDITION).get("status") == "True"
        ),
    )
    assert condition(mp, c.MACHINES_UP_TO_DATE_CONDITION)["status"] == "True"
    assert mp["status"]["upToDateReplicas"] == 1
    machine = env.machines.get("m0")
    assert machine is not None
    assert machine["spec"]["version"] == "v1.31.0"

    await _running_pod(env.wclient, "guarded", "n0")
    await _blocking_pdb(env.wclient)
    await env.client.delete(MACHINES, "m0", env.namespace)

    draining = await _deleting_for(env, c.DRAINING_NODE_REASON)
    assert draining is not None
    assert "guarded" in condition(draining, c.DELETING_CONDITION)["message"]
    node = await env.nodes.until("n0", lambda n: n is not None and n["spec"].get("unschedulable"))
    assert node is not None
    # Past the drain timeout the Machine moves on: infra machine, Node, then the Machine.
    assert await env.machines.until("m0", lambda m: m is None) is None
    assert await env.nodes.until("n0", lambda n: n is None) is None
    assert not (await env.client.list(TEST_MACHINES, env.namespace)).items
    pod = await env.wclient.get(PODS, "guarded", "default")
    assert not pod["metadata"].get("deletionTimestamp"), "the PDB kept the pod from eviction"
    assert (await env.client.get(TEST_POOLS, "infra", env.namespace))["kind"] == "TestMachinePool"


WINDOW = 5.0
"""Seconds of watched events over which a held deletion must not move."""
PRE_DRAIN_A = f"{c.PRE_DRAIN_DELETE_HOOK_ANNOTATION_PREFIX}/a-hook"
PRE_DRAIN_B = f"{c.PRE_DRAIN_DELETE_HOOK_ANNOTATION_PREFIX}/b-hook"
PRE_TERMINATE = f"{c.PRE_TERMINATE_DELETE_HOOK_ANNOTATION_PREFIX}/t-hook"
HOLD = "test.machinepool.dev/hold"
"""A finalizer of the tests' own, to keep a deletion in progress."""


async def _pool_machine(env: Env) -> None:
    """A pool with one Machine, m0, Ready on Node n0."""
    pid = "test:///mpm/0"
    await env.kubeadm_config("boot", ready=True)
    await env.infra_pool("infra")
    await env.infra_provider_ids("infra", [pid])
    await env.infra_status("infra", ready=True, replicas=1, infrastructureMachineKind="TestMachine")
    await env.infra_machine("m0", "workers", pid)
    await env.node("n0", pid)
    await env.machine_pool("workers", replicas=1, infra="infra", bootstrap="boot")
    await env.machines.until(
        "m0", lambda m: m is not None and condition(m, c.READY_CONDITION).get("status") == "True"
    )


async def _annotate(env: Env, annotations: dict[str, str | None]) -> None:
    patch = {"metadata": {"annotations": annotations}}
    await env.client.patch(MACHINES, "m0", patch, env.namespace)


async def _delete_machine(env: Env) -> None:
    await env.client.delete(MACHINES, "m0", env.namespace)
    await env.machines.until(
        "m0", lambda m: m is not None and bool(m["metadata"].get("deletionTimestamp"))
    )


def _deletion(env: Env) -> tuple[object, ...]:
    """What a deletion's progress shows: the Deleting condition, the drain's start and the
    cordon, whether the Node and the Machine are still there."""
    machine, node = env.machines.get("m0"), env.nodes.get("n0")
    deleting = condition(machine, c.DELETING_CONDITION)
    return (
        machine is not None,
        deleting.get("reason"),
        ((machine or {}).get("status") or {}).get("deletion", {}).get("nodeDrainStartTime"),
        node is not None,
        bool(((node or {}).get("spec") or {}).get("unschedulable")),
    )


async def _gone(env: Env) -> None:
    """The deletion went through: Machine, Node and infra machine are gone."""
    assert await env.machines.until("m0", lambda m: m is None) is None
    assert await env.nodes.until("n0", lambda n: n is None) is None
    assert not (await env.client.list(TEST_MACHINES, env.namespace)).items


async def test_the_machine_says_where_its_infra_machine_runs(env: Env) -> None:
    """spec.failureDomain, status.failureDomain and status.addresses come from the infra
    machine, as upstream's Machine controller copies them."""
    await _pool_machine(env)
    addresses = [{"type": "InternalIP", "address": "10.0.0.7"}]
    await env.client.patch(
        TEST_MACHINES, "m0", {"spec": {"failureDomain": "zone-z"}}, env.namespace
    )
    await env.client.patch(
        TEST_MACHINES,
        "m0",
        {"status": {"failureDomain": "zone-z", "addresses": addresses}},
        env.namespace,
        subresource="status",
    )
    machine = await env.machines.until(
        "m0",
        lambda m: (
            dig(m, "spec", "failureDomain") == "zone-z"
            and dig(m, "status", "failureDomain") == "zone-z"
            and dig(m, "status", "addresses") == addresses
        ),
    )
    assert machine is not None


async def test_a_template_change_reaches_the_pools_machines(env: Env) -> None:
    """A label or annotation added to the pool's template, and a new drain timeout, reach a
    Machine that was in sync before, though neither it nor its infra machine changed."""
    await _pool_machine(env)
    patch = {
        "spec": {
            "template": {
                "metadata": {"labels": {"tier": "gold"}, "annotations": {"team": "infra"}},
                "spec": {"deletion": {"nodeDrainTimeoutSeconds": 42}},
            }
        }
    }
    await env.client.patch(MACHINE_POOLS, "workers", patch, env.namespace)
    machine = await env.machines.until(
        "m0",
        lambda m: (
            dig(m, "metadata", "labels", "tier") == "gold"
            and dig(m, "metadata", "annotations", "team") == "infra"
            and dig(m, "spec", "deletion", "nodeDrainTimeoutSeconds") == 42
        ),
    )
    assert machine is not None


async def test_paused_cluster_or_machine_holds_the_machine_and_says_so(env: Env) -> None:
    await _pool_machine(env)
    machine = await env.machines.until(
        "m0", lambda m: condition(m, c.PAUSED_CONDITION).get("reason") == c.NOT_PAUSED_REASON
    )
    assert condition(machine, c.PAUSED_CONDITION)["status"] == "False"

    await env.client.patch(CLUSTERS, env.cluster_name, {"spec": {"paused": True}}, env.namespace)
    machine = await env.machines.until(
        "m0", lambda m: condition(m, c.PAUSED_CONDITION).get("status") == "True"
    )
    paused = condition(machine, c.PAUSED_CONDITION)
    assert (paused["reason"], paused["message"]) == (
        c.PAUSED_REASON,
        "Cluster spec.paused is set to true",
    )
    await _annotate(env, {c.PAUSED_ANNOTATION: "true"})
    both = "Cluster spec.paused is set to true, Machine has the cluster.x-k8s.io/paused annotation"
    await env.machines.until(
        "m0", lambda m: condition(m, c.PAUSED_CONDITION).get("message") == both
    )

    await _delete_machine(env)
    await env.unchanged(lambda: _deletion(env), "a paused Machine's deletion", WINDOW)
    # Resuming the Cluster leaves the Machine paused by its own annotation.
    await env.client.patch(CLUSTERS, env.cluster_name, {"spec": {"paused": False}}, env.namespace)
    machine = await env.machines.until(
        "m0",
        lambda m: (
            condition(m, c.PAUSED_CONDITION).get("message")
            == "Machine has the cluster.x-k8s.io/paused annotation"
        ),
    )
    assert condition(machine, c.DELETING_CONDITION).get("status") != "True"
    await env.unchanged(lambda: _deletion(env), "a paused Machine's deletion", WINDOW)

    await _annotate(env, {c.PAUSED_ANNOTATION: None})
    await _gone(env)


async def test_deletion_waits_for_pre_drain_then_pre_terminate_hooks(env: Env) -> None:
    await _pool_machine(env)
    await _annotate(env, {PRE_DRAIN_B: "", PRE_DRAIN_A: "", PRE_TERMINATE: ""})
    await _delete_machine(env)

    machine = await _deleting_for(env, c.WAITING_FOR_PRE_DRAIN_HOOK_REASON)
    assert condition(machine, c.DELETING_CONDITION)["message"] == (
        f"Waiting for pre-drain hooks to succeed (hooks: {PRE_DRAIN_A},{PRE_DRAIN_B})"
    )
    assert machine is not None
    assert machine["status"]["deletion"]["waitForPreDrainHookStartTime"]
    hook = condition(machine, c.V1BETA1_PRE_DRAIN_DELETE_HOOK_SUCCEEDED_CONDITION, v1beta1=True)
    assert (hook["status"], hook["reason"]) == ("False", c.V1BETA1_WAITING_EXTERNAL_HOOK_REASON)
    await env.unchanged(lambda: _deletion(env), "the drain held by pre-drain hooks", WINDOW)

    await _annotate(env, {PRE_DRAIN_A: None, PRE_DRAIN_B: None})
    machine = await _deleting_for(env, c.WAITING_FOR_PRE_TERMINATE_HOOK_REASON)
    assert condition(machine, c.DELETING_CONDITION)["message"] == (
        f"Waiting for pre-terminate hooks to succeed (hooks: {PRE_TERMINATE})"
    )
    assert machine is not None
    assert machine["status"]["deletion"]["waitForPreTerminateHookStartTime"]
    for type_, status in (
        (c.V1BETA1_PRE_DRAIN_DELETE_HOOK_SUCCEEDED_CONDITION, "True"),
        (c.V1BETA1_DRAINING_SUCCEEDED_CONDITION, "True"),
        (c.V1BETA1_PRE_TERMINATE_DELETE_HOOK_SUCCEEDED_CONDITION, "False"),
    ):
        assert condition(machine, type_, v1beta1=True)["status"] == status, type_
    node = env.nodes.get("n0")
    assert node is not None
    assert node["spec"].get("unschedulable"), "drained before the pre-terminate hook"
    await env.unchanged(lambda: _deletion(env), "the infra machine held by a hook", WINDOW)
    infra = await env.client.get(TEST_MACHINES, "m0", env.namespace)
    assert not infra["metadata"].get("deletionTimestamp")

    await _annotate(env, {PRE_TERMINATE: None})
    await _gone(env)


async def test_drain_of_an_unreachable_node_does_not_wait_for_terminating_pods(env: Env) -> None:
    await _pool_machine(env)
    await _running_pod(env.wclient, "terminating", "n0")
    await _running_pod(env.wclient, "running", "n0")
    # No kubelet confirms a pod's end here: a deleted pod stays, terminating, for good.
    await env.wclient.delete(PODS, "terminating", "default", grace_period_seconds=1)
    unknown = {
        "type": "Ready",
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
    }
    await env.wclient.patch(
        NODES, "n0", {"status": {"conditions": [unknown]}}, subresource="status"
    )
    await env.nodes.until("n0", lambda n: condition(n, "Ready").get("status") == "Unknown")

    await _delete_machine(env)
    await _gone(env)
    for name in ("terminating", "running"):  # evicted, never confirmed gone
        pod = await env.wclient.get(PODS, name, "default")
        assert pod["metadata"].get("deletionTimestamp"), name
    evicted = await env.wclient.get(PODS, "running", "default")
    assert evicted["metadata"]["deletionGracePeriodSeconds"] == 1


async def _attached_volume(env: Env) -> None:
    """A CSI PersistentVolume, bound to default/data, attached to n0."""
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "pv-data"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": "csi.test", "volumeHandle": "vol-1"},
            "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "default", "name": "data"},
        },
    }
    await env.wclient.create(PERSISTENT_VOLUMES, volume)
    attached = {"volumesAttached": [{"name": "kubernetes.io/csi/csi.test^vol-1", "devicePath": ""}]}
    await env.wclient.patch(NODES, "n0", {"status": attached}, subresource="status")


async def test_node_deletion_waits_for_its_volumes_to_be_detached(env: Env) -> None:
    await _pool_machine(env)
    await _attached_volume(env)
    await _delete_machine(env)

    machine = await _deleting_for(env, c.WAITING_FOR_VOLUME_DETACH_REASON)
    assert machine is not None
    started = machine["status"]["deletion"]["waitForNodeVolumeDetachStartTime"]
    assert condition(machine, c.DELETING_CONDITION)["message"] == (
        f"Waiting for Node volumes to be detached (started at {started})\n"
        "* PersistentVolumeClaims: default/data"
    )
    detach = condition(machine, c.V1BETA1_VOLUME_DETACH_SUCCEEDED_CONDITION, v1beta1=True)
    assert detach["status"] == "False"
    assert detach["reason"] == c.V1BETA1_WAITING_FOR_VOLUME_DETACH_REASON
    await env.unchanged(lambda: _deletion(env), "a Node with an attached volume", WINDOW)

    detached = {"status": {"volumesAttached": None}}
    await env.wclient.patch(NODES, "n0", detached, subresource="status")
    await _gone(env)


async def test_volume_detach_is_not_waited_for_when_the_machine_says_so(env: Env) -> None:
    await _pool_machine(env)
    await _attached_volume(env)
    await _annotate(env, {c.EXCLUDE_WAIT_FOR_NODE_VOLUME_DETACH_ANNOTATION: ""})
    await _delete_machine(env)
    await _gone(env)


async def test_machine_whose_infra_machine_vanished_is_kept_and_says_why(env: Env) -> None:
    pid = "test:///gone/0"
    await env.kubeadm_config("boot", ready=True)
    await env.infra_pool("infra")
    await env.infra_provider_ids("infra", [pid])
    await env.infra_status("infra", ready=True, replicas=1, infrastructureMachineKind="TestMachine")
    await env.infra_machine("g0", "pool", pid, provisioned=True)
    await env.node("g0", pid)
    await env.machine_pool("pool", replicas=1, infra="infra", bootstrap="boot")
    await env.machines.until(
        "g0",
        lambda m: (
            m is not None
            and condition(m, c.INFRASTRUCTURE_READY_CONDITION).get("status") == "True"
            and condition(m, c.READY_CONDITION).get("status") == "True"
        ),
    )

    # Out of band: no provider deleted the Machine first, as a provider removing an instance does.
    await env.client.delete(TEST_MACHINES, "g0", env.namespace)
    machine = await env.machines.until(
        "g0",
        lambda m: (
            m is not None
            and condition(m, c.INFRASTRUCTURE_READY_CONDITION).get("reason")
            == c.OBJECT_DELETED_REASON
        ),
    )
    assert machine is not None
    assert condition(machine, c.INFRASTRUCTURE_READY_CONDITION)["message"] == (
        "TestMachine has been deleted while the Machine still exists"
    )
    # A spec change is a reconcile the test can see finish (observedGeneration); the pool's
    # MachinePool Machines phase runs in it, so a Machine it deleted shows in the read after.
    mp = await env.client.patch(MACHINE_POOLS, "pool", {"spec": {"replicas": 2}}, env.namespace)
    generation = mp["metadata"]["generation"]
    await env.pool_until("pool", lambda o: o["status"].get("observedGeneration", 0) >= generation)
    kept = await env.client.get(MACHINES, "g0", env.namespace)
    assert not kept["metadata"].get("deletionTimestamp"), "the pool deleted the Machine"


async def test_an_infra_machines_terminal_failure_is_carried_to_its_machine(env: Env) -> None:
    """A v1beta1-contract provider reports a terminal failure on the infra machine; the
    Machine's v1beta1 status carries it, in the words upstream's Machine controller uses."""
    await _pool_machine(env)

    failure = {"failureReason": "UpdateError", "failureMessage": "the instance was retired"}
    await env.client.patch(
        TEST_MACHINES, "m0", {"status": failure}, env.namespace, subresource="status"
    )
    machine = await env.machines.until(
        "m0",
        lambda m: bool(
            m and (m["status"].get("deprecated") or {}).get("v1beta1", {}).get("failureReason")
        ),
    )
    assert machine is not None
    v1 = machine["status"]["deprecated"]["v1beta1"]
    assert v1["failureReason"] == "UpdateError"
    assert v1["failureMessage"] == (
        f"Failure detected from referenced resource {TEST_MACHINES.api_version},"
        ' Kind=TestMachine with name "m0": the instance was retired'
    )


async def test_no_machine_is_made_for_an_infra_machine_being_deleted(env: Env) -> None:
    """An infra machine on its way out gets no new Machine: its own may have gone while the
    pool's cache still shows it, and one made now would wait forever for a Node."""
    pids = ["test:///going/0", "test:///going/1"]
    await env.kubeadm_config("boot", ready=True)
    await env.infra_pool("infra")
    await env.infra_provider_ids("infra", pids)
    await env.infra_status("infra", ready=True, replicas=2, infrastructureMachineKind="TestMachine")
    await env.infra_machine("leaving", "pool", pids[0], provisioned=True)
    await _hold(env, TEST_MACHINES, "leaving")
    await env.client.delete(TEST_MACHINES, "leaving", env.namespace)
    await env.infra_machine("staying", "pool", pids[1], provisioned=True)
    await env.machine_pool("pool", replicas=2, infra="infra", bootstrap="boot")
    # The Machine of the other infra machine shows the pool's Machines phase ran; a spec
    # change is a reconcile the test can see finish, after which nothing more is made.
    await env.machines.until("staying", lambda m: m is not None)
    mp = await env.client.patch(MACHINE_POOLS, "pool", {"spec": {"replicas": 3}}, env.namespace)
    generation = mp["metadata"]["generation"]
    await env.pool_until("pool", lambda o: o["status"].get("observedGeneration", 0) >= generation)
    names = sorted(
        m["metadata"]["name"] for m in (await env.client.list(MACHINES, env.namespace)).items
    )
    assert names == ["staying"], (
        f"Machines {names}: one was made for an infra machine being deleted"
    )
    await env.client.patch(
        TEST_MACHINES, "leaving", {"metadata": {"finalizers": None}}, env.namespace
    )


async def test_pool_machine_carries_upstreams_v1beta1_conditions(env: Env) -> None:
    """What a v1beta1 client reads in status.deprecated.v1beta1: the infra machine's
    readiness mirrored, the Node's health with upstream's reasons and severities, and the
    Ready summary of them (NodeHealthy is not part of it, as upstream has it)."""
    await _pool_machine(env)
    provisioned = {"status": {"initialization": {"provisioned": True}}}
    await env.client.patch(TEST_MACHINES, "m0", provisioned, env.namespace, subresource="status")
    machine = await env.machines.until(
        "m0",
        lambda m: (
            condition(m, c.V1BETA1_READY_CONDITION, v1beta1=True).get("status") == "True"
            and condition(m, c.V1BETA1_NODE_HEALTHY_CONDITION, v1beta1=True).get("status") == "True"
        ),
    )
    assert condition(machine, c.V1BETA1_INFRASTRUCTURE_READY_CONDITION, v1beta1=True)["status"] == (
        "True"
    )

    await env.node_ready("n0", False)
    machine = await env.machines.until(
        "m0",
        lambda m: (
            condition(m, c.V1BETA1_NODE_HEALTHY_CONDITION, v1beta1=True).get("status") == "False"
        ),
    )
    healthy = condition(machine, c.V1BETA1_NODE_HEALTHY_CONDITION, v1beta1=True)
    assert (healthy["reason"], healthy["severity"], healthy["message"]) == (
        c.V1BETA1_NODE_CONDITIONS_FAILED_REASON,
        c.SEVERITY_WARNING,
        "Node condition Ready is False",
    )
    assert condition(machine, c.V1BETA1_READY_CONDITION, v1beta1=True)["status"] == "True"

    broken = {"type": "Ready", "status": "False", "reason": "Broken", "message": "disk gone"}
    await env.client.patch(
        TEST_MACHINES,
        "m0",
        {"status": {"conditions": [broken]}},
        env.namespace,
        subresource="status",
    )
    machine = await env.machines.until(
        "m0",
        lambda m: condition(m, c.V1BETA1_READY_CONDITION, v1beta1=True).get("reason") == "Broken",
    )
    ready = condition(machine, c.V1BETA1_READY_CONDITION, v1beta1=True)
    assert (ready["status"], ready["message"]) == ("False", "disk gone")
    infra = condition(machine, c.V1BETA1_INFRASTRUCTURE_READY_CONDITION, v1beta1=True)
    assert (infra["status"], infra["reason"]) == ("False", "Broken")


async def _hold(env: Env, resource: Resource, name: str) -> None:
    """A finalizer of the test's own on ``name``, so its deletion stays in progress."""
    patch = {"metadata": {"finalizers": [HOLD]}}
    await env.client.patch(resource, name, patch, env.namespace)


async def test_no_drain_once_the_infra_machine_is_being_deleted(env: Env) -> None:
    """The instance is going anyway: a PDB that would block the drain holds nothing, the
    Node is not even cordoned, and the deletion waits only for the infra machine."""
    await _pool_machine(env)
    await _running_pod(env.wclient, "guarded", "n0")
    await _blocking_pdb(env.wclient)
    await _hold(env, TEST_MACHINES, "m0")
    await env.client.delete(TEST_MACHINES, "m0", env.namespace)
    await _delete_machine(env)

    machine = await _deleting_for(env, c.WAITING_FOR_INFRASTRUCTURE_DELETION_REASON)
    assert not condition(machine, c.V1BETA1_DRAINING_SUCCEEDED_CONDITION, v1beta1=True)
    assert not ((machine or {}).get("status") or {}).get("deletion", {}).get("nodeDrainStartTime")
    node = env.nodes.get("n0")
    assert node is not None
    assert not node["spec"].get("unschedulable"), "cordoned although the instance is going"

    await env.client.patch(TEST_MACHINES, "m0", {"metadata": {"finalizers": None}}, env.namespace)
    await _gone(env)
    pod = await env.wclient.get(PODS, "guarded", "default")
    assert not pod["metadata"].get("deletionTimestamp"), "evicted although the instance is going"


async def test_no_volume_wait_once_the_infra_machine_is_being_deleted(env: Env) -> None:
    await _pool_machine(env)
    await _attached_volume(env)
    await _hold(env, TEST_MACHINES, "m0")
    await env.client.delete(TEST_MACHINES, "m0", env.namespace)
    await _delete_machine(env)

    machine = await _deleting_for(env, c.WAITING_FOR_INFRASTRUCTURE_DELETION_REASON)
    assert not condition(machine, c.V1BETA1_VOLUME_DETACH_SUCCEEDED_CONDITION, v1beta1=True)
    await env.client.patch(TEST_MACHINES, "m0", {"metadata": {"finalizers": None}}, env.namespace)
    await _gone(env)


async def test_a_cluster_being_deleted_leaves_the_node_alone(env: Env) -> None:
    """While the Cluster goes, a pool Machine's deletion skips its pre-drain hooks, the drain
    and the Node's deletion: it deletes its infra machine and lets go, the Node untouched."""
    await _pool_machine(env)
    await _annotate(env, {PRE_DRAIN_A: ""})
    await _hold(env, CLUSTERS, env.cluster_name)
    await env.client.delete(CLUSTERS, env.cluster_name, env.namespace)
    await env.client.delete(MACHINES, "m0", env.namespace)

    assert await env.machines.until("m0", lambda m: m is None) is None
    assert not (await env.client.list(TEST_MACHINES, env.namespace)).items
    node = env.nodes.get("n0")
    assert node is not None, "the Node of a Cluster being deleted was deleted"
    assert not node["spec"].get("unschedulable"), "cordoned although the Cluster is going"
    await env.wclient.delete(NODES, "n0")


async def test_a_machine_whose_cluster_does_not_exist_is_left_untouched(env: Env) -> None:
    """Upstream fails such a reconcile and writes nothing, not even the finalizer; once the
    Cluster exists the Machine is reconciled."""
    missing = f"{env.cluster_name}-later"
    mp = await env.machine_pool("orphan", replicas=0, cluster=missing)
    machine = {
        "apiVersion": MACHINES.api_version,
        "kind": "Machine",
        "metadata": {
            "name": "lonely",
            "labels": {c.CLUSTER_NAME_LABEL: missing, c.POOL_NAME_LABEL: "orphan"},
            "ownerReferences": [
                {
                    "apiVersion": MACHINE_POOLS.api_version,
                    "kind": "MachinePool",
                    "name": "orphan",
                    "uid": mp["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "clusterName": missing,
            "bootstrap": {"dataSecretName": ""},
            "infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "TestMachine", "name": "x"},
        },
    }
    await env.client.create(MACHINES, machine, env.namespace)
    await env.machines.until("lonely", lambda m: m is not None)

    def written() -> tuple[object, ...]:
        m = env.machines.get("lonely") or {}
        return (m.get("metadata", {}).get("finalizers"), m.get("status"))

    assert written() == (None, None)
    await env.unchanged(written, "a Machine without its Cluster", WINDOW)

    cluster = {"apiVersion": CLUSTERS.api_version, "kind": "Cluster", "metadata": {"name": missing}}
    await env.client.create(CLUSTERS, {**cluster, "spec": {}}, env.namespace)
    found = await env.machines.until(
        "lonely",
        lambda m: m is not None and c.MACHINE_FINALIZER in (m["metadata"].get("finalizers") or []),
    )
    assert found is not None


async def test_drain_label_skips_pods_or_waits_for_them_to_complete(env: Env) -> None:
    """``cluster.x-k8s.io/drain: skip`` keeps a pod from eviction and from the wait;
    ``wait-completed`` keeps it from eviction, and the drain waits until it has left."""
    await _pool_machine(env)
    await _running_pod(env.wclient, "skipped", "n0", {c.POD_DRAIN_LABEL: "skip"})
    await _running_pod(env.wclient, "finishing", "n0", {c.POD_DRAIN_LABEL: "wait-completed"})
    await _delete_machine(env)

    machine = await env.machines.until(
        "m0",
        lambda m: (
            "waiting for completion: default/finishing"
            in condition(m, c.DELETING_CONDITION).get("message", "")
        ),
    )
    deleting = condition(machine, c.DELETING_CONDITION)
    assert (deleting["reason"], deleting["message"]) == (
        c.DRAINING_NODE_REASON,
        "Draining Node: 1 pods remaining, waiting for completion: default/finishing",
    )
    for name in ("skipped", "finishing"):
        pod = await env.wclient.get(PODS, name, "default")
        assert not pod["metadata"].get("deletionTimestamp"), f"{name} was evicted"

    # Its workload ends it (no kubelet here to confirm a graceful end).
    await env.wclient.delete(PODS, "finishing", "default", grace_period_seconds=0)
    await _gone(env)
    skipped = await env.wclient.get(PODS, "skipped", "default")
    assert not skipped["metadata"].get("deletionTimestamp"), "skipped was evicted"


def _drain_rule(name: str, behavior: str, order: int | None = None, **spec: object) -> Obj:
    drain: dict[str, object] = {"behavior": behavior}
    if order is not None:
        drain["order"] = order
    return {
        "apiVersion": MACHINE_DRAIN_RULES.api_version,
        "kind": "MachineDrainRule",
        "metadata": {"name": name},
        "spec": {"drain": drain, **spec},
    }


async def _touch_node(env: Env, value: str) -> None:
    """Edit the Node: a change to its annotations brings its Machine back at once, where the
    drain would come back on its own only after its 20-second interval."""
    patch = {"metadata": {"annotations": {"test.machinepool.dev/touched": value}}}
    await env.wclient.patch(NODES, "n0", patch)


async def test_machine_drain_rules_skip_wait_for_and_order_pods(env: Env) -> None:
    """MachineDrainRules of the Machine's namespace choose what its drain does: a Skip rule's
    pods stay, a WaitCompleted rule's are waited for, a Drain rule of order 10 holds its pods
    until those of order 0 are gone; a rule whose Machine selector does not select the Machine
    changes nothing."""

    def apps(name: str) -> list[dict[str, object]]:
        return [{"selector": {"matchLabels": {"app": name}}}]

    rules = [
        _drain_rule("a-agents", "Skip", pods=apps("agent")),
        _drain_rule("b-db-last", "Drain", 10, pods=apps("db")),
        _drain_rule("c-batch", "WaitCompleted", pods=apps("batch")),
        _drain_rule(
            "d-other-pools", "Skip", machines=[{"selector": {"matchLabels": {"pool": "other"}}}]
        ),
    ]
    for body in rules:
        await env.client.create(MACHINE_DRAIN_RULES, body, env.namespace)
    await _pool_machine(env)
    for app in ("agent", "batch", "db", "web"):
        await _running_pod(env.wclient, app, "n0", {"app": app})
    await _delete_machine(env)

    machine = await env.machines.until(
        "m0", lambda m: "after those" in condition(m, c.DELETING_CONDITION).get("message", "")
    )
    assert condition(machine, c.DELETING_CONDITION)["message"] == (
        "Draining Node: 3 pods remaining, waiting for completion: default/batch,"
        " evicted after those: default/db"
    )

    async def evicted(name: str) -> bool:
        pod = await env.wclient.get(PODS, name, "default")
        return bool(pod["metadata"].get("deletionTimestamp"))

    assert await evicted("web")
    for name in ("agent", "batch", "db"):
        assert not await evicted(name), f"{name} was evicted in the first round"

    # The order-0 pods leave (no kubelet here to confirm a graceful end): db goes next.
    for name in ("web", "batch"):
        await env.wclient.delete(PODS, name, "default", grace_period_seconds=0)
    await _touch_node(env, "1")
    await eventually(lambda: evicted("db"), "db evicted")
    await env.wclient.delete(PODS, "db", "default", grace_period_seconds=0)
    await _touch_node(env, "2")
    await _gone(env)
    assert not await evicted("agent"), "the Skip rule's pod was evicted"


@pytest.mark.parametrize("named", ["none", "not-managed", "managed"])
async def test_node_left_alone_without_a_control_plane_machine(env: Env, named: str) -> None:
    """A Cluster with no control-plane Machine left, whose controlPlaneRef names none
    (``none``) or a control plane that is not externally managed: as upstream, a deleted pool
    Machine's Node is neither drained (nor cordoned) nor deleted. An externally managed one
    (EKS, AKS, GKE) has no such Machines to count: the Node is drained and deleted."""
    ref = None
    if named != "none":
        body = {
            "apiVersion": TEST_CONTROL_PLANES.api_version,
            "kind": TEST_CONTROL_PLANES.kind,
            "metadata": {"name": "cp"},
        }
        await env.client.create(TEST_CONTROL_PLANES, body, env.namespace)
        ref = {
            "apiGroup": TEST_CONTROL_PLANES.group,
            "kind": TEST_CONTROL_PLANES.kind,
            "name": "cp",
        }
    if named == "managed":
        managed = {"status": {"externalManagedControlPlane": True}}
        await env.client.patch(
            TEST_CONTROL_PLANES, "cp", managed, env.namespace, subresource="status"
        )
    await env.client.patch(
        CLUSTERS, env.cluster_name, {"spec": {"controlPlaneRef": ref}}, env.namespace
    )
    await _pool_machine(env)
    await _delete_machine(env)

    if named == "managed":
        await _gone(env)
        return
    assert await env.machines.until("m0", lambda m: m is None) is None
    node = env.nodes.get("n0")
    assert node is not None, "the Node was deleted"
    assert not node["spec"].get("unschedulable"), "the Node was cordoned"


async def test_a_drain_rule_it_cannot_apply_says_draining_failed(env: Env) -> None:
    """A MachineDrainRule with an invalid selector (upstream's webhook refuses it, ours has
    none for the kind) fails the drain as upstream's does: DrainingSucceeded False
    DrainingFailed with the error, a Warning, retried; once the rule is gone the drain runs."""
    bad = _drain_rule(
        "bad", "Skip", pods=[{"selector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}}]
    )
    await env.client.create(MACHINE_DRAIN_RULES, bad, env.namespace)
    await _pool_machine(env)
    await _delete_machine(env)

    machine = await env.machines.until(
        "m0",
        lambda m: (
            condition(m, c.V1BETA1_DRAINING_SUCCEEDED_CONDITION, v1beta1=True).get("reason")
            == c.V1BETA1_DRAINING_FAILED_REASON
        ),
    )
    failed = condition(machine, c.V1BETA1_DRAINING_SUCCEEDED_CONDITION, v1beta1=True)
    assert (failed["status"], failed["severity"]) == ("False", c.SEVERITY_WARNING)
    assert "MachineDrainRule bad" in failed["message"]
    deleting = condition(machine, c.DELETING_CONDITION)
    assert (deleting["reason"], deleting["message"]) == (
        c.DRAINING_NODE_REASON,
        "Error draining Node, please check controller logs for errors",
    )
    await env.client.delete(MACHINE_DRAIN_RULES, "bad", env.namespace)
    await _gone(env)


_ADMISSION = "admissionregistration.k8s.io"
_POLICIES = Resource(
    _ADMISSION, "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy", namespaced=False
)
_POLICY_BINDINGS = Resource(
    _ADMISSION,
    "v1",
    "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding",
    namespaced=False,
)


async def test_a_node_deletion_refused_says_deletion_failed(env: Env) -> None:
    """The workload cluster refuses to delete the Node (an admission policy): as upstream,
    the Machine says NodeHealthy False DeletionFailed (a Warning) and Deleting DeletingNode,
    and keeps trying; once the Node may go, it goes and the Machine is released."""
    policy = {
        "metadata": {"name": "keep-nodes"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["DELETE"],
                        "resources": ["nodes"],
                    }
                ]
            },
            "validations": [{"expression": "false", "message": "Nodes are kept"}],
        },
    }
    binding = {
        "metadata": {"name": "keep-nodes"},
        "spec": {"policyName": "keep-nodes", "validationActions": ["Deny"]},
    }
    await env.wclient.create(_POLICIES, policy)
    await env.wclient.create(_POLICY_BINDINGS, binding)
    probe: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "keep-probe"}}

    async def deletion_refused() -> bool:
        """Whether the policy is in force yet (the apiserver loads it a moment later)."""
        with contextlib.suppress(AlreadyExists):
            await env.wclient.create(NODES, probe)
        try:
            await env.wclient.delete(NODES, "keep-probe")
        except Exception:
            return True
        return False

    async def probe_deleted() -> bool:
        return not await deletion_refused()

    await eventually(deletion_refused, "the admission policy in force")
    try:
        await _pool_machine(env)
        await _delete_machine(env)
        machine = await env.machines.until(
            "m0",
            lambda m: (
                condition(m, c.V1BETA1_NODE_HEALTHY_CONDITION, v1beta1=True).get("reason")
                == c.V1BETA1_DELETION_FAILED_REASON
            ),
        )
        failed = condition(machine, c.V1BETA1_NODE_HEALTHY_CONDITION, v1beta1=True)
        assert (failed["status"], failed["severity"]) == ("False", c.SEVERITY_WARNING)
        deleting = condition(machine, c.DELETING_CONDITION)
        assert (deleting["reason"], deleting["message"]) == (
            c.DELETING_NODE_REASON,
            "Error deleting Node, please check controller logs for errors",
        )
        assert env.nodes.get("n0") is not None
    finally:
        await env.wclient.delete(_POLICY_BINDINGS, "keep-nodes")
        await env.wclient.delete(_POLICIES, "keep-nodes")
        await eventually(probe_deleted, "the admission policy gone")
    await _gone(env)
