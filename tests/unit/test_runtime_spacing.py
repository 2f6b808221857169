"""The spacing of big objects' progress writes (``runtime.reconcile.spacing``), and what the core
MachinePool controller and the pool engine call progress and what news."""

from __future__ import annotations

import copy
from typing import Any

from machinepool.api import constants as c
from machinepool.controllers.machinepool import status as core_status
from machinepool.providers.pool import report
from machinepool.runtime import ProgressSpacing, reports_progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_big_objects_progress_waits_its_size_and_a_small_one_a_second() -> None:
    clock = Clock()
    spacing = ProgressSpacing(clock)
    assert spacing.interval(0) == 0.0, "an object listing nothing has no progress to space"
    assert spacing.interval(10) == 1.0
    assert spacing.interval(99) == 1.0
    assert spacing.interval(100) == 3.0
    assert spacing.interval(500) == 15.0
    assert spacing.interval(10_000) == 30.0  # the longest
    assert spacing.wait(None, 500) == 0.0, "never written: it may go"
    last = spacing.now()
    clock.now += 5
    assert spacing.wait(last, 500) == 10.0
    assert spacing.wait(last, 50) == 0.0, "a small object's second is over"
    clock.now += 10
    assert spacing.wait(last, 500) == 0.0


def _settled(obj: dict[str, Any]) -> bool:
    return bool(obj["status"].get("done"))


def _obj(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "big", "generation": 3},
        "spec": {"replicas": 5, "providerIDList": ["a"]},
        "status": {"observedGeneration": 3, **status},
    }


def _progress(before: dict[str, Any], after: dict[str, Any]) -> bool:
    return reports_progress(
        before, after, spec_fields=("providerIDList",), settled=_settled, news=("Available",)
    )


def test_progress_is_a_list_or_a_count_moving_and_news_is_everything_else() -> None:
    before = _obj(count=1, conditions=[{"type": "Available", "status": "True"}])
    after = copy.deepcopy(before)
    after["spec"]["providerIDList"].append("b")
    after["status"]["count"] = 2
    assert _progress(before, after)

    cases: dict[str, Any] = {
        "metadata": lambda o: o["metadata"].setdefault("labels", {"x": "y"}),
        "other spec": lambda o: o["spec"].update(replicas=6),
        "deleting": lambda o: o["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"),
        "reaches the end": lambda o: o["status"].update(done=True),
        "a news condition turns": lambda o: o["status"]["conditions"][0].update(status="False"),
    }
    for name, change in cases.items():
        news = copy.deepcopy(after)
        change(news)
        if name == "deleting":
            before_deleting = copy.deepcopy(before)
            before_deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            assert not _progress(before_deleting, news), name
        else:
            assert not _progress(before, news), name
    left = copy.deepcopy(before)
    left["status"]["done"] = True
    assert not _progress(left, after), "leaving the end"
    unobserved = copy.deepcopy(before)
    unobserved["metadata"]["generation"] = 4
    assert not _progress(unobserved, copy.deepcopy(unobserved)), "a new generation"


def _machine_pool(replicas: int, ready: int, *, up_to_date: int | None = None) -> dict[str, Any]:
    ids = [f"sim:///z/i-{n}" for n in range(replicas)]
    return {
        "metadata": {"name": "big", "namespace": "ns", "generation": 2},
        "spec": {"replicas": replicas, "providerIDList": ids},
        "status": {
            "observedGeneration": 2,
            "phase": c.PHASE_RUNNING if ready == replicas else c.PHASE_SCALING_UP,
            "replicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "upToDateReplicas": replicas if up_to_date is None else up_to_date,
            "nodeRefs": [{"name": f"n-{n}"} for n in range(ready)],
            "initialization": {"infrastructureProvisioned": True},
            "conditions": [{"type": c.AVAILABLE_CONDITION, "status": "True"}],
        },
    }


def test_a_machine_pool_reports_its_replicas_turning_ready_as_progress_and_its_end_as_news() -> (
    None
):
    before, after = _machine_pool(1000, 400), _machine_pool(1000, 450)
    assert core_status.progress_only(before, after)
    assert not core_status.progress_only(before, _machine_pool(1000, 1000)), "the end"
    assert core_status.settled(_machine_pool(1000, 1000))
    assert not core_status.settled(_machine_pool(1000, 1000, up_to_date=999)), "rolling out"
    failed = copy.deepcopy(after)
    failed["status"]["deprecated"] = {"v1beta1": {"failureReason": "InvalidConfiguration"}}
    assert not core_status.progress_only(before, failed), "a failure"
    unavailable = copy.deepcopy(after)
    unavailable["status"]["conditions"][0]["status"] = "False"
    assert not core_status.progress_only(before, unavailable), "Available turning"


def _sim_pool(instances: int, **conditions: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "big", "namespace": "ns", "generation": 1},
        "spec": {"providerIDList": [f"sim:///z/i-{n}" for n in range(instances)]},
        "status": {
            "observedGeneration": 1,
            "replicas": instances,
            "instances": [{"instanceID": f"i-{n}", "state": "running"} for n in range(instances)],
            "conditions": [{"type": t, "status": s} for t, s in conditions.items()],
        },
    }


def test_an_infra_pool_reports_instances_coming_as_progress_and_its_end_as_news() -> None:
    scaling = {c.READY_CONDITION: "True", c.SCALING_UP_CONDITION: "True"}
    assert report.progress_only(_sim_pool(300, **scaling), _sim_pool(400, **scaling))
    done = {c.READY_CONDITION: "True", c.SCALING_UP_CONDITION: "False"}
    assert not report.progress_only(_sim_pool(300, **done), _sim_pool(400, **scaling)), "start"
    assert not report.progress_only(_sim_pool(300, **scaling), _sim_pool(400, **done)), "end"
    booting = _sim_pool(400, **done)
    booting["status"]["instances"][0]["state"] = "pending"
    assert report.progress_only(_sim_pool(300, **scaling), booting), "made, not yet running"
    blocked = {c.READY_CONDITION: "False", c.SCALING_UP_CONDITION: "True"}
    assert not report.progress_only(_sim_pool(300, **scaling), _sim_pool(300, **blocked))
    capacity = _sim_pool(400, **scaling)
    capacity["status"]["capacity"] = {"cpu": "2"}
    assert not report.progress_only(_sim_pool(300, **scaling), capacity), "capacity"


def test_a_write_is_held_only_when_it_reports_progress_and_it_is_not_its_turn() -> None:
    clock = Clock()
    spacing = ProgressSpacing(clock)
    before, after = _obj(count=1), _obj(count=2)
    assert spacing.hold(None, 500, before, after, _progress) == 0.0, "never written"
    last = spacing.now()
    clock.now += 5
    assert spacing.hold(last, 500, before, after, _progress) == 10.0
    assert spacing.hold(last, 500, before, _obj(count=2, done=True), _progress) == 0.0, "news"
    assert spacing.hold(last, 500, before, _obj(count=1), _progress) == 0.0, "nothing to write"
    assert spacing.hold(last, 50, before, after, _progress) == 0.0, "a small object"
