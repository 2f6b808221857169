"""Shape of the generated CRDs: what the apiserver and kubectl will see."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from machinepool.api.crdgen import crd_manifests


def _crd(name: str) -> dict[str, Any]:
    return next(m for m in crd_manifests() if m["metadata"]["name"] == name)


def _walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for key, child in schema.get("properties", {}).items():
        yield from _walk(child, f"{path}.{key}")
    if "items" in schema:
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")


def test_machine_pool_crd_names_and_versions() -> None:
    crd = _crd("machinepools.cluster.x-k8s.io")
    spec = crd["spec"]

    assert spec["names"]["shortNames"] == ["mp"]
    assert spec["names"]["categories"] == ["cluster-api"]
    assert spec["conversion"] == {"strategy": "None"}
    v1beta2, v1beta1 = spec["versions"]
    assert (v1beta2["name"], v1beta2["storage"], v1beta2["served"]) == ("v1beta2", True, True)
    assert (v1beta1["name"], v1beta1["storage"], v1beta1["deprecated"]) == ("v1beta1", False, True)
    assert "deprecationWarning" in v1beta1
    for version in (v1beta1, v1beta2):
        assert version["subresources"] == {
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
            },
        }


def test_machine_pool_printer_columns_match_upstream() -> None:
    v1beta2, v1beta1 = _crd("machinepools.cluster.x-k8s.io")["spec"]["versions"]

    names = [(c["name"], c.get("priority", 0)) for c in v1beta2["additionalPrinterColumns"]]
    assert names == [
        ("Cluster", 0),
        ("Desired", 0),
        ("Current", 0),
        ("Ready", 0),
        ("Available", 0),
        ("Up-to-date", 0),
        ("Paused", 10),
        ("Phase", 0),
        ("Age", 0),
        ("Version", 0),
    ]
    assert [c["name"] for c in v1beta1["additionalPrinterColumns"]] == [
        "Cluster",
        "Desired",
        "Replicas",
        "Phase",
        "Age",
        "Version",
    ]


@pytest.mark.parametrize("crd", crd_manifests(), ids=lambda m: m["metadata"]["name"])
def test_schemas_are_structural(crd: dict[str, Any]) -> None:
    for version in crd["spec"]["versions"]:
        root = version["schema"]["openAPIV3Schema"]
        assert root["properties"]["metadata"] == {"type": "object"}
        for path, node in _walk(root):
            assert not {"$ref", "anyOf", "oneOf", "allOf"} & node.keys(), path
            assert "type" in node or node.get("x-kubernetes-int-or-string"), path


def test_bounds_follow_upstream() -> None:
    root = _crd("machinepools.cluster.x-k8s.io")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = root["properties"]["spec"]
    status = root["properties"]["status"]

    assert spec["required"] == ["clusterName", "template"]
    assert spec["properties"]["providerIDList"]["maxItems"] == 10000
    assert spec["properties"]["failureDomains"]["maxItems"] == 100
    assert status["properties"]["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    assert status["properties"]["deprecated"]["properties"].keys() == {"v1beta1"}


def test_contract_label_on_bootstrap_crd() -> None:
    labels = _crd("kubeadmconfigs.bootstrap.cluster.x-k8s.io")["metadata"]["labels"]

    assert labels["cluster.x-k8s.io/v1beta2"] == "v1beta2"


@pytest.mark.parametrize(
    ("template", "made"),
    [
        (
            "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
            "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
        ),
        (
            "simmachinepooltemplates.infrastructure.cluster.x-k8s.io",
            "simmachinepools.infrastructure.cluster.x-k8s.io",
        ),
        (
            "awsmachinepooltemplates.infrastructure.machinepool.cluster.x-k8s.io",
            "awsmachinepools.infrastructure.machinepool.cluster.x-k8s.io",
        ),
    ],
)
def test_a_template_holds_the_spec_of_the_kind_it_makes(template: str, made: str) -> None:
    """Upstream's topology controller copies ``spec.template.spec`` into the object it makes
    (the template's kind without ``Template``) and finds the version by the contract label:
    whatever a template admits, the object made from it admits too."""
    tmpl, obj = _crd(template), _crd(made)
    assert tmpl["spec"]["names"]["kind"] == obj["spec"]["names"]["kind"] + "Template"
    assert tmpl["metadata"]["labels"]["cluster.x-k8s.io/v1beta2"] == "v1beta2"
    (tmpl_version,) = tmpl["spec"]["versions"]
    obj_version = next(v for v in obj["spec"]["versions"] if v["storage"])
    assert "subresources" not in tmpl_version, "a template has no status"
    template_schema = tmpl_version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    resource = template_schema["properties"]["template"]
    assert template_schema["required"] == ["template"]
    made_spec = obj_version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert _without_descriptions(resource["properties"]["spec"]) == _without_descriptions(made_spec)
    assert set(resource["properties"]["metadata"]["properties"]) == {"labels", "annotations"}


def _without_descriptions(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _without_descriptions(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [_without_descriptions(v) for v in schema]
    return schema
