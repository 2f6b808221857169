"""Waiting for a condition without a fixed sleep standing in for it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

GENEROUS = 120.0
"""Seconds: long enough for two busy cores, short enough to fail a stuck test."""


async def eventually(
    check: Callable[[], T | Awaitable[T]], within: float = GENEROUS, interval: float = 0.2
) -> T:
    """Await ``check()`` (sync or async) until it returns something truthy, and return it;
    ``TimeoutError`` after ``within`` seconds."""
    async with asyncio.timeout(within):
        while True:
            value = check()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return value  # type: ignore[return-value]
            await asyncio.sleep(interval)
