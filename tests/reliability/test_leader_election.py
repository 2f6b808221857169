"""Leader election: two controller replicas with the same Lease name, the leader killed (and
once cut off from the apiserver) again and again.

Each replica reaches the apiserver only through its own ``AuditProxy``, which records every
request it forwarded, so "never two writers at once" is checked from the outside: the spans
between an incarnation's first and last accepted write (Lease writes aside) never overlap.
Handovers are counted on the Lease itself: each kill or partition moves it exactly once
(``spec.leaseTransitions`` grows by one, so no replica took it back or flapped), and the
restarted replicas never take it from the new leader. The failover time (the new holder's
acquireTime minus the old holder's last renewTime) is recorded as a figure, not asserted.
"""

from __future__ import annotations

import asyncio
import functools
import random
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.reliability.harness import ControllerProcess, Env, check_converged
from tests.reliability.proxy import AuditProxy, Request, overlapping_writers
from tests.reliability.report import Recorder
from tests.support.builders import VERSION, create_pool
from tests.support.pools import scale_pool

from machinepool.controlplane import ControlPlane
from machinepool.runtime import LEASES

LEASE_NAMESPACE = "kube-system"
LEASE_DURATION = 8.0
LEASE_TIMING = (
    f"--leader-elect-lease-duration={LEASE_DURATION}",
    "--leader-elect-renew-deadline=6",
    "--leader-elect-retry-period=1",
)
"""Shorter than the default 15 s / 10 s / 2 s, so each of the failovers waits about half as
long for the Lease to expire; still 2 s between a cut-off leader giving up and the Lease
expiring, and 6 s for a leader on two busy cores to renew."""


def _transitions(lease: dict[str, Any]) -> int:
    return int(lease["spec"].get("leaseTransitions") or 0)


def _time(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


async def _leader(replicas: list[ControllerProcess]) -> ControllerProcess:
    """The replica whose metrics say it leads (asked every half second, for a while)."""
    async with asyncio.timeout(LEASE_DURATION * 4):
        while True:
            for proc in replicas:
                if proc.alive and await proc.metric("leader_election_master_status") == 1.0:
                    return proc
            await asyncio.sleep(0.5)


async def test_leader_killed_and_partitioned_never_two_writers(
    env: Env, control_plane: ControlPlane, scale: int, tmp_path: Path, report: Recorder
) -> None:
    rng = random.Random(2024 + scale)
    audit: list[Request] = []
    ssl_context = control_plane.management.pki.ssl_context()
    proxies: dict[str, AuditProxy] = {}
    replicas: list[ControllerProcess] = []
    lease = f"rel-{env.namespace}"
    try:
        for name in ("replica-a", "replica-b"):
            proxy = AuditProxy(name, control_plane.url, ssl_context, audit)
            await proxy.start()
            proxies[name] = proxy
            replicas.append(
                env.spawn(
                    name,
                    "core,bootstrap,sim",
                    kubeconfig=proxy.write_kubeconfig(tmp_path / f"{name}.kubeconfig"),
                    leader_elect=True,
                    lease_name=lease,
                    extra_args=LEASE_TIMING,
                    warm_restarts=True,
                )
            )
        kubelet = env.spawn("kubelet", "kubelet")
        for proc in [*replicas, kubelet]:
            await proc.wait_ready()
        await create_pool(env.client, env.namespace, "le", replicas=2)
        world = env.world
        failovers: list[float] = []
        rounds = 3 * scale
        for round_ in range(rounds + 1):
            target = rng.choice([1, 2, 3])
            await scale_pool(env.client, env.namespace, "le", target)
            await world.until(
                functools.partial(world.running, "le", target, VERSION),
                f"round {round_}: {target} Ready",
            )
            if round_ == rounds:
                break
            leader = await _leader(replicas)
            before = await env.client.get(LEASES, lease, LEASE_NAMESPACE)
            old_holder = before["spec"]["holderIdentity"]
            proxy = proxies[leader.name]
            if round_ == 1:
                proxy.partition()  # the leader lives on, cut off, while the other takes over
            else:
                leader.kill()
            follower = next(p for p in replicas if p is not leader)
            await _wait_for_new_holder(env, lease, old_holder, follower)
            after = await env.client.get(LEASES, lease, LEASE_NAMESPACE)
            handovers = _transitions(after) - _transitions(before)
            assert handovers == 1, f"round {round_}: the Lease changed hands {handovers} times"
            failovers.append(
                _time(after["spec"]["acquireTime"]) - _time(before["spec"]["renewTime"])
            )
            if proxy.partitioned:
                proxy.heal()
            else:
                proxy.incarnation += 1
                leader.start()
            await leader.wait_ready()
        assert overlapping_writers(audit) == []
        assert check_converged(world, "le", target, VERSION) == []
        # Restarted replicas rejoin as followers: nothing moved the Lease but the failovers.
        final = await env.client.get(LEASES, lease, LEASE_NAMESPACE)
        assert _transitions(final) == rounds, _transitions(final)
        writers = {(r.replica, r.incarnation) for r in audit if r.is_write and not r.is_lease}
        assert len(writers) >= 2  # leadership really moved between replicas
        assert await env.secret_findings() == []
        report.record("leader failovers (1 by partition)", rounds)
        report.record("Lease transitions", _transitions(final))
        report.record(f"longest failover, s (lease {LEASE_DURATION:.0f} s)", max(failovers))
        report.record("requests audited", len(audit))
        report.record("overlapping writers", 0)
        print(
            f"\nreliability: {rounds} leader failovers (1 by partition), "
            f"longest {max(failovers):.1f}s, {len(audit)} requests audited, 0 overlapping writers"
        )
    finally:
        for proc in replicas:
            proc.stop()
        for proxy in proxies.values():
            await proxy.stop()


async def _wait_for_new_holder(
    env: Env, lease: str, old_holder: str, follower: ControllerProcess
) -> None:
    async def moved() -> bool:
        current = await env.client.get(LEASES, lease, LEASE_NAMESPACE)
        return bool(current["spec"].get("holderIdentity") not in (None, "", old_holder))

    async with asyncio.timeout(LEASE_DURATION * 4):
        while not await moved():  # noqa: ASYNC110 - the Lease is another cluster's object
            await asyncio.sleep(0.5)
    await follower.wait_ready()
