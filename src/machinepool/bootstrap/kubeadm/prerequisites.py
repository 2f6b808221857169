"""Phases that gather what a join needs before anything is written: the owner, the Cluster,
the pause state, the Cluster's readiness, and the workload CA.

Called in order by ``controller.py``; each sets ``scope.halt`` (with a condition saying why)
when the reconcile cannot go on yet, which ends it with a ``runtime.Stop``. MachinePool
owners and Clusters come from the informers (their changes queue the config); a Machine owner
and the Secrets are read from the API server.
Waiting on things that send no event we watch (Secrets) requeues after ``POLL_SECONDS``.
"""

from __future__ import annotations

import asyncio

from machinepool.api import conditions
from machinepool.api import constants as c
from machinepool.api.meta import adoption_grace_left
from machinepool.api.views import ClusterView, KubeadmConfigView, MachinePoolView, MachineView
from machinepool.bootstrap.kubeadm import resources as r
from machinepool.bootstrap.kubeadm.certs import (
    InvalidClusterSecret,
    ca_from_ca_secret,
    ca_from_kubeconfig,
)
from machinepool.bootstrap.kubeadm.scope import Scope
from machinepool.runtime import SECRETS, NotFound, Obj, Result

POLL_SECONDS = 10.0
_OWNER_KINDS = ("MachinePool", "Machine")


def _owner_ref(config: KubeadmConfigView) -> Obj | None:
    """The MachinePool or Machine among the owners (the controller owner first)."""
    refs = [
        ref
        for ref in config.metadata.owner_references or []
        if ref.get("kind") in _OWNER_KINDS
        and str(ref.get("apiVersion", "")).startswith(c.CLUSTER_GROUP + "/")
    ]
    refs.sort(key=lambda ref: not ref.get("controller"))
    return refs[0] if refs else None


def awaiting_adoption(scope: Scope) -> Result | None:
    """What to return, writing nothing, while this config has no owner and no cluster-name
    label yet; ``None`` once it has either, or once it should say that it waits.

    It waits quietly for the adoption event when a MachinePool names it, or when it is paused
    by its own annotation; and for at most what is left of ``adoption_grace_left`` when no
    pool names it yet (its pool is usually applied a moment after it). The pool's adoption
    (owner and label, one patch) brings it back, and until then it has nothing to report;
    upstream writes nothing either while a config has no owner. A paused config asked to be
    left alone: its Paused condition comes with its owner. A config no pool names after the
    grace reports ``WaitingForCluster`` (``resolve_owner``), which tells whoever made it by
    hand why it waits.

    Without the paused case, whether a paused config new beside its pool reported
    ``WaitingForCluster`` would depend on whether this process had seen the pool yet, and the
    stale message would outlive the adoption (a paused config's phases stop at
    ``check_paused``)."""
    meta = scope.config.metadata
    if _owner_ref(scope.config) is not None or (meta.labels or {}).get(c.CLUSTER_NAME_LABEL):
        return None
    if c.PAUSED_ANNOTATION in (meta.annotations or {}):
        return Result()
    if scope.machine_pools.by_index(r.POOL_CONFIG_INDEX, str(scope.key)):
        return Result()
    left = adoption_grace_left(scope.config.raw)
    return Result(requeue_after=left) if left > 0 else None


async def resolve_owner(scope: Scope) -> Result:
    """Find the owning MachinePool or Machine and the Cluster name.

    A config with neither an owner nor a cluster-name label waits: the core controller adopts
    it and labels it.
    """
    ref = _owner_ref(scope.config)
    labels = scope.config.metadata.labels or {}
    scope.cluster_name = str(labels.get(c.CLUSTER_NAME_LABEL, ""))
    if ref is not None:
        scope.owner_kind = str(ref["kind"])
        scope.owner = await _owner(scope, str(ref["name"]))
        if scope.owner is not None:
            owner_cluster = scope.owner.spec.cluster_name
            scope.cluster_name = str(owner_cluster or scope.cluster_name)
    if not scope.cluster_name:
        scope.wait(
            r.WAITING_FOR_CLUSTER,
            "KubeadmConfig has no owner naming a Cluster and no "
            f"{c.CLUSTER_NAME_LABEL} label; set the label or let a MachinePool adopt it",
        )
    return Result()


async def _owner(scope: Scope, name: str) -> MachinePoolView | MachineView | None:
    """A MachinePool owner from the informer; a Machine (whose kind this process does not
    watch) from the API server."""
    if scope.owner_kind == "MachinePool":
        pool = scope.machine_pools.get(name, scope.key.namespace)
        return MachinePoolView(pool) if pool is not None else None
    try:
        return MachineView(await scope.client.get(r.MACHINES, name, scope.key.namespace))
    except NotFound:
        return None


