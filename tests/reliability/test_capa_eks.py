"""CAPA's AWSManagedMachinePool (an EKS managed node group) under our core, beside upstream
Cluster API, against moto's EKS.

One management cluster as the operator guide's beside-upstream install leaves it: upstream's
core CRDs, webhooks and core manager (its MachinePool gate off), our core with
``--beside-upstream``, and Cluster API Provider AWS's CRDs, webhooks and manager (built from
its module by ``bench/upstream/build.sh capa``; its EKS and MachinePool gates on, every AWS
service it calls pointed at moto). The Cluster's control plane is CAPA's
AWSManagedControlPlane, its infrastructure CAPA's AWSManagedCluster, in a VPC the test makes
(two subnets in two zones, as EKS asks). The pool has no bootstrap config
(``bootstrap.dataSecretName: ""``, as CAPA's EKS docs write it): EKS boots its nodes.

Where moto 5.2.1 does not play EKS, the test plays it (each stand-in below is what AWS does):

- The cluster's Kubernetes API. moto gives each EKS cluster a made-up endpoint and CA with
  nothing behind them; CAPA writes them into the ``work-kubeconfig`` Secret and then talks to
  the cluster (it reads the ``aws-node`` DaemonSet, writes ``aws-auth`` when it has node roles
  to map, which a managed node group is not), and both cores watch its Nodes. Here moto
  runs from ``tests/support/moto_eks.py``, whose clusters get the endpoint and CA of a
  workload kube-apiserver the test starts.
- aws-iam-authenticator: CAPA's kubeconfig carries an STS presigned GetCallerIdentity URL as
  a ``k8s-aws-v1.`` token. The workload apiserver's token webhook (``TokenWebhook``) does what
  EKS's authenticator does with it: calls that URL (at moto's STS), and maps the caller it
  names to the cluster creator's admin user (``system:masters``). It does not check the
  URL's signature or age (moto signs nothing).
- What EKS installs in every cluster: the ``aws-node`` DaemonSet (CAPA fails its CNI step
  without it); here an object only, no Pod runs.
- The cluster security group (tagged ``aws:eks:cluster-name``) and ``ListAddons`` (moto has
  none; a cluster with no add-ons answers an empty list): ``moto_eks.py``.
- EKS's node group engine: moto names an Auto Scaling group per node group and makes none;
  ``moto_eks.py`` makes it, resizes it on ``UpdateNodegroupConfig`` and deletes it with the
  node group, so moto's Auto Scaling runs its instances (CAPA's providerIDList is built from
  them).
- The kubelets: ``capa.NodeAgent`` makes a Ready Node per InService instance of that group.
- The IAM roles CAPA expects with its IAM gates off (``clusterawsadm bootstrap iam`` makes
  them): ``eks-controlplane`` and ``eks-nodegroup.cluster-api-provider-aws.sigs.k8s.io``.

- ``test_eks_node_group_create_scale_delete``: the control plane Ready, its kubeconfig at
  the workload cluster with a ``k8s-aws-v1.`` token, CAPA through it (its
  IAMAuthenticatorConfigured condition); a pool created at 2 is Running with two
  providerIDs, each a Node's and an instance of the node group's Auto Scaling group; CAPA
  writes the kubeconfig anew (a fresh token, as on every control-plane reconcile); scaled
  to 3; deleted, and the node group and its group with it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
import pytest_asyncio
import yaml
from aiohttp import web
from tests.reliability.harness import ControllerProcess
from tests.support import capa, eventually
from tests.support.builders import CLUSTER
from tests.support.resources import CLUSTERS, MACHINE_POOLS
from tests.support.upstream import UpstreamProcess, upstream_management

from machinepool.api.meta import dig
from machinepool.controlplane import WorkloadCluster
from machinepool.controlplane.process import free_port
from machinepool.runtime import (
    MUTATING_WEBHOOKS,
    NAMESPACES,
    NODES,
    SECRETS,
    Client,
    NotFound,
    Obj,
    Resource,
)

pytestmark = [pytest.mark.timeout(600), pytest.mark.capa]

NAMESPACE, POOL, CONTROL_PLANE = "eks", "pool", "work-control-plane"
CP_GROUP = "controlplane.cluster.x-k8s.io"
CONTROL_PLANES = Resource(CP_GROUP, "v1beta2", "awsmanagedcontrolplanes", "AWSManagedControlPlane")
MANAGED_CLUSTERS = Resource(capa.GROUP, "v1beta2", "awsmanagedclusters", "AWSManagedCluster")
MANAGED_POOLS = Resource(capa.GROUP, "v1beta2", "awsmanagedmachinepools", "AWSManagedMachinePool")
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet")
ROLES = (
    "eks-controlplane.cluster-api-provider-aws.sigs.k8s.io",
    "eks-nodegroup.cluster-api-provider-aws.sigs.k8s.io",
)
"""The roles CAPA uses with EKSEnableIAM off; ``clusterawsadm bootstrap iam`` makes them."""
LAUNCHER = Path(__file__).parents[1] / "support" / "moto_eks.py"
TOKEN_PREFIX = "k8s-aws-v1."
WAIT = 150.0
"""Upper bound of one step; CAPA reconciles on watch events and moto answers at once."""


class TokenWebhook:
    """The workload apiserver's token authentication webhook, as aws-iam-authenticator is in
    EKS: a ``k8s-aws-v1.`` token is a base64url STS GetCallerIdentity URL; the caller STS
    names is the cluster creator, an admin."""

    def __init__(self, sts: str) -> None:
        self.sts, self.port = sts, free_port()
        self.runner: web.AppRunner | None = None

    def config(self, path: Path) -> Path:
        """The kubeconfig-format file ``--authentication-token-webhook-config-file`` reads."""
        url = f"http://127.0.0.1:{self.port}/authenticate"
        context = {"cluster": "authenticator", "user": "apiserver"}
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "authenticator", "cluster": {"server": url}}],
                    "users": [{"name": "apiserver", "user": {}}],
                    "contexts": [{"name": "webhook", "context": context}],
                    "current-context": "webhook",
                }
            )
        )
        return path

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/authenticate", self._review)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def _caller(self, token: str) -> str | None:
        if not token.startswith(TOKEN_PREFIX):
            return None
        encoded = token.removeprefix(TOKEN_PREFIX)
        url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        if not url.startswith(self.sts + "/") or "Action=GetCallerIdentity" not in url:
            return None
        # moto serves every service on one port and tells them apart by a request's
        # Authorization header; a presigned URL carries the same credential scope in its query.
        query = parse_qs(urlsplit(url).query)
        scope, signature = query["X-Amz-Credential"][0], query["X-Amz-Signature"][0]
        auth = f"AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders=host, Signature={signature}"
        headers = {"Authorization": auth}
        async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as resp:
            found = re.search(r"<Arn>([^<]+)</Arn>", await resp.text())
            return found.group(1) if resp.status == 200 and found else None

    async def _review(self, request: web.Request) -> web.Response:
        review = await request.json()
        arn = await self._caller(review["spec"].get("token", ""))
        status: dict[str, Any] = {"authenticated": False}
        if arn is not None:
            user = {"username": arn, "uid": arn, "groups": ["system:masters"]}
            status = {"authenticated": True, "user": user}
        return web.json_response({**review, "status": status})


@dataclass
class Env:
    client: Client
    workload: WorkloadCluster
    moto: capa.MotoServer
    vpc: str
    subnets: list[str]
    procs: dict[str, ControllerProcess] = field(default_factory=dict)

    def logs(self) -> str:
        return "\n".join(f"--- {name}:\n{p.tail(25)}" for name, p in self.procs.items())


def _network(moto: capa.MotoServer) -> tuple[str, list[str]]:
    """A VPC with a subnet in each of two zones, and the IAM roles CAPA expects."""
    ec2 = moto.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]["SubnetId"]
        for cidr, zone in (("10.0.0.0/20", "us-east-1a"), ("10.0.16.0/20", "us-east-1b"))
    ]
    iam = moto.client("iam")
    for role in ROLES:
        iam.create_role(RoleName=role, AssumeRolePolicyDocument="{}")
    return vpc, subnets


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    """The management cluster: our core beside upstream's (its MachinePool gate off), CAPA,
    moto with EKS's missing parts, and the EKS cluster's workload apiserver."""
    workdir = tmp_path_factory.mktemp("capa-eks")
    binary = await asyncio.to_thread(capa.build)
    async with upstream_management(workdir, our_groups=()) as (cp, client, core, hook):
        capa_hook = await capa.install(client, workdir)
        moto = capa.MotoServer(workdir / "moto.log", script=LAUNCHER)
        authenticator = TokenWebhook(moto.url)
        await authenticator.start()
        e = None
        try:
            webhook_config = authenticator.config(workdir / "authn.yaml")
            flags = (
                f"--authentication-token-webhook-config-file={webhook_config}",
                "--authentication-token-webhook-version=v1",
            )
            workload = await asyncio.to_thread(cp.start_workload, CLUSTER, apiserver_args=flags)
            moto.env = {
                "MOTO_EKS_ENDPOINT": workload.url,
                "MOTO_EKS_CA": base64.b64encode(workload.ca_cert_pem).decode(),
            }
            moto.start()
            await moto.wait_ready()
            vpc, subnets = await asyncio.to_thread(_network, moto)
            e = Env(client, workload, moto, vpc, subnets)
            common: dict[str, Any] = {"kubeconfig": cp.kubeconfig, "components": ""}
            e.procs["upstream"] = UpstreamProcess(
                name="upstream",
                log=workdir / "upstream.log",
                binary=core,
                webhook=hook,
                machine_pool=False,
                **common,
            )
            e.procs["capa"] = capa.CAPAProcess(
                name="capa",
                log=workdir / "capa.log",
                binary=binary,
                webhook=capa_hook,
                endpoint=moto.url,
                gates={"MachinePool": True},
                # With an AWSManagedCluster as the Cluster's infrastructure, no watch wakes the
                # AWSManagedControlPlane once the Cluster's infrastructure is provisioned (its
                # Cluster watch maps to infrastructureRefs of its own kind only): it waits this.
                # CAPA reads the node group's instances at the start of a reconcile, before it
                # resizes the node group, and nothing requeues it after: a scale's new
                # providerIDs wait for the next event or its sync period (10 minutes).
                extra_args=("--wait-infra-period=5s", "--sync-period=30s"),
                **common,
            )
            e.procs["core"] = ControllerProcess(
                name="core",
                kubeconfig=cp.kubeconfig,
                components="core",
                log=workdir / "core.log",
                lease_name="machinepool-core",
                webhook_port=free_port(),
                extra_args=("--beside-upstream", "--register-webhooks"),
            )
            for proc in e.procs.values():
                proc.start()
            for proc in e.procs.values():
                await proc.wait_ready(timeout=240)
            await eventually(lambda: _our_pool_admission(client), within=180)
            yield e
        finally:
            for proc in e.procs.values() if e else ():
                proc.stop()
            moto.stop()
            await authenticator.stop()


async def _our_pool_admission(client: Client) -> bool:
    """Whether upstream's mutating webhook configuration left its MachinePool entries to us."""
    hooks = (await client.get(MUTATING_WEBHOOKS, "capi-mutating-webhook-configuration"))["webhooks"]
    return not any("machinepool" in h["name"] for h in hooks)


