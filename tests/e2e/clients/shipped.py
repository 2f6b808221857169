"""What the tiers that run our providers' Pods share (test_as_shipped.py, test_upgrade.py): a
management cluster with a real node holding our images, ``clusterctl init`` of our three
providers as the user guide has it with every Pod Ready, and a pool made by ``clusterctl
generate cluster``, waited on with ``kubectl wait``. (``Installed``, ``write_report`` and what
the beside-upstream module needs too are in harness.py.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support import certmanager, wait_for

from machinepool.controlplane import ControlPlane, RealNode, WorkloadCluster, images
from machinepool.controlplane.register import register_workload_cluster
from machinepool.runtime import NODES, Client

from .harness import NAMESPACE, NO_VERSION_CHECK, VERSION, Installed, kubectl, ready, run

PROVIDER_NAMESPACES = {
    "machinepool-system": "machinepool-controller-manager",
    "machinepool-kubeadm-bootstrap-system": "machinepool-kubeadm-bootstrap-controller-manager",
    "machinepool-sim-system": "machinepool-sim-controller-manager",
}
"""Each provider's namespace and its Deployment, as deploy/release names them."""
CLUSTER = "demo"
POOL = f"{CLUSTER}-mp-0"
INSTANCE_SELECTOR = "sim.infrastructure.cluster.x-k8s.io/instance=true"
READY = 240.0
"""Seconds for the Pods to turn Ready: first sandboxes and a 450 MiB image on two busy cores."""


@contextmanager
def management_cluster(
    folder: Path, node: RealNode, built: Sequence[images.BuiltImage], figures: dict[str, str]
) -> Iterator[ControlPlane]:
    """A control plane with a real node whose containerd holds ``built``."""
    cp = ControlPlane(folder, node=node)
    cp.start()
    try:
        started = time.monotonic()
        for image in built:
            cp.node.load_image(image.archive)
        figures["image"] = built[0].describe().split(";")[0].removeprefix("image ")
        figures["image loaded into the node's containerd"] = f"{time.monotonic() - started:.0f} s"
        yield cp
    finally:
        cp.stop()


SELECTORS = {namespace: f"control-plane={d}" for namespace, d in PROVIDER_NAMESPACES.items()}
"""Each provider's Pod, by namespace."""


async def clusterctl_init(
    cp: ControlPlane,
    client: Client,
    clusterctl: Path,
    config: Path,
    figures: dict[str, str],
    *,
    version: str = VERSION,
) -> Installed:
    """``clusterctl init`` of our core, bootstrap and Sim providers at ``version`` as the user
    guide has it, after real cert-manager (which ``init`` then finds installed); returns once
    every provider Pod is Ready, with the two times in ``figures``."""
    await wait_for(client, NODES, None, cp.node.spec.name, ready, within=READY, what="Node Ready")
    await certmanager.install_cert_manager(cp, client)
    started = time.monotonic()
    init = await asyncio.to_thread(
        run,
        [
            str(clusterctl),
            "init",
            f"--kubeconfig={cp.kubeconfig}",
            f"--config={config}",
            f"--core=cluster-api:{version}",
            f"--bootstrap=kubeadm:{version}",
            f"--infrastructure=sim:{version}",
            "--control-plane=-",
        ],
        env=NO_VERSION_CHECK,
    )
    assert init.returncode == 0, init.stderr
    figures["`clusterctl init`"] = f"{time.monotonic() - started:.1f} s"
    done = Installed(cp, client, init.stdout + init.stderr)
    await done.wait_pods(SELECTORS, within=READY)
    figures["`clusterctl init` to every Pod Ready"] = f"{time.monotonic() - started:.1f} s"
    return done


async def generate_pool(
    installed: Installed,
    workload: WorkloadCluster,
    clusterctl: Path,
    config: Path,
    replicas: int,
    *,
    version: str = VERSION,
) -> None:
    """``clusterctl generate cluster ... | kubectl apply -f -`` from the Sim provider's
    template of ``version``, its endpoint the workload apiserver as the Pods reach it; then
    the pool Running with ``replicas`` Nodes."""
    assert workload.pod_url is not None
    host, port = workload.pod_url.removeprefix("https://").split(":")
    generate = run(
        [
            str(clusterctl),
            "generate",
            "cluster",
            CLUSTER,
            f"--kubeconfig={installed.kubeconfig}",
            f"--config={config}",
            f"--infrastructure=sim:{version}",
            "--flavor=machinepool-sim",
            "--kubernetes-version=v1.34.4",
            f"--worker-machine-count={replicas}",
            f"--target-namespace={NAMESPACE}",
        ],
        env={
            **NO_VERSION_CHECK,
            "CONTROL_PLANE_ENDPOINT_HOST": host,
            "CONTROL_PLANE_ENDPOINT_PORT": port,
            "SIM_BOOT_DELAY_SECONDS": "1",
        },
    )
    assert generate.returncode == 0, generate.stderr
    installed.kubectl("create", "namespace", NAMESPACE)
    applied = installed.kubectl("apply", "-f", "-", stdin=generate.stdout)
    assert f"machinepool.cluster.x-k8s.io/{POOL} created" in applied
    await register_workload_cluster(
        installed.client, CLUSTER, NAMESPACE, workload, server=workload.pod_url
    )
    await asyncio.to_thread(wait_pool, installed, replicas)


def wait_pool(installed: Installed, replicas: int) -> None:
    """``kubectl wait`` until the pool is Running with ``replicas`` ready."""
    for condition in (
        "jsonpath={.status.phase}=Running",
        f"jsonpath={{.status.readyReplicas}}={replicas}",
    ):
        result = kubectl(
            installed.kubeconfig,
            "wait",
            f"--for={condition}",
            f"mp/{POOL}",
            "-n",
            NAMESPACE,
            "--timeout=180s",
        )
        assert result.returncode == 0, f"{result.stderr}\n{installed.logs()}"
