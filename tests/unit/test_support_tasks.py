"""The leak check every test runs under (``no_leaked_tasks`` in conftest.py): it must name a
task the test left running, and must not blame a test for what older fixtures' tasks spawn."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tests.support.tasks import TaskTracker, describe

T = TypeVar("T")


async def _idle() -> None:
    await asyncio.Event().wait()


async def _as_a_test(tracker: TaskTracker, body: Callable[[], Awaitable[T]]) -> T:
    """Run ``body`` in a task with an origin of its own, as pytest-asyncio runs a test after
    the fixture took its mark (it creates the test's task while the loop is stopped, which a
    running test cannot do)."""
    task = asyncio.create_task(body())
    tracker.adopt(task)
    return await task


async def _leave_one() -> asyncio.Task[None]:
    return asyncio.create_task(_idle(), name="left-behind")


async def test_a_task_the_test_left_running_is_named(task_tracker: TaskTracker) -> None:
    mark = task_tracker.mark()
    left = await _as_a_test(task_tracker, _leave_one)
    try:
        assert await task_tracker.leaked(mark) == [left]
        assert describe(left).startswith("left-behind: _idle (")
    finally:
        left.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await left


async def test_tasks_spawned_by_older_background_tasks_are_not_the_tests(
    task_tracker: TaskTracker,
) -> None:
    spawn = asyncio.Event()
    spawned = asyncio.Event()
    children: list[asyncio.Task[None]] = []

    async def background() -> None:
        await spawn.wait()
        children.append(asyncio.create_task(_idle()))
        spawned.set()
        await _idle()

    older = asyncio.create_task(background())
    mark = task_tracker.mark()

    async def body() -> None:
        spawn.set()
        await spawned.wait()

    await _as_a_test(task_tracker, body)
    try:
        assert await task_tracker.leaked(mark) == []
    finally:
        for task in (older, *children):
            task.cancel()
        await asyncio.gather(older, *children, return_exceptions=True)


async def test_a_task_cancelled_but_not_yet_finished_is_given_time(
    task_tracker: TaskTracker,
) -> None:
    mark = task_tracker.mark()
    task = await _as_a_test(task_tracker, _leave_one)
    await asyncio.sleep(0)
    task.cancel()
    assert await task_tracker.leaked(mark) == []
    assert task.cancelled()


async def test_a_task_a_callback_creates_is_background(task_tracker: TaskTracker) -> None:
    """A server's connection handler (created by a protocol callback) is not the test's."""
    loop = asyncio.get_running_loop()
    mark = task_tracker.mark()
    created: asyncio.Future[asyncio.Task[None]] = loop.create_future()
    loop.call_soon(lambda: created.set_result(loop.create_task(_idle())))
    handler = await created
    try:
        assert await task_tracker.leaked(mark) == []
    finally:
        handler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await handler
