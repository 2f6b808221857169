"""Helpers shared by every test tier (import as ``tests.support``): waiting without fixed
sleeps (``waiting``), the Resources tests touch (``resources``), object builders
(``builders``); ``upstream`` (upstream's core manager) is imported by its module path."""

from tests.support.waiting import (
    GENEROUS,
    Changes,
    eventually,
    wait_established,
    wait_for,
    watch_until,
)

__all__ = [
    "GENEROUS",
    "Changes",
    "eventually",
    "wait_established",
    "wait_for",
    "watch_until",
]
