"""Typed ``cluster.x-k8s.io/v1beta2`` objects: MachinePool (the hub), Machine and Cluster.

Field names, optionality and validation bounds follow upstream Cluster API's v1beta2 API so
that upstream clients and providers read and write these objects unchanged. Cluster and
Machine carry only what MachinePools need; everything else survives as extra fields.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from machinepool.api.meta import (
    ContractVersionedObjectReference,
    DNS1123Subdomain,
    FreeForm,
    K8sModel,
    MetaCondition,
    ObjectMeta,
    ObjectReference,
    OpenAPI,
    TemplateMeta,
    Time,
    V1Beta1Condition,
    list_map,
)

__all__ = [
    "APIEndpoint",
    "Bootstrap",
    "Cluster",
    "ClusterInitializationStatus",
    "ClusterSpec",
    "ClusterStatus",
    "Machine",
    "MachineDeletionSpec",
    "MachineDeletionStatus",
    "MachineInitializationStatus",
    "MachineNodeReference",
    "MachinePool",
    "MachinePoolDeprecatedStatus",
    "MachinePoolInitializationStatus",
    "MachinePoolPhase",
    "MachinePoolSpec",
    "MachinePoolStatus",
    "MachinePoolV1Beta1DeprecatedStatus",
    "MachineReadinessGate",
    "MachineSpec",
    "MachineStatus",
    "MachineTaint",
    "MachineTemplateSpec",
    "NodeSystemInfo",
    "StatusVersion",
]

GROUP_VERSION = "cluster.x-k8s.io/v1beta2"

_Conditions = Annotated[list[MetaCondition] | None, list_map("type"), Field(max_length=32)]
_V1Beta1Conditions = list[V1Beta1Condition] | None
_ReplicaCount = Annotated[int | None, OpenAPI({"format": "int32"})]
_Seconds = Annotated[int | None, OpenAPI({"format": "int32"}), Field(ge=0)]
_ObservedGeneration = Annotated[int | None, OpenAPI({"format": "int64"}), Field(ge=1)]
_FailureMessage = Annotated[str | None, Field(min_length=1, max_length=10240)]

MachinePoolPhase = Literal[
    "Pending",
    "Provisioning",
    "Provisioned",
    "Running",
    "ScalingUp",
    "ScalingDown",
    "Scaling",
    "Deleting",
    "Failed",
    "Unknown",
]
MachinePhase = Literal[
    "Pending",
    "Provisioning",
    "Provisioned",
    "Running",
    "Updating",
    "Deleting",
    "Deleted",
    "Failed",
    "Unknown",
]
ClusterPhase = Literal["Pending", "Provisioning", "Provisioned", "Deleting", "Failed", "Unknown"]


# --- Machine spec pieces (shared by Machine and the MachinePool template) -----------------


class Bootstrap(K8sModel):
    """How a machine gets its bootstrap data: a config object, or a ready-made secret."""

    config_ref: ContractVersionedObjectReference | None = None
    """The bootstrap config (e.g. a KubeadmConfig) in the same namespace."""
    data_secret_name: Annotated[str | None, Field(min_length=0, max_length=253)] = None
    """Secret holding the bootstrap data; set by the controller once the config is ready."""


class MachineReadinessGate(K8sModel):
    """An extra condition that must hold for the Machine to count as Ready."""

    condition_type: Annotated[
        str,
        Field(
            min_length=1,
            max_length=316,
            pattern=(
                r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
            ),
        ),
    ]
    """Condition type to look for in the Machine's conditions."""
    polarity: Literal["Positive", "Negative"] | None = None
    """Positive (default) when True is healthy, Negative when False is healthy."""


class MachineDeletionSpec(K8sModel):
    """Time limits for the steps of Machine deletion."""

    node_drain_timeout_seconds: _Seconds = None
    """Give up draining the Node after this long; 0 or unset waits forever."""
    node_volume_detach_timeout_seconds: _Seconds = None
    """Give up waiting for volumes to detach after this long; 0 or unset waits forever."""
    node_deletion_timeout_seconds: _Seconds = None
    """Stop retrying Node deletion after this long; defaults to 10, 0 retries forever."""


