"""MachinePool v1beta1 <-> v1beta2 conversion: worked examples and round-trip properties."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from machinepool.webhooks import ConversionError, from_hub, to_hub
from machinepool.webhooks.conversion import referenced_group_kinds

ANNOTATION = "cluster.x-k8s.io/conversion-data"
V1 = "cluster.x-k8s.io/v1beta1"
V2 = "cluster.x-k8s.io/v1beta2"

# --- strategies ---------------------------------------------------------------------------

names = st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True)
groups = st.sampled_from(
    ["bootstrap.cluster.x-k8s.io", "infrastructure.cluster.x-k8s.io", "infra.example.com"]
)
kinds = st.sampled_from(["KubeadmConfig", "DockerMachinePool", "AWSMachinePool"])
versions = st.sampled_from(["v1alpha1", "v1beta1", "v1beta2"])
int32 = st.integers(min_value=0, max_value=2**31 - 1)
small = st.integers(min_value=0, max_value=50)
seconds = st.integers(min_value=0, max_value=10**6)
timestamps = st.sampled_from(["2024-05-01T10:00:00Z", "2025-01-02T03:04:05Z"])
text = st.text(alphabet="abc XYZ-_.", min_size=1, max_size=12)
string_maps = st.dictionaries(names, text, min_size=1, max_size=3)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


def build(**fields: Any) -> dict[str, Any]:
    """A dict of the fields that are not None."""
    return {k: v for k, v in fields.items() if v is not None}


@st.composite
def v1beta1_refs(draw: st.DrawFn) -> dict[str, Any]:
    return build(
        apiVersion=f"{draw(groups)}/{draw(versions)}",
        kind=draw(kinds),
        name=draw(names),
        namespace=draw(optional(names)),
        uid=draw(optional(st.uuids().map(str))),
        resourceVersion=draw(optional(st.integers(1, 999).map(str))),
        fieldPath=draw(optional(st.just("spec.x"))),
    )


@st.composite
def hub_refs(draw: st.DrawFn) -> dict[str, Any]:
    return {"apiGroup": draw(groups), "kind": draw(kinds), "name": draw(names)}


durations = st.one_of(
    seconds.map(lambda s: f"{s}s"),
    st.sampled_from(["0s", "10m", "1h30m", "1m30s", "1.5s", "250ms", "2h0m0s"]),
)
v1beta1_conditions = st.lists(
    st.fixed_dictionaries(
        {
            "type": names,
            "status": st.sampled_from(["True", "False"]),
            "lastTransitionTime": timestamps,
        },
        optional={"severity": st.sampled_from(["Error", "Info"]), "reason": names, "message": text},
    ),
    max_size=2,
    unique_by=lambda c: c["type"],
)
meta_conditions = st.lists(
    st.fixed_dictionaries(
        {
            "type": names.map(str.capitalize),
            "status": st.sampled_from(["True", "False", "Unknown"]),
            "lastTransitionTime": timestamps,
            "reason": st.sampled_from(["Ready", "NotReady"]),
            "message": st.text(max_size=5),
        },
        optional={"observedGeneration": small},
    ),
    max_size=2,
    unique_by=lambda c: c["type"],
)
status_versions = st.lists(
    st.fixed_dictionaries(
        {"version": st.sampled_from(["v1.30.0", "v1.31.1"])}, optional={"replicas": small}
    ),
    max_size=2,
    unique_by=lambda v: v["version"],
)
taints = st.lists(
    st.fixed_dictionaries(
        {
            "key": names,
            "effect": st.sampled_from(["NoSchedule", "NoExecute"]),
            "propagation": st.just("Always"),
        }
    ),
    min_size=1,
    max_size=2,
    unique_by=lambda t: (t["key"], t["effect"]),
)


@st.composite
def metadata(draw: st.DrawFn) -> dict[str, Any]:
    return build(
        name=draw(names),
        namespace=draw(names),
        uid=draw(optional(st.uuids().map(str))),
        generation=draw(optional(st.integers(1, 9))),
        labels=draw(optional(string_maps)),
        annotations=draw(optional(string_maps)),
    )


def _template_common(draw: st.DrawFn) -> dict[str, Any]:
    return build(
        clusterName=draw(names),
        version=draw(optional(st.sampled_from(["v1.30.0", "v1.31.2"]))),
        providerID=draw(optional(names)),
        failureDomain=draw(optional(names)),
        readinessGates=draw(
            optional(
                st.lists(
                    st.fixed_dictionaries({"conditionType": names}),
                    min_size=1,
                    max_size=2,
                    unique_by=lambda g: g["conditionType"],
                )
            )
        ),
        taints=draw(optional(taints)),
    )


def _spec_common(draw: st.DrawFn, template: dict[str, Any]) -> dict[str, Any]:
    return build(
        clusterName=template["spec"]["clusterName"],
        replicas=draw(optional(small)),
        template=template,
        providerIDList=draw(optional(st.lists(names, max_size=3))),
        failureDomains=draw(optional(st.lists(names, max_size=2))),
    )


@st.composite
def v1beta1_pools(draw: st.DrawFn) -> dict[str, Any]:
    spec = _template_common(draw)
    spec["bootstrap"] = build(
        configRef=draw(optional(v1beta1_refs())), dataSecretName=draw(optional(names))
    )
    spec["infrastructureRef"] = draw(v1beta1_refs())
    for key in ("nodeDrainTimeout", "nodeVolumeDetachTimeout", "nodeDeletionTimeout"):
        value = draw(optional(durations))
        if value is not None:
            spec[key] = value
    template = build(
        metadata=draw(optional(st.fixed_dictionaries({}, optional={"labels": string_maps}))),
        spec=spec,
    )
    pool_spec = _spec_common(draw, template)
    minimum = draw(optional(int32))
    if minimum is not None:
        pool_spec["minReadySeconds"] = minimum
    status = draw(
        optional(
            st.fixed_dictionaries(
                {},
                optional={
                    "nodeRefs": st.lists(
                        st.fixed_dictionaries({"kind": st.just("Node"), "name": names}), max_size=2
                    ),
                    "replicas": small,
                    "readyReplicas": small,
                    "availableReplicas": small,
                    "unavailableReplicas": small,
                    "failureReason": names,
                    "failureMessage": text,
                    "phase": st.sampled_from(["Running", "ScalingUp"]),
                    "bootstrapReady": st.booleans(),
                    "infrastructureReady": st.booleans(),
                    "observedGeneration": small,
                    "conditions": v1beta1_conditions,
                    "versions": status_versions,
                    "v1beta2": st.fixed_dictionaries(
                        {},
                        optional={
                            "conditions": meta_conditions,
                            "readyReplicas": small,
                            "availableReplicas": small,
                            "upToDateReplicas": small,
                        },
                    ),
                },
            )
        )
    )
    return build(
        apiVersion=V1, kind="MachinePool", metadata=draw(metadata()), spec=pool_spec, status=status
    )


@st.composite
def v1beta2_pools(draw: st.DrawFn) -> dict[str, Any]:
    spec = _template_common(draw)
    spec["bootstrap"] = build(
        configRef=draw(optional(hub_refs())), dataSecretName=draw(optional(names))
    )
    spec["infrastructureRef"] = draw(hub_refs())
    spec["minReadySeconds"] = draw(optional(int32))
    spec["deletion"] = draw(
        optional(
            st.fixed_dictionaries(
                {},
                optional={
                    "nodeDrainTimeoutSeconds": int32,
                    "nodeVolumeDetachTimeoutSeconds": int32,
                    "nodeDeletionTimeoutSeconds": int32,
                },
            )
        )
    )
    template = build(
        metadata=draw(optional(st.fixed_dictionaries({}, optional={"annotations": string_maps}))),
        spec=build(**spec),
    )
    pool_spec = _spec_common(draw, template)
    status = draw(
        optional(
            st.fixed_dictionaries(
                {},
                optional={
                    "conditions": meta_conditions,
                    "initialization": st.fixed_dictionaries(
                        {},
                        optional={
                            "infrastructureProvisioned": st.booleans(),
                            "bootstrapDataSecretCreated": st.booleans(),
                        },
                    ),
                    "nodeRefs": st.lists(
                        st.fixed_dictionaries({"kind": st.just("Node"), "name": names}), max_size=2
                    ),
                    "replicas": small,
                    "readyReplicas": small,
                    "availableReplicas": small,
                    "upToDateReplicas": small,
                    "versions": status_versions,
                    "phase": st.sampled_from(["Running", "ScalingDown"]),
                    "observedGeneration": st.integers(1, 9),
                    "deprecated": st.fixed_dictionaries(
                        {},
                        optional={
                            "v1beta1": st.fixed_dictionaries(
                                {},
                                optional={
                                    "conditions": v1beta1_conditions,
                                    "failureReason": names,
                                    "failureMessage": text,
                                    "readyReplicas": small,
                                    "availableReplicas": small,
                                    "unavailableReplicas": small,
                                },
                            )
                        },
                    ),
                },
            )
        )
    )
    return build(
        apiVersion=V2, kind="MachinePool", metadata=draw(metadata()), spec=pool_spec, status=status
    )


def resolver_for(spoke: dict[str, Any]) -> dict[tuple[str, str], str]:
    """What the contract-label lookup would answer if it agrees with the object's own refs."""
    found = {}
    template_spec = spoke["spec"]["template"]["spec"]
    for ref in (template_spec["infrastructureRef"], template_spec["bootstrap"].get("configRef")):
        if ref:
            found[(ref["apiVersion"].rpartition("/")[0], ref["kind"])] = ref["apiVersion"]
    return found


