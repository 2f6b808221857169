"""CacheScope: a manager's informers hold only its namespaces and its watch-filter label.

Real control plane. What a manager run with ``--namespace`` or ``--watch-filter`` must never
do is store (or even list) another tenant's objects; these tests look at what the cache holds
after objects were created on both sides of the line, then changed and deleted.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest_asyncio
from tests.support import eventually

from machinepool.runtime import CONFIGMAPS, NAMESPACES, CacheScope, Client, InformerCache


@pytest_asyncio.fixture(loop_scope="session")
async def three_namespaces(client: Client) -> AsyncIterator[list[str]]:
    names = [f"s{i}-{uuid.uuid4().hex[:8]}" for i in range(3)]
    for name in names:
        await client.create(NAMESPACES, {"metadata": {"name": name}})
    yield names
    for name in names:
        await client.delete(NAMESPACES, name)


def _cm(name: str, labels: dict[str, str] | None = None) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": {"v": "0"}}


async def test_namespaces_scope_one_informer_over_several_namespaces(
    client: Client, three_namespaces: list[str]
) -> None:
    a, b, outside = three_namespaces
    cache = InformerCache(client, scope=CacheScope(namespaces=(a, b)))
    await cache.start()
    try:
        for ns in (a, b, outside):
            await client.create(CONFIGMAPS, _cm("before"), ns)
        informer = await cache.get_informer(CONFIGMAPS)
        assert informer.namespaces == tuple(sorted((a, b)))
        for ns in (a, b, outside):
            await client.create(CONFIGMAPS, _cm("after"), ns)
        await eventually(lambda: informer.get("after", b) is not None)
        await eventually(lambda: informer.get("after", a) is not None)

        held = {
            (o["metadata"]["namespace"], o["metadata"]["name"])
            for o in informer.list()
            if o["metadata"]["name"] in ("before", "after")
        }
        assert held == {(a, "before"), (b, "before"), (a, "after"), (b, "after")}
        assert informer.list(outside) == []

        await client.delete(CONFIGMAPS, "before", b)
        await eventually(lambda: informer.get("before", b) is None)
        assert informer.get("before", a) is not None, "a delete in one stream leaves the other"
    finally:
        await cache.stop()


async def test_label_scope_applies_only_where_it_filters(client: Client, namespace: str) -> None:
    selector = "cluster.x-k8s.io/watch-filter=mine"
    scope = CacheScope(label_selector=selector, filters=lambda r: r is CONFIGMAPS)
    cache = InformerCache(client, scope=scope)
    await cache.start()
    try:
        await client.create(
            CONFIGMAPS, _cm("mine", {"cluster.x-k8s.io/watch-filter": "mine"}), namespace
        )
        await client.create(
            CONFIGMAPS, _cm("theirs", {"cluster.x-k8s.io/watch-filter": "x"}), namespace
        )
        await client.create(CONFIGMAPS, _cm("unlabelled"), namespace)
        informer = await cache.get_informer(CONFIGMAPS, namespace)
        assert informer.label_selector == selector
        await eventually(lambda: informer.get("mine", namespace) is not None)
        assert informer.get("theirs", namespace) is None
        assert informer.get("unlabelled", namespace) is None

        # An informer asked with its own selector gets both, ANDed.
        own = await cache.get_informer(CONFIGMAPS, namespace, label_selector="app=x")
        assert own.label_selector == f"app=x,{selector}"
        assert cache.peek(CONFIGMAPS, namespace, "app=x") is own

        # Relabelling an object out of the filter removes it from the cache.
        await client.patch(
            CONFIGMAPS,
            "mine",
            {"metadata": {"labels": {"cluster.x-k8s.io/watch-filter": "x"}}},
            namespace,
        )
        await eventually(lambda: informer.get("mine", namespace) is None)
    finally:
        await cache.stop()
