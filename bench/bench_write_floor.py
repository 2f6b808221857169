"""The floor under the scale goals: how long this machine takes to store what N MachinePool
Nodes are made of, when no controller decides anything and every object is written once.

    .venv/bin/python bench/bench_write_floor.py [--nodes 10000] [--pools 10]
        [--concurrency 64] [--no-watch] [--replace] [--no-results]

A Node of a MachinePool whose provider keeps a machine per instance (as ours and upstream's
core do with the Sim provider, scenario (a) of ``bench_machinepool.py --scale``) is made of
seven writes, each a different object's first or only one, which no controller can merge or
skip:

1. the cloud's instance record (its facts and its bootstrap data in its launch's Secret: the
   first instance of a block creates it, the others each patch theirs in; the system writes
   the instances one step starts together in one request, so its share is at most this one);
2. the SimMachine, created with labels, owner and finalizer; 3. its status (provisioned, Ready);
4. the Machine, created by server-side apply as our MachinePool controller creates it;
5. the Node, registered by its kubelet with its status in the create, in the workload cluster;
6. the Node's labels, annotations and taint set from its Machine (the Machine controller's
   one patch); 7. the Machine's status (nodeRef, nodeInfo, its conditions).

With ``--replace``, every Node is then replaced as a rollout replaces it: a new Node's seven
writes, then the eight that remove the old one, in the order our system sends them (the
audit log of scenario (c)'s scale-down): the pool engine deletes the Machine; the Machine
controller writes its status (Deleting), cordons the Node, deletes the SimMachine; the cloud
drops its record from its launch, the engine the SimMachine's finalizer; the Machine
controller deletes the Node and drops the Machine's finalizer.

Each body is built by the function the system builds it with where there is one
(``launch_secret``, ``render_node_cloud_config``, ``desired_machine``, ``node_object``,
``node_status``, ``node_patch``); the SimMachine's and the Machine status's shapes are copied
from the pool engine and the Machine controller. A Node's seven writes go in order, as they
depend on each other; ``--concurrency`` Nodes are in flight at once, in ``--pools`` pools.
The control plane is the one the scale scenarios use (``mpbench.env.BenchEnv``: a management
and a workload cluster on one etcd, both apiservers writing audit logs), and, unless
``--no-watch``, one watch per kind written reads every change, as the controllers' informers
do. The run ends when every write is answered and every watch has seen every change.

What it says: with the writes alone, how long N Nodes take on this machine, and how much CPU
the control plane spends on them. The control plane's CPU divided by the machine's cores is a
bound no client can beat on this machine with these objects; a system that also decides what
to write (reads, reconciles, its own CPU) takes longer. Written to RESULTS.md (section
``write-floor``) unless ``--no-results``; ``bench_machinepool.py --scale`` measures the same
control plane with the controllers running.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import shlex
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

from mpbench import report
from mpbench.env import CLUSTER, NAMESPACE, BenchEnv
from mpbench.scenario import TO_VERSION, pool_name, pool_objects
from mpbench.shapes import instance_record, machine_status
from mpbench.stats import AuditKey, writes_by_resource

from machinepool.api import JoinConfiguration
from machinepool.api import constants as c
from machinepool.api.contract import InfraMachine
from machinepool.api.infra_sim import SIM_MACHINES
from machinepool.api.kinds import MACHINES
from machinepool.api.views import MachinePoolView, MachineView
from machinepool.bootstrap.kubeadm.cloudinit import NodeInput, render_node_cloud_config
from machinepool.controllers.machine.node import node_patch
from machinepool.controllers.machinepool.poolmachines import FIELD_MANAGER, desired_machine
from machinepool.providers.sim.provider import SimProvider
from machinepool.runtime import NODES, SECRETS, Client, Obj, Resource
from machinepool.simworld.kubelet.node import node_object, node_status
from machinepool.simworld.records import (
    InstanceRecord,
    launch_entries,
    launch_name,
    launch_secret,
    removal_patch,
)

WATCH_TIMEOUT_SECONDS = 300.0
"""How long the watches may lag the last answered write before the run gives up."""
TARGET_SECONDS = 120.0
"""The goal for scale scenarios (a) and (b): 10,000 Nodes converged in two minutes."""
ROLLOUT_TARGET_SECONDS = 300.0
"""The goal for rolling 10 pools of 1,000: every Node replaced in five minutes."""


def user_data(kubeadm: Obj) -> bytes:
    """The cloud-config the kubeadm bootstrap provider renders for ``kubeadm`` (a
    KubeadmConfig) with token discovery; the token and hash are placeholders of the real
    length, never used to join."""
    join = JoinConfiguration.model_validate(
        {
            **kubeadm["spec"].get("joinConfiguration", {}),
            "discovery": {
                "bootstrapToken": {
                    "apiServerEndpoint": "127.0.0.1:6443",
                    "token": "abcdef.0123456789abcdef",
                    "caCertHashes": ["sha256:" + "0" * 64],
                }
            },
        }
    )
    return render_node_cloud_config(NodeInput(join, kubernetes_version=TO_VERSION)).encode()


def record_for(pool: Obj, index: int, taken: set[str]) -> InstanceRecord:
    """The cloud's record of instance ``index`` of ``pool``, named as the Sim provider names
    it (``SimProvider.instance_id``)."""
    meta = pool["metadata"]
    ident = f"{meta['name']}-{meta['uid'][:5]}-{index}"
    return instance_record(ident, meta["name"], index, taken)


def sim_machine(record: InstanceRecord, pool: Obj) -> Obj:
    """A SimMachine as the pool engine creates one (``providers.pool.inframachines._create``)."""
    meta = pool["metadata"]
    return {
        "metadata": {
            "name": record.id,
            "namespace": NAMESPACE,
            "labels": {
                c.CLUSTER_NAME_LABEL: CLUSTER,
                c.POOL_NAME_LABEL: c.pool_name_label_value(meta["name"]),
            },
            "ownerReferences": [_owner(pool)],
            "finalizers": [SimProvider.machine_finalizer],
        },
        "spec": {
            "providerID": record.provider_id,
            "instanceID": record.id,
            "failureDomain": record.failure_domain,
        },
    }


def sim_machine_status() -> Obj:
    """What the pool engine writes once its instance runs (``_machine_status``)."""
    return {
        "status": {
            "ready": True,
            "instanceState": "running",
            "initialization": {"provisioned": True},
            "conditions": [
                {
                    "type": c.READY_CONDITION,
                    "status": "True",
                    "reason": c.READY_REASON,
                    "message": "",
                    "lastTransitionTime": _now(),
                }
            ],
        }
    }


def full_machine_status(node: Obj) -> Obj:
    """The Machine controller's status patch once its Node is Ready: the shared conditioned
    status (``mpbench.shapes``) with this Node's reference and nodeInfo."""
    body = machine_status(0)
    status = body["status"]
    status["nodeRef"] = {"name": node["metadata"]["name"]}
    status["nodeInfo"] = node["status"]["nodeInfo"]
    status["initialization"] = {
        "bootstrapDataSecretCreated": True,
        "infrastructureProvisioned": True,
    }
    return body


