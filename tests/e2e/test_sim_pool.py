"""End to end: MachinePool + KubeadmConfig + SimMachinePool on a real workload cluster."""

from __future__ import annotations

import asyncio
import base64
from collections import Counter
from itertools import pairwise

import pytest
from tests.e2e.conftest import System
from tests.support.conditions import condition_status
from tests.support.resources import MACHINE_POOLS, MACHINES, SIM_MACHINE_POOLS, SIM_MACHINES

from machinepool.api import constants as c
from machinepool.api.meta import parse_time
from machinepool.controllers.machinepool import status as core_status
from machinepool.runtime import (
    NODES,
    SECRETS,
    FuncHandler,
    Informer,
    Obj,
    ObjectKey,
    PatchType,
    ProgressSpacing,
    Resource,
)
from machinepool.simworld.records import INSTANCE_LABEL, records_in


async def test_pool_runs_three_ready_nodes_with_node_refs(system: System) -> None:
    await system.create_pool("workers", 3)
    await system.until(lambda: system.pool_running("workers", 3), "3 Ready nodes, Running")
    mp = system.machine_pool("workers")
    assert mp is not None
    node_names = {n["metadata"]["name"] for n in system.ready_nodes()}
    assert {r["name"] for r in mp["status"]["nodeRefs"]} == node_names
    provider_ids = sorted(n["spec"]["providerID"] for n in system.ready_nodes())
    assert mp["spec"]["providerIDList"] == provider_ids
    zones = Counter(
        n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in system.ready_nodes()
    )
    assert sorted(zones.values()) == [1, 1, 1]


async def test_scale_up_down_to_zero_and_back(system: System) -> None:
    await system.create_pool("workers", 3)
    await system.until(lambda: system.pool_running("workers", 3), "3 Ready nodes")
    for replicas in (10, 0, 2):
        await system.scale("workers", replicas)
        await system.until(
            lambda r=replicas: system.pool_running("workers", r) and len(system.nodes.list()) == r,
            f"{replicas} Ready nodes",
        )
    mp = await system.client.get(MACHINE_POOLS, "workers", system.namespace)
    assert mp["status"]["replicas"] == 2


async def test_the_infra_pool_reports_the_end_of_a_scale_up_with_its_last_instance(
    system: System,
) -> None:
    """The SimMachinePool says it is scaling up while it holds fewer instances than wanted,
    and the write that lists the last one already says it is not (issue 18: it said
    "creating 10 instance(s)" beside ten listed instances, and took one more status write
    per pool and scale-up, a tenth of a write per Node at 1,000 pools of 10, to say it was
    done). Counted after the pool settles: every status it was written with that lists all
    the wanted instances says ScalingUp False, and while it listed fewer it said True."""
    sim_pools = await system.watch_sim_pools()
    statuses: list[tuple[int, str | None]] = []

    def note(obj: Obj) -> None:
        if obj["metadata"]["name"] != "ending":
            return
        status = obj.get("status") or {}
        scaling = {
            cond.get("type"): cond.get("status") for cond in status.get("conditions") or []
        }.get(c.SCALING_UP_CONDITION)
        entry = (len(status.get("instances") or []), scaling)
        if not statuses or statuses[-1] != entry:
            statuses.append(entry)

    sim_pools.add_handler(FuncHandler(add=note, update=lambda _old, new: note(new)))
    await system.create_pool("ending", 3)
    await system.until(lambda: system.pool_running("ending", 3), "3 Ready nodes")
    await system.scale("ending", 5)
    await system.until(lambda: system.pool_running("ending", 5), "5 Ready nodes")
    listed = [(n, s) for n, s in statuses if s is not None]
    assert {(3, "False"), (5, "False")} <= set(listed), statuses
    assert not {(3, "True"), (5, "True")} & set(listed), statuses
    assert all(s == "True" for n, s in listed if n in (0, 4)), statuses