def _objects(e: Env) -> list[tuple[Resource, Obj]]:
    """The Cluster, its AWSManagedControlPlane and AWSManagedCluster, as CAPA's EKS docs write
    them with a VPC brought along (``spec.network``)."""
    meta = {"namespace": NAMESPACE}
    control_plane = {
        "apiVersion": CONTROL_PLANES.api_version,
        "kind": "AWSManagedControlPlane",
        "metadata": {"name": CONTROL_PLANE, **meta},
        "spec": {
            "region": capa.REGION,
            "version": "v1.34",
            "network": {"vpc": {"id": e.vpc}, "subnets": [{"id": s} for s in e.subnets]},
        },
    }
    managed = {
        "apiVersion": MANAGED_CLUSTERS.api_version,
        "kind": "AWSManagedCluster",
        "metadata": {"name": CLUSTER, **meta},
        "spec": {},
    }
    cluster = {
        "apiVersion": CLUSTERS.api_version,
        "kind": "Cluster",
        "metadata": {"name": CLUSTER, **meta},
        "spec": {
            "infrastructureRef": {
                "apiGroup": capa.GROUP,
                "kind": "AWSManagedCluster",
                "name": CLUSTER,
            },
            "controlPlaneRef": {
                "apiGroup": CP_GROUP,
                "kind": "AWSManagedControlPlane",
                "name": CONTROL_PLANE,
            },
        },
    }
    return [(CONTROL_PLANES, control_plane), (MANAGED_CLUSTERS, managed), (CLUSTERS, cluster)]


