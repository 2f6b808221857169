"""The core MachinePool controller, with upstream Cluster API semantics.

``setup(mgr, cluster_cache)`` registers the controller on a ``Manager``: it watches
MachinePools, Clusters and Machines up front, and at runtime the kinds MachinePools reference
(bootstrap configs, infra pools, infra machines) and each workload cluster's Nodes.

Modules by concern: ``controller`` (reconcile and patch on exit), ``scope`` (state shared by
phases), ``bootstrap``, ``infrastructure``, ``machines`` (MachinePool Machines), ``noderefs``,
``status`` (counters, phase, conditions), ``delete``, ``external`` (adopting references),
``watches`` (indexes and mappers).
"""

from __future__ import annotations

from machinepool.controllers.machinepool.controller import (
    COMPONENT,
    CONTROLLER_NAME,
    MachinePoolReconciler,
)
from machinepool.runtime import ClusterCache, Manager

__all__ = ["COMPONENT", "CONTROLLER_NAME", "MachinePoolReconciler", "setup"]


async def setup(
    mgr: Manager,
    cluster_cache: ClusterCache,
    *,
    concurrency: int = 10,
    machines_up_to_date: bool = False,
    pool_node_taints: bool = False,
) -> MachinePoolReconciler:
    """Register the MachinePool controller on ``mgr``.

    ``concurrency`` [10, upstream's ``--machinepool-concurrency``]: MachinePools reconciled
    at once. ``machines_up_to_date`` [False]: write the UpToDate condition of pool Machines
    (beside upstream, where our Machine controller, which writes it otherwise, does not run).
    ``pool_node_taints`` [False, gate ``MachinePoolNodeTaints``]: keep the template's taints and
    managed labels on the pool's Nodes.
    """
    reconciler = MachinePoolReconciler(
        mgr,
        cluster_cache,
        concurrency=concurrency,
        machines_up_to_date=machines_up_to_date,
        pool_node_taints=pool_node_taints,
    )
    await reconciler.start_watches()
    return reconciler
