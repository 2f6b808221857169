"""End to end: the node simulator leaves an ended instance's Node to Cluster API for a grace.

A cloud's node lifecycle controller deletes the Node of an instance that no longer exists,
and so does the node simulator standing in for it; but Cluster API deletes a pool Machine's
Node itself, right after its infra machine. The simulator deleting at once as well sent a
second DELETE for the same Node (answered 404). So it waits ``node_deletion_grace_seconds``
and deletes only what is still there. With the Cluster paused, nothing of Cluster API acts,
and what a user would see is the Node going after that grace, by the simulator's hand.
"""

from __future__ import annotations

import time

from tests.e2e.conftest import System
from tests.support.resources import CLUSTERS

from machinepool.runtime import FuncHandler, Obj
from machinepool.simworld.kubelet import KubeletOptions

GRACE = KubeletOptions().node_deletion_grace_seconds


async def test_the_node_of_an_instance_ended_out_of_band_goes_after_the_grace(
    system: System,
) -> None:
    await system.create_pool("ended", 2)
    await system.until(lambda: system.pool_running("ended", 2), "2 Ready nodes")
    ns = system.namespace
    await system.client.patch(CLUSTERS, system.cluster, {"spec": {"paused": True}}, ns)
    victim = system.machines("ended")[0]
    node = system.node_of(victim["metadata"]["name"])
    assert node is not None
    name = node["metadata"]["name"]
    gone_at: list[float] = []

    def on_delete(deleted: Obj) -> None:
        if deleted["metadata"]["name"] == name:
            gone_at.append(time.monotonic())

    system.nodes.add_handler(FuncHandler(delete=on_delete))
    ended_at = time.monotonic()
    await system.cloud.terminate_instance(ns, victim["metadata"]["name"])
    await system.until(lambda: bool(gone_at), "the ended instance's Node deleted")
    assert gone_at[0] - ended_at >= GRACE, f"deleted {gone_at[0] - ended_at:.2f} s after"
    assert len(system.nodes.list()) == 1, "the other Node stays"
