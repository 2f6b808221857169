"""The machinepool command against the real control plane, run as a user would: a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.support.resources import MACHINE_POOLS

from machinepool.controlplane import ControlPlane
from machinepool.runtime.kube.client import Client


def machinepool(*args: str, home: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MACHINEPOOL_HOME": str(home), "COLUMNS": "200"}
    env.pop("KUBECONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "machinepool", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def pool_object(name: str, replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachinePool",
        "metadata": {"name": name},
        "spec": {
            "clusterName": "c1",
            "replicas": replicas,
            "template": {
                "spec": {
                    "clusterName": "c1",
                    "version": "v1.34.4",
                    "bootstrap": {"dataSecretName": "boot"},
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "SimMachinePool",
                        "name": name,
                    },
                }
            },
        },
    }


async def set_status(client: Client, ns: str, name: str, **status: Any) -> None:
    await client.patch(MACHINE_POOLS, name, {"status": status}, ns, subresource="status")


@pytest.fixture
def kubeconfig(control_plane: ControlPlane) -> str:
    return str(control_plane.kubeconfig)


async def test_get_describe_and_scale(
    client: Client, crds: list[str], namespace: str, kubeconfig: str, tmp_path: Path
) -> None:
    await client.create(MACHINE_POOLS, pool_object("web"), namespace)
    await set_status(
        client,
        namespace,
        "web",
        phase="ScalingUp",
        replicas=1,
        readyReplicas=1,
        versions=[{"version": "v1.34.4", "replicas": 1}],
    )
    common = ("--kubeconfig", kubeconfig, "-n", namespace)

    listed = machinepool("get", "pools", *common, home=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "web" in listed.stdout
    assert "ScalingUp" in listed.stdout
    assert "v1.34.4=1" in listed.stdout

    described = machinepool("describe", "pool", "web", *common, home=tmp_path)
    assert described.returncode == 0, described.stderr
    assert "MachinePool/web" in described.stdout
    assert "SimMachinePool/web" in described.stdout

    scaled = machinepool("scale", "web", "--replicas", "5", *common, home=tmp_path)
    assert scaled.returncode == 0, scaled.stderr
    assert (await client.get(MACHINE_POOLS, "web", namespace))["spec"]["replicas"] == 5


async def test_rollout_status_finishes_and_timeline_draws_it(
    client: Client, crds: list[str], namespace: str, kubeconfig: str, tmp_path: Path
) -> None:
    created = await client.create(MACHINE_POOLS, pool_object("api", replicas=2), namespace)
    await set_status(
        client,
        namespace,
        "api",
        phase="Running",
        replicas=2,
        readyReplicas=2,
        availableReplicas=2,
        upToDateReplicas=2,
        observedGeneration=created["metadata"]["generation"],
        versions=[{"version": "v1.34.4", "replicas": 2}],
    )
    common = ("--kubeconfig", kubeconfig, "-n", namespace)
    done = machinepool("rollout", "status", "api", "--timeout", "30", *common, home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rolled out" in done.stdout

    png = tmp_path / "api.png"
    drawn = machinepool("timeline", "api", "-o", str(png), *common, home=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = tmp_path / "api.html"
    assert machinepool("timeline", "api", "-o", str(page), *common, home=tmp_path).returncode == 0
    assert "v1.34.4=2" in page.read_text()


async def test_rollout_status_times_out_non_zero(
    client: Client, crds: list[str], namespace: str, kubeconfig: str, tmp_path: Path
) -> None:
    await client.create(MACHINE_POOLS, pool_object("slow", replicas=3), namespace)
    await set_status(client, namespace, "slow", phase="ScalingUp", replicas=1, readyReplicas=1)
    common = ("--kubeconfig", kubeconfig, "-n", namespace)
    result = machinepool("rollout", "status", "slow", "--timeout", "2", *common, home=tmp_path)
    assert result.returncode == 1
    assert "not done after 2s" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("describe", "pool", "nope"), 'MachinePool "nope" not found in namespace'),
        (("scale", "nope", "--replicas", "1"), 'MachinePool "nope" not found in namespace'),
        (("rollout", "status", "nope", "--timeout", "1"), 'MachinePool "nope" not found'),
    ],
)
async def test_unknown_pool_is_one_line_without_traceback(
    crds: list[str], kubeconfig: str, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    result = machinepool(*args, "--kubeconfig", kubeconfig, "-n", "no-such-ns", home=tmp_path)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1


def test_unreachable_cluster_is_one_line(control_plane: ControlPlane, tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    text = control_plane.kubeconfig.read_text()
    broken.write_text(text.replace(control_plane.url, "https://127.0.0.1:1"))
    result = machinepool("get", "pools", "--kubeconfig", str(broken), home=tmp_path)
    assert result.returncode == 1
    assert "cannot reach the cluster" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
