"""``ClusterCache.delete_once`` and ``patch_once``: what several reconciles do at once from
one view of a workload object goes out as one request, and a newer view (a new object of the
same name, a changed one) gets its own. Real control plane: a management and a workload
kube-apiserver."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from tests.support import eventually

from machinepool.controlplane import WorkloadCluster
from machinepool.controlplane.register import register_workload_cluster
from machinepool.runtime import NODES, Client, ClusterCache, Informer, NotFound, Obj, ObjectKey


class Connected:
    """A cluster cache connected to the workload cluster ``key``, with its Node informer."""

    def __init__(self, cache: ClusterCache, key: ObjectKey, nodes: Informer, client: Client):
        self.cache, self.key, self.nodes, self.client = cache, key, nodes, client

    async def node(self, name: str) -> Obj:
        """Create Node ``name`` and return it as the informer shows it."""
        await self.client.create(NODES, {"metadata": {"name": name}})
        await eventually(lambda: self.nodes.get(name) is not None)
        node = self.nodes.get(name)
        assert node is not None
        return node


@pytest_asyncio.fixture(loop_scope="session")
async def connected(
    client: Client, namespace: str, workload: WorkloadCluster, crds: list[str]
) -> AsyncIterator[Connected]:
    await register_workload_cluster(client, "wl", namespace, workload)
    key = ObjectKey(namespace, "wl")
    cache = ClusterCache(client)
    try:
        nodes = await cache.get_informer(key, NODES)
        yield Connected(cache, key, nodes, await cache.get_client(key))
    finally:
        await cache.stop()


@pytest.mark.usefixtures("control_plane")
async def test_a_node_is_deleted_once_however_many_reconciles_saw_it(
    connected: Connected,
) -> None:
    cache, key, nodes = connected.cache, connected.key, connected.nodes
    seen = await connected.node("n1")

    # Three reconciles at once holding the same view of the Node, then one more before
    # or after its watch event arrives.
    sent = await asyncio.gather(*(cache.delete_once(key, NODES, seen) for _ in range(3)))
    sent.append(await cache.delete_once(key, NODES, seen))
    assert sorted(sent) == [False, False, False, True], "one DELETE for one Node"
    with pytest.raises(NotFound):
        await connected.client.get(NODES, "n1")

    # Once the informer has seen it go, a new Node of the same name is a new object.
    await eventually(lambda: nodes.get("n1") is None)
    again = await connected.node("n1")
    assert again["metadata"]["uid"] != seen["metadata"]["uid"]
    assert await cache.delete_once(key, NODES, again)
    with pytest.raises(NotFound):
        await connected.client.get(NODES, "n1")


@pytest.mark.usefixtures("control_plane")
async def test_a_patch_made_from_one_view_of_a_node_is_sent_once(connected: Connected) -> None:
    cache, key, nodes = connected.cache, connected.key, connected.nodes
    seen = await connected.node("n2")
    version = seen["metadata"]["resourceVersion"]
    # Locked on the version it was made from, as a patch that drops a taint is.
    patch = {"metadata": {"labels": {"a": "1"}, "resourceVersion": version}}

    sent = await asyncio.gather(*(cache.patch_once(key, NODES, seen, patch) for _ in range(3)))
    assert sorted(sent) == [False, False, True], "one PATCH for one view of the Node"
    assert (await connected.client.get(NODES, "n2"))["metadata"]["labels"]["a"] == "1"

    # Once the informer shows the patched Node, a patch made from that view goes out.
    await eventually(lambda: (nodes.get("n2") or {})["metadata"]["resourceVersion"] != version)
    fresh = nodes.get("n2")
    assert fresh is not None
    assert await cache.patch_once(key, NODES, fresh, {"metadata": {"labels": {"a": "2"}}})
    assert (await connected.client.get(NODES, "n2"))["metadata"]["labels"]["a"] == "2"
