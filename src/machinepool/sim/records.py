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

Like a real cloud, an instance has a private address and a hostname derived from it
(``ip-10-1-2-3.sim.internal``, as EC2's ``ip-10-1-2-3.ec2.internal``), never its id: a kubelet
registers under its hostname (or the JoinConfiguration's ``nodeRegistration.name``), so Node
names are not instance ids and nothing may match one to the other by name. Both are chosen
once, at create (``allocate_address``), and stored, so they survive restarts.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from machinepool.api import constants as c
from machinepool.api.meta import format_time, parse_time

__all__ = [
    "ADDRESS_ANNOTATION",
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
    "allocate_address",
    "hostname_of",
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
ADDRESS_ANNOTATION: Final = "sim.infrastructure.cluster.x-k8s.io/private-ip"
"""The instance's private address, also in ``instance.json``: here so the cloud can index the
addresses in use without decoding every record."""
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


_NETWORK = ipaddress.IPv4Network("10.0.0.0/8")
HOST_DOMAIN: Final = "sim.internal"
"""The domain of instance hostnames (EC2's is ``ec2.internal`` or ``<region>.compute.internal``)."""


def allocate_address(namespace: str, instance_id: str, taken: Callable[[str], bool]) -> str:
    """A private address in 10.0.0.0/8 for a new instance, one ``taken`` says is free.

    The first candidate is a hash of the instance, so a retried create asks for the same
    address and the spread looks like a busy VPC's; a taken one moves to the next. Addresses
    ending in .0 or .255 are skipped (a real subnet reserves them). One namespace is one
    network: ``taken`` answers for the namespace, as a VPC never hands out an address twice.

    >>> allocate_address("ns", "pool-ab12c-3", lambda _ip: False)
    '10.199.189.54'
    """
    size = _NETWORK.num_addresses
    digest = int.from_bytes(hashlib.sha256(f"{namespace}/{instance_id}".encode()).digest()[:4])
    start = digest % size
    for step in range(size):
        address = _NETWORK[(start + step) % size]
        if int(address) & 0xFF in (0, 255):
            continue
        text = str(address)
        if not taken(text):
            return text
    raise RuntimeError(f"no free private address left in {_NETWORK} for {namespace}")


def hostname_of(address: str) -> str:
    """The hostname the cloud gives an instance of private ``address``:
    ``ip-10-1-2-3.sim.internal``, the shape of EC2's private DNS names."""
    return f"ip-{address.replace('.', '-')}.{HOST_DOMAIN}"


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
    private_ip: str = ""
    """Its private address (``allocate_address``); empty on records written before the cloud
    allocated addresses."""
    hostname: str = ""
    """Its hostname, what a kubelet registers under unless told a name; records written
    before the cloud named hosts read back with the instance id, the name their Nodes got."""

    def meta_data(self) -> dict[str, str]:
        """What the instance's metadata service tells cloud-init (``ds.meta_data``), in the
        keys EC2's datasource uses; cloud-init's standard ``v1`` keys are derived from it."""
        return {
            "instance_id": self.id,
            "local_hostname": self.hostname,
            "hostname": self.hostname,
            "local_ipv4": self.private_ip,
            "availability_zone": self.failure_domain,
            "instance_type": str(self.attributes.get("instanceType") or ""),
        }

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
            private_ip=str(info.get("privateIP", "")),
            hostname=str(info.get("hostname") or meta.get("name", "")),
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
            **({"privateIP": self.private_ip} if self.private_ip else {}),
            **({"hostname": self.hostname} if self.hostname else {}),
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
            "annotations": {
                POOL_ANNOTATION: record.pool,
                **({ADDRESS_ANNOTATION: record.private_ip} if record.private_ip else {}),
            },
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
