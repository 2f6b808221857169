"""machinepool.api exports what other layers code against, and nothing by accident."""

from __future__ import annotations

import pytest

import machinepool.api as api


def test_every_exported_name_exists() -> None:
    missing = [name for name in api.__all__ if not hasattr(api, name)]

    assert missing == []


def test_main_names_are_exported() -> None:
    expected = {
        "MachinePool",
        "V1Beta1MachinePool",
        "Machine",
        "Cluster",
        "KubeadmConfig",
        "MetaCondition",
        "V1Beta1Condition",
        "ContractVersionedObjectReference",
        "ObjectMeta",
        "K8sModel",
        "constants",
        "pool_name_label_value",
        "register_kind",
        "model_for",
    }

    assert expected <= set(api.__all__)


def test_a_kinds_resource_comes_from_its_registry_entry() -> None:
    pools = api.MACHINE_POOL.resource()

    assert pools == api.MACHINE_POOLS
    assert pools.api_version == "cluster.x-k8s.io/v1beta2"
    assert pools.path("ns", "mp") == "/apis/cluster.x-k8s.io/v1beta2/namespaces/ns/machinepools/mp"
    assert api.MACHINE_POOL.resource("v1beta1").version == "v1beta1"


def test_a_version_the_kind_is_not_served_at_has_no_resource() -> None:
    with pytest.raises(LookupError, match="Cluster is not served at v1beta1"):
        api.CLUSTER.resource("v1beta1")


def test_every_registered_kind_is_reached_at_its_storage_version() -> None:
    for info in api.registered_kinds():
        storage = next(v.name for v in info.versions if v.storage)
        assert info.resource().version == storage
        assert info.resource().namespaced == (info.scope == "Namespaced")
