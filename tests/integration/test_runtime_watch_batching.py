"""A busy watch stream is read in batches, as 10,000 kubelets' status reports need, and loses
nothing: every event arrives, in order, and the stream still ends when the server ends it.
Real control plane."""

from __future__ import annotations

import asyncio

from machinepool.runtime import CONFIGMAPS, Client
from machinepool.runtime.client import WATCH_BATCH_WINDOW, WATCH_BUSY_RATE

RATE = 4 * WATCH_BUSY_RATE
"""Updates a second the writer sends: a busy stream, as 10,000 Nodes' reports are."""
TOGETHER = 0.002
"""Seconds between two events read in one batch (a paced writer's are 1 / RATE apart)."""


async def test_a_busy_watch_is_read_in_batches_and_loses_nothing(
    client: Client, namespace: str
) -> None:
    await client.create(CONFIGMAPS, {"metadata": {"name": "beat"}, "data": {"n": "0"}}, namespace)
    listed = await client.list(CONFIGMAPS, namespace)
    loop = asyncio.get_running_loop()
    arrivals: list[tuple[float, int]] = []

    async def watch() -> None:
        """Until the server ends the stream, a few seconds after it turned busy."""
        stream = client.watch(
            CONFIGMAPS,
            namespace,
            resource_version=listed.resource_version,
            timeout_seconds=int(4 * WATCH_BATCH_WINDOW),
        )
        async for event in stream:
            if event.type == "MODIFIED":
                arrivals.append((loop.time(), int(event.object["data"]["n"])))

    watching = asyncio.create_task(watch())
    began = loop.time()
    n = 0
    while not watching.done():
        n += 1
        await asyncio.sleep(max(0.0, began + n / RATE - loop.time()))
        await client.patch(CONFIGMAPS, "beat", {"data": {"n": str(n)}}, namespace)
    await watching  # the stream ended while busy: no error, no hang

    numbers = [k for _, k in arrivals]
    assert numbers == list(range(1, len(numbers) + 1)), "every update, in order"
    assert len(numbers) > 2 * WATCH_BATCH_WINDOW * RATE, "the stream was busy for a while"
    busy = [t for t, _ in arrivals if t > arrivals[0][0] + 2 * WATCH_BATCH_WINDOW]
    together = sum(1 for a, b in zip(busy, busy[1:], strict=False) if b - a < TOGETHER)
    assert together >= len(busy) // 2, f"{together} of {len(busy)} read with the one before"