def _pool_objects() -> list[tuple[Resource, Obj]]:
    """An AWSManagedMachinePool and its MachinePool, no bootstrap config."""
    managed = {
        "apiVersion": MANAGED_POOLS.api_version,
        "kind": "AWSManagedMachinePool",
        "metadata": {"name": POOL, "namespace": NAMESPACE},
        "spec": {"scaling": {"minSize": 0, "maxSize": 5}, "instanceType": "t3.medium"},
    }
    pool = {
        "apiVersion": MACHINE_POOLS.api_version,
        "kind": "MachinePool",
        "metadata": {"name": POOL, "namespace": NAMESPACE},
        "spec": {
            "clusterName": CLUSTER,
            "replicas": 2,
            "template": {
                "spec": {
                    "clusterName": CLUSTER,
                    "bootstrap": {"dataSecretName": ""},
                    "infrastructureRef": {
                        "apiGroup": capa.GROUP,
                        "kind": "AWSManagedMachinePool",
                        "name": POOL,
                    },
                }
            },
        },
    }
    return [(MANAGED_POOLS, managed), (MACHINE_POOLS, pool)]


def _aws_node() -> Obj:
    """The VPC CNI DaemonSet EKS installs in every cluster (an object here; no Pod runs)."""
    labels = {"k8s-app": "aws-node"}
    return {
        "metadata": {"name": "aws-node", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "aws-node", "image": "amazon-k8s-cni"}]},
            },
        },
    }


