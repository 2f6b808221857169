"""The work queue's guarantees: de-duplication, exclusion, re-queue, delays, backoff, shutdown."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from machinepool.runtime import ExponentialBackoff, QueueShutDown, WorkQueue


def test_backoff_doubles_from_5ms_to_1000s() -> None:
    rl = ExponentialBackoff[str]()
    delays = [rl.when("a") for _ in range(30)]
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[-1] == 1000.0
    assert all(b >= a for a, b in itertools.pairwise(delays))
    assert rl.retries("a") == 30


def test_backoff_is_per_key_and_reset_by_forget() -> None:
    rl = ExponentialBackoff[str]()
    rl.when("a")
    rl.when("a")
    assert rl.when("b") == 0.005
    rl.forget("a")
    assert rl.retries("a") == 0
    assert rl.when("a") == 0.005


def test_backoff_never_overflows() -> None:
    rl = ExponentialBackoff[str]()
    for _ in range(5000):
        delay = rl.when("a")
    assert delay == 1000.0


async def test_adds_are_deduplicated_in_order() -> None:
    q: WorkQueue[str] = WorkQueue()
    for key in ["a", "b", "a", "c", "b"]:
        q.add(key)
    assert len(q) == 3
    assert [await q.get() for _ in range(3)] == ["a", "b", "c"]


async def test_key_added_while_processing_is_requeued_once_after_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    key = await q.get()
    q.add("a")
    q.add("a")
    assert len(q) == 0, "a key being processed is not handed out again"
    q.done(key)
    assert len(q) == 1
    assert await q.get() == "a"
    q.done("a")
    assert len(q) == 0


async def test_a_key_is_never_held_by_two_workers() -> None:
    q: WorkQueue[int] = WorkQueue()
    holding: set[int] = set()
    overlaps = 0
    processed = 0

    async def worker() -> None:
        nonlocal overlaps, processed
        while True:
            try:
                key = await q.get()
            except QueueShutDown:
                return
            if key in holding:
                overlaps += 1
            holding.add(key)
            await asyncio.sleep(0)
            q.add(key % 3)  # hot keys added while in flight
            await asyncio.sleep(0)
            holding.discard(key)
            processed += 1
            q.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(8)]
    for i in range(200):
        q.add(i % 10)
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    q.shutdown()
    await asyncio.gather(*workers)
    assert overlaps == 0
    assert processed >= 10


async def test_add_after_delays_and_earliest_wins() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add_after("a", 10.0)
    q.add_after("a", 0.01)
    q.add_after("a", 5.0)  # later than the pending one: ignored
    assert len(q) == 0
    async with asyncio.timeout(2):
        assert await q.get() == "a"
    q.done("a")
    await asyncio.sleep(0.05)
    assert len(q) == 0, "the superseded 10 s timer was cancelled, not merely outrun"


async def test_add_rate_limited_waits_the_backoff() -> None:
    q: WorkQueue[str] = WorkQueue(rate_limiter=ExponentialBackoff(base=0.02))
    q.add_rate_limited("a")
    assert len(q) == 0
    async with asyncio.timeout(2):
        assert await q.get() == "a"
    assert q.retries("a") == 1
    q.forget("a")
    assert q.retries("a") == 0


async def test_echoes_of_a_failed_attempt_wait_for_its_backoff() -> None:
    """The retry-storm fix: a failing reconcile's own writes come back as events, during the
    attempt or after it; they must not re-run the key ahead of its backoff."""
    q: WorkQueue[str] = WorkQueue(rate_limiter=ExponentialBackoff(base=0.05))
    q.add("a")
    for attempt in range(1, 4):
        key = await q.get()
        q.add("a", echo=True)  # the echo of this attempt's status patch, while it runs
        q.add_rate_limited(key, fold=True)  # failed; the controller found only echoes
        q.done(key)
        q.add("a", echo=True)  # another echo, after the attempt ended
        assert len(q) == 0, f"attempt {attempt}: re-queued at once, skipping its backoff"
        async with asyncio.timeout(2):
            assert await q.get() == "a"  # ... it comes back after the backoff
        q.done("a")
        q.add("a")
    assert q.retries("a") == 3


async def test_other_changes_still_run_a_failing_key_at_once() -> None:
    q: WorkQueue[str] = WorkQueue(rate_limiter=ExponentialBackoff(base=1000.0))
    q.add("a")
    key = await q.get()
    q.add("a")  # someone else's change while the attempt ran: not folded
    q.add("a", echo=True)
    q.add_rate_limited(key, fold=False)
    q.done(key)
    assert len(q) == 1, "a real change is not held back by the backoff"
    key = await q.get()
    q.add_rate_limited(key)
    q.done(key)
    q.add("a")  # a real change after the attempt ended
    assert len(q) == 1


async def test_an_echo_after_success_still_runs_the_key() -> None:
    """After a success there is no retry scheduled: the echo is how a reconcile that only
    added a finalizer comes back to do the rest."""
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    key = await q.get()
    q.forget(key)
    q.done(key)
    q.add("a", echo=True)
    assert len(q) == 1


async def test_shutdown_drains_then_releases_getters() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    waiter_q: WorkQueue[str] = WorkQueue()
    waiter = asyncio.create_task(waiter_q.get())
    await asyncio.sleep(0)
    q.shutdown()
    waiter_q.shutdown()
    q.add("b")  # ignored after shutdown
    q.add_after("c", 0.001)
    assert await q.get() == "a"
    with pytest.raises(QueueShutDown):
        await q.get()
    with pytest.raises(QueueShutDown):
        await waiter


async def test_hooks_see_depth_adds_retries_and_wait() -> None:
    seen: dict[str, list[float]] = {"added": [], "retried": [], "depth": [], "waited": []}

    class Hooks:
        def added(self) -> None:
            seen["added"].append(1)

        def retried(self) -> None:
            seen["retried"].append(1)

        def depth(self, depth: int) -> None:
            seen["depth"].append(depth)

        def waited(self, seconds: float) -> None:
            seen["waited"].append(seconds)

    q: WorkQueue[str] = WorkQueue(hooks=Hooks())
    q.add("a")
    q.add("b")
    await q.get()
    q.add_rate_limited("a")
    assert len(seen["added"]) == 2
    assert seen["retried"] == [1]
    assert seen["depth"] == [1, 2, 1]
    assert len(seen["waited"]) == 1
    assert seen["waited"][0] >= 0
    q.shutdown()
