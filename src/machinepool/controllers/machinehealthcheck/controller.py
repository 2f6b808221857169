"""The MachineHealthCheck reconciler: find targets, judge them, mark them, report.

Built by ``machinepool.controllers.machinehealthcheck.setup``. One reconcile per
MachineHealthCheck key: read it and its Cluster from the caches, honour pause, list the
Machines its selector matches in that Cluster (``cluster.x-k8s.io/skip-remediation`` and
paused Machines left out), look up their Nodes in the workload cluster through the cluster
cache (whose Node events map back here), judge each target (``targets.evaluate``), apply the
``triggerIf`` brake, write ``HealthCheckSucceeded`` (and, when remediation is allowed,
``OwnerRemediated=False``) on the Machines, and patch the MachineHealthCheck's status once.

Marking is all this controller does: the Machine's owner remediates. For MachinePool Machines
that is the MachinePool controller (``controllers.machinepool.remediation``), which deletes
marked Machines through the drain-safe Machine deletion, a bounded number at a time.
"""

from __future__ import annotations

import asyncio
import contextlib

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
from machinepool.controllers.machinehealthcheck.selector import matches
from machinepool.controllers.machinehealthcheck.targets import (
    Health,
    Target,
    Verdict,
    cluster_ready_for_checks,
    evaluate,
    remediation_allowed,
)
from machinepool.runtime import (
    NODES,
    ClusterCache,
    ClusterNotConnected,
    Conflict,
    Controller,
    Informer,
    Manager,
    Mapper,
    NotFound,
    Obj,
    ObjectKey,
    OwnReader,
    Result,
    copy_obj,
    get_logger,
)
from machinepool.runtime.patch import Patcher

__all__ = ["COMPONENT", "CONTROLLER_NAME", "MachineHealthCheckReconciler"]

CONTROLLER_NAME = "machinehealthcheck"
COMPONENT = "machinehealthcheck-controller"
BY_CLUSTER = "machinehealthcheck/cluster"
"""MachineHealthChecks by ``namespace/clusterName``."""
MACHINES_BY_NODE = "machinehealthcheck/node"
"""Machines by ``namespace/clusterName/nodeRef.name``."""
EVENT_MARKED_UNHEALTHY = "MachineMarkedUnhealthy"
EVENT_REMEDIATION_RESTRICTED = "RemediationRestricted"
EVENT_TEMPLATE_NOT_SUPPORTED = "ExternalRemediationNotSupported"

log = get_logger(__name__)


