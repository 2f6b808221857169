"""The Resources tests read and write, defined once.

Our own kinds come from the api registry, as the controllers' do (``api.kinds``,
``api.infra_sim``, ``api.infra_aws`` at the storage version, ``KindInfo.resource`` for another
served version), so a test cannot disagree with the CRDs we generate about a plural or a group.
Kubernetes' own kinds that only tests touch are written out here.
"""

from __future__ import annotations

from machinepool.api import constants as c
from machinepool.api.infra_aws import AWSMACHINEPOOLS, AWSMACHINES
from machinepool.api.infra_sim import SIM_MACHINE_POOL_TEMPLATES, SIM_MACHINE_POOLS, SIM_MACHINES
from machinepool.api.kinds import (
    CLUSTERS,
    KUBEADM_CONFIG_TEMPLATES,
    KUBEADM_CONFIGS,
    MACHINE_HEALTH_CHECK,
    MACHINE_HEALTH_CHECKS,
    MACHINE_POOL,
    MACHINE_POOLS,
    MACHINES,
)
from machinepool.runtime import NODES, Resource

__all__ = [
    "AWSMACHINEPOOLS",
    "AWSMACHINES",
    "CLUSTERS",
    "CLUSTER_ROLES",
    "CLUSTER_ROLE_BINDINGS",
    "DEPLOYMENTS",
    "KUBEADM_CONFIGS",
    "KUBEADM_CONFIG_TEMPLATES",
    "MACHINES",
    "MACHINE_HEALTH_CHECKS",
    "MACHINE_HEALTH_CHECKS_V1BETA1",
    "MACHINE_POOLS",
    "MACHINE_POOLS_V1BETA1",
    "NODES",
    "SIM_MACHINES",
    "SIM_MACHINE_POOLS",
    "SIM_MACHINE_POOL_TEMPLATES",
]

MACHINE_POOLS_V1BETA1 = MACHINE_POOL.resource(c.V1BETA1)
MACHINE_HEALTH_CHECKS_V1BETA1 = MACHINE_HEALTH_CHECK.resource(c.V1BETA1)

CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
MACHINE_DEPLOYMENTS = Resource(
    "cluster.x-k8s.io", "v1beta2", "machinedeployments", "MachineDeployment"
)
"""Upstream's kind (we serve none): for the tests that run its core beside ours."""
