"""The simulated cloud's storage format: one instance, one Secret.

The simulated cloud keeps each instance as a Secret (type ``INSTANCE_SECRET_TYPE``) in its
pool's namespace, named by the instance id. The sim provider's backend writes them
(``instance_secret``), the node simulator (``machinepool.sim.kubelet``) and ``SimCloud`` read
and patch them; this module is the one both sides agree on, and it knows nothing of the pool
engine: the cloud has its own state names (``PENDING`` ... ``TERMINATED``), which the backend
maps onto the engine's.

Immutable facts live in ``data`` (``instance.json`` and ``userdata``); what changes later (the
state a fault or a termination forces, a stopped kubelet) lives in annotations, so it can be
merge-patched without a read. The state of a booting instance is derived from the clock
(``bootAt``), so no process has to be running for an instance to finish booting.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from machinepool.api import constants as c
from machinepool.api.meta import format_time, parse_time

__all__ = [
    "FAILED",
    "INSTANCE_LABEL",
    "INSTANCE_SECRET_TYPE",
    "KUBELET_ANNOTATION",
    "PENDING",
    "POOL_ANNOTATION",
    "POOL_LABEL",
    "RUNNING",
    "STATE_ANNOTATION",
    "STATE_REASON_ANNOTATION",
    "TERMINATED",
    "InstanceRecord",
    "instance_secret",
    "provider_id",
    "user_data",
]

INSTANCE_SECRET_TYPE: Final = "sim.infrastructure.cluster.x-k8s.io/instance"
INSTANCE_LABEL: Final = "sim.infrastructure.cluster.x-k8s.io/instance"
"""On every instance record (value ``true``): the node simulator selects records by it."""
POOL_LABEL: Final = "sim.infrastructure.cluster.x-k8s.io/pool"
"""The SimMachinePool name as a label value (hashed when too long)."""
POOL_ANNOTATION: Final = "sim.infrastructure.cluster.x-k8s.io/pool-name"
"""The SimMachinePool name, exactly."""
STATE_ANNOTATION: Final = "sim.infrastructure.cluster.x-k8s.io/state"
"""A forced state (failed, terminated) that overrides the boot clock."""
STATE_REASON_ANNOTATION: Final = "sim.infrastructure.cluster.x-k8s.io/state-reason"
KUBELET_ANNOTATION: Final = "sim.infrastructure.cluster.x-k8s.io/kubelet"
"""``stopped``: the instance runs but its kubelet is dead (no join, no heartbeats), a fault
for health checks; the cloud still reports the instance running."""

PENDING: Final = "pending"
RUNNING: Final = "running"
FAILED: Final = "failed"
TERMINATED: Final = "terminated"
"""The cloud's instance states. The first two come from the boot clock, the last two from a
boot failure or ``STATE_ANNOTATION``; they are spelled as the pool engine's ``InstanceState``
values, which the backend relies on (``tests/unit/test_sim_records.py`` checks it)."""


def provider_id(failure_domain: str, instance_id: str) -> str:
    """``sim:///<failure-domain>/<instance-id>``, the Node's spec.providerID."""
    return f"sim:///{failure_domain}/{instance_id}"


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
    kubelet_stopped: bool = False
    """The kubelet fault is on (``KUBELET_ANNOTATION``)."""
    fail_at: datetime | None = None
    """When a booted instance breaks (``failAfterBootRate``); None: it never does."""

    def state_at(self, now: datetime) -> str:
        """Forced state if any, else pending until ``boot_at``, then running (or failed, at
        once when it failed to boot, from ``fail_at`` when it fails later)."""
        if self.forced_state in (FAILED, TERMINATED):
            return self.forced_state
        if now < self.boot_at:
            return PENDING
        if self.will_fail or (self.fail_at is not None and now >= self.fail_at):
            return FAILED
        return RUNNING

    @classmethod
    def from_secret(cls, secret: dict[str, Any]) -> InstanceRecord:
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
            kubelet_stopped=annotations.get(KUBELET_ANNOTATION) == "stopped",
            attributes=dict(info.get("attributes") or {}),
            uid=str(meta.get("uid", "")),
            fail_at=parse_time(str(info["failAt"])) if info.get("failAt") else None,
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
            **({"failAt": format_time(self.fail_at)} if self.fail_at is not None else {}),
        }


def instance_secret(
    record: InstanceRecord,
    *,
    userdata: bytes,
    labels: Mapping[str, str],
    owner: Mapping[str, Any],
) -> dict[str, Any]:
    """The Secret that stores ``record``, booted with ``userdata``.

    ``labels`` are added to the record's own (``INSTANCE_LABEL``, ``POOL_LABEL``, the cluster
    name); ``owner`` is its one ownerReference (the SimMachinePool), so garbage collection
    removes records a crash left behind.
    """
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": INSTANCE_SECRET_TYPE,
        "metadata": {
            "name": record.id,
            "namespace": record.namespace,
            "labels": {
                INSTANCE_LABEL: "true",
                POOL_LABEL: c.pool_name_label_value(record.pool),
                c.CLUSTER_NAME_LABEL: record.cluster,
                **dict(labels),
            },
            "annotations": {POOL_ANNOTATION: record.pool},
            "ownerReferences": [dict(owner)],
        },
        "data": {
            "instance.json": _b64(json.dumps(record.info(), sort_keys=True).encode()),
            "userdata": _b64(userdata),
        },
    }


def user_data(secret: dict[str, Any]) -> bytes:
    """The bootstrap data an instance booted with (secret: never log it)."""
    raw = (secret.get("data") or {}).get("userdata", "")
    return base64.b64decode(raw) if raw else b""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
