"""A pool pass's Machine facts: what they say, and that a pass reuses them only for the same
Machine version (``controllers.machinepool.facts``)."""

from __future__ import annotations

from typing import Any

from machinepool.api import constants as c
from machinepool.api.views import MachineView
from machinepool.controllers.machinepool.facts import FactsCache, MachineFacts
from machinepool.runtime import KeyMemory, ObjectKey

POOL = ObjectKey("ns", "pool")


def machine(name: str, version: str, *, ready: str = "True", **extra: Any) -> MachineView:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": version},
        "spec": {"providerID": f"sim:///a/{name}", "version": "v1.33.4"},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }
    for key, value in extra.items():
        obj[key] = {**obj.get(key, {}), **value}
    return MachineView(obj)


def test_facts_say_what_a_pass_reads() -> None:
    owned = machine(
        "m1",
        "1",
        metadata={
            "name": "m1",
            "uid": "uid-m1",
            "resourceVersion": "1",
            "annotations": {c.PAUSED_ANNOTATION: ""},
            "deletionTimestamp": "2026-11-29T00:00:00Z",
            "ownerReferences": [
                {"kind": "Cluster", "uid": "cluster-uid"},
                {"kind": "MachinePool", "uid": "pool-uid", "controller": True},
            ],
        },
        status={"nodeInfo": {"kubeletVersion": "v1.34.4"}},
    )
    facts = MachineFacts.of(owned)
    assert (facts.name, facts.provider_id) == ("m1", "sim:///a/m1")
    assert facts.controller_uid == "pool-uid", "the controller, not the first owner"
    assert facts.deleting
    assert facts.paused
    assert facts.version == "v1.34.4", "the Node's kubelet version over spec.version"
    assert facts.condition_is("Ready", "True")
    assert not facts.condition_is("UpToDate", "True")

    bare = MachineFacts.of(MachineView({"metadata": {"name": "m2"}, "spec": {"version": "v1"}}))
    assert (bare.controller_uid, bare.provider_id, bare.version) == ("", "", "v1")
    assert not bare.deleting
    assert not bare.paused


def test_a_pass_reuses_facts_of_the_same_version_only() -> None:
    cache = FactsCache()
    first = cache.for_pass()(machine("m1", "1"))

    same = cache.for_pass()(machine("m1", "1", ready="False"))
    assert same is first, "an unchanged resourceVersion is not read again"

    changed = cache.for_pass()(machine("m1", "2", ready="False"))
    assert changed is not first
    assert changed.condition_is("Ready", "False")


def test_facts_a_pass_did_not_ask_for_are_dropped() -> None:
    cache = FactsCache()
    one = cache.for_pass()
    kept, gone = one(machine("m1", "1")), one(machine("m2", "1"))

    two = cache.for_pass()
    assert two(machine("m1", "1")) is kept
    three = cache.for_pass()
    assert three(machine("m2", "1")) is not gone, "not asked for in the pass between"
    assert three(machine("m1", "1")) is kept, "asked for in every pass"

    memory = KeyMemory(FactsCache)
    kept = memory.of(POOL).for_pass()(machine("m1", "1"))
    memory.forget(POOL)
    assert memory.of(POOL).for_pass()(machine("m1", "1")) is not kept, "a pool gone is forgotten"


def test_a_machine_without_a_version_is_never_taken_from_the_cache() -> None:
    cache = FactsCache()
    facts = cache.for_pass()
    unstored = MachineView({"metadata": {"name": "m1", "uid": "u"}})
    assert facts(unstored) is not facts(unstored)
