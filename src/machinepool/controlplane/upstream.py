"""Upstream Cluster API's core provider on a local control plane, for the benchmark's
comparison runs and the tests that run us beside upstream.

- ``build("manager" | "controlplane")``: ``bench/upstream/build.sh`` (source checkouts only)
  builds upstream's core manager, or a control-plane folder whose kube-apiserver reports its
  version (upstream's manager refuses an unversioned one), into the cache; the path is returned.
- ``crds(webhook)`` and ``webhook_configurations(webhook)``: upstream's core CRDs and admission
  webhook configurations from the module cache, as its release manifests install them
  (``capi-`` name prefix, conversion through its webhook server), pointed at a local URL.
- ``UpstreamWebhook.create`` makes the serving certificate and port once, so restarts of the
  manager keep the configurations valid; ``manager_argv`` is the command line.
- ``manager_image(target, binary)`` and ``as_released(components, target)``: a manager in an
  image named as upstream's release names it, and a provider's rendered components as its
  release publishes them (that image, pulled only if not present), for running upstream's
  providers as Pods on a real node.
"""

from __future__ import annotations

import base64
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from machinepool.controlplane import images
from machinepool.controlplane.process import free_port
from machinepool.runtime import copy_obj, pki

__all__ = [
    "RELEASE_IMAGES",
    "UpstreamWebhook",
    "as_released",
    "build",
    "crds",
    "manager_argv",
    "manager_image",
    "module_dir",
    "source_dir",
    "version",
    "webhook_configurations",
]

NAME_PREFIX = "capi-"
"""What upstream's core kustomization prefixes names with (capi-system, capi-... configs)."""

Obj = dict[str, Any]

RELEASE_REGISTRY = "registry.k8s.io/cluster-api"
STAGING_REGISTRY = "gcr.io/k8s-staging-cluster-api"
"""Where upstream's release names its images, and where its source's manifests name them
(its Makefile's ``PROD_REGISTRY`` and ``STAGING_REGISTRY``)."""
RELEASE_IMAGES = {"manager": "cluster-api-controller", "bootstrap": "kubeadm-bootstrap-controller"}
"""``build`` target -> the name of its image (the Makefile's ``IMAGE_NAME`` and
``KUBEADM_BOOTSTRAP_IMAGE_NAME``)."""


