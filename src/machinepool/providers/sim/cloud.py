"""The simulated cloud: instances stored as Secrets in the management cluster.

Each instance is one Secret (type ``sim.infrastructure.cluster.x-k8s.io/instance``) in its
pool's namespace, named by the instance id. Keeping the cloud in the API server rather than in
controller memory means it survives controller restarts (even ``kill -9``), is shared with the
node simulator (``machinepool.kubelet``) and is visible to tests. A Secret, not a ConfigMap,
because an instance keeps the bootstrap data it booted with, and that holds a join token.

Immutable facts live in ``data`` (``instance.json`` and ``userdata``); what changes later (the
state a fault or a termination forces) lives in annotations so it can be merge-patched without
a read. The state of a booting instance is derived from the clock (``bootAt``), so no process
has to be running for an instance to finish booting.

Faults are injected through a ConfigMap ``machinepool-sim-faults`` in the pool's namespace
(``errorRate``, ``errorAfterRate``, ``stallRate``, ``stallSeconds``) or per instance with
``fail_instance``. The sim provider's backend (``backend.py``) and the node simulator read
these records; tests use ``SimCloud`` to inject faults.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from machinepool.api.meta import format_time, parse_time
from machinepool.providers.pool.types import InstanceState
from machinepool.runtime import CONFIGMAPS, SECRETS, Client, NotFound, Obj

__all__ = [
    "DEFAULT_ZONES",
    "FAULTS_CONFIGMAP",
    "INSTANCE_LABEL",
    "INSTANCE_SECRET_TYPE",
    "POOL_ANNOTATION",
    "POOL_LABEL",
    "STATE_ANNOTATION",
    "Faults",
    "InstanceRecord",
    "SimCloud",
    "provider_id",
]

DEFAULT_ZONES = ("zone-a", "zone-b", "zone-c")
INSTANCE_SECRET_TYPE = "sim.infrastructure.cluster.x-k8s.io/instance"
INSTANCE_LABEL = "sim.infrastructure.cluster.x-k8s.io/instance"
"""On every instance record (value ``true``): the node simulator selects records by it."""
POOL_LABEL = "sim.infrastructure.cluster.x-k8s.io/pool"
"""The SimMachinePool name as a label value (hashed when too long)."""
POOL_ANNOTATION = "sim.infrastructure.cluster.x-k8s.io/pool-name"
"""The SimMachinePool name, exactly."""
STATE_ANNOTATION = "sim.infrastructure.cluster.x-k8s.io/state"
"""A forced state (failed, terminated) that overrides the boot clock."""
STATE_REASON_ANNOTATION = "sim.infrastructure.cluster.x-k8s.io/state-reason"
FAULTS_CONFIGMAP = "machinepool-sim-faults"


def provider_id(failure_domain: str, instance_id: str) -> str:
    """``sim:///<failure-domain>/<instance-id>``, the Node's spec.providerID."""
    return f"sim:///{failure_domain}/{instance_id}"


@dataclass(frozen=True)
class Faults:
    """Fractions (0-1) of cloud calls that fail before acting (``error_rate``), fail after
    acting (``error_after_rate``: the call took effect but reports an error, as a timeout
    does), or stall ``stall_seconds`` first (``stall_rate``)."""

    error_rate: float = 0.0
    error_after_rate: float = 0.0
    stall_rate: float = 0.0
    stall_seconds: float = 0.0

    @classmethod
    def from_configmap(cls, data: Mapping[str, str]) -> Faults:
        def number(key: str) -> float:
            try:
                return float(data.get(key, "0") or 0)
            except ValueError:
                return 0.0

        return cls(
            number("errorRate"),
            number("errorAfterRate"),
            number("stallRate"),
            number("stallSeconds"),
        )

    def to_configmap(self) -> dict[str, str]:
        return {
            "errorRate": str(self.error_rate),
            "errorAfterRate": str(self.error_after_rate),
            "stallRate": str(self.stall_rate),
            "stallSeconds": str(self.stall_seconds),
        }


