"""Cordon and drain a Node through the Eviction API, honouring PodDisruptionBudgets.

Called by ``controller`` while a pool-owned Machine is being deleted. One call evicts what it
can and reports what is left; the caller comes back later (a PDB that answers 429 today may
allow the eviction tomorrow). DaemonSet pods and mirror pods are left alone, as kubectl drain
and upstream do, and so are pods whose ``cluster.x-k8s.io/drain`` label says ``skip``; a pod
labelled ``wait-completed`` is not evicted either, but the drain waits until it has left the
Node (its workload finishes and removes it), as upstream's drain does.

On an unreachable Node (Ready Unknown) no kubelet will ever confirm a pod's end, so, as
upstream's drain does there, evictions ask for a 1-second grace period and pods whose
deletionTimestamp passed more than a second ago count as gone: otherwise a dead Node's drain
would wait forever and block its remediation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from machinepool.api import constants as c
from machinepool.api.meta import dig, parse_time
from machinepool.runtime import NODES, PODS, Client, NotFound, Obj, TooManyRequests

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
    """``ns/name`` of pods labelled ``wait-completed``: not evicted, waited for."""
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
        return ", ".join(parts)


def should_evict(pod: Obj) -> bool:
    """Pods a drain moves: everything except DaemonSet and mirror pods (pure)."""
    if MIRROR_ANNOTATION in dig(pod, "metadata", "annotations", default={}):
        return False
    owners = dig(pod, "metadata", "ownerReferences", default=[])
    return not any(
        isinstance(o, dict) and o.get("kind") == "DaemonSet" and o.get("controller") for o in owners
    )


SKIP, WAIT_COMPLETED, DRAIN = "Skip", "WaitCompleted", "Drain"


def drain_behaviour(pod: Obj) -> str:
    """What the pod's ``cluster.x-k8s.io/drain`` label asks of a drain (pure): ``Skip``,
    ``WaitCompleted`` or, without the label or with a value it does not know, ``Drain``.
    Values are read as upstream reads them: case aside, and ``wait-completed`` with or
    without its dash."""
    value = dig(pod, "metadata", "labels", default={}).get(c.POD_DRAIN_LABEL)
    if not isinstance(value, str):
        return DRAIN
    if value.lower() == SKIP.lower():
        return SKIP
    if value.replace("-", "", 1).lower() == WAIT_COMPLETED.lower():
        return WAIT_COMPLETED
    return DRAIN


async def cordon(client: Client, node: Obj) -> None:
    if not dig(node, "spec", "unschedulable"):
        await client.patch(
            NODES, str(dig(node, "metadata", "name")), {"spec": {"unschedulable": True}}
        )


def node_unreachable(node: Obj | None) -> bool:
    """Whether the Node's Ready condition is Unknown: its kubelet stopped reporting (pure)."""
    for cond in dig(node, "status", "conditions", default=[]):
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "Unknown"
    return False


def seconds_until_skipped(pod: Obj, at: datetime) -> float | None:
    """On an unreachable Node: seconds until a terminating pod is no longer waited for (0 or
    less: not any more); ``None`` for a pod that is not terminating (pure)."""
    stamp = dig(pod, "metadata", "deletionTimestamp")
    if not stamp:
        return None
    try:
        since = (at - parse_time(str(stamp))).total_seconds()
    except ValueError:
        return None
    # Upstream lets a pod go once the whole seconds since its deletionTimestamp exceed the
    # grace, that is from grace + 1 seconds on.
    return UNREACHABLE_GRACE_SECONDS + 1 - since


async def drain(client: Client, node: Obj, at: datetime) -> DrainResult:
    """One round of evictions from ``node`` at time ``at``."""
    node_name = str(dig(node, "metadata", "name"))
    unreachable = node_unreachable(node)
    pods = await client.list(PODS, field_selector=f"spec.nodeName={node_name}")
    result = DrainResult()
    for pod in pods.items:
        if not should_evict(pod):
            continue
        wait = seconds_until_skipped(pod, at) if unreachable else None
        if wait is not None and wait <= 0:
            continue  # its kubelet is gone and will never confirm the end
        behaviour = drain_behaviour(pod)
        if behaviour == SKIP:
            continue
        ns, name = dig(pod, "metadata", "namespace"), dig(pod, "metadata", "name")
        result.remaining.append(f"{ns}/{name}")
        if behaviour == WAIT_COMPLETED:
            result.completing.append(f"{ns}/{name}")
            continue  # its owner ends it; the drain only waits
        if dig(pod, "metadata", "deletionTimestamp"):
            result.terminating.append(f"{ns}/{name}")
            result.soonest(wait)
            continue  # already going; wait for it
        try:
            if not await _evict(client, ns, name, unreachable):
                result.remaining.remove(f"{ns}/{name}")
            elif unreachable:  # its deletionTimestamp is now + grace
                result.soonest(2 * UNREACHABLE_GRACE_SECONDS + 1)
        except TooManyRequests as exc:
            result.blocked.append(f"{ns}/{name}: {exc.message}")
    return result


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