class MachineTaint(K8sModel):
    """A Node taint managed by Cluster API, with how it is propagated."""

    key: Annotated[
        str,
        Field(
            min_length=1,
            max_length=317,
            pattern=(
                r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?"
                r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
            ),
        ),
    ]
    """Taint key, a qualified name."""
    value: Annotated[
        str | None,
        Field(
            min_length=1, max_length=63, pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
        ),
    ] = None
    """Taint value, a label value."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    """What happens to pods that do not tolerate the taint."""
    propagation: Literal["Always", "OnInitialization"]
    """Always: kept on the Node; OnInitialization: set once when the Node joins."""


class MachineSpec(K8sModel):
    """The desired state of one Machine (or of every instance of a MachinePool)."""

    cluster_name: Annotated[str, Field(min_length=1, max_length=63)]
    """Name of the Cluster this object belongs to."""
    bootstrap: Bootstrap
    """Where the bootstrap data comes from."""
    infrastructure_ref: ContractVersionedObjectReference
    """The provider object that backs this machine (or pool)."""
    version: Annotated[str | None, Field(min_length=1, max_length=256)] = None
    """Kubernetes version, e.g. v1.31.2."""
    provider_id: Annotated[str | None, Field(min_length=1, max_length=512, alias="providerID")] = (
        None
    )
    """Provider ID, equal to Node.spec.providerID."""
    failure_domain: Annotated[str | None, Field(min_length=1, max_length=256)] = None
    """Failure domain to place the machine in."""
    min_ready_seconds: _Seconds = None
    """Seconds a machine must be Ready before it counts as Available."""
    readiness_gates: Annotated[
        list[MachineReadinessGate] | None,
        list_map("conditionType"),
        Field(min_length=1, max_length=32),
    ] = None
    """Extra conditions that must hold for Ready."""
    deletion: MachineDeletionSpec | None = None
    """Deletion time limits."""
    taints: Annotated[
        list[MachineTaint] | None, list_map("key", "effect"), Field(min_length=1, max_length=64)
    ] = None
    """Node taints managed by Cluster API; on a MachinePool, accepted only with the
    MachinePoolNodeTaints feature gate (ours), which keeps them on the pool's Nodes."""


class MachineTemplateSpec(K8sModel):
    """What every machine of a pool looks like."""

    metadata: TemplateMeta | None = None
    """Labels and annotations for created Machines."""
    spec: MachineSpec
    """Spec of each machine."""


# --- MachinePool -------------------------------------------------------------------------


class MachinePoolSpec(K8sModel):
    """The desired state of a MachinePool."""

    cluster_name: Annotated[str, Field(min_length=1, max_length=63)]
    """Name of the Cluster this pool belongs to; immutable."""
    replicas: _ReplicaCount = None
    """Desired number of machines; defaulted by the webhook."""
    template: MachineTemplateSpec
    """The machines to create."""
    provider_id_list: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=512)]] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(max_length=10000, alias="providerIDList"),
    ] = None
    """Provider IDs of the pool's instances, byte-equal to their Nodes' spec.providerID."""
    failure_domains: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=256)]] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(max_length=100),
    ] = None
    """Failure domains the pool should spread over."""


class MachinePoolInitializationStatus(K8sModel):
    """Contract flags reporting first-time provisioning progress."""

    infrastructure_provisioned: bool | None = None
    """True once the infrastructure pool reported ready; never reset."""
    bootstrap_data_secret_created: bool | None = None
    """True once the bootstrap data secret exists; never reset."""


class StatusVersion(K8sModel):
    """How many replicas run one Kubernetes version."""

    version: Annotated[str, Field(min_length=1, max_length=256)]
    """Kubernetes version."""
    replicas: _ReplicaCount = None
    """Replicas at that version."""


class MachinePoolV1Beta1DeprecatedStatus(K8sModel):
    """v1beta1-era status kept for conversion until v1beta1 goes away."""

    conditions: _V1Beta1Conditions = None
    """v1beta1 conditions (with severity)."""
    failure_reason: str | None = None
    """Terminal failure token."""
    failure_message: _FailureMessage = None
    """Terminal failure description."""
    ready_replicas: _ReplicaCount = None
    """Replicas whose Node is Ready."""
    available_replicas: _ReplicaCount = None
    """Replicas Ready for at least minReadySeconds."""
    unavailable_replicas: _ReplicaCount = None
    """Replicas still missing for full availability."""


class MachinePoolDeprecatedStatus(K8sModel):
    """Container of deprecated status groups."""

    v1beta1: MachinePoolV1Beta1DeprecatedStatus | None = None
    """Fields that exist only for v1beta1 clients."""


