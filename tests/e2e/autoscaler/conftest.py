"""Fixtures for the cluster-autoscaler end-to-end tests.

- the ``autoscaler`` marker: tests that run the real cluster-autoscaler binary. They are left
  out of the default run (the binary is a long cold build, see hack/autoscaler/build.sh) and run
  with ``pytest -m autoscaler tests/e2e/autoscaler``. Selected, they build it or fail loudly.
- ``workload_client``: an async client on the test's workload cluster (admin).
- ``scheduler``: a kube-scheduler for the test's workload cluster, plus a kube-controller-manager
  running the node lifecycle controller (which lifts the not-ready taint new Nodes get);
  both stopped afterwards. Yields the scheduler and the controller-manager.
- ``autoscaler_binary``: the built cluster-autoscaler (session; builds once).
- ``machineset_crd``: the MachineSet stand-in the clusterapi provider needs to start.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from machinepool.controlplane import WorkloadCluster
from machinepool.controlplane.process import Process
from machinepool.runtime import CRDS, Client

from .harness import (
    MACHINESET_CRD,
    build_autoscaler,
    control_plane_binary,
    node_lifecycle_argv,
    scheduler_argv,
    start,
)

MARKER = "autoscaler"
HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}: runs the real cluster-autoscaler (built from Go modules); "
        f"deselected unless -m selects it",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave the real-autoscaler tests out unless ``-m`` names the marker.

    This hook sees the whole session's items, so it only ever drops items marked here.
    """
    if MARKER in (config.getoption("markexpr", "") or ""):
        return
    dropped = [i for i in items if i.get_closest_marker(MARKER) is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if i.get_closest_marker(MARKER) is None]


@pytest_asyncio.fixture(loop_scope="session")
async def workload_client(workload: WorkloadCluster) -> AsyncIterator[Client]:
    async with await Client.from_kubeconfig(workload.kubeconfig) as c:
        yield c


@pytest.fixture
def scheduler(workload: WorkloadCluster, tmp_path: Path) -> Iterator[list[Process]]:
    kubeconfig = workload.kubeconfig
    procs: list[Process] = []
    try:
        scheduler_bin = control_plane_binary("kube-scheduler")
        procs.append(start("kube-scheduler", scheduler_argv(scheduler_bin, kubeconfig), tmp_path))
        kcm_bin = control_plane_binary("kube-controller-manager")
        procs.append(start("node-lifecycle", node_lifecycle_argv(kcm_bin, kubeconfig), tmp_path))
        yield procs
    finally:
        for proc in procs:
            proc.stop()


@pytest.fixture(scope="session")
def autoscaler_binary() -> Path:
    """Build (or reuse) cluster-autoscaler; a failed build fails the test with the reason."""
    return build_autoscaler()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def machineset_crd(client: Client) -> str:
    await client.apply(CRDS, MACHINESET_CRD, field_manager="machinepool-autoscaler-tests")
    name = str(MACHINESET_CRD["metadata"]["name"])
    for _ in range(300):
        crd = await client.get(CRDS, name)
        conditions = crd.get("status", {}).get("conditions", [])
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return name
        await asyncio.sleep(0.1)
    raise TimeoutError(f"CRD {name} never became Established")
