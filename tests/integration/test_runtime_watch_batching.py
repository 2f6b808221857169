"""A busy Node watch is read in batches, as 10,000 kubelets' status reports need, and loses
nothing: every event arrives, in order, and the stream still ends when the server ends it.
Real control plane."""

from __future__ import annotations

import asyncio
import itertools
import uuid

from machinepool.runtime import NODES, Client
from machinepool.runtime.kube.client import WATCH_BATCH_WINDOW, WATCH_BUSY_RATE, ReadPacer

RATE = 4 * WATCH_BUSY_RATE
"""Updates a second the writer sends: a busy stream, as 10,000 kubelets' reports make one."""
TOGETHER = 0.002
"""Seconds between two events read in one batch (a paced writer's are 1 / RATE apart)."""


async def test_a_busy_node_watch_is_read_in_batches_and_loses_nothing(client: Client) -> None:
    name = f"beat-{uuid.uuid4().hex[:8]}"
    selector = f"test.machinepool.dev/beat={name}"
    labels = {"test.machinepool.dev/beat": name, "n": "0"}
    await client.create(NODES, {"metadata": {"name": name, "labels": labels}})
    listed = await client.list(NODES, label_selector=selector)
    loop = asyncio.get_running_loop()
    arrivals: list[tuple[float, int]] = []

    async def watch() -> None:
        """Until the server ends the stream, a few seconds after it turned busy."""
        stream = client.watch(
            NODES,
            resource_version=listed.resource_version,
            label_selector=selector,
            timeout_seconds=int(4 * WATCH_BATCH_WINDOW),
            # Averaged over one window: a few seconds of this stream stand for the kubelets'
            # reports, which keep a watch busy for as long as the Nodes exist.
            pacer=ReadPacer(span=WATCH_BATCH_WINDOW),
        )
        async for event in stream:
            if event.type == "MODIFIED":
                arrivals.append((loop.time(), int(event.object["metadata"]["labels"]["n"])))

    watching = asyncio.create_task(watch())
    began = loop.time()
    n = 0
    try:
        while not watching.done():
            n += 1
            await asyncio.sleep(max(0.0, began + n / RATE - loop.time()))
            await client.patch(NODES, name, {"metadata": {"labels": {"n": str(n)}}})
        await watching  # the stream ended while busy: no error, no hang
    finally:
        await client.delete(NODES, name)

    numbers = [k for _, k in arrivals]
    assert numbers == list(range(1, len(numbers) + 1)), "every update, in order"
    assert len(numbers) > 2 * WATCH_BATCH_WINDOW * RATE, "the stream was busy for a while"
    busy = [t for t, _ in arrivals if t > arrivals[0][0] + 2 * WATCH_BATCH_WINDOW]
    together = sum(1 for a, b in itertools.pairwise(busy) if b - a < TOGETHER)
    assert together >= len(busy) // 2, f"{together} of {len(busy)} read with the one before"
