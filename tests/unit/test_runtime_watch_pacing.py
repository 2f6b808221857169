"""When a Node watch is read at once and when it is left to gather events (``ReadPacer``),
which watches are never held, and a held read whose TLS connection closes meanwhile."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from machinepool.api.kinds import MACHINE_POOLS, MACHINES
from machinepool.runtime import CONFIGMAPS, LEASES, NODES, pki
from machinepool.runtime.kube.client import (
    WATCH_BATCH_EVENTS,
    WATCH_BATCH_WINDOW,
    WATCH_BUSY_FOR,
    WATCH_BUSY_RATE,
    WATCH_MAX_HOLD,
    ReadPacer,
    _unread_for,
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


BUSY_LONG = WATCH_BUSY_FOR + 2 * WATCH_BATCH_WINDOW
"""Long enough for a busy stream's reads to be held."""


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
    events(pacer, clock, rate=rate, seconds=BUSY_LONG)
    assert pacer.hold() == WATCH_MAX_HOLD


def windows(pacer: ReadPacer, clock: Clock, rates: list[float]) -> None:
    """One whole window at each of ``rates`` events a second, in turn, each window's events
    inside it (the clock ends on the last window's end)."""
    for rate in rates:
        start, count = clock.now, round(rate * WATCH_BATCH_WINDOW)
        for i in range(count):
            clock.now = start + (i + 0.5) * WATCH_BATCH_WINDOW / count
            pacer.seen()
        clock.now = start + WATCH_BATCH_WINDOW


def test_a_stream_busy_for_a_while_is_read_at_once() -> None:
    """Churn (a scale-up, the latency trials) makes a Node watch busy for a while; its events
    are what a reconcile waits for, so they are not held until the watch is busy on average
    over ``WATCH_BUSY_FOR``."""
    clock = Clock()
    pacer = ReadPacer(clock)
    busy = round(WATCH_BUSY_FOR / WATCH_BATCH_WINDOW)
    windows(pacer, clock, [25] * (busy // 2))
    assert pacer.hold() == 0.0
    windows(pacer, clock, [25] * busy)
    assert pacer.hold() == WATCH_MAX_HOLD


def test_busy_windows_now_and_then_are_read_at_once() -> None:
    """The latency trials: one Node after another, a window busy now and then."""
    clock = Clock()
    pacer = ReadPacer(clock)
    windows(pacer, clock, [25, 5, 5] * 20 + [25])
    assert pacer.hold() == 0.0


def test_uneven_reports_busy_on_average_are_held() -> None:
    """A pool's Nodes, made together, report together: a few windows bring many reports and
    most bring few; over ``WATCH_BUSY_FOR`` they are busy all the same, quiet windows too."""
    clock = Clock()
    pacer = ReadPacer(clock)
    windows(pacer, clock, [100, 4, 4, 4] * 10)
    assert pacer.hold() == WATCH_MAX_HOLD
    windows(pacer, clock, [100])
    assert pacer.hold() == pytest.approx(WATCH_BATCH_EVENTS / 100)  # never more than a few


def test_a_faster_stream_is_held_for_a_few_events_only() -> None:
    """At 1,000 events a second the server's buffers hold a few events, never 500."""
    clock = Clock()
    pacer = ReadPacer(clock)
    events(pacer, clock, rate=1000, seconds=BUSY_LONG)
    assert pacer.hold() == pytest.approx(WATCH_BATCH_EVENTS / 1000, rel=0.05)


def test_a_stream_that_falls_quiet_is_read_at_once_again() -> None:
    clock = Clock()
    pacer = ReadPacer(clock)
    events(pacer, clock, rate=50, seconds=BUSY_LONG)
    assert pacer.hold() > 0
    events(pacer, clock, rate=1, seconds=WATCH_BUSY_FOR)
    assert pacer.hold() == 0.0
    clock.now += 10 * WATCH_BUSY_FOR  # silence
    assert pacer.hold() == 0.0


def test_only_node_watches_are_batched() -> None:
    """Kubelets report on a timer; every other kind's events are what a reconcile waits for."""
    assert reports_on_a_timer(NODES)
    assert not any(reports_on_a_timer(r) for r in (CONFIGMAPS, MACHINE_POOLS, MACHINES, LEASES))


async def _closed_while_unread(tmp_path: Path) -> None:
    ca = pki.new_ca("test-ca")
    crt, key = pki.issue(ca, "localhost", ip_addresses=("127.0.0.1",), server=True).write(
        tmp_path, "server"
    )
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(crt, key)
    server_sides: list[asyncio.StreamWriter] = []

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server_sides.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0, ssl=serving)
    port = server.sockets[0].getsockname()[1]
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    trusting = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=trusting)
    try:
        waiting = asyncio.create_task(_unread_for(writer.transport, 0.2))
        await asyncio.sleep(0)  # the task runs until its wait: reading is paused
        writer.transport.abort()
        await waiting  # raised AttributeError from asyncio's TLS transport before the fix
        assert writer.transport.is_closing()
    finally:
        writer.close()
        for side in server_sides:
            side.close()
        server.close()
        await server.wait_closed()


def test_unread_wait_ends_quietly_when_the_connection_closes(tmp_path: Path) -> None:
    asyncio.run(_closed_while_unread(tmp_path))
