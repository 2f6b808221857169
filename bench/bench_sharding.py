"""Sharding benchmark: one workload reconciled by 1, 2 and 3 replicas of a sharded core.

    python bench/bench_sharding.py [--clusters C] [--pools N] [--replicas R] [--shards 1,2,3]

For each shard count, a fresh local control plane gets C Clusters, each with its own workload
kube-apiserver (``--workloads W`` < C shares W of them round-robin), and N MachinePools x R
replicas spread round-robin over the Clusters; the core
runs as that many ``machinepool run --components core --sharding`` replicas of one ring, and
bootstrap, Sim provider and node simulator run in one shared, unsharded process (as in
bench_machinepool.py). Measured from the first create until every pool is Running with R
Ready Nodes: wall time, and per core replica its CPU seconds, peak RSS, MachinePool
reconciles and the number of Clusters it was given. Each replica is one Python process,
which uses at most one core, so on a machine with more cores than replicas the work per
replica, not the wall time of this 2-core machine, says how far sharding scales.

Results: stdout and the ``sharding`` section of bench/RESULTS.md (with command and git
revision). Figures to compare, never assertions; not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mpbench import procs, report, scenario
from mpbench.env import NAMESPACE, BenchEnv
from mpbench.procs import MACHINEPOOL_CONTROLLER, Controller

from machinepool.api.constants import shard_label
from machinepool.api.kinds import CLUSTERS, MACHINE_POOLS
from machinepool.controlplane.register import register_workload_cluster
from machinepool.runtime import Client

CORE_USER, INFRA_USER, DRIVER_USER = "bench-core", "bench-infra", "bench-driver"
RING = "machinepool-core"
SHARD_LABEL = shard_label(RING)


@dataclass
class Run:
    shards: int
    seconds: float | None
    converged: int
    cpu: list[float]
    peak_rss_mib: list[float]
    reconciles: list[float]
    clusters: list[int]


def cluster_name(i: int) -> str:
    return f"bench-{i:03d}"


async def _create_pools(client: Client, pools: int, clusters: int, replicas: int) -> None:
    async def create(i: int) -> None:
        name, cluster = scenario.pool_name(i), cluster_name(i % clusters)
        for res, obj in scenario.pool_objects(name, replicas, scenario.FROM_VERSION):
            if obj["kind"] == "MachinePool":
                obj["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] = cluster
                obj["spec"]["clusterName"] = cluster
                obj["spec"]["template"]["spec"]["clusterName"] = cluster
            await client.create(res, obj, NAMESPACE)

    await scenario.bounded([str(i) for i in range(pools)], lambda i: create(int(i)))


async def _placed(client: Client, shards: int, timeout: float) -> None:
    """Until the assigner has put Clusters on every shard (all replicas hold their Lease)."""
    names = {f"s{i}" for i in range(shards)}
    async with asyncio.timeout(timeout):
        while True:
            listed = await client.list(CLUSTERS, NAMESPACE)
            labels = {(c["metadata"].get("labels") or {}).get(SHARD_LABEL) for c in listed.items}
            if names <= labels and None not in labels:
                return
            await asyncio.sleep(0.5)


async def _converge(
    client: Client, pools: int, replicas: int, timeout: float
) -> tuple[float | None, int]:
    started = time.monotonic()
    done = 0
    while time.monotonic() - started < timeout:
        listed = await client.list(MACHINE_POOLS, NAMESPACE)
        done = sum(scenario.pool_running(p, replicas) for p in listed.items)
        if done == pools:
            return time.monotonic() - started, done
        await asyncio.sleep(1.0)
    return None, done


async def run_one(shards: int, args: argparse.Namespace) -> Run:
    with tempfile.TemporaryDirectory(prefix="bench-sharding-") as tmp:
        workdir = Path(tmp)
        env = BenchEnv(workdir, audit=False)
        env.start()
        cores: list[Controller] = []
        infra: Controller | None = None
        try:
            client = await env.client(DRIVER_USER)
            async with client:
                await env.install(client, "ours")
                workloads = [env.cp.start_workload(f"wl-{w:03d}") for w in range(args.workloads)]
                for i in range(args.clusters):
                    await register_workload_cluster(
                        client, cluster_name(i), NAMESPACE, workloads[i % len(workloads)]
                    )
                infra = procs.infra(
                    env.kubeconfig_for(INFRA_USER),
                    workdir,
                    INFRA_USER,
                    args.heartbeat_seconds,
                    lease_seconds=args.lease_seconds,
                )
                kubeconfig = env.kubeconfig_for(CORE_USER)
                for i in range(shards):
                    extra = (f"--name={RING}", "--sharding", f"--shard-name=s{i}")
                    cores.append(
                        procs._ours(
                            f"core-{i}",
                            "core",
                            kubeconfig,
                            workdir,
                            CORE_USER,
                            app=True,
                            extra=extra,
                        )
                    )
                for proc in [infra, *cores]:
                    proc.wait_ready()
                await _placed(client, shards, args.timeout)
                before = [c.sample().cpu_seconds for c in cores]
                started = time.monotonic()
                await _create_pools(client, args.pools, args.clusters, args.replicas)
                seconds, converged = await _converge(
                    client, args.pools, args.replicas, args.timeout - (time.monotonic() - started)
                )
                if seconds is not None:
                    seconds += 0.0
                samples = [c.sample() for c in cores]
                listed = await client.list(CLUSTERS, NAMESPACE)
                given = [
                    sum(
                        (c["metadata"].get("labels") or {}).get(SHARD_LABEL) == f"s{i}"
                        for c in listed.items
                    )
                    for i in range(shards)
                ]
                return Run(
                    shards=shards,
                    seconds=seconds,
                    converged=converged,
                    cpu=[s.cpu_seconds - b for s, b in zip(samples, before, strict=True)],
                    peak_rss_mib=[s.peak_rss_bytes / 2**20 for s in samples],
                    reconciles=[c.reconciles().get(MACHINEPOOL_CONTROLLER, 0.0) for c in cores],
                    clusters=given,
                )
        finally:
            for proc in [*cores, *([infra] if infra else [])]:
                proc.stop()
            env.stop()


def _row(run: Run, pools: int) -> str:
    def each(values: list[float], fmt: str) -> str:
        return " / ".join(format(v, fmt) for v in values)

    wall = (
        f"{run.seconds:.1f}"
        if run.seconds is not None
        else f"not converged ({run.converged}/{pools})"
    )
    return (
        f"| {run.shards} | {wall} | {each(run.cpu, '.1f')} | {sum(run.cpu):.1f} | "
        f"{each(run.reconciles, '.0f')} | {each(run.peak_rss_mib, '.0f')} | "
        f"{' / '.join(str(c) for c in run.clusters)} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=12)
    parser.add_argument(
        "--workloads",
        type=int,
        default=None,
        help="workload apiservers the Clusters share round-robin (default: one per Cluster)",
    )
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=10)
    parser.add_argument("--shards", default="1,2,3", help="comma-separated replica counts")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--heartbeat-seconds", type=float, default=40.0)
    parser.add_argument(
        "--lease-seconds",
        type=float,
        default=0.0,
        help="simulated kubelets' Node Lease renewal period [0: no Leases; kubelet's is 10]",
    )
    args = parser.parse_args()
    args.workloads = args.workloads or args.clusters
    runs = []
    for shards in (int(s) for s in args.shards.split(",")):
        run = asyncio.run(run_one(shards, args))
        print(_row(run, args.pools), flush=True)
        runs.append(run)
    command = "python bench/" + Path(sys.argv[0]).name + " " + shlex.join(sys.argv[1:])
    size = (
        f"{args.pools} pools x {args.replicas} over {args.clusters} Clusters "
        f"and {args.workloads} workload apiservers"
    )
    header = (
        "| core replicas | seconds to all Running | CPU s per replica | CPU s total "
        "| MachinePool reconciles per replica | peak RSS MiB per replica "
        "| Clusters per replica |"
    )
    body = f"""The core as N replicas of one sharded ring (`--sharding`); bootstrap, Sim provider
