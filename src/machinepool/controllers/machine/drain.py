"""Cordon and drain a Node through the Eviction API, honouring PodDisruptionBudgets.

Called by ``controller`` while a pool-owned Machine is being deleted. One call evicts what it
can and reports what is left; the caller comes back later (a PDB that answers 429 today may
allow the eviction tomorrow). DaemonSet pods and mirror pods are left alone, as kubectl drain
and upstream do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from machinepool.api.meta import dig
from machinepool.runtime import NODES, PODS, Client, NotFound, Obj, TooManyRequests

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass
class DrainResult:
    """Pods still on the Node after one round of evictions."""

    remaining: list[str] = field(default_factory=list)
    """``ns/name`` of pods not gone yet."""
    blocked: list[str] = field(default_factory=list)
    """Eviction refusals (PDB or otherwise), one message per pod."""

    @property
    def done(self) -> bool:
        return not self.remaining

    def message(self) -> str:
        parts = [f"Draining Node: {len(self.remaining)} pods remaining"]
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


async def cordon(client: Client, node: Obj) -> None:
    if not dig(node, "spec", "unschedulable"):
        await client.patch(
            NODES, str(dig(node, "metadata", "name")), {"spec": {"unschedulable": True}}
        )


async def drain(client: Client, node_name: str) -> DrainResult:
    pods = await client.list(PODS, field_selector=f"spec.nodeName={node_name}")
    result = DrainResult()
    for pod in pods.items:
        if not should_evict(pod):
            continue
        ns, name = dig(pod, "metadata", "namespace"), dig(pod, "metadata", "name")
        result.remaining.append(f"{ns}/{name}")
        if dig(pod, "metadata", "deletionTimestamp"):
            continue  # already going; wait for it
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns},
        }
        try:
            await client.request(
                "POST", PODS.path(ns, name) + "/eviction", body=body, verb="create"
            )
        except NotFound:
            result.remaining.remove(f"{ns}/{name}")
        except TooManyRequests as exc:
            result.blocked.append(f"{ns}/{name}: {exc.message}")
    return result
