"""The Result/error contract of Controller, and that a worker survives anything."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

import pytest
from tests.support import eventually

from machinepool.runtime import (
    SECRETS,
    ClusterNotConnected,
    Controller,
    ExpectedError,
    ExponentialBackoff,
    NotFound,
    ObjectKey,
    Result,
    RuntimeMetrics,
    ServerError,
    TerminalError,
)
from machinepool.runtime.kube.ownwrites import note_write

KEY = ObjectKey("ns", "a")


def compute(seconds: float) -> None:
    """A reconcile's own work: it holds the event loop for ``seconds``."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def sample(metrics: RuntimeMetrics, name: str, labels: dict[str, str]) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def reconciles(metrics: RuntimeMetrics, result: str) -> float:
    return sample(
        metrics, "controller_runtime_reconcile_total", {"controller": "c", "result": result}
    )


async def run_for(ctrl: Controller, seconds: float) -> None:
    task = asyncio.create_task(ctrl.run())
    await asyncio.sleep(seconds)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_metrics_start_at_zero() -> None:
    metrics = RuntimeMetrics()
    Controller("c", lambda key: _ok(), metrics=metrics, concurrency=3)
    for result in ("success", "error", "requeue_after", "requeue"):
        assert (
            metrics.registry.get_sample_value(
                "controller_runtime_reconcile_total", {"controller": "c", "result": result}
            )
            == 0.0
        )
    assert sample(metrics, "controller_runtime_max_concurrent_reconciles", {"controller": "c"}) == 3
    depth = {"name": "c", "controller": "c", "priority": ""}
    assert sample(metrics, "workqueue_depth", depth) == 0


async def _ok() -> Result:
    return Result()


async def test_success_forgets_backoff() -> None:
    metrics = RuntimeMetrics()
    calls: list[ObjectKey] = []

    async def reconcile(key: ObjectKey) -> None:
        calls.append(key)

    ctrl = Controller("c", reconcile, metrics=metrics)
    ctrl.queue._limiter.when(KEY)  # a past failure
    ctrl.enqueue(KEY)
    await run_for(ctrl, 0.05)
    assert calls == [KEY]
    assert ctrl.queue.retries(KEY) == 0
    assert reconciles(metrics, "success") == 1


async def test_error_retries_with_growing_backoff_and_ignores_result() -> None:
    metrics = RuntimeMetrics()
    times: list[float] = []
    succeeded = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def reconcile(key: ObjectKey) -> Result:
        times.append(loop.time())
        if len(times) < 5:
            raise RuntimeError("cloud said no")
        succeeded.set()
        return Result()

    ctrl = Controller("c", reconcile, metrics=metrics, rate_limiter=ExponentialBackoff(base=0.01))
    ctrl.enqueue(KEY)
    task = asyncio.create_task(ctrl.run())
    try:
        await asyncio.wait_for(succeeded.wait(), timeout=30)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert len(times) == 5
    # Lower bounds only: a loaded machine can make a retry late, never early. The n-th retry
    # waits at least base * 2**n, so the gaps add up to at least 0.01 + 0.02 + 0.04 + 0.08.
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(gap >= 0.01 * 2**n * 0.9 for n, gap in enumerate(gaps)), f"backoff: {gaps}"
    assert reconciles(metrics, "error") == 4
    assert reconciles(metrics, "success") == 1
    assert sample(metrics, "controller_runtime_reconcile_errors_total", {"controller": "c"}) == 4
    assert ctrl.queue.retries(KEY) == 0


async def test_terminal_error_is_not_retried() -> None:
    metrics = RuntimeMetrics()
    calls = 0

    async def reconcile(key: ObjectKey) -> Result:
        nonlocal calls
        calls += 1
        raise TerminalError("spec.replicas is negative")

    ctrl = Controller("c", reconcile, metrics=metrics, rate_limiter=ExponentialBackoff(0.001))
    ctrl.enqueue(KEY)
    await run_for(ctrl, 0.1)
    assert calls == 1
    # counted as upstream does: an error among the results, and a terminal one on its own
    assert reconciles(metrics, "error") == 1
    assert (
        sample(metrics, "controller_runtime_terminal_reconcile_errors_total", {"controller": "c"})
        == 1
    )


async def test_requeue_after_comes_back_and_forgets_backoff() -> None:
    metrics = RuntimeMetrics()
    calls = 0

    async def reconcile(key: ObjectKey) -> Result:
        nonlocal calls
        calls += 1
        return Result(requeue_after=0.02)

    ctrl = Controller("c", reconcile, metrics=metrics)
    ctrl.queue._limiter.when(KEY)
    ctrl.enqueue(KEY)
    await run_for(ctrl, 0.2)
    assert calls >= 3
    assert ctrl.queue.retries(KEY) == 0
    assert reconciles(metrics, "requeue_after") == calls


