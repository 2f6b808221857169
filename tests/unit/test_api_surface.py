"""machinepool.api exports what other layers code against, and nothing by accident."""

from __future__ import annotations

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
