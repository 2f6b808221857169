"""The core component: the MachinePool, pool-Machine and MachineHealthCheck controllers.

``machinepool run --components core`` wires them with ``await setup(mgr, cluster_cache,
CoreOptions(...))``; tests that need only some of them call each package's ``setup``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from machinepool.controllers import machine, machinehealthcheck, machinepool
from machinepool.runtime import ClusterCache, Manager

__all__ = ["CoreOptions", "setup"]


@dataclass(frozen=True)
class CoreOptions:
    """The core component's settings; each field is a ``machinepool run`` flag of its name."""

    machinepool_concurrency: int = 10
    """MachinePools reconciled at once (upstream's ``--machinepool-concurrency``)."""
    machine_concurrency: int = 10
    """Pool Machines reconciled at once (upstream's ``--machine-concurrency``)."""
    machinehealthcheck_concurrency: int = 4
    """MachineHealthChecks reconciled at once."""
    beside_upstream: bool = False
    """Share the management cluster with upstream Cluster API's core manager (its MachinePool
    gate off): take MachinePool admission and conversion over from it and run only the
    MachinePool controller, leaving every Machine to upstream's controllers. Needs
    ``--webhook-port``."""
    pool_node_taints: bool = field(default=False, metadata={"flag": False})
    """Not a flag: set from the ``MachinePoolNodeTaints`` feature gate (``--feature-gates``).
    Keep each pool's template taints and managed labels on its Nodes."""


async def setup(
    mgr: Manager, cluster_cache: ClusterCache, options: CoreOptions | None = None
) -> None:
    """Register the core controllers on ``mgr``; beside upstream, the MachinePool one only."""
    options = options or CoreOptions()
    await machinepool.setup(
        mgr,
        cluster_cache,
        concurrency=options.machinepool_concurrency,
        # Beside upstream, our Machine controller (which writes it otherwise) does not run.
        machines_up_to_date=options.beside_upstream,
        pool_node_taints=options.pool_node_taints,
    )
    if options.beside_upstream:
        # Upstream's Machine controller owns every Machine and its own MachineHealthCheck
        # controller marks them (our MachinePools still remediate).
        return
    await machine.setup(
        mgr,
        cluster_cache,
        concurrency=options.machine_concurrency,
        pool_node_taints=options.pool_node_taints,
    )
    await machinehealthcheck.setup(
        mgr, cluster_cache, concurrency=options.machinehealthcheck_concurrency
    )