def deleting_machine_status() -> Obj:
    """The Machine controller's status patch when a Machine's deletion begins: phase
    Deleting and its Deleting condition True, the rest as before."""
    body = machine_status(0)
    status = body["status"]
    status["phase"] = "Deleting"
    for condition in status["conditions"]:
        if condition["type"] == "Deleting":
            condition.update(status="True", reason="DrainingNode", message="Drain not completed")
    return body


def _owner(obj: Obj) -> Obj:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
    }


def _audit(env: BenchEnv) -> Counter[AuditKey]:
    """Requests both apiservers logged since the last call."""
    counts: Counter[AuditKey] = Counter()
    for log in env.audit_logs.values():
        counts.update(log.read())
    return counts


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Writers:
    """The clients, one per identity the system writes as: the core, the infra process (the
    Sim cloud and the pool engine) and the workload cluster's admin (kubelets, the core's
    Node patches); and the instances made so far, by Node index."""

    def __init__(self, core: Client, infra: Client, workload: Client) -> None:
        self.core, self.infra, self.workload = core, infra, workload
        self.addresses: set[str] = set()
        self.records: dict[int, InstanceRecord] = {}
        self.launches: dict[str, asyncio.Future[Obj]] = {}


async def add_node(writers: Writers, pool: Obj, infra_pool: Obj, index: int, data: bytes) -> None:
    """The seven writes of a new Node, in the order they depend on each other."""
    record = record_for(infra_pool, index, writers.addresses)
    writers.records[index] = record
    owner = {**_owner(infra_pool), "controller": True, "blockOwnerDeletion": True}
    await write_record(writers, record, data, owner)
    await writers.infra.create(SIM_MACHINES, sim_machine(record, infra_pool), NAMESPACE)
    infra_machine = await writers.infra.patch(
        SIM_MACHINES, record.id, sim_machine_status(), NAMESPACE, subresource="status"
    )
    wanted = desired_machine(MachinePoolView(pool), InfraMachine(infra_machine), None)
    machine = await writers.core.apply(MACHINES, wanted, field_manager=FIELD_MANAGER)
    body = {
        **node_object(record, record.hostname, [], {}),
        **node_status(record, record.hostname, ready=True, now=dt.datetime.now(dt.UTC)),
    }
    node = await writers.workload.create(NODES, body)
    patch = node_patch(MachineView(machine), node)
    if patch is not None:
        await writers.workload.patch(NODES, record.hostname, patch)
    await writers.core.patch(
        MACHINES, record.id, full_machine_status(node), NAMESPACE, subresource="status"
    )


