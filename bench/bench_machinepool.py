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
- ``--scale``: the scale scenarios, ours and (``--upstream``) upstream's, each on a fresh
  control plane: (a) 10 x 1,000 created then rolled with maxSurge 10%, (b) 1,000 x 10, (c) one
  pool 0 -> 2,000 -> 200; per step wall time, per-pool convergence (p50/p99/max), core CPU and
  peak RSS, MachinePool reconciles, writes of all clients per Node and per second against the
  write ceiling, the rollout's fewest Ready Nodes; idle CPU, reconciles and writes afterwards.
  A side that misses ``--scale-timeout`` (the rollout: ``--rollout-timeout``) keeps its row
  with where it stood.

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
from mpbench.env import DRIVER_AGENT, NAMESPACE, BenchEnv
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
    writes_by_resource,
)

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
            lease_seconds=args.lease_seconds,
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
    controlplane_cpu: dict[str, float]


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
        run.env.controlplane_cpu(),
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
        **{
            f"{proc}_cpu_s": after.controlplane_cpu[proc] - before.controlplane_cpu.get(proc, 0.0)
            for proc in after.controlplane_cpu
        },
        "reconciles_machinepool": reconciles.get(MACHINEPOOL_CONTROLLER, 0.0),
        "reconciles_all": sum(reconciles.values()),
        "reconciles_by_controller": reconciles,
        "mgmt_core_requests": sum(by_verb(mgmt, CORE_USER).values()),
        "mgmt_core_writes": writes(mgmt, CORE_USER),
        "mgmt_core_by_verb": by_verb(mgmt, CORE_USER),
        "mgmt_infra_requests": sum(by_verb(mgmt, INFRA_USER).values()),
        "workload_requests": sum(work.values()),
        "workload_writes": writes(work),
        "workload_by_agent_verb": dict(
            Counter(f"{user} {agent} {verb}" for (user, agent, verb, _) in work.elements())
        ),
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
    for resource in (scenario.MACHINE_POOLS, scenario.MACHINES, scenario.SIM_MACHINE_POOLS):
        listed = await run.driver.list(resource, "bench")
        out[resource.plural] = listed.items[:20]
    out["nodes"] = run.observer.nodes.list()[:20]
    path = run.env.dir / "failure-dump.json"
    path.write_text(json.dumps(out, indent=1, default=str))
    print(f"[{run.core_kind}] objects written to {path}", flush=True)


