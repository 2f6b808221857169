"""Every label, annotation, finalizer, taint, condition type and reason the system uses.

Values match upstream Cluster API so that upstream tools (clusterctl, the cluster
autoscaler, providers) see the same keys. Import names from here instead of spelling the
strings out, so a grep finds every reader and writer.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Final

# --- groups, versions, contract -----------------------------------------------------------

CLUSTER_GROUP: Final = "cluster.x-k8s.io"
BOOTSTRAP_GROUP: Final = "bootstrap.cluster.x-k8s.io"
INFRASTRUCTURE_GROUP: Final = "infrastructure.cluster.x-k8s.io"
CONTROLPLANE_GROUP: Final = "controlplane.cluster.x-k8s.io"
V1BETA1: Final = "v1beta1"
V1BETA2: Final = "v1beta2"
CONTRACT_VERSION: Final = "v1beta2"
"""The Cluster API contract this implementation speaks."""
CONTRACT_LABEL_PREFIX: Final = "cluster.x-k8s.io/"
"""CRDs carry ``cluster.x-k8s.io/<contract>: <versions>`` to say which API version serves it."""
CONTRACT_LABEL: Final = CONTRACT_LABEL_PREFIX + CONTRACT_VERSION
PROVIDER_LABEL: Final = "cluster.x-k8s.io/provider"
"""clusterctl groups a provider's components by this label."""
CORE_PROVIDER_NAME: Final = "cluster-api"
KUBEADM_BOOTSTRAP_PROVIDER_NAME: Final = "bootstrap-kubeadm"

# --- labels -------------------------------------------------------------------------------

CLUSTER_NAME_LABEL: Final = "cluster.x-k8s.io/cluster-name"
POOL_NAME_LABEL: Final = "cluster.x-k8s.io/pool-name"
"""The MachinePool name, or its hash when not a valid label value (pool_name_label_value)."""
CONTROL_PLANE_LABEL: Final = "cluster.x-k8s.io/control-plane"
WATCH_FILTER_LABEL: Final = "cluster.x-k8s.io/watch-filter"
SHARD_LABEL_PREFIX: Final = "shard.machinepool.cluster.x-k8s.io"
"""Not upstream: ``<prefix>/<ring>`` names the replica of the sharded manager ``<ring>`` (its
``--name``) that reconciles the object. One key per ring, so the core's and a provider's
separately sharded Deployments each label the kinds they reconcile without clashing."""
SHARD_DRAIN_LABEL_PREFIX: Final = "drain.machinepool.cluster.x-k8s.io"
"""Not upstream: ``<prefix>/<ring>``, set while an object moves away from its shard."""
SHARD_RING_LABEL: Final = "machinepool.cluster.x-k8s.io/shard-ring"
"""Not upstream: on a shard Lease, the name of the sharded manager it belongs to."""
INTERRUPTIBLE_LABEL: Final = "cluster.x-k8s.io/interruptible"

# --- annotations --------------------------------------------------------------------------

PAUSED_ANNOTATION: Final = "cluster.x-k8s.io/paused"
DELETE_FOR_MOVE_ANNOTATION: Final = "clusterctl.cluster.x-k8s.io/delete-for-move"
"""Set by ``clusterctl move`` on each source object just before deleting it: the object lives
on in the target management cluster, so what it stands for (a Node, an instance) must stay
(``api.meta.deleted_for_move``)."""
REPLICAS_MANAGED_BY_ANNOTATION: Final = "cluster.x-k8s.io/replicas-managed-by"
"""Set (to anything but "false") when something outside Cluster API owns the replica count."""
AUTOSCALER_MIN_SIZE_ANNOTATION: Final = (
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
)
AUTOSCALER_MAX_SIZE_ANNOTATION: Final = (
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
)
DELETE_MACHINE_ANNOTATION: Final = "cluster.x-k8s.io/delete-machine"
"""Marks a Machine to be removed first on scale-down."""
AUTOSCALER_CAPACITY_ANNOTATION_PREFIX: Final = "capacity.cluster-autoscaler.kubernetes.io/"
CONVERSION_DATA_ANNOTATION: Final = "cluster.x-k8s.io/conversion-data"
"""What one API version cannot hold, kept as JSON by the conversion webhook for the way back."""

