"""Unit tests of the soak benchmark's pure parts: slope, flatness, /proc descriptor parsing."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from mpbench.soak import Tolerance, slope, summarize, table, verdict
from mpbench.stats import TCP_ESTABLISHED, parse_net_tcp, read_open_files, socket_inodes


def test_slope_is_the_least_squares_fit() -> None:
    assert slope([(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]) == pytest.approx(2.0)
    assert slope([(0.0, 5.0), (10.0, 4.0), (20.0, 5.0), (30.0, 4.0)]) == pytest.approx(-0.02)
    assert slope([(0.0, 7.0)]) == 0.0
    assert slope([(3.0, 1.0), (3.0, 9.0)]) == 0.0  # no time spread: nothing to fit


def test_a_steady_climb_grew_and_reports_its_rate_per_hour() -> None:
    points = [(t * 60.0, 100.0 + t) for t in range(61)]  # +1 MiB a minute for an hour
    s = summarize(points, Tolerance(absolute=4.0, relative=0.05))
    assert (s.first, s.last, s.low, s.high, s.samples) == (100.0, 160.0, 100.0, 160.0, 61)
    assert s.slope_per_hour == pytest.approx(60.0)
    assert s.growth == pytest.approx(60.0)
    assert s.grew


def test_noise_and_a_late_spike_are_flat() -> None:
    noise = [(t * 60.0, 100.0 + (3.0 if t % 2 else -3.0)) for t in range(60)]
    assert not summarize(noise, Tolerance(absolute=4.0)).grew
    spike = [(t * 60.0, 100.0) for t in range(59)] + [(3540.0, 130.0)]
    s = summarize(spike, Tolerance(absolute=4.0))
    assert s.last - s.first == 30.0
    assert not s.grew, "one sample high at the end is a spike, not a trend"


def test_growth_that_came_back_down_is_flat() -> None:
    hump = [(0.0, 10.0), (60.0, 20.0), (120.0, 30.0), (180.0, 20.0), (240.0, 10.5)]
    s = summarize(hump, Tolerance(absolute=1.0))
    assert not s.grew
    assert not s.rose


def test_a_step_up_early_then_flat_rose_but_did_not_grow() -> None:
    step = [(t * 60.0, 16.0 if t < 3 else 19.0) for t in range(20)]  # a pool warming up
    s = summarize(step, Tolerance(absolute=2.0))
    assert s.slope_per_hour > 0
    assert s.late_slope_per_hour == 0.0
    assert (s.grew, s.rose) == (False, True)
    assert verdict({"core: sockets": s}).endswith(
        "(1 rose early, then stayed flat: core: sockets)."
    )


def test_tolerance_is_the_larger_of_absolute_and_relative() -> None:
    assert Tolerance(absolute=4.0, relative=0.05).of(200.0) == 10.0
    assert Tolerance(absolute=4.0, relative=0.05).of(20.0) == 4.0
    up_by_eight = [(0.0, 200.0), (60.0, 204.0), (120.0, 208.0)]
    assert not summarize(up_by_eight, Tolerance(absolute=4.0, relative=0.05)).grew
    assert summarize(up_by_eight, Tolerance(absolute=4.0)).grew


def test_exact_series_grow_by_one_object_a_cycle() -> None:
    exact = Tolerance(absolute=0.5)
    stray_each_cycle = [(t * 60.0, 12.0 + t) for t in range(6)]
    assert summarize(stray_each_cycle, exact).grew
    one_stray = summarize([(0.0, 12.0), (60.0, 12.0), (120.0, 13.0), (180.0, 13.0)], exact)
    assert (one_stray.grew, one_stray.rose) == (False, True), "seen, but not a trend"
    assert not summarize([(0.0, 12.0), (60.0, 12.0)], exact).grew


def test_summarize_orders_by_time_and_refuses_nothing() -> None:
    s = summarize([(60.0, 2.0), (0.0, 1.0)], Tolerance(absolute=0.5))
    assert (s.first, s.last) == (1.0, 2.0)
    with pytest.raises(ValueError, match="no samples"):
        summarize([], Tolerance(absolute=1.0))


def test_table_and_verdict_name_what_grew() -> None:
    flat = summarize([(0.0, 5.0), (3600.0, 5.0)], Tolerance(absolute=1.0))
    grows = summarize([(0.0, 5.0), (1800.0, 7.0), (3600.0, 9.0)], Tolerance(absolute=1.0))
    summaries = {"core: asyncio tasks": flat, "core: open fds": grows}
    text = table(summaries, {"core: open fds": 11.0})
    assert "| core: asyncio tasks | 2 | 5 | 5 | 5 | 5 | - | 0 | 0 | no |" in text
    assert "| core: open fds | 3 | 5 | 9 | 5 | 9 | 11 | +4 | +4 | **yes** |" in text
    assert verdict(summaries) == "1 of 2 series grew: core: open fds (+4 per hour)."
    assert verdict({"a": flat}).startswith("Nothing grew")


def test_net_tcp_and_fd_links_parse() -> None:
    text = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"
        "  timeout inode\n"
        "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000"
        "        0 4242 1 0000000000000000 100 0 0 10 0\n"
        "   1: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000"
        "        0 4343 1 0000000000000000 20 4 30 10 -1\n"
    )
    assert parse_net_tcp(text) == {4242: ("0A", 0), 4343: (TCP_ESTABLISHED, 8080)}
    links = ["/dev/null", "socket:[4343]", "pipe:[77]", "socket:[9]", "anon_inode:[eventpoll]"]
    assert socket_inodes(links) == {4343, 9}


def test_read_open_files_sees_a_connection_of_this_process() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    before = read_open_files(os.getpid())
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    try:
        after = read_open_files(os.getpid())
        assert after.fds - before.fds == 2
        assert after.sockets - before.sockets == 2
        assert after.tcp_established - before.tcp_established == 2  # both ends are ours
        port = server.getsockname()[1]
        assert after.established.get(port, 0) - before.established.get(port, 0) == 1
    finally:
        for s in (client, accepted, server):
            s.close()
    with pytest.raises(ProcessLookupError):
        read_open_files(2**22 + 1)
