"""Benchmarks of the MachinePool system on a local control plane, run on demand.

    python bench/bench_machinepool.py [--pools N --replicas R] [--upstream] [--scale] [--latency]

Each measured run gets its own fresh control plane (etcd, management and workload
kube-apiservers with audit logs), its own controller processes and the same workload:

- convergence (always): N MachinePools x R replicas on the Sim provider with zero boot delay,
  from creation until every pool is Running with R matched Ready Nodes; then scale R -> 2R;
  then a version rollout. Per step: wall time, core-controller CPU seconds, its API requests
  by verb (management audit log, by the core's own identity), all requests to the workload
  apiserver by client, reconciles (the core's /metrics). Peak RSS and idle CPU afterwards.
  With ``--upstream`` the same run is repeated with upstream Cluster API's core manager in
  place of ours (same Sim provider, kubeadm bootstrap and node simulator in a separate
  process), and every figure is printed ours / upstream.
- ``--latency``: spec.replicas change -> first infra-pool update, and last Node Ready ->
  MachinePool Running, p50/p99 over ``--trials`` scale-ups (ours; upstream too with --upstream).
- ``--scale``: ``--scale-pools`` x ``--scale-replicas`` (1,000 x 10) with ours: convergence
  time, idle CPU, RSS.

Results: stdout, bench/RESULTS.md (the section of each mode that ran), and JSON under bench/out/.
Numbers are goals to compare, never assertions. Never part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import shlex
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpbench import procs, report, scenario
from mpbench.env import DRIVER_AGENT, BenchEnv
from mpbench.procs import MACHINEPOOL_CONTROLLER, Controller
from mpbench.scenario import FROM_VERSION, TO_VERSION, Observer
from mpbench.stats import (
    AuditKey,
    ProcSample,
    by_verb,
    hot_frames,
    percentile,
    prom_by_label,
    writes,
)

OUT = Path(__file__).resolve().parent / "out"
CORE_USER, INFRA_USER, DRIVER_USER = "bench-core", "bench-infra", "bench-driver"
BENCH_AGENTS = frozenset({DRIVER_AGENT, "Python-urllib"})
SETTLE_SECONDS = 2.0
"""After a target is met, how long the core may keep working before its costs are read."""


# -- one run: environment, processes, observer -----------------------------------------------


@dataclass
class Run:
    """Everything one measured run holds; ``close`` tears it all down."""

    core_kind: str
    env: BenchEnv
    core: Controller
    infra: Controller
    observer: Observer
    clients: list[Any]

    @property
    def driver(self) -> Any:
        return self.clients[0]

    async def close(self) -> None:
        await self.observer.stop()
        for client in self.clients:
            await client.close()
        for proc in (self.core, self.infra):
            proc.stop()
        self.env.stop()


async def start_run(
    core_kind: str,
    workdir: Path,
    args: argparse.Namespace,
    *,
    audit: bool,
    binary: Path | None,
    fill_conditions: bool = True,
) -> Run:
    print(f"[{core_kind}] starting control plane in {workdir}", flush=True)
    env = BenchEnv(workdir, audit=audit, binaries=procs.controlplane_binaries())
    env.start()
    started: list[Controller] = []
    clients: list[Any] = []
    try:
        driver = await env.client(DRIVER_USER)
        clients.append(driver)
        await env.install(driver, core_kind)
        infra = procs.infra(
            env.kubeconfig_for(INFRA_USER),
            workdir,
            INFRA_USER,
            args.heartbeat_seconds,
            args.infra_concurrency,
        )
        started.append(infra)
        core_kc = env.kubeconfig_for(CORE_USER)
        if core_kind == "upstream":
            assert binary is not None
            core = procs.upstream_core(binary, core_kc, workdir, CORE_USER)
        else:
            core = procs.ours_core(core_kc, workdir, CORE_USER)
        started.append(core)
        infra.wait_ready()
        core.wait_ready()
        workload = await env.workload_client()
        clients.append(workload)
        observer = Observer(driver, workload, fill_conditions=fill_conditions)
        await observer.start()
        print(f"[{core_kind}] controllers ready (core pid {core.pid})", flush=True)
        return Run(core_kind, env, core, infra, observer, clients)
    except BaseException:
        for client in clients:
            await client.close()
        for proc in started:
            proc.stop()
        env.stop()
        raise


# -- costs between two moments ---------------------------------------------------------------


@dataclass
class Snapshot:
    at: float
    core: ProcSample
    infra: ProcSample
    reconciles: dict[str, float]
    apiserver: dict[str, dict[str, float]]


def snapshot(run: Run) -> Snapshot:
    apiserver = {}
    for server in ("management", "workload"):
        text = run.env.apiserver_metrics(server)
        counts = prom_by_label(text, "apiserver_request_total", ["verb"])
        apiserver[server] = {verb: n for (verb,), n in counts.items()}
    return Snapshot(
        time.monotonic(),
        run.core.sample(),
        run.infra.sample(),
        run.core.reconciles(),
        apiserver,
    )


def audit_delta(run: Run) -> dict[str, Counter[AuditKey]]:
    return {server: log.read() for server, log in run.env.audit_logs.items()}


def step_figures(
    before: Snapshot, after: Snapshot, audit: dict[str, Counter[AuditKey]]
) -> dict[str, Any]:
    mgmt = audit.get("management", Counter())
    # The bench's own requests (watching, filling node conditions, scraping) are not counted.
    work = Counter(
        {k: n for k, n in audit.get("workload", Counter()).items() if k[1] not in BENCH_AGENTS}
    )
    reconciles = {
        k: after.reconciles.get(k, 0.0) - before.reconciles.get(k, 0.0) for k in after.reconciles
    }
    return {
        "core_cpu_s": after.core.cpu_seconds - before.core.cpu_seconds,
        "infra_cpu_s": after.infra.cpu_seconds - before.infra.cpu_seconds,
        "reconciles_machinepool": reconciles.get(MACHINEPOOL_CONTROLLER, 0.0),
        "reconciles_all": sum(reconciles.values()),
        "reconciles_by_controller": reconciles,
        "mgmt_core_requests": sum(by_verb(mgmt, CORE_USER).values()),
        "mgmt_core_writes": writes(mgmt, CORE_USER),
        "mgmt_core_by_verb": by_verb(mgmt, CORE_USER),
        "mgmt_infra_requests": sum(by_verb(mgmt, INFRA_USER).values()),
        "workload_requests": sum(work.values()),
        "workload_writes": writes(work),
        "workload_by_agent_verb": {
            f"{user} {agent} {verb}": n for (user, agent, verb), n in work.most_common()
        },
        "apiserver_by_verb": {
            server: {
                v: n - before.apiserver[server].get(v, 0.0)
                for v, n in after.apiserver[server].items()
                if n - before.apiserver[server].get(v, 0.0) > 0
            }
            for server in after.apiserver
        },
    }


async def timed_step(run: Run, label: str, action: Any, target_args: Any, timeout: float) -> Any:
    """Run ``action``, wait for the target, settle, and return the step's figures."""
    audit_delta(run)  # discard what came before
    before = snapshot(run)
    t0 = time.monotonic()
    await action
    target = run.observer.expect(*target_args)
    try:
        done = await run.observer.wait(target, timeout)
    except TimeoutError:
        await dump_state(run)
        raise
    await asyncio.sleep(SETTLE_SECONDS)
    after = snapshot(run)
    figures = step_figures(before, after, audit_delta(run))
    figures["wall_s"] = done - t0
    print(
        f"[{run.core_kind}] {label}: {figures['wall_s']:.2f}s wall, "
        f"core {figures['core_cpu_s']:.2f} CPU s, "
        f"{figures['mgmt_core_requests']} core requests ({figures['mgmt_core_writes']} writes), "
        f"{figures['reconciles_machinepool']:.0f} MachinePool reconciles",
        flush=True,
    )
    return figures