# Annotations the controller writes on workload Nodes.
NODE_CLUSTER_NAME_ANNOTATION: Final = "cluster.x-k8s.io/cluster-name"
NODE_CLUSTER_NAMESPACE_ANNOTATION: Final = "cluster.x-k8s.io/cluster-namespace"
NODE_OWNER_KIND_ANNOTATION: Final = "cluster.x-k8s.io/owner-kind"
NODE_OWNER_NAME_ANNOTATION: Final = "cluster.x-k8s.io/owner-name"
NODE_MACHINE_ANNOTATION: Final = "cluster.x-k8s.io/machine"
LABELS_FROM_MACHINE_ANNOTATION: Final = "cluster.x-k8s.io/labels-from-machine"
"""On a Node: the label keys the Machine controller synced from the Machine, comma-separated."""
ANNOTATIONS_FROM_MACHINE_ANNOTATION: Final = "cluster.x-k8s.io/annotations-from-machine"
"""On a Node: the annotation keys synced from the Machine (bookkeeping ones left out)."""
NODE_ROLE_LABEL_PREFIX: Final = "node-role.kubernetes.io"
NODE_RESTRICTION_LABEL_DOMAIN: Final = "node-restriction.kubernetes.io"
MANAGED_NODE_DOMAIN: Final = "node.cluster.x-k8s.io"
"""Machine labels and annotations under this domain (or a subdomain) are copied to the Node."""

TAINTS_FROM_POOL_ANNOTATION: Final = "machinepool.cluster.x-k8s.io/taints-from-pool"
"""On a pool's Node (gate ``MachinePoolNodeTaints``): the ``key:effect`` of each ``Always``
taint the core put there from the pool's template, comma-separated; its presence also says the
``OnInitialization`` taints were given once. Our group, not upstream's
``cluster.x-k8s.io/taints-from-machine``, so upstream's Machine controller never takes these
taints for its own and removes them."""
LABELS_FROM_POOL_ANNOTATION: Final = "machinepool.cluster.x-k8s.io/labels-from-pool"
"""On a pool's Node (gate ``MachinePoolNodeTaints``): the label keys the core synced from the
pool's template labels, comma-separated."""

EXCLUDE_NODE_DRAINING_ANNOTATION: Final = "machine.cluster.x-k8s.io/exclude-node-draining"
POD_DRAIN_LABEL: Final = "cluster.x-k8s.io/drain"
"""On a workload Pod: ``skip`` (not evicted, not waited for) or ``wait-completed`` (not
evicted; the drain waits until it is gone from the Node)."""
EXCLUDE_WAIT_FOR_NODE_VOLUME_DETACH_ANNOTATION: Final = (
    "machine.cluster.x-k8s.io/exclude-wait-for-node-volume-detach"
)
PRE_DRAIN_DELETE_HOOK_ANNOTATION_PREFIX: Final = "pre-drain.delete.hook.machine.cluster.x-k8s.io"
PRE_TERMINATE_DELETE_HOOK_ANNOTATION_PREFIX: Final = (
    "pre-terminate.delete.hook.machine.cluster.x-k8s.io"
)

# --- finalizers and taints ----------------------------------------------------------------

MACHINE_POOL_FINALIZER: Final = "machinepool.cluster.x-k8s.io"
MACHINE_FINALIZER: Final = "machine.cluster.x-k8s.io"
UNINITIALIZED_TAINT_KEY: Final = "node.cluster.x-k8s.io/uninitialized"
UNINITIALIZED_TAINT_EFFECT: Final = "NoSchedule"
OUTDATED_REVISION_TAINT_KEY: Final = "node.cluster.x-k8s.io/outdated-revision"

# --- v1beta2 condition types (metav1.Condition) -------------------------------------------

