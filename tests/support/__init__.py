"""Helpers shared by every test tier (import as ``tests.support``)."""

from tests.support.waiting import eventually

__all__ = ["eventually"]
