"""The MachineHealthCheck reconciler: find targets, judge them, mark them, report.

Built by ``machinepool.controllers.machinehealthcheck.setup``. One reconcile per
MachineHealthCheck key, ``runtime.drive`` over ``HealthCheckSteps``: read it and its Cluster
from the caches, honour pause (the guard), find the Machines its selector matches in that
Cluster (through an index of Machines by Cluster, not a scan of the namespace;
``cluster.x-k8s.io/skip-remediation`` and paused Machines left out), look up their Nodes in
the workload cluster through the cluster cache (whose Node events map back here), judge each
target (``targets.evaluate``), apply the ``triggerIf`` brake, write ``HealthCheckSucceeded``
(and, when remediation is allowed, ``OwnerRemediated=False``) on the Machines, and patch the
MachineHealthCheck's status once, whatever failed: a mark that failed is one of the
reconcile's errors, raised with the others after the write (``Outcome.settle``).

Marking is all this controller does: the Machine's owner remediates. For MachinePool Machines
that is the MachinePool controller (``controllers.machinepool.remediation``), which deletes
marked Machines through the drain-safe Machine deletion, a bounded number at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from machinepool.api import constants as c
from machinepool.api.conditions import (
    Condition,
    get_condition,
    set_condition,
    set_v1beta1_condition,
)
from machinepool.api.healthcheck import DEFAULT_NODE_STARTUP_TIMEOUT_SECONDS
from machinepool.api.kinds import CLUSTERS, MACHINE_HEALTH_CHECKS, MACHINES
from machinepool.api.meta import ensure
from machinepool.api.views import ClusterView, MachineHealthCheckView, MachineView, NodeView
from machinepool.controllers.common import (
    ensure_cluster_owner,
    now,
    set_paused_condition,
)
from machinepool.controllers.machinehealthcheck.targets import (
    Health,
    Target,
    Verdict,
    cluster_ready_for_checks,
    evaluate,
    remediation_allowed,
)
from machinepool.controllers.selector import matches
from machinepool.runtime import (
    NODES,
    Client,
    ClusterCache,
    ClusterNotConnected,
    Controller,
    EventRecorder,
    Informer,
    Manager,
    Mapper,
    Obj,
    ObjectKey,
    Outcome,
    OwnReader,
    Patcher,
    Phase,
    Result,
    Steps,
    Stop,
    Then,
    copy_obj,
    get_logger,
)

__all__ = ["COMPONENT", "CONTROLLER_NAME", "MachineHealthCheckReconciler"]

CONTROLLER_NAME = "machinehealthcheck"
COMPONENT = "machinehealthcheck-controller"
BY_CLUSTER = "machinehealthcheck/cluster"
"""MachineHealthChecks by ``namespace/clusterName``."""
MACHINES_BY_NODE = "machinehealthcheck/node"
"""Machines by ``namespace/clusterName/nodeRef.name``."""
MACHINES_BY_CLUSTER = "machinehealthcheck/machine-cluster"
"""Machines by ``namespace/`` and their cluster-name label: a reconcile's candidates, looked up
rather than found by a scan of every Machine in the namespace."""
EVENT_MARKED_UNHEALTHY = "MachineMarkedUnhealthy"
EVENT_REMEDIATION_RESTRICTED = "RemediationRestricted"
EVENT_TEMPLATE_NOT_SUPPORTED = "ExternalRemediationNotSupported"

log = get_logger(__name__)


def _by_cluster(obj: Obj) -> list[str]:
    mhc = MachineHealthCheckView(obj)
    return [f"{mhc.metadata.namespace}/{mhc.spec.cluster_name}"]


def _machine_by_cluster(obj: Obj) -> list[str]:
    machine = MachineView(obj)
    cluster = (machine.metadata.labels or {}).get(c.CLUSTER_NAME_LABEL)
    return [f"{machine.metadata.namespace}/{cluster}"] if cluster is not None else []


def _machine_by_node(obj: Obj) -> list[str]:
    machine = MachineView(obj)
    node = machine.status.node_ref.name
    if not node:
        return []
    ns, cluster = machine.metadata.namespace, machine.spec.cluster_name
    return [f"{ns}/{cluster}/{node}"]


class MachineHealthCheckReconciler:
    """Reconciles MachineHealthChecks; owns the Node watches of their workload clusters."""

    def __init__(self, mgr: Manager, cluster_cache: ClusterCache, *, concurrency: int = 1) -> None:
        self.client = mgr.client
        self.cache = mgr.cache
        self.cluster_cache = cluster_cache
        self.recorder = mgr.event_recorder(COMPONENT)
        self.controller: Controller = mgr.new_controller(
            CONTROLLER_NAME, self.reconcile, concurrency=concurrency
        )
        self.checks: Informer
        self.clusters: Informer
        self.machines: Informer
        self.steps: HealthCheckSteps
        self._watched_clusters: set[ObjectKey] = set()

    async def start_watches(self) -> None:
        self.checks = await self.cache.get_informer(MACHINE_HEALTH_CHECKS)
        with contextlib.suppress(ValueError):
            self.checks.add_indexer(BY_CLUSTER, _by_cluster)
        self.clusters = await self.cache.get_informer(CLUSTERS)
        self.machines = await self.cache.get_informer(MACHINES)
        for name, index in (
            (MACHINES_BY_NODE, _machine_by_node),
            (MACHINES_BY_CLUSTER, _machine_by_cluster),
        ):
            with contextlib.suppress(ValueError):
                self.machines.add_indexer(name, index)
        self.steps = HealthCheckSteps(
            Env(self.client, self.recorder, self.machines, watches=self),
            OwnReader(self.client, MACHINE_HEALTH_CHECKS, self.checks),
            self.clusters,
        )
        self.controller.watch(self.checks)
        self.controller.watch(self.clusters, self._cluster_to_checks)
        self.controller.watch(self.machines, self._machine_to_checks)

    # -- mapping events to MachineHealthChecks -------------------------------------------

    def _cluster_to_checks(self, obj: Obj) -> list[ObjectKey]:
        cluster = ClusterView(obj)
        key = f"{cluster.metadata.namespace}/{cluster.metadata.name}"
        return [ObjectKey.of(m) for m in self.checks.by_index(BY_CLUSTER, key)]

    def _machine_to_checks(self, obj: Obj) -> list[ObjectKey]:
        machine = MachineView(obj)
        key = f"{machine.metadata.namespace}/{machine.spec.cluster_name}"
        labels = machine.metadata.labels or {}
        return [
            ObjectKey.of(m)
            for m in self.checks.by_index(BY_CLUSTER, key)
            if matches(MachineHealthCheckView(m).spec.selector or {}, labels)
        ]

    def _node_mapper(self, cluster: ObjectKey) -> Mapper:
        prefix = f"{cluster.namespace}/{cluster.name}/"

        def mapper(node: Obj) -> list[ObjectKey]:
            found = self.machines.by_index(
                MACHINES_BY_NODE, prefix + str(NodeView(node).metadata.name)
            )
            keys: list[ObjectKey] = []
            for machine in found:
                keys.extend(self._machine_to_checks(machine))
            return list(dict.fromkeys(keys))

        return mapper

    async def nodes(self, cluster: ObjectKey) -> Informer:
        informer = await self.cluster_cache.get_informer(cluster, NODES)
        if cluster not in self._watched_clusters:
            await self.cluster_cache.watch(
                cluster, NODES, self.controller.handler(self._node_mapper(cluster))
            )
            self._watched_clusters.add(cluster)
        return informer

    # -- reconcile ------------------------------------------------------------------------

    async def reconcile(self, key: ObjectKey) -> Result:
        return await self.steps.reconcile(key)


class HealthCheckWatches(Protocol):
    """The workload cluster's Nodes, watched for this controller (the reconciler's)."""

    async def nodes(self, cluster: ObjectKey) -> Informer: ...


@dataclass(frozen=True)
class Env:
    """What every MachineHealthCheck reconcile uses."""

    client: Client
    recorder: EventRecorder
    machines: Informer
    """Machines, indexed by Cluster (``MACHINES_BY_CLUSTER``)."""
    watches: HealthCheckWatches


@dataclass
class Scope:
    """One reconcile of one MachineHealthCheck."""

    env: Env
    mhc: MachineHealthCheckView
    """The MachineHealthCheck (a private copy, written once on exit)."""
    cluster: ClusterView
    errors: list[Exception] = field(default_factory=list)
    """Marks that failed: each one an error of the reconcile, the others still written."""

    @property
    def key(self) -> ObjectKey:
        return ObjectKey.of(self.mhc.raw)


class HealthCheckSteps(Steps[Scope]):
    """One MachineHealthCheck reconcile, as ``runtime.drive`` runs it."""

    kind = "MachineHealthCheck"
    chain = True

    def __init__(self, env: Env, reader: OwnReader, clusters: Informer) -> None:
        self.env = env
        self.reader = reader
        self.clusters = clusters

    def scope(self, key: ObjectKey, obj: Obj, patcher: Patcher) -> Scope | Stop:
        mhc = MachineHealthCheckView(obj)
        if mhc.deleting:
            return Stop(then=Then.NOTHING)
        ensure(obj, "status")
        cluster_name = str(mhc.spec.cluster_name or "")
        cluster = self.clusters.get(cluster_name, key.namespace)
        if cluster is None:
            # Upstream returns an error; the Cluster watch brings this key back instead.
            log.info("Cluster not found", machinehealthcheck=str(key), cluster=cluster_name)
            return Stop(then=Then.NOTHING)
        return Scope(self.env, mhc, ClusterView(cluster))

    def guards(self, scope: Scope) -> Sequence[Phase[Scope]]:
        return (stop_if_paused,)

    def phases(self, scope: Scope) -> Sequence[Phase[Scope]]:
        return (set_owner, check_targets)

    async def report(self, scope: Scope, outcome: Outcome) -> Outcome:
        return Outcome(errors=scope.errors)


async def stop_if_paused(scope: Scope) -> Result:
    """Set the Paused condition; paused, stop with it alone."""
    mhc = scope.mhc
    conditions = mhc.status.edit_conditions()
    if set_paused_condition(mhc, conditions, scope.cluster, "MachineHealthCheck"):
        return Stop(then=Then.WRITE)
    return Result()


async def set_owner(scope: Scope) -> Result:
    """Label the MachineHealthCheck with its Cluster's name and make the Cluster an owner."""
    ensure_cluster_owner(scope.mhc, scope.mhc.spec.cluster_name, scope.cluster)
    return Result()


