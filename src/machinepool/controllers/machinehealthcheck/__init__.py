"""The MachineHealthCheck controller: marks unhealthy Machines for their owner to remediate.

``setup(mgr, cluster_cache)`` registers it. It follows upstream Cluster API v1.14's semantics
(``targets`` holds the rules): a target is unhealthy when a Node condition or a Machine
condition held an unhealthy status past its timeout, when it has had no Node for
``nodeStartupTimeoutSeconds``, or when its Node is gone; unhealthy Machines get
``HealthCheckSucceeded=False`` and, unless ``triggerIf`` stops remediation (reported as
``RemediationAllowed=False`` and a ``RemediationRestricted`` Event), ``OwnerRemediated=False``.
Beside upstream Cluster API it is not registered: upstream's own controller runs there.
"""

from __future__ import annotations

from machinepool.controllers.machinehealthcheck.controller import (
    COMPONENT,
    CONTROLLER_NAME,
    MachineHealthCheckReconciler,
)
from machinepool.runtime import ClusterCache, Manager

__all__ = [
    "COMPONENT",
    "CONTROLLER_NAME",
    "MachineHealthCheckReconciler",
    "setup",
]


async def setup(
    mgr: Manager, cluster_cache: ClusterCache, *, concurrency: int = 4
) -> MachineHealthCheckReconciler:
    """Register the MachineHealthCheck controller on ``mgr``.

    ``concurrency`` [4]: MachineHealthChecks reconciled at once.
    """
    reconciler = MachineHealthCheckReconciler(mgr, cluster_cache, concurrency=concurrency)
    await reconciler.start_watches()
    return reconciler
