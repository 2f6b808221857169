"""What a simulated kubelet writes: its Node, the Node's status, its Lease, and Running pods.

Pure builders; ``agent.py`` sends them. A Node registers under the name its JoinConfiguration
gives (``JoinInfo.node_name``: ``nodeRegistration.name`` or the instance's hostname, never the
instance id) with spec.providerID, the taints from its JoinConfiguration (kubeadm adds
``node.cluster.x-k8s.io/uninitialized:NoSchedule``), and reports the kubelet version the
instance was created with and the instance's addresses. Its heartbeat is a Lease named after
the Node in ``kube-node-lease``, owned by the Node (so garbage collection removes it with the
Node), as kubelet keeps it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final

from machinepool.api import constants as c
from machinepool.api.infra_sim import DEFAULT_SIM_INSTANCE_TYPE, SIM_INSTANCE_TYPES
from machinepool.api.meta import format_time, parse_time
from machinepool.runtime import Obj
from machinepool.simworld.records import InstanceRecord

__all__ = [
    "NODE_LEASE_NAMESPACE",
    "PRESSURE_CONDITIONS",
    "STOP_SECONDS_ANNOTATION",
    "lease_age",
    "node_lease",
    "node_lease_renewal",
    "node_object",
    "node_status",
    "node_unknown_status",
    "pod_running_status",
    "pod_stopped_status",
    "pod_stops_at",
]

STOP_SECONDS_ANNOTATION: Final = "sim.infrastructure.cluster.x-k8s.io/stop-seconds"
"""On a Pod: how many seconds its containers take to exit once asked to stop (0 when absent:
they exit at once). The node simulator kills them when the Pod's grace period ends first, so
a Pod that says more than its ``terminationGracePeriodSeconds`` is one that ignores SIGTERM."""

NODE_LEASE_NAMESPACE = "kube-node-lease"
"""Where kubelets keep their Node Leases (the apiserver creates the namespace)."""


def _micro_time(now: datetime) -> str:
    """A Lease's MicroTime: UTC with microseconds, as the apiserver stores renewTime."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_lease(node: Obj, now: datetime, duration_seconds: int) -> Obj:
    """The Lease a kubelet creates for its ``node`` when it has none: held by the Node's name,
    renewed ``now``, owned by the Node (its uid too, so a Lease of an earlier Node of the
    same name goes with that Node)."""
    meta = node["metadata"]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": meta["name"],
            "namespace": NODE_LEASE_NAMESPACE,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]}
            ],
        },
        **node_lease_renewal(meta["name"], now, duration_seconds),
    }


def node_lease_renewal(name: str, now: datetime, duration_seconds: int) -> Obj:
    """The merge patch that renews Node ``name``'s Lease ``now``."""
    return {
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": duration_seconds,
            "renewTime": _micro_time(now),
        }
    }


def lease_age(lease: Obj | None, now: datetime) -> float:
    """Seconds since ``lease`` was renewed (infinite without a Lease or a renewTime)."""
    renewed = ((lease or {}).get("spec") or {}).get("renewTime")
    if not renewed:
        return float("inf")
    return (now - datetime.fromisoformat(str(renewed).replace("Z", "+00:00"))).total_seconds()


def _capacity(record: InstanceRecord) -> dict[str, str]:
    """What the instance type offers (records of types the catalogue lacks get the default)."""
    kind = str(record.attributes.get("instanceType") or "")
    return dict(SIM_INSTANCE_TYPES.get(kind) or SIM_INSTANCE_TYPES[DEFAULT_SIM_INSTANCE_TYPE])


def node_object(
    record: InstanceRecord, name: str, taints: list[dict[str, Any]], labels: dict[str, str]
) -> Obj:
    """The Node named ``name`` a kubelet registers for ``record``; its hostname label is the
    name, as kubelet sets it from the hostname override kubeadm passes."""
    taint_list = [dict(t) for t in taints]
    if not any(t.get("key") == c.UNINITIALIZED_TAINT_KEY for t in taint_list):
        taint_list.append(
            {"key": c.UNINITIALIZED_TAINT_KEY, "effect": c.UNINITIALIZED_TAINT_EFFECT}
        )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                **labels,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": record.failure_domain,
                "node.kubernetes.io/instance-type": str(
                    record.attributes.get("instanceType") or DEFAULT_SIM_INSTANCE_TYPE
                ),
            },
        },
        "spec": {"providerID": record.provider_id, "taints": taint_list},
    }


PRESSURE_CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory"),
    ("DiskPressure", "KubeletHasNoDiskPressure"),
    ("PIDPressure", "KubeletHasSufficientPID"),
)
"""What a kubelet reports beside Ready (all False while healthy); upstream's Machine
NodeHealthy condition, and so its MachinePool readyReplicas, is Unknown without them."""


def node_unknown_status(node: Obj, now: Any) -> Obj:
    """What kube-controller-manager's node lifecycle controller writes when a kubelet stopped
    posting status: every condition Unknown, reason NodeStatusUnknown, heartbeats kept."""
    stamp = format_time(now)
    conditions = []
    for cond in (node.get("status") or {}).get("conditions") or []:
        conditions.append(
            {
                **cond,
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastTransitionTime": stamp,
            }
        )
    return {"status": {"conditions": conditions}}