async def dump_state(run: Run) -> None:
    """Write the objects a failed convergence leaves behind next to the logs, for diagnosis."""
    out: dict[str, Any] = {}
    for resource in (scenario.MACHINEPOOLS, scenario.MACHINES, scenario.SIM_POOLS):
        listed = await run.driver.list(resource, "bench")
        out[resource.plural] = listed.items[:20]
    out["nodes"] = run.observer.nodes.list()[:20]
    path = run.env.dir / "failure-dump.json"
    path.write_text(json.dumps(out, indent=1, default=str))
    print(f"[{run.core_kind}] objects written to {path}", flush=True)


async def idle_cpu(run: Run, seconds: float) -> dict[str, float]:
    before = run.core.sample()
    infra_before = run.infra.sample()
    reconciles_before = run.core.reconciles()
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    after, infra_after = run.core.sample(), run.infra.sample()
    elapsed = time.monotonic() - t0
    reconciles = sum(run.core.reconciles().values()) - sum(reconciles_before.values())
    return {
        "core_idle_reconciles_per_s": reconciles / elapsed,
        "core_idle_cpu_pct": 100 * (after.cpu_seconds - before.cpu_seconds) / elapsed,
        "infra_idle_cpu_pct": 100 * (infra_after.cpu_seconds - infra_before.cpu_seconds) / elapsed,
        "core_rss_mib": after.rss_bytes / 2**20,
        "core_peak_rss_mib": after.peak_rss_bytes / 2**20,
        "infra_peak_rss_mib": infra_after.peak_rss_bytes / 2**20,
    }