async def check_targets(scope: Scope) -> Result:
    """Judge the targets, mark them, and sum them up in the status."""
    mhc, cluster, env = scope.mhc, scope.cluster, scope.env
    key = scope.key
    nodes: Informer | None = None
    cluster_key = ObjectKey(key.namespace, str(cluster.metadata.name))
    if cluster_ready_for_checks(cluster.raw):
        try:
            nodes = await env.watches.nodes(cluster_key)
        except ClusterNotConnected as exc:
            exc.add_note(f"reading the Nodes of workload cluster {cluster_key}")
            raise
    targets = _targets(env, mhc, nodes)
    status = mhc.status
    status.expected_machines = len(targets)
    status.targets = sorted(str(MachineView(t.machine).metadata.name) for t in targets)
    checks = mhc.spec.checks
    timeout = checks.node_startup_timeout_seconds
    timeout = DEFAULT_NODE_STARTUP_TIMEOUT_SECONDS if timeout is None else int(timeout)
    at = now()
    check_rules = checks.raw or {}
    verdicts = [evaluate(t, cluster.raw, check_rules, at, timeout) for t in targets]
    healthy = sum(1 for v in verdicts if v.health is Health.HEALTHY)
    status.current_healthy = healthy
    unhealthy = [t for t, v in zip(targets, verdicts, strict=True) if v.health is Health.UNHEALTHY]
    remediation = mhc.spec.remediation
    allowed, budget, why = remediation_allowed(remediation.raw or {}, len(targets), healthy)
    conditions = status.edit_conditions()
    v1_conditions = status.v1beta1.edit_conditions()
    generation = mhc.metadata.generation
    if allowed:
        status.remediations_allowed = budget
        set_condition(
            conditions,
            c.REMEDIATION_ALLOWED_CONDITION,
            True,
            c.REMEDIATION_ALLOWED_REASON,
            "",
            generation,
        )
        set_v1beta1_condition(v1_conditions, c.V1BETA1_REMEDIATION_ALLOWED_CONDITION, True)
    else:
        status.remediations_allowed = 0
        set_condition(
            conditions,
            c.REMEDIATION_ALLOWED_CONDITION,
            False,
            c.TOO_MANY_UNHEALTHY_REASON,
            why,
            generation,
        )
        set_v1beta1_condition(
            v1_conditions,
            c.V1BETA1_REMEDIATION_ALLOWED_CONDITION,
            False,
            c.V1BETA1_TOO_MANY_UNHEALTHY_REASON,
            why,
            c.SEVERITY_WARNING,
        )
        if unhealthy:
            await env.recorder.event(mhc.raw, "Warning", EVENT_REMEDIATION_RESTRICTED, why)
    template = remediation.template_ref
    external = any((template.raw or {}).values())
    if external and allowed and unhealthy:
        await env.recorder.event(
            mhc.raw,
            "Warning",
            EVENT_TEMPLATE_NOT_SUPPORTED,
            f"spec.remediation.templateRef ({template.kind} {template.name}) "
            "is not supported by this controller: unhealthy Machines are only marked; "
            "remove templateRef to have their owner remediate them",
        )
    paused_cluster = bool(cluster.spec.paused)
    marked = await asyncio.gather(
        *(
            _mark(env, mhc, t, v, remediate=allowed and not paused_cluster, external=external)
            for t, v in zip(targets, verdicts, strict=True)
        ),
        return_exceptions=True,
    )
    for target, failure in zip(targets, marked, strict=True):
        if isinstance(failure, Exception):
            failure.add_note(f"marking Machine {MachineView(target.machine).metadata.name}")
            scope.errors.append(failure)
        elif isinstance(failure, BaseException):
            raise failure
    waits = [v.next_check for v in verdicts if v.next_check > 0]
    return Result(requeue_after=min(waits)) if allowed and waits else Result()


