"""The work queue's priorities: the highest first and FIFO within one, raised never lowered,
one entry per key whatever its priorities, and priorities carried through processing,
delays and backoff. The other guarantees are in test_runtime_workqueue.py."""

from __future__ import annotations

import asyncio
from typing import TypeVar

from tests.support import eventually

from machinepool.runtime import (
    LOW_PRIORITY,
    NORMAL_PRIORITY,
    ExponentialBackoff,
    ObjectKey,
    WorkQueue,
)
from machinepool.runtime.reconcile.controller import EnqueueHandler

K = TypeVar("K")


async def drain(q: WorkQueue[K]) -> list[tuple[K, int]]:
    """Everything ready, in the order workers would get it (each marked done at once)."""
    out: list[tuple[K, int]] = []
    while len(q):
        key, priority = await q.get_with_priority()
        q.done(key)
        out.append((key, priority))
    return out


async def test_the_highest_priority_goes_first_and_fifo_within_one() -> None:
    q: WorkQueue[str] = WorkQueue()
    for key in ["l1", "l2"]:
        q.add(key, priority=LOW_PRIORITY)
    q.add("n1")
    q.add("l3", priority=LOW_PRIORITY)
    q.add("h1", priority=5)
    q.add("n2", priority=NORMAL_PRIORITY)
    assert len(q) == 6
    assert await drain(q) == [
        ("h1", 5),
        ("n1", NORMAL_PRIORITY),
        ("n2", NORMAL_PRIORITY),
        ("l1", LOW_PRIORITY),
        ("l2", LOW_PRIORITY),
        ("l3", LOW_PRIORITY),
    ]


async def test_a_waiting_key_is_raised_to_the_back_of_its_new_priority() -> None:
    q: WorkQueue[str] = WorkQueue()
    for key in ["l1", "l2", "l3"]:
        q.add(key, priority=LOW_PRIORITY)
    q.add("n1")
    q.add("l3")  # a change seen after it was listed
    assert len(q) == 4, "raised, not added twice"
    assert await drain(q) == [
        ("n1", NORMAL_PRIORITY),
        ("l3", NORMAL_PRIORITY),
        ("l1", LOW_PRIORITY),
        ("l2", LOW_PRIORITY),
    ]


async def test_a_waiting_key_is_never_lowered_nor_moved_back() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("n1")
    q.add("n2")
    q.add("n1", priority=LOW_PRIORITY)  # listed again: changes nothing
    q.add("n1")  # the same priority again: keeps its place
    assert await drain(q) == [("n1", NORMAL_PRIORITY), ("n2", NORMAL_PRIORITY)]


async def test_one_entry_per_key_across_priorities() -> None:
    """De-duplication holds across priorities: a key raised several times is handed out
    once, and its superseded entries never come back as duplicates."""
    q: WorkQueue[str] = WorkQueue()
    for priority in [LOW_PRIORITY, -50, NORMAL_PRIORITY, 3, LOW_PRIORITY, 3]:
        q.add("a", priority=priority)
    q.add("b", priority=LOW_PRIORITY)
    assert len(q) == 2
    assert await drain(q) == [("a", 3), ("b", LOW_PRIORITY)]
    q.add("a", priority=LOW_PRIORITY)  # after its stale entries were handed out or dropped
    assert await drain(q) == [("a", LOW_PRIORITY)]


async def test_a_key_added_while_processing_returns_at_the_highest_priority_it_got() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a", priority=LOW_PRIORITY)
    key, priority = await q.get_with_priority()
    assert (key, priority) == ("a", LOW_PRIORITY)
    q.add("a", priority=LOW_PRIORITY)
    q.add("a")  # a change while the listed key is reconciled
    q.add("a", priority=LOW_PRIORITY)
    q.add("b", priority=LOW_PRIORITY)
    assert len(q) == 1, "a key being processed is not handed out again"
    q.done("a")
    assert await drain(q) == [("a", NORMAL_PRIORITY), ("b", LOW_PRIORITY)]


