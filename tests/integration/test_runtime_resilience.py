"""Watches survive an API server restart; two managers share one Lease; a workload cluster's
Node informer comes from its kubeconfig Secret. Real control plane, generous bounds."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from tests.support import eventually
from tests.support.resources import CLUSTERS

from machinepool.controlplane import ControlPlane, WorkloadCluster
from machinepool.runtime import (
    CONFIGMAPS,
    LEASES,
    NODES,
    SECRETS,
    Client,
    ClusterCache,
    ClusterNotConnected,
    ClusterUnhealthy,
    Controller,
    FuncHandler,
    Informer,
    LeaderElectionConfig,
    Manager,
    ObjectKey,
    WorkQueue,
)

GENEROUS = 60.0


async def retrying(op: Callable[[], Any], within: float = GENEROUS) -> Any:
    """Retry an API call while the server comes back."""
    async with asyncio.timeout(within):
        while True:
            try:
                return await op()
            except Exception:
                await asyncio.sleep(0.2)


async def test_watch_resumes_after_apiserver_restart_without_losing_updates(
    control_plane: ControlPlane, namespace: str
) -> None:
    async with await Client.from_kubeconfig(control_plane.kubeconfig) as client:
        informer = Informer(client, CONFIGMAPS, namespace, backoff_base=0.1, backoff_cap=1.0)
        seen: list[str] = []
        informer.add_handler(
            FuncHandler(
                add=lambda o: seen.append(o["data"]["v"]),
                update=lambda old, new: seen.append(new["data"]["v"]),
            )
        )
        await client.create(CONFIGMAPS, {"metadata": {"name": "r"}, "data": {"v": "0"}}, namespace)
        await informer.start()
        try:
            async with asyncio.timeout(GENEROUS):
                await informer.wait_synced()
            await eventually(lambda: seen == ["0"])
            await asyncio.to_thread(control_plane.restart_apiserver)
            # Written after the restart, while the informer is still reconnecting.
            for i in range(1, 11):
                await retrying(update(client, namespace, str(i)))
            await eventually(lambda: (informer.get("r", namespace) or {})["data"]["v"] == "10")
        finally:
            await informer.stop()
    assert seen == [str(i) for i in range(11)], "every update arrives, in order, exactly once"


def update(client: Client, namespace: str, value: str) -> Callable[[], Any]:
    async def op() -> Any:
        return await client.patch(CONFIGMAPS, "r", {"data": {"v": value}}, namespace)

    return op


def election(namespace: str, identity: str) -> LeaderElectionConfig:
    return LeaderElectionConfig(
        "runtime-test",
        namespace,
        identity=identity,
        lease_duration=4.0,
        renew_deadline=3.0,
        retry_period=0.5,
        release_on_cancel=False,  # cancelling run() below stands for a crash
    )


async def test_two_managers_one_leader_and_handover_on_kill(
    control_plane: ControlPlane, client: Client, namespace: str
) -> None:
    reconciled_by: dict[str, set[str]] = {"a": set(), "b": set()}
    managers: dict[str, Manager] = {}
    clients: list[Client] = []
    for ident in ("a", "b"):
        own = await Client.from_kubeconfig(control_plane.kubeconfig)
        clients.append(own)
        mgr = Manager(own, leader_election=election(namespace, ident), bind_address=None)
        informer = await mgr.cache.get_informer(CONFIGMAPS, namespace)

        async def reconcile(key: ObjectKey, ident: str = ident) -> None:
            reconciled_by[ident].add(key.name)

        mgr.new_controller("cm", reconcile).watch(informer)
        managers[ident] = mgr
    runs = {ident: asyncio.create_task(mgr.run()) for ident, mgr in managers.items()}
    try:
        await eventually(lambda: any(m.is_leader for m in managers.values()))
        await client.create(CONFIGMAPS, {"metadata": {"name": "one"}}, namespace)
        await eventually(lambda: any("one" in s for s in reconciled_by.values()))
        await asyncio.sleep(2.0)  # several renew periods: leadership must stay single
        leaders = [i for i, m in managers.items() if m.is_leader]
        assert len(leaders) == 1
        leader, follower = leaders[0], "b" if leaders[0] == "a" else "a"
        assert reconciled_by[follower] == set(), "only the leader reconciles"
        lease = await client.get(LEASES, "runtime-test", namespace)
        assert lease["spec"]["holderIdentity"] == leader

        runs[leader].cancel()  # a crash: no release, the lease must expire
        with contextlib.suppress(asyncio.CancelledError):
            await runs[leader]
        loop = asyncio.get_running_loop()
        killed_at = loop.time()
        await eventually(lambda: managers[follower].is_leader, within=4.0 * 5)
        assert loop.time() - killed_at < 4.0 * 5
        await client.create(CONFIGMAPS, {"metadata": {"name": "two"}}, namespace)
        await eventually(lambda: "two" in reconciled_by[follower])
        assert "two" not in reconciled_by[leader]
    finally:
        for task in runs.values():
            task.cancel()
        await asyncio.gather(*runs.values(), return_exceptions=True)
        for own in clients:
            await own.close()


async def test_graceful_stop_releases_the_lease(client: Client, namespace: str) -> None:
    cfg = LeaderElectionConfig(
        "release-test", namespace, identity="x", lease_duration=4, renew_deadline=3,
        retry_period=0.5,
    )  # fmt: skip
    mgr = Manager(client, leader_election=cfg, bind_address=None)
    await mgr.start()
    async with asyncio.timeout(GENEROUS):
        await mgr.wait_leading()
    await mgr.stop()
    lease = await client.get(LEASES, "release-test", namespace)
    assert not lease["spec"].get("holderIdentity")


async def kubeconfig_secret(client: Client, namespace: str, name: str, kubeconfig: Any) -> None:
    value = base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()
    await client.create(
        SECRETS,
        {"metadata": {"name": f"{name}-kubeconfig"}, "data": {"value": value}},
        namespace,
    )


@pytest.mark.usefixtures("control_plane", "crds")
async def test_workload_node_informer_from_kubeconfig_secret(
    client: Client, namespace: str, workload: WorkloadCluster
) -> None:
    cluster = ObjectKey(namespace, "wl")
    # The cache drops a workload cluster whose Cluster object is gone, so there must be one.
    await client.create(CLUSTERS, {"metadata": {"name": "wl"}, "spec": {}}, namespace)
    cache = ClusterCache(client, probe_interval=0.3, failure_threshold=2, probe_timeout=10)
    with pytest.raises(ClusterNotConnected, match="wl-kubeconfig not found"):
        await cache.get_client(cluster)
    cache.connect_backoff = 0
    await kubeconfig_secret(client, namespace, "wl", workload.kubeconfig_dict())
    queue: WorkQueue[ObjectKey] = WorkQueue()
    ctrl_queue = Controller("pools", lambda key: _noop(), concurrency=1)

    def node_to_pool(node: dict[str, Any]) -> list[ObjectKey]:
        pool = node["metadata"].get("labels", {}).get("pool")
        return [ObjectKey(cluster.namespace, pool)] if pool else []

    try:
        nodes = await cache.get_informer(cluster, NODES)
        await cache.watch(cluster, NODES, ctrl_queue.handler(node_to_pool))
        await cache.watch(cluster, NODES, FuncHandler(add=lambda n: queue.add(ObjectKey.of(n))))
        workload_client = await cache.get_client(cluster)
        node = {"metadata": {"name": "n1", "labels": {"pool": "mp-1"}}, "spec": {}}
        await workload_client.create(NODES, node)
        await eventually(lambda: nodes.get("n1") is not None)
        assert len(ctrl_queue.queue) == 1
        assert await ctrl_queue.queue.get() == ObjectKey(namespace, "mp-1")
        assert await queue.get() == ObjectKey("", "n1")
        assert cache.is_healthy(cluster)

        # A rotated kubeconfig: the connection is rebuilt and the watch moves along.
        rotated = {**workload.kubeconfig_dict(), "preferences": {"colors": False}}
        value = base64.b64encode(yaml.safe_dump(rotated).encode()).decode()
        patch = {"data": {"value": value}}
        await client.patch(SECRETS, "wl-kubeconfig", patch, namespace)
        await eventually(lambda: cache.get_informer_nowait(cluster, NODES) not in (None, nodes))
        rebuilt = await cache.get_informer(cluster, NODES)
        assert rebuilt.get("n1") is not None
        fresh_client = await cache.get_client(cluster)
        assert fresh_client is not workload_client
        await fresh_client.create(NODES, {"metadata": {"name": "n2", "labels": {"pool": "mp-2"}}})
        await eventually(lambda: len(ctrl_queue.queue) > 0)
        assert await ctrl_queue.queue.get() == ObjectKey(namespace, "mp-2")

        workload.stop_apiserver()
        await eventually(lambda: not cache.is_healthy(cluster))
        with pytest.raises(ClusterUnhealthy, match="consecutive health probes failed"):
            await cache.get_client(cluster)

        await client.delete(SECRETS, "wl-kubeconfig", namespace)
        await eventually(lambda: cluster not in cache.clusters)
    finally:
        await cache.stop()


async def _noop() -> None:
    return None
