"""Typed ``MachineHealthCheck``: v1beta2 (storage, the hub) and v1beta1 (served, deprecated).

A MachineHealthCheck names Machines by label selector within one Cluster and says when they
are unhealthy (a Node condition held too long, no Node after a startup timeout, a Machine
condition held too long) and when remediation may proceed (``triggerIf``). Field names,
bounds and validation follow upstream Cluster API v1.14, so upstream manifests and clients
work unchanged (``tests/integration/webhooks/test_upstream_schema.py`` compares the CRDs).
The controller is ``machinepool.controllers.machinehealthcheck``; conversion between the two
versions is ``machinepool.webhooks.healthcheck``.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field

from machinepool.api.meta import (
    IntOrString,
    K8sModel,
    MetaCondition,
    ObjectMeta,
    ObjectReference,
    OpenAPI,
    V1Beta1Condition,
    list_map,
)

__all__ = [
    "DEFAULT_NODE_STARTUP_TIMEOUT_SECONDS",
    "IntOrPercentError",
    "LabelSelector",
    "LabelSelectorRequirement",
    "MachineHealthCheck",
    "MachineHealthCheckChecks",
    "MachineHealthCheckRemediation",
    "MachineHealthCheckRemediationTemplateReference",
    "MachineHealthCheckRemediationTriggerIf",
    "MachineHealthCheckSpec",
    "MachineHealthCheckStatus",
    "UnhealthyMachineCondition",
    "UnhealthyNodeCondition",
    "V1Beta1MachineHealthCheck",
    "V1Beta1MachineHealthCheckSpec",
    "V1Beta1MachineHealthCheckStatus",
    "parse_unhealthy_range",
    "scaled_int_or_percent",
]

DEFAULT_NODE_STARTUP_TIMEOUT_SECONDS = 600
"""What the defaulting webhook writes into ``checks.nodeStartupTimeoutSeconds`` (upstream's)."""

_Int32Min0 = Annotated[int | None, OpenAPI({"format": "int32"}), Field(ge=0)]
_Timeout = Annotated[int, OpenAPI({"format": "int32"}), Field(ge=0)]
_MIN_ONE_PROPERTY = OpenAPI({"minProperties": 1})
_ATOMIC = OpenAPI({"x-kubernetes-list-type": "atomic"})
_RESERVED_MACHINE_CONDITIONS = (
    "Ready",
    "Available",
    "HealthCheckSucceeded",
    "OwnerRemediated",
    "ExternallyRemediated",
)
_MACHINE_CONDITION_TYPE = Annotated[
    str,
    Field(
        min_length=1,
        max_length=316,
        pattern=(
            r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
        ),
    ),
    # The conditions the health check itself writes (or Ready/Available, which it would
    # chase forever): a check on them could never settle.
    OpenAPI(
        {
            "x-kubernetes-validations": [
                {
                    "rule": "!(self in ["
                    + ",".join(f"'{t}'" for t in _RESERVED_MACHINE_CONDITIONS)
                    + "])",
                    "message": "type must not be one of: "
                    + ", ".join(_RESERVED_MACHINE_CONDITIONS),
                }
            ]
        }
    ),
]
_UNHEALTHY_RANGE = Annotated[
    str | None, Field(min_length=1, max_length=32, pattern=r"^\[[0-9]+-[0-9]+\]$")
]


class LabelSelectorRequirement(K8sModel):
    """One ``key operator values`` term of a label selector."""

    key: str
    """The label key."""
    operator: str
    """In, NotIn, Exists or DoesNotExist."""
    values: Annotated[list[str] | None, _ATOMIC] = None
    """Values for In and NotIn; empty for Exists and DoesNotExist."""


class LabelSelector(K8sModel):
    """A metav1.LabelSelector: every term must match (an empty selector is refused)."""

    match_labels: dict[str, str] | None = None
    """Labels that must be present with these values."""
    match_expressions: Annotated[list[LabelSelectorRequirement] | None, _ATOMIC] = None
    """Further requirements."""


_Selector = Annotated[LabelSelector, OpenAPI({"x-kubernetes-map-type": "atomic"})]


# --- v1beta2 -------------------------------------------------------------------------------


class UnhealthyNodeCondition(K8sModel):
    """A Node condition that, held for ``timeoutSeconds``, makes the Machine unhealthy."""

    type: Annotated[str, Field(min_length=1)]
    """Node condition type, e.g. Ready."""
    status: Annotated[str, Field(min_length=1)]
    """The unhealthy status: True, False or Unknown."""
    timeout_seconds: _Timeout
    """How long the condition may hold before the Machine is unhealthy."""


class UnhealthyMachineCondition(K8sModel):
    """A Machine condition that, held for ``timeoutSeconds``, makes the Machine unhealthy."""

    type: _MACHINE_CONDITION_TYPE
    """Machine condition type; not Ready, Available or a condition the check writes itself."""
    status: Literal["True", "False", "Unknown"]
    """The unhealthy status."""
    timeout_seconds: _Timeout
    """How long the condition may hold before the Machine is unhealthy."""


class MachineHealthCheckChecks(K8sModel):
    """When a Machine counts as unhealthy."""

    node_startup_timeout_seconds: _Int32Min0 = None
    """A Machine without a Node this long is unhealthy; defaults to 600, 0 disables."""
    unhealthy_node_conditions: Annotated[
        list[UnhealthyNodeCondition] | None, _ATOMIC, Field(min_length=1, max_length=100)
    ] = None
    """Node conditions that make the Machine unhealthy (any one is enough)."""
    unhealthy_machine_conditions: Annotated[
        list[UnhealthyMachineCondition] | None, _ATOMIC, Field(min_length=1, max_length=100)
    ] = None
    """Machine conditions that make the Machine unhealthy (any one is enough)."""


class MachineHealthCheckRemediationTriggerIf(K8sModel):
    """When unhealthy Machines may be remediated at all (a brake against mass failures)."""

    unhealthy_less_than_or_equal_to: IntOrString | None = None
    """Remediate only while at most this many targets (a number or a percentage) are
    unhealthy; defaults to 100%."""
    unhealthy_in_range: _UNHEALTHY_RANGE = None
    """Remediate only while the unhealthy count is within "[min-max]"; wins over the above."""


class MachineHealthCheckRemediationTemplateReference(K8sModel):
    """An external remediation template (accepted; reported as unsupported by our controller)."""

    kind: Annotated[
        str, Field(min_length=1, max_length=63, pattern=r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$")
    ]
    """Kind of the template."""
    name: Annotated[
        str,
        Field(
            min_length=1,
            max_length=253,
            pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        ),
    ]
    """Name of the template, in the MachineHealthCheck's namespace."""
    api_version: Annotated[
        str,
        Field(
            min_length=1,
            max_length=317,
            pattern=(
                r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
                r"\/[a-z]([-a-z0-9]*[a-z0-9])?$"
            ),
        ),
    ]
    """group/version of the template."""


class MachineHealthCheckRemediation(K8sModel):
    """How unhealthy Machines are remediated."""

    trigger_if: Annotated[MachineHealthCheckRemediationTriggerIf | None, _MIN_ONE_PROPERTY] = None
    """When remediation may proceed."""
    template_ref: MachineHealthCheckRemediationTemplateReference | None = None
    """External remediation; without it the Machine's owner remediates (deletes) it."""


class MachineHealthCheckSpec(K8sModel):
    """The desired state of a MachineHealthCheck."""

    cluster_name: Annotated[str, Field(min_length=1, max_length=63)]
    """Name of the Cluster whose Machines are checked; immutable."""
    selector: _Selector
    """Which Machines of that Cluster are checked; must not be empty."""
    checks: Annotated[MachineHealthCheckChecks | None, _MIN_ONE_PROPERTY] = None
    """When a Machine is unhealthy."""
    remediation: Annotated[MachineHealthCheckRemediation | None, _MIN_ONE_PROPERTY] = None
    """When and how unhealthy Machines are remediated."""


class MachineHealthCheckV1Beta1DeprecatedStatus(K8sModel):
    """v1beta1-era status kept for conversion."""

    conditions: list[V1Beta1Condition] | None = None
    """v1beta1 conditions (with severity)."""


class MachineHealthCheckDeprecatedStatus(K8sModel):
    """Container of deprecated status groups."""

    v1beta1: MachineHealthCheckV1Beta1DeprecatedStatus | None = None
    """Fields that exist only for v1beta1 clients."""


class MachineHealthCheckStatus(K8sModel):
    """The observed state of a MachineHealthCheck."""

    conditions: Annotated[list[MetaCondition] | None, list_map("type"), Field(max_length=32)] = None
    """RemediationAllowed and Paused."""
    expected_machines: _Int32Min0 = None
    """Machines the selector matches (the targets)."""
    current_healthy: _Int32Min0 = None
    """Targets that passed every check."""
    remediations_allowed: _Int32Min0 = None
    """How many more targets could become unhealthy before remediation stops."""
    observed_generation: Annotated[int | None, OpenAPI({"format": "int64"}), Field(ge=1)] = None
    """Generation last fully reconciled."""
    targets: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=253)]] | None,
        _ATOMIC,
        Field(max_length=10000),
    ] = None
    """Names of the targets, sorted."""
    deprecated: MachineHealthCheckDeprecatedStatus | None = None
    """Deprecated status groups."""


