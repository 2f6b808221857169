"""A later module adds an infrastructure kind with one register_kind call; crdgen picks it up."""

from __future__ import annotations

import pytest

from machinepool.api import K8sModel, KindInfo, ObjectMeta, VersionInfo, register_kind
from machinepool.api import constants as c
from machinepool.api.crdgen import crd_file_name, crd_manifest


class _PoolSpec(K8sModel):
    """Spec of a test pool."""

    provider_id_list: list[str] | None = None
    """Provider IDs."""


class _Pool(K8sModel):
    """A test infrastructure pool."""

    api_version: str = "infrastructure.cluster.x-k8s.io/v1beta2"
    kind: str = "TestMachinePool"
    metadata: ObjectMeta | None = None
    spec: _PoolSpec | None = None


INFO = KindInfo(
    group=c.INFRASTRUCTURE_GROUP,
    kind="TestMachinePool",
    plural="testmachinepools",
    categories=("cluster-api",),
    labels={c.PROVIDER_LABEL: "infrastructure-test", c.CONTRACT_LABEL: c.V1BETA2},
    versions=(VersionInfo(name=c.V1BETA2, model=_Pool, storage=True),),
)


def test_infra_kind_gets_contract_labelled_crd() -> None:
    crd = crd_manifest(INFO)

    assert crd["metadata"]["name"] == "testmachinepools.infrastructure.cluster.x-k8s.io"
    assert crd["metadata"]["labels"]["cluster.x-k8s.io/v1beta2"] == "v1beta2"
    assert crd_file_name(crd) == "infrastructure.cluster.x-k8s.io_testmachinepools.yaml"
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "providerIDList" in schema["properties"]["spec"]["properties"]


def test_a_kind_needs_exactly_one_storage_version() -> None:
    bad = KindInfo(
        group=INFO.group,
        kind=INFO.kind,
        plural=INFO.plural,
        versions=(VersionInfo(name="v1beta2", model=_Pool),),
    )

    with pytest.raises(ValueError, match="storage"):
        register_kind(bad)
