"""Typed ``infrastructure.machinepool.cluster.x-k8s.io/v1beta2`` AWSMachinePool, AWSMachine and
AWSMachinePoolTemplate.

A schema-compatible subset of Cluster API Provider AWS (CAPA): the same kinds, field names,
meanings and bounds, so a manifest written for CAPA's AWSMachinePool applies here with only its
``apiVersion`` changed. The group is our own (``GROUP``), not CAPA's
``infrastructure.cluster.x-k8s.io``, so both providers' CRDs can be installed in one management
cluster (docs/operator-guide.md, "Beside CAPA"). Fields this
provider does not act on (image lookup, ignition, network interfaces...) are either modelled for
compatibility or survive as extra fields. Importing this module registers both kinds; the CRDs
carry the ``cluster.x-k8s.io/v1beta2: v1beta2`` contract label so core resolves their version.

The AWS provider (``machinepool.providers.aws``) reads and writes these objects; the webhook
server validates AWSMachinePools through ``machinepool.providers.aws.webhook``. An
AWSMachinePoolTemplate is what a ClusterClass's machinePools class names: upstream's topology
controller makes an AWSMachinePool from its ``spec.template.spec`` (docs/guide-clusterclass.md).
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import Field

from machinepool.api import constants as c
from machinepool.api.meta import (
    FreeForm,
    K8sModel,
    ObjectMeta,
    OpenAPI,
    TemplateMeta,
    V1Beta1Condition,
)
from machinepool.api.registry import KindInfo, PrinterColumn, VersionInfo, register_kind

__all__ = [
    "AWSMACHINEPOOLS",
    "AWSMACHINES",
    "AWS_MACHINE",
    "AWS_MACHINE_FINALIZER",
    "AWS_MACHINE_POOL",
    "AWS_MACHINE_POOL_FINALIZER",
    "AWS_MACHINE_POOL_TEMPLATE",
    "AWS_MACHINE_POOL_TEMPLATES",
    "AWS_PROVIDER_NAME",
    "GROUP",
    "GROUP_VERSION",
    "LEGACY_GROUP",
    "AMIReference",
    "AWSInstanceReusePolicy",
    "AWSLaunchTemplate",
    "AWSLifecycleHook",
    "AWSMachine",
    "AWSMachinePool",
    "AWSMachinePoolInstanceStatus",
    "AWSMachinePoolSpec",
    "AWSMachinePoolStatus",
    "AWSMachinePoolTemplate",
    "AWSMachinePoolTemplateResource",
    "AWSMachinePoolTemplateSpec",
    "AWSMachineSpec",
    "AWSMachineStatus",
    "AWSResourceReference",
    "AWSWarmPool",
    "Filter",
    "InstancesDistribution",
    "MixedInstancesPolicy",
    "Overrides",
    "Processes",
    "RefreshPreferences",
    "SpotMarketOptions",
    "SuspendProcessesTypes",
    "Volume",
]

GROUP: Final = "infrastructure.machinepool.cluster.x-k8s.io"
"""Our AWS kinds' group: CAPA's kind names under a group of our own, so the CRD names differ."""
LEGACY_GROUP: Final = c.INFRASTRUCTURE_GROUP
"""The group these kinds were first served under, CAPA's own; pools made under it are moved
with ``machinepool aws move-group`` (docs/operator-guide.md, "Moving AWS pools to the new
group")."""
GROUP_VERSION: Final = f"{GROUP}/{c.V1BETA2}"
AWS_PROVIDER_NAME: Final = "infrastructure-machinepool-aws"
"""clusterctl's name for this provider (``--infrastructure machinepool-aws``); CAPA's is
``infrastructure-aws``, and clusterctl finds a provider's objects by this label value."""
AWS_MACHINE_POOL_FINALIZER: Final = f"awsmachinepool.{GROUP}"
"""Held until the Auto Scaling group and launch template are gone."""
AWS_MACHINE_FINALIZER: Final = f"awsmachine.{GROUP}"
"""Held until the instance behind a pool AWSMachine is terminated."""

_Int32 = Annotated[int | None, OpenAPI({"format": "int32"})]
_Int64 = Annotated[int | None, OpenAPI({"format": "int64"})]
_Duration = Annotated[str | None, Field(pattern=r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")]
"""A metav1.Duration as Go prints it: ``300s``, ``5m0s``, ``1h``."""


class Filter(K8sModel):
    """An EC2 filter: a name and the values it matches."""

    name: str
    """Name of the filter (case-sensitive)."""
    values: list[str]
    """Values to match."""


class AWSResourceReference(K8sModel):
    """An AWS resource by ID, or by filters."""

    id: str | None = None
    """ID of the resource."""
    filters: list[Filter] | None = None
    """Filters matching the resource; ignored when id is set."""


class AMIReference(K8sModel):
    """The image instances boot from."""

    id: str | None = None
    """ID of the AMI."""
    eks_lookup_type: Literal["AmazonLinux", "AmazonLinuxGPU"] | None = None
    """EKS-optimised AMI lookup; not acted on by this provider."""


class Volume(K8sModel):
    """An EBS volume attached to instances."""

    device_name: str | None = None
    """Device name, e.g. /dev/sda1."""
    size: Annotated[int, OpenAPI({"format": "int64"}), Field(ge=8)]
    """Size in GiB (at least 8)."""
    type: Literal["standard", "io1", "io2", "gp2", "gp3", "sc1", "st1"] | None = None
    """Volume type."""
    iops: _Int64 = None
    """Provisioned IOPS (io1, io2, gp3)."""
    throughput: _Int64 = None
    """Throughput in MiB/s (gp3)."""
    encrypted: bool | None = None
    """Whether the volume is encrypted."""
    encryption_key: str | None = None
    """KMS key ID or ARN for encryption."""


class SpotMarketOptions(K8sModel):
    """Run instances as Spot instances."""

    max_price: str | None = None
    """Maximum hourly price; empty means the on-demand price."""


class AWSLaunchTemplate(K8sModel):
    """What every instance of the pool looks like: the launch template's data."""

    name: str | None = None
    """Launch template name; defaults to the AWSMachinePool's name."""
    iam_instance_profile: str | None = None
    """Name or ARN of the instance profile."""
    ami: AMIReference | None = None
    """The AMI to boot."""
    image_lookup_format: str | None = None
    """AMI naming format for lookup; not acted on by this provider (set ami.id)."""
    image_lookup_org: str | None = None
    """AWS organisation for AMI lookup; not acted on by this provider."""
    image_lookup_base_os: str | None = Field(default=None, alias="imageLookupBaseOS")
    """Base OS for AMI lookup; not acted on by this provider."""
    instance_type: str | None = None
    """EC2 instance type, e.g. m5.large."""
    root_volume: Volume | None = None
    """Root volume settings."""
    non_root_volumes: list[Volume] | None = None
    """Extra volumes."""
    ssh_key_name: str | None = None
    """SSH key pair name; empty string for none."""
    version_number: _Int64 = None
    """Launch template version applied (informational)."""
    additional_security_groups: list[AWSResourceReference] | None = None
    """Security groups to attach besides the cluster's."""
    spot_market_options: SpotMarketOptions | None = None
    """Use Spot instances."""
    instance_metadata_options: FreeForm | None = None
    """Instance metadata service options, passed through."""
    private_dns_name: FreeForm | None = Field(default=None, alias="privateDnsName")
    """Hostname options, passed through."""


class Overrides(K8sModel):
    """An instance type a mixed-instances group may launch."""

    instance_type: str
    """EC2 instance type."""


class InstancesDistribution(K8sModel):
    """How On-Demand and Spot capacity is split."""

    on_demand_allocation_strategy: Literal["prioritized", "lowest-price"] | None = None
    """On-Demand allocation strategy [prioritized]."""
    spot_allocation_strategy: (
        Literal[
            "lowest-price",
            "capacity-optimized",
            "capacity-optimized-prioritized",
            "price-capacity-optimized",
        ]
        | None
    ) = None
    """Spot allocation strategy [lowest-price]."""
    on_demand_base_capacity: _Int64 = None
    """Minimum On-Demand capacity [0]."""
    on_demand_percentage_above_base_capacity: _Int64 = None
    """Percentage of On-Demand above the base [100]."""


class MixedInstancesPolicy(K8sModel):
    """Several instance types (and Spot) in one group."""

    instances_distribution: InstancesDistribution | None = None
    """On-Demand / Spot split."""
    overrides: list[Overrides] | None = None
    """Instance types to use instead of the launch template's."""


class RefreshPreferences(K8sModel):
    """How an instance refresh replaces instances after a launch template change."""

    disable: bool | None = None
    """Never start instance refreshes (instances are replaced some other way)."""
    strategy: str | None = None
    """Refresh strategy; only Rolling is valid."""
    instance_warmup: _Int64 = None
    """Seconds until a new instance counts as ready."""
    min_healthy_percentage: _Int64 = None
    """Capacity percentage that must stay healthy [90]."""
    max_healthy_percentage: Annotated[
        int | None, OpenAPI({"format": "int64"}), Field(ge=100, le=200)
    ] = None
    """Capacity percentage allowed in service or pending (100-200)."""


class Processes(K8sModel):
    """Auto Scaling processes, each suspended when true."""

    launch: bool | None = None
    terminate: bool | None = None
    add_to_load_balancer: bool | None = None
    alarm_notification: bool | None = None
    az_rebalance: bool | None = Field(default=None, alias="azRebalance")
    health_check: bool | None = None
    instance_refresh: bool | None = None
    replace_unhealthy: bool | None = None
    scheduled_actions: bool | None = None


class SuspendProcessesTypes(K8sModel):
    """Processes to suspend; reconciled continuously (removed ones are resumed)."""

    all: bool | None = None
    """Suspend every process except those explicitly set to false."""
    processes: Processes | None = None
    """Processes to suspend individually."""


class AWSLifecycleHook(K8sModel):
    """An Auto Scaling lifecycle hook on the group."""

    name: Annotated[str, Field(min_length=1, max_length=255)]
    """Name of the hook."""
    notification_target_arn: str | None = Field(default=None, alias="notificationTargetARN")
    """ARN of the notification target."""
    role_arn: str | None = Field(default=None, alias="roleARN")
    """ARN of the role allowed to publish to the target."""
    lifecycle_transition: Literal[
        "autoscaling:EC2_INSTANCE_LAUNCHING", "autoscaling:EC2_INSTANCE_TERMINATING"
    ]
    """The transition the hook pauses."""
    heartbeat_timeout: _Duration = None
    """How long an instance may wait in the hook (at most 48h)."""
    default_result: Literal["CONTINUE", "ABANDON"] | None = None
    """What happens when the timeout passes."""
    notification_metadata: str | None = None
    """Extra data sent to the notification target."""


class AWSInstanceReusePolicy(K8sModel):
    """Whether instances leaving the group on scale-in return to the warm pool."""

    reuse_on_scale_in: bool | None = None
    """Return scaled-in instances to the warm pool instead of terminating them."""


class AWSWarmPool(K8sModel):
    """The group's warm pool (Auto Scaling's PutWarmPool): instances launched ahead and kept
    stopped (or running, or hibernated), moved into the group first on a scale-out. Ours;
    CAPA's AWSMachinePool has no such field."""

    min_size: Annotated[int | None, OpenAPI({"format": "int32"}), Field(ge=0)] = None
    """Warm instances kept at least [0]."""
    max_group_prepared_capacity: Annotated[
        int | None, OpenAPI({"format": "int32"}), Field(ge=0)
    ] = None
    """Most instances of the group and its warm pool together [the group's maxSize]."""
    pool_state: Literal["Stopped", "Running", "Hibernated"] | None = None
    """State of warm instances [Stopped]."""
    instance_reuse_policy: AWSInstanceReusePolicy | None = None
    """What happens to instances the group scales in."""


class AWSMachinePoolSpec(K8sModel):
    """The desired Auto Scaling group and launch template."""

    provider_id: str | None = Field(default=None, alias="providerID")
    """ARN of the Auto Scaling group; written by the controller."""
    min_size: Annotated[int, OpenAPI({"format": "int32", "default": 1}), Field(ge=0)] = 1
    """Minimum size of the group."""
    max_size: Annotated[int, OpenAPI({"format": "int32", "default": 1}), Field(ge=1)] = 1
    """Maximum size of the group."""
    availability_zones: list[str] | None = None
    """Availability zones instances may run in."""
    availability_zone_subnet_type: Literal["public", "private", "all"] | None = None
    """Which subnets to use in the given zones."""
    subnets: list[AWSResourceReference] | None = None
    """Subnets of the group (their IDs)."""
    additional_tags: dict[str, str] | None = None
    """Tags added to the group, its template and its instances."""
    aws_launch_template: AWSLaunchTemplate = Field(alias="awsLaunchTemplate")
    """The launch template instances are created from."""
    mixed_instances_policy: MixedInstancesPolicy | None = None
    """Several instance types and Spot in one group."""
    provider_id_list: list[str] | None = Field(default=None, alias="providerIDList")
    """Provider IDs of the group's instances, ``aws:///<zone>/<instance-id>``, sorted."""
    default_cool_down: _Duration = None
    """Time after a scaling activity before the next one starts [300s]."""
    default_instance_warmup: _Duration = None
    """Time until a new instance counts towards metrics [300s]."""
    refresh_preferences: RefreshPreferences | None = None
    """Instance refresh preferences."""
    capacity_rebalance: bool | None = None
    """Enable capacity rebalancing for Spot."""
    suspend_processes: SuspendProcessesTypes | None = None
    """Processes to suspend; others are resumed."""
    ignition: FreeForm | None = None
    """Ignition options; not acted on by this provider."""
    lifecycle_hooks: list[AWSLifecycleHook] | None = None
    """Lifecycle hooks of the group."""
    warm_pool: AWSWarmPool | None = None
    """The group's warm pool; unset: none (one there is deleted)."""


class AWSMachinePoolInstanceStatus(K8sModel):
    """One instance of the group."""

    instance_id: str | None = Field(default=None, alias="instanceID")
    """EC2 instance ID."""
    version: str | None = None
    """Kubernetes version of the instance."""


class AWSMachinePoolStatus(K8sModel):
    """What the controller observed of the group."""

    ready: bool | None = None
    """True once providerIDList covers every InService instance of the group."""
    replicas: _Int32 = None
    """Number of instances in providerIDList."""
    conditions: list[V1Beta1Condition] | None = None
    """Ready, ASGReady, LaunchTemplateReady, InstanceRefreshStarted, LifecycleHookReady."""
    instances: list[AWSMachinePoolInstanceStatus] | None = None
    """The group's instances, sorted by ID."""
    launch_template_id: str | None = Field(default=None, alias="launchTemplateID")
    """ID of the launch template."""
    launch_template_version: str | None = None
    """Latest version of the launch template."""
    asg_name: str | None = None
    """Name of the Auto Scaling group, recorded before it is created."""
    failure_reason: str | None = None
    """Terminal problem, machine-readable."""
    failure_message: str | None = None
    """Terminal problem, for humans."""
    asg_status: str | None = None
    """Status string of the group (e.g. "Delete in progress")."""
    infrastructure_machine_kind: str | None = None
    """Kind of the per-instance objects (AWSMachine): opts in to MachinePool Machines."""


class AWSMachinePool(K8sModel):
    """An Auto Scaling group serving one MachinePool."""

    api_version: str = GROUP_VERSION
    kind: str = "AWSMachinePool"
    metadata: ObjectMeta | None = None
    spec: AWSMachinePoolSpec
    status: AWSMachinePoolStatus | None = None


class AWSMachinePoolTemplateResource(K8sModel):
    """What every AWSMachinePool made from the template gets."""

    metadata: TemplateMeta | None = None
    """Labels and annotations of the AWSMachinePool."""
    spec: AWSMachinePoolSpec
    """The AWSMachinePool's spec."""


class AWSMachinePoolTemplateSpec(K8sModel):
    """The template."""

    template: AWSMachinePoolTemplateResource
    """The AWSMachinePool to make."""


class AWSMachinePoolTemplate(K8sModel):
    """An AWSMachinePool to be made by Cluster API's topology controller (ClusterClass)."""

    api_version: str = GROUP_VERSION
    kind: str = "AWSMachinePoolTemplate"
    metadata: ObjectMeta | None = None
    spec: AWSMachinePoolTemplateSpec


class AWSMachineSpec(K8sModel):
    """One EC2 instance; for pool instances, informational except providerID/instanceID."""

    provider_id: str | None = Field(default=None, alias="providerID")
    """``aws:///<zone>/<instance-id>``, equal to the Node's providerID."""
    instance_id: str | None = Field(default=None, alias="instanceID")
    """EC2 instance ID."""
    ami: AMIReference | None = None
    """The AMI the instance booted."""
    instance_type: str | None = None
    """EC2 instance type."""
    iam_instance_profile: str | None = Field(default=None, alias="iamInstanceProfile")
    """Instance profile."""
    ssh_key_name: str | None = None
    """SSH key pair name."""
    additional_tags: dict[str, str] | None = None
    """Extra tags."""
    failure_domain: str | None = None
    """Availability zone of the instance."""


class AWSMachineStatus(K8sModel):
    """What the controller observed of one instance."""

    ready: bool | None = None
    """True while the instance is InService."""
    instance_state: str | None = None
    """EC2 lifecycle state: pending, running, terminated..."""
    conditions: list[V1Beta1Condition] | None = None
    """Ready and InstanceReady."""
    failure_reason: str | None = None
    failure_message: str | None = None


class AWSMachine(K8sModel):
    """An EC2 instance; pool instances are owned by their AWSMachinePool."""

    api_version: str = GROUP_VERSION
    kind: str = "AWSMachine"
    metadata: ObjectMeta | None = None
    spec: AWSMachineSpec | None = None
    status: AWSMachineStatus | None = None


def _column(name: str, kind: Literal["string", "integer"], path: str, doc: str) -> PrinterColumn:
    return PrinterColumn(name, kind, path, doc)


_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since creation")
_LABELS = {c.PROVIDER_LABEL: AWS_PROVIDER_NAME, c.CONTRACT_LABEL: c.V1BETA2}

AWS_MACHINE_POOL = register_kind(
    KindInfo(
        group=GROUP,
        kind="AWSMachinePool",
        plural="awsmachinepools",
        singular="awsmachinepool",
        short_names=("mpawsmp",),  # not CAPA's awsmp: kubectl would warn it is ambiguous
        categories=("cluster-api",),
        labels=_LABELS,
        versions=(
            VersionInfo(
                name=c.V1BETA2,
                model=AWSMachinePool,
                storage=True,
                printer_columns=(
                    _column("Ready", "string", ".status.ready", "Pool ready"),
                    _column("Replicas", "integer", ".status.replicas", "Instances"),
                    _column("MinSize", "integer", ".spec.minSize", "Minimum instances"),
                    _column("MaxSize", "integer", ".spec.maxSize", "Maximum instances"),
                    _column(
                        "LaunchTemplate ID",
                        "string",
                        ".status.launchTemplateID",
                        "Launch template ID",
                    ),
                    _AGE,
                ),
            ),
        ),
    )
)

AWS_MACHINE = register_kind(
    KindInfo(
        group=GROUP,
        kind="AWSMachine",
        plural="awsmachines",
        singular="awsmachine",
        short_names=("mpawsm",),  # not CAPA's awsm
        categories=("cluster-api",),
        labels=_LABELS,
        versions=(
            VersionInfo(
                name=c.V1BETA2,
                model=AWSMachine,
                storage=True,
                printer_columns=(
                    _column(
                        "Cluster",
                        "string",
                        ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
                        "Cluster name",
                    ),
                    _column("State", "string", ".status.instanceState", "EC2 instance state"),
                    _column("Ready", "string", ".status.ready", "Instance ready"),
                    _column("InstanceID", "string", ".spec.providerID", "EC2 instance ID"),
                    _AGE,
                ),
            ),
        ),
    )
)

AWS_MACHINE_POOL_TEMPLATE = register_kind(
    KindInfo(
        group=GROUP,
        kind="AWSMachinePoolTemplate",
        plural="awsmachinepooltemplates",
        singular="awsmachinepooltemplate",
        categories=("cluster-api",),
        labels=_LABELS,
        versions=(
            VersionInfo(
                name=c.V1BETA2,
                model=AWSMachinePoolTemplate,
                storage=True,
                status_subresource=False,
                printer_columns=(_AGE,),
            ),
        ),
    )
)

AWSMACHINEPOOLS = AWS_MACHINE_POOL.resource()
AWS_MACHINE_POOL_TEMPLATES = AWS_MACHINE_POOL_TEMPLATE.resource()
AWSMACHINES = AWS_MACHINE.resource()
