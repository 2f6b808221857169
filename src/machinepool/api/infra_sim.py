"""Typed ``infrastructure.cluster.x-k8s.io/v1beta2`` SimMachinePool, SimMachine and
SimMachinePoolTemplate.

The simulated infrastructure provider (``machinepool.providers.sim``) reconciles these: a
SimMachinePool is a pool of simulated instances serving one MachinePool, a SimMachine is one
of its instances (so core creates a MachinePool Machine for it). The CRDs carry the contract
label ``cluster.x-k8s.io/v1beta2: v1beta2``. Failure domains come from the MachinePool's
``spec.failureDomains`` (as upstream providers read them), not from this object. The
simulated cloud's own storage of instances is not an API kind: it is in
``machinepool.simworld.records``. A SimMachinePoolTemplate is what a ClusterClass's machinePools
class names: upstream's topology controller makes a SimMachinePool from its
``spec.template.spec`` (docs/guide-clusterclass.md); no controller of ours reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Final, Literal

from pydantic import Field

from machinepool.api import constants as c
from machinepool.api.meta import (
    IntOrString,
    K8sModel,
    MetaCondition,
    ObjectMeta,
    OpenAPI,
    TemplateMeta,
    list_map,
)
from machinepool.api.registry import KindInfo, PrinterColumn, VersionInfo, register_kind

__all__ = [
    "DEFAULT_SIM_INSTANCE_TYPE",
    "SIM_INSTANCE_TYPES",
    "SIM_MACHINE",
    "SIM_MACHINES",
    "SIM_MACHINE_POOL",
    "SIM_MACHINE_POOLS",
    "SIM_MACHINE_POOL_TEMPLATE",
    "SIM_MACHINE_POOL_TEMPLATES",
    "SIM_PROVIDER_NAME",
    "SimInstanceStatus",
    "SimInstanceType",
    "SimMachine",
    "SimMachinePool",
    "SimMachinePoolSpec",
    "SimMachinePoolStatus",
    "SimMachinePoolTemplate",
    "SimMachinePoolTemplateResource",
    "SimMachinePoolTemplateSpec",
    "SimMachineSpec",
    "SimMachineStatus",
    "SimPoolStrategy",
    "SimRollingUpdate",
    "SimSettings",
    "SimTemplate",
    "SimWarmPool",
]

GROUP_VERSION = "infrastructure.cluster.x-k8s.io/v1beta2"
SIM_PROVIDER_NAME = "infrastructure-sim"

_Int32 = Annotated[int | None, OpenAPI({"format": "int32"})]
_Conditions = Annotated[list[MetaCondition] | None, list_map("type"), Field(max_length=32)]
_ProviderID = Annotated[str, Field(min_length=1, max_length=512)]

SimInstanceType = Literal["sim.small", "sim.medium", "sim.large", "sim.xlarge"]
SIM_INSTANCE_TYPES: Final[Mapping[str, Mapping[str, str]]] = MappingProxyType(
    {
        "sim.small": {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"},
        "sim.medium": {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "200Gi"},
        "sim.large": {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "400Gi"},
        "sim.xlarge": {"cpu": "32", "memory": "128Gi", "pods": "250", "ephemeral-storage": "800Gi"},
    }
)
"""The simulated cloud's catalogue: what a Node of each instance type offers (its capacity and
allocatable), and what a SimMachinePool reports in ``status.capacity`` so the cluster
autoscaler can plan a scale from zero without capacity annotations."""
DEFAULT_SIM_INSTANCE_TYPE: Final = "sim.small"
"""The instance type of a template that names none."""


class SimTemplate(K8sModel):
    """What each instance looks like; a change replaces instances (rolling update)."""

    instance_type: SimInstanceType | None = None
    """Simulated instance type: sim.small (4 CPUs, 16Gi), sim.medium (8, 32Gi), sim.large
    (16, 64Gi) or sim.xlarge (32, 128Gi). Default sim.small."""
    image: Annotated[str | None, Field(max_length=512)] = None
    """Simulated machine image."""


class SimRollingUpdate(K8sModel):
    """How fast instances are replaced."""

    max_surge: IntOrString | None = None
    """Instances above replicas during a rollout; int or percent (rounds up). Default 1."""
    max_unavailable: IntOrString | None = None
    """Ready instances below replicas allowed during a rollout; int or percent (rounds down).
    Default 0. maxSurge and maxUnavailable may not both be 0."""
    delete_policy: Literal["Oldest", "Newest", "Random"] | None = None
    """Order of deletion when nothing else decides. Default Oldest."""


class SimPoolStrategy(K8sModel):
    """The replacement strategy."""

    type: Literal["RollingUpdate", "OnDelete"] | None = None
    """RollingUpdate (the default): the pool replaces outdated instances within its budgets.
    OnDelete: it replaces an instance only once its Machine is deleted, as for a pool whose
    MachinePool opts into the core's rollouts (docs/user-guide.md "Rollouts by the core")."""
    rolling_update: SimRollingUpdate | None = None
    """Rolling update settings."""


