"""Deletion-safe handling of Machines that MachinePools own (MachinePool Machines).

``setup(mgr, cluster_cache)`` registers the controller. A pool Machine's deletion waits for
its pre-drain hooks, cordons and drains its Node through the Eviction API (PDBs honoured, up to
nodeDrainTimeoutSeconds), waits for the Node's volumes to be detached, waits for its
pre-terminate hooks, deletes its infra machine, then its Node, then lets the Machine go. While
alive, the Machine gets nodeRef and upstream's conditions from its Node and infra machine.
While its Cluster or the Machine is paused it only reports the Paused condition.
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
    mgr: Manager,
    cluster_cache: ClusterCache,
    *,
    concurrency: int = 10,
    pool_node_taints: bool = False,
) -> MachineReconciler:
    """Register the pool-Machine controller on ``mgr``.

    ``concurrency`` [10, upstream's ``--machine-concurrency``]: Machines reconciled at once.
    ``pool_node_taints`` [False, gate ``MachinePoolNodeTaints``]: keep the owning pool's
    template taints on each Machine's Node.
    """
    reconciler = MachineReconciler(
        mgr, cluster_cache, concurrency=concurrency, pool_node_taints=pool_node_taints
    )
    await reconciler.start_watches()
    return reconciler
