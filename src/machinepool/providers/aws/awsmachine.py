"""The AWSMachine controller: terminate a pool instance when its AWSMachine is deleted.

Pool AWSMachines are created by the AWSMachinePool ``machines`` phase with a finalizer. They are
deleted by the core Machine controller after it drained the Node (or by the pool when its
instance vanished, or on pool deletion). The finalizer calls
TerminateInstanceInAutoScalingGroup with ShouldDecrementDesiredCapacity=True, so the group
shrinks by exactly the instance that was drained instead of picking its own victim. When the
decrement would take the group below its minimum size AWS refuses it; the instance is then
terminated without decrement and the group replaces it, which is what deleting a Machine of a
pool at its minimum means. A Machine deleted by remediation (its ``OwnerRemediated`` condition
says ``MachineDeleting``, written by the MachinePool before it deletes a Machine a health check
marked) is also terminated without decrement: the pool still wants that many instances, so the
group launches a replacement. An instance that is already gone needs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from machinepool.api import constants as c
from machinepool.api.infra_aws import AWS_MACHINE_FINALIZER, AWSMACHINES
from machinepool.api.kinds import MACHINES
from machinepool.api.views import AWSMachineView, MachineView
from machinepool.providers.aws import plan
from machinepool.providers.aws.cloud import AWS, AWSError
from machinepool.providers.pool.observe import owner_machines
from machinepool.runtime import (
    Client,
    EventRecorder,
    Informer,
    KVLogger,
    NotFound,
    Obj,
    ObjectKey,
    OwnReader,
    Patcher,
    Phase,
    Result,
    Steps,
    Stop,
    Then,
)

__all__ = ["AWSMachineReconciler"]


def _instance_id(aws_machine: AWSMachineView) -> str | None:
    spec = aws_machine.spec
    if spec.instance_id:
        return str(spec.instance_id)
    parsed = plan.parse_provider_id(str(spec.provider_id or ""))
    return parsed[1] if parsed else None


def _gone(exc: AWSError) -> bool:
    """The instance no longer exists, or no longer belongs to a group."""
    text = exc.message.lower()
    return exc.not_found or "not found" in text or "not part of" in text or "terminated" in text


class AWSMachineReconciler(Steps[AWSMachineView]):
    """Reconciles AWSMachines: only deletion does anything (instances belong to the group).

    ``runtime.drive`` over these steps, a chain over the AWSMachine itself (its view is the
    scope): terminate the instance, then release the finalizer, written on exit (locked to the
    copy's resourceVersion, a list: a stale copy cannot undo a change)."""

    kind = "AWSMachine"
    chain = True

    def __init__(
        self,
        client: Client,
        aws: AWS,
        recorder: EventRecorder,
        log: KVLogger,
        aws_machines: Informer,
        machines: Informer,
    ) -> None:
        self.client = client
        self.aws = aws
        self.recorder = recorder
        self.log = log
        self.aws_machines = aws_machines
        self.machines = machines
        """Indexed by infrastructureRef (``pool.observe.INFRA_REF_INDEX``)."""
        self.reader = OwnReader(client, AWSMACHINES, aws_machines)

    def scope(self, key: ObjectKey, obj: Obj, patcher: Patcher) -> AWSMachineView | Stop:
        # A copy that does not show the deletion yet does nothing: the watch event of the
        # deletion comes next.
        aws_machine = AWSMachineView(obj)
        finalizers = aws_machine.metadata.finalizers or []
        if not aws_machine.deleting or AWS_MACHINE_FINALIZER not in finalizers:
            return Stop(then=Then.NOTHING)
        return aws_machine

    def phases(self, scope: AWSMachineView) -> Sequence[Phase[AWSMachineView]]:
        return (self.terminate_instance, release_finalizer)

    def observed(self, scope: AWSMachineView) -> bool:
        return False  # nothing in the status is computed here

    async def terminate_instance(self, aws_machine: AWSMachineView) -> Result:
        """Terminate the AWSMachine's instance, shrinking the group unless remediated."""
        instance = _instance_id(aws_machine)
        if instance is not None:
            remediated = await self._remediated(aws_machine)
            await self._terminate(aws_machine.raw, instance, decrement=not remediated)
        return Result()

    async def _remediated(self, aws_machine: AWSMachineView) -> bool:
        """Whether the owner Machine is being deleted by remediation."""
        owners = owner_machines(self.machines, AWSMACHINES.kind, aws_machine.raw)
        machine = MachineView(owners[0]) if owners else None
        if machine is None or not machine.deleting:
            # The informer's copy decides only once it shows the Machine deleting: the
            # MachinePool writes OwnerRemediated before it deletes, so that copy has it. Any
            # other copy may lag the server, and the answer picks between shrinking the group
            # and replacing the instance, which cannot be undone: read it live (rare: a
            # Machine is deleting before its AWSMachine is, except for an AWSMachine without
            # one, or deleted directly).
            meta = aws_machine.metadata
            try:
                machine = MachineView(await self.client.get(MACHINES, meta.name, meta.namespace))
            except NotFound:
                return False
        for cond in machine.status.conditions or []:
            if cond.get("type") == c.OWNER_REMEDIATED_CONDITION:
                return bool(
                    cond.get("status") == "False"
                    and cond.get("reason") == c.MACHINE_DELETING_REASON
                )
        return False

    async def _terminate(self, obj: dict[str, Any], instance: str, *, decrement: bool) -> None:
        try:
            await self._terminate_in_group(instance, decrement=decrement)
        except AWSError as exc:
            if "min size" in exc.message.lower() or "minsize" in exc.message.lower():
                await self._terminate_in_group(instance, decrement=False)
            elif _gone(exc):
                if not await self._terminate_outside_group(instance):
                    self.log.info("instance already gone", instance=instance)
                    return
            else:
                await self.recorder.event(
                    obj, "Warning", "TerminateFailed", f"instance {instance}: {exc.summary}"
                )
                raise
        replaced = "" if decrement else " (remediation: the group replaces it)"
        await self.recorder.event(
            obj, "Normal", "InstanceTerminated", f"terminated instance {instance}{replaced}"
        )
        self.log.info("terminated instance", instance=instance, awsmachine=obj["metadata"]["name"])

    async def _terminate_in_group(self, instance: str, *, decrement: bool) -> None:
        await self.aws.call(
            "autoscaling",
            "terminate_instance_in_auto_scaling_group",
            InstanceId=instance,
            ShouldDecrementDesiredCapacity=decrement,
        )

    async def _terminate_outside_group(self, instance: str) -> bool:
        """A detached (or already terminated) instance: terminate it directly if it exists.

        Returns whether there was an instance to terminate.
        """
        try:
            await self.aws.call("ec2", "terminate_instances", InstanceIds=[instance])
        except AWSError as exc:
            if not _gone(exc):
                raise
            return False
        return True


async def release_finalizer(aws_machine: AWSMachineView) -> Result:
    """Let the AWSMachine go: its instance is terminated or was gone."""
    meta = aws_machine.metadata
    meta.finalizers = [f for f in meta.finalizers or [] if f != AWS_MACHINE_FINALIZER]
    return Result()