async def test_a_joining_node_costs_its_machine_and_node_few_writes(system: System) -> None:
    """Writes per Node, counted as the versions each pool Machine and Node goes through from
    creation to a Running pool (issue 18): a Machine is created whole (labels, finalizer,
    owner), gets its status before and after its Node joins and its version once the Node
    tells it, each in one write; a Node is created with its status and marked (annotations,
    the uninitialized taint dropped) in one patch. Before, the Paused condition went out in
    a status write of its own (twice: again for the version's generation), the pool applied
    the version the Machine controller then observed in another status write, and the Node
    took one patch for the marks and another for the taint: ~6 per Machine, 3 per Node."""
    replicas = 6
    seen: dict[str, set[str]] = {}

    def record(kind: str) -> FuncHandler:
        def note(obj: Obj) -> None:
            meta = obj.get("metadata") or {}
            # A Node is the pool's by its providerID (sim:///<zone>/<instance>): its name is
            # the instance's hostname, which says nothing of the pool.
            pid = str((obj.get("spec") or {}).get("providerID") or "")
            ident = pid.rpartition("/")[2] if kind == "Node" else str(meta.get("name", ""))
            if ident.startswith("counted"):
                seen.setdefault(f"{kind}/{ident}", set()).add(meta["resourceVersion"])

        def update(old: Obj, new: Obj) -> None:
            if kind == "Node" and _node_marks(old) == _node_marks(new):
                return  # a heartbeat (status only): the kubelet's, every 16 s here
            note(new)

        return FuncHandler(add=note, update=update)

    system.watched["machines"].add_handler(record("Machine"))
    system.nodes.add_handler(record("Node"))
    await system.create_pool("counted", replicas)
    await system.until(lambda: system.pool_running("counted", replicas), "6 Ready nodes")

    def versions() -> dict[str, int]:
        return {key: len(v) for key, v in seen.items()}

    await system.settled(versions, "pool Machine and Node resourceVersions", quiet=2.0)
    machines = sum(n for key, n in versions().items() if key.startswith("Machine/"))
    nodes = sum(n for key, n in versions().items() if key.startswith("Node/"))
    assert len([k for k in seen if k.startswith("Machine/")]) == replicas
    assert len([k for k in seen if k.startswith("Node/")]) == replicas
    # A Machine: create, status while its instance boots, status once it is provisioned,
    # version, status with its Node (the last two may come as one); a Node: create, one
    # patch. Bounds, not exact figures: ordering varies with load. With instances that
    # boot at once (before the test's instances took 1-3 s), the booting status was skipped
    # and 4 per Machine was the count.
    assert machines <= 5.5 * replicas, f"{machines} Machine versions for {replicas} Machines"
    assert nodes <= 2 * replicas, f"{nodes} Node versions for {replicas} Nodes: {versions()}"


async def test_an_idle_pool_rewrites_nothing(system: System) -> None:
    """Once converged, no controller keeps rewriting Machines or the MachinePool."""
    await system.create_pool("quiet", 2)
    await system.until(lambda: system.pool_running("quiet", 2), "2 Ready nodes")

    def versions() -> dict[str, str]:
        objs = [*system.machines("quiet"), system.machine_pool("quiet") or {}]
        return {o["metadata"]["name"] + o["kind"]: o["metadata"]["resourceVersion"] for o in objs}

    # Convergence ends with a few status writes; a controller that rewrites what it reads
    # (a timestamp, a reordered list) feeds its own watch and never gets this far.
    await system.settled(versions, "Machines and MachinePool resourceVersions", quiet=2.0)
    await system.unchanged(versions, "an idle pool's objects were rewritten", window=5.0)


def _pool_engine_adds(system: System) -> float:
    """Keys the sim provider's pool controller has been handed so far (an event handler
    counts its add at once, as it enqueues)."""
    name = "sim-provider-pool"
    value = system.manager.metrics.registry.get_sample_value(
        "workqueue_adds_total", {"name": name, "controller": name}
    )
    assert value is not None, f"no workqueue_adds_total for {name}"
    return value


