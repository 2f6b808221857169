"""Helpers for running the real kubectl and clusterctl against machinepool.

A management cluster here is a kube-apiserver of the session's control plane (started as a
"workload" cluster on the shared etcd, so several can run side by side for ``clusterctl move``).
It has no kubelet, so the provider Deployments ``clusterctl init`` installs cannot run: the
tests run the same ``machinepool run`` processes on this machine instead (``LocalProviders``)
and point the installed webhook configurations and CRD conversion at them, which is what the
Service in front of the pods and cert-manager's CA injector do in a cluster. The tier that
runs the Pods themselves, on a real node, with real cert-manager, is test_as_shipped.py and
test_as_shipped_beside_upstream.py; what they share is here too (``Installed``,
``write_report``).

The binaries are built, never downloaded: kubectl by ``hack/controlplane/build.sh`` and
clusterctl by ``hack/clusterctl/build.sh``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest
from tests.reliability.report import command_line, git_revision
from tests.support import eventually
from tests.support.conditions import is_true
from tests.support.scripts import deploy_generator

from machinepool.controlplane import ControlPlane
from machinepool.controlplane.binaries import optional_binary
from machinepool.controlplane.process import Process, free_port, stop_all
from machinepool.runtime import (
    CRDS,
    MUTATING_WEBHOOKS,
    NODES,
    PODS,
    VALIDATING_WEBHOOKS,
    Client,
    Obj,
    PatchType,
    self_signed,
)

REPO = Path(__file__).resolve().parents[3]
CLUSTERCTL_BUILD = REPO / "hack" / "clusterctl" / "build.sh"
VERSION = f"v{deploy_generator().version()}"
"""The providers' release in the local clusterctl repository (pyproject's version)."""
NO_VERSION_CHECK = {"CLUSTERCTL_DISABLE_VERSIONCHECK": "true"}
"""clusterctl's environment here: its check for a newer release would reach GitHub."""


def load_generator() -> ModuleType:
    """deploy/generate.py as a module (it is a script, not part of the package)."""
    return deploy_generator()


