"""Launch template phase: one template per pool, a new version whenever what it says changes.

Called by ``controller.reconcile`` after the group was observed. The template is found by the
ID recorded in status, else by name (and must carry this cluster's ownership tag). A change of
the user data alone makes a new version and nothing else: running instances keep the data they
booted with, new ones get the new data. Any other change makes a new version and asks for an
instance refresh; a refresh already running is cancelled first, and the version is only made
once the cancellation has finished, so the refresh that follows replaces instances with the
newest template. The "refresh pending" mark is written to status before returning, so a crash
between the new version and the refresh cannot lose the refresh (``refresh`` starts it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from machinepool.api import constants as c
from machinepool.api.views import AWSMachinePoolSpecView
from machinepool.providers.aws import plan
from machinepool.providers.aws.cloud import AWSError
from machinepool.providers.aws.refresh import active_refresh, refresh_disabled
from machinepool.providers.aws.scope import INSTANCE_REFRESH_STARTED, LAUNCH_TEMPLATE_READY, Scope
from machinepool.runtime import Result

__all__ = ["REFRESH_PENDING_REASON", "find_template", "reconcile_launch_template", "template_data"]

REFRESH_PENDING_REASON = "InstanceRefreshPending"
_DEFAULT_IMAGE_FORMAT = "capa-ami-{base_os}-?{version}-*"
_DEFAULT_BASE_OS = "ubuntu-24.04"
_DEFAULT_ROOT_DEVICE = "/dev/sda1"


def _volume(volume: Mapping[str, Any], default_device: str) -> dict[str, Any]:
    ebs: dict[str, Any] = {"VolumeSize": volume["size"]}
    for key, param in (
        ("type", "VolumeType"),
        ("iops", "Iops"),
        ("throughput", "Throughput"),
        ("encrypted", "Encrypted"),
        ("encryptionKey", "KmsKeyId"),
    ):
        if volume.get(key) is not None:
            ebs[param] = volume[key]
    return {"DeviceName": volume.get("deviceName") or default_device, "Ebs": ebs}


def template_data(
    spec: AWSMachinePoolSpecView, cluster: str, name: str, image_id: str, user_data: str | None
) -> dict[str, Any]:
    """The LaunchTemplateData for a pool spec (pure: unit-tested)."""
    lt = spec.aws_launch_template
    data: dict[str, Any] = {"ImageId": image_id}
    if lt.instance_type:
        data["InstanceType"] = lt.instance_type
    if user_data:
        data["UserData"] = user_data
    profile = lt.iam_instance_profile
    if profile:
        data["IamInstanceProfile"] = {"Arn" if profile.startswith("arn:") else "Name": profile}
    if lt.ssh_key_name:
        data["KeyName"] = lt.ssh_key_name
    groups = sorted(r["id"] for r in lt.additional_security_groups or [] if r.get("id"))
    if groups:
        data["SecurityGroupIds"] = groups
    root = lt.root_volume
    volumes = [_volume(root, _DEFAULT_ROOT_DEVICE)] if root else []
    volumes += [
        _volume(v, f"/dev/sd{chr(ord('b') + i)}") for i, v in enumerate(lt.non_root_volumes or [])
    ]
    if volumes:
        data["BlockDeviceMappings"] = volumes
    spot = lt.spot_market_options
    if spot is not None:
        options = {"MaxPrice": spot["maxPrice"]} if spot.get("maxPrice") else {}
        data["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": options}
    metadata = lt.instance_metadata_options
    if metadata:
        data["MetadataOptions"] = {k[:1].upper() + k[1:]: v for k, v in metadata.items()}
    tags = plan.ownership_tags(cluster, name, spec.additional_tags)
    data["TagSpecifications"] = [
        {
            "ResourceType": "instance",
            "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
        }
    ]
    return data


async def _image_id(scope: Scope) -> str | None:
    """spec ami.id, or the newest AMI matching CAPA's lookup format for the pool's version."""
    lt = scope.spec.aws_launch_template
    if lt.ami.id:
        return str(lt.ami.id)
    version = str(scope.machine_pool.spec.template.spec.version or "")
    if not version:
        return None
    pattern = (
        (lt.image_lookup_format or _DEFAULT_IMAGE_FORMAT)
        .replace("{{.BaseOS}}", "{base_os}")
        .replace("{{.K8sVersion}}", "{version}")
    )
    name = pattern.format(
        base_os=lt.image_lookup_base_os or _DEFAULT_BASE_OS, version=version.lstrip("v")
    )
    params: dict[str, Any] = {"Filters": [{"Name": "name", "Values": [name]}]}
    if lt.image_lookup_org:
        params["Owners"] = [lt.image_lookup_org]
    images = (await scope.aws.call("ec2", "describe_images", **params)).get("Images") or []
    if not images:
        return None
    return str(max(images, key=lambda i: str(i.get("CreationDate", "")))["ImageId"])


async def find_template(scope: Scope) -> dict[str, Any] | None:
    template_id = scope.status.launch_template_id
    params: dict[str, Any] = (
        {"LaunchTemplateIds": [template_id]}
        if template_id
        else {"LaunchTemplateNames": [scope.template_name]}
    )
    try:
        found = await scope.aws.call("ec2", "describe_launch_templates", **params)
    except AWSError as exc:
        if exc.not_found:
            return None
        raise
    templates = found.get("LaunchTemplates") or []
    return templates[0] if templates else None


def _owned(template: Mapping[str, Any], cluster: str) -> bool:
    tags = {t.get("Key"): t.get("Value") for t in template.get("Tags") or []}
    return tags.get(plan.cluster_tag(cluster)) == plan.OWNED


async def _create(scope: Scope, data: dict[str, Any]) -> None:
    tags = plan.ownership_tags(scope.cluster_name, scope.template_name, scope.spec.additional_tags)
    tags[plan.cloud_provider_tag(scope.cluster_name)] = plan.OWNED
    try:
        created = await scope.aws.call(
            "ec2",
            "create_launch_template",
            LaunchTemplateName=scope.template_name,
            LaunchTemplateData=data,
            TagSpecifications=[
                {
                    "ResourceType": "launch-template",
                    "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
                }
            ],
        )
    except AWSError as exc:
        raise scope.fail(LAUNCH_TEMPLATE_READY, "LaunchTemplateCreateFailed", exc) from exc
    template = created["LaunchTemplate"]
    scope.template_id = str(template["LaunchTemplateId"])
    scope.latest_version = str(template.get("LatestVersionNumber", 1))
    scope.status.launch_template_id = scope.template_id
    scope.status.launch_template_version = scope.latest_version
    await scope.recorder.event(
        scope.pool,
        "Normal",
        "LaunchTemplateCreated",
        f"created launch template {scope.template_name}",
    )


async def _latest(scope: Scope) -> dict[str, Any]:
    out = await scope.aws.call(
        "ec2",
        "describe_launch_template_versions",
        LaunchTemplateId=scope.template_id,
        Versions=["$Latest"],
    )
    return dict((out.get("LaunchTemplateVersions") or [{}])[0])


async def _prune(scope: Scope, default_version: str) -> None:
    """Delete old versions no instance uses, so versions do not pile up towards AWS's limit."""
    out = await scope.aws.call(
        "ec2", "describe_launch_template_versions", LaunchTemplateId=scope.template_id
    )
    in_use = {
        str((i.get("LaunchTemplate") or {}).get("Version"))
        for i in (scope.group or {}).get("Instances") or []
    }
    keep = in_use | {default_version, str(scope.latest_version)}
    old = sorted(
        str(v["VersionNumber"])
        for v in out.get("LaunchTemplateVersions") or []
        if str(v["VersionNumber"]) not in keep
    )
    if old:
        await scope.aws.call(
            "ec2",
            "delete_launch_template_versions",
            LaunchTemplateId=scope.template_id,
            Versions=old,
        )


