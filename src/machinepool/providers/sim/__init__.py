"""machinepool.providers.sim: SimMachinePool and SimMachine, the embedded default provider.

The pool engine (``machinepool.providers.pool``) over the simulated cloud
(``machinepool.simworld``),
whose instances live in Secrets in the management cluster, so they survive controller restarts
and the node simulator (``machinepool.simworld.kubelet``) can join them to the workload cluster.
This package is only the controller side: the engine's backend and provider for the Sim kinds.
Wire it with ``await setup(mgr, cluster_cache, SimOptions(...))``; inject faults with
``machinepool.simworld.SimCloud`` (the provider watches them: ``machinepool.simworld.FaultsWatch``).
"""

from __future__ import annotations

from dataclasses import dataclass

from machinepool.providers.pool.engine import PoolEngine, start_engine
from machinepool.providers.sim.backend import SimBackend, SimPoolSettings
from machinepool.providers.sim.provider import SimProvider
from machinepool.runtime import SECRETS, ClusterCache, Manager, Obj, ObjectKey
from machinepool.simworld import DEFAULT_ZONES, INSTANCE_LABEL, FaultsWatch
from machinepool.simworld.records import POOL_ANNOTATION, records_in

__all__ = [
    "SimBackend",
    "SimOptions",
    "SimPoolSettings",
    "SimProvider",
    "setup",
]


@dataclass(frozen=True)
class SimOptions:
    """The Sim provider's settings; each field is a ``machinepool run`` flag of its name."""

    sim_zones: tuple[str, ...] = DEFAULT_ZONES
    """Failure domains the simulated cloud offers (comma-separated on the command line)."""
    simmachinepool_concurrency: int = 4
    """SimMachinePools reconciled at once by the pool engine."""


async def setup(
    mgr: Manager, cluster_cache: ClusterCache, options: SimOptions | None = None
) -> PoolEngine:
    """Register the SimMachinePool and SimMachine controllers on ``mgr``; the pool engine
    that runs them."""
    options = options or SimOptions()
    records = await mgr.cache.get_informer(SECRETS, label_selector=INSTANCE_LABEL)
    faults = FaultsWatch(mgr.client, mgr.cache.scope.namespaces)
    mgr.add_controller(faults)
    provider = SimProvider(mgr.client, records, options.sim_zones, faults=faults.faults)
    engine = await start_engine(
        mgr, cluster_cache, provider, concurrency=options.simmachinepool_concurrency
    )
    assert engine.controller is not None
    # Paced: a launch changes per instance (see ``start_engine``).
    engine.controller.watch(records, _record_to_pool, paced=True)
    return engine


def _record_to_pool(secret: Obj) -> list[ObjectKey]:
    meta = secret["metadata"]
    pool = (meta.get("annotations") or {}).get(POOL_ANNOTATION)
    if not pool:  # a record of an earlier version's format carries it inside
        pool = next((r.pool for r in records_in(secret)), "")
    return [ObjectKey(str(meta.get("namespace", "")), pool)] if pool else []
