"""A management cluster as upstream Cluster API's core provider leaves it, for the tests that
run upstream's real core manager (beside us, or against us in the conformance suite).

- ``upstream_management(workdir)``: a control plane whose kube-apiserver reports its version
  (upstream's manager refuses an unversioned one), upstream's core CRDs and webhook
  configurations as its release installs them, our providers' CRDs, and the schema-less
  ``Test*`` infrastructure kinds below; yields ``(control plane, client, manager binary,
  webhook)``.
- ``UpstreamProcess``: upstream's core manager, killable and restartable like ours.
- ``cluster_namespace``: a namespace with a provisioned Cluster on a workload cluster.
- ``clusterctl_mirror``: a local clusterctl repository of upstream's core (and kubeadm
  bootstrap) provider release, for ``clusterctl init`` offline (GitHub, where clusterctl
  fetches it, is out of reach).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
import subprocess
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.reliability.harness import ControllerProcess
from tests.support import wait_established
from tests.support.builders import CLUSTER
from tests.support.resources import CLUSTERS

from machinepool.api.crdgen import crd_manifests
from machinepool.controlplane import ControlPlane, WorkloadCluster, upstream
from machinepool.controlplane.binaries import optional_binary
from machinepool.controlplane.process import free_port
from machinepool.controlplane.register import (
    cluster_object,
    cluster_status,
    control_plane_ref,
    kubeconfig_secret,
    register_local_control_plane,
    schemaless_crd,
)
from machinepool.runtime import (
    CRDS,
    MUTATING_WEBHOOKS,
    NAMESPACES,
    SECRETS,
    VALIDATING_WEBHOOKS,
    AlreadyExists,
    Client,
    Obj,
    PatchType,
    Resource,
)

__all__ = [
    "TEST_CLUSTERS",
    "TEST_CLUSTER_TEMPLATES",
    "TEST_CONTROL_PLANES",
    "TEST_CONTROL_PLANE_TEMPLATES",
    "TEST_CRDS",
    "TEST_MACHINES",
    "TEST_MACHINE_POOLS",
    "TEST_MACHINE_TEMPLATES",
    "UpstreamProcess",
    "cluster_namespace",
    "clusterctl_mirror",
    "upstream_management",
]

TEST_CLUSTERS = Resource(
    "infrastructure.cluster.x-k8s.io", "v1beta2", "testclusters", "TestCluster"
)
TEST_MACHINE_TEMPLATES = Resource(
    "infrastructure.cluster.x-k8s.io", "v1beta2", "testmachinetemplates", "TestMachineTemplate"
)
TEST_MACHINES = Resource(
    "infrastructure.cluster.x-k8s.io", "v1beta2", "testmachines", "TestMachine"
)
TEST_MACHINE_POOLS = Resource(
    "infrastructure.cluster.x-k8s.io", "v1beta2", "testmachinepools", "TestMachinePool"
)
TEST_CLUSTER_TEMPLATES = Resource(
    "infrastructure.cluster.x-k8s.io", "v1beta2", "testclustertemplates", "TestClusterTemplate"
)
TEST_CONTROL_PLANES = Resource(
    "controlplane.cluster.x-k8s.io", "v1beta2", "testcontrolplanes", "TestControlPlane"
)
TEST_CONTROL_PLANE_TEMPLATES = Resource(
    "controlplane.cluster.x-k8s.io",
    "v1beta2",
    "testcontrolplanetemplates",
    "TestControlPlaneTemplate",
)


def _test_crd(kind: str, plural: str, group: str = "infrastructure.cluster.x-k8s.io") -> Obj:
    """A schema-less infrastructure (or control plane) kind that honours the v1beta2 contract
    label, with no controller: upstream's Cluster webhook wants an infrastructureRef, its
    MachineSets clone an infra machine template, and a ClusterClass names a control plane
    and an infra cluster template; none needs a provider to run for these tests (a test
    writes the status a provider would)."""
    return schemaless_crd(Resource(group, "v1beta2", plural, kind))


TEST_CRDS = [
    _test_crd("TestCluster", "testclusters"),
    _test_crd("TestMachineTemplate", "testmachinetemplates"),
    _test_crd("TestMachine", "testmachines"),
    _test_crd("TestMachinePool", "testmachinepools"),
    _test_crd("TestClusterTemplate", "testclustertemplates"),
    _test_crd("TestControlPlane", "testcontrolplanes", TEST_CONTROL_PLANES.group),
    _test_crd("TestControlPlaneTemplate", "testcontrolplanetemplates", TEST_CONTROL_PLANES.group),
]


@dataclass
class UpstreamProcess(ControllerProcess):
    """Upstream's core manager, killable and restartable like ours; ``machine_pool`` is its
    MachinePool feature gate, ``cluster_topology`` its ClusterTopology gate, ``extra_args``
    go after upstream's own flags."""

    binary: Path = Path()
    webhook: upstream.UpstreamWebhook | None = None
    machine_pool: bool = False
    cluster_topology: bool = False

    def argv(self) -> list[str]:
        assert self.webhook is not None
        argv = upstream.manager_argv(
            self.binary,
            self.kubeconfig,
            machine_pool=self.machine_pool,
            health_port=self.port,
            diagnostics_port=free_port(),
            webhook=self.webhook,
            cluster_topology=self.cluster_topology,
        )
        return [*argv, *self.extra_args]