class MachineHealthCheck(K8sModel):
    """Health checks for the Machines of one Cluster, and the brake on their remediation."""

    api_version: str = "cluster.x-k8s.io/v1beta2"
    kind: str = "MachineHealthCheck"
    metadata: ObjectMeta | None = None
    spec: MachineHealthCheckSpec | None = None
    """Desired state."""
    status: Annotated[MachineHealthCheckStatus | None, _MIN_ONE_PROPERTY] = None
    """Observed state."""


# --- v1beta1 -------------------------------------------------------------------------------


class V1Beta1UnhealthyCondition(K8sModel):
    """v1beta1 Node condition check: the timeout is a duration."""

    type: Annotated[str, Field(min_length=1)]
    """Node condition type."""
    status: Annotated[str, Field(min_length=1)]
    """The unhealthy status."""
    timeout: str
    """How long it may hold, e.g. 5m."""


class V1Beta1UnhealthyMachineCondition(K8sModel):
    """v1beta1 Machine condition check: the timeout is a duration."""

    type: _MACHINE_CONDITION_TYPE | None = None
    """Machine condition type."""
    status: Literal["True", "False", "Unknown"] | None = None
    """The unhealthy status."""
    timeout: str
    """How long it may hold, e.g. 5m."""


class V1Beta1MachineHealthCheckSpec(K8sModel):
    """The v1beta1 spec: flat fields, durations instead of seconds."""

    cluster_name: Annotated[str, Field(min_length=1, max_length=63)]
    """Name of the Cluster."""
    selector: _Selector
    """Which Machines are checked."""
    unhealthy_conditions: Annotated[
        list[V1Beta1UnhealthyCondition] | None, Field(max_length=100)
    ] = None
    """Node condition checks."""
    unhealthy_machine_conditions: Annotated[
        list[V1Beta1UnhealthyMachineCondition] | None, Field(min_length=1, max_length=100)
    ] = None
    """Machine condition checks."""
    max_unhealthy: IntOrString | None = None
    """v1beta2 remediation.triggerIf.unhealthyLessThanOrEqualTo."""
    unhealthy_range: _UNHEALTHY_RANGE = None
    """v1beta2 remediation.triggerIf.unhealthyInRange."""
    node_startup_timeout: str | None = None
    """v1beta2 checks.nodeStartupTimeoutSeconds, as a duration."""
    remediation_template: ObjectReference | None = None
    """v1beta2 remediation.templateRef."""


