"""What cluster-autoscaler's clusterapi provider relies on, exercised against the whole system.

The provider's own calls (``pools.provider_*``: size through the scale subresource, Machine by
providerID, delete-machine annotation then replicas minus one) are replayed against the running
controllers, the sim provider and the node simulator, with a real kube-scheduler binding Pods.
Each scenario checks what the real autoscaler would observe and need: node group sizes defaulted
by admission, Pods that a new Node lets the scheduler place, a Machine for every providerID in
the pool's list, exactly the marked Nodes removed after a drain, and Nodes from an empty group
that match the capacity annotations the autoscaler plans scale-from-zero with.

The same scenarios driven by the real cluster-autoscaler binary are in
``test_cluster_autoscaler.py``.
"""

from __future__ import annotations

from typing import Any

from tests.support.resources import SIM_MACHINE_POOLS

from machinepool.controlplane.process import Process
from machinepool.runtime import PODS, Obj
from machinepool.webhooks import WebhookServer

from .conftest import NodeHistory
from .harness import wait_for_objects
from .pools import (
    WORKLOAD_NAMESPACE,
    create_node_group,
    create_pods,
    machines_by_provider_id,
    pools_by_provider_id,
    provider_delete_node,
    provider_set_size,
    provider_target_size,
    running,
    unschedulable,
)


def _quantity(text: str) -> float:
    """A Kubernetes quantity as a number (the suffixes these tests use)."""
    suffixes = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 1e3, "M": 1e6, "G": 1e9}
    for suffix in sorted(suffixes, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * suffixes[suffix]
    return float(text)


def _node_of(pods: dict[str, Obj], name: str) -> str:
    return str(pods[name]["spec"]["nodeName"])


async def test_scale_up_by_size_then_delete_the_chosen_nodes(
    system: Any,
    scheduler: list[Process],
    node_group_webhooks: WebhookServer,
    node_history: NodeHistory,
) -> None:
    pool = "workers"
    created = await create_node_group(system, pool, replicas=None, min_size=1, max_size=3)
    # Admission defaults an unset size to the node group's minimum.
    assert created["spec"]["replicas"] == 1
    assert await provider_target_size(system, pool) == 1
    await system.until(lambda: system.pool_running(pool, 1), "the pool running 1 Node")

    # Three Pods that each need a Node of their own: one fits, two are left Unschedulable,
    # which is what makes the autoscaler grow the group.
    names = ["web-0", "web-1", "web-2"]
    await create_pods(system.workload_client, names)
    await wait_for_objects(
        system.workload_client,
        PODS,
        WORKLOAD_NAMESPACE,
        lambda pods: (
            sum(running(pods[n]) for n in names if n in pods) == 1
            and sum(unschedulable(pods[n]) for n in names if n in pods) == 2
        ),
        "one Pod running and two Unschedulable",
        procs=scheduler,
    )

    await provider_set_size(system, pool, 3)
    await system.until(lambda: system.pool_running(pool, 3), "the pool running 3 Nodes")
    pods = await wait_for_objects(
        system.workload_client,
        PODS,
        WORKLOAD_NAMESPACE,
        lambda pods: all(n in pods and running(pods[n]) for n in names),
        "every Pod running",
        procs=scheduler,
    )
    assert len({_node_of(pods, n) for n in names}) == 3

    # The provider's indexes: each providerID of the pool names one MachinePool and one Machine.
    mp = system.machine_pool(pool)
    provider_ids = mp["spec"]["providerIDList"]
    assert len(provider_ids) == 3
    await system.until(
        lambda: all(len(machines_by_provider_id(system).get(p, [])) == 1 for p in provider_ids),
        "a Machine carrying each providerID",
    )
    assert all(pools_by_provider_id(system)[p] == [pool] for p in provider_ids)
    nodes = {n["spec"]["providerID"]: n["metadata"]["name"] for n in system.nodes.list()}
    assert sorted(nodes) == sorted(provider_ids)

    # Scale down by naming Nodes: one emptied first (as the autoscaler prefers), one still
    # running a Pod, which the Machine deletion must drain.
    empty_node, busy_node = _node_of(pods, "web-1"), _node_of(pods, "web-2")
    keeper = _node_of(pods, "web-0")
    await system.workload_client.delete(PODS, "web-1", WORKLOAD_NAMESPACE)
    by_name = {name: pid for pid, name in nodes.items()}
    marked = [
        await provider_delete_node(system, pool, by_name[empty_node]),
        await provider_delete_node(system, pool, by_name[busy_node]),
    ]
    assert await provider_target_size(system, pool) == 1

    # A Machine goes after its Node (its finalizer deletes the Node first), so wait for both.
    await system.until(
        lambda: (
            system.pool_running(pool, 1)
            and {n["metadata"]["name"] for n in system.nodes.list()} == {keeper}
            and {m["metadata"]["name"] for m in system.machines(pool)}.isdisjoint(marked)
        ),
        "only the unmarked Node and its Machine left",
    )
    assert node_history.deleted == {empty_node, busy_node}
    assert node_history.cordoned_before_delete == {empty_node, busy_node}
    assert len(system.machines(pool)) == 1
    pods = await wait_for_objects(
        system.workload_client,
        PODS,
        WORKLOAD_NAMESPACE,
        lambda pods: "web-2" not in pods and "web-0" in pods,
        "the drained Pod evicted",
    )
    assert running(pods["web-0"])
    assert _node_of(pods, "web-0") == keeper


async def test_scale_from_zero_nodes_match_the_capacity_the_pool_reports(
    system: Any, scheduler: list[Process], node_group_webhooks: WebhookServer
) -> None:
    """With no capacity annotations the autoscaler plans a scale from zero with the infra
    pool's status.capacity; the Node it then gets must offer exactly that, or it would keep
    adding Nodes the Pods do not fit on. A large type, so the default cannot pass for it."""
    pool = "zero"
    await create_node_group(
        system, pool, replicas=0, min_size=0, max_size=2, instance_type="sim.large"
    )
    infra = await wait_for_objects(
        system.client,
        SIM_MACHINE_POOLS,
        system.namespace,
        lambda pools: bool(((pools.get(pool) or {}).get("status") or {}).get("capacity")),
        "the infra pool's status.capacity",
    )
    capacity = infra[pool]["status"]["capacity"]
    assert _quantity(capacity["cpu"]) == 16

    await create_pods(system.workload_client, ["batch-0"], cpu="12")
    await wait_for_objects(
        system.workload_client,
        PODS,
        WORKLOAD_NAMESPACE,
        lambda pods: "batch-0" in pods and unschedulable(pods["batch-0"]),
        "the Pod Unschedulable with no Nodes",
        procs=scheduler,
    )

    await provider_set_size(system, pool, 1)
    await system.until(lambda: system.pool_running(pool, 1), "the pool running 1 Node")
    pods = await wait_for_objects(
        system.workload_client,
        PODS,
        WORKLOAD_NAMESPACE,
        lambda pods: running(pods["batch-0"]),
        "the 12-CPU Pod running on the new Node",
        procs=scheduler,
    )
    (node,) = system.nodes.list()
    assert pods["batch-0"]["spec"]["nodeName"] == node["metadata"]["name"]
    assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "sim.large"
    for key in ("cpu", "memory", "pods", "ephemeral-storage"):
        assert _quantity(node["status"]["capacity"][key]) == _quantity(capacity[key]), key
