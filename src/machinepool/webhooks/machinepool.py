"""MachinePool defaulting and validation, as upstream's MachinePool admission webhook does it.

The HTTPS server (``machinepool.webhooks.server``) decodes each AdmissionReview and calls
``default_machine_pool`` (mutating webhook) or ``validate_machine_pool`` /
``validate_machine_pool_delete`` (validating webhook). Everything works on raw JSON dicts
and never trusts their shape: a wrong type anywhere is treated as "not set" here and left for
the CRD schema to reject with its own message. Rejections raise ``AdmissionDenied`` carrying
the Status upstream would return, word for word.
"""

from __future__ import annotations

from typing import Any

from machinepool.api import constants as c
from machinepool.api.features import MACHINE_POOL, MACHINE_POOL_NODE_TAINTS, FeatureGates
from machinepool.api.rollingupdate import rollout_budget_errors
from machinepool.runtime import copy_obj
from machinepool.webhooks.fielderrors import (
    FieldError,
    denied_status,
    forbidden,
    invalid,
    invalid_status,
    required,
    validate_annotations,
    validate_labels,
)
from machinepool.webhooks.goparse import is_semver, parse_int32

__all__ = [
    "DEFAULT_NODE_DELETION_TIMEOUT_SECONDS",
    "AdmissionDenied",
    "calculate_replicas",
    "default_machine_pool",
    "validate_machine_pool",
    "validate_machine_pool_delete",
]

DEFAULT_NODE_DELETION_TIMEOUT_SECONDS = 10
_KIND = "MachinePool"


