"""``machinepool demo``: a pool created, scaled and rolled to a new version, shown live.

Runs against the local environment (``machinepool up``): the Cluster ``demo`` whose workload
cluster is local, the kubeadm bootstrap provider and the Sim provider. Every step waits until
the pool has converged, showing desired / ready / up-to-date counts, instances by version,
the phase and any condition that is not as it should be, with its reason.

Instances boot as a cloud's do, each after its own delay: the demo chooses 1-3 s, so it is
quick; ``--realistic`` leaves the Sim cloud's own default, 20-60 s, about what a VM from a
cloud image takes to run kubelet, so the rollout is seen going one surge at a time.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from machinepool.api.infra_sim import SIM_MACHINE_POOLS
from machinepool.api.kinds import KUBEADM_CONFIGS, MACHINE_POOLS
from machinepool.cli.kube import CliError, Target, connect
from machinepool.cli.pools import describe, follow
from machinepool.cli.views import pool_table, problems, versions_text
from machinepool.runtime.kube.client import Client, Resource

Obj = dict[str, Any]

POOL = "demo-pool"
CLUSTER = "demo"
FROM_VERSION = "v1.33.4"
TO_VERSION = "v1.34.4"
_MANAGER = "machinepool-demo"
QUICK_BOOT: Obj = {"bootDelaySeconds": 1, "bootDelaySpreadSeconds": 2}
REALISTIC_BOOT: Obj = {}
"""Nothing said of boot times: the Sim cloud's own default, 20-60 s."""


def example_objects(
    namespace: str, replicas: int, version: str, *, boot: Obj = QUICK_BOOT
) -> list[tuple[Resource, Obj]]:
    """The three objects of a pool: bootstrap config, Sim infra pool (whose instances boot
    as ``boot``, the Sim settings' boot delay and spread, says), MachinePool."""
    meta = {"name": POOL, "namespace": namespace}
    kubeadm: Obj = {
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmConfig",
        "metadata": meta,
        "spec": {
            "joinConfiguration": {
                "nodeRegistration": {"name": '{{ ds.meta_data["local_hostname"] }}'}
            },
            "files": [
                {
                    "path": "/etc/demo/hello.json",
                    "content": '{"hello": "pool"}',
                    "permissions": "0644",
                }
            ],
        },
    }
    sim: Obj = {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "SimMachinePool",
        "metadata": meta,
        "spec": {
            "template": {"instanceType": "sim.small", "image": "sim-ubuntu-2404"},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0, "deletePolicy": "Oldest"},
            },
            "sim": dict(boot),
        },
    }
    pool: Obj = {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachinePool",
        "metadata": meta,
        "spec": {
            "clusterName": CLUSTER,
            "replicas": replicas,
            "template": {
                "spec": {
                    "clusterName": CLUSTER,
                    "version": version,
                    "bootstrap": {
                        "configRef": {
                            "apiGroup": "bootstrap.cluster.x-k8s.io",
                            "kind": "KubeadmConfig",
                            "name": POOL,
                        }
                    },
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "SimMachinePool",
                        "name": POOL,
                    },
                }
            },
        },
    }
    return [(KUBEADM_CONFIGS, kubeadm), (SIM_MACHINE_POOLS, sim), (MACHINE_POOLS, pool)]


def _view(pool: Obj, step: str, started: float) -> Group:
    lines: list[Any] = [
        Text(f"{step}  ({time.monotonic() - started:.0f}s)", style="bold cyan"),
        pool_table([pool]),
        Text(f"instances by version: {versions_text(pool)}"),
    ]
    for type_, reason, message in problems(pool):
        lines.append(Text(f"  {type_}: {reason}  {message}", style="yellow"))
    return Group(*lines)


async def _step(client: Client, console: Console, namespace: str, step: str, timeout: float) -> Obj:
    started = time.monotonic()
    console.rule(step)
    with Live(console=console, refresh_per_second=4, transient=False) as live:

        def show(pool: Obj) -> None:
            live.update(_view(pool, step, started))

        done = await follow(client, POOL, namespace, timeout, show)
    if done is None:
        raise CliError(f"step '{step}' did not converge within {timeout:.0f}s")
    console.print(f"\n[green]done[/green] in {time.monotonic() - started:.1f}s")
    return done


async def run_demo(
    target: Target,
    console: Console,
    *,
    replicas: int,
    scale_to: int,
    timeout: float,
    realistic: bool = False,
) -> None:
    ns = target.namespace
    boot = REALISTIC_BOOT if realistic else QUICK_BOOT
    async with connect(target) as client:
        for res, obj in example_objects(ns, replicas, FROM_VERSION, boot=boot):
            await client.apply(res, obj, field_manager=_MANAGER)
        await _step(client, console, ns, f"1. create {POOL}: {replicas} x {FROM_VERSION}", timeout)
        await client.set_scale(MACHINE_POOLS, POOL, ns, scale_to)
        await _step(client, console, ns, f"2. scale {replicas} -> {scale_to}", timeout)
        patch = {"spec": {"template": {"spec": {"version": TO_VERSION}}}}
        await client.patch(MACHINE_POOLS, POOL, patch, ns)
        await _step(client, console, ns, f"3. roll {FROM_VERSION} -> {TO_VERSION}", timeout)
    console.rule("result")
    console.print(await describe(target, POOL))
