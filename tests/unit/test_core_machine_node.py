"""What the Machine controller keeps on a pool Machine's Node (upstream's rule)."""

from __future__ import annotations

from typing import Any

from machinepool.api.views import MachineView
from machinepool.controllers.machine.node import node_patch
from machinepool.runtime.kube.patch import apply_merge_patch

OWNER = {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool", "name": "workers"}


def machine(labels: dict[str, str] | None = None, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "workers-abc-1",
            "namespace": "team-a",
            "labels": {"cluster.x-k8s.io/pool-name": "workers", **(labels or {})},
            "annotations": annotations,
            "ownerReferences": [{**OWNER, "uid": "u", "controller": True}],
        },
        "spec": {"clusterName": "prod"},
    }


def applied(node: dict[str, Any], patch: dict[str, Any] | None) -> dict[str, Any]:
    """The Node after a JSON merge patch of its metadata."""
    meta = node["metadata"]
    for key, changes in ((patch or {}).get("metadata") or {}).items():
        held = dict(meta.get(key) or {})
        for k, v in changes.items():
            if v is None:
                held.pop(k, None)
            else:
                held[k] = v
        meta[key] = held
    return node


def test_a_new_node_gets_the_bookkeeping_annotations_and_the_well_known_labels() -> None:
    m = machine(
        {"node-role.kubernetes.io/worker": "", "team": "a", "node.cluster.x-k8s.io/gpu": "1"}
    )
    node = applied({"metadata": {"name": "n1", "labels": {"kubernetes.io/os": "linux"}}}, None)
    node = applied(node, node_patch(MachineView(m), node))
    assert node["metadata"]["annotations"] == {
        "cluster.x-k8s.io/cluster-name": "prod",
        "cluster.x-k8s.io/cluster-namespace": "team-a",
        "cluster.x-k8s.io/machine": "workers-abc-1",
        "cluster.x-k8s.io/owner-kind": "MachinePool",
        "cluster.x-k8s.io/owner-name": "workers",
        "cluster.x-k8s.io/labels-from-machine": (
            "node-role.kubernetes.io/worker,node.cluster.x-k8s.io/gpu"
        ),
        "cluster.x-k8s.io/annotations-from-machine": "",
    }
    # The pool's own label and "team" are not of a synced domain; the Node's own label stays.
    assert node["metadata"]["labels"] == {
        "kubernetes.io/os": "linux",
        "node-role.kubernetes.io/worker": "",
        "node.cluster.x-k8s.io/gpu": "1",
    }
    assert node_patch(MachineView(m), node) is None, "a Node already in line is not written again"


def test_keys_the_machine_no_longer_has_leave_the_node_and_no_other_key_does() -> None:
    before = machine({"node.cluster.x-k8s.io/gpu": "1"}, **{"node.cluster.x-k8s.io/zone": "z1"})
    node = {"metadata": {"name": "n1", "labels": {"team": "a"}, "annotations": {"mine": "x"}}}
    node = applied(node, node_patch(MachineView(before), node))
    assert node["metadata"]["annotations"]["cluster.x-k8s.io/annotations-from-machine"] == (
        "node.cluster.x-k8s.io/zone"
    )
    node = applied(node, node_patch(MachineView(machine()), node))
    assert node["metadata"]["labels"] == {"team": "a"}
    assert "node.cluster.x-k8s.io/zone" not in node["metadata"]["annotations"]
    assert node["metadata"]["annotations"]["mine"] == "x"
    assert node["metadata"]["annotations"]["cluster.x-k8s.io/labels-from-machine"] == ""


UNINITIALIZED = {"key": "node.cluster.x-k8s.io/uninitialized", "effect": "NoSchedule"}
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


def test_the_uninitialized_taint_goes_in_the_same_patch_under_the_nodes_version() -> None:
    node = {
        "metadata": {"name": "n1", "resourceVersion": "42"},
        "spec": {"taints": [UNINITIALIZED, NOT_READY]},
    }
    patch = node_patch(MachineView(machine()), node)
    assert patch is not None
    assert patch["spec"] == {"taints": [NOT_READY]}, "only the uninitialized taint is dropped"
    assert patch["metadata"]["resourceVersion"] == "42", "a list replaced whole is locked"
    assert "cluster.x-k8s.io/machine" in patch["metadata"]["annotations"]
    marked = apply_merge_patch(node, patch)
    assert node_patch(MachineView(machine()), marked) is None, "nothing left: no second write"


def test_a_node_in_line_but_tainted_gets_only_the_taint_dropped() -> None:
    node: dict[str, Any] = {"metadata": {"name": "n1", "resourceVersion": "7"}}
    node = apply_merge_patch(node, node_patch(MachineView(machine()), node))
    node["spec"] = {"taints": [UNINITIALIZED]}
    assert node_patch(MachineView(machine()), node) == {
        "metadata": {"resourceVersion": "7"},
        "spec": {"taints": []},
    }
