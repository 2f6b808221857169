"""Fixtures for the kubeadm bootstrap controller against the real control plane.

``bootstrap_env`` builds a Cluster (ControlPlaneInitialized) and its ``<cluster>-kubeconfig``
Secret for the per-test ``workload`` cluster; ``run_controller(ttl)`` starts a Manager with the
controller in-process and stops it (and its ClusterCache) after the test. ``captured`` collects
every log line (as JSON, with key/value pairs) so tests can search them for secrets.
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import ssl
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

import aiohttp
import pytest
from tests.support import wait_for
from tests.support.builders import kubeadm_config, machine_pool
from tests.support.resources import CLUSTERS, KUBEADM_CONFIGS, MACHINE_POOLS

from machinepool.bootstrap.kubeadm import KubeadmOptions, setup
from machinepool.controlplane import WorkloadCluster
from machinepool.runtime import SECRETS, CacheScope, Client, ClusterCache, Manager, Obj
from machinepool.runtime.telemetry.logging import JSONFormatter

WITHIN = 60.0


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def unb64(text: str) -> str:
    return base64.b64decode(text).decode()


def data_created(obj: Obj | None) -> bool:
    return bool(
        ((obj or {}).get("status") or {}).get("initialization", {}).get("dataSecretCreated")
    )


async def whoami(workload: WorkloadCluster, token: str) -> tuple[int, str]:
    """(HTTP status, username) of a SelfSubjectReview made with ``token`` on the workload."""
    context = ssl.create_default_context(cadata=workload.ca_cert_pem.decode())
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{workload.url}/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            ssl=context,
        ) as resp,
    ):
        payload = await resp.json(content_type=None)
        status = payload.get("status") if isinstance(payload, dict) else None
        user = (status.get("userInfo") if isinstance(status, dict) else None) or {}
        return resp.status, str(user.get("username", ""))


@dataclass
class Env:
    client: Client
    workload: WorkloadCluster
    workload_client: Client
    namespace: str
    cluster: str

    async def create_cluster(
        self, name: str, *, infrastructure: bool = True, control_plane: bool = True
    ) -> None:
        """A Cluster whose infrastructure is provisioned and control plane initialized, as
        asked (the initialized control plane both ways: condition and initialization flag)."""
        body = {"apiVersion": CLUSTERS.api_version, "kind": "Cluster", "metadata": {"name": name}}
        await self.client.create(CLUSTERS, body, self.namespace)
        if not infrastructure:
            return
        status: Obj = {"initialization": {"infrastructureProvisioned": True}}
        if control_plane:
            status["initialization"]["controlPlaneInitialized"] = True
            status["conditions"] = [
                {
                    "type": "ControlPlaneInitialized",
                    "status": "True",
                    "reason": "Initialized",
                    "message": "",
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                }
            ]
        await self.client.patch(
            CLUSTERS, name, {"status": status}, self.namespace, subresource="status"
        )

    async def create_kubeconfig(self, cluster: str) -> None:
        secret = {
            "metadata": {"name": f"{cluster}-kubeconfig"},
            "type": "cluster.x-k8s.io/secret",
            "data": {"value": b64(self.workload.kubeconfig_yaml())},
        }
        await self.client.create(SECRETS, secret, self.namespace)

    async def create_pool(self, name: str, config: str, *, version: str | None = None) -> Obj:
        """A MachinePool ``name`` whose bootstrap is the KubeadmConfig ``config`` (``version``
        unset unless given: most bootstrap tests have no use for one)."""
        pool = machine_pool(
            self.namespace, name, cluster=self.cluster, version=version, bootstrap=config
        )
        return await self.client.create(MACHINE_POOLS, pool, self.namespace)

    async def create_config(
        self, name: str, spec: Obj, *, pool: Obj | None = None, cluster: str | None = None
    ) -> Obj:
        labels = {"cluster.x-k8s.io/cluster-name": cluster or self.cluster}
        body = kubeadm_config(self.namespace, name, labels=labels, spec=spec)
        if pool is not None:
            body["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": MACHINE_POOLS.api_version,
                    "kind": MACHINE_POOLS.kind,
                    "name": pool["metadata"]["name"],
                    "uid": pool["metadata"]["uid"],
                    "controller": True,
                }
            ]
        return await self.client.create(KUBEADM_CONFIGS, body, self.namespace)

    async def wait_config(
        self, name: str, predicate: Callable[[Obj | None], bool], within: float = WITHIN
    ) -> Obj | None:
        return await wait_for(
            self.client, KUBEADM_CONFIGS, self.namespace, name, predicate, within=within
        )


@pytest.fixture
async def bootstrap_env(
    client: Client, crds: list[str], namespace: str, workload: WorkloadCluster
) -> AsyncIterator[Env]:
    async with await Client.from_kubeconfig(workload.kubeconfig) as workload_client:
        env = Env(client, workload, workload_client, namespace, f"c-{uuid.uuid4().hex[:6]}")
        await env.create_cluster(env.cluster)
        await env.create_kubeconfig(env.cluster)
        yield env


@pytest.fixture
async def run_controller(
    client: Client,
) -> AsyncIterator[Callable[..., Awaitable[Manager]]]:
    started: list[tuple[Manager, ClusterCache]] = []

    async def start(ttl: int = 900, scope: CacheScope | None = None) -> Manager:
        cache = ClusterCache(client, probe_interval=5.0)
        mgr = Manager(client, leader_election=None, bind_address="127.0.0.1:0", scope=scope)
        started.append((mgr, cache))
        await setup(mgr, cache, KubeadmOptions(token_ttl_seconds=ttl))
        await mgr.start()
        return mgr

    yield start
    for mgr, cache in started:
        await mgr.stop()
        await cache.stop()


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """Every log record at DEBUG and above, formatted as JSON lines with their pairs."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


async def rejected_eventually(workload: WorkloadCluster, token: str, within: float = WITHIN) -> int:
    """Poll until ``token`` gets 401: the apiserver caches successful token authentications
    (10 s by default) and reads token Secrets through an informer, so a deleted token keeps
    working briefly."""
    async with asyncio.timeout(within):
        while (status := (await whoami(workload, token))[0]) != 401:  # noqa: ASYNC110
            await asyncio.sleep(0.5)
    return status
