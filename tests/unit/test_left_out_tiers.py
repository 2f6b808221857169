"""A tier whose real binary cannot be had: left out with one line outside CI, a failed run
under ``CI=true`` (tests/conftest.py), both naming the command that builds it.

Each case collects the cluster-autoscaler's tests in a pytest of its own, with a cache of
its own and no autoscaler source or binary, so the binary cannot be had.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _collect(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"CI", "CLUSTER_AUTOSCALER", "CLUSTER_AUTOSCALER_SRC", "PYTEST_XDIST_WORKER"}
    }
    env["MACHINEPOOL_CACHE"] = str(tmp_path / "cache")
    if ci:
        env["CI"] = "true"
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    return subprocess.run(
        [*argv, "tests/e2e/autoscaler"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.mark.parametrize("ci", [False, True], ids=["outside-ci", "ci"])
def test_a_tier_that_cannot_be_had(tmp_path: Path, ci: bool) -> None:
    run = _collect(tmp_path, ci)
    out = run.stdout + run.stderr
    assert "left out" in out, out
    assert "cluster-autoscaler" in out, out
    assert "`bash hack/autoscaler/build.sh`" in out, "the note names the build command"
    if ci:
        assert run.returncode != 0, "under CI=true a left-out tier fails the run"
        assert "CI=true: a tier left out fails the run" in out
    else:
        assert run.returncode in (0, 5), out  # collected fine (5: every test left out)
