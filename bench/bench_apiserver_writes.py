"""The write ceiling of the local control plane: how many writes per second one Python client
gets through etcd and kube-apiserver on this machine, and what each costs the apiserver.

    .venv/bin/python bench/bench_apiserver_writes.py [--writes 3000] [--concurrency 32]

Two kinds of write, on one fresh control plane with our CRDs installed:

- ConfigMap creates: the cheapest write there is, a small built-in object;
- Machine status patches: the write a MachinePool's Machines take most of. A custom resource is
  decoded as unstructured JSON, pruned and defaulted by its schema, validated (ratcheting
  against the old object), tracked in managedFields and encoded again, so one costs the
  apiserver several times a ConfigMap create. The patches flip one condition of a status the
  shape the core writes (ten conditions, three deprecated ones), so each is a real change.

For each: writes per second and the management kube-apiserver's CPU milliseconds per write
(from /proc). Used to judge the scale goals (RESULTS.md): a Node costs a known number of
writes, so the apiserver's CPU per write bounds how fast any controller converges on two cores.
Starts its own control plane in a temporary directory and removes it afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mpbench.stats import read_proc

from machinepool.api.crdgen import crd_manifests
from machinepool.api.kinds import MACHINES
from machinepool.controlplane import ControlPlane
from machinepool.runtime import CONFIGMAPS, CRDS, NAMESPACES, Client, wait_established

NAMESPACE = "writes"
CONDITIONS = (
    "Paused",
    "BootstrapConfigReady",
    "InfrastructureReady",
    "NodeHealthy",
    "Deleting",
    "Updating",
    "NodeReady",
    "Ready",
    "Available",
    "UpToDate",
)


def machine(i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"m{i}", "labels": {"cluster.x-k8s.io/cluster-name": "c"}},
        "spec": {
            "clusterName": "c",
            "bootstrap": {"dataSecretName": f"m{i}"},
            "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "SimMachine",
                "name": f"m{i}",
            },
            "providerID": f"sim:///zone-a/m{i}",
            "version": "v1.34.4",
        },
    }


def machine_status(round_: int) -> dict[str, Any]:
    """The status the core writes for a Ready Machine; NodeReady flips each round."""
    stamp = f"2026-01-01T00:{round_ // 60 % 60:02d}:{round_ % 60:02d}Z"
    flip = round_ % 2 == 0
    conditions = [
        {
            "type": t,
            "status": "True" if (t != "NodeReady" or flip) else "False",
            "reason": t if (t != "NodeReady" or flip) else "NodeNotReady",
            "message": "",
            "observedGeneration": 1,
            "lastTransitionTime": stamp,
        }
        for t in CONDITIONS
    ]
    deprecated = [
        {"type": t, "status": "True", "lastTransitionTime": stamp}
        for t in ("Ready", "InfrastructureReady", "NodeHealthy")
    ]
    return {
        "status": {
            "phase": "Running",
            "nodeRef": {"name": "ip-10-0-0-1.sim.internal"},
            "conditions": conditions,
            "deprecated": {"v1beta1": {"conditions": deprecated}},
        }
    }


async def _timed(
    cp: ControlPlane, writes: int, concurrency: int, one: Callable[[int], Awaitable[Any]]
) -> dict[str, float]:
    gate = asyncio.Semaphore(concurrency)

    async def gated(i: int) -> None:
        async with gate:
            await one(i)

    pid = cp.management.apiserver.pid if cp.management.apiserver else None
    assert pid is not None
    cpu0 = read_proc(pid).cpu_seconds
    started = time.monotonic()
    await asyncio.gather(*(gated(i) for i in range(writes)))
    seconds = time.monotonic() - started
    cpu = read_proc(pid).cpu_seconds - cpu0
    return {
        "writes": writes,
        "seconds": seconds,
        "writes_per_s": writes / seconds,
        "apiserver_ms_per_write": 1000 * cpu / writes,
    }


async def measure(cp: ControlPlane, writes: int, concurrency: int) -> dict[str, Any]:
    async with await Client.from_kubeconfig(cp.kubeconfig) as client:
        await client.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})

        async def configmap(i: int) -> None:
            body = {"metadata": {"name": f"c{i}"}, "data": {"k": "v"}}
            await client.create(CONFIGMAPS, body, NAMESPACE)

        creates = await _timed(cp, writes, concurrency, configmap)

        for crd in crd_manifests():
            if crd["spec"]["names"]["kind"] == "Machine":
                await client.apply(CRDS, crd, field_manager="bench", force=True)
                await wait_established(client, crd["metadata"]["name"])
        # One Machine per 10 patches: a patch of the same object waits on the one before it.
        machines = max(1, writes // 10)
        await asyncio.gather(
            *(client.create(MACHINES, machine(i), NAMESPACE) for i in range(machines))
        )

        async def status(i: int) -> None:
            await client.patch(
                MACHINES,
                f"m{i % machines}",
                machine_status(i // machines),
                NAMESPACE,
                subresource="status",
            )

        patches = await _timed(cp, writes, concurrency, status)
    return {"configmap_creates": creates, "machine_status_patches": patches}


def ceiling(writes: int, concurrency: int) -> dict[str, Any]:
    """Start a control plane in a temporary directory, measure, stop it; the figures.

    Also called by bench_machinepool.py's scale scenarios, which state each scenario's
    writes/s against this ceiling, measured in the same invocation. The top-level
    ``writes_per_s`` is the ConfigMap creates'; ``machine_status_patches`` holds the other.
    """
    with tempfile.TemporaryDirectory() as tmp:
        cp = ControlPlane(Path(tmp) / "cp")
        cp.start()
        try:
            found = asyncio.run(measure(cp, writes, concurrency))
        finally:
            cp.stop()
    return {"concurrency": concurrency, **found["configmap_creates"], **found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    found = ceiling(args.writes, args.concurrency)
    for key, what in (
        ("configmap_creates", "ConfigMap creates"),
        ("machine_status_patches", "Machine status patches"),
    ):
        f = found[key]
        print(
            f"{args.writes} {what}, {args.concurrency} at a time: {f['seconds']:.2f} s,"
            f" {f['writes_per_s']:.0f} writes/s, management kube-apiserver"
            f" {f['apiserver_ms_per_write']:.2f} ms CPU per write"
        )


if __name__ == "__main__":
    main()
