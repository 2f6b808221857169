"""Feature gates, parsed the way Cluster API's ``--feature-gates`` flag and env vars work.

The CLI builds one ``FeatureGates`` from ``--feature-gates=MachinePool=true,...`` and the
environment (``EXP_MACHINE_POOL``, as clusterctl's templates set it); the webhooks read it to
decide whether MachinePool requests are allowed at all. Pure: no I/O besides the mapping of
environment variables it is handed.

>>> FeatureGates.parse("MachinePool=false").enabled(MACHINE_POOL)
False
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "DEFAULTS",
    "ENV_VARS",
    "MACHINE_POOL",
    "MACHINE_POOL_NODE_TAINTS",
    "MACHINE_TAINT_PROPAGATION",
    "FeatureGateError",
    "FeatureGates",
]

MACHINE_POOL: Final = "MachinePool"
"""Beta upstream, on by default: gates every MachinePool admission request."""
MACHINE_TAINT_PROPAGATION: Final = "MachineTaintPropagation"
"""Alpha upstream, off by default: only changes which taint rejection messages are given."""

MACHINE_POOL_NODE_TAINTS: Final = "MachinePoolNodeTaints"
"""Ours, not upstream's; off by default: a pool's template taints (``Always`` /
``OnInitialization``) and its template labels in upstream's Node label domains are kept on its
Nodes, and the webhooks accept ``spec.template.spec.taints``. A deliberate superset of upstream
(docs/upstream-differences.md), whose MachinePool webhook refuses taints outright."""

DEFAULTS: Final[Mapping[str, bool]] = {
    MACHINE_POOL: True,
    MACHINE_POOL_NODE_TAINTS: False,
    MACHINE_TAINT_PROPAGATION: False,
}
ENV_VARS: Final[Mapping[str, str]] = {
    "EXP_MACHINE_POOL": MACHINE_POOL,
    "EXP_MACHINE_POOL_NODE_TAINTS": MACHINE_POOL_NODE_TAINTS,
    "EXP_MACHINE_TAINT_PROPAGATION": MACHINE_TAINT_PROPAGATION,
}
_TRUE = frozenset({"true", "1", "t", "yes", "y", "on"})
_FALSE = frozenset({"false", "0", "f", "no", "n", "off"})


class FeatureGateError(ValueError):
    """A gate string or env var that cannot be understood; the message names it and the fix."""


@dataclass(frozen=True)
class FeatureGates:
    """Which features are on. Unset gates take their upstream default (``DEFAULTS``)."""

    overrides: Mapping[str, bool] = field(default_factory=dict)

    def enabled(self, gate: str) -> bool:
        """Whether ``gate`` is on; unknown gates are off."""
        return self.overrides.get(gate, DEFAULTS.get(gate, False))

    def with_gate(self, gate: str, value: bool) -> FeatureGates:
        """A copy with one gate set."""
        return FeatureGates({**self.overrides, gate: value})

    @classmethod
    def parse(cls, spec: str = "", env: Mapping[str, str] | None = None) -> FeatureGates:
        """Gates from ``"A=true,B=false"`` (the ``--feature-gates`` value) over env vars.

        The flag wins over the environment, as an explicit flag should. Unknown gate names
        and values that are not booleans are errors, as they are upstream.
        """
        overrides: dict[str, bool] = {}
        for var, gate in ENV_VARS.items():
            raw = (env or {}).get(var)
            if raw is not None and raw.strip():
                overrides[gate] = _bool(raw, f"environment variable {var}")
        for item in (part.strip() for part in spec.split(",")):
            if not item:
                continue
            name, sep, raw = item.partition("=")
            name = name.strip()
            if not sep:
                raise FeatureGateError(
                    f"--feature-gates: missing value in {item!r}; write {name}=true or {name}=false"
                )
            if name not in DEFAULTS:
                known = ", ".join(sorted(DEFAULTS))
                raise FeatureGateError(
                    f"--feature-gates: unrecognized feature gate {name!r}; known gates: {known}"
                )
            overrides[name] = _bool(raw, f"--feature-gates {name}")
        return cls(overrides)

    def __str__(self) -> str:
        return ",".join(f"{gate}={str(self.enabled(gate)).lower()}" for gate in sorted(DEFAULTS))


def _bool(raw: str, where: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise FeatureGateError(f"{where}: invalid value {raw!r}; use true or false")
