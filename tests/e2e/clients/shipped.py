"""What the tiers that run our Pods share (test_as_shipped.py, test_upgrade.py): a management
cluster with a real node holding our images, ``clusterctl init`` as the user guide has it with
every provider Pod Ready, and a pool made by ``clusterctl generate cluster``, waited on with
``kubectl wait``."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tests.reliability.report import command_line, git_revision
from tests.support import certmanager, eventually, wait_for
from tests.support.conditions import is_true

from machinepool.controlplane import ControlPlane, RealNode, WorkloadCluster, images
from machinepool.controlplane.register import register_workload_cluster
from machinepool.runtime import NODES, PODS, Client, Obj

from .harness import NAMESPACE, VERSION, AsUser, kubectl, run

PROVIDER_NAMESPACES = {
    "machinepool-system": "machinepool-controller-manager",
    "machinepool-kubeadm-bootstrap-system": "machinepool-kubeadm-bootstrap-controller-manager",
    "machinepool-sim-system": "machinepool-sim-controller-manager",
}
"""Each provider's namespace and its Deployment, as deploy/release names them."""
CLUSTER = "demo"
POOL = f"{CLUSTER}-mp-0"
NO_VERSION_CHECK = {"CLUSTERCTL_DISABLE_VERSIONCHECK": "true"}
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


@dataclass
class Report:
    """A tier's figures, written at the end of its module when ``$env`` names a file (a page
    of docs/), with the command and revision that measured them."""

    env: str
    title: str
    about: str
    source: str
    """The test module that writes it."""
    figures: dict[str, str] = field(default_factory=dict)

    def written(self) -> Iterator[dict[str, str]]:
        """A module fixture's body: yields the figures, then writes them if asked to."""
        revision = git_revision()
        yield self.figures
        target = os.environ.get(self.env)
        if target and self.figures:
            Path(target).write_text(self.render(revision))

    def render(self, revision: str) -> str:
        lines = [
            f"# {self.title} (generated)",
            "",
            f"Written by `{self.source}` itself; do not edit by hand: rerun the command below to",
            f"refresh it. {self.about}",
            "",
            "| | |",
            "|---|---|",
            f"| command | `{self.env}={os.environ.get(self.env, '')} {command_line()}` |",
            f"| revision | {revision} |",
            f"| written | {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} |",
            f"| machine | {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} |",
            "",
            "| figure | value |",
            "|---|---|",
            *(f"| {name} | {value} |" for name, value in self.figures.items()),
        ]
        return "\n".join(lines) + "\n"


def ready(obj: Obj | None) -> bool:
    return is_true(obj, "Ready")


@dataclass
class Installed(AsUser):
    """The management cluster after ``clusterctl init``, its Pods Ready."""

    cp: ControlPlane
    client: Client
    init_output: str
    pods: dict[str, Obj] = field(default_factory=dict)
    """Our Pods by namespace, once Ready."""

    @property
    def kubeconfig(self) -> Path:
        return self.cp.kubeconfig

    def logs(self) -> str:
        """The provider Pods and each one's last log lines (its previous container's, after a
        restart), for a failure's message."""
        out = [kubectl(self.kubeconfig, "get", "pods", "-A", "-o", "wide").stdout]
        for namespace in PROVIDER_NAMESPACES:
            for previous in ("--previous=false", "--previous=true"):
                result = kubectl(self.kubeconfig, "logs", "-n", namespace, "--tail=30",
                                 "-l", "control-plane", previous)  # fmt: skip
                out.append(f"--- {namespace} {previous}\n{result.stdout}{result.stderr}")
        return "\n".join(out)

    async def pods_ready(self, within: float = READY, image: str | None = None) -> None:
        """Every provider's one Pod Ready (running ``image``, when given), kept in ``pods``."""

        async def all_ready() -> bool:
            for namespace, deployment in PROVIDER_NAMESPACES.items():
                selector = f"control-plane={deployment}"
                pods = (await self.client.list(PODS, namespace, label_selector=selector)).items
                live = [p for p in pods if "deletionTimestamp" not in p["metadata"]]
                if len(live) != 1 or not ready(live[0]):
                    return False
                if image is not None and live[0]["spec"]["containers"][0]["image"] != image:
                    return False
                self.pods[namespace] = live[0]
            return True

        try:
            await eventually(all_ready, "every provider Pod Ready", within=within, interval=0.5)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None


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
    await done.pods_ready()
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
