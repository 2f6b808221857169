"""Component options: one dataclass per component, every field a ``machinepool run`` flag, and a
misspelt option refused by name instead of dropped."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import typer
from typer.testing import CliRunner

from machinepool import app as app_pkg
from machinepool.app import (
    COMPONENTS,
    FLAGS,
    Flag,
    LeaseTiming,
    Options,
    component_options,
    process,
)
from machinepool.cli.app import app


def _given(flag: Flag) -> tuple[str, object]:
    """A value unlike the default, as typed on the command line and as the field holds it."""
    if flag.type is bool:
        assert flag.default is False, "a True default would need --no-<flag>"
        return "", True
    if flag.type is tuple:
        return "x,y", ("x", "y")
    if flag.type is float:
        return "1.5", 1.5
    assert flag.type in (int, str)
    return "7", flag.type("7")


def _run(args: list[str], monkeypatch: pytest.MonkeyPatch) -> Options:
    """``machinepool run args`` up to the point where the process would start."""
    seen: list[Options] = []
    monkeypatch.setattr(app_pkg, "run", seen.append)
    result = CliRunner().invoke(app, ["run", *args])
    assert result.exit_code == 0, result.output
    (options,) = seen
    return options


def test_a_misspelt_option_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"token_ttl_secs \(--token-ttl-secs\)"):
        component_options({"token_ttl_secs": 60})


def test_a_misspelt_flag_is_refused_by_name() -> None:
    result = CliRunner().invoke(app, ["run", "--token-ttl-secs=60"])
    assert result.exit_code == 2
    assert "--token-ttl-secs" in result.output


def test_a_value_of_the_wrong_type_is_refused_by_flag() -> None:
    with pytest.raises(ValueError, match=r"--token-ttl-seconds: expected int, got .soon."):
        component_options({"token_ttl_seconds": "soon"})


@pytest.mark.parametrize("flag", FLAGS, ids=lambda f: f.name)
def test_every_field_is_a_flag_that_reaches_its_component(
    flag: Flag, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, value = _given(flag)
    options = _run([flag.name, text] if text else [flag.name], monkeypatch)
    assert getattr(getattr(options, flag.component), flag.field) == value
    untouched = dataclasses.replace(getattr(options, flag.component), **{flag.field: flag.default})
    assert untouched == COMPONENTS[flag.component].options()


def test_flags_cover_every_field_of_every_component_once() -> None:
    fields = [
        (name, f.name)
        for name, component in COMPONENTS.items()
        for f in dataclasses.fields(component.options)
        # Set from a feature gate, not a flag of its own (CoreOptions.pool_node_taints).
        if f.metadata.get("flag") is not False
    ]
    assert [(f.component, f.field) for f in FLAGS] == fields
    names = [f.name for f in FLAGS]
    assert len(names) == len(set(names)), "a flag name shared by two components"
    command = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    process_flags = {o for p in command.params for o in p.opts}
    assert not process_flags & set(names), "a component flag shadows a process flag"
    assert all(f.help for f in FLAGS), "every field has a docstring, shown as its help"


@pytest.mark.parametrize("name", COMPONENTS)
def test_setup_takes_its_options_dataclass_and_nothing_else(name: str) -> None:
    component = COMPONENTS[name]
    assert dataclasses.is_dataclass(component.options)
    assert component.options.__dataclass_params__.frozen  # type: ignore[attr-defined]
    params = inspect.signature(component.setup).parameters
    assert [p.kind for p in params.values()] == [inspect.Parameter.POSITIONAL_OR_KEYWORD] * 3
    assert getattr(Options(), name) == component.options()


def test_the_operator_guide_lists_every_component_flag() -> None:
    from pathlib import Path

    guide = (Path(__file__).parents[2] / "docs/operator-guide.md").read_text()
    missing = [f.name for f in FLAGS if f"| `{f.name}` | {f.component} |" not in guide]
    assert not missing, f"docs/operator-guide.md 'Component options' lacks {missing}"


def test_lease_timing_flags_time_every_lease_the_process_takes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timing = ["--leader-elect-lease-duration=6", "--leader-elect-renew-deadline=4"]
    options = _run([*timing, "--leader-elect-retry-period=0.5"], monkeypatch)
    assert options.lease_timing == LeaseTiming(6.0, 4.0, 0.5)
    sharded = dataclasses.replace(options, sharding=True, shard_name="s1")
    for election in (process._election(options), process._election(sharded)):
        assert election is not None
        assert (election.lease_duration, election.renew_deadline, election.retry_period) == (
            6.0,
            4.0,
            0.5,
        )
    assert _run([], monkeypatch).lease_timing == LeaseTiming(15.0, 10.0, 2.0)


def test_lease_timings_out_of_order_are_refused() -> None:
    result = CliRunner().invoke(app, ["run", "--leader-elect-renew-deadline=20"])
    assert result.exit_code != 0
    assert "--leader-elect-renew-deadline" in result.output
