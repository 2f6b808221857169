"""Pure decisions of the AWS provider: sizes, names, tags, template diffs, processes, victims.

Nothing here talks to AWS or Kubernetes, so every rule is unit-tested in
``tests/unit/test_aws_plan.py``. The reconcile phases (``launchtemplate``, ``asg``,
``machines``...) call these functions with what they read and act on what comes back.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from machinepool.api import constants as c
from machinepool.api.meta import parse_duration

__all__ = [
    "ALL_PROCESSES",
    "CLUSTER_TAG_PREFIX",
    "ROLE_TAG",
    "HookChanges",
    "TemplateChange",
    "canonical_template",
    "classify_template_change",
    "cloud_provider_tag",
    "cluster_tag",
    "desired_capacity",
    "duration_seconds",
    "hook_changes",
    "ownership_tags",
    "parse_provider_id",
    "process_changes",
    "provider_id",
    "replicas_managed_externally",
    "suspended_processes",
    "user_data_hash",
]

CLUSTER_TAG_PREFIX = "sigs.k8s.io/cluster-api-provider-aws/cluster/"
ROLE_TAG = "sigs.k8s.io/cluster-api-provider-aws/role"
_CLOUD_PROVIDER_TAG_PREFIX = "kubernetes.io/cluster/"
OWNED = "owned"

# --- names and IDs ------------------------------------------------------------------------


def provider_id(zone: str, instance_id: str) -> str:
    """The Node providerID of an EC2 instance, as the AWS cloud provider writes it.

    >>> provider_id("us-east-1a", "i-0abc")
    'aws:///us-east-1a/i-0abc'
    """
    return f"aws:///{zone}/{instance_id}"


_PROVIDER_ID = re.compile(r"^aws:///([^/]+)/(i-[0-9a-zA-Z]+)$")


def parse_provider_id(value: str) -> tuple[str, str] | None:
    """(zone, instance id) of an ``aws:///<zone>/<id>`` providerID, or ``None``."""
    match = _PROVIDER_ID.match(value)
    return (match.group(1), match.group(2)) if match else None


def cluster_tag(cluster: str) -> str:
    """The tag CAPA puts on everything it owns for ``cluster`` (value ``owned``)."""
    return CLUSTER_TAG_PREFIX + cluster


def cloud_provider_tag(cluster: str) -> str:
    """The tag the Kubernetes AWS cloud provider uses to find a cluster's resources."""
    return _CLOUD_PROVIDER_TAG_PREFIX + cluster


def ownership_tags(cluster: str, name: str, additional: Mapping[str, str] | None) -> dict[str, str]:
    """Tags for a pool's group, template and instances: additional tags, then CAPA's own.

    CAPA's keys win over additional tags with the same key, so a user tag cannot disown a
    resource.
    """
    tags = dict(additional or {})
    tags.update(
        {cluster_tag(cluster): OWNED, ROLE_TAG: "node", "Name": name},
    )
    return tags


# --- sizes --------------------------------------------------------------------------------


def replicas_managed_externally(annotations: Mapping[str, str] | None) -> bool:
    """Whether something outside Cluster API (an autoscaler) owns the replica count.

    Set means present with any value except "false", as upstream reads it.
    """
    value = (annotations or {}).get(c.REPLICAS_MANAGED_BY_ANNOTATION)
    return value is not None and value.lower() != "false"


def desired_capacity(replicas: int | None, min_size: int, max_size: int) -> int:
    """The group's desired capacity: MachinePool replicas clamped into [minSize, maxSize].

    Unset replicas mean 1, the MachinePool default.

    >>> desired_capacity(7, 1, 5), desired_capacity(0, 1, 5), desired_capacity(None, 0, 3)
    (5, 1, 1)
    """
    wanted = 1 if replicas is None else replicas
    return max(min_size, min(max_size, wanted))


_NS_PER_SECOND = 1_000_000_000


def duration_seconds(text: str) -> int:
    """Whole seconds of a Go duration string (``300s``, ``5m0s``, ``1h30m``), for the Auto
    Scaling API's integer fields; parsed by ``api.meta.parse_duration``, as CAPA's
    ``metav1.Duration`` is, and refused when negative.

    Raises ``ValueError`` naming the text when it is not a duration.
    """
    problem = f"{text!r} is not a duration; write it like 300s, 5m0s or 1h"
    try:
        nanos = parse_duration(text)
    except ValueError as exc:
        raise ValueError(problem) from exc
    if nanos < 0:
        raise ValueError(problem)
    return nanos // _NS_PER_SECOND


