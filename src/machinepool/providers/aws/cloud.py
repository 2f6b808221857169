"""The AWS connection: boto3 clients for EC2 and Auto Scaling, called off the event loop.

Credentials and region come from boto3's standard chain (environment, shared config and
credentials files, container and instance roles); the endpoint from ``AWS_ENDPOINT_URL`` (or
``AWS_ENDPOINT_URL_EC2`` / ``AWS_ENDPOINT_URL_AUTO_SCALING``), which boto3 reads itself. Every
call runs in a worker thread (boto3 is blocking) and every failure becomes an ``AWSError``
carrying the AWS error code and message, which the reconcile phases turn into conditions and
re-raise so the controller backs off.

Parameters are never logged: launch template calls carry the bootstrap user data.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any, Literal, TypedDict

import boto3
import botocore.config
import botocore.exceptions

from machinepool.runtime import ExpectedError

__all__ = [
    "AWS",
    "AWSError",
    "AutoScalingGroup",
    "GroupInstance",
    "GroupTag",
    "LaunchTemplateSpecification",
    "Service",
    "SuspendedProcess",
]

Service = Literal["ec2", "autoscaling"]


# --- what DescribeAutoScalingGroups answers, as far as the phases read it --------------------
# boto3 returns plain dicts; these name the keys (AWS's spelling) and their types. Not
# validated: AWS's API defines them, and a key AWS leaves out reads as absent.


class LaunchTemplateSpecification(TypedDict, total=False):
    LaunchTemplateId: str
    LaunchTemplateName: str
    Version: str


class GroupInstance(TypedDict, total=False):
    """One instance of a group (``Instances``)."""

    InstanceId: str
    AvailabilityZone: str
    LifecycleState: str
    """Pending, InService, Terminating, Terminated, Warmed:* ..."""
    HealthStatus: str
    InstanceType: str
    LaunchTemplate: LaunchTemplateSpecification
    ProtectedFromScaleIn: bool


class GroupTag(TypedDict, total=False):
    Key: str
    Value: str
    ResourceId: str
    ResourceType: str
    PropagateAtLaunch: bool


class SuspendedProcess(TypedDict, total=False):
    ProcessName: str
    SuspensionReason: str


class AutoScalingGroup(TypedDict, total=False):
    """One group of ``DescribeAutoScalingGroups``' ``AutoScalingGroups``."""

    AutoScalingGroupName: str
    AutoScalingGroupARN: str
    LaunchTemplate: LaunchTemplateSpecification
    MixedInstancesPolicy: dict[str, Any]
    """As AWS spells it; compared whole with what the spec asks (``asg``)."""
    MinSize: int
    MaxSize: int
    DesiredCapacity: int
    DefaultCooldown: int
    DefaultInstanceWarmup: int
    AvailabilityZones: list[str]
    VPCZoneIdentifier: str
    """Subnet IDs, comma-separated."""
    Instances: list[GroupInstance]
    SuspendedProcesses: list[SuspendedProcess]
    Tags: list[GroupTag]
    Status: str
    """Set while the group is being deleted ("Delete in progress")."""
    CapacityRebalance: bool


_NOT_FOUND_CODES = frozenset(
    {
        "InvalidLaunchTemplateId.NotFound",
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidLaunchTemplateId.Malformed",
        "InvalidInstanceID.NotFound",
        "ActiveInstanceRefreshNotFound",
        "ActiveInstanceRefreshNotFoundFault",
    }
)
_ALREADY_EXISTS_CODES = frozenset(
    {"AlreadyExists", "AlreadyExistsFault", "InvalidLaunchTemplateName.AlreadyExistsException"}
)


class AWSError(ExpectedError):
    """A failed AWS call: ``code`` is AWS's error code (``Throttling``, ``AccessDenied``...)."""

    def __init__(self, operation: str, code: str, message: str, status: int = 0) -> None:
        super().__init__(f"{operation}: {code}: {message}")
        self.operation = operation
        self.code = code
        self.message = message
        self.status = status

    @property
    def not_found(self) -> bool:
        """The thing asked about does not exist (a normal answer, not a failure)."""
        return self.code in _NOT_FOUND_CODES or "not found" in self.message.lower()

    @property
    def already_exists(self) -> bool:
        return self.code in _ALREADY_EXISTS_CODES or "already exists" in self.message.lower()

    @property
    def summary(self) -> str:
        """``<code>: <message>``, for conditions and Events."""
        return f"{self.code}: {self.message}"


def _translate(operation: str, exc: Exception) -> AWSError:
    if isinstance(exc, botocore.exceptions.ClientError):
        err = exc.response.get("Error", {})
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        return AWSError(
            operation, str(err.get("Code", "Unknown")), str(err.get("Message", "")), status
        )
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return AWSError(
            operation, "NoCredentials", "no AWS credentials found in the standard chain"
        )
    if isinstance(exc, botocore.exceptions.NoRegionError):
        return AWSError(operation, "NoRegion", "set AWS_DEFAULT_REGION or a region in AWS config")
    if isinstance(
        exc, botocore.exceptions.EndpointConnectionError | botocore.exceptions.ConnectionError
    ):
        return AWSError(operation, "EndpointConnectionError", str(exc))
    return AWSError(operation, type(exc).__name__, str(exc))


class AWS:
    """EC2 and Auto Scaling clients of one region.

    ``session`` [a new ``boto3.Session()``]: where credentials and region come from.
    ``endpoint_url`` [``$AWS_ENDPOINT_URL`` or AWS]: an alternative endpoint (an emulator).
    ``max_attempts`` [3]: botocore's own retries of throttling and 5xx before we see the error.
    """

    def __init__(
        self,
        session: boto3.Session | None = None,
        *,
        endpoint_url: str | None = None,
        max_attempts: int = 3,
    ) -> None:
        session = session or boto3.Session()
        config = botocore.config.Config(
            retries={"mode": "standard", "max_attempts": max_attempts},
            connect_timeout=5,
            read_timeout=30,
        )
        endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
        self._clients: dict[str, Any] = {
            name: session.client(name, endpoint_url=endpoint, config=config)
            for name in ("ec2", "autoscaling")
        }

    @property
    def region(self) -> str:
        return str(self._clients["ec2"].meta.region_name)

    async def call(self, service: Service, operation: str, **params: Any) -> dict[str, Any]:
        """Call ``operation`` (boto3's snake_case name) in a thread; raise ``AWSError``."""
        method = getattr(self._clients[service], operation)
        try:
            result: Mapping[str, Any] = await asyncio.to_thread(method, **params)
        except Exception as exc:
            raise _translate(operation, exc) from exc
        return {k: v for k, v in result.items() if k != "ResponseMetadata"}
