"""End to end on AWS (emulated): core MachinePool and Machine controllers, kubeadm bootstrap and
the AWS provider in one manager. Instances "boot" by verifying the join token in their user
data against the workload cluster and registering a Ready Node with ``aws:///`` providerID; the
MachinePool must reach Running, and scale-down must go through Machine deletion (Node cordoned
before its instance is terminated with a decrement).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from tests.support.resources import AWSMACHINEPOOLS, KUBEADM_CONFIGS, MACHINE_POOLS, MACHINES

from machinepool.api import constants as c
from machinepool.providers import aws as aws_provider
from machinepool.runtime import NODES, ClusterCache, FuncHandler, Informer, Manager
from machinepool.simworld.kubelet.join import verify_join
from machinepool.simworld.kubelet.joinconfig import parse_join

VERSION = "v1.31.0"


class JoiningAgent:
    """Each InService instance joins: its user data's token must authenticate, then a Node."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.joined: set[str] = set()
        self.rejected: list[str] = []

    async def run(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self._sync()
            await asyncio.sleep(0.3)

    async def _sync(self) -> None:
        fake = self.env.fake
        groups = (await self.env.in_thread(fake.asg.describe_auto_scaling_groups))[
            "AutoScalingGroups"
        ]
        for group in groups:
            for inst in group.get("Instances", []):
                if inst["LifecycleState"] == "InService" and inst["InstanceId"] not in self.joined:
                    await self._join(inst["InstanceId"], inst["AvailabilityZone"])

    async def _join(self, instance: str, zone: str) -> None:
        fake = self.env.fake
        attr = await self.env.in_thread(
            fake.ec2.describe_instance_attribute, InstanceId=instance, Attribute="userData"
        )
        join = parse_join(base64.b64decode(attr["UserData"]["Value"]))
        await verify_join(join, self.env.workload.kubeconfig_dict())
        wc = self.env.workload_client
        node = {
            "metadata": {"name": instance, "labels": dict(join.node_labels)},
            "spec": {
                "providerID": f"aws:///{zone}/{instance}",
                "taints": [{"key": c.UNINITIALIZED_TAINT_KEY, "effect": "NoSchedule"}],
            },
        }
        with contextlib.suppress(Exception):
            await wc.create(NODES, node)
        now = "2026-01-01T00:00:00Z"
        status = {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "ok",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "nodeInfo": {
                    "kubeletVersion": VERSION,
                    "kubeProxyVersion": VERSION,
                    "containerRuntimeVersion": "fake://1",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                    "osImage": "fake",
                    "kernelVersion": "fake",
                    "machineID": instance,
                    "systemUUID": instance,
                    "bootID": instance,
                },
            }
        }
        await wc.patch(NODES, instance, status, subresource="status")
        self.joined.add(instance)


@pytest_asyncio.fixture(loop_scope="session")
async def system(aws_env: Any) -> AsyncIterator[Manager]:
    from machinepool.bootstrap import kubeadm
    from machinepool.controllers import machine, machinepool

    mgr = Manager(aws_env.client, bind_address="127.0.0.1:0")
    cache = ClusterCache(aws_env.client, probe_interval=5.0)
    for setup in (machinepool.setup, machine.setup, kubeadm.setup):
        await setup(mgr, cache)
    await aws_provider.setup(
        mgr, cache, aws_provider.AWSOptions(aws_poll_interval=1.0, aws_busy_poll_interval=0.3)
    )
    await mgr.start()
    agent = asyncio.create_task(JoiningAgent(aws_env).run())
    try:
        yield mgr
    finally:
        agent.cancel()
        await asyncio.gather(agent, return_exceptions=True)
        await mgr.stop()
        await cache.stop()


async def create(env: Any, name: str, replicas: int) -> None:
    ns = env.namespace
    await env.client.create(
        KUBEADM_CONFIGS,
        {
            "apiVersion": KUBEADM_CONFIGS.api_version,
            "kind": "KubeadmConfig",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"joinConfiguration": {"nodeRegistration": {}}},
        },
        ns,
    )
    await env.client.create(
        AWSMACHINEPOOLS,
        {
            "apiVersion": AWSMACHINEPOOLS.api_version,
            "kind": "AWSMachinePool",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "minSize": 0,
                "maxSize": 4,
                "availabilityZones": ["us-east-1a"],
                "awsLaunchTemplate": {"instanceType": "t3.small", "ami": {"id": await env.ami()}},
            },
        },
        ns,
    )
    await env.client.create(
        MACHINE_POOLS,
        {
            "apiVersion": MACHINE_POOLS.api_version,
            "kind": "MachinePool",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "clusterName": env.cluster,
                "replicas": replicas,
                "template": {
                    "spec": {
                        "clusterName": env.cluster,
                        "version": VERSION,
                        "bootstrap": {
                            "configRef": {
                                "apiGroup": "bootstrap.cluster.x-k8s.io",
                                "kind": "KubeadmConfig",
                                "name": name,
                            }
                        },
                        "infrastructureRef": {
                            "apiGroup": AWSMACHINEPOOLS.group,
                            "kind": "AWSMachinePool",
                            "name": name,
                        },
                    }
                },
            },
        },
        ns,
    )


async def running(env: Any, name: str, replicas: int) -> dict[str, Any] | None:
    mp = await env.client.get(MACHINE_POOLS, name, env.namespace)
    status = mp.get("status") or {}
    nodes = sorted(
        n["spec"]["providerID"]
        for n in (await env.workload_client.list(NODES)).items
        if not n["spec"].get("unschedulable")
    )
    ids = sorted(mp["spec"].get("providerIDList") or [])
    if (
        status.get("phase") == "Running"
        and status.get("readyReplicas") == replicas
        and len(ids) == replicas
        and set(ids) <= set(nodes)
    ):
        return mp
    return None


async def test_machine_pool_runs_on_aws_and_scales_down_through_drained_machines(
    aws_env: Any, system: Manager
) -> None:
    await create(aws_env, "e2e", 2)
    mp = await aws_env.eventually(lambda: running(aws_env, "e2e", 2), within=120)
    assert all(pid.startswith("aws:///us-east-1a/i-") for pid in mp["spec"]["providerIDList"])
    machines = (await aws_env.client.list(MACHINES, aws_env.namespace)).items
    assert len(machines) == 2

    ours = {pid.rsplit("/", 1)[-1] for pid in mp["spec"]["providerIDList"]}
    cordoned: dict[str, int] = {}
    nodes = Informer(aws_env.workload_client, NODES)

    def on_update(_old: Any, new: Any) -> None:
        if new["spec"].get("unschedulable"):
            cordoned.setdefault(new["metadata"]["name"], aws_env.seq())

    nodes.add_handler(FuncHandler(update=on_update))
    await nodes.start()
    try:
        await aws_env.scale("e2e", 1)
        await aws_env.eventually(lambda: running(aws_env, "e2e", 1), within=120)
    finally:
        await nodes.stop()
    # Only this pool's instances: objects of earlier tests' namespaces may still be finalizing.
    terminations = [
        (n, form)
        for n, form in aws_env.fake.calls("TerminateInstanceInAutoScalingGroup")
        if form["InstanceId"][0] in ours
    ]
    assert len(terminations) == 1
    number, form = terminations[0]
    instance = form["InstanceId"][0]
    assert form["ShouldDecrementDesiredCapacity"] == ["true"]
    assert instance in cordoned, "the Node of the removed instance was never cordoned"
    assert cordoned[instance] < number, "the instance went before its Node was cordoned"
    assert (await aws_env.group("e2e"))["DesiredCapacity"] == 1
