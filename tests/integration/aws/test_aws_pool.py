"""The AWS provider against the real control plane and an emulated AWS endpoint (moto over HTTP).

Core's MachinePool controllers do not run here: the conftest's ``MachineDriver`` plays their
part for pool Machines (create a Machine per AWSMachine; on Machine deletion cordon the Node,
delete the AWSMachine, delete the Node), and ``NodeAgent`` registers a Node per InService
instance. The end-to-end test with every real controller lives in test_aws_e2e.py.
"""

from __future__ import annotations

from typing import Any

from tests.support.resources import AWSMACHINEPOOLS, MACHINE_POOLS, MACHINES

from machinepool.api import conditions as cond
from machinepool.runtime import NODES, Manager

AWSEnv = Any  # the conftest's AWSEnv (test modules cannot import conftest under importlib)
FakeAWS = Any

REFRESH = "StartInstanceRefresh"


async def ready_with(env: AWSEnv, name: str, count: int) -> dict[str, Any]:
    """Wait until the pool is ready with ``count`` instances matching the group's."""

    async def check() -> dict[str, Any] | None:
        pool = await env.pool(name)
        live = await env.live_ids(name)
        ids = pool["spec"].get("providerIDList") or []
        if pool.get("status", {}).get("ready") and len(live) == count and ids == live:
            return pool
        return None

    return await env.eventually(check)  # type: ignore[no-any-return]


async def test_create_scale_up_and_scale_down_through_machines(
    aws_env: AWSEnv, provider: Manager, fake_aws: FakeAWS
) -> None:
    await aws_env.create_pool("workers", 2)
    pool = await ready_with(aws_env, "workers", 2)
    assert pool["status"]["replicas"] == 2
    assert pool["status"]["infrastructureMachineKind"] == "AWSMachine"
    assert pool["status"]["launchTemplateID"].startswith("lt-")
    assert pool["spec"]["providerID"].startswith("arn:aws:autoscaling:")
    assert cond.is_true(pool["status"]["conditions"], "Ready")
    assert pool["status"]["conditions"][0]["type"] == "Ready"
    group = await aws_env.group("workers")
    assert group is not None
    tags = {t["Key"]: t["Value"] for t in group["Tags"]}
    assert tags["sigs.k8s.io/cluster-api-provider-aws/cluster/c1"] == "owned"
    assert tags["sigs.k8s.io/cluster-api-provider-aws/role"] == "node"
    machines = await aws_env.aws_machines()
    assert sorted(m["spec"]["providerID"] for m in machines) == pool["spec"]["providerIDList"]
    assert all(m["metadata"]["labels"]["cluster.x-k8s.io/pool-name"] == "workers" for m in machines)
    assert all(not m["metadata"]["ownerReferences"][0].get("controller") for m in machines)

    await aws_env.scale("workers", 4)
    await ready_with(aws_env, "workers", 4)
    assert (await aws_env.group("workers") or {})["DesiredCapacity"] == 4

    # Scale down by one, choosing the Machine marked for deletion.
    marked = sorted(m["metadata"]["name"] for m in await aws_env.aws_machines())[2]
    marked_instance = marked.removeprefix("workers-")
    await aws_env.eventually(lambda: _machine_count(aws_env, 4))
    await aws_env.client.patch(
        *_machine(aws_env, marked),
        {"metadata": {"annotations": {"cluster.x-k8s.io/delete-machine": "yes"}}},
        aws_env.namespace,
    )
    ours = {
        pid.rsplit("/", 1)[-1] for pid in (await aws_env.pool("workers"))["spec"]["providerIDList"]
    }
    await aws_env.scale("workers", 3)
    pool = await ready_with(aws_env, "workers", 3)
    assert all(marked_instance not in pid for pid in pool["spec"]["providerIDList"])
    # Only this pool's instances: objects of earlier tests' namespaces may still be finalizing.
    terminations = [
        (n, form)
        for n, form in fake_aws.calls("TerminateInstanceInAutoScalingGroup")
        if form["InstanceId"][0] in ours
    ]
    assert [form["InstanceId"][0] for _, form in terminations] == [marked_instance]
    assert terminations[0][1]["ShouldDecrementDesiredCapacity"] == ["true"]
    assert not fake_aws.calls("SetDesiredCapacity")
    # The AWSMachine's finalizer holds it (and so the Machine and Node, which the stand-in
    # releases only once it is gone) until the instance was terminated.
    released = await aws_env.eventually(
        lambda: [
            n
            for n, what, name in aws_env.records
            if what == "node-deleted" and name == marked_instance
        ]
    )
    assert terminations[0][0] < released[0], "the AWSMachine went before its instance"
    assert (await aws_env.group("workers") or {})["DesiredCapacity"] == 3


