"""End to end: MachineHealthChecks mark dead pool nodes and their MachinePool replaces them.

The whole system runs (core MachinePool, Machine and MachineHealthCheck controllers, kubeadm
bootstrap, the Sim provider and the node simulator) against real API servers. Faults come from
the simulated cloud: ``stop_kubelet`` kills an instance's kubelet while the instance keeps
running, so only a health check can notice (its Node turns Ready=Unknown, or never appears).
What happened along the way is recorded from informer events, not sampled.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest_asyncio
from tests.e2e.conftest import System
from tests.support import eventually
from tests.support.conditions import condition
from tests.support.resources import MACHINE_HEALTH_CHECKS, MACHINE_POOLS

from machinepool.api.constants import PAUSED_ANNOTATION, POOL_NAME_LABEL
from machinepool.cli import timeline
from machinepool.controlplane import ControlPlane
from machinepool.runtime import CORE_EVENTS, FuncHandler, Obj
from machinepool.simworld.records import records_in

UNHEALTHY_NODE = [
    {"type": "Ready", "status": "Unknown", "timeoutSeconds": 1},
    {"type": "Ready", "status": "False", "timeoutSeconds": 1},
]
QUIET_WINDOW = 8.0
"""Seconds over which 'nothing was deleted' is counted (several MachinePool reconciles: each
Node, Machine and MachineHealthCheck write wakes the pool)."""


@dataclass
class Journal:
    """Everything the informers showed: Machine conditions, pool Remediating, deletions."""

    machine_conditions: list[tuple[str, str, str, str]] = field(default_factory=list)
    remediating: list[tuple[str, str]] = field(default_factory=list)
    deleting: list[str] = field(default_factory=list)
    pools: dict[str, str] = field(default_factory=dict)

    def on_machine(self, machine: Obj) -> None:
        name = machine["metadata"]["name"]
        self.pools[name] = (machine["metadata"].get("labels") or {}).get(POOL_NAME_LABEL, "")
        for type_ in ("HealthCheckSucceeded", "OwnerRemediated"):
            cond = condition(machine, type_)
            if cond:
                entry = (name, type_, str(cond["status"]), str(cond.get("reason")))
                if entry not in self.machine_conditions:
                    self.machine_conditions.append(entry)
        if machine["metadata"].get("deletionTimestamp") and name not in self.deleting:
            self.deleting.append(name)

    def on_pool(self, mp: Obj) -> None:
        cond = condition(mp, "Remediating")
        if cond:
            entry = (str(cond["status"]), str(cond.get("message")))
            if entry not in self.remediating:
                self.remediating.append(entry)

    def deleted(self, pool: str) -> list[str]:
        """Machines of ``pool`` seen deleting, in order. The shared system runs other tests'
        pools too, and a handler added late is replayed their Machines still being deleted."""
        return [name for name in self.deleting if self.pools.get(name) == pool]

    def saw(self, machine: str, type_: str, status: str) -> bool:
        return any(
            m == machine and t == type_ and s == status for m, t, s, _ in self.machine_conditions
        )


@pytest_asyncio.fixture(loop_scope="session")
async def journal(system: System) -> AsyncIterator[Journal]:
    record = Journal()
    machines, pools = system.watched["machines"], system.watched["machinepools"]
    on_machine = FuncHandler(record.on_machine, lambda _o, n: record.on_machine(n))
    on_pool = FuncHandler(record.on_pool, lambda _o, n: record.on_pool(n))
    machines.add_handler(on_machine)
    pools.add_handler(on_pool)
    await system.watch(
        "machinehealthchecks", await system.manager.cache.get_informer(MACHINE_HEALTH_CHECKS)
    )
    yield record
    machines.remove_handler(on_machine)
    pools.remove_handler(on_pool)


async def _health_check(
    system: System, pool: str, *, startup: int = 600, remediation: dict[str, Any] | None = None
) -> None:
    spec: dict[str, Any] = {
        "clusterName": system.cluster,
        "selector": {"matchLabels": {POOL_NAME_LABEL: pool}},
        "checks": {"nodeStartupTimeoutSeconds": startup, "unhealthyNodeConditions": UNHEALTHY_NODE},
    }
    if remediation:
        spec["remediation"] = remediation
    await system.client.create(
        MACHINE_HEALTH_CHECKS,
        {
            "apiVersion": MACHINE_HEALTH_CHECKS.api_version,
            "kind": "MachineHealthCheck",
            "metadata": {"name": pool, "namespace": system.namespace},
            "spec": spec,
        },
        system.namespace,
    )


def _mhc(system: System, name: str) -> Obj | None:
    return system.watched["machinehealthchecks"].get(name, system.namespace)


def _healthy(system: System, name: str, count: int) -> bool:
    status = (_mhc(system, name) or {}).get("status") or {}
    return status.get("expectedMachines") == count and status.get("currentHealthy") == count


async def _no_deletion_over_window(system: System, journal: Journal, machines: set[str]) -> int:
    """Deletions of ``machines`` seen over ``QUIET_WINDOW`` seconds of informer events."""
    before = len(journal.deleting)
    loop = asyncio.get_running_loop()
    end = loop.time() + QUIET_WINDOW
    while loop.time() < end:
        system._changed.clear()
        try:
            async with asyncio.timeout(end - loop.time()):
                await system._changed.wait()
        except TimeoutError:
            break
    return sum(1 for name in journal.deleting[before:] if name in machines)


async def test_not_ready_node_is_replaced(system: System, journal: Journal) -> None:
    await system.create_pool("heal", 2)
    await system.until(lambda: system.pool_running("heal", 2), "2 Ready nodes")
    await _health_check(system, "heal")
    await system.until(lambda: _healthy(system, "heal", 2), "both targets healthy")
    victim = sorted(m["metadata"]["name"] for m in system.machines("heal"))[0]
    victim_node = system.node_of(victim)
    assert victim_node is not None
    await system.cloud.stop_kubelet(system.namespace, victim)

    def replaced() -> bool:
        names = {m["metadata"]["name"] for m in system.machines("heal")}
        return (
            victim not in names and system.pool_running("heal", 2) and _healthy(system, "heal", 2)
        )

    await system.until(replaced, f"{victim} replaced, 2 Ready nodes again")
    assert journal.saw(victim, "HealthCheckSucceeded", "False")
    assert journal.saw(victim, "OwnerRemediated", "False")
    assert any(s == "True" and victim in m for s, m in journal.remediating), journal.remediating
    await system.until(
        lambda: condition(system.machine_pool("heal"), "Remediating").get("status") == "False",
        "Remediating back to False",
    )
    assert system.nodes.get(victim_node["metadata"]["name"]) is None
    assert journal.deleted("heal") == [victim]


async def test_node_that_never_joins_is_replaced(system: System, journal: Journal) -> None:
    await system.create_pool("late", 1, sim={"bootDelaySeconds": 4})
    await _health_check(system, "late", startup=30)
    secrets = system.watched["secrets"]

    def first_instance() -> str | None:
        names = sorted(
            r.id for s in secrets.list(system.namespace) for r in records_in(s) if r.pool == "late"
        )
        return names[0] if names else None

    await system.until(lambda: first_instance() is not None, "the first instance is created")
    stuck = first_instance()
    assert stuck is not None
    stuck_pid = (await system.cloud.instance(system.namespace, stuck)).provider_id
    assert stuck_pid
    await system.cloud.stop_kubelet(system.namespace, stuck)

    def replaced() -> bool:
        names = {m["metadata"]["name"] for m in system.machines("late")}
        return bool(names) and stuck not in names and system.pool_running("late", 1)

    await system.until(replaced, f"{stuck} replaced after nodeStartupTimeout", timeout=180.0)
    assert (
        stuck,
        "HealthCheckSucceeded",
        "False",
        "NodeStartupTimeout",
    ) in journal.machine_conditions
    # It never joined, so no Node ever named it; nor does any now carry its providerID.
    assert stuck_pid not in {n["spec"].get("providerID") for n in system.nodes.list()}


async def test_three_of_five_unhealthy_at_forty_percent_remediates_none(
    system: System, journal: Journal
) -> None:
    # Three Nodes failing together: their kubelets must have booted together, or their last
    # heartbeats and Lease renewals (the moments their Nodes turn Unknown from) would be
    # seconds apart, and two could be judged, and remediated at 40 %, before the third.
    await system.create_pool("brake", 5, sim={"bootDelaySeconds": 1})
    await system.until(lambda: system.pool_running("brake", 5), "5 Ready nodes")
    await _health_check(
        system, "brake", remediation={"triggerIf": {"unhealthyLessThanOrEqualTo": "40%"}}
    )
    await system.until(lambda: _healthy(system, "brake", 5), "5 healthy targets")
    victims = sorted(m["metadata"]["name"] for m in system.machines("brake"))[:3]
    for name in victims:
        await system.cloud.stop_kubelet(system.namespace, name)

    def braked() -> bool:
        cond = condition(_mhc(system, "brake"), "RemediationAllowed")
        return cond.get("status") == "False" and all(
            journal.saw(v, "HealthCheckSucceeded", "False") for v in victims
        )

    await system.until(braked, "RemediationAllowed=False with 3 unhealthy")
    cond = condition(_mhc(system, "brake"), "RemediationAllowed")
    assert cond["reason"] == "TooManyUnhealthy"
    assert "(total: 5, unhealthy: 3, maxUnhealthy: 40%)" in cond["message"]
    events = await system.client.list(CORE_EVENTS, system.namespace)
    assert any(
        e.get("reason") == "RemediationRestricted"
        and (e.get("involvedObject") or {}).get("kind") == "MachineHealthCheck"
        for e in events.items
    ), [e.get("reason") for e in events.items]
    assert await _no_deletion_over_window(system, journal, set(victims)) == 0
    assert not any(journal.saw(v, "OwnerRemediated", "False") for v in victims)
    assert len(system.machines("brake")) == 5


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MACHINEPOOL_HOME": str(home), "COLUMNS": "250"}
    env.pop("KUBECONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "machinepool", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


async def test_paused_pool_remediates_nothing(
    system: System, journal: Journal, control_plane: ControlPlane, tmp_path: Path
) -> None:
    await system.create_pool("still", 2)
    await system.until(lambda: system.pool_running("still", 2), "2 Ready nodes")
    await _health_check(system, "still")
    await system.until(lambda: _healthy(system, "still", 2), "both targets healthy")
    await system.client.patch(
        MACHINE_POOLS,
        "still",
        {"metadata": {"annotations": {PAUSED_ANNOTATION: ""}}},
        system.namespace,
    )
    await system.until(
        lambda: condition(system.machine_pool("still"), "Paused").get("status") == "True",
        "pool Paused",
    )
    victim = sorted(m["metadata"]["name"] for m in system.machines("still"))[0]
    await system.cloud.stop_kubelet(system.namespace, victim)
    await system.until(
        lambda: journal.saw(victim, "OwnerRemediated", "False"), f"{victim} marked for remediation"
    )
    assert await _no_deletion_over_window(system, journal, {victim}) == 0
    assert victim in {m["metadata"]["name"] for m in system.machines("still")}
    # The marked, paused state holds still: what `machinepool describe pool` shows of it.
    common = ("--kubeconfig", str(control_plane.kubeconfig), "-n", system.namespace)
    described = await asyncio.to_thread(_cli, "describe", "pool", "still", *common, home=tmp_path)
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    victim_line = next(line for line in lines if f"Machine/{victim}" in line)
    assert "health=Unhealthy (UnhealthyNode) remediation=WaitingForRemediation" in victim_line
    other = next(line for line in lines if "Machine/" in line and f"Machine/{victim}" not in line)
    assert "health=Healthy" in other
    # Unpaused, the same pool remediates: the pause was what held it.
    await system.client.patch(
        MACHINE_POOLS,
        "still",
        {"metadata": {"annotations": {PAUSED_ANNOTATION: None}}},
        system.namespace,
    )
    await system.until(lambda: victim in journal.deleting, f"{victim} remediated after unpausing")
    # The timeline lists the health check's verdict and the pool's remediation.
    pool = await system.client.get(MACHINE_POOLS, "still", system.namespace)

    async def listed() -> bool:
        reasons = [reason for _, reason in await timeline._events(system.client, pool)]
        return f"MachineMarkedUnhealthy Machine/{victim}" in reasons and (
            "RemediatingMachine" in reasons
        )

    assert await eventually(listed, within=60.0)
