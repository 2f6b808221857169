"""Scale-up latency of a Sim pool with and without a warm pool.

```
.venv/bin/python bench/bench_warmpool.py [--replicas 100] [--boot-delay 20 --boot-spread 40]
```

For each mode it starts its own local control plane (``mpbench.env.BenchEnv``, no audit), runs
the core, kubeadm bootstrap, Sim provider and node simulator in this process, and creates one
pool at 0 replicas whose instances boot in ``--boot-delay`` plus up to ``--boot-spread``
seconds (a cloud's 20-60 s by default). ``cold`` scales it to ``--replicas`` at once;
``warm`` first gives it a warm pool of ``--replicas`` (``spec.warmPool.minSize``), waits until
every warm instance has booted and stopped (the time that takes is reported too), then scales
it. The figure is the time from the scale request to the MachinePool's ``readyReplicas``
reaching ``--replicas``, read every 0.2 s. Results: stdout and the ``warmpool`` section of
bench/RESULTS.md, with the command and git revision (``--no-results`` leaves it alone).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from mpbench import report, scenario
from mpbench.env import CLUSTER, NAMESPACE, BenchEnv

from machinepool.api.infra_sim import SIM_MACHINE_POOLS
from machinepool.api.kinds import MACHINE_POOLS
from machinepool.runtime import Client, ClusterCache, Manager

POOL = "warmbench"


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout: float) -> float:
    """Seconds until ``check()`` holds, read every 0.2 s; fails after ``timeout``."""
    began = time.monotonic()
    while not await check():
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.2)
    return time.monotonic() - began


async def _run(mode: str, args: argparse.Namespace) -> dict[str, float]:
    from machinepool.bootstrap import kubeadm
    from machinepool.controllers import machine, machinepool
    from machinepool.providers import sim
    from machinepool.simworld import kubelet

    with tempfile.TemporaryDirectory(prefix=f"bench-warmpool-{mode}-") as workdir:
        env = BenchEnv(Path(workdir), audit=False)
        env.start()
        client: Client | None = None
        mgr: Manager | None = None
        cache: ClusterCache | None = None
        try:
            client = await env.client("bench-driver")
            await env.install(client, "ours")
            mgr = Manager(client, leader_election=None, bind_address="127.0.0.1:0")
            cache = ClusterCache(client, probe_interval=5.0)
            for setup in (machinepool.setup, machine.setup, kubeadm.setup):
                await setup(mgr, cache)
            await sim.setup(mgr, cache)
            await kubelet.wire(mgr, cache, kubelet.KubeletOptions())
            await mgr.start()
            for res, obj in scenario.pool_objects(POOL, 0, scenario.TO_VERSION, max_surge=1):
                if res is SIM_MACHINE_POOLS:
                    obj["spec"]["sim"] = {
                        "bootDelaySeconds": args.boot_delay,
                        "bootDelaySpreadSeconds": args.boot_spread,
                    }
                    if mode == "warm":
                        obj["spec"]["warmPool"] = {"minSize": args.replicas}
                await client.create(res, obj, NAMESPACE)
            figures: dict[str, float] = {}
            c = client

            async def warm_ready() -> bool:
                pool = await c.get(SIM_MACHINE_POOLS, POOL, NAMESPACE)
                warm = (pool.get("status") or {}).get("warmInstances") or []
                stopped = [i for i in warm if i.get("state") == "stopped"]
                return len(stopped) == args.replicas

            if mode == "warm":
                figures["warm pool prepared (s)"] = await _until(
                    warm_ready, "the warm pool", timeout=args.boot_delay + args.boot_spread + 120
                )

            async def ready() -> bool:
                mp = await c.get(MACHINE_POOLS, POOL, NAMESPACE)
                return int((mp.get("status") or {}).get("readyReplicas") or 0) >= args.replicas

            await client.set_scale(MACHINE_POOLS, POOL, NAMESPACE, args.replicas)
            figures["scale-up to Ready (s)"] = await _until(
                ready, f"{args.replicas} ready replicas", timeout=args.boot_delay + 600
            )
            return figures
        finally:
            if mgr is not None:
                await mgr.stop()
            if cache is not None:
                await cache.stop()
            if client is not None:
                await client.close()
            env.stop()


async def _main(args: argparse.Namespace) -> None:
    results: dict[str, dict[str, float]] = {}
    for mode in args.modes.split(","):
        results[mode] = await _run(mode, args)
        print(f"{mode}: {results[mode]}", flush=True)
    lines = [
        f"Pool `{CLUSTER}/{POOL}` scaled from 0 to {args.replicas}, instances booting in"
        f" {args.boot_delay}-{args.boot_delay + args.boot_spread} s; a warm pool of"
        f" {args.replicas} (minSize) prepared first in `warm`.",
        "",
        "| mode | warm pool prepared (s) | scale-up to Ready (s) |",
        "|---|---|---|",
    ]
    for mode, figures in results.items():
        prepared = figures.get("warm pool prepared (s)")
        lines.append(
            f"| {mode} | {report.fmt(prepared) if prepared is not None else '-'}"
            f" | {report.fmt(figures['scale-up to Ready (s)'])} |"
        )
    command = shlex.join(["python", "bench/bench_warmpool.py", *sys.argv[1:]])
    report.publish(
        "warmpool",
        "Warm pool: a scale-up from 0 with booting instances, cold and warm",
        "\n".join(lines),
        command,
        data=results,
        results=not args.no_results,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=100)
    p.add_argument("--boot-delay", type=int, default=20)
    p.add_argument("--boot-spread", type=int, default=40)
    p.add_argument("--modes", default="cold,warm", help="comma-separated: cold, warm")
    p.add_argument("--no-results", action="store_true", help="do not rewrite bench/RESULTS.md")
    asyncio.run(_main(p.parse_args()))


if __name__ == "__main__":
    main()