# -- modes -----------------------------------------------------------------------------------


def step_timeout(pools: int, replicas: int, base: float) -> float:
    return base + 0.5 * pools * replicas


async def convergence(
    core_kind: str, args: argparse.Namespace, workdir: Path, binary: Path | None
) -> dict[str, Any]:
    run = await start_run(core_kind, workdir, args, audit=True, binary=binary)
    try:
        if args.profile and core_kind == "ours":
            run.core.start_profile(workdir / "core-profile.txt")
        names = [scenario.pool_name(i) for i in range(args.pools)]
        r, r2 = args.replicas, 2 * args.replicas
        timeout = step_timeout(args.pools, r2, args.timeout)
        result: dict[str, Any] = {"steps": {}}
        steps = result["steps"]
        steps["create"] = await timed_step(
            run,
            f"create {args.pools} x {r}",
            scenario.create_pools(run.driver, names, r, FROM_VERSION),
            (names, r, FROM_VERSION),
            timeout,
        )
        steps["scale"] = await timed_step(
            run,
            f"scale {r} -> {r2}",
            scenario.scale_pools(run.driver, names, r2),
            (names, r2, FROM_VERSION),
            timeout,
        )
        steps["rollout"] = await timed_step(
            run,
            f"roll {FROM_VERSION} -> {TO_VERSION}",
            scenario.roll_pools(run.driver, names, TO_VERSION),
            (names, r2, TO_VERSION),
            timeout,
        )
        result["idle"] = await idle_cpu(run, args.idle_seconds)
        print(f"[{core_kind}] idle: {result['idle']}", flush=True)
        if run.core.profile_path is not None:
            run.core.stop_profile()
            result["profile"] = profile_summary(run.core.profile_path)
        return result
    finally:
        await run.close()


def profile_summary(path: Path) -> dict[str, Any]:
    """The hottest frames of our code and overall, printed and kept with the results."""
    lines = path.read_text().splitlines() if path.exists() else []
    ours = hot_frames(lines, "machinepool/", limit=25)
    overall = hot_frames(lines, "", limit=25)
    print(f"profile of the core ({path}); share of samples each frame is on the stack:")
    for frame, share in ours:
        print(f"  {100 * share:5.1f}%  {frame}")
    return {"path": str(path), "machinepool": ours, "all": overall}


