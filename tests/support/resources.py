"""The Resources tests read and write, defined once.

Our own kinds come from what src exports (the same constants the controllers use) or, for the
versions src never needs a constant for, from the api registry, so a test cannot disagree with
the CRDs we generate about a plural or a group. Kubernetes' own kinds that only tests touch are
written out here.
"""

from __future__ import annotations

from machinepool.api import constants as c
from machinepool.api.registry import registered_kinds
from machinepool.providers.sim import SIM_MACHINE_POOLS, SIM_MACHINES
from machinepool.runtime import (
    CLUSTERS,
    KUBEADM_CONFIGS,
    MACHINE_POOLS,
    MACHINES,
    NODES,
    Resource,
)

__all__ = [
    "CLUSTERS",
    "CLUSTER_ROLES",
    "CLUSTER_ROLE_BINDINGS",
    "KUBEADM_CONFIGS",
    "MACHINES",
    "MACHINE_HEALTH_CHECKS",
    "MACHINE_HEALTH_CHECKS_V1BETA1",
    "MACHINE_POOLS",
    "MACHINE_POOLS_V1BETA1",
    "NODES",
    "SIM_MACHINES",
    "SIM_MACHINE_POOLS",
    "registered",
]


def registered(kind: str, version: str = c.V1BETA2) -> Resource:
    """The Resource of our kind ``kind`` served at ``version``, from the api registry.

    >>> registered("MachinePool", "v1beta1").api_version
    'cluster.x-k8s.io/v1beta1'
    """
    info = next((k for k in registered_kinds() if k.kind == kind), None)
    if info is None or version not in {v.name for v in info.versions}:
        raise LookupError(f"no registered kind {kind} at {version}")
    return Resource(info.group, version, info.plural, info.kind, info.scope == "Namespaced")


MACHINE_POOLS_V1BETA1 = registered("MachinePool", "v1beta1")
MACHINE_HEALTH_CHECKS = registered("MachineHealthCheck")
MACHINE_HEALTH_CHECKS_V1BETA1 = registered("MachineHealthCheck", "v1beta1")

CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
)
