"""The write ceiling of the local control plane: how many writes per second one Python client
gets through etcd and kube-apiserver on this machine, and what each costs the apiserver.

    .venv/bin/python bench/bench_apiserver_writes.py [--writes 3000] [--concurrency 32]
        [--pool-sizes 10,100,1000] [--pool-writes 100] [--no-profile] [--no-results]

Two kinds of write, on one fresh control plane with our CRDs installed:

- ConfigMap creates: the cheapest write there is, a small built-in object;
- Machine status patches: the write a MachinePool's Machines take most of. A custom resource is
  decoded as unstructured JSON, pruned and defaulted by its schema, validated (ratcheting
  against the old object), tracked in managedFields and encoded again, so one costs the
  apiserver several times a ConfigMap create. The patches flip one condition of a status the
  shape the core writes (ten conditions, three deprecated ones), so each is a real change.

For each: writes per second and the management kube-apiserver's CPU milliseconds per write
(from /proc).

Then what makes a Machine write cost what it does: a Machine created the MachinePool
controller's way (server-side apply, labels, finalizer and owner in the request) and upstream
MachineSet's way (a create), and the same one-field status patch (``phase``) of a Machine
before and after it carries its ten conditions, with the stored object's size and how much of
it is ``managedFields``. Unless ``--no-profile`` (or without a ``go`` command to read the
profile), the management kube-apiserver runs with profiling on and a CPU profile is taken
over those one-field patches: the share of its samples in each stage of a write.

Then what a write of a pool object costs by the pool's size (``--pool-sizes``): ten
MachinePools with that many providerIDs and nodeRefs, each patched in turn, once in its
status (``readyReplicas`` only) and once in its spec (``providerIDList``, one ID replaced), and
ten SimMachinePools with that many providerIDs and ``status.instances``, patched in their
status (``observedGeneration`` only). The
patch is small, but the apiserver decodes, validates, encodes and sends every watcher the whole
object, so a pool of 1,000 pays for 1,000 entries on every write. Written to RESULTS.md
(section ``apiserver-writes``) unless ``--no-results``.

Used to judge the scale goals (RESULTS.md): a Node costs a known number of
writes, so the apiserver's CPU per write bounds how fast any controller converges on two cores.
Starts its own control plane in a temporary directory and removes it afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mpbench import report
from mpbench.shapes import machine_status
from mpbench.stats import read_proc

from machinepool.api.crdgen import crd_manifests
from machinepool.api.infra_sim import SIM_MACHINE_POOLS
from machinepool.api.kinds import MACHINE_POOLS, MACHINES
from machinepool.controlplane import ControlPlane
from machinepool.runtime import CONFIGMAPS, CRDS, NAMESPACES, Client, wait_established

NAMESPACE = "writes"


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


def pool_machine(name: str, owner: dict[str, Any]) -> dict[str, Any]:
    """A Machine as the MachinePool controller creates one: its labels, the Machine
    finalizer and the pool ``owner`` as controlling owner, all in the first request."""
    body = machine(0)
    body["apiVersion"], body["kind"] = "cluster.x-k8s.io/v1beta2", "Machine"
    meta = body["metadata"]
    meta.update(
        name=name,
        namespace=NAMESPACE,
        finalizers=["machine.cluster.x-k8s.io"],
        ownerReferences=[
            {
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "MachinePool",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    )
    meta["labels"]["cluster.x-k8s.io/pool-name"] = owner["metadata"]["name"]
    return body


# The stages of a write, by the function whose cumulative samples measure it (they overlap:
# a decode happens inside a patch, a managedFields read inside a decode).
PROFILE_STAGES = (
    ("the whole status patch, request to stored", "endpoints/handlers.(*patcher).patchResource"),
    ("applying the patch: the object to JSON, patched, and back", ".applyPatchToCurrentObject"),
    ("decoding JSON into objects", "serializer/versioning.(*codec).Decode"),
    ("encoding objects into JSON", "serializer/versioning.(*codec).Encode"),
    ("schema validation, ratcheting against the old object", ".ValidateCustomResourceUpdate"),
    ("managedFields: recording the write's fields", "internal.(*FieldManager).Update"),
    ("managedFields: reading them from the object", "(*Unstructured).GetManagedFields"),
    ("the watch: decoding each stored change for watchers", "etcd3.(*watchChan).prepareObjs"),
    ("Go garbage collection", "runtime.gcBgMarkWorker"),
)


async def measure_machine_shapes(
    cp: ControlPlane, writes: int, concurrency: int, profile: bool
) -> dict[str, Any]:
    """What a Machine write costs by how it is made and by what the Machine carries."""
    rows: dict[str, dict[str, float]] = {}
    async with await Client.from_kubeconfig(cp.kubeconfig) as client:

        def phase(prefix: str, value: str) -> Callable[[int], Awaitable[Any]]:
            body = {"status": {"phase": value}}
            return lambda i: client.patch(
                MACHINES, f"{prefix}{i}", body, NAMESPACE, subresource="status"
            )

        # A real owner: the garbage collector deletes what a missing one owned.
        owner = await client.create(MACHINE_POOLS, machine_pool("owner", 1), NAMESPACE)
        rows["create"] = await _timed(
            cp,
            writes,
            concurrency,
            lambda i: client.create(MACHINES, pool_machine(f"c{i}", owner), NAMESPACE),
        )
        rows["apply"] = await _timed(
            cp,
            writes,
            concurrency,
            lambda i: client.apply(MACHINES, pool_machine(f"a{i}", owner), field_manager="bench"),
        )
        rows["bare_phase"] = await _timed(cp, writes, concurrency, phase("a", "Provisioning"))
        rows["conditions"] = await _timed(
            cp,
            writes,
            concurrency,
            lambda i: client.patch(
                MACHINES, f"a{i}", machine_status(0), NAMESPACE, subresource="status"
            ),
        )
        rows["full_phase"] = await _timed(cp, writes, concurrency, phase("a", "Provisioned"))
        stored = await client.get(MACHINES, "a0", NAMESPACE)  # managedFields included
        assert not stored["metadata"].get("deletionTimestamp"), "the Machines were deleted"
        sizes = {
            "whole": _json_bytes(stored),
            "managedFields": _json_bytes(stored["metadata"].get("managedFields") or []),
            "status": _json_bytes(stored.get("status") or {}),
        }
        shares = await _profile(cp, writes, concurrency, phase) if profile else None
    return {"rows": rows, "bytes": sizes, "profile": shares}


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")))


async def _profile(
    cp: ControlPlane,
    writes: int,
    concurrency: int,
    phase: Callable[[str, str], Callable[[int], Awaitable[Any]]],
    seconds: int = 20,
) -> dict[str, Any] | None:
    """The share of the management kube-apiserver's CPU samples in each ``PROFILE_STAGES``
    while one-field status patches of conditioned Machines run; None without ``go``."""
    go = shutil.which("go")
    if go is None:
        print("no go command: no apiserver profile", flush=True)
        return None
    management = cp.management
    url = f"{management.url}/debug/pprof/profile?seconds={seconds}"

    def fetch() -> bytes:
        with urllib.request.urlopen(
            url, context=management.pki.ssl_context(), timeout=seconds + 30
        ) as resp:
            return bytes(resp.read())

    taking = asyncio.ensure_future(asyncio.to_thread(fetch))
    rounds = 0
    while not taking.done():
        await _timed(cp, writes, concurrency, phase("a", ("Running", "Provisioned")[rounds % 2]))
        rounds += 1
    cum = await asyncio.to_thread(_cumulative, go, await taking)
    return {
        "seconds": seconds,
        "rounds": rounds,
        "stages": {
            what: max((pct for name, pct in cum.items() if function in name), default=0.0)
            for what, function in PROFILE_STAGES
        },
    }


def _cumulative(go: str, profile: bytes) -> dict[str, float]:
    """Each function's cumulative share of a CPU profile's samples, in percent."""
    with tempfile.NamedTemporaryFile(suffix=".pprof") as raw:
        raw.write(profile)
        raw.flush()
        top = subprocess.run(
            [go, "tool", "pprof", "-top", "-cum", "-nodecount=100000", raw.name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    cum: dict[str, float] = {}
    for line in top.splitlines():
        parts = line.split()  # flat flat% sum% cum cum% name
        if len(parts) >= 6 and parts[4].endswith("%"):
            cum.setdefault(" ".join(parts[5:]), float(parts[4].rstrip("%")))
    return cum


def machine_pool(name: str, size: int) -> dict[str, Any]:
    """A MachinePool of ``size`` replicas listing ``size`` provider IDs."""
    return {
        "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": "c"}},
        "spec": {
            "clusterName": "c",
            "replicas": size,
            "providerIDList": provider_ids(name, 0, size),
            "template": {
                "spec": {
                    "clusterName": "c",
                    "version": "v1.34.4",
                    "bootstrap": {"dataSecretName": name},
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "SimMachinePool",
                        "name": name,
                    },
                }
            },
        },
    }


def provider_ids(pool: str, first: int, size: int) -> list[str]:
    return [f"sim:///zone-a/{pool}-{i:05d}" for i in range(first, first + size)]


def node_refs(pool: str, size: int) -> list[dict[str, str]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": f"ip-10-{i // 256 % 256}-{i % 256}-{len(pool)}.sim.internal",
            "uid": f"00000000-0000-4000-8000-{i:012d}",
        }
        for i in range(size)
    ]


def instances(pool: str, size: int) -> list[dict[str, Any]]:
    """A SimMachinePool's ``status.instances`` as the provider writes them."""
    return [
        {
            "instanceID": f"{pool}-{i:05d}",
            "providerID": f"sim:///zone-a/{pool}-{i:05d}",
            "failureDomain": "zone-a",
            "state": "running",
            "upToDate": True,
            "version": "v1.34.4",
        }
        for i in range(size)
    ]


