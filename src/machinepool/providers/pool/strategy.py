"""The rolling-update strategy: parsing, defaulting and scaling of maxSurge / maxUnavailable.

Semantics follow Cluster API Azure's AzureMachinePool ``RollingUpdate`` (and Kubernetes
Deployments): ``maxSurge`` defaults to 1 and a percentage rounds up; ``maxUnavailable`` defaults
to 0 and a percentage rounds down; both zero would let nothing move and is rejected.
Called by the engine once per reconcile; pure, unit-tested.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DeletePolicy",
    "InvalidStrategy",
    "RollingUpdate",
    "parse_strategy",
    "scaled_value",
]

_FIELD = "spec.strategy.rollingUpdate"
_PERCENT = re.compile(r"^(\d+)%$")


class InvalidStrategy(ValueError):
    """The strategy cannot be followed; the message names the field and the fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class DeletePolicy(enum.StrEnum):
    """Which instances go first when nothing else decides: the oldest, newest or any."""

    OLDEST = "Oldest"
    NEWEST = "Newest"
    RANDOM = "Random"


@dataclass(frozen=True)
class RollingUpdate:
    """A parsed strategy; ``max_surge`` / ``max_unavailable`` are ints or ``"N%"`` strings."""

    max_surge: int | str = 1
    max_unavailable: int | str = 0
    delete_policy: DeletePolicy = DeletePolicy.OLDEST

    def resolve(self, replicas: int) -> tuple[int, int]:
        """(surge, unavailable) as instance counts for ``replicas`` desired instances.

        Percentages that both round to 0 (say maxSurge 0 and maxUnavailable 10% of 5) would
        stall the rollout, so unavailable becomes 1 then, as Kubernetes Deployments do.

        >>> RollingUpdate("25%", "25%").resolve(10)
        (3, 2)
        """
        surge = scaled_value(self.max_surge, replicas, round_up=True, field="maxSurge")
        unavailable = scaled_value(
            self.max_unavailable, replicas, round_up=False, field="maxUnavailable"
        )
        if surge == 0 and unavailable == 0:
            unavailable = 1
        return surge, unavailable


def scaled_value(value: int | str, total: int, *, round_up: bool, field: str) -> int:
    """An int-or-percent as a count of ``total``; raise ``InvalidStrategy`` when malformed."""
    if isinstance(value, bool):
        raise InvalidStrategy(field, f"must be an integer or a percentage like '25%', not {value}")
    if isinstance(value, int):
        if value < 0:
            raise InvalidStrategy(field, f"must not be negative (got {value}); use 0 or more")
        return value
    match = _PERCENT.match(str(value).strip())
    if match is None:
        if str(value).strip().isdigit():
            return int(str(value).strip())
        raise InvalidStrategy(
            field, f"must be an integer or a percentage like '25%', not {value!r}"
        )
    exact = int(match.group(1)) * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


def parse_strategy(strategy: Mapping[str, Any] | None) -> RollingUpdate:
    """Parse ``spec.strategy`` ({type, rollingUpdate: {maxSurge, maxUnavailable,
    deletePolicy}}), applying defaults, and reject what cannot work.

    ``{"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}`` raises ``InvalidStrategy``.
    """
    strategy = strategy or {}
    kind = strategy.get("type") or "RollingUpdate"
    if kind != "RollingUpdate":
        raise InvalidStrategy(
            "spec.strategy.type", f"unsupported type {kind!r}; the only type is RollingUpdate"
        )
    rolling = strategy.get("rollingUpdate") or {}
    surge = rolling.get("maxSurge", 1)
    unavailable = rolling.get("maxUnavailable", 0)
    policy_text = rolling.get("deletePolicy") or DeletePolicy.OLDEST.value
    try:
        policy = DeletePolicy(policy_text)
    except ValueError:
        raise InvalidStrategy(
            "spec.strategy.rollingUpdate.deletePolicy",
            f"unknown policy {policy_text!r}; use Oldest, Newest or Random",
        ) from None
    parsed = RollingUpdate(surge, unavailable, policy)
    # Scaling against 100 validates the shapes and judges percentages exactly.
    surge_at_100 = scaled_value(surge, 100, round_up=True, field=_FIELD + ".maxSurge")
    unavailable_at_100 = scaled_value(
        unavailable, 100, round_up=False, field=_FIELD + ".maxUnavailable"
    )
    if surge_at_100 == 0 and unavailable_at_100 == 0:
        raise InvalidStrategy(
            "spec.strategy.rollingUpdate",
            "maxSurge and maxUnavailable are both 0, so no instance could ever be replaced;"
            " set maxSurge to at least 1 (the default) or maxUnavailable to at least 1",
        )
    return parsed
