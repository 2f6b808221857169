"""MachinePool Machines: created per infra machine (long pool names hashed into the label),
counted for status, and deleted drain-safely: a PodDisruptionBudget blocks eviction until the
drain timeout, then the infra machine and the Node go and the Machine is released."""

from __future__ import annotations

import asyncio

from tests.support.resources import MACHINES

from machinepool.api import constants as c
from machinepool.api.constants import pool_name_label_value
from machinepool.runtime import PDBS, PODS, Client, Obj

from .conftest import INFRA_GROUP, TEST_MACHINES, TEST_POOLS, Env, _now, cond

LONG = "workers-" + "x" * 70  # not a valid label value: the pool-name label is a hash


async def _infra_machine(env: Env, name: str, pool: str, pid: str) -> None:
    await env.client.create(
        TEST_MACHINES,
        {
            "apiVersion": TEST_MACHINES.api_version,
            "kind": "TestMachine",
            "metadata": {
                "name": name,
                "labels": {
                    c.CLUSTER_NAME_LABEL: env.cluster_name,
                    c.POOL_NAME_LABEL: pool_name_label_value(pool),
                },
            },
            "spec": {"providerID": pid},
        },
        env.namespace,
    )


async def _running_pod(wclient: Client, name: str, node: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "guarded"}},
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


async def test_machines_created_counted_and_drained_past_a_pdb(env: Env) -> None:
    pid = "test:///mpm/0"
    await env.kubeadm_config("boot", ready=True)
    await env.infra_pool("infra")
    await env.infra_provider_ids("infra", [pid])
    await env.infra_status("infra", ready=True, replicas=1, infrastructureMachineKind="TestMachine")
    await _infra_machine(env, "m0", LONG, pid)
    await env.node("n0", pid)
    await env.machine_pool(
        LONG,
        replicas=1,
        infra="infra",
        bootstrap="boot",
        template={"deletion": {"nodeDrainTimeoutSeconds": 3}},
    )

    machine = await env.machines.until(
        "m0", lambda m: m is not None and cond(m, c.READY_CONDITION).get("status") == "True"
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
            and cond(o, c.MACHINES_READY_CONDITION).get("status") == "True"
        ),
    )
    assert cond(mp, c.MACHINES_UP_TO_DATE_CONDITION)["status"] == "True"
    assert mp["status"]["upToDateReplicas"] == 1
    machine = env.machines.get("m0")
    assert machine is not None
    assert machine["spec"]["version"] == "v1.31.0"

    await _running_pod(env.wclient, "guarded", "n0")
    await _blocking_pdb(env.wclient)
    await env.client.delete(MACHINES, "m0", env.namespace)

    draining = await env.machines.until(
        "m0",
        lambda m: (
            m is not None and cond(m, c.DELETING_CONDITION).get("reason") == c.DRAINING_NODE_REASON
        ),
    )
    assert draining is not None
    assert "guarded" in cond(draining, c.DELETING_CONDITION)["message"]
    node = await env.nodes.until("n0", lambda n: n is not None and n["spec"].get("unschedulable"))
    assert node is not None
    # Past the drain timeout the Machine moves on: infra machine, Node, then the Machine.
    assert await env.machines.until("m0", lambda m: m is None) is None
    assert await env.nodes.until("n0", lambda n: n is None) is None
    assert not (await env.client.list(TEST_MACHINES, env.namespace)).items
    pod = await env.wclient.get(PODS, "guarded", "default")
    assert not pod["metadata"].get("deletionTimestamp"), "the PDB kept the pod from eviction"
    assert (await env.client.get(TEST_POOLS, "infra", env.namespace))["kind"] == "TestMachinePool"
