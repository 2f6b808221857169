"""Snapshot on entry, patch once on exit: only what a reconcile changed.

A reconciler takes a ``Patcher`` when it reads its object, mutates the object freely, and
calls ``await patcher.patch(obj)`` once at the end. The patcher sends a JSON merge patch
(RFC 7386) of metadata and spec, then a separate merge patch of the status subresource, each
holding only the fields that differ from the snapshot, and skips requests that would be empty.
Maps merge key by key, so concurrent writers of other fields are not overwritten and no
resourceVersion is needed. Lists do not merge: a patch carrying one replaces the whole list
(conditions, finalizers, ownerReferences), so such a patch also carries the snapshot's
resourceVersion rather than undo a change made since the snapshot was read (the same
optimistic lock Cluster API's patch helper takes for conditions). A spec or metadata patch
that loses that lock fails with ``Conflict``. A status patch that loses it is rebased instead,
as Cluster API's patch helper does for conditions: the patcher reads the object again, applies
its own status changes to that copy (each condition type it changed, added or removed is
ours, in ``status.conditions`` and in the v1beta1 ``status.deprecated.v1beta1.conditions``;
every other condition is kept as the other writer left it) and sends that, so a
MachineHealthCheck's mark on a Machine and the Machine controller's own conditions never
undo each other, and a lost lock costs one read instead of a whole reconcile.

Two requests are saved where the outcome is known: when the spec patch moves the generation
by exactly one (the reconcile's own write), the status's and its conditions' observedGeneration
follow it in the same status patch; and when the spec patch released the last finalizer of a
deleted object, no status patch is sent to an object that is gone.

>>> patcher = Patcher(client, MACHINE_POOLS, mp)
>>> mp["status"]["phase"] = "Running"
>>> mp = await patcher.patch(mp)   # PATCH .../status {"status": {"phase": "Running"}}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from machinepool.runtime.kube.client import Client, Obj, Resource, copy_obj
from machinepool.runtime.kube.errors import Conflict
from machinepool.runtime.kube.informer import strip_managed_fields

_SERVER_FIELDS = ("resourceVersion", "managedFields", "generation", "creationTimestamp", "uid")
_REBASES = 5
"""Status patches rebased onto a newer copy before a lost lock is given up as ``Conflict``."""


def merge_patch(before: Any, after: Any) -> Any:
    """The RFC 7386 merge patch that turns ``before`` into ``after``.

    Removed keys become ``None`` (null). Lists are replaced whole, as merge patch requires.
    """
    if not isinstance(before, dict) or not isinstance(after, dict):
        return copy_obj(after)
    patch: dict[str, Any] = {}
    for key in before.keys() - after.keys():
        patch[key] = None
    for key, value in after.items():
        if key not in before:
            patch[key] = copy_obj(value)
        elif before[key] != value:
            if isinstance(before[key], dict) and isinstance(value, dict):
                patch[key] = merge_patch(before[key], value)
            else:
                patch[key] = copy_obj(value)
    return patch


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with the RFC 7386 merge ``patch`` applied (``target`` is not changed)."""
    if not isinstance(patch, dict):
        return copy_obj(patch)
    result = copy_obj(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def _by_type(conditions: Any) -> dict[str, Any]:
    return {
        c["type"]: c
        for c in conditions or []
        if isinstance(c, dict) and isinstance(c.get("type"), str)
    }


def rebase_conditions(before: Any, after: Any, theirs: Any) -> list[Any]:
    """``theirs`` with our changes from ``before`` to ``after`` applied, type by type.

    A condition type we added, changed or removed is ours and takes our value; every other
    type is left as ``theirs`` has it, in their order, with our new types after them.
    """
    ours_before, ours_after = _by_type(before), _by_type(after)
    owned = {
        t for t in ours_before.keys() | ours_after.keys() if ours_before.get(t) != ours_after.get(t)
    }
    merged = [
        copy_obj(ours_after[t]) if t in owned else c
        for t, c in _by_type(theirs).items()
        if t not in owned or t in ours_after
    ]
    present = {c["type"] for c in merged}
    merged += [copy_obj(c) for t, c in ours_after.items() if t in owned and t not in present]
    return merged


_CONDITION_LISTS = (("conditions",), ("deprecated", "v1beta1", "conditions"))
"""Where a status holds conditions: v1beta2 ones, and the v1beta1 ones kept beside them."""


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _rebase_status(before: Obj, after: Obj, theirs: Obj) -> Obj:
    """Our status changes (``before`` to ``after``) applied to ``theirs``; each list of
    conditions merged type by type (``rebase_conditions``), the rest as a merge patch."""
    rebased: Obj = apply_merge_patch(theirs, merge_patch(before, after))
    for path in _CONDITION_LISTS:
        ours_before, ours_after = _at(before, path), _at(after, path)
        if ours_before == ours_after:
            # Not ours to change: keep theirs, which the merge patch did not touch.
            continue
        conditions = rebase_conditions(ours_before, ours_after, _at(theirs, path))
        holder = rebased
        for key in path[:-1]:
            holder = holder.setdefault(key, {})
        if conditions:
            holder[path[-1]] = conditions
        else:
            holder.pop(path[-1], None)
    return rebased


def _has_list(value: Any) -> bool:
    if isinstance(value, list):
        return True
    return isinstance(value, dict) and any(_has_list(v) for v in value.values())


def _lock_lists(patch: dict[str, Any], version: str | None) -> None:
    """Guard a patch that replaces a list with the resourceVersion it was computed from."""
    if version and _has_list(patch):
        metadata = patch.setdefault("metadata", {})
        if isinstance(metadata, dict):
            metadata["resourceVersion"] = version


def _generation(obj: Obj) -> Any:
    return (obj.get("metadata") or {}).get("generation")


def _observe_own_spec_write(before: Obj, latest: Obj, obj: Obj) -> None:
    """Our spec write moved the generation by exactly one: the status this reconcile computed
    for the snapshot's generation has observed that spec too (it wrote it), so say so now, in
    ``status.observedGeneration`` and in each condition's, rather than in another reconcile
    and another status patch. Moved by more, someone else changed the spec meanwhile, and
    the status keeps the generation it was computed for."""
    status = obj.get("status")
    old, new = _generation(before), _generation(latest)
    if not isinstance(status, dict) or not isinstance(old, int) or new != old + 1:
        return
    if status.get("observedGeneration") == old:
        status["observedGeneration"] = new
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("observedGeneration") == old:
            cond["observedGeneration"] = new


def _released(obj: Obj | None) -> bool:
    """Whether ``obj`` (the server's answer to a patch) is deleted with no finalizer left."""
    meta = (obj or {}).get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")


class Patcher:
    """Remembers an object as read and patches only the differences later.

    ``on_patched`` is told the server's answer after each patch that sent something (an
    ``OwnReader``'s ``wrote``, so the next reconcile does not read an older copy).
    ``rebase=False`` makes a status patch that lost its lock raise ``Conflict`` instead, for a
    caller whose decision rests on the conditions it read (remediation deletes a Machine only
    while it is still marked unhealthy).
    """

    def __init__(
        self,
        client: Client,
        resource: Resource,
        obj: Obj,
        *,
        on_patched: Callable[[Obj], None] | None = None,
        rebase: bool = True,
    ) -> None:
        self._client = client
        self._rebases = _REBASES if rebase else 1
        self._resource = resource
        self._before = copy_obj(obj)
        self._on_patched = on_patched

    @property
    def snapshot(self) -> Obj:
        """The object as it was when the patcher was made (do not mutate)."""
        return self._before

    def _split(self, obj: Obj) -> tuple[Obj, Obj]:
        main = {k: v for k, v in obj.items() if k != "status"}
        meta = dict(main.get("metadata") or {})
        for field in _SERVER_FIELDS:
            meta.pop(field, None)
        main["metadata"] = meta
        return main, {"status": obj.get("status") or {}}

    async def patch(self, obj: Obj) -> Obj:
        """Send what changed since the snapshot; return the newest object the server gave."""
        name = obj["metadata"]["name"]
        namespace = obj["metadata"].get("namespace")
        main_before, status_before = self._split(self._before)
        main_after, status_after = self._split(obj)
        latest = obj
        version = (self._before.get("metadata") or {}).get("resourceVersion")
        main_patch = merge_patch(main_before, main_after)
        if main_patch:
            _lock_lists(main_patch, version)
            latest = await self._client.patch(self._resource, name, main_patch, namespace)
            version = (latest.get("metadata") or {}).get("resourceVersion")
            _observe_own_spec_write(self._before, latest, obj)
            status_after = {"status": obj.get("status") or {}}
        status_patch = merge_patch(status_before, status_after)
        if status_patch and _released(latest if main_patch else None):
            # The patch let go of the last finalizer of a deleted object: it is gone, and a
            # status patch would only be a 404.
            status_patch = None
        if status_patch:
            latest = await self._patch_status(
                name, namespace, status_patch, version, status_before, status_after
            )
        if latest is obj:
            return obj  # nothing sent: the snapshot already equals it
        # As the informers keep objects: the server's field ownership is read by no
        # controller, and it is often half of what would be copied twice below.
        strip_managed_fields(latest)
        if self._on_patched is not None:
            self._on_patched(latest)
        self._before = copy_obj(latest)
        return latest

    async def _patch_status(
        self,
        name: str,
        namespace: str | None,
        status_patch: Obj,
        version: str | None,
        before: Obj,
        after: Obj,
    ) -> Obj:
        """Send the status patch; on a lost lock, rebase our changes onto a fresh read."""
        attempts = 0
        while True:
            attempts += 1
            _lock_lists(status_patch, version)
            try:
                return await self._client.patch(
                    self._resource, name, status_patch, namespace, subresource="status"
                )
            except Conflict:
                if attempts == self._rebases:
                    raise
            theirs = await self._client.get(self._resource, name, namespace)
            version = (theirs.get("metadata") or {}).get("resourceVersion")
            current = theirs.get("status") or {}
            rebased = _rebase_status(before["status"], after["status"], current)
            status_patch = merge_patch({"status": current}, {"status": rebased})
            if not status_patch:
                return theirs
