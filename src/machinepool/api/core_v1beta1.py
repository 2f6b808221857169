"""Typed ``cluster.x-k8s.io/v1beta1`` MachinePool: the served, deprecated spoke version.

Older clients (and older providers) still read and write this shape; the conversion
webhook maps it to and from the v1beta2 hub. Differences from v1beta2 worth knowing:
references are full ``corev1.ObjectReference``s, ``minReadySeconds`` sits at the top of the
spec, deletion timeouts are durations, and new-style status lives under ``status.v1beta2``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from machinepool.api.core_v1beta2 import (
    MachinePoolPhase,
    MachineReadinessGate,
    MachineTaint,
    StatusVersion,
)
from machinepool.api.meta import (
    K8sModel,
    MetaCondition,
    ObjectMeta,
    ObjectReference,
    OpenAPI,
    TemplateMeta,
    V1Beta1Condition,
    list_map,
)

__all__ = [
    "V1Beta1Bootstrap",
    "V1Beta1MachinePool",
    "V1Beta1MachinePoolSpec",
    "V1Beta1MachinePoolStatus",
    "V1Beta1MachinePoolV1Beta2Status",
    "V1Beta1MachineSpec",
    "V1Beta1MachineTemplateSpec",
]

GROUP_VERSION = "cluster.x-k8s.io/v1beta1"

_Int32 = Annotated[int | None, OpenAPI({"format": "int32"})]
_Duration = str | None


class V1Beta1Bootstrap(K8sModel):
    """How a machine gets its bootstrap data (v1beta1: a versioned object reference)."""

    config_ref: ObjectReference | None = None
    """The bootstrap config object."""
    data_secret_name: Annotated[str | None, Field(min_length=0, max_length=253)] = None
    """Secret holding the bootstrap data."""


class V1Beta1MachineSpec(K8sModel):
    """v1beta1 Machine spec as used in a MachinePool template."""

    cluster_name: Annotated[str, Field(min_length=1, max_length=63)]
    """Name of the Cluster."""
    bootstrap: V1Beta1Bootstrap
    """Where the bootstrap data comes from."""
    infrastructure_ref: ObjectReference
    """The provider object backing the machines."""
    version: Annotated[str | None, Field(min_length=1, max_length=256)] = None
    """Kubernetes version."""
    provider_id: Annotated[str | None, Field(min_length=1, max_length=512, alias="providerID")] = (
        None
    )
    """Provider ID."""
    failure_domain: Annotated[str | None, Field(min_length=1, max_length=256)] = None
    """Failure domain."""
    readiness_gates: Annotated[
        list[MachineReadinessGate] | None, list_map("conditionType"), Field(max_length=32)
    ] = None
    """Extra conditions for Ready."""
    node_drain_timeout: _Duration = None
    """Drain time limit as a duration, e.g. 10m."""
    node_volume_detach_timeout: _Duration = None
    """Volume detach time limit as a duration."""
    node_deletion_timeout: _Duration = None
    """Node deletion time limit as a duration."""
    taints: Annotated[
        list[MachineTaint] | None, list_map("key", "effect"), Field(min_length=1, max_length=64)
    ] = None
    """Node taints managed by Cluster API; on a MachinePool, accepted only with the
    MachinePoolNodeTaints feature gate (ours), which keeps them on the pool's Nodes."""


class V1Beta1MachineTemplateSpec(K8sModel):
    """What every machine of a v1beta1 pool looks like."""

    metadata: TemplateMeta | None = None
    """Labels and annotations for created objects."""
    spec: V1Beta1MachineSpec
    """Spec of each machine."""


class V1Beta1MachinePoolSpec(K8sModel):
    """The desired state of a v1beta1 MachinePool."""

    cluster_name: Annotated[str, Field(min_length=1, max_length=63)]
    """Name of the Cluster."""
    replicas: _Int32 = None
    """Desired number of machines."""
    template: V1Beta1MachineTemplateSpec
    """The machines to create."""
    min_ready_seconds: _Int32 = None
    """Seconds a machine must be Ready before it counts as available."""
    provider_id_list: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=512)]] | None,
        Field(max_length=10000, alias="providerIDList"),
    ] = None
    """Provider IDs of the pool's instances."""
    failure_domains: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=256)]] | None, Field(max_length=100)
    ] = None
    """Failure domains of the pool."""


class V1Beta1MachinePoolV1Beta2Status(K8sModel):
    """The v1beta2-style status carried inside a v1beta1 object."""

    conditions: Annotated[list[MetaCondition] | None, list_map("type"), Field(max_length=32)] = None
    """New-style conditions."""
    ready_replicas: _Int32 = None
    """Replicas with Ready true."""
    available_replicas: _Int32 = None
    """Replicas with Available true."""
    up_to_date_replicas: _Int32 = None
    """Replicas with UpToDate true."""


class V1Beta1MachinePoolStatus(K8sModel):
    """The observed state of a v1beta1 MachinePool."""

    node_refs: Annotated[list[ObjectReference] | None, Field(max_length=10000)] = None
    """The Nodes backing the instances."""
    replicas: _Int32 = None
    """Observed number of instances."""
    ready_replicas: _Int32 = None
    """Instances whose Node is Ready."""
    available_replicas: _Int32 = None
    """Instances Ready for at least minReadySeconds."""
    unavailable_replicas: _Int32 = None
    """Instances still missing for full availability."""
    failure_reason: str | None = None
    """Terminal failure token."""
    failure_message: Annotated[str | None, Field(min_length=1, max_length=10240)] = None
    """Terminal failure description."""
    phase: MachinePoolPhase | None = None
    """Coarse lifecycle phase."""
    bootstrap_ready: bool | None = None
    """Bootstrap data secret created."""
    infrastructure_ready: bool | None = None
    """Infrastructure pool provisioned."""
    observed_generation: Annotated[int | None, OpenAPI({"format": "int64"})] = None
    """Generation last reconciled."""
    conditions: list[V1Beta1Condition] | None = None
    """v1beta1 conditions (with severity)."""
    versions: Annotated[list[StatusVersion] | None, list_map("version"), Field(max_length=100)] = (
        None
    )
    """Replica count per Kubernetes version."""
    v1beta2: V1Beta1MachinePoolV1Beta2Status | None = None
    """v1beta2-style status for clients that understand it."""


class V1Beta1MachinePool(K8sModel):
    """A v1beta1 MachinePool, as older clients see it."""

    api_version: str = GROUP_VERSION
    kind: str = "MachinePool"
    metadata: ObjectMeta | None = None
    spec: V1Beta1MachinePoolSpec | None = None
    """Desired state."""
    status: V1Beta1MachinePoolStatus | None = None
    """Observed state."""
