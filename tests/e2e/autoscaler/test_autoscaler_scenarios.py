"""What a user of cluster-autoscaler meets beyond plain scale up and down, with the real binary.

- A pool at its max size stays there while Pods pend, and the autoscaler says why on the Pod
  (``NotTriggerScaleUp`` ... ``max node group size reached``).
- Scale-down leaves a Node whose Pod a PodDisruptionBudget protects, and a Node annotated
  ``cluster-autoscaler.kubernetes.io/scale-down-disabled``, and removes only the other one.
- Of two empty pools with different capacity annotations, the autoscaler scales the one whose
  declared Node fits the Pod, and leaves the other at zero.

"Stays" and "leaves" are checked over a window of the autoscaler's own main loops, counted
from its metrics (``harness.loops_pass``), while an informer records every size a pool had.
"""

from __future__ import annotations

from typing import Any

import pytest

from machinepool.controlplane.process import Process
from machinepool.runtime import CORE_EVENTS, NODES, PDBS, PODS, FuncHandler, Obj

from .conftest import NodeHistory
from .harness import loops_pass, wait_for_objects
from .pools import (
    WORKLOAD_NAMESPACE,
    create_node_group,
    create_pods,
    pod,
    provider_target_size,
    running,
)

pytestmark = [pytest.mark.autoscaler, pytest.mark.usefixtures("autoscaler_binary")]

WAIT = 240.0
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
WINDOW = 5
"""Main loops the autoscaler gets to change its mind: each loop is at least one 2 s scan, so
the window spans more than the 5 s unneeded time, and every loop reconsiders pending Pods."""


class Sizes:
    """Every spec.replicas each MachinePool had, from the informer."""

    def __init__(self, system: Any) -> None:
        self.seen: dict[str, set[int]] = {}
        system.watched["machinepools"].add_handler(
            FuncHandler(self._note, lambda _old, new: self._note(new), None)
        )

    def _note(self, mp: Obj) -> None:
        replicas = (mp.get("spec") or {}).get("replicas")
        if replicas is not None:
            self.seen.setdefault(mp["metadata"]["name"], set()).add(int(replicas))


async def test_a_pool_at_max_size_stays_there_and_the_autoscaler_says_why(
    system: Any, scheduler: list[Process], cluster_autoscaler: Process
) -> None:
    procs = [*scheduler, cluster_autoscaler]
    pool = "capped"
    sizes = Sizes(system)
    await create_node_group(system, pool, replicas=1, min_size=1, max_size=2)
    await system.until(lambda: system.pool_running(pool, 1), "the pool running 1 Node")

    # Three Pods that each need a Node of their own; the pool may grow to two Nodes only.
    names = ["job-0", "job-1", "job-2"]
    await create_pods(system.workload_client, names)
    await system.until(lambda: system.pool_running(pool, 2), "the pool at its max, 2", WAIT)
    pods = await wait_for_objects(
        system.workload_client,
        PODS,
        WORKLOAD_NAMESPACE,
        lambda pods: sum(running(pods[n]) for n in names if n in pods) == 2,
        "two Pods running on the two Nodes",
        timeout=WAIT,
        procs=procs,
    )
    (pending,) = [n for n in names if not running(pods[n])]

    def told(events: dict[str, Obj]) -> bool:
        return any(
            e["reason"] == "NotTriggerScaleUp"
            and e["involvedObject"]["name"] == pending
            and "max node group size reached" in e.get("message", "")
            for e in events.values()
        )

    await wait_for_objects(
        system.workload_client,
        CORE_EVENTS,
        WORKLOAD_NAMESPACE,
        told,
        f"the autoscaler to say why {pending} does not get a Node",
        timeout=WAIT,
        procs=procs,
    )
    await loops_pass(cluster_autoscaler, WINDOW)
    assert max(sizes.seen[pool]) == 2
    assert await provider_target_size(system, pool) == 2
    assert len(system.nodes.list()) == 2
    still = await system.workload_client.get(PODS, pending, WORKLOAD_NAMESPACE)
    assert not running(still)


