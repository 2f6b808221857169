"""Which object versions a controller wrote itself, so their watch echoes can be told apart.

A reconcile that fails still writes (a status patch, a condition on a child). Its informer
then delivers those writes back as events, and a work queue that re-ran the key for each of
them would retry a failing key at the speed of its own writes instead of its backoff: the
retry storm seen while a workload cluster was down. So every ``Controller`` keeps an
``OwnWrites``; while it reconciles, the ``Client`` records the ``(uid, resourceVersion)`` of
each object a write returned (``note_write``), and the controller's event handlers ask
``is_own`` before re-queueing a key that is backing off. An event whose object version is
exactly one this controller wrote carries nothing it did not already know; any other change
(a user's fix, another controller's write) still re-queues the key at once.

What is remembered must be forgotten again, or a soak that creates and deletes objects for
hours keeps an entry (some 800 bytes) for each one ever written. An entry goes when the
object's delete event reaches one of the controller's handlers (``forget``), so only writes
that can be forgotten that way are recorded: those of kinds the controller's handlers watch
(``watch``; ``Informer.add_handler`` tells them), since a kind it does not watch can bring it
neither an echo nor a delete event (the node simulator creating Nodes, the bootstrap
controller creating token Secrets in a workload cluster); and not a write whose answer is the
object with a deletion timestamp and no finalizer left, which the API server deleted with that
very write (a finalizer removed last) and whose delete event may have come first.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict, deque
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

_writing: ContextVar[OwnWrites | None] = ContextVar("machinepool_own_writes", default=None)


def _group_kind(obj: dict[str, Any]) -> tuple[str, str]:
    return str(obj.get("apiVersion") or "").rpartition("/")[0], str(obj.get("kind") or "")


class OwnWrites:
    """The last ``per_object`` versions of each object of a watched kind one controller
    wrote, for up to ``max_entries`` objects (an echo can arrive after the controller's next
    write); see the module docstring for what is recorded and when it is forgotten."""

    def __init__(self, max_entries: int = 10_000, per_object: int = 8) -> None:
        self.max_entries = max_entries
        self.per_object = per_object
        self._versions: OrderedDict[str, deque[str]] = OrderedDict()
        self._kinds: set[tuple[str, str]] = set()

    def watch(self, group: str, kind: str) -> None:
        """Record writes of ``kind`` in API ``group`` (``""`` for the core group): the
        controller's handlers receive its events, so echoes to tell apart and deletes to
        forget by."""
        self._kinds.add((group, kind))

    def record(self, obj: Any) -> None:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict) or not meta.get("uid") or not meta.get("resourceVersion"):
            return
        if _group_kind(obj) not in self._kinds:
            return  # no event of it reaches this controller: nothing to tell apart or forget
        uid = str(meta["uid"])
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._versions.pop(uid, None)  # this write deleted it: no echo but its delete
            return
        versions = self._versions.get(uid)
        if versions is None:
            versions = self._versions[uid] = deque(maxlen=self.per_object)
        versions.append(str(meta["resourceVersion"]))
        self._versions.move_to_end(uid)
        while len(self._versions) > self.max_entries:
            self._versions.popitem(last=False)

    def __len__(self) -> int:
        """Objects remembered."""
        return len(self._versions)

    def forget(self, obj: Any) -> None:
        """Drop what was recorded of ``obj``: it was deleted, so no echo of it can come, and
        a churn that creates and deletes objects would otherwise keep every one of them until
        ``max_entries`` (some 10 MB a controller)."""
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if isinstance(meta, dict) and meta.get("uid"):
            self._versions.pop(str(meta["uid"]), None)

    def is_own(self, obj: Any) -> bool:
        """True when ``obj`` is exactly a version this controller wrote."""
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict) or not meta.get("uid"):
            return False
        versions = self._versions.get(str(meta["uid"]))
        return versions is not None and str(meta.get("resourceVersion") or "") in versions

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Record the writes made in this context (tasks it starts inherit it)."""
        token = _writing.set(self)
        try:
            yield
        finally:
            _writing.reset(token)


def stop_recording() -> None:
    """Record nothing written from here on in the current context.

    For a long-lived task that a reconcile happens to start but that writes for everyone, as
    the Event recorder's writer does: a task copies its creator's context, so without this
    every Event it ever wrote would be recorded as the writes of whichever controller's
    reconcile recorded the first one, and kept until that ``OwnWrites`` reached its bound.
    """
    _writing.set(None)


def note_write(obj: Any) -> None:
    """Called by ``Client`` with the object a successful write returned."""
    writes = _writing.get()
    if writes is not None:
        writes.record(obj)
