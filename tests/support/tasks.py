"""Finding the asyncio tasks a test started and left running.

Every test shares the session's event loop, and the session's and modules' fixtures keep
background tasks on it (a manager's workers, informers' watches) that start more tasks whenever
they like. So "a task that did not exist before the test" is not enough to blame the test: a
task counts as the test's only if no task that existed before the test is among its ancestors.
``TaskTracker`` learns ancestry from a task factory it installs on the loop.

``conftest.py`` runs it around every test (``no_leaked_tasks``); ``ALLOWED`` names the few
coroutines a test may leave behind, each with why.
"""

from __future__ import annotations

import asyncio
import itertools
import weakref
from collections.abc import Coroutine, Iterable
from typing import Any

__all__ = ["ALLOWED", "TaskTracker", "cancel", "describe"]

ALLOWED: dict[str, str] = {}
"""Coroutine qualified name -> why a test may leave it running (keep this empty if you can)."""

_GRACE = 5.0
"""Seconds a task already asked to cancel gets to finish before it counts as leaked."""


def describe(task: asyncio.Task[Any]) -> str:
    """``name: coroutine qualname (file:line)``, what a reader needs to find who started it."""
    coro = task.get_coro()
    code = getattr(coro, "cr_code", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"{task.get_name()}: {getattr(coro, '__qualname__', repr(coro))}{where}"


class TaskTracker:
    """Gives every task created on ``loop`` an origin: its parent's (the task running when it
    was created); a new one, numbered in order, for a task pytest-asyncio starts (a test's, a
    fixture's: created while the loop is stopped); none (0) for a task a callback creates
    while the loop runs (an aiohttp server's connection handler is the fixture's server's,
    whichever test's request opened it). A test's tasks are those of origins numbered after
    it started; the background tasks of older fixtures and all they spawn keep older ones."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._origins: weakref.WeakKeyDictionary[asyncio.Task[Any], int]
        self._origins = weakref.WeakKeyDictionary()
        self._counter = itertools.count(1)
        self._loop = loop
        loop.set_task_factory(self._create)

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> TaskTracker:
        """The loop's tracker, installed on first use."""
        owner = getattr(loop.get_task_factory(), "__self__", None)
        if isinstance(owner, TaskTracker):
            return owner
        return cls(loop)

    def _create(
        self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any
    ) -> asyncio.Task[Any]:
        parent = asyncio.current_task(loop)
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kwargs)
        if parent is not None:  # one from before the tracker was installed is background: 0
            self._origins[task] = self._origins.get(parent, 0)
        elif loop.is_running():  # from a callback: a server's connection, a thread's call
            self._origins[task] = 0
        else:  # pytest-asyncio starting a test or a fixture
            self._origins[task] = next(self._counter)
        return task

    def mark(self) -> int:
        """Call as the test starts; pass the result to ``leaked``."""
        return next(self._counter)

    def adopt(self, task: asyncio.Task[Any]) -> None:
        """Give ``task`` (and what it will start) an origin of its own, as if pytest-asyncio
        had started it; for the tracker's own tests, which run inside a task already."""
        self._origins[task] = next(self._counter)

    async def leaked(self, mark: int) -> list[asyncio.Task[Any]]:
        """Tasks still running whose origin is the test's (after ``mark``) and that ``ALLOWED``
        does not name; those already cancelling get ``_GRACE`` seconds to finish first."""
        current = asyncio.current_task()
        candidates = [
            t
            for t in asyncio.all_tasks(self._loop)
            if t is not current and self._origins.get(t, 0) > mark
        ]
        cancelling = [t for t in candidates if t.cancelling()]
        if cancelling:
            await asyncio.wait(cancelling, timeout=_GRACE)
        return [t for t in candidates if not t.done() and _name(t) not in ALLOWED]


def _name(task: asyncio.Task[Any]) -> str:
    return str(getattr(task.get_coro(), "__qualname__", ""))


def cancel(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel what leaked, so the next test starts on a clean loop."""
    for task in tasks:
        task.cancel()
