"""cert-manager as it ships, running as Pods on a management cluster with a real node.

``await install_cert_manager(cluster, client)`` puts cert-manager v1.20.3 on a ``ControlPlane``
started with ``node=RealNode()`` and returns once its webhook answers:

- its controller, webhook and cainjector, built from source by ``hack/certmanager/build.sh``
  (static Go binaries; ``make clients`` builds them before the session), each in an image built
  offline by ``controlplane.images`` (the binary at the path of the release's image, the Go
  toolchain's CA bundle from Debian's ``ca-certificates``, ``/etc/passwd`` with the non-root
  user 65532 the release's distroless base runs as, and the license) and imported into the
  node's containerd;
- its release manifest made as its release makes it (``make/manifests.mk``): the
  ``cert-manager`` Namespace, then ``helm template`` of its chart with the CRDs enabled,
  ``creator=static`` and no startupapicheck Job, the images pointed at the ones built here
  (``imagePullPolicy: Never``); applied server-side with kubectl, as a user applies
  ``cert-manager.yaml``.

"Its webhook answers" is what ``clusterctl init`` takes for "cert-manager is installed": before
installing anything it creates a test Issuer and Certificate (in the namespace
``cert-manager-test``), and installs cert-manager from GitHub only when that fails (cluster-api
v1.14.2, ``cmd/clusterctl/client/cluster/cert_manager.go``: ``EnsureInstalled``,
``waitForAPIReady``). Objects created through cert-manager's API are admitted by its webhook,
so once a dry-run create reaches the webhook, clusterctl's check passes.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.support.conditions import is_true
from tests.support.waiting import until_admission_answers, watch_until

from machinepool.controlplane import ControlPlane, optional_binary
from machinepool.controlplane import images as oci
from machinepool.runtime import Client, Obj, Resource

__all__ = [
    "CERTIFICATES",
    "COMPONENTS",
    "ISSUERS",
    "NAMESPACE",
    "RELEASE",
    "build",
    "image_spec",
    "install_cert_manager",
    "kubectl",
    "release_manifest",
]

RELEASE = "v1.20.3"
NAMESPACE = "cert-manager"
COMPONENTS = ("controller", "webhook", "cainjector")
REGISTRY = "machinepool.local"
"""Where the images are named (a registry that does not exist: they are never pulled)."""
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
"""Debian's ``ca-certificates`` bundle, where Go's crypto/x509 looks first, as in the release's
distroless base."""
REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "hack" / "certmanager" / "build.sh"

ISSUERS = Resource("cert-manager.io", "v1", "issuers", "Issuer")
CERTIFICATES = Resource("cert-manager.io", "v1", "certificates", "Certificate")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")

_PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
)
_GROUP = "root:x:0:\nnonroot:x:65532:\n"


def build() -> Path:
    """The folder ``hack/certmanager/build.sh`` builds (or finds cached) and prints."""
    result = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{BUILD} failed:\n{result.stderr.strip()}")
    return Path(result.stdout.strip().splitlines()[-1])


def _text_file(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    if not path.exists() or path.read_text() != text:
        partial = path.with_suffix(f".{os.getpid()}")
        partial.write_text(text)
        partial.rename(path)
    return path


def image_spec(folder: Path, component: str) -> oci.ImageSpec:
    """The image of one component: its static binary and the few files a distroless base has."""
    binary = f"/app/cmd/{component}/{component}"  # the release's Containerfile.<component>
    return oci.ImageSpec(
        name=f"{REGISTRY}/cert-manager-{component}",
        tag=RELEASE,
        debian=None,
        files=(
            oci.AddFile(folder / component, binary),
            oci.AddFile(CA_BUNDLE, str(CA_BUNDLE), 0o644),
            oci.AddFile(_text_file(folder, "passwd", _PASSWD), "/etc/passwd", 0o644),
            oci.AddFile(_text_file(folder, "group", _GROUP), "/etc/group", 0o644),
            oci.AddFile(folder / "LICENSE", "/licenses/LICENSE", 0o644),
        ),
        entrypoint=(binary,),
        user="65532:65532",
        env=(("PATH", oci.DEFAULT_PATH),),
    )


def helm_values(specs: dict[str, oci.ImageSpec]) -> list[str]:
    """``--set`` arguments: the release's (make/manifests.mk), then the images built here."""
    values = ["crds.enabled=true", "creator=static", "startupapicheck.enabled=false"]
    for component, spec in specs.items():
        prefix = "image" if component == "controller" else f"{component}.image"
        values += [
            f"{prefix}.repository={spec.name}",
            f"{prefix}.tag={spec.tag}",
            f"{prefix}.pullPolicy=Never",
        ]
    return values


