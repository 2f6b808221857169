"""Conditions keep their transition time and order; merge patches hold only what changed."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from machinepool.api.conditions import (
    get_condition,
    is_true,
    mirror_v1beta1,
    remove_condition,
    set_condition,
    set_v1beta1_condition,
    v1beta1_summary,
)
from machinepool.runtime.kube.client import copy_obj
from machinepool.runtime.kube.patch import (
    _rebase_status,
    apply_merge_patch,
    merge_patch,
    rebase_conditions,
)


def test_transition_time_changes_only_when_status_flips() -> None:
    conds: list[dict[str, Any]] = []
    assert set_condition(conds, "Ready", False, "Waiting", "waiting for nodes")
    first = get_condition(conds, "Ready")
    assert first is not None
    first["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    assert set_condition(conds, "Ready", False, "StillWaiting", "still waiting")
    assert conds[0]["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert not set_condition(conds, "Ready", False, "StillWaiting", "still waiting")
    assert set_condition(conds, "Ready", True, "Ready")
    assert conds[0]["lastTransitionTime"] != "2020-01-01T00:00:00Z"
    assert is_true(conds, "Ready")


def test_reason_defaults_to_status_and_order_is_stable() -> None:
    conds: list[dict[str, Any]] = []
    set_condition(conds, "B", True, "")
    set_condition(conds, "A", True, "Fine")
    assert [c["type"] for c in conds] == ["B", "A"]
    assert conds[0]["reason"] == "True"
    assert remove_condition(conds, "B")
    assert not remove_condition(conds, "B")


def test_v1beta1_ready_first_and_severity_only_when_not_true() -> None:
    conds: list[dict[str, Any]] = []
    set_v1beta1_condition(conds, "InfrastructureReady", False, "Waiting", "infra", "Info")
    set_v1beta1_condition(conds, "BootstrapReady", True)
    set_v1beta1_condition(conds, "Ready", False, "Waiting", "", "Info")
    assert [c["type"] for c in conds] == ["Ready", "BootstrapReady", "InfrastructureReady"]
    assert "severity" not in conds[1]
    assert conds[2]["severity"] == "Info"


# Merge patch cannot carry nulls inside values (null means "remove"), so none are generated.
json_values = st.recursive(
    st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=10,
)
no_null_dicts = st.dictionaries(st.text(max_size=3), json_values, max_size=4)


@given(no_null_dicts, no_null_dicts)
def test_merge_patch_turns_before_into_after(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert apply_merge_patch(before, merge_patch(before, after)) == apply_merge_patch({}, after)


json_objects = st.dictionaries(
    st.text(max_size=3), json_values | st.none() | st.floats(allow_nan=False), max_size=4
)


@given(json_objects)
def test_copy_obj_is_an_equal_object_sharing_nothing_mutable(obj: dict[str, Any]) -> None:
    copied = copy_obj({"nested": obj, "list": [obj]})
    assert copied == {"nested": obj, "list": [obj]}
    copied["nested"]["added"] = 1
    copied["list"].append(2)
    assert "added" not in obj
    assert copy_obj("text") == "text"


def test_merge_patch_is_empty_without_changes() -> None:
    obj = {"spec": {"replicas": 3, "list": [1, 2]}, "metadata": {"labels": {"a": "b"}}}
    assert merge_patch(obj, obj) == {}
    assert merge_patch(obj, {**obj, "spec": {"replicas": 4, "list": [1, 2]}}) == {
        "spec": {"replicas": 4}
    }


def _cond(type_: str, status: str = "True", message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": status, "message": message}


def test_rebase_keeps_their_conditions_and_applies_ours() -> None:
    """A lost lock is rebased type by type: what we changed, added or removed is ours; a
    condition another writer set meanwhile (a health check's mark) survives our patch."""
    before = [_cond("Ready", "False"), _cond("NodeHealthy"), _cond("Stale")]
    after = [_cond("Ready"), _cond("NodeHealthy"), _cond("Deleting", "False")]
    theirs = [
        _cond("Ready", "False"),
        _cond("NodeHealthy", "False", "theirs"),
        _cond("Stale"),
        _cond("HealthCheckSucceeded", "False"),
    ]
    assert rebase_conditions(before, after, theirs) == [
        _cond("Ready"),
        _cond("NodeHealthy", "False", "theirs"),
        _cond("HealthCheckSucceeded", "False"),
        _cond("Deleting", "False"),
    ]


def test_rebase_without_changes_of_ours_is_theirs() -> None:
    theirs = [_cond("Ready", "False"), _cond("OwnerRemediated", "False")]
    assert rebase_conditions([_cond("Ready")], [_cond("Ready")], theirs) == theirs


POOL_INPUTS = ("BootstrapReady", "InfrastructureReady", "ReplicasReady")


def test_v1beta1_summary_picks_the_most_severe_false() -> None:
    conds = [
        {"type": "BootstrapReady", "status": "False", "severity": "Info", "reason": "A"},
        {"type": "InfrastructureReady", "status": "False", "severity": "Error", "reason": "B"},
        {"type": "ReplicasReady", "status": "True"},
    ]
    got = v1beta1_summary(conds, POOL_INPUTS)
    assert got is not None
    assert (got["status"], got["reason"], got["severity"]) == ("False", "B", "Error")


def test_v1beta1_summary_ties_go_to_the_first_input_listed() -> None:
    conds = [
        {"type": "ReplicasReady", "status": "False", "severity": "Info", "reason": "R"},
        {"type": "BootstrapReady", "status": "False", "severity": "Info", "reason": "B"},
    ]
    got = v1beta1_summary(conds, POOL_INPUTS)
    assert got is not None
    assert got["reason"] == "B"


def test_v1beta1_summary_true_outweighs_unknown_and_nothing_leaves_ready_alone() -> None:
    """Upstream's merge ranks True above Unknown; with no input present it sets no Ready."""
    conds = [
        {"type": "BootstrapReady", "status": "True"},
        {"type": "InfrastructureReady", "status": "Unknown", "reason": "U"},
    ]
    got = v1beta1_summary(conds, POOL_INPUTS)
    assert got is not None
    assert got["status"] == "True"
    assert v1beta1_summary([{"type": "Other", "status": "False"}], POOL_INPUTS) is None


def test_v1beta1_summary_counts_steps_only_while_only_step_inputs_are_present() -> None:
    steps = ("BootstrapReady", "InfrastructureReady")
    conds = [
        {"type": "InfrastructureReady", "status": "False", "severity": "Info", "reason": "W"},
    ]
    got = v1beta1_summary(conds, ("InfrastructureReady", "BootstrapReady", "X"), steps=steps)
    assert got is not None
    assert (got["reason"], got["message"]) == ("W", "0 of 2 completed")
    conds.append({"type": "X", "status": "True"})
    got = v1beta1_summary(conds, ("InfrastructureReady", "BootstrapReady", "X"), steps=steps)
    assert got is not None
    assert got["message"] == ""


def test_mirror_v1beta1_uses_fallback_without_source_condition() -> None:
    conds: list[dict[str, Any]] = []
    mirror_v1beta1(conds, "BootstrapReady", {}, False, "WaitingForDataSecret")
    assert conds[0]["reason"] == "WaitingForDataSecret"
    assert conds[0]["severity"] == "Info"
    mirror_v1beta1(conds, "BootstrapReady", {}, True, "WaitingForDataSecret")
    assert conds[0]["status"] == "True"


def test_mirror_v1beta1_copies_the_sources_ready() -> None:
    source = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "R"}]}}
    conds: list[dict[str, Any]] = []
    mirror_v1beta1(conds, "InfrastructureReady", source, True, "Waiting")
    assert (conds[0]["status"], conds[0]["reason"]) == ("False", "R")


def test_a_lost_status_lock_keeps_their_v1beta1_conditions_too() -> None:
    """A MachineHealthCheck's v1beta1 mark on a Machine survives the Machine controller's
    rebased write of its own v1beta1 conditions."""

    def v1(*conds: dict[str, Any]) -> dict[str, Any]:
        return {"deprecated": {"v1beta1": {"conditions": list(conds)}}}

    ready_false = {"type": "Ready", "status": "False"}
    ready_true = {"type": "Ready", "status": "True"}
    mark = {"type": "HealthCheckSucceeded", "status": "False"}
    got = _rebase_status(v1(ready_false), v1(ready_true), v1(ready_false, mark))
    assert got["deprecated"]["v1beta1"]["conditions"] == [ready_true, mark]
