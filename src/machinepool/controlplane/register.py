"""Make a local workload cluster known to the management cluster as a Cluster API Cluster.

Cluster API finds a workload cluster through its ``Cluster`` object and the
``<cluster>-kubeconfig`` Secret beside it. A local workload cluster has no control-plane
provider to write those, so this module writes what one would: the Secret, a Cluster whose
control plane is initialized and whose endpoint is the workload kube-apiserver, and the
control-plane object its ``controlPlaneRef`` names.

That object is a ``LocalControlPlane`` (``controlplane.machinepool.cluster.x-k8s.io``), a kind
of the local environment alone: its CRD is schema-less and installed here, with the
aggregated ClusterRole that lets the core managers (ours, and upstream's beside it) read it.
It says ``status.externalManagedControlPlane: true``, as EKS's or AKS's control plane does:
the workload kube-apiserver is run by the environment, not by Cluster API Machines. Cluster
API leaves a deleted Machine's Node alone (no drain, no Node deletion) in a Cluster with
neither such a control plane nor a control-plane Machine, so without it the environment's
pools would never be drained.
Used by ``machinepool up``, the end-to-end fixtures and the benchmarks.
"""

from __future__ import annotations

import base64
import contextlib
from urllib.parse import urlparse

from machinepool.api import constants as c
from machinepool.api.conditions import now_rfc3339
from machinepool.api.kinds import CLUSTERS
from machinepool.api.registry import Resource
from machinepool.controlplane.cluster import WorkloadCluster
from machinepool.runtime.kube.client import CRDS, SECRETS, Client, Obj, PatchType, wait_established
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


LOCAL_CONTROL_PLANES = Resource(
    "controlplane.machinepool.cluster.x-k8s.io",
    "v1beta2",
    "localcontrolplanes",
    "LocalControlPlane",
)
"""The control-plane kind of a local workload cluster (see the module's docstring)."""

_CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)


def schemaless_crd(res: Resource) -> Obj:
    """A CRD for ``res`` without a schema (every field kept), with a status subresource and
    the contract label that names ``res.version`` as the v1beta2 contract's, so a core manager
    reads it through a reference: for kinds no provider's schema is at hand for (the local
    control plane, and the tests' stand-ins for other providers' kinds)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{res.plural}.{res.group}",
            "labels": {"cluster.x-k8s.io/v1beta2": res.version},
        },
        "spec": {
            "group": res.group,
            "names": {"kind": res.kind, "plural": res.plural, "singular": res.kind.lower()},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": res.version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def _local_control_plane_role() -> Obj:
    """What a control-plane provider grants the core managers on its kind: read it (the
    Machine controller's control-plane check) and, for upstream's Cluster controller, own it."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": "machinepool-local-control-plane",
            "labels": {"cluster.x-k8s.io/aggregate-to-manager": "true"},
        },
        "rules": [
            {
                "apiGroups": [LOCAL_CONTROL_PLANES.group],
                "resources": [LOCAL_CONTROL_PLANES.plural, f"{LOCAL_CONTROL_PLANES.plural}/status"],
                "verbs": ["get", "list", "watch", "patch", "update"],
            }
        ],
    }


async def install_local_control_plane_kind(client: Client) -> None:
    """The ``LocalControlPlane`` CRD and its ClusterRole, once per management cluster."""
    crd = schemaless_crd(LOCAL_CONTROL_PLANES)
    with contextlib.suppress(AlreadyExists):
        await client.create(CRDS, crd)
    await wait_established(client, crd["metadata"]["name"])
    with contextlib.suppress(AlreadyExists):
        await client.create(_CLUSTER_ROLES, _local_control_plane_role())


def control_plane_ref(name: str) -> Obj:
    """The Cluster's ``spec.controlPlaneRef`` to its ``LocalControlPlane`` (same name)."""
    return {"apiGroup": LOCAL_CONTROL_PLANES.group, "kind": LOCAL_CONTROL_PLANES.kind, "name": name}


async def register_local_control_plane(
    client: Client, name: str, namespace: str, endpoint: Obj, cluster: Obj | None = None
) -> Obj:
    """The ``LocalControlPlane`` ``name`` of the Cluster ``name`` (owned by ``cluster`` when
    given, so it goes with it), reporting what a managed control plane reports: externally
    managed, initialized, available, at ``endpoint``."""
    await install_local_control_plane_kind(client)
    body: Obj = {
        "apiVersion": LOCAL_CONTROL_PLANES.api_version,
        "kind": LOCAL_CONTROL_PLANES.kind,
        "metadata": {"name": name, "labels": {c.CLUSTER_NAME_LABEL: name}},
        "spec": {"controlPlaneEndpoint": endpoint},
    }
    if cluster is not None:
        body["metadata"]["ownerReferences"] = [
            {
                "apiVersion": cluster["apiVersion"],
                "kind": cluster["kind"],
                "name": cluster["metadata"]["name"],
                "uid": cluster["metadata"]["uid"],
            }
        ]
    with contextlib.suppress(AlreadyExists):
        await client.create(LOCAL_CONTROL_PLANES, body, namespace)
    available = {
        "type": "Available",
        "status": "True",
        "reason": "Available",
        "message": "",
        "lastTransitionTime": now_rfc3339(),
    }
    status = {
        "status": {
            "externalManagedControlPlane": True,
            "initialization": {"controlPlaneInitialized": True},
            "conditions": [available],
        }
    }
    return await client.patch(
        LOCAL_CONTROL_PLANES,
        name,
        status,
        namespace,
        subresource="status",
        patch_type=PatchType.MERGE,
    )


def control_plane_endpoint(workload: WorkloadCluster, server: str | None = None) -> Obj:
    """``spec.controlPlaneEndpoint`` of a local workload cluster reached at ``server`` (if
    not ``workload.url``)."""
    url = urlparse(server or workload.url)
    return {"host": url.hostname, "port": url.port}


def cluster_object(
    name: str, namespace: str, workload: WorkloadCluster, server: str | None = None
) -> Obj:
    """The Cluster of a local workload cluster: its endpoint only, no control plane named
    (``register_workload_cluster`` names its ``LocalControlPlane``)."""
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"controlPlaneEndpoint": control_plane_endpoint(workload, server)},
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
    """Create (or refresh) the kubeconfig Secret, the Cluster and its ``LocalControlPlane``;
    return the Cluster. ``server``: the URL controllers reach the apiserver at
    (``workload.pod_url`` for controllers running as Pods on the real node), if not
    ``workload.url``."""
    secret = kubeconfig_secret(name, namespace, workload, server)
    try:
        await client.create(SECRETS, secret, namespace)
    except AlreadyExists:
        await client.patch(SECRETS, secret["metadata"]["name"], {"data": secret["data"]}, namespace)
    body = cluster_object(name, namespace, workload, server)
    body["spec"]["controlPlaneRef"] = control_plane_ref(name)
    try:
        cluster = await client.create(CLUSTERS, body, namespace)
    except AlreadyExists:
        cluster = await client.get(CLUSTERS, name, namespace)
        if not (cluster.get("spec") or {}).get("controlPlaneRef"):
            # A Cluster made from a flavor that names no control plane: give it this one.
            ref = {"spec": {"controlPlaneRef": control_plane_ref(name)}}
            cluster = await client.patch(CLUSTERS, name, ref, namespace)
    await register_local_control_plane(
        client, name, namespace, control_plane_endpoint(workload, server), cluster
    )
    return await client.patch(
        CLUSTERS,
        name,
        cluster_status(),
        namespace,
        subresource="status",
        patch_type=PatchType.MERGE,
    )
