"""``machinepool demo --teardown`` runs start to finish, as the README's first command does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from machinepool.cli.local import State


def test_demo_runs_start_to_finish_and_tears_down(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "MACHINEPOOL_HOME": str(home)}
    env.pop("KUBECONFIG", None)
    result = subprocess.run(
        [sys.executable, "-m", "machinepool", "demo", "--teardown", "--timeout", "240"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    for step in (
        "1. create demo-pool: 3 x v1.33.4",
        "2. scale 3 -> 5",
        "3. roll v1.33.4 -> v1.34.4",
    ):
        assert step in output
    assert "MachinePool/demo-pool  Running  ready 5/5  up-to-date 5  v1.34.4=5" in output
    assert output.count("Node/demo-pool") == 5
    assert "torn down" in output
    state = State.read(home)
    assert state is not None
    assert state.phase == "stopped"
    for name, pid in state.processes.items():
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().split()[2] == "Z", f"{name} still runs"
