"""What one AWSMachinePool reconcile shares between its phases, and the resources it touches.

``controller.reconcile`` builds a ``Scope`` after reading the AWSMachinePool, its MachinePool
and Cluster; the phases (``launchtemplate``, ``asg``, ``refresh``, ``groupsettings``,
``machines``, ``delete``) read and fill it. Each field's comment says which phase fills it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from machinepool.api import conditions as cond
from machinepool.api import constants as c
from machinepool.api.infra_aws import AWS_MACHINE_POOL_FINALIZER
from machinepool.api.views import (
    AWSMachinePoolSpecView,
    AWSMachinePoolStatusView,
    AWSMachinePoolView,
    AWSMachineView,
    MachinePoolView,
)
from machinepool.providers.aws.cloud import AWS, AutoScalingGroup, AWSError
from machinepool.runtime import Client, EventRecorder, Informer, KVLogger
from machinepool.runtime.kube.patch import Patcher

__all__ = [
    "AWSOptions",
    "Scope",
]


# Condition types and reasons of AWSMachinePool (CAPA's names).
ASG_READY = "ASGReady"
LAUNCH_TEMPLATE_READY = "LaunchTemplateReady"
INSTANCE_REFRESH_STARTED = "InstanceRefreshStarted"
LIFECYCLE_HOOK_READY = "LifecycleHookReady"


@dataclass(frozen=True)
class AWSOptions:
    """The AWS component's settings; each field is a ``machinepool run`` flag of its name.

    Instances launch and die without Kubernetes events, so a pool is re-read from AWS on a
    timer; these fields set how often and how many pools at once.
    """

    aws_poll_interval: float = 30.0
    """Seconds between re-reads of a settled pool from AWS."""
    aws_busy_poll_interval: float = 5.0
    """Seconds between re-reads while a pool converges (scaling, refreshing, cancelling)."""
    awsmachinepool_concurrency: int = 4
    """AWSMachinePools (and, separately, AWSMachines) reconciled at once."""


@dataclass
class Scope:
    """One reconcile of one AWSMachinePool."""

    client: Client
    aws: AWS
    recorder: EventRecorder
    log: KVLogger
    options: AWSOptions
    pool: dict[str, Any]
    """The AWSMachinePool, mutated by phases and patched at the end (``runtime.drive``; and
    at a ``checkpoint``)."""
    patcher: Patcher
    machine_pool: MachinePoolView
    """The owning MachinePool (read; spec.replicas written only when managed externally)."""
    cluster_name: str
    aws_machines: list[AWSMachineView]
    """The pool's AWSMachines, snapshotted from the informer BEFORE the group is described.

    Terminating an instance happens before its AWSMachine is deleted, so with this order an
    AWSMachine missing from the snapshot means its instance is already gone from the (later)
    description: a stale group description can never resurrect an AWSMachine.
    """
    machines: Informer
    user_data: str | None = None
    """Base64 bootstrap data from the MachinePool's data secret (launchtemplate)."""
    template_id: str | None = None
    """ID of the pool's launch template (launchtemplate)."""
    latest_version: str | None = None
    """Latest version number of the launch template (launchtemplate)."""
    group: AutoScalingGroup | None = None
    """The Auto Scaling group as DescribeAutoScalingGroups returned it (asg)."""
    busy: bool = False
    """Something is converging: come back after ``aws_busy_poll_interval`` (any phase)."""

    # -- names ----------------------------------------------------------------------------

    @property
    def view(self) -> AWSMachinePoolView:
        """``pool`` typed."""
        return AWSMachinePoolView(self.pool)

    @property
    def name(self) -> str:
        return str(self.view.metadata.name)

    @property
    def namespace(self) -> str:
        return str(self.view.metadata.namespace)

    @property
    def spec(self) -> AWSMachinePoolSpecView:
        return self.view.spec

    @property
    def min_size(self) -> int:
        """``spec.minSize``, 1 (the CRD's default) when absent."""
        size = self.spec.min_size
        return 1 if size is None else int(size)

    @property
    def max_size(self) -> int:
        """``spec.maxSize``, 1 (the CRD's default) when absent."""
        size = self.spec.max_size
        return 1 if size is None else int(size)

    @property
    def status(self) -> AWSMachinePoolStatusView:
        return self.view.status

    @property
    def asg_name(self) -> str:
        """The group's name: recorded in status once chosen, the pool's name before that."""
        return str(self.status.asg_name or self.name)

    @property
    def template_name(self) -> str:
        """Launch template name: spec.awsLaunchTemplate.name, else the pool's name."""
        return str(self.spec.aws_launch_template.name or self.name)

    @property
    def deleting(self) -> bool:
        return self.view.deleting

    @property
    def pool_label(self) -> str:
        return c.pool_name_label_value(str(self.machine_pool.metadata.name))

    # -- conditions -----------------------------------------------------------------------

    def mark(
        self,
        type_: str,
        status: bool,
        reason: str = "",
        message: str = "",
        severity: str = c.SEVERITY_INFO,
    ) -> None:
        """Set a (v1beta1-style, as CAPA's) condition on the pool."""
        cond.set_v1beta1_condition(
            self.status.edit_conditions(),
            type_,
            status,
            reason,
            message,
            "" if status else severity,
        )

    def fail(self, type_: str, reason: str, exc: AWSError) -> AWSError:
        """Record an AWS failure on condition ``type_`` (code and message) and return it."""
        self.mark(type_, False, reason, exc.summary, c.SEVERITY_ERROR)
        return exc

    async def checkpoint(self) -> None:
        """Write now, before a step whose result must survive a crash (the finalizer before
        anything is made in AWS, the group's name before it is created, the template version
        before the refresh it needs): the only writes that do not wait for the driver's one
        on exit. ``pool`` keeps its identity, so that write diffs the same object."""
        written = await self.patcher.patch(self.pool)
        if written is not self.pool:
            self.pool.clear()
            self.pool.update(written)

    @property
    def has_finalizer(self) -> bool:
        return AWS_MACHINE_POOL_FINALIZER in (self.view.metadata.finalizers or [])
