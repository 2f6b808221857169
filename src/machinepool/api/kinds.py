"""Registers the kinds machinepool installs itself: MachinePool, Machine, Cluster, KubeadmConfig.

Importing ``machinepool.api`` imports this module, so the registry is always populated.
Printer columns for MachinePool match upstream's so ``kubectl get mp`` looks the same.
"""

from __future__ import annotations

from machinepool.api import constants as c
from machinepool.api import (
    infra_aws,  # noqa: F401  (registers AWSMachinePool, AWSMachine)
    infra_sim,  # noqa: F401  (registers SimMachinePool, SimMachine)
)
from machinepool.api.bootstrap_v1beta2 import KubeadmConfig, KubeadmConfigTemplate
from machinepool.api.core_v1beta1 import V1Beta1MachinePool
from machinepool.api.core_v1beta2 import Cluster, Machine, MachinePool
from machinepool.api.drainrule import MachineDrainRule
from machinepool.api.healthcheck import MachineHealthCheck, V1Beta1MachineHealthCheck
from machinepool.api.registry import (
    KindInfo,
    PrinterColumn,
    ScaleSubresource,
    VersionInfo,
    register_kind,
)

__all__ = [
    "CLUSTER",
    "CLUSTERS",
    "KUBEADM_CONFIG",
    "KUBEADM_CONFIGS",
    "KUBEADM_CONFIG_TEMPLATE",
    "KUBEADM_CONFIG_TEMPLATES",
    "MACHINE",
    "MACHINES",
    "MACHINE_DRAIN_RULE",
    "MACHINE_DRAIN_RULES",
    "MACHINE_HEALTH_CHECK",
    "MACHINE_HEALTH_CHECKS",
    "MACHINE_POOL",
    "MACHINE_POOLS",
]

_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since creation")
_PAUSED = PrinterColumn(
    "Paused",
    "string",
    '.status.conditions[?(@.type=="Paused")].status',
    "Reconciliation paused",
    10,
)
_CORE_LABELS = {c.PROVIDER_LABEL: c.CORE_PROVIDER_NAME}

MACHINE_POOL = register_kind(
    KindInfo(
        group=c.CLUSTER_GROUP,
        kind="MachinePool",
        plural="machinepools",
        singular="machinepool",
        short_names=("mp",),
        categories=("cluster-api",),
        labels=_CORE_LABELS,
        versions=(
            VersionInfo(
                name=c.V1BETA2,
                model=MachinePool,
                storage=True,
                scale=ScaleSubresource(),
                printer_columns=(
                    PrinterColumn("Cluster", "string", ".spec.clusterName", "Cluster name"),
                    PrinterColumn("Desired", "integer", ".spec.replicas", "Desired machines"),
                    PrinterColumn("Current", "integer", ".status.replicas", "Current machines"),
                    PrinterColumn(
                        "Ready", "integer", ".status.readyReplicas", "Machines with Ready true"
                    ),
                    PrinterColumn(
                        "Available",
                        "integer",
                        ".status.availableReplicas",
                        "Machines with Available true",
                    ),
                    PrinterColumn(
                        "Up-to-date",
                        "integer",
                        ".status.upToDateReplicas",
                        "Machines with UpToDate true",
                    ),
                    _PAUSED,
                    PrinterColumn("Phase", "string", ".status.phase", "MachinePool phase"),
                    _AGE,
                    PrinterColumn(
                        "Version", "string", ".spec.template.spec.version", "Kubernetes version"
                    ),
                ),
            ),
            VersionInfo(
                name=c.V1BETA1,
                model=V1Beta1MachinePool,
                deprecated=True,
                deprecation_warning=(
                    "cluster.x-k8s.io/v1beta1 MachinePool is deprecated; "
                    "use cluster.x-k8s.io/v1beta2 MachinePool"
                ),
                scale=ScaleSubresource(),
                printer_columns=(
                    PrinterColumn("Cluster", "string", ".spec.clusterName", "Cluster name"),
                    PrinterColumn("Desired", "integer", ".spec.replicas", "Desired machines", 10),
                    PrinterColumn("Replicas", "string", ".status.replicas", "Replica count"),
                    PrinterColumn("Phase", "string", ".status.phase", "MachinePool phase"),
                    _AGE,
                    PrinterColumn(
                        "Version", "string", ".spec.template.spec.version", "Kubernetes version"
                    ),
                ),
            ),
        ),
    )
)