class AdmissionDenied(Exception):
    """A request to refuse; ``status`` is the metav1.Status sent back in the response."""

    def __init__(self, status: dict[str, Any]) -> None:
        super().__init__(status.get("message", ""))
        self.status = status


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _child(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """``parent[key]`` as a dict, created (or replaced when not a dict) so it can be written."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = parent[key] = {}
    return value


def _template_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return _dict(_dict(_dict(obj.get("spec")).get("template")).get("spec"))


# --- defaulting ----------------------------------------------------------------------------


def default_machine_pool(
    obj: dict[str, Any], old: dict[str, Any] | None = None, *, dry_run: bool = False
) -> dict[str, Any]:
    """The defaulted copy of ``obj``; ``old`` is the stored object on update, else None.

    Sets the cluster-name label, ``spec.replicas`` (see ``calculate_replicas``),
    ``spec.template.spec.deletion.nodeDeletionTimeoutSeconds`` (10) and prefixes the version
    with "v". ``dry_run`` is accepted for parity with upstream, which only uses it to keep
    dry runs out of its logs.
    """
    del dry_run
    out = copy_obj(obj)
    spec = _child(out, "spec")
    cluster_name = spec.get("clusterName")
    labels = _child(_child(out, "metadata"), "labels")
    labels[c.CLUSTER_NAME_LABEL] = cluster_name if isinstance(cluster_name, str) else ""
    spec["replicas"] = calculate_replicas(out, old)
    template_spec = _child(_child(spec, "template"), "spec")
    deletion = _child(template_spec, "deletion")
    if deletion.get("nodeDeletionTimeoutSeconds") is None:
        deletion["nodeDeletionTimeoutSeconds"] = DEFAULT_NODE_DELETION_TIMEOUT_SECONDS
    version = template_spec.get("version")
    if isinstance(version, str) and version and not version.startswith("v"):
        template_spec["version"] = "v" + version
    return out


def calculate_replicas(new: dict[str, Any], old: dict[str, Any] | None) -> int:
    """The value ``spec.replicas`` defaults to.

    Set: kept. Both autoscaler size annotations present: on create the min size; on update
    the old replicas clamped into [min, max] (min when the old object had none). Otherwise 1.
    A size annotation that is not an int32 refuses the request.
    """
    replicas = _dict(new.get("spec")).get("replicas")
    if replicas is not None:
        return replicas  # type: ignore[no-any-return]  # the schema checks the type
    annotations = _dict(_dict(new.get("metadata")).get("annotations"))
    if c.AUTOSCALER_MIN_SIZE_ANNOTATION not in annotations:
        return 1
    if c.AUTOSCALER_MAX_SIZE_ANNOTATION not in annotations:
        return 1
    min_size = _size(annotations, c.AUTOSCALER_MIN_SIZE_ANNOTATION)
    max_size = _size(annotations, c.AUTOSCALER_MAX_SIZE_ANNOTATION)
    if old is None:
        return min_size
    old_replicas = _dict(old.get("spec")).get("replicas")
    if not isinstance(old_replicas, int) or old_replicas < min_size:
        return min_size
    return min(old_replicas, max_size)


def _size(annotations: dict[str, Any], key: str) -> int:
    try:
        return parse_int32(str(annotations[key]))
    except ValueError as err:
        # Upstream's wording, spelling included, so messages match across implementations.
        raise AdmissionDenied(
            denied_status(
                "failed to caculate MachinePool replicas value: could not parse the value of "
                f'the "{key}" annotation: {err}'
            )
        ) from err


# --- validation ----------------------------------------------------------------------------


def _gate_check(gates: FeatureGates) -> None:
    if not gates.enabled(MACHINE_POOL):
        raise AdmissionDenied(
            denied_status(
                str(forbidden("spec", "can be set only if the MachinePool feature flag is enabled"))
            )
        )


def validate_machine_pool(
    old: dict[str, Any] | None, new: dict[str, Any], gates: FeatureGates
) -> None:
    """Refuse an invalid create (``old`` None) or update; returns None when allowed."""
    _gate_check(gates)
    errors = _bootstrap_errors(new) + _cluster_name_errors(old, new) + _version_errors(new)
    errors += _taint_errors(old, new, gates) + _metadata_errors(new) + _rollout_errors(new)
    if errors:
        name = _dict(new.get("metadata")).get("name") or ""
        raise AdmissionDenied(invalid_status(c.CLUSTER_GROUP, _KIND, str(name), errors))


def validate_machine_pool_delete(obj: dict[str, Any] | None, gates: FeatureGates) -> None:
    """Refuse a delete only when the MachinePool feature is off.

    Upstream registers its validating webhook for create and update only, so its full
    validation never runs on delete; we add DELETE just to honour the feature gate, and do
    not re-validate the stored object, which could otherwise make an old object undeletable.
    """
    del obj
    _gate_check(gates)


def _bootstrap_errors(new: dict[str, Any]) -> list[FieldError]:
    bootstrap = _dict(_template_spec(new).get("bootstrap"))
    ref = bootstrap.get("configRef")
    ref_defined = isinstance(ref, dict) and any(ref.get(k) for k in ("apiGroup", "kind", "name"))
    if ref_defined or bootstrap.get("dataSecretName") is not None:
        return []
    return [
        required(
            "spec.template.spec.bootstrap",
            "expected either spec.template.spec.bootstrap.dataSecretName or "
            "spec.template.spec.bootstrap.configRef to be populated",
        )
    ]


def _cluster_name_errors(old: dict[str, Any] | None, new: dict[str, Any]) -> list[FieldError]:
    errors = []
    name = _dict(new.get("spec")).get("clusterName", "")
    if old is not None and _dict(old.get("spec")).get("clusterName", "") != name:
        errors.append(forbidden("spec.clusterName", "field is immutable"))
    if name != _template_spec(new).get("clusterName", ""):
        errors.append(
            invalid(
                "spec.clusterName",
                name,
                "spec.clusterName and spec.template.spec.clusterName must be set to the same value",
            )
        )
    return errors


def _version_errors(new: dict[str, Any]) -> list[FieldError]:
    version = _template_spec(new).get("version")
    if not isinstance(version, str) or not version:
        return []
    path = "spec.template.spec.version"
    errors = []
    if not version.startswith("v"):
        errors.append(invalid(path, version, "must start with v"))
    if not is_semver(version.removeprefix("v")):
        errors.append(invalid(path, version, "must be a valid semantic version"))
    return errors


TAINTS_PATH = "spec.template.spec.taints"


def _taint_errors(
    old: dict[str, Any] | None, new: dict[str, Any], gates: FeatureGates
) -> list[FieldError]:
    """Taints on a pool: refused unless our gate is on (upstream refuses them always, as not
    implemented for MachinePools); with it on, the keys upstream's Machine webhook refuses are
    refused here too. An update that leaves them as they were passes with the gate off, so
    that a pool made while it was on can still be scaled or deleted once it is off."""
    taints = _template_spec(new).get("taints")
    if not taints:
        return []
    unchanged = old is not None and _template_spec(old).get("taints") == taints
    if not gates.enabled(MACHINE_POOL_NODE_TAINTS) and not unchanged:
        return [
            forbidden(
                TAINTS_PATH,
                f"taints on a MachinePool need the feature gate {MACHINE_POOL_NODE_TAINTS} "
                f"(not upstream's): start the core with --feature-gates="
                f"{MACHINE_POOL_NODE_TAINTS}=true, or remove spec.template.spec.taints",
            )
        ]
    errors: list[FieldError] = []
    for i, taint in enumerate(taints if isinstance(taints, list) else []):
        key = _dict(taint).get("key")
        if not isinstance(key, str):
            continue  # the CRD schema rejects it with its own message
        reason = _reserved_taint(key)
        if reason:
            errors.append(invalid(f"{TAINTS_PATH}[{i}].key", key, reason))
    return errors


def _reserved_taint(key: str) -> str:
    """Why upstream's Machine webhook refuses a taint ``key`` on a worker, or ""."""
    if key in (c.UNINITIALIZED_TAINT_KEY, c.OUTDATED_REVISION_TAINT_KEY):
        return "taint key is not allowed"
    if key.startswith("node.kubernetes.io/") and key != "node.kubernetes.io/out-of-service":
        return (
            "taint key must not have the prefix node.kubernetes.io/, except for "
            "node.kubernetes.io/out-of-service"
        )
    if key.startswith("node.cloudprovider.kubernetes.io/"):
        return "taint key must not have the prefix node.cloudprovider.kubernetes.io/"
    if key == "node-role.kubernetes.io/master":
        return "taint is deprecated since 1.24 and should not be used anymore"
    if key == "node-role.kubernetes.io/control-plane":
        return "taint is not allowed for worker Machines"
    return ""


def _rollout_errors(new: dict[str, Any]) -> list[FieldError]:
    """The budgets of a rollout by the core (ours: ``controllers.machinepool.rollout``)."""
    annotations = _dict(_dict(new.get("metadata")).get("annotations"))
    return [invalid(f, value, detail) for f, value, detail in rollout_budget_errors(annotations)]


def _metadata_errors(new: dict[str, Any]) -> list[FieldError]:
    meta = _dict(_dict(_dict(new.get("spec")).get("template")).get("metadata"))
    path = "spec.template.metadata"
    return validate_labels(_dict(meta.get("labels")), f"{path}.labels") + validate_annotations(
        _dict(meta.get("annotations")), f"{path}.annotations"
    )