def _targets(env: Env, mhc: MachineHealthCheckView, nodes: Informer | None) -> list[Target]:
    namespace = str(mhc.metadata.namespace)
    cluster_name = str(mhc.spec.cluster_name)
    selector = mhc.spec.selector or {}
    found: list[Target] = []
    for obj in env.machines.by_index(MACHINES_BY_CLUSTER, f"{namespace}/{cluster_name}"):
        machine = MachineView(obj)
        labels = machine.metadata.labels or {}
        if not matches(selector, labels):
            continue
        annotations = machine.metadata.annotations or {}
        if c.PAUSED_ANNOTATION in annotations or c.SKIP_REMEDIATION_ANNOTATION in annotations:
            continue
        node_name = machine.status.node_ref.name
        node = nodes.get(str(node_name)) if nodes is not None and node_name else None
        missing = nodes is not None and bool(node_name) and node is None
        found.append(Target(obj, node, missing))
    return found


async def _mark(
    env: Env,
    mhc: MachineHealthCheckView,
    target: Target,
    verdict: Verdict,
    *,
    remediate: bool,
    external: bool,
) -> None:
    """Write HealthCheckSucceeded (and OwnerRemediated when remediating) on the Machine."""
    machine = MachineView(target.machine)
    if verdict.health is Health.PENDING:
        return
    updated = MachineView(copy_obj(target.machine))
    conditions = updated.status.edit_conditions()
    v1 = updated.status.v1beta1.edit_conditions()
    generation = machine.metadata.generation
    if verdict.health is Health.HEALTHY:
        set_condition(
            conditions,
            c.HEALTH_CHECK_SUCCEEDED_CONDITION,
            True,
            c.HEALTH_CHECK_SUCCEEDED_REASON,
            "",
            generation,
        )
        set_v1beta1_condition(v1, c.HEALTH_CHECK_SUCCEEDED_CONDITION, True)
    else:
        newly = not _is_false(conditions, c.HEALTH_CHECK_SUCCEEDED_CONDITION)
        set_condition(
            conditions,
            c.HEALTH_CHECK_SUCCEEDED_CONDITION,
            False,
            verdict.reason,
            verdict.message,
            generation,
        )
        set_v1beta1_condition(
            v1,
            c.HEALTH_CHECK_SUCCEEDED_CONDITION,
            False,
            verdict.v1beta1_reason,
            verdict.v1beta1_message,
            c.SEVERITY_WARNING,
        )
        if remediate and not machine.deleting:
            if external:
                set_condition(
                    conditions,
                    c.EXTERNALLY_REMEDIATED_CONDITION,
                    False,
                    c.REMEDIATION_TEMPLATE_NOT_SUPPORTED_REASON,
                    "External remediation (spec.remediation.templateRef) is not supported; "
                    "remove templateRef to let the Machine's owner remediate it",
                    generation,
                )
            else:
                owner = get_condition(conditions, c.OWNER_REMEDIATED_CONDITION)
                if owner is None or owner.get("status") == "True":
                    set_condition(
                        conditions,
                        c.OWNER_REMEDIATED_CONDITION,
                        False,
                        c.WAITING_FOR_REMEDIATION_REASON,
                        "Waiting for remediation",
                        generation,
                    )
                    set_v1beta1_condition(
                        v1,
                        c.OWNER_REMEDIATED_CONDITION,
                        False,
                        c.WAITING_FOR_REMEDIATION_REASON,
                        "",
                        c.SEVERITY_WARNING,
                    )
        if newly and remediate:
            name = f"{machine.metadata.namespace}/{machine.metadata.name}"
            mhc_name = f"{mhc.metadata.namespace}/{mhc.metadata.name}"
            await env.recorder.event(
                machine.raw,
                "Normal",
                EVENT_MARKED_UNHEALTHY,
                f"Machine {name} has been marked as unhealthy by {mhc_name}",
            )
    if updated.raw.get("status") == machine.raw.get("status"):
        return
    await Patcher(env.client, MACHINES, machine.raw).patch(updated.raw)


def _is_false(conditions: list[Condition], type_: str) -> bool:
    cond = get_condition(conditions, type_)
    return cond is not None and cond.get("status") == "False"
