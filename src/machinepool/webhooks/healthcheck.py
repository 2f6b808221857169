"""MachineHealthCheck admission and conversion, as upstream's MachineHealthCheck webhook does it.

The HTTPS server (``machinepool.webhooks.server``) calls ``default_machine_health_check``
(mutating webhook), ``validate_machine_health_check`` (validating webhook, create and
update) and ``to_hub`` / ``from_hub`` (conversion between v1beta1 and the v1beta2 hub). All
work on raw JSON dicts; a wrong type is left to the CRD schema to reject. Rejections raise
``AdmissionDenied`` carrying the Status upstream would return.

Conversion is lossless the way MachinePool's is (``machinepool.webhooks.conversion``): what
plain mapping cannot reproduce ("10m" written instead of "10m0s", a remediation template's
namespace or uid) travels in the ``cluster.x-k8s.io/conversion-data`` annotation.
"""

from __future__ import annotations

from typing import Any

from machinepool.api import constants as c
from machinepool.api.healthcheck import (
    DEFAULT_NODE_STARTUP_TIMEOUT_SECONDS,
    IntOrPercentError,
    scaled_int_or_percent,
)
from machinepool.api.meta import ensure, format_duration, parse_duration
from machinepool.runtime import copy_obj
from machinepool.webhooks.conversion import (
    ConversionError,
    _converts_back,
    _get,
    _split_payload,
    _store_payload,
)
from machinepool.webhooks.fielderrors import (
    FieldError,
    forbidden,
    invalid,
    invalid_status,
    label_key_errors,
    label_value_errors,
    required,
)
from machinepool.webhooks.machinepool import AdmissionDenied

__all__ = [
    "HUB_API_VERSION",
    "MIN_NODE_STARTUP_TIMEOUT_SECONDS",
    "SPOKE_API_VERSION",
    "default_machine_health_check",
    "from_hub",
    "selector_errors",
    "to_hub",
    "validate_machine_health_check",
]

Obj = dict[str, Any]

HUB_API_VERSION = f"{c.CLUSTER_GROUP}/v1beta2"
SPOKE_API_VERSION = f"{c.CLUSTER_GROUP}/v1beta1"
MIN_NODE_STARTUP_TIMEOUT_SECONDS = 30
"""Below this (0 excepted, which disables the check) a Node could not even boot in time."""
_KIND = "MachineHealthCheck"
_NS_PER_SECOND = 1_000_000_000
_INT32_MAX = 2**31 - 1
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


# --- defaulting ----------------------------------------------------------------------------


def default_machine_health_check(obj: Obj) -> Obj:
    """The defaulted copy: the cluster-name label, and nodeStartupTimeoutSeconds 600."""
    out = copy_obj(obj)
    spec = ensure(out, "spec")
    cluster_name = spec.get("clusterName")
    labels = ensure(out, "metadata", "labels")
    labels[c.CLUSTER_NAME_LABEL] = cluster_name if isinstance(cluster_name, str) else ""
    checks = ensure(spec, "checks")
    if checks.get("nodeStartupTimeoutSeconds") is None:
        checks["nodeStartupTimeoutSeconds"] = DEFAULT_NODE_STARTUP_TIMEOUT_SECONDS
    return out


# --- validation ----------------------------------------------------------------------------


