"""End to end: a Node whose kubelet stops is judged by the real node lifecycle controller, and
its MachineHealthCheck has the MachinePool replace it.

The workload cluster runs kube-controller-manager's node lifecycle controller
(``PodLifecycle``) with short grace settings; the node simulator renews each Node's Lease
every 2 s, as kubelet does every 10 s. ``SimCloud.stop_kubelet`` silences one instance's
kubelet while the instance runs on: no heartbeat, no Lease renewal. The controller then turns
that Node's Ready condition Unknown and taints it ``node.kubernetes.io/unreachable``; the
MachineHealthCheck finds the Machine unhealthy and the MachinePool replaces it.

The node simulator can write the same Unknown verdict itself, standing in for this
controller where a workload cluster runs none (``KubeletOptions.node_monitor_grace_seconds``):
here its grace is an hour, longer than the test, so only the real controller can have done it,
and only the real controller taints.
"""

from __future__ import annotations

import pytest
from tests.e2e.conftest import System
from tests.support.conditions import condition
from tests.support.resources import MACHINE_HEALTH_CHECKS

from machinepool.api.constants import POOL_NAME_LABEL
from machinepool.controlplane import PodLifecycle
from machinepool.runtime import FuncHandler, Obj
from machinepool.simworld.kubelet import KubeletOptions

UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
LEASE_RENEW_SECONDS = 2.0
GRACE_SECONDS = 10.0
"""The node lifecycle controller's grace: five Lease renewals, so a healthy Node on a busy
machine is never judged dead, and a dead one is within seconds."""
UNHEALTHY_AFTER = 5
"""The health check's timeout: the unreachable taint follows the Unknown verdict within a
second, so the watch sees both before remediation takes the Node away."""


@pytest.fixture
def workload_pods() -> PodLifecycle:
    return PodLifecycle(node_monitor_grace_seconds=GRACE_SECONDS, node_monitor_period_seconds=1)


@pytest.fixture
def kubelet_options() -> KubeletOptions:
    return KubeletOptions(
        kubelet_heartbeat_seconds=20.0,
        kubelet_lease_renew_seconds=LEASE_RENEW_SECONDS,
        kubelet_lease_duration_seconds=int(GRACE_SECONDS),
        node_monitor_grace_seconds=3600.0,
        kubelet_tls_bootstrap=True,
    )


def _ready_condition(node: Obj) -> Obj:
    return condition(node, "Ready")


def _taint_keys(node: Obj) -> set[str]:
    return {str(t.get("key")) for t in (node.get("spec") or {}).get("taints") or []}


class NodeVerdicts:
    """What the Node watch showed of one Node: its Ready condition while Unknown, and the
    taints it carried then (kept after the Node is gone)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.unknown: Obj | None = None
        self.unknown_taints: set[str] = set()

    def seen(self, node: Obj) -> None:
        if node["metadata"]["name"] != self.name:
            return
        ready = _ready_condition(node)
        if ready.get("status") == "Unknown":
            self.unknown = self.unknown or ready
            self.unknown_taints |= _taint_keys(node)

    def judged(self) -> bool:
        return self.unknown is not None and UNREACHABLE_TAINT in self.unknown_taints


async def _health_check(system: System, pool: str) -> None:
    """Ready Unknown or False for ``UNHEALTHY_AFTER`` seconds makes a Machine of ``pool``
    unhealthy."""
    unhealthy = [
        {"type": "Ready", "status": "Unknown", "timeoutSeconds": UNHEALTHY_AFTER},
        {"type": "Ready", "status": "False", "timeoutSeconds": UNHEALTHY_AFTER},
    ]
    spec = {
        "clusterName": system.cluster,
        "selector": {"matchLabels": {POOL_NAME_LABEL: pool}},
        "checks": {"nodeStartupTimeoutSeconds": 600, "unhealthyNodeConditions": unhealthy},
    }
    body = {
        "apiVersion": MACHINE_HEALTH_CHECKS.api_version,
        "kind": "MachineHealthCheck",
        "metadata": {"name": pool, "namespace": system.namespace},
        "spec": spec,
    }
    await system.client.create(MACHINE_HEALTH_CHECKS, body, system.namespace)


def _all_healthy(system: System, name: str, count: int) -> bool:
    mhc = system.watched["machinehealthchecks"].get(name, system.namespace) or {}
    status = mhc.get("status") or {}
    return status.get("expectedMachines") == count and status.get("currentHealthy") == count


async def test_a_silent_kubelet_is_judged_unreachable_and_its_machine_replaced(
    system: System,
) -> None:
    await system.watch(
        "machinehealthchecks", await system.manager.cache.get_informer(MACHINE_HEALTH_CHECKS)
    )
    await system.create_pool("heal", 2)
    await system.until(lambda: system.pool_running("heal", 2), "2 Ready nodes")
    await _health_check(system, "heal")
    await system.until(lambda: _all_healthy(system, "heal", 2), "both Machines healthy")
    victim = sorted(m["metadata"]["name"] for m in system.machines("heal"))[0]
    victim_node = system.node_of(victim)
    assert victim_node is not None
    node_name = victim_node["metadata"]["name"]
    verdicts = NodeVerdicts(node_name)
    system.nodes.add_handler(FuncHandler(verdicts.seen, lambda _o, n: verdicts.seen(n)))

    await system.cloud.stop_kubelet(system.namespace, victim)
    await system.until(
        verdicts.judged,
        f"the node lifecycle controller to mark {node_name} Unknown and taint it unreachable",
        timeout=GRACE_SECONDS * 6,
    )
    assert verdicts.unknown is not None
    assert verdicts.unknown.get("reason") == "NodeStatusUnknown", verdicts.unknown

    def replaced() -> bool:
        names = {m["metadata"]["name"] for m in system.machines("heal")}
        return (
            victim not in names
            and system.nodes.get(node_name) is None
            and system.pool_running("heal", 2)
            and _all_healthy(system, "heal", 2)
        )

    await system.until(replaced, f"{victim} replaced, 2 Ready Nodes again")
    survivors = system.nodes.list()
    assert all(UNREACHABLE_TAINT not in _taint_keys(n) for n in survivors), survivors
