"""End to end: rolling replacement, failed instances, chosen victims, deletion, bad input."""

from __future__ import annotations

from typing import Any

import pytest
from tests.e2e.conftest import System
from tests.support import eventually
from tests.support.conditions import condition, is_true
from tests.support.resources import MACHINE_POOLS, MACHINES, SIM_MACHINE_POOLS

from machinepool.api import constants as c
from machinepool.runtime import FuncHandler, Invalid, Obj


def _pool_condition(system: System, name: str, type_: str) -> dict[str, Any]:
    return condition(system.watched["simmachinepools"].get(name, system.namespace), type_)


async def test_version_change_rolls_without_dropping_below_replicas(system: System) -> None:
    await system.create_pool("workers", 3)
    await system.until(lambda: system.pool_running("workers", 3), "3 Ready nodes")
    lowest = [len(system.ready_nodes())]
    # What `kubectl get machinepool` shows as READY counts Ready Machines, which turn Ready a
    # moment after their Nodes: an old Machine must not be deleted before its replacement's
    # Machine is Ready. The Machine watch delivers events in etcd's order, so the count at
    # each event is the count at that revision.
    lowest_ready_machines = [3]

    def record(*_: Obj) -> None:
        lowest[0] = min(lowest[0], len(system.ready_nodes()))

    def record_machines(*_: Obj) -> None:
        ready = [
            m
            for m in system.machines("workers")
            if not m["metadata"].get("deletionTimestamp") and is_true(m, c.READY_CONDITION)
        ]
        lowest_ready_machines[0] = min(lowest_ready_machines[0], len(ready))

    system.nodes.add_handler(FuncHandler(record, lambda _o, n: record(n), record))
    system.watched["machines"].add_handler(
        FuncHandler(record_machines, lambda _o, n: record_machines(n), record_machines)
    )
    new = "v1.34.1"
    patch = {"spec": {"template": {"spec": {"version": new}}}}
    await system.client.patch(MACHINE_POOLS, "workers", patch, system.namespace)
    await system.until(
        lambda: (
            len(system.ready_nodes(new)) == 3
            and len(system.nodes.list()) == 3
            and system.pool_running("workers", 3)
        ),
        "every node on the new version",
    )
    assert lowest[0] >= 3  # maxUnavailable 0
    assert lowest_ready_machines[0] >= 3, "Ready Machines fell below replicas"
    assert all(n["status"]["nodeInfo"]["kubeletVersion"] == new for n in system.nodes.list())


async def test_failed_instance_is_replaced(system: System) -> None:
    await system.create_pool("workers", 2)
    await system.until(lambda: system.pool_running("workers", 2), "2 Ready nodes")
    victim = system.machines("workers")[0]["metadata"]["name"]
    victim_node = system.node_of(victim)
    assert victim_node is not None
    await system.cloud.fail_instance(system.namespace, victim)
    await system.until(
        lambda: (
            system.nodes.get(victim_node["metadata"]["name"]) is None
            and victim not in {m["metadata"]["name"] for m in system.machines("workers")}
            and system.pool_running("workers", 2)
        ),
        "failed instance replaced and its Machine gone",
    )
    records = [r for r in await system.cloud.instances(system.namespace) if r.id == victim]
    assert all(r.forced_state == "terminated" for r in records)


async def test_instances_that_fail_after_boot_are_replaced(system: System) -> None:
    """Instances that join, run Ready, then break (failAfterBootRate) are replaced; once the
    pool stops creating such instances it settles on healthy ones."""
    ran: set[str] = set()

    def seen(node: Obj) -> None:
        if is_true(node, "Ready"):
            ran.add(node["metadata"]["name"])

    system.nodes.add_handler(FuncHandler(add=seen, update=lambda _old, new: seen(new)))
    fragile = {"failAfterBootRate": 1, "failAfterBootWithinSeconds": 2}
    await system.create_pool("workers", 2, sim=fragile)
    await system.until(lambda: len(ran) >= 4, "four instances ran Ready (two of them replacements)")
    patch = {"spec": {"sim": {"failAfterBootRate": 0}}}
    await system.client.patch(SIM_MACHINE_POOLS, "workers", patch, system.namespace)

    async def healthy() -> bool:
        if not system.pool_running("workers", 2):
            return False
        live = [
            r
            for r in await system.cloud.instances(system.namespace)
            if r.forced_state != "terminated"
        ]
        return len(live) == 2 and all(r.fail_at is None for r in live)

    await eventually(healthy, "two Ready instances that do not fail", within=180)