# --- suspended processes ------------------------------------------------------------------

# CAPA's Processes fields mapped to the Auto Scaling process names, in CAPA's order.
_PROCESS_FIELDS = (
    ("launch", "Launch"),
    ("terminate", "Terminate"),
    ("addToLoadBalancer", "AddToLoadBalancer"),
    ("alarmNotification", "AlarmNotification"),
    ("azRebalance", "AZRebalance"),
    ("healthCheck", "HealthCheck"),
    ("instanceRefresh", "InstanceRefresh"),
    ("replaceUnhealthy", "ReplaceUnhealthy"),
    ("scheduledActions", "ScheduledActions"),
)
ALL_PROCESSES = tuple(name for _, name in _PROCESS_FIELDS)


def suspended_processes(spec: Mapping[str, Any] | None) -> list[str]:
    """Process names ``spec.suspendProcesses`` asks to suspend.

    ``all: true`` suspends every process except those explicitly set to false; otherwise
    only the processes set to true.

    >>> suspended_processes({"all": True, "processes": {"launch": False}})[:2]
    ['Terminate', 'AddToLoadBalancer']
    """
    if not spec:
        return []
    flags = spec.get("processes") or {}
    if spec.get("all"):
        return [name for key, name in _PROCESS_FIELDS if flags.get(key) is not False]
    return [name for key, name in _PROCESS_FIELDS if flags.get(key) is True]


def process_changes(desired: Iterable[str], current: Iterable[str]) -> tuple[list[str], list[str]]:
    """(to suspend, to resume), sorted, to make the group's suspended set equal ``desired``."""
    want, have = set(desired), set(current)
    return sorted(want - have), sorted(have - want)


# --- lifecycle hooks ----------------------------------------------------------------------


@dataclass(frozen=True)
class HookChanges:
    """What to do to make the group's lifecycle hooks match the spec."""

    put: list[dict[str, Any]]
    """PutLifecycleHook parameters for hooks that are new or differ."""
    delete: list[str]
    """Names of hooks to delete."""


def _hook_params(hook: Mapping[str, Any]) -> dict[str, Any]:
    """The PutLifecycleHook parameters for a spec hook (without the group name)."""
    params: dict[str, Any] = {
        "LifecycleHookName": hook["name"],
        "LifecycleTransition": hook["lifecycleTransition"],
        "HeartbeatTimeout": duration_seconds(hook["heartbeatTimeout"])
        if hook.get("heartbeatTimeout")
        else 3600,
        "DefaultResult": hook.get("defaultResult") or "CONTINUE",
    }
    for key, param in (
        ("notificationTargetARN", "NotificationTargetARN"),
        ("roleARN", "RoleARN"),
        ("notificationMetadata", "NotificationMetadata"),
    ):
        if hook.get(key):
            params[param] = hook[key]
    return params


def hook_changes(
    spec_hooks: Sequence[Mapping[str, Any]], current: Sequence[Mapping[str, Any]]
) -> HookChanges:
    """Compare spec hooks with DescribeLifecycleHooks output: create, update, delete.

    AWS defaults (heartbeat 3600 s, CONTINUE) are applied to the spec side so an unchanged
    hook is never rewritten.
    """
    have = {str(h.get("LifecycleHookName")): h for h in current}
    put: list[dict[str, Any]] = []
    for hook in spec_hooks:
        params = _hook_params(hook)
        existing = have.get(params["LifecycleHookName"])
        if existing is None or any(existing.get(k) != v for k, v in params.items()):
            put.append(params)
    wanted = {str(h["name"]) for h in spec_hooks}
    return HookChanges(put, sorted(name for name in have if name not in wanted))


# --- launch template ----------------------------------------------------------------------


