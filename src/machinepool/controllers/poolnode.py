"""What a MachinePool's template puts on each of its Nodes (gate ``MachinePoolNodeTaints``):
its taints, with upstream's propagation meaning, and its labels in upstream's Node label
domains.

Pure, and the one place this merge is written: the MachinePool controller's node-refs phase
(``machinepool.noderefs``, Nodes it patches itself) and the pool Machine's Node sync
(``machine.node``) both fold ``pool_node_changes`` into the one patch they send a Node.

Taints, as upstream's Machine controller treats a Machine's ``spec.taints``:

- ``Always``: put on the Node and put back when someone removes it; when it leaves the
  template it is removed from the Node, if we put it there.
- ``OnInitialization``: put on the Node once, the first time the core syncs it, and never
  again (a node-setup job that removes it is not undone).
- Which ``Always`` taints we own is recorded on the Node (``TAINTS_FROM_POOL_ANNOTATION``),
  whose presence also marks the ``OnInitialization`` taints as given. A taint changed from
  ``Always`` to ``OnInitialization`` is let go of, not removed. Taints nobody listed there
  (the kubelet's, a user's) are never touched. A taint is the same taint by key and effect;
  a changed value is written over.

Labels: only keys in the domains upstream syncs from a Machine to its Node
(``node-role.kubernetes.io/``, ``node-restriction.kubernetes.io/`` and its subdomains,
``node.cluster.x-k8s.io/`` and its subdomains; ``machine.node.is_managed_label``), recorded in
``LABELS_FROM_POOL_ANNOTATION`` so that a label dropped from the template leaves the Node and
nothing else is. None of this replaces an instance: Node metadata is written in place.

Unit-tested in tests/unit/test_core_pool_node.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from machinepool.api import constants as c
from machinepool.api.views import NodeView
from machinepool.runtime import Obj

__all__ = [
    "PoolNodeChanges",
    "is_managed_label",
    "is_uninitialized_taint",
    "pool_node_changes",
    "wanted_labels",
]


def _domain(key: str) -> str:
    # What precedes the first "/", or the whole key without one (upstream's split).
    return key.split("/", 1)[0]


def _in(domain: str, parent: str) -> bool:
    return domain == parent or domain.endswith("." + parent)


def is_managed_label(key: str) -> bool:
    """Whether a label key is in a domain upstream syncs from Machines to Nodes."""
    domain = _domain(key)
    return (
        domain == c.NODE_ROLE_LABEL_PREFIX
        or _in(domain, c.NODE_RESTRICTION_LABEL_DOMAIN)
        or _in(domain, c.MANAGED_NODE_DOMAIN)
    )


def wanted_labels(template_labels: Mapping[str, str] | None) -> dict[str, str]:
    """The pool template's labels a Node gets: those in the managed domains."""
    return {k: v for k, v in (template_labels or {}).items() if is_managed_label(k)}


@dataclass
class PoolNodeChanges:
    """What to send a Node: merge-patch entries and, when they change, the whole taint list
    (a merge patch replaces a list whole: the caller locks it to the Node's
    resourceVersion)."""

    labels: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, Any] = field(default_factory=dict)
    taints: list[Obj] | None = None

    def __bool__(self) -> bool:
        return bool(self.labels or self.annotations or self.taints is not None)


def _ident(taint: Any) -> str:
    return f"{taint.get('key')}:{taint.get('effect')}" if isinstance(taint, dict) else ""


def _listed(value: str | None) -> list[str]:
    return [k for k in (value or "").split(",") if k]


def _node_taint(taint: Mapping[str, Any]) -> Obj:
    found: Obj = {"key": taint.get("key"), "effect": taint.get("effect")}
    if taint.get("value"):
        found["value"] = taint["value"]
    return found


def merge_taints(
    have: Sequence[Obj], template: Sequence[Mapping[str, Any]], owned: str | None
) -> tuple[list[Obj], str]:
    """(the Node's taints with the template's applied, the new ownership record).

    ``owned`` is the Node's ``TAINTS_FROM_POOL_ANNOTATION`` (None when absent: the Node was
    never synced, so the ``OnInitialization`` taints are due).
    """
    taints = [dict(t) for t in have]
    always = {_ident(t) for t in template if t.get("propagation") == "Always"}
    on_init = {_ident(t) for t in template if t.get("propagation") == "OnInitialization"}
    for want in template:
        if want.get("propagation") == "OnInitialization" and owned is not None:
            continue
        node_taint = _node_taint(want)
        at = next((i for i, t in enumerate(taints) if _ident(t) == _ident(want)), None)
        if at is None:
            taints.append(node_taint)
        elif taints[at].get("value") != node_taint.get("value"):
            taints[at] = {**taints[at], **node_taint}
            if "value" not in node_taint:
                taints[at].pop("value", None)
    dropped = set(_listed(owned)) - always - on_init
    taints = [t for t in taints if _ident(t) not in dropped]
    return taints, ",".join(sorted(always))


def pool_node_changes(
    node: Obj,
    taints: Sequence[Obj],
    template_taints: Sequence[Mapping[str, Any]] | None,
    template_labels: Mapping[str, str] | None,
    *,
    labels_too: bool = True,
) -> PoolNodeChanges:
    """The changes that bring ``node`` in line with its pool's template (pure).

    ``taints`` is the Node's taint list as the caller will send it (its own changes, such as
    the uninitialized taint dropped, already made); ``changes.taints`` is set only when the
    pool's taints change that list. ``labels_too`` False leaves labels to another writer (a
    pool Machine's Node takes the template's labels through the Machine, upstream's way).
    """
    annotations: dict[str, str] = NodeView(node).metadata.annotations or {}
    changes = PoolNodeChanges()
    owned = annotations.get(c.TAINTS_FROM_POOL_ANNOTATION)
    merged, record = merge_taints(taints, list(template_taints or []), owned)
    if merged != list(taints):
        changes.taints = merged
    if owned != record:
        changes.annotations[c.TAINTS_FROM_POOL_ANNOTATION] = record
    if not labels_too:
        return changes
    labels: dict[str, str] = NodeView(node).metadata.labels or {}
    want = wanted_labels(template_labels)
    changes.labels = {k: v for k, v in want.items() if labels.get(k) != v}
    before = _listed(annotations.get(c.LABELS_FROM_POOL_ANNOTATION))
    changes.labels.update({k: None for k in before if k not in want and k in labels})
    listed = ",".join(sorted(want))
    recorded = annotations.get(c.LABELS_FROM_POOL_ANNOTATION)
    if recorded != listed and (listed or recorded is not None):
        # Not written empty on a Node that never had one: nothing to remember.
        changes.annotations[c.LABELS_FROM_POOL_ANNOTATION] = listed
    return changes


def is_uninitialized_taint(taint: Any) -> bool:
    """Whether ``taint`` is ``node.cluster.x-k8s.io/uninitialized:NoSchedule``, which kubeadm
    registers a Node with until Cluster API has labelled it; both Node writers (the pool's
    ``noderefs`` and the pool Machine's ``node``) drop it."""
    return (
        isinstance(taint, dict)
        and taint.get("key") == c.UNINITIALIZED_TAINT_KEY
        and taint.get("effect") == c.UNINITIALIZED_TAINT_EFFECT
    )
