"""An emulated AWS endpoint over real HTTP, and a test environment for the AWS provider.

``FakeAWS`` serves moto (in server mode, in this process) behind a small WSGI front on
loopback. The provider reaches it only through ``AWS_ENDPOINT_URL`` with boto3, exactly as it
would reach AWS. The front adds what moto 5 lacks, as the smallest faithful emulation:

- ``StartInstanceRefresh`` / ``DescribeInstanceRefreshes`` / ``CancelInstanceRefresh``: refreshes
  are recorded per group; a started refresh stays ``InProgress`` (it replaces no instances);
  cancelling makes it ``Cancelling``, and the next describe shows ``Cancelled``. Starting one
  while another is active fails with ``InstanceRefreshInProgress``, as AWS does.
- ``DeleteLaunchTemplateVersions``: removes versions (moto is patched to number versions by
  their number instead of list position, so deleting one does not renumber the rest).
- ``CreateLaunchTemplateVersion`` user data: moto stores it undecoded and then crashes when an
  instance launches from that version; the stored value is wrapped as moto expects.
- Fault injection: ``fail(action, code, message, status)`` answers an action with an AWS error
  until ``clear_faults()``.

Every request is journalled (``journal``) with a sequence number shared with the test's own
records, so tests can assert ordering (a Node cordoned before its instance was terminated).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import itertools
import logging
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

import boto3
import pytest
import pytest_asyncio
from moto.autoscaling.models import autoscaling_backends
from moto.core.types import Base64EncodedString
from moto.ec2.models import ec2_backends
from moto.ec2.models.launch_templates import LaunchTemplate, LaunchTemplateVersion
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from tests.support import eventually
from tests.support.pools import scale_pool
from tests.support.resources import AWSMACHINEPOOLS, AWSMACHINES, CLUSTERS, MACHINE_POOLS, MACHINES
from werkzeug.serving import make_server

from machinepool.api import constants as c
from machinepool.controlplane import ControlPlane, WorkloadCluster
from machinepool.controlplane.register import register_workload_cluster
from machinepool.providers import aws as aws_provider
from machinepool.runtime import NODES, SECRETS, Client, ClusterCache, Manager, ManagerState

ACCOUNT = "123456789012"
REGION = "us-east-1"
ASG_NS = "http://autoscaling.amazonaws.com/doc/2011-01-01/"
EC2_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
ACTIVE = ("Pending", "InProgress", "Cancelling")
_SEQ = itertools.count()


def seq() -> int:
    """A sequence number shared by the endpoint journal and the tests' own records."""
    return next(_SEQ)


# --- moto patches: version numbers by number, so versions can be deleted ------------------


def _get_version(self: LaunchTemplate, num: Any) -> LaunchTemplateVersion:
    if str(num).lower() == "$latest":
        return self.versions[-1]
    if str(num).lower() == "$default":
        num = self.default_version_number
    for version in self.versions:
        if version.number == int(num):
            return version
    from moto.ec2.exceptions import InvalidLaunchTemplateVersionNotFound

    raise InvalidLaunchTemplateVersionNotFound(template_id=self.id, version=num)


def _create_version(self: LaunchTemplate, data: dict[str, Any], description: str) -> Any:
    number = max((v.number for v in self.versions), default=0) + 1
    version = LaunchTemplateVersion(self, number, data, description)
    self.versions.append(version)
    return version


def _default_version(self: LaunchTemplate) -> LaunchTemplateVersion:
    return _get_version(self, self.default_version_number)


# --- the front ------------------------------------------------------------------------------


@dataclass
class Refresh:
    id: str
    group: str
    status: str
    started: datetime
    preferences: dict[str, str] = field(default_factory=dict)


