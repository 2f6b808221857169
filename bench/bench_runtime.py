"""Benchmarks of machinepool.runtime, run on demand: ``python bench/bench_runtime.py``.

Reports:

- work-queue throughput: keys/s through ``WorkQueue`` (add, get, done) with several workers,
  and through a ``Controller`` with a no-op reconcile (the queue plus the Result contract,
  metrics and logging context);
- informer memory per 10,000 objects: ConfigMaps created on a local control plane (started
  here, or the cluster of ``$KUBECONFIG`` when ``--kubeconfig`` is given), listed and watched
  by an ``Informer``; memory measured with tracemalloc, with and without the default
  managedFields-stripping transform.

Numbers here are goals to watch over time, never pass/fail thresholds in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
import tracemalloc
import uuid
from pathlib import Path

from machinepool.runtime import (
    CONFIGMAPS,
    NAMESPACES,
    Client,
    Controller,
    Informer,
    ObjectKey,
    WorkQueue,
)


async def queue_throughput(keys: int, distinct: int, workers: int) -> float:
    """Keys/s handed out and finished by ``workers`` workers (adds de-duplicate)."""
    queue: WorkQueue[int] = WorkQueue()
    processed = 0

    async def worker() -> None:
        nonlocal processed
        while True:
            key = await queue.get()
            processed += 1
            queue.done(key)

    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    started = time.perf_counter()
    for i in range(keys):
        queue.add(i % distinct)
        if i % 100 == 0:
            await asyncio.sleep(0)
    while len(queue):  # noqa: ASYNC110 - yield to the workers until drained
        await asyncio.sleep(0)
    elapsed = time.perf_counter() - started
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return processed / elapsed


async def controller_throughput(keys: int, workers: int) -> float:
    """Reconciles/s of a no-op reconcile over ``keys`` distinct keys."""
    done = asyncio.Event()
    count = 0

    async def reconcile(key: ObjectKey) -> None:
        nonlocal count
        count += 1
        if count == keys:
            done.set()

    ctrl = Controller("bench", reconcile, concurrency=workers)
    for i in range(keys):
        ctrl.enqueue(ObjectKey("ns", f"k{i}"))
    started = time.perf_counter()
    task = asyncio.create_task(ctrl.run())
    await done.wait()
    elapsed = time.perf_counter() - started
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return keys / elapsed


async def create_configmaps(client: Client, namespace: str, count: int) -> None:
    async def one(i: int) -> None:
        body = {
            "metadata": {"name": f"cm-{i:05d}", "labels": {"bench": "runtime", "i": str(i)}},
            "data": {"a": "x" * 64, "b": str(i), "c": "some typical configuration value"},
        }
        await client.create(CONFIGMAPS, body, namespace)

    for start in range(0, count, 200):
        await asyncio.gather(*(one(i) for i in range(start, min(start + 200, count))))


async def informer_memory(client: Client, namespace: str, strip: bool) -> tuple[int, int, float]:
    """(objects, bytes held, seconds to sync) of an informer over the namespace's ConfigMaps."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    kwargs = {} if strip else {"transform": None}
    informer = Informer(client, CONFIGMAPS, namespace, **kwargs)  # type: ignore[arg-type]
    started = time.perf_counter()
    await informer.start()
    await informer.wait_synced()
    synced = time.perf_counter() - started
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    await informer.stop()
    return len(informer), held, synced


async def memory_bench(kubeconfig: Path, count: int) -> None:
    async with await Client.from_kubeconfig(kubeconfig) as client:
        namespace = f"bench-{uuid.uuid4().hex[:8]}"
        await client.create(NAMESPACES, {"metadata": {"name": namespace}})
        try:
            started = time.perf_counter()
            await create_configmaps(client, namespace, count)
            print(f"created {count} ConfigMaps in {time.perf_counter() - started:.1f} s")
            for strip in (True, False):
                n, held, synced = await informer_memory(client, namespace, strip)
                per_10k = held / n * 10_000 / 2**20
                label = "stripped managedFields" if strip else "objects untouched     "
                print(
                    f"informer, {label}: {n} objects, {held / 2**20:.1f} MiB held,"
                    f" {per_10k:.1f} MiB per 10,000 objects, synced in {synced:.2f} s"
                )
        finally:
            await client.delete(NAMESPACES, namespace)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, help="use this cluster, not a local one")
    parser.add_argument("--objects", type=int, default=10_000)
    args = parser.parse_args()

    for workers in (1, 8):
        rate = await queue_throughput(200_000, 10_000, workers)
        print(f"work queue, {workers} worker(s): {rate:,.0f} keys/s")
    rate = await controller_throughput(50_000, 8)
    print(f"controller, no-op reconcile, 8 workers: {rate:,.0f} reconciles/s")

    if args.kubeconfig:
        await memory_bench(args.kubeconfig, args.objects)
        return
    from machinepool.controlplane import ControlPlane

    with ControlPlane() as cp:
        await memory_bench(cp.kubeconfig, args.objects)


if __name__ == "__main__":
    asyncio.run(main())
