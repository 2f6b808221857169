"""``--help`` is written for people: no reStructuredText markup shows through."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from machinepool.cli.app import app

COMMANDS = [
    [],
    ["up"],
    ["down"],
    ["status"],
    ["wipe"],
    ["demo"],
    ["run"],
    ["get", "pools"],
    ["describe", "pool"],
    ["scale"],
    ["rollout", "status"],
    ["timeline"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "machinepool")
def test_help_has_no_rst_literals(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "``" not in result.output
    assert "Usage" in result.output
