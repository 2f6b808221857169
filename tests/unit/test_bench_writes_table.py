"""Unit test of bench/bench_machinepool.py's "Where the writes went" table: every writer, not
the first dozen, with its share of the writes per Node the scenario reports."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_machinepool import _writes_table


def test_the_table_lists_every_writer_with_its_writes_per_node_over_all_steps() -> None:
    writers = {f"user-{i} patch kind{i}": 20 - i for i in range(15)}
    result = {
        "steps": [
            {"nodes_changed": 8, "writes_per_node": 3.0, "writes_by_resource": writers},
            {
                "nodes_changed": 2,
                "writes_per_node": 5.0,
                "writes_by_resource": {"user-0 patch kind0": 10},
            },
        ],
        "idle": {"idle_writes_by_resource": {"admin patch nodes/status": 3}},
    }

    lines = _writes_table(result).splitlines()

    rows = [line for line in lines if line.startswith("| user-")]
    assert len(rows) == 15
    assert rows[0] == "| user-0 patch kind0 | 30 | 3.00 |"
    assert rows[-1] == "| user-14 patch kind14 | 6 | 0.60 |"
    assert lines[-1] == "Idle window: admin patch nodes/status 3"


def test_a_side_cut_off_by_the_timeout_shows_no_writes_per_node() -> None:
    result = {
        "steps": [
            {
                "nodes_changed": 10,
                "writes_per_node": None,
                "writes_by_resource": {"bench-core patch machines": 4},
            }
        ]
    }

    assert "| bench-core patch machines | 4 | - |" in _writes_table(result)
