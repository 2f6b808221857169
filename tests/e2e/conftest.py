"""End-to-end fixture: the whole system in one in-process Manager against real API servers.

``system`` gives a test a fresh namespace, a fresh workload cluster registered as a Cluster
(with its ``<cluster>-kubeconfig`` Secret), and a running Manager with every controller: core
MachinePool, Machine and MachineHealthCheck, kubeadm bootstrap, the sim provider and the node
simulator. Helpers
create pools and wait for conditions by watching informers (no sleeps). CLI and benchmark
tests reuse it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio

from machinepool.controlplane import WorkloadCluster
from machinepool.controlplane.register import register_workload_cluster
from machinepool.providers.sim import SIM_MACHINE_POOLS, SIM_MACHINES, SimCloud
from machinepool.runtime import (
    NODES,
    SECRETS,
    Client,
    ClusterCache,
    FuncHandler,
    Informer,
    Manager,
    Obj,
    Resource,
)

MACHINE_POOLS = Resource("cluster.x-k8s.io", "v1beta2", "machinepools", "MachinePool")
MACHINES = Resource("cluster.x-k8s.io", "v1beta2", "machines", "Machine")
KUBEADM_CONFIGS = Resource(
    "bootstrap.cluster.x-k8s.io", "v1beta2", "kubeadmconfigs", "KubeadmConfig"
)
VERSION = "v1.34.0"
WAIT = 120.0
"""Upper bound of any wait; a safety net so a broken system fails instead of hanging."""


@dataclass
class System:
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
    watched: dict[str, Informer] = field(default_factory=dict)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def _poke(self, *_: Obj) -> None:
        self._changed.set()

    async def watch(self, name: str, informer: Informer) -> Informer:
        informer.add_handler(FuncHandler(self._poke, lambda _o, _n: self._poke(), self._poke))
        self.watched[name] = informer
        return informer

    async def until(self, check: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
        """Wait until ``check()`` holds, re-checking on every watched change."""
        try:
            async with asyncio.timeout(timeout):
                while not check():
                    self._changed.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(1.0):  # also re-check as clocks move
                            await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"timed out waiting for: {what}") from None

    async def _changes(self, window: float) -> AsyncIterator[None]:
        """Yield on each watched change until ``window`` seconds have passed."""
        loop = asyncio.get_running_loop()
        end = loop.time() + window
        while True:
            self._changed.clear()
            try:
                async with asyncio.timeout(max(0.0, end - loop.time())):
                    await self._changed.wait()
            except TimeoutError:
                return
            yield

    async def unchanged(self, observe: Callable[[], object], what: str, window: float) -> None:
        """Fail as soon as ``observe()`` differs from its value now, re-read on every watched
        change over ``window`` seconds: "nothing happens" checked on the events themselves,
        e.g. ``await system.unchanged(lambda: len(system.machines("p")), "no new Machine", 5)``.
        """
        before = observe()
        async for _ in self._changes(window):
            if (now := observe()) != before:
                raise AssertionError(f"{what}: {before!r} became {now!r}")

    async def settled(
        self, observe: Callable[[], object], what: str, quiet: float, timeout: float = WAIT
    ) -> None:
        """Wait until ``observe()`` has kept one value for ``quiet`` seconds of watched events;
        fail if it never does within ``timeout`` (a system that keeps rewriting never settles)."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        await self.unchanged(observe, what, quiet)
                        return
                    except AssertionError:
                        continue
        except TimeoutError:
            raise AssertionError(f"never settled for {quiet}s: {what}") from None

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

    def ready_nodes(self, version: str | None = None) -> list[Obj]:
        return [
            n
            for n in self.nodes.list()
            if _node_ready(n)
            and (version is None or n["status"]["nodeInfo"]["kubeletVersion"] == version)
        ]

    def pool_running(self, name: str, replicas: int) -> bool:
        mp = self.machine_pool(name)
        if mp is None:
            return False
        status = mp.get("status") or {}
        refs = status.get("nodeRefs") or []
        return (
            status.get("phase") == "Running"
            and status.get("readyReplicas", 0) == replicas
            and len(refs) == replicas
            and len(self.ready_nodes()) == replicas
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
        instance_type: str = "small",
    ) -> None:
        """KubeadmConfig + SimMachinePool + MachinePool named ``name``."""
        await self.client.create(
            KUBEADM_CONFIGS,
            {
                "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
                "kind": "KubeadmConfig",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"joinConfiguration": {"nodeRegistration": {}}},
            },
            self.namespace,
        )
        pool_spec: dict[str, Any] = {"template": {"instanceType": instance_type, "image": "sim"}}
        if strategy is not None:
            pool_spec["strategy"] = strategy
        if sim is not None:
            pool_spec["sim"] = sim
        await self.client.create(
            SIM_MACHINE_POOLS,
            {
                "apiVersion": SIM_MACHINE_POOLS.api_version,
                "kind": "SimMachinePool",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": pool_spec,
            },
            self.namespace,
        )
        spec: dict[str, Any] = {
            "clusterName": self.cluster,
            "replicas": replicas,
            "template": {
                "spec": {
                    "clusterName": self.cluster,
                    "version": version,
                    "bootstrap": {
                        "configRef": {
                            "apiGroup": "bootstrap.cluster.x-k8s.io",
                            "kind": "KubeadmConfig",
                            "name": name,
                        }
                    },
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "SimMachinePool",
                        "name": name,
                    },
                }
            },
        }
        if failure_domains is not None:
            spec["failureDomains"] = failure_domains
        await self.client.create(
            MACHINE_POOLS,
            {
                "apiVersion": MACHINE_POOLS.api_version,
                "kind": "MachinePool",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": spec,
            },
            self.namespace,
        )

    async def scale(self, name: str, replicas: int) -> None:
        await self.client.set_scale(MACHINE_POOLS, name, self.namespace, replicas)


def _node_ready(node: Obj) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


@pytest_asyncio.fixture(loop_scope="session")
async def system(
    client: Client, namespace: str, workload: WorkloadCluster, crds: list[str]
) -> AsyncIterator[System]:
    from machinepool import bootstrap, kubelet
    from machinepool.bootstrap import kubeadm
    from machinepool.controllers import machine, machinehealthcheck, machinepool
    from machinepool.providers import sim

    _ = (bootstrap, crds)
    cluster = "work"
    await register_workload_cluster(client, cluster, namespace, workload)
    mgr = Manager(client, leader_election=None, bind_address="127.0.0.1:0")
    cache = ClusterCache(client, probe_interval=5.0)
    for setup in (
        machinepool.setup,
        machine.setup,
        machinehealthcheck.setup,
        kubeadm.setup,
        sim.setup,
    ):
        await setup(mgr, cache)
    # A stopped kubelet's Node turns Unknown 5 s after its last heartbeat (kube-controller-
    # manager's default is 50 s): health-check tests wait less, nothing else is affected.
    await kubelet.setup(mgr, cache, heartbeat_seconds=20.0, node_monitor_grace_seconds=5.0)
    await mgr.start()
    workload_client = await Client.from_kubeconfig(workload.kubeconfig)
    nodes = Informer(workload_client, NODES)
    await nodes.start()
    await nodes.wait_synced()
    system = System(
        client, namespace, cluster, workload, workload_client, mgr, cache, SimCloud(client), nodes
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