@asynccontextmanager
async def upstream_management(
    workdir: Path, *, installed: bool = True, our_groups: Collection[str] | None = None
) -> AsyncIterator[tuple[ControlPlane, Client, Path, upstream.UpstreamWebhook]]:
    """See the module docstring; everything is stopped on exit. ``installed=False``: only the
    ``Test*`` kinds, for clusterctl to install upstream's core provider (and ours) itself.
    ``our_groups``: install only our CRDs of these API groups (another provider's own CRDs
    of the same names are to be installed instead)."""
    binary = await asyncio.to_thread(upstream.build, "manager")
    binaries = await asyncio.to_thread(upstream.build, "controlplane")
    cp = ControlPlane(workdir / "cp", binaries=binaries)
    await asyncio.to_thread(cp.start)
    webhook = upstream.UpstreamWebhook.create(workdir)
    try:
        async with await Client.from_kubeconfig(cp.kubeconfig) as client:
            ours = [
                c
                for c in crd_manifests()
                if c["spec"]["group"] != "cluster.x-k8s.io"
                and (our_groups is None or c["spec"]["group"] in our_groups)
            ]
            crds = [*upstream.crds(webhook), *ours, *TEST_CRDS] if installed else TEST_CRDS
            for crd in crds:
                await client.apply(CRDS, crd, field_manager="upstream-install", force=True)
            for crd in crds:
                await wait_established(client, crd["metadata"]["name"])
            for config in upstream.webhook_configurations(webhook) if installed else []:
                kind = config["kind"]
                res = MUTATING_WEBHOOKS if kind.startswith("Mutating") else VALIDATING_WEBHOOKS
                await client.apply(res, config, field_manager="upstream-install", force=True)
            yield cp, client, binary, webhook
    finally:
        await asyncio.to_thread(cp.stop)


