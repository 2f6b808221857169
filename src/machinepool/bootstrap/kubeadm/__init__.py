"""The kubeadm bootstrap provider: turns a KubeadmConfig into a cloud-config data Secret that
joins workers to the workload cluster with a bootstrap token, and keeps that token valid.

Wire it into a manager with ``await setup(mgr, cluster_cache, KubeadmOptions(...))``; the
CLI does this for the whole system, tests do it in-process. ``render_node_cloud_config`` is
pure and usable on its own.

Modules: ``controller`` (reconcile, wiring), ``scope`` (shared per-reconcile state),
``prerequisites`` (owner, Cluster, pause, readiness, CA), ``rotation`` (token create / refresh /
rotate), ``data`` (inputs, rendering, the data Secret), ``delete``, ``status`` (Ready summary),
``tokens`` (bootstrap token Secrets), ``cloudinit`` (pure rendering), ``certs`` (CA and
endpoint from cluster Secrets).
"""

from machinepool.bootstrap.kubeadm.cloudinit import (
    InvalidBootstrapInput,
    NodeInput,
    render_node_cloud_config,
)
from machinepool.bootstrap.kubeadm.controller import KubeadmConfigReconciler, setup
from machinepool.bootstrap.kubeadm.resources import DATA_TOKEN_ID_ANNOTATION, FINALIZER
from machinepool.bootstrap.kubeadm.scope import KubeadmOptions
from machinepool.bootstrap.kubeadm.tokens import (
    DEFAULT_TOKEN_TTL_SECONDS,
    TOKEN_CONFIG_UID_LABEL,
    BootstrapToken,
)

__all__ = [
    "DATA_TOKEN_ID_ANNOTATION",
    "DEFAULT_TOKEN_TTL_SECONDS",
    "FINALIZER",
    "TOKEN_CONFIG_UID_LABEL",
    "BootstrapToken",
    "InvalidBootstrapInput",
    "KubeadmConfigReconciler",
    "KubeadmOptions",
    "NodeInput",
    "render_node_cloud_config",
    "setup",
]