def source_dir() -> Path:
    """``bench/upstream`` of the source checkout: the wrapper module pinning upstream."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "bench" / "upstream"
        if (candidate / "build.sh").exists():
            return candidate
    raise RuntimeError("upstream Cluster API is built from a source checkout (bench/upstream)")


def build(target: str) -> Path:
    out = subprocess.run(
        ["bash", str(source_dir() / "build.sh"), target],
        check=False,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"bench/upstream/build.sh {target} failed:\n{out.stderr.strip()}")
    return Path(out.stdout.strip().splitlines()[-1])


def manager_image(target: str, binary: Path) -> images.ImageSpec:
    """Upstream's manager ``target`` (``build(target)``'s ``binary``) as its release image holds
    it: the static binary at ``/manager``, run as the non-root user 65532, and nothing else.
    Its Dockerfile's base (distroless ``static:nonroot``) adds a CA bundle and an
    ``/etc/passwd``, which the manager does not read: it reaches API servers with the CAs of
    its ServiceAccount and of the clusters' kubeconfigs, and the Pod names its user by number.

    Named as the release's manifests name it (``as_released``), so that its components install
    unchanged: imported into a node's containerd under that name, the kubelet finds it present
    and pulls nothing.
    """
    return images.ImageSpec(
        name=f"{RELEASE_REGISTRY}/{RELEASE_IMAGES[target]}",
        tag=version(),
        debian=None,
        files=(images.AddFile(binary, "/manager"),),
        entrypoint=("/manager",),
        user="65532:65532",
        env=(("PATH", images.DEFAULT_PATH),),
    )


def as_released(components: str, target: str) -> str:
    """A provider's components rendered from its source (``kustomize build
    <provider>/config/default``) as its release publishes them: the manager's image named in
    the release registry with the release's tag, pulled only if not present. That is what its
    Makefile's ``manifest-modification`` sets (with ``sed``, in the kustomize patches) before
    ``release-manifests`` renders the same folder."""
    staging = f"image: {STAGING_REGISTRY}/{RELEASE_IMAGES[target]}:main"
    released = f"image: {RELEASE_REGISTRY}/{RELEASE_IMAGES[target]}:{version()}"
    for old in (staging, "imagePullPolicy: Always"):
        if components.count(old) != 1:
            raise RuntimeError(f"upstream's {target} components name {old!r} not once")
    return components.replace(staging, released).replace(
        "imagePullPolicy: Always", "imagePullPolicy: IfNotPresent"
    )


def module_dir() -> Path:
    """Where the Go module cache holds the sigs.k8s.io/cluster-api version pinned."""
    out = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-api"],
        cwd=source_dir(),
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())


def version() -> str:
    for line in (source_dir() / "go.mod").read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["sigs.k8s.io/cluster-api"] and len(parts) > 1:
            return parts[1]
    raise RuntimeError("bench/upstream/go.mod does not require sigs.k8s.io/cluster-api")


def _documents(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@dataclass(frozen=True)
class UpstreamWebhook:
    """Where upstream's webhook server listens, and the CA its serving certificate chains to."""

    port: int
    cert_dir: Path
    ca_bundle: bytes

    @classmethod
    def create(cls, workdir: Path) -> UpstreamWebhook:
        cert_dir = workdir / "upstream-webhook-certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        ca = pki.new_ca("upstream-webhook-ca")
        serving = pki.issue(
            ca, "localhost", dns_names=("localhost",), ip_addresses=("127.0.0.1",), server=True
        )
        serving.write(cert_dir, "tls")
        return cls(free_port(), cert_dir, ca.cert_pem)

    def client_config(self, path: str) -> Obj:
        return {
            "url": f"https://127.0.0.1:{self.port}{path}",
            "caBundle": base64.b64encode(self.ca_bundle).decode(),
        }

    def conversion(self) -> Obj:
        """A CRD's ``spec.conversion`` through this server's ``/convert``."""
        return {
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": self.client_config("/convert"),
                "conversionReviewVersions": ["v1", "v1beta1"],
            },
        }


def crds(webhook: UpstreamWebhook | None = None) -> list[Obj]:
    """Upstream's core CRDs; with ``webhook``, every multi-version one converts through it
    (what its ``webhook_in_*`` kustomize patches do)."""
    out = []
    for path in sorted((module_dir() / "core" / "config" / "crd" / "bases").glob("*.yaml")):
        for crd in _documents(path):
            if webhook is not None and len(crd["spec"]["versions"]) > 1:
                crd["spec"]["conversion"] = webhook.conversion()
            out.append(crd)
    return out


def webhook_configurations(webhook: UpstreamWebhook) -> list[Obj]:
    """Upstream's Mutating- and ValidatingWebhookConfiguration, named and pointed as installed."""
    docs = _documents(module_dir() / "core" / "config" / "webhook" / "manifests.yaml")
    out = []
    for doc in docs:
        config = copy_obj(doc)
        config["metadata"] = {"name": NAME_PREFIX + doc["metadata"]["name"]}
        for entry in config["webhooks"]:
            path = entry["clientConfig"]["service"]["path"]
            entry["clientConfig"] = webhook.client_config(path)
        out.append(config)
    return out


def manager_argv(
    binary: Path,
    kubeconfig: Path,
    *,
    machine_pool: bool,
    health_port: int,
    diagnostics_port: int,
    webhook: UpstreamWebhook,
    leader_elect: bool = False,
    cluster_topology: bool = False,
) -> list[str]:
    """Upstream's core manager with its MachinePool feature gate on or off (and, with
    ``cluster_topology``, its ClusterTopology gate on: the ClusterClass and topology
    controllers), insecure (HTTP) diagnostics for /metrics, and its webhook server on
    ``webhook``."""
    gates = f"MachinePool={'true' if machine_pool else 'false'}"
    if cluster_topology:
        gates += ",ClusterTopology=true"
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--leader-elect={'true' if leader_elect else 'false'}",
        f"--feature-gates={gates}",
        f"--diagnostics-address=127.0.0.1:{diagnostics_port}",
        "--insecure-diagnostics",
        f"--health-addr=127.0.0.1:{health_port}",
        f"--webhook-port={webhook.port}",
        f"--webhook-cert-dir={webhook.cert_dir}",
        "--v=0",
    ]
