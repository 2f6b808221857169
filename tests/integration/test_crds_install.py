"""The generated CRDs install on a real apiserver and serve MachinePools."""

from __future__ import annotations

from machinepool.runtime import Client, contract_resource


async def test_generated_crds_are_established(crds: list[str], client: Client) -> None:
    assert "machinepools.cluster.x-k8s.io" in crds
    mp = await client.resource("cluster.x-k8s.io/v1beta2", "MachinePool")
    assert mp.plural == "machinepools"
    assert mp.namespaced


async def test_contract_resource_resolves_the_labelled_version(
    crds: list[str], client: Client
) -> None:
    preferred = await client.resource("cluster.x-k8s.io/", "MachinePool")
    assert preferred.version == "v1beta2"
    kubeadm = await contract_resource(client, "bootstrap.cluster.x-k8s.io", "KubeadmConfig")
    assert (kubeadm.version, kubeadm.plural) == ("v1beta2", "kubeadmconfigs")


async def test_core_kinds_resolve_by_discovery(client: Client) -> None:
    nodes = await client.resource("v1", "Node")
    assert (nodes.group, nodes.version, nodes.plural, nodes.namespaced) == (
        "",
        "v1",
        "nodes",
        False,
    )
