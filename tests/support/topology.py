"""A ClusterClass with a machinePools class of our kinds, and a Cluster with a topology of one
pool, for the tests that run upstream's topology controller (beside our core in
``tests/reliability/test_topology_beside.py``, against upstream's core in the conformance
suite); docs/guide-clusterclass.md shows the same objects as YAML.

- ``create_class_and_cluster``: the templates (KubeadmConfigTemplate, SimMachinePoolTemplates
  ``SMALL`` and ``MEDIUM``, and schema-less ``Test*`` templates for the infra cluster and the
  control plane), the ClusterClass ``CLASS`` and the Cluster, its kubeconfig Secret beside it.
- ``provision_infra_cluster``, ``control_plane_at``: the status an infra cluster and a control
  plane provider would write, which upstream's Cluster and topology controllers wait for.
"""

from __future__ import annotations

from collections.abc import Mapping

from tests.support import eventually
from tests.support.builders import CLUSTER, TEST_BOOT
from tests.support.resources import CLUSTERS, KUBEADM_CONFIG_TEMPLATES, SIM_MACHINE_POOL_TEMPLATES
from tests.support.upstream import (
    TEST_CLUSTER_TEMPLATES,
    TEST_CLUSTERS,
    TEST_CONTROL_PLANE_TEMPLATES,
    TEST_CONTROL_PLANES,
)

from machinepool.api.meta import dig
from machinepool.controlplane import WorkloadCluster
from machinepool.controlplane.register import cluster_object, kubeconfig_secret
from machinepool.runtime import SECRETS, Client, Obj, PatchType, Resource

__all__ = [
    "CLASS",
    "CLONED_FROM",
    "CLUSTER_CLASSES",
    "MEDIUM",
    "SMALL",
    "TOPOLOGY_POOL",
    "control_plane_asked",
    "control_plane_at",
    "create_class_and_cluster",
    "machine_pools_class",
    "patch_topology",
    "provision_infra_cluster",
    "topology_pools",
]

CLUSTER_CLASSES = Resource("cluster.x-k8s.io", "v1beta2", "clusterclasses", "ClusterClass")
CLASS = "sim"
"""The ClusterClass and its one machinePools class."""
TOPOLOGY_POOL = "pool"
"""The name of the pool in the Cluster's topology."""
SMALL, MEDIUM = "pool-small", "pool-medium"
"""SimMachinePoolTemplates of sim.small and sim.medium instances."""
CLONED_FROM = "cluster.x-k8s.io/cloned-from-name"
"""What upstream's topology controller annotates an object made from a template with."""


def _ref(res: Resource, name: str) -> Obj:
    return {"apiVersion": res.api_version, "kind": res.kind, "name": name}


def _template(
    res: Resource, namespace: str, name: str, spec: Obj, labels: Mapping[str, str]
) -> Obj:
    template: Obj = {"spec": spec}
    if labels:
        template["metadata"] = {"labels": dict(labels)}
    return {
        "apiVersion": res.api_version,
        "kind": res.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"template": template},
    }


def _sim_spec(instance_type: str) -> Obj:
    return {
        "template": {"instanceType": instance_type},
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
        },
        "sim": dict(TEST_BOOT),
    }


def machine_pools_class(sim_template: str, naming: str | None = None) -> list[Obj]:
    """The ClusterClass's ``workers.machinePools``: one class, ``CLASS``, of our KubeadmConfig
    and the SimMachinePoolTemplate ``sim_template``; ``naming``: its MachinePools' name
    template (upstream's default adds a random suffix)."""
    pool_class: Obj = {
        "class": CLASS,
        "bootstrap": {"templateRef": _ref(KUBEADM_CONFIG_TEMPLATES, "pool")},
        "infrastructure": {"templateRef": _ref(SIM_MACHINE_POOL_TEMPLATES, sim_template)},
    }
    if naming is not None:
        pool_class["naming"] = {"template": naming}
    return [pool_class]


def topology_pools(replicas: int, labels: Mapping[str, str] | None = None) -> Obj:
    """The Cluster topology's ``workers``: ``TOPOLOGY_POOL`` of ``replicas``, its objects
    labelled ``labels``."""
    pool: Obj = {"class": CLASS, "name": TOPOLOGY_POOL, "replicas": replicas}
    if labels:
        pool["metadata"] = {"labels": dict(labels)}
    return {"machinePools": [pool]}


