"""The process-state gauges on /metrics: asyncio tasks and informer objects, read on scrape.

A soak (bench/bench_soak.py) and a leak alert read these over hours, so they must exist from
the manager's construction (as controller-runtime's series do) and follow the live state.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from machinepool.runtime import NODES, Client, InformerCache, Manager, Obj, ObjectList, Resource
from machinepool.runtime.telemetry.metrics import MANAGEMENT, RuntimeMetrics


class ListOnlyApi:
    """Just enough of ``Client`` for an informer: one list of ``count`` Nodes, then a watch
    that never delivers."""

    def __init__(self, count: int) -> None:
        self.items: list[Obj] = [
            {"metadata": {"name": f"n{i}", "resourceVersion": str(i + 1)}} for i in range(count)
        ]

    async def list(self, res: Resource, namespace: str | None = None, **kw: Any) -> ObjectList:
        return ObjectList(items=[dict(o) for o in self.items], resource_version="9")

    def watch(self, res: Resource, namespace: str | None = None, **kw: Any) -> Any:
        async def stream() -> AsyncIterator[Any]:
            await asyncio.Event().wait()
            yield  # pragma: no cover - never reached

        return stream()


def samples(metrics: RuntimeMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = generate_latest(metrics.registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def management(kind: str, group: str = "") -> tuple[tuple[str, str], ...]:
    return (("cluster", MANAGEMENT), ("group", group), ("kind", kind))


async def test_informer_objects_exist_before_the_first_list_and_follow_the_store() -> None:
    api = ListOnlyApi(3)
    mgr = Manager(cast(Client, api), bind_address=None)
    assert "machinepool_asyncio_tasks" in generate_latest(mgr.metrics.registry).decode()

    await mgr.cache.get_informer(NODES)  # registered before start: not listed yet
    assert samples(mgr.metrics, "machinepool_informer_objects") == {management("Node"): 0.0}

    await mgr.cache.start()
    try:
        await mgr.cache.wait_synced()
        assert samples(mgr.metrics, "machinepool_informer_objects") == {management("Node"): 3.0}
    finally:
        await mgr.cache.stop()


async def test_informer_sources_are_summed_per_cluster_and_kind() -> None:
    metrics = RuntimeMetrics()
    workload = InformerCache(cast(Client, ListOnlyApi(2)))
    await workload.get_informer(NODES)
    await workload.start()
    try:
        await workload.wait_synced()
        metrics.add_informer_source(lambda: workload.sizes("ns/c1"))
        metrics.add_informer_source(lambda: [("ns/c1", "", "Node", 5)])  # a second cache
        key = (("cluster", "ns/c1"), ("group", ""), ("kind", "Node"))
        assert samples(metrics, "machinepool_informer_objects") == {key: 7.0}
    finally:
        await workload.stop()


async def test_asyncio_tasks_counts_the_loop_tasks_on_each_scrape() -> None:
    metrics = RuntimeMetrics()
    metrics.state.bind(asyncio.get_running_loop())
    before = samples(metrics, "machinepool_asyncio_tasks")[()]
    assert before >= 1  # this test's own task at least
    sleepers = [asyncio.create_task(asyncio.sleep(60)) for _ in range(3)]
    try:
        assert samples(metrics, "machinepool_asyncio_tasks")[()] == before + 3
    finally:
        for task in sleepers:
            task.cancel()
        await asyncio.gather(*sleepers, return_exceptions=True)
    assert samples(metrics, "machinepool_asyncio_tasks")[()] == before
