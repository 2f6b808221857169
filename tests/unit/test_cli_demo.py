"""The demo's pool boots as a cloud's does: quick by default, 20-60 s with --realistic."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from typer.testing import CliRunner

from machinepool.api.infra_sim import SIM_MACHINE_POOLS
from machinepool.api.views import SimSettingsView
from machinepool.cli.app import app
from machinepool.cli.demo import QUICK_BOOT, REALISTIC_BOOT, example_objects
from machinepool.providers.sim.backend import SimPoolSettings


def boot_delays(boot: dict[str, int]) -> list[float]:
    (sim,) = [
        o for r, o in example_objects("ns", 3, "v1.34.4", boot=boot) if r == SIM_MACHINE_POOLS
    ]
    settings = SimPoolSettings(SimSettingsView(sim["spec"]["sim"]))
    now, rng = datetime(2026, 11, 26, tzinfo=UTC), random.Random(7)
    return [(settings.fate(now, rng)[0] - now).total_seconds() for _ in range(200)]


def test_the_demo_pool_boots_in_one_to_three_seconds_each_its_own() -> None:
    delays = boot_delays(QUICK_BOOT)
    assert 1 <= min(delays) < 1.5
    assert 2.5 < max(delays) <= 3


def test_the_realistic_demo_pool_boots_in_twenty_to_sixty_seconds() -> None:
    delays = boot_delays(REALISTIC_BOOT)
    assert 20 <= min(delays) < 25
    assert 55 < max(delays) <= 60


def test_realistic_is_a_demo_option() -> None:
    result = CliRunner().invoke(app, ["demo", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--realistic" in result.output
    assert "20-60 s" in result.output