MACHINE = register_kind(
    KindInfo(
        group=c.CLUSTER_GROUP,
        kind="Machine",
        plural="machines",
        singular="machine",
        short_names=("ma",),
        categories=("cluster-api",),
        labels=_CORE_LABELS,
        versions=(
            VersionInfo(
                name=c.V1BETA2,
                model=Machine,
                storage=True,
                printer_columns=(
                    PrinterColumn("Cluster", "string", ".spec.clusterName", "Cluster name"),
                    PrinterColumn("Node Name", "string", ".status.nodeRef.name", "Node name"),
                    PrinterColumn("Provider ID", "string", ".spec.providerID", "Provider ID", 10),
                    PrinterColumn(
                        "Ready",
                        "string",
                        '.status.conditions[?(@.type=="Ready")].status',
                        "Machine is Ready",
                    ),
                    PrinterColumn(
                        "Available",
                        "string",
                        '.status.conditions[?(@.type=="Available")].status',
                        "Machine is Available",
                    ),
                    PrinterColumn(
                        "Up-to-date",
                        "string",
                        '.status.conditions[?(@.type=="UpToDate")].status',
                        "Machine is UpToDate",
                    ),
                    _PAUSED,
                    PrinterColumn("Phase", "string", ".status.phase", "Machine phase"),
                    _AGE,
                    PrinterColumn("Version", "string", ".spec.version", "Kubernetes version"),
                ),
            ),
        ),
    )
)

MACHINE_HEALTH_CHECK = register_kind(
    KindInfo(
        group=c.CLUSTER_GROUP,
        kind="MachineHealthCheck",
        plural="machinehealthchecks",
        singular="machinehealthcheck",
        short_names=("mhc", "mhcs"),
        categories=("cluster-api",),
        labels=_CORE_LABELS,
        versions=(
            VersionInfo(
                name=c.V1BETA2,
                model=MachineHealthCheck,
                storage=True,
                printer_columns=(
                    PrinterColumn("Cluster", "string", ".spec.clusterName", "Cluster"),
                    PrinterColumn(
                        "Replicas",
                        "integer",
                        ".status.expectedMachines",
                        "Number of machines currently monitored",
                    ),
                    PrinterColumn(
                        "Healthy",
                        "integer",
                        ".status.currentHealthy",
                        "Current observed healthy machines",
                    ),
                    _PAUSED,
                    _AGE,
                ),
            ),
            VersionInfo(
                name=c.V1BETA1,
                model=V1Beta1MachineHealthCheck,
                deprecated=True,
                deprecation_warning=(
                    "cluster.x-k8s.io/v1beta1 MachineHealthCheck is deprecated; "
                    "use cluster.x-k8s.io/v1beta2 MachineHealthCheck"
                ),
                printer_columns=(
                    PrinterColumn("Cluster", "string", ".spec.clusterName", "Cluster"),
                    PrinterColumn(
                        "ExpectedMachines",
                        "integer",
                        ".status.expectedMachines",
                        "Number of machines currently monitored",
                    ),
                    PrinterColumn(
                        "MaxUnhealthy",
                        "string",
                        ".spec.maxUnhealthy",
                        "Maximum number of unhealthy machines allowed",
                    ),
                    PrinterColumn(
                        "CurrentHealthy",
                        "integer",
                        ".status.currentHealthy",
                        "Current observed healthy machines",
                    ),
                    _AGE,
                ),
            ),
        ),
    )
)

