"""The README's first command, as a user meets it: ``machinepool demo --teardown`` twice in
one home, with ``up``/``down`` between, then ``wipe``.

- the demo runs start to finish, and again in the same home (the second ``up`` finds the
  first run's etcd data and CRDs, whose conversion the controllers had pointed at their
  webhook server);
- ``up`` after ``down`` brings the user's pool back as a restarted cluster would: Running,
  every replica Ready, on the version it had;
- every ``down`` stops the controllers gracefully (each "manager started" in their log has
  its "manager stopped"): a child that never sees its SIGTERM is SIGKILLed after a timeout,
  which is what made ``down`` take half a minute;
- ``wipe`` removes the data, and the environment is gone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from machinepool.cli.local import State


def _machinepool(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "machinepool", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )


def _demo(env: dict[str, str]) -> str:
    result = _machinepool(env, "demo", "--teardown", "--timeout", "240")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    for step in (
        "1. create demo-pool: 3 x v1.33.4",
        "2. scale 3 -> 5",
        "3. roll v1.33.4 -> v1.34.4",
    ):
        assert step in output
    assert "MachinePool/demo-pool  Running  ready 5/5  up-to-date 5  v1.34.4=5" in output
    # Nodes are named after their instances' hostnames (the demo's KubeadmConfig renders
    # nodeRegistration.name from the instance metadata), not after the instances.
    assert len(re.findall(r"Node/ip-[0-9-]+\.sim\.internal\b", output)) == 5
    assert "Node/demo-pool" not in output
    assert "torn down" in output
    return output


def _all_stopped(home: Path) -> None:
    state = State.read(home)
    assert state is not None
    assert state.phase == "stopped"
    for name, pid in state.processes.items():
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().split()[2] == "Z", f"{name} still runs"
    for child in ("controllers", "kubelet"):
        log = (home / "logs" / f"{child}.log").read_text()
        started, stopped = log.count("manager started"), log.count("manager stopped")
        assert started > 0
        assert stopped == started, f"{child}: {started} starts but {stopped} graceful stops"


def test_demo_twice_in_one_home_with_a_restart_between(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "MACHINEPOOL_HOME": str(home)}
    env.pop("KUBECONFIG", None)

    _demo(env)
    _all_stopped(home)

    up = _machinepool(env, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        pools = _machinepool(env, "get", "pools")
        row = next(line for line in pools.stdout.splitlines() if line.startswith("demo-pool"))
        assert row.split()[2:8] == ["Running", "5", "5", "5", "5", "5"], pools.stdout
        assert "v1.34.4=5" in row
    finally:
        down = _machinepool(env, "down")
    assert down.stdout.strip() == "stopped"
    _all_stopped(home)

    _demo(env)
    _all_stopped(home)

    wiped = _machinepool(env, "wipe")
    assert wiped.returncode == 0, wiped.stderr
    assert not (home / "controlplane").exists()
    assert _machinepool(env, "status").returncode == 1
