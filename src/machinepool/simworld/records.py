"""The simulated cloud's storage format: one launch, one Secret.

The simulated cloud keeps a pool's instances in launches: one Secret (type
``INSTANCE_SECRET_TYPE``, ``launch_secret``) in the pool's namespace per block of
``LAUNCH_SIZE`` ordinals (``launch_name``), written by one request for all the instances of
the block that start together, as EC2's RunInstances starts a reservation of several. A pool
of ten is one write, not ten: in a fleet of small pools the cloud's own records had been one
write per Node of the eight or so each Node costs. The sim provider's backend writes them, the
node simulator (``machinepool.simworld.kubelet``) and ``SimCloud`` read and patch them; this module
is the one both sides agree on, and it knows nothing of the pool engine: the cloud has its own
state names (``PENDING`` ... ``TERMINATED``), which the backend maps onto the engine's.

Each instance's immutable facts (but for a warm instance's start, ``start_patch``) live in
``data`` under ``<id>.json``, and the bootstrap data
it booted with under ``userdata.<digest>``, shared by the instances that booted with the same
(``launch_entries``); what changes later (the state a fault or a termination forces, a stopped
kubelet) lives in keys of its own (``<id>.state``, ``<id>.state-reason``, ``<id>.kubelet``),
so one instance's change is a merge patch without a read that touches no other instance
(``state_patch``, ``kubelet_patch``), and an instance leaves its launch by a patch that drops
its keys (``removal_patch``). The state of a booting instance is derived from the clock
(``bootAt``), so no process has to be running for an instance to finish booting. Records
written one instance per Secret (``instance.json``, state in annotations) by earlier versions
read back as launches of one, and are patched in their own format.

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
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from machinepool.api import constants as c
from machinepool.api.meta import format_time, parse_time

__all__ = [
    "FAILED",
    "INSTANCE_LABEL",
    "INSTANCE_SECRET_TYPE",
    "KUBELET_ANNOTATION",
    "LAUNCH_SIZE",
    "PENDING",
    "POOL_ANNOTATION",
    "POOL_LABEL",
    "RUNNING",
    "STATE_ANNOTATION",
    "STATE_REASON_ANNOTATION",
    "STOPPED",
    "TERMINATED",
    "InstanceRecord",
    "allocate_address",
    "hostname_of",
    "instance_entries",
    "instance_ids",
    "kubelet_patch",
    "launch_entries",
    "launch_name",
    "launch_names",
    "launch_secret",
    "provider_id",
    "record_in",
    "records_in",
    "removal_patch",
    "start_patch",
    "state_patch",
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
"""A forced state (failed, terminated) that overrides the boot clock, on a record of an
earlier version's format (a launch keeps it as ``<id>.state``)."""
STATE_REASON_ANNOTATION: Final = "sim.infrastructure.cluster.x-k8s.io/state-reason"
KUBELET_ANNOTATION: Final = "sim.infrastructure.cluster.x-k8s.io/kubelet"
"""``stopped``: the instance runs but its kubelet is dead (no join, no heartbeats), a fault
for health checks; the cloud still reports the instance running (on a record of an earlier
version's format; a launch keeps it as ``<id>.kubelet``)."""

LAUNCH_SIZE: Final = 50
"""Ordinals per launch Secret (``launch_name``): a pool of 10 is one Secret; a block of 50
instances' facts and a few versions of bootstrap data stay far below a Secret's 1 MiB."""
_USERDATA = "userdata."
_INFO = ".json"
_STATE = ".state"
_REASON = ".state-reason"
_KUBELET = ".kubelet"
_LEGACY_INFO = "instance.json"

