"""The real cluster-autoscaler (clusterapi provider) scaling machinepool MachinePools.

Part of the default run whenever hack/autoscaler/build.sh can give the binary (built from the
source folder CLUSTER_AUTOSCALER_SRC names, which .ci/run sets; see tests/conftest.py);
``pytest -m autoscaler tests/e2e/autoscaler`` runs them alone, and a failed build fails them
with the script's explanation. The autoscaler watches the test namespace's MachinePools in the
management cluster and the workload cluster's Nodes and Pods; a real kube-scheduler places the
Pods and the node simulator runs them.
"""

from __future__ import annotations

from typing import Any

import pytest

from machinepool.api import constants as c
from machinepool.controlplane.process import Process
from machinepool.runtime import CORE_EVENTS, PODS, FuncHandler, Obj

from .conftest import NodeHistory
from .harness import wait_for_objects
from .pools import (
    WORKLOAD_NAMESPACE,
    create_node_group,
    create_pods,
    provider_target_size,
    running,
)

# The build comes first, so a missing binary fails the test before a system is started.
pytestmark = [pytest.mark.autoscaler, pytest.mark.usefixtures("autoscaler_binary")]

WAIT = 240.0
"""Bound on one autoscaler round trip (scan, provision, register, schedule); a safety net."""


class MarkedMachines:
    """providerIDs of Machines the autoscaler annotated for deletion (from the informer)."""

    def __init__(self) -> None:
        self.provider_ids: set[str] = set()

    def seen(self, machine: Obj) -> None:
        annotations = machine["metadata"].get("annotations") or {}
        pid = (machine.get("spec") or {}).get("providerID")
        if c.DELETE_MACHINE_ANNOTATION in annotations and pid:
            self.provider_ids.add(str(pid))


async def pool_story(system: Any) -> str:
    """What the pool engine said it did (its create and delete Events), for a failure message."""
    events = await system.client.list(CORE_EVENTS, system.namespace)
    said = [
        f"{e.get('reason')}: {e.get('message')}"
        for e in events.items
        if e.get("reason") in ("SuccessfulCreate", "SuccessfulDelete", "FailedCreate")
    ]
    return "\n".join(["the pool's Events:", *said])


async def test_scales_up_for_pending_pods_and_removes_the_nodes_it_marks(
    system: Any,
    scheduler: list[Process],
    cluster_autoscaler: Process,
    node_history: NodeHistory,
) -> None:
    procs = [*scheduler, cluster_autoscaler]
    pool = "workers"
    await create_node_group(system, pool, replicas=1, min_size=1, max_size=5)
    await system.until(lambda: system.pool_running(pool, 1), "the pool running 1 Node")
    marked = MarkedMachines()
    system.watched["machines"].add_handler(
        FuncHandler(marked.seen, lambda _old, new: marked.seen(new), None)
    )

    # Four Pods that each need a Node of their own: three wait for the autoscaler.
    names = [f"web-{i}" for i in range(4)]
    await create_pods(system.workload_client, names)
    pods = await wait_for_objects(
        system.workload_client,
        PODS,
        WORKLOAD_NAMESPACE,
        lambda pods: all(n in pods and running(pods[n]) for n in names),
        "the autoscaler to add Nodes for every Pod",
        timeout=WAIT,
        procs=procs,
    )
    assert len({pods[n]["spec"]["nodeName"] for n in names}) == 4
    await system.until(lambda: system.pool_running(pool, 4), "the pool running 4 Nodes", WAIT)
    assert await provider_target_size(system, pool) == 4
    before = {n["metadata"]["name"]: n["spec"]["providerID"] for n in system.nodes.list()}

    # Without the Pods the extra Nodes are unneeded: the autoscaler marks their Machines and
    # lowers the size; the pool engine removes exactly those, draining each first.
    for name in names:
        await system.workload_client.delete(PODS, name, WORKLOAD_NAMESPACE)
    await system.until(
        lambda: system.pool_running(pool, 1) and len(system.nodes.list()) == 1,
        "the autoscaler to scale the pool back to its minimum",
        WAIT,
    )
    removed = set(before) - {n["metadata"]["name"] for n in system.nodes.list()}
    assert len(removed) == 3, await pool_story(system)
    assert {before[name] for name in removed} == marked.provider_ids, await pool_story(system)
    assert node_history.deleted == removed
    assert node_history.cordoned_before_delete == removed
    assert await provider_target_size(system, pool) == 1


async def test_scales_a_pool_up_from_zero_with_capacity_annotations(
    system: Any, scheduler: list[Process], cluster_autoscaler: Process
) -> None:
    procs = [*scheduler, cluster_autoscaler]
    pool = "zero"
    capacity = {"cpu": "4", "memory": "16Gi", "maxPods": "110"}
    await create_node_group(system, pool, replicas=0, min_size=0, max_size=2, capacity=capacity)

    await create_pods(system.workload_client, ["batch-0"])
    pods = await wait_for_objects(
        system.workload_client,
        PODS,
        WORKLOAD_NAMESPACE,
        lambda pods: "batch-0" in pods and running(pods["batch-0"]),
        "the autoscaler to scale the empty pool up for the Pod",
        timeout=WAIT,
        procs=procs,
    )
    await system.until(lambda: system.pool_running(pool, 1), "the pool running 1 Node", WAIT)
    assert await provider_target_size(system, pool) == 1
    (node,) = system.nodes.list()
    assert pods["batch-0"]["spec"]["nodeName"] == node["metadata"]["name"]
