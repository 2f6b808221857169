"""A local workload cluster registers as a Cluster API Cluster with its kubeconfig Secret."""

from __future__ import annotations

import base64

import yaml
from tests.support.resources import CLUSTERS

from machinepool.controlplane import WorkloadCluster
from machinepool.controlplane.register import register_workload_cluster
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
