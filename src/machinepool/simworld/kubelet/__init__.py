"""machinepool.simworld.kubelet: the node simulator that turns running sim instances into Nodes.

Watches the simulated cloud's instance records (``machinepool.simworld.records``), joins each
running instance to its workload cluster with the bootstrap token it booted with, heartbeats
its Node (status and Lease), runs the pods bound to it and removes the Node when the instance
is terminated.
Wire it with ``await setup(mgr, cluster_cache, KubeletOptions(...))`` (``wire`` does the same
and returns the simulator, for tests that act as one of its nodes).
"""

from __future__ import annotations

from dataclasses import dataclass

from machinepool.runtime import SECRETS, ClusterCache, Manager
from machinepool.simworld.instances import InstanceEvents, Instances
from machinepool.simworld.kubelet.agent import KubeletSimulator
from machinepool.simworld.kubelet.join import JoinRejected, verify_join
from machinepool.simworld.kubelet.joinconfig import InvalidBootstrapData, JoinInfo, parse_join
from machinepool.simworld.records import INSTANCE_LABEL

__all__ = [
    "InvalidBootstrapData",
    "JoinInfo",
    "JoinRejected",
    "KubeletOptions",
    "KubeletSimulator",
    "parse_join",
    "setup",
    "verify_join",
    "wire",
]


@dataclass(frozen=True)
class KubeletOptions:
    """The node simulator's settings; each field is a ``machinepool run`` flag of its name."""

    kubelet_heartbeat_seconds: float = 30.0
    """Period of each simulated kubelet's Ready heartbeat."""
    node_monitor_grace_seconds: float = 50.0
    """How long a stopped kubelet's Node keeps its last status before it turns Unknown
    (kube-controller-manager's ``--node-monitor-grace-period``)."""
    node_deletion_grace_seconds: float = 5.0
    """How long the Node of a terminated (or vanished) instance stays before the simulator
    deletes it, as a cloud node lifecycle controller would. Cluster API deletes a Machine's
    Node right after its infra machine, within this grace when it keeps up, so one DELETE is
    sent, not two; the simulator deletes what nobody else did."""
    kubelet_lease_renew_seconds: float = 10.0
    """Period of each simulated kubelet's Node Lease renewal in ``kube-node-lease``
    (kubelet's default: a quarter of the duration); 0: no Leases. Each renewal is one write
    to the workload apiserver: 10,000 Nodes at 10 s are 1,000 writes a second."""
    kubelet_lease_duration_seconds: int = 40
    """The Leases' ``leaseDurationSeconds`` (kubelet's ``nodeLeaseDurationSeconds``)."""
    kubelet_concurrency: int = 32
    """Instances reconciled at once. Each stands for a machine's own kubelet, and
    kubelets join and heartbeat independently of one another: with 4 at once, 10,000
    instances that booted together joined about 10 a second, each waiting its turn."""
    kubelet_tls_bootstrap: bool = False
    """Each kubelet trades its bootstrap token for a client certificate of its own through a
    CertificateSigningRequest and writes its Node, Lease and pods' status with it, instead of
    with the workload cluster's admin client. The cluster must approve and sign kubelet CSRs
    (a kubeadm cluster does; locally ``controlplane.NodeAuth``). Off by default: one TLS
    client per Node costs memory and a handshake per Node, which the benchmarks' thousands
    of Nodes in one process do not need."""


async def setup(
    mgr: Manager, cluster_cache: ClusterCache, options: KubeletOptions | None = None
) -> None:
    """Register the node simulator on ``mgr``."""
    await wire(mgr, cluster_cache, options)


async def wire(
    mgr: Manager, cluster_cache: ClusterCache, options: KubeletOptions | None = None
) -> KubeletSimulator:
    """Register the node simulator on ``mgr`` and return it."""
    options = options or KubeletOptions()
    records = await mgr.cache.get_informer(SECRETS, label_selector=INSTANCE_LABEL)
    sim = KubeletSimulator(
        mgr.client,
        Instances(records),
        cluster_cache,
        heartbeat_seconds=options.kubelet_heartbeat_seconds,
        node_monitor_grace_seconds=options.node_monitor_grace_seconds,
        node_deletion_grace_seconds=options.node_deletion_grace_seconds,
        lease_renew_seconds=options.kubelet_lease_renew_seconds,
        lease_duration_seconds=options.kubelet_lease_duration_seconds,
        tls_bootstrap=options.kubelet_tls_bootstrap,
    )
    sim.follow_records()
    ctrl = mgr.new_controller("kubelet-sim", sim, concurrency=options.kubelet_concurrency)
    sim.controller = ctrl
    ctrl.watch(records, adapter=InstanceEvents)
    mgr.on_stop(sim.close)
    return sim
