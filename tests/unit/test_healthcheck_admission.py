"""MachineHealthCheck defaulting, validation and v1beta1 <-> v1beta2 conversion (pure)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from machinepool.api.healthcheck import (
    IntOrPercentError,
    parse_unhealthy_range,
    scaled_int_or_percent,
)
from machinepool.webhooks import AdmissionDenied
from machinepool.webhooks.healthcheck import (
    default_machine_health_check,
    from_hub,
    to_hub,
    validate_machine_health_check,
)

Obj = dict[str, Any]


def _mhc(**spec: Any) -> Obj:
    base: Obj = {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineHealthCheck",
        "metadata": {"name": "mhc", "namespace": "default"},
        "spec": {"clusterName": "c1", "selector": {"matchLabels": {"pool": "a"}}},
    }
    base["spec"].update(spec)
    return base


def _denied(old: Obj | None, new: Obj) -> str:
    with pytest.raises(AdmissionDenied) as info:
        validate_machine_health_check(old, new)
    return str(info.value.status["message"])


def test_defaulting_sets_cluster_label_and_startup_timeout() -> None:
    out = default_machine_health_check(_mhc())
    assert out["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "c1"
    assert out["spec"]["checks"]["nodeStartupTimeoutSeconds"] == 600
    kept = default_machine_health_check(_mhc(checks={"nodeStartupTimeoutSeconds": 0}))
    assert kept["spec"]["checks"]["nodeStartupTimeoutSeconds"] == 0


def test_valid_object_passes() -> None:
    validate_machine_health_check(None, _mhc(checks={"nodeStartupTimeoutSeconds": 30}))


def test_empty_selector_is_refused() -> None:
    message = _denied(None, _mhc(selector={}))
    assert "spec.selector: Required value: selector must not be empty" in message


def test_foreign_cluster_in_selector_is_refused() -> None:
    selector = {"matchLabels": {"cluster.x-k8s.io/cluster-name": "other"}}
    message = _denied(None, _mhc(selector=selector))
    assert "cannot specify a cluster selector other than the one specified by ClusterName" in (
        message
    )


def test_cluster_name_is_immutable() -> None:
    message = _denied(_mhc(), _mhc(clusterName="c2"))
    assert "spec.clusterName: Forbidden: field is immutable" in message


def test_short_startup_timeout_is_refused_but_zero_disables() -> None:
    message = _denied(None, _mhc(checks={"nodeStartupTimeoutSeconds": 10}))
    assert "spec.checks.nodeStartupTimeoutSeconds: Invalid value: 10: must be at least 30s" in (
        message
    )
    validate_machine_health_check(None, _mhc(checks={"nodeStartupTimeoutSeconds": 0}))


def test_bad_unhealthy_limit_names_the_field() -> None:
    spec = {"remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": "40"}}}
    message = _denied(None, _mhc(**spec))
    assert "spec.remediation.triggerIf.unhealthyLessThanOrEqualTo" in message
    assert "must be either an int or a percentage" in message


def test_bad_selector_operator_is_refused() -> None:
    selector = {"matchExpressions": [{"key": "pool", "operator": "Like", "values": ["a"]}]}
    message = _denied(None, _mhc(selector=selector))
    assert "spec.selector.matchExpressions[0].operator" in message


def test_scaled_value_as_upstream() -> None:
    assert scaled_int_or_percent("40%", 5) == 2
    assert scaled_int_or_percent(3, 5) == 3
    assert scaled_int_or_percent("100%", 7) == 7
    with pytest.raises(IntOrPercentError, match="not a percentage"):
        scaled_int_or_percent("3", 5)
    assert parse_unhealthy_range("[1-3]") == (1, 3)
    with pytest.raises(ValueError, match="cannot be less"):
        parse_unhealthy_range("[3-1]")


def _spoke() -> Obj:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineHealthCheck",
        "metadata": {"name": "mhc", "namespace": "default"},
        "spec": {
            "clusterName": "c1",
            "selector": {"matchLabels": {"pool": "a"}},
            "unhealthyConditions": [{"type": "Ready", "status": "False", "timeout": "5m"}],
            "maxUnhealthy": "40%",
            "nodeStartupTimeout": "10m0s",
            "remediationTemplate": {
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "FooRemediationTemplate",
                "name": "t",
                "namespace": "default",
            },
        },
        "status": {
            "expectedMachines": 3,
            "currentHealthy": 2,
            "remediationsAllowed": 1,
            "targets": ["a", "b", "c"],
            "conditions": [
                {"type": "RemediationAllowed", "status": "True", "lastTransitionTime": "x"}
            ],
            "v1beta2": {"conditions": [{"type": "RemediationAllowed", "status": "True"}]},
        },
    }


def test_spoke_to_hub_moves_fields() -> None:
    hub = to_hub(_spoke())
    assert hub["spec"]["checks"] == {
        "unhealthyNodeConditions": [{"type": "Ready", "status": "False", "timeoutSeconds": 300}],
        "nodeStartupTimeoutSeconds": 600,
    }
    assert hub["spec"]["remediation"]["triggerIf"] == {"unhealthyLessThanOrEqualTo": "40%"}
    assert hub["spec"]["remediation"]["templateRef"]["kind"] == "FooRemediationTemplate"
    assert hub["status"]["conditions"] == [{"type": "RemediationAllowed", "status": "True"}]
    assert hub["status"]["deprecated"]["v1beta1"]["conditions"][0]["lastTransitionTime"] == "x"


def test_round_trip_is_lossless() -> None:
    spoke = _spoke()
    assert from_hub(to_hub(copy.deepcopy(spoke))) == spoke
    hub = to_hub(copy.deepcopy(spoke))
    hub.pop("metadata")
    hub["metadata"] = {"name": "mhc", "namespace": "default"}
    plain = {k: v for k, v in to_hub(_spoke()).items() if k != "metadata"}
    assert to_hub(from_hub({**plain, "metadata": {"name": "mhc"}}))["spec"] == plain["spec"]


@given(
    seconds=st.integers(min_value=0, max_value=2**31 - 1),
    limit=st.one_of(st.integers(min_value=0, max_value=100), st.just("40%")),
    in_range=st.sampled_from([None, "[1-3]"]),
)
def test_hub_round_trip_property(seconds: int, limit: int | str, in_range: str | None) -> None:
    trigger: Obj = {"unhealthyLessThanOrEqualTo": limit}
    if in_range:
        trigger["unhealthyInRange"] = in_range
    hub = _mhc(
        checks={
            "nodeStartupTimeoutSeconds": seconds,
            "unhealthyNodeConditions": [
                {"type": "Ready", "status": "Unknown", "timeoutSeconds": seconds}
            ],
        },
        remediation={"triggerIf": trigger},
    )
    assert to_hub(from_hub(copy.deepcopy(hub))) == hub
