"""A pool pass skips a Machine found in sync before with the same inputs
(``machines.reconcile_machines``): the mark it compares must name every field
``desired_machine`` reads from the MachinePool and from the Node. Its other inputs, the
Machine and the infra machine, enter by resourceVersion, which any change of them moves."""

from __future__ import annotations

from typing import Any

from tests.support.reads import Recorded, unnoticed

from machinepool.api.contract import InfraMachine
from machinepool.api.views import MachinePoolView
from machinepool.controllers.machinepool.poolmachines import (
    desired_machine,
    node_mark,
    template_mark,
)

POOL: dict[str, Any] = {
    "apiVersion": "cluster.x-k8s.io/v1beta2",
    "kind": "MachinePool",
    "metadata": {
        "name": "workers",
        "namespace": "ns",
        "uid": "uid-1",
        "labels": {"cluster.x-k8s.io/cluster-name": "c1", "team": "a"},
    },
    "spec": {
        "clusterName": "c1",
        "replicas": 3,
        "template": {
            "metadata": {"labels": {"tier": "web"}, "annotations": {"note": "x"}},
            "spec": {
                "version": "v1.34.4",
                "minReadySeconds": 5,
                "deletion": {"nodeDrainTimeoutSeconds": 30},
                "bootstrap": {"dataSecretName": "data"},
            },
        },
    },
}
INFRA: dict[str, Any] = {
    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
    "kind": "SimMachine",
    "metadata": {"name": "workers-1", "namespace": "ns", "resourceVersion": "7"},
    "spec": {"providerID": "sim:///zone-a/workers-1", "failureDomain": "zone-a"},
}
NODE: dict[str, Any] = {
    "metadata": {"name": "n1", "uid": "node-uid"},
    "spec": {"providerID": "sim:///zone-a/workers-1"},
    "status": {"nodeInfo": {"kubeletVersion": "v1.34.4"}},
}


def test_the_in_sync_mark_names_what_desired_machine_reads() -> None:
    pool_reads: set[tuple[str, ...]] = set()
    node_reads: set[tuple[str, ...]] = set()
    desired_machine(
        MachinePoolView(Recorded(POOL, (), pool_reads)),
        InfraMachine(INFRA),
        Recorded(NODE, (), node_reads),
    )
    assert ("spec", "template", "spec", "minReadySeconds") in pool_reads
    assert unnoticed(lambda mp: template_mark(MachinePoolView(mp)), POOL, pool_reads) == set()
    assert unnoticed(node_mark, NODE, node_reads) == set()
