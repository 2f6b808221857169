"""Rolling-update strategy parsing: defaults, rounding and the clear errors for bad input."""

from __future__ import annotations

import pytest

from machinepool.api.rollingupdate import scaled_value
from machinepool.providers.pool import DeletePolicy, InvalidStrategy, RollingUpdate, parse_strategy


def test_defaults_are_surge_one_unavailable_zero_oldest() -> None:
    parsed = parse_strategy(None)
    assert parsed == RollingUpdate(1, 0, DeletePolicy.OLDEST)
    assert parsed.resolve(5) == (1, 0)


@pytest.mark.parametrize(
    ("surge", "unavailable", "replicas", "expected"),
    [
        ("25%", "25%", 10, (3, 2)),  # surge rounds up, unavailable rounds down
        ("10%", "10%", 5, (1, 0)),
        ("100%", 0, 3, (3, 0)),
        (2, "50%", 3, (2, 1)),
        ("3", 1, 4, (3, 1)),
    ],
)
def test_percentages_round_like_deployments(
    surge: int | str, unavailable: int | str, replicas: int, expected: tuple[int, int]
) -> None:
    strategy = parse_strategy({"rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
    assert strategy.resolve(replicas) == expected


def test_both_rounding_to_zero_still_moves_one_at_a_time() -> None:
    strategy = parse_strategy({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "10%"}})
    assert strategy.resolve(5) == (0, 1)


@pytest.mark.parametrize("zero", [0, "0%", "0"])
def test_surge_and_unavailable_both_zero_is_rejected(zero: int | str) -> None:
    with pytest.raises(InvalidStrategy) as err:
        parse_strategy({"rollingUpdate": {"maxSurge": zero, "maxUnavailable": 0}})
    assert err.value.field == "spec.strategy.rollingUpdate"
    assert "maxSurge" in str(err.value)
    assert "at least 1" in str(err.value)


@pytest.mark.parametrize(
    ("rolling", "field"),
    [
        ({"maxSurge": -1}, "maxSurge"),
        ({"maxSurge": "lots"}, "maxSurge"),
        ({"maxUnavailable": "5 %"}, "maxUnavailable"),
        ({"deletePolicy": "Youngest"}, "deletePolicy"),
    ],
)
def test_malformed_fields_name_the_field(rolling: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidStrategy) as err:
        parse_strategy({"rollingUpdate": rolling})
    assert field in str(err.value)


def test_unknown_strategy_type_is_rejected() -> None:
    with pytest.raises(InvalidStrategy, match="RollingUpdate"):
        parse_strategy({"type": "Recreate"})


def test_scaled_value_rejects_booleans() -> None:
    with pytest.raises(InvalidStrategy):
        scaled_value(True, 10, round_up=True, field="maxSurge")