def warm_pool_params(spec: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """PutWarmPool's parameters for ``spec.warmPool`` (None: the group has no warm pool),
    with Auto Scaling's defaults filled in so they compare with DescribeWarmPool's answer.

    >>> warm_pool_params({"minSize": 2})
    {'MinSize': 2, 'PoolState': 'Stopped'}
    """
    if spec is None:
        return None
    params: dict[str, Any] = {
        "MinSize": int(spec.get("minSize") or 0),
        "PoolState": str(spec.get("poolState") or "Stopped"),
    }
    if spec.get("maxGroupPreparedCapacity") is not None:
        params["MaxGroupPreparedCapacity"] = int(spec["maxGroupPreparedCapacity"])
    reuse = (spec.get("instanceReusePolicy") or {}).get("reuseOnScaleIn")
    if reuse is not None:
        params["InstanceReusePolicy"] = {"ReuseOnScaleIn": bool(reuse)}
    return params


def warm_pool_differs(desired: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    """Whether the group's warm pool (DescribeWarmPool's ``WarmPoolConfiguration``) differs
    from ``desired`` (``warm_pool_params``); an unset MaxGroupPreparedCapacity is Auto
    Scaling's -1 or absent, and a warm pool being deleted counts as none."""
    if not current or current.get("Status") == "PendingDelete":
        return True
    have = {
        "MinSize": int(current.get("MinSize") or 0),
        "PoolState": str(current.get("PoolState") or "Stopped"),
    }
    prepared = current.get("MaxGroupPreparedCapacity")
    if prepared is not None and int(prepared) >= 0:
        have["MaxGroupPreparedCapacity"] = int(prepared)
    reuse = (current.get("InstanceReusePolicy") or {}).get("ReuseOnScaleIn")
    if reuse is not None and "InstanceReusePolicy" in desired:
        have["InstanceReusePolicy"] = {"ReuseOnScaleIn": bool(reuse)}
    return have != dict(desired)


class TemplateChange(enum.Enum):
    """How the desired launch template differs from the latest version."""

    NONE = "none"
    USER_DATA_ONLY = "user-data-only"
    """New version, no instance refresh: running instances keep their old bootstrap data."""
    CONFIG = "config"
    """New version and an instance refresh: instances must be replaced."""


def user_data_hash(user_data_b64: str | None) -> str:
    """SHA-256 of decoded user data; ``""`` for none. Compares user data without logging it."""
    if not user_data_b64:
        return ""
    return hashlib.sha256(base64.b64decode(user_data_b64)).hexdigest()


def canonical_template(data: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of LaunchTemplateData that decide what an instance is, normalised.

    User data is left out (it is compared by hash); lists whose order carries no meaning are
    sorted; empty values are dropped so "unset" and "empty" compare equal.
    """
    out: dict[str, Any] = {}
    for key in ("ImageId", "InstanceType", "KeyName"):
        if data.get(key):
            out[key] = data[key]
    profile = data.get("IamInstanceProfile") or {}
    if profile.get("Name") or profile.get("Arn"):
        out["IamInstanceProfile"] = profile.get("Name") or profile.get("Arn")
    groups = data.get("SecurityGroupIds") or []
    if groups:
        out["SecurityGroupIds"] = sorted(groups)
    for key in ("BlockDeviceMappings", "InstanceMarketOptions", "MetadataOptions"):
        if data.get(key):
            out[key] = _normalise(data[key])
    tags: dict[str, str] = {}
    for spec in data.get("TagSpecifications") or []:
        if spec.get("ResourceType") == "instance":
            tags.update({t["Key"]: t["Value"] for t in spec.get("Tags") or []})
    if tags:
        out["InstanceTags"] = dict(sorted(tags.items()))
    return out


def _normalise(value: Any) -> Any:
    """Numbers and booleans as strings: EC2 echoes some of them back as text."""
    if isinstance(value, Mapping):
        return {k: _normalise(v) for k, v in sorted(value.items()) if v not in (None, "", [])}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def classify_template_change(
    desired: Mapping[str, Any], latest: Mapping[str, Any] | None
) -> TemplateChange:
    """Decide between no change, a user-data-only change and a change needing a refresh.

    ``desired`` and ``latest`` are LaunchTemplateData dicts (``latest`` from the template's
    latest version; ``None`` when there is no template yet, which counts as CONFIG).
    """
    if latest is None:
        return TemplateChange.CONFIG
    if canonical_template(desired) != canonical_template(latest):
        return TemplateChange.CONFIG
    if user_data_hash(desired.get("UserData")) != user_data_hash(latest.get("UserData")):
        return TemplateChange.USER_DATA_ONLY
    return TemplateChange.NONE