async def _set_ready(system: System, name: str, status: str) -> None:
    """Write the Node's Ready condition, as a node lifecycle controller or kubelet would."""
    await system.workload_client.patch(
        NODES,
        name,
        {"status": {"conditions": [{"type": "Ready", "status": status, "reason": "Test"}]}},
        patch_type=PatchType.STRATEGIC,
        subresource="status",
    )


async def test_a_node_turning_ready_outside_a_rollout_does_not_wake_its_pool(
    system: System,
) -> None:
    """Which Nodes are Ready decides a pool's next step only while it rolls out. At 1,000
    instances, re-reading the pool for each of its Nodes' joins kept the pool engine busy and
    the joins waiting, so outside a rollout a Node turning Ready wakes no pool (one turning
    NotReady does: its instance may have failed)."""
    await system.create_pool("steady", 2)
    await system.until(lambda: system.pool_running("steady", 2), "2 Ready nodes")
    name = system.ready_nodes()[0]["metadata"]["name"]
    engine_nodes = await system.cluster_cache.get_informer(
        ObjectKey(system.namespace, system.cluster), NODES
    )

    def engine_sees(status: str) -> bool:
        return condition_status(engine_nodes.get(name), "Ready") == status

    await system.settled(lambda: _pool_engine_adds(system), "the pool engine's queue", quiet=2.0)
    before = _pool_engine_adds(system)
    await _set_ready(system, name, "False")
    # The engine's Node informer calls its handlers as it stores a change, so once it shows
    # the change, any key the change queues has been counted.
    await system.until(lambda: engine_sees("False"), f"the engine's informer: {name} NotReady")
    assert _pool_engine_adds(system) == before + 1, "a Node NotReady wakes its pool"
    await system.settled(lambda: _pool_engine_adds(system), "the pool engine's queue", quiet=2.0)
    before = _pool_engine_adds(system)
    await _set_ready(system, name, "True")
    await system.until(lambda: engine_sees("True"), f"the engine's informer: {name} Ready")
    assert _pool_engine_adds(system) == before, "a Node turning Ready woke its pool"