PENDING: Final = "pending"
RUNNING: Final = "running"
STOPPED: Final = "stopped"
FAILED: Final = "failed"
TERMINATED: Final = "terminated"
"""The cloud's instance states. The first two come from the boot clock, ``STOPPED`` from a
warm-pool instance's booting to a stop (``InstanceRecord.warm``, until ``start_patch``), the
last two from a boot failure or a forced state (``state_patch``); they are spelled as the pool
engine's ``InstanceState`` values, which the backend relies on (``tests/unit/test_sim_records.py``
checks it)."""


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
    launch: str = ""
    """The name of the Secret that stores it (``launch_name``), set when read back."""
    legacy: bool = False
    """Stored alone in a Secret of an earlier version's format (``instance.json``)."""
    userdata: str = ""
    """The digest its bootstrap data is stored under in its launch (``launch_entries``)."""
    warm: bool = False
    """Launched into a warm pool: it boots, then stops, and has no Node until started."""
    start_at: datetime | None = None
    """When a warm instance, started (``start_patch``), runs; None: not started."""

    @property
    def running_at(self) -> datetime:
        """When it runs (or ran): its boot, or its start for a started warm instance."""
        return max(self.boot_at, self.start_at) if self.start_at is not None else self.boot_at

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
        once when it failed to boot, from ``fail_at`` when it fails later). A warm instance
        is stopped once booted, until started; then pending until ``start_at``."""
        if self.forced_state in (FAILED, TERMINATED):
            return self.forced_state
        if now < self.boot_at:
            return PENDING
        if self.will_fail:
            return FAILED
        if self.warm and self.start_at is None:
            return STOPPED
        if now < self.running_at:
            return PENDING
        if self.fail_at is not None and now >= self.fail_at:
            return FAILED
        return RUNNING

    def info(self) -> dict[str, Any]:
        """The immutable facts, as stored in ``<id>.json``."""
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
            **({"warmPool": True} if self.warm else {}),
            **({"startAt": format_time(self.start_at)} if self.start_at is not None else {}),
        }


def launch_name(record: InstanceRecord) -> str:
    """The name of the Secret that holds ``record``: its pool's launch of the block of
    ``LAUNCH_SIZE`` ordinals its own falls in (``<pool>-<uid>-launch-<block>``, from its id
    ``<pool>-<uid>-<ordinal>``). Every instance has exactly one, whatever else was launched
    with it, so a retried create finds the instance it made and two Secrets never hold one
    instance; the suffix keeps any code that names a Secret by an instance id from finding
    one."""
    return _launch_name(record.id, record.index, record.pool)


def launch_names(instance_id: str, pool: str) -> list[str]:
    """The Secrets that may hold ``instance_id`` of ``pool``: its launch, if its id ends in
    its ordinal as the Sim provider's do, and a Secret of the one-instance format."""
    _, _, tail = instance_id.rpartition("-")
    block = [_launch_name(instance_id, int(tail), pool)] if tail.isdigit() else []
    return [*block, instance_id]


def _launch_name(instance_id: str, index: int, pool: str) -> str:
    base = instance_id.removesuffix(f"-{index}")
    if base == instance_id:
        base = pool
    return f"{base}-launch-{index // LAUNCH_SIZE}"


def launch_entries(record: InstanceRecord, userdata: bytes) -> dict[str, str]:
    """The ``data`` entries that store ``record`` booted with ``userdata`` in its launch: its
    facts, and the userdata under its digest, so the instances of a launch that booted with
    the same data share one copy."""
    digest = hashlib.sha256(userdata).hexdigest()[:16]
    info = {**record.info(), "userdata": digest}
    return {
        f"{record.id}{_INFO}": _b64(json.dumps(info, sort_keys=True).encode()),
        f"{_USERDATA}{digest}": _b64(userdata),
    }


def launch_secret(
    first: InstanceRecord,
    entries: Mapping[str, str],
    *,
    labels: Mapping[str, str],
    owner: Mapping[str, Any],
) -> dict[str, Any]:
    """The Secret of ``first``'s launch (``launch_name``), holding ``entries``
    (``launch_entries`` of it and of any others of its block).

    ``labels`` are added to the launch's own (``INSTANCE_LABEL``, ``POOL_LABEL``, the cluster
    name); ``owner`` is its one ownerReference (the SimMachinePool), so garbage collection
    removes records a crash left behind.
    """
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": INSTANCE_SECRET_TYPE,
        "metadata": {
            "name": launch_name(first),
            "namespace": first.namespace,
            "labels": {
                INSTANCE_LABEL: "true",
                POOL_LABEL: c.pool_name_label_value(first.pool),
                c.CLUSTER_NAME_LABEL: first.cluster,
                **dict(labels),
            },
            "annotations": {POOL_ANNOTATION: first.pool},
            "ownerReferences": [dict(owner)],
        },
        "data": dict(entries),
    }


def records_in(secret: Mapping[str, Any]) -> list[InstanceRecord]:
    """The instances a Secret stores, by ordinal (a launch's, or an earlier version's one)."""
    found = (record_in(secret, instance_id) for instance_id in instance_ids(secret))
    return sorted((r for r in found if r is not None), key=lambda r: r.index)


def record_in(secret: Mapping[str, Any], instance_id: str) -> InstanceRecord | None:
    """The record of ``instance_id`` if ``secret`` stores it, decoding only that one (a launch
    holds up to ``LAUNCH_SIZE``)."""
    meta = secret.get("metadata") or {}
    data: Mapping[str, str] = secret.get("data") or {}
    if _LEGACY_INFO in data:
        if str(meta.get("name", "")) != instance_id:
            return None
        annotations = meta.get("annotations") or {}
        return _record(
            meta,
            instance_id,
            data[_LEGACY_INFO],
            annotations.get(STATE_ANNOTATION, ""),
            annotations.get(KUBELET_ANNOTATION) == "stopped",
            legacy=True,
        )
    raw = data.get(instance_id + _INFO)
    if raw is None:
        return None
    return _record(
        meta,
        instance_id,
        raw,
        _text(data.get(instance_id + _STATE)),
        _text(data.get(instance_id + _KUBELET)) == "stopped",
    )