def contract_versions(hub: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {pair: f"{pair[0]}/v1beta7" for pair in referenced_group_kinds(hub)}


# --- properties ---------------------------------------------------------------------------
# No deadline: CI runs these beside apiservers on two cores, where one example's time says
# nothing about the code.


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v1beta1_pools())
def test_v1beta1_to_hub_and_back_is_identity(spoke: dict[str, Any]) -> None:
    original = copy.deepcopy(spoke)
    hub = to_hub(spoke)
    assert spoke == original, "to_hub must not modify its input"
    assert hub["apiVersion"] == V2
    back = from_hub(hub, resolver_for(spoke))
    assert back == original
    # A resolver that knows nothing works too: the stored copy or the refs suffice.
    if ANNOTATION in hub["metadata"].get("annotations", {}):
        assert from_hub(hub) == original


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v1beta2_pools())
def test_hub_to_v1beta1_and_back_is_identity(hub: dict[str, Any]) -> None:
    original = copy.deepcopy(hub)
    spoke = from_hub(hub, contract_versions(hub))
    assert hub == original, "from_hub must not modify its input"
    assert spoke["apiVersion"] == V1
    assert to_hub(spoke) == original


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v1beta2_pools())
def test_repeated_round_trips_are_stable(hub: dict[str, Any]) -> None:
    versions = contract_versions(hub)
    spoke = from_hub(hub, versions)
    assert from_hub(to_hub(spoke), versions) == spoke


