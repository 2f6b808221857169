"""Feature gate parsing: the --feature-gates flag, EXP_* env vars and defaults."""

from __future__ import annotations

import pytest

from machinepool.api.features import (
    MACHINE_POOL,
    MACHINE_POOL_NODE_TAINTS,
    MACHINE_TAINT_PROPAGATION,
    FeatureGateError,
    FeatureGates,
)


def test_defaults_match_upstream() -> None:
    gates = FeatureGates()
    assert gates.enabled(MACHINE_POOL)
    assert not gates.enabled(MACHINE_TAINT_PROPAGATION)
    assert not gates.enabled(MACHINE_POOL_NODE_TAINTS)  # ours: off until asked for
    assert not gates.enabled("NoSuchGate")


def test_our_gate_from_flag_and_env() -> None:
    assert FeatureGates.parse("MachinePoolNodeTaints=true").enabled(MACHINE_POOL_NODE_TAINTS)
    env = {"EXP_MACHINE_POOL_NODE_TAINTS": "true"}
    assert FeatureGates.parse("", env).enabled(MACHINE_POOL_NODE_TAINTS)


@pytest.mark.parametrize(
    ("spec", "expected"), [("MachinePool=false", False), ("MachinePool=true", True)]
)
def test_flag(spec: str, expected: bool) -> None:
    assert FeatureGates.parse(spec).enabled(MACHINE_POOL) is expected


def test_env_var_and_flag_precedence() -> None:
    assert not FeatureGates.parse("", {"EXP_MACHINE_POOL": "false"}).enabled(MACHINE_POOL)
    assert FeatureGates.parse("MachinePool=true", {"EXP_MACHINE_POOL": "false"}).enabled(
        MACHINE_POOL
    )
    assert FeatureGates.parse("", {"EXP_MACHINE_POOL": ""}).enabled(MACHINE_POOL)


def test_several_gates_and_spaces() -> None:
    gates = FeatureGates.parse(" MachinePool=false , MachineTaintPropagation=true ")
    assert not gates.enabled(MACHINE_POOL)
    assert gates.enabled(MACHINE_TAINT_PROPAGATION)
    assert str(gates) == (
        "MachinePool=false,MachinePoolNodeTaints=false,MachineTaintPropagation=true"
    )


@pytest.mark.parametrize(
    ("spec", "env", "message"),
    [
        (
            "Bogus=true",
            {},
            "unrecognized feature gate 'Bogus'; known gates: MachinePool, MachinePoolNodeTaints, "
            "MachineTaintPropagation",
        ),
        (
            "MachinePool",
            {},
            "missing value in 'MachinePool'; write MachinePool=true or MachinePool=false",
        ),
        (
            "MachinePool=maybe",
            {},
            "--feature-gates MachinePool: invalid value 'maybe'; use true or false",
        ),
        (
            "",
            {"EXP_MACHINE_POOL": "nope"},
            "environment variable EXP_MACHINE_POOL: invalid value 'nope'",
        ),
    ],
)
def test_bad_input_names_the_problem(spec: str, env: dict[str, str], message: str) -> None:
    with pytest.raises(FeatureGateError, match=message.replace("(", r"\(").replace(")", r"\)")):
        FeatureGates.parse(spec, env)


def test_with_gate_returns_a_copy() -> None:
    on = FeatureGates()
    off = on.with_gate(MACHINE_POOL, False)
    assert on.enabled(MACHINE_POOL)
    assert not off.enabled(MACHINE_POOL)