def _running(mp: Obj, replicas: int) -> bool:
    """Running with ``replicas`` ready, each a providerID, and its bootstrap data counted as
    there: the user's ``dataSecretName`` stands for data EKS brings."""
    status = mp.get("status") or {}
    return (
        status.get("phase") == "Running"
        and dig(mp, "status", "initialization", "bootstrapDataSecretCreated") is True
        and status.get("replicas", 0) == replicas
        and status.get("readyReplicas", 0) == replicas
        and len(dig(mp, "spec", "providerIDList", default=[]) or []) == replicas
    )


async def test_eks_node_group_create_scale_delete(env: Env) -> None:
    client, ns = env.client, NAMESPACE
    eks = env.moto.client("eks")
    async with await Client.from_kubeconfig(env.workload.kubeconfig) as workload:
        await workload.create(DAEMONSETS, _aws_node(), "kube-system")
        await client.create(NAMESPACES, {"metadata": {"name": ns}})
        for res, obj in _objects(env):
            await client.create(res, obj, ns)

        async def control_plane_ready() -> Obj | None:
            cp = await client.get(CONTROL_PLANES, CONTROL_PLANE, ns)
            cluster = await client.get(CLUSTERS, CLUSTER, ns)
            initialized = dig(cluster, "status", "initialization", "controlPlaneInitialized")
            configured = any(
                c["type"] == "IAMAuthenticatorConfigured" and c["status"] == "True"
                for c in dig(cp, "status", "conditions", default=[]) or []
            )  # set once CAPA reached the cluster through its kubeconfig
            return cp if dig(cp, "status", "ready") and initialized and configured else None

        try:
            cp = await eventually(control_plane_ready, "EKS control plane Ready", within=WAIT)
        except TimeoutError as err:
            state = await client.get(CONTROL_PLANES, CONTROL_PLANE, ns)
            raise AssertionError(f"{err}; {state.get('status')}\n{env.logs()}") from None
        secret = await client.get(SECRETS, f"{CLUSTER}-kubeconfig", ns)
        kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["value"]))
        assert kubeconfig["clusters"][0]["cluster"]["server"] == env.workload.url
        assert kubeconfig["users"][0]["user"]["token"].startswith(TOKEN_PREFIX)
        conditions = {c["type"]: c["status"] for c in cp["status"].get("conditions", [])}
        for condition in ("EKSControlPlaneReady", "IAMAuthenticatorConfigured"):
            assert conditions.get(condition) == "True", (condition, cp["status"])
        eks_cluster = cp["spec"]["eksClusterName"]

        for res, obj in _pool_objects():
            await client.create(res, obj, ns)

        async def node_group() -> str | None:
            managed = await client.get(MANAGED_POOLS, POOL, ns)
            name = dig(managed, "spec", "eksNodegroupName")
            if not name:
                return None
            with contextlib.suppress(eks.exceptions.ResourceNotFoundException):
                ng = await asyncio.to_thread(
                    eks.describe_nodegroup, clusterName=eks_cluster, nodegroupName=name
                )
                return str(ng["nodegroup"]["resources"]["autoScalingGroups"][0]["name"])
            return None

        group = await eventually(node_group, "the EKS node group", within=WAIT)
        agent = capa.NodeAgent(env.moto, workload, group)
        task = asyncio.create_task(agent.run())
        try:
            for replicas in (2, 3):
                await client.patch(MACHINE_POOLS, POOL, {"spec": {"replicas": replicas}}, ns)

                async def running(r: int = replicas) -> Obj | None:
                    mp = await client.get(MACHINE_POOLS, POOL, ns)
                    return mp if _running(mp, r) else None

                try:
                    mp = await eventually(running, f"pool Running at {replicas}", within=WAIT)
                except TimeoutError as err:
                    state = await client.get(MACHINE_POOLS, POOL, ns)
                    managed = await client.get(MANAGED_POOLS, POOL, ns)
                    names = [n["metadata"]["name"] for n in (await workload.list(NODES)).items]
                    raise AssertionError(
                        f"{err}; {state.get('spec')} {state.get('status')}; AWSManagedMachinePool"
                        f" {managed.get('spec')} {managed.get('status')}; Nodes {names}"
                        f"\n{env.logs()}"
                    ) from None
                ids = set(mp["spec"]["providerIDList"])
                nodes = {n["spec"]["providerID"] for n in (await workload.list(NODES)).items}
                assert ids == nodes, "each providerID is a Node's, and each Node in the pool"
                instances = await asyncio.to_thread(agent.instances)
                assert {f"aws:///{z}/{i}" for i, z in instances.items()} == ids
                if replicas == 2:
                    await _renew_token(client)

            await client.delete(MACHINE_POOLS, POOL, ns)

            async def gone() -> bool:
                if await _get(client, MACHINE_POOLS, POOL, ns) is not None:
                    return False
                listed = await asyncio.to_thread(eks.list_nodegroups, clusterName=eks_cluster)
                return not listed["nodegroups"] and not await asyncio.to_thread(agent.instances)

            await eventually(gone, "pool deleted with its node group", within=WAIT)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _renew_token(client: Client) -> None:
    """Make CAPA reconcile the control plane, which writes the kubeconfig Secret anew with a
    fresh token (it does so on every reconcile: EKS tokens last 15 minutes), so the core
    reconnects to the workload cluster. A token is presigned to the second: a reconcile in
    the second of the last one writes the same token, so touch again until it changes."""
    name = f"{CLUSTER}-kubeconfig"
    before = (await client.get(SECRETS, name, NAMESPACE))["data"]["value"]
    touches = itertools.count()

    async def renewed() -> bool:
        if (await client.get(SECRETS, name, NAMESPACE))["data"]["value"] != before:
            return True
        touch = {"metadata": {"annotations": {"test.machinepool.io/touched": str(next(touches))}}}
        await client.patch(CONTROL_PLANES, CONTROL_PLANE, touch, NAMESPACE)
        return False

    await eventually(renewed, "the kubeconfig Secret with a new token", within=WAIT, interval=2)


async def _get(client: Client, res: Resource, name: str, ns: str) -> Obj | None:
    with contextlib.suppress(NotFound):
        return await client.get(res, name, ns)
    return None
