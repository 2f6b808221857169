"""``ClusterCache.delete_once`` and ``patch_once``: what several reconciles do at once from
one view of a workload object goes out as one request, and a newer view (a new object of the
same name, a changed one) gets its own. Real control plane: a management and a workload
kube-apiserver."""

from __future__ import annotations

import asyncio
import base64

import pytest
import yaml
from tests.support import eventually
from tests.support.resources import CLUSTERS

from machinepool.controlplane import WorkloadCluster
from machinepool.runtime import NODES, SECRETS, Client, ClusterCache, NotFound, ObjectKey


@pytest.mark.usefixtures("control_plane", "crds")
async def test_a_node_is_deleted_once_however_many_reconciles_saw_it(
    client: Client, namespace: str, workload: WorkloadCluster
) -> None:
    cluster = ObjectKey(namespace, "wl")
    await client.create(CLUSTERS, {"metadata": {"name": "wl"}, "spec": {}}, namespace)
    value = base64.b64encode(yaml.safe_dump(workload.kubeconfig_dict()).encode()).decode()
    await client.create(
        SECRETS, {"metadata": {"name": "wl-kubeconfig"}, "data": {"value": value}}, namespace
    )
    cache = ClusterCache(client)
    try:
        nodes = await cache.get_informer(cluster, NODES)
        wclient = await cache.get_client(cluster)
        await wclient.create(NODES, {"metadata": {"name": "n1"}})
        await eventually(lambda: nodes.get("n1") is not None)
        seen = nodes.get("n1")
        assert seen is not None

        # Three reconciles at once holding the same view of the Node, then one more before
        # or after its watch event arrives.
        sent = await asyncio.gather(*(cache.delete_once(cluster, NODES, seen) for _ in range(3)))
        sent.append(await cache.delete_once(cluster, NODES, seen))
        assert sorted(sent) == [False, False, False, True], "one DELETE for one Node"
        with pytest.raises(NotFound):
            await wclient.get(NODES, "n1")

        # Once the informer has seen it go, a new Node of the same name is a new object.
        await eventually(lambda: nodes.get("n1") is None)
        await wclient.create(NODES, {"metadata": {"name": "n1"}})
        await eventually(lambda: nodes.get("n1") is not None)
        again = nodes.get("n1")
        assert again is not None
        assert again["metadata"]["uid"] != seen["metadata"]["uid"]
        assert await cache.delete_once(cluster, NODES, again)
        with pytest.raises(NotFound):
            await wclient.get(NODES, "n1")
    finally:
        await cache.stop()


@pytest.mark.usefixtures("control_plane", "crds")
async def test_a_patch_made_from_one_view_of_a_node_is_sent_once(
    client: Client, namespace: str, workload: WorkloadCluster
) -> None:
    cluster = ObjectKey(namespace, "wl")
    await client.create(CLUSTERS, {"metadata": {"name": "wl"}, "spec": {}}, namespace)
    value = base64.b64encode(yaml.safe_dump(workload.kubeconfig_dict()).encode()).decode()
    await client.create(
        SECRETS, {"metadata": {"name": "wl-kubeconfig"}, "data": {"value": value}}, namespace
    )
    cache = ClusterCache(client)
    try:
        nodes = await cache.get_informer(cluster, NODES)
        wclient = await cache.get_client(cluster)
        await wclient.create(NODES, {"metadata": {"name": "n1"}})
        await eventually(lambda: nodes.get("n1") is not None)
        seen = nodes.get("n1")
        assert seen is not None
        version = seen["metadata"]["resourceVersion"]
        # Locked on the version it was made from, as a patch that drops a taint is.
        patch = {"metadata": {"labels": {"a": "1"}, "resourceVersion": version}}

        sent = await asyncio.gather(
            *(cache.patch_once(cluster, NODES, seen, patch) for _ in range(3))
        )
        assert sorted(sent) == [False, False, True], "one PATCH for one view of the Node"
        assert (await wclient.get(NODES, "n1"))["metadata"]["labels"]["a"] == "1"

        # Once the informer shows the patched Node, a patch made from that view goes out.
        await eventually(lambda: (nodes.get("n1") or {})["metadata"]["resourceVersion"] != version)
        fresh = nodes.get("n1")
        assert fresh is not None
        later = {"metadata": {"labels": {"a": "2"}}}
        assert await cache.patch_once(cluster, NODES, fresh, later)
        assert (await wclient.get(NODES, "n1"))["metadata"]["labels"]["a"] == "2"
    finally:
        await cache.stop()
