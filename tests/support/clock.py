"""A clock a test sets by hand, for code that takes ``clock: Callable[[], float]``."""

from __future__ import annotations


class ManualClock:
    """Reads ``now``; the test moves it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