def build_clusterctl() -> Path:
    """hack/clusterctl/build.sh's binary; a failed build fails the test with its reason."""
    result = subprocess.run(
        ["bash", str(CLUSTERCTL_BUILD)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"hack/clusterctl/build.sh failed:\n{result.stderr}"
    return Path(result.stdout.strip().splitlines()[-1])


def kubectl_binary() -> Path:
    binary = optional_binary("kubectl")
    assert binary is not None, "kubectl is missing: run `make controlplane`"
    return binary


def run(
    argv: list[str], *, stdin: str | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a client binary as a user would; the caller asserts on the result."""
    return subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def kubectl(
    kubeconfig: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run([str(kubectl_binary()), f"--kubeconfig={kubeconfig}", *args], stdin=stdin)


NAMESPACE = "team-a"
"""The namespace the user guide's commands make the cluster in."""


class AsUser:
    """kubectl as the user runs it against one management cluster: ``kubeconfig`` is the
    subclass's. What the clusterctl tiers share."""

    @property
    def kubeconfig(self) -> Path:
        raise NotImplementedError

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = kubectl(self.kubeconfig, *args, stdin=stdin)
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def objects(self, kind: str, *extra: str) -> list[Obj]:
        """The ``kind`` objects of ``NAMESPACE``, as ``kubectl get -o json`` lists them."""
        items: list[Obj] = json.loads(
            self.kubectl("get", kind, "-n", NAMESPACE, "-o", "json", *extra)
        )["items"]
        return items


def ready(obj: Obj | None) -> bool:
    return is_true(obj, "Ready")


@dataclass
class Installed(AsUser):
    """A management cluster on a real node after ``clusterctl init``, as the as-shipped tier
    drives it: kubectl as the user, and the providers' Pods."""

    cp: ControlPlane
    client: Client
    init_output: str
    pods: dict[str, Obj] = field(default_factory=dict)
    """The providers' Pods by namespace, once Ready (``wait_pods``)."""
    namespaces: list[str] = field(default_factory=list)
    """Every namespace ``wait_pods`` waited in, for ``logs``."""

    @property
    def kubeconfig(self) -> Path:
        return self.cp.kubeconfig

    async def wait_pods(
        self, selectors: Mapping[str, str], within: float, image: str | None = None
    ) -> None:
        """Until each namespace of ``selectors`` holds one Pod of its label selector, Ready
        (and running ``image``, when given), and no other, not even one being deleted; on a
        timeout, fail with ``logs``."""
        self.namespaces += [ns for ns in selectors if ns not in self.namespaces]

        async def all_ready() -> bool:
            for namespace, selector in selectors.items():
                listed = await self.client.list(PODS, namespace, label_selector=selector)
                if len(listed.items) != 1 or not ready(listed.items[0]):
                    return False
                (pod,) = listed.items
                if image is not None and pod["spec"]["containers"][0]["image"] != image:
                    return False
                self.pods[namespace] = pod
            return True

        what = f"one Pod Ready in each of {', '.join(selectors)}"
        try:
            await eventually(all_ready, what, within=within, interval=0.5)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None

    def logs(self) -> str:
        """The provider Pods and each one's last log lines (its previous container's, after a
        restart), for a failure's message."""
        out = [kubectl(self.kubeconfig, "get", "pods", "-A", "-o", "wide").stdout]
        for namespace in self.namespaces:
            for previous in ("--previous=false", "--previous=true"):
                result = kubectl(self.kubeconfig, "logs", "-n", namespace, "--tail=30",
                                 "-l", "control-plane", previous)  # fmt: skip
                out.append(f"--- {namespace} {previous}\n{result.stdout}{result.stderr}")
        return "\n".join(out)


REPORT_ENV = "MACHINEPOOL_AS_SHIPPED_REPORT"
"""Names the as-shipped report (docs/as-shipped.md) for the tier's modules to write."""
_SECTION = re.compile(r"<!-- section: (\S+) -->\n.*?<!-- end: \1 -->\n", re.DOTALL)


def write_report(
    config: pytest.Config, module: str, about: str, figures: Mapping[str, str], revision: str
) -> None:
    """Write ``module``'s figures into its own section of ``$MACHINEPOOL_AS_SHIPPED_REPORT``
    (when set, and there are figures), with the command and revision that measured them.

    The tier's modules may run at once (pytest-xdist workers), so each rewrites only its
    section, under a lock on the file, and keeps the others' as they are. The command is
    the session's: on a worker, the one its controller was started with."""
    target = os.environ.get(REPORT_ENV)
    if not target or not figures:
        return
    argv = getattr(config, "workerinput", {}).get("mainargv")
    lines = [
        f"<!-- section: {module} -->",
        f"## `tests/e2e/clients/{module}`",
        "",
        about,
        "",
        "| | |",
        "|---|---|",
        f"| command | `{REPORT_ENV}={target} {command_line(argv)}` |",
        f"| revision | {revision} |",
        f"| written | {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} |",
        f"| machine | {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} |",
        "",
        "| figure | value |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in figures.items()),
        "",
        f"<!-- end: {module} -->",
    ]
    section = "\n".join(lines) + "\n"
    with open(target, "a+") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        sections = {m.group(1): m.group(0) for m in _SECTION.finditer(file.read())}
        sections[module] = section
        file.seek(0)
        file.truncate()
        file.write(_REPORT_HEADER + "\n" + "\n".join(sections.values()))


def reported(
    request: pytest.FixtureRequest, about: str, figures: dict[str, str]
) -> Iterator[dict[str, str]]:
    """The body of a Pod tier's module fixture: yields its ``figures`` for the tests to fill,
    then writes them into the module's section (``write_report``) with the revision they were
    measured at (taken first: a section written meanwhile by another module modifies the tree)."""
    revision = git_revision()
    yield figures
    write_report(request.config, Path(str(request.path)).name, about, figures, revision)


_REPORT_HEADER = """# machinepool as it ships (generated)

Written by the as-shipped tier's modules themselves, each into its own section; do not edit by
hand: rerun a section's command to refresh it. The tier loads images into a real node's
containerd and installs providers with `clusterctl init`, as the user and operator guides say
(each module's docstring says what it checks).
"""


async def route_webhooks(
    client: Client, url: str, ca_bundle: bytes, *, conversion: bool = True
) -> None:
    """Point what ``clusterctl init`` installed (webhook configurations and the MachinePool CRD's
    conversion, all naming the provider's Service) at a webhook server on this machine, with
    its CA: the Service's and cert-manager's CA injector's job in a cluster. ``conversion``
    False: the webhook configurations only."""
    ca = base64.b64encode(ca_bundle).decode()
    for resource in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
        for config in (await client.list(resource)).items:
            hooks = config.get("webhooks") or []
            services = [(h.get("clientConfig") or {}).get("service") for h in hooks]
            if not any(services):
                continue
            for hook, service in zip(hooks, services, strict=True):
                if service:
                    hook["clientConfig"] = {"url": url + service["path"], "caBundle": ca}
            patch = {"webhooks": hooks}
            await client.patch(
                resource, config["metadata"]["name"], patch, patch_type=PatchType.MERGE
            )
    if not conversion:
        return
    crd = await client.get(CRDS, "machinepools.cluster.x-k8s.io")
    webhook = crd["spec"]["conversion"]["webhook"]
    path = webhook["clientConfig"]["service"]["path"]
    patch = {
        "spec": {
            "conversion": {
                "webhook": {"clientConfig": {"service": None, "url": url + path, "caBundle": ca}}
            }
        }
    }
    await client.patch(CRDS, "machinepools.cluster.x-k8s.io", patch, patch_type=PatchType.MERGE)


def wait_ready(proc: Process, port: int, timeout: float = 120.0) -> None:
    """Until the process answers /readyz (its informers synced), as a readiness probe would."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.check_alive()
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer,
        ):
            if answer.status == 200:
                return
        time.sleep(0.2)
    raise TimeoutError(f"{proc.name} not ready after {timeout:.0f}s:\n{proc.log_tail(40)}")


@dataclass
class LocalProviders:
    """The provider pods of one management cluster, run as processes on this machine: core,
    kubeadm bootstrap and Sim in one ``machinepool run`` (serving the webhooks with a
    certificate of our own), and the Sim node simulator."""

    name: str
    kubeconfig: Path
    log_dir: Path
    processes: list[Process] = field(default_factory=list)
    metrics_port: int = 0
    webhook_url: str = ""
    ca_bundle: bytes = b""

    def start(self) -> None:
        cert_dir = self.log_dir / f"{self.name}-certs"
        serving = self_signed(cert_dir)  # tls.crt and tls.key, as cert-manager's Secret holds
        self.ca_bundle = serving.ca_bundle
        webhook_port = free_port()
        self.webhook_url = f"https://127.0.0.1:{webhook_port}"
        self.metrics_port = free_port()
        kubelet_port = free_port()
        base = [sys.executable, "-m", "machinepool", "run", "--kubeconfig", str(self.kubeconfig)]
        controllers = Process(
            f"{self.name}-controllers",
            [
                *base,
                "--components=core,bootstrap,sim",
                f"--name={self.name}-controllers",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                "--insecure-diagnostics",  # loopback only: probes and metrics over plain HTTP
                f"--webhook-port={webhook_port}",
                f"--webhook-cert-dir={cert_dir}",
            ],
            self.log_dir,
        )
        kubelet = Process(
            f"{self.name}-kubelet",
            [
                *base,
                "--components=kubelet",
                f"--name={self.name}-kubelet",
                f"--metrics-bind-address=127.0.0.1:{kubelet_port}",
                "--insecure-diagnostics",
            ],
            self.log_dir,
        )
        self.processes = [controllers, kubelet]
        for proc in self.processes:
            proc.start()
        wait_ready(controllers, self.metrics_port)
        wait_ready(kubelet, kubelet_port)

    def stop(self) -> None:
        stop_all(self.processes)

    async def logged(self, message: str, subjects: set[str], timeout: float = 60.0) -> None:
        """Until the node simulator's log has ``message`` about each of ``subjects``."""
        log = self.processes[1].log_path
        async with asyncio.timeout(timeout):
            while True:
                lines = [line for line in log.read_text().splitlines() if message in line]
                if all(any(s in line for line in lines) for s in subjects):
                    return
                await asyncio.sleep(0.2)

    def logs(self) -> str:
        return "\n".join(f"--- {p.log_path}\n{p.log_tail(40)}" for p in self.processes)


@contextlib.contextmanager
def local_providers(name: str, kubeconfig: Path, log_dir: Path) -> Iterator[LocalProviders]:
    providers = LocalProviders(name, kubeconfig, log_dir)
    try:
        providers.start()
        yield providers
    finally:
        providers.stop()


class NodeHistory:
    """Every change to the workload's Nodes while something runs (a move, an upgrade), from a
    watch: what a Node-level disruption would show."""

    def __init__(self) -> None:
        self.cordoned: set[str] = set()
        self.deleted: set[str] = set()
        self.added: set[str] = set()

    async def follow(self, client: Client, resource_version: str) -> None:
        async for event in client.watch(NODES, resource_version=resource_version):
            if event.type not in ("ADDED", "MODIFIED", "DELETED"):
                continue  # bookmarks
            name = event.object["metadata"]["name"]
            if event.type == "DELETED":
                self.deleted.add(name)
            elif event.type == "ADDED":
                self.added.add(name)
            if (event.object.get("spec") or {}).get("unschedulable"):
                self.cordoned.add(name)