# --- worked examples ----------------------------------------------------------------------


def _spoke() -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "MachinePool",
        "metadata": {"name": "mp", "namespace": "ns"},
        "spec": {
            "clusterName": "c",
            "minReadySeconds": 5,
            "template": {
                "spec": {
                    "clusterName": "c",
                    "bootstrap": {
                        "configRef": {
                            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
                            "kind": "KubeadmConfig",
                            "name": "b",
                            "namespace": "ns",
                        }
                    },
                    "infrastructureRef": {
                        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                        "kind": "DockerMachinePool",
                        "name": "i",
                        "namespace": "ns",
                    },
                    "nodeDeletionTimeout": "1m30s",
                }
            },
        },
        "status": {
            "bootstrapReady": True,
            "infrastructureReady": False,
            "readyReplicas": 1,
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T10:00:00Z"}
            ],
            "v1beta2": {"readyReplicas": 2, "upToDateReplicas": 3},
        },
    }


def test_field_mapping_to_hub() -> None:
    hub = to_hub(_spoke())
    template_spec = hub["spec"]["template"]["spec"]
    assert "minReadySeconds" not in hub["spec"]
    assert template_spec["minReadySeconds"] == 5
    assert template_spec["deletion"] == {"nodeDeletionTimeoutSeconds": 90}
    assert template_spec["bootstrap"]["configRef"] == {
        "apiGroup": "bootstrap.cluster.x-k8s.io",
        "kind": "KubeadmConfig",
        "name": "b",
    }
    assert hub["status"]["initialization"] == {
        "bootstrapDataSecretCreated": True,
        "infrastructureProvisioned": False,
    }
    assert hub["status"]["readyReplicas"] == 2
    assert hub["status"]["upToDateReplicas"] == 3
    assert hub["status"]["deprecated"]["v1beta1"]["readyReplicas"] == 1
    assert hub["status"]["deprecated"]["v1beta1"]["conditions"][0]["type"] == "Ready"
    # Everything the plain mapping reproduces needs no stored copy.
    assert ANNOTATION not in hub["metadata"].get("annotations", {})