class V1Beta1MachineHealthCheckV1Beta2Status(K8sModel):
    """v1beta2 conditions carried inside a v1beta1 object."""

    conditions: Annotated[list[MetaCondition] | None, list_map("type"), Field(max_length=32)] = None
    """v1beta2 conditions."""


class V1Beta1MachineHealthCheckStatus(K8sModel):
    """The v1beta1 status: v1beta1 conditions on top, v1beta2 ones under ``v1beta2``."""

    expected_machines: _Int32Min0 = None
    """Machines the selector matches."""
    current_healthy: _Int32Min0 = None
    """Targets that passed every check."""
    remediations_allowed: _Int32Min0 = None
    """Remaining remediation budget."""
    observed_generation: Annotated[int | None, OpenAPI({"format": "int64"})] = None
    """Generation last reconciled."""
    targets: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=253)]] | None, Field(max_length=10000)
    ] = None
    """Names of the targets."""
    conditions: list[V1Beta1Condition] | None = None
    """v1beta1 conditions."""
    v1beta2: V1Beta1MachineHealthCheckV1Beta2Status | None = None
    """v1beta2 conditions."""


class V1Beta1MachineHealthCheck(K8sModel):
    """A MachineHealthCheck as v1beta1 clients see it."""

    api_version: str = "cluster.x-k8s.io/v1beta1"
    kind: str = "MachineHealthCheck"
    metadata: ObjectMeta | None = None
    spec: V1Beta1MachineHealthCheckSpec | None = None
    """Desired state."""
    status: V1Beta1MachineHealthCheckStatus | None = None
    """Observed state."""


