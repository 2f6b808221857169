"""Events on a pool's config or infra pool wake only MachinePools this manager holds: a
sharded or filtered manager that reads configs and infra pools unfiltered must not queue
reconciles for pools in another manager's cache."""

from __future__ import annotations

from tests.support.resources import MACHINE_POOLS
from tests.unit.test_pool_indexes import ListOnly

from machinepool.controllers.machinepool.watches import POOL_INDEXERS, referenced_to_pool
from machinepool.runtime import Informer, Obj, ObjectKey

INFRA_REF = {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachinePool"}


def pool(name: str) -> Obj:
    spec = {
        "clusterName": "c",
        "template": {"spec": {"infrastructureRef": {**INFRA_REF, "name": name}}},
    }
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def infra_pool(name: str, owner: str) -> Obj:
    ref = {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachinePool",
        "name": owner,
        "controller": True,
    }
    return {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "SimMachinePool",
        "metadata": {"name": name, "namespace": "ns", "ownerReferences": [ref]},
    }


async def test_an_infra_pool_maps_only_to_pools_in_the_cache() -> None:
    pools = Informer(ListOnly([pool("held")]), MACHINE_POOLS, indexers=POOL_INDEXERS)  # type: ignore[arg-type]
    await pools.start()
    await pools.wait_synced()
    mapper = referenced_to_pool(pools)

    assert mapper(infra_pool("held", "held")) == [ObjectKey("ns", "held")]
    # Owned by a pool another shard holds, and referenced by none here: no reconcile.
    assert mapper(infra_pool("elsewhere", "elsewhere")) == []
    await pools.stop()
