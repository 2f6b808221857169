"""Managers that share one management cluster without sharing objects: ``--watch-filter`` and
``--namespace``, each checked from outside through an ``AuditProxy`` per manager.

- Two managers with filters ``a`` and ``b``: each pool (Cluster, MachinePool, KubeadmConfig,
  SimMachinePool labelled ``cluster.x-k8s.io/watch-filter``) converges, every write to a
  pool's objects comes from the manager whose filter it carries, and neither manager ever
  listed or watched a filtered kind without its own label selector.
- One manager with ``--namespace``: its pool converges, a pool in another namespace stays
  untouched (no finalizer, no status, no request of that manager into its namespace), and it
  never listed or watched a namespaced kind across all namespaces.

The node simulator runs unscoped in its own process, as the shared infra of a test would.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from tests.reliability.harness import WAIT, ControllerProcess, Env
from tests.reliability.proxy import AuditProxy, Request
from tests.support.builders import pool_objects
from tests.support.pools import reports_running
from tests.support.resources import (
    CLUSTERS,
    KUBEADM_CONFIGS,
    MACHINE_POOLS,
    MACHINES,
    SIM_MACHINE_POOLS,
    SIM_MACHINES,
)

from machinepool.api.constants import POOL_NAME_LABEL, WATCH_FILTER_LABEL
from machinepool.controlplane import ControlPlane, WorkloadCluster
from machinepool.controlplane.register import register_workload_cluster
from machinepool.runtime import NAMESPACES, Client, NotFound

FILTERED_KINDS = ("machinepools", "machines", "kubeadmconfigs", "simmachinepools", "simmachines")
"""The kinds a scoped manager caches under its scope (Clusters are read unfiltered)."""


async def _create_pool(
    client: Client, name: str, namespace: str, cluster: str, labels: dict[str, str]
) -> None:
    for res, body in pool_objects(namespace, name, replicas=2, cluster=cluster):
        body["metadata"]["labels"] = dict(labels)
        await client.create(res, body, namespace)


async def _running(client: Client, name: str, namespace: str, replicas: int) -> None:
    async with asyncio.timeout(WAIT):
        while True:
            if reports_running(
                await client.get(MACHINE_POOLS, name, namespace), replicas, node_refs=False
            ):
                return
            await asyncio.sleep(0.5)


async def _spawn_scoped(
    env: Env,
    control_plane: ControlPlane,
    tmp_path: Path,
    audit: list[Request],
    name: str,
    args: tuple[str, ...],
) -> tuple[ControllerProcess, AuditProxy]:
    proxy = AuditProxy(name, control_plane.url, control_plane.management.pki.ssl_context(), audit)
    await proxy.start()
    proc = env.spawn(
        name,
        "core,bootstrap,sim",
        kubeconfig=proxy.write_kubeconfig(tmp_path / f"{name}.kubeconfig"),
        lease_name=f"{name}-{env.namespace}",
        extra_args=args,
    )
    return proc, proxy


def _reads_of(audit: list[Request], replica: str, kind: str) -> list[Request]:
    """List and watch requests (GETs of a collection) of ``kind`` by ``replica``."""
    return [
        r
        for r in audit
        if r.replica == replica and r.method == "GET" and r.path.rstrip("/").endswith("/" + kind)
    ]


def _selector(request: Request) -> str:
    return parse_qs(request.query).get("labelSelector", [""])[0]


def _writes_to(audit: list[Request], namespace: str, kind: str, names: set[str]) -> set[str]:
    """The replicas that wrote an object of ``kind`` called one of ``names``."""
    pattern = re.compile(rf"/namespaces/{namespace}/{kind}/([^/]+)")
    return {
        r.replica
        for r in audit
        if r.is_write and (m := pattern.search(r.path)) and m.group(1) in names
    }


async def test_watch_filter_splits_clusters_between_managers(
    env: Env, control_plane: ControlPlane, workload: WorkloadCluster, tmp_path: Path
) -> None:
    audit: list[Request] = []
    proxies: list[AuditProxy] = []
    ns = env.namespace
    try:
        for shard in ("a", "b"):
            await register_workload_cluster(env.client, f"work-{shard}", ns, workload)
            await env.client.patch(
                CLUSTERS, f"work-{shard}", {"metadata": {"labels": {WATCH_FILTER_LABEL: shard}}}, ns
            )
        procs = []
        for shard in ("a", "b"):
            proc, proxy = await _spawn_scoped(
                env, control_plane, tmp_path, audit, f"mgr-{shard}", ("--watch-filter", shard)
            )
            procs.append(proc)
            proxies.append(proxy)
        procs.append(env.spawn("kubelet", "kubelet"))
        for proc in procs:
            await proc.wait_ready()
        for shard in ("a", "b"):
            await _create_pool(
                env.client, f"pool-{shard}", ns, f"work-{shard}", {WATCH_FILTER_LABEL: shard}
            )
        for shard in ("a", "b"):
            await _running(env.client, f"pool-{shard}", ns, 2)

        for shard in ("a", "b"):
            machines = (
                await env.client.list(
                    MACHINES, ns, label_selector=f"{POOL_NAME_LABEL}=pool-{shard}"
                )
            ).items
            assert len(machines) == 2
            # Objects a pool creates carry its filter, or their own manager could not see them.
            assert {m["metadata"]["labels"].get(WATCH_FILTER_LABEL) for m in machines} == {shard}
            infra = (
                await env.client.list(
                    SIM_MACHINES, ns, label_selector=f"{POOL_NAME_LABEL}=pool-{shard}"
                )
            ).items
            assert {m["metadata"]["labels"].get(WATCH_FILTER_LABEL) for m in infra} == {shard}
            owned: dict[str, set[str]] = {
                "machinepools": {f"pool-{shard}"},
                "kubeadmconfigs": {f"pool-{shard}"},
                "simmachinepools": {f"pool-{shard}"},
                "machines": {m["metadata"]["name"] for m in machines},
                "simmachines": {m["metadata"]["name"] for m in infra},
            }
            for kind, names in owned.items():
                assert _writes_to(audit, ns, kind, names) == {f"mgr-{shard}"}, (kind, names)
            for kind in FILTERED_KINDS:
                reads = _reads_of(audit, f"mgr-{shard}", kind)
                assert reads, f"mgr-{shard} never listed {kind}"
                wanted = f"{WATCH_FILTER_LABEL}={shard}"
                unfiltered = [r for r in reads if wanted not in _selector(r).split(",")]
                assert unfiltered == [], f"mgr-{shard} read {kind} unfiltered: {unfiltered[:2]}"
        assert await env.secret_findings() == []
    finally:
        env.close()
        for proxy in proxies:
            await proxy.stop()


async def test_namespace_scoped_manager_leaves_other_namespaces_alone(
    env: Env, control_plane: ControlPlane, workload: WorkloadCluster, tmp_path: Path
) -> None:
    audit: list[Request] = []
    proxy: AuditProxy | None = None
    ns = env.namespace
    other = f"{ns}-other"
    await env.client.create(NAMESPACES, {"metadata": {"name": other}})
    try:
        await register_workload_cluster(env.client, "elsewhere", other, workload)
        await _create_pool(env.client, "outside", other, "elsewhere", {})
        proc, proxy = await _spawn_scoped(
            env, control_plane, tmp_path, audit, "mgr-ns", ("--namespace", ns)
        )
        kubelet = env.spawn("kubelet", "kubelet")
        await proc.wait_ready()
        await kubelet.wait_ready()
        await _create_pool(env.client, "inside", ns, "work", {})
        await _running(env.client, "inside", ns, 2)

        # The pool outside was there all along: its manager would have finalized it first.
        outside = await env.client.get(MACHINE_POOLS, "outside", other)
        assert not outside["metadata"].get("finalizers")
        assert not outside.get("status")
        assert (await env.client.list(SIM_MACHINES, other)).items == []
        mine = [r for r in audit if r.replica == "mgr-ns"]
        assert [r.path for r in mine if f"/namespaces/{other}/" in r.path] == []
        for kind in FILTERED_KINDS:
            reads = _reads_of(audit, "mgr-ns", kind)
            assert reads, f"mgr-ns never listed {kind}"
            assert all(f"/namespaces/{ns}/" in r.path for r in reads), [r.path for r in reads]
    finally:
        env.close()
        if proxy is not None:
            await proxy.stop()
        await _release(env.client, other)


async def _release(client: Client, namespace: str) -> None:
    """Drop finalizers left in ``namespace`` and delete it."""
    for res in (MACHINE_POOLS, MACHINES, KUBEADM_CONFIGS, SIM_MACHINE_POOLS, SIM_MACHINES):
        for obj in (await client.list(res, namespace)).items:
            if obj["metadata"].get("finalizers"):
                patch: dict[str, Any] = {"metadata": {"finalizers": None}}
                with contextlib.suppress(NotFound):
                    await client.patch(res, obj["metadata"]["name"], patch, namespace)
    with contextlib.suppress(NotFound):
        await client.delete(NAMESPACES, namespace)
