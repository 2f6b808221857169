"""``gather_bounded``: independent API calls of one reconcile sent together, a few at a time.

Used by reconcilers that make many independent writes in one pass (the pool engine creating
a step's instances and infra machines): sent one after another, a step of 100 instances
holds a worker for 100 round trips while every other pool waits in the queue; all at once,
one pool could take every connection of the client. A bound of ``limit`` in flight does
neither.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

__all__ = ["CALLS_IN_FLIGHT", "gather_bounded"]

T = TypeVar("T")

CALLS_IN_FLIGHT = 16
"""Default bound: a fraction of the client's connection pool, so other reconciles still get
connections."""


async def gather_bounded(
    calls: Iterable[Awaitable[T]], limit: int = CALLS_IN_FLIGHT
) -> list[T | BaseException]:
    """Await ``calls`` with at most ``limit`` running at once; results (or the exception
    each raised) in the order given. Cancellation of the caller cancels them all.

    >>> created = await gather_bounded(client.create(R, body, ns) for body in bodies)
    """
    if limit < 1:
        raise ValueError(f"limit must be >= 1, not {limit}")
    gate = asyncio.Semaphore(limit)

    async def one(call: Awaitable[T]) -> T:
        async with gate:
            return await call

    return await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)
