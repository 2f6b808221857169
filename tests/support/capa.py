"""Cluster API Provider AWS (CAPA) on a local management cluster, against moto, for the tests
that run CAPA's own AWSMachinePool under our core.

- ``build()``: ``bench/upstream/build.sh capa`` builds CAPA's manager from its module (once per
  version, into the cache); ``config()``: its ``config/`` folder, as ``hack/capa/crds.sh``
  fetches it (the one place CAPA's manifests come from).
- ``crds(webhook)`` / ``webhook_configurations(webhook)``: CAPA's CRDs and admission webhook
  configurations as its release installs them (its kustomization's common labels, conversion
  through its webhook server for the kinds its kustomization patches, ``capa-`` names),
  pointed at a local URL.
- ``CAPAProcess``: CAPA's manager, its feature gates as given, every AWS service it calls
  pointed at one endpoint (``--service-endpoints``), credentials from the environment.
- ``install(client, workdir)``: CAPA's CRDs and webhook configurations on the management
  cluster, as its release installs them; returns the webhook its manager serves.
- ``MotoServer``: moto in server mode, its own process on loopback (or ``moto_eks.py``, moto
  with the parts of EKS it lacks, for the AWSManagedMachinePool tests).
- ``NodeAgent``: the instances' kubelets and the cloud's node lifecycle controller.
- ``Network``: what an externally managed AWSCluster stands for (a VPC, a private subnet, the
  node and load-balancer security groups), made in moto; ``aws_cluster`` and
  ``provision_aws_cluster`` write the AWSCluster and the status its owner would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import boto3
import yaml
from tests.reliability.harness import ControllerProcess
from tests.support.builders import healthy_node_conditions
from tests.support.scripts import REPO

from machinepool.controlplane import upstream
from machinepool.controlplane.process import free_port
from machinepool.runtime import (
    CRDS,
    MUTATING_WEBHOOKS,
    NODES,
    VALIDATING_WEBHOOKS,
    Client,
    NotFound,
    Obj,
    PatchType,
    Resource,
    copy_obj,
    wait_established,
)

__all__ = [
    "AWS_CLUSTERS",
    "AWS_MACHINE_POOLS",
    "RELEASE_GATES",
    "CAPAProcess",
    "MotoServer",
    "Network",
    "NodeAgent",
    "aws_cluster",
    "build",
    "crds",
    "install",
    "provision_aws_cluster",
    "webhook_configurations",
]

GROUP = "infrastructure.cluster.x-k8s.io"
AWS_CLUSTERS = Resource(GROUP, "v1beta2", "awsclusters", "AWSCluster")
AWS_MACHINE_POOLS = Resource(GROUP, "v1beta2", "awsmachinepools", "AWSMachinePool")
REGION = "us-east-1"
ZONE = "us-east-1a"
NAME_PREFIX = "capa-"
"""What CAPA's config/default kustomization prefixes names with."""
MANAGED_BY = "cluster.x-k8s.io/managed-by"
"""Cluster API's annotation for infrastructure its provider leaves to someone else."""
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIACAPAMOTOTEST0000",
    "AWS_SECRET_ACCESS_KEY": "capaMotoTestSecretKey0000000000000000000",
    "AWS_REGION": REGION,
}
"""What moto accepts (any key); CAPA's default identity reads them from its environment."""
SERVICES = (
    "ec2",
    "Auto Scaling",
    "elasticloadbalancing",
    "sts",
    "s3",
    "ssm",
    "secretsmanager",
    "eks",
    "sqs",
    "events",
    "tagging",
)
"""Every service CAPA's --service-endpoints may name (v1 ids where CAPA maps them, the v2
ServiceID of Auto Scaling otherwise): all go to moto, so nothing reaches AWS."""