async def write_record(writers: Writers, record: InstanceRecord, data: bytes, owner: Obj) -> None:
    """The instance's record, one write: its launch's Secret when it is the first of its
    block to be written, else a patch adding it (``writers.launches`` holds the creates)."""
    name, entries = launch_name(record), launch_entries(record, data)
    made = writers.launches.get(name)
    if made is None:
        body = launch_secret(record, entries, labels={}, owner=owner)
        made = writers.launches[name] = asyncio.ensure_future(
            writers.infra.create(SECRETS, body, NAMESPACE)
        )
        await made
        return
    await made
    await writers.infra.patch(SECRETS, name, {"data": entries}, NAMESPACE)


async def remove_node(writers: Writers, index: int) -> None:
    """The eight writes that remove a Node, in order (the module docstring says whose)."""
    record = writers.records.pop(index)
    name = record.id
    await writers.infra.delete(MACHINES, name, NAMESPACE)
    await writers.core.patch(
        MACHINES, name, deleting_machine_status(), NAMESPACE, subresource="status"
    )
    await writers.workload.patch(NODES, record.hostname, {"spec": {"unschedulable": True}})
    await writers.core.delete(SIM_MACHINES, name, NAMESPACE)
    await writers.infra.patch(SECRETS, launch_name(record), removal_patch(record), NAMESPACE)
    await writers.infra.patch(SIM_MACHINES, name, _NO_FINALIZERS, NAMESPACE)
    await writers.workload.delete(NODES, record.hostname)
    await writers.core.patch(MACHINES, name, _NO_FINALIZERS, NAMESPACE)


_NO_FINALIZERS: Obj = {"metadata": {"finalizers": None}}


WATCHED: tuple[tuple[str, Resource, int, int], ...] = (
    ("management", SECRETS, 1, 1),
    ("management", SIM_MACHINES, 2, 2),
    ("management", MACHINES, 2, 3),
    ("workload", NODES, 2, 2),
)
"""The watch per kind (``--no-watch`` opens none), and the changes it sees for each Node
added and each Node removed (a delete of an object with a finalizer is a change, its last
finalizer's removal the deletion)."""


class Tally:
    """The changes each watch saw; ``done`` is set while every kind saw what it expects."""

    def __init__(self) -> None:
        self.expected, self.seen = Counter[str](), Counter[str]()
        self.restarts = Counter[str]()
        self.done = asyncio.Event()

    def expect(self, more: dict[str, int]) -> None:
        self.expected.update(more)
        self._check()

    def add(self, plural: str) -> None:
        self.seen[plural] += 1
        self._check()

    def _check(self) -> None:
        if all(self.seen[k] >= n for k, n in self.expected.items()):
            self.done.set()
        else:
            self.done.clear()


def _namespace(res: Resource) -> str | None:
    return None if res is NODES else NAMESPACE


async def _watch(client: Client, res: Resource, since: str, tally: Tally) -> None:
    """Read every change of ``res`` after ``since``. A stream ends at its timeout (the
    client's default), or earlier when the apiserver drops a reader that fell behind; as an
    informer does, the next one starts from the last change read."""
    namespace = _namespace(res)
    while True:
        async for event in client.watch(res, namespace, resource_version=since):
            since = str(event.object.get("metadata", {}).get("resourceVersion") or since)
            if event.type in ("ADDED", "MODIFIED", "DELETED"):
                tally.add(res.plural)
        tally.restarts[res.plural] += 1


