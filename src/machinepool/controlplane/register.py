"""Make a local workload cluster known to the management cluster as a Cluster API Cluster.

Cluster API finds a workload cluster through its ``Cluster`` object and the
``<cluster>-kubeconfig`` Secret beside it. A local workload cluster has no control-plane
provider to write those, so this module writes what one would: the Secret, and a Cluster whose
control plane is initialized and whose endpoint is the workload kube-apiserver.
Used by ``machinepool up``, the end-to-end fixtures and the benchmarks.
"""

from __future__ import annotations

import base64
import contextlib
from urllib.parse import urlparse

from machinepool.api import constants as c
from machinepool.api.conditions import now_rfc3339
from machinepool.api.kinds import CLUSTERS
from machinepool.controlplane.cluster import WorkloadCluster
from machinepool.runtime.kube.client import SECRETS, Client, Obj, PatchType
from machinepool.runtime.kube.errors import AlreadyExists

_FIELD_MANAGER = "machinepool-local"


def kubeconfig_secret(
    name: str, namespace: str, workload: WorkloadCluster, server: str | None = None
) -> Obj:
    """The ``<cluster>-kubeconfig`` Secret Cluster API controllers read (key ``value``);
    ``server``: the URL the controllers reach the apiserver at, if not ``workload.url``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{name}-kubeconfig",
            "namespace": namespace,
            "labels": {c.CLUSTER_NAME_LABEL: name},
        },
        "type": "cluster.x-k8s.io/secret",
        "data": {"value": base64.b64encode(workload.kubeconfig_yaml(server).encode()).decode()},
    }


def cluster_object(
    name: str, namespace: str, workload: WorkloadCluster, server: str | None = None
) -> Obj:
    url = urlparse(server or workload.url)
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"controlPlaneEndpoint": {"host": url.hostname, "port": url.port}},
    }


def cluster_status() -> Obj:
    """An initialized, provisioned control plane, as a control-plane provider would report."""
    now = now_rfc3339()
    conditions = [
        {
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": "",
            "lastTransitionTime": now,
        }
        for kind, reason in (
            ("ControlPlaneInitialized", "Initialized"),
            ("InfrastructureReady", "Ready"),
            ("ControlPlaneAvailable", "Available"),
        )
    ]
    return {
        "status": {
            "initialization": {"infrastructureProvisioned": True, "controlPlaneInitialized": True},
            "conditions": conditions,
            "phase": "Provisioned",
        }
    }


async def register_workload_cluster(
    client: Client,
    name: str,
    namespace: str,
    workload: WorkloadCluster,
    server: str | None = None,
) -> Obj:
    """Create (or refresh) the kubeconfig Secret and the Cluster; return the Cluster.
    ``server``: the URL controllers reach the apiserver at (``workload.pod_url`` for
    controllers running as Pods on the real node), if not ``workload.url``."""
    secret = kubeconfig_secret(name, namespace, workload, server)
    try:
        await client.create(SECRETS, secret, namespace)
    except AlreadyExists:
        await client.patch(SECRETS, secret["metadata"]["name"], {"data": secret["data"]}, namespace)
    with contextlib.suppress(AlreadyExists):
        await client.create(CLUSTERS, cluster_object(name, namespace, workload, server), namespace)
    return await client.patch(
        CLUSTERS,
        name,
        cluster_status(),
        namespace,
        subresource="status",
        patch_type=PatchType.MERGE,
    )
