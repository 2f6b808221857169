"""Fixtures for the cluster-autoscaler end-to-end tests.

- the ``autoscaler`` marker (declared in pyproject.toml, handled by tests/conftest.py): tests
  that run the real cluster-autoscaler binary. They run in the default session whenever
  hack/autoscaler/build.sh can give the binary, and are left out with a one-line note
  otherwise; ``pytest -m autoscaler tests/e2e/autoscaler`` keeps them, failing loudly without it.
- ``workload_client``: an async client on the test's workload cluster (admin).
- ``workload_pods``: every test here has its workload cluster started with ``PodLifecycle()``
  (kube-controller-manager's defaults): a kube-scheduler binds the Pods the autoscaler plans
  for, the node lifecycle controller lifts the not-ready taint new Nodes get, and the
  disruption controller fills the PodDisruptionBudget status the autoscaler reads.
- ``scheduler``: that workload cluster's processes (kube-apiserver, kube-controller-manager,
  kube-scheduler), for the waits that fail at once, with their logs, when one of them exits.
- ``autoscaler_binary``: the built cluster-autoscaler (session; builds once).
- ``machineset_crd``: the MachineSet stand-in the clusterapi provider needs to start.
- ``node_group_webhooks``: the MachinePool webhook server, registered only for MachinePools
  labelled ``machinepool.test/autoscaler-e2e=true`` (so it never meets other tests' objects),
  and proven effective before the test runs.
- ``node_history``: per Node name, whether it was ever cordoned and whether it was deleted.
- ``cluster_autoscaler``: the real cluster-autoscaler watching the ``system`` namespace's
  MachinePools (with ``scheduler`` running), stopped afterwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from tests.support.conditions import is_true
from tests.support.resources import MACHINE_POOLS
from tests.support.waiting import until_admission_answers

from machinepool.api.features import FeatureGates
from machinepool.controlplane import ControlPlane, PodLifecycle, WorkloadCluster
from machinepool.controlplane.process import Process
from machinepool.runtime import CRDS, Client, FuncHandler, Obj
from machinepool.webhooks import WebhookServer, register, serve, unregister

from .harness import MACHINESET_CRD, autoscaler_argv, build_autoscaler, start
from .pools import WEBHOOK_LABEL


@pytest_asyncio.fixture(loop_scope="session")
async def workload_client(workload: WorkloadCluster) -> AsyncIterator[Client]:
    async with await Client.from_kubeconfig(workload.kubeconfig) as c:
        yield c


@pytest.fixture
def workload_pods() -> PodLifecycle:
    return PodLifecycle()


@pytest.fixture
def scheduler(workload: WorkloadCluster) -> list[Process]:
    return list(workload.processes())


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
        if is_true(crd, "Established"):
            return name
        await asyncio.sleep(0.1)
    raise TimeoutError(f"CRD {name} never became Established")


WEBHOOK_CONFIG = "machinepool-autoscaler-e2e"


@pytest_asyncio.fixture(loop_scope="session")
async def node_group_webhooks(client: Client, crds: list[str]) -> AsyncIterator[WebhookServer]:
    server = await serve("127.0.0.1", 0, FeatureGates(), client=client)
    try:
        await register(
            client,
            server.url,
            server.ca_bundle,
            config_name=WEBHOOK_CONFIG,
            object_selector={WEBHOOK_LABEL: "true"},
            conversion=False,
        )
        await _until_admission_answers(client)
        yield server
    finally:
        await unregister(client, config_name=WEBHOOK_CONFIG)
        await server.stop()


async def _until_admission_answers(client: Client) -> None:
    """Dry-run an invalid labelled MachinePool until our validating webhook refuses it."""
    probe = {
        "apiVersion": MACHINE_POOLS.api_version,
        "kind": "MachinePool",
        "metadata": {"name": "probe", "namespace": "default", "labels": {WEBHOOK_LABEL: "true"}},
        "spec": {
            "clusterName": "probe",
            "template": {
                "spec": {
                    "clusterName": "probe",
                    "bootstrap": {},
                    "infrastructureRef": {"apiGroup": "x.test", "kind": "X", "name": "x"},
                }
            },
        },
    }
    await until_admission_answers(client, MACHINE_POOLS, probe)


class NodeHistory:
    """What happened to each workload Node while the test ran (fed by the Node informer)."""

    def __init__(self) -> None:
        self.cordoned: set[str] = set()
        self.deleted: set[str] = set()
        self.cordoned_before_delete: set[str] = set()

    def seen(self, node: Obj) -> None:
        if (node.get("spec") or {}).get("unschedulable"):
            self.cordoned.add(node["metadata"]["name"])

    def gone(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        self.seen(node)
        self.deleted.add(name)
        if name in self.cordoned:
            self.cordoned_before_delete.add(name)


@pytest.fixture
def node_history(system: Any) -> NodeHistory:
    history = NodeHistory()
    system.nodes.add_handler(
        FuncHandler(history.seen, lambda _old, new: history.seen(new), history.gone)
    )
    return history


@pytest.fixture
def cluster_autoscaler(
    autoscaler_binary: Path,
    control_plane: ControlPlane,
    system: Any,
    scheduler: list[Process],
    machineset_crd: str,
    tmp_path: Path,
) -> Iterator[Process]:
    argv = autoscaler_argv(
        autoscaler_binary,
        management_kubeconfig=control_plane.kubeconfig,
        workload_kubeconfig=system.workload.kubeconfig,
        namespace=system.namespace,
    )
    proc = start("cluster-autoscaler", argv, tmp_path)
    try:
        yield proc
    finally:
        proc.stop()