def node_status(
    record: InstanceRecord,
    name: str,
    ready: bool,
    now: Any,
    reason: str = "",
    current: Obj | None = None,
) -> Obj:
    """Status of ``record``'s Node ``name``: a Ready condition (heartbeat ``now``), the
    kubelet version, and the addresses (the private IP; the name as Hostname, as kubelet
    reports its hostname override).

    A condition whose status ``current`` (the Node as last seen) already has keeps its
    ``lastTransitionTime``, as kubelet's heartbeat does: only ``lastHeartbeatTime`` moves, so
    watchers that count transitions see none (a heartbeat that moved both woke a reconcile of
    every Machine at each status period).
    """
    stamp = format_time(now)
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else (reason or "KubeletNotReady"),
        "message": "kubelet is posting ready status" if ready else "instance is not running",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }
    pressure = [
        {
            "type": kind,
            "status": "False",
            "reason": kind_reason,
            "message": "",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        for kind, kind_reason in PRESSURE_CONDITIONS
    ]
    return {
        "status": {
            "conditions": _keep_transitions([*pressure, condition], current),
            "capacity": _capacity(record),
            "allocatable": _capacity(record),
            "addresses": [
                *(
                    [{"type": "InternalIP", "address": record.private_ip}]
                    if record.private_ip
                    else []
                ),
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": record.version,
                "kubeProxyVersion": record.version,
                "containerRuntimeVersion": "sim://1.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": str(record.attributes.get("image") or "sim"),
                "kernelVersion": "sim",
                "machineID": record.id,
                "systemUUID": record.uid or record.id,
                "bootID": record.uid or record.id,
            },
        }
    }


def _keep_transitions(conditions: list[Obj], current: Obj | None) -> list[Obj]:
    """``conditions`` with the ``lastTransitionTime`` of each one whose status ``current``
    already reports."""
    seen = {
        cond.get("type"): cond
        for cond in ((current or {}).get("status") or {}).get("conditions") or []
        if isinstance(cond, dict)
    }
    kept = []
    for cond in conditions:
        before = seen.get(cond["type"])
        if before is not None and before.get("status") == cond["status"]:
            since = before.get("lastTransitionTime")
            cond = {**cond, "lastTransitionTime": since} if since else cond
        kept.append(cond)
    return kept


def pod_running_status(pod: Obj, now: Any) -> Obj:
    """The status a kubelet reports once every container of ``pod`` runs."""
    stamp = format_time(now)
    containers = (pod.get("spec") or {}).get("containers") or []
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": stamp}
        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    return {
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "startTime": stamp,
            "containerStatuses": [
                {
                    "name": ctr.get("name", ""),
                    "image": ctr.get("image", ""),
                    "imageID": "",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": stamp}},
                }
                for ctr in containers
            ],
        }
    }


def pod_stops_at(pod: Obj) -> tuple[datetime, bool] | None:
    """When the containers of a Pod being deleted are gone, and whether they were killed at
    the end of its grace period rather than exiting by themselves (pure); ``None`` for a Pod
    that is not being deleted.

    The apiserver sets ``deletionTimestamp`` to the moment of deletion plus the grace period
    it granted (``deletionGracePeriodSeconds``: the Pod's ``terminationGracePeriodSeconds``,
    or what the delete or the eviction asked for), so the stop was asked for at their
    difference, as a kubelet sends SIGTERM then.
    """
    meta = pod.get("metadata") or {}
    stamp = meta.get("deletionTimestamp")
    if not stamp:
        return None
    deadline = parse_time(str(stamp))
    grace = float(meta.get("deletionGracePeriodSeconds") or 0)
    try:
        takes = float((meta.get("annotations") or {}).get(STOP_SECONDS_ANNOTATION) or 0)
    except ValueError:
        takes = 0.0
    asked = deadline - timedelta(seconds=grace)
    if takes < grace:
        return asked + timedelta(seconds=max(0.0, takes)), False
    return deadline, True


def pod_stopped_status(pod: Obj, now: datetime, killed: bool) -> Obj:
    """The terminal status a kubelet reports once a deleted Pod's containers are gone: exit
    code 0 for containers that exited when asked, 137 for ones killed at the end of the grace
    period (SIGKILL), and the phase that follows from them."""
    stamp = format_time(now)
    code, reason = (137, "Error") if killed else (0, "Completed")
    containers = (pod.get("spec") or {}).get("containers") or []
    ready = [
        {"type": t, "status": "False", "lastTransitionTime": stamp}
        for t in ("ContainersReady", "Ready")
    ]
    return {
        "status": {
            "phase": "Failed" if killed else "Succeeded",
            "conditions": ready,
            "containerStatuses": [
                {
                    "name": ctr.get("name", ""),
                    "image": ctr.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {"exitCode": code, "reason": reason, "finishedAt": stamp}
                    },
                }
                for ctr in containers
            ],
        }
    }