class SimSettings(K8sModel):
    """How the simulated cloud behaves for this pool."""

    boot_delay_seconds: Annotated[int | None, OpenAPI({"format": "int32"}), Field(ge=0)] = None
    """Seconds from creation until an instance runs. Default 20, with a spread of 40, when
    neither this nor bootDelaySpreadSeconds is set: a cloud's 20-60 s. 0 with no spread runs
    an instance at once."""
    boot_delay_spread_seconds: Annotated[int | None, OpenAPI({"format": "int32"}), Field(ge=0)] = (
        None
    )
    """Each instance boots up to this many seconds later than bootDelaySeconds, drawn at
    random, as real instances do not all boot alike. Default 40 when bootDelaySeconds is
    unset too, else 0."""
    boot_failure_rate: Annotated[float | None, Field(ge=0, le=1)] = None
    """Probability (0-1) that an instance fails to boot. Default 0."""
    fail_after_boot_rate: Annotated[float | None, Field(ge=0, le=1)] = None
    """Probability (0-1) that an instance that booted fails later (its Node turns NotReady
    and the pool replaces it). Default 0."""
    fail_after_boot_within_seconds: Annotated[
        int | None, OpenAPI({"format": "int32"}), Field(ge=1)
    ] = None
    """Such an instance fails at a random moment within this many seconds of booting.
    Default 600."""
    capacity_per_failure_domain: Annotated[
        int | None, OpenAPI({"format": "int32"}), Field(ge=0)
    ] = None
    """Most instances of this pool per failure domain; 0 or unset is unbounded."""
    start_delay_seconds: Annotated[int | None, OpenAPI({"format": "int32"}), Field(ge=0)] = None
    """Seconds from starting a stopped warm-pool instance until it runs (its kubelet then
    registers at once: it booted before it was stopped). Default 0."""


class SimWarmPool(K8sModel):
    """Instances booted ahead and kept stopped, started first by a scale-up. The names are EC2
    Auto Scaling's warm pool's (PutWarmPool): its size is maxGroupPreparedCapacity minus
    replicas, and at least minSize."""

    min_size: Annotated[int | None, OpenAPI({"format": "int32"}), Field(ge=0)] = None
    """Warm instances kept at least, whatever replicas is. Default 0."""
    max_group_prepared_capacity: Annotated[
        int | None, OpenAPI({"format": "int32"}), Field(ge=0)
    ] = None
    """Most instances of the pool and its warm pool together; the warm pool holds what
    replicas leaves of it (and at least minSize). Unset: the warm pool holds minSize."""
    pool_state: Literal["Stopped"] | None = None
    """State of warm instances: only Stopped (Auto Scaling's Running and Hibernated are not
    simulated). Default Stopped."""


class SimMachinePoolSpec(K8sModel):
    """The desired state of a simulated pool."""

    provider_id_list: Annotated[
        list[_ProviderID] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(max_length=10000, alias="providerIDList"),
    ] = None
    """Provider IDs of the pool's instances (sim:///<failure-domain>/<instance-id>), sorted."""
    template: SimTemplate | None = None
    """Instance template."""
    strategy: SimPoolStrategy | None = None
    """Replacement strategy."""
    sim: SimSettings | None = None
    """Simulation settings."""
    warm_pool: SimWarmPool | None = None
    """Warm pool: instances booted and stopped ahead of a scale-up. Unset: none."""


class SimInstanceStatus(K8sModel):
    """One instance of the pool."""

    instance_id: str = Field(alias="instanceID")
    """Instance id, also the name of its SimMachine and Node."""
    provider_id: str | None = Field(default=None, alias="providerID")
    """Provider ID of the instance."""
    failure_domain: str | None = None
    """Failure domain of the instance."""
    state: str | None = None
    """pending, running, stopped (warm pool), failed or terminated."""
    version: str | None = None
    """Kubernetes version it runs."""
    up_to_date: bool | None = None
    """Whether it matches the current template."""


class SimMachinePoolStatus(K8sModel):
    """What the controller observed of the pool."""

    ready: bool | None = None
    """True once providerIDList covers every instance (stays true while scaling)."""
    replicas: _Int32 = None
    """Number of instances in providerIDList."""
    instances: Annotated[
        list[SimInstanceStatus] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(max_length=10000),
    ] = None
    """The pool's instances, sorted by id."""
    warm_instances: Annotated[
        list[SimInstanceStatus] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(max_length=10000),
    ] = None
    """The warm pool's instances (pending while they boot, then stopped), sorted by id."""
    infrastructure_machine_kind: str | None = None
    """SimMachine: opts in to MachinePool Machines."""
    capacity: dict[str, str] | None = None
    """What one instance of the template offers (cpu, memory, pods, ephemeral-storage), read
    by the cluster autoscaler to scale the pool up from zero."""
    conditions: _Conditions = None
    """Ready, InstancesReady, ScalingUp, ScalingDown, RollingOut, Paused."""
    initialization: dict[str, bool] | None = None
    """Contract flags: provisioned."""
    observed_generation: Annotated[int | None, OpenAPI({"format": "int64"})] = None
    """Generation last reconciled without error."""


