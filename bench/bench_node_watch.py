"""What one Node status update costs a watcher in our runtime, on demand.

    python bench/bench_node_watch.py [--nodes 1000] [--updates 1200] [--rate 33.3]
                                     [--reads batched,each] [--loops asyncio,uvloop]

Why: once a big system has converged, what a core still spends is receiving the kubelets'
status reports. Kubelet posts a Node's status every 5 minutes when nothing changed
(``nodeStatusReportFrequency``), so 10,000 Nodes send about 33 updates a second, each a whole
Node on every Node watch. The scale scenarios measure the core's idle CPU with that traffic;
this isolates the cost of one update.

A fresh local control plane holds ``--nodes`` Nodes with the status the node simulator writes
(``sim.kubelet.node``). A writer then patches their status ``--updates`` times, each a
heartbeat (only ``lastHeartbeatTime`` moves, as kubelet's does): once paced at ``--rate`` a
second, so each update reaches the watcher on its own, and once as fast as 16 patches at a
time go, so updates arrive together. Two watchers, each in a process of its own, one at a
time:

- **stream**: our client's watch (``Client.watch``): TLS, HTTP, JSON decoding of each event;
  nothing is kept;
- **informer**: an ``Informer`` as the core keeps a workload cluster's Nodes: managedFields
  stripped, indexed by providerID, and a handler that compares ``node_inputs`` of the old and
  new Node, which is what the core's Node watches do with a heartbeat (it changes nothing they
  count, so nothing is queued).

Each reports its CPU (user and system, from the first update to the last) per update, the part
of it the cyclic garbage collector took (a heap of 10,000 Nodes could make full collections
the hidden cost; ``--nodes 10000`` shows whether it does), and what that comes to at 10,000
Nodes reporting every 5 minutes, as a share of one core. Results:
stdout and bench/RESULTS.md (section ``node-watch``).

``--reads``: **batched** is our runtime as it runs once a Node watch has stayed busy (as the
kubelets' reports keep it), where a Node watch busier than ``WATCH_BUSY_RATE`` events a second
is left unread for up to ``WATCH_MAX_HOLD`` so the events that arrive meanwhile are read
together (``machinepool.runtime.kube.client``; the watcher sets ``WATCH_BUSY_FOR``, how long the
watch's rate is averaged over, to one window rather than wait it out in each run); **each**
sets that rate out of reach in the watcher's process, so every event is read the moment it
arrives, as before. Both by default: what batching buys, in one invocation.

``--loops asyncio,uvloop`` runs each watcher on each event loop: what a faster loop (uvloop,
with its TLS transport in C; ``pip install uvloop`` first, it is not a dependency of
machinepool) would take off an update that arrives alone, where most of the cost is waking
up and reading, not the JSON or the informer.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import importlib.util
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mpbench import report
from mpbench.shapes import EPOCH, instance_record

from machinepool.controllers.common import node_inputs
from machinepool.controlplane import ControlPlane
from machinepool.runtime import NODES, Client, FuncHandler, Informer, Obj
from machinepool.runtime.kube import client as client_module
from machinepool.runtime.kube.informer import field_indexer
from machinepool.simworld.kubelet.node import node_object, node_status
from machinepool.simworld.records import InstanceRecord

KUBELET_REPORT_SECONDS = 300
"""Kubelet's default ``nodeStatusReportFrequency``."""
AT_NODES = 10_000
WATCHERS = ("stream", "informer")
LOOPS = ("asyncio", "uvloop")
READS = ("batched", "each")


def record(i: int, taken: set[str]) -> InstanceRecord:
    return instance_record(f"i-{i:08x}", "pool", i, taken, uid=f"uid-{i}")


