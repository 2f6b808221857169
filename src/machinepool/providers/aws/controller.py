"""The AWSMachinePool reconcile: read, run the phases, summarise, patch once.

``AWSMachinePoolReconciler.reconcile`` is the controller's entry point (wired by ``setup`` in
this package's ``__init__``): ``runtime.drive`` over the reconciler's steps. It reads the pool
(through an ``OwnReader``), its owning MachinePool and Cluster from the manager's informers
(``PoolInformers``), builds a ``Scope`` (none while no MachinePool owns the pool, or while it
or its Cluster is paused: nothing is written then, as upstream's provider leaves a paused pool
alone), and runs as a chain the guards: for a live pool the finalizer (written at once: a
``checkpoint``, before anything is made in AWS) and what building needs (a valid spec, the
Cluster's infrastructure, the bootstrap data: without them the pass stops and reports), then
``asg.observe``; after them, for a live pool ``launchtemplate``, ``asg.reconcile_group``,
``refresh``, ``groupsettings`` and ``machines``; for a deleted pool ``delete``. Every phase
after ``observe`` runs even when an earlier one failed (they skip what they cannot do); errors
are raised after the single patch (``runtime.reconcile.phases``), so the controller backs off while
conditions already say what failed, and each AWS failure is also a ``ReconcileFailed``
Event. Invalid specs (``webhook.validate``) are reported as
``ASGReady=False, InvalidConfiguration`` and not retried until the spec changes.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from machinepool.api import conditions as cond
from machinepool.api import constants as c
from machinepool.api.infra_aws import AWS_MACHINE_POOL_FINALIZER, AWSMACHINEPOOLS
from machinepool.api.views import (
    AWSMachinePoolView,
    AWSMachineView,
    ClusterView,
    MachinePoolView,
)
from machinepool.providers.aws import (
    asg,
    delete,
    groupsettings,
    launchtemplate,
    membership,
    refresh,
)
from machinepool.providers.aws.cloud import AWS, AWSError
from machinepool.providers.aws.scope import ASG_READY, LAUNCH_TEMPLATE_READY, AWSOptions, Scope
from machinepool.providers.aws.webhook import validate
from machinepool.providers.pool.observe import pool_members
from machinepool.runtime import (
    SECRETS,
    Client,
    EventRecorder,
    Informer,
    KVLogger,
    NotFound,
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
)

__all__ = ["AWSMachinePoolReconciler", "PoolInformers"]

_LIVE_PHASES: tuple[Phase[Scope], ...] = (
    launchtemplate.reconcile_launch_template,
    asg.reconcile_group,
    refresh.reconcile_refresh,
    groupsettings.reconcile_group_settings,
    membership.reconcile_machines,
)
_SUMMARISED = (ASG_READY, LAUNCH_TEMPLATE_READY)


def _owner_pool_name(pool: AWSMachinePoolView) -> str | None:
    for ref in pool.metadata.owner_references or []:
        if ref.get("kind") == "MachinePool" and str(ref.get("apiVersion", "")).startswith(
            c.CLUSTER_GROUP + "/"
        ):
            return str(ref["name"])
    return None


def summarise(conditions: list[cond.Condition]) -> None:
    """Ready = ASGReady and LaunchTemplateReady; otherwise the first one not True explains."""
    for type_ in _SUMMARISED:
        found = cond.get_condition(conditions, type_)
        if found is None or found.get("status") != cond.TRUE:
            found = found or {"status": cond.FALSE, "reason": "WaitingFor" + type_}
            cond.set_v1beta1_condition(
                conditions,
                c.V1BETA1_READY_CONDITION,
                str(found.get("status")),
                str(found.get("reason") or ""),
                str(found.get("message") or ""),
                str(found.get("severity") or c.SEVERITY_INFO),
            )
            return
    cond.set_v1beta1_condition(conditions, c.V1BETA1_READY_CONDITION, True)


@dataclass(frozen=True)
class PoolInformers:
    """The manager's informers an AWSMachinePool reconcile reads from (no live reads)."""

    pools: Informer
    machine_pools: Informer
    clusters: Informer
    aws_machines: Informer
    """Indexed by owning pool (``pool.observe.ensure_member_indexes``)."""
    machines: Informer
    """Indexed by infrastructureRef (``pool.observe.INFRA_REF_INDEX``)."""


