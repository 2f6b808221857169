"""Admission validation of AWSMachinePool: the rules, and an aiohttp handler serving them.

``validate(obj, old)`` is pure and returns one message per problem, each naming the field and
the fix. The AWSMachinePool controller calls it too and reports the result as a condition, so
a bad spec is caught even where the webhook is not installed. The webhook server (owned by
``machinepool.webhooks``) mounts ``handle`` at ``VALIDATE_PATH``::

    app.router.add_post(aws_webhook.VALIDATE_PATH, aws_webhook.handle)

Rules follow CAPA's AWSMachinePool webhook, plus minSize <= maxSize.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from machinepool.api.infra_aws import GROUP, AWSMachinePool
from machinepool.providers.aws.plan import duration_seconds

__all__ = ["VALIDATE_PATH", "handle", "review_response", "validate"]

VALIDATE_PATH = "/validate-infrastructure-machinepool-cluster-x-k8s-io-v1beta2-awsmachinepool"

_MIN_HEARTBEAT, _MAX_HEARTBEAT = 30, 172800


def validate(obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[str]:
    """Problems with an AWSMachinePool (``old`` is the previous object on update).

    >>> validate({"spec": {"minSize": 3, "maxSize": 1, "availabilityZones": ["us-east-1a"],
    ...                    "awsLaunchTemplate": {}}})
    ['spec.minSize: 3 is greater than spec.maxSize 1; lower minSize or raise maxSize']
    """
    try:
        AWSMachinePool.from_dict(obj)
    except ValidationError as exc:
        return [_pydantic_message(err) for err in exc.errors()]
    spec = obj.get("spec") or {}
    problems: list[str] = []
    problems += _sizes(spec)
    problems += _placement(spec)
    problems += _durations(spec)
    problems += _references(spec)
    problems += _volumes(spec.get("awsLaunchTemplate") or {})
    problems += _spot(spec)
    problems += _refresh(spec.get("refreshPreferences") or {})
    problems += _hooks(spec.get("lifecycleHooks") or [])
    if old is not None:
        problems += _immutable(spec, old.get("spec") or {})
    return problems


def _pydantic_message(err: Mapping[str, Any]) -> str:
    path = ".".join(str(p) for p in err.get("loc", ()))
    return f"{path}: {err.get('msg', 'invalid')}; fix the value to match the AWSMachinePool schema"


def _sizes(spec: Mapping[str, Any]) -> list[str]:
    low, high = int(spec.get("minSize", 1)), int(spec.get("maxSize", 1))
    if low > high:
        return [
            f"spec.minSize: {low} is greater than spec.maxSize {high}; "
            "lower minSize or raise maxSize"
        ]
    return []


def _placement(spec: Mapping[str, Any]) -> list[str]:
    if spec.get("availabilityZones") or spec.get("subnets"):
        return []
    # CAPA takes subnets from the AWSCluster; this provider has none to take them from.
    return [
        "spec.availabilityZones: set availabilityZones or spec.subnets; "
        "the group needs somewhere to place instances"
    ]


def _durations(spec: Mapping[str, Any]) -> list[str]:
    problems = []
    for field in ("defaultCoolDown", "defaultInstanceWarmup"):
        value = spec.get(field)
        if value is None:
            continue
        try:
            duration_seconds(str(value))
        except ValueError as exc:
            problems.append(f"spec.{field}: {exc}")
    return problems


def _references(spec: Mapping[str, Any]) -> list[str]:
    problems = []
    template = spec.get("awsLaunchTemplate") or {}
    lists = (
        ("spec.subnets", spec.get("subnets") or []),
        (
            "spec.awsLaunchTemplate.additionalSecurityGroups",
            template.get("additionalSecurityGroups") or [],
        ),
    )
    for path, refs in lists:
        for i, ref in enumerate(refs):
            if ref.get("id") and ref.get("filters"):
                problems.append(f"{path}[{i}]: set either id or filters, not both")
            elif not ref.get("id"):
                problems.append(
                    f"{path}[{i}].id: required; this provider resolves resources by ID only"
                )
    return problems


def _volumes(template: Mapping[str, Any]) -> list[str]:
    problems = []
    volumes = [("spec.awsLaunchTemplate.rootVolume", template.get("rootVolume"))]
    volumes += [
        (f"spec.awsLaunchTemplate.nonRootVolumes[{i}]", v)
        for i, v in enumerate(template.get("nonRootVolumes") or [])
    ]
    for path, volume in volumes:
        if not volume:
            continue
        kind = volume.get("type")
        if volume.get("iops") and kind not in ("io1", "io2", "gp3"):
            problems.append(f"{path}.iops: only io1, io2 and gp3 volumes take iops; remove it")
        if kind in ("io1", "io2") and not volume.get("iops"):
            problems.append(f"{path}.iops: required for {kind} volumes")
        if volume.get("throughput") and kind != "gp3":
            problems.append(f"{path}.throughput: only gp3 volumes take throughput; remove it")
    return problems


def _spot(spec: Mapping[str, Any]) -> list[str]:
    template = spec.get("awsLaunchTemplate") or {}
    if template.get("spotMarketOptions") and spec.get("mixedInstancesPolicy"):
        return [
            "spec.awsLaunchTemplate.spotMarketOptions: cannot be combined with "
            "spec.mixedInstancesPolicy; use instancesDistribution for Spot instead"
        ]
    return []


def _refresh(prefs: Mapping[str, Any]) -> list[str]:
    problems = []
    strategy = prefs.get("strategy")
    if strategy is not None and strategy != "Rolling":
        problems.append(
            f"spec.refreshPreferences.strategy: {strategy!r} is not supported; use Rolling"
        )
    low, high = prefs.get("minHealthyPercentage"), prefs.get("maxHealthyPercentage")
    if high is not None and low is None:
        problems.append(
            "spec.refreshPreferences.minHealthyPercentage: required when "
            "maxHealthyPercentage is set"
        )
    if high is not None and low is not None and high - low > 100:
        problems.append(
            "spec.refreshPreferences.maxHealthyPercentage: must be at most 100 above "
            f"minHealthyPercentage (got {low} and {high})"
        )
    return problems


def _hooks(hooks: list[Mapping[str, Any]]) -> list[str]:
    problems = []
    seen: set[str] = set()
    for i, hook in enumerate(hooks):
        path = f"spec.lifecycleHooks[{i}]"
        name = str(hook.get("name"))
        if name in seen:
            problems.append(f"{path}.name: duplicate hook name {name!r}; names must be unique")
        seen.add(name)
        if bool(hook.get("notificationTargetARN")) != bool(hook.get("roleARN")):
            problems.append(
                f"{path}: notificationTargetARN and roleARN go together; set both or neither"
            )
        timeout = hook.get("heartbeatTimeout")
        if timeout is not None:
            try:
                seconds = duration_seconds(str(timeout))
            except ValueError as exc:
                problems.append(f"{path}.heartbeatTimeout: {exc}")
                continue
            if not _MIN_HEARTBEAT <= seconds <= _MAX_HEARTBEAT:
                problems.append(
                    f"{path}.heartbeatTimeout: {timeout} is outside 30s..48h; "
                    "choose a value in that range"
                )
    return problems


def _immutable(spec: Mapping[str, Any], old: Mapping[str, Any]) -> list[str]:
    # The launch template is found by name until its ID is recorded; renaming it would
    # orphan the old template, so the name is fixed once set.
    before = (old.get("awsLaunchTemplate") or {}).get("name")
    after = (spec.get("awsLaunchTemplate") or {}).get("name")
    if before and after != before:
        return [
            f"spec.awsLaunchTemplate.name: immutable once set (was {before!r}); "
            "create a new AWSMachinePool to use another template"
        ]
    return []


def review_response(review: Mapping[str, Any]) -> dict[str, Any]:
    """The AdmissionReview answer for an AdmissionReview request (v1)."""
    request = review.get("request") or {}
    uid = request.get("uid", "")
    problems: list[str] = []
    if request.get("operation") in ("CREATE", "UPDATE"):
        problems = validate(request.get("object") or {}, request.get("oldObject"))
    response: dict[str, Any] = {"uid": uid, "allowed": not problems}
    if problems:
        name = ((request.get("object") or {}).get("metadata") or {}).get("name", "")
        response["status"] = {
            "code": 422,
            "reason": "Invalid",
            "message": f'AWSMachinePool.{GROUP} "{name}" is invalid: ' + "; ".join(problems),
        }
    return {
        "apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
        "kind": "AdmissionReview",
        "response": response,
    }


async def handle(request: web.Request) -> web.Response:
    """aiohttp handler: AdmissionReview in, AdmissionReview out."""
    try:
        review = await request.json()
    except json.JSONDecodeError:
        return web.Response(status=400, text="body is not an AdmissionReview JSON document\n")
    return web.json_response(review_response(review))
