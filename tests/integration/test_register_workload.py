"""A local workload cluster registers as a Cluster API Cluster with its kubeconfig Secret and
an externally managed control plane of its own (``LocalControlPlane``)."""

from __future__ import annotations

import base64

import yaml
from tests.support.resources import CLUSTERS

from machinepool.controlplane import WorkloadCluster
from machinepool.controlplane.register import (
    LOCAL_CONTROL_PLANES,
    cluster_object,
    register_workload_cluster,
)
from machinepool.runtime.kube.client import NODES, SECRETS, Client


async def test_registered_cluster_is_initialized_and_its_kubeconfig_works(
    client: Client, crds: list[str], namespace: str, workload: WorkloadCluster
) -> None:
    await register_workload_cluster(client, "demo", namespace, workload)
    again = await register_workload_cluster(client, "demo", namespace, workload)
    conds = {c["type"]: c["status"] for c in again["status"]["conditions"]}
    assert conds["ControlPlaneInitialized"] == "True"
    cluster = await client.get(CLUSTERS, "demo", namespace)
    assert cluster["spec"]["controlPlaneEndpoint"]["port"] == workload.port

    secret = await client.get(SECRETS, "demo-kubeconfig", namespace)
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["value"]))
    async with await Client.from_kubeconfig_dict(kubeconfig) as wc:
        assert isinstance((await wc.list(NODES)).items, list)


async def test_its_control_plane_is_externally_managed_and_goes_with_the_cluster(
    client: Client, crds: list[str], namespace: str, workload: WorkloadCluster
) -> None:
    """Cluster API drains a deleted Machine's Node only in a Cluster with an externally
    managed control plane or a control-plane Machine: the environment's Cluster names the
    former, also when the Cluster was made before (from a flavor that names none)."""
    await client.create(CLUSTERS, cluster_object("flavored", namespace, workload), namespace)
    await register_workload_cluster(client, "flavored", namespace, workload)

    cluster = await client.get(CLUSTERS, "flavored", namespace)
    ref = cluster["spec"]["controlPlaneRef"]
    assert (ref["apiGroup"], ref["kind"]) == (LOCAL_CONTROL_PLANES.group, "LocalControlPlane")
    control_plane = await client.get(LOCAL_CONTROL_PLANES, ref["name"], namespace)
    assert control_plane["status"]["externalManagedControlPlane"] is True
    assert control_plane["status"]["initialization"]["controlPlaneInitialized"] is True
    assert control_plane["spec"]["controlPlaneEndpoint"]["port"] == workload.port
    (owner,) = control_plane["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("Cluster", cluster["metadata"]["uid"])