def heartbeat(rec: InstanceRecord, at: dt.datetime) -> Obj:
    """A Ready Node's status report at ``at``: only the heartbeat times move."""
    status = node_status(rec, rec.hostname, ready=True, now=at)
    for cond in status["status"]["conditions"]:
        cond["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    return status


async def create_nodes(client: Client, records: list[InstanceRecord]) -> None:
    gate = asyncio.Semaphore(32)

    async def one(rec: InstanceRecord) -> None:
        async with gate:
            await client.create(NODES, node_object(rec, rec.hostname, [], {}))
            await client.patch(NODES, rec.hostname, heartbeat(rec, EPOCH), subresource="status")

    await asyncio.gather(*(one(rec) for rec in records))


async def send_updates(
    client: Client, records: list[InstanceRecord], updates: int, rate: float, start: dt.datetime
) -> float:
    """Patch ``updates`` heartbeats, paced at ``rate`` a second (0: 16 at a time); seconds."""
    began = time.monotonic()

    async def one(k: int) -> None:
        rec = records[k % len(records)]
        at = start + dt.timedelta(seconds=k)
        await client.patch(NODES, rec.hostname, heartbeat(rec, at), subresource="status")

    if rate > 0:
        sent = []
        for k in range(updates):
            delay = began + k / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            sent.append(asyncio.create_task(one(k)))
        await asyncio.gather(*sent)
    else:
        gate = asyncio.Semaphore(16)

        async def gated(k: int) -> None:
            async with gate:
                await one(k)

        await asyncio.gather(*(gated(k) for k in range(updates)))
    return time.monotonic() - began


# -- the watcher, in a process of its own -------------------------------------------------


class _Meter:
    """CPU from the first update seen to the last, and the part of it the cyclic garbage
    collector took (a heap of thousands of Nodes makes each full collection long)."""

    def __init__(self) -> None:
        self.seen = 0
        self.first: os.times_result | None = None
        self.last: os.times_result | None = None
        self.gc_seconds = 0.0
        self.full_collections = 0
        self._gc_started = 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if self.first is None:
            return
        if phase == "start":
            self._gc_started = time.process_time()
            return
        self.gc_seconds += time.process_time() - self._gc_started
        self.full_collections += info["generation"] == 2

    def tick(self) -> None:
        now = os.times()
        if self.first is None:
            self.first = now  # the first update's own cost is not counted: the rest are
        else:
            self.seen += 1
        self.last = now

    def result(self) -> dict[str, float]:
        if self.first is None or self.last is None or self.seen == 0:
            return {"updates": 0, "cpu_ms_per_update": 0.0, "gc_ms_per_update": 0.0}
        cpu = (self.last.user - self.first.user) + (self.last.system - self.first.system)
        return {
            "updates": self.seen,
            "cpu_ms_per_update": 1000 * cpu / self.seen,
            "gc_ms_per_update": 1000 * self.gc_seconds / self.seen,
            "full_collections": self.full_collections,
        }


async def _stream(client: Client, meter: _Meter, version: str) -> None:
    """Watch from ``version`` (events after the list are never missed: no wait needed)."""
    while True:
        async for event in client.watch(NODES, resource_version=version, timeout_seconds=600):
            version = event.object["metadata"]["resourceVersion"]
            if event.type == "MODIFIED":
                meter.tick()


async def watcher(kind: str, kubeconfig: Path, reads: str) -> None:
    """Watch until a line arrives on stdin, then print what was measured as JSON."""
    if reads == "each":
        client_module.WATCH_BUSY_RATE = math.inf  # no stream is busy: read every event at once
    else:
        # Kubelets' reports keep a Node watch busy for as long as the Nodes exist; start from
        # there (an average over one window) rather than spend each run's first
        # WATCH_BUSY_FOR seconds reaching it.
        client_module.WATCH_BUSY_FOR = client_module.WATCH_BATCH_WINDOW
    meter = _Meter()
    async with await Client.from_kubeconfig(kubeconfig) as client:
        if kind == "informer":

            def update(old: Obj, new: Obj) -> None:
                if node_inputs(old) == node_inputs(new):
                    meter.tick()

            informer = Informer(
                client, NODES, indexers={"providerID": field_indexer("spec.providerID")}
            )
            informer.add_handler(FuncHandler(update=update))
            await informer.start()
            await informer.wait_synced()
            task = None
        else:
            listed = await client.list(NODES)
            task = asyncio.create_task(_stream(client, meter, listed.resource_version))
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        if task is not None:
            task.cancel()
        else:
            await informer.stop()
    print(json.dumps(meter.result()), flush=True)


# -- the driver ----------------------------------------------------------------------------


async def measure(
    kubeconfig: Path,
    kind: str,
    loop: str,
    reads: str,
    records: list[InstanceRecord],
    updates: int,
    rate: float,
    round_: int,
) -> dict[str, Any]:
    """One watcher's figures for one run of updates."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--watcher",
        kind,
        "--loops",
        loop,
        "--reads",
        reads,
        "--kubeconfig",
        str(kubeconfig),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        if (await child.stdout.readline()).strip() != b"ready":
            raise RuntimeError(f"the {kind} watcher did not start")
        async with await Client.from_kubeconfig(kubeconfig) as client:
            start = EPOCH + dt.timedelta(days=round_ + 1)  # every update a real change
            seconds = await send_updates(client, records, updates, rate, start)
        await asyncio.sleep(3)  # the last updates reach the watcher
        child.stdin.write(b"stop\n")
        await child.stdin.drain()
        found: dict[str, Any] = json.loads(await child.stdout.readline())
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()
    found["sent_per_s"] = updates / seconds
    return found


def share_at_scale(ms_per_update: float) -> float:
    """% of one core at ``AT_NODES`` Nodes reporting every ``KUBELET_REPORT_SECONDS``."""
    return ms_per_update / 1000 * AT_NODES / KUBELET_REPORT_SECONDS * 100


def section(results: dict[str, Any]) -> str:
    lines = [
        f"{results['nodes']:,} Nodes with the node simulator's status on a fresh local control"
        f" plane; {results['updates']:,} heartbeat status patches (only `lastHeartbeatTime`"
        " moves) sent once paced, so each update reaches the watcher alone, and once 16 at a"
        " time, so they arrive together. Each watcher in a process of its own: **stream** is"
        " our client's watch, decoding each event; **informer** is a Node informer as the core"
        " keeps one (managedFields stripped, indexed by providerID, a handler comparing"
        " `node_inputs`); each on the event loop named (`uvloop` only when asked for with"
        " `--loops`). Reads **batched** is our runtime as it runs once the kubelets' reports"
        f" have kept a Node watch busy for {client_module.WATCH_BUSY_FOR:g} s on average (the"
        " watcher starts there): a Node watch busier than"
        f" {client_module.WATCH_BUSY_RATE:g} events a second is left unread for up to"
        f" {client_module.WATCH_MAX_HOLD * 1000:.0f} ms, so what arrives meanwhile is read"
        " together; **each** reads every event the moment it arrives. CPU is user and system"
        " time from the first update to the last; the"
        " cyclic garbage collector's part of it is timed with `gc.callbacks`, with the number"
        " of full (generation 2) collections in the window. The"
        f" last column: that cost at {AT_NODES:,} Nodes reporting every"
        f" {KUBELET_REPORT_SECONDS // 60} minutes (kubelet's `nodeStatusReportFrequency`),"
        f" {AT_NODES / KUBELET_REPORT_SECONDS:.1f} updates a second.",
        "",
        "| watcher | event loop | reads | updates sent | per second | updates seen |"
        " CPU ms per update | of which GC ms | full collections |"
        f" % of one core at {AT_NODES:,} Nodes |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["rows"]:
        lines.append(
            f"| {row['watcher']} | {row['loop']} | {row['reads']} | {row['mode']} |"
            f" {report.fmt(row['sent_per_s'])} |"
            f" {row['updates']:,} | {row['cpu_ms_per_update']:.3f} |"
            f" {row['gc_ms_per_update']:.3f} | {row['full_collections']} |"
            f" {share_at_scale(row['cpu_ms_per_update']):.2f} |"
        )
    return "\n".join(lines)


def _names(text: str, known: tuple[str, ...]) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names or any(name not in known for name in names):
        raise argparse.ArgumentTypeError(f"{text!r}: name one or more of {', '.join(known)}")
    return names


def _loops(text: str) -> tuple[str, ...]:
    loops = _names(text, LOOPS)
    if "uvloop" in loops and importlib.util.find_spec("uvloop") is None:
        raise argparse.ArgumentTypeError("uvloop is not installed: pip install uvloop")
    return loops


def _reads(text: str) -> tuple[str, ...]:
    return _names(text, READS)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--updates", type=int, default=1200, help="status patches per run [1200]")
    p.add_argument(
        "--rate",
        type=float,
        default=AT_NODES / KUBELET_REPORT_SECONDS,
        help="paced updates a second [33.3: 10,000 Nodes every 5 minutes]",
    )
    p.add_argument(
        "--loops",
        type=_loops,
        default=("asyncio",),
        help="event loops to run each watcher on, comma-separated [asyncio; also: uvloop]",
    )
    p.add_argument(
        "--reads",
        type=_reads,
        default=READS,
        help="batched (our runtime), each (every event read at once), or both [both]",
    )
    p.add_argument("--no-results", action="store_true", help="do not rewrite bench/RESULTS.md")
    p.add_argument("--watcher", choices=WATCHERS, help=argparse.SUPPRESS)
    p.add_argument("--kubeconfig", type=Path, help=argparse.SUPPRESS)
    return p.parse_args(argv)


async def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.watcher:
        await watcher(args.watcher, args.kubeconfig, args.reads[0])
        return 0
    command = "python bench/bench_node_watch.py " + shlex.join(argv)
    results: dict[str, Any] = {
        "when": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": dict(report.machine_info())["machinepool"].removeprefix("git "),
        "nodes": args.nodes,
        "updates": args.updates,
        "rows": [],
    }
    taken: set[str] = set()  # one network: at 10,000 Nodes two hashes meet
    records = [record(i, taken) for i in range(args.nodes)]
    with tempfile.TemporaryDirectory() as tmp:
        cp = ControlPlane(Path(tmp) / "cp")
        cp.start()
        try:
            async with await Client.from_kubeconfig(cp.kubeconfig) as client:
                await create_nodes(client, records)
            round_ = 0
            for mode, rate in ((f"paced at {args.rate:.3g}/s", args.rate), ("16 at a time", 0.0)):
                for kind in WATCHERS:
                    for loop in args.loops:
                        for reads in args.reads:
                            found = await measure(
                                cp.kubeconfig,
                                kind,
                                loop,
                                reads,
                                records,
                                args.updates,
                                rate,
                                round_,
                            )
                            round_ += 1
                            row = {"watcher": kind, "loop": loop, "reads": reads, "mode": mode}
                            results["rows"].append({**row, **found})
                            print(json.dumps(results["rows"][-1]), flush=True)
        finally:
            cp.stop()
    text = section(results)
    report.publish(
        "node-watch",
        "What one Node status update costs a watcher",
        text,
        command,
        data=results,
        results=not args.no_results,
    )
    return 0


if __name__ == "__main__":
    if "--watcher" in sys.argv and parse_args(sys.argv[1:]).loops == ("uvloop",):
        import uvloop

        sys.exit(uvloop.run(main(sys.argv[1:])))
    sys.exit(asyncio.run(main(sys.argv[1:])))