async def resolve_cluster(scope: Scope) -> Result:
    """Find the owner's Cluster; wait while it does not exist."""
    cluster = scope.clusters.get(scope.cluster_name, scope.key.namespace)
    scope.cluster = ClusterView(cluster) if cluster is not None else None
    if scope.cluster is None:
        scope.wait(r.WAITING_FOR_CLUSTER, f"Cluster {scope.cluster_key} does not exist yet")
    return Result()


def _paused(scope: Scope) -> bool:
    cluster_paused = scope.cluster is not None and bool(scope.cluster.spec.paused)
    annotations = scope.config.metadata.annotations or {}
    return cluster_paused or c.PAUSED_ANNOTATION in annotations


async def check_paused(scope: Scope) -> Result:
    """Paused=True (and stop) while the Cluster or the config is paused."""
    generation = scope.config.metadata.generation
    cond_list = scope.status.edit_conditions()
    if _paused(scope):
        conditions.set_condition(
            cond_list, r.PAUSED, True, c.PAUSED_REASON, "", observed_generation=generation
        )
        scope.halt = True
    else:
        conditions.set_condition(
            cond_list, r.PAUSED, False, c.NOT_PAUSED_REASON, "", observed_generation=generation
        )
    return Result()


def control_plane_initialized(cluster: ClusterView) -> bool:
    status = cluster.status
    if status.initialization.control_plane_initialized:
        return True
    return conditions.is_true(status.conditions, c.CONTROL_PLANE_INITIALIZED_CONDITION)


def infrastructure_provisioned(cluster: ClusterView) -> bool:
    """Upstream waits for this before the control plane; an initialized control plane implies
    it (a Cluster without an infrastructure provider reports only the control plane)."""
    return bool(cluster.status.initialization.infrastructure_provisioned) or (
        control_plane_initialized(cluster)
    )


async def check_cluster_ready(scope: Scope) -> Result:
    """Workers join only once the Cluster's infrastructure and control plane are up."""
    cluster = scope.cluster or ClusterView({})
    if not infrastructure_provisioned(cluster):
        scope.wait(
            r.WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            f"waiting for Cluster {scope.cluster_key} status.initialization"
            ".infrastructureProvisioned to be true",
        )
    elif not control_plane_initialized(cluster):
        scope.wait(
            r.WAITING_FOR_CONTROL_PLANE,
            f"waiting for Cluster {scope.cluster_key} control plane to be initialized"
            " (condition ControlPlaneInitialized)",
        )
    return Result()


async def _secret(scope: Scope, name: str) -> Obj | None:
    try:
        return await scope.client.get(SECRETS, name, scope.key.namespace)
    except NotFound:
        return None


async def load_certificates(scope: Scope) -> Result:
    """Read the workload CA from ``<cluster>-ca`` or ``<cluster>-kubeconfig``, and the
    existing data Secret."""
    # Independent reads, sent together: one round trip of latency instead of three.
    scope.data_secret, ca_secret, kubeconfig = await asyncio.gather(
        _secret(scope, scope.key.name),
        _secret(scope, f"{scope.cluster_name}-ca"),
        _secret(scope, f"{scope.cluster_name}-kubeconfig"),
    )
    if kubeconfig is None:
        scope.mark(
            r.CERTIFICATES_AVAILABLE,
            False,
            r.WAITING_FOR_KUBECONFIG,
            f"secret {scope.key.namespace}/{scope.cluster_name}-kubeconfig not found; the"
            " control plane provider writes it (key 'value': a kubeconfig)",
            c.SEVERITY_INFO,
        )
        scope.wait(r.WAITING_FOR_KUBECONFIG, "waiting for the cluster's kubeconfig secret")
        return Result(requeue_after=POLL_SECONDS)
    try:
        ca_pem = ca_from_ca_secret(ca_secret).ca_pem if ca_secret is not None else None
        scope.ca = ca_from_kubeconfig(kubeconfig, ca_pem)
    except InvalidClusterSecret as exc:
        scope.mark(
            r.CERTIFICATES_AVAILABLE, False, r.CERTIFICATES_CORRUPTED, str(exc), c.SEVERITY_ERROR
        )
        scope.wait(
            r.CERTIFICATES_CORRUPTED, "the cluster CA cannot be read; see CertificatesAvailable"
        )
        return Result(requeue_after=POLL_SECONDS)
    scope.mark(r.CERTIFICATES_AVAILABLE, True, r.AVAILABLE)
    return Result()
