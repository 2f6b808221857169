"""Node groups, workloads and the clusterapi provider's calls, for the autoscaler scenarios.

A node group is a MachinePool (with its KubeadmConfig and SimMachinePool) carrying the
autoscaler's min/max annotations and, for scale from zero, capacity annotations. Workloads are
plain Pods in the workload cluster's ``default`` namespace whose CPU requests decide how many
Nodes they need (a simulated Node offers 4 CPUs).

``provider_*`` functions make the same API calls, in the same order, as cluster-autoscaler's
clusterapi provider does for a MachinePool node group (read from kubernetes/autoscaler,
cloudprovider/clusterapi): read and set the size through the scale subresource with a merge
patch, find a Node's Machine by ``spec.providerID``, and delete a given Node by annotating its
Machine ``cluster.x-k8s.io/delete-machine`` (a full update) and then lowering replicas by one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from tests.support.builders import pool_objects
from tests.support.resources import MACHINE_POOLS, MACHINES

from machinepool.api import constants as c
from machinepool.runtime import (
    PODS,
    SERVICE_ACCOUNTS,
    Client,
    Conflict,
    Informer,
    Obj,
)

from .harness import node_group_annotations, wait_for_objects

WEBHOOK_LABEL = "machinepool.test/autoscaler-e2e"
"""MachinePools with this label (value ``true``) go through the tests' own webhook server."""
NODE_CPU = 4
"""CPUs a simulated Node offers; a Pod requesting 3 needs a Node of its own."""
POD_CPU = "3"
CONFLICT_RETRIES = 10
WORKLOAD_NAMESPACE = "default"


class SystemLike(Protocol):
    """What these helpers need from the e2e ``system`` fixture."""

    client: Client
    namespace: str
    cluster: str
    watched: dict[str, Informer]


async def create_node_group(
    system: SystemLike,
    name: str,
    *,
    replicas: int | None,
    min_size: int,
    max_size: int,
    capacity: Mapping[str, str] | None = None,
    instance_type: str = "sim.small",
) -> Obj:
    """KubeadmConfig + SimMachinePool + a MachinePool that is an autoscaler node group.

    ``replicas=None`` leaves spec.replicas unset so admission defaults it. Returns the
    MachinePool as the API server stored it.
    """
    ns = system.namespace
    (config_res, config), (infra_res, infra), (pool_res, pool) = pool_objects(
        ns,
        name,
        sim_spec={"template": {"instanceType": instance_type, "image": "sim"}},
        replicas=replicas,
        cluster=system.cluster,
        labels={WEBHOOK_LABEL: "true"},
        annotations=node_group_annotations(min_size, max_size, capacity),
    )
    await system.client.create(config_res, config, ns)
    await system.client.create(infra_res, infra, ns)
    return await system.client.create(pool_res, pool, ns)


def pod(name: str, cpu: str = POD_CPU) -> Obj:
    """A bare Pod requesting ``cpu``; the node simulator runs it once it is bound."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "autoscaler-e2e"}},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/pause:3.10",
                    "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
                }
            ],
        },
    }


async def create_pods(workload: Client, names: list[str], cpu: str = POD_CPU) -> None:
    # Admission refuses Pods until the namespace's default ServiceAccount exists.
    await wait_for_objects(
        workload,
        SERVICE_ACCOUNTS,
        WORKLOAD_NAMESPACE,
        lambda accounts: "default" in accounts,
        "the default ServiceAccount",
    )
    for name in names:
        await workload.create(PODS, pod(name, cpu), WORKLOAD_NAMESPACE)


def running(p: Obj) -> bool:
    return bool((p.get("status") or {}).get("phase") == "Running" and p["spec"].get("nodeName"))


def unschedulable(p: Obj) -> bool:
    return any(
        cond.get("type") == "PodScheduled"
        and cond.get("status") == "False"
        and cond.get("reason") == "Unschedulable"
        for cond in (p.get("status") or {}).get("conditions") or []
    )


def machines_by_provider_id(system: SystemLike) -> dict[str, list[Obj]]:
    """The provider's Machine index: Machines of the namespace keyed by spec.providerID."""
    index: dict[str, list[Obj]] = {}
    for machine in system.watched["machines"].list(system.namespace):
        pid = (machine.get("spec") or {}).get("providerID")
        if pid:
            index.setdefault(str(pid), []).append(machine)
    return index


def pools_by_provider_id(system: SystemLike) -> dict[str, list[str]]:
    """The provider's MachinePool index: MachinePool names keyed by spec.providerIDList."""
    index: dict[str, list[str]] = {}
    for mp in system.watched["machinepools"].list(system.namespace):
        for pid in (mp.get("spec") or {}).get("providerIDList") or []:
            index.setdefault(str(pid), []).append(mp["metadata"]["name"])
    return index


async def provider_target_size(system: SystemLike, pool: str) -> int:
    scale = await system.client.get_scale(MACHINE_POOLS, pool, system.namespace)
    return int((scale.get("spec") or {}).get("replicas", 0))


async def provider_set_size(system: SystemLike, pool: str, replicas: int) -> None:
    """SetSize: a merge patch of spec.replicas on the scale subresource."""
    await system.client.set_scale(MACHINE_POOLS, pool, system.namespace, replicas)


async def provider_delete_node(system: SystemLike, pool: str, provider_id: str) -> str:
    """DeleteNodes for one Node: mark its Machine, then lower the size by one.

    Returns the Machine's name. Fails as the provider does when the Node has no Machine.
    """
    found = machines_by_provider_id(system).get(provider_id, [])
    assert len(found) == 1, f"expected one Machine with providerID {provider_id}, got {found}"
    name = str(found[0]["metadata"]["name"])
    # The provider re-reads the Machine and sends it back whole with the annotation added. A
    # conflict fails that DeleteNodes call and the autoscaler repeats it on its next scan.
    for _ in range(CONFLICT_RETRIES):
        machine = await system.client.get(MACHINES, name, system.namespace)
        annotations = machine["metadata"].setdefault("annotations", {})
        annotations[c.DELETE_MACHINE_ANNOTATION] = "2026-01-01 00:00:00 +0000 UTC"
        try:
            await system.client.replace(MACHINES, machine)
            break
        except Conflict:
            continue
    else:
        raise AssertionError(
            f"Machine {name} changed under every one of {CONFLICT_RETRIES} updates"
        )
    replicas = await provider_target_size(system, pool)
    await provider_set_size(system, pool, replicas - 1)
    return name