def release_manifest(folder: Path, specs: dict[str, oci.ImageSpec]) -> str:
    """cert-manager.yaml as the release makes it, with ``specs``' images."""
    argv = [
        str(folder / "helm"),
        "template",
        "cert-manager",
        str(folder / "chart"),
        "--namespace",
        NAMESPACE,
        "--kube-version=1.29.0",  # what the release renders for
        *(arg for value in helm_values(specs) for arg in ("--set", value)),
    ]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"helm template failed:\n{result.stderr.strip()}")
    rendered = result.stdout.removeprefix("---\n")
    return (folder / "namespace.yaml").read_text().rstrip("\n") + "\n---\n" + rendered


def kubectl(cluster: ControlPlane, *args: str, stdin: str | None = None) -> str:
    """Run kubectl against the management cluster; fails with its output on a non-zero exit."""
    binary = optional_binary("kubectl")
    if binary is None:
        raise RuntimeError("kubectl is missing: run `make controlplane`")
    argv = [str(binary), f"--kubeconfig={cluster.kubeconfig}", *args]
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed:\n{result.stderr.strip()}")
    return result.stdout


def load_images(cluster: ControlPlane, archives: Sequence[Path]) -> None:
    """Import docker archives into the node's containerd, as ``ctr images import`` on a node."""
    ctr = ["ctr", "--address", str(cluster.node.socket), "--namespace", "k8s.io"]
    for archive in archives:
        result = subprocess.run(
            [*ctr, "images", "import", str(archive)], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(f"ctr images import {archive} failed: {result.stderr.strip()}")


def _available(deployment: Obj | None) -> bool:
    return is_true(deployment, "Available")


async def install_cert_manager(
    cluster: ControlPlane, client: Client, *, within: float = 240.0
) -> str:
    """Install cert-manager on ``cluster`` (started with ``node=RealNode()``); return once its
    three Deployments are Available and its webhook answers. Returns the applied manifest.

    Idempotent: the images are built once (cached by content) and the manifest is applied
    server-side, so a second call on the same cluster changes nothing.
    """
    folder = build()
    specs = {c: image_spec(folder, c) for c in COMPONENTS}
    built = [oci.build(spec, log=lambda _line: None) for spec in specs.values()]
    load_images(cluster, [image.archive for image in built])
    manifest = release_manifest(folder, specs)
    kubectl(cluster, "apply", "--server-side", "--field-manager=machinepool-tests", "-f", "-",
            stdin=manifest)  # fmt: skip
    names = {f"cert-manager{'' if c == 'controller' else '-' + c}" for c in COMPONENTS}
    await watch_until(
        client,
        DEPLOYMENTS,
        NAMESPACE,
        lambda found: all(_available(found.get(name)) for name in names),
        f"cert-manager's Deployments {sorted(names)} Available",
        within=within,
    )
    # An Issuer of no kind: the CRD's schema allows it, cert-manager's webhook refuses it.
    probe = {"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
             "metadata": {"name": "webhook-probe"}, "spec": {}}  # fmt: skip
    await until_admission_answers(client, ISSUERS, probe, NAMESPACE, within=within)
    return manifest