RELEASE_GATES = {
    "EKS": True,
    "EKSEnableIAM": False,
    "EKSAllowAddRoles": False,
    "EKSFargate": False,
    "MachinePool": False,
    "MachinePoolMachines": False,
    "EventBridgeInstanceState": False,
    "AutoControllerIdentityCreator": True,
    "BootstrapFormatIgnition": False,
    "ExternalResourceGC": True,
    "AlternativeGCStrategy": False,
    "TagUnmanagedNetworkResources": True,
    "ROSA": False,
}
"""The feature gates CAPA's release manifest (config/manager) starts it with, its variables
unset; ``EXP_MACHINE_POOL=true`` (clusterctl) turns ``MachinePool`` on."""

Doc = dict[str, Any]


def build() -> Path:
    """CAPA's manager binary."""
    return upstream.build("capa")


def config() -> Path:
    """CAPA's ``config/`` folder (CRDs, webhooks, kustomizations) from its Go module, through
    ``hack/capa/crds.sh``, which caches it once per version."""
    out = subprocess.run(
        ["bash", str(REPO / "hack/capa/crds.sh"), "--config"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def _documents(path: Path) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def crds(webhook: upstream.UpstreamWebhook) -> list[Obj]:
    """CAPA's CRDs from ``config/crd/bases``, labelled with its kustomization's
    ``commonLabels`` (its contract labels) and converting through ``webhook`` where its
    kustomization's ``webhook_in_*`` patches make them do so."""
    folder = config() / "crd"
    kustomization = _documents(folder / "kustomization.yaml")[0]
    labels = kustomization.get("commonLabels") or {}
    converted = set()
    for patch in kustomization.get("patchesStrategicMerge") or []:
        if Path(patch).name.startswith("webhook_in_"):
            converted |= {doc["metadata"]["name"] for doc in _documents(folder / patch)}
    out = []
    for path in sorted((folder / "bases").glob("*.yaml")):
        for crd in _documents(path):
            crd["metadata"].setdefault("labels", {}).update(labels)
            if crd["metadata"]["name"] in converted:
                crd["spec"]["conversion"] = webhook.conversion()
            out.append(crd)
    return out


def webhook_configurations(webhook: upstream.UpstreamWebhook) -> list[Obj]:
    """CAPA's Mutating- and ValidatingWebhookConfiguration, named and pointed as installed."""
    out = []
    for doc in _documents(config() / "webhook" / "manifests.yaml"):
        installed = copy_obj(doc)
        installed["metadata"] = {"name": NAME_PREFIX + doc["metadata"]["name"]}
        for entry in installed["webhooks"]:
            path = entry["clientConfig"]["service"]["path"]
            entry["clientConfig"] = webhook.client_config(path)
        out.append(installed)
    return out


@dataclass
class CAPAProcess(ControllerProcess):
    """CAPA's manager; ``gates`` over its release's feature gates, every AWS service at
    ``endpoint``."""

    binary: Path = Path()
    webhook: upstream.UpstreamWebhook | None = None
    endpoint: str = ""
    env: dict[str, str] = field(default_factory=lambda: dict(CREDENTIALS))
    gates: Mapping[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # CAPA v2.13.0 builds its Auto Scaling client without the resolver --service-endpoints
        # feeds (pkg/cloud/scope/clients.go NewASGClient; its EC2, ELB, S3 ... clients have
        # it), so Auto Scaling calls would go to AWS. The SDK's per-service endpoint variable,
        # read by the config CAPA loads, points that client at the same endpoint. Its IAM
        # client (NewIAMClient; the EKS controllers' role look-ups) is built the same way.
        self.env.setdefault("AWS_ENDPOINT_URL_AUTO_SCALING", self.endpoint)
        self.env.setdefault("AWS_ENDPOINT_URL_IAM", self.endpoint)

    def argv(self) -> list[str]:
        assert self.webhook is not None
        endpoints = ",".join(f"{service}={self.endpoint}" for service in SERVICES)
        merged = {**RELEASE_GATES, **self.gates}
        gates = ",".join(f"{k}={'true' if v else 'false'}" for k, v in merged.items())
        return [
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            f"--feature-gates={gates}",
            f"--service-endpoints={REGION}:{endpoints}",
            f"--diagnostics-address=127.0.0.1:{free_port()}",
            "--insecure-diagnostics",
            f"--health-addr=127.0.0.1:{self.port}",
            f"--webhook-port={self.webhook.port}",
            f"--webhook-cert-dir={self.webhook.cert_dir}",
            "--v=2",
            *self.extra_args,
        ]


async def install(client: Client, workdir: Path) -> upstream.UpstreamWebhook:
    """CAPA's CRDs (established) and webhook configurations, their webhook under ``workdir``."""
    hook = upstream.UpstreamWebhook.create(workdir / "capa")
    manifests = crds(hook)
    for crd in manifests:
        await client.apply(CRDS, crd, field_manager="capa-install", force=True)
    for crd in manifests:
        await wait_established(client, crd["metadata"]["name"])
    for config in webhook_configurations(hook):
        res = MUTATING_WEBHOOKS if config["kind"].startswith("Mutating") else VALIDATING_WEBHOOKS
        await client.apply(res, config, field_manager="capa-install", force=True)
    return hook


MOTO_ASG = Path(__file__).parent / "moto_asg.py"
"""moto's server with the Auto Scaling answers CAPA needs to change a launch template."""


@dataclass
class MotoServer:
    """``python -m moto.server`` on a loopback port, in its own process; with ``script``, that
    script (it takes moto's arguments) in its place, ``env`` added to its environment."""

    log: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    script: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        program = [str(self.script)] if self.script else ["-m", "moto.server"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, *program, "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
            )

    async def wait_ready(self) -> None:
        """Until moto answers on its port; fails if it exits."""
        assert self.proc is not None, "start() first"
        async with asyncio.timeout(60), aiohttp.ClientSession() as http:
            while True:
                assert self.proc.poll() is None, self.log.read_text()
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(f"{self.url}/moto-api/") as resp:
                        if resp.status == 200:
                            return
                await asyncio.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=15)

    def client(self, service: str) -> Any:
        """A boto3 client of ``service`` on this server."""
        return boto3.client(
            service,
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )


@dataclass(frozen=True)
class Network:
    """A VPC with one private subnet, the security groups CAPA's launch templates name (node
    and lb), a key pair, and an image to boot."""

    vpc: str
    subnet: str
    node_sg: str
    lb_sg: str
    ami: str
    key: str = "capa"

    @classmethod
    def create(cls, moto: MotoServer) -> Network:
        ec2 = moto.client("ec2")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        # The DHCP options an AWS account gives every VPC; moto leaves a VPC without any (its
        # DescribeVpcs says "default", an id DescribeDhcpOptions refuses), and CAPA's AWSMachine
        # reads them for the domain of an instance's private DNS name.
        options = ec2.create_dhcp_options(
            DhcpConfigurations=[
                {"Key": "domain-name", "Values": [f"{REGION}.compute.internal"]},
                {"Key": "domain-name-servers", "Values": ["AmazonProvidedDNS"]},
            ]
        )["DhcpOptions"]["DhcpOptionsId"]
        ec2.associate_dhcp_options(DhcpOptionsId=options, VpcId=vpc)
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/20", AvailabilityZone=ZONE)
        groups = [
            ec2.create_security_group(GroupName=name, Description=name, VpcId=vpc)["GroupId"]
            for name in ("work-node", "work-lb")
        ]
        ec2.create_key_pair(KeyName=cls.key)
        images = ec2.describe_images()["Images"]  # moto's built-in catalogue
        ami = next(i["ImageId"] for i in images if i.get("Platform") != "windows")
        return cls(vpc, subnet["Subnet"]["SubnetId"], groups[0], groups[1], ami)


def aws_cluster(namespace: str, name: str, network: Network, endpoint: Obj) -> Obj:
    """An AWSCluster its owner (not CAPA) manages: CAPA reads it, never reconciles it."""
    return {
        "apiVersion": AWS_CLUSTERS.api_version,
        "kind": "AWSCluster",
        "metadata": {"name": name, "namespace": namespace, "annotations": {MANAGED_BY: "test"}},
        "spec": {
            "region": REGION,
            "sshKeyName": network.key,
            "controlPlaneEndpoint": endpoint,
            "network": {
                "vpc": {"id": network.vpc},
                "subnets": [{"id": network.subnet, "availabilityZone": ZONE, "isPublic": False}],
            },
        },
    }


async def provision_aws_cluster(
    client: Client, namespace: str, name: str, network: Network
) -> None:
    """What the owner of an externally managed AWSCluster writes once its network exists."""
    status = {
        "status": {
            "ready": True,
            "networkStatus": {
                "securityGroups": {
                    "node": {"id": network.node_sg, "name": "work-node"},
                    "lb": {"id": network.lb_sg, "name": "work-lb"},
                }
            },
        }
    }
    await client.patch(
        AWS_CLUSTERS, name, status, namespace, subresource="status", patch_type=PatchType.MERGE
    )


class NodeAgent:
    """The instances' kubelets and the cloud's node lifecycle controller: a Ready Node named
    after each InService instance of Auto Scaling group ``group``, with its providerID; a
    Node whose instance left the group is deleted.

    ``versions`` (AMI ID -> kubelet version) is what a kubelet booted from each image reports
    (``v1.34.0`` for any other); ``on_departed`` is called with each instance it saw leave
    the group, as soon as it sees it gone."""

    def __init__(
        self,
        moto: MotoServer,
        workload: Client,
        group: str,
        versions: Mapping[str, str] | None = None,
        on_departed: Callable[[str], None] | None = None,
    ) -> None:
        self.moto, self.workload, self.group = moto, workload, group
        self.versions = dict(versions or {})
        self.on_departed = on_departed
        self._seen: set[str] = set()

    def instances(self) -> dict[str, str]:
        """Instance ID -> zone of the group's InService instances."""
        asg = self.moto.client("autoscaling")
        groups = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[self.group])
        return {
            i["InstanceId"]: i["AvailabilityZone"]
            for g in groups["AutoScalingGroups"]
            for i in g.get("Instances", [])
            if i["LifecycleState"] == "InService"
        }

    def _kubelet_version(self, instance: str) -> str:
        if not self.versions:
            return "v1.34.0"
        found = self.moto.client("ec2").describe_instances(InstanceIds=[instance])
        images = [i["ImageId"] for r in found["Reservations"] for i in r["Instances"]]
        return self.versions.get(images[0] if images else "", "v1.34.0")

    async def sync(self) -> None:
        instances = await asyncio.to_thread(self.instances)
        for instance in self._seen - set(instances):
            if self.on_departed is not None:
                self.on_departed(instance)
        self._seen = set(instances)
        nodes = {n["metadata"]["name"] for n in (await self.workload.list(NODES)).items}
        for instance, zone in instances.items():
            if instance in nodes:
                continue
            version = await asyncio.to_thread(self._kubelet_version, instance)
            node = {
                "metadata": {"name": instance},
                "spec": {"providerID": f"aws:///{zone}/{instance}"},
            }
            await self.workload.create(NODES, node)
            ready = {
                "status": {
                    "conditions": healthy_node_conditions(),
                    "nodeInfo": {"kubeletVersion": version},
                }
            }
            await self.workload.patch(
                NODES, instance, ready, subresource="status", patch_type=PatchType.MERGE
            )
        for name in nodes - set(instances):
            with contextlib.suppress(NotFound):
                await self.workload.delete(NODES, name)

    async def run(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # moto or the API briefly busy: next round
                await self.sync()
            await asyncio.sleep(0.5)
