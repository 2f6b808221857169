"""The real clusterctl against machinepool's provider components, as the user guide tells it.

One scenario, in the order a user meets it, over two management clusters (A and B) and one
workload cluster:

1. ``clusterctl init`` from the local repository ``deploy/generate.py clusterctl-repo`` writes,
   offline: cert-manager declared externally provisioned (its API stands in here), no control
   plane provider (``--control-plane -``); the inventory lists our three providers.
2. ``clusterctl generate cluster --flavor machinepool-sim`` piped to ``kubectl apply`` makes a
   pool that turns Running with every Node Ready in the workload cluster.
3. ``clusterctl describe cluster`` shows the MachinePool with its Machines and their readiness.
4. ``clusterctl move`` to B: the pool is Running on B with the very same instances (none
   created), no Node was cordoned, drained or deleted on the way, and A holds nothing of it.

No kubelet runs here, so the provider pods cannot: ``harness.LocalProviders`` runs the same
processes beside each management cluster (see harness.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest
import pytest_asyncio

from machinepool.controlplane import ControlPlane, WorkloadCluster
from machinepool.controlplane.register import register_workload_cluster
from machinepool.runtime import NODES, Client
from machinepool.simworld.records import records_in

from .harness import (
    NAMESPACE,
    VERSION,
    AsUser,
    LocalProviders,
    NodeHistory,
    build_clusterctl,
    kubectl,
    load_generator,
    local_providers,
    route_webhooks,
    run,
)

pytestmark = [pytest.mark.clusterctl]

CLUSTER = "demo"
POOL = f"{CLUSTER}-mp-0"
REPLICAS = 2
NO_VERSION_CHECK = {"CLUSTERCTL_DISABLE_VERSIONCHECK": "true"}
INSTANCE_SELECTOR = "sim.infrastructure.cluster.x-k8s.io/instance=true"


@dataclass
class Management(AsUser):
    """A management cluster clusterctl initialised, with its provider processes."""

    cluster: WorkloadCluster
    client: Client
    providers: LocalProviders
    init_output: str = ""

    @property
    def kubeconfig(self) -> Path:
        return self.cluster.kubeconfig


@pytest.fixture(scope="module")
def clusterctl() -> Path:
    return build_clusterctl()


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local repository and clusterctl.yaml, as the user guide has the user write them."""
    gen = load_generator()
    config: Path = gen.clusterctl_repository(
        tmp_path_factory.mktemp("clusterctl-repo"), external_cert_manager=True
    )
    return config


@contextlib.asynccontextmanager
async def initialised(
    control_plane: ControlPlane,
    clusterctl: Path,
    config: Path,
    log_dir: Path,
    name: str,
    cert_manager_api: Callable[[Client], Awaitable[None]],
) -> AsyncIterator[Management]:
    cluster = control_plane.start_workload(f"{name}-{uuid.uuid4().hex[:6]}")
    try:
        async with await Client.from_kubeconfig(cluster.kubeconfig) as client:
            # cert-manager installed beforehand (here its API only: nothing runs pods), as
            # --external-cert-manager tells clusterctl.
            await cert_manager_api(client)
            init = run(
                [
                    str(clusterctl),
                    "init",
                    f"--kubeconfig={cluster.kubeconfig}",
                    f"--config={config}",
                    f"--core=cluster-api:{VERSION}",
                    f"--bootstrap=kubeadm:{VERSION}",
                    f"--infrastructure=sim:{VERSION}",
                    "--control-plane=-",
                ],
                env=NO_VERSION_CHECK,
            )
            assert init.returncode == 0, init.stderr
            with local_providers(name, cluster.kubeconfig, log_dir) as providers:
                await route_webhooks(client, providers.webhook_url, providers.ca_bundle)
                yield Management(cluster, client, providers, init.stdout + init.stderr)
    finally:
        control_plane.stop_workload(cluster.name)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def source(
    control_plane: ControlPlane,
    clusterctl: Path,
    repository: Path,
    tmp_path_factory: pytest.TempPathFactory,
    cert_manager_api: Callable[[Client], Awaitable[None]],
) -> AsyncIterator[Management]:
    log_dir = tmp_path_factory.mktemp("mgmt-a")
    async with initialised(
        control_plane, clusterctl, repository, log_dir, "mgmt-a", cert_manager_api
    ) as mgmt:
        yield mgmt


