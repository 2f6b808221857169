"""Health of a target, the triggerIf brake, selectors and the remediation bound (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from machinepool.api.meta import format_time
from machinepool.api.views import MachinePoolView, MachineView
from machinepool.controllers.machinehealthcheck.targets import (
    Health,
    Target,
    evaluate,
    remediation_allowed,
)
from machinepool.controllers.machinepool.facts import MachineFacts
from machinepool.controllers.machinepool.remediation import marked, max_in_flight
from machinepool.controllers.selector import matches

Obj = dict[str, Any]
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
CLUSTER: Obj = {
    "status": {
        "conditions": [
            {
                "type": "ControlPlaneInitialized",
                "status": "True",
                "lastTransitionTime": "2025-12-01T00:00:00Z",
            },
            {
                "type": "InfrastructureReady",
                "status": "True",
                "lastTransitionTime": "2025-12-01T00:00:00Z",
            },
        ]
    }
}
CHECKS: Obj = {
    "unhealthyNodeConditions": [
        {"type": "Ready", "status": "Unknown", "timeoutSeconds": 60},
        {"type": "Ready", "status": "False", "timeoutSeconds": 60},
    ]
}


def _ago(seconds: float) -> str:
    return format_time(NOW - timedelta(seconds=seconds))


def _machine(created_ago: float = 3600, **extra: Any) -> Obj:
    return {
        "metadata": {
            "name": "m1",
            "namespace": "ns",
            "creationTimestamp": _ago(created_ago),
            **extra,
        },
        "spec": {"clusterName": "c"},
        "status": {"nodeRef": {"name": "n1"}},
    }


def _node(status: str, since: float) -> Obj:
    return {
        "metadata": {"name": "n1"},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": status,
                    "reason": "R",
                    "lastTransitionTime": _ago(since),
                }
            ]
        },
    }


def test_ready_node_is_healthy() -> None:
    verdict = evaluate(Target(_machine(), _node("True", 10)), CLUSTER, CHECKS, NOW, 600)
    assert verdict.health is Health.HEALTHY


def test_unknown_node_past_timeout_is_unhealthy_with_upstream_message() -> None:
    verdict = evaluate(Target(_machine(), _node("Unknown", 61)), CLUSTER, CHECKS, NOW, 600)
    assert verdict.health is Health.UNHEALTHY
    assert verdict.reason == "UnhealthyNode"
    assert (
        "Condition Ready on Node is reporting status Unknown with reason R for more than 1m0s"
        in verdict.message
    )


def test_unknown_node_within_timeout_is_pending_with_next_check() -> None:
    verdict = evaluate(Target(_machine(), _node("Unknown", 20)), CLUSTER, CHECKS, NOW, 600)
    assert verdict.health is Health.PENDING
    assert 40 < verdict.next_check <= 41


def test_node_missing_is_unhealthy() -> None:
    verdict = evaluate(Target(_machine(), None, node_missing=True), CLUSTER, CHECKS, NOW, 600)
    assert (verdict.health, verdict.reason) == (Health.UNHEALTHY, "NodeDeleted")
    assert "Node n1 has been deleted" in verdict.message


def test_no_node_after_startup_timeout_is_unhealthy() -> None:
    machine = _machine(created_ago=40)
    machine["status"] = {}
    late = evaluate(Target(machine, None), CLUSTER, CHECKS, NOW, 30)
    assert (late.health, late.reason) == (Health.UNHEALTHY, "NodeStartupTimeout")
    assert "Node failed to report startup in 30s" in late.message
    early = evaluate(Target(machine, None), CLUSTER, CHECKS, NOW, 60)
    assert early.health is Health.PENDING
    assert evaluate(Target(machine, None), CLUSTER, CHECKS, NOW, 0).health is Health.PENDING


def test_nothing_is_judged_before_the_cluster_is_ready() -> None:
    verdict = evaluate(Target(_machine(), _node("Unknown", 600)), {}, CHECKS, NOW, 600)
    assert verdict.health is Health.PENDING


def test_remediate_annotation_marks_at_once() -> None:
    machine = _machine(annotations={"cluster.x-k8s.io/remediate-machine": ""})
    verdict = evaluate(Target(machine, _node("True", 10)), CLUSTER, CHECKS, NOW, 600)
    assert (verdict.health, verdict.reason) == (Health.UNHEALTHY, "HasRemediateAnnotation")


def test_trigger_if_three_of_five_at_forty_percent_is_refused() -> None:
    allowed, budget, why = remediation_allowed(
        {"triggerIf": {"unhealthyLessThanOrEqualTo": "40%"}}, 5, 2
    )
    assert (allowed, budget) == (False, 0)
    assert "(total: 5, unhealthy: 3, maxUnhealthy: 40%)" in why
    assert remediation_allowed({"triggerIf": {"unhealthyLessThanOrEqualTo": "40%"}}, 5, 3)[:2] == (
        True,
        0,
    )
    assert remediation_allowed({}, 5, 0)[:2] == (True, 0)
    assert remediation_allowed({"triggerIf": {"unhealthyInRange": "[1-2]"}}, 5, 4)[:2] == (True, 1)
    assert remediation_allowed({"triggerIf": {"unhealthyInRange": "[1-2]"}}, 5, 5)[0] is False


def test_selector_terms() -> None:
    labels = {"pool": "a", "zone": "z1"}
    assert matches({"matchLabels": {"pool": "a"}}, labels)
    assert not matches({"matchLabels": {"pool": "b"}}, labels)
    assert not matches({}, labels)
    expr = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1", "z2"]}]}
    assert matches(expr, labels)
    assert not matches({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, labels)
    assert not matches({"matchExpressions": [{"key": "zone", "operator": "Bogus"}]}, labels)


def _marked(owner: str, health: str) -> MachineView:
    return MachineView(
        {
            "status": {
                "conditions": [
                    {"type": "OwnerRemediated", "status": owner},
                    {"type": "HealthCheckSucceeded", "status": health},
                ]
            }
        }
    )


def test_only_still_unhealthy_marked_machines_are_remediated() -> None:
    assert marked(MachineFacts.of(_marked("False", "False")))
    assert not marked(MachineFacts.of(_marked("False", "True")))  # recovered before its turn
    assert not marked(MachineFacts.of(_marked("True", "False")))
    assert not marked(MachineFacts.of(MachineView({})))


def test_in_flight_bound_from_annotation() -> None:
    key = "machinepool.cluster.x-k8s.io/max-in-flight-remediations"

    def pool(value: str | None, replicas: int = 10) -> MachinePoolView:
        annotations = {} if value is None else {key: value}
        return MachinePoolView(
            {"metadata": {"annotations": annotations}, "spec": {"replicas": replicas}}
        )

    assert max_in_flight(pool(None)) == 1
    assert max_in_flight(pool("3")) == 3
    assert max_in_flight(pool("30%")) == 3
    assert max_in_flight(pool("5%")) == 1
    assert max_in_flight(pool("0")) == 1
    assert max_in_flight(pool("lots")) == 1