async def test_delete_machine_annotation_picks_the_victim(system: System) -> None:
    await system.create_pool("workers", 3)
    await system.until(lambda: system.pool_running("workers", 3), "3 Ready nodes")
    names = sorted(m["metadata"]["name"] for m in system.machines("workers"))
    chosen = names[-1]  # the newest: Oldest policy alone would not pick it
    annotation = {"metadata": {"annotations": {c.DELETE_MACHINE_ANNOTATION: "yes"}}}
    await system.client.patch(MACHINES, chosen, annotation, system.namespace)
    await system.scale("workers", 2)
    survivors = set(names[:-1])
    await system.until(
        lambda: (
            system.pool_running("workers", 2)
            and {m["metadata"]["name"] for m in system.machines("workers")} == survivors
        ),
        "scaled to 2 by removing the annotated Machine",
    )
    # What a user compares: the Nodes left are those the surviving Machines' nodeRefs name.
    refs = {m["status"]["nodeRef"]["name"] for m in system.machines("workers")}
    assert {n["metadata"]["name"] for n in system.nodes.list()} == refs


async def test_deleting_the_machine_pool_leaves_nothing_behind(system: System) -> None:
    await system.create_pool("workers", 2)
    await system.until(lambda: system.pool_running("workers", 2), "2 Ready nodes")
    await system.client.delete(MACHINE_POOLS, "workers", system.namespace)

    def empty() -> bool:
        secrets = [
            s
            for s in system.watched["secrets"].list(system.namespace)
            if not s["metadata"]["name"].startswith(system.cluster + "-")
        ]
        return (
            system.machine_pool("workers") is None
            and not system.machines()
            and not system.watched["simmachines"].list(system.namespace)
            and not system.nodes.list()
            and not secrets
        )

    await system.until(empty, "no MachinePool, Machine, SimMachine, Node or Secret left")
    assert await system.cloud.instances(system.namespace) == []


async def test_failure_domains_spread_evenly(system: System) -> None:
    await system.create_pool("workers", 5, failure_domains=["zone-a", "zone-b"])
    await system.until(lambda: system.pool_running("workers", 5), "5 Ready nodes")
    zones = [n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in system.nodes.list()]
    assert sorted(zones.count(z) for z in ("zone-a", "zone-b")) == [2, 3]


async def test_the_pools_events_tell_every_instance_a_big_step_created(system: System) -> None:
    """30 instances made in one step are told in the infra pool's Events, zone by zone. One
    Event per instance would stop at 25, where the per-object spam filter cuts in."""
    import re

    from machinepool.runtime import CORE_EVENTS

    await system.create_pool("big", 30, failure_domains=["zone-a", "zone-b"])
    await system.until(lambda: system.pool_running("big", 30), "30 Ready nodes")

    async def told() -> dict[str, int] | None:
        events = await system.client.list(CORE_EVENTS, system.namespace)
        zones: dict[str, int] = {}
        for e in events.items:
            if (e.get("involvedObject") or {}).get("kind") != "SimMachinePool":
                continue
            if e.get("reason") != "SuccessfulCreate":
                continue
            # "Created 29 instances (v): zone-a 15, zone-b 14; ids" or "Created instance i in
            # zone-b (v)"
            counted = re.findall(r"(zone-\w) (\d+)", e["message"])
            counted += [
                (z, "1") for z in re.findall(r"^Created instance \S+ in (zone-\w)", e["message"])
            ]
            for zone, n in counted:
                zones[zone] = zones.get(zone, 0) + int(n)
        return zones if sum(zones.values()) >= 30 else None

    zones = await eventually(told, "SuccessfulCreate Events naming 30 instances")
    assert zones == {"zone-a": 15, "zone-b": 15}