AVAILABLE_CONDITION: Final = "Available"
READY_CONDITION: Final = "Ready"
UP_TO_DATE_CONDITION: Final = "UpToDate"
BOOTSTRAP_CONFIG_READY_CONDITION: Final = "BootstrapConfigReady"
INFRASTRUCTURE_READY_CONDITION: Final = "InfrastructureReady"
MACHINES_READY_CONDITION: Final = "MachinesReady"
MACHINES_UP_TO_DATE_CONDITION: Final = "MachinesUpToDate"
ROLLING_OUT_CONDITION: Final = "RollingOut"
SCALING_UP_CONDITION: Final = "ScalingUp"
SCALING_DOWN_CONDITION: Final = "ScalingDown"
REMEDIATING_CONDITION: Final = "Remediating"
DELETING_CONDITION: Final = "Deleting"
PAUSED_CONDITION: Final = "Paused"
CONTROL_PLANE_INITIALIZED_CONDITION: Final = "ControlPlaneInitialized"
NODE_READY_CONDITION: Final = "NodeReady"
NODE_HEALTHY_CONDITION: Final = "NodeHealthy"
DATA_SECRET_AVAILABLE_CONDITION: Final = "DataSecretAvailable"
CERTIFICATES_AVAILABLE_CONDITION: Final = "CertificatesAvailable"

MACHINE_POOL_CONDITIONS: Final = (
    AVAILABLE_CONDITION,
    BOOTSTRAP_CONFIG_READY_CONDITION,
    INFRASTRUCTURE_READY_CONDITION,
    MACHINES_READY_CONDITION,
    MACHINES_UP_TO_DATE_CONDITION,
    ROLLING_OUT_CONDITION,
    SCALING_UP_CONDITION,
    SCALING_DOWN_CONDITION,
    REMEDIATING_CONDITION,
    DELETING_CONDITION,
    PAUSED_CONDITION,
)
"""The condition types a MachinePool reports, in the order they are written (RollingOut only
for a pool rolled by the core: ``controllers.machinepool.rollout``)."""

# --- v1beta2 reasons ----------------------------------------------------------------------

AVAILABLE_REASON: Final = "Available"
NOT_AVAILABLE_REASON: Final = "NotAvailable"
AVAILABLE_UNKNOWN_REASON: Final = "AvailableUnknown"
READY_REASON: Final = "Ready"
NOT_READY_REASON: Final = "NotReady"
READY_UNKNOWN_REASON: Final = "ReadyUnknown"
UP_TO_DATE_REASON: Final = "UpToDate"
NOT_UP_TO_DATE_REASON: Final = "NotUpToDate"
UP_TO_DATE_UNKNOWN_REASON: Final = "UpToDateUnknown"
ROLLING_OUT_REASON: Final = "RollingOut"
NOT_ROLLING_OUT_REASON: Final = "NotRollingOut"
SCALING_UP_REASON: Final = "ScalingUp"
NOT_SCALING_UP_REASON: Final = "NotScalingUp"
SCALING_DOWN_REASON: Final = "ScalingDown"
NOT_SCALING_DOWN_REASON: Final = "NotScalingDown"
REMEDIATING_REASON: Final = "Remediating"
NOT_REMEDIATING_REASON: Final = "NotRemediating"
NO_REPLICAS_REASON: Final = "NoReplicas"
WAITING_FOR_REPLICAS_SET_REASON: Final = "WaitingForReplicasSet"
INVALID_CONDITION_REPORTED_REASON: Final = "InvalidConditionReported"
INTERNAL_ERROR_REASON: Final = "InternalError"
OBJECT_DOES_NOT_EXIST_REASON: Final = "ObjectDoesNotExist"
OBJECT_DELETED_REASON: Final = "ObjectDeleted"
PAUSED_REASON: Final = "Paused"
NOT_PAUSED_REASON: Final = "NotPaused"
CONNECTION_DOWN_REASON: Final = "ConnectionDown"
DELETING_REASON: Final = "Deleting"
NOT_DELETING_REASON: Final = "NotDeleting"
DELETION_COMPLETED_REASON: Final = "DeletionCompleted"
INSPECTION_FAILED_REASON: Final = "InspectionFailed"
WAITING_FOR_CLUSTER_INFRASTRUCTURE_READY_REASON: Final = "WaitingForClusterInfrastructureReady"
WAITING_FOR_CONTROL_PLANE_INITIALIZED_REASON: Final = "WaitingForControlPlaneInitialized"
WAITING_FOR_BOOTSTRAP_DATA_REASON: Final = "WaitingForBootstrapData"
PROVISIONED_REASON: Final = "Provisioned"
NOT_PROVISIONED_REASON: Final = "NotProvisioned"
BOOTSTRAP_DATA_SECRET_PROVIDED_REASON: Final = "DataSecretProvided"
WAITING_FOR_MIN_READY_SECONDS_REASON: Final = "WaitingForMinReadySeconds"
# Machine deletion progress.
WAITING_FOR_PRE_DRAIN_HOOK_REASON: Final = "WaitingForPreDrainHook"
DRAINING_NODE_REASON: Final = "DrainingNode"
WAITING_FOR_VOLUME_DETACH_REASON: Final = "WaitingForVolumeDetach"
WAITING_FOR_PRE_TERMINATE_HOOK_REASON: Final = "WaitingForPreTerminateHook"
WAITING_FOR_INFRASTRUCTURE_DELETION_REASON: Final = "WaitingForInfrastructureDeletion"
WAITING_FOR_BOOTSTRAP_DELETION_REASON: Final = "WaitingForBootstrapDeletion"
DELETING_NODE_REASON: Final = "DeletingNode"
# Node conditions of a Machine.
NODE_DOES_NOT_EXIST_REASON: Final = "NodeDoesNotExist"
NODE_READY_REASON: Final = "NodeReady"
NODE_NOT_READY_REASON: Final = "NodeNotReady"
NODE_READY_UNKNOWN_REASON: Final = "NodeReadyUnknown"
NODE_HEALTHY_REASON: Final = "NodeHealthy"
NODE_NOT_HEALTHY_REASON: Final = "NodeNotHealthy"
NODE_HEALTH_UNKNOWN_REASON: Final = "NodeHealthyUnknown"
NO_REASON_REPORTED: Final = "NoReasonReported"
"""What upstream's condition getter says of a condition with an empty reason."""
UPDATING_CONDITION: Final = "Updating"
NOT_UPDATING_REASON: Final = "NotUpdating"
NODE_DELETED_REASON: Final = "NodeDeleted"