def validate_machine_health_check(old: Obj | None, new: Obj) -> None:
    """Refuse an invalid create (``old`` None) or update; returns None when allowed."""
    spec = _dict(new.get("spec"))
    selector = _dict(spec.get("selector"))
    errors = selector_errors(selector, "spec.selector")
    if not errors and not selector.get("matchLabels") and not selector.get("matchExpressions"):
        errors.append(required("spec.selector", "selector must not be empty"))
    cluster_name = spec.get("clusterName", "")
    in_selector = _dict(selector.get("matchLabels")).get(c.CLUSTER_NAME_LABEL)
    if in_selector is not None and in_selector != cluster_name:
        errors.append(
            invalid(
                "spec.selector",
                selector,
                "cannot specify a cluster selector other than the one specified by ClusterName",
            )
        )
    if old is not None and _dict(old.get("spec")).get("clusterName", "") != cluster_name:
        errors.append(forbidden("spec.clusterName", "field is immutable"))
    timeout = _dict(spec.get("checks")).get("nodeStartupTimeoutSeconds")
    if isinstance(timeout, int) and timeout != 0 and timeout < MIN_NODE_STARTUP_TIMEOUT_SECONDS:
        errors.append(
            invalid(
                "spec.checks.nodeStartupTimeoutSeconds",
                timeout,
                f"must be at least {MIN_NODE_STARTUP_TIMEOUT_SECONDS}s",
            )
        )
    trigger = _dict(_dict(spec.get("remediation")).get("triggerIf"))
    limit = trigger.get("unhealthyLessThanOrEqualTo")
    if isinstance(limit, int | str):
        try:
            scaled_int_or_percent(limit, 0)
        except IntOrPercentError as err:
            errors.append(
                invalid(
                    "spec.remediation.triggerIf.unhealthyLessThanOrEqualTo",
                    str(limit),
                    f"must be either an int or a percentage: {err}",
                )
            )
    if errors:
        name = str(_dict(new.get("metadata")).get("name") or "")
        raise AdmissionDenied(invalid_status(c.CLUSTER_GROUP, _KIND, name, errors))


def selector_errors(selector: Obj, path: str) -> list[FieldError]:
    """What ``metav1.LabelSelectorAsSelector`` refuses: bad operators, values, keys."""
    errors: list[FieldError] = []
    for key, value in sorted(_dict(selector.get("matchLabels")).items()):
        errors += [invalid(f"{path}.matchLabels", key, m) for m in label_key_errors(key)]
        if isinstance(value, str):
            errors += [invalid(f"{path}.matchLabels", value, m) for m in label_value_errors(value)]
    expressions = selector.get("matchExpressions")
    for i, expr in enumerate(expressions if isinstance(expressions, list) else []):
        where = f"{path}.matchExpressions[{i}]"
        expr = _dict(expr)
        operator, values = expr.get("operator"), expr.get("values") or []
        key = str(expr.get("key", ""))
        errors += [invalid(f"{where}.key", key, m) for m in label_key_errors(key)]
        if operator not in _OPERATORS:
            errors.append(
                invalid(
                    f"{where}.operator",
                    str(operator),
                    f"not a valid label selector operator; use one of {', '.join(_OPERATORS)}",
                )
            )
        elif operator in ("In", "NotIn") and not values:
            errors.append(
                required(
                    f"{where}.values", "for 'in', 'notin' operators, values set can't be empty"
                )
            )
        elif operator in ("Exists", "DoesNotExist") and values:
            errors.append(
                forbidden(
                    f"{where}.values", "values set must be empty for exists and does not exist"
                )
            )
    return errors


# --- conversion ----------------------------------------------------------------------------

_CONDITION_LISTS = (
    ("unhealthyConditions", "unhealthyNodeConditions"),
    ("unhealthyMachineConditions", "unhealthyMachineConditions"),
)


def to_hub(spoke: Obj) -> Obj:
    """A v1beta1 MachineHealthCheck as v1beta2."""
    source, stored = _split_payload(spoke, HUB_API_VERSION)
    hub = _plain_to_hub(source)
    if stored is not None:
        candidate = {**stored, "metadata": copy_obj(source.get("metadata", {}))}
        if _converts_back(lambda: _plain_from_hub(candidate), source):
            hub = candidate
    if not _converts_back(lambda: _plain_from_hub(hub), source):
        _store_payload(hub, source)
    return hub


def from_hub(hub: Obj) -> Obj:
    """A v1beta2 MachineHealthCheck as v1beta1."""
    source, stored = _split_payload(hub, SPOKE_API_VERSION)
    spoke: Obj | None = None
    if stored is not None:
        candidate = {**stored, "metadata": copy_obj(source.get("metadata", {}))}
        if _converts_back(lambda: _plain_to_hub(candidate), source):
            spoke = candidate
    if spoke is None:
        spoke = _plain_from_hub(source)
    if not _converts_back(lambda: _plain_to_hub(spoke), source):
        _store_payload(spoke, source)
    return spoke