async def test_a_retry_keeps_its_priority_after_the_backoff() -> None:
    """A listed key that failed waits its backoff and then still goes behind changes; a
    changed key that failed is not pushed behind the backlog of listed ones."""
    q: WorkQueue[str] = WorkQueue(rate_limiter=ExponentialBackoff(base=0.01))
    q.add("listed", priority=LOW_PRIORITY)
    key, priority = await q.get_with_priority()
    q.add_rate_limited(key, priority=priority)
    q.done(key)
    assert len(q) == 0, "waits its backoff"
    async with asyncio.timeout(5):
        assert await q.get_with_priority() == ("listed", LOW_PRIORITY)
    q.done("listed")
    q.add("changed")
    key, priority = await q.get_with_priority()
    q.add_rate_limited(key, priority=priority)
    q.done(key)
    for name in ["l1", "l2"]:
        q.add(name, priority=LOW_PRIORITY)
    await eventually(lambda: len(q) == 3, "the retry fired", interval=0.001)
    assert await drain(q) == [
        ("changed", NORMAL_PRIORITY),
        ("l1", LOW_PRIORITY),
        ("l2", LOW_PRIORITY),
    ]


async def test_a_retry_raises_a_listed_key_waiting_at_low_priority() -> None:
    q: WorkQueue[str] = WorkQueue(rate_limiter=ExponentialBackoff(base=0.01))
    q.add("a")
    key, priority = await q.get_with_priority()
    q.add_rate_limited(key, priority=priority)
    q.done(key)
    q.add("a", priority=LOW_PRIORITY)  # the initial sync lists it meanwhile ...
    q.add("b", priority=LOW_PRIORITY)
    q.add_after("c", 0.05, priority=LOW_PRIORITY)  # due after the retry: timers keep order
    await eventually(lambda: len(q) == 3, "c's delay ran out", interval=0.001)
    # ... and no worker took it before its retry fired: the retry raised it
    assert await drain(q) == [("a", NORMAL_PRIORITY), ("b", LOW_PRIORITY), ("c", LOW_PRIORITY)]


async def test_an_echo_still_waits_for_the_backoff_whatever_its_priority() -> None:
    q: WorkQueue[str] = WorkQueue(rate_limiter=ExponentialBackoff(base=1000.0))
    q.add("a", priority=LOW_PRIORITY)
    key, priority = await q.get_with_priority()
    q.add_rate_limited(key, priority=priority)
    q.done(key)
    q.add("a", echo=True, priority=5)
    assert len(q) == 0, "an echo of our own write cut the backoff short"
    q.add("a", priority=LOW_PRIORITY)  # not an echo: runs now, as before priorities
    assert await drain(q) == [("a", LOW_PRIORITY)]
    q.shutdown()


async def test_pending_delays_merge_to_the_earliest_time_and_highest_priority() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add_after("a", 0.02, priority=LOW_PRIORITY)
    q.add_after("a", 10.0)  # later, but asked for a higher priority
    q.add_after("b", 0.02, priority=LOW_PRIORITY)
    await eventually(lambda: len(q) == 2, "both delays ran out", interval=0.001)
    assert await drain(q) == [("a", NORMAL_PRIORITY), ("b", LOW_PRIORITY)]
    q.shutdown()


async def test_depth_counts_keys_of_every_priority_once() -> None:
    depths: list[int] = []

    class Hooks:
        def added(self) -> None:
            pass

        def retried(self) -> None:
            pass

        def depth(self, depth: int) -> None:
            depths.append(depth)

        def waited(self, seconds: float) -> None:
            pass

    q: WorkQueue[str] = WorkQueue(hooks=Hooks())
    q.add("a", priority=LOW_PRIORITY)
    q.add("b")
    q.add("a")  # raised: still one key
    assert depths[-1] == 2
    await q.get()
    await q.get()
    assert depths[-1] == 0


async def test_a_listed_object_being_deleted_goes_before_the_settled_backlog() -> None:
    q: WorkQueue[ObjectKey] = WorkQueue()
    handler = EnqueueHandler(q)
    settled = [{"metadata": {"namespace": "ns", "name": f"m{i}"}} for i in range(3)]
    deleting = {
        "metadata": {
            "namespace": "ns",
            "name": "leaving",
            "deletionTimestamp": "2026-11-26T08:00:00Z",
        }
    }
    for obj in [*settled, deleting]:
        handler.on_add(obj, initial=True)
    order = [(key.name, priority) for key, priority in await drain(q)]
    assert order == [
        ("leaving", NORMAL_PRIORITY),
        ("m0", LOW_PRIORITY),
        ("m1", LOW_PRIORITY),
        ("m2", LOW_PRIORITY),
    ]