async def measure_pools(
    cp: ControlPlane, sizes: list[int], writes: int, pools: int = 10
) -> list[dict[str, Any]]:
    """Per size: a status patch and a spec patch of a pool of that size, ``writes`` of each,
    one pool's patches in turn (a pool's writes wait on each other, as one controller's do)."""
    rows: list[dict[str, Any]] = []
    async with await Client.from_kubeconfig(cp.kubeconfig) as client:
        for crd in crd_manifests():
            if crd["spec"]["names"]["kind"] in ("MachinePool", "SimMachinePool"):
                await client.apply(CRDS, crd, field_manager="bench", force=True)
                await wait_established(client, crd["metadata"]["name"])
        for size in sizes:
            rows += await _pool_rows(cp, client, size, max(1, writes // pools), pools)
    return rows


async def _pool_rows(
    cp: ControlPlane, client: Client, size: int, rounds: int, pools: int
) -> list[dict[str, Any]]:
    names = [f"pool-{size}-{p}" for p in range(pools)]
    for name in names:
        await client.create(MACHINE_POOLS, machine_pool(name, size), NAMESPACE)
        status = {"status": {"replicas": size, "nodeRefs": node_refs(name, size)}}
        await client.patch(MACHINE_POOLS, name, status, NAMESPACE, subresource="status")
        infra = {
            "metadata": {"name": name},
            "spec": {"providerIDList": provider_ids(name, 0, size)},
        }
        await client.create(SIM_MACHINE_POOLS, infra, NAMESPACE)
        status = {"status": {"replicas": size, "instances": instances(name, size)}}
        await client.patch(SIM_MACHINE_POOLS, name, status, NAMESPACE, subresource="status")

    async def status_patch(i: int) -> None:
        name, round_ = names[i % pools], i // pools
        body = {"status": {"readyReplicas": round_ % size}}
        await client.patch(MACHINE_POOLS, name, body, NAMESPACE, subresource="status")

    async def spec_patch(i: int) -> None:
        name, round_ = names[i % pools], i // pools + 1
        body = {"spec": {"providerIDList": provider_ids(name, round_, size)}}
        await client.patch(MACHINE_POOLS, name, body, NAMESPACE)

    async def infra_status_patch(i: int) -> None:
        name, round_ = names[i % pools], i // pools + 1
        body = {"status": {"observedGeneration": round_}}
        await client.patch(SIM_MACHINE_POOLS, name, body, NAMESPACE, subresource="status")

    rows = []
    writes = (("status", status_patch), ("spec", spec_patch), ("infra", infra_status_patch))
    for write, one in writes:
        found = await _timed(cp, rounds * pools, pools, one)
        rows.append({"size": size, "write": write, **found})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def section(
    found: dict[str, Any],
    shapes: dict[str, Any],
    pool_rows: list[dict[str, Any]],
    command: str,
) -> str:
    lines = [
        "One client on a fresh local control plane with our CRDs; CPU is the management"
        " kube-apiserver's (user and system, from /proc) over the writes. A pool write is a"
        " small patch of one of ten MachinePools holding that many providerIDs and nodeRefs,"
        " or of ten SimMachinePools holding that many providerIDs and status.instances, each"
        " pool's writes in turn: the apiserver handles the whole object each time.",
        "",
        "| write | writes | per second | apiserver CPU ms per write |",
        "|---|---:|---:|---:|",
    ]
    for key, what in (
        ("configmap_creates", "ConfigMap create"),
        ("machine_status_patches", "Machine status patch (ten conditions)"),
    ):
        f = found[key]
        lines.append(
            f"| {what} | {f['writes']:,} | {f['writes_per_s']:,.0f} |"
            f" {f['apiserver_ms_per_write']:.2f} |"
        )
    for row in pool_rows:
        what = {
            "status": "MachinePool status patch (readyReplicas)",
            "spec": "MachinePool spec patch (providerIDList, one ID replaced)",
            "infra": "SimMachinePool status patch (observedGeneration)",
        }[row["write"]]
        lines.append(
            f"| {what}, {row['size']:,} entries | {row['writes']:,} |"
            f" {row['writes_per_s']:,.0f} | {row['apiserver_ms_per_write']:.2f} |"
        )
    return "\n".join(lines + _shape_lines(shapes))


def _shape_lines(shapes: dict[str, Any]) -> list[str]:
    rows, size = shapes["rows"], shapes["bytes"]
    lines = [
        "",
        "What makes a Machine write cost that: the same client and concurrency, one Machine per"
        " write, a Machine as the MachinePool controller makes it (labels, finalizer, the pool"
        " as owner). A one-field status patch (`phase`) costs what the object it lands on"
        " weighs: the apiserver decodes, validates, records in managedFields and encodes the"
        " whole object.",
        "",
        "| write | writes | per second | apiserver CPU ms per write |",
        "|---|---:|---:|---:|",
    ]
    for key, what in (
        ("create", "Machine create (a POST, as upstream's MachineSet creates)"),
        ("apply", "Machine create by server-side apply (as our MachinePool controller creates)"),
        ("bare_phase", "Machine status patch, `phase` only, before any condition"),
        ("conditions", "Machine status patch writing its ten conditions"),
        ("full_phase", "Machine status patch, `phase` only, with the ten conditions there"),
    ):
        f = rows[key]
        lines.append(
            f"| {what} | {f['writes']:,} | {f['writes_per_s']:,.0f} |"
            f" {f['apiserver_ms_per_write']:.2f} |"
        )
    lines += [
        "",
        f"The Machine as stored then, in compact JSON: {size['whole']:,} bytes, of which"
        f" managedFields {size['managedFields']:,} and status {size['status']:,}.",
    ]
    shares = shapes.get("profile")
    if shares is None:
        return lines
    lines += [
        "",
        f"Where the management kube-apiserver's CPU went during {shares['seconds']} s of"
        " those one-field status patches of conditioned Machines (a CPU profile, `go tool"
        " pprof`; each stage is the share of all samples under the function that does it, so"
        " they overlap: a managedFields read happens inside a decode):",
        "",
        "| stage | share of the apiserver's CPU samples, % |",
        "|---|---:|",
    ]
    lines += [f"| {what} | {pct:.1f} |" for what, pct in shares["stages"].items()]
    return lines


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


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: positive integers, comma-separated")
    return sizes


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--pool-sizes", type=_sizes, default=[10, 100, 1000])
    parser.add_argument("--pool-writes", type=int, default=100, help="of each kind, per size")
    parser.add_argument("--no-profile", action="store_true", help="no CPU profile of the apiserver")
    parser.add_argument("--no-results", action="store_true", help="do not rewrite RESULTS.md")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        # The last --profiling flag wins: on only when a profile is taken.
        flags = () if args.no_profile else ("--profiling=true",)
        cp = ControlPlane(Path(tmp) / "cp", management_args=flags)
        cp.start()
        try:
            found = asyncio.run(measure(cp, args.writes, args.concurrency))
            pool_rows = asyncio.run(measure_pools(cp, args.pool_sizes, args.pool_writes))
            # Last: the Machines it makes would otherwise weigh on the pool rows' apiserver.
            shapes = asyncio.run(
                measure_machine_shapes(cp, args.writes, args.concurrency, not args.no_profile)
            )
        finally:
            cp.stop()
    command = " ".join(["python bench/bench_apiserver_writes.py", *map(shlex.quote, argv)])
    data = {"ceiling": found, "machine_shapes": shapes, "pools": pool_rows}
    report.publish(
        "apiserver-writes",
        "What a write costs the management kube-apiserver",
        section(found, shapes, pool_rows),
        command,
        data=data,
        results=not args.no_results,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
