"""Reading an object's conditions in a test: the one lookup every tier uses.

A test reads conditions the way ``kubectl get -o jsonpath`` would, from the object as stored,
whatever its kind (a MachinePool, a Machine, a Node, a CRD, a Pod): ``condition`` is the whole
entry (``{}`` when the type is absent), ``condition_status`` its status word (``""`` when
absent), ``is_true`` whether it is ``True``. The controllers' own helpers
(``machinepool.api.conditions``) work on a list they write; these take the object, which may
be ``None`` while a test waits for it to exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["condition", "condition_status", "is_true"]


def condition(
    obj: Mapping[str, Any] | None, type_: str, *, v1beta1: bool = False
) -> dict[str, Any]:
    """The condition ``type_`` of ``obj`` (``status.conditions``; with ``v1beta1``, the
    deprecated ``status.deprecated.v1beta1.conditions``), copied; ``{}`` when absent."""
    status = (obj or {}).get("status") or {}
    if v1beta1:
        status = (status.get("deprecated") or {}).get("v1beta1") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def condition_status(obj: Mapping[str, Any] | None, type_: str, *, v1beta1: bool = False) -> str:
    """``"True"``, ``"False"`` or ``"Unknown"`` for the condition ``type_``; ``""`` when absent."""
    return str(condition(obj, type_, v1beta1=v1beta1).get("status", ""))


def is_true(obj: Mapping[str, Any] | None, type_: str) -> bool:
    """Whether ``obj``'s condition ``type_`` is ``True`` (a Node ``Ready``, a CRD
    ``Established``, a Deployment ``Available``)."""
    return condition_status(obj, type_) == "True"