async def latency(
    core_kind: str, args: argparse.Namespace, workdir: Path, binary: Path | None
) -> dict[str, Any]:
    run = await start_run(core_kind, workdir, args, audit=False, binary=binary)
    try:
        names = [f"lat-{i}" for i in range(args.latency_pools)]
        replicas = dict.fromkeys(names, 1)
        await scenario.create_pools(run.driver, names, 1, FROM_VERSION)
        await run.observer.wait(run.observer.expect(names, 1, FROM_VERSION), args.timeout)
        infra_ms: list[float] = []
        running_ms: list[float] = []
        for trial in range(args.trials):
            name = names[trial % len(names)]
            replicas[name] += 1
            first_update: list[float] = []

            def on_update(
                pool: str, at: float, name: str = name, sink: list[float] = first_update
            ) -> None:
                if pool == name and not sink:
                    sink.append(at)

            run.observer.on_sim_update = on_update
            sent = time.monotonic()
            await scenario.scale_pools(run.driver, [name], replicas[name])
            target = run.observer.expect([name], replicas[name], FROM_VERSION)
            await run.observer.wait(target, args.timeout)
            run.observer.on_sim_update = None
            if first_update:
                infra_ms.append(1000 * (first_update[0] - sent))
            pool = run.observer.pools.get(name, "bench") or {}
            ready = [run.observer.node_ready_at.get(n) for n in scenario.node_names(pool)]
            last_ready = max((t for t in ready if t is not None), default=None)
            running = run.observer.running_at.get(name)
            if last_ready is not None and running is not None:
                running_ms.append(1000 * (running - last_ready))
            if (trial + 1) % 25 == 0:
                print(f"[{core_kind}] latency trial {trial + 1}/{args.trials}", flush=True)
        return {
            "trials": args.trials,
            "replicas_to_infra_ms": _dist(infra_ms),
            "node_ready_to_running_ms": _dist(running_ms),
        }
    finally:
        await run.close()


def _dist(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values),
        "min": min(values),
    }