async def test_a_big_pools_progress_is_written_spaced_out_and_its_end_at_once(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big pool's MachinePool and infra pool report the progress of a change at most once
    per interval of their size, and its start and its end at once (issue 18: in a rollout of
    10 x 1,000 these two objects, a thousand entries each, were rewritten every few seconds
    and took half of the management apiserver's CPU). Here a pool counts as big from 4
    entries and waits 30 s between progress reports, so its scale from 4 to 10 shows as the
    start (the new generation observed, the infra pool scaling up) and the end (Running at
    10, every Node referenced), not as each Node joining and each Machine turning Ready."""
    await system.create_pool("spaced", 4)
    await system.until(lambda: system.pool_running("spaced", 4), "4 Ready nodes")
    sim_pools = await system.watch_sim_pools()
    monkeypatch.setattr(ProgressSpacing, "smallest", 4)
    monkeypatch.setattr(ProgressSpacing, "per_entry", 30.0)
    written: dict[str, list[Obj]] = {"MachinePool": [], "SimMachinePool": []}

    def record(kind: str) -> FuncHandler:
        def update(old: Obj, new: Obj) -> None:
            if new["metadata"]["name"] == "spaced":
                written[kind].append(new)

        return FuncHandler(update=update)

    system.watched["machinepools"].add_handler(record("MachinePool"))
    sim_pools.add_handler(record("SimMachinePool"))
    loop = asyncio.get_running_loop()
    start = loop.time()
    await system.scale("spaced", 10)
    await system.until(lambda: system.pool_running("spaced", 10), "10 Ready nodes")
    took = loop.time() - start
    assert took < 25, f"the end waited for the pool's turn: Running at 10 after {took:.1f} s"
    counts = [
        (mp["status"].get("readyReplicas"), len(mp["status"].get("nodeRefs") or []))
        for mp in written["MachinePool"]
    ]
    # The scale observed (its status, then the new list from the infra pool at most), and
    # the end (list and status): each Node joining would be a write of its own.
    assert len(counts) <= 4, f"MachinePool written {len(counts)} times: {counts}"
    states = [
        sorted(Counter(i["state"] for i in sp["status"].get("instances") or []).items())
        for sp in written["SimMachinePool"]
    ]
    assert len(states) <= 4, f"SimMachinePool written {len(states)} times: {states}"


async def test_a_small_pools_progress_is_written_a_second_apart_and_its_end_at_once(
    system: System,
) -> None:
    """A small MachinePool reports the progress of a change at most once a second, and its
    end at once (issue 18: a pool of 10 wrote its status three or four times within 0.6 s as
    its Machines turned Ready, each write a tenth of a write per Node at 1,000 such pools).
    Its six instances boot together, so its Machines join and turn Ready within a fraction
    of a second of each other (15 to 17 versions of the pool, progress 0.01 to 0.4 s apart,
    before): every pair of successive versions that the controller's own rule calls progress
    is now a second apart, less the watch's jitter, and the end is not held back."""
    written: list[tuple[float, Obj]] = []
    loop = asyncio.get_running_loop()

    def update(_old: Obj, new: Obj) -> None:
        if new["metadata"]["name"] == "small":
            written.append((loop.time(), new))

    system.watched["machinepools"].add_handler(FuncHandler(update=update))
    await system.create_pool("small", 6, sim={"bootDelaySeconds": 1, "bootDelaySpreadSeconds": 0})
    await system.until(lambda: system.pool_running("small", 6), "6 Ready nodes")
    gaps = [
        round(later - earlier, 2)
        for (earlier, before), (later, after) in pairwise(written)
        # From the moment the pool counts all its Machines: what follows is them joining
        # and turning Ready, the progress this is about.
        if (before.get("status") or {}).get("replicas") == 6
        and core_status.progress_only(_as_written(before), _as_written(after))
    ]
    assert all(gap > 0.7 for gap in gaps), f"progress written closer than a second: {gaps}"
    ready_at = max(
        parse_time(cond["lastTransitionTime"]).timestamp()
        for m in system.machines("small")
        for cond in m["status"]["conditions"]
        if cond["type"] == c.READY_CONDITION
    )
    running = next(
        parse_time(cond["lastTransitionTime"]).timestamp()
        for cond in (system.machine_pool("small") or {})["status"]["conditions"]
        if cond["type"] == c.AVAILABLE_CONDITION
    )
    assert running - ready_at < 2.0, "the end waited for the pool's turn"


TOUCH = "test.machinepool.dev/touch"


async def test_the_pool_engine_reads_a_slow_pools_member_events_after_a_pause(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool engine paces the watches of a pool's members, as the core does: once a pool's
    reconcile has held the event loop a while (a pool of 1,000 instances does), a change of
    one of its infra machines, Machines or cloud instance records queues the pool only after
    a pause, so one reconcile reads every change of the pause and writes the pool's status,
    a list of every instance, once. A change of the pool itself still goes at once: that is
    what a user or an autoscaler asked for. At 10 x 1,000 the engine rewrote that status
    about once per member event. A pool of two reconciles too fast to be paced, so here the
    engine's floor under which a reconcile is not remembered is zero: every pool of the engine
    counts as slow (the core's controllers keep theirs)."""
    await system.create_pool("paced", 2)
    await system.until(lambda: system.pool_running("paced", 2), "2 Ready nodes")
    engine = next(c for c in system.manager.controllers if c.name == "sim-provider-pool")
    key = ObjectKey(system.namespace, "paced")
    cache = system.manager.cache
    sim_pools = await cache.get_informer(SIM_MACHINE_POOLS)
    monkeypatch.setattr(engine, "pace_floor", 0.0)

    queue = engine.queue

    async def touch(res: Resource, informer: Informer, name: str, value: str) -> bool:
        """Annotate ``name``; return whether the pool waited in the engine's queue as its
        informer handed the change out. The probe is subscribed after the engine's handler and
        handlers run in turn, in one step of the event loop: an add made at once has queued the
        pool by then, and a paced one cannot have fired yet, however short its pause. The
        pool's own key is asked, not the controller's count of adds, which any other key's
        add in the moment would move."""
        seen: list[bool] = []

        def update(old: Obj, new: Obj) -> None:
            annotations = (new.get("metadata") or {}).get("annotations") or {}
            if new["metadata"]["name"] == name and annotations.get(TOUCH) == value and not seen:
                seen.append(queue.is_queued(key))

        probe = FuncHandler(update=update)
        informer.add_handler(probe)
        try:
            body = {"metadata": {"annotations": {TOUCH: value}}}
            await system.client.patch(res, name, body, system.namespace)
            await system.until(lambda: bool(seen), f"the engine's informer: {res.kind} {name}")
        finally:
            informer.remove_handler(probe)
        return seen[0]

    # A change of the pool itself: queued at once, and its reconcile is remembered.
    await system.settled(lambda: _pool_engine_adds(system), "the pool engine's queue", quiet=2.0)
    assert not queue.is_queued(key)
    queued_at_dispatch = await touch(SIM_MACHINE_POOLS, sim_pools, "paced", "0")
    assert queued_at_dispatch, "a change of the pool itself goes at once"
    await system.until(
        lambda: not queue.is_queued(key) and not queue.is_processing(key),
        "the pool's reconcile after its change",
    )
    assert engine.pace(key) > 0, "the pool engine paces none of its watches"

    machine = system.machines("paced")[0]
    records = await cache.get_informer(SECRETS, label_selector=INSTANCE_LABEL)
    record = next(r for r in records.list(system.namespace) if records_in(r)[0].pool == "paced")
    members = (
        (
            SIM_MACHINES,
            await cache.get_informer(SIM_MACHINES),
            machine["spec"]["infrastructureRef"]["name"],
        ),
        (MACHINES, await cache.get_informer(MACHINES), machine["metadata"]["name"]),
        (SECRETS, records, record["metadata"]["name"]),
    )
    for n, (res, informer, name) in enumerate(members, start=1):
        await system.settled(
            lambda: _pool_engine_adds(system), "the pool engine's queue", quiet=2.0
        )
        before = _pool_engine_adds(system)
        assert not queue.is_queued(key)
        queued_at_dispatch = await touch(res, informer, name, str(n))
        assert not queued_at_dispatch, f"a {res.kind} change queued its pool at once"
        await system.until(
            lambda b=before: _pool_engine_adds(system) >= b + 1,
            f"the pool queued after the pause that followed its {res.kind}'s change",
        )


async def test_a_new_bootstrap_token_reaches_new_instances_and_replaces_none(
    system: System,
) -> None:
    """A rotated token rewrites the bootstrap data Secret; running instances are not outdated
    by it (it is no part of the template hash), only instances created afterwards use it."""
    await system.create_pool("tokens", 2)
    await system.until(lambda: system.pool_running("tokens", 2), "2 Ready nodes")
    old = {m["metadata"]["name"] for m in system.machines("tokens")}
    old_versions = {
        r.bootstrap_version for r in await system.cloud.instances(system.namespace, "tokens")
    }
    mp = system.machine_pool("tokens")
    assert mp is not None
    data_secret = mp["spec"]["template"]["spec"]["bootstrap"]["dataSecretName"]
    secret = await system.client.get(SECRETS, data_secret, system.namespace)
    payload = base64.b64decode(secret["data"]["value"]) + b"\n# rotated token\n"
    await system.client.patch(
        SECRETS,
        data_secret,
        {"data": {"value": base64.b64encode(payload).decode()}},
        system.namespace,
    )

    await system.scale("tokens", 3)
    await system.until(lambda: system.pool_running("tokens", 3), "3 Ready nodes")

    def names() -> set[str]:
        return {m["metadata"]["name"] for m in system.machines("tokens")}

    assert old <= names(), "instances created before the rotation were replaced"
    await system.unchanged(names, "the pool's Machines after the scale-up", window=5.0)
    records = {r.id: r for r in await system.cloud.instances(system.namespace, "tokens")}
    assert old <= records.keys()
    (new,) = records.keys() - old
    assert records[new].bootstrap_version not in old_versions


GPU_TAINT = {"key": "example.com/gpu", "value": "a100", "effect": "NoSchedule"}
SETUP_TAINT = {"key": "example.com/setup", "effect": "NoExecute"}
GPU_LABEL = "node-role.kubernetes.io/gpu"


def _taint_keys(node: Obj) -> set[str]:
    return {str(t.get("key")) for t in (node.get("spec") or {}).get("taints") or []}


@pytest.mark.parametrize("pool_node_taints", [True])
async def test_a_pools_taints_and_labels_are_kept_on_its_nodes_without_a_rollout(
    system: System,
) -> None:
    """Gate MachinePoolNodeTaints on: the template's Always taint and node-role label reach
    running Nodes with no instance replaced; an OnInitialization taint goes only on Nodes
    that join after it; a kubectl edit that removes both gets the Always one put back and the
    OnInitialization one not."""
    await system.create_pool("tainted", 2)
    await system.until(lambda: system.pool_running("tainted", 2), "2 Ready nodes")
    before = {m["metadata"]["name"] for m in system.machines("tainted")}
    template = {
        "metadata": {"labels": {GPU_LABEL: "", "example.com/team": "ml"}},
        "spec": {
            "taints": [
                {**GPU_TAINT, "propagation": "Always"},
                {**SETUP_TAINT, "propagation": "OnInitialization"},
            ]
        },
    }
    await system.client.patch(
        MACHINE_POOLS, "tainted", {"spec": {"template": template}}, system.namespace
    )

    def nodes() -> list[Obj]:
        return [
            n for m in system.machines("tainted") if (n := system.node_of(m["metadata"]["name"]))
        ]

    def synced(count: int) -> bool:
        found = nodes()
        return len(found) == count and all(
            GPU_TAINT["key"] in _taint_keys(n) and GPU_LABEL in n["metadata"]["labels"]
            for n in found
        )

    await system.until(lambda: synced(2), "the Always taint and the label on both Nodes")
    for n in nodes():
        assert SETUP_TAINT["key"] not in _taint_keys(n), "OnInitialization on a running Node"
        assert "example.com/team" not in n["metadata"]["labels"], "a label outside the domains"
        gpu = next(t for t in n["spec"]["taints"] if t["key"] == GPU_TAINT["key"])
        assert gpu == GPU_TAINT
    assert {m["metadata"]["name"] for m in system.machines("tainted")} == before, "replaced"

    await system.scale("tainted", 3)
    await system.until(lambda: system.pool_running("tainted", 3) and synced(3), "3 synced")
    (joined,) = {m["metadata"]["name"] for m in system.machines("tainted")} - before
    node = system.node_of(joined)
    assert node is not None
    assert {GPU_TAINT["key"], SETUP_TAINT["key"]} <= _taint_keys(node), "a joining Node"

    # kubectl edit: both taints removed from the new Node.
    name = node["metadata"]["name"]
    kept = [
        t for t in node["spec"]["taints"] if t["key"] not in _taint_keys({"spec": template["spec"]})
    ]
    await system.workload_client.patch(
        NODES,
        name,
        {
            "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
            "spec": {"taints": kept},
        },
    )

    def put_back() -> bool:
        n = system.node_of(joined)
        return (
            n is not None
            and n["metadata"]["resourceVersion"] != node["metadata"]["resourceVersion"]
            and GPU_TAINT["key"] in _taint_keys(n)
        )

    # The Always taint comes back in the write that answers the edit; had the OnInitialization
    # one been due, it would have come in the same write.
    await system.until(put_back, "the Always taint put back after the edit")
    again = system.node_of(joined)
    assert again is not None
    assert SETUP_TAINT["key"] not in _taint_keys(again), "the OnInitialization taint came back"
    assert before <= {m["metadata"]["name"] for m in system.machines("tainted")}, "replaced"


def _as_written(obj: Obj) -> Obj:
    """``obj`` as the controller compares it: without what the apiserver sets on a write."""
    meta = {
        k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "managedFields")
    }
    return {**obj, "metadata": meta}


def _node_marks(node: Obj) -> tuple[object, ...]:
    """What controllers write on a Node: its labels, annotations and spec."""
    meta = node.get("metadata") or {}
    return (meta.get("labels"), meta.get("annotations"), node.get("spec"))


async def test_a_warm_pool_scales_up_without_a_boot_and_a_rollout_refreshes_it(
    system: System,
) -> None:
    """A pool with a warm pool of 2 keeps two instances booted and stopped: no Node, no
    Machine, not in providerIDList. With boots made slow (30 s), a scale-up by 2 starts them
    and both Nodes are Ready well before any boot could end; the warm pool is topped up
    behind them. A new template then replaces the warm instances too."""
    sim_pools = await system.watch_sim_pools()
    name = "warm"

    def warm() -> list[Obj]:
        pool = sim_pools.get(name, system.namespace) or {}
        return list((pool.get("status") or {}).get("warmInstances") or [])

    def stopped(up_to_date: bool = True) -> set[str]:
        return {
            i["instanceID"]
            for i in warm()
            if i["state"] == "stopped" and i["upToDate"] == up_to_date
        }

    await system.create_pool(
        name,
        1,
        sim={"bootDelaySeconds": 1, "bootDelaySpreadSeconds": 0},
        warm_pool={"minSize": 2},
    )
    await system.until(
        lambda: system.pool_running(name, 1) and len(stopped()) == 2, "1 Ready, 2 warm stopped"
    )
    warm_ids = stopped()
    pool = sim_pools.get(name, system.namespace)
    assert pool is not None
    # Stopped instances are no members: no Node, no Machine, not listed for the core.
    warm_pids = {i["providerID"] for i in warm()}
    assert not warm_pids & {n["spec"].get("providerID") for n in system.nodes.list()}
    assert not warm_pids & set(pool["spec"]["providerIDList"])
    machine_infra = {m["spec"]["infrastructureRef"]["name"] for m in system.machines(name)}
    assert not warm_ids & machine_infra
    records = {r.id: r for r in await system.cloud.instances(system.namespace, name)}
    assert all(records[i].warm for i in warm_ids)

    # Every new boot from now on takes 30 s (the boot delay is no part of the template).
    await system.client.patch(
        SIM_MACHINE_POOLS,
        name,
        {"spec": {"sim": {"bootDelaySeconds": 30}}},
        system.namespace,
    )
    await system.until(
        lambda: (
            (sim_pools.get(name, system.namespace) or {})["spec"]["sim"]["bootDelaySeconds"] == 30
        ),
        "the slow boots in the cache",
    )
    began = asyncio.get_running_loop().time()
    await system.scale(name, 3)
    await system.until(lambda: system.pool_running(name, 3), "3 Ready nodes", timeout=25)
    took = asyncio.get_running_loop().time() - began
    assert took < 15, f"the scale-up took {took:.1f} s, as long as a boot"
    machine_infra = {m["spec"]["infrastructureRef"]["name"] for m in system.machines(name)}
    assert warm_ids <= machine_infra, "the scale-up did not start the warm instances"
    await system.until(
        lambda: len(warm()) == 2 and not {i["instanceID"] for i in warm()} & warm_ids,
        "the warm pool topped up with new instances",
    )

    # A rollout: the warm instances of the old template go, new ones are warmed.
    await system.client.patch(
        SIM_MACHINE_POOLS,
        name,
        {"spec": {"sim": {"bootDelaySeconds": 1}, "template": {"image": "sim-2"}}},
        system.namespace,
    )
    topped_up = {i["instanceID"] for i in warm()}
    await system.until(
        lambda: len(stopped()) == 2 and not stopped(False) and not stopped() & topped_up,
        "2 warm instances of the new template",
    )
    await system.until(lambda: system.pool_running(name, 3), "3 Ready nodes after the rollout")