async def test_bad_input_is_reported_in_conditions(system: System) -> None:
    await system.watch_sim_pools()
    await system.create_pool(
        "stuck", 1, strategy={"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}
    )
    await system.create_pool("nowhere", 1, failure_domains=["zone-x"])
    # Negative replicas never get this far: the API server rejects them (scale subresource).
    with pytest.raises(Invalid, match=r"spec\.replicas"):
        await system.create_pool("negative", -1)

    def reason(name: str) -> str:
        cond = _pool_condition(system, name, "Ready") or {}
        return str(cond.get("reason", ""))

    await system.until(
        lambda: (
            reason("stuck") == "InvalidStrategy" and reason("nowhere") == "UnknownFailureDomain"
        ),
        "conditions explain each bad input",
    )
    stuck = _pool_condition(system, "stuck", "Ready") or {}
    assert "maxSurge" in stuck["message"]
    nowhere = _pool_condition(system, "nowhere", "Ready") or {}
    assert "zone-x" in nowhere["message"]
    assert "zone-a" in nowhere["message"]
    assert await system.cloud.instances(system.namespace) == []


async def test_cloud_errors_back_off_and_never_duplicate(system: System) -> None:
    from machinepool.simworld import Faults

    await system.watch_sim_pools()
    await system.cloud.set_faults(system.namespace, Faults(error_rate=1.0))
    await system.create_pool("workers", 2)
    await system.until(
        lambda: (_pool_condition(system, "workers", "Ready") or {}).get("reason") == "CloudError",
        "CloudError condition",
    )
    # Calls that succeed but report failure must not lead to extra instances.
    await system.cloud.set_faults(system.namespace, Faults(error_after_rate=0.5))
    await system.until(lambda: system.pool_running("workers", 2), "2 Ready nodes despite errors")
    live = [
        r for r in await system.cloud.instances(system.namespace) if r.forced_state != "terminated"
    ]
    assert len(live) == 2


async def test_a_zone_out_of_capacity_is_left_to_the_others(system: System) -> None:
    """The cloud refuses every create in zone-a; the pool still reaches its size, in zone-b,
    and says why (an Auto Scaling group launches in its other zones the same way)."""
    from machinepool.runtime import CORE_EVENTS
    from machinepool.simworld import Faults

    await system.cloud.set_faults(system.namespace, Faults(short_zones=frozenset({"zone-a"})))
    await system.create_pool("workers", 4, failure_domains=["zone-a", "zone-b"])
    await system.until(lambda: system.pool_running("workers", 4), "4 Ready nodes in zone-b")
    zones = {n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in system.nodes.list()}
    assert zones == {"zone-b"}
    assert {r.failure_domain for r in await system.cloud.instances(system.namespace)} == {"zone-b"}
    events = await system.client.list(CORE_EVENTS, system.namespace)
    refused = [
        e["message"]
        for e in events.items
        if e.get("reason") == "FailedCreate" and "InsufficientInstanceCapacity" in e["message"]
    ]
    assert refused, [e.get("message") for e in events.items]
    assert all("other failure domains" in m for m in refused)


async def test_a_throttling_cloud_slows_the_pool_but_never_doubles_it(system: System) -> None:
    """One create per second with a burst of two: the engine's parallel creates are refused
    beyond that, it backs off, and the pool still ends with exactly its replicas."""
    from machinepool.runtime import CORE_EVENTS
    from machinepool.simworld import Faults

    await system.cloud.set_faults(system.namespace, Faults(request_rate=1, request_burst=2))
    await system.create_pool("workers", 5)
    await system.until(lambda: system.pool_running("workers", 5), "5 Ready nodes")
    live = [
        r for r in await system.cloud.instances(system.namespace) if r.forced_state != "terminated"
    ]
    assert len(live) == 5
    events = await system.client.list(CORE_EVENTS, system.namespace)
    assert any("RequestLimitExceeded" in e["message"] for e in events.items), [
        e.get("message") for e in events.items
    ]
    # The first step's five creates meet a burst of two: its refusals are one note, not three.
    refused = [e["message"] for e in events.items if e.get("reason") == "FailedCreate"]
    assert any(" instances failed: " in m for m in refused), refused


def _pod(name: str, node: str, app: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "sim"}]},
    }


