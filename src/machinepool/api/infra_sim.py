"""Typed ``infrastructure.cluster.x-k8s.io/v1beta2`` SimMachinePool and SimMachine.

The simulated infrastructure provider (``machinepool.providers.sim``) reconciles these: a
SimMachinePool is a pool of simulated instances serving one MachinePool, a SimMachine is one
of its instances (so core creates a MachinePool Machine for it). The CRDs carry the contract
label ``cluster.x-k8s.io/v1beta2: v1beta2``. Failure domains come from the MachinePool's
``spec.failureDomains`` (as upstream providers read them), not from this object.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from machinepool.api import constants as c
from machinepool.api.meta import (
    IntOrString,
    K8sModel,
    MetaCondition,
    ObjectMeta,
    OpenAPI,
    format_time,
    list_map,
    parse_time,
)
from machinepool.api.registry import KindInfo, PrinterColumn, VersionInfo, register_kind

__all__ = [
    "INSTANCE_LABEL",
    "INSTANCE_SECRET_TYPE",
    "KUBELET_ANNOTATION",
    "POOL_ANNOTATION",
    "POOL_LABEL",
    "SIM_MACHINE",
    "SIM_MACHINE_POOL",
    "SIM_PROVIDER_NAME",
    "STATE_ANNOTATION",
    "STATE_REASON_ANNOTATION",
    "InstanceRecord",
    "SimInstanceStatus",
    "SimMachine",
    "SimMachinePool",
    "SimMachinePoolSpec",
    "SimMachinePoolStatus",
    "SimMachineSpec",
    "SimMachineStatus",
    "SimPoolStrategy",
    "SimRollingUpdate",
    "SimSettings",
    "SimTemplate",
    "provider_id",
    "user_data",
]

GROUP_VERSION = "infrastructure.cluster.x-k8s.io/v1beta2"
SIM_PROVIDER_NAME = "infrastructure-sim"

_Int32 = Annotated[int | None, OpenAPI({"format": "int32"})]
_Conditions = Annotated[list[MetaCondition] | None, list_map("type"), Field(max_length=32)]
_ProviderID = Annotated[str, Field(min_length=1, max_length=512)]


class SimTemplate(K8sModel):
    """What each instance looks like; a change replaces instances (rolling update)."""

    instance_type: Annotated[str | None, Field(max_length=256)] = None
    """Simulated instance shape, e.g. small."""
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

    type: Literal["RollingUpdate"] | None = None
    """Only RollingUpdate."""
    rolling_update: SimRollingUpdate | None = None
    """Rolling update settings."""


class SimSettings(K8sModel):
    """How the simulated cloud behaves for this pool."""

    boot_delay_seconds: Annotated[int | None, OpenAPI({"format": "int32"}), Field(ge=0)] = None
    """Seconds from creation until an instance runs. Default 0."""
    boot_failure_rate: Annotated[float | None, Field(ge=0, le=1)] = None
    """Probability (0-1) that an instance fails to boot. Default 0."""
    capacity_per_failure_domain: Annotated[
        int | None, OpenAPI({"format": "int32"}), Field(ge=0)
    ] = None
    """Most instances of this pool per failure domain; 0 or unset is unbounded."""


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


class SimInstanceStatus(K8sModel):
    """One instance of the pool."""

    instance_id: str = Field(alias="instanceID")
    """Instance id, also the name of its SimMachine and Node."""
    provider_id: str | None = Field(default=None, alias="providerID")
    """Provider ID of the instance."""
    failure_domain: str | None = None
    """Failure domain of the instance."""
    state: str | None = None
    """pending, running, failed or terminated."""
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
    infrastructure_machine_kind: str | None = None
    """SimMachine: opts in to MachinePool Machines."""
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


# --- simulated instance records ----------------------------------------------------------
# The sim provider stores each instance as a Secret; the node simulator reads them. This is
# the format both sides share, so it lives here, below both.

INSTANCE_SECRET_TYPE = "sim.infrastructure.cluster.x-k8s.io/instance"
INSTANCE_LABEL = "sim.infrastructure.cluster.x-k8s.io/instance"
"""On every instance record (value ``true``): the node simulator selects records by it."""
POOL_LABEL = "sim.infrastructure.cluster.x-k8s.io/pool"
"""The SimMachinePool name as a label value (hashed when too long)."""
POOL_ANNOTATION = "sim.infrastructure.cluster.x-k8s.io/pool-name"
"""The SimMachinePool name, exactly."""
STATE_ANNOTATION = "sim.infrastructure.cluster.x-k8s.io/state"
"""A forced state (failed, terminated) that overrides the boot clock."""
STATE_REASON_ANNOTATION = "sim.infrastructure.cluster.x-k8s.io/state-reason"
KUBELET_ANNOTATION = "sim.infrastructure.cluster.x-k8s.io/kubelet"
"""``stopped``: the instance runs but its kubelet is dead (no join, no heartbeats), a fault
for health checks; the cloud still reports the instance running."""


def provider_id(failure_domain: str, instance_id: str) -> str:
    """``sim:///<failure-domain>/<instance-id>``, the Node's spec.providerID."""
    return f"sim:///{failure_domain}/{instance_id}"


