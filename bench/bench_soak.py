"""Soak benchmark: hours of churn, and whether any process of ours grows while it lasts.

    python bench/bench_soak.py [--duration 3600] [--pools 3 --replicas 2] [--sample-seconds 15]

On a fresh local control plane (as bench_machinepool.py's, without audit logs), our core
(``machinepool run --components core``) and the shared infrastructure process (bootstrap, Sim
provider, node simulator: ``mpbench/runner.py``) run ``--pools`` pools of ``--replicas``. A
churn loop then repeats one cycle until ``--duration`` seconds have passed, each step waiting
until the world matches what it asked for (every pool Running at its size and version with
that many Ready Nodes, no other pool or Node left):

1. scale one pool up by ``--surge``, then back down;
2. roll the next pool to the other version (v1.33.4 <-> v1.34.4);
3. create a pool, then delete it;
4. inject cloud faults in the pools' namespace (the simulated cloud's ``machinepool-sim-faults``
   ConfigMap: ``--error-rate`` of calls fail, ``--error-after-rate`` fail after acting,
   ``--stall-rate`` stall ``--stall-seconds``), scale a pool up and down under them, clear them.

Each cycle ends with the world in the same shape as the one before (the same pools, sizes and
Node count; only versions alternate), and there every process is sampled: RSS (/proc status),
asyncio tasks (``machinepool_asyncio_tasks`` on its /metrics), open descriptors, sockets and
established TCP connections (/proc fd and net/tcp), and objects per informer
(``machinepool_informer_objects``). Those samples, taken at the same workload, make the
series; a sample every ``--sample-seconds`` mid-churn gives each its peak. The first cycle is
a warm-up (every code path, every informer, every connection made once) and is not counted.

Results: stdout, the ``soak`` section of bench/RESULTS.md (with command and git revision),
every sample as JSON under bench/out/. Figures to read, never assertions; not part of the
test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpbench import procs, report, scenario
from mpbench.env import NAMESPACE, BenchEnv
from mpbench.procs import Controller
from mpbench.scenario import FROM_VERSION, TO_VERSION, Observer
from mpbench.soak import Point, Summary, Tolerance, summarize, table, verdict
from mpbench.stats import prom_by_label, prom_sum, read_open_files

from machinepool.api.infra_sim import SIM_MACHINES
from machinepool.api.kinds import MACHINE_POOLS, MACHINES
from machinepool.runtime import ApiError, Client, Informer, NotFound
from machinepool.simworld import Faults
from machinepool.simworld.cloud import SimCloud

CORE_USER, INFRA_USER, DRIVER_USER = "bench-core", "bench-infra", "bench-driver"

RSS = Tolerance(absolute=4.0, relative=0.05)
"""MiB: the allocator keeps freed arenas, and a GC cycle moves RSS by a few MiB."""
TASKS = Tolerance(absolute=2.0, relative=0.02)
"""A delayed requeue or a handler's write may be in flight at any sample."""
FILES = Tolerance(absolute=2.0)
"""A scrape's or a probe's connection may be open at any sample."""
OBJECTS = Tolerance(absolute=0.5)
"""The world is the same shape at every counted sample: the caches must be exactly so."""


# -- sampling ------------------------------------------------------------------------------


def sample_process(proc: Controller, peers: dict[int, str]) -> dict[str, tuple[float, Tolerance]]:
    """Every series of one process now: name -> (value, its tolerance). ``peers``: remote
    port -> what listens there, to tell connections apart (the rest are "accepted": probes,
    scrapes). /proc first, then /metrics, so the scrape's own connection is not counted."""
    mem = proc.sample()  # raises if the process died: a soak that lost a process is void
    files = read_open_files(proc.pid)
    text = proc.metrics()
    out = {
        f"{proc.name}: RSS, MiB": (mem.rss_bytes / 2**20, RSS),
        f"{proc.name}: asyncio tasks": (prom_sum(text, "machinepool_asyncio_tasks"), TASKS),
        f"{proc.name}: open fds": (float(files.fds), FILES),
        f"{proc.name}: sockets": (float(files.sockets), FILES),
    }
    by_peer = dict.fromkeys([*peers.values(), "accepted"], 0.0)
    for port, count in files.established.items():
        by_peer[peers.get(port, "accepted")] += count
    for peer, count in by_peer.items():
        out[f"{proc.name}: TCP connections, {peer}"] = (count, FILES)
    sizes = prom_by_label(text, "machinepool_informer_objects", ["cluster", "kind"])
    for (cluster, kind), count in sorted(sizes.items()):
        out[f"{proc.name}: {kind} objects ({cluster})"] = (count, OBJECTS)
    return out


