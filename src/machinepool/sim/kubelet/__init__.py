"""machinepool.sim.kubelet: the node simulator that turns running sim instances into Nodes.

Watches the simulated cloud's instance records (``machinepool.sim.records``), joins each
running instance to its workload cluster with the bootstrap token it booted with, heartbeats
its Node, runs the pods bound to it and removes the Node when the instance is terminated.
Wire it with ``await setup(mgr, cluster_cache)``.
"""

from __future__ import annotations

from typing import Any

from machinepool.runtime import SECRETS, ClusterCache, Manager
from machinepool.sim.kubelet.agent import KubeletSimulator
from machinepool.sim.kubelet.join import JoinRejected, verify_join
from machinepool.sim.kubelet.joinconfig import InvalidBootstrapData, JoinInfo, parse_join
from machinepool.sim.records import INSTANCE_LABEL

__all__ = [
    "InvalidBootstrapData",
    "JoinInfo",
    "JoinRejected",
    "KubeletSimulator",
    "parse_join",
    "setup",
    "verify_join",
]


async def setup(mgr: Manager, cluster_cache: ClusterCache, **options: Any) -> None:
    """Register the node simulator on ``mgr``.

    Options: ``heartbeat_seconds`` (Ready heartbeat period, default 30),
    ``node_monitor_grace_seconds`` (how long a stopped kubelet's Node keeps its last status
    before it turns Unknown, default 50 as kube-controller-manager's
    ``--node-monitor-grace-period``), ``concurrency`` (default 4). Other options are ignored.
    """
    records = await mgr.cache.get_informer(SECRETS, label_selector=INSTANCE_LABEL)
    sim = KubeletSimulator(
        mgr.client,
        records,
        cluster_cache,
        heartbeat_seconds=float(options.get("heartbeat_seconds", 30.0)),
        node_monitor_grace_seconds=float(options.get("node_monitor_grace_seconds", 50.0)),
    )
    sim.follow_records()
    ctrl = mgr.new_controller("kubelet-sim", sim, concurrency=int(options.get("concurrency", 4)))
    sim.controller = ctrl
    ctrl.watch(records)
