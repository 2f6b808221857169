"""machinepool.providers.aws: AWSMachinePool and AWSMachine over EC2 Auto Scaling (boto3).

One Auto Scaling group and one launch template per pool; user data from the MachinePool's
bootstrap data Secret; instance refresh on template changes other than user data; lifecycle
hooks and suspended processes reconciled; providerIDs ``aws:///<zone>/<instance-id>``; one
AWSMachine per instance (MachinePool Machines) so scale-down drains Nodes through Machines.

The app wires it with ``await setup(mgr, cluster_cache, AWSOptions(...))``. AWS credentials
and region come from boto3's standard chain, the endpoint from ``AWS_ENDPOINT_URL``.
The admission webhook lives in ``machinepool.providers.aws.webhook``.
"""

from __future__ import annotations

from typing import Any

from machinepool.api import constants as c
from machinepool.api.infra_aws import AWSMACHINEPOOLS, AWSMACHINES
from machinepool.api.kinds import MACHINE_POOLS, MACHINES
from machinepool.providers.aws.awsmachine import AWSMachineReconciler
from machinepool.providers.aws.cloud import AWS, AWSError
from machinepool.providers.aws.controller import AWSMachinePoolReconciler
from machinepool.providers.aws.scope import AWSOptions
from machinepool.runtime import ClusterCache, Informer, Manager, Obj, ObjectKey, get_logger

__all__ = [
    "AWS",
    "AWSError",
    "AWSMachinePoolReconciler",
    "AWSMachineReconciler",
    "AWSOptions",
    "setup",
]

POOL_CONTROLLER = "awsmachinepool"
MACHINE_CONTROLLER = "awsmachine"


def _from_machine_pool(mp: Obj) -> list[ObjectKey]:
    ref = ((mp.get("spec") or {}).get("template") or {}).get("spec", {}).get(
        "infrastructureRef"
    ) or {}
    if ref.get("kind") != "AWSMachinePool" or ref.get("apiGroup") != c.INFRASTRUCTURE_GROUP:
        return []
    return [ObjectKey(str(mp["metadata"].get("namespace", "")), str(ref.get("name", "")))]


def _from_aws_machine(obj: Obj) -> list[ObjectKey]:
    meta = obj.get("metadata") or {}
    return [
        ObjectKey(str(meta.get("namespace", "")), str(ref["name"]))
        for ref in meta.get("ownerReferences") or []
        if ref.get("kind") == "AWSMachinePool"
    ]


def _from_machine(aws_machines: Informer) -> Any:
    def mapper(machine: Obj) -> list[ObjectKey]:
        ref = (machine.get("spec") or {}).get("infrastructureRef") or {}
        if ref.get("kind") != "AWSMachine":
            return []
        found = aws_machines.get(
            str(ref.get("name", "")), str(machine["metadata"].get("namespace", ""))
        )
        return _from_aws_machine(found) if found is not None else []

    return mapper


async def setup(
    mgr: Manager, cluster_cache: ClusterCache, options: AWSOptions | None = None
) -> None:
    """Register the AWSMachinePool and AWSMachine controllers and their informers on ``mgr``."""
    del cluster_cache  # the AWS provider never talks to workload clusters
    opts = options or AWSOptions()
    aws = AWS()
    log = get_logger(__name__)
    pools = await mgr.cache.get_informer(AWSMACHINEPOOLS)
    aws_machines = await mgr.cache.get_informer(AWSMACHINES)
    machine_pools = await mgr.cache.get_informer(MACHINE_POOLS)
    machines = await mgr.cache.get_informer(MACHINES)
    recorder = mgr.event_recorder("awsmachinepool-controller")
    pool_reconciler = AWSMachinePoolReconciler(
        mgr.client,
        aws,
        recorder,
        log.bind(controller=POOL_CONTROLLER),
        opts,
        aws_machines,
        machines,
    )
    pool_ctrl = mgr.new_controller(
        POOL_CONTROLLER, pool_reconciler, concurrency=opts.awsmachinepool_concurrency
    )
    pool_ctrl.watch(pools)
    pool_ctrl.watch(machine_pools, _from_machine_pool)
    pool_ctrl.watch(aws_machines, _from_aws_machine)
    pool_ctrl.watch(machines, _from_machine(aws_machines))
    machine_reconciler = AWSMachineReconciler(
        mgr.client,
        aws,
        mgr.event_recorder("awsmachine-controller"),
        log.bind(controller=MACHINE_CONTROLLER),
    )
    mgr.new_controller(
        MACHINE_CONTROLLER, machine_reconciler, concurrency=opts.awsmachinepool_concurrency
    ).watch(aws_machines)
