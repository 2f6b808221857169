"""The rolling-update strategy: parsing, defaulting and scaling of maxSurge / maxUnavailable.

Semantics follow Cluster API Azure's AzureMachinePool ``RollingUpdate`` (and Kubernetes
Deployments): ``maxSurge`` defaults to 1 and a percentage rounds up; ``maxUnavailable`` defaults
to 0 and a percentage rounds down; both zero would let nothing move and is rejected.
Pure and unit-tested; here in ``api`` because two layers read it: the pool engine (a Sim
pool's ``spec.strategy``) and the core's own rollouts (``controllers.machinepool.rollout``,
whose budgets are annotations with the same meaning).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from machinepool.api import constants as c

__all__ = [
    "DeletePolicy",
    "InvalidStrategy",
    "RollingUpdate",
    "parse_strategy",
    "rollout_budget_errors",
    "rollout_budgets",
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
    on_delete: bool = False
    """Type ``OnDelete``: outdated instances are replaced only once their Machine is deleted
    (by a person, or by the core's rollout), never by the pool itself."""

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
    if kind not in ("RollingUpdate", "OnDelete"):
        raise InvalidStrategy(
            "spec.strategy.type", f"unsupported type {kind!r}; use RollingUpdate or OnDelete"
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
    parsed = RollingUpdate(surge, unavailable, policy, on_delete=kind == "OnDelete")
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


# -- the budgets of a rollout by the core (controllers.machinepool.rollout) ------------------

_SURGE_FIELD = f"metadata.annotations[{c.ROLLOUT_MAX_SURGE_ANNOTATION}]"
_UNAVAILABLE_FIELD = f"metadata.annotations[{c.ROLLOUT_MAX_UNAVAILABLE_ANNOTATION}]"


def rollout_budgets(annotations: Mapping[str, Any], replicas: int) -> tuple[int, int]:
    """(surge, unavailable) of a MachinePool rolled by the core (its annotations and
    spec.replicas); ``InvalidStrategy`` names the bad one.

    Both zero would stall the rollout: refused at admission, and taken as unavailable 1 for a
    pool stored before (as ``RollingUpdate.resolve`` does for percentages that round to 0).
    """
    surge = scaled_value(
        annotations.get(c.ROLLOUT_MAX_SURGE_ANNOTATION, 1),
        replicas,
        round_up=True,
        field=_SURGE_FIELD,
    )
    unavailable = scaled_value(
        annotations.get(c.ROLLOUT_MAX_UNAVAILABLE_ANNOTATION, 0),
        replicas,
        round_up=False,
        field=_UNAVAILABLE_FIELD,
    )
    return surge, (1 if surge == 0 and unavailable == 0 else unavailable)


def rollout_budget_errors(annotations: Mapping[str, Any]) -> list[tuple[str, object, str]]:
    """(field, value, what is wrong) for each rollout budget annotation that cannot be used,
    for the admission webhook; judged at 100 replicas, so a percentage is judged exactly."""
    errors: list[tuple[str, object, str]] = []
    scaled: dict[str, int] = {}
    for key, field_, round_up in (
        (c.ROLLOUT_MAX_SURGE_ANNOTATION, _SURGE_FIELD, True),
        (c.ROLLOUT_MAX_UNAVAILABLE_ANNOTATION, _UNAVAILABLE_FIELD, False),
    ):
        if key not in annotations:
            continue
        value = annotations[key]
        try:
            scaled[key] = scaled_value(str(value), 100, round_up=round_up, field=field_)
        except InvalidStrategy as exc:
            errors.append((field_, value, str(exc).removeprefix(f"{field_}: ")))
    surge = scaled.get(c.ROLLOUT_MAX_SURGE_ANNOTATION, 1)
    if not errors and surge == 0 and scaled.get(c.ROLLOUT_MAX_UNAVAILABLE_ANNOTATION, 0) == 0:
        errors.append(
            (
                _SURGE_FIELD,
                annotations[c.ROLLOUT_MAX_SURGE_ANNOTATION],
                "rollout-max-surge and rollout-max-unavailable are both 0, so no Machine could"
                " ever be replaced; set rollout-max-surge to at least 1 (the default)",
            )
        )
    return errors
