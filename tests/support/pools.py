"""The steps every tier takes with a pool, written once: scale it, roll it, and tell whether
its MachinePool reports it running.

Creating a pool's objects is ``builders.create_pool``; a harness adds its own world to these
(Ready Nodes from its informers, live instances from the Sim cloud) and keeps its own timeouts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.support.resources import MACHINE_POOLS

from machinepool.runtime import Client

__all__ = ["reports_running", "roll_pool", "scale_pool"]


async def scale_pool(client: Client, namespace: str, name: str, replicas: int) -> None:
    """What ``kubectl scale mp/<name> --replicas`` sends: the scale subresource."""
    await client.set_scale(MACHINE_POOLS, name, namespace, replicas)


async def roll_pool(client: Client, namespace: str, name: str, version: str) -> None:
    """What ``kubectl patch mp <name> --type merge`` sends to move the pool to ``version``."""
    patch = {"spec": {"template": {"spec": {"version": version}}}}
    await client.patch(MACHINE_POOLS, name, patch, namespace)


def reports_running(
    pool: Mapping[str, Any] | None, replicas: int, *, node_refs: bool = True
) -> bool:
    """The MachinePool ``pool`` says it runs ``replicas``: phase ``Running``, that many Ready
    replicas and (``node_refs``) that many Node references. What the workload shows is the
    caller's to add."""
    if pool is None:
        return False
    status = pool.get("status") or {}
    return (
        status.get("phase") == "Running"
        and status.get("readyReplicas", 0) == replicas
        and (not node_refs or len(status.get("nodeRefs") or []) == replicas)
    )