async def _cancel_running_refresh(scope: Scope) -> bool:
    """Cancel a running refresh; True while one is still running or being cancelled."""
    if scope.group is None or refresh_disabled(scope):
        return False
    active = await active_refresh(scope)
    if active is None:
        return False
    if active.get("Status") in ("Pending", "InProgress"):
        await scope.aws.call(
            "autoscaling", "cancel_instance_refresh", AutoScalingGroupName=scope.asg_name
        )
        await scope.recorder.event(
            scope.pool,
            "Normal",
            "InstanceRefreshCancelled",
            f"cancelled instance refresh {active.get('InstanceRefreshId')}"
            " to apply a newer launch template",
        )
    scope.mark(
        INSTANCE_REFRESH_STARTED,
        False,
        "InstanceRefreshNotReady",
        f"waiting for instance refresh {active.get('InstanceRefreshId')} to stop"
        " before applying the new launch template",
    )
    scope.busy = True
    return True


async def _new_version(
    scope: Scope, data: dict[str, Any], change: plan.TemplateChange, default: str
) -> None:
    await _prune(scope, default)
    out = await scope.aws.call(
        "ec2",
        "create_launch_template_version",
        LaunchTemplateId=scope.template_id,
        LaunchTemplateData=data,
    )
    scope.latest_version = str(out["LaunchTemplateVersion"]["VersionNumber"])
    scope.status.launch_template_version = scope.latest_version
    what = "user data" if change is plan.TemplateChange.USER_DATA_ONLY else "configuration"
    await scope.recorder.event(
        scope.pool,
        "Normal",
        "LaunchTemplateVersionCreated",
        f"launch template {scope.template_name} version {scope.latest_version} ({what} changed)",
    )
    if (
        change is plan.TemplateChange.CONFIG
        and scope.group is not None
        and not refresh_disabled(scope)
    ):
        scope.mark(
            INSTANCE_REFRESH_STARTED,
            False,
            REFRESH_PENDING_REASON,
            f"launch template version {scope.latest_version} needs an instance refresh",
        )
    await scope.checkpoint()


