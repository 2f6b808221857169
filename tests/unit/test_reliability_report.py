"""The reliability report across pytest-xdist workers: what a worker hands on is what the
controller writes (tests/reliability/report.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.reliability.report import Recorder, Report


def test_figures_of_every_worker_reach_the_one_report(tmp_path: Path) -> None:
    workers = [Report(), Report()]
    for n, worker in enumerate(workers):
        scenario = worker.scenario(f"tests/reliability/test_{n}.py::test_it")
        Recorder(scenario).record("failovers", n + 1)
        Recorder(scenario).record("seconds", 1.34)
        scenario.outcome, scenario.seconds = "passed", 10.0 * (n + 1)
    controller = Report()
    for worker in workers:  # as pytest-xdist carries it: plain data, serialisable
        controller.merge(json.loads(json.dumps(worker.worker_output())))
    path = tmp_path / "report.md"
    controller.write(path)
    text = path.read_text()
    assert "| `test_0.py::test_it` | passed | 10 s | failovers | 1 |" in text
    assert "| `test_1.py::test_it` | passed | 20 s | failovers | 2 |" in text
    assert "|  |  |  | seconds | 1.3 |" in text
    assert f"| revision | {controller.revision} |" in text


def test_no_report_when_no_scenario_ran(tmp_path: Path) -> None:
    Report().write(tmp_path / "report.md")
    assert not (tmp_path / "report.md").exists()