async def test_scale_down_cordons_evicts_within_the_pdb_then_deletes_the_node(
    system: System,
) -> None:
    """The victim's Node is cordoned, its Pods are evicted (a PodDisruptionBudget, kept by
    the workload's disruption controller, lets one of its two Pods go and holds the other),
    and only then, at the drain timeout, does the Node go: in that order, from the watches."""
    from machinepool.runtime import PDBS, PODS, Informer

    await system.create_pool("workers", 2)
    await system.until(lambda: system.pool_running("workers", 2), "2 Ready nodes")
    timeout = {"spec": {"template": {"spec": {"deletion": {"nodeDrainTimeoutSeconds": 8}}}}}
    await system.client.patch(MACHINE_POOLS, "workers", timeout, system.namespace)
    victim = sorted(m["metadata"]["name"] for m in system.machines("workers"))[0]
    victim_node = system.node_of(victim)
    assert victim_node is not None
    node_name = victim_node["metadata"]["name"]  # its hostname, not the Machine's name
    wl = system.workload_client
    guard = {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
    await wl.create(PDBS, {"metadata": {"name": "guard"}, "spec": guard}, "default")
    for name, app in (("plain", "plain"), ("guarded-a", "guarded"), ("guarded-b", "guarded")):
        await wl.create(PODS, _pod(name, node_name, app), "default")

    async def one_disruption_allowed() -> bool:
        pdb = await wl.get(PDBS, "guard", "default")
        return bool((pdb.get("status") or {}).get("disruptionsAllowed") == 1)

    await eventually(one_disruption_allowed, "the disruption controller allows one eviction")

    story: list[tuple[str, str]] = []

    def on_node(node: Obj) -> None:
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        event = ("cordoned", node_name)
        if node["metadata"]["name"] == node_name and cordoned and event not in story:
            story.append(event)

    def on_pod(pod: Obj, gone: bool = False) -> None:
        event = ("evicted", pod["metadata"]["name"])
        if (gone or pod["metadata"].get("deletionTimestamp")) and event not in story:
            story.append(event)

    system.nodes.add_handler(
        FuncHandler(
            update=lambda _o, n: on_node(n),
            delete=lambda n: story.append(("deleted", n["metadata"]["name"])),
        )
    )
    pods = Informer(wl, PODS, namespaces=("default",))
    pods.add_handler(FuncHandler(update=lambda _o, p: on_pod(p), delete=lambda p: on_pod(p, True)))
    await pods.start()
    try:
        annotation = {"metadata": {"annotations": {c.DELETE_MACHINE_ANNOTATION: "yes"}}}
        await system.client.patch(MACHINES, victim, annotation, system.namespace)
        await system.scale("workers", 1)
        await system.until(
            lambda: ("deleted", node_name) in story and system.pool_running("workers", 1),
            "the victim's Node drained and deleted",
        )
    finally:
        await pods.stop()
    gone = story.index(("deleted", node_name))
    assert story[0] == ("cordoned", node_name), story
    evicted = {name for event, name in story[:gone] if event == "evicted"}
    assert "plain" in evicted, story
    assert len(evicted & {"guarded-a", "guarded-b"}) == 1, story
