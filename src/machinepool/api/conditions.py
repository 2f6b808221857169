"""Conditions on raw objects: set, get and remove, in one place.

Every controller reports through conditions, so the rules live here once:

- ``lastTransitionTime`` changes only when the status flips, never on a reason or message
  change, so ``kubectl describe`` shows how long something has been true;
- times are RFC 3339 in whole seconds (what the apiserver would round them to anyway);
- order is stable (existing conditions keep their place; new ones are appended; for v1beta1
  ``Ready`` comes first, then alphabetical, as upstream sorts them), so repeated reconciles
  produce byte-identical lists and therefore no patches;
- reason and message are always set: an empty reason gets the status word.

Callers pass the ``conditions`` list of a status dict and get back whether anything changed.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

Condition = dict[str, Any]

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"


def now_rfc3339() -> str:
    """The current UTC time in whole seconds, as the apiserver writes it."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status_word(status: bool | str) -> str:
    if isinstance(status, bool):
        return TRUE if status else FALSE
    if status not in (TRUE, FALSE, UNKNOWN):
        raise ValueError(f"condition status must be True, False or Unknown, not {status!r}")
    return status


def get_condition(conditions: list[Condition] | None, type_: str) -> Condition | None:
    """The condition of ``type_``, or ``None``."""
    for cond in conditions or []:
        if cond.get("type") == type_:
            return cond
    return None


def is_true(conditions: list[Condition] | None, type_: str) -> bool:
    cond = get_condition(conditions, type_)
    return cond is not None and cond.get("status") == TRUE


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: bool | str,
    reason: str,
    message: str = "",
    observed_generation: int | None = None,
) -> bool:
    """Set a v1beta2 (metav1.Condition) condition in place; return whether it changed."""
    word = _status_word(status)
    desired: Condition = {"type": type_, "status": word, "reason": reason or word}
    desired["message"] = message
    if observed_generation is not None:
        desired["observedGeneration"] = observed_generation
    return _upsert(conditions, desired, sort=False)


def set_v1beta1_condition(
    conditions: list[Condition],
    type_: str,
    status: bool | str,
    reason: str = "",
    message: str = "",
    severity: str = "",
) -> bool:
    """Set a v1beta1 (clusterv1beta1.Condition) condition in place; return whether it changed.

    v1beta1 conditions carry a ``severity`` (Error, Warning, Info) when not True and may omit
    reason and message when True; the list is kept with ``Ready`` first, then by type.
    """
    word = _status_word(status)
    desired: Condition = {"type": type_, "status": word}
    if word != TRUE:
        if severity:
            desired["severity"] = severity
        if reason:
            desired["reason"] = reason
        if message:
            desired["message"] = message
    elif reason:
        desired["reason"] = reason
    return _upsert(conditions, desired, sort=True)


def remove_condition(conditions: list[Condition], type_: str) -> bool:
    """Drop the condition of ``type_``; return whether one was there."""
    for i, cond in enumerate(conditions):
        if cond.get("type") == type_:
            del conditions[i]
            return True
    return False


def _upsert(conditions: list[Condition], desired: Condition, *, sort: bool) -> bool:
    existing = get_condition(conditions, desired["type"])
    if existing is None:
        desired["lastTransitionTime"] = now_rfc3339()
        conditions.append(desired)
        if sort:
            conditions.sort(key=_v1beta1_order)
        return True
    if existing.get("status") == desired["status"]:
        desired["lastTransitionTime"] = existing.get("lastTransitionTime") or now_rfc3339()
    else:
        desired["lastTransitionTime"] = now_rfc3339()
    if existing == desired:
        return False
    existing.clear()
    existing.update(desired)
    return True


def _v1beta1_order(cond: Condition) -> tuple[int, str]:
    type_ = str(cond.get("type", ""))
    return (0 if type_ == "Ready" else 1, type_)
