"""What a provider plugs into the pool engine: its kinds, its backend, its template.

``machinepool.providers.sim`` implements ``PoolProvider``; the engine (``engine.py``) and the
infra machine controller (``inframachines.py``) call it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from machinepool.providers.pool.types import Backend
from machinepool.runtime import Obj, Resource

__all__ = ["PoolProvider", "SupportsCapacity", "SupportsPurge", "SupportsWarmPool"]


class PoolProvider(Protocol):
    """A provider's kinds and hooks."""

    pool_resource: Resource
    machine_resource: Resource
    pool_finalizer: str
    machine_finalizer: str
    component: str
    """Name used for Events and the field manager, e.g. ``sim-provider``."""

    async def backend(self, pool: Obj) -> Backend:
        """The backend serving ``pool`` (faults and settings read now)."""
        ...

    def template(self, pool: Obj, version: str) -> tuple[str, Mapping[str, str]]:
        """(template hash, backend attributes) of new instances for Kubernetes ``version``."""
        ...

    def instance_id(self, pool: Obj, index: int) -> str:
        """The deterministic id of the pool's ``index``-th instance."""
        ...

    def strategy(self, pool: Obj) -> Mapping[str, Any] | None:
        """The pool's ``spec.strategy``."""
        ...


@runtime_checkable
class SupportsPurge(Protocol):
    """Backends that keep terminated instances as records and can forget them."""

    async def purge(self, instance_id: str) -> None: ...


@runtime_checkable
class SupportsCapacity(Protocol):
    """Providers that know what one instance of a pool offers. The engine reports it in the
    pool's ``status.capacity``, where the cluster autoscaler reads it to scale a pool up from
    zero (the capacity annotations on the MachinePool, when set, take precedence there)."""

    def capacity(self, pool: Obj) -> Mapping[str, str]: ...


@runtime_checkable
class SupportsWarmPool(Protocol):
    """Providers whose pools may keep a warm pool (instances booted and stopped ahead); their
    backends implement ``types.SupportsStart``."""

    def warm_pool_size(self, pool: Obj, replicas: int) -> int:
        """Warm instances ``pool`` keeps beside ``replicas`` running ones (0: none)."""
        ...