and node simulator shared and unsharded. Per replica, separated by " / ": CPU seconds from the first
create to convergence, MachinePool reconciles, peak RSS, Clusters assigned.

{header}
|---|---|---|---|---|---|---|
{chr(10).join(_row(r, args.pools) for r in runs)}

A Python replica uses one core at most. On this
2-core machine the replicas share the cores with the management and workload apiservers,
etcd and the infra process, so wall time says little about a real cluster: where it drops
with more replicas, the replicas were waiting on the apiservers rather than on their core,
and more replicas wait in parallel. Per-replica CPU is the figure that says how far N
replicas would go on a machine with a core each: the busiest replica bounds it, and the ring
leader (the first), which also runs the assigner over unfiltered informers, is the busiest.
"Clusters per replica" counts the environment's own Cluster too (C + 1). Clusters that share
a workload apiserver each cache all its Nodes (a replica's cluster cache keeps one Node
informer per Cluster), so with fewer workload apiservers than Clusters a replica's RSS falls
with the Clusters it holds more steeply than it would in a real fleet; with one per Cluster
(the default) it holds what a real one would. Consistent hashing over few Clusters gives
uneven shares: compare the busiest replica with the single one. The replicas' reconciles add
up to more than one replica's, as a single busy queue folds more events into each reconcile.
"""
    report.publish("sharding", f"Sharding: {size}, 1..N core replicas", body, command, results=True)


if __name__ == "__main__":
    main()