async def test_worker_survives_bugs_and_keeps_serving_other_keys() -> None:
    done: list[str] = []

    async def reconcile(key: ObjectKey) -> None:
        if key.name == "bad":
            raise KeyError("bug")
        done.append(key.name)

    ctrl = Controller("c", reconcile, rate_limiter=ExponentialBackoff(base=10.0))
    ctrl.enqueue(ObjectKey("ns", "bad"))
    ctrl.enqueue(ObjectKey("ns", "good"))
    await run_for(ctrl, 0.05)
    assert done == ["good"]


async def test_cancellation_requeues_the_key_in_flight() -> None:
    started = asyncio.Event()

    async def reconcile(key: ObjectKey) -> None:
        started.set()
        await asyncio.sleep(10)

    ctrl = Controller("c", reconcile)
    ctrl.enqueue(KEY)
    task = asyncio.create_task(ctrl.run())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(ctrl.queue) == 1
    assert not ctrl.queue.is_processing(KEY)


async def test_reconciler_object_and_concurrency_bound() -> None:
    active = 0
    peak = 0

    class Slow:
        async def reconcile(self, key: ObjectKey) -> Result:
            nonlocal active, peak
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.01)
            active -= 1
            return Result()

    ctrl = Controller("c", Slow(), concurrency=4)
    for i in range(20):
        ctrl.enqueue(ObjectKey("ns", str(i)))
    await run_for(ctrl, 0.2)
    assert peak == 4


def test_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        Controller("c", lambda key: _ok(), concurrency=0)


@pytest.mark.parametrize(
    ("raised", "reason", "traceback"),
    [
        (ServerError(503, "ServiceUnavailable", "apiserver down"), "ServiceUnavailable", False),
        (
            ClusterNotConnected("workload cluster ns/c: connection refused"),
            "ClusterNotConnected",
            False,
        ),
        (ConnectionRefusedError(111, "Connection refused"), "ConnectionRefusedError", False),
        (
            ExceptionGroup(
                "pool ns/a", [ExpectedError("cannot read Nodes"), NotFound(404, "NotFound", "x")]
            ),
            "ExpectedError",
            False,
        ),
        (KeyError("spec"), "KeyError", True),
        (
            ExceptionGroup("pool ns/a", [NotFound(404, "NotFound", "x"), TypeError("bug")]),
            "NotFound",
            True,
        ),
    ],
)
async def test_expected_errors_log_one_line_and_bugs_a_traceback(
    raised: Exception, reason: str, traceback: bool, caplog: pytest.LogCaptureFixture
) -> None:
    called = asyncio.Event()

    async def reconcile(key: ObjectKey) -> None:
        called.set()
        raise raised

    ctrl = Controller("c", reconcile, rate_limiter=ExponentialBackoff(base=10.0))
    ctrl.enqueue(KEY)
    with caplog.at_level(logging.INFO):
        task = asyncio.create_task(ctrl.run())
        async with asyncio.timeout(10):
            await called.wait()  # the failure is logged in the same step as the raise
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    failed = [r for r in caplog.records if r.getMessage().startswith("reconcile failed")]
    assert len(failed) == 1
    assert failed[0].kv["reason"] == reason  # type: ignore[attr-defined]
    assert "\n" not in failed[0].kv["error"]  # type: ignore[attr-defined]
    assert (failed[0].exc_info is not None) is traceback