# --- shared helpers (webhook and controller) -----------------------------------------------


class IntOrPercentError(ValueError):
    """An int-or-string that is neither an integer nor "<integer>%"; worded as apimachinery."""


def scaled_int_or_percent(value: int | str, total: int, *, round_up: bool = False) -> int:
    """apimachinery's ``GetScaledValueFromIntOrPercent``: an int as is, "N%" of ``total``.

    Unlike the pool engine's ``maxSurge`` parsing, a bare digit string is refused, as upstream
    refuses it for ``unhealthyLessThanOrEqualTo``.

    >>> scaled_int_or_percent("40%", 5)
    2
    """
    if isinstance(value, bool):
        raise IntOrPercentError(
            "invalid value for IntOrString: invalid type: neither int nor percentage"
        )
    if isinstance(value, int):
        return value
    if not value.endswith("%"):
        raise IntOrPercentError(
            "invalid value for IntOrString: invalid type: string is not a percentage"
        )
    digits = value[:-1]
    if not re.fullmatch(r"[+-]?[0-9]+", digits):
        raise IntOrPercentError(
            f'invalid value for IntOrString: invalid value "{value}": '
            f'strconv.Atoi: parsing "{digits}": invalid syntax'
        )
    percent = int(digits)
    scaled = percent * total
    return -(-scaled // 100) if round_up else scaled // 100


def parse_unhealthy_range(text: str) -> tuple[int, int]:
    """``"[min-max]"`` as ``(min, max)``; ``ValueError`` naming the fix when malformed."""
    inner = text[1:-1] if text.startswith("[") and text.endswith("]") else ""
    low, sep, high = inner.partition("-")
    if not sep or not low.isdigit() or not high.isdigit():
        raise ValueError(f"unhealthyInRange {text!r} is not of the form [min-max], e.g. [1-3]")
    if int(high) < int(low):
        raise ValueError(f"max value {high} cannot be less than min value {low} for unhealthyRange")
    return int(low), int(high)