class MachinePoolStatus(K8sModel):
    """The observed state of a MachinePool."""

    conditions: _Conditions = None
    """Available, BootstrapConfigReady, InfrastructureReady, MachinesReady, MachinesUpToDate,
    ScalingUp, ScalingDown, Remediating, Deleting, Paused."""
    initialization: MachinePoolInitializationStatus | None = None
    """First-time provisioning flags."""
    node_refs: Annotated[
        list[ObjectReference] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(max_length=10000),
    ] = None
    """The Nodes backing the pool's instances."""
    replicas: _ReplicaCount = None
    """Observed number of instances."""
    ready_replicas: _ReplicaCount = None
    """Replicas that are Ready."""
    available_replicas: _ReplicaCount = None
    """Replicas that are Available."""
    up_to_date_replicas: _ReplicaCount = None
    """Replicas that are UpToDate."""
    versions: Annotated[list[StatusVersion] | None, list_map("version"), Field(max_length=100)] = (
        None
    )
    """Replica count per Kubernetes version."""
    phase: MachinePoolPhase | None = None
    """Coarse lifecycle phase, for humans."""
    observed_generation: _ObservedGeneration = None
    """Generation last fully reconciled."""
    deprecated: MachinePoolDeprecatedStatus | None = None
    """Deprecated status groups."""


class MachinePool(K8sModel):
    """A group of identical machines managed through one infrastructure scaling group."""

    api_version: str = GROUP_VERSION
    kind: str = "MachinePool"
    metadata: ObjectMeta | None = None
    spec: MachinePoolSpec
    """Desired state."""
    status: MachinePoolStatus | None = None
    """Observed state."""


# --- Machine -----------------------------------------------------------------------------


class MachineNodeReference(K8sModel):
    """Names the Node running on a Machine."""

    name: DNS1123Subdomain
    """Node name."""


class MachineInitializationStatus(K8sModel):
    """Contract flags reporting first-time Machine provisioning."""

    infrastructure_provisioned: bool | None = None
    """True once the infra machine reported provisioned."""
    bootstrap_data_secret_created: bool | None = None
    """True once the bootstrap data secret exists."""


class MachineDeletionStatus(K8sModel):
    """Progress of a Machine's deletion."""

    node_drain_start_time: Time | None = None
    """When draining the Node started."""
    wait_for_node_volume_detach_start_time: Time | None = None
    """When waiting for volume detach started."""
    wait_for_pre_drain_hook_start_time: Time | None = None
    """When waiting for pre-drain hooks started."""
    wait_for_pre_terminate_hook_start_time: Time | None = None
    """When waiting for pre-terminate hooks started; from then on the Node is not drained."""


class NodeSystemInfo(K8sModel):
    """corev1.NodeSystemInfo as reported by the kubelet."""

    machine_id: str | None = Field(default=None, alias="machineID")
    system_uuid: str | None = Field(default=None, alias="systemUUID")
    boot_id: str | None = Field(default=None, alias="bootID")
    kernel_version: str | None = None
    os_image: str | None = None
    container_runtime_version: str | None = None
    kubelet_version: str | None = None
    kube_proxy_version: str | None = None
    operating_system: str | None = None
    architecture: str | None = None


class MachineAddress(K8sModel):
    """An address of a machine."""

    type: Literal["Hostname", "ExternalIP", "InternalIP", "ExternalDNS", "InternalDNS"]
    """Address type."""
    address: Annotated[str, Field(min_length=1, max_length=256)]
    """The address."""


class MachineV1Beta1DeprecatedStatus(K8sModel):
    """v1beta1-era Machine status kept for conversion."""

    conditions: _V1Beta1Conditions = None
    failure_reason: str | None = None
    failure_message: _FailureMessage = None


class MachineDeprecatedStatus(K8sModel):
    """Container of deprecated Machine status groups."""

    v1beta1: MachineV1Beta1DeprecatedStatus | None = None


