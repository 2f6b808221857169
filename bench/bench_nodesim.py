"""The node simulator beside kwok: CPU and memory to keep the same Nodes Ready, on demand.

    python bench/bench_nodesim.py [--nodes 1000] [--window 360] [--kwok-version v0.7.0]

Two runs, each on a fresh local control plane of the same binaries:

- **ours**: the Nodes come the way the benchmark's pools make them (MachinePools on the Sim
  provider with boot delay 0; ``--pool-size`` replicas each), with the node simulator
  (``--components kubelet``) in a process of its own beside the core and the rest of the
  infra process. Once every Node is Ready, the node simulator's CPU over ``--window`` seconds
  and its RSS are what it costs to keep them Ready (its status period: ``--heartbeat-seconds``;
  its Node Leases, off by default: ``--lease-seconds``, one write per Node per period).
- **kwok** (``sigs.k8s.io/kwok``, built from the Go module proxy into
  ``~/.cache/machinepool/kwok/<version>/``, nothing committed): the same number of Nodes
  created by the driver with kwok's annotation, kwok with its default node stages (a Node's
  status is written once, when kwok takes it on); when ours renews Node Leases, kwok keeps
  them too, with the duration kubelet pairs with that period (4 x: 40 s for 10 s); the same
  window once every Node is Ready.

Both runs report, per 1,000 Nodes: CPU (% of one core) and RSS (MiB; the whole process,
fixed base included, so compare at 1,000 Nodes or more), and the workload
apiserver writes the simulator sent in the window (audit log), so the work each does to keep
a Node Ready is on the page beside what it costs. Results: stdout, bench/RESULTS.md (section
``nodesim``), JSON under bench/out/.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mpbench import procs, report, scenario
from mpbench.env import DRIVER_AGENT, BenchEnv
from mpbench.scenario import FROM_VERSION, Observer, node_ready
from mpbench.stats import writes

from machinepool.runtime import NODES, FuncHandler, Informer

KWOK_CACHE = Path.home() / ".cache" / "machinepool" / "kwok"
DRIVER_USER, CORE_USER, INFRA_USER, KUBELET_USER = (
    "bench-driver",
    "bench-core",
    "bench-infra",
    "bench-kubelet",
)


def build_kwok(version: str) -> Path:
    """The kwok binary of ``version``, built with ``go install`` the first time."""
    target = KWOK_CACHE / version
    binary = target / "kwok"
    if binary.exists():
        return binary
    target.mkdir(parents=True, exist_ok=True)
    print(f"building kwok {version} into {target} (go install; a few minutes)", flush=True)
    env = {**os.environ, "GOBIN": str(target), "GOFLAGS": "-trimpath"}
    subprocess.run(
        ["go", "install", "-ldflags=-s -w", f"sigs.k8s.io/kwok/cmd/kwok@{version}"],
        check=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    return binary


async def _steady(proc: procs.Controller, env: BenchEnv, window: float) -> dict[str, float]:
    """CPU and writes of ``proc`` over ``window`` seconds, and its RSS."""
    log = env.audit_logs["workload"]
    log.read()
    before = proc.sample()
    t0 = time.monotonic()
    await asyncio.sleep(window)
    after = proc.sample()
    elapsed = time.monotonic() - t0
    counts = log.read()
    sim_writes = writes(
        {k: n for k, n in counts.items() if k[1] not in (DRIVER_AGENT, "Python-urllib")}
    )
    return {
        "window_s": elapsed,
        "cpu_pct": 100 * (after.cpu_seconds - before.cpu_seconds) / elapsed,
        "rss_mib": after.rss_bytes / 2**20,
        "peak_rss_mib": after.peak_rss_bytes / 2**20,
        "workload_writes_per_min": 60 * sim_writes / elapsed,
    }


async def run_ours(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    env = BenchEnv(workdir, audit=True, binaries=procs.controlplane_binaries())
    env.start()
    started: list[procs.Controller] = []
    clients: list[Any] = []
    try:
        driver = await env.client(DRIVER_USER)
        clients.append(driver)
        await env.install(driver, "ours")
        rest = procs.infra(
            env.kubeconfig_for(INFRA_USER),
            workdir,
            INFRA_USER,
            args.heartbeat_seconds,
            components="bootstrap,sim",
            lease_seconds=args.lease_seconds,
        )
        kubelet = procs.infra(
            env.kubeconfig_for(KUBELET_USER),
            workdir,
            KUBELET_USER,
            args.heartbeat_seconds,
            components="kubelet",
            lease_seconds=args.lease_seconds,
            name="kubelet",
        )
        core = procs.ours_core(env.kubeconfig_for(CORE_USER), workdir, CORE_USER)
        started += [rest, kubelet, core]
        for proc in started:
            proc.wait_ready()
        workload = await env.workload_client()
        clients.append(workload)
        observer = Observer(driver, workload, fill_conditions=False)
        await observer.start()
        pools = math.ceil(args.nodes / args.pool_size)
        names = [scenario.pool_name(i) for i in range(pools)]
        await scenario.create_pools(driver, names, args.pool_size, FROM_VERSION)
        await observer.wait(observer.expect(names, args.pool_size, FROM_VERSION), args.timeout)
        nodes = observer.ready_nodes
        print(f"[ours] {nodes} Nodes Ready; measuring {args.window:.0f}s", flush=True)
        figures = await _steady(kubelet, env, args.window)
        await observer.stop()
        return {"nodes": nodes, **figures}
    finally:
        for client in clients:
            await client.close()
        for proc in started:
            proc.stop()
        env.stop()


def _fake_node(i: int) -> dict[str, Any]:
    name = f"kwok-{i:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
        },
        "spec": {"providerID": f"kwok://{name}"},
    }


async def run_kwok(args: argparse.Namespace, workdir: Path, binary: Path) -> dict[str, Any]:
    env = BenchEnv(workdir, audit=True, binaries=procs.controlplane_binaries())
    env.start()
    kwok: procs.Controller | None = None
    workload = None
    try:
        assert env.workload is not None
        kwok = procs.kwok(
            binary, env.workload.kubeconfig, workdir, lease_duration=_kwok_lease_duration(args)
        )
        kwok.wait_ready()
        workload = await env.workload_client()
        ready = asyncio.Event()
        names: set[str] = set()

        def seen(node: dict[str, Any]) -> None:
            if node_ready(node):
                names.add(node["metadata"]["name"])
            if len(names) >= args.nodes:
                ready.set()

        nodes = Informer(workload, NODES)
        nodes.add_handler(FuncHandler(add=seen, update=lambda _old, new: seen(new)))
        await nodes.start()
        await nodes.wait_synced()

        async def create(i: int) -> None:
            await workload.create(NODES, _fake_node(i))

        await scenario.bounded([str(i) for i in range(args.nodes)], lambda i: create(int(i)))
        try:
            await asyncio.wait_for(ready.wait(), args.timeout)
        except TimeoutError:
            raise TimeoutError(f"kwok: {len(names)}/{args.nodes} Nodes Ready") from None
        finally:
            await nodes.stop()
        print(f"[kwok] {len(names)} Nodes Ready; measuring {args.window:.0f}s", flush=True)
        figures = await _steady(kwok, env, args.window)
        return {"nodes": len(names), **figures}
    finally:
        if workload is not None:
            await workload.close()
        if kwok is not None:
            kwok.stop()
        env.stop()


def _kwok_lease_duration(args: argparse.Namespace) -> int:
    """kwok's Node Lease duration for ours' renewal period: kubelet renews its 40 s Lease every
    10 s, so 4 x the period (0, no Leases, when ours keeps none)."""
    return math.ceil(4 * args.lease_seconds) if args.lease_seconds > 0 else 0


def per_thousand(result: dict[str, Any], key: str) -> float:
    return float(result[key]) * 1000 / max(int(result["nodes"]), 1)


def section(results: dict[str, Any]) -> str:
    ours, kwok = results["ours"], results["kwok"]

    def both(label: str, key: str) -> report.Row:
        return (label, per_thousand(ours, key), per_thousand(kwok, key))

    rows: list[report.Row] = [
        ("Nodes kept Ready", ours["nodes"], kwok["nodes"]),
        ("measured window, s", ours["window_s"], kwok["window_s"]),
        ("CPU, % of one core", ours["cpu_pct"], kwok["cpu_pct"]),
        both("CPU per 1,000 Nodes, % of one core", "cpu_pct"),
        ("RSS, MiB", ours["rss_mib"], kwok["rss_mib"]),
        both("RSS per 1,000 Nodes, MiB", "rss_mib"),
        ("peak RSS, MiB", ours["peak_rss_mib"], kwok["peak_rss_mib"]),
        both("workload writes per minute per 1,000 Nodes", "workload_writes_per_min"),
    ]
    table = report.table(rows, upstream=True).replace(
        "| figure | ours | upstream | ours / upstream |", "| figure | ours | kwok | ours / kwok |"
    )
    lease_s = float(results.get("lease_s") or 0)
    leases = f"Node Leases renewed every {lease_s:g} s" if lease_s else "no Node Leases"
    kwok_lease_s = int(results.get("kwok_lease_s") or 0)
    kwok_leases = f"Node Leases of {kwok_lease_s} s" if kwok_lease_s else "no Node Leases"
    return "\n".join(
        [
            f"Ours: the node simulator process alone, status every {results['heartbeat_s']:.0f}"
            f" s and {leases}. kwok: its default node stages (each Node's status written"
            f" once) and {kwok_leases}. The writes row is what each sends to keep its Nodes"
            " Ready.",
            "",
            table,
        ]
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--nodes", type=int, default=1000, help="Nodes kept Ready [1000]")
    p.add_argument("--pool-size", type=int, default=100, help="replicas per pool (ours) [100]")
    p.add_argument(
        "--window",
        type=float,
        default=360.0,
        help="measured seconds; cover ours' status period [360]",
    )
    p.add_argument("--heartbeat-seconds", type=float, default=300.0)
    p.add_argument(
        "--lease-seconds",
        type=float,
        default=0.0,
        help="simulated kubelets' Node Lease renewal period [0: no Leases; kubelet's is 10]",
    )
    p.add_argument("--timeout", type=float, default=900.0, help="to get every Node Ready [900]")
    p.add_argument("--kwok-version", default="v0.7.0")
    p.add_argument("--workdir", type=Path)
    p.add_argument("--no-results", action="store_true", help="do not rewrite bench/RESULTS.md")
    return p.parse_args(argv)


async def main(argv: list[str]) -> int:
    args = parse_args(argv)
    command = "python bench/bench_nodesim.py " + shlex.join(argv)
    base = args.workdir or Path(tempfile.mkdtemp(prefix="mpbench-nodesim-"))
    print(f"work directory: {base}", flush=True)
    binary = build_kwok(args.kwok_version)
    results: dict[str, Any] = {
        "when": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": dict(report.machine_info())["machinepool"].removeprefix("git "),
        "kwok_version": args.kwok_version,
        "heartbeat_s": args.heartbeat_seconds,
        "lease_s": args.lease_seconds,
        "kwok_lease_s": _kwok_lease_duration(args),
    }
    results["ours"] = await run_ours(args, base / "ours")
    results["kwok"] = await run_kwok(args, base / "kwok", binary)
    text = section(results)
    report.publish(
        "nodesim",
        f"Node simulator beside kwok {results['kwok_version']}",
        text,
        command,
        data=results,
        results=not args.no_results,
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