async def _update(scope: Scope, template: Mapping[str, Any], data: dict[str, Any]) -> None:
    scope.template_id = str(template["LaunchTemplateId"])
    latest = await _latest(scope)
    scope.latest_version = str(latest.get("VersionNumber") or template.get("LatestVersionNumber"))
    scope.status.launch_template_id = scope.template_id
    scope.status.launch_template_version = scope.latest_version
    change = plan.classify_template_change(data, latest.get("LaunchTemplateData") or {})
    if change is plan.TemplateChange.NONE:
        return
    if change is plan.TemplateChange.CONFIG and await _cancel_running_refresh(scope):
        return
    await _new_version(scope, data, change, str(template.get("DefaultVersionNumber", 1)))


async def reconcile_launch_template(scope: Scope) -> Result:
    """Create the pool's launch template, or a new version when the desired data changed."""
    try:
        image = await _image_id(scope)
    except AWSError as exc:
        raise scope.fail(LAUNCH_TEMPLATE_READY, "LaunchTemplateReconcileFailed", exc) from exc
    if image is None:
        scope.mark(
            LAUNCH_TEMPLATE_READY,
            False,
            "LaunchTemplateCreateFailed",
            "no AMI: set spec.awsLaunchTemplate.ami.id, or a MachinePool version whose AMI the "
            "image lookup (imageLookupFormat/Org/BaseOS) finds",
            c.SEVERITY_ERROR,
        )
        return Result()
    data = template_data(scope.spec, scope.cluster_name, scope.name, image, scope.user_data)
    try:
        template = await find_template(scope)
        if template is not None and not _owned(template, scope.cluster_name):
            scope.mark(
                LAUNCH_TEMPLATE_READY,
                False,
                "LaunchTemplateNotOwned",
                f"launch template {template.get('LaunchTemplateName')} exists but is not tagged "
                f"{plan.cluster_tag(scope.cluster_name)}=owned; choose another "
                "spec.awsLaunchTemplate.name",
                c.SEVERITY_ERROR,
            )
            return Result()
        if template is None:
            await _create(scope, data)
        else:
            await _update(scope, template, data)
    except AWSError as exc:
        raise scope.fail(LAUNCH_TEMPLATE_READY, "LaunchTemplateReconcileFailed", exc) from exc
    if scope.template_id:
        scope.mark(LAUNCH_TEMPLATE_READY, True)
    return Result()
