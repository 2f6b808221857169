"""Rollouts by the core: the decision (``plan_rollout``) in a modelled world, and its budgets.

The world: a pool of Machines, a provider that replaces marked and deleted Machines at once
(as the pool engine does) or only once a Machine is gone (as a pool that ignores the mark),
Nodes that take some ticks to boot, and a Machine controller that drains a deleting Machine
for some ticks. Any order of these events must keep the Ready Machines at or above the floor
by the rollout's own doing, mark no more than the surge, and end with every Machine up to
date and none marked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from machinepool.api import constants as c
from machinepool.api.rollingupdate import InvalidStrategy, rollout_budget_errors, rollout_budgets
from machinepool.api.views import MachineView
from machinepool.controllers.machinepool.rollout import (
    RolloutMachine,
    plan_rollout,
    with_own_writes,
)
from machinepool.runtime import Obj


@dataclass
class _Machine:
    name: str
    up_to_date: bool
    boot_left: int
    drain_left: int
    deleting: bool = False
    marked: bool = False
    delete_requested: bool = False
    broken: bool = False
    """Its Node never becomes Ready."""

    @property
    def ready(self) -> bool:
        return self.boot_left <= 0 and not self.broken

    def view(self) -> RolloutMachine:
        return RolloutMachine(
            name=self.name,
            up_to_date=self.up_to_date,
            ready=self.ready,
            deleting=self.deleting,
            marked=self.marked,
            delete_requested=self.delete_requested,
            created=self.name,
        )


@dataclass
class _World:
    replicas: int
    surge: int
    unavailable: int
    boot: int
    drain: int
    early: bool
    machines: dict[str, _Machine] = field(default_factory=dict)
    made: int = 0

    def add(self, *, up_to_date: bool, boot_left: int, **kw: bool) -> None:
        self.made += 1
        name = f"m{self.made:04d}"
        self.machines[name] = _Machine(name, up_to_date, boot_left, self.drain, **kw)

    @property
    def floor(self) -> int:
        return self.replicas - self.unavailable

    def available(self) -> int:
        return sum(1 for m in self.machines.values() if m.view().available)

    def rollout(self) -> None:
        before, marked_before = self.available(), self._marked()
        step = plan_rollout(
            [m.view() for m in self.machines.values()],
            self.replicas,
            self.surge,
            self.unavailable,
        )
        for name in step.mark:
            self.machines[name].marked = True
        for name in step.delete:
            self.machines[name].deleting = True
        assert self.available() >= min(self.floor, before), step
        assert self._marked() <= max(self.surge, marked_before), step
        assert not set(step.mark) & {m.name for m in self.machines.values() if m.up_to_date}, (
            "only outdated Machines are replaced"
        )

    def provider(self) -> None:
        if self.early:  # the pool engine: a marked or deleting Machine is not counted
            counted = [m for m in self.machines.values() if not m.deleting and not m.marked]
        else:
            counted = list(self.machines.values())
        for _ in range(self.replicas - len(counted)):
            self.add(up_to_date=True, boot_left=self.boot)

    def tick(self) -> None:
        for m in list(self.machines.values()):
            m.boot_left -= 1
            if m.deleting:
                m.drain_left -= 1
                if m.drain_left <= 0:
                    del self.machines[m.name]

    def _marked(self) -> int:
        return sum(1 for m in self.machines.values() if m.marked and not m.deleting)

    def done(self) -> bool:
        live = [m for m in self.machines.values() if not m.deleting]
        return all(m.up_to_date and not m.marked for m in live)


_EVENTS = ("rollout", "provider", "tick")


@st.composite
def _worlds(draw: st.DrawFn) -> _World:
    early = draw(st.booleans())
    surge = draw(st.integers(0, 3))
    # A provider that replaces only once a Machine is gone gains nothing from a mark: it
    # needs room below replicas (documented: such a pool wants rollout-max-unavailable).
    unavailable = draw(st.integers(0 if early else 1, 2))
    if surge == 0 and unavailable == 0:
        unavailable = 1
    replicas = draw(st.integers(1, 8))
    world = _World(
        replicas=replicas,
        surge=surge,
        unavailable=unavailable,
        boot=draw(st.integers(0, 4)),
        drain=draw(st.integers(1, 3)),
        early=early,
    )
    for i in range(replicas):
        up_to_date = draw(st.booleans()) if i else False
        world.add(
            up_to_date=up_to_date,
            boot_left=0,
            delete_requested=draw(st.booleans()),
            # Outdated Nodes may be dead for good; an up-to-date one that never serves would
            # stall any rollout with no room below the floor (a health check's work).
            broken=not up_to_date and draw(st.integers(0, 4)) == 0,
        )
    return world


@settings(max_examples=300, deadline=None)
@given(_worlds(), st.lists(st.sampled_from(_EVENTS), max_size=60))
def test_any_order_of_events_keeps_the_floor_and_the_rollout_converges(
    world: _World, events: list[str]
) -> None:
    for event in events:
        getattr(world, event)()
    for _ in range(400):  # then a fair schedule: the rollout must finish
        if world.done():
            break
        for event in _EVENTS:
            getattr(world, event)()
    assert world.done(), world


def _machine(
    name: str, *, up_to_date: bool = False, ready: bool = True, **kw: bool
) -> RolloutMachine:
    return RolloutMachine(name=name, up_to_date=up_to_date, ready=ready, created=name, **kw)


def test_a_surge_marks_the_oldest_outdated_machine_and_deletes_it_once_a_replacement_serves() -> (
    None
):
    pool = [_machine("a"), _machine("b"), _machine("c")]
    first = plan_rollout(pool, 3, 1, 0)
    assert (first.mark, first.delete) == (["a"], [])
    marked = [_machine("a", marked=True), *pool[1:], _machine("d", up_to_date=True, ready=False)]
    waiting = plan_rollout(marked, 3, 1, 0)
    assert waiting.mark == waiting.delete == []
    assert "1 marked" in waiting.waiting
    served = [*marked[:3], _machine("d", up_to_date=True)]
    moved = plan_rollout(served, 3, 1, 0)
    assert (moved.delete, moved.mark) == (["a"], ["b"])


def test_delete_machine_annotated_and_unready_machines_go_first() -> None:
    pool = [_machine("a"), _machine("b", ready=False), _machine("c", delete_requested=True)]
    step = plan_rollout(pool, 3, 1, 1)
    assert step.mark == ["c"]
    assert step.delete == ["b"]


def test_max_unavailable_without_surge_deletes_within_the_floor() -> None:
    pool = [_machine("a"), _machine("b"), _machine("c"), _machine("d")]
    step = plan_rollout(pool, 4, 0, 1)
    assert (step.mark, step.delete) == ([], ["a"])
    assert "3 Ready of at least 3" in step.waiting


def test_up_to_date_pools_do_nothing() -> None:
    step = plan_rollout([_machine("a", up_to_date=True)], 1, 1, 0)
    assert (step.mark, step.delete, step.waiting) == ([], [], "")


def test_budgets_default_to_one_surge_and_none_unavailable_and_scale_as_a_deployment() -> None:
    assert rollout_budgets({}, 10) == (1, 0)
    annotations = {
        c.ROLLOUT_MAX_SURGE_ANNOTATION: "25%",
        c.ROLLOUT_MAX_UNAVAILABLE_ANNOTATION: "25%",
    }
    assert rollout_budgets(annotations, 10) == (3, 2)
    assert rollout_budgets({c.ROLLOUT_MAX_SURGE_ANNOTATION: "0"}, 10) == (0, 1)


def test_bad_budgets_name_the_annotation_and_the_fix() -> None:
    with pytest.raises(InvalidStrategy, match="rollout-max-surge"):
        rollout_budgets({c.ROLLOUT_MAX_SURGE_ANNOTATION: "lots"}, 3)
    errors = rollout_budget_errors({c.ROLLOUT_MAX_UNAVAILABLE_ANNOTATION: "-1"})
    assert [f for f, _, _ in errors] == [
        f"metadata.annotations[{c.ROLLOUT_MAX_UNAVAILABLE_ANNOTATION}]"
    ]
    both_zero = rollout_budget_errors({c.ROLLOUT_MAX_SURGE_ANNOTATION: "0"})
    assert "both 0" in both_zero[0][2]
    assert rollout_budget_errors({c.ROLLOUT_MAX_SURGE_ANNOTATION: "50%"}) == []


def _obj(name: str, version: int, **metadata: object) -> Obj:
    meta = {"name": name, "uid": f"uid-{name}", "resourceVersion": str(version), **metadata}
    return {"metadata": meta, "spec": {}, "status": {}}


def test_the_rollout_decides_from_its_own_writes_not_a_cache_that_lags_them() -> None:
    # The pass before deleted ``c`` (its replacement ``d`` serves) and marked ``a``; the
    # Machine watch brought the mark of ``a`` but not yet the delete of ``c``.
    mark = {"annotations": {c.REPLACE_MACHINE_ANNOTATION: "rollout"}}
    cached = [_obj("a", 12, **mark), _obj("b", 3), _obj("c", 10, **mark), _obj("d", 9)]
    stale = [
        _machine("a", marked=True),
        _machine("b"),
        _machine("c", marked=True),
        _machine("d", up_to_date=True),
    ]
    assert plan_rollout(stale, 3, 1, 0).delete == ["a"], "a stale view takes a second Machine"
    rolled: dict[str, Obj | None] = {
        "uid-a": _obj("a", 12, **mark),
        "uid-c": _obj("c", 11, deletionTimestamp="2026-12-04T20:00:00Z", **mark),
    }
    fresh = with_own_writes([MachineView(o) for o in cached], rolled)
    assert [m.metadata.deletion_timestamp is not None for m in fresh] == [False, False, True, False]
    assert set(rolled) == {"uid-c"}, "a write the cache shows is forgotten"
    seen = [
        RolloutMachine(
            name=m.metadata.name or "",
            up_to_date=m.metadata.name == "d",
            ready=True,
            deleting=m.metadata.deletion_timestamp is not None,
            marked=True,
            created=m.metadata.name or "",
        )
        for m in fresh
    ]
    assert plan_rollout(seen, 3, 1, 0).delete == [], "one Machine drains at a time"
    # A Machine deleted outright is left out until the cache hears; then it is forgotten.
    gone: dict[str, Obj | None] = {"uid-b": None}
    assert [m.metadata.name for m in with_own_writes([MachineView(o) for o in cached], gone)] == [
        "a",
        "c",
        "d",
    ]
    with_own_writes([MachineView(cached[0])], gone)
    assert gone == {}
