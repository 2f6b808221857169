"""A management cluster with a real node: kubelet, containerd, runc, a CNI bridge, kube-proxy.

One control plane for the module (``ControlPlane(node=RealNode())``): its Node registers and
turns Ready, a Pod with the restricted Pod Security settings runs in a namespace that enforces
them, a Pod reaches the apiserver through the ``kubernetes`` Service (kube-proxy's rules),
``kubectl logs`` reads a Pod's output (the apiserver dials the kubelet at the Node's address),
and stopping the control plane leaves nothing of the node behind, also after a restart in the
same directory. Marked ``realnode``: without root or the Debian packages, the session leaves
these tests out and says in one line what to install (tests/conftest.py).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from tests.support import wait_for
from tests.support.conditions import is_true

from machinepool.controlplane import ControlPlane, Node, RealNode, optional_binary
from machinepool.runtime.kube.client import NAMESPACES, NODES, PODS, Client, Resource
from machinepool.runtime.kube.errors import ApiError

pytestmark = pytest.mark.realnode

SERVICES = Resource("", "v1", "services", "Service")
NODE = RealNode(name="node-1")
START = 180.0
"""Seconds for a first Pod: containerd's first sandbox on two busy cores."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane(tmp_path_factory.mktemp("realnode"), node=NODE)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def api(cluster: ControlPlane) -> AsyncIterator[Client]:
    async with await Client.from_kubeconfig(cluster.kubeconfig) as c:
        yield c


@pytest_asyncio.fixture(loop_scope="session")
async def restricted(api: Client) -> AsyncIterator[str]:
    """A namespace that enforces the Pod Security Standard "restricted"."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    await api.create(NAMESPACES, {"metadata": {"name": name, "labels": labels}})
    yield name
    await api.delete(NAMESPACES, name)


def restricted_pod(name: str, image: str, script: str, restart: str = "Always") -> dict[str, Any]:
    """A Pod of busybox running ``script``, with every setting "restricted" asks for."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65534,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", script],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def ready(node: dict[str, Any] | None) -> bool:
    return is_true(node, "Ready")


def phase(*phases: str) -> Any:
    return lambda pod: pod is not None and pod.get("status", {}).get("phase") in phases


def kubectl_logs(cluster: ControlPlane, namespace: str, pod: str) -> str:
    """``kubectl logs``, as a user reads them; fails on a non-zero exit."""
    kubectl = optional_binary("kubectl")
    assert kubectl is not None, "hack/controlplane/build.sh builds kubectl"
    argv = [str(kubectl), f"--kubeconfig={cluster.kubeconfig}", "-n", namespace, "logs", pod]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


async def test_the_node_registers_and_turns_ready(cluster: ControlPlane, api: Client) -> None:
    node = await wait_for(api, NODES, None, NODE.name, ready, within=START, what="Ready")

    assert node is not None
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == cluster.node.address
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")


async def test_a_restricted_pod_runs_and_kubectl_reads_its_logs(
    cluster: ControlPlane, api: Client, restricted: str
) -> None:
    unconfined = restricted_pod("unconfined", cluster.node.image, "true")
    del unconfined["spec"]["securityContext"]
    with pytest.raises(ApiError, match="restricted"):  # the namespace does enforce it
        await api.create(PODS, unconfined, restricted)

    script = "echo hello from $(cat /etc/hostname); exec sleep 3600"
    await api.create(PODS, restricted_pod("hello", cluster.node.image, script), restricted)

    running = await wait_for(api, PODS, restricted, "hello", phase("Running"), within=START)
    assert running is not None
    assert running["spec"]["nodeName"] == NODE.name
    pod_ip = ipaddress.ip_address(running["status"]["podIP"])
    assert pod_ip in ipaddress.ip_network(NODE.pod_subnet)
    assert kubectl_logs(cluster, restricted, "hello") == "hello from hello"


async def test_a_pod_reaches_the_apiserver_through_the_kubernetes_service(
    cluster: ControlPlane, api: Client, restricted: str
) -> None:
    service = await api.get(SERVICES, "kubernetes", "default")
    cluster_ip = service["spec"]["clusterIP"]
    # Plain HTTP to the HTTPS port: Go's TLS server answers it with a message of its own,
    # so the answer comes from the apiserver and nothing else there. (busybox's TLS client
    # crashes on the apiserver's ECDSA certificate.)
    script = f"printf 'GET /readyz HTTP/1.0\\r\\n\\r\\n' | nc -w 10 {cluster_ip} 443"
    pod = restricted_pod("to-apiserver", cluster.node.image, script, restart="Never")
    await api.create(PODS, pod, restricted)

    done = await wait_for(
        api, PODS, restricted, "to-apiserver", phase("Succeeded", "Failed"), within=START
    )

    assert done is not None
    assert done["status"]["phase"] == "Succeeded", done["status"]
    answer = kubectl_logs(cluster, restricted, "to-apiserver")
    assert "Client sent an HTTP request to an HTTPS server" in answer


def leftovers(node: Node) -> list[str]:
    """What of the node is still there: processes, mounts, links, namespaces, rules, cgroups."""
    found = []
    top = str(node.dir.resolve())
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if top in cmdline or node.netns in cmdline:
            found.append(f"process {pid}: {cmdline[:120]}")
    found += [
        f"mount {line.split()[4]}"
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if top in line.split()[4]
    ]
    for argv, name in (
        (["ip", "-o", "link"], node.host_link),
        (["ip", "netns", "list"], node.netns),
        (["iptables", "-w", "-t", "nat", "-S"], node.chain),
    ):
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        found += [f"{argv[0]}: {line}" for line in out.splitlines() if name in line]
    found += [
        f"cgroup {h / node.cgroup}"
        for h in Path("/sys/fs/cgroup").iterdir()
        if (h / node.cgroup).exists()
    ]
    return found


async def test_stop_leaves_nothing_of_the_node_even_after_a_restart(
    cluster: ControlPlane,
) -> None:
    node = cluster.node
    assert leftovers(node), "a running node has processes, a link, rules and cgroups"

    cluster.stop()
    assert leftovers(node) == []

    restarted = dt.datetime.now(dt.UTC).replace(microsecond=0)
    again = ControlPlane(cluster.dir, node=NODE)
    again.start()
    try:
        async with await Client.from_kubeconfig(again.kubeconfig) as api:
            await wait_for(
                api,
                NODES,
                None,
                NODE.name,
                lambda n: ready(n) and heartbeat(n) >= restarted,
                within=START,
                what="Ready, reported by the restarted kubelet",
            )
    finally:
        again.stop()
    assert leftovers(node) == []


def heartbeat(node: dict[str, Any] | None) -> dt.datetime:
    """When the kubelet last reported the Node's Ready condition."""
    for c in (node or {}).get("status", {}).get("conditions", []):
        if c["type"] == "Ready":
            return dt.datetime.fromisoformat(c["lastHeartbeatTime"].replace("Z", "+00:00"))
    return dt.datetime.min.replace(tzinfo=dt.UTC)