async def cluster_namespace(
    client: Client,
    name: str,
    workload: WorkloadCluster,
    *,
    labels: Mapping[str, str] | None = None,
    test_cluster: bool = True,
    infrastructure_ref: Obj | None = None,
    server: str | None = None,
    ca: bool = False,
    control_plane: bool = False,
) -> None:
    """Namespace ``name`` with Cluster ``work`` (labelled ``labels``) on ``workload``: its
    infrastructure a provisioned ``TestCluster`` (unless ``test_cluster`` is False: no
    upstream Cluster webhook asks for one), or ``infrastructure_ref`` (an infra cluster the
    caller made), its status initialized, its kubeconfig Secret beside it. ``server``: the
    URL controllers reach the workload apiserver at, if not ``workload.url``
    (``workload.pod_url`` for Pods on a real node). ``ca``: its ``work-ca`` Secret too, the
    cluster CA as a control-plane provider stores it (upstream's kubeadm bootstrap provider
    reads it, the key too, for a join's CA pin). ``control_plane``: the Cluster names a
    ``LocalControlPlane``, externally managed, as ``register_workload_cluster`` gives ours."""
    with contextlib.suppress(AlreadyExists):  # made beforehand, e.g. to grant access in it
        await client.create(NAMESPACES, {"metadata": {"name": name}})
    cluster = cluster_object(CLUSTER, name, workload, server)
    cluster["metadata"].setdefault("labels", {}).update(labels or {})
    if infrastructure_ref is not None:
        cluster["spec"]["infrastructureRef"] = infrastructure_ref
    elif test_cluster:
        endpoint = cluster["spec"]["controlPlaneEndpoint"]
        infra = {
            "apiVersion": TEST_CLUSTERS.api_version,
            "kind": "TestCluster",
            "metadata": {"name": CLUSTER, "namespace": name, "labels": dict(labels or {})},
            "spec": {"controlPlaneEndpoint": endpoint},
        }
        await client.create(TEST_CLUSTERS, infra, name)
        status = {"status": {"initialization": {"provisioned": True}}}
        await client.patch(TEST_CLUSTERS, CLUSTER, status, name, subresource="status")
        cluster["spec"]["infrastructureRef"] = {
            "apiGroup": TEST_CLUSTERS.group,
            "kind": "TestCluster",
            "name": CLUSTER,
        }
    await client.create(SECRETS, kubeconfig_secret(CLUSTER, name, workload, server), name)
    if ca:
        pem = {"tls.crt": workload.ca_cert_pem, "tls.key": workload.ca_key_pem}
        secret = {
            "metadata": {"name": f"{CLUSTER}-ca", "namespace": name},
            "data": {k: base64.b64encode(v).decode() for k, v in pem.items()},
        }
        await client.create(SECRETS, secret, name)
    if control_plane:
        cluster["spec"]["controlPlaneRef"] = control_plane_ref(CLUSTER)
    created = await client.create(CLUSTERS, cluster, name)
    if control_plane:
        endpoint = cluster["spec"]["controlPlaneEndpoint"]
        await register_local_control_plane(client, CLUSTER, name, endpoint, created)
    await client.patch(
        CLUSTERS, CLUSTER, cluster_status(), name, subresource="status", patch_type=PatchType.MERGE
    )


def clusterctl_mirror(directory: Path, *, bootstrap: bool = False) -> list[Obj]:
    """Upstream's core provider release (and, with ``bootstrap``, its kubeadm bootstrap
    provider's) as a clusterctl local repository under ``directory``:
    ``cluster-api/<version>/core-components.yaml`` rendered from the pinned module's
    ``core/config/default`` as its release renders it (``upstream.as_released``: its image
    in the release registry, pulled if not present), and its ``metadata.yaml``; likewise
    ``bootstrap-kubeadm/<version>/bootstrap-components.yaml`` from
    ``bootstrap/kubeadm/config/default``. Returns the ``providers:`` entries of a
    clusterctl.yaml that point at them, as a user without GitHub (an air-gapped mirror)
    writes them."""
    module = upstream.module_dir()
    kubectl = optional_binary("kubectl")
    assert kubectl is not None, "kubectl is missing: run `make controlplane`"
    releases = [("cluster-api", "CoreProvider", "core", "core-components.yaml", "manager")]
    if bootstrap:
        releases.append(
            ("kubeadm", "BootstrapProvider", "bootstrap/kubeadm", "bootstrap-components.yaml",
             "bootstrap")
        )  # fmt: skip
    entries = []
    for name, kind, source, file, target in releases:
        folder = directory / ("bootstrap-kubeadm" if target == "bootstrap" else name)
        folder /= upstream.version()
        folder.mkdir(parents=True, exist_ok=True)
        rendered = subprocess.run(
            [str(kubectl), "kustomize", str(module / source / "config" / "default")],
            capture_output=True,
            text=True,
            check=True,
        )
        components = folder / file
        components.write_text(upstream.as_released(rendered.stdout, target))
        shutil.copyfile(module / "metadata.yaml", folder / "metadata.yaml")
        entries.append({"name": name, "url": str(components), "type": kind})
    return entries