@dataclass
class Samples:
    """Counted samples (at the end of each cycle) and mid-churn peaks, by series name."""

    peers: dict[int, str] = field(default_factory=dict)
    """Remote port -> name, for connections by peer (see ``sample_process``)."""
    started: float = field(default_factory=time.monotonic)
    points: dict[str, list[Point]] = field(default_factory=dict)
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)
    raw: list[dict[str, Any]] = field(default_factory=list)

    def take(self, processes: list[Controller], *, counted: bool, label: str) -> None:
        at = time.monotonic() - self.started
        values: dict[str, float] = {}
        for proc in processes:
            for name, (value, tolerance) in sample_process(proc, self.peers).items():
                values[name] = value
                self.tolerances[name] = tolerance
                if counted:
                    self.points.setdefault(name, []).append((at, value))
                else:
                    self.peaks[name] = max(self.peaks.get(name, value), value)
        self.raw.append({"at": round(at, 1), "counted": counted, "label": label, **values})

    def summaries(self) -> dict[str, Summary]:
        return {name: summarize(pts, self.tolerances[name]) for name, pts in self.points.items()}


async def sample_periodically(samples: Samples, processes: list[Controller], every: float) -> None:
    while True:
        await asyncio.sleep(every)
        await asyncio.to_thread(samples.take, processes, counted=False, label="mid-churn")


# -- churn ---------------------------------------------------------------------------------


class Stalled(RuntimeError):
    """A step did not reach its target within ``--step-timeout``."""