@dataclass(frozen=True)
class InstanceRecord:
    """One instance as stored; ``state_at`` gives its state at a moment."""

    namespace: str
    id: str
    pool: str
    index: int
    cluster: str
    failure_domain: str
    provider_id: str
    template_hash: str
    version: str
    created: datetime
    boot_at: datetime
    will_fail: bool
    bootstrap_version: str
    forced_state: str
    attributes: Mapping[str, str]
    uid: str = ""
    kubelet_stopped: bool = False
    """The kubelet fault is on (``KUBELET_ANNOTATION``)."""

    def state_at(self, now: datetime) -> str:
        """Forced state if any, else pending until ``boot_at``, then running (or failed)."""
        if self.forced_state in ("failed", "terminated"):
            return self.forced_state
        if now < self.boot_at:
            return "pending"
        return "failed" if self.will_fail else "running"

    @classmethod
    def from_secret(cls, secret: dict[str, Any]) -> InstanceRecord:
        meta = secret.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        raw = (secret.get("data") or {}).get("instance.json", "")
        info: dict[str, Any] = json.loads(base64.b64decode(raw) or b"{}")
        return cls(
            namespace=str(meta.get("namespace", "")),
            id=str(meta.get("name", "")),
            pool=str(annotations.get(POOL_ANNOTATION, info.get("pool", ""))),
            index=int(info.get("index", 0)),
            cluster=str(info.get("cluster", "")),
            failure_domain=str(info.get("failureDomain", "")),
            provider_id=str(info.get("providerID", "")),
            template_hash=str(info.get("templateHash", "")),
            version=str(info.get("version", "")),
            created=parse_time(str(info.get("createdAt", "1970-01-01T00:00:00Z"))),
            boot_at=parse_time(str(info.get("bootAt", "1970-01-01T00:00:00Z"))),
            will_fail=bool(info.get("willFail", False)),
            bootstrap_version=str(info.get("bootstrapVersion", "")),
            forced_state=str(annotations.get(STATE_ANNOTATION, "")),
            kubelet_stopped=annotations.get(KUBELET_ANNOTATION) == "stopped",
            attributes=dict(info.get("attributes") or {}),
            uid=str(meta.get("uid", "")),
        )

    def info(self) -> dict[str, Any]:
        """The immutable facts, as stored in ``instance.json``."""
        return {
            "pool": self.pool,
            "index": self.index,
            "cluster": self.cluster,
            "failureDomain": self.failure_domain,
            "providerID": self.provider_id,
            "templateHash": self.template_hash,
            "version": self.version,
            "createdAt": format_time(self.created),
            "bootAt": format_time(self.boot_at),
            "willFail": self.will_fail,
            "bootstrapVersion": self.bootstrap_version,
            "attributes": dict(self.attributes),
        }


def user_data(secret: dict[str, Any]) -> bytes:
    """The bootstrap data an instance booted with (secret: never log it)."""
    raw = (secret.get("data") or {}).get("userdata", "")
    return base64.b64decode(raw) if raw else b""
