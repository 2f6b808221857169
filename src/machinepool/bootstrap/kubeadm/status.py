"""The summary written at the end of every reconcile: the Ready condition (v1beta2 and
v1beta1) from DataSecretAvailable and CertificatesAvailable. (observedGeneration is
``runtime.patch_on_exit``'s: only a reconcile whose phases all succeeded claims it.)

Called by ``controller.py`` once all phases ran, before the patch.
"""

from __future__ import annotations

from machinepool.api import conditions
from machinepool.api import constants as c
from machinepool.bootstrap.kubeadm import resources as r
from machinepool.bootstrap.kubeadm.scope import Scope

_SUMMARISED = (r.DATA_SECRET_AVAILABLE, r.CERTIFICATES_AVAILABLE)


def summarize(scope: Scope) -> None:
    """Ready=True when every summarised condition present is True; else the first that is
    not, with its message."""
    listed = scope.status.conditions or []
    present = [cond for t in _SUMMARISED if (cond := conditions.get_condition(listed, t))]
    blocking = next((cond for cond in present if cond.get("status") != "True"), None)
    if present and blocking is None:
        scope.mark(r.READY, True, c.READY_REASON)
    elif blocking is not None:
        unknown = blocking.get("status") == "Unknown"
        message = f"{blocking['type']}: {blocking.get('message') or blocking.get('reason')}"
        v1beta1 = scope.status.v1beta1.conditions
        severity = (conditions.get_condition(v1beta1, blocking["type"]) or {}).get("severity", "")
        scope.mark(
            r.READY,
            "Unknown" if unknown else False,
            c.READY_UNKNOWN_REASON if unknown else c.NOT_READY_REASON,
            message,
            severity or c.SEVERITY_INFO,
        )
