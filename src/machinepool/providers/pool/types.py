"""The vocabulary of the pool engine: instances, what to create, and the backend Protocol.

A backend is anything that can create, list and delete single instances (a simulated cloud,
EC2 without an Auto Scaling group, a bare-metal inventory). The engine (``engine.py``) calls it;
the planning functions (``plan.py``) only ever see ``Instance`` values. Providers implement
``Backend`` and raise ``CloudError`` for failures the engine should back off from.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from machinepool.runtime import ExpectedError

__all__ = [
    "Backend",
    "CapacityError",
    "CloudError",
    "Instance",
    "InstanceSpec",
    "InstanceState",
    "SupportsStart",
]


class InstanceState(enum.StrEnum):
    """Lifecycle of one instance as its backend reports it."""

    PENDING = "pending"
    """Created, still booting."""
    RUNNING = "running"
    """Booted; its Node should join (or has joined) the workload cluster."""
    STOPPED = "stopped"
    """Booted, then stopped: a warm pool's instance, with no Node, waiting to be started."""
    FAILED = "failed"
    """Broken for good; the engine replaces it."""
    TERMINATED = "terminated"
    """Gone (or going); kept only as a record."""


@dataclass(frozen=True)
class Instance:
    """One instance as the backend sees it."""

    id: str
    provider_id: str
    """Byte-equal to the Node's spec.providerID once it joins."""
    failure_domain: str
    state: InstanceState
    template_hash: str
    """Hash of what makes instances different (version, image, shape); see ``template_hash``."""
    created: datetime
    bootstrap_version: str = ""
    """Which bootstrap data the instance booted with (the data Secret's version)."""
    index: int = 0
    """Creation ordinal within the pool; ids are derived from it so creation is idempotent."""
    warm: bool = False
    """In the warm pool (booting to be stopped, or stopped), not yet started into the pool:
    no infra machine, no Machine, not in providerIDList."""


@dataclass(frozen=True)
class InstanceSpec:
    """What to create: everything a backend needs for one new instance."""

    pool_id: str
    """Backend-side identity of the pool (e.g. ``namespace/name``)."""
    instance_id: str
    """Chosen by the engine, deterministic: creating the same id twice yields one instance."""
    index: int
    failure_domain: str
    template_hash: str
    version: str
    """Kubernetes version the instance runs."""
    bootstrap_data: bytes = field(repr=False)
    """The bootstrap (cloud-init) payload current at creation; secret, never logged."""
    bootstrap_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Backend tags (cluster name, pool name)."""
    attributes: Mapping[str, str] = field(default_factory=dict)
    """Backend-specific settings (instance type, image, boot delay...)."""
    warm: bool = False
    """Create it into the warm pool: booted, then stopped until ``SupportsStart.start``."""


class CloudError(ExpectedError):
    """A backend call failed; the engine backs off and reports it in a condition."""


class CapacityError(CloudError):
    """The backend has no room in the requested failure domain."""

    def __init__(self, failure_domain: str, message: str) -> None:
        super().__init__(message)
        self.failure_domain = failure_domain


class Backend(Protocol):
    """What the engine needs from a cloud: create, list and delete single instances."""

    async def create(self, spec: InstanceSpec) -> Instance:
        """Create one instance. Creating an id that exists returns the existing instance when
        the request is the same (pool, failure domain, template) and raises ``CloudError``
        otherwise; a failure domain out of room raises ``CapacityError``."""
        ...

    async def list(self, pool_id: str) -> list[Instance]:
        """Every instance of the pool, terminated ones included while the backend keeps them."""
        ...

    async def delete(self, instance_id: str) -> None:
        """Terminate one instance; deleting a missing or terminated one is not an error."""
        ...

    def failure_domains(self) -> Mapping[str, int | None]:
        """Failure domains this backend offers, each with its capacity (``None``: unbounded)."""
        ...


@runtime_checkable
class SupportsStart(Protocol):
    """Backends with warm pools: they create stopped instances (``InstanceSpec.warm``) and
    start them on demand."""

    async def start(self, instance_id: str, bootstrap_data: bytes, bootstrap_version: str) -> None:
        """Start a stopped warm instance into the pool. Its user data is replaced with
        ``bootstrap_data`` first (as EC2 lets a stopped instance's be), so it joins with a
        token that is valid now, not the one it was warmed with; starting one that is not
        stopped is not an error."""
        ...
