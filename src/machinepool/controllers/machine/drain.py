"""Cordon and drain a Node through the Eviction API, honouring PodDisruptionBudgets.

Called by ``controller`` while a pool-owned Machine is being deleted. One call evicts what it
can and reports what is left; the caller comes back later (a PDB that answers 429 today may
allow the eviction tomorrow). DaemonSet pods and mirror pods are left alone, as kubectl drain
and upstream do, and so are pods whose ``cluster.x-k8s.io/drain`` label says ``skip``; a pod
labelled ``wait-completed`` is not evicted either, but the drain waits until it has left the
Node (its workload finishes and removes it), as upstream's drain does.

MachineDrainRules (``machine_rules``, ``pod_drain``) choose the same for the pods they select,
on the Machines they select: the first rule by name that selects a pod decides (a pod's own
label comes first), and a rule's ``order`` sequences the drain: only pods of the lowest order
still on the Node are evicted or waited for, the rest after them, as upstream's drain does.
A rule that cannot be applied (an invalid selector, an unknown behaviour) fails the drain
(``DrainError``), as upstream's does, until it is fixed.

On an unreachable Node (Ready Unknown) no kubelet will ever confirm a pod's end, so, as
upstream's drain does there, evictions ask for a 1-second grace period and pods whose
deletionTimestamp passed more than a second ago count as gone: otherwise a dead Node's drain
would wait forever and block its remediation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from machinepool.api import constants as c
from machinepool.api.meta import parse_time
from machinepool.api.views import MachineDrainRuleView, NodeView, ObjectView
from machinepool.controllers.selector import matches
from machinepool.runtime import (
    NAMESPACES,
    NODES,
    PODS,
    Client,
    ExpectedError,
    NotFound,
    Obj,
    TooManyRequests,
)

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
UNREACHABLE_GRACE_SECONDS = 1
"""Grace period asked of evictions on an unreachable Node, and how many whole seconds past
its deletionTimestamp a pod there is no longer waited for (upstream's values)."""


@dataclass
class DrainResult:
    """Pods still on the Node after one round of evictions."""

    remaining: list[str] = field(default_factory=list)
    """``ns/name`` of pods not gone yet."""
    blocked: list[str] = field(default_factory=list)
    """Eviction refusals (PDB or otherwise), one message per pod."""
    completing: list[str] = field(default_factory=list)
    """``ns/name`` of pods labelled (or ruled) ``wait-completed``: not evicted, waited for."""
    evict_later: list[str] = field(default_factory=list)
    """``ns/name`` of pods a MachineDrainRule orders after pods still on the Node: evicted
    once those are gone."""
    complete_later: list[str] = field(default_factory=list)
    """``ns/name`` of ``WaitCompleted`` pods ordered after pods still on the Node."""
    terminating: list[str] = field(default_factory=list)
    """``ns/name`` of pods being deleted that still exist: their containers are stopping
    within their grace period, or a finalizer holds the object."""
    skippable_in: float | None = None
    """Seconds until the first pod waited for on an unreachable Node stops being waited for
    (``None`` when there is none): the caller need not come back later than that."""

    def soonest(self, seconds: float | None) -> None:
        """Keep the earlier of ``skippable_in`` and ``seconds``."""
        if seconds is not None:
            self.skippable_in = (
                seconds if self.skippable_in is None else min(self.skippable_in, seconds)
            )

    @property
    def done(self) -> bool:
        return not self.remaining

    def message(self) -> str:
        parts = [f"Draining Node: {len(self.remaining)} pods remaining"]
        if self.completing:
            shown = ", ".join(self.completing[:3])
            parts.append(
                f"waiting for completion: {shown}" + (" ..." if len(self.completing) > 3 else "")
            )
        if self.terminating:
            shown = ", ".join(self.terminating[:3])
            parts.append(
                f"waiting for deletion: {shown}" + (" ..." if len(self.terminating) > 3 else "")
            )
        if self.blocked:
            shown = "; ".join(self.blocked[:3])
            parts.append(f"evictions refused: {shown}" + (" ..." if len(self.blocked) > 3 else ""))
        for later, what in (
            (self.evict_later, "evicted"),
            (self.complete_later, "waited for"),
        ):
            if later:
                shown = ", ".join(later[:3])
                parts.append(f"{what} after those: {shown}" + (" ..." if len(later) > 3 else ""))
        return ", ".join(parts)


class DrainError(ExpectedError):
    """A drain round cannot run: a MachineDrainRule that cannot be applied, a pod whose
    namespace is not found. The Machine says so (DrainingSucceeded False, DrainingFailed)."""


def should_evict(pod: Obj) -> bool:
    """Pods a drain moves: everything except DaemonSet and mirror pods (pure)."""
    meta = ObjectView(pod).metadata
    if MIRROR_ANNOTATION in (meta.annotations or {}):
        return False
    owners = meta.owner_references or []
    return not any(
        isinstance(o, dict) and o.get("kind") == "DaemonSet" and o.get("controller") for o in owners
    )


SKIP, WAIT_COMPLETED, DRAIN = "Skip", "WaitCompleted", "Drain"


def drain_behaviour(pod: Obj) -> str:
    """What the pod's ``cluster.x-k8s.io/drain`` label asks of a drain (pure): ``Skip``,
    ``WaitCompleted`` or, without the label or with a value it does not know, ``Drain``.
    Values are read as upstream reads them: case aside, and ``wait-completed`` with or
    without its dash."""
    value = (ObjectView(pod).metadata.labels or {}).get(c.POD_DRAIN_LABEL)
    if not isinstance(value, str):
        return DRAIN
    if value.lower() == SKIP.lower():
        return SKIP
    if value.replace("-", "", 1).lower() == WAIT_COMPLETED.lower():
        return WAIT_COMPLETED
    return DRAIN


SELECTOR_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist"}


def selector_problem(selector: object) -> str | None:
    """Why a label selector of a MachineDrainRule is invalid, or ``None`` (pure): an unknown
    operator, In or NotIn without values, Exists or DoesNotExist with some."""
    if not isinstance(selector, Mapping):
        return None
    for expr in selector.get("matchExpressions") or []:
        operator, values = expr.get("operator"), expr.get("values") or []
        if operator not in SELECTOR_OPERATORS:
            return f"{operator!r} is not a valid label selector operator"
        if operator in ("In", "NotIn") and not values:
            return f"values must be given for operator {operator}"
        if operator in ("Exists", "DoesNotExist") and values:
            return f"values must be empty for operator {operator}"
    return None


def _selects(selector: object, labels: Mapping[str, str]) -> bool:
    """A rule's selector: missing or empty selects everything (pure)."""
    if not isinstance(selector, Mapping):
        return True
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        return True
    return matches(selector, labels)


def _labels(obj: Obj | None) -> dict[str, str]:
    return dict(ObjectView(obj).metadata.labels or {}) if obj is not None else {}


def machine_rules(rules: Sequence[Obj], machine: Obj, cluster: Obj) -> list[Obj]:
    """The MachineDrainRules (of the Machine's namespace) that apply to ``machine``, by name
    (pure): those without ``spec.machines``, and those with an entry whose selector selects
    the Machine and whose clusterSelector its Cluster. Any rule with an invalid selector fails
    the drain (``DrainError``), as upstream's does."""
    problems = []
    for rule in map(MachineDrainRuleView, rules):
        for entry in [*(rule.spec.machines or []), *(rule.spec.pods or [])]:
            for key in ("selector", "clusterSelector", "namespaceSelector"):
                problem = selector_problem(entry.get(key))
                if problem:
                    problems.append(f"MachineDrainRule {rule.metadata.name}: {problem}")
    if problems:
        raise DrainError("invalid selectors: " + "; ".join(sorted(set(problems))))
    applying = [
        rule
        for rule in map(MachineDrainRuleView, rules)
        if not rule.spec.machines
        or any(
            _selects(entry.get("selector"), _labels(machine))
            and _selects(entry.get("clusterSelector"), _labels(cluster))
            for entry in rule.spec.machines
        )
    ]
    return [rule.raw for rule in sorted(applying, key=lambda rule: str(rule.metadata.name))]


def pod_drain(
    pod: Obj, rules: Sequence[Obj], namespaces: Mapping[str, Mapping[str, str]]
) -> tuple[str, int]:
    """(behaviour, order) for one pod the drain may move (pure): its ``cluster.x-k8s.io/drain``
    label if it says Skip or WaitCompleted, else the first of ``rules`` (``machine_rules``)
    that selects it (its pods' selector, and their namespaceSelector against ``namespaces``,
    each namespace's labels), else Drain at order 0. As upstream's: only a Drain rule's order
    counts, WaitCompleted is waited for at order 0."""
    behaviour = drain_behaviour(pod)
    if behaviour != DRAIN or not rules:
        return behaviour, 0
    meta = ObjectView(pod).metadata
    namespace = str(meta.namespace)
    if namespace not in namespaces:
        raise DrainError(f"Pod {namespace}/{meta.name}: Namespace not found")
    for rule in map(MachineDrainRuleView, rules):
        entries = rule.spec.pods or []
        if entries and not any(
            _selects(entry.get("selector"), _labels(pod))
            and _selects(entry.get("namespaceSelector"), namespaces[namespace])
            for entry in entries
        ):
            continue
        chosen = rule.spec.drain.behavior
        if chosen == DRAIN:
            order = rule.spec.drain.order
            return DRAIN, order if isinstance(order, int) else 0
        if chosen in (SKIP, WAIT_COMPLETED):
            return str(chosen), 0
        raise DrainError(
            f"MachineDrainRule {rule.metadata.name} has an unknown spec.drain.behavior: {chosen!r}"
        )
    return DRAIN, 0


async def namespace_labels(client: Client) -> dict[str, dict[str, str]]:
    """Each namespace of the workload cluster and its labels, for rules' namespaceSelectors."""
    found = await client.list(NAMESPACES)
    return {str(ObjectView(ns).metadata.name): _labels(ns) for ns in found.items}


async def cordon(client: Client, node: Obj) -> None:
    view = NodeView(node)
    if not view.spec.unschedulable:
        await client.patch(NODES, str(view.metadata.name), {"spec": {"unschedulable": True}})


def node_unreachable(node: Obj | None) -> bool:
    """Whether the Node's Ready condition is Unknown: its kubelet stopped reporting (pure)."""
    for cond in (NodeView(node).status.conditions or []) if node is not None else []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "Unknown"
    return False


def seconds_until_skipped(pod: Obj, at: datetime) -> float | None:
    """On an unreachable Node: seconds until a terminating pod is no longer waited for (0 or
    less: not any more); ``None`` for a pod that is not terminating (pure)."""
    stamp = ObjectView(pod).metadata.deletion_timestamp
    if not stamp:
        return None
    try:
        since = (at - parse_time(str(stamp))).total_seconds()
    except ValueError:
        return None
    # Upstream lets a pod go once the whole seconds since its deletionTimestamp exceed the
    # grace, that is from grace + 1 seconds on.
    return UNREACHABLE_GRACE_SECONDS + 1 - since


async def drain(client: Client, node: Obj, at: datetime, rules: Sequence[Obj] = ()) -> DrainResult:
    """One round of evictions from ``node`` at time ``at``, following ``rules`` (the
    MachineDrainRules that apply to its Machine: ``machine_rules``)."""
    node_name = str(NodeView(node).metadata.name)
    unreachable = node_unreachable(node)
    pods = await client.list(PODS, field_selector=f"spec.nodeName={node_name}")
    namespaces = await namespace_labels(client) if rules else {}
    moving: list[tuple[Obj, str, int, float | None]] = []
    for pod in sorted(pods.items, key=_pod_key):
        if not should_evict(pod):
            continue
        wait = seconds_until_skipped(pod, at) if unreachable else None
        if wait is not None and wait <= 0:
            continue  # its kubelet is gone and will never confirm the end
        behaviour, order = pod_drain(pod, rules, namespaces)
        if behaviour != SKIP:
            moving.append((pod, behaviour, order, wait))
    # Only pods of the lowest order still on the Node are evicted or waited for now.
    first = min((order for _, _, order, _ in moving), default=0)
    result = DrainResult()
    for pod, behaviour, order, wait in moving:
        meta = ObjectView(pod).metadata
        ns, name = meta.namespace, meta.name
        key = _pod_key(pod)
        result.remaining.append(key)
        if behaviour == WAIT_COMPLETED:
            # Its owner ends it; the drain only waits.
            (result.completing if order == first else result.complete_later).append(key)
            continue
        if meta.deletion_timestamp:
            result.terminating.append(key)
            result.soonest(wait)
            continue  # already going; wait for it
        if order != first:
            result.evict_later.append(key)
            continue
        try:
            if not await _evict(client, ns, name, unreachable):
                result.remaining.remove(key)
            elif unreachable:  # its deletionTimestamp is now + grace
                result.soonest(2 * UNREACHABLE_GRACE_SECONDS + 1)
        except TooManyRequests as exc:
            result.blocked.append(f"{key}: {exc.message}")
    return result


def _pod_key(pod: Obj) -> str:
    meta = ObjectView(pod).metadata
    return f"{meta.namespace}/{meta.name}"


async def _evict(client: Client, namespace: str, name: str, unreachable: bool) -> bool:
    """Ask the Eviction API to evict one pod; False when the pod is gone already. A refusal
    (429: a PDB) propagates as ``TooManyRequests``."""
    body: Obj = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    if unreachable:
        body["deleteOptions"] = {"gracePeriodSeconds": UNREACHABLE_GRACE_SECONDS}
    try:
        await client.request(
            "POST", PODS.path(namespace, name) + "/eviction", body=body, verb="create"
        )
    except NotFound:
        return False
    return True
