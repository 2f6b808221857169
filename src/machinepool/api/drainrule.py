"""Typed ``MachineDrainRule``: which pods a Machine's drain evicts, waits for or leaves, and in
what order.

A rule names Machines (``spec.machines``: a Machine selector and a Cluster selector per entry;
none: every Machine of its namespace) and pods (``spec.pods``: a pod selector and a namespace
selector per entry, matched in the workload cluster; none: every pod), and says what the drain
does with the pods it names (``spec.drain.behavior``: ``Drain``, ``Skip`` or ``WaitCompleted``)
and when (``spec.drain.order``: lower first). Field names, bounds and validation follow
upstream Cluster API v1.14, so upstream manifests work unchanged. Both served versions share
the one schema, as upstream's do. The drain that reads the rules is
``machinepool.controllers.machine.drain``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from machinepool.api.healthcheck import LabelSelector
from machinepool.api.meta import K8sModel, ObjectMeta, OpenAPI

__all__ = [
    "MachineDrainRule",
    "MachineDrainRuleDrainConfig",
    "MachineDrainRuleMachineSelector",
    "MachineDrainRulePodSelector",
    "MachineDrainRuleSpec",
]

_Selector = Annotated[LabelSelector | None, OpenAPI({"x-kubernetes-map-type": "atomic"})]


def _unique_entries(field: str) -> OpenAPI:
    return OpenAPI(
        {
            "x-kubernetes-list-type": "atomic",
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(x, self.exists_one(y, x == y))",
                    "message": f"entries in {field} must be unique",
                }
            ],
        }
    )


class MachineDrainRuleDrainConfig(K8sModel):
    """What the drain does with the pods a rule names."""

    behavior: Literal["Drain", "Skip", "WaitCompleted"]
    """Drain: evict them (in ``order``); Skip: leave them; WaitCompleted: do not evict them,
    wait until they have left the Node."""
    order: Annotated[int | None, OpenAPI({"format": "int32"})] = None
    """When they are evicted or waited for: pods of a lower order first (default 0)."""


class MachineDrainRuleMachineSelector(K8sModel):
    """Machines a rule applies to: both selectors must match (a missing or empty one matches
    every Machine, or every Cluster)."""

    selector: _Selector = None
    """The Machine's labels."""
    cluster_selector: _Selector = None
    """The labels of the Machine's Cluster."""


class MachineDrainRulePodSelector(K8sModel):
    """Pods a rule applies to: both selectors must match (a missing or empty one matches every
    pod, or every namespace)."""

    selector: _Selector = None
    """The pod's labels."""
    namespace_selector: _Selector = None
    """The labels of the pod's namespace in the workload cluster."""


_MachineSelectors = Annotated[
    list[Annotated[MachineDrainRuleMachineSelector, OpenAPI({"minProperties": 1})]] | None,
    Field(min_length=1, max_length=32),
    _unique_entries("machines"),
]
_PodSelectors = Annotated[
    list[Annotated[MachineDrainRulePodSelector, OpenAPI({"minProperties": 1})]] | None,
    Field(min_length=1, max_length=32),
    _unique_entries("pods"),
]


class MachineDrainRuleSpec(K8sModel):
    """The desired state of a MachineDrainRule."""

    drain: MachineDrainRuleDrainConfig
    """What the drain does with the pods named."""
    machines: _MachineSelectors = None
    """The Machines whose drain the rule applies to; none: every Machine of the namespace."""
    pods: _PodSelectors = None
    """The pods the rule applies to; none: every pod."""


class MachineDrainRule(K8sModel):
    """A drain rule for the Machines and pods it selects."""

    api_version: str = "cluster.x-k8s.io/v1beta2"
    kind: str = "MachineDrainRule"
    metadata: ObjectMeta
    spec: MachineDrainRuleSpec
    """Desired state."""
