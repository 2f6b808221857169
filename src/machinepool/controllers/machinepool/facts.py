"""What a pool pass reads from each of its Machines, derived once per Machine version.

A MachinePool pass walks all of its Machines several times: to count the Ready, Available
and up-to-date ones (``status``), to aggregate MachinesReady and MachinesUpToDate, to find
the ones marked for remediation (``remediation``), and to leave their Nodes to the Machine
controller (``noderefs``). In a rollout of a thousand Machines per pool, each pass read the
same facts out of the same unchanged objects again, condition list by condition list.
``MachineFacts`` are those facts; ``FactsCache`` keeps them by UID and resourceVersion from
one pass to the next, so a pass derives them only for the Machines that changed since.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from machinepool.api import constants as c
from machinepool.api.views import MachineView
from machinepool.controllers.common import is_paused
from machinepool.runtime import controller_owner

COUNTED_CONDITIONS = (
    c.READY_CONDITION,
    c.AVAILABLE_CONDITION,
    c.UP_TO_DATE_CONDITION,
    c.HEALTH_CHECK_SUCCEEDED_CONDITION,
    c.OWNER_REMEDIATED_CONDITION,
)
"""The Machine conditions a pool reads: those its counters and Machines* conditions aggregate,
and the two a health check sets to ask the pool for remediation (``watches.machine_inputs``
wakes the pool when one of them changes)."""


@dataclass(frozen=True, slots=True)
class MachineFacts:
    """The facts of one Machine version that a pool pass reads (pure; see the module)."""

    name: str
    provider_id: str
    """``spec.providerID``; empty when not set yet."""
    controller_uid: str
    """The UID of its controller owner; empty when nothing controls it."""
    deleting: bool
    paused: bool
    """It carries the paused annotation (its Cluster's ``spec.paused`` is the pool's own)."""
    conditions: Mapping[object, object]
    """The status of each of its ``COUNTED_CONDITIONS`` present, by type."""
    version: str
    """The Kubernetes version it runs: its Node's kubelet version, else ``spec.version``
    (upstream prefers the Node's)."""

    @classmethod
    def of(cls, machine: MachineView) -> MachineFacts:
        meta = machine.metadata
        controller = controller_owner(machine.raw or {})
        return cls(
            name=meta.name or "",
            provider_id=str(machine.spec.provider_id or ""),
            controller_uid=str(controller.get("uid") or "") if controller else "",
            deleting=meta.deletion_timestamp is not None,
            paused=is_paused(machine, None),
            conditions=MappingProxyType(_counted(machine.status.conditions)),
            version=machine.status.node_info.kubelet_version or machine.spec.version or "",
        )

    def condition_is(self, type_: str, status: str) -> bool:
        return self.conditions.get(type_) == status


def _counted(conditions: Sequence[Mapping[str, Any]] | None) -> dict[object, object]:
    """The status of each of ``COUNTED_CONDITIONS`` in ``conditions``, by type: the other
    conditions' are not read, so a change of them needs no event."""
    return {
        cond.get("type"): cond.get("status")
        for cond in conditions or []
        if cond.get("type") in COUNTED_CONDITIONS
    }


class PassFacts:
    """The facts of one pass over one pool's Machines (``FactsCache.for_pass``).

    Facts derived or reused in this pass are kept for the next one; those of Machines this
    pass did not ask about (gone, or no longer the pool's) are dropped with it.
    """

    def __init__(
        self,
        before: dict[str, tuple[str, MachineFacts]],
        kept: dict[str, tuple[str, MachineFacts]],
    ) -> None:
        self._before = before
        self._kept = kept

    def __call__(self, machine: MachineView) -> MachineFacts:
        meta = machine.metadata
        key = meta.uid or meta.name or ""
        version = meta.resource_version or ""
        known = self._kept.get(key) or self._before.get(key)
        if known is not None and version and known[0] == version:
            self._kept[key] = known
            return known[1]
        facts = MachineFacts.of(machine)
        if version:
            self._kept[key] = (version, facts)
        return facts

    def all(self, machines: list[MachineView]) -> list[MachineFacts]:
        return [self(m) for m in machines]


class FactsCache:
    """``MachineFacts`` of one pool's Machines, from one pass to the next (kept in the pool's
    ``PoolMemory``, so it goes with the rest of what is kept about the pool)."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[str, MachineFacts]] = {}

    def for_pass(self) -> PassFacts:
        kept: dict[str, tuple[str, MachineFacts]] = {}
        before, self._kept = self._kept, kept
        return PassFacts(before, kept)
