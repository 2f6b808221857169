"""What a pool Machine's controller keeps on its Node: bookkeeping annotations and the labels
and annotations of well-known domains copied from the Machine (upstream's rule).

Pure: ``node_patch`` returns the merge patch that brings a Node in line, or None when it
already is; it also drops the uninitialized taint, as upstream's Machine controller does, and,
gate ``MachinePoolNodeTaints`` on, keeps the owning pool's template taints (``poolnode``).
Keys the Machine once gave and no longer has are removed; the Node records which keys came
from the Machine (``labels-from-machine``, ``annotations-from-machine``) so that nothing else
on the Node is ever touched. Unit-tested in tests/unit/test_core_machine_node.py.
"""

from __future__ import annotations

from typing import Any

from machinepool.api import constants as c
from machinepool.api.views import MachineView, NodeView
from machinepool.controllers.poolnode import (
    is_uninitialized_taint,
    pool_node_changes,
    wanted_labels,
)
from machinepool.runtime import Obj, controller_owner

BOOKKEEPING = (
    c.NODE_CLUSTER_NAME_ANNOTATION,
    c.NODE_CLUSTER_NAMESPACE_ANNOTATION,
    c.NODE_MACHINE_ANNOTATION,
    c.NODE_OWNER_KIND_ANNOTATION,
    c.NODE_OWNER_NAME_ANNOTATION,
)
"""Always written, and never listed in ``annotations-from-machine``."""


def _domain(key: str) -> str:
    return key.split("/", 1)[0]


def _in(domain: str, parent: str) -> bool:
    return domain == parent or domain.endswith("." + parent)


def managed_labels(machine: MachineView) -> dict[str, str]:
    """The Machine's labels a Node gets: node roles, node-restriction and node.cluster.x-k8s.io."""
    return wanted_labels(machine.metadata.labels)


def managed_annotations(machine: MachineView) -> dict[str, str]:
    """Bookkeeping annotations plus the Machine's node.cluster.x-k8s.io annotations."""
    meta = machine.metadata
    found: dict[str, str] = {
        c.NODE_CLUSTER_NAME_ANNOTATION: str(machine.spec.cluster_name or ""),
        c.NODE_CLUSTER_NAMESPACE_ANNOTATION: str(meta.namespace or ""),
        c.NODE_MACHINE_ANNOTATION: str(meta.name),
    }
    owner = controller_owner(machine.raw)
    if owner is not None:
        found[c.NODE_OWNER_KIND_ANNOTATION] = str(owner.get("kind", ""))
        found[c.NODE_OWNER_NAME_ANNOTATION] = str(owner.get("name", ""))
    for key, value in (meta.annotations or {}).items():
        if _in(_domain(key), c.MANAGED_NODE_DOMAIN):
            found[key] = value
    return found


def _listed(holder: dict[str, str], key: str) -> list[str]:
    return [k for k in holder.get(key, "").split(",") if k]


def _sync(have: dict[str, str], want: dict[str, str], before: list[str]) -> dict[str, Any]:
    """Merge-patch entries setting ``want`` and removing keys of ``before`` not wanted now."""
    changes: dict[str, Any] = {k: v for k, v in want.items() if have.get(k) != v}
    changes.update({k: None for k in before if k not in want and k in have})
    return changes


def node_patch(machine: MachineView, node: Obj, pool_taints: list[Obj] | None = None) -> Obj | None:
    """The merge patch for ``node``'s labels, annotations and taints, or None when nothing
    changes. ``pool_taints``: the owning pool's template taints to keep on the Node
    (``poolnode``, gate ``MachinePoolNodeTaints``; its labels reach the Node through the
    Machine's), or None to leave them alone."""
    labels: dict[str, str] = NodeView(node).metadata.labels or {}
    annotations: dict[str, str] = NodeView(node).metadata.annotations or {}
    want_labels, want_annotations = managed_labels(machine), managed_annotations(machine)
    label_changes = _sync(
        labels, want_labels, _listed(annotations, c.LABELS_FROM_MACHINE_ANNOTATION)
    )
    before = [
        k
        for k in [*_listed(annotations, c.ANNOTATIONS_FROM_MACHINE_ANNOTATION), *BOOKKEEPING]
        if k != c.ANNOTATIONS_FROM_MACHINE_ANNOTATION
    ]
    annotation_changes = _sync(annotations, want_annotations, before)
    bookkeeping = {
        c.LABELS_FROM_MACHINE_ANNOTATION: ",".join(sorted(want_labels)),
        c.ANNOTATIONS_FROM_MACHINE_ANNOTATION: ",".join(
            sorted(k for k in want_annotations if k not in BOOKKEEPING)
        ),
    }
    annotation_changes.update({k: v for k, v in bookkeeping.items() if annotations.get(k) != v})
    taints = NodeView(node).spec.taints or []
    kept = [t for t in taints if not is_uninitialized_taint(t)]
    if pool_taints is not None:
        pool = pool_node_changes(node, kept, pool_taints, None, labels_too=False)
        annotation_changes.update(pool.annotations)
        kept = pool.taints if pool.taints is not None else kept
    meta: dict[str, Any] = {}
    if label_changes:
        meta["labels"] = label_changes
    if annotation_changes:
        meta["annotations"] = annotation_changes
    patch: dict[str, Any] = {"metadata": meta}
    if kept != taints:
        # Upstream's Machine controller drops the taint in the same patch as the labels: one
        # write per joining Node. Taints are a list a merge patch replaces whole: guard it
        # with the resourceVersion it was computed from.
        meta["resourceVersion"] = NodeView(node).metadata.resource_version
        patch["spec"] = {"taints": kept}
    return patch if meta else None