class MachineStatus(K8sModel):
    """The observed state of a Machine."""

    conditions: _Conditions = None
    """Available, Ready, UpToDate, BootstrapConfigReady, InfrastructureReady, NodeReady,
    NodeHealthy, Deleting, Paused and more."""
    initialization: MachineInitializationStatus | None = None
    """First-time provisioning flags."""
    node_ref: MachineNodeReference | None = None
    """The Node of this Machine."""
    node_info: NodeSystemInfo | None = None
    """System info of the Node."""
    last_updated: Time | None = None
    """When the phase last changed."""
    addresses: Annotated[
        list[MachineAddress] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(max_length=128),
    ] = None
    """Addresses copied from the infra machine."""
    failure_domain: Annotated[str | None, Field(min_length=1, max_length=256)] = None
    """The failure domain the infra machine reports it runs in (its status.failureDomain)."""
    phase: MachinePhase | None = None
    """Coarse lifecycle phase, for humans."""
    certificates_expiry_date: Time | None = None
    """Control plane certificate expiry."""
    observed_generation: _ObservedGeneration = None
    """Generation last fully reconciled."""
    deletion: MachineDeletionStatus | None = None
    """Deletion progress."""
    deprecated: MachineDeprecatedStatus | None = None
    """Deprecated status groups."""


class Machine(K8sModel):
    """One machine; MachinePools own one per infra machine when the provider opts in."""

    api_version: str = GROUP_VERSION
    kind: str = "Machine"
    metadata: ObjectMeta | None = None
    spec: MachineSpec
    """Desired state."""
    status: MachineStatus | None = None
    """Observed state."""


# --- Cluster -----------------------------------------------------------------------------


class APIEndpoint(K8sModel):
    """Where a Kubernetes API server is reachable."""

    host: Annotated[str | None, Field(min_length=1, max_length=512)] = None
    """Hostname or IP."""
    port: Annotated[int | None, OpenAPI({"format": "int32"}), Field(ge=1, le=65535)] = None
    """TCP port."""


class ClusterSpec(K8sModel):
    """The desired state of a Cluster, as far as MachinePools care."""

    paused: bool | None = None
    """Stops reconciliation of the Cluster and everything that belongs to it."""
    cluster_network: FreeForm | None = None
    """Cluster network settings (kept free-form here)."""
    control_plane_endpoint: APIEndpoint | None = None
    """Endpoint of the workload cluster's API server."""
    control_plane_ref: ContractVersionedObjectReference | None = None
    """The control plane provider object."""
    infrastructure_ref: ContractVersionedObjectReference | None = None
    """The infrastructure cluster object."""
    topology: FreeForm | None = None
    """Managed topology (ClusterClass); kept free-form here."""
    availability_gates: Annotated[list[FreeForm] | None, Field(min_length=1, max_length=32)] = None
    """Extra conditions for Available; kept free-form here."""


class ClusterInitializationStatus(K8sModel):
    """Contract flags reporting first-time Cluster provisioning."""

    infrastructure_provisioned: bool | None = None
    """True once the infrastructure cluster is provisioned."""
    control_plane_initialized: bool | None = None
    """True once the control plane accepts requests; workers may join from then on."""


class ClusterV1Beta1DeprecatedStatus(K8sModel):
    """v1beta1-era Cluster status kept for conversion."""

    conditions: _V1Beta1Conditions = None
    failure_reason: str | None = None
    failure_message: _FailureMessage = None


class ClusterDeprecatedStatus(K8sModel):
    """Container of deprecated Cluster status groups."""

    v1beta1: ClusterV1Beta1DeprecatedStatus | None = None


class ClusterStatus(K8sModel):
    """The observed state of a Cluster."""

    conditions: _Conditions = None
    """Available, InfrastructureReady, ControlPlaneInitialized, ... Paused."""
    initialization: ClusterInitializationStatus | None = None
    """First-time provisioning flags."""
    control_plane: FreeForm | None = None
    """Control plane replica counters."""
    workers: FreeForm | None = None
    """Worker replica counters."""
    failure_domains: Annotated[list[FreeForm] | None, Field(min_length=1, max_length=100)] = None
    """Failure domains reported by the infrastructure provider."""
    phase: ClusterPhase | None = None
    """Coarse lifecycle phase, for humans."""
    observed_generation: _ObservedGeneration = None
    """Generation last fully reconciled."""
    deprecated: ClusterDeprecatedStatus | None = None
    """Deprecated status groups."""


class Cluster(K8sModel):
    """A workload cluster; MachinePools join its nodes."""

    api_version: str = GROUP_VERSION
    kind: str = "Cluster"
    metadata: ObjectMeta | None = None
    spec: ClusterSpec | None = None
    """Desired state."""
    status: ClusterStatus | None = None
    """Observed state."""
