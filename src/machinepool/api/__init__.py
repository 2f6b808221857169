"""machinepool.api: typed models, constants and kind registry of the MachinePool system.

The bottom layer of the package: every other layer imports from here and this package
imports nothing of theirs. Models parse raw apiserver JSON (``Model.from_dict``) and give it
back minimal and camelCased (``model.to_dict()``), keeping fields they do not know.

CRDs are generated from these models by ``python -m machinepool.api.crdgen``.
"""

from machinepool.api import constants
from machinepool.api.bootstrap_v1beta2 import (
    Arg,
    BootstrapTokenDiscovery,
    Discovery,
    File,
    FileSource,
    JoinConfiguration,
    KubeadmConfig,
    KubeadmConfigSpec,
    KubeadmConfigStatus,
    NodeRegistrationOptions,
    SecretFileSource,
    User,
)
from machinepool.api.constants import pool_name_label_value
from machinepool.api.core_v1beta1 import V1Beta1MachinePool
from machinepool.api.core_v1beta2 import (
    APIEndpoint,
    Bootstrap,
    Cluster,
    ClusterSpec,
    ClusterStatus,
    Machine,
    MachineDeletionSpec,
    MachinePool,
    MachinePoolSpec,
    MachinePoolStatus,
    MachineSpec,
    MachineStatus,
    MachineTemplateSpec,
)
from machinepool.api.kinds import CLUSTER, KUBEADM_CONFIG, MACHINE, MACHINE_POOL
from machinepool.api.meta import (
    ContractVersionedObjectReference,
    K8sModel,
    MetaCondition,
    ObjectMeta,
    ObjectReference,
    OwnerReference,
    TemplateMeta,
    V1Beta1Condition,
    format_time,
    parse_time,
)
from machinepool.api.registry import (
    KindInfo,
    PrinterColumn,
    ScaleSubresource,
    VersionInfo,
    kind_for,
    model_for,
    register_kind,
    registered_kinds,
)

__all__ = [
    "CLUSTER",
    "KUBEADM_CONFIG",
    "MACHINE",
    "MACHINE_POOL",
    "APIEndpoint",
    "Arg",
    "Bootstrap",
    "BootstrapTokenDiscovery",
    "Cluster",
    "ClusterSpec",
    "ClusterStatus",
    "ContractVersionedObjectReference",
    "Discovery",
    "File",
    "FileSource",
    "JoinConfiguration",
    "K8sModel",
    "KindInfo",
    "KubeadmConfig",
    "KubeadmConfigSpec",
    "KubeadmConfigStatus",
    "Machine",
    "MachineDeletionSpec",
    "MachinePool",
    "MachinePoolSpec",
    "MachinePoolStatus",
    "MachineSpec",
    "MachineStatus",
    "MachineTemplateSpec",
    "MetaCondition",
    "NodeRegistrationOptions",
    "ObjectMeta",
    "ObjectReference",
    "OwnerReference",
    "PrinterColumn",
    "ScaleSubresource",
    "SecretFileSource",
    "TemplateMeta",
    "User",
    "V1Beta1Condition",
    "V1Beta1MachinePool",
    "VersionInfo",
    "constants",
    "format_time",
    "kind_for",
    "model_for",
    "parse_time",
    "pool_name_label_value",
    "register_kind",
    "registered_kinds",
]
