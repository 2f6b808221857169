"""Label selector matching (``metav1.LabelSelector``), shared by two controller packages.

Pure; used by the MachineHealthCheck controller to find targets and to map Machine events
back to the MachineHealthChecks that select them, and by the Machine controller's drain for
the MachineDrainRules' Machine and Pod selectors. A selector the webhook would refuse (an unknown
operator) matches nothing, so a stored bad object can never select every Machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["matches"]


def matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy every term of ``selector``; an empty selector matches none
    (upstream refuses empty selectors rather than letting them select everything)."""
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    return all(_term(expr, labels) for expr in expressions if isinstance(expr, Mapping))


def _term(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = str(expr.get("key", "")), expr.get("operator")
    values = set(expr.get("values") or [])
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False