def _by_cluster(obj: Obj) -> list[str]:
    mhc = MachineHealthCheckView(obj)
    return [f"{mhc.metadata.namespace}/{mhc.spec.cluster_name}"]


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
        self.reader: OwnReader
        self.clusters: Informer
        self.machines: Informer
        self._watched_clusters: set[ObjectKey] = set()

    async def start_watches(self) -> None:
        self.checks = await self.cache.get_informer(MACHINE_HEALTH_CHECKS)
        with contextlib.suppress(ValueError):
            self.checks.add_indexer(BY_CLUSTER, _by_cluster)
        self.reader = OwnReader(self.client, MACHINE_HEALTH_CHECKS, self.checks)
        self.clusters = await self.cache.get_informer(CLUSTERS)
        self.machines = await self.cache.get_informer(MACHINES)
        with contextlib.suppress(ValueError):
            self.machines.add_indexer(MACHINES_BY_NODE, _machine_by_node)
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

    async def _nodes(self, cluster: ObjectKey) -> Informer:
        informer = await self.cluster_cache.get_informer(cluster, NODES)
        if cluster not in self._watched_clusters:
            await self.cluster_cache.watch(
                cluster, NODES, self.controller.handler(self._node_mapper(cluster))
            )
            self._watched_clusters.add(cluster)
        return informer

    # -- reconcile ------------------------------------------------------------------------

    async def reconcile(self, key: ObjectKey) -> Result:
        obj = await self.reader.get(key)
        if obj is None or MachineHealthCheckView(obj).deleting:
            return Result()
        mhc = MachineHealthCheckView(obj)
        ensure(obj, "status")
        patcher = Patcher(self.client, MACHINE_HEALTH_CHECKS, obj, on_patched=self.reader.wrote)
        cluster_name = str(mhc.spec.cluster_name or "")
        cluster_obj = self.clusters.get(cluster_name, key.namespace)
        if cluster_obj is None:
            # Upstream returns an error; the Cluster watch brings this key back instead.
            log.info("Cluster not found", machinehealthcheck=str(key), cluster=cluster_name)
            return Result()
        conditions = mhc.status.edit_conditions()
        cluster = ClusterView(cluster_obj)
        if set_paused_condition(mhc, conditions, cluster, "MachineHealthCheck"):
            await patcher.patch(obj)
            return Result()
        ensure_cluster_owner(mhc, mhc.spec.cluster_name, cluster)
        try:
            result = await self._reconcile(mhc, cluster)
        except BaseException:
            with contextlib.suppress(Exception):
                await patcher.patch(obj)
            raise
        mhc.status.observed_generation = mhc.metadata.generation
        await patcher.patch(obj)
        return result

    async def _reconcile(self, mhc: MachineHealthCheckView, cluster: ClusterView) -> Result:
        key = ObjectKey.of(mhc.raw)
        nodes: Informer | None = None
        cluster_key = ObjectKey(key.namespace, str(cluster.metadata.name))
        if cluster_ready_for_checks(cluster.raw):
            try:
                nodes = await self._nodes(cluster_key)
            except ClusterNotConnected as exc:
                raise RuntimeError(
                    f"MachineHealthCheck {key}: cannot read the Nodes of workload cluster "
                    f"{cluster_key}: {exc}"
                ) from exc
        targets = self._targets(mhc, nodes)
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
        unhealthy = [
            t for t, v in zip(targets, verdicts, strict=True) if v.health is Health.UNHEALTHY
        ]
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
                await self.recorder.event(mhc.raw, "Warning", EVENT_REMEDIATION_RESTRICTED, why)
        template = remediation.template_ref
        external = any((template.raw or {}).values())
        if external and allowed and unhealthy:
            await self.recorder.event(
                mhc.raw,
                "Warning",
                EVENT_TEMPLATE_NOT_SUPPORTED,
                f"spec.remediation.templateRef ({template.kind} {template.name}) "
                "is not supported by this controller: unhealthy Machines are only marked; "
                "remove templateRef to have their owner remediate them",
            )
        paused_cluster = bool(cluster.spec.paused)
        errors = await asyncio.gather(
            *(
                self._mark(mhc, t, v, remediate=allowed and not paused_cluster, external=external)
                for t, v in zip(targets, verdicts, strict=True)
            ),
            return_exceptions=True,
        )
        failures = [e for e in errors if isinstance(e, BaseException)]
        if failures:
            if all(isinstance(e, (Conflict, NotFound)) for e in failures):
                raise failures[0]
            raise RuntimeError(
                f"MachineHealthCheck {key}: "
                + "; ".join(f"{type(e).__name__}: {e}" for e in failures)
            ) from failures[0]
        waits = [v.next_check for v in verdicts if v.next_check > 0]
        return Result(requeue_after=min(waits)) if allowed and waits else Result()

    def _targets(self, mhc: MachineHealthCheckView, nodes: Informer | None) -> list[Target]:
        namespace = str(mhc.metadata.namespace)
        cluster_name = str(mhc.spec.cluster_name)
        selector = mhc.spec.selector or {}
        found: list[Target] = []
        for obj in self.machines.list(namespace):
            machine = MachineView(obj)
            labels = machine.metadata.labels or {}
            if labels.get(c.CLUSTER_NAME_LABEL) != cluster_name or not matches(selector, labels):
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
        self,
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
                await self.recorder.event(
                    machine.raw,
                    "Normal",
                    EVENT_MARKED_UNHEALTHY,
                    f"Machine {name} has been marked as unhealthy by {mhc_name}",
                )
        if updated.raw.get("status") == machine.raw.get("status"):
            return
        await Patcher(self.client, MACHINES, machine.raw).patch(updated.raw)


def _is_false(conditions: list[Condition], type_: str) -> bool:
    cond = get_condition(conditions, type_)
    return cond is not None and cond.get("status") == "False"