async def _machine_count(env: AWSEnv, count: int) -> bool:
    return len((await env.client.list(MACHINES, env.namespace)).items) == count


def _machine(env: AWSEnv, name: str) -> tuple[Any, str]:
    return MACHINES, name


async def test_template_changes_refresh_only_when_more_than_user_data_changed(
    aws_env: AWSEnv, provider: Manager, fake_aws: FakeAWS
) -> None:
    await aws_env.create_pool("rolling", 1)
    pool = await ready_with(aws_env, "rolling", 1)
    assert pool["status"]["launchTemplateVersion"] == "1"

    # The bootstrap token rotates: a new version, and no refresh.
    await aws_env.set_bootstrap("t2")

    async def version(v: str) -> bool:
        return (await aws_env.pool("rolling"))["status"].get("launchTemplateVersion") == v

    await aws_env.eventually(lambda: version("2"))
    assert not fake_aws.calls(REFRESH)
    # New instances boot with the new data, old ones keep theirs.
    await aws_env.scale("rolling", 2)
    await ready_with(aws_env, "rolling", 2)
    nodes = await aws_env.eventually(lambda: _nodes_with_tokens(aws_env, 2))
    assert sorted(nodes) == ["t1", "t2"], nodes

    # A new AMI: a new version and an instance refresh.
    new_ami = await aws_env.ami(1)
    await aws_env.client.patch(
        *_pool_resource(aws_env, "rolling"),
        {"spec": {"awsLaunchTemplate": {"ami": {"id": new_ami}}}},
        aws_env.namespace,
    )
    await aws_env.eventually(lambda: fake_aws.calls(REFRESH))
    pool = await aws_env.eventually(lambda: _refresh_reported(aws_env, "rolling"))
    assert pool["status"]["launchTemplateVersion"] == "3"

    # An instance type change while that refresh runs: cancel it, then start a new one.
    await aws_env.client.patch(
        *_pool_resource(aws_env, "rolling"),
        {"spec": {"awsLaunchTemplate": {"instanceType": "m5.large"}}},
        aws_env.namespace,
    )
    await aws_env.eventually(lambda: len(fake_aws.calls(REFRESH)) == 2)
    cancels = fake_aws.calls("CancelInstanceRefresh")
    assert cancels
    assert cancels[0][0] < fake_aws.calls(REFRESH)[1][0]
    assert [r.status for r in fake_aws.refreshes] == ["Cancelled", "InProgress"]
    pool = await aws_env.eventually(lambda: _refresh_reported(aws_env, "rolling"))
    assert pool["status"]["launchTemplateVersion"] == "4"
    # Old versions nobody uses were pruned before new ones were made.
    assert fake_aws.calls("DeleteLaunchTemplateVersions")


async def _refresh_reported(env: AWSEnv, name: str) -> dict[str, Any] | None:
    pool = await env.pool(name)
    return pool if cond.is_true(pool["status"]["conditions"], "InstanceRefreshStarted") else None


async def _nodes_with_tokens(env: AWSEnv, count: int) -> list[str] | None:
    nodes = (await env.workload_client.list(NODES)).items
    tokens = [n["metadata"]["labels"].get("test/join-token", "") for n in nodes]
    return tokens if len(tokens) >= count else None


def _pool_resource(env: AWSEnv, name: str) -> tuple[Any, str]:
    return AWSMACHINEPOOLS, name


