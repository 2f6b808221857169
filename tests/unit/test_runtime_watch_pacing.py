"""When a Node watch is read at once and when it is left to gather events (``ReadPacer``),
and which watches are never held."""

from __future__ import annotations

import pytest

from machinepool.api.kinds import MACHINE_POOLS, MACHINES
from machinepool.runtime import CONFIGMAPS, LEASES, NODES
from machinepool.runtime.client import (
    WATCH_BATCH_EVENTS,
    WATCH_BATCH_WINDOW,
    WATCH_BUSY_RATE,
    WATCH_MAX_HOLD,
    ReadPacer,
    reports_on_a_timer,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def events(pacer: ReadPacer, clock: Clock, rate: float, seconds: float) -> None:
    """``rate`` events a second for ``seconds``, evenly spaced."""
    for _ in range(round(rate * seconds)):
        clock.now += 1 / rate
        pacer.seen()


def test_a_quiet_stream_is_read_at_once() -> None:
    clock = Clock()
    pacer = ReadPacer(clock)
    events(pacer, clock, rate=2, seconds=30)
    assert pacer.hold() == 0.0


def test_a_burst_shorter_than_the_window_is_read_at_once() -> None:
    """A reconcile writing 25 objects at once is not a busy stream: its next event is news."""
    clock = Clock()
    pacer = ReadPacer(clock)
    clock.now += WATCH_BATCH_WINDOW / 2
    for _ in range(int(WATCH_BUSY_RATE * WATCH_BATCH_WINDOW) - 1):
        pacer.seen()
    clock.now += WATCH_BATCH_WINDOW
    assert pacer.hold() == 0.0


@pytest.mark.parametrize("rate", [33.3, 20.0])
def test_ten_thousand_kubelets_reports_are_gathered_for_the_longest_hold(rate: float) -> None:
    clock = Clock()
    pacer = ReadPacer(clock)
    events(pacer, clock, rate=rate, seconds=3 * WATCH_BATCH_WINDOW)
    assert pacer.hold() == WATCH_MAX_HOLD


def test_a_faster_stream_is_held_for_a_few_events_only() -> None:
    """At 1,000 events a second the server's buffers hold a few events, never 200."""
    clock = Clock()
    pacer = ReadPacer(clock)
    events(pacer, clock, rate=1000, seconds=3 * WATCH_BATCH_WINDOW)
    assert pacer.hold() == pytest.approx(WATCH_BATCH_EVENTS / 1000, rel=0.05)


def test_a_stream_that_falls_quiet_is_read_at_once_again() -> None:
    clock = Clock()
    pacer = ReadPacer(clock)
    events(pacer, clock, rate=50, seconds=3 * WATCH_BATCH_WINDOW)
    assert pacer.hold() > 0
    events(pacer, clock, rate=1, seconds=2 * WATCH_BATCH_WINDOW)
    assert pacer.hold() == 0.0
    clock.now += 10 * WATCH_BATCH_WINDOW  # silence
    assert pacer.hold() == 0.0


def test_only_node_watches_are_batched() -> None:
    """Kubelets report on a timer; every other kind's events are what a reconcile waits for."""
    assert reports_on_a_timer(NODES)
    assert not any(reports_on_a_timer(r) for r in (CONFIGMAPS, MACHINE_POOLS, MACHINES, LEASES))