@dataclass
class Churn:
    """The pools the world should have, the steps that change it, and how long each took."""

    args: argparse.Namespace
    client: Client
    observer: Observer
    cloud: SimCloud
    machines: Informer
    sim_machines: Informer
    desired: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Pool -> (replicas, version) every step waits for."""
    seconds: dict[str, list[float]] = field(default_factory=dict)
    """Step kind -> how long each took to settle."""

    def settled(self) -> bool:
        obs = self.observer
        if {p["metadata"]["name"] for p in obs.pools.list()} != set(self.desired):
            return False
        instances = sum(replicas for replicas, _ in self.desired.values())
        if not len(obs.nodes) == len(self.machines) == len(self.sim_machines) == instances:
            return False  # a Machine or infra machine of a removed instance still there
        return all(obs.pool_meets(n, r, v) for n, (r, v) in self.desired.items())

    async def settle(self, step: str) -> None:
        started = time.monotonic()
        deadline = started + self.args.step_timeout
        while not self.settled():
            if time.monotonic() > deadline:
                raise Stalled(f"{step}: not settled in {self.args.step_timeout:.0f}s: {self}")
            await asyncio.sleep(0.25)
        self.seconds.setdefault(step, []).append(time.monotonic() - started)

    def __str__(self) -> str:
        obs = self.observer
        have = {
            p["metadata"]["name"]: (p.get("status") or {}).get("readyReplicas")
            for p in obs.pools.list()
        }
        return (
            f"want {self.desired}; pools (ready) {have}; {len(obs.nodes)} Nodes, "
            f"{len(self.machines)} Machines, {len(self.sim_machines)} SimMachines"
        )

    async def create(self, name: str, replicas: int, version: str) -> None:
        await scenario.create_pools(self.client, [name], replicas, version)
        self.desired[name] = (replicas, version)

    async def scale(self, name: str, replicas: int) -> None:
        await scenario.scale_pools(self.client, [name], replicas)
        self.desired[name] = (replicas, self.desired[name][1])

    async def roll(self, name: str) -> None:
        replicas, version = self.desired[name]
        to = TO_VERSION if version == FROM_VERSION else FROM_VERSION
        await scenario.roll_pools(self.client, [name], to)
        self.desired[name] = (replicas, to)

    async def delete(self, name: str) -> None:
        with contextlib.suppress(NotFound):
            await self.client.delete(MACHINE_POOLS, name, NAMESPACE)
        del self.desired[name]

    async def cycle(self, n: int, pools: list[str]) -> None:
        a = self.args
        one, other = pools[n % len(pools)], pools[(n + 1) % len(pools)]
        await self.scale(one, a.replicas + a.surge)
        await self.settle("scale up")
        await self.scale(one, a.replicas)
        await self.settle("scale down")
        await self.roll(other)
        await self.settle("rollout")
        temporary = f"churn-{n:05d}"
        await self.create(temporary, a.replicas, FROM_VERSION)
        await self.settle("pool create")
        await self.delete(temporary)
        await self.settle("pool delete")
        faults = Faults(a.error_rate, a.error_after_rate, a.stall_rate, a.stall_seconds)
        await self.cloud.set_faults(NAMESPACE, faults)
        try:
            await self.scale(one, a.replicas + a.surge)
            await self.settle("scale up, faults")
            await self.scale(one, a.replicas)
            await self.settle("scale down, faults")
        finally:
            await self.cloud.set_faults(NAMESPACE, Faults())


# -- the run -------------------------------------------------------------------------------


@dataclass
class Outcome:
    cycles: int
    seconds: float
    samples: Samples
    steps: dict[str, list[float]]
    stalled: str = ""


async def soak(args: argparse.Namespace, workdir: Path) -> Outcome:
    env = BenchEnv(workdir, audit=False)
    env.start()
    processes: list[Controller] = []
    try:
        client = await env.client(DRIVER_USER)
        workload = await env.workload_client()
        async with client, workload:
            await env.install(client, "ours")
            infra = procs.infra(
                env.kubeconfig_for(INFRA_USER),
                workdir,
                INFRA_USER,
                args.heartbeat_seconds,
                lease_seconds=args.lease_seconds,
            )
            core = procs.ours_core(env.kubeconfig_for(CORE_USER), workdir, CORE_USER)
            processes = [core, infra]
            for proc in processes:
                proc.wait_ready()
            observer = Observer(client, workload, fill_conditions=False)
            machines = Informer(client, MACHINES, NAMESPACE)
            sim_machines = Informer(client, SIM_MACHINES, NAMESPACE)
            work = Churn(args, client, observer, SimCloud(client), machines, sim_machines)
            await observer.start()
            for informer in (machines, sim_machines):
                await informer.start()
                await informer.wait_synced()
            assert env.workload is not None
            peers = {
                _port(env.cp.management.url): "management apiserver",
                _port(env.workload.url): "workload apiserver",
            }
            try:
                return await churn(work, processes, Samples(peers))
            finally:
                for informer in (machines, sim_machines):
                    await informer.stop()
                await observer.stop()
    finally:
        for proc in processes:
            proc.stop()
        env.stop()


def _port(url: str) -> int:
    port = urllib.parse.urlsplit(url).port
    assert port is not None, url
    return port


async def churn(work: Churn, processes: list[Controller], samples: Samples) -> Outcome:
    """The pools created, one warm-up cycle, then cycles until ``--duration``."""
    args = work.args
    pools = [scenario.pool_name(i) for i in range(args.pools)]
    for name in pools:
        await work.create(name, args.replicas, FROM_VERSION)
    await work.settle("initial create")
    print(f"{args.pools} pools x {args.replicas} Running; warm-up cycle", flush=True)
    await work.cycle(0, pools)
    work.seconds.clear()  # the settle times reported are those of counted cycles
    samples.started = time.monotonic()
    await asyncio.to_thread(samples.take, processes, counted=True, label="after warm-up")
    sampler = asyncio.create_task(sample_periodically(samples, processes, args.sample_seconds))
    cycles, stalled = 0, ""
    try:
        while time.monotonic() - samples.started < args.duration:
            try:
                await work.cycle(cycles + 1, pools)
            except (Stalled, ApiError) as exc:
                stalled = str(exc)
                print(f"churn stopped: {stalled}", flush=True)
                break
            cycles += 1
            await asyncio.to_thread(samples.take, processes, counted=True, label=f"cycle {cycles}")
            elapsed = time.monotonic() - samples.started
            print(f"  cycle {cycles} done at {elapsed:.0f}s", flush=True)
    finally:
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
    return Outcome(cycles, time.monotonic() - samples.started, samples, work.seconds, stalled)


# -- the report ----------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds:.0f} s"


def section(args: argparse.Namespace, outcome: Outcome, load: str) -> str:
    summaries = outcome.samples.summaries()
    steps = "\n".join(
        f"| {step} | {len(times)} | {_median(times):.1f} | {max(times):.1f} |"
        for step, times in outcome.steps.items()
    )
    stalled = f"\n\n**Churn stopped early**: {outcome.stalled}" if outcome.stalled else ""
    faults = (
        f"error {args.error_rate}, error after acting {args.error_after_rate}, "
        f"stall {args.stall_rate} x {args.stall_seconds} s"
    )
    return f"""{outcome.cycles} cycles counted after one warm-up cycle. Each cycle: one pool scaled
