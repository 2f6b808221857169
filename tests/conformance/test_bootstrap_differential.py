"""Our kubeadm bootstrap provider against upstream's (``bootstrap/kubeadm`` of the pinned
module), rendering the same MachinePool-owned KubeadmConfigs.

Both CRDs are named ``kubeadmconfigs.bootstrap.cluster.x-k8s.io``, so each provider gets a
management cluster of its own: upstream's with upstream's core and bootstrap CRDs and its
bootstrap manager (MachinePool gate on), ours with our CRDs and ``machinepool run
--components bootstrap``. Each cluster holds the same Cluster (initialized, its kubeconfig and
``-ca`` Secrets pointing at one workload cluster per side) and, per case, a MachinePool and the
KubeadmConfig it owns. The data Secrets' cloud-config documents are compared after normalising
what differs by construction (the bootstrap token, the CA public-key hash, the API endpoint)
and after parsing the kubeadm join document they carry; every remaining difference must be
listed in docs/upstream-differences.md (patterns ``bootstrap: <case>.<path>``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pytest
import pytest_asyncio
import yaml
from tests.conformance.differential import allowed_differences, differences
from tests.reliability.harness import ControllerProcess
from tests.support import eventually
from tests.support.builders import CLUSTER, machine_pool
from tests.support.conditions import is_true
from tests.support.resources import KUBEADM_CONFIGS, MACHINE_POOLS
from tests.support.upstream import cluster_namespace

from machinepool.api.crdgen import crd_manifests
from machinepool.controlplane import ControlPlane, WorkloadCluster, upstream
from machinepool.controlplane.process import Process, free_port
from machinepool.runtime import CRDS, SECRETS, Client, Obj

pytestmark = pytest.mark.timeout(900)

NAMESPACE = "bootstrap"
JOIN_DOC = "/run/kubeadm/kubeadm-join-config.yaml"
IGNITION_JOIN_DOC = "/etc/kubeadm.yml"
TOKEN = re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b")
CA_HASH = re.compile(r"sha256:[0-9a-f]{64}")

CASES: dict[str, dict[str, Any]] = {
    "plain": {
        "version": "v1.34.0",
        "spec": {"joinConfiguration": {"nodeRegistration": {"imagePullPolicy": "IfNotPresent"}}},
    },
    "files-users-ntp-commands": {
        "version": "v1.34.0",
        "spec": {
            "files": [
                {"path": "/etc/motd", "content": "hello\nworld\n", "permissions": "0644"},
                {"path": "/etc/b64", "content": "aGk=", "encoding": "base64", "owner": "root"},
            ],
            "users": [{"name": "ops", "sshAuthorizedKeys": ["ssh-ed25519 AAAA ops"]}],
            "ntp": {"enabled": True, "servers": ["time.example.org"]},
            "preKubeadmCommands": ["echo pre"],
            "postKubeadmCommands": ["echo post"],
            "joinConfiguration": {
                "nodeRegistration": {
                    "kubeletExtraArgs": [{"name": "max-pods", "value": "50"}],
                    "taints": [],
                },
                "patches": {"directory": "/etc/kubeadm/patches"},
            },
        },
    },
    "ignition": {
        "version": "v1.34.0",
        "spec": {
            "format": "ignition",
            "files": [
                {"path": "/etc/motd", "content": "hello\nworld\n", "permissions": "0644"},
                {
                    "path": "/etc/b64",
                    "content": "aGk=",
                    "encoding": "base64",
                    "owner": "core:core",
                    "permissions": "0600",
                },
            ],
            "users": [
                {
                    "name": "ops",
                    "groups": "wheel, docker",
                    "sudo": "ALL=(ALL) NOPASSWD:ALL",
                    "lockPassword": False,
                    "sshAuthorizedKeys": ["ssh-ed25519 AAAA ops"],
                }
            ],
            "ntp": {"enabled": True, "servers": ["time.example.org"]},
            "preKubeadmCommands": ["echo pre"],
            "postKubeadmCommands": ["echo post"],
            "verbosity": 4,
            "ignition": {
                "containerLinuxConfig": {
                    "additionalConfig": (
                        "storage:\n  files:\n  - path: /etc/extra\n"
                        "    contents:\n      inline: extra\n"
                        "systemd:\n  units:\n  - name: docker.service\n    enabled: true\n"
                        "passwd:\n  users:\n  - name: core\n    ssh_authorized_keys: [k]\n"
                    )
                }
            },
            "joinConfiguration": {"nodeRegistration": {"imagePullPolicy": "IfNotPresent"}},
        },
    },
    "kubeadm-v1beta3": {
        "version": "v1.30.4",
        "spec": {"joinConfiguration": {"nodeRegistration": {"name": "worker"}}},
    },
}
"""Case name -> the pool's Kubernetes version and the KubeadmConfig spec (v1beta2)."""