@dataclass(frozen=True)
class InstanceRecord:
    """One instance as stored; ``state_at`` gives its state at a moment."""

    namespace: str
    id: str
    pool: str
    index: int
    cluster: str
    failure_domain: str
    provider_id: str
    template_hash: str
    version: str
    created: datetime
    boot_at: datetime
    will_fail: bool
    bootstrap_version: str
    forced_state: str
    attributes: Mapping[str, str]
    uid: str = ""

    def state_at(self, now: datetime) -> InstanceState:
        """Forced state if any, else pending until ``boot_at``, then running (or failed)."""
        if self.forced_state in (InstanceState.FAILED, InstanceState.TERMINATED):
            return InstanceState(self.forced_state)
        if now < self.boot_at:
            return InstanceState.PENDING
        return InstanceState.FAILED if self.will_fail else InstanceState.RUNNING

    @classmethod
    def from_secret(cls, secret: Obj) -> InstanceRecord:
        meta = secret.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        raw = (secret.get("data") or {}).get("instance.json", "")
        info: dict[str, Any] = json.loads(base64.b64decode(raw) or b"{}")
        return cls(
            namespace=str(meta.get("namespace", "")),
            id=str(meta.get("name", "")),
            pool=str(annotations.get(POOL_ANNOTATION, info.get("pool", ""))),
            index=int(info.get("index", 0)),
            cluster=str(info.get("cluster", "")),
            failure_domain=str(info.get("failureDomain", "")),
            provider_id=str(info.get("providerID", "")),
            template_hash=str(info.get("templateHash", "")),
            version=str(info.get("version", "")),
            created=parse_time(str(info.get("createdAt", "1970-01-01T00:00:00Z"))),
            boot_at=parse_time(str(info.get("bootAt", "1970-01-01T00:00:00Z"))),
            will_fail=bool(info.get("willFail", False)),
            bootstrap_version=str(info.get("bootstrapVersion", "")),
            forced_state=str(annotations.get(STATE_ANNOTATION, "")),
            attributes=dict(info.get("attributes") or {}),
            uid=str(meta.get("uid", "")),
        )

    def info(self) -> dict[str, Any]:
        """The immutable facts, as stored in ``instance.json``."""
        return {
            "pool": self.pool,
            "index": self.index,
            "cluster": self.cluster,
            "failureDomain": self.failure_domain,
            "providerID": self.provider_id,
            "templateHash": self.template_hash,
            "version": self.version,
            "createdAt": format_time(self.created),
            "bootAt": format_time(self.boot_at),
            "willFail": self.will_fail,
            "bootstrapVersion": self.bootstrap_version,
            "attributes": dict(self.attributes),
        }


def user_data(secret: Obj) -> bytes:
    """The bootstrap data an instance booted with (secret: never log it)."""
    raw = (secret.get("data") or {}).get("userdata", "")
    return base64.b64decode(raw) if raw else b""


def now_utc() -> datetime:
    return datetime.now(UTC)


class SimCloud:
    """Operator and test access to the simulated cloud: inspect instances, inject faults.

    >>> cloud = SimCloud(client)
    >>> await cloud.fail_instance("ns", "pool-ab12c-3")
    >>> await cloud.set_faults("ns", Faults(error_rate=0.5))
    """

    def __init__(self, client: Client) -> None:
        self.client = client

    async def instances(self, namespace: str, pool: str | None = None) -> list[InstanceRecord]:
        """Every instance record in ``namespace`` (of ``pool`` when given), by index."""
        listed = await self.client.list(SECRETS, namespace, label_selector=INSTANCE_LABEL)
        records = [InstanceRecord.from_secret(s) for s in listed.items]
        return sorted((r for r in records if pool is None or r.pool == pool), key=lambda r: r.index)

    async def fail_instance(self, namespace: str, instance_id: str, reason: str = "") -> None:
        """Break an instance for good (its Node turns NotReady; the pool replaces it)."""
        await self._force(namespace, instance_id, InstanceState.FAILED, reason or "Injected")

    async def terminate_instance(self, namespace: str, instance_id: str, reason: str = "") -> None:
        """Terminate an instance out of band, as a cloud console would."""
        await self._force(namespace, instance_id, InstanceState.TERMINATED, reason or "OutOfBand")

    async def _force(
        self, namespace: str, instance_id: str, state: InstanceState, reason: str
    ) -> None:
        patch = {
            "metadata": {
                "annotations": {STATE_ANNOTATION: state.value, STATE_REASON_ANNOTATION: reason}
            }
        }
        await self.client.patch(SECRETS, instance_id, patch, namespace)

    async def faults(self, namespace: str) -> Faults:
        try:
            cm = await self.client.get(CONFIGMAPS, FAULTS_CONFIGMAP, namespace)
        except NotFound:
            return Faults()
        return Faults.from_configmap(cm.get("data") or {})

    async def set_faults(self, namespace: str, faults: Faults) -> None:
        """Make cloud calls for pools in ``namespace`` fail or stall from now on."""
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": FAULTS_CONFIGMAP, "namespace": namespace},
            "data": faults.to_configmap(),
        }
        await self.client.apply(CONFIGMAPS, body, field_manager="machinepool-sim")