def instance_ids(secret: Mapping[str, Any]) -> list[str]:
    """The ids of the instances a Secret stores, without decoding them."""
    data: Mapping[str, str] = secret.get("data") or {}
    if _LEGACY_INFO in data:
        return [str((secret.get("metadata") or {}).get("name", ""))]
    return [key.removesuffix(_INFO) for key in data if key.endswith(_INFO)]


def instance_entries(secret: Mapping[str, Any], instance_id: str) -> tuple[str, ...]:
    """What a Secret stores of one instance, as it stands (to tell which instances an update
    of a launch changed)."""
    data: Mapping[str, str] = secret.get("data") or {}
    if _LEGACY_INFO in data:
        meta = secret.get("metadata") or {}
        notes = meta.get("annotations") or {}
        return (str(meta.get("resourceVersion", "")), str(sorted(notes.items())))
    return tuple(str(data.get(instance_id + suffix, "")) for suffix in (_INFO, _STATE, _KUBELET))


def state_patch(record: InstanceRecord, state: str, reason: str = "") -> dict[str, Any]:
    """The merge patch of ``record``'s launch that forces its state (failed, terminated)."""
    if record.legacy:
        notes = {STATE_ANNOTATION: state, **({STATE_REASON_ANNOTATION: reason} if reason else {})}
        return {"metadata": {"annotations": notes}}
    return {
        "data": {
            record.id + _STATE: _b64(state.encode()),
            **({record.id + _REASON: _b64(reason.encode())} if reason else {}),
        }
    }


def start_patch(
    record: InstanceRecord, start_at: datetime, userdata: bytes, bootstrap_version: str
) -> dict[str, Any]:
    """The merge patch of ``record``'s launch that starts a stopped warm instance, running
    from ``start_at``, with ``userdata`` in place of the data it was warmed with (a stopped
    EC2 instance's user data may be changed too): its facts are rewritten with the start
    time and the new data's digest, the only change made to them after launch."""
    started = replace(record, start_at=start_at, bootstrap_version=bootstrap_version)
    return {"data": launch_entries(started, userdata)}


def kubelet_patch(record: InstanceRecord, stopped: bool) -> dict[str, Any]:
    """The merge patch of ``record``'s launch that stops (or restarts) its kubelet."""
    value = "stopped" if stopped else None
    if record.legacy:
        return {"metadata": {"annotations": {KUBELET_ANNOTATION: value}}}
    return {"data": {record.id + _KUBELET: _b64(value.encode()) if value else None}}


def removal_patch(record: InstanceRecord) -> dict[str, Any]:
    """The merge patch of ``record``'s launch that forgets it, leaving the others."""
    suffixes = (_INFO, _STATE, _REASON, _KUBELET)
    return {"data": {record.id + suffix: None for suffix in suffixes}}


def _record(
    meta: Mapping[str, Any],
    instance_id: str,
    raw: str,
    forced_state: str,
    kubelet_stopped: bool,
    *,
    legacy: bool = False,
) -> InstanceRecord:
    info: dict[str, Any] = json.loads(base64.b64decode(raw) or b"{}")
    annotations = meta.get("annotations") or {}
    return InstanceRecord(
        namespace=str(meta.get("namespace", "")),
        id=instance_id,
        pool=str(info.get("pool") or annotations.get(POOL_ANNOTATION, "")),
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
        forced_state=forced_state,
        kubelet_stopped=kubelet_stopped,
        attributes=dict(info.get("attributes") or {}),
        uid=str(meta.get("uid", "")),
        fail_at=parse_time(str(info["failAt"])) if info.get("failAt") else None,
        private_ip=str(info.get("privateIP", "")),
        hostname=str(info.get("hostname") or instance_id),
        launch=str(meta.get("name", "")),
        legacy=legacy,
        userdata=str(info.get("userdata", "")),
        warm=bool(info.get("warmPool", False)),
        start_at=parse_time(str(info["startAt"])) if info.get("startAt") else None,
    )


def _text(raw: str | None) -> str:
    return base64.b64decode(raw).decode() if raw else ""


def user_data(secret: Mapping[str, Any], record: InstanceRecord) -> bytes:
    """The bootstrap data ``record`` booted with, from the Secret that holds it (secret:
    never log it)."""
    data: Mapping[str, str] = secret.get("data") or {}
    raw = data.get(f"{_USERDATA}{record.userdata}") if record.userdata else data.get("userdata")
    return base64.b64decode(raw) if raw else b""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
