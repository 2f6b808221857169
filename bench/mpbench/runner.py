"""The benchmark's own controller process: the shared infrastructure, and a fallback core.

    python bench/mpbench/runner.py --components bootstrap,sim,kubelet --kubeconfig K \
        --metrics-bind-address A [--heartbeat-seconds 300] [--lease-seconds 0]

Wires the named components onto one Manager as ``machinepool.app.process.build`` does (each
package's ``setup(mgr, cluster_cache, options)``), without webhooks or leader election, and
runs it until SIGTERM. ``procs`` runs the shared infrastructure (bootstrap, Sim provider, node
simulator) with it, the heartbeat set to kubelet's default nodeStatusReportFrequency (5
minutes), Node Leases off unless ``--lease-seconds`` asks for them (kubelet renews every 10 s:
one write per Node each time) and ``--concurrency`` applied to every controller at once; and
runs our core with it only when ``machinepool.app`` does not import, saying so.

With ``MPBENCH_MEMDUMP=DIR`` in its environment it traces allocations (``tracemalloc``, 10
frames) and, on each SIGUSR1, writes ``DIR/<pid>-<n>.tracemalloc`` (a snapshot, to compare with
``Snapshot.compare_to``) and ``DIR/<pid>-<n>.types.json`` (live objects by type), after a full
garbage collection: the way to find what an infrastructure process keeps during a soak.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import logging
import os
import signal
import tracemalloc
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

from machinepool.runtime import Client, ClusterCache, Manager, configure_logging

USER_AGENT = "machinepool-controller"
T = TypeVar("T")


Setup = Callable[[Manager, ClusterCache], Awaitable[object]]


def _setups(args: argparse.Namespace) -> list[Setup]:
    from machinepool.bootstrap import kubeadm
    from machinepool.controllers import machine, machinepool
    from machinepool.providers import sim
    from machinepool.simworld import kubelet

    def tuned(options: T, field: str) -> T:
        """``options`` with ``--concurrency`` in ``field`` when given, else as they are."""
        return (
            dataclasses.replace(options, **{field: args.concurrency})
            if args.concurrency
            else options
        )

    workers = {"concurrency": args.concurrency} if args.concurrency else {}
    heartbeat = kubelet.KubeletOptions(
        kubelet_heartbeat_seconds=args.heartbeat_seconds,
        kubelet_lease_renew_seconds=args.lease_seconds,
    )
    table: dict[str, list[Setup]] = {
        "core": [partial(machinepool.setup, **workers), partial(machine.setup, **workers)],
        "bootstrap": [
            partial(
                kubeadm.setup,
                options=tuned(kubeadm.KubeadmOptions(), "kubeadmconfig_concurrency"),
            )
        ],
        "sim": [partial(sim.setup, options=tuned(sim.SimOptions(), "simmachinepool_concurrency"))],
        "kubelet": [partial(kubelet.setup, options=tuned(heartbeat, "kubelet_concurrency"))],
    }
    components = args.components.split(",")
    unknown = sorted(set(components) - table.keys())
    if unknown:
        raise SystemExit(f"unknown component(s) {', '.join(unknown)}; choose from {sorted(table)}")
    return [fn for name in table if name in components for fn in table[name]]


def _memdump(folder: Path) -> None:
    """One snapshot of what is live now (see the module docstring)."""
    gc.collect()
    n = len(list(folder.glob(f"{os.getpid()}-*.types.json")))
    stem = folder / f"{os.getpid()}-{n}"
    if tracemalloc.is_tracing():
        tracemalloc.take_snapshot().dump(f"{stem}.tracemalloc")
    types = Counter(type(o).__qualname__ for o in gc.get_objects())
    Path(f"{stem}.types.json").write_text(json.dumps(dict(types.most_common()), indent=0))


def _install_memdump() -> None:
    folder = os.environ.get("MPBENCH_MEMDUMP")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    tracemalloc.start(10)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, _memdump, Path(folder))


async def _main(args: argparse.Namespace) -> None:
    _install_memdump()
    client = await Client.from_kubeconfig(args.kubeconfig, user_agent=USER_AGENT)
    async with client:
        mgr = Manager(client, name=args.name, leader_election=None, bind_address=args.bind)
        cache = ClusterCache(client)
        mgr.metrics.add_informer_source(cache.informer_sizes)
        for setup in _setups(args):
            await setup(mgr, cache)
        try:
            await mgr.run()
        finally:
            await cache.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--components", required=True)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--name", default="machinepool-controller")
    p.add_argument("--metrics-bind-address", dest="bind", default="127.0.0.1:0")
    p.add_argument("--heartbeat-seconds", type=float, default=300.0)
    p.add_argument("--lease-seconds", type=float, default=0.0, help="Node Lease renewal [0: off]")
    p.add_argument("--concurrency", type=int, default=0, help="workers per controller [0: default]")
    args = p.parse_args()
    configure_logging(logging.WARNING)
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