class FakeAWS:
    """moto behind a WSGI front that adds instance refreshes, version deletion and faults."""

    def __init__(self) -> None:
        self.moto = DomainDispatcherApplication(create_backend_app)
        self.refreshes: list[Refresh] = []
        self.faults: dict[str, tuple[str, str, int]] = {}
        self.journal: list[tuple[int, str, dict[str, list[str]]]] = []
        self.lock = threading.Lock()
        self.server = make_server("127.0.0.1", 0, self, threaded=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    # -- lifecycle and test helpers -------------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join(timeout=10)

    def reset(self) -> None:
        with self.lock:
            self.refreshes.clear()
            self.faults.clear()
            self.journal.clear()
        autoscaling_backends[ACCOUNT][REGION].reset()
        ec2_backends[ACCOUNT][REGION].reset()

    def fail(self, action: str, code: str, message: str, status: int = 400) -> None:
        self.faults[action] = (code, message, status)

    def clear_faults(self) -> None:
        self.faults.clear()

    def calls(self, action: str) -> list[tuple[int, dict[str, list[str]]]]:
        with self.lock:
            return [(n, form) for n, name, form in self.journal if name == action]

    # -- WSGI -----------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        form = parse_qs(body.decode(errors="replace"))
        action = (form.get("Action") or [""])[0]
        with self.lock:
            self.journal.append((seq(), action, form))
        service = "ec2" if "/ec2/" in environ.get("HTTP_AUTHORIZATION", "") else "autoscaling"
        if action in self.faults:
            code, message, status = self.faults[action]
            return self._error(start_response, service, code, message, status)
        handler = getattr(self, f"_do_{action}", None)
        if handler is not None:
            answer = handler(start_response, form)
            if answer is not None:
                return answer
        result = self.moto(environ, start_response)
        if action == "CreateLaunchTemplateVersion":
            self._fix_user_data()
        return result

    def _reply(
        self, start_response: Callable[..., Any], xml: str, status: int = 200
    ) -> list[bytes]:
        start_response(
            f"{status} {'OK' if status == 200 else 'Error'}", [("Content-Type", "text/xml")]
        )
        return [xml.encode()]

    def _error(
        self, start_response: Callable[..., Any], service: str, code: str, message: str, status: int
    ) -> list[bytes]:
        if service == "ec2":
            xml = (
                f"<Response><Errors><Error><Code>{escape(code)}</Code><Message>{escape(message)}"
                "</Message></Error></Errors><RequestID>fake</RequestID></Response>"
            )
        else:
            xml = (
                f'<ErrorResponse xmlns="{ASG_NS}"><Error><Type>Sender</Type><Code>{escape(code)}'
                f"</Code><Message>{escape(message)}</Message></Error>"
                "<RequestId>fake</RequestId></ErrorResponse>"
            )
        return self._reply(start_response, xml, status)

    def _asg_reply(
        self, start_response: Callable[..., Any], action: str, inner: str
    ) -> list[bytes]:
        xml = (
            f'<{action}Response xmlns="{ASG_NS}"><{action}Result>{inner}</{action}Result>'
            f"<ResponseMetadata><RequestId>fake</RequestId></ResponseMetadata></{action}Response>"
        )
        return self._reply(start_response, xml)

    def _active(self, group: str) -> Refresh | None:
        return next((r for r in self.refreshes if r.group == group and r.status in ACTIVE), None)

    # -- instance refresh -------------------------------------------------------------------

    def _do_StartInstanceRefresh(self, start_response: Any, form: dict[str, list[str]]) -> Any:
        group = form["AutoScalingGroupName"][0]
        if self._active(group) is not None:
            return self._error(
                start_response,
                "autoscaling",
                "InstanceRefreshInProgress",
                f"An Instance Refresh is already in progress and blocks the execution of this "
                f"Instance Refresh for group {group}",
                400,
            )
        prefs = {k.split(".", 1)[1]: v[0] for k, v in form.items() if k.startswith("Preferences.")}
        refresh = Refresh(str(uuid.uuid4()), group, "InProgress", datetime.now(UTC), prefs)
        self.refreshes.append(refresh)
        return self._asg_reply(
            start_response,
            "StartInstanceRefresh",
            f"<InstanceRefreshId>{refresh.id}</InstanceRefreshId>",
        )

    def _do_DescribeInstanceRefreshes(self, start_response: Any, form: dict[str, list[str]]) -> Any:
        group = form["AutoScalingGroupName"][0]
        members = []
        for refresh in sorted(
            (r for r in self.refreshes if r.group == group), key=lambda r: r.started, reverse=True
        ):
            shown = refresh.status
            if refresh.status == "Cancelling":  # seen once as Cancelling, then done
                refresh.status = "Cancelled"
            members.append(
                f"<member><InstanceRefreshId>{refresh.id}</InstanceRefreshId>"
                f"<AutoScalingGroupName>{group}</AutoScalingGroupName><Status>{shown}</Status>"
                f"<StartTime>{refresh.started.strftime('%Y-%m-%dT%H:%M:%SZ')}</StartTime>"
                "<PercentageComplete>0</PercentageComplete></member>"
            )
        return self._asg_reply(
            start_response,
            "DescribeInstanceRefreshes",
            f"<InstanceRefreshes>{''.join(members)}</InstanceRefreshes>",
        )

    def _do_CancelInstanceRefresh(self, start_response: Any, form: dict[str, list[str]]) -> Any:
        group = form["AutoScalingGroupName"][0]
        refresh = self._active(group)
        if refresh is None or refresh.status == "Cancelling":
            return self._error(
                start_response,
                "autoscaling",
                "ActiveInstanceRefreshNotFound",
                f"No in progress or pending Instance Refresh found for Auto Scaling group {group}",
                400,
            )
        refresh.status = "Cancelling"
        return self._asg_reply(
            start_response,
            "CancelInstanceRefresh",
            f"<InstanceRefreshId>{refresh.id}</InstanceRefreshId>",
        )

    # -- termination of instances outside any group -------------------------------------

    def _do_TerminateInstanceInAutoScalingGroup(
        self, start_response: Any, form: dict[str, list[str]]
    ) -> Any:
        # moto answers 500 for an instance in no group; AWS answers a ValidationError.
        instance = form["InstanceId"][0]
        groups = autoscaling_backends[ACCOUNT][REGION].autoscaling_groups.values()
        if not any(s.instance.id == instance for g in groups for s in g.instance_states):
            return self._error(
                start_response,
                "autoscaling",
                "ValidationError",
                f"Instance Id not found - No managed instance found for instance ID: {instance}",
                400,
            )
        return None

    # -- launch template versions -----------------------------------------------------------

    def _template(self, form: dict[str, list[str]]) -> LaunchTemplate:
        backend = ec2_backends[ACCOUNT][REGION]
        if "LaunchTemplateId" in form:
            return backend.get_launch_template(form["LaunchTemplateId"][0])
        return backend.get_launch_template_by_name(form["LaunchTemplateName"][0])

    def _do_DeleteLaunchTemplateVersions(
        self, start_response: Any, form: dict[str, list[str]]
    ) -> Any:
        template = self._template(form)
        wanted = {v[0] for k, v in form.items() if k.startswith("LaunchTemplateVersion.")}
        deleted, failed = [], []
        for number in sorted(wanted, key=int):
            if int(number) == template.default_version_number:
                failed.append(number)
                continue
            template.versions = [v for v in template.versions if v.number != int(number)]
            deleted.append(number)
        ok = "".join(
            f"<item><launchTemplateId>{template.id}</launchTemplateId><launchTemplateName>"
            f"{template.name}</launchTemplateName><versionNumber>{n}</versionNumber></item>"
            for n in deleted
        )
        bad = "".join(
            f"<item><launchTemplateId>{template.id}</launchTemplateId><versionNumber>{n}"
            "</versionNumber><responseError><code>launchTemplateVersionIsDefault</code>"
            "<message>default version</message></responseError></item>"
            for n in failed
        )
        xml = (
            f'<DeleteLaunchTemplateVersionsResponse xmlns="{EC2_NS}"><requestId>fake</requestId>'
            f"<successfullyDeletedLaunchTemplateVersionSet>{ok}</successfullyDeletedLaunchTemplateVersionSet>"
            f"<unsuccessfullyDeletedLaunchTemplateVersionSet>{bad}"
            "</unsuccessfullyDeletedLaunchTemplateVersionSet></DeleteLaunchTemplateVersionsResponse>"
        )
        return self._reply(start_response, xml)

    def _fix_user_data(self) -> None:
        for template in ec2_backends[ACCOUNT][REGION].launch_templates.values():
            for version in template.versions:
                value = version.data.get("UserData")
                if isinstance(value, str):
                    version.data["UserData"] = Base64EncodedString(value)

    # -- reading state for assertions ----------------------------------------------------------

    def group(self, name: str) -> dict[str, Any] | None:
        groups = self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])[
            "AutoScalingGroups"
        ]
        return groups[0] if groups else None

    @property
    def asg(self) -> Any:
        return boto3.client("autoscaling", **self.client_kwargs)

    @property
    def ec2(self) -> Any:
        return boto3.client("ec2", **self.client_kwargs)

    @property
    def client_kwargs(self) -> dict[str, str]:
        return {
            "endpoint_url": self.url,
            "region_name": REGION,
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        }