async def test_scale_down_honours_a_pdb_and_scale_down_disabled(
    system: Any,
    scheduler: list[Process],
    cluster_autoscaler: Process,
    node_history: NodeHistory,
) -> None:
    procs = [*scheduler, cluster_autoscaler]
    pool = "guarded"
    await create_node_group(system, pool, replicas=3, min_size=1, max_size=3)
    await system.until(lambda: system.pool_running(pool, 3), "the pool running 3 Nodes", WAIT)
    # Empty Nodes are unneeded at once: hold scale-down off on all of them (well within the
    # 5 s unneeded time) until the scene is set, then lift it where the test means it.
    nodes = [n["metadata"]["name"] for n in system.nodes.list()]
    for name in nodes:
        await _scale_down_disabled(system, name, True)

    # A Pod the autoscaler could move (safe-to-evict), but whose PDB allows no disruption.
    guarded = pod("guarded")
    guarded["metadata"]["labels"] = {"app": "guarded"}
    guarded["metadata"]["annotations"] = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}
    await create_pods(system.workload_client, [])
    await system.workload_client.create(PODS, guarded, WORKLOAD_NAMESPACE)
    await system.workload_client.create(
        PDBS,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guarded"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
        WORKLOAD_NAMESPACE,
    )
    pods = await wait_for_objects(
        system.workload_client,
        PODS,
        WORKLOAD_NAMESPACE,
        lambda pods: "guarded" in pods and running(pods["guarded"]),
        "the guarded Pod running",
        timeout=WAIT,
        procs=procs,
    )
    protected_by_pdb = pods["guarded"]["spec"]["nodeName"]
    others = sorted(nodes)
    others.remove(protected_by_pdb)
    disabled, free = others
    await _scale_down_disabled(system, free, False)
    await _scale_down_disabled(system, protected_by_pdb, False)

    await system.until(
        lambda: free not in {n["metadata"]["name"] for n in system.nodes.list()},
        f"the autoscaler to remove the unprotected Node {free}",
        WAIT,
    )
    await loops_pass(cluster_autoscaler, WINDOW)
    assert node_history.deleted == {free}
    assert node_history.cordoned <= {free}
    assert {n["metadata"]["name"] for n in system.nodes.list()} == {protected_by_pdb, disabled}
    assert await provider_target_size(system, pool) == 2
    still = await system.workload_client.get(PODS, "guarded", WORKLOAD_NAMESPACE)
    assert running(still)


async def _scale_down_disabled(system: Any, node: str, disabled: bool) -> None:
    value = "true" if disabled else None
    patch = {"metadata": {"annotations": {SCALE_DOWN_DISABLED: value}}}
    await system.workload_client.patch(NODES, node, patch)


async def test_of_two_empty_pools_the_one_whose_nodes_fit_is_scaled(
    system: Any, scheduler: list[Process], cluster_autoscaler: Process
) -> None:
    procs = [*scheduler, cluster_autoscaler]
    sizes = Sizes(system)
    # The autoscaler plans with the declared shape: 2 CPUs cannot hold a 3-CPU Pod, 4 can.
    await create_node_group(
        system,
        "small",
        replicas=0,
        min_size=0,
        max_size=2,
        capacity={"cpu": "2", "memory": "8Gi", "maxPods": "110"},
    )
    await create_node_group(
        system,
        "fits",
        replicas=0,
        min_size=0,
        max_size=2,
        capacity={"cpu": "4", "memory": "16Gi", "maxPods": "110"},
    )
    await create_pods(system.workload_client, ["batch-0"])
    pods = await wait_for_objects(
        system.workload_client,
        PODS,
        WORKLOAD_NAMESPACE,
        lambda pods: "batch-0" in pods and running(pods["batch-0"]),
        "the autoscaler to scale a pool up for the Pod",
        timeout=WAIT,
        procs=procs,
    )
    await system.until(lambda: system.pool_running("fits", 1), "pool fits running 1 Node", WAIT)
    await loops_pass(cluster_autoscaler, WINDOW)
    assert sizes.seen.get("small", {0}) == {0}
    assert await provider_target_size(system, "small") == 0
    assert await provider_target_size(system, "fits") == 1
    (node,) = system.nodes.list()
    assert pods["batch-0"]["spec"]["nodeName"] == node["metadata"]["name"]
    (fits,) = [m for m in system.machines("fits")]
    assert fits["status"]["nodeRef"]["name"] == node["metadata"]["name"]