async def test_replicas_managed_by_copies_desired_capacity_back(
    aws_env: AWSEnv, provider: Manager, fake_aws: FakeAWS
) -> None:
    await aws_env.create_pool(
        "auto", 1, annotations={"cluster.x-k8s.io/replicas-managed-by": "external-autoscaler"}
    )
    await ready_with(aws_env, "auto", 1)
    # Something outside Cluster API scales the group.
    await aws_env.in_thread(
        fake_aws.asg.set_desired_capacity, AutoScalingGroupName="auto", DesiredCapacity=3
    )

    async def copied() -> bool:
        mp = await aws_env.client.get(MACHINE_POOLS, "auto", aws_env.namespace)
        return bool(mp["spec"]["replicas"] == 3)

    await aws_env.eventually(copied)
    await ready_with(aws_env, "auto", 3)
    # The provider never writes the size itself: the only SetDesiredCapacity is the test's.
    assert len(fake_aws.calls("SetDesiredCapacity")) == 1
    assert all(
        "DesiredCapacity" not in form for _, form in fake_aws.calls("UpdateAutoScalingGroup")
    )


async def test_processes_and_lifecycle_hooks_follow_the_spec(
    aws_env: AWSEnv, provider: Manager, fake_aws: FakeAWS
) -> None:
    hook = {
        "name": "drain",
        "lifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
        "heartbeatTimeout": "5m",
    }
    await aws_env.create_pool(
        "tuned",
        1,
        suspendProcesses={"processes": {"azRebalance": True, "launch": False}},
        lifecycleHooks=[hook],
    )
    await ready_with(aws_env, "tuned", 1)

    async def state() -> tuple[list[str], list[tuple[str, int]]]:
        group = await aws_env.group("tuned") or {}
        hooks = (
            await aws_env.in_thread(
                fake_aws.asg.describe_lifecycle_hooks, AutoScalingGroupName="tuned"
            )
        )["LifecycleHooks"]
        return (
            sorted(p["ProcessName"] for p in group.get("SuspendedProcesses", [])),
            sorted((h["LifecycleHookName"], h["HeartbeatTimeout"]) for h in hooks),
        )

    await aws_env.eventually(lambda: _equals(state(), (["AZRebalance"], [("drain", 300)])))
    pool = await aws_env.pool("tuned")
    assert cond.is_true(pool["status"]["conditions"], "LifecycleHookReady")

    await aws_env.client.patch(
        *_pool_resource(aws_env, "tuned"),
        {
            "spec": {
                "suspendProcesses": {"processes": {"launch": True, "azRebalance": None}},
                "lifecycleHooks": [
                    {**hook, "heartbeatTimeout": "10m"},
                    {"name": "warm", "lifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING"},
                ],
            }
        },
        aws_env.namespace,
    )
    await aws_env.eventually(
        lambda: _equals(state(), (["Launch"], [("drain", 600), ("warm", 3600)]))
    )
    await aws_env.client.patch(
        *_pool_resource(aws_env, "tuned"),
        {"spec": {"suspendProcesses": None, "lifecycleHooks": None}},
        aws_env.namespace,
    )
    await aws_env.eventually(lambda: _equals(state(), ([], [])))

    # The warm pool (ours: CAPA has none) is put as the spec says, changed, and deleted.
    async def warm_pool() -> Any:
        out = await aws_env.in_thread(fake_aws.asg.describe_warm_pool, AutoScalingGroupName="tuned")
        config = out.get("WarmPoolConfiguration")
        if not config:
            return None
        return (config.get("MinSize"), config.get("MaxGroupPreparedCapacity"), config["PoolState"])

    for spec, expected in (
        ({"minSize": 2}, (2, None, "Stopped")),
        (
            {"minSize": 1, "maxGroupPreparedCapacity": 4, "poolState": "Hibernated"},
            (1, 4, "Hibernated"),
        ),
        (None, None),
    ):
        await aws_env.client.patch(
            *_pool_resource(aws_env, "tuned"), {"spec": {"warmPool": spec}}, aws_env.namespace
        )
        await aws_env.eventually(lambda e=expected: _equals(warm_pool(), e))


