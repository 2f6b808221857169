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
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, TypeVar, cast

from machinepool.api import constants as c


class Condition(TypedDict, total=False):
    """One condition as stored: a metav1.Condition (v1beta2), or a Cluster API v1beta1 one,
    which adds ``severity`` and may leave reason and message out when True."""

    type: str
    status: str
    reason: str
    message: str
    severity: str
    observedGeneration: int
    lastTransitionTime: str


_C = TypeVar("_C", bound=Mapping[str, Any])
"""A condition read from anywhere: ours (``Condition``) or another kind's (a Node's carry
heartbeat times too), so the readers work on either without a copy."""

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


def get_condition(conditions: Sequence[_C] | None, type_: str) -> _C | None:
    """The condition of ``type_``, or ``None``."""
    for cond in conditions or []:
        if cond.get("type") == type_:
            return cond
    return None


def statuses(conditions: Sequence[Mapping[str, Any]] | None) -> dict[object, object]:
    """Each condition's status by its type: one pass, for a caller asking about several."""
    return {cond.get("type"): cond.get("status") for cond in conditions or []}


def is_true(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> bool:
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


def v1beta1_ready_of(source: Mapping[str, Any]) -> Condition | None:
    """A referenced object's Ready condition as upstream's mirror reads it: from
    ``status.deprecated.v1beta1.conditions`` when the object has that list, else from
    ``status.conditions`` (v1beta1 or v1beta2 style; a v1beta2 one has no severity)."""
    status = source.get("status")
    if not isinstance(status, dict):
        status = {}
    deprecated = ((status.get("deprecated") or {}).get("v1beta1") or {}).get("conditions")
    conditions = deprecated if deprecated is not None else status.get("conditions")
    return get_condition(conditions if isinstance(conditions, list) else [], c.READY_CONDITION)


def mirror_v1beta1(
    conditions: list[Condition],
    type_: str,
    source: Mapping[str, Any],
    ready: bool,
    fallback_reason: str,
) -> bool:
    """Copy ``source``'s Ready condition as the v1beta1 condition ``type_``; without one,
    derive it from ``ready`` (False: ``fallback_reason``, severity Info), as upstream's
    SetMirror with a fallback value does. Used for what an object says of the objects it
    references: a MachinePool of its bootstrap config and infra pool, a Machine of its infra
    machine."""
    cond = v1beta1_ready_of(source)
    if cond is not None and cond.get("status") in (TRUE, FALSE, UNKNOWN):
        return set_v1beta1_condition(
            conditions,
            type_,
            str(cond["status"]),
            str(cond.get("reason") or ""),
            str(cond.get("message") or ""),
            str(cond.get("severity") or ""),
        )
    if ready:
        return set_v1beta1_condition(conditions, type_, True)
    return set_v1beta1_condition(conditions, type_, False, fallback_reason, "", c.SEVERITY_INFO)


_MERGE_RANK = {c.SEVERITY_ERROR: 0, c.SEVERITY_WARNING: 1, c.SEVERITY_INFO: 2}
"""How upstream's v1beta1 merge ranks a False condition by severity; True ranks 3, Unknown 4
(so one True input outweighs any number of Unknown ones), a False without severity last."""


def _merge_rank(cond: Condition) -> int:
    status = cond.get("status")
    if status == FALSE:
        return _MERGE_RANK.get(str(cond.get("severity") or ""), 99)
    return 3 if status == TRUE else 4


def v1beta1_summary(
    conditions: list[Condition],
    types: tuple[str, ...],
    *,
    steps: tuple[str, ...] = (),
) -> Condition | None:
    """The v1beta1 ``Ready`` that upstream's SetSummary derives from ``types``, or ``None``
    when none of them is present (upstream then leaves Ready as it was).

    The inputs are ranked as upstream's merge ranks them: False by severity (Error, Warning,
    Info), then True, then Unknown. The best-ranked group decides the status; its reason and
    message come from its first member in ``types`` order. With ``steps``, and only while
    every present input is one of ``steps``, the message counts progress instead ("1 of 2
    completed", the Machine's provisioning steps), as upstream's step counter does.

    >>> v1beta1_summary([{"type": "A", "status": "True"}, {"type": "B", "status": "Unknown"}],
    ...                 ("A", "B"))["status"]
    'True'
    """
    present = [
        cond for t in types if t != c.READY_CONDITION and (cond := get_condition(conditions, t))
    ]
    if not present:
        return None
    best = min(_merge_rank(cond) for cond in present)
    top = [cond for cond in present if _merge_rank(cond) == best]
    if top[0].get("status") == TRUE:
        return {"status": TRUE, "reason": "", "message": "", "severity": ""}
    pick = top[0]
    message = str(pick.get("message") or "")
    if steps and all(cond.get("type") in steps for cond in present):
        done = sum(1 for cond in present if cond.get("status") == TRUE)
        message = f"{done} of {len(steps)} completed"
    return {
        "status": str(pick.get("status", "")),
        "reason": str(pick.get("reason") or ""),
        "message": message,
        "severity": str(pick.get("severity") or "") if pick.get("status") == FALSE else "",
    }


def set_v1beta1_summary(
    conditions: list[Condition], types: tuple[str, ...], *, steps: tuple[str, ...] = ()
) -> bool:
    """Set the v1beta1 ``Ready`` to ``v1beta1_summary`` of ``types`` (unchanged when it is
    ``None``); return whether it changed."""
    summary = v1beta1_summary(conditions, types, steps=steps)
    if summary is None:
        return False
    return set_v1beta1_condition(
        conditions,
        c.READY_CONDITION,
        summary["status"],
        summary["reason"],
        summary["message"],
        summary["severity"],
    )


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
    # In place, not replaced in the list: a caller may hold the dict ``get_condition`` gave.
    cast(dict[str, Any], existing).clear()
    existing.update(desired)
    return True


def _v1beta1_order(cond: Condition) -> tuple[int, str]:
    type_ = str(cond.get("type", ""))
    return (0 if type_ == "Ready" else 1, type_)
