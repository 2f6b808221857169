"""The source side of ``clusterctl move``, step by step, with our controllers left to let go.

clusterctl pauses the Cluster, then, for each object of the moved Cluster (leaves first),
adds ``clusterctl.cluster.x-k8s.io/delete-for-move``, deletes it and removes its finalizers.
Here the infra side's finalizers are left to the controllers that hold them (the pool engine
and its infra machine controller act on a paused Cluster's deleted objects too), so each of
those objects goes only once its controller let go of it, and none may drain, cordon or
delete a Node, or terminate an instance, on the way (the pool lives on in the target
cluster). Core honours the pause (its MachinePool and Machine controllers do nothing, as
upstream's), so the MachinePool's and the Machines' finalizers go as clusterctl removes them.
The whole move with the real binary is in tests/e2e/clients/test_clusterctl.py; this one needs
no second management cluster.
"""

from __future__ import annotations

from tests.e2e.conftest import System
from tests.support.resources import (
    CLUSTERS,
    KUBEADM_CONFIGS,
    MACHINE_POOLS,
    MACHINES,
    SIM_MACHINE_POOLS,
    SIM_MACHINES,
)

from machinepool.api import constants as c
from machinepool.runtime import NODES, SECRETS, FuncHandler, Obj, Resource

INSTANCES = "sim.infrastructure.cluster.x-k8s.io/instance=true"


async def test_objects_deleted_for_a_move_keep_their_instances_and_nodes(
    system: System,
) -> None:
    for name, resource in (
        ("kubeadmconfigs", KUBEADM_CONFIGS),
        ("simmachinepools", SIM_MACHINE_POOLS),
    ):
        await system.watch(name, await system.manager.cache.get_informer(resource))
    await system.create_pool("moving", 2)
    await system.until(lambda: system.pool_running("moving", 2), "2 Ready nodes")
    cordoned: set[str] = set()
    deleted: set[str] = set()

    def seen(node: Obj) -> None:
        if (node.get("spec") or {}).get("unschedulable"):
            cordoned.add(node["metadata"]["name"])

    system.nodes.add_handler(
        FuncHandler(seen, lambda _old, new: seen(new), lambda n: deleted.add(n["metadata"]["name"]))
    )
    nodes = {n["metadata"]["name"]: n["metadata"]["uid"] for n in system.nodes.list()}
    ns = system.namespace
    await system.client.patch(CLUSTERS, system.cluster, {"spec": {"paused": True}}, ns)

    records = (await system.client.list(SECRETS, ns, label_selector=INSTANCES)).items
    # Leaves first, as clusterctl goes; infra machines before the instance records, which
    # clusterctl's order allows, so their controller meets instances that still exist.
    order: list[tuple[Resource, list[str]]] = [
        (SIM_MACHINES, [m["metadata"]["name"] for m in system.watched["simmachines"].list(ns)]),
        (SECRETS, [r["metadata"]["name"] for r in records]),
        (MACHINES, [m["metadata"]["name"] for m in system.machines("moving")]),
        (KUBEADM_CONFIGS, ["moving"]),
        (SIM_MACHINE_POOLS, ["moving"]),
        (MACHINE_POOLS, ["moving"]),
    ]
    for resource, names in order:
        for name in names:
            marked = {"metadata": {"annotations": {c.DELETE_FOR_MOVE_ANNOTATION: ""}}}
            await system.client.patch(resource, name, marked, ns)
            await system.client.delete(resource, name, ns)
            if resource in (MACHINES, MACHINE_POOLS):
                # Core honours the pause (as upstream's does), so clusterctl's own finalizer
                # removal is what lets the MachinePool and its Machines go.
                await system.client.patch(resource, name, {"metadata": {"finalizers": None}}, ns)
        for name in names:
            await system.until(
                lambda r=resource, n=name: _gone(system, r, n),
                f"{resource.kind} {name} let go by its controller",
            )

    # Every object went, and with them nothing of the pool.
    assert deleted == set()
    assert cordoned == set()
    assert {n["metadata"]["name"]: n["metadata"]["uid"] for n in system.nodes.list()} == nodes
    listed = await system.workload_client.list(NODES)
    assert {n["metadata"]["name"] for n in listed.items} == set(nodes)


def _gone(system: System, resource: Resource, name: str) -> bool:
    informers = {
        SECRETS.plural: "secrets",
        SIM_MACHINES.plural: "simmachines",
        MACHINES.plural: "machines",
        SIM_MACHINE_POOLS.plural: "simmachinepools",
        MACHINE_POOLS.plural: "machinepools",
        KUBEADM_CONFIGS.plural: "kubeadmconfigs",
    }
    informer = system.watched.get(informers[resource.plural])
    assert informer is not None, f"the system does not watch {resource.plural}"
    return informer.get(name, system.namespace) is None