class AWSMachinePoolReconciler(Steps[Scope]):
    """Reconciles AWSMachinePools against EC2 Auto Scaling."""

    kind = "AWSMachinePool"

    def __init__(
        self,
        client: Client,
        aws: AWS,
        recorder: EventRecorder,
        log: KVLogger,
        options: AWSOptions,
        informers: PoolInformers,
    ) -> None:
        self.client = client
        self.aws = aws
        self.recorder = recorder
        self.log = log
        self.options = options
        self.informers = informers
        # The pool from the informer, or this controller's own newer write of it: a diff
        # computed against a copy older than the last patch would resend or undo it.
        self.reader = OwnReader(client, AWSMACHINEPOOLS, informers.pools)

    def scope(self, key: ObjectKey, obj: Obj, patcher: Patcher) -> Scope | Stop:
        scope = self._scope(obj, patcher)
        if scope is None or self._paused(scope):
            return Stop(then=Then.NOTHING)
        return scope

    def guards(self, scope: Scope) -> Sequence[Phase[Scope]]:
        if scope.deleting:
            return (asg.observe,)
        return (_add_finalizer, self._ready_to_build, asg.observe)

    def phases(self, scope: Scope) -> Sequence[Phase[Scope]]:
        return (delete.reconcile_delete,) if scope.deleting else _LIVE_PHASES

    async def report(self, scope: Scope, outcome: Outcome) -> Outcome:
        if not scope.deleting:
            summarise(scope.status.edit_conditions())
        return Outcome()

    def observed(self, scope: Scope) -> bool:
        return False  # AWSMachinePool's status has no observedGeneration.

    async def finish(self, scope: Scope, outcome: Outcome) -> Outcome:
        for exc in outcome.errors:
            if isinstance(exc, AWSError):
                await self.recorder.event(scope.pool, "Warning", "ReconcileFailed", str(exc))
        interval = (
            self.options.aws_busy_poll_interval if scope.busy else self.options.aws_poll_interval
        )
        return Outcome(Result(requeue_after=interval), outcome.errors)

    # -- building the scope ----------------------------------------------------------------

    def _scope(self, pool: dict[str, Any], patcher: Patcher) -> Scope | None:
        view = AWSMachinePoolView(pool)
        meta = view.metadata
        name, namespace = meta.name, meta.namespace
        mp_name = _owner_pool_name(view)
        machine_pool: MachinePoolView | None = None
        if mp_name is not None:
            cached = self.informers.machine_pools.get(mp_name, namespace)
            # A private copy: the informer's object is shared with every other reader.
            machine_pool = MachinePoolView(copy_obj(cached)) if cached is not None else None
        if machine_pool is None and not view.deleting:
            self.log.info("waiting for the MachinePool to own this AWSMachinePool", pool=name)
            return None
        if machine_pool is None:  # deleting without its MachinePool: enough to clean up
            machine_pool = MachinePoolView(
                {"metadata": {"name": name}, "spec": {"template": {"spec": {}}}}
            )
        cluster = str(
            machine_pool.spec.cluster_name or (meta.labels or {}).get(c.CLUSTER_NAME_LABEL) or ""
        )
        return Scope(
            client=self.client,
            aws=self.aws,
            recorder=self.recorder,
            log=self.log.bind(pool=f"{namespace}/{name}"),
            options=self.options,
            pool=pool,
            patcher=patcher,
            machine_pool=machine_pool,
            cluster_name=cluster,
            aws_machines=[
                AWSMachineView(m)
                for m in pool_members(self.informers.aws_machines, ObjectKey(namespace, name))
            ],
            machines=self.informers.machines,
        )

    def _cluster(self, scope: Scope) -> ClusterView | None:
        cluster = self.informers.clusters.get(scope.cluster_name, scope.namespace)
        return ClusterView(cluster) if cluster is not None else None

    def _paused(self, scope: Scope) -> bool:
        """The pool or its Cluster is paused: touch nothing, not even status."""
        if c.PAUSED_ANNOTATION in (scope.view.metadata.annotations or {}):
            return True
        cluster = self._cluster(scope)
        return cluster is not None and bool(cluster.spec.paused)

    async def _ready_to_build(self, scope: Scope) -> Result:
        """Check what building needs: a valid spec, the Cluster's infrastructure provisioned,
        the bootstrap data present; stop and report what is missing."""
        problems = validate(scope.pool)
        if problems:
            scope.mark(
                ASG_READY, False, "InvalidConfiguration", "; ".join(problems), c.SEVERITY_ERROR
            )
            return Stop()
        if not await self._cluster_ready(scope) or not await self._load_user_data(scope):
            return Stop()
        return Result()

    async def _cluster_ready(self, scope: Scope) -> bool:
        cluster = self._cluster(scope)
        if cluster is None:
            scope.mark(
                ASG_READY, False, "WaitingForCluster", f"Cluster {scope.cluster_name} not found"
            )
            return False
        status = cluster.status
        provisioned = status.initialization.infrastructure_provisioned
        if not provisioned and not cond.is_true(
            status.conditions, c.INFRASTRUCTURE_READY_CONDITION
        ):
            scope.mark(ASG_READY, False, "WaitingForClusterInfrastructure", "")
            return False
        return True

    async def _load_user_data(self, scope: Scope) -> bool:
        secret_name = scope.machine_pool.spec.template.spec.bootstrap.data_secret_name
        if not secret_name:
            scope.mark(ASG_READY, False, "WaitingForBootstrapData", "")
            return False
        # A live GET, as the pool engine's (``pool.scale._bootstrap_data``): a Secret informer
        # would cache every Secret's data (kubeconfigs, CA keys) in this process and need
        # list/watch on all Secrets, where the component's role grants only get. A
        # label-filtered informer cannot serve it either: a user's own data Secret (any
        # dataSecretName) carries no label to select it by. One small GET per reconcile.
        try:
            secret = await self.client.get(SECRETS, secret_name, scope.namespace)
        except NotFound:
            scope.mark(
                ASG_READY, False, "WaitingForBootstrapData", f"Secret {secret_name} not found"
            )
            scope.busy = True
            return False
        value = (secret.get("data") or {}).get("value")
        if not value:
            scope.mark(
                ASG_READY,
                False,
                "WaitingForBootstrapData",
                f"Secret {secret_name} has no data key 'value'",
                c.SEVERITY_WARNING,
            )
            return False
        base64.b64decode(value, validate=True)  # the launch template wants exactly this
        scope.user_data = str(value)
        return True


async def _add_finalizer(scope: Scope) -> Result:
    """Add the finalizer, written at once: nothing is made in AWS for a pool without it."""
    if not scope.has_finalizer:
        meta = scope.view.metadata
        meta.finalizers = [*(meta.finalizers or []), AWS_MACHINE_POOL_FINALIZER]
        await scope.checkpoint()
    return Result()
