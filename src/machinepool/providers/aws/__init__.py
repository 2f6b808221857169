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

from machinepool.api import infra_aws
from machinepool.api.infra_aws import AWSMACHINEPOOLS, AWSMACHINES
from machinepool.api.kinds import CLUSTERS, MACHINE_POOLS, MACHINES
from machinepool.providers.aws.awsmachine import AWSMachineReconciler
from machinepool.providers.aws.cloud import AWS, AWSError
from machinepool.providers.aws.controller import AWSMachinePoolReconciler, PoolInformers
from machinepool.providers.aws.scope import AWSOptions
from machinepool.providers.pool.observe import ensure_member_indexes, machine_to_pools, pool_keys
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
    if ref.get("kind") != "AWSMachinePool" or ref.get("apiGroup") != infra_aws.GROUP:
        return []
    return [ObjectKey(str(mp["metadata"].get("namespace", "")), str(ref.get("name", "")))]


def _from_aws_machine(obj: Obj) -> list[ObjectKey]:
    return pool_keys(obj, AWSMACHINEPOOLS.kind)


def _from_machine(aws_machines: Informer) -> Any:
    def mapper(machine: Obj) -> list[ObjectKey]:
        return machine_to_pools(machine, aws_machines, AWSMACHINES.kind, AWSMACHINEPOOLS.kind)

    return mapper


async def setup(
    mgr: Manager, cluster_cache: ClusterCache, options: AWSOptions | None = None
) -> None:
    """Register the AWSMachinePool and AWSMachine controllers and their informers on ``mgr``."""
    del cluster_cache  # the AWS provider never talks to workload clusters
    opts = options or AWSOptions()
    aws = AWS()
    log = get_logger(__name__)
    informers = PoolInformers(
        pools=await mgr.cache.get_informer(AWSMACHINEPOOLS),
        machine_pools=await mgr.cache.get_informer(MACHINE_POOLS),
        clusters=await mgr.cache.get_informer(CLUSTERS),
        aws_machines=await mgr.cache.get_informer(AWSMACHINES),
        machines=await mgr.cache.get_informer(MACHINES),
    )
    # The pool engine's indexes: AWSMachines by owning pool, Machines by infrastructureRef.
    ensure_member_indexes(informers.aws_machines, AWSMACHINEPOOLS.kind, informers.machines)
    pools, aws_machines = informers.pools, informers.aws_machines
    machine_pools, machines = informers.machine_pools, informers.machines
    recorder = mgr.event_recorder("awsmachinepool-controller")
    pool_reconciler = AWSMachinePoolReconciler(
        mgr.client, aws, recorder, log.bind(controller=POOL_CONTROLLER), opts, informers
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
        aws_machines,
        machines,
    )
    mgr.new_controller(
        MACHINE_CONTROLLER, machine_reconciler, concurrency=opts.awsmachinepool_concurrency
    ).watch(aws_machines)