class SimMachinePool(K8sModel):
    """A pool of simulated instances serving one MachinePool."""

    api_version: str = GROUP_VERSION
    kind: str = "SimMachinePool"
    metadata: ObjectMeta | None = None
    spec: SimMachinePoolSpec | None = None
    """Desired state."""
    status: SimMachinePoolStatus | None = None
    """Observed state."""


class SimMachinePoolTemplateResource(K8sModel):
    """What every SimMachinePool made from the template gets."""

    metadata: TemplateMeta | None = None
    """Labels and annotations of the SimMachinePool."""
    spec: SimMachinePoolSpec
    """The SimMachinePool's spec."""


class SimMachinePoolTemplateSpec(K8sModel):
    """The template."""

    template: SimMachinePoolTemplateResource
    """The SimMachinePool to make."""


class SimMachinePoolTemplate(K8sModel):
    """A SimMachinePool to be made by Cluster API's topology controller (ClusterClass)."""

    api_version: str = GROUP_VERSION
    kind: str = "SimMachinePoolTemplate"
    metadata: ObjectMeta | None = None
    spec: SimMachinePoolTemplateSpec
    """The template."""


class SimMachineSpec(K8sModel):
    """One simulated instance of a pool."""

    provider_id: str | None = Field(default=None, alias="providerID")
    """sim:///<failure-domain>/<instance-id>, equal to the Node's providerID."""
    instance_id: str | None = Field(default=None, alias="instanceID")
    """Instance id."""
    failure_domain: str | None = None
    """Failure domain of the instance."""


class SimMachineStatus(K8sModel):
    """What the controller observed of one instance."""

    ready: bool | None = None
    """True while the instance runs."""
    instance_state: str | None = None
    """pending, running, failed or terminated."""
    initialization: dict[str, bool] | None = None
    """Contract flags: provisioned."""
    conditions: _Conditions = None
    """Ready."""


class SimMachine(K8sModel):
    """A simulated instance; owned by its SimMachinePool, deleted through its Machine."""

    api_version: str = GROUP_VERSION
    kind: str = "SimMachine"
    metadata: ObjectMeta | None = None
    spec: SimMachineSpec | None = None
    status: SimMachineStatus | None = None


_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since creation")
_LABELS = {c.PROVIDER_LABEL: SIM_PROVIDER_NAME, c.CONTRACT_LABEL: c.V1BETA2}

SIM_MACHINE_POOL = register_kind(
    KindInfo(
        group=c.INFRASTRUCTURE_GROUP,
        kind="SimMachinePool",
        plural="simmachinepools",
        singular="simmachinepool",
        short_names=("simmp",),
        categories=("cluster-api",),
        labels=_LABELS,
        versions=(
            VersionInfo(
                name=c.V1BETA2,
                model=SimMachinePool,
                storage=True,
                printer_columns=(
                    PrinterColumn("Ready", "string", ".status.ready", "Pool ready"),
                    PrinterColumn("Replicas", "integer", ".status.replicas", "Instances"),
                    PrinterColumn("Type", "string", ".spec.template.instanceType", "Shape"),
                    _AGE,
                ),
            ),
        ),
    )
)

SIM_MACHINE = register_kind(
    KindInfo(
        group=c.INFRASTRUCTURE_GROUP,
        kind="SimMachine",
        plural="simmachines",
        singular="simmachine",
        short_names=("simm",),
        categories=("cluster-api",),
        labels=_LABELS,
        versions=(
            VersionInfo(
                name=c.V1BETA2,
                model=SimMachine,
                storage=True,
                printer_columns=(
                    PrinterColumn(
                        "Cluster",
                        "string",
                        ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
                        "Cluster name",
                    ),
                    PrinterColumn("State", "string", ".status.instanceState", "Instance state"),
                    PrinterColumn("Ready", "string", ".status.ready", "Instance ready"),
                    PrinterColumn("ProviderID", "string", ".spec.providerID", "Provider ID"),
                    _AGE,
                ),
            ),
        ),
    )
)

SIM_MACHINE_POOL_TEMPLATE = register_kind(
    KindInfo(
        group=c.INFRASTRUCTURE_GROUP,
        kind="SimMachinePoolTemplate",
        plural="simmachinepooltemplates",
        singular="simmachinepooltemplate",
        categories=("cluster-api",),
        labels=_LABELS,
        versions=(
            VersionInfo(
                name=c.V1BETA2,
                model=SimMachinePoolTemplate,
                storage=True,
                status_subresource=False,
                printer_columns=(_AGE,),
            ),
        ),
    )
)

SIM_MACHINE_POOLS = SIM_MACHINE_POOL.resource()
SIM_MACHINE_POOL_TEMPLATES = SIM_MACHINE_POOL_TEMPLATE.resource()
SIM_MACHINES = SIM_MACHINE.resource()