@pytest.fixture(scope="module")
def workload_cluster(control_plane: ControlPlane) -> Iterator[WorkloadCluster]:
    name = f"w-{uuid.uuid4().hex[:8]}"
    cluster = control_plane.start_workload(name)
    try:
        yield cluster
    finally:
        control_plane.stop_workload(name)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def generated(
    source: Management, workload_cluster: WorkloadCluster, clusterctl: Path, repository: Path
) -> Management:
    """``clusterctl generate cluster ... | kubectl apply -f -``, then the pool Running."""
    endpoint = urlparse(workload_cluster.url)
    generate = run(
        [
            str(clusterctl),
            "generate",
            "cluster",
            CLUSTER,
            f"--kubeconfig={source.kubeconfig}",
            f"--config={repository}",
            f"--infrastructure=sim:{VERSION}",
            "--flavor=machinepool-sim",
            "--kubernetes-version=v1.34.4",
            f"--worker-machine-count={REPLICAS}",
            f"--target-namespace={NAMESPACE}",
        ],
        env={
            **NO_VERSION_CHECK,
            "CONTROL_PLANE_ENDPOINT_HOST": str(endpoint.hostname),
            "CONTROL_PLANE_ENDPOINT_PORT": str(endpoint.port),
            "SIM_BOOT_DELAY_SECONDS": "1",
        },
    )
    assert generate.returncode == 0, generate.stderr
    source.kubectl("create", "namespace", NAMESPACE)
    applied = source.kubectl("apply", "-f", "-", stdin=generate.stdout)
    assert f"machinepool.cluster.x-k8s.io/{POOL} created" in applied
    # What the workload's control-plane provider writes (this flavor has none): the kubeconfig
    # Secret and an initialized control plane in the Cluster's status.
    await register_workload_cluster(source.client, CLUSTER, NAMESPACE, workload_cluster)
    wait_running(source)
    return source


def wait_running(mgmt: Management) -> None:
    """``kubectl wait`` until the pool is Running with every replica ready."""
    for condition in (
        "jsonpath={.status.phase}=Running",
        f"jsonpath={{.status.readyReplicas}}={REPLICAS}",
    ):
        result = kubectl(
            mgmt.kubeconfig,
            "wait",
            f"--for={condition}",
            f"mp/{POOL}",
            "-n",
            NAMESPACE,
            "--timeout=180s",
        )
        assert result.returncode == 0, f"{result.stderr}\n{mgmt.providers.logs()}"


async def test_init_installs_our_providers_offline(source: Management) -> None:
    assert "Skipping installing cert-manager as it is already installed" in source.init_output
    providers = json.loads(
        source.kubectl("get", "providers.clusterctl.cluster.x-k8s.io", "-A", "-o", "json")
    )
    installed = {(p["type"], p["providerName"], p["version"]) for p in providers["items"]}
    assert installed == {
        ("CoreProvider", "cluster-api", VERSION),
        ("BootstrapProvider", "kubeadm", VERSION),
        ("InfrastructureProvider", "sim", VERSION),
    }
    # Nothing of a control-plane provider was fetched or installed.
    assert "control-plane" not in source.init_output


async def test_generated_cluster_makes_a_working_pool(
    generated: Management, workload_cluster: WorkloadCluster
) -> None:
    (pool,) = generated.objects("machinepools")
    assert pool["status"]["phase"] == "Running"
    assert pool["status"]["readyReplicas"] == REPLICAS
    nodes = json.loads(kubectl(workload_cluster.kubeconfig, "get", "nodes", "-o", "json").stdout)
    ids = sorted(n["spec"]["providerID"] for n in nodes["items"])
    assert ids == sorted(pool["spec"]["providerIDList"])


