"""The generated CRDs install on a real apiserver and serve MachinePools."""

from __future__ import annotations

from machinepool.runtime.client import Client


async def test_generated_crds_are_established(crds: list[str], client: Client) -> None:
    assert "machinepools.cluster.x-k8s.io" in crds
    mp = await client.resource("cluster.x-k8s.io/v1beta2", "MachinePool")
    assert mp.plural == "machinepools"
    assert mp.namespaced