# --- v1beta1 condition types and reasons (with severity) ----------------------------------

V1BETA1_READY_CONDITION: Final = "Ready"
V1BETA1_BOOTSTRAP_READY_CONDITION: Final = "BootstrapReady"
V1BETA1_INFRASTRUCTURE_READY_CONDITION: Final = "InfrastructureReady"
V1BETA1_REPLICAS_READY_CONDITION: Final = "ReplicasReady"
V1BETA1_CONTROL_PLANE_INITIALIZED_CONDITION: Final = "ControlPlaneInitialized"
V1BETA1_DATA_SECRET_AVAILABLE_CONDITION: Final = "DataSecretAvailable"
V1BETA1_DRAINING_SUCCEEDED_CONDITION: Final = "DrainingSucceeded"
V1BETA1_VOLUME_DETACH_SUCCEEDED_CONDITION: Final = "VolumeDetachSucceeded"
V1BETA1_PRE_DRAIN_DELETE_HOOK_SUCCEEDED_CONDITION: Final = "PreDrainDeleteHookSucceeded"
V1BETA1_PRE_TERMINATE_DELETE_HOOK_SUCCEEDED_CONDITION: Final = "PreTerminateDeleteHookSucceeded"
V1BETA1_NODE_HEALTHY_CONDITION: Final = "NodeHealthy"
V1BETA1_HEALTH_CHECK_SUCCEEDED_CONDITION: Final = "HealthCheckSucceeded"
V1BETA1_OWNER_REMEDIATED_CONDITION: Final = "OwnerRemediated"