CLUSTER = register_kind(
    KindInfo(
        group=c.CLUSTER_GROUP,
        kind="Cluster",
        plural="clusters",
        singular="cluster",
        short_names=("cl",),
        categories=("cluster-api",),
        labels=_CORE_LABELS,
        versions=(
            VersionInfo(
                name=c.V1BETA2,
                model=Cluster,
                storage=True,
                printer_columns=(
                    PrinterColumn(
                        "ClusterClass", "string", ".spec.topology.classRef.name", "ClusterClass"
                    ),
                    _PAUSED,
                    PrinterColumn("Phase", "string", ".status.phase", "Cluster phase"),
                    _AGE,
                    PrinterColumn("Version", "string", ".spec.topology.version", "Version"),
                ),
            ),
        ),
    )
)

KUBEADM_CONFIG = register_kind(
    KindInfo(
        group=c.BOOTSTRAP_GROUP,
        kind="KubeadmConfig",
        plural="kubeadmconfigs",
        singular="kubeadmconfig",
        categories=("cluster-api",),
        labels={c.PROVIDER_LABEL: c.KUBEADM_BOOTSTRAP_PROVIDER_NAME, c.CONTRACT_LABEL: c.V1BETA2},
        versions=(
            VersionInfo(
                name=c.V1BETA2,
                model=KubeadmConfig,
                storage=True,
                printer_columns=(
                    PrinterColumn(
                        "Cluster",
                        "string",
                        ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
                        "Cluster name",
                    ),
                    _PAUSED,
                    PrinterColumn(
                        "Data secret created",
                        "string",
                        ".status.initialization.dataSecretCreated",
                        "Bootstrap data secret created",
                    ),
                    _AGE,
                ),
            ),
        ),
    )
)

KUBEADM_CONFIG_TEMPLATE = register_kind(
    KindInfo(
        group=c.BOOTSTRAP_GROUP,
        kind="KubeadmConfigTemplate",
        plural="kubeadmconfigtemplates",
        singular="kubeadmconfigtemplate",
        categories=("cluster-api",),
        labels={c.PROVIDER_LABEL: c.KUBEADM_BOOTSTRAP_PROVIDER_NAME, c.CONTRACT_LABEL: c.V1BETA2},
        versions=(
            VersionInfo(
                name=c.V1BETA2,
                model=KubeadmConfigTemplate,
                storage=True,
                status_subresource=False,
                printer_columns=(_AGE,),
            ),
        ),
    )
)

_DRAIN_RULE_COLUMNS = (
    PrinterColumn("Behavior", "string", ".spec.drain.behavior", "Drain behavior"),
    PrinterColumn("Order", "string", ".spec.drain.order", "Drain order"),
    _AGE,
)
MACHINE_DRAIN_RULE = register_kind(
    KindInfo(
        group=c.CLUSTER_GROUP,
        kind="MachineDrainRule",
        plural="machinedrainrules",
        singular="machinedrainrule",
        categories=("cluster-api",),
        labels=_CORE_LABELS,
        versions=(
            # One schema for both, as upstream's: conversion only renames the version.
            VersionInfo(
                name=c.V1BETA2,
                model=MachineDrainRule,
                storage=True,
                status_subresource=False,
                printer_columns=_DRAIN_RULE_COLUMNS,
            ),
            VersionInfo(
                name=c.V1BETA1,
                model=MachineDrainRule,
                deprecated=True,
                deprecation_warning=(
                    "cluster.x-k8s.io/v1beta1 MachineDrainRule is deprecated; "
                    "use cluster.x-k8s.io/v1beta2 MachineDrainRule"
                ),
                status_subresource=False,
                printer_columns=_DRAIN_RULE_COLUMNS,
            ),
        ),
    )
)

# The Resources every component reads and writes these kinds through, at their storage version
# (the v1beta2 contract); a test that needs another served version asks ``KindInfo.resource``.
MACHINE_POOLS = MACHINE_POOL.resource()
MACHINES = MACHINE.resource()
MACHINE_HEALTH_CHECKS = MACHINE_HEALTH_CHECK.resource()
MACHINE_DRAIN_RULES = MACHINE_DRAIN_RULE.resource()
CLUSTERS = CLUSTER.resource()
KUBEADM_CONFIGS = KUBEADM_CONFIG.resource()
KUBEADM_CONFIG_TEMPLATES = KUBEADM_CONFIG_TEMPLATE.resource()
