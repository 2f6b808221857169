"""A bare-metal inventory under the pool engine: the provider guide's worked example.

Hosts sit in racks (the failure domains); "creating an instance" claims a free host for a pool
and "deleting" releases it. The pool engine does the rest: desired count, rolling replacement,
spreading over racks, replacement of failed hosts, and drain-safe scale-down through Machines.

Wire it like any provider package, next to core and bootstrap:

    inventory = Inventory({"rack-1": ["h1", "h2"], "rack-2": ["h3", "h4"]})
    await setup(mgr, cluster_cache, InventoryOptions(inventory))

It needs two CRDs (InventoryMachinePool, InventoryMachine in
infrastructure.cluster.x-k8s.io, labelled ``cluster.x-k8s.io/v1beta2: v1beta2``) and, on each
host, a kubelet started with ``--provider-id=inventory://<host>``. tests/unit/
test_deploy_provider_example.py keeps this file true.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from machinepool.providers.pool import (
    Backend,
    CapacityError,
    Instance,
    InstanceSpec,
    InstanceState,
    template_hash,
)
from machinepool.providers.pool.engine import start_engine
from machinepool.runtime import ClusterCache, Manager, Obj, Resource

GROUP = "infrastructure.cluster.x-k8s.io"
POOLS = Resource(GROUP, "v1beta2", "inventorymachinepools", "InventoryMachinePool")
MACHINES = Resource(GROUP, "v1beta2", "inventorymachines", "InventoryMachine")


@dataclass(frozen=True)
class Claim:
    """One host held by one pool. Pools are keyed by (namespace, name), never by a name
    prefix, so pools named "a" and "a-1" cannot see each other's hosts."""

    pool: tuple[str, str]
    instance: Instance


@dataclass
class Inventory:
    """Which hosts exist (by rack) and which instance holds each one."""

    racks: Mapping[str, list[str]]
    claims: dict[str, Claim] = field(default_factory=dict)
    """host -> the claim on it."""


class InventoryBackend:
    """The ``Backend`` of the pools of one namespace: claims and releases hosts.

    The engine passes the pool's name as ``pool_id``; instance ids are unique per namespace.
    """

    def __init__(self, inventory: Inventory, namespace: str) -> None:
        self.inventory, self.namespace = inventory, namespace

    def _mine(self) -> dict[str, Claim]:
        return {h: c for h, c in self.inventory.claims.items() if c.pool[0] == self.namespace}

    async def create(self, spec: InstanceSpec) -> Instance:
        for claim in self._mine().values():
            if claim.instance.id == spec.instance_id:  # idempotent: the engine may retry
                return claim.instance
        free = [
            h
            for h in self.inventory.racks.get(spec.failure_domain, [])
            if h not in self.inventory.claims
        ]
        if not free:
            raise CapacityError(spec.failure_domain, f"no free host in {spec.failure_domain}")
        host = free[0]
        # A real inventory would now write spec.bootstrap_data to the host and power it on.
        instance = Instance(
            id=spec.instance_id,
            provider_id=f"inventory://{host}",
            failure_domain=spec.failure_domain,
            state=InstanceState.RUNNING,
            template_hash=spec.template_hash,
            created=datetime.now(UTC),
            bootstrap_version=spec.bootstrap_version,
            index=spec.index,
        )
        self.inventory.claims[host] = Claim((self.namespace, spec.pool_id), instance)
        return instance

    async def list(self, pool_id: str) -> list[Instance]:
        mine = [c.instance for c in self._mine().values() if c.pool[1] == pool_id]
        return sorted(mine, key=lambda i: i.index)

    async def delete(self, instance_id: str) -> None:
        for host, claim in self._mine().items():
            if claim.instance.id == instance_id:
                del self.inventory.claims[host]  # a real one would wipe the host first

    def failure_domains(self) -> Mapping[str, int | None]:
        return {rack: len(hosts) for rack, hosts in self.inventory.racks.items()}


class InventoryProvider:
    """The provider's kinds and hooks (``machinepool.providers.pool.provider.PoolProvider``)."""

    pool_resource = POOLS
    machine_resource = MACHINES
    pool_finalizer = "inventorymachinepool.infrastructure.cluster.x-k8s.io"
    machine_finalizer = "inventorymachine.infrastructure.cluster.x-k8s.io"
    component = "inventory-provider"

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory

    async def backend(self, pool: Obj) -> Backend:
        return InventoryBackend(self.inventory, str(pool["metadata"]["namespace"]))

    def template(self, pool: Obj, version: str) -> tuple[str, Mapping[str, str]]:
        """New hosts are needed when the version or the OS image changes."""
        image = str((pool.get("spec") or {}).get("image") or "")
        return template_hash(version, image), {"image": image}

    def instance_id(self, pool: Obj, index: int) -> str:
        """``<pool>-<uid prefix>-<ordinal>``: the uid keeps pools "a" and "a-1" apart. Also the
        InventoryMachine and Machine name."""
        meta = pool["metadata"]
        return f"{meta['name']}-{str(meta.get('uid', ''))[:5]}-{index}"

    def strategy(self, pool: Obj) -> Mapping[str, Any] | None:
        strategy: Mapping[str, Any] | None = (pool.get("spec") or {}).get("strategy")
        return strategy


@dataclass(frozen=True)
class InventoryOptions:
    """The provider's settings, one dataclass as each component of ``machinepool run`` has."""

    inventory: Inventory
    """The racks and hosts pools claim from."""
    inventorymachinepool_concurrency: int = 2
    """InventoryMachinePools reconciled at once."""


async def setup(mgr: Manager, cluster_cache: ClusterCache, options: InventoryOptions) -> None:
    """Register the InventoryMachinePool and InventoryMachine controllers on ``mgr``."""
    provider = InventoryProvider(options.inventory)
    await start_engine(
        mgr, cluster_cache, provider, concurrency=options.inventorymachinepool_concurrency
    )
