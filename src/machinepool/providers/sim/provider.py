"""The sim provider's side of the pool engine: its kinds, backend, template and ids.

``SimProvider`` implements ``machinepool.providers.pool.PoolProvider`` for SimMachinePool /
SimMachine; ``machinepool.providers.sim.setup`` builds one and starts the engine with it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from machinepool.api import constants as c
from machinepool.api.infra_sim import (
    DEFAULT_SIM_INSTANCE_TYPE,
    SIM_INSTANCE_TYPES,
    SIM_MACHINE_POOLS,
    SIM_MACHINES,
)
from machinepool.api.views import SimMachinePoolView
from machinepool.providers.pool import Backend, template_hash
from machinepool.providers.sim.backend import SimBackend, SimPoolSettings
from machinepool.providers.sim.poolrecords import PoolRecords
from machinepool.runtime import Client, Informer, Obj
from machinepool.simworld import DEFAULT_ZONES, Faults, RequestLimits, SimCloud

__all__ = ["SimProvider"]

_MAX_NAME_PREFIX = 200


class SimProvider:
    """SimMachinePool/SimMachine over instance records in the management cluster."""

    pool_resource = SIM_MACHINE_POOLS
    machine_resource = SIM_MACHINES
    pool_finalizer = "simmachinepool.infrastructure.cluster.x-k8s.io"
    machine_finalizer = "simmachine.infrastructure.cluster.x-k8s.io"
    component = "sim-provider"

    def __init__(
        self,
        client: Client,
        records: Informer,
        zones: tuple[str, ...],
        *,
        faults: Callable[[str], Awaitable[Faults]] | None = None,
    ) -> None:
        """``faults`` [read from the API server each time]: a namespace's faults, e.g. a
        ``FaultsWatch``'s ``faults``."""
        self.client = client
        self.records = records
        self.pool_records = PoolRecords(records)
        self.zones = zones or DEFAULT_ZONES
        self.cloud = SimCloud(client)
        self._faults = faults or self.cloud.faults
        self._limits = RequestLimits()  # one account per namespace, across reconciles

    async def backend(self, pool: Obj) -> Backend:
        meta = pool["metadata"]
        namespace, name = str(meta.get("namespace", "")), str(meta["name"])
        owner = {
            "apiVersion": SIM_MACHINE_POOLS.api_version,
            "kind": SIM_MACHINE_POOLS.kind,
            "name": meta["name"],
            "uid": meta["uid"],
        }
        return SimBackend(
            self.client,
            self.pool_records.of(namespace, name),
            namespace=namespace,
            pool=name,
            cluster=str((meta.get("labels") or {}).get(c.CLUSTER_NAME_LABEL, "")),
            owner=owner,
            settings=SimPoolSettings(SimMachinePoolView(pool).spec.sim),
            faults=await self._faults(namespace),
            zones=self.zones,
            limits=self._limits,
            address_taken=lambda address: self.pool_records.address_taken(namespace, address),
        )

    def template(self, pool: Obj, version: str) -> tuple[str, Mapping[str, str]]:
        spec = SimMachinePoolView(pool).spec.template
        shape = {"instanceType": str(spec.instance_type or "")}
        image = str(spec.image or "")
        return template_hash(version, image, shape), {**shape, "image": image}

    def capacity(self, pool: Obj) -> Mapping[str, str]:
        """What one instance of the pool's type offers (``SIM_INSTANCE_TYPES``; a type stored
        before admission knew the catalogue gets the default, as its Nodes do)."""
        kind = str(SimMachinePoolView(pool).spec.template.instance_type or "")
        return SIM_INSTANCE_TYPES.get(kind) or SIM_INSTANCE_TYPES[DEFAULT_SIM_INSTANCE_TYPE]

    def instance_id(self, pool: Obj, index: int) -> str:
        """``<pool>-<uid prefix>-<ordinal>``: also the SimMachine and Machine name (not the
        Node's: a Node is named after the instance's hostname, as on a real cloud)."""
        meta = pool["metadata"]
        uid = str(meta.get("uid", ""))[:5]
        return f"{str(meta['name'])[:_MAX_NAME_PREFIX]}-{uid}-{index}"

    def strategy(self, pool: Obj) -> Mapping[str, Any] | None:
        return SimMachinePoolView(pool).spec.strategy

    def warm_pool_size(self, pool: Obj, replicas: int) -> int:
        """``spec.warmPool`` as Auto Scaling sizes a warm pool: what maxGroupPreparedCapacity
        leaves beside ``replicas``, and at least minSize; minSize alone when it is unset (an
        Auto Scaling group falls back to its MaxSize, which a SimMachinePool has none of)."""
        warm = SimMachinePoolView(pool).spec.warm_pool
        least = int(warm.min_size or 0)
        prepared = warm.max_group_prepared_capacity
        return least if prepared is None else max(least, int(prepared) - replicas)
