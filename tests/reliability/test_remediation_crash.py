"""Crash safety of remediation: SIGKILL the controllers while a dead pool node is being
marked, drained, deleted and replaced; nothing is lost and no healthy Machine is touched.

The controllers (core with the MachineHealthCheck controller, kubeadm bootstrap, sim
provider) run as one process, killed and restarted at random moments from the time the dead
kubelet's Node turns Unknown until the pool converged again; the node simulator runs apart,
so the "machines" keep running. At the end: the pool converged with nothing orphaned
(``check_converged``), the only Machine ever deleted and the only Node ever removed are the
dead one's, and the replacement is healthy.
"""

from __future__ import annotations

import asyncio
import random

from tests.reliability.harness import Env, chaos_kills, check_converged
from tests.support.builders import VERSION, create_pool
from tests.support.conditions import condition_status
from tests.support.resources import MACHINE_HEALTH_CHECKS

from machinepool.api.constants import POOL_NAME_LABEL
from machinepool.runtime import FuncHandler, Informer, Obj
from machinepool.simworld import SimCloud

KILLS = 6
"""SIGKILLs per run at scale 1."""
GRACE = 5.0
"""Seconds a stopped kubelet's Node keeps its status before the simulator marks it Unknown
(the default 50 s of kube-controller-manager is a wait that proves nothing here)."""


async def test_kill_9_mid_remediation_loses_nothing(env: Env, scale: int) -> None:
    rng = random.Random(2311 * scale)
    world, name = env.world, "heal"
    deleted_machines: list[str] = []

    def on_machine(machine: Obj) -> None:
        machine_name = machine["metadata"]["name"]
        if machine["metadata"].get("deletionTimestamp") and machine_name not in deleted_machines:
            deleted_machines.append(machine_name)

    world.informers["machines"].add_handler(
        FuncHandler(on_machine, lambda _o, n: on_machine(n), on_machine)
    )
    checks = world.follow(Informer(env.client, MACHINE_HEALTH_CHECKS, env.namespace))
    await checks.start()
    await checks.wait_synced()
    try:
        controller, _kubelet = await env.spawn_system(
            kubelet_args=("--node-monitor-grace-seconds", str(GRACE)), warm_restarts=True
        )
        await create_pool(env.client, env.namespace, name, replicas=3)
        await world.until(world.steady(name, 3, VERSION), "3 Ready nodes")
        await env.client.create(
            MACHINE_HEALTH_CHECKS,
            {
                "apiVersion": MACHINE_HEALTH_CHECKS.api_version,
                "kind": "MachineHealthCheck",
                "metadata": {"name": name, "namespace": env.namespace},
                "spec": {
                    "clusterName": "work",
                    "selector": {"matchLabels": {POOL_NAME_LABEL: name}},
                    "checks": {
                        "nodeStartupTimeoutSeconds": 600,
                        "unhealthyNodeConditions": [
                            {"type": "Ready", "status": "Unknown", "timeoutSeconds": 1},
                            {"type": "Ready", "status": "False", "timeoutSeconds": 1},
                        ],
                    },
                },
            },
            env.namespace,
        )

        def healthy(count: int) -> bool:
            status = (checks.get(name, env.namespace) or {}).get("status") or {}
            return status.get("currentHealthy") == count == status.get("expectedMachines")

        await world.until(lambda: healthy(3), "3 healthy targets")
        machines = sorted(m["metadata"]["name"] for m in world.objects("machines"))
        victim, spared = machines[0], set(machines[1:])
        victim_node = world.node_of(victim)
        assert victim_node is not None
        await SimCloud(env.client).stop_kubelet(env.namespace, victim)
        await world.until(
            lambda: condition_status(world.node_of(victim), "Ready") == "Unknown",
            f"{victim}'s Node Unknown after the grace period",
        )
        kills = asyncio.create_task(chaos_kills(controller, KILLS * scale, rng, max_delay=2.0))
        await world.until(
            lambda: (
                victim not in {m["metadata"]["name"] for m in world.objects("machines")}
                and world.steady(name, 3, VERSION)()
                and healthy(3)
            ),
            f"{victim} replaced and 3 healthy again",
        )
        await kills
        await world.until(world.steady(name, 3, VERSION), "settled after the last kill")
        assert check_converged(world, name, 3, VERSION) == []
        assert deleted_machines == [victim], deleted_machines
        assert [d.name for d in world.deleted_nodes] == [victim_node["metadata"]["name"]]
        assert spared <= {m["metadata"]["name"] for m in world.objects("machines")}
        assert controller.kills == KILLS * scale
    finally:
        await checks.stop()
