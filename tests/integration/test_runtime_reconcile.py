"""Controllers on informers against the real control plane: latency, coalescing, backoff,
probes and metrics, events. Bounds are generous: timing goals live in bench/bench_runtime.py."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import aiohttp
import pytest
from tests.reliability.harness import backoff_budget
from tests.support import eventually

from machinepool.runtime import (
    CONFIGMAPS,
    EVENTS,
    NAMESPACES,
    AlreadyExists,
    Client,
    EventRecorder,
    ExponentialBackoff,
    Manager,
    ManagerState,
    ManagerStateError,
    NamespaceTerminating,
    ObjectKey,
    Result,
)


def configmap(name: str, **data: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "data": data}


@pytest.fixture
async def manager(client: Client) -> AsyncIterator[Manager]:
    mgr = Manager(client, bind_address="127.0.0.1:0")
    yield mgr
    await mgr.stop() if mgr.state is not ManagerState.NEW else None


async def test_a_change_reaches_the_reconcile_quickly(
    manager: Manager, client: Client, namespace: str
) -> None:
    seen: list[tuple[ObjectKey, str]] = []
    informer = await manager.cache.get_informer(CONFIGMAPS, namespace)

    async def reconcile(key: ObjectKey) -> None:
        obj = informer.get_key(key)
        seen.append((key, (obj or {}).get("data", {}).get("v", "<gone>")))

    manager.new_controller("cm", reconcile).watch(informer)
    await manager.start()
    await client.create(CONFIGMAPS, configmap("a", v="1"), namespace)
    await eventually(lambda: (ObjectKey(namespace, "a"), "1") in seen)
    await client.patch(CONFIGMAPS, "a", {"data": {"v": "2"}}, namespace)
    await eventually(lambda: (ObjectKey(namespace, "a"), "2") in seen)
    await client.delete(CONFIGMAPS, "a", namespace)
    await eventually(lambda: (ObjectKey(namespace, "a"), "<gone>") in seen)


async def test_rapid_updates_coalesce_and_never_run_concurrently_per_key(
    manager: Manager, client: Client, namespace: str
) -> None:
    informer = await manager.cache.get_informer(CONFIGMAPS, namespace)
    active: Counter[ObjectKey] = Counter()
    overlaps = 0
    reconciles = 0
    last_seen = ""

    async def reconcile(key: ObjectKey) -> None:
        nonlocal overlaps, reconciles, last_seen
        active[key] += 1
        overlaps += active[key] > 1
        reconciles += 1
        last_seen = ((informer.get_key(key) or {}).get("data") or {}).get("v", "")
        await asyncio.sleep(0.2)  # long enough that bursts of updates coalesce
        active[key] -= 1

    manager.new_controller("hot", reconcile, concurrency=8).watch(informer)
    await manager.start()
    await client.create(CONFIGMAPS, configmap("hot", v="0"), namespace)
    for start in range(1, 1001, 25):
        await asyncio.gather(
            *(
                client.patch(CONFIGMAPS, "hot", {"data": {"v": str(i)}}, namespace)
                for i in range(start, start + 25)
            )
        )
    final = (await client.get(CONFIGMAPS, "hot", namespace))["data"]["v"]
    await eventually(lambda: last_seen == final and not active[ObjectKey(namespace, "hot")])
    assert overlaps == 0
    assert reconciles < 500, f"{reconciles} reconciles for 1000 updates: no coalescing"


async def test_a_change_goes_before_the_initial_backlog(
    manager: Manager, client: Client, namespace: str
) -> None:
    """The priority queue against the real thing: a controller starts over 200 ConfigMaps,
    queued at low priority as merely listed; a change made after it started (to the last one
    listed) and an object created after it started are reconciled next, not after the
    backlog. Issue 26: at 1,000 Nodes the backlog outlived a controller killed every few
    seconds, and the pools still rolling waited behind it."""
    names = [f"cm-{i:03}" for i in range(200)]
    for start in range(0, len(names), 25):
        await asyncio.gather(
            *(
                client.create(CONFIGMAPS, configmap(n, v="0"), namespace)
                for n in names[start : start + 25]
            )
        )
    informer = await manager.cache.get_informer(CONFIGMAPS, namespace)
    workers = 2
    gate = asyncio.Event()
    order: list[tuple[str, str]] = []

    async def reconcile(key: ObjectKey) -> None:
        obj = informer.get_key(key) or {}
        order.append((key.name, (obj.get("data") or {}).get("v", "<gone>")))
        await gate.wait()  # the first keys hold every worker until the changes are queued

    manager.new_controller("backlog", reconcile, concurrency=workers).watch(informer)
    await manager.start()
    await eventually(lambda: len(order) == workers)
    changed, created = names[-1], "cm-new"
    await client.patch(CONFIGMAPS, changed, {"data": {"v": "1"}}, namespace)
    await client.create(CONFIGMAPS, configmap(created, v="1"), namespace)

    def stored(name: str) -> str:
        return ((informer.get(name, namespace) or {}).get("data") or {}).get("v", "")

    # The informer queues an event's keys as it stores the object: once both are stored,
    # both keys are waiting.
    await eventually(lambda: stored(changed) == "1" and stored(created) == "1")
    gate.set()
    await eventually(lambda: (changed, "1") in order and (created, "1") in order)
    for name in (changed, created):
        at = order.index((name, "1"))
        backlog_before = [n for n, _ in order[:at] if n not in (changed, created)]
        assert len(backlog_before) <= workers * 2, (
            f"{name} waited behind {len(backlog_before)} listed keys: {order[: at + 1]}"
        )
    await eventually(lambda: {n for n, _ in order} >= set(names))  # the backlog still runs


async def test_failures_back_off_exponentially(client: Client, namespace: str) -> None:
    manager = Manager(client, bind_address=None)
    informer = await manager.cache.get_informer(CONFIGMAPS, namespace)
    attempts: list[float] = []
    limiter = ExponentialBackoff[ObjectKey](base=0.2, cap=10.0)

    async def reconcile(key: ObjectKey) -> Result:
        attempts.append(time.monotonic())
        raise RuntimeError("infrastructure not ready")

    ctrl = manager.new_controller("failing", reconcile, rate_limiter=limiter)
    ctrl.watch(informer)
    await manager.start()
    try:
        await client.create(CONFIGMAPS, configmap("f", v="1"), namespace)
        await eventually(lambda: len(attempts) >= 6)
    finally:
        await manager.stop()
    # Counts, not durations: doubling delays from 0.2 s fit only so many attempts into the
    # span they took (a loaded machine widens the span, never adds attempts), and every
    # failure went through the rate limiter once.
    span = attempts[-1] - attempts[0]
    assert len(attempts) <= backoff_budget(span, base=0.2), (len(attempts), span)
    assert limiter.retries(ObjectKey(namespace, "f")) == len(attempts)
    errors = manager.metrics.registry.get_sample_value(
        "controller_runtime_reconcile_errors_total", {"controller": "failing"}
    )
    assert errors == len(attempts)


async def test_a_create_in_a_namespace_being_deleted_is_not_logged_as_an_error(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """Deleting a namespace under a running controller is routine: a create the controller
    makes there is refused as ``NamespaceTerminating``, logged at info and retried until the
    object that asked is gone, and its Events are dropped; no warning, no error."""
    doomed = f"t-{uuid.uuid4().hex[:10]}"
    await client.create(NAMESPACES, {"metadata": {"name": doomed}})
    held = {"metadata": {"name": "held", "finalizers": ["test.machinepool.dev/hold"]}}
    await client.create(CONFIGMAPS, held, doomed)
    manager = Manager(client, bind_address=None)
    informer = await manager.cache.get_informer(CONFIGMAPS, doomed)
    refused: list[BaseException] = []
    recorder = EventRecorder(client, "maker")

    async def reconcile(key: ObjectKey) -> None:
        held = informer.get_key(key)
        if key.name != "held" or held is None:
            return
        await recorder.event(held, "Normal", "Making", "making a ConfigMap")
        try:
            await client.create(CONFIGMAPS, configmap("made"), doomed)
        except AlreadyExists:
            pass
        except asyncio.CancelledError:
            raise  # the manager stopping mid-create: not an answer of the apiserver
        except BaseException as exc:
            refused.append(exc)
            raise

    manager.new_controller("maker", reconcile).watch(informer)
    with caplog.at_level(logging.INFO):
        await manager.start()
        try:
            await client.delete(NAMESPACES, doomed)
            await eventually(lambda: len(refused) >= 2)
            await client.patch(CONFIGMAPS, "held", {"metadata": {"finalizers": None}}, doomed)
            await eventually(lambda: informer.get_key(ObjectKey(doomed, "held")) is None)
        finally:
            await manager.stop()
            await recorder.close()
    assert all(isinstance(exc, NamespaceTerminating) for exc in refused), refused
    said = [r for r in caplog.records if r.name.startswith("machinepool.runtime")]
    assert [r.getMessage() for r in said if r.levelno >= logging.WARNING] == []
    assert any(
        r.getMessage().startswith("namespace is being deleted") and r.levelno == logging.INFO
        for r in said
    )


async def test_probes_and_metrics_answer(manager: Manager, client: Client, namespace: str) -> None:
    informer = await manager.cache.get_informer(CONFIGMAPS, namespace)

    async def reconcile(key: ObjectKey) -> None:
        return None

    manager.new_controller("probed", reconcile).watch(informer)
    await manager.start()
    with pytest.raises(ManagerStateError, match="cannot start"):
        await manager.start()
    await client.create(CONFIGMAPS, configmap("m"), namespace)
    base = f"http://127.0.0.1:{manager.http_port}"
    async with aiohttp.ClientSession() as http:
        for path in ("/healthz", "/readyz"):
            async with http.get(base + path) as resp:
                assert resp.status == 200, path
                assert (await resp.text()).strip() == "ok"
        await eventually(lambda: _successes(manager, "probed") >= 1)
        async with http.get(base + "/metrics") as resp:
            assert resp.status == 200
            text = await resp.text()
    assert 'controller_runtime_reconcile_total{controller="probed",result="error"} 0.0' in text
    assert 'controller_runtime_reconcile_total{controller="probed",result="success"}' in text
    assert 'workqueue_depth{controller="probed",name="probed",priority=""}' in text
    assert "controller_runtime_reconcile_time_seconds_bucket" in text
    assert "workqueue_queue_duration_seconds_bucket" in text
    assert 'rest_client_requests_total{code="201",resource="configmaps",verb="create"}' in text
    await manager.stop()
    assert manager.state is ManagerState.STOPPED
    with pytest.raises(ManagerStateError):
        await manager.start()


def _successes(manager: Manager, name: str) -> float:
    value = manager.metrics.registry.get_sample_value(
        "controller_runtime_reconcile_total", {"controller": name, "result": "success"}
    )
    return value or 0.0


async def test_repeated_events_are_aggregated(client: Client, namespace: str) -> None:
    owner = await client.create(CONFIGMAPS, configmap("owner"), namespace)
    # A burst above client-go's 25 per object: this test is about aggregation, the spam
    # filter has its own (tests/unit/test_runtime_events.py).
    recorder = EventRecorder(client, "test-controller", series_interval=3600, spam_burst=100)
    for _ in range(50):
        await recorder.event(owner, "Warning", "ScaleFailed", "cloud quota exceeded")
    await recorder.event(owner, "Normal", "Scaled", "scaled to 3")
    await recorder.close()  # flushes, and stops its writer
    events = (await client.list(EVENTS, namespace)).items
    by_reason = {e["reason"]: e for e in events}
    assert len(events) == 2
    assert by_reason["ScaleFailed"]["series"]["count"] == 50
    assert by_reason["ScaleFailed"]["regarding"]["name"] == "owner"
    assert by_reason["ScaleFailed"]["reportingController"] == "test-controller"
    assert "series" not in by_reason["Scaled"]