async def test_echoes_of_a_failed_attempt_do_not_cut_its_backoff() -> None:
    """The echo of a failing reconcile's own write (an update event, judged by its new
    version for the keys of both versions) waits for the backoff; a foreign change does not."""
    old, own, foreign = (
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"namespace": "ns", "name": "a", "uid": "u1", "resourceVersion": rv},
        }
        for rv in ("1", "2", "3")
    )
    calls = 0
    ran = asyncio.Event()

    async def reconcile(key: ObjectKey) -> None:
        nonlocal calls
        calls += 1
        ran.set()
        if calls == 1:
            note_write(own)  # what the Client does with the answer to a write
            handler.on_update(old, own)  # its echo, while the attempt runs
        raise ExpectedError("workload cluster unreachable")

    ctrl = Controller("c", reconcile, rate_limiter=ExponentialBackoff(base=1000.0))
    handler = ctrl.handler()
    handler.watching(SECRETS)  # as Informer.add_handler tells it
    ctrl.enqueue(KEY)
    task = asyncio.create_task(ctrl.run())
    try:
        async with asyncio.timeout(10):
            await ran.wait()
        ran.clear()
        handler.on_update(old, own)  # the same echo again, after the attempt
        for _ in range(20):
            await asyncio.sleep(0)
        assert calls == 1, "an echo of our own write ran the key ahead of its backoff"
        handler.on_update(own, foreign)  # someone else's change
        async with asyncio.timeout(10):
            await ran.wait()
        assert calls == 2
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_inputs_drop_updates_that_change_nothing_the_reconcile_reads() -> None:
    """A watch with ``inputs`` queues an update only when ``inputs`` of old and new differ;
    adds and deletes always pass."""
    ctrl = Controller("c", lambda key: asyncio.sleep(0))

    def ready(obj: dict[str, object]) -> object:
        return obj.get("ready")

    handler = ctrl.handler(inputs=ready)
    old = {"metadata": {"name": "a", "namespace": "ns"}, "ready": True, "heartbeat": 1}
    beat = {**old, "heartbeat": 2}
    handler.on_update(old, beat)
    assert len(ctrl.queue) == 0, "a heartbeat changes nothing the reconcile reads"
    handler.on_update(beat, {**beat, "ready": False})
    assert len(ctrl.queue) == 1
    unfiltered = Controller("d", lambda key: asyncio.sleep(0)).handler()
    unfiltered.on_update(old, beat)  # without inputs every update counts, as before
    assert len(unfiltered._queue) == 1
    fresh = Controller("e", lambda key: asyncio.sleep(0))
    fresh.handler(inputs=ready).on_add(old)
    fresh.handler(inputs=ready).on_delete(old)
    assert len(fresh.queue) == 1  # de-duplicated: one key, queued by both


async def test_a_paced_watch_waits_in_proportion_to_the_slow_keys_last_reconciles() -> None:
    """A key whose reconcile takes a while is queued by a paced watch only after a pause of
    ``PACE_FACTOR`` times the last reconciles of every slow key (here two: 0.1 s and 0.05 s),
    so more big keys do not take more of the loop; every event in the pause is read by one
    reconcile. A fast key and an unpaced watch queue at once."""
    from machinepool.runtime.reconcile.controller import PACE_FACTOR

    work = {"slow": 0.1, "other": 0.05, "fast": 0.0}
    started: list[tuple[str, float]] = []
    took: dict[str, float] = {}
    """Each key's last reconcile as it ran: on a loaded machine longer than its work."""

    async def reconcile(key: ObjectKey) -> None:
        began = time.monotonic()
        started.append((key.name, began))
        compute(work[key.name])  # the reconcile's own work, holding the event loop
        took[key.name] = time.monotonic() - began

    ctrl = Controller("c", reconcile, concurrency=2)
    paced = ctrl.handler(paced=True)  # as a watch is, before the controller runs
    task = asyncio.create_task(ctrl.run())
    try:
        for name in work:
            ctrl.queue.add(ObjectKey("ns", name))
        await eventually(lambda: reconciles(ctrl.metrics, "success") == 3)
        both = PACE_FACTOR * (0.1 + 0.05)
        measured = PACE_FACTOR * (took["slow"] + took["other"])
        assert both <= ctrl.pace(ObjectKey("ns", "slow")) < measured * 1.5
        assert ctrl.pace(ObjectKey("ns", "other")) == ctrl.pace(ObjectKey("ns", "slow"))
        assert ctrl.pace(ObjectKey("ns", "fast")) == 0.0

        slow = {"metadata": {"name": "slow", "namespace": "ns"}}
        fast = {"metadata": {"name": "fast", "namespace": "ns"}}
        sent = time.monotonic()
        paced.on_update(slow, {**slow, "n": 1})
        paced.on_update(fast, {**fast, "n": 1})
        assert not ctrl.queue.is_queued(ObjectKey("ns", "slow")), "paused, not queued"
        assert ctrl.queue.is_queued(ObjectKey("ns", "fast")), "a fast key goes at once"
        paced.on_update(slow, {**slow, "n": 2})  # a second event in the pause
        ctrl.handler().on_update(fast, {**fast, "n": 2})

        await eventually(lambda: [k for k, _ in started].count("slow") == 2)
        second = [t for k, t in started if k == "slow"][1]
        assert second - sent >= both * 0.9
        await eventually(lambda: len(ctrl.queue) == 0 and reconciles(ctrl.metrics, "success") >= 5)
        assert [k for k, _ in started].count("slow") == 2, "one reconcile for both events"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_paced_watch_queues_at_once_an_update_that_changes_its_at_once_inputs() -> None:
    """A slow key's paced event waits, unless the update changes what ``at_once`` returns (a
    referenced object turning ready): that one is queued without a pause."""
    work = {"slow": 0.1}

    async def reconcile(key: ObjectKey) -> None:
        compute(work[key.name])  # holding the event loop

    def ready(obj: dict[str, object]) -> object:
        return obj.get("ready")

    ctrl = Controller("c", reconcile)
    paced = ctrl.handler(paced=True, at_once=ready)
    task = asyncio.create_task(ctrl.run())
    try:
        key = ObjectKey("ns", "slow")
        ctrl.queue.add(key)
        await eventually(lambda: reconciles(ctrl.metrics, "success") == 1)
        assert ctrl.pace(key) > 0
        slow = {"metadata": {"name": "slow", "namespace": "ns"}, "ready": False}
        paced.on_update(slow, {**slow, "replicas": 1})
        assert not ctrl.queue.is_queued(key), "a change of anything else is paced"
        paced.on_update(slow, {**slow, "ready": True})
        assert ctrl.queue.is_queued(key), "turning ready is queued at once"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_gather_bounded_keeps_order_errors_and_the_bound() -> None:
    from machinepool.runtime import gather_bounded

    running, peak = 0, 0

    async def call(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0)
        running -= 1
        if i == 3:
            raise ValueError("three")
        return i

    out = await gather_bounded((call(i) for i in range(10)), limit=4)
    assert out[:3] == [0, 1, 2]
    assert isinstance(out[3], ValueError)
    assert out[4:] == list(range(4, 10))
    assert peak == 4, "never more than the bound in flight, and the bound is used"
    with pytest.raises(ValueError, match="limit"):
        await gather_bounded([], limit=0)