up by {args.surge} and back, another rolled to the other version, a pool created and deleted, and a
pool scaled up and back under cloud faults ({faults}). Every process is sampled at the end of
each cycle, when the world has the same shape (bench/README.md, bench_soak.py); "peak
mid-churn" is the highest of the samples taken every {args.sample_seconds:.0f} s in between.
TCP connections are the process's ESTABLISHED ones by peer ("accepted": probes and scrapes).
Slope: least-squares fit, per hour. A series **grew** when the fitted growth over the run,
last - first, and its second half's slope over the whole run all exceed its tolerance (RSS:
4 MiB or 5%; tasks: 2 or 2%; descriptors and connections: 2; informer objects: none); one
that rose but was flat in the second half says "rose, then flat".{stalled}

**{verdict(summaries)}**

{table(summaries, outcome.samples.peaks)}

| step | times | median s to settle | max s |
|---|---:|---:|---:|
{steps}

Load average (1/5/15 min) at the start: {load}, on {os.cpu_count()} CPUs shared with whatever
else ran.
"""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=3600.0, help="seconds of churn [3600]")
    p.add_argument("--pools", type=int, default=3, help="pools kept all along [3]")
    p.add_argument("--replicas", type=int, default=2, help="replicas per pool [2]")
    p.add_argument("--surge", type=int, default=2, help="replicas added by a scale-up [2]")
    p.add_argument(
        "--sample-seconds", type=float, default=15.0, help="mid-churn sampling period [15]"
    )
    p.add_argument("--error-rate", type=float, default=0.3, help="fault phase [0.3]")
    p.add_argument("--error-after-rate", type=float, default=0.1, help="fault phase [0.1]")
    p.add_argument("--stall-rate", type=float, default=0.1, help="fault phase [0.1]")
    p.add_argument("--stall-seconds", type=float, default=1.0, help="fault phase [1]")
    p.add_argument("--step-timeout", type=float, default=300.0, help="seconds per step [300]")
    p.add_argument(
        "--heartbeat-seconds", type=float, default=40.0, help="node simulator status period [40]"
    )
    p.add_argument(
        "--lease-seconds",
        type=float,
        default=0.0,
        help="simulated kubelets' Node Lease renewal period [0: no Leases; kubelet's is 10]",
    )
    p.add_argument("--workdir", type=Path, help="keep logs here [a temporary folder]")
    p.add_argument("--no-results", action="store_true", help="do not rewrite bench/RESULTS.md")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    command = "python bench/bench_soak.py " + shlex.join(argv)
    load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mpbench-soak-"))
    print(f"work directory (logs): {workdir}", flush=True)
    outcome = asyncio.run(soak(args, workdir))
    raw = {"args": vars(args), "steps": outcome.steps, "samples": outcome.samples.raw}
    title = f"Soak: {_duration(outcome.seconds)} of churn, {args.pools} pools x {args.replicas}"
    body = section(args, outcome, load)
    report.publish("soak", title, body, command, data=raw, results=not args.no_results)
    return 0 if not outcome.stalled else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