async def create_class_and_cluster(
    client: Client,
    namespace: str,
    workload: WorkloadCluster,
    *,
    version: str,
    replicas: int,
    cluster_labels: Mapping[str, str] | None = None,
    pool_labels: Mapping[str, str] | None = None,
    naming: str | None = None,
) -> None:
    """See the module docstring; ``naming`` as ``machine_pools_class``'s. ``cluster_labels`` go
    on the ClusterClass, the Cluster and the objects made for the Cluster (infra cluster,
    control plane); ``pool_labels`` on the MachinePool and the objects made for it
    (KubeadmConfig, SimMachinePool)."""
    cluster_labels = dict(cluster_labels or {})
    pool_labels = dict(pool_labels or {})
    join = {"joinConfiguration": {"nodeRegistration": {}}}
    templates = [
        (TEST_CLUSTER_TEMPLATES, "infra", {}, cluster_labels),
        (TEST_CONTROL_PLANE_TEMPLATES, "cp", {}, cluster_labels),
        (KUBEADM_CONFIG_TEMPLATES, "pool", join, pool_labels),
        (SIM_MACHINE_POOL_TEMPLATES, SMALL, _sim_spec("sim.small"), pool_labels),
        (SIM_MACHINE_POOL_TEMPLATES, MEDIUM, _sim_spec("sim.medium"), pool_labels),
    ]
    for res, name, spec, labels in templates:
        await client.create(res, _template(res, namespace, name, spec, labels), namespace)
    cluster_class = {
        "apiVersion": CLUSTER_CLASSES.api_version,
        "kind": "ClusterClass",
        "metadata": {"name": CLASS, "namespace": namespace, "labels": cluster_labels},
        "spec": {
            "infrastructure": {"templateRef": _ref(TEST_CLUSTER_TEMPLATES, "infra")},
            "controlPlane": {"templateRef": _ref(TEST_CONTROL_PLANE_TEMPLATES, "cp")},
            "workers": {"machinePools": machine_pools_class(SMALL, naming)},
        },
    }
    await client.create(CLUSTER_CLASSES, cluster_class, namespace)
    await client.create(SECRETS, kubeconfig_secret(CLUSTER, namespace, workload), namespace)
    cluster = cluster_object(CLUSTER, namespace, workload)
    cluster["metadata"]["labels"] = cluster_labels
    cluster["spec"]["topology"] = {
        "classRef": {"name": CLASS},
        "version": version,
        "controlPlane": {"replicas": 1},
        "workers": topology_pools(replicas, pool_labels),
    }
    await client.create(CLUSTERS, cluster, namespace)


async def patch_topology(client: Client, namespace: str, topology: Obj) -> None:
    """Merge ``topology`` into the Cluster's ``spec.topology``."""
    patch = {"spec": {"topology": topology}}
    await client.patch(CLUSTERS, CLUSTER, patch, namespace, patch_type=PatchType.MERGE)


async def _only(client: Client, res: Resource, namespace: str) -> Obj | None:
    items = (await client.list(res, namespace)).items
    return items[0] if len(items) == 1 else None


async def provision_infra_cluster(client: Client, namespace: str) -> None:
    """What an infra cluster provider writes once its cluster is up."""
    infra = await eventually(
        lambda: _only(client, TEST_CLUSTERS, namespace), "the topology's TestCluster"
    )
    status = {"status": {"initialization": {"provisioned": True}}}
    name = infra["metadata"]["name"]
    await client.patch(TEST_CLUSTERS, name, status, namespace, subresource="status")


async def control_plane_asked(client: Client, namespace: str, version: str) -> Obj | None:
    """The topology's control plane, once the topology asks it for ``version``."""
    obj = await _only(client, TEST_CONTROL_PLANES, namespace)
    return obj if obj is not None and dig(obj, "spec", "version") == version else None


async def control_plane_at(client: Client, namespace: str, version: str) -> None:
    """What a control plane provider does: once the topology asks for ``version``, report one
    initialized, ready replica running it."""
    obj = await eventually(
        lambda: control_plane_asked(client, namespace, version),
        f"the topology asks the control plane for {version}",
    )
    status = {
        "status": {
            "initialization": {"controlPlaneInitialized": True},
            "version": version,
            "replicas": 1,
            "readyReplicas": 1,
            "availableReplicas": 1,
            "upToDateReplicas": 1,
        }
    }
    await client.patch(
        TEST_CONTROL_PLANES,
        obj["metadata"]["name"],
        status,
        namespace,
        subresource="status",
        patch_type=PatchType.MERGE,
    )
