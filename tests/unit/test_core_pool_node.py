"""A pool's template taints and labels on its Nodes (``controllers.poolnode``, gate
``MachinePoolNodeTaints``): upstream's Always / OnInitialization meaning, upstream's label
domains, and both writers (the pool's node-refs patch and the pool Machine's) using it."""

from __future__ import annotations

from typing import Any

from machinepool.api import constants as c
from machinepool.api.views import MachinePoolView, MachineView
from machinepool.controllers.machine.node import node_patch
from machinepool.controllers.machinepool.noderefs import desired_node_patch
from machinepool.controllers.poolnode import is_managed_label, pool_node_changes
from machinepool.runtime.kube.patch import apply_merge_patch

GPU = {"key": "gpu", "value": "a100", "effect": "NoSchedule", "propagation": "Always"}
SETUP = {"key": "setup", "effect": "NoExecute", "propagation": "OnInitialization"}
UNINIT = {"key": c.UNINITIALIZED_TAINT_KEY, "effect": "NoSchedule"}


def node(taints: list[dict[str, Any]] | None = None, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "n",
            "resourceVersion": "7",
            "labels": {"kubernetes.io/hostname": "n"},
            "annotations": dict(annotations),
        },
        "spec": {"taints": taints or []},
    }


def synced(
    n: dict[str, Any], template: list[dict[str, Any]], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """The Node after the pool's changes are applied."""
    changes = pool_node_changes(n, n["spec"]["taints"], template, labels)
    patch: dict[str, Any] = {"metadata": {}}
    if changes.labels:
        patch["metadata"]["labels"] = changes.labels
    if changes.annotations:
        patch["metadata"]["annotations"] = changes.annotations
    if changes.taints is not None:
        patch["spec"] = {"taints": changes.taints}
    return apply_merge_patch(n, patch)


def keys(n: dict[str, Any]) -> list[str]:
    return [f"{t['key']}:{t['effect']}" for t in n["spec"]["taints"]]


def test_a_joining_node_gets_both_kinds_and_records_only_always() -> None:
    n = synced(node(), [GPU, SETUP])
    assert n["spec"]["taints"] == [
        {"key": "gpu", "value": "a100", "effect": "NoSchedule"},
        {"key": "setup", "effect": "NoExecute"},
    ]
    assert n["metadata"]["annotations"][c.TAINTS_FROM_POOL_ANNOTATION] == "gpu:NoSchedule"


def test_always_is_put_back_after_someone_removes_it_on_initialization_is_not() -> None:
    n = synced(node(), [GPU, SETUP])
    n["spec"]["taints"] = []  # kubectl edit: both removed
    n = synced(n, [GPU, SETUP])
    assert keys(n) == ["gpu:NoSchedule"]
    assert not pool_node_changes(n, n["spec"]["taints"], [GPU, SETUP], None)


def test_others_taints_are_never_touched_and_a_value_is_written_over() -> None:
    theirs = {"key": "user", "effect": "NoSchedule"}
    n = synced(node([theirs, {"key": "gpu", "value": "old", "effect": "NoSchedule"}]), [GPU])
    assert n["spec"]["taints"] == [theirs, {"key": "gpu", "value": "a100", "effect": "NoSchedule"}]
    n = synced(n, [])  # the template drops it: ours goes, theirs stays
    assert n["spec"]["taints"] == [theirs]
    assert n["metadata"]["annotations"][c.TAINTS_FROM_POOL_ANNOTATION] == ""


def test_always_turned_on_initialization_is_let_go_not_removed() -> None:
    n = synced(node(), [GPU])
    n = synced(n, [{**GPU, "propagation": "OnInitialization"}])
    assert keys(n) == ["gpu:NoSchedule"]
    assert n["metadata"]["annotations"][c.TAINTS_FROM_POOL_ANNOTATION] == ""
    n["spec"]["taints"] = []
    assert synced(n, [{**GPU, "propagation": "OnInitialization"}])["spec"]["taints"] == []


def test_on_initialization_turned_always_is_put_on() -> None:
    n = synced(node(), [SETUP])
    n["spec"]["taints"] = []
    n = synced(n, [{**SETUP, "propagation": "Always"}])
    assert keys(n) == ["setup:NoExecute"]


def test_a_node_already_in_line_needs_nothing() -> None:
    n = synced(node(), [GPU], {"node-role.kubernetes.io/gpu": ""})
    assert not pool_node_changes(n, n["spec"]["taints"], [GPU], {"node-role.kubernetes.io/gpu": ""})


def test_labels_only_in_upstreams_domains_and_removed_when_dropped() -> None:
    labels = {
        "node-role.kubernetes.io/gpu": "",
        "team.node-restriction.kubernetes.io/owner": "ml",
        "node.cluster.x-k8s.io/tier": "a",
        "pool.node.cluster.x-k8s.io/x": "b",
        "example.com/ignored": "c",
        "plain": "d",
    }
    n = synced(node(), [], labels)
    got = n["metadata"]["labels"]
    assert {k for k in labels if k in got} == {k for k in labels if is_managed_label(k)}
    assert "example.com/ignored" not in got
    assert "plain" not in got
    n["metadata"]["labels"]["node-role.kubernetes.io/hand"] = "made"  # not ours: kept
    n = synced(n, [], {"node.cluster.x-k8s.io/tier": "b"})
    assert n["metadata"]["labels"] == {
        "kubernetes.io/hostname": "n",
        "node-role.kubernetes.io/hand": "made",
        "node.cluster.x-k8s.io/tier": "b",
    }
    assert (
        n["metadata"]["annotations"][c.LABELS_FROM_POOL_ANNOTATION] == "node.cluster.x-k8s.io/tier"
    )


def test_label_domains_are_upstreams_split() -> None:
    assert is_managed_label("node-role.kubernetes.io/worker")
    assert not is_managed_label("x.node-role.kubernetes.io/worker")  # exact domain only
    assert is_managed_label("node-restriction.kubernetes.io/a")
    assert is_managed_label("a.b.node-restriction.kubernetes.io/a")
    assert not is_managed_label("evilnode.cluster.x-k8s.io/a")
    assert not is_managed_label("cluster.x-k8s.io/pool-name")


def _pool(taints: list[dict[str, Any]], labels: dict[str, str]) -> MachinePoolView:
    return MachinePoolView(
        {
            "metadata": {"name": "workers", "namespace": "team-a"},
            "spec": {
                "clusterName": "prod",
                "template": {"metadata": {"labels": labels}, "spec": {"taints": taints}},
            },
        }
    )


def test_node_refs_patch_carries_the_pool_in_one_locked_patch_only_with_the_gate() -> None:
    n = node([UNINIT])
    pool = _pool([GPU], {"node-role.kubernetes.io/gpu": ""})
    off = desired_node_patch(n, pool)
    assert off is not None
    assert off["spec"]["taints"] == []
    assert "labels" not in off["metadata"]
    on = desired_node_patch(n, pool, pool_metadata=True)
    assert on is not None
    assert on["metadata"]["resourceVersion"] == "7"
    assert on["spec"]["taints"] == [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}]
    assert on["metadata"]["labels"] == {"node-role.kubernetes.io/gpu": ""}
    assert desired_node_patch(apply_merge_patch(n, on), pool, pool_metadata=True) is None


def test_machine_node_patch_takes_the_pools_taints_and_drops_uninitialized_together() -> None:
    m = MachineView(
        {
            "metadata": {
                "name": "m",
                "namespace": "team-a",
                "labels": {},
                "ownerReferences": [
                    {"kind": "MachinePool", "name": "workers", "uid": "u", "controller": True}
                ],
            },
            "spec": {"clusterName": "prod"},
        }
    )
    n = node([UNINIT])
    assert node_patch(m, n)["spec"]["taints"] == []  # type: ignore[index]
    patch = node_patch(m, n, [GPU, SETUP])
    assert patch is not None
    assert keys(apply_merge_patch(n, patch)) == ["gpu:NoSchedule", "setup:NoExecute"]
    after = apply_merge_patch(n, patch)
    assert node_patch(m, after, [GPU, SETUP]) is None
