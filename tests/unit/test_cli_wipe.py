"""``machinepool wipe``: the clean start after ``down``, and never under a running environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from machinepool.cli import local
from machinepool.cli.app import app


def _home_with_data(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "controlplane" / "etcd").mkdir(parents=True)
    (home / "logs").mkdir()
    (home / "local.log").write_text("log\n")
    return home


def test_wipe_refuses_while_the_environment_runs(tmp_path: Path) -> None:
    home = _home_with_data(tmp_path)
    local.State(pid=os.getpid(), phase="ready").write(home)  # this process stands in for it
    result = CliRunner().invoke(app, ["wipe", "--home", str(home)])
    assert result.exit_code != 0
    assert "machinepool down" in result.output
    assert (home / "controlplane" / "etcd").is_dir()
    with pytest.raises(RuntimeError, match="'machinepool down' first"):
        local.wipe(home)


def test_wipe_after_down_removes_every_kept_item(tmp_path: Path) -> None:
    home = _home_with_data(tmp_path)
    local.State(pid=2**22 + 12345, phase="stopped").write(home)  # no such process
    result = CliRunner().invoke(app, ["wipe", "--home", str(home)])
    assert result.exit_code == 0, result.output
    assert "removed 4 item(s)" in result.output
    assert sorted(p.name for p in home.iterdir()) == []
