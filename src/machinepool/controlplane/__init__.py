"""Local Kubernetes control planes for development, tests, demos and benchmarks.

``ControlPlane`` runs etcd, a management kube-apiserver and kube-controller-manager on
loopback; ``ControlPlane.start_workload`` adds workload clusters on the same etcd (with
``pods=PodLifecycle()``, ones whose Pods are scheduled and evicted as in a user's cluster;
with ``node_auth=NodeAuth()``, ones whose kubelets get client certificates through CSRs and
may write only their own Node); with ``node=RealNode()``, a management cluster with a real
node (kubelet, containerd, kube-proxy; root only, ``missing_prerequisites`` says what lacks).
``find_binaries`` locates (or builds from Go modules) the binaries they run.
"""

from machinepool.controlplane.binaries import (
    KUBERNETES_VERSION,
    BinariesNotFound,
    find_binaries,
    optional_binary,
)
from machinepool.controlplane.cluster import (
    ControlPlane,
    NodeAuth,
    PodLifecycle,
    WorkloadCluster,
)
from machinepool.controlplane.node import Node, NodeUnavailable, RealNode, missing_prerequisites
from machinepool.controlplane.process import ProcessFailed

__all__ = [
    "KUBERNETES_VERSION",
    "BinariesNotFound",
    "ControlPlane",
    "Node",
    "NodeAuth",
    "NodeUnavailable",
    "PodLifecycle",
    "ProcessFailed",
    "RealNode",
    "WorkloadCluster",
    "find_binaries",
    "missing_prerequisites",
    "optional_binary",
]
