"""Processes and helpers for running the upstream cluster-autoscaler against machinepool.

Used by the fixtures in ``conftest.py``: cluster-autoscaler itself, with the clusterapi cloud
provider pointed at the management cluster (where the MachinePools live) and the workload
cluster (where the Nodes and Pods live), run as a supervised child of the test process
(``machinepool.controlplane.process.Process``): it dies with it. The workload cluster's
kube-scheduler and node lifecycle controller come with the cluster itself
(``ControlPlane.start_workload(..., pods=PodLifecycle())``).

The binary is built, never downloaded, by ``hack/autoscaler/build.sh``. A build that fails
raises ``BuildFailed`` with the script's own explanation, so a test that needs it fails loudly.
"""

from __future__ import annotations

import asyncio
import subprocess
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from tests.support import watch_until

from machinepool.api import constants as c
from machinepool.controlplane.process import Process, free_port
from machinepool.runtime import Client, Obj, Resource

REPO = Path(__file__).resolve().parents[3]
AUTOSCALER_BUILD = REPO / "hack" / "autoscaler" / "build.sh"

CAPACITY_PREFIX = c.AUTOSCALER_CAPACITY_ANNOTATION_PREFIX
"""Prefix of the scale-from-zero annotations (cpu, memory, ephemeral-disk, maxPods, labels,
taints, gpu-type, gpu-count) that cluster-autoscaler reads from a node group."""


class BuildFailed(RuntimeError):
    """A binary the autoscaler tests need could not be built; the message says why."""


def build_autoscaler() -> Path:
    """Path of a cluster-autoscaler binary with the clusterapi provider, building it if needed."""
    result = subprocess.run(
        ["bash", str(AUTOSCALER_BUILD)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise BuildFailed(
            f"{AUTOSCALER_BUILD.relative_to(REPO)} failed (exit {result.returncode}):\n"
            f"{result.stderr.strip()}"
        )
    return Path(result.stdout.strip().splitlines()[-1])


def autoscaler_argv(
    binary: Path,
    *,
    management_kubeconfig: Path,
    workload_kubeconfig: Path,
    namespace: str,
    extra: Sequence[str] = (),
) -> list[str]:
    """cluster-autoscaler with the clusterapi provider, tuned for short test scenarios.

    The management kubeconfig goes to ``--cloud-config`` (the clusterapi provider reads it as
    the cluster holding the MachinePools), the workload one to ``--kubeconfig``. Discovery is
    limited to the test's namespace so concurrent tests never share a node group.
    """
    return [
        str(binary),
        "--cloud-provider=clusterapi",
        f"--cloud-config={management_kubeconfig}",
        f"--kubeconfig={workload_kubeconfig}",
        f"--node-group-auto-discovery=clusterapi:namespace={namespace}",
        "--scan-interval=2s",
        "--scale-down-delay-after-add=5s",
        "--scale-down-unneeded-time=5s",
        "--scale-down-delay-after-delete=0s",
        "--max-node-provision-time=2m",
        "--expander=random",
        # One process per test and no second replica to hand over to.
        "--leader-elect=false",
        f"--address=127.0.0.1:{free_port()}",
        "--v=3",
        *extra,
    ]


def start(name: str, argv: Sequence[str], log_dir: Path) -> Process:
    """Start ``argv`` as a supervised child logging to ``<log_dir>/<name>.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    proc = Process(name, argv, log_dir)
    proc.start()
    return proc


def node_group_annotations(
    min_size: int, max_size: int, capacity: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The annotations that make a MachinePool a node group, plus scale-from-zero capacity
    (keys without the ``capacity.cluster-autoscaler.kubernetes.io/`` prefix, e.g. ``cpu``)."""
    annotations = {
        c.AUTOSCALER_MIN_SIZE_ANNOTATION: str(min_size),
        c.AUTOSCALER_MAX_SIZE_ANNOTATION: str(max_size),
    }
    for key, value in (capacity or {}).items():
        annotations[CAPACITY_PREFIX + key] = value
    return annotations


MACHINESET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {
        "name": "machinesets.cluster.x-k8s.io",
        "labels": {"cluster.x-k8s.io/v1beta2": "v1beta2"},
    },
    "spec": {
        "group": "cluster.x-k8s.io",
        "names": {
            "kind": "MachineSet",
            "listKind": "MachineSetList",
            "plural": "machinesets",
            "singular": "machineset",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1beta2",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
                "subresources": {"status": {}},
            }
        ],
    },
}
"""cluster-autoscaler's clusterapi provider always watches MachineSets (MachinePools and
MachineDeployments only when served) and waits for that watch to sync before it scales
anything. machinepool serves no MachineSets, so the tests install this schemaless stand-in:
with no MachineSet objects it changes nothing but lets the provider start."""


async def wait_for_objects(
    client: Client,
    res: Resource,
    namespace: str | None,
    done: Callable[[dict[str, Obj]], bool],
    what: str,
    *,
    label_selector: str | None = None,
    timeout: float = 180.0,
    procs: Sequence[Process] = (),
) -> dict[str, Obj]:
    """``watch_until`` that also fails as soon as one of ``procs`` exits; either failure
    names ``what`` and carries the processes' logs, which say why a scenario got stuck."""

    def failure(reason: str) -> AssertionError:
        tails = "\n".join(f"--- {p.log_path}\n{p.log_tail(40)}" for p in procs)
        return AssertionError(f"{reason} waiting for {what}\n{tails}")

    def alive() -> None:
        for proc in procs:
            if not proc.running():
                raise failure(f"{proc.name} exited")

    try:
        return await watch_until(
            client,
            res,
            namespace,
            done,
            what,
            label_selector=label_selector,
            within=timeout,
            on_event=alive,
        )
    except TimeoutError:
        raise failure(f"timed out after {timeout:.0f}s") from None


def main_loops(proc: Process) -> int:
    """How many main loops cluster-autoscaler has finished, from its own /metrics
    (``cluster_autoscaler_function_duration_seconds_count{function="main"}``)."""
    address = next(a.split("=", 1)[1] for a in proc.argv if a.startswith("--address="))
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "cluster_autoscaler_function_duration_seconds_count"
                and sample.labels.get("function") == "main"
            ):
                return int(sample.value)
    return 0


async def loops_pass(proc: Process, count: int, timeout: float = 240.0) -> None:
    """Until cluster-autoscaler has finished ``count`` more main loops: a window of its own
    decisions, counted rather than timed."""
    start = await asyncio.to_thread(main_loops, proc)
    async with asyncio.timeout(timeout):
        while await asyncio.to_thread(main_loops, proc) < start + count:
            if not proc.running():
                raise AssertionError(f"{proc.name} exited:\n{proc.log_tail(40)}")
            await asyncio.sleep(0.5)
