"""Automatic sharding of Clusters over the live replicas of one manager.

``Assigner`` runs in every replica of a sharded manager and works only in the one that holds
the ring's Lease: it labels each Cluster and everything of it (MachinePools, their bootstrap
configs and infra pools, Machines, infra machines) with the shard that the consistent-hash
ring of live shard Leases gives the Cluster, and moves a Cluster only after its old shard has
acknowledged (``machinepool.runtime.reconcile.sharding``). Wired by ``machinepool.app`` under
``--sharding``.
"""

from __future__ import annotations

from machinepool.controllers.sharding.assigner import ASSIGNER_NAME, Assigner, RingConfig

__all__ = ["ASSIGNER_NAME", "Assigner", "RingConfig"]
