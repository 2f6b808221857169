"""The local control plane is real Kubernetes: CRDs, garbage collection, separate clusters."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from tests.support import eventually, wait_established

from machinepool.controlplane import ControlPlane, find_binaries
from machinepool.controlplane.process import port_open
from machinepool.runtime.kube.client import CONFIGMAPS, CRDS, NODES, Client
from machinepool.runtime.kube.errors import NotFound

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.machinepool.dev"},
    "spec": {
        "group": "example.machinepool.dev",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer", "minimum": 1}},
                            }
                        },
                    }
                },
            }
        ],
    },
}


async def test_crd_object_round_trips_through_the_apiserver(client: Client, namespace: str) -> None:
    await client.create(CRDS, WIDGET_CRD)

    await wait_established(client, WIDGET_CRD["metadata"]["name"])
    widgets = await client.resource("example.machinepool.dev/v1", "Widget")
    body = {
        "apiVersion": "example.machinepool.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"size": 3},
    }
    await client.create(widgets, body, namespace)
    got = await client.get(widgets, "w1", namespace)
    assert got["spec"] == {"size": 3}
    assert got["metadata"]["uid"]


async def test_garbage_collector_deletes_dependents(client: Client, namespace: str) -> None:
    await _assert_garbage_collected(client, namespace)


async def test_a_controller_manager_that_exited_runs_again_after_an_apiserver_restart(
    control_plane: ControlPlane,
) -> None:
    """One still starting exits when its apiserver goes away; the restart brings it back."""
    workload = control_plane.start_workload("kcm-restart")
    try:
        assert workload.kcm is not None
        workload.kcm.kill()
        await asyncio.to_thread(workload.restart_apiserver)
        async with await Client.from_kubeconfig(workload.kubeconfig) as client:
            await _assert_garbage_collected(client, "default")
    finally:
        control_plane.stop_workload("kcm-restart")


async def _assert_garbage_collected(client: Client, namespace: str) -> None:
    """A ConfigMap owned by a deleted one is deleted: the controller-manager's GC runs."""
    owner = await client.create(
        CONFIGMAPS, {"metadata": {"name": "owner"}, "data": {"k": "v"}}, namespace
    )
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
    }
    await client.create(
        CONFIGMAPS, {"metadata": {"name": "dependent", "ownerReferences": [ref]}}, namespace
    )
    await client.delete(CONFIGMAPS, "owner", namespace)

    async def dependent_gone() -> bool:
        try:
            await client.get(CONFIGMAPS, "dependent", namespace)
        except NotFound:
            return True
        return False

    await eventually(dependent_gone, "the dependent garbage-collected", within=60)


async def test_workload_clusters_have_separate_node_lists(control_plane: ControlPlane) -> None:
    a = control_plane.start_workload("sep-a")
    b = control_plane.start_workload("sep-b")
    try:
        async with (
            await Client.from_kubeconfig(a.kubeconfig) as ca,
            await Client.from_kubeconfig(b.kubeconfig) as cb,
        ):
            await ca.create(NODES, {"metadata": {"name": "node-in-a"}})
            nodes_a = {n["metadata"]["name"] for n in (await ca.list(NODES)).items}
            nodes_b = {n["metadata"]["name"] for n in (await cb.list(NODES)).items}
            assert "node-in-a" in nodes_a
            assert "node-in-a" not in nodes_b
            assert a.url != b.url
    finally:
        control_plane.stop_workload("sep-a")
        control_plane.stop_workload("sep-b")


def test_stop_leaves_no_process_or_port(tmp_path: Path) -> None:
    cp = ControlPlane(tmp_path / "cp")
    cp.start()
    workload = cp.start_workload("w")
    procs = cp.processes()
    pids = [p.pid for p in procs]
    ports = [cp.etcd_port, cp.management.port, workload.port]
    assert all(port_open(p) for p in ports)
    cp.stop()
    for pid in pids:
        assert pid is not None
        assert not os.path.exists(f"/proc/{pid}"), f"process {pid} still alive"
    assert not any(port_open(p) for p in ports)


def test_binaries_from_kubebuilder_assets(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = find_binaries()
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(folder))
    assert find_binaries(build=False) == folder
