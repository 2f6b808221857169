"""Deletion-safe handling of Machines that MachinePools own (MachinePool Machines).

``setup(mgr, cluster_cache)`` registers the controller. A pool Machine's deletion cordons and
drains its Node through the Eviction API (PDBs honoured, up to nodeDrainTimeoutSeconds),
deletes its infra machine, then its Node, then lets the Machine go. While alive, the Machine
gets nodeRef and the NodeReady / Ready / Available conditions from its Node.
"""

from __future__ import annotations

from machinepool.controllers.machine.controller import (
    COMPONENT,
    CONTROLLER_NAME,
    MachineReconciler,
)
from machinepool.runtime import ClusterCache, Manager

__all__ = ["COMPONENT", "CONTROLLER_NAME", "MachineReconciler", "setup"]


async def setup(
    mgr: Manager, cluster_cache: ClusterCache, *, concurrency: int = 10
) -> MachineReconciler:
    """Register the pool-Machine controller on ``mgr``.

    ``concurrency`` [10, upstream's ``--machine-concurrency``]: Machines reconciled at once.
    """
    reconciler = MachineReconciler(mgr, cluster_cache, concurrency=concurrency)
    await reconciler.start_watches()
    return reconciler
