"""The write ceiling of the local control plane: how many creates per second one Python client
gets through etcd and kube-apiserver on this machine.

    .venv/bin/python bench/bench_apiserver_writes.py [--writes 3000] [--concurrency 32]

Used to judge the 1,000 x 10 scale goal (see RESULTS.md, Findings): a Node costs a known number
of writes across all processes, so this bounds how fast any controller could converge here.
Starts its own control plane in a temporary directory and removes it afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from machinepool.controlplane import ControlPlane
from machinepool.runtime import CONFIGMAPS, NAMESPACES, Client


async def measure(kubeconfig: Path, writes: int, concurrency: int) -> float:
    async with await Client.from_kubeconfig(kubeconfig) as client:
        await client.create(NAMESPACES, {"metadata": {"name": "writes"}})
        gate = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with gate:
                body = {"metadata": {"name": f"c{i}"}, "data": {"k": "v"}}
                await client.create(CONFIGMAPS, body, "writes")

        started = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(writes)))
        return time.monotonic() - started


def ceiling(writes: int, concurrency: int) -> dict[str, float]:
    """Start a control plane in a temporary directory, measure, stop it; the figures.

    Also called by bench_machinepool.py's scale scenarios, which state each scenario's
    writes/s against this ceiling, measured in the same invocation.
    """
    with tempfile.TemporaryDirectory() as tmp:
        cp = ControlPlane(Path(tmp) / "cp")
        cp.start()
        try:
            seconds = asyncio.run(measure(cp.kubeconfig, writes, concurrency))
        finally:
            cp.stop()
    return {
        "writes": writes,
        "concurrency": concurrency,
        "seconds": seconds,
        "writes_per_s": writes / seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    found = ceiling(args.writes, args.concurrency)
    print(
        f"{args.writes} ConfigMap creates, {args.concurrency} at a time: {found['seconds']:.2f} s,"
        f" {found['writes_per_s']:.0f} writes/s"
    )


if __name__ == "__main__":
    main()