async def _phase(
    env: BenchEnv,
    tally: Tally | None,
    concurrency: int,
    count: int,
    one: Callable[[int], Awaitable[None]],
) -> Obj:
    """Run ``one`` for ``count`` Nodes, ``concurrency`` at once, until every write is
    answered and every watch saw it; the time, the CPU and the writes it took."""
    gate = asyncio.Semaphore(concurrency)

    async def gated(i: int) -> None:
        async with gate:
            await one(i)

    cpu0, own0 = env.controlplane_cpu(), time.process_time()
    started = time.monotonic()
    await asyncio.gather(*(gated(i) for i in range(count)))
    written = time.monotonic() - started
    if tally is not None:
        try:
            await asyncio.wait_for(tally.done.wait(), WATCH_TIMEOUT_SECONDS)
        except TimeoutError:
            raise SystemExit(
                f"the watches saw {dict(tally.seen)} of {dict(tally.expected)} changes"
                f" {WATCH_TIMEOUT_SECONDS:.0f} s after the last write was answered"
            ) from None
    seconds = time.monotonic() - started
    cpu1, own1 = env.controlplane_cpu(), time.process_time()
    by_resource = writes_by_resource(_audit(env))
    return {
        "nodes": count,
        "seconds": seconds,
        "written_seconds": written,
        "writes": sum(by_resource.values()),
        "by_resource": by_resource,
        "cpu": {k: cpu1[k] - cpu0[k] for k in cpu0},
        "client_cpu": own1 - own0,
    }


