"""End to end: MachinePool + KubeadmConfig + SimMachinePool on a real workload cluster."""

from __future__ import annotations

import base64
from collections import Counter

from tests.e2e.conftest import System
from tests.support.resources import MACHINE_POOLS

from machinepool.runtime import SECRETS


async def test_pool_runs_three_ready_nodes_with_node_refs(system: System) -> None:
    await system.create_pool("workers", 3)
    await system.until(lambda: system.pool_running("workers", 3), "3 Ready nodes, Running")
    mp = system.machine_pool("workers")
    assert mp is not None
    node_names = {n["metadata"]["name"] for n in system.ready_nodes()}
    assert {r["name"] for r in mp["status"]["nodeRefs"]} == node_names
    provider_ids = sorted(n["spec"]["providerID"] for n in system.ready_nodes())
    assert mp["spec"]["providerIDList"] == provider_ids
    zones = Counter(
        n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in system.ready_nodes()
    )
    assert sorted(zones.values()) == [1, 1, 1]


async def test_scale_up_down_to_zero_and_back(system: System) -> None:
    await system.create_pool("workers", 3)
    await system.until(lambda: system.pool_running("workers", 3), "3 Ready nodes")
    for replicas in (10, 0, 2):
        await system.scale("workers", replicas)
        await system.until(
            lambda r=replicas: system.pool_running("workers", r) and len(system.nodes.list()) == r,
            f"{replicas} Ready nodes",
        )
    mp = await system.client.get(MACHINE_POOLS, "workers", system.namespace)
    assert mp["status"]["replicas"] == 2


async def test_an_idle_pool_rewrites_nothing(system: System) -> None:
    """Once converged, no controller keeps rewriting Machines or the MachinePool."""
    await system.create_pool("quiet", 2)
    await system.until(lambda: system.pool_running("quiet", 2), "2 Ready nodes")

    def versions() -> dict[str, str]:
        objs = [*system.machines("quiet"), system.machine_pool("quiet") or {}]
        return {o["metadata"]["name"] + o["kind"]: o["metadata"]["resourceVersion"] for o in objs}

    # Convergence ends with a few status writes; a controller that rewrites what it reads
    # (a timestamp, a reordered list) feeds its own watch and never gets this far.
    await system.settled(versions, "Machines and MachinePool resourceVersions", quiet=2.0)
    await system.unchanged(versions, "an idle pool's objects were rewritten", window=5.0)


async def test_a_new_bootstrap_token_reaches_new_instances_and_replaces_none(
    system: System,
) -> None:
    """A rotated token rewrites the bootstrap data Secret; running instances are not outdated
    by it (it is no part of the template hash), only instances created afterwards use it."""
    await system.create_pool("tokens", 2)
    await system.until(lambda: system.pool_running("tokens", 2), "2 Ready nodes")
    old = {m["metadata"]["name"] for m in system.machines("tokens")}
    old_versions = {
        r.bootstrap_version for r in await system.cloud.instances(system.namespace, "tokens")
    }
    mp = system.machine_pool("tokens")
    assert mp is not None
    data_secret = mp["spec"]["template"]["spec"]["bootstrap"]["dataSecretName"]
    secret = await system.client.get(SECRETS, data_secret, system.namespace)
    payload = base64.b64decode(secret["data"]["value"]) + b"\n# rotated token\n"
    await system.client.patch(
        SECRETS,
        data_secret,
        {"data": {"value": base64.b64encode(payload).decode()}},
        system.namespace,
    )

    await system.scale("tokens", 3)
    await system.until(lambda: system.pool_running("tokens", 3), "3 Ready nodes")

    def names() -> set[str]:
        return {m["metadata"]["name"] for m in system.machines("tokens")}

    assert old <= names(), "instances created before the rotation were replaced"
    await system.unchanged(names, "the pool's Machines after the scale-up", window=5.0)
    records = {r.id: r for r in await system.cloud.instances(system.namespace, "tokens")}
    assert old <= records.keys()
    (new,) = records.keys() - old
    assert records[new].bootstrap_version not in old_versions
