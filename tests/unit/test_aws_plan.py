"""Pure decisions of the AWS provider: sizes, providerIDs, template diffs, processes, hooks,
victim order, launch template data and admission validation."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest

from machinepool.api.views import AWSMachinePoolSpecView
from machinepool.providers.aws import plan
from machinepool.providers.aws.launchtemplate import template_data
from machinepool.providers.aws.webhook import review_response, validate

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# --- sizes and IDs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replicas", "low", "high", "expected"),
    [(3, 1, 5, 3), (7, 1, 5, 5), (0, 1, 5, 1), (0, 0, 5, 0), (None, 0, 3, 1), (None, 2, 3, 2)],
)
def test_desired_capacity_is_replicas_clamped_into_min_max(
    replicas: int | None, low: int, high: int, expected: int
) -> None:
    assert plan.desired_capacity(replicas, low, high) == expected


@pytest.mark.parametrize(
    ("annotations", "external"),
    [
        (None, False),
        ({}, False),
        ({"cluster.x-k8s.io/replicas-managed-by": ""}, True),
        ({"cluster.x-k8s.io/replicas-managed-by": "external-autoscaler"}, True),
        ({"cluster.x-k8s.io/replicas-managed-by": "false"}, False),
    ],
)
def test_replicas_managed_by_is_set_unless_false(
    annotations: dict[str, str] | None, external: bool
) -> None:
    assert plan.replicas_managed_externally(annotations) is external


def test_provider_id_round_trips() -> None:
    pid = plan.provider_id("eu-west-1b", "i-0123abcd")
    assert pid == "aws:///eu-west-1b/i-0123abcd"
    assert plan.parse_provider_id(pid) == ("eu-west-1b", "i-0123abcd")
    assert plan.parse_provider_id("sim://x/i-1") is None


@pytest.mark.parametrize(
    ("text", "seconds"), [("300s", 300), ("5m0s", 300), ("1h30m", 5400), ("90s", 90)]
)
def test_durations_parse_like_go(text: str, seconds: int) -> None:
    assert plan.duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "5 m", "m5", "5mx", "-5s"])
def test_bad_durations_name_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        plan.duration_seconds(text)


def test_ownership_tags_cannot_be_overridden_by_additional_tags() -> None:
    tags = plan.ownership_tags("c1", "pool", {"team": "a", plan.ROLE_TAG: "control-plane"})
    assert tags == {
        "team": "a",
        "sigs.k8s.io/cluster-api-provider-aws/cluster/c1": "owned",
        "sigs.k8s.io/cluster-api-provider-aws/role": "node",
        "Name": "pool",
    }


# --- template change classification -------------------------------------------------------


def data(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {
        "ImageId": "ami-1",
        "InstanceType": "t3.small",
        "UserData": b64("#cloud-config\ntoken: a"),
        "SecurityGroupIds": ["sg-2", "sg-1"],
        "TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": "a", "Value": "1"}]}],
    }
    base.update(overrides)
    return base


def test_identical_template_needs_nothing() -> None:
    assert plan.classify_template_change(data(), data()) is plan.TemplateChange.NONE


def test_user_data_only_change_needs_a_version_but_no_refresh() -> None:
    change = plan.classify_template_change(data(UserData=b64("#cloud-config\ntoken: b")), data())
    assert change is plan.TemplateChange.USER_DATA_ONLY


@pytest.mark.parametrize(
    "override",
    [
        {"ImageId": "ami-2"},
        {"InstanceType": "m5.large"},
        {"SecurityGroupIds": ["sg-3"]},
        {"TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": "a", "Value": "2"}]}]},
        {"KeyName": "ops"},
    ],
)
def test_any_other_change_needs_a_refresh(override: dict[str, object]) -> None:
    changed = data(UserData=b64("#cloud-config\ntoken: b"), **override)
    assert plan.classify_template_change(changed, data()) is plan.TemplateChange.CONFIG


def test_order_of_security_groups_and_echoed_numbers_do_not_count_as_changes() -> None:
    mapping = [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 50, "Encrypted": True}}]
    echoed = [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": "50", "Encrypted": "true"}}]
    desired = data(SecurityGroupIds=["sg-1", "sg-2"], BlockDeviceMappings=mapping)
    assert plan.classify_template_change(desired, data(BlockDeviceMappings=echoed)) is (
        plan.TemplateChange.NONE
    )


def test_no_template_yet_counts_as_a_configuration_change() -> None:
    assert plan.classify_template_change(data(), None) is plan.TemplateChange.CONFIG


def test_user_data_hash_never_needs_the_plain_text() -> None:
    assert plan.user_data_hash(None) == ""
    assert len(plan.user_data_hash(b64("secret"))) == 64
    assert "secret" not in plan.user_data_hash(b64("secret"))


# --- suspended processes ------------------------------------------------------------------


def test_all_suspends_everything_except_explicit_false() -> None:
    names = plan.suspended_processes({"all": True, "processes": {"launch": False}})
    assert "Launch" not in names
    assert set(names) == set(plan.ALL_PROCESSES) - {"Launch"}


def test_individual_processes_map_to_aws_names() -> None:
    spec = {"processes": {"azRebalance": True, "terminate": True, "launch": False}}
    assert plan.suspended_processes(spec) == ["Terminate", "AZRebalance"]
    assert plan.suspended_processes(None) == []


def test_process_changes_suspend_missing_and_resume_removed() -> None:
    assert plan.process_changes(["Launch", "Terminate"], ["Terminate", "HealthCheck"]) == (
        ["Launch"],
        ["HealthCheck"],
    )


# --- lifecycle hooks ----------------------------------------------------------------------


def test_hooks_are_created_updated_and_deleted() -> None:
    spec = [
        {"name": "same", "lifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING"},
        {
            "name": "longer",
            "lifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
            "heartbeatTimeout": "10m",
        },
        {
            "name": "new",
            "lifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
            "defaultResult": "ABANDON",
        },
    ]
    current = [
        {
            "LifecycleHookName": "same",
            "LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING",
            "HeartbeatTimeout": 3600,
            "DefaultResult": "CONTINUE",
        },
        {
            "LifecycleHookName": "longer",
            "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
            "HeartbeatTimeout": 60,
            "DefaultResult": "CONTINUE",
        },
        {"LifecycleHookName": "old", "LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING"},
    ]
    changes = plan.hook_changes(spec, current)
    assert [p["LifecycleHookName"] for p in changes.put] == ["longer", "new"]
    assert changes.put[0]["HeartbeatTimeout"] == 600
    assert changes.put[1]["DefaultResult"] == "ABANDON"
    assert changes.delete == ["old"]


# --- launch template data -----------------------------------------------------------------


def test_template_data_from_spec() -> None:
    spec = {
        "additionalTags": {"team": "a"},
        "awsLaunchTemplate": {
            "instanceType": "t3.small",
            "iamInstanceProfile": "nodes",
            "sshKeyName": "ops",
            "additionalSecurityGroups": [{"id": "sg-2"}, {"id": "sg-1"}],
            "rootVolume": {"size": 50, "type": "gp3", "throughput": 125},
            "spotMarketOptions": {"maxPrice": "0.1"},
        },
    }
    out = template_data(AWSMachinePoolSpecView(spec), "c1", "pool", "ami-9", b64("x"))
    assert out["ImageId"] == "ami-9"
    assert out["IamInstanceProfile"] == {"Name": "nodes"}
    assert out["SecurityGroupIds"] == ["sg-1", "sg-2"]
    assert out["BlockDeviceMappings"] == [
        {
            "DeviceName": "/dev/sda1",
            "Ebs": {"VolumeSize": 50, "VolumeType": "gp3", "Throughput": 125},
        }
    ]
    assert out["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {"MaxPrice": "0.1"},
    }
    tags = {t["Key"]: t["Value"] for t in out["TagSpecifications"][0]["Tags"]}
    assert tags["sigs.k8s.io/cluster-api-provider-aws/cluster/c1"] == "owned"
    assert tags["team"] == "a"


# --- admission ----------------------------------------------------------------------------


def pool(**spec: object) -> dict[str, object]:
    base: dict[str, object] = {
        "minSize": 1,
        "maxSize": 3,
        "availabilityZones": ["us-east-1a"],
        "awsLaunchTemplate": {"instanceType": "t3.small", "ami": {"id": "ami-1"}},
    }
    base.update(spec)
    return {"metadata": {"name": "p"}, "spec": base}


def test_a_good_pool_is_valid() -> None:
    assert validate(pool()) == []


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"minSize": 4}, "spec.minSize"),
        ({"defaultCoolDown": "5 minutes"}, "spec.defaultCoolDown"),
        (
            {"subnets": [{"id": "s-1", "filters": [{"name": "a", "values": ["b"]}]}]},
            "spec.subnets[0]",
        ),
        ({"refreshPreferences": {"strategy": "Replace"}}, "spec.refreshPreferences.strategy"),
        (
            {"refreshPreferences": {"maxHealthyPercentage": 150}},
            "spec.refreshPreferences.minHealthyPercentage",
        ),
        (
            {
                "lifecycleHooks": [
                    {
                        "name": "h",
                        "lifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING",
                        "heartbeatTimeout": "10s",
                    }
                ]
            },
            "spec.lifecycleHooks[0].heartbeatTimeout",
        ),
        (
            {
                "lifecycleHooks": [
                    {
                        "name": "h",
                        "lifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING",
                        "roleARN": "arn:aws:iam::1:role/r",
                    }
                ]
            },
            "spec.lifecycleHooks[0]",
        ),
        ({"availabilityZones": None}, "spec.availabilityZones"),
        ({"maxSize": 0}, "spec.maxSize"),
    ],
)
def test_bad_specs_name_the_field(spec: dict[str, object], field: str) -> None:
    problems = validate(pool(**spec))
    assert problems, spec
    assert any(p.startswith(field) for p in problems), problems


def test_launch_template_name_is_immutable_once_set() -> None:
    old = pool(awsLaunchTemplate={"name": "a", "ami": {"id": "ami-1"}})
    new = pool(awsLaunchTemplate={"name": "b", "ami": {"id": "ami-1"}})
    assert any("immutable" in p for p in validate(new, old))


def test_admission_review_denies_with_every_problem() -> None:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "request": {"uid": "u1", "operation": "CREATE", "object": pool(minSize=5, maxSize=2)},
    }
    response = review_response(review)["response"]
    assert response["uid"] == "u1"
    assert response["allowed"] is False
    assert "spec.minSize" in response["status"]["message"]
    ok = review_response({"request": {"uid": "u2", "operation": "CREATE", "object": pool()}})
    assert ok["response"]["allowed"] is True


# --- warm pool -----------------------------------------------------------------------------


def test_warm_pool_params_mirror_put_warm_pool_and_compare_with_its_description() -> None:
    assert plan.warm_pool_params(None) is None
    desired = plan.warm_pool_params(
        {
            "minSize": 1,
            "maxGroupPreparedCapacity": 4,
            "instanceReusePolicy": {"reuseOnScaleIn": True},
        }
    )
    assert desired == {
        "MinSize": 1,
        "PoolState": "Stopped",
        "MaxGroupPreparedCapacity": 4,
        "InstanceReusePolicy": {"ReuseOnScaleIn": True},
    }
    described = {
        "MinSize": 1,
        "MaxGroupPreparedCapacity": 4,
        "PoolState": "Stopped",
        "InstanceReusePolicy": {"ReuseOnScaleIn": True},
    }
    assert not plan.warm_pool_differs(desired, described)
    assert plan.warm_pool_differs(desired, {**described, "MinSize": 0})
    assert plan.warm_pool_differs(desired, {**described, "Status": "PendingDelete"})
    assert plan.warm_pool_differs(desired, None)
    # Auto Scaling describes an unset MaxGroupPreparedCapacity as -1 (the group's MaxSize).
    unbounded = plan.warm_pool_params({"minSize": 2})
    assert unbounded is not None
    assert not plan.warm_pool_differs(unbounded, {"MinSize": 2, "MaxGroupPreparedCapacity": -1})