def _seconds(raw: Any, field: str) -> int:
    try:
        nanos = parse_duration(str(raw))
    except ValueError as err:
        raise ConversionError(
            f"failed to convert object: {field}: {err}; write a Go duration such as 30s or 5m"
        ) from err
    return min(int(nanos / _NS_PER_SECOND), _INT32_MAX)


def _plain_to_hub(spoke: Obj) -> Obj:
    hub = copy_obj(spoke)
    hub["apiVersion"] = HUB_API_VERSION
    spec = hub.get("spec")
    if isinstance(spec, dict):
        checks: Obj = {}
        for old, new in _CONDITION_LISTS:
            items = spec.pop(old, None)
            if isinstance(items, list):
                checks[new] = [_condition_to_hub(item, f"spec.{old}") for item in items]
        if "nodeStartupTimeout" in spec:
            raw = spec.pop("nodeStartupTimeout")
            if raw is not None:
                checks["nodeStartupTimeoutSeconds"] = _seconds(raw, "spec.nodeStartupTimeout")
        remediation: Obj = {}
        trigger: Obj = {}
        if spec.get("maxUnhealthy") is not None:
            trigger["unhealthyLessThanOrEqualTo"] = spec.pop("maxUnhealthy")
        if spec.get("unhealthyRange"):
            trigger["unhealthyInRange"] = spec.pop("unhealthyRange")
        spec.pop("maxUnhealthy", None)
        spec.pop("unhealthyRange", None)
        if trigger:
            remediation["triggerIf"] = trigger
        template = spec.pop("remediationTemplate", None)
        if isinstance(template, dict):
            remediation["templateRef"] = {
                k: template[k] for k in ("apiVersion", "kind", "name") if k in template
            }
        if checks:
            spec["checks"] = checks
        if remediation:
            spec["remediation"] = remediation
    status = hub.get("status")
    if isinstance(status, dict):
        old_conditions = status.pop("conditions", None)
        new = status.pop("v1beta2", None)
        if isinstance(new, dict) and "conditions" in new:
            status["conditions"] = new["conditions"]
        if old_conditions is not None:
            ensure(status, "deprecated", "v1beta1")["conditions"] = old_conditions
    return hub


def _condition_to_hub(item: Any, field: str) -> Any:
    if not isinstance(item, dict):
        return item
    out = {k: v for k, v in item.items() if k != "timeout"}
    if "timeout" in item:
        out["timeoutSeconds"] = _seconds(item["timeout"], f"{field}[].timeout")
    return out


def _plain_from_hub(hub: Obj) -> Obj:
    spoke = copy_obj(hub)
    spoke["apiVersion"] = SPOKE_API_VERSION
    spec = spoke.get("spec")
    if isinstance(spec, dict):
        checks = _dict(spec.pop("checks", None))
        for old, new in _CONDITION_LISTS:
            items = checks.get(new)
            if isinstance(items, list):
                spec[old] = [_condition_from_hub(item) for item in items]
        seconds = checks.get("nodeStartupTimeoutSeconds")
        if isinstance(seconds, int):
            spec["nodeStartupTimeout"] = format_duration(seconds * _NS_PER_SECOND)
        remediation = _dict(spec.pop("remediation", None))
        trigger = _dict(remediation.get("triggerIf"))
        if trigger.get("unhealthyLessThanOrEqualTo") is not None:
            spec["maxUnhealthy"] = trigger["unhealthyLessThanOrEqualTo"]
        if trigger.get("unhealthyInRange"):
            spec["unhealthyRange"] = trigger["unhealthyInRange"]
        template = remediation.get("templateRef")
        if isinstance(template, dict) and any(template.values()):
            spec["remediationTemplate"] = dict(template)
    status = spoke.get("status")
    if isinstance(status, dict):
        new_conditions = status.pop("conditions", None)
        old_conditions = _get(status, "deprecated", "v1beta1").get("conditions")
        status.pop("deprecated", None)
        if old_conditions is not None:
            status["conditions"] = old_conditions
        if new_conditions is not None:
            status["v1beta2"] = {"conditions": new_conditions}
    return spoke


def _condition_from_hub(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    out = {k: v for k, v in item.items() if k != "timeoutSeconds"}
    seconds = item.get("timeoutSeconds")
    out["timeout"] = format_duration((seconds if isinstance(seconds, int) else 0) * _NS_PER_SECOND)
    return out
