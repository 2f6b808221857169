"""Space out the progress writes of pools, big ones the most.

A MachinePool or an infra pool of a thousand instances carries a thousand provider IDs (and
node references, or instance entries), and the kube-apiserver decodes, converts, validates,
stores and sends out the whole object on every write, however small the patch: about 150 ms
of its CPU at 1,000 entries against 7 ms for a Machine (bench/RESULTS.md, "What a write costs
the management kube-apiserver"). In a rollout of ten such pools each one was written every few
seconds, a counter or a list one entry further along each time, and those writes took about
half of the management apiserver's CPU.

So a controller writes the progress of a change under way on a big object at most once per
``interval`` (30 ms an entry, at most 30 s: 15 s at 500 entries), which keeps each such
object's progress reports near half a percent of an apiserver core. A small object (under 100
entries) waits a second: its few members change within a second of each other (a pool of 10
Machines turning Ready wrote its status three or four times in 0.6 s, at 1,000 such pools
each of those writes a tenth of a write per Node).
What the controller calls news is written at once: the start and the end of a change, a new
generation observed, an error, metadata. The caller says which a write is; this module keeps
the clock. Nothing is lost by waiting: a reconcile recomputes the whole status from the caches,
and the caller asks to come back when the wait is over.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from machinepool.runtime.kube.client import Obj

__all__ = ["ProgressSpacing", "reports_progress"]


class ProgressSpacing:
    """When each big object was last written, and how long its next progress write waits."""

    per_entry: float = 0.03
    """Seconds between progress writes, per entry the object lists."""
    smallest: int = 100
    """Objects listing fewer entries wait ``shortest``, whatever their size."""
    shortest: float = 1.0
    """Seconds between progress writes of an object listing fewer than ``smallest`` entries
    (one listing none: at once)."""
    longest: float = 30.0
    """The longest wait, whatever the size."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock

    def now(self) -> float:
        """The clock's reading: what the caller keeps, per object, as when it last wrote it
        (in its ``KeyMemory``), and hands back to ``wait`` and ``hold``."""
        return self._clock()

    def interval(self, entries: int) -> float:
        """Seconds between progress writes of an object that lists ``entries``."""
        if entries <= 0:
            return 0.0
        if entries < self.smallest:
            return self.shortest
        return min(self.longest, entries * self.per_entry)

    def wait(self, last: float | None, entries: int) -> float:
        """Seconds before the next progress write of an object last written at ``last`` may
        go; 0 when it may go now (never written since this process started, or written long
        enough ago)."""
        if last is None:
            return 0.0
        return max(0.0, last + self.interval(entries) - self._clock())

    def hold(
        self,
        last: float | None,
        entries: int,
        before: Obj,
        after: Obj,
        progress_only: Callable[[Obj, Obj], bool],
    ) -> float:
        """Seconds to hold back writing ``after`` over the snapshot ``before`` of an object
        listing ``entries``, last written at ``last``; 0 to write now: an object listing
        nothing, its turn, nothing to write, or news (not ``progress_only``, the kind's own
        rule built on ``reports_progress``)."""
        wait = self.wait(last, entries)
        if not wait or before == after or not progress_only(before, after):
            return 0.0
        return wait


def reports_progress(
    before: Obj,
    after: Obj,
    *,
    spec_fields: Iterable[str],
    settled: Callable[[Obj], bool],
    news: Iterable[str] = (),
) -> bool:
    """Whether writing ``after`` over ``before`` (the reconcile's snapshot) only reports how far
    a change under way has come, so it may wait its turn.

    It does when the metadata is the same, the spec differs at most in ``spec_fields`` (what
    the controller keeps up to date there as it goes, a providerIDList), the object is not
    being deleted, its status already observed its generation, and neither copy is
    ``settled``: the first write that leaves a settled state and the one that reaches it go
    at once. Nor does a write that changes the status of a condition type in ``news``
    (``status.conditions``: a reference turning ready, the object turning unavailable); the
    caller adds what else is news to its kind.
    """
    meta = before.get("metadata") or {}
    if meta != (after.get("metadata") or {}) or meta.get("deletionTimestamp"):
        return False
    fields = set(spec_fields)
    spec_before, spec_after = before.get("spec") or {}, after.get("spec") or {}
    if {k: v for k, v in spec_before.items() if k not in fields} != {
        k: v for k, v in spec_after.items() if k not in fields
    }:
        return False
    if (before.get("status") or {}).get("observedGeneration") != meta.get("generation"):
        return False
    if settled(before) or settled(after):
        return False
    watched = set(news)
    return _statuses(before, watched) == _statuses(after, watched)


def _statuses(obj: Obj, types: set[str]) -> dict[object, object]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return {
        cond.get("type"): cond.get("status")
        for cond in conditions
        if isinstance(cond, dict) and cond.get("type") in types
    }
