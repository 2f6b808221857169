"""Crash safety: SIGKILL the controller process at random moments of scale-ups, scale-downs
and rollouts, restart it at once, and check that nothing was lost or wrongly removed.

The controllers (core, kubeadm bootstrap, sim provider) run as one process and the node
simulator as another, so killing the controllers leaves the "machines" running, as in a real
cluster. After each phase converges: instances == desired, providerIDList == instances, no
orphaned instance, Machine, Node or Secret, and every deleted Node was a victim the phase
called for. During rollouts Ready never drops below replicas - maxUnavailable (0) except
while the controller was down.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from tests.reliability.harness import Env, chaos_kills, check_converged, judge_victims
from tests.reliability.report import Recorder
from tests.support.builders import VERSION, create_pool
from tests.support.pools import roll_pool, scale_pool

KILLS_PER_CI_RUN = 52
"""At least 50 SIGKILLs at scale 1, spread over the phases below."""


@dataclass(frozen=True)
class Phase:
    what: str
    replicas: int
    version: str


PHASES = (
    Phase("create", 3, VERSION),
    Phase("scale-up", 5, VERSION),
    Phase("scale-down", 2, VERSION),
    Phase("rollout", 2, "v1.34.1"),
    Phase("rollout+scale-up", 3, "v1.34.2"),
)


async def test_kill_9_during_scale_and_rollout_loses_nothing(
    env: Env, scale: int, report: Recorder
) -> None:
    rng = random.Random(1109 * scale)
    controller, _kubelet = await env.spawn_system(warm_restarts=True)
    kills_per_phase = math.ceil(KILLS_PER_CI_RUN * scale / len(PHASES))
    world, name = env.world, "crash"
    replicas, version = 0, VERSION
    problems: list[str] = []
    for phase in PHASES:
        deleted_before = len(world.deleted_nodes)
        samples_before = len(world.ready_samples)
        old_replicas, old_version = replicas, version
        if phase.what == "create":
            sim = {"template": {"instanceType": "sim.small"}, "sim": {"bootDelaySeconds": 2}}
            await create_pool(
                env.client, env.namespace, name, replicas=phase.replicas, sim_spec=sim
            )
        else:
            if phase.version != version:
                await roll_pool(env.client, env.namespace, name, phase.version)
            if phase.replicas != replicas:
                await scale_pool(env.client, env.namespace, name, phase.replicas)
        replicas, version = phase.replicas, phase.version
        await chaos_kills(controller, kills_per_phase, rng, max_delay=3.0)
        await world.until(
            world.steady(name, replicas, version),
            f"{phase.what}: {replicas} Ready on {version} with nothing lost",
        )
        problems += [f"{phase.what}: {p}" for p in check_converged(world, name, replicas, version)]
        deleted = world.deleted_nodes[deleted_before:]
        rolling = version != old_version
        victims = old_replicas if rolling else max(0, old_replicas - replicas)
        problems += [
            f"{phase.what}: {p}"
            for p in judge_victims(
                deleted, old_version=old_version if rolling else None, max_deleted=victims
            )
        ]
        if rolling:
            floor = min(old_replicas, replicas)  # maxUnavailable 0
            dips = [
                (at, ready)
                for at, ready in world.ready_samples[samples_before:]
                if ready < floor and not controller.was_down(at)
            ]
            problems += [f"{phase.what}: Ready {ready} < {floor}" for _, ready in dips]
    assert controller.kills >= KILLS_PER_CI_RUN * scale
    assert problems == []
    assert await env.secret_findings() == []
    print(
        f"\nreliability: {controller.kills} SIGKILLs survived over {len(PHASES)} phases, "
        f"{len(world.deleted_nodes)} Node deletions all chosen victims, 0 objects lost"
    )
    report.record("SIGKILLs survived", controller.kills)
    report.record("phases", len(PHASES))
    report.record("Node deletions (all chosen victims)", len(world.deleted_nodes))
    report.record("objects lost", 0)
