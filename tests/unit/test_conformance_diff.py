"""The conformance suite's comparison: what it normalises away, how it names differences,
and how docs/upstream-differences.md rows match them."""

from __future__ import annotations

from tests.conformance.differential import (
    Allowed,
    allowed_differences,
    compare,
    differences,
    normalise,
)


def test_normalise_drops_what_differs_by_construction() -> None:
    obj = {
        "metadata": {
            "name": "pool-ab12c-1",
            "namespace": "create-up",
            "uid": "u",
            "resourceVersion": "7",
            "labels": {"cluster.x-k8s.io/watch-filter": "upstream"},
        },
        "status": {
            "conditions": [{"type": "Ready", "lastTransitionTime": "t"}],
            "nodeInfo": {"bootID": "x", "kubeletVersion": "v1.34.0"},
        },
    }
    out = normalise(obj, {"create-up": "NAMESPACE", "pool-ab12c-": "pool-UID-"})
    assert out == {
        "metadata": {
            "name": "pool-UID-1",
            "namespace": "NAMESPACE",
            "labels": {"cluster.x-k8s.io/watch-filter": "WATCH-FILTER-VALUE"},
        },
        "status": {"conditions": [{"type": "Ready"}], "nodeInfo": {"kubeletVersion": "v1.34.0"}},
    }


def test_conditions_compare_by_type_and_other_lists_by_position() -> None:
    up = {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}
    ours = {"conditions": [{"type": "B", "status": "False"}, {"type": "A", "status": "True"}]}
    assert list(differences(up, ours, "X")) == [("X.conditions[B].status", "True", "False")]
    assert list(differences({"l": [1, 2]}, {"l": [1, 3]}, "X")) == [("X.l[1]", 2, 3)]


def test_a_listed_pattern_matches_only_its_paths() -> None:
    rule = Allowed("Machines[*].status.nodeInfo", "why")
    assert rule.matches("Machines[0].status.nodeInfo")
    assert rule.matches("Machines[12].status.nodeInfo")
    assert not rule.matches("Machines[0].status.nodeInfoX")
    assert not rule.matches("MachinePool.status.nodeInfo")


def test_compare_reports_unlisted_and_counts_list_lengths() -> None:
    up = {"MachinePool": {"a": 1, "b": 1}, "Machines": [{}]}
    ours = {"MachinePool": {"a": 2, "b": 2}, "Machines": [{}, {}]}
    unlisted, used = compare(up, ours, [Allowed("MachinePool.a", "why")])
    assert used == {"MachinePool.a"}
    assert unlisted == ["MachinePool.b: upstream 1, ours 2", "Machines: upstream has 1, ours 2"]


def test_the_differences_page_parses_into_reasoned_rows() -> None:
    rows = allowed_differences()
    assert rows, "docs/upstream-differences.md lists the known differences"
    assert all(row.reason for row in rows)
    assert len({row.pattern for row in rows}) == len(rows), "each pattern once"


def test_observed_generation_is_compared_as_current_or_behind() -> None:
    obj = {
        "metadata": {"generation": 8},
        "status": {"observedGeneration": 8, "conditions": [{"type": "A", "observedGeneration": 7}]},
    }
    assert normalise(obj, {}) == {
        "metadata": {},
        "status": {
            "observedGeneration": "current",
            "conditions": [{"type": "A", "observedGeneration": "behind"}],
        },
    }


def test_a_scenario_row_matches_in_its_scenario_only() -> None:
    rule = Allowed("late: MachinePool.status.x", "why")
    assert rule.matches("MachinePool.status.x", "late")
    assert not rule.matches("MachinePool.status.x", "early")
    assert Allowed("MachinePool.status.x", "Sometimes: timing").sometimes