@pytest.fixture(scope="session")
def fake_aws_server() -> Iterator[FakeAWS]:
    patches = {
        "get_version": _get_version,
        "create_version": _create_version,
        "default_version": _default_version,
    }
    originals = {name: getattr(LaunchTemplate, name) for name in patches}
    for name, fn in patches.items():
        setattr(LaunchTemplate, name, fn)
    env = {
        "AWS_ENDPOINT_URL": "",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }
    saved = {k: os.environ.get(k) for k in env}
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    fake = FakeAWS()
    fake.start()
    env["AWS_ENDPOINT_URL"] = fake.url
    os.environ.update(env)
    try:
        yield fake
    finally:
        fake.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for name, fn in originals.items():
            setattr(LaunchTemplate, name, fn)


@pytest.fixture
def fake_aws(fake_aws_server: FakeAWS) -> FakeAWS:
    fake_aws_server.reset()
    return fake_aws_server


async def in_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a blocking boto3 call of the test without stalling the controllers' loop."""
    return await asyncio.to_thread(fn, *args, **kwargs)


# --- the test environment ----------------------------------------------------------------------


def cloud_init(token: str) -> str:
    return base64.b64encode(f"#cloud-config\n# join token {token}\n".encode()).decode()


@dataclass
class AWSEnv:
    """A registered workload cluster, a bootstrap Secret and the provider running."""

    client: Client
    namespace: str
    cluster: str
    workload: WorkloadCluster
    fake: FakeAWS
    workload_client: Client
    records: list[tuple[int, str, str]] = field(default_factory=list)
    """(seq, what, name) written by the test's Machine driver: "cordon", "node-deleted"..."""

    async def set_bootstrap(self, token: str, name: str = "bootstrap-data") -> None:
        body = {
            "metadata": {"name": name, "namespace": self.namespace},
            "data": {
                "value": cloud_init(token),
                "format": base64.b64encode(b"cloud-config").decode(),
            },
        }
        try:
            await self.client.create(SECRETS, body, self.namespace)
        except Exception:
            await self.client.patch(SECRETS, name, {"data": body["data"]}, self.namespace)

    async def create_pool(
        self, name: str, replicas: int, *, annotations: dict[str, str] | None = None, **spec: Any
    ) -> dict[str, Any]:
        """A MachinePool and its AWSMachinePool, owned as core would own it."""
        mp = {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachinePool",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {c.CLUSTER_NAME_LABEL: self.cluster},
                "annotations": annotations or {},
            },
            "spec": {
                "clusterName": self.cluster,
                "replicas": replicas,
                "template": {
                    "spec": {
                        "clusterName": self.cluster,
                        "version": "v1.31.0",
                        "bootstrap": {"dataSecretName": "bootstrap-data"},
                        "infrastructureRef": {
                            "apiGroup": AWSMACHINEPOOLS.group,
                            "kind": "AWSMachinePool",
                            "name": name,
                        },
                    }
                },
            },
        }
        created = await self.client.create(MACHINE_POOLS, mp, self.namespace)
        pool_spec: dict[str, Any] = {
            "minSize": 0,
            "maxSize": 5,
            "availabilityZones": ["us-east-1a", "us-east-1b"],
            "awsLaunchTemplate": {"instanceType": "t3.small", "ami": {"id": await self.ami()}},
        }
        pool_spec.update(spec)
        pool = {
            "apiVersion": AWSMACHINEPOOLS.api_version,
            "kind": "AWSMachinePool",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {c.CLUSTER_NAME_LABEL: self.cluster},
                "ownerReferences": [
                    {
                        "apiVersion": "cluster.x-k8s.io/v1beta2",
                        "kind": "MachinePool",
                        "name": name,
                        "uid": created["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": pool_spec,
        }
        return await self.client.create(AWSMACHINEPOOLS, pool, self.namespace)

    async def ami(self, index: int = 0) -> str:
        images = (await in_thread(self.fake.ec2.describe_images))["Images"]
        return str(sorted(i["ImageId"] for i in images)[index])

    async def pool(self, name: str) -> dict[str, Any]:
        return await self.client.get(AWSMACHINEPOOLS, name, self.namespace)

    async def scale(self, name: str, replicas: int) -> None:
        await scale_pool(self.client, self.namespace, name, replicas)

    async def group(self, name: str) -> dict[str, Any] | None:
        return await in_thread(self.fake.group, name)  # type: ignore[no-any-return]

    async def live_ids(self, name: str) -> list[str]:
        group = await self.group(name)
        return sorted(
            f"aws:///{i['AvailabilityZone']}/{i['InstanceId']}"
            for i in (group or {}).get("Instances", [])
            if i["LifecycleState"] == "InService"
        )

    async def aws_machines(self) -> list[dict[str, Any]]:
        return (await self.client.list(AWSMACHINES, self.namespace)).items

    # Helpers for the test modules (which cannot import this conftest under importlib mode).
    eventually = staticmethod(eventually)
    in_thread = staticmethod(in_thread)
    seq = staticmethod(seq)


class NodeAgent:
    """Plays the instances' kubelets: a Node per InService instance, from its user data.

    The Node name is the instance ID, its providerID ``aws:///<zone>/<id>``, and the token in
    the instance's user data (DescribeInstanceAttribute userData) goes into a label so tests
    can tell which bootstrap data an instance booted with.
    """

    def __init__(self, env: AWSEnv) -> None:
        self.env = env
        self.registered: set[str] = set()

    async def sync(self) -> None:
        groups = (await in_thread(self.env.fake.asg.describe_auto_scaling_groups))[
            "AutoScalingGroups"
        ]
        for group in groups:
            for inst in group.get("Instances", []):
                if inst["LifecycleState"] != "InService" or inst["InstanceId"] in self.registered:
                    continue
                await self._register(inst["InstanceId"], inst["AvailabilityZone"])

    async def _register(self, instance: str, zone: str) -> None:
        attr = await in_thread(
            self.env.fake.ec2.describe_instance_attribute, InstanceId=instance, Attribute="userData"
        )
        user_data = base64.b64decode(attr.get("UserData", {}).get("Value", "")).decode()
        token = user_data.rsplit(" ", 1)[-1].strip() if "join token" in user_data else "none"
        node = {
            "metadata": {"name": instance, "labels": {"test/join-token": token}},
            "spec": {"providerID": f"aws:///{zone}/{instance}"},
        }
        with contextlib.suppress(Exception):
            await self.env.workload_client.create(NODES, node)
        self.registered.add(instance)

    async def run(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.sync()
            await asyncio.sleep(0.3)


class MachineDriver:
    """Plays core's MachinePool-Machine part where the test does not run core controllers.

    Creates a Machine per AWSMachine (same name, owned by the MachinePool, infrastructureRef to
    the AWSMachine, with core's finalizer). On Machine deletion it does what the core Machine
    controller does: cordon the Node, delete the AWSMachine and wait until it is gone, delete
    the Node, release the Machine. Each step is recorded with a sequence number.
    """

    def __init__(self, env: AWSEnv) -> None:
        self.env = env

    async def sync(self) -> None:
        for aws_machine in await self.env.aws_machines():
            await self._ensure_machine(aws_machine)
        for machine in (await self.env.client.list(MACHINES, self.env.namespace)).items:
            if machine["metadata"].get("deletionTimestamp"):
                await self._delete(machine)

    async def _ensure_machine(self, aws_machine: dict[str, Any]) -> None:
        meta = aws_machine["metadata"]
        if meta.get("deletionTimestamp"):
            return
        pool_name = meta["labels"][c.POOL_NAME_LABEL]
        mp = await self.env.client.get(MACHINE_POOLS, pool_name, self.env.namespace)
        machine = {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Machine",
            "metadata": {
                "name": meta["name"],
                "namespace": self.env.namespace,
                "labels": dict(meta["labels"]),
                "finalizers": [c.MACHINE_FINALIZER],
                "ownerReferences": [
                    {
                        "apiVersion": "cluster.x-k8s.io/v1beta2",
                        "kind": "MachinePool",
                        "name": pool_name,
                        "uid": mp["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "clusterName": self.env.cluster,
                "bootstrap": {"dataSecretName": ""},
                "infrastructureRef": {
                    "apiGroup": AWSMACHINES.group,
                    "kind": "AWSMachine",
                    "name": meta["name"],
                },
                "providerID": aws_machine["spec"]["providerID"],
            },
        }
        with contextlib.suppress(Exception):
            await self.env.client.create(MACHINES, machine, self.env.namespace)

    async def _delete(self, machine: dict[str, Any]) -> None:
        name = machine["metadata"]["name"]
        instance = str(machine["spec"]["providerID"]).rsplit("/", 1)[-1]
        wc = self.env.workload_client
        with contextlib.suppress(Exception):
            await wc.patch(NODES, instance, {"spec": {"unschedulable": True}})
            self.env.records.append((seq(), "cordon", instance))
        try:
            await self.env.client.get(AWSMACHINES, name, self.env.namespace)
        except Exception:
            with contextlib.suppress(Exception):
                await wc.delete(NODES, instance)
            self.env.records.append((seq(), "node-deleted", instance))
            await self.env.client.patch(
                MACHINES, name, {"metadata": {"finalizers": None}}, self.env.namespace
            )
            return
        with contextlib.suppress(Exception):
            await self.env.client.delete(AWSMACHINES, name, self.env.namespace)

    async def run(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.sync()
            await asyncio.sleep(0.3)


@pytest_asyncio.fixture(loop_scope="session")
async def aws_env(
    client: Client, crds: list[str], namespace: str, workload: WorkloadCluster, fake_aws: FakeAWS
) -> AsyncIterator[AWSEnv]:
    cluster = "c1"
    await register_workload_cluster(client, cluster, namespace, workload)
    async with await Client.from_kubeconfig_dict(workload.kubeconfig_dict()) as wc:
        env = AWSEnv(client, namespace, cluster, workload, fake_aws, wc)
        await env.set_bootstrap("t1")
        yield env
    await _clear_namespace(client, namespace)


async def _clear_namespace(client: Client, namespace: str) -> None:
    """Remove this test's Cluster API objects now, finalizers and all.

    The next test's controllers watch every namespace; a pool left to the (slow) namespace
    deletion would still look live to them and be rebuilt in the shared emulated AWS.
    """
    with contextlib.suppress(Exception):
        await client.delete(CLUSTERS, "c1", namespace)
    for resource in (MACHINE_POOLS, AWSMACHINEPOOLS, MACHINES, AWSMACHINES):
        with contextlib.suppress(Exception):
            for obj in (await client.list(resource, namespace)).items:
                name = obj["metadata"]["name"]
                with contextlib.suppress(Exception):
                    await client.patch(
                        resource, name, {"metadata": {"finalizers": None}}, namespace
                    )
                with contextlib.suppress(Exception):
                    await client.delete(resource, name, namespace)


@contextlib.asynccontextmanager
async def _running_provider(aws_env: AWSEnv, client: Client) -> AsyncIterator[Manager]:
    """The AWS provider on its own manager over ``client``, polling AWS fast, plus the node
    agent and Machine driver (which use ``aws_env.client``)."""
    mgr = Manager(client, bind_address="127.0.0.1:0")
    await aws_provider.setup(
        mgr,
        ClusterCache(client),
        aws_provider.AWSOptions(aws_poll_interval=1.0, aws_busy_poll_interval=0.3),
    )
    await mgr.start()
    tasks = [
        asyncio.create_task(NodeAgent(aws_env).run()),
        asyncio.create_task(MachineDriver(aws_env).run()),
    ]
    try:
        yield mgr
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if mgr.state is not ManagerState.NEW:
            await mgr.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def provider(aws_env: AWSEnv) -> AsyncIterator[Manager]:
    """The AWS provider on its own manager, polling AWS fast, plus node agent and Machine driver."""
    async with _running_provider(aws_env, aws_env.client) as mgr:
        yield mgr


@dataclass
class CountedProvider:
    """The provider on a client of its own, whose every request is in ``requests``."""

    manager: Manager
    requests: list[tuple[str, str, int]]
    """(verb, resource plural, HTTP status) of each request the provider's client sent."""


@pytest_asyncio.fixture(loop_scope="session")
async def counted_provider(
    aws_env: AWSEnv, control_plane: ControlPlane
) -> AsyncIterator[CountedProvider]:
    """``provider``, but on its own client, so its requests can be counted apart from those
    of the test and of the stand-ins for core and kubelet."""
    requests: list[tuple[str, str, int]] = []
    async with (
        await Client.from_kubeconfig(
            control_plane.kubeconfig,
            on_request=lambda verb, plural, status: requests.append((verb, plural, status)),
        ) as client,
        _running_provider(aws_env, client) as mgr,
    ):
        yield CountedProvider(mgr, requests)