async def run(
    env: BenchEnv, nodes: int, pools: int, concurrency: int, watch: bool, replace: bool
) -> Obj:
    driver = await env.client("bench-driver")
    core, infra = await env.client("bench-core"), await env.client("bench-infra")
    workload, watcher = await env.workload_client(), await env.client("bench-watch")
    workload_watcher = await env.workload_client()
    watches: list[asyncio.Task[None]] = []
    phases: dict[str, Obj] = {}
    tally = Tally() if watch else None
    try:
        await env.install(driver, "ours")
        owners, data = [], b""
        for p in range(pools):
            replicas = -(-nodes // pools)
            made = {}
            for res, body in pool_objects(pool_name(p), replicas, TO_VERSION):
                made[body["kind"]] = await driver.create(res, body, NAMESPACE)
            owners.append((made["MachinePool"], made["SimMachinePool"]))
            data = user_data(made["KubeadmConfig"])
        if tally is not None:
            for server, res, _, _ in WATCHED:
                client = watcher if server == "management" else workload_watcher
                since = (await client.list(res, _namespace(res))).resource_version
                watches.append(asyncio.create_task(_watch(client, res, since, tally)))
        _audit(env)  # set-up is not part of the floor
        writers = Writers(core, infra, workload)

        async def add(i: int) -> None:
            mp, smp = owners[i % pools]
            await add_node(writers, mp, smp, i, data)

        if tally is not None:
            tally.expect({res.plural: added * nodes for _, res, added, _ in WATCHED})
        phases["create"] = await _phase(env, tally, concurrency, nodes, add)

        async def swap(i: int) -> None:
            await add(nodes + i)  # the surge Node first, as a rollout with maxSurge does
            await remove_node(writers, i)

        if replace:
            if tally is not None:
                more = {res.plural: (a + r) * nodes for _, res, a, r in WATCHED}
                tally.expect(more)
            phases["replace"] = await _phase(env, tally, concurrency, nodes, swap)
    finally:
        for task in watches:
            task.cancel()
        await asyncio.gather(*watches, return_exceptions=True)
        for client in (driver, core, infra, workload, watcher, workload_watcher):
            await client.close()
    return {
        "nodes": nodes,
        "pools": pools,
        "concurrency": concurrency,
        "watch": watch,
        "watch_restarts": dict(tally.restarts) if tally is not None else {},
        "cores": os.cpu_count() or 1,
        "phases": phases,
    }


GOALS = {"create": TARGET_SECONDS, "replace": ROLLOUT_TARGET_SECONDS}
HEADINGS = {"create": "create N Nodes", "replace": "replace each of them"}


def section(found: Obj) -> str:
    cores, phases = found["cores"], found["phases"]
    watched = "one watch per kind reading every change" if found["watch"] else "no watch"

    def servers(p: Obj) -> float:
        return float(sum(p["cpu"].values()))

    rows: list[tuple[str, Callable[[Obj], str]]] = [
        ("Nodes added or replaced", lambda p: f"{p['nodes']:,}"),
        ("writes, both apiservers (audit logs)", lambda p: f"{p['writes']:,}"),
        ("writes per Node", lambda p: f"{p['writes'] / p['nodes']:.2f}"),
        ("wall time, every write answered and seen, s", lambda p: f"{p['seconds']:.1f}"),
        ("writes per second", lambda p: f"{p['writes'] / p['seconds']:,.0f}"),
        ("management kube-apiserver CPU, s", lambda p: f"{p['cpu']['mgmt_apiserver']:.1f}"),
        ("workload kube-apiserver CPU, s", lambda p: f"{p['cpu']['workload_apiserver']:.1f}"),
        ("etcd CPU, s", lambda p: f"{p['cpu']['etcd']:.1f}"),
        ("the writing client's CPU (one Python process), s", lambda p: f"{p['client_cpu']:.1f}"),
        (
            "management kube-apiserver CPU per Node, ms",
            lambda p: f"{1000 * p['cpu']['mgmt_apiserver'] / p['nodes']:.1f}",
        ),
        (
            f"least wall time on {cores} cores: apiservers and etcd CPU / {cores}, s",
            lambda p: f"{servers(p) / cores:.1f}",
        ),
        (
            "the same for 10,000 Nodes (scaled), s",
            lambda p: f"{servers(p) / cores * (10_000 / p['nodes']):.1f}",
        ),
    ]
    names = list(phases)
    lines = [
        "The writes each MachinePool Node is made of (seven to add one, eight more to remove"
        " one; see the script's docstring), sent by one Python process for"
        f" {found['nodes']:,} Nodes in {found['pools']} pools, {found['concurrency']} Nodes in"
        f" flight, {watched}, on the control plane the scale scenarios use (audit logs on)."
        " Nothing is read and nothing decided: the least time any controller that keeps these"
        " objects needs on this machine. The goals: "
        + "; ".join(f"{HEADINGS[n]}, {GOALS[n]:.0f} s for 10,000" for n in names)
        + ".",
        "",
        "| figure | " + " | ".join(HEADINGS[n] for n in names) + " |",
        "|---|" + "---:|" * len(names),
        *(
            f"| {what} | " + " | ".join(cell(phases[n]) for n in names) + " |"
            for what, cell in rows
        ),
    ]
    restarts = found.get("watch_restarts") or {}
    if restarts:
        lines += [
            "",
            "Watch streams that ended (at the stream's timeout, or when the apiserver ended one"
            " whose reader fell behind), each followed by one from the last change read, as an"
            " informer resumes: "
            + ", ".join(f"{k} {v}" for k, v in sorted(restarts.items()))
            + ".",
        ]
    for n in names:
        lines += [
            "",
            f"Where the writes went ({HEADINGS[n]}):",
            "",
            "| user verb resource | writes |",
            "|---|---:|",
            *(f"| {key} | {v:,} |" for key, v in phases[n]["by_resource"].items()),
        ]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pools", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--no-watch", action="store_true", help="open no watch")
    parser.add_argument(
        "--replace", action="store_true", help="then replace every Node, as a rollout does"
    )
    parser.add_argument("--no-results", action="store_true", help="do not rewrite RESULTS.md")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.pools < 1 or args.concurrency < 1:
        parser.error("--nodes, --pools and --concurrency must be positive")
    with tempfile.TemporaryDirectory() as tmp:
        env = BenchEnv(Path(tmp) / "floor", audit=True)
        env.start()
        try:
            found = asyncio.run(
                run(env, args.nodes, args.pools, args.concurrency, not args.no_watch, args.replace)
            )
        finally:
            env.stop()
    command = " ".join(["python bench/bench_write_floor.py", *map(shlex.quote, argv)])
    report.publish(
        "write-floor",
        "The write floor: what N Nodes' objects cost with no controller",
        section(found),
        command,
        data=found,
        results=not args.no_results,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
