"""MachineDrainRules, pure: which rules apply to a Machine, what they ask of a pod, and how
they read as upstream's drain reads them (the pod's label first, the first rule by name,
a WaitCompleted rule's order not counted, an invalid selector failing the drain)."""

from __future__ import annotations

from typing import Any

import pytest

from machinepool.api import constants as c
from machinepool.controllers.machine import drain

NAMESPACES = {"apps": {"team": "a"}, "kube-system": {}}


def rule(name: str, behavior: str, order: int | None = None, **spec: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"behavior": behavior}
    if order is not None:
        config["order"] = order
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"drain": config, **spec}}


def pod(name: str = "p", namespace: str = "apps", **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}}


MACHINE = {"metadata": {"name": "m", "labels": {"pool": "workers"}}}
CLUSTER = {"metadata": {"name": "work", "labels": {"env": "prod"}}}


def test_rules_apply_by_machine_and_cluster_selector_sorted_by_name() -> None:
    everywhere = rule("b-all", "Skip")
    workers = rule(
        "a-workers", "Skip", machines=[{"selector": {"matchLabels": {"pool": "workers"}}}]
    )
    staging = rule(
        "c-staging",
        "Skip",
        machines=[
            {
                "selector": {"matchLabels": {"pool": "workers"}},
                "clusterSelector": {"matchLabels": {"env": "staging"}},
            }
        ],
    )
    either = rule(
        "d-either",
        "Skip",
        machines=[
            {"clusterSelector": {"matchLabels": {"env": "staging"}}},
            {"clusterSelector": {"matchExpressions": [{"key": "env", "operator": "Exists"}]}},
        ],
    )
    applying = drain.machine_rules([staging, everywhere, either, workers], MACHINE, CLUSTER)
    assert [r["metadata"]["name"] for r in applying] == ["a-workers", "b-all", "d-either"]


def test_the_pods_label_comes_before_any_rule() -> None:
    rules = [rule("a", "Drain", 5)]
    assert drain.pod_drain(pod(**{c.POD_DRAIN_LABEL: "skip"}), rules, NAMESPACES) == ("Skip", 0)
    waiting = pod(**{c.POD_DRAIN_LABEL: "wait-completed"})
    assert drain.pod_drain(waiting, rules, NAMESPACES) == ("WaitCompleted", 0)
    # A value the label does not know leaves the pod to the rules.
    unknown = pod(**{c.POD_DRAIN_LABEL: "later"})
    assert drain.pod_drain(unknown, rules, NAMESPACES) == ("Drain", 5)


def test_the_first_rule_by_name_selecting_the_pod_decides() -> None:
    rules = drain.machine_rules(
        [
            rule("z-default", "Drain", 1),
            rule("m-db", "Drain", 10, pods=[{"selector": {"matchLabels": {"app": "db"}}}]),
            rule(
                "a-system",
                "Skip",
                pods=[
                    {
                        "namespaceSelector": {
                            "matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]
                        }
                    }
                ],
            ),
            rule(
                "b-batch",
                "WaitCompleted",
                7,
                pods=[
                    {
                        "selector": {"matchLabels": {"app": "batch"}},
                        "namespaceSelector": {"matchLabels": {"team": "a"}},
                    }
                ],
            ),
        ],
        MACHINE,
        CLUSTER,
    )
    assert drain.pod_drain(pod(app="db"), rules, NAMESPACES) == ("Drain", 10)
    assert drain.pod_drain(pod(namespace="kube-system", app="db"), rules, NAMESPACES) == (
        "Skip",
        0,
    )
    # As upstream's: a WaitCompleted rule's order is not used.
    assert drain.pod_drain(pod(app="batch"), rules, NAMESPACES) == ("WaitCompleted", 0)
    assert drain.pod_drain(pod(app="web"), rules, NAMESPACES) == ("Drain", 1)
    assert drain.pod_drain(pod(app="web"), [], NAMESPACES) == ("Drain", 0)


@pytest.mark.parametrize(
    "expression",
    [
        {"key": "a", "operator": "Equals", "values": ["x"]},
        {"key": "a", "operator": "In"},
        {"key": "a", "operator": "Exists", "values": ["x"]},
    ],
)
def test_an_invalid_selector_of_any_rule_fails_the_drain(expression: dict[str, Any]) -> None:
    bad = rule("bad", "Skip", pods=[{"selector": {"matchExpressions": [expression]}}])
    with pytest.raises(drain.DrainError, match="MachineDrainRule bad"):
        drain.machine_rules([rule("good", "Drain"), bad], MACHINE, CLUSTER)


def test_a_rule_it_cannot_apply_fails_the_drain() -> None:
    with pytest.raises(drain.DrainError, match=r"unknown spec\.drain\.behavior"):
        drain.pod_drain(pod(), [rule("odd", "Later")], NAMESPACES)
    with pytest.raises(drain.DrainError, match="Namespace not found"):
        drain.pod_drain(pod(namespace="gone"), [rule("a", "Drain")], NAMESPACES)


def test_message_names_the_pods_ordered_later() -> None:
    result = drain.DrainResult(
        remaining=["apps/a", "apps/b", "apps/c"],
        evict_later=["apps/b"],
        complete_later=["apps/c"],
    )
    assert result.message() == (
        "Draining Node: 3 pods remaining, evicted after those: apps/b,"
        " waited for after those: apps/c"
    )
