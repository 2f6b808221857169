"""Cloud faults: a fifth of the simulated cloud's calls fail (before or after acting) or stall,
and a fifth of the instances fail at boot, while the pool scales and rolls; the controller is
also killed now and then. Convergence must come without duplicates: exactly the desired
instances live, one Machine, SimMachine and Node each, failed ones replaced and cleaned up.
"""

from __future__ import annotations

import random

from tests.reliability.harness import Env, chaos_kills, check_converged
from tests.reliability.report import Recorder
from tests.support.builders import VERSION, create_pool
from tests.support.pools import roll_pool, scale_pool

from machinepool.simworld import Faults, SimCloud

FAULTS = Faults(error_rate=0.07, error_after_rate=0.07, stall_rate=0.06, stall_seconds=3.0)
"""20% of create/delete calls misbehave: fail before acting, fail after acting (a lost
response), or stall."""
BOOT_FAILURE_RATE = 0.2


async def test_flaky_cloud_converges_without_duplicates(
    env: Env, scale: int, report: Recorder
) -> None:
    rng = random.Random(77 * scale)
    cloud = SimCloud(env.client)
    await cloud.set_faults(env.namespace, FAULTS)
    controller, _kubelet = await env.spawn_system()
    world, name = env.world, "flaky"
    sim = {
        "template": {"instanceType": "sim.small"},
        "sim": {"bootDelaySeconds": 1, "bootFailureRate": BOOT_FAILURE_RATE},
    }
    await create_pool(env.client, env.namespace, name, replicas=3, sim_spec=sim)
    steps: list[tuple[int, str]] = [(3, VERSION), (6, VERSION), (2, "v1.34.1"), (4, "v1.34.2")]
    steps += [(rng.randint(1, 4), f"v1.34.{3 + i}") for i in range(scale - 1)]
    for replicas, version in steps:
        await scale_pool(env.client, env.namespace, name, replicas)
        await roll_pool(env.client, env.namespace, name, version)
        await chaos_kills(controller, 2, rng, max_delay=4.0)
        await world.until(
            world.steady(name, replicas, version),
            f"{replicas} Ready on {version} despite cloud faults",
        )
    final_replicas, final_version = steps[-1]
    assert check_converged(world, name, final_replicas, final_version) == []
    records = world.seen_records.values()
    boot_failures = sum(1 for r in records if r.will_fail)
    failed_calls = controller.log.read_text(errors="replace").count("(injected fault)")
    assert await env.secret_findings() == []
    print(
        f"\nreliability: {len(records)} instances created, {boot_failures} failed at boot, "
        f"{failed_calls} injected cloud-call errors logged, {controller.kills} kills, "
        "0 duplicates"
    )
    report.record("instances created", len(records))
    report.record("instances failed at boot", boot_failures)
    report.record("injected cloud-call errors logged", failed_calls)
    report.record("SIGKILLs survived", controller.kills)
    report.record("duplicates", 0)