@dataclass
class Provider:
    name: str
    client: Client
    workload: WorkloadCluster


async def _cluster(client: Client, workload: WorkloadCluster) -> None:
    await cluster_namespace(client, NAMESPACE, workload, test_cluster=False, ca=True)


def _pool(name: str, version: str) -> Obj:
    """The harness's pool (KubeadmConfig and SimMachinePool ``name``), labelled with its
    Cluster as core would have labelled it (no core runs here)."""
    return machine_pool(
        NAMESPACE,
        name,
        replicas=1,
        version=version,
        labels={"cluster.x-k8s.io/cluster-name": CLUSTER},
    )


async def _render(provider: Provider, case: str) -> dict[str, Any]:
    """Create the case's MachinePool and the config it owns; its data, parsed."""
    client = provider.client
    mp = await client.create(MACHINE_POOLS, _pool(case, CASES[case]["version"]), NAMESPACE)
    owner = {
        "apiVersion": MACHINE_POOLS.api_version,
        "kind": "MachinePool",
        "name": case,
        "uid": mp["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    config = {
        "apiVersion": KUBEADM_CONFIGS.api_version,
        "kind": "KubeadmConfig",
        "metadata": {
            "name": case,
            "namespace": NAMESPACE,
            "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER},
            "ownerReferences": [owner],
        },
        "spec": CASES[case]["spec"],
    }
    await client.create(KUBEADM_CONFIGS, config, NAMESPACE)

    async def data_secret() -> str | None:
        obj = await client.get(KUBEADM_CONFIGS, case, NAMESPACE)
        return ((obj.get("status") or {}).get("dataSecretName")) or None

    name = await eventually(data_secret, within=180)
    secret = await client.get(SECRETS, name, NAMESPACE)
    return _parse(base64.b64decode(secret["data"]["value"]).decode(), provider)


def _parse(text: str, provider: Provider) -> dict[str, Any]:
    """The cloud-config as data: header lines kept, the join document parsed, and what
    differs by construction replaced."""
    endpoint = provider.workload.url.split("://", 1)[1].rstrip("/")

    def scrub(text: str) -> str:
        return CA_HASH.sub("CA-HASH", TOKEN.sub("TOKEN", text)).replace(endpoint, "ENDPOINT")

    text = scrub(text)
    if text.startswith("{"):
        return {"ignition": _parse_ignition(json.loads(text), scrub)}
    header = [line for line in text.splitlines() if line.startswith(("##", "#cloud"))]
    doc = yaml.safe_load(text) or {}
    for file in doc.get("write_files") or []:
        if file.get("path") == JOIN_DOC:
            file["content"] = list(yaml.safe_load_all(file["content"]))
    return {"header": header, "cloud-config": doc}


def _parse_ignition(doc: dict[str, Any], scrub: Callable[[str], str]) -> dict[str, Any]:
    """Ignition JSON with each file's data URL decoded (the join document parsed), files
    keyed by path, so a difference names the file and the line rather than a URL."""
    files: dict[str, Any] = {}
    for file in (doc.get("storage") or {}).get("files") or []:
        source = file["contents"]["source"]
        if source.startswith("data:;base64,"):
            content: Any = base64.b64decode(source.removeprefix("data:;base64,")).decode()
        else:
            content = scrub(unquote(source.removeprefix("data:,")))
        if file["path"] == IGNITION_JOIN_DOC:
            content = list(yaml.safe_load_all(content))
        elif isinstance(content, str):
            content = content.splitlines()
        files[file["path"]] = {**file, "contents": {**file["contents"], "source": content}}
    return {**doc, "storage": {**(doc.get("storage") or {}), "files": files}}


def _bootstrap_crds() -> list[Obj]:
    bases = upstream.module_dir() / "bootstrap" / "kubeadm" / "config" / "crd" / "bases"
    return [
        doc
        for path in sorted(bases.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


async def _established(client: Client, crds: list[Obj]) -> None:
    for crd in crds:
        crd["spec"].pop("conversion", None)  # v1beta2 only here: no webhook needed
        await client.apply(CRDS, crd, field_manager="conformance", force=True)

    async def all_established() -> bool:
        for crd in crds:
            if not is_true(await client.get(CRDS, crd["metadata"]["name"]), "Established"):
                return False
        return True

    await eventually(all_established, within=60)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def providers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Provider]]:
    workdir = tmp_path_factory.mktemp("bootstrap-conformance")
    binaries = await asyncio.to_thread(upstream.build, "controlplane")
    manager = await asyncio.to_thread(upstream.build, "bootstrap")
    planes = {name: ControlPlane(workdir / name, binaries=binaries) for name in ("up", "ours")}
    processes: list[Process | ControllerProcess] = []
    try:
        # The two sides share nothing, so their clusters start side by side (most of a start
        # is waiting for an apiserver to be ready).
        await asyncio.gather(*(asyncio.to_thread(cp.start) for cp in planes.values()))
        out: dict[str, Provider] = {}
        async with (
            await Client.from_kubeconfig(planes["up"].kubeconfig) as up,
            await Client.from_kubeconfig(planes["ours"].kubeconfig) as ours,
        ):
            crds = asyncio.gather(
                _established(up, [*upstream.crds(), *_bootstrap_crds()]),
                _established(ours, crd_manifests()),
            )
            workloads = await asyncio.gather(
                *(asyncio.to_thread(cp.start_workload, f"boot-{n}") for n, cp in planes.items())
            )
            await crds
            for (name, client), workload in zip(
                (("up", up), ("ours", ours)), workloads, strict=True
            ):
                await _cluster(client, workload)
                out[name] = Provider(name, client, workload)
            webhook = upstream.UpstreamWebhook.create(workdir)
            upstream_bootstrap = Process(
                "upstream-bootstrap",
                [
                    str(manager),
                    f"--kubeconfig={planes['up'].kubeconfig}",
                    "--leader-elect=false",
                    "--feature-gates=MachinePool=true,KubeadmBootstrapFormatIgnition=true",
                    f"--diagnostics-address=127.0.0.1:{free_port()}",
                    "--insecure-diagnostics",
                    f"--health-addr=127.0.0.1:{free_port()}",
                    f"--webhook-port={webhook.port}",
                    f"--webhook-cert-dir={webhook.cert_dir}",
                ],
                workdir,
            )
            upstream_bootstrap.start()
            processes.append(upstream_bootstrap)
            ours_bootstrap = ControllerProcess(
                name="ours-bootstrap",
                kubeconfig=planes["ours"].kubeconfig,
                components="bootstrap",
                log=workdir / "ours-bootstrap.log",
                lease_name="machinepool-conformance-bootstrap",
            )
            ours_bootstrap.start()
            processes.append(ours_bootstrap)
            await ours_bootstrap.wait_ready()
            yield out
    finally:
        for proc in processes:
            proc.stop()
        for cp in planes.values():
            await asyncio.to_thread(cp.stop)


async def test_bootstrap_data_matches_upstream(providers: dict[str, Provider]) -> None:
    allowed = [a for a in allowed_differences() if a.pattern.startswith("bootstrap: ")]
    problems: list[str] = []
    seen: set[str] = set()
    for case in CASES:
        up, ours = await asyncio.gather(
            _render(providers["up"], case), _render(providers["ours"], case)
        )
        for path, a, b in differences(up, ours, case):
            rule = next((r for r in allowed if r.matches(path, "bootstrap")), None)
            if rule is None:
                problems.append(f"{path}: upstream {a!r}, ours {b!r}")
            else:
                seen.add(rule.pattern)
    problems += [
        f"listed, but no case shows it: {a.pattern}" for a in allowed if a.pattern not in seen
    ]
    assert not problems, (
        "bootstrap data differs from upstream's, not listed in docs/upstream-differences.md:\n"
        + "\n".join(problems)
    )
