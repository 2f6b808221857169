"""cert-manager as it ships, on a management cluster with a real node, serving our core.

One control plane for the module (``ControlPlane(node=RealNode())``) with cert-manager v1.20.3
installed by ``tests.support.certmanager.install_cert_manager``: its release manifest (rendered
from its Helm chart with the real ``helm template``) and its three images, built here from
source. Then our core as the user guide installs it with kustomize (``kubectl apply
--server-side -k deploy/config/core``): cert-manager issues the webhook server's certificate
into the Secret our Deployment mounts, and its cainjector writes that certificate's CA into our
webhook configurations and the CRDs' conversion webhooks.

Marked ``realnode`` and ``certmanager``: without root or the Debian packages, or without
cert-manager's source (``CERT_MANAGER_SRC``; ``.ci/run`` sets it), the session leaves these tests
out and says in one line why (tests/conftest.py).
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from tests.support import wait_for, watch_until
from tests.support.certmanager import (
    CERTIFICATES,
    COMPONENTS,
    NAMESPACE,
    RELEASE,
    install_cert_manager,
    kubectl,
)
from tests.support.conditions import is_true

from machinepool.controlplane import ControlPlane, RealNode
from machinepool.runtime import (
    CRDS,
    MUTATING_WEBHOOKS,
    PODS,
    SECRETS,
    VALIDATING_WEBHOOKS,
    Client,
    Obj,
)

pytestmark = [pytest.mark.realnode, pytest.mark.certmanager]

REPO_CORE = "deploy/config/core"
OURS = "machinepool-system"
SERVING_CERT = "machinepool-serving-cert"
SERVING_SECRET = "machinepool-webhook-service-cert"
INJECTED_CRDS = ("machinepools.cluster.x-k8s.io", "machinehealthchecks.cluster.x-k8s.io")
WITHIN = 120.0
NODE = RealNode(name="cm-node", pod_subnet="10.244.62.0/24", routed_pods=True)
"""The apiserver reaches cert-manager's webhook at its Pod: a pod subnet of this node's own."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane(tmp_path_factory.mktemp("certmanager"), node=NODE)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def api(cluster: ControlPlane) -> AsyncIterator[Client]:
    async with await Client.from_kubeconfig(cluster.kubeconfig) as c:
        yield c


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def cert_manager(cluster: ControlPlane) -> str:
    """cert-manager installed, its webhook answering; the manifest that was applied."""
    async with await Client.from_kubeconfig(cluster.kubeconfig) as client:
        return await install_cert_manager(cluster, client)


def ready(obj: Obj | None) -> bool:
    return is_true(obj, "Ready")


async def test_its_three_pods_run_from_the_images_built_here(
    cluster: ControlPlane, api: Client, cert_manager: str
) -> None:
    # No hand-written Deployment: the manifest is helm's rendering of the release's chart.
    for template in ("deployment", "webhook-deployment", "cainjector-deployment"):
        assert f"# Source: cert-manager/templates/{template}.yaml" in cert_manager
    assert f'app.kubernetes.io/version: "{RELEASE}"' in cert_manager
    pods = (await api.list(PODS, NAMESPACE)).items

    images = {c["image"] for pod in pods for c in pod["spec"]["containers"]}
    assert images == {f"machinepool.local/cert-manager-{c}:{RELEASE}" for c in COMPONENTS}
    assert all(ready(pod) for pod in pods), [pod["status"] for pod in pods]
    assert {pod["spec"]["nodeName"] for pod in pods} == {NODE.name}
    for pod in pods:  # as the chart sets them, satisfied by the image's non-root user
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        (container,) = pod["spec"]["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["imagePullPolicy"] == "Never"


def ca_bundles(obj: Obj | None) -> list[str]:
    """The caBundles of a webhook configuration's webhooks, or of a CRD's conversion webhook."""
    if obj is None:
        return [""]
    if "webhooks" in obj:
        return [w.get("clientConfig", {}).get("caBundle", "") for w in obj["webhooks"]]
    webhook = obj["spec"].get("conversion", {}).get("webhook", {})
    return [webhook.get("clientConfig", {}).get("caBundle", "")]


async def test_our_webhook_certificate_is_issued_and_its_ca_injected(
    cluster: ControlPlane, api: Client, cert_manager: str
) -> None:
    kubectl(cluster, "apply", "--server-side", "-k", REPO_CORE)

    await wait_for(api, CERTIFICATES, OURS, SERVING_CERT, ready, within=WITHIN, what="Ready")
    secret = await api.get(SECRETS, SERVING_SECRET, OURS)
    data: dict[str, Any] = secret["data"]
    assert data["tls.crt"]
    assert data["tls.key"]
    ca = data["ca.crt"]  # a self-signed certificate is its own CA
    assert base64.b64decode(ca) == base64.b64decode(data["tls.crt"])

    def injected(obj: Obj | None) -> bool:
        return all(bundle == ca for bundle in ca_bundles(obj))

    for res, name in (
        (MUTATING_WEBHOOKS, "machinepool-mutating-webhook-configuration"),
        (VALIDATING_WEBHOOKS, "machinepool-validating-webhook-configuration"),
    ):
        await wait_for(api, res, None, name, injected, within=WITHIN, what="the serving CA")
    await watch_until(
        api,
        CRDS,
        None,
        lambda crds: all(injected(crds.get(name)) for name in INJECTED_CRDS),
        f"the serving CA in the conversion webhooks of {INJECTED_CRDS}",
        within=WITHIN,
    )