def cm(name: str) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "ns"}}


async def test_changes_go_before_listed_keys_and_a_retry_keeps_its_priority() -> None:
    """A key merely listed waits behind a change seen later, also through a mapper; a listed
    key that failed comes back after its backoff still behind changes."""
    order: list[str] = []
    failed_once: set[str] = set()
    gate = asyncio.Event()

    async def reconcile(key: ObjectKey) -> None:
        order.append(key.name)
        if key.name == "l1" and key.name not in failed_once:
            failed_once.add(key.name)
            raise RuntimeError("first try fails")
        if key.name == "l2":
            await gate.wait()  # holds the one worker while the test queues more

    ctrl = Controller("c", reconcile, rate_limiter=ExponentialBackoff(base=0.001))
    handler = ctrl.handler()
    mapped = ctrl.handler(lambda obj: [ObjectKey("ns", "mapped")])
    for name in ["l1", "l2", "l3"]:
        handler.on_add(cm(name), initial=True)
    task = asyncio.create_task(ctrl.run())
    try:
        waiting = "l2 holds the worker; l3 and l1's retry wait"
        await eventually(lambda: order == ["l1", "l2"] and len(ctrl.queue) == 2, waiting)
        handler.on_update(cm("l3"), cm("l3"))  # a change to a listed key raises it
        mapped.on_delete(cm("other"))  # a change mapped to another key
        handler.on_add(cm("new"))
        gate.set()
        await eventually(lambda: len(order) == 6, "every key reconciled")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert order == ["l1", "l2", "l3", "mapped", "new", "l1"]


async def test_a_reconcile_that_waits_on_round_trips_is_not_paced() -> None:
    """Pacing bounds the event loop's share, so it counts the time a reconcile holds the loop:
    one that spends 0.1 s waiting on a round trip (a status patch on a loaded apiserver) and
    little else leaves its pool's events undelayed, where one that computes for 0.1 s does not."""

    async def reconcile(key: ObjectKey) -> None:
        if key.name == "waits":
            await asyncio.sleep(0.1)  # a round trip: the loop serves others meanwhile
        else:
            compute(0.1)  # the reconcile's own work

    ctrl = Controller("c", reconcile)
    ctrl.handler(paced=True)
    task = asyncio.create_task(ctrl.run())
    try:
        ctrl.queue.add(ObjectKey("ns", "waits"))
        ctrl.queue.add(ObjectKey("ns", "computes"))
        await eventually(lambda: reconciles(ctrl.metrics, "success") == 2)
        assert ctrl.pace(ObjectKey("ns", "waits")) == 0.0
        assert ctrl.pace(ObjectKey("ns", "computes")) > 0.0
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