V1BETA1_WAITING_FOR_REPLICAS_READY_REASON: Final = "WaitingForReplicasReady"
V1BETA1_WAITING_FOR_DATA_SECRET_FALLBACK_REASON: Final = "WaitingForDataSecret"
V1BETA1_WAITING_FOR_INFRASTRUCTURE_FALLBACK_REASON: Final = "WaitingForInfrastructure"
V1BETA1_DELETING_REASON: Final = "Deleting"
V1BETA1_DELETION_FAILED_REASON: Final = "DeletionFailed"
V1BETA1_DELETED_REASON: Final = "Deleted"
V1BETA1_INCORRECT_EXTERNAL_REF_REASON: Final = "IncorrectExternalRef"
V1BETA1_DRAINING_REASON: Final = "Draining"
V1BETA1_DRAINING_FAILED_REASON: Final = "DrainingFailed"
V1BETA1_WAITING_FOR_VOLUME_DETACH_REASON: Final = "WaitingForVolumeDetach"
V1BETA1_WAITING_EXTERNAL_HOOK_REASON: Final = "WaitingExternalHook"
V1BETA1_WAITING_FOR_NODE_REF_REASON: Final = "WaitingForNodeRef"
V1BETA1_NODE_PROVISIONING_REASON: Final = "NodeProvisioning"
V1BETA1_NODE_CONDITIONS_FAILED_REASON: Final = "NodeConditionsFailed"
INVALID_CONFIGURATION_ERROR: Final = "InvalidConfiguration"
"""The v1beta1 ``failureReason`` of an object whose spec can never work as it is."""

SEVERITY_ERROR: Final = "Error"
SEVERITY_WARNING: Final = "Warning"
SEVERITY_INFO: Final = "Info"

# --- MachinePool phases -------------------------------------------------------------------

PHASE_PENDING: Final = "Pending"
PHASE_PROVISIONING: Final = "Provisioning"
PHASE_PROVISIONED: Final = "Provisioned"
PHASE_RUNNING: Final = "Running"
PHASE_SCALING_UP: Final = "ScalingUp"
PHASE_SCALING_DOWN: Final = "ScalingDown"
PHASE_SCALING: Final = "Scaling"
PHASE_DELETING: Final = "Deleting"
PHASE_FAILED: Final = "Failed"
PHASE_UNKNOWN: Final = "Unknown"

DEFAULT_NODE_DELETION_TIMEOUT_SECONDS: Final = 10

# --- label value helpers ------------------------------------------------------------------

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_VALUE_MAX = 63


def is_valid_label_value(value: str) -> bool:
    """Whether ``value`` may be used as a Kubernetes label value (≤63 chars, restricted charset)."""
    return len(value) <= _LABEL_VALUE_MAX and _LABEL_VALUE.match(value) is not None


def _fnv32a(data: bytes) -> int:
    """32-bit FNV-1a, the hash upstream uses to shorten names into label values."""
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def pool_name_label_value(name: str) -> str:
    """The value of the pool-name label for a MachinePool called ``name``.

    The name itself when it is a valid label value; otherwise a short hash that upstream
    computes the same way, so selectors built by either side agree::

        >>> pool_name_label_value("workers")
        'workers'
        >>> pool_name_label_value("machineSetName" * 12)
        'hash_FR_ghQ_z'
    """
    if is_valid_label_value(name):
        return name
    digest = _fnv32a(name.encode()).to_bytes(4, "big")
    return "hash_" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode() + "_z"


def shard_label(ring: str) -> str:
    """The shard label of the sharded manager ``ring``."""
    return f"{SHARD_LABEL_PREFIX}/{ring}"


def shard_drain_label(ring: str) -> str:
    """The drain label of the sharded manager ``ring``."""
    return f"{SHARD_DRAIN_LABEL_PREFIX}/{ring}"


def inherited_labels(owner_labels: Mapping[str, str] | None) -> dict[str, str]:
    """The labels an object we create takes from the object that made it.

    The watch-filter and shard labels: a manager run with ``--watch-filter`` or
    ``--sharding`` caches only Cluster API objects so labelled, so a Machine or infra machine
    that a labelled pool creates must carry the same label, or the manager that made it could
    never see it.
    """
    labels = owner_labels or {}
    return {
        key: value
        for key, value in labels.items()
        if value and (key == WATCH_FILTER_LABEL or key.startswith(SHARD_LABEL_PREFIX + "/"))
    }


# --- rollouts by the core (ours; docs/user-guide.md "Rollouts by the core") ----------------

