"""The reliability suite's own figures, written to a markdown file on request.

docs/reliability.md used to carry a table typed by hand, which drifted from the code within a
few commits. Instead each scenario records what it measured (``report.record("failovers", 3)``
through the ``report`` fixture of conftest.py) and, when the run asks for it with
``--reliability-report=PATH`` or ``$MACHINEPOOL_RELIABILITY_REPORT``, the session writes one
table with the git revision and the exact command, so every figure can be traced and
reproduced. Without the opt-in, recording costs nothing and writes nothing.

Under pytest-xdist (``make test``) each worker keeps the figures of the files it ran and hands
them to the controller when it stops (``worker_output`` / ``merge``, called from
tests/conftest.py, the one conftest the controller loads), which writes the one file. CI sets
the variable (``.ci/run``), so every CI run leaves the report of the code it ran.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
REPORT_ENV = "MACHINEPOOL_RELIABILITY_REPORT"
_ENV_SHOWN = (REPORT_ENV, "RELIABILITY_SCALE", "RELIABILITY_POOLS", "RELIABILITY_POOL_SIZE")
"""Variables that change what the suite does or writes, repeated in the command line."""


@dataclass
class Scenario:
    """One test's figures, in the order it recorded them, and how the test ended."""

    nodeid: str
    figures: list[tuple[str, str]] = field(default_factory=list)
    outcome: str = "not run"
    seconds: float = 0.0


@dataclass
class Report:
    """Figures of every scenario of one session."""

    scenarios: dict[str, Scenario] = field(default_factory=dict)
    revision: str = field(default_factory=lambda: git_revision())
    """Read when the session starts: what was measured, whatever is edited meanwhile."""

    def scenario(self, nodeid: str) -> Scenario:
        return self.scenarios.setdefault(nodeid, Scenario(nodeid))

    def worker_output(self) -> list[dict[str, Any]]:
        """This process's scenarios as plain data, which pytest-xdist carries to its controller."""
        return [asdict(s) for s in self.scenarios.values()]

    def merge(self, scenarios: list[dict[str, Any]]) -> None:
        """Take a worker's scenarios (each file runs on one worker, so no two overlap)."""
        for data in scenarios:
            figures = [(str(f), str(v)) for f, v in data["figures"]]
            self.scenarios[data["nodeid"]] = Scenario(
                data["nodeid"], figures, data["outcome"], float(data["seconds"])
            )

    def write(self, path: Path) -> None:
        """The report at ``path``, when any scenario of the suite ran."""
        if not self.scenarios:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.render(command_line()))

    def render(self, command: str) -> str:
        """The markdown file: provenance first, then one row per figure."""
        lines = [
            "# Reliability figures (generated)",
            "",
            "Written by the reliability suite itself (`tests/reliability/report.py`); do not edit",
            "by hand: rerun the command below to refresh it. What each scenario checks is in",
            "[reliability.md](reliability.md).",
            "",
            "| | |",
            "|---|---|",
            f"| command | `{command}` |",
            f"| revision | {self.revision} |",
            f"| written | {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} |",
            f"| machine | {os.cpu_count()} cores, Python {platform.python_version()} |",
            "",
            "| scenario | outcome | wall time | figure | value |",
            "|---|---|---|---|---|",
        ]
        for scenario in sorted(self.scenarios.values(), key=lambda s: s.nodeid):
            name = f"`{scenario.nodeid.removeprefix('tests/reliability/')}`"
            head = [name, scenario.outcome, f"{scenario.seconds:.0f} s"]
            for figure, value in scenario.figures or [("", "")]:
                lines.append("| " + " | ".join([*head, figure, value]) + " |")
                head = ["", "", ""]
        return "\n".join(lines) + "\n"


class Recorder:
    """What a test sees: ``record(figure, value)`` into its own scenario."""

    def __init__(self, scenario: Scenario) -> None:
        self._scenario = scenario

    def record(self, figure: str, value: object) -> None:
        """Keep ``figure`` = ``value``; floats are shown with one decimal."""
        text = f"{value:.1f}" if isinstance(value, float) else str(value)
        self._scenario.figures.append((figure, text))


def git_revision() -> str:
    """``git <short sha>``, marked ``(modified)`` when the work tree differs from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    sha = git("rev-parse", "--short", "HEAD") or "?"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"git {sha}" + (" (modified)" if dirty else "")


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that ran this session (``argv``, else this process's), as typed from the
    repository root."""
    env = [f"{k}={shlex.quote(os.environ[k])}" for k in _ENV_SHOWN if k in os.environ]
    argv = list(sys.argv if argv is None else argv)
    program = Path(argv[0])
    if program.is_absolute() and program.is_relative_to(REPO):
        argv[0] = str(program.relative_to(REPO))
    return " ".join([*env, *(shlex.quote(a) for a in argv)])


FIGURES = Report()
"""This process's figures: its session's scenarios, and on pytest-xdist's controller every
worker's."""


def report_path(option: str | None = None) -> Path | None:
    """Where the figures go: the option's value, else ``$MACHINEPOOL_RELIABILITY_REPORT``."""
    value = option or os.environ.get(REPORT_ENV)
    return Path(value) if value else None