def test_lossy_details_are_kept_in_the_annotation() -> None:
    spoke = _spoke()
    spoke["spec"]["template"]["spec"]["nodeDeletionTimeout"] = "90s"  # Go would print 1m30s
    spoke["spec"]["template"]["spec"]["infrastructureRef"]["uid"] = "1234"
    hub = to_hub(spoke)
    stored = json.loads(hub["metadata"]["annotations"][ANNOTATION])
    assert stored["apiVersion"] == V1
    assert from_hub(hub) == spoke


def test_edited_hub_keeps_ref_details_that_still_apply() -> None:
    spoke = _spoke()
    spoke["spec"]["template"]["spec"]["infrastructureRef"]["uid"] = "1234"
    spoke["spec"]["template"]["spec"]["nodeDeletionTimeout"] = "90s"
    hub = to_hub(spoke)
    hub["spec"]["replicas"] = 4
    hub["status"]["phase"] = "Running"
    back = from_hub(
        hub, {("bootstrap.cluster.x-k8s.io", "KubeadmConfig"): "bootstrap.cluster.x-k8s.io/v1beta2"}
    )
    template_spec = back["spec"]["template"]["spec"]
    assert back["spec"]["replicas"] == 4
    assert template_spec["infrastructureRef"]["uid"] == "1234"
    assert template_spec["nodeDeletionTimeout"] == "90s"
    hub["spec"]["template"]["spec"]["deletion"]["nodeDeletionTimeoutSeconds"] = 30
    assert from_hub(hub)["spec"]["template"]["spec"]["nodeDeletionTimeout"] == "30s"


def test_from_hub_needs_to_know_the_ref_version() -> None:
    hub = to_hub(_spoke())
    with pytest.raises(ConversionError, match="cannot tell the API version of DockerMachinePool"):
        from_hub(hub)


def test_bad_duration_names_the_field() -> None:
    spoke = _spoke()
    spoke["spec"]["template"]["spec"]["nodeDeletionTimeout"] = "soon"
    with pytest.raises(ConversionError, match=r"spec\.template\.spec\.nodeDeletionTimeout"):
        to_hub(spoke)


def test_upstream_style_annotation_on_a_spoke_is_honoured() -> None:
    hub = {
        "apiVersion": V2,
        "kind": "MachinePool",
        "metadata": {"name": "mp", "namespace": "ns"},
        "spec": {
            "clusterName": "c",
            "template": {
                "spec": {
                    "clusterName": "c",
                    "bootstrap": {"dataSecretName": "s"},
                    "infrastructureRef": {
                        "apiGroup": "infra.example.com",
                        "kind": "K",
                        "name": "n",
                    },
                    "deletion": {},
                }
            },
        },
    }
    spoke = from_hub(hub, {("infra.example.com", "K"): "infra.example.com/v1"})
    assert ANNOTATION in spoke["metadata"]["annotations"]  # the empty deletion needs it
    assert to_hub(spoke) == hub