ROLLOUT_ANNOTATION: Final = "machinepool.cluster.x-k8s.io/rollout"
"""On a MachinePool: ``Core`` makes the core replace its outdated Machines itself, drained and
within the budgets below (the infra pool must use MachinePool Machines and leave replacing to
deleted or marked Machines, as a Sim pool with strategy OnDelete does). Any other value, or
none: the infra pool rolls, as upstream leaves it."""
ROLLOUT_CORE: Final = "Core"
ROLLOUT_MAX_SURGE_ANNOTATION: Final = "machinepool.cluster.x-k8s.io/rollout-max-surge"
"""Outdated Machines marked for replacement (serving while their replacements boot) at once;
an integer or a percentage of spec.replicas (rounds up). Default 1."""
ROLLOUT_MAX_UNAVAILABLE_ANNOTATION: Final = "machinepool.cluster.x-k8s.io/rollout-max-unavailable"
"""Ready Machines the rollout may take below spec.replicas; an integer or a percentage
(rounds down). Default 0. Both 0 is refused at admission."""
REPLACE_MACHINE_ANNOTATION: Final = "machinepool.cluster.x-k8s.io/replace-machine"
"""Set by the core's rollout on an outdated Machine it is about to replace: a pool that honours
it (ours: the pool engine) stops counting the Machine towards replicas and boots its
replacement while the Machine keeps serving; the core deletes the Machine (drained) once the
replacement is Ready. Removed again by the core when the pool no longer opts in."""


# --- health checks and remediation (MachineHealthCheck, MachinePool remediation) -----------

REMEDIATE_MACHINE_ANNOTATION: Final = "cluster.x-k8s.io/remediate-machine"
"""Set on a Machine by a user: the health check marks it unhealthy at once."""
SKIP_REMEDIATION_ANNOTATION: Final = "cluster.x-k8s.io/skip-remediation"
"""Set on a Machine by a user: the health check leaves it out of its targets."""
MAX_IN_FLIGHT_REMEDIATIONS_ANNOTATION: Final = (
    "machinepool.cluster.x-k8s.io/max-in-flight-remediations"
)
"""On a MachinePool: how many of its Machines may be remediated at once (ours, not upstream's;
see docs/user-guide.md "Health checks and remediation")."""
HEALTH_CHECK_SUCCEEDED_CONDITION: Final = "HealthCheckSucceeded"
OWNER_REMEDIATED_CONDITION: Final = "OwnerRemediated"
EXTERNALLY_REMEDIATED_CONDITION: Final = "ExternallyRemediated"
REMEDIATION_ALLOWED_CONDITION: Final = "RemediationAllowed"
HEALTH_CHECK_SUCCEEDED_REASON: Final = "HealthCheckSucceeded"
UNHEALTHY_NODE_REASON: Final = "UnhealthyNode"
UNHEALTHY_MACHINE_REASON: Final = "UnhealthyMachine"
NODE_STARTUP_TIMEOUT_REASON: Final = "NodeStartupTimeout"
HAS_REMEDIATE_ANNOTATION_REASON: Final = "HasRemediateAnnotation"
WAITING_FOR_REMEDIATION_REASON: Final = "WaitingForRemediation"
REMEDIATION_DEFERRED_REASON: Final = "RemediationDeferred"
MACHINE_DELETING_REASON: Final = "MachineDeleting"
REMEDIATION_ALLOWED_REASON: Final = "RemediationAllowed"
TOO_MANY_UNHEALTHY_REASON: Final = "TooManyUnhealthy"
REMEDIATION_TEMPLATE_NOT_SUPPORTED_REASON: Final = "RemediationTemplateNotSupported"
V1BETA1_REMEDIATION_ALLOWED_CONDITION: Final = "RemediationAllowed"
V1BETA1_NODE_NOT_FOUND_REASON: Final = "NodeNotFound"
V1BETA1_NODE_STARTUP_TIMEOUT_REASON: Final = "NodeStartupTimeout"
V1BETA1_UNHEALTHY_NODE_REASON: Final = "UnhealthyNode"
V1BETA1_UNHEALTHY_MACHINE_REASON: Final = "UnhealthyMachine"
V1BETA1_HAS_REMEDIATE_ANNOTATION_REASON: Final = "HasRemediateMachineAnnotation"
V1BETA1_TOO_MANY_UNHEALTHY_REASON: Final = "TooManyUnhealthy"
