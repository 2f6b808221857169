"""Pure admission logic: upstream's replica cases, version and key rules, Go parsers, patches."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from machinepool.api.features import (
    MACHINE_POOL,
    MACHINE_POOL_NODE_TAINTS,
    MACHINE_TAINT_PROPAGATION,
    FeatureGates,
)
from machinepool.api.meta import format_duration, parse_duration
from machinepool.webhooks import (
    AdmissionDenied,
    calculate_replicas,
    default_machine_pool,
    validate_machine_pool,
    validate_machine_pool_delete,
)
from machinepool.webhooks.fielderrors import go_quote, label_key_errors
from machinepool.webhooks.goparse import is_semver, parse_int32

MIN = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
MAX = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"


def _mp(annotations: dict[str, str] | None = None, replicas: int | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"annotations": annotations or {}}, "spec": {}}
    if replicas is not None:
        obj["spec"]["replicas"] = replicas
    return obj


# The eleven cases of upstream's TestCalculateMachinePoolReplicas.
@pytest.mark.parametrize(
    ("new", "old", "expected"),
    [
        (_mp(replicas=5), None, 5),
        (_mp(), None, 1),
        (_mp({MIN: "3"}), None, 1),
        (_mp({MAX: "7"}), None, 1),
        (_mp({MIN: "3", MAX: "7"}), None, 3),
        (_mp({MIN: "3", MAX: "7"}), _mp(), 3),
        (_mp({MIN: "3", MAX: "7"}), _mp(replicas=1), 3),
        (_mp({MIN: "3", MAX: "7"}), _mp(replicas=15), 7),
        (_mp({MIN: "3", MAX: "7"}), _mp(replicas=4), 4),
    ],
)
def test_calculate_replicas(new: dict[str, Any], old: dict[str, Any] | None, expected: int) -> None:
    assert calculate_replicas(new, old) == expected


@pytest.mark.parametrize("bad", [MIN, MAX])
def test_calculate_replicas_refuses_unparsable_sizes(bad: str) -> None:
    annotations = {MIN: "3", MAX: "7", bad: "abc"}
    with pytest.raises(AdmissionDenied) as caught:
        calculate_replicas(_mp(annotations), None)
    assert caught.value.status["code"] == 403
    assert caught.value.status["message"] == (
        "failed to caculate MachinePool replicas value: could not parse the value of the "
        f'"{bad}" annotation: strconv.ParseInt: parsing "abc": invalid syntax'
    )


def test_default_fills_everything_and_leaves_the_input_alone() -> None:
    obj: dict[str, Any] = {
        "metadata": {"name": "mp"},
        "spec": {"clusterName": "c", "template": {"spec": {"version": "1.20.0"}}},
    }
    out = default_machine_pool(obj)
    assert out["metadata"]["labels"] == {"cluster.x-k8s.io/cluster-name": "c"}
    assert out["spec"]["replicas"] == 1
    assert out["spec"]["template"]["spec"] == {
        "version": "v1.20.0",
        "deletion": {"nodeDeletionTimeoutSeconds": 10},
    }
    assert "labels" not in obj["metadata"]
    assert sorted(jsonpatch.make_patch(obj, out).patch, key=lambda op: op["path"]) == [
        {"op": "add", "path": "/metadata/labels", "value": {"cluster.x-k8s.io/cluster-name": "c"}},
        {"op": "add", "path": "/spec/replicas", "value": 1},
        {
            "op": "add",
            "path": "/spec/template/spec/deletion",
            "value": {"nodeDeletionTimeoutSeconds": 10},
        },
        {"op": "replace", "path": "/spec/template/spec/version", "value": "v1.20.0"},
    ]


@pytest.mark.parametrize("junk", [None, 3, "x", [], {"spec": "nope"}, {"metadata": []}])
def test_default_never_crashes_on_junk(junk: Any) -> None:
    obj = junk if isinstance(junk, dict) else {"spec": junk}
    out = default_machine_pool(obj)
    assert out["spec"]["replicas"] == 1


def _valid() -> dict[str, Any]:
    return {
        "metadata": {"name": "mp"},
        "spec": {
            "clusterName": "c",
            "template": {"spec": {"clusterName": "c", "bootstrap": {"dataSecretName": "s"}}},
        },
    }


def _refusal(
    old: dict[str, Any] | None, new: dict[str, Any], gates: FeatureGates | None = None
) -> str:
    with pytest.raises(AdmissionDenied) as caught:
        validate_machine_pool(old, new, gates or FeatureGates())
    return str(caught.value.status["message"])


def test_valid_object_passes() -> None:
    validate_machine_pool(None, _valid(), FeatureGates())
    validate_machine_pool(_valid(), _valid(), FeatureGates())


def test_gate_off_refuses_everything_naming_the_gate() -> None:
    off = FeatureGates().with_gate(MACHINE_POOL, False)
    expected = "spec: Forbidden: can be set only if the MachinePool feature flag is enabled"
    assert _refusal(None, _valid(), off) == expected
    with pytest.raises(AdmissionDenied, match="MachinePool feature flag"):
        validate_machine_pool_delete(_valid(), off)
    validate_machine_pool_delete(_valid(), FeatureGates())


def test_version_without_v_gets_both_upstream_messages_in_order() -> None:
    obj = _valid()
    obj["spec"]["template"]["spec"]["version"] = "1.20.0"
    assert _refusal(None, obj) == (
        'MachinePool.cluster.x-k8s.io "mp" is invalid: spec.template.spec.version: Invalid value: '
        '"1.20.0": must start with v'
    )
    obj["spec"]["template"]["spec"]["version"] = "1.20"
    assert _refusal(None, obj) == (
        'MachinePool.cluster.x-k8s.io "mp" is invalid: [spec.template.spec.version: Invalid value: '
        '"1.20": must start with v, spec.template.spec.version: Invalid value: "1.20": must be a '
        "valid semantic version]"
    )


TAINTS_OFF = (
    'MachinePool.cluster.x-k8s.io "mp" is invalid: spec.template.spec.taints: Forbidden: taints '
    "on a MachinePool need the feature gate MachinePoolNodeTaints (not upstream's): start the "
    "core with --feature-gates=MachinePoolNodeTaints=true, or remove spec.template.spec.taints"
)


def test_taints_are_refused_naming_our_gate_while_it_is_off() -> None:
    obj = _valid()
    obj["spec"]["template"]["spec"]["taints"] = [
        {"key": "k", "effect": "NoSchedule", "propagation": "Always"}
    ]
    assert _refusal(None, obj) == TAINTS_OFF
    # Upstream's own gate does not let them in: it is for Machines, not pools.
    assert _refusal(None, obj, FeatureGates().with_gate(MACHINE_TAINT_PROPAGATION, True)) == (
        TAINTS_OFF
    )


def test_taints_pass_with_our_gate_and_reserved_keys_are_refused() -> None:
    gates = FeatureGates().with_gate(MACHINE_POOL_NODE_TAINTS, True)
    obj = _valid()
    taints = [{"key": "k", "effect": "NoSchedule", "propagation": "Always"}]
    obj["spec"]["template"]["spec"]["taints"] = taints
    validate_machine_pool(None, obj, gates)
    obj["spec"]["template"]["spec"]["taints"] = [
        *taints,
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule", "propagation": "Always"},
        {
            "key": "node-role.kubernetes.io/control-plane",
            "effect": "NoSchedule",
            "propagation": "Always",
        },
    ]
    assert _refusal(None, obj, gates) == (
        'MachinePool.cluster.x-k8s.io "mp" is invalid: [spec.template.spec.taints[1].key: Invalid '
        'value: "node.kubernetes.io/not-ready": taint key must not have the prefix '
        "node.kubernetes.io/, except for node.kubernetes.io/out-of-service, "
        'spec.template.spec.taints[2].key: Invalid value: "node-role.kubernetes.io/control-plane": '
        "taint is not allowed for worker Machines]"
    )


def test_an_update_that_keeps_the_taints_passes_with_the_gate_off() -> None:
    obj = _valid()
    obj["spec"]["template"]["spec"]["taints"] = [
        {"key": "k", "effect": "NoSchedule", "propagation": "Always"}
    ]
    old = copy.deepcopy(obj)
    obj["spec"]["replicas"] = 5
    validate_machine_pool(old, obj, FeatureGates())
    obj["spec"]["template"]["spec"]["taints"][0]["key"] = "other"
    with pytest.raises(AdmissionDenied):
        validate_machine_pool(old, obj, FeatureGates())


def test_status_details_carry_every_cause() -> None:
    obj = _valid()
    obj["spec"]["template"]["spec"]["bootstrap"] = {}
    obj["spec"]["template"]["spec"]["clusterName"] = "other"
    with pytest.raises(AdmissionDenied) as caught:
        validate_machine_pool({"spec": {"clusterName": "before"}}, obj, FeatureGates())
    status = caught.value.status
    assert status["code"] == 422
    assert status["reason"] == "Invalid"
    assert [c["field"] for c in status["details"]["causes"]] == [
        "spec.template.spec.bootstrap",
        "spec.clusterName",
        "spec.clusterName",
    ]


@pytest.mark.parametrize(
    ("key", "errors"),
    [
        ("good", []),
        ("example.com/good", []),
        ("/x", ["prefix part must be non-empty"]),
        ("a/", ["name part must be non-empty", "name part must consist"]),
        ("a/b/c", ["a valid label key must consist"]),
        ("Bad_.com/x", ["prefix part a lowercase RFC 1123 subdomain"]),
        ("x" * 64, ["name part must be no more than 63 bytes"]),
        ("$bad", ["name part must consist"]),
        ("trailing\n", ["name part must consist"]),
    ],
)
def test_label_keys(key: str, errors: list[str]) -> None:
    found = label_key_errors(key)
    assert len(found) == len(errors)
    for got, want in zip(found, errors, strict=True):
        assert got.startswith(want)


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("1.23.3", True),
        ("1.19.0-alpha.1", True),
        ("1.2.3+build.5", True),
        ("1.2.3-rc.1+meta-data", True),
        ("1.17.2++", False),
        ("1", False),
        ("1.2", False),
        ("01.2.3", False),
        ("1.2.03", False),
        ("1.2.3-01", False),
        ("1.2.3-", False),
        ("1.2.3+", False),
        ("1.2.3-a..b", False),
        ("1.2.x", False),
    ],
)
def test_semver_is_blang_strict(version: str, ok: bool) -> None:
    assert is_semver(version) is ok


@pytest.mark.parametrize(
    ("text", "value"), [("3", 3), ("+3", 3), ("-2", -2), ("2147483647", 2**31 - 1)]
)
def test_parse_int32(text: str, value: int) -> None:
    assert parse_int32(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'parsing "": invalid syntax'),
        ("1_000", 'parsing "1_000": invalid syntax'),
        (" 1", 'parsing " 1": invalid syntax'),
        ("2147483648", 'parsing "2147483648": value out of range'),
    ],
)
def test_parse_int32_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_int32(text)


@pytest.mark.parametrize(
    ("text", "ns", "canonical"),
    [
        ("0", 0, "0s"),
        ("10s", 10 * 10**9, "10s"),
        ("90s", 90 * 10**9, "1m30s"),
        ("1h", 3600 * 10**9, "1h0m0s"),
        ("1.5s", 1_500_000_000, "1.5s"),
        ("1m0.25s", 60_250_000_000, "1m0.25s"),
        ("300ms", 300_000_000, "300ms"),
        ("-5m", -300 * 10**9, "-5m0s"),
        ("2us", 2_000, "2µs"),
    ],
)
def test_go_durations(text: str, ns: int, canonical: str) -> None:
    assert parse_duration(text) == ns
    assert format_duration(ns) == canonical
    assert parse_duration(canonical) == ns


@pytest.mark.parametrize("text", ["", "5", "1x", ".s", "s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="time: "):
        parse_duration(text)


def test_go_quote() -> None:
    assert go_quote('a"b\\c\n') == '"a\\"b\\\\c\\n"'
    assert go_quote("héllo") == '"héllo"'
    assert go_quote("\x00") == '"\\x00"'
