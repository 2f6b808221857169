"""End-to-end fixture: the whole system in one in-process Manager against real API servers.

``system`` gives a test a fresh namespace, a fresh workload cluster registered as a Cluster
(with its ``<cluster>-kubeconfig`` Secret), and a running Manager with every controller: core
MachinePool, Machine and MachineHealthCheck, kubeadm bootstrap, the sim provider and the node
simulator. Helpers
create pools and wait for conditions by watching informers (no sleeps). CLI and benchmark
tests reuse it.

The workload cluster admits kubelets as a kubeadm cluster does (``NodeAuth``), and each
simulated kubelet joins through TLS bootstrap: its bootstrap token buys a CSR, the CSR a
certificate for ``system:node:<name>``, and with it the kubelet writes its own Node, Lease
and Pods' status and nothing else. The admin client creates no Node in these tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from tests.support import Changes
from tests.support.builders import VERSION, create_pool
from tests.support.conditions import is_true
from tests.support.pools import reports_running, scale_pool
from tests.support.resources import MACHINE_POOLS, MACHINES, SIM_MACHINE_POOLS, SIM_MACHINES

from machinepool.controlplane import NodeAuth, WorkloadCluster
from machinepool.controlplane.register import register_workload_cluster
from machinepool.providers.pool.engine import PoolEngine
from machinepool.runtime import (
    NODES,
    SECRETS,
    Client,
    ClusterCache,
    Informer,
    Manager,
    Obj,
)
from machinepool.simworld import SimCloud
from machinepool.simworld.kubelet import KubeletOptions, KubeletSimulator

WAIT = 120.0
"""Upper bound of any wait; a safety net so a broken system fails instead of hanging."""


@dataclass
class System(Changes):
    """A running system and the handles tests need."""

    client: Client
    namespace: str
    cluster: str
    workload: WorkloadCluster
    workload_client: Client
    manager: Manager
    cluster_cache: ClusterCache
    cloud: SimCloud
    nodes: Informer
    """Workload Nodes, watched."""
    kubelet: KubeletSimulator
    """The node simulator."""
    engine: PoolEngine
    """The Sim provider's pool engine."""
    watched: dict[str, Informer] = field(default_factory=dict)
    patience = WAIT

    async def watch(self, name: str, informer: Informer) -> Informer:
        self.watched[name] = self.follow(informer)
        return informer

    async def watch_sim_pools(self) -> Informer:
        """Follow SimMachinePools too, as ``watched["simmachinepools"]`` (once)."""
        if "simmachinepools" not in self.watched:
            await self.watch(
                "simmachinepools", await self.manager.cache.get_informer(SIM_MACHINE_POOLS)
            )
        return self.watched["simmachinepools"]

    # -- reading ----------------------------------------------------------------------

    def machine_pool(self, name: str) -> Obj | None:
        return self.watched["machinepools"].get(name, self.namespace)

    def machines(self, pool: str | None = None) -> list[Obj]:
        items = self.watched["machines"].list(self.namespace)
        if pool is None:
            return items
        return [
            m
            for m in items
            if (m["metadata"].get("labels") or {}).get("cluster.x-k8s.io/pool-name") == pool
        ]

    def node_of(self, machine: str) -> Obj | None:
        """The Node of pool Machine ``machine``, matched by providerID as the core matches
        it: a Node is named after its instance's hostname, never after the instance or its
        Machine."""
        obj = self.watched["machines"].get(machine, self.namespace) or {}
        pid = (obj.get("spec") or {}).get("providerID")
        if not pid:
            return None
        return next((n for n in self.nodes.list() if n["spec"].get("providerID") == pid), None)

    def ready_nodes(self, version: str | None = None) -> list[Obj]:
        return [
            n
            for n in self.nodes.list()
            if is_true(n, "Ready")
            and (version is None or n["status"]["nodeInfo"]["kubeletVersion"] == version)
        ]

    def pool_running(self, name: str, replicas: int) -> bool:
        """The MachinePool reports ``replicas`` running and the workload has that many Ready
        Nodes."""
        return reports_running(self.machine_pool(name), replicas) and (
            len(self.ready_nodes()) == replicas
        )

    # -- writing ----------------------------------------------------------------------

    async def create_pool(
        self,
        name: str,
        replicas: int,
        *,
        version: str = VERSION,
        failure_domains: list[str] | None = None,
        strategy: dict[str, Any] | None = None,
        sim: dict[str, Any] | None = None,
        instance_type: str = "sim.small",
        warm_pool: dict[str, Any] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> None:
        """KubeadmConfig + SimMachinePool + MachinePool (with ``annotations``) named
        ``name``."""
        pool_spec: dict[str, Any] = {"template": {"instanceType": instance_type, "image": "sim"}}
        if strategy is not None:
            pool_spec["strategy"] = strategy
        if sim is not None:
            pool_spec["sim"] = sim
        if warm_pool is not None:
            pool_spec["warmPool"] = warm_pool
        await create_pool(
            self.client,
            self.namespace,
            name,
            sim_spec=pool_spec,
            replicas=replicas,
            cluster=self.cluster,
            version=version,
            failure_domains=failure_domains,
            annotations=annotations,
        )

    async def scale(self, name: str, replicas: int) -> None:
        await scale_pool(self.client, self.namespace, name, replicas)


@pytest.fixture
def workload_node_auth() -> NodeAuth:
    """Kubelets confined to their own Node, as in a kubeadm cluster (see the module's text)."""
    return NodeAuth()


@pytest.fixture
def kubelet_options() -> KubeletOptions:
    """The node simulator's settings for ``system``; a test module overrides this fixture to
    change them (keeping ``kubelet_tls_bootstrap``). A stopped kubelet's Node turns Unknown
    5 s after its last heartbeat or Lease renewal (kube-controller-manager's default is
    50 s): health-check tests wait less, nothing else is affected. Leases are renewed every
    10 s, kubelet's default."""
    return KubeletOptions(
        kubelet_heartbeat_seconds=20.0, node_monitor_grace_seconds=5.0, kubelet_tls_bootstrap=True
    )


@pytest_asyncio.fixture(loop_scope="session")
async def system(
    client: Client,
    namespace: str,
    workload: WorkloadCluster,
    crds: list[str],
    kubelet_options: KubeletOptions,
    pool_node_taints: bool,
) -> AsyncIterator[System]:
    from machinepool import bootstrap
    from machinepool.bootstrap import kubeadm
    from machinepool.controllers import machine, machinehealthcheck, machinepool
    from machinepool.providers import sim
    from machinepool.simworld import kubelet

    _ = (bootstrap, crds)
    cluster = "work"
    await register_workload_cluster(client, cluster, namespace, workload)
    mgr = Manager(client, leader_election=None, bind_address="127.0.0.1:0")
    cache = ClusterCache(client, probe_interval=5.0)
    await machinepool.setup(mgr, cache, pool_node_taints=pool_node_taints)
    await machine.setup(mgr, cache, pool_node_taints=pool_node_taints)
    await machinehealthcheck.setup(mgr, cache)
    await kubeadm.setup(mgr, cache)
    engine = await sim.setup(mgr, cache)
    simulator = await kubelet.wire(mgr, cache, kubelet_options)
    await mgr.start()
    workload_client = await Client.from_kubeconfig(workload.kubeconfig)
    nodes = Informer(workload_client, NODES)
    await nodes.start()
    await nodes.wait_synced()
    system = System(
        client,
        namespace,
        cluster,
        workload,
        workload_client,
        mgr,
        cache,
        SimCloud(client),
        nodes,
        simulator,
        engine,
    )
    await system.watch("nodes", nodes)
    await system.watch("machinepools", await mgr.cache.get_informer(MACHINE_POOLS))
    await system.watch("machines", await mgr.cache.get_informer(MACHINES))
    await system.watch("simmachines", await mgr.cache.get_informer(SIM_MACHINES))
    await system.watch("secrets", await mgr.cache.get_informer(SECRETS, namespace))
    try:
        yield system
    finally:
        await mgr.stop()
        await cache.stop()
        await nodes.stop()
        await workload_client.close()
