"""Unit tests of bench/mpbench/stats.py: the pure figures the MachinePool benchmark reports."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from mpbench.stats import (
    AuditLog,
    agent_of,
    by_verb,
    count_audit_lines,
    hot_frames,
    parse_proc_stat,
    parse_proc_status,
    percentile,
    prom_by_label,
    prom_sum,
    writes,
    writes_by_resource,
)


def test_percentile_interpolates_between_ranks() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([3.0], 99) == 3.0
    assert percentile([5.0, 1.0], 0) == 1.0


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"within 0\.\.100"):
        percentile([1.0], 101)


def test_proc_stat_counts_fields_after_a_command_with_spaces() -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    fields = ["S"] + ["0"] * 10 + [str(3 * ticks), str(ticks)] + ["0"] * 30
    text = "1234 (python -m (odd) name) " + " ".join(fields)
    assert parse_proc_stat(text) == pytest.approx(4.0)


def test_proc_stat_of_this_process_is_positive() -> None:
    assert parse_proc_stat(Path("/proc/self/stat").read_text()) > 0


def test_proc_status_reads_rss_and_peak_in_bytes() -> None:
    text = "Name:\tpython\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n"
    assert parse_proc_status(text) == (1024 * 1024, 2048 * 1024)
    assert parse_proc_status("Name:\tzombie\n") == (0, 0)


PROM = """\
# HELP controller_runtime_reconcile_total Total number of reconciliations per controller
# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="machinepool",result="success"} 7
controller_runtime_reconcile_total{controller="machinepool",result="requeue_after"} 2
controller_runtime_reconcile_total{controller="machine",result="success"} 1
"""


def test_prometheus_sums_by_label_and_filter() -> None:
    by = prom_by_label(PROM, "controller_runtime_reconcile_total", ["controller"])
    assert by == {("machinepool",): 9.0, ("machine",): 1.0}
    assert prom_sum(PROM, "controller_runtime_reconcile_total", {"result": "success"}) == 8.0
    assert prom_sum(PROM, "missing_total") == 0.0


def _event(user: str, agent: str, verb: str, resource: str = "machines") -> str:
    return json.dumps(
        {
            "kind": "Event",
            "user": {"username": user},
            "userAgent": agent,
            "verb": verb,
            "objectRef": {"resource": resource},
        }
    )


def test_audit_counts_by_user_agent_verb_and_resource() -> None:
    lines = [
        _event("bench-core", "cluster-api-controller-manager/v1.14.2 (linux/amd64)", "patch"),
        _event("bench-core", "cluster-api-controller-manager/v1.14.2 (linux/amd64)", "list"),
        _event("bench-infra", "machinepool-controller", "create"),
        "not json",
        json.dumps({"kind": "Other"}),
    ]
    lines.append(_event("bench-infra", "machinepool-controller", "create", "tokenreviews"))
    counts = count_audit_lines(lines)
    assert counts[("bench-core", "cluster-api-controller-manager", "patch", "machines")] == 1
    assert sum(counts.values()) == 4
    assert writes(counts) == 2, "a TokenReview is created but never stored: not a write"
    assert writes(counts, "bench-core") == 1
    assert by_verb(counts, "bench-core") == {"patch": 1, "list": 1}
    assert writes_by_resource(counts) == {
        "bench-core patch machines": 1,
        "bench-infra create machines": 1,
    }


def test_agent_is_the_product_token() -> None:
    assert agent_of("kubectl/v1.34.4 (linux/amd64) kubernetes/abc") == "kubectl"
    assert agent_of("machinepool-clustercache") == "machinepool-clustercache"
    assert agent_of("") == "-"


def test_audit_log_reads_only_new_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = AuditLog(path)
    assert sum(log.read().values()) == 0
    path.write_text(_event("a", "x", "get") + "\n" + _event("a", "x", "get")[:10])
    assert sum(log.read().values()) == 1
    with path.open("a") as f:
        f.write(_event("a", "x", "get")[10:] + "\n")
    assert sum(log.read().values()) == 1
    assert sum(log.read().values()) == 0


def test_hot_frames_share_of_samples_inclusive_once_per_sample() -> None:
    collapsed = [
        "main (a.py:1);loop (machinepool/x.py:5);loop (machinepool/x.py:5) 3",
        "main (a.py:1);idle (b.py:2) 1",
        "garbage",
    ]
    assert hot_frames(collapsed, "machinepool/") == [("loop (machinepool/x.py:5)", 0.75)]
    assert hot_frames(collapsed)[0] == ("main (a.py:1)", 1.0)
    assert hot_frames([]) == []