async def scale(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    run = await start_run(
        "ours", workdir, args, audit=False, binary=None, fill_conditions=args.upstream_like_nodes
    )
    try:
        names = [scenario.pool_name(i) for i in range(args.scale_pools)]
        before = snapshot(run)
        t0 = time.monotonic()
        await scenario.create_pools(run.driver, names, args.scale_replicas, FROM_VERSION)
        created = time.monotonic() - t0
        print(f"[scale] created {len(names)} pools in {created:.1f}s", flush=True)
        target = run.observer.expect(names, args.scale_replicas, FROM_VERSION)
        timeout = args.scale_timeout
        result: dict[str, Any] = {"pools": args.scale_pools, "replicas": args.scale_replicas}
        try:
            done = await run.observer.wait(target, timeout, progress=30)
            result["converged_s"] = done - t0
        except TimeoutError as exc:
            result["converged_s"] = None
            result["timeout"] = str(exc)
            print(f"[scale] not converged: {exc}", flush=True)
        after = snapshot(run)
        result["create_s"] = created
        result["core_cpu_s"] = after.core.cpu_seconds - before.core.cpu_seconds
        result["infra_cpu_s"] = after.infra.cpu_seconds - before.infra.cpu_seconds
        result["reconciles"] = {
            k: v - before.reconciles.get(k, 0.0) for k, v in after.reconciles.items()
        }
        result["nodes"] = len(run.observer.nodes)
        result["idle"] = await idle_cpu(run, args.scale_idle_seconds)
        print(f"[scale] {json.dumps(result, default=str)}", flush=True)
        return result
    finally:
        await run.close()


# -- reporting -------------------------------------------------------------------------------


def convergence_rows(ours: dict[str, Any], up: dict[str, Any] | None) -> list[report.Row]:
    rows: list[report.Row] = []

    def u(path: list[str]) -> float | None:
        if up is None:
            return None
        value: Any = up
        for p in path:
            value = value.get(p) if isinstance(value, dict) else None
        return None if value is None else float(value)

    def o(path: list[str]) -> float | None:
        value: Any = ours
        for p in path:
            value = value.get(p) if isinstance(value, dict) else None
        return None if value is None else float(value)

    figures = [
        ("wall_s", "wall time, s"),
        ("core_cpu_s", "core CPU, s"),
        ("reconciles_machinepool", "MachinePool reconciles"),
        ("reconciles_all", "reconciles, all core controllers"),
        ("mgmt_core_requests", "core requests to management apiserver"),
        ("mgmt_core_writes", "core writes to management apiserver"),
        ("workload_requests", "workload apiserver requests, all clients"),
        ("workload_writes", "workload apiserver writes, all clients"),
        ("infra_cpu_s", "shared infra process CPU, s"),
    ]
    for step in ("create", "scale", "rollout"):
        for key, label in figures:
            path = ["steps", step, key]
            rows.append((f"{step}: {label}", o(path), u(path)))
    for key, label in [
        ("core_peak_rss_mib", "core peak RSS, MiB"),
        ("core_rss_mib", "core RSS after the run, MiB"),
        ("core_idle_cpu_pct", "core idle CPU, % of one core"),
        ("core_idle_reconciles_per_s", "core idle reconciles per second"),
    ]:
        rows.append((label, o(["idle", key]), u(["idle", key])))
    return rows


def verb_rows(ours: dict[str, Any], up: dict[str, Any] | None) -> list[report.Row]:
    totals: dict[str, list[float]] = {}
    for i, result in enumerate((ours, up)):
        if result is None:
            continue
        for step in result["steps"].values():
            for verb, n in step["mgmt_core_by_verb"].items():
                totals.setdefault(verb, [0.0, 0.0])[i] += n
    return [
        (f"core {verb} (management, all steps)", v[0], v[1] if up is not None else None)
        for verb, v in sorted(totals.items())
    ]


def workload_agent_rows(result: dict[str, Any]) -> str:
    counts: Counter[str] = Counter()
    for step in result["steps"].values():
        for key, n in step["workload_by_agent_verb"].items():
            counts[key] += n
    lines = ["| user agent verb | requests |", "|---|---:|"]
    lines += [f"| {k} | {n:,} |" for k, n in counts.most_common(20)]
    return "\n".join(lines)


def convergence_section(args: argparse.Namespace, results: dict[str, Any], command: str) -> str:
    ours, up = results["ours"], results.get("upstream")
    text = [
        f"## Convergence: {args.pools} pools x {args.replicas} replicas, scale to "
        f"{2 * args.replicas}, roll {FROM_VERSION} -> {TO_VERSION}",
        "",
        f"Run {results['when']} on git {results['commit']}: `{command}`",
        "",
        report.table(convergence_rows(ours, up) + verb_rows(ours, up), upstream=up is not None),
        "",
        "Workload apiserver requests by client (ours; the core and the node simulator share "
        "the cluster's admin kubeconfig, so they are told apart by user agent only):",
        "",
        workload_agent_rows(ours),
    ]
    if up is not None:
        text += ["", "Same, upstream run:", "", workload_agent_rows(up)]
    return "\n".join(text)


def latency_section(results: dict[str, Any], command: str) -> str:
    rows: list[report.Row] = []
    ours, up = results["ours"], results.get("upstream")
    for key, label in [
        ("replicas_to_infra_ms", "spec.replicas change -> infra pool update, ms"),
        ("node_ready_to_running_ms", "last Node Ready -> MachinePool Running, ms"),
    ]:
        for q in ("p50", "p99", "max", "n"):
            o = ours[key].get(q)
            u = up[key].get(q) if up else None
            rows.append((f"{label} {q}", o, u))
    return "\n".join(
        [
            f"## Latency: {ours['trials']} scale-up trials",
            "",
            f"Run {results['when']} on git {results['commit']}: `{command}`",
            "",
            report.table(rows, upstream=up is not None),
        ]
    )


def scale_section(result: dict[str, Any], command: str, when: str, commit: str) -> str:
    idle = result.get("idle", {})
    # Without convergence the "idle" window is still converging: say so in the labels.
    after = "after convergence" if result.get("converged_s") is not None else "after the timeout"
    rows: list[report.Row] = [
        ("pools", result["pools"], None),
        ("replicas per pool", result["replicas"], None),
        ("Nodes at the end", result["nodes"], None),
        ("creation of all objects, s", result["create_s"], None),
        ("convergence from first create, s", result.get("converged_s"), None),
        ("core CPU from first create to convergence (or timeout), s", result["core_cpu_s"], None),
        (f"core CPU {after}, % of one core", idle.get("core_idle_cpu_pct"), None),
        (f"core reconciles per second {after}", idle.get("core_idle_reconciles_per_s"), None),
        (f"core RSS {after}, MiB", idle.get("core_rss_mib"), None),
        ("core peak RSS, MiB", idle.get("core_peak_rss_mib"), None),
        (f"infra CPU {after}, % of one core", idle.get("infra_idle_cpu_pct"), None),
        ("infra peak RSS, MiB", idle.get("infra_peak_rss_mib"), None),
    ]
    text = [
        f"## Scale: {result['pools']} pools x {result['replicas']} replicas (ours)",
        "",
        f"Run {when} on git {commit}: `{command}`",
        "",
        report.table(rows, upstream=False),
    ]
    if result.get("timeout"):
        text += ["", f"Did not converge: {result['timeout']}"]
    return "\n".join(text)


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--pools", type=int, default=3, help="pools in the convergence run [3]")
    p.add_argument("--replicas", type=int, default=3, help="replicas per pool [3]")
    p.add_argument("--upstream", action="store_true", help="also run upstream Cluster API's core")
    p.add_argument("--latency", action="store_true", help="run the latency trials")
    p.add_argument("--trials", type=int, default=200, help="latency trials [200]")
    p.add_argument("--latency-pools", type=int, default=4, help="pools the trials rotate over [4]")
    p.add_argument("--scale", action="store_true", help="run the 1,000 x 10 scale test (ours)")
    p.add_argument("--scale-pools", type=int, default=1000)
    p.add_argument("--scale-replicas", type=int, default=10)
    p.add_argument("--scale-idle-seconds", type=float, default=60.0)
    p.add_argument(
        "--scale-timeout",
        type=float,
        default=1800.0,
        help="give up on scale convergence after this many seconds (figures still reported) [1800]",
    )
    p.add_argument(
        "--heartbeat-seconds",
        type=float,
        default=300.0,
        help="node simulator status period [300: kubelet's nodeStatusReportFrequency]",
    )
    p.add_argument(
        "--infra-concurrency",
        type=int,
        default=0,
        help="workers per controller in the shared infra process [0: each component's default]",
    )
    p.add_argument(
        "--upstream-like-nodes",
        action="store_true",
        help="in --scale, also add the pressure conditions upstream needs (off: ours ignores them)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="sample our core with py-spy during the convergence run (skews its figures)",
    )
    p.add_argument("--no-convergence", action="store_true", help="skip the convergence run")
    p.add_argument("--idle-seconds", type=float, default=20.0, help="idle CPU window [20]")
    p.add_argument("--timeout", type=float, default=180.0, help="base timeout per step, s [180]")
    p.add_argument("--workdir", type=Path, help="keep logs and audit logs here")
    p.add_argument("--no-results", action="store_true", help="do not rewrite bench/RESULTS.md")
    return p.parse_args(argv)


async def main(argv: list[str]) -> int:
    args = parse_args(argv)
    command = "python bench/bench_machinepool.py " + shlex.join(argv)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    commit = dict(report.machine_info())["machinepool"].removeprefix("git ")
    base = args.workdir or Path(tempfile.mkdtemp(prefix="mpbench-"))
    print(f"work directory (logs, audit logs): {base}", flush=True)
    binary = procs.build_upstream() if args.upstream else None
    cores = ["ours", "upstream"] if args.upstream else ["ours"]
    OUT.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")

    def save(mode: str, data: dict[str, Any], section: str, load: str) -> None:
        section += (
            f"\n\nLoad average (1/5/15 min) when this mode started: {load}; on {os.cpu_count()}"
            " CPUs shared with whatever else ran, so compare within a run, not across runs."
        )
        (OUT / f"{stamp}-{mode}.json").write_text(json.dumps(data, indent=2, default=str))
        print("\n" + section + "\n", flush=True)
        if not args.no_results:
            report.update_results(mode, section, [command])

    def load_now() -> str:
        return " / ".join(f"{v:.1f}" for v in os.getloadavg())

    if not args.no_convergence:
        load = load_now()
        results: dict[str, Any] = {"when": when, "commit": commit}
        for core in cores:
            results[core] = await convergence(core, args, base / f"convergence-{core}", binary)
        save("convergence", results, convergence_section(args, results, command), load)
    if args.latency:
        load = load_now()
        lat: dict[str, Any] = {"when": when, "commit": commit}
        for core in cores:
            lat[core] = await latency(core, args, base / f"latency-{core}", binary)
        save("latency", lat, latency_section(lat, command), load)
    if args.scale:
        load = load_now()
        result = await scale(args, base / "scale")
        save("scale", result, scale_section(result, command, when, commit), load)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