async def test_describe_shows_the_pool_with_its_machines_and_readiness(
    generated: Management, clusterctl: Path
) -> None:
    result = run(
        [
            str(clusterctl),
            "describe",
            "cluster",
            CLUSTER,
            "-n",
            NAMESPACE,
            f"--kubeconfig={generated.kubeconfig}",
            "--grouping=false",
        ],
        env=NO_VERSION_CHECK,
    )
    assert result.returncode == 0, result.stderr
    # Upstream's tree: the pool under Workers, each Machine under the pool with its replica
    # counters (1 replica, 1 available, 1 ready, 1 up to date) and its Ready condition.
    lines = result.stdout.splitlines()
    pool_line = next(
        i for i, line in enumerate(lines) if f"MachinePool {NAMESPACE}/{POOL}," in line
    )
    machines = [m["metadata"]["name"] for m in generated.objects("machines")]
    assert len(machines) == REPLICAS
    for name in machines:
        index, line = next(
            (i, line) for i, line in enumerate(lines) if f"Machine {NAMESPACE}/{name}," in line
        )
        assert index > pool_line
        assert line.split(",", 1)[1].split()[1:7] == ["1", "1", "1", "1", "True", "Ready"], line


async def test_move_keeps_the_running_pool_and_its_instances(
    generated: Management,
    workload_cluster: WorkloadCluster,
    control_plane: ControlPlane,
    clusterctl: Path,
    repository: Path,
    tmp_path_factory: pytest.TempPathFactory,
    cert_manager_api: Callable[[Client], Awaitable[None]],
) -> None:
    source = generated
    instances = {
        r.id for s in source.objects("secrets", "-l", INSTANCE_SELECTOR) for r in records_in(s)
    }
    assert len(instances) == REPLICAS
    log_dir = tmp_path_factory.mktemp("mgmt-b")
    async with (
        initialised(
            control_plane, clusterctl, repository, log_dir, "mgmt-b", cert_manager_api
        ) as target,
        await Client.from_kubeconfig(workload_cluster.kubeconfig) as workload,
    ):
        nodes_before = {
            n["metadata"]["name"]: n["metadata"]["uid"] for n in (await workload.list(NODES)).items
        }
        listed = await workload.list(NODES)
        history = NodeHistory()
        watcher = asyncio.create_task(history.follow(workload, listed.resource_version))
        try:
            target.kubectl("create", "namespace", NAMESPACE)
            move = await asyncio.create_subprocess_exec(
                str(clusterctl),
                "move",
                f"--kubeconfig={source.kubeconfig}",
                f"--to-kubeconfig={target.kubeconfig}",
                "-n",
                NAMESPACE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env={**os.environ, **NO_VERSION_CHECK},
            )
            out, _ = await move.communicate()
            assert move.returncode == 0, out.decode()
            # The Cluster's status does not move: its control-plane provider on B reports it
            # again (this flavor has none, so the test does what it would).
            await register_workload_cluster(target.client, CLUSTER, NAMESPACE, workload_cluster)
            await asyncio.to_thread(wait_running, target)
            # The source's node simulator saw each record go; only then could it have
            # deleted a Node, so the watch runs until it has said so for every instance.
            await source.providers.logged("instance record moved away", instances)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

        moved = {
            r.id for s in target.objects("secrets", "-l", INSTANCE_SELECTOR) for r in records_in(s)
        }
        assert moved == instances, "the target created or lost instances"
        (pool,) = target.objects("machinepools")
        assert pool["status"]["phase"] == "Running"
        assert len(pool["spec"]["providerIDList"]) == REPLICAS
        assert history.deleted == set()
        assert history.added == set()
        assert history.cordoned == set()
        nodes_after = {
            n["metadata"]["name"]: n["metadata"]["uid"] for n in (await workload.list(NODES)).items
        }
        assert nodes_after == nodes_before
        for kind in (
            "clusters",
            "machinepools",
            "machines",
            "kubeadmconfigs",
            "simmachinepools",
            "simmachines",
            "secrets",
        ):
            assert source.objects(kind) == [], f"{kind} left in the source"