async def _equals(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def test_delete_leaves_no_group_template_or_instance(
    aws_env: AWSEnv, provider: Manager, fake_aws: FakeAWS
) -> None:
    await aws_env.create_pool("doomed", 2)
    await ready_with(aws_env, "doomed", 2)
    await aws_env.client.delete(AWSMACHINEPOOLS, "doomed", aws_env.namespace)

    async def gone() -> bool:
        try:
            await aws_env.pool("doomed")
        except Exception:
            return True
        return False

    await aws_env.eventually(gone)
    assert await aws_env.group("doomed") is None
    templates = (await aws_env.in_thread(fake_aws.ec2.describe_launch_templates))["LaunchTemplates"]
    assert templates == []
    reservations = (await aws_env.in_thread(fake_aws.ec2.describe_instances))["Reservations"]
    states = {i["State"]["Name"] for r in reservations for i in r["Instances"]}
    assert states <= {"terminated", "shutting-down"}


async def test_aws_errors_become_conditions_with_the_code(
    aws_env: AWSEnv, provider: Manager, fake_aws: FakeAWS
) -> None:
    fake_aws.fail("CreateAutoScalingGroup", "AccessDenied", "not authorized to create groups", 403)
    await aws_env.create_pool("denied", 1)

    async def failed() -> dict[str, Any] | None:
        conditions = (await aws_env.pool("denied")).get("status", {}).get("conditions")
        found = cond.get_condition(conditions, "ASGReady")
        return found if found and "AccessDenied" in found.get("message", "") else None

    asg_ready = await aws_env.eventually(failed)
    assert asg_ready["status"] == "False"
    assert asg_ready["reason"] == "ASGProvisionFailed"
    assert asg_ready["severity"] == "Error"
    ready = cond.get_condition((await aws_env.pool("denied"))["status"]["conditions"], "Ready")
    assert ready is not None
    assert ready["status"] == "False"
    attempts = len(fake_aws.calls("CreateAutoScalingGroup"))
    fake_aws.clear_faults()
    await ready_with(aws_env, "denied", 1)
    # Retried with backoff, not in a hot loop.
    assert attempts < 50


async def test_invalid_spec_is_reported_as_a_condition(
    aws_env: AWSEnv, provider: Manager, fake_aws: FakeAWS
) -> None:
    await aws_env.create_pool("bad", 1, minSize=4, maxSize=2)

    async def reported() -> dict[str, Any] | None:
        conditions = (await aws_env.pool("bad")).get("status", {}).get("conditions")
        found = cond.get_condition(conditions, "ASGReady")
        return found if found and found.get("reason") == "InvalidConfiguration" else None

    found = await aws_env.eventually(reported)
    assert "spec.minSize" in found["message"]
    assert not fake_aws.calls("CreateLaunchTemplate")


async def test_remediated_machine_is_terminated_without_decrement_and_replaced(
    aws_env: AWSEnv, provider: Manager, fake_aws: FakeAWS
) -> None:
    """A Machine the MachinePool deletes for remediation (OwnerRemediated=False, reason
    MachineDeleting, as ``controllers.machinepool.remediation`` writes it) loses its instance
    without shrinking the group, so AWS launches a replacement."""
    await aws_env.create_pool("healing", 2)
    before = await ready_with(aws_env, "healing", 2)
    await aws_env.eventually(lambda: _machine_count(aws_env, 2))
    victim = sorted(m["metadata"]["name"] for m in await aws_env.aws_machines())[0]
    victim_instance = victim.removeprefix("healing-")
    condition = {
        "type": "OwnerRemediated",
        "status": "False",
        "reason": "MachineDeleting",
        "message": "Machine is deleting",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    await aws_env.client.patch(
        MACHINES,
        victim,
        {"status": {"conditions": [condition]}},
        aws_env.namespace,
        subresource="status",
    )
    await aws_env.client.delete(MACHINES, victim, aws_env.namespace)

    async def replaced() -> dict[str, Any] | None:
        pool = await ready_with(aws_env, "healing", 2)
        ids = pool["spec"]["providerIDList"]
        return pool if all(victim_instance not in pid for pid in ids) else None

    after = await aws_env.eventually(replaced)
    assert len(set(after["spec"]["providerIDList"]) - set(before["spec"]["providerIDList"])) == 1
    terminations = [
        form
        for _, form in fake_aws.calls("TerminateInstanceInAutoScalingGroup")
        if form["InstanceId"][0] == victim_instance
    ]
    assert [form["ShouldDecrementDesiredCapacity"] for form in terminations] == [["false"]]
    assert (await aws_env.group("healing") or {})["DesiredCapacity"] == 2
