"""Unit tests of bench/mpbench/report.py: how a benchmark's figures reach RESULTS.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from mpbench import report


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "RESULTS.md"
    path.write_text(
        "header\n\n<!-- bench:latency -->\nold latency\n<!-- /bench:latency -->\n\n"
        "<!-- bench:findings -->\nby hand\n<!-- /bench:findings -->\n"
    )
    monkeypatch.setattr(report, "RESULTS", path)
    monkeypatch.setattr(report, "OUT", tmp_path / "out")
    return path


def test_publish_rewrites_its_section_keeps_the_others_and_the_raw_figures(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report.publish("latency", "new latency", "python bench/x.py", data={"p99": 1}, results=True)

    text = results.read_text()
    assert "new latency" in text
    assert "old latency" not in text
    assert "<!-- bench:findings -->\nby hand\n<!-- /bench:findings -->" in text
    assert "python bench/x.py" in text
    (raw,) = (results.parent / "out").glob("*-latency.json")
    assert json.loads(raw.read_text()) == {"p99": 1}
    assert "new latency" in capsys.readouterr().out


def test_publish_with_no_results_prints_and_leaves_results_alone(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = results.read_text()

    report.publish("latency", "new latency", "python bench/x.py", results=False)

    assert results.read_text() == before
    assert not (results.parent / "out").exists()
    assert "new latency" in capsys.readouterr().out
