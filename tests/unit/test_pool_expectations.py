"""The pool engine's memory of its writes to one pool, until its caches show them."""

from __future__ import annotations

from typing import Any

from tests.support.clock import ManualClock

from machinepool.api.views import MachineView
from machinepool.providers.pool.expectations import Expectations


def machine(name: str, uid: str, deleting: bool = False) -> MachineView:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-26T08:00:00Z"
    return MachineView({"metadata": meta, "spec": {}})


def no_machine(name: str) -> MachineView | None:
    return None


def test_a_deleted_machine_is_expected_until_the_cache_shows_it_going() -> None:
    expect = Expectations(clock=ManualClock())
    expect.deleted("m-1", "u1")
    cache = {"m-1": machine("m-1", "u1")}
    assert expect.unmet(machine=cache.get, instances={}) == ["Machine m-1 to be deleted"]
    cache["m-1"] = machine("m-1", "u1", deleting=True)
    assert expect.unmet(machine=cache.get, instances={}) == []
    assert not expect.pending


def test_a_machine_gone_or_replaced_under_its_name_meets_the_expectation() -> None:
    expect = Expectations(clock=ManualClock())
    expect.deleted("gone", "u1")
    expect.deleted("again", "u2")
    cache = {"again": machine("again", "u3")}
    assert expect.unmet(machine=cache.get, instances={}) == []


def test_a_created_instance_is_expected_until_listed() -> None:
    expect = Expectations(clock=ManualClock())
    expect.created(["i-2", "i-3"])
    assert expect.unmet(machine=no_machine, instances={"i-1": True, "i-2": True}) == [
        "instance i-3 to be listed"
    ]
    assert expect.unmet(machine=no_machine, instances={"i-3": True}) == []


def test_a_step_the_caches_never_show_is_given_up_after_the_ttl() -> None:
    clock = ManualClock()
    expect = Expectations(ttl=60, clock=clock)
    expect.created(["i-9"])
    clock.now = 59.0
    assert expect.unmet(machine=no_machine, instances={}) != []
    clock.now = 60.0
    assert expect.unmet(machine=no_machine, instances={}) == []
    assert not expect.pending


def test_a_terminated_instance_is_expected_until_unlisted_or_listed_as_terminated() -> None:
    expect = Expectations(clock=ManualClock())
    expect.terminated("i-1")
    expect.terminated("i-2")
    listed = {"i-1": True, "i-2": True}
    assert expect.unmet(machine=no_machine, instances=listed) == [
        "instance i-1 to be listed as terminated",
        "instance i-2 to be listed as terminated",
    ]
    assert expect.unmet(machine=no_machine, instances={"i-2": False}) == []
