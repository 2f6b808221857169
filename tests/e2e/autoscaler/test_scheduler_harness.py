"""The kube-scheduler of a workload cluster started with ``PodLifecycle`` (as every autoscaler
test's is), against that real workload cluster.

cluster-autoscaler scales up for Pods the scheduler marked unschedulable and scales down Nodes
whose Pods fit elsewhere, so the scenarios rely on a real scheduler binding Pods by their
requests against Node allocatable. These tests pin that behaviour on a workload cluster
without machinepool's controllers: a Pod that fits is bound, one that fits nowhere stays
Pending with ``PodScheduled=False/Unschedulable``, the signal the autoscaler acts on.

The harness's autoscaler command line and node-group annotations have no test of their own:
restating them here could not fail. The scenarios (test_cluster_autoscaler.py,
test_clusterapi_contract.py, test_autoscaler_scenarios.py) run the real cluster-autoscaler
with them and fail when a flag or an annotation is wrong; how the product reads the size
annotations is tested with the MachinePool webhook (tests/unit/test_webhooks_admission.py).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from machinepool.api.meta import format_time
from machinepool.controlplane.process import Process
from machinepool.runtime import NODES, PODS, SERVICE_ACCOUNTS, Client, Obj

from .harness import wait_for_objects


async def _register_node(client: Client, name: str, cpu: str, memory: str) -> None:
    """Register a Ready Node as a kubelet would: the object, then its status."""
    await client.create(NODES, {"metadata": {"name": name}, "spec": {"providerID": f"t:///{name}"}})
    resources = {"cpu": cpu, "memory": memory, "pods": "110"}
    now = format_time(datetime.now(UTC))
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    status = {"capacity": resources, "allocatable": resources, "conditions": [ready]}
    await client.patch(NODES, name, {"status": status}, subresource="status")


def _pod(name: str, cpu: str) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.invalid/pause",
                    "resources": {"requests": {"cpu": cpu}},
                }
            ],
        },
    }


def _scheduled(pod: Obj) -> bool:
    return bool(pod.get("spec", {}).get("nodeName"))


def _unschedulable(pod: Obj) -> bool:
    return any(
        cond.get("type") == "PodScheduled"
        and cond.get("status") == "False"
        and cond.get("reason") == "Unschedulable"
        for cond in (pod.get("status") or {}).get("conditions") or []
    )


async def _create_pod(client: Client, pod: Obj) -> None:
    # The default ServiceAccount appears shortly after the workload cluster starts; until then
    # admission refuses Pods in the namespace.
    await wait_for_objects(
        client, SERVICE_ACCOUNTS, "default", lambda o: "default" in o, "default SA"
    )
    await client.create(PODS, pod, "default")


async def test_scheduler_binds_fitting_pod_and_marks_the_rest_unschedulable(
    workload_client: Client, scheduler: list[Process]
) -> None:
    node = f"n-{uuid.uuid4().hex[:6]}"
    await _register_node(workload_client, node, "2", "4Gi")
    await _create_pod(workload_client, _pod("fits", "1500m"))
    await _create_pod(workload_client, _pod("too-big", "1"))

    pods = await wait_for_objects(
        workload_client,
        PODS,
        "default",
        lambda p: (
            {"fits", "too-big"} <= p.keys()
            and _scheduled(p["fits"])
            and _unschedulable(p["too-big"])
        ),
        "one Pod bound and the other marked Unschedulable",
        procs=scheduler,
    )
    assert pods["fits"]["spec"]["nodeName"] == node
    assert not _scheduled(pods["too-big"])
