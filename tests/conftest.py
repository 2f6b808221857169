"""Shared fixtures: one real management control plane per test session.

- ``control_plane``: etcd + kube-apiserver + kube-controller-manager, started once.
- ``client``: an async raw-JSON client for the management cluster.
- ``namespace``: a fresh namespace per test, deleted afterwards.
- ``workload``: a fresh workload cluster (its own kube-apiserver on the shared etcd).
- ``crds``: every CRD machinepool generates, installed once and Established.

Nothing here mocks the Kubernetes API: tests talk to real binaries over HTTPS.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from machinepool.api.crdgen import crd_manifests
from machinepool.controlplane import ControlPlane, WorkloadCluster
from machinepool.runtime.client import CRDS, NAMESPACES, Client


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane(tmp_path_factory.mktemp("controlplane"))
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def client(control_plane: ControlPlane) -> AsyncIterator[Client]:
    async with await Client.from_kubeconfig(control_plane.kubeconfig) as c:
        yield c


@pytest_asyncio.fixture(loop_scope="session")
async def namespace(client: Client) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await client.create(NAMESPACES, {"metadata": {"name": name}})
    yield name
    await client.delete(NAMESPACES, name)


@pytest.fixture
def workload(control_plane: ControlPlane) -> Iterator[WorkloadCluster]:
    name = f"w-{uuid.uuid4().hex[:8]}"
    cluster = control_plane.start_workload(name)
    try:
        yield cluster
    finally:
        control_plane.stop_workload(name)


async def install_crds(client: Client) -> list[str]:
    """Server-side apply every generated CRD and wait until each is Established."""
    names = []
    for crd in crd_manifests():
        await client.apply(CRDS, crd, field_manager="machinepool-tests")
        names.append(crd["metadata"]["name"])
    for name in names:
        for _ in range(300):
            crd = await client.get(CRDS, name)
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            await asyncio.sleep(0.1)
        else:
            raise TimeoutError(f"CRD {name} never became Established")
    return names


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def crds(client: Client) -> list[str]:
    return await install_crds(client)