async def idle_cpu(run: Run, seconds: float) -> dict[str, Any]:
    before = run.core.sample()
    infra_before = run.infra.sample()
    reconciles_before = run.core.reconciles()
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    after, infra_after = run.core.sample(), run.infra.sample()
    elapsed = time.monotonic() - t0
    reconciles_after = run.core.reconciles()
    by_controller = {
        name: (count - reconciles_before.get(name, 0.0)) / elapsed
        for name, count in reconciles_after.items()
        if count > reconciles_before.get(name, 0.0)
    }
    return {
        "core_idle_reconciles_per_s": sum(by_controller.values()),
        "core_idle_reconciles_per_s_by_controller": by_controller,
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


# -- scale scenarios -------------------------------------------------------------------------


@dataclass(frozen=True)
class ScaleScenario:
    """One scale scenario: ``pools`` pools created at ``start`` replicas (``None``: created at
    ``steps[0]``, the creation being the first measured step), then scaled through ``steps``;
    with ``rollout``, finally rolled to TO_VERSION."""

    key: str
    title: str
    pools: int
    steps: tuple[int, ...]
    start: int | None = None
    rollout: bool = False


def scale_scenarios(args: argparse.Namespace) -> list[ScaleScenario]:
    big = ScaleScenario(
        "a",
        f"(a) {args.big_pools} pools x {args.big_replicas}",
        args.big_pools,
        (args.big_replicas,),
        rollout=not args.no_rollout,
    )
    many = ScaleScenario(
        "b",
        f"(b) {args.many_pools} pools x {args.many_replicas}",
        args.many_pools,
        (args.many_replicas,),
    )
    steps = tuple(int(n) for n in args.one_pool_steps.split(","))
    one = ScaleScenario(
        "c", "(c) one pool 0 -> " + " -> ".join(f"{n:,}" for n in steps), 1, steps, start=0
    )
    chosen = set(args.scale_scenarios.split(","))
    unknown = chosen - {"a", "b", "c"}
    if unknown:
        raise SystemExit(f"--scale-scenarios: unknown {sorted(unknown)}; choose from a, b, c")
    return [s for s in (big, many, one) if s.key in chosen]


APISERVER_USER = "system:apiserver"
"""The apiservers' own requests (their identity Leases): the same for any controllers."""


def bench_writes(audit: dict[str, Counter[AuditKey]]) -> Counter[AuditKey]:
    """Every request of every client on both apiservers except the benchmark's own and the
    apiservers' own."""
    out: Counter[AuditKey] = Counter()
    for counts in audit.values():
        for key, n in counts.items():
            if key[0] not in (DRIVER_USER, APISERVER_USER) and key[1] not in BENCH_AGENTS:
                out[key] += n
    return out


async def scale_step(
    run: Run,
    label: str,
    action: Any,
    target_args: tuple[list[str], int, str],
    changed: int,
    timeout: float,
) -> dict[str, Any]:
    """Send ``action`` (which returns when each pool's request was sent), wait for the target
    or the timeout, and return the step's figures; where it stood when it timed out."""
    audit_delta(run)
    before = snapshot(run)
    t0 = time.monotonic()
    sent: dict[str, float] = await action
    # The target: Running at the size with every Node Ready. observedGeneration is
    # counted beside it (upstream's can stay one behind its own providerIDList write).
    target = run.observer.expect(*target_args, current=False)
    figures: dict[str, Any] = {"label": label, "nodes_changed": changed}
    try:
        done = await run.observer.wait(target, timeout, progress=30)
        figures["wall_s"] = done - t0
        await asyncio.sleep(SETTLE_SECONDS)
    except TimeoutError as exc:
        figures["wall_s"] = None
        figures["stood"] = str(exc)
        print(f"[{run.core_kind}] {label}: not converged in {timeout:.0f}s: {exc}", flush=True)
        await dump_state(run)
    after = snapshot(run)
    audit = audit_delta(run)
    figures.update(step_figures(before, after, audit))
    elapsed = (t0 + figures["wall_s"]) if figures["wall_s"] is not None else after.at
    own = bench_writes(audit)
    total = writes(own)
    mgmt_writes = writes(bench_writes({"management": audit.get("management", Counter())}))
    step_s = max(elapsed - t0, 1e-9)
    figures.update(
        pools=len(target.names),
        pools_met=len(target.met),
        pools_generation_behind=sum(
            1
            for n in target.names
            if (p := run.observer.pools.get(n, NAMESPACE)) and not scenario.observed(p)
        ),
        nodes_ready=run.observer.ready_nodes,
        # Fairness: each pool from its own request to the event that made it meet the target.
        pool_s=_dist([target.met_at[n] - sent.get(n, t0) for n in target.met]),
        slowest_pools=sorted(
            ((round(target.met_at[n] - sent.get(n, t0), 2), n) for n in target.met),
            reverse=True,
        )[:5],
        unmet_pools=sorted(target.names - target.met)[:10],
        writes_all=total,
        # Only a finished step has a cost per Node: one cut off by the timeout has written
        # ahead for Nodes that do not exist yet (every instance and its record, for example).
        writes_per_node=total / changed if changed and figures["wall_s"] is not None else None,
        writes_per_s=total / step_s,
        mgmt_writes=mgmt_writes,
        # Where the step's time goes: the management apiserver's CPU per write it took, and
        # how much of a core it was busy; with two cores shared by every process, a step
        # whose management apiserver runs near one core cannot go much faster by cutting
        # controller CPU, only by sending fewer or smaller writes.
        mgmt_apiserver_ms_per_write=(
            1000 * figures["mgmt_apiserver_cpu_s"] / mgmt_writes if mgmt_writes else None
        ),
        mgmt_apiserver_busy_pct=(
            100 * figures["mgmt_apiserver_cpu_s"] / max(after.at - before.at, 1e-9)
        ),
        writes_by_resource=writes_by_resource(own),
        core_peak_rss_mib=after.core.peak_rss_bytes / 2**20,
        infra_peak_rss_mib=after.infra.peak_rss_bytes / 2**20,
    )
    wall = figures["wall_s"]
    print(
        f"[{run.core_kind}] {label}: "
        + (f"{wall:.1f}s wall, " if wall is not None else "not converged, ")
        + f"{figures['pools_met']}/{figures['pools']} pools, {total:,} writes "
        f"({figures['writes_per_node'] or 0:.1f} per Node), "
        f"{figures['reconciles_machinepool']:.0f} MachinePool reconciles",
        flush=True,
    )
    return figures


async def idle_window(run: Run, seconds: float) -> dict[str, Any]:
    """``idle_cpu`` plus every write any client sent in the window, by user, verb, resource."""
    audit_delta(run)
    figures: dict[str, Any] = await idle_cpu(run, seconds)
    own = bench_writes(audit_delta(run))
    figures["idle_writes"] = writes(own)
    figures["idle_writes_by_resource"] = writes_by_resource(own)
    return figures


def _met(step: dict[str, Any]) -> bool:
    return bool(step.get("wall_s") is not None)


async def scale_scenario(
    core_kind: str,
    scenario_: ScaleScenario,
    args: argparse.Namespace,
    workdir: Path,
    binary: Path | None,
) -> dict[str, Any]:
    run = await start_run(core_kind, workdir, args, audit=True, binary=binary)
    try:
        names = [scenario.pool_name(i) for i in range(scenario_.pools)]
        surge = args.max_surge
        result: dict[str, Any] = {"steps": []}
        steps: list[dict[str, Any]] = result["steps"]
        t_first = time.monotonic()
        current = scenario_.start
        if current is not None:
            # Created at the start size, not measured: the steps are the scaling.
            await scenario.create_pools(run.driver, names, current, FROM_VERSION, surge)
            for name in names:
                await run.observer.wait_pool(name, scenario.observed, args.scale_timeout)
        for replicas in scenario_.steps:
            if current is None:
                label = f"create {len(names):,} x {replicas:,}"
                action = scenario.create_pools(run.driver, names, replicas, FROM_VERSION, surge)
                changed = len(names) * replicas
            else:
                label = f"scale {current:,} -> {replicas:,}"
                action = scenario.scale_pools(run.driver, names, replicas)
                changed = len(names) * abs(replicas - current)
            step = await scale_step(
                run, label, action, (names, replicas, FROM_VERSION), changed, args.scale_timeout
            )
            steps.append(step)
            current = replicas
            if not _met(step):
                break
        else:
            if steps and steps[0]["wall_s"] is not None and scenario_.start is None:
                result["first_create_to_converged_s"] = steps[0]["wall_s"]
            if scenario_.rollout and current is not None:
                run.observer.track_minimums()
                step = await scale_step(
                    run,
                    f"roll {FROM_VERSION} -> {TO_VERSION} (maxSurge {surge})",
                    scenario.roll_pools(run.driver, names, TO_VERSION),
                    (names, current, TO_VERSION),
                    len(names) * current,
                    args.rollout_timeout or args.scale_timeout,
                )
                run.observer.stop_tracking()
                step["replicas_total"] = len(names) * current
                step["min_ready_nodes"] = run.observer.min_ready_nodes
                step["min_pool_ready"] = min(run.observer.min_pool_ready.values(), default=None)
                step["replicas_per_pool"] = current
                steps.append(step)
        result["total_s"] = time.monotonic() - t_first
        result["idle"] = await idle_window(run, args.scale_idle_seconds)
        print(f"[{core_kind}] {scenario_.title}: idle {result['idle']}", flush=True)
        return result
    finally:
        await run.close()


def write_ceiling(writes_n: int) -> dict[str, float]:
    """bench_apiserver_writes.py's figure, measured in this invocation on a fresh control
    plane of the same binaries: the most creates per second one client gets here."""
    from bench_apiserver_writes import ceiling

    return ceiling(writes_n, 32)


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


def convergence_title(args: argparse.Namespace) -> str:
    return (
        f"Convergence: {args.pools} pools x {args.replicas} replicas, scale to "
        f"{2 * args.replicas}, roll {FROM_VERSION} -> {TO_VERSION}"
    )


def convergence_section(results: dict[str, Any]) -> str:
    ours, up = results["ours"], results.get("upstream")
    text = [
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


def latency_section(results: dict[str, Any]) -> str:
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
    return report.table(rows, upstream=up is not None)


def _get(result: dict[str, Any] | None, *path: Any) -> float | None:
    value: Any = result
    for p in path:
        if isinstance(value, dict):
            value = value.get(p)
        elif isinstance(value, list) and isinstance(p, int) and p < len(value):
            value = value[p]
        else:
            return None
    return None if value is None or isinstance(value, (dict, list, str)) else float(value)


def scale_rows(
    ours: dict[str, Any], up: dict[str, Any] | None, ceiling_per_s: float | None
) -> list[report.Row]:
    rows: list[report.Row] = []
    for i, step in enumerate(ours["steps"]):
        name = step["label"]

        def row(label: str, *path: Any, i: int = i, name: str = name) -> None:
            o, u = _get(ours, "steps", i, *path), _get(up, "steps", i, *path)
            rows.append((f"{name}: {label}", o, u))

        row("wall time to every pool Running with every Node Ready, s", "wall_s")
        row("pools at the target (of {:,})".format(step["pools"]), "pools_met")
        row("Nodes Ready at the end", "nodes_ready")
        row("pools whose observedGeneration is behind at the end", "pools_generation_behind")
        for q in ("p50", "p99", "max"):
            row(f"per-pool time from its own request, s {q}", "pool_s", q)
        row("core CPU, s", "core_cpu_s")
        row("core peak RSS, MiB", "core_peak_rss_mib")
        row("MachinePool reconciles", "reconciles_machinepool")
        row("reconciles, all core controllers", "reconciles_all")
        row("writes, all clients, both apiservers", "writes_all")
        row(f"writes per Node ({step['nodes_changed']:,} Nodes changed)", "writes_per_node")
        row("core writes to the management apiserver", "mgmt_core_writes")
        row("writes per second achieved", "writes_per_s")
        if ceiling_per_s:
            rows.append(
                (
                    f"{name}: writes/s as % of the ceiling ({ceiling_per_s:,.0f}/s)",
                    _pct(_get(ours, "steps", i, "writes_per_s"), ceiling_per_s),
                    _pct(_get(up, "steps", i, "writes_per_s"), ceiling_per_s),
                )
            )
        row("shared infra process CPU, s", "infra_cpu_s")
        row("management kube-apiserver CPU, s", "mgmt_apiserver_cpu_s")
        row("management kube-apiserver busy, % of one core", "mgmt_apiserver_busy_pct")
        row("management writes, all clients", "mgmt_writes")
        row("management kube-apiserver CPU per management write, ms", "mgmt_apiserver_ms_per_write")
        row("workload kube-apiserver CPU, s", "workload_apiserver_cpu_s")
        row("etcd CPU, s", "etcd_cpu_s")
        if "min_ready_nodes" in step:
            row(f"fewest Ready Nodes seen (replicas {step['replicas_total']:,})", "min_ready_nodes")
            row(
                f"fewest readyReplicas of any pool (replicas {step['replicas_per_pool']:,})",
                "min_pool_ready",
            )
    for key, label in [
        ("core_idle_cpu_pct", "idle: core CPU, % of one core"),
        ("core_idle_reconciles_per_s", "idle: core reconciles per second"),
        ("idle_writes", "idle: writes, all clients (node heartbeats included)"),
        ("core_peak_rss_mib", "core peak RSS over the run, MiB"),
        ("infra_idle_cpu_pct", "idle: shared infra CPU, % of one core"),
        ("infra_peak_rss_mib", "shared infra peak RSS, MiB"),
    ]:
        rows.append((label, _get(ours, "idle", key), _get(up, "idle", key)))
    return rows


def _pct(value: float | None, ceiling: float) -> float | None:
    return None if value is None else 100 * value / ceiling


def _writes_table(result: dict[str, Any]) -> str:
    """Every writer's writes over the steps, and per Node changed: the accounting behind
    "writes per Node", each row one kind of write a reader can look up in the code."""
    counts: Counter[str] = Counter()
    nodes = 0
    for step in result["steps"]:
        counts.update(step.get("writes_by_resource", {}))
        nodes += step.get("nodes_changed") or 0
    if any(step.get("writes_per_node") is None for step in result["steps"]):
        nodes = 0  # a step cut off by the timeout has no cost per Node (see scale_step)
    lines = ["| user verb resource | writes | per Node |", "|---|---:|---:|"]
    lines += [
        f"| {k} | {n:,} | {n / nodes:.2f} |" if nodes else f"| {k} | {n:,} | - |"
        for k, n in counts.most_common()
    ]
    idle = result.get("idle", {}).get("idle_writes_by_resource", {})
    if idle:
        lines += ["", "Idle window: " + ", ".join(f"{k} {n:,}" for k, n in idle.items())]
    return "\n".join(lines)


def scale_section(results: dict[str, Any]) -> str:
    ceiling = results.get("ceiling") or {}
    per_s = ceiling.get("writes_per_s")
    text = [
        "Each scenario and side gets a fresh control plane of the same binaries, the same"
        " driver and the same shared infra process (kubeadm bootstrap, Sim provider with boot"
        " delay 0, node simulator); only the core differs. Writes are every write request of"
        " every client to both apiservers (audit logs) except the benchmark's own.",
    ]
    if per_s:
        text += [
            "",
            f"Write ceiling in this invocation (bench_apiserver_writes.py's measurement:"
            f" {ceiling['writes']:,} ConfigMap creates, {ceiling['concurrency']} at a time,"
            f" one client, fresh control plane): {per_s:,.0f} writes/s.",
        ]
        patches = ceiling.get("machine_status_patches")
        if patches:
            text += [
                "",
                f"The same client's ceiling for the write a Machine takes most of, a Machine"
                f" status patch ({patches['writes']:,}, same concurrency, our CRDs): "
                f"{patches['writes_per_s']:,.0f} writes/s, the management kube-apiserver"
                f" spending {patches['apiserver_ms_per_write']:.2f} ms of CPU on each"
                f" (a ConfigMap create: {ceiling['apiserver_ms_per_write']:.2f} ms). Each step"
                " below reports the management kube-apiserver's CPU and its CPU per write: on"
                " two cores shared by every process, that is the physical limit.",
            ]
    for key, entry in results["scenarios"].items():
        ours, up = entry["ours"], entry.get("upstream")
        text += [
            "",
            report.table(scale_rows(ours, up, per_s), upstream=up is not None),
        ]
        for side, result in (("ours", ours), ("upstream", up)):
            if result is None:
                continue
            for step in result["steps"]:
                if step.get("stood"):
                    text += ["", f"{side}, {step['label']}: did not converge: {step['stood']}"]
        text += ["", f"Where the writes went (ours, scenario {key}):", "", _writes_table(ours)]
        if up is not None:
            text += ["", "Same, upstream:", "", _writes_table(up)]
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
    p.add_argument(
        "--scale",
        action="store_true",
        help="run the scale scenarios (--scale-scenarios), ours and with --upstream upstream's",
    )
    p.add_argument(
        "--scale-scenarios",
        default="a,b,c",
        help="a: --big-pools x --big-replicas then a rollout; b: --many-pools x --many-replicas;"
        " c: one pool 0 -> --one-pool-steps [a,b,c]",
    )
    p.add_argument("--big-pools", type=int, default=10)
    p.add_argument("--big-replicas", type=int, default=1000)
    p.add_argument("--many-pools", type=int, default=1000)
    p.add_argument("--many-replicas", type=int, default=10)
    p.add_argument("--one-pool-steps", default="2000,200", help="replica targets in order")
    p.add_argument(
        "--max-surge", default="10%", help="maxSurge of the scale pools' rolling update [10%%]"
    )
    p.add_argument(
        "--no-rollout",
        action="store_true",
        help="skip (a)'s rollout: its idle window follows the create, with every Node in place",
    )
    p.add_argument("--scale-idle-seconds", type=float, default=60.0)
    p.add_argument(
        "--scale-timeout",
        type=float,
        default=600.0,
        help="per step; a side that does not converge keeps its row with where it stood [600]",
    )
    p.add_argument(
        "--rollout-timeout",
        type=float,
        help="(a)'s rollout step: 10,000 replacements take longer than a create [--scale-timeout]",
    )
    p.add_argument(
        "--ceiling-writes",
        type=int,
        default=3000,
        help="creates for the write ceiling measured first (0: skip) [3000]",
    )
    p.add_argument(
        "--heartbeat-seconds",
        type=float,
        default=300.0,
        help="node simulator status period [300: kubelet's nodeStatusReportFrequency]",
    )
    p.add_argument(
        "--lease-seconds",
        type=float,
        default=0.0,
        help="simulated kubelets' Node Lease renewal period [0: no Leases; kubelet's is 10]",
    )
    p.add_argument(
        "--infra-concurrency",
        type=int,
        default=0,
        help="workers per controller in the shared infra process [0: each component's default]",
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

    def save(mode: str, title: str, data: dict[str, Any], section: str, load: str) -> None:
        section += (
            f"\n\nLoad average (1/5/15 min) when this mode started: {load}; on {os.cpu_count()}"
            " CPUs shared with whatever else ran, so compare within a run, not across runs."
        )
        report.publish(mode, title, section, command, data=data, results=not args.no_results)

    def load_now() -> str:
        return " / ".join(f"{v:.1f}" for v in os.getloadavg())

    if not args.no_convergence:
        load = load_now()
        results: dict[str, Any] = {"when": when, "commit": commit}
        for core in cores:
            results[core] = await convergence(core, args, base / f"convergence-{core}", binary)
        title = convergence_title(args)
        save("convergence", title, results, convergence_section(results), load)
    if args.latency:
        load = load_now()
        lat: dict[str, Any] = {"when": when, "commit": commit}
        for core in cores:
            lat[core] = await latency(core, args, base / f"latency-{core}", binary)
        title = f"Latency: {args.trials} scale-up trials"
        save("latency", title, lat, latency_section(lat), load)
    if args.scale:
        load = load_now()
        scaled: dict[str, Any] = {"when": when, "commit": commit, "scenarios": {}}
        if args.ceiling_writes:
            scaled["ceiling"] = await asyncio.to_thread(write_ceiling, args.ceiling_writes)
            print(f"write ceiling: {scaled['ceiling']}", flush=True)
        # Each scenario keeps its own section, so running one leaves the others' figures
        # (with their own command and revision) in place.
        for sc in scale_scenarios(args):
            entry: dict[str, Any] = {"title": sc.title}
            for core in cores:
                workdir = base / f"scale-{sc.key}-{core}"
                entry[core] = await scale_scenario(core, sc, args, workdir, binary)
            one = {**scaled, "scenarios": {sc.key: entry}}
            title = f"Scale {sc.title}"
            save(f"scale-{sc.key}", title, one, scale_section(one), load)
            load = load_now()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
