"""Control-plane faults during a rollout: the management kube-apiserver restarts, etcd
restarts, and the workload cluster's apiserver is unreachable for a while (a scale-up is
requested meanwhile). Afterwards everything converges with nothing lost, and no key was
retried faster than its backoff allows: every streak of failed reconciles of one key (from
the controller's JSON log) is held to the count the 5 ms-doubling backoff permits over the
streak's span, plus ``RETRY_SLACK`` for changes by others that re-queue a key at once.
Before the fix, a failing reconcile's own writes echoed back while it ran and re-ran the
key at once: 11 failures of one MachinePool in 0.6 s, where the backoff allows 7.

These tests start their own ``ControlPlane``: restarting the session one would disturb every
other test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from tests.reliability.harness import (
    Env,
    check_converged,
    failure_streaks,
    judge_victims,
    private_env,
    storms,
)
from tests.reliability.report import Recorder
from tests.support.builders import VERSION, create_pool
from tests.support.pools import roll_pool, scale_pool

from machinepool.controlplane import ControlPlane

OUTAGE_SECONDS = 8.0
"""How long the workload cluster stays unreachable (longer than a cluster-cache probe)."""
RETRY_SLACK = 6
"""Failures a streak may have beyond its backoff budget: events by others re-queue a key at
once, as in client-go. During the outage the pool sees up to six: the scale-up itself, an
infra machine and an infra pool status write for each of the two new instances (created
together since the pool engine creates a step's instances in parallel), and a Node coming
back. The storm this guards against was hundreds of attempts (the integration test
test_runtime_retry_storm counts it exactly)."""


@pytest_asyncio.fixture(loop_scope="session")
async def own_env(tmp_path: Path, logs: Path) -> AsyncIterator[tuple[ControlPlane, Env]]:
    async with private_env(tmp_path, logs, "faults") as made:
        yield made


async def test_apiserver_etcd_and_workload_outages_during_rollout(
    own_env: tuple[ControlPlane, Env], report: Recorder
) -> None:
    cp, env = own_env
    world, name, new = env.world, "faults", "v1.34.1"
    controller = env.spawn("controller", "core,bootstrap,sim", extra_args=("--log-format", "json"))
    kubelet = env.spawn("kubelet", "kubelet")
    await controller.wait_ready()
    await kubelet.wait_ready()
    sim = {"template": {"instanceType": "sim.small"}, "sim": {"bootDelaySeconds": 2}}
    await create_pool(env.client, env.namespace, name, replicas=3, sim_spec=sim)
    await world.until(lambda: world.running(name, 3, VERSION), "3 Ready before the faults")
    deleted_before = len(world.deleted_nodes)

    await roll_pool(env.client, env.namespace, name, new)
    await world.until(lambda: len(world.ready_nodes(new)) >= 1, "rollout under way")
    await asyncio.to_thread(cp.restart_apiserver)
    await world.until(lambda: len(world.ready_nodes(new)) >= 2, "rollout resumed")
    await asyncio.to_thread(cp.restart_etcd)
    workload = cp.workloads["faults"]
    await asyncio.to_thread(workload.stop_apiserver)
    await scale_pool(env.client, env.namespace, name, 4)
    await asyncio.sleep(OUTAGE_SECONDS)  # the outage itself: nothing to watch for
    await asyncio.to_thread(workload.start_apiserver)

    await world.until(
        lambda: world.running(name, 4, new) and not check_converged(world, name, 4, new),
        "4 Ready on the new version after the faults",
    )
    assert check_converged(world, name, 4, new) == []
    deleted = world.deleted_nodes[deleted_before:]
    assert judge_victims(deleted, old_version=VERSION, max_deleted=3) == []
    assert await env.secret_findings() == []
    streaks = failure_streaks(controller.log)
    failed = sum(len(s.times) for s in streaks)
    longest = max((len(s.times) for s in streaks), default=0)
    print(
        "\nreliability: apiserver restart, etcd restart, workload outage survived, 0 lost;"
        f" {failed} failed reconciles in {len(streaks)} streaks (longest {longest})"
    )
    report.record("faults", "1 kube-apiserver restart, 1 etcd restart, 1 workload outage of 8 s")
    report.record("failed reconciles", failed)
    report.record("failure streaks (longest)", f"{len(streaks)} ({longest})")
    assert failed > 0, "the faults should make some reconciles fail"
    assert storms(streaks, RETRY_SLACK) == []
