"""Indexers, mappers, keys and the default transform: the pure parts of informers."""

from __future__ import annotations

from typing import Any

from machinepool.runtime import (
    ObjectKey,
    field_indexer,
    label_indexer,
    object_key,
    owner_indexer,
    owner_key,
    strip_managed_fields,
)


def infra_pool(owner_kind: str = "MachinePool", controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "SimMachinePool",
        "metadata": {
            "namespace": "ns",
            "name": "pool-infra",
            "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "x"},
                {
                    "apiVersion": "cluster.x-k8s.io/v1beta2",
                    "kind": owner_kind,
                    "name": "pool",
                    "controller": controller,
                },
            ],
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {"providerID": "sim://a"},
    }


def test_object_key_round_trip() -> None:
    assert str(ObjectKey("ns", "a")) == "ns/a"
    assert str(ObjectKey("", "node")) == "node"
    assert ObjectKey.parse("ns/a") == ObjectKey("ns", "a")
    assert ObjectKey.of(infra_pool()) == ObjectKey("ns", "pool-infra")


def test_field_and_label_indexers() -> None:
    obj = infra_pool()
    assert list(field_indexer("spec.providerID")(obj)) == ["sim://a"]
    assert list(field_indexer("spec.missing.deeper")(obj)) == []
    assert list(label_indexer("cluster.x-k8s.io/cluster-name")(obj)) == ["c1"]
    assert list(label_indexer("other")(obj)) == []


def test_owner_indexer_and_mapper_follow_only_the_controller_owner() -> None:
    obj = infra_pool()
    assert list(owner_indexer("MachinePool", "cluster.x-k8s.io")(obj)) == ["ns/pool"]
    assert owner_key("MachinePool", "cluster.x-k8s.io")(obj) == [ObjectKey("ns", "pool")]
    assert list(owner_key("MachinePool", "other.io")(obj)) == []
    not_controller = infra_pool(controller=False)
    assert list(owner_key("MachinePool", "cluster.x-k8s.io")(not_controller)) == []
    assert object_key(obj) == [ObjectKey("ns", "pool-infra")]


def test_strip_managed_fields() -> None:
    obj = strip_managed_fields(infra_pool())
    assert "managedFields" not in obj["metadata"]
    assert strip_managed_fields({"kind": "X"}) == {"kind": "X"}
