"""One cache behind the others: a rollout while the instance records are seen late, and a
scale-down while the Machines are.

The pool engine joins three caches: the Sim cloud's instance records (Secrets), SimMachines
and Machines. An informer re-listing after a 410 through an apiserver answering 429s, or a
watch a loaded apiserver serves late, leaves one of them seconds behind. Here the proxy in
front of the controller serves every Secret watch event ``RECORDS_LATE`` seconds late while
Machines and SimMachines arrive at once, and a pool is rolled to a new version.

Then a terminated instance is still listed as running after its SimMachine and Machine have
gone: taken for a new instance, it would get a new SimMachine (and a new Machine), count
towards replicas and make the engine delete a young instance as surplus. A user sees none of
that: the rollout converges with nothing lost, only old-version Nodes are deleted, no Machine
is deleted "to scale down" (the replicas never change), and no SimMachine comes back under the
name of one that was deleted.

The cluster autoscaler marks the Machine it wants gone and then lowers the size. With the
Machine watch served late, the engine hears of the size first: choosing from its cache, it
would drain a Node the autoscaler kept and leave the marked one running.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from tests.reliability.harness import Env, check_converged, judge_victims
from tests.reliability.proxy import AuditProxy
from tests.support.builders import VERSION, create_pool
from tests.support.pools import roll_pool, scale_pool

from machinepool.api import constants as c
from machinepool.api.kinds import MACHINES
from machinepool.controlplane import ControlPlane
from machinepool.runtime import CORE_EVENTS, FuncHandler, Obj
from machinepool.simworld import SimCloud

NEW_VERSION = "v1.34.1"
REPLICAS = 6
MARKS_LATE = 3.0
"""Seconds by which the controller sees Machine changes late: far longer than it takes to
act on a MachinePool's new size."""
RECORDS_LATE = 4.0
"""Seconds by which the controller sees instance record changes late; longer than the
engine's 2 s re-check of a pool with instances booting, so it plans from the stale view."""


@contextlib.asynccontextmanager
async def controller_behind(
    env: Env, control_plane: ControlPlane, tmp_path: Path, watch_delays: dict[str, float]
) -> AsyncIterator[None]:
    """The controllers (through a proxy serving the watches of ``watch_delays`` late) and the
    node simulator, running and ready until the block ends."""
    proxy = AuditProxy(
        "slow",
        control_plane.url,
        control_plane.management.pki.ssl_context(),
        [],
        watch_delays=watch_delays,
    )
    await proxy.start()
    try:
        controller = env.spawn(
            "controller",
            "core,bootstrap,sim",
            kubeconfig=proxy.write_kubeconfig(tmp_path / "slow.kubeconfig"),
        )
        kubelet = env.spawn("kubelet", "kubelet")
        await controller.wait_ready()
        await kubelet.wait_ready()
        yield
    finally:
        env.close()
        await proxy.stop()


async def test_a_rollout_with_the_instance_records_seen_late(
    env: Env, control_plane: ControlPlane, tmp_path: Path
) -> None:
    world = env.world
    deleted: set[str] = set()
    returned: list[str] = []

    def added(obj: Obj) -> None:
        name = str(obj["metadata"]["name"])
        if name in deleted:
            returned.append(name)

    world.informers["simmachines"].add_handler(
        FuncHandler(added, None, lambda obj: deleted.add(str(obj["metadata"]["name"])))
    )
    async with controller_behind(env, control_plane, tmp_path, {"/secrets": RECORDS_LATE}):
        sim = {"sim": {"bootDelaySeconds": 1}}
        await create_pool(env.client, env.namespace, "slow", replicas=REPLICAS, sim_spec=sim)
        await world.until(world.steady("slow", REPLICAS, VERSION), f"{REPLICAS} Ready")
        deleted_before = len(world.deleted_nodes)
        await roll_pool(env.client, env.namespace, "slow", NEW_VERSION)
        await world.until(
            world.steady("slow", REPLICAS, NEW_VERSION),
            f"{REPLICAS} Ready on {NEW_VERSION} with the records seen late",
            timeout=600,
        )

    assert check_converged(world, "slow", REPLICAS, NEW_VERSION) == []
    victims = world.deleted_nodes[deleted_before:]
    assert judge_victims(victims, old_version=VERSION, max_deleted=REPLICAS) == []
    events = await env.client.list(CORE_EVENTS, env.namespace)
    scale_downs = [
        str(e.get("message"))
        for e in events.items
        if e.get("reason") == "SuccessfulDelete" and "(scale down to" in str(e.get("message"))
    ]
    assert scale_downs == [], "a rollout deleted Machines as surplus"
    assert returned == [], "SimMachines made again for instances already terminated"


async def test_a_scale_down_with_the_marks_seen_late(
    env: Env, control_plane: ControlPlane, tmp_path: Path
) -> None:
    world = env.world
    async with controller_behind(env, control_plane, tmp_path, {"/machines": MARKS_LATE}):
        sim = {"sim": {"bootDelaySeconds": 1}}
        await create_pool(env.client, env.namespace, "marked", replicas=3, sim_spec=sim)
        await world.until(world.steady("marked", 3, VERSION), "3 Ready")
        deleted_before = len(world.deleted_nodes)
        # The newest instance's Machine: the default policy (Oldest) would pick another.
        records = await SimCloud(env.client).instances(env.namespace, "marked")
        newest = max(records, key=lambda r: (r.created, r.id)).provider_id
        (chosen,) = [m for m in world.objects("machines") if m["spec"]["providerID"] == newest]
        mark = {"metadata": {"annotations": {c.DELETE_MACHINE_ANNOTATION: "yes"}}}
        await env.client.patch(MACHINES, chosen["metadata"]["name"], mark, env.namespace)
        await scale_pool(env.client, env.namespace, "marked", 2)
        await world.until(world.steady("marked", 2, VERSION), "2 Ready, the marked one gone")

    assert check_converged(world, "marked", 2, VERSION) == []
    deleted = [d.provider_id for d in world.deleted_nodes[deleted_before:]]
    assert deleted == [chosen["spec"]["providerID"]]
