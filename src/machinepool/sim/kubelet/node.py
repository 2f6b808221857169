"""What a simulated kubelet writes: its Node, the Node's status, and Running pod status.

Pure builders; ``agent.py`` sends them. A Node registers with spec.providerID, the taints from
its JoinConfiguration (kubeadm adds ``node.cluster.x-k8s.io/uninitialized:NoSchedule``),
and reports the kubelet version the instance was created with.
"""

from __future__ import annotations

from typing import Any

from machinepool.api import constants as c
from machinepool.api.infra_sim import DEFAULT_SIM_INSTANCE_TYPE, SIM_INSTANCE_TYPES
from machinepool.api.meta import format_time
from machinepool.runtime import Obj
from machinepool.sim.records import InstanceRecord

__all__ = ["node_object", "node_status", "node_unknown_status", "pod_running_status"]


def _capacity(record: InstanceRecord) -> dict[str, str]:
    """What the instance type offers (records of types the catalogue lacks get the default)."""
    kind = str(record.attributes.get("instanceType") or "")
    return dict(SIM_INSTANCE_TYPES.get(kind) or SIM_INSTANCE_TYPES[DEFAULT_SIM_INSTANCE_TYPE])


def node_object(
    record: InstanceRecord, taints: list[dict[str, Any]], labels: dict[str, str]
) -> Obj:
    """The Node a kubelet registers for ``record``."""
    taint_list = [dict(t) for t in taints]
    if not any(t.get("key") == c.UNINITIALIZED_TAINT_KEY for t in taint_list):
        taint_list.append(
            {"key": c.UNINITIALIZED_TAINT_KEY, "effect": c.UNINITIALIZED_TAINT_EFFECT}
        )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": record.id,
            "labels": {
                **labels,
                "kubernetes.io/hostname": record.id,
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


_PRESSURE_CONDITIONS = (
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


def node_status(record: InstanceRecord, ready: bool, now: Any, reason: str = "") -> Obj:
    """Node status with a Ready condition (heartbeat ``now``) and the kubelet version."""
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
        for kind, kind_reason in _PRESSURE_CONDITIONS
    ]
    return {
        "status": {
            "conditions": [*pressure, condition],
            "capacity": _capacity(record),
            "allocatable": _capacity(record),
            "addresses": [{"type": "Hostname", "address": record.id}],
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
