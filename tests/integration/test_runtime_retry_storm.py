"""No retry storm: a failing reconcile that writes is retried at its backoff, not at the
speed of its own writes' watch echoes; someone else's change still runs it at once.

Against the real apiserver: the reconcile patches its ConfigMap (a new value each time, as a
condition message with the last error would) and then fails with an expected error, the way
the MachinePool and Machine reconcilers patch status on the way out of a failed attempt.
The test counts attempts over a window and holds them to the count the 5 ms-doubling
backoff allows in that window.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from tests.reliability.harness import backoff_budget

from machinepool.runtime import (
    CONFIGMAPS,
    Client,
    ExpectedError,
    ExponentialBackoff,
    Manager,
    ManagerState,
    ObjectKey,
)

WINDOW = 3.0
"""How long the failing reconcile runs; the count of attempts in it is what is judged."""


@pytest.fixture
async def manager(client: Client) -> AsyncIterator[Manager]:
    mgr = Manager(client, bind_address=None)
    yield mgr
    await mgr.stop() if mgr.state is not ManagerState.NEW else None


async def test_a_failing_reconcile_that_writes_keeps_to_its_backoff(
    manager: Manager, client: Client, namespace: str
) -> None:
    await client.create(CONFIGMAPS, {"metadata": {"name": "storm"}, "data": {}}, namespace)
    informer = await manager.cache.get_informer(CONFIGMAPS, namespace)
    attempts = 0

    async def reconcile(key: ObjectKey) -> None:
        nonlocal attempts
        attempts += 1
        patch = {"data": {"lastError": f"attempt {attempts}: workload cluster unreachable"}}
        await client.patch(CONFIGMAPS, key.name, patch, key.namespace)
        raise ExpectedError("workload cluster unreachable")

    manager.new_controller("storm", reconcile).watch(informer)
    started = time.monotonic()
    await manager.start()
    await asyncio.sleep(WINDOW)  # the window over which attempts are counted
    await manager.stop()
    window = time.monotonic() - started
    assert attempts >= 3, "the reconcile should have failed and been retried"
    assert attempts <= backoff_budget(window) + 1, (
        f"{attempts} attempts in {window:.1f}s; the backoff allows {backoff_budget(window)}"
    )


async def test_a_change_by_someone_else_still_runs_a_failing_key_at_once(
    manager: Manager, client: Client, namespace: str
) -> None:
    await client.create(CONFIGMAPS, {"metadata": {"name": "fixme"}, "data": {}}, namespace)
    informer = await manager.cache.get_informer(CONFIGMAPS, namespace)
    attempts: list[str] = []
    progressed = asyncio.Event()

    async def reconcile(key: ObjectKey) -> None:
        obj = informer.get_key(key) or {}
        attempts.append(str((obj.get("data") or {}).get("user", "")))
        progressed.set()
        await client.patch(CONFIGMAPS, key.name, {"data": {"n": str(len(attempts))}}, namespace)
        raise ExpectedError("still broken")

    # A backoff so long that only an event can bring the key back within the test.
    ctrl = manager.new_controller("fix", reconcile, rate_limiter=ExponentialBackoff(base=1000.0))
    ctrl.watch(informer)
    await manager.start()
    async with asyncio.timeout(30):
        await progressed.wait()
    progressed.clear()
    await client.patch(CONFIGMAPS, "fixme", {"data": {"user": "fixed"}}, namespace)
    async with asyncio.timeout(30):
        while "fixed" not in attempts:
            await progressed.wait()
            progressed.clear()
    # Only the first attempt and the user's change ran it: the attempts' own writes did not.
    assert [a for a in attempts if a != "fixed"] == [""]
