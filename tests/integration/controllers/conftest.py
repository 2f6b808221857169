"""Fixtures for the core controller scenarios: a fake infrastructure provider (test CRDs the
tests write by hand), a running manager with both core controllers, and object builders.

Nothing is mocked: objects live in the real management apiserver, Nodes and Pods in a real
workload apiserver. Waiting is event-driven (``Watch.until``), never a fixed sleep; "nothing
happens" is checked over a window of watched events (``Env.unchanged``, from ``Changes``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio
import yaml
from tests.support import Changes
from tests.support.builders import machine_pool
from tests.support.resources import (
    CLUSTER_ROLES,
    CLUSTERS,
    KUBEADM_CONFIGS,
    MACHINE_POOLS,
    MACHINES,
)

from machinepool.api import constants as c
from machinepool.controllers import machine as machine_controller
from machinepool.controllers import machinepool as machinepool_controller
from machinepool.controllers.machine import MachineReconciler
from machinepool.controllers.machinepool import MachinePoolReconciler
from machinepool.controlplane import WorkloadCluster
from machinepool.controlplane.register import (
    control_plane_endpoint,
    control_plane_ref,
    register_local_control_plane,
    schemaless_crd,
)
from machinepool.runtime import (
    CRDS,
    NODES,
    SECRETS,
    Client,
    ClusterCache,
    FuncHandler,
    Informer,
    Manager,
    Obj,
    Resource,
)

INFRA_GROUP = "infrastructure.test.machinepool.dev"
INFRA_VERSION = "v1alpha1"
TEST_POOLS = Resource(INFRA_GROUP, INFRA_VERSION, "testmachinepools", "TestMachinePool")
TEST_MACHINES = Resource(INFRA_GROUP, INFRA_VERSION, "testmachines", "TestMachine")
TEST_CONTROL_PLANES = Resource(
    "controlplane.test.machinepool.dev", INFRA_VERSION, "testcontrolplanes", "TestControlPlane"
)
WAIT = 60.0


def _core_access() -> Obj:
    """What a provider ships beside its CRDs: the role the core manager's aggregated role folds
    in, so a core running as its ServiceAccount may read these kinds. Without it a core started
    later in the session (the deploy test) meets this test's leftover pools and is refused."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": "machinepool-test-provider-core-access",
            "labels": {"cluster.x-k8s.io/aggregate-to-manager": "true"},
        },
        "rules": [
            {
                "apiGroups": [INFRA_GROUP],
                "resources": [TEST_POOLS.plural, TEST_MACHINES.plural],
                "verbs": ["get", "list", "watch", "patch", "update", "delete"],
            }
        ],
    }


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def infra_crds(client: Client, crds: list[str]) -> None:
    for res in (TEST_POOLS, TEST_MACHINES, TEST_CONTROL_PLANES):
        await client.apply(CRDS, schemaless_crd(res), field_manager="machinepool-tests")
    await client.apply(CLUSTER_ROLES, _core_access(), field_manager="machinepool-tests")
    for res in (TEST_POOLS, TEST_MACHINES, TEST_CONTROL_PLANES):
        for _ in range(300):
            try:
                await client.list(res, "default")
                break
            except Exception:
                await asyncio.sleep(0.1)


class Watch:
    """An informer the test waits on: ``await w.until(name, predicate)`` returns as soon as
    an event shows the object satisfying ``predicate`` (``None`` object: it is gone)."""

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self._changed = asyncio.Condition()
        informer.add_handler(
            FuncHandler(add=self._kick, update=lambda _o, n: self._kick(n), delete=self._kick)
        )

    def _kick(self, _obj: Obj) -> None:
        async def notify() -> None:
            async with self._changed:
                self._changed.notify_all()

        asyncio.get_running_loop().create_task(notify())

    def get(self, name: str) -> Obj | None:
        obj = self.informer.get(name, self.informer.namespace or "")
        return copy.deepcopy(obj) if obj is not None else None

    async def until(
        self, name: str, predicate: Callable[[Obj | None], bool], within: float = WAIT
    ) -> Obj | None:
        async with asyncio.timeout(within), self._changed:
            while True:
                obj = self.get(name)
                try:
                    if predicate(obj):
                        return obj
                except (KeyError, TypeError, IndexError, AttributeError):
                    pass
                await self._changed.wait()


@dataclass
class Env(Changes):
    """A management namespace with a Cluster wired to a workload cluster, and running core
    controllers. Its ``Changes`` windows follow the pools, Machines and Nodes watched."""

    client: Client
    namespace: str
    workload: WorkloadCluster
    wclient: Client
    mgr: Manager
    cluster_cache: ClusterCache
    cluster_name: str
    pools: Watch
    machines: Watch
    nodes: Watch
    writes: list[tuple[str, str]] = field(default_factory=list)
    reconciler: MachinePoolReconciler | None = None
    """The MachinePool controller's reconciler, for tests that run a reconcile themselves."""
    machine_reconciler: MachineReconciler | None = None
    """The Machine controller's, likewise."""

    # -- builders ------------------------------------------------------------------------

    async def kubeadm_config(self, name: str, *, ready: bool = False) -> Obj:
        obj = await self.client.create(
            KUBEADM_CONFIGS,
            {
                "apiVersion": KUBEADM_CONFIGS.api_version,
                "kind": "KubeadmConfig",
                "metadata": {"name": name},
                "spec": {},
            },
            self.namespace,
        )
        if ready:
            obj = await self.bootstrap_ready(name, f"{name}-data")
        return obj

    async def bootstrap_ready(self, name: str, secret: str) -> Obj:
        return await self.client.patch(
            KUBEADM_CONFIGS,
            name,
            {"status": {"initialization": {"dataSecretCreated": True}, "dataSecretName": secret}},
            self.namespace,
            subresource="status",
        )

    async def infra_pool(self, name: str, **status: Any) -> Obj:
        obj = await self.client.create(
            TEST_POOLS,
            {
                "apiVersion": TEST_POOLS.api_version,
                "kind": "TestMachinePool",
                "metadata": {"name": name},
                "spec": {},
            },
            self.namespace,
        )
        if status:
            obj = await self.infra_status(name, **status)
        return obj

    async def infra_status(self, name: str, **status: Any) -> Obj:
        return await self.client.patch(
            TEST_POOLS, name, {"status": status}, self.namespace, subresource="status"
        )

    async def infra_provider_ids(self, name: str, ids: list[str]) -> Obj:
        return await self.client.patch(
            TEST_POOLS, name, {"spec": {"providerIDList": ids}}, self.namespace
        )

    async def infra_machine(
        self, name: str, pool: str, provider_id: str, *, provisioned: bool = False
    ) -> Obj:
        """A TestMachine of MachinePool ``pool`` (its labels), as a provider creates one."""
        obj = await self.client.create(
            TEST_MACHINES,
            {
                "apiVersion": TEST_MACHINES.api_version,
                "kind": "TestMachine",
                "metadata": {
                    "name": name,
                    "labels": {
                        c.CLUSTER_NAME_LABEL: self.cluster_name,
                        c.POOL_NAME_LABEL: c.pool_name_label_value(pool),
                    },
                },
                "spec": {"providerID": provider_id},
            },
            self.namespace,
        )
        if provisioned:
            obj = await self.client.patch(
                TEST_MACHINES,
                name,
                {"status": {"initialization": {"provisioned": True}}},
                self.namespace,
                subresource="status",
            )
        return obj

    async def machine_pool(
        self,
        name: str,
        *,
        replicas: int = 1,
        infra: str | None = None,
        bootstrap: str | None = None,
        data_secret: str | None = None,
        cluster: str | None = None,
        template: Obj | None = None,
        annotations: Obj | None = None,
    ) -> Obj:
        boot: Obj = {}
        if bootstrap is not None:
            boot["configRef"] = {
                "apiGroup": KUBEADM_CONFIGS.group,
                "kind": "KubeadmConfig",
                "name": bootstrap,
            }
        if data_secret is not None:
            boot["dataSecretName"] = data_secret
        body = machine_pool(
            self.namespace,
            name,
            replicas=replicas,
            cluster=cluster or self.cluster_name,
            version="v1.31.0",
            annotations=annotations or {},
            infrastructure=infra,
            infrastructure_group=INFRA_GROUP,
            infrastructure_kind=TEST_POOLS.kind,
            template={"bootstrap": boot, **(template or {})},
        )
        return await self.client.create(MACHINE_POOLS, body, self.namespace)

    async def node(
        self,
        name: str,
        provider_id: str,
        *,
        ready: bool = True,
        taints: list[Obj] | None = None,
        annotations: Obj | None = None,
        kubelet: str = "v1.31.0",
    ) -> Obj:
        await self.wclient.create(
            NODES,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "annotations": annotations or {}},
                "spec": {"providerID": provider_id, "taints": taints or []},
            },
        )
        return await self.node_ready(name, ready, kubelet=kubelet)

    async def node_ready(self, name: str, ready: bool, *, kubelet: str = "v1.31.0") -> Obj:
        status = {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "test",
                    "lastHeartbeatTime": _now(),
                    "lastTransitionTime": _now(),
                }
            ],
            "nodeInfo": {
                "kubeletVersion": kubelet,
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "",
                "containerRuntimeVersion": "",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
        return await self.wclient.patch(NODES, name, {"status": status}, subresource="status")

    async def pool_until(self, name: str, predicate: Callable[[Obj], bool]) -> Obj:
        found = await self.pools.until(name, lambda o: o is not None and predicate(o))
        assert found is not None
        return found


def _now() -> str:
    from machinepool.api.conditions import now_rfc3339

    return now_rfc3339()


@pytest_asyncio.fixture(loop_scope="session")
async def env(
    client: Client,
    namespace: str,
    workload: WorkloadCluster,
    infra_crds: None,
    pool_node_taints: bool,
) -> AsyncIterator[Env]:
    cluster_name = f"c-{uuid.uuid4().hex[:6]}"
    secret = {
        "metadata": {"name": f"{cluster_name}-kubeconfig"},
        "data": {"value": base64.b64encode(workload.kubeconfig_yaml().encode()).decode()},
        "type": "cluster.x-k8s.io/secret",
    }
    await client.create(SECRETS, secret, namespace)
    # Its control plane is the environment's own, externally managed: Cluster API drains and
    # deletes a deleted Machine's Node only in a Cluster with such a control plane or with a
    # control-plane Machine (test_node_left_alone_without_a_control_plane tries the others).
    cluster = await client.create(
        CLUSTERS,
        {
            "apiVersion": CLUSTERS.api_version,
            "kind": "Cluster",
            "metadata": {"name": cluster_name},
            "spec": {"controlPlaneRef": control_plane_ref(cluster_name)},
        },
        namespace,
    )
    endpoint = control_plane_endpoint(workload)
    await register_local_control_plane(client, cluster_name, namespace, endpoint, cluster)
    wclient = await Client.from_kubeconfig_dict(yaml.safe_load(workload.kubeconfig_yaml()))
    mgr = Manager(client, bind_address="127.0.0.1:0")
    cache = ClusterCache(client, connect_backoff=0.2)
    writes: list[tuple[str, str]] = []
    remove_hook = client.add_request_hook(
        lambda verb, plural, code: (
            writes.append((verb, plural))
            if verb in ("create", "patch", "update", "delete")
            else None
        )
    )
    reconciler = await machinepool_controller.setup(mgr, cache, pool_node_taints=pool_node_taints)
    machine_reconciler = await machine_controller.setup(
        mgr, cache, pool_node_taints=pool_node_taints
    )
    pools = Watch(await mgr.cache.get_informer(MACHINE_POOLS, namespace))
    machines = Watch(await mgr.cache.get_informer(MACHINES, namespace))
    nodes_informer = Informer(wclient, NODES)
    nodes = Watch(nodes_informer)
    await nodes_informer.start()
    await mgr.start()
    env = Env(
        client,
        namespace,
        workload,
        wclient,
        mgr,
        cache,
        cluster_name,
        pools,
        machines,
        nodes,
        writes,
        reconciler,
        machine_reconciler,
    )
    for watch in (pools, machines, nodes):
        env.follow(watch.informer)
    try:
        yield env
    finally:
        remove_hook()
        await mgr.stop()
        await cache.stop()
        await nodes_informer.stop()
        await wclient.close()
        await _drop_finalizers(client, namespace)


async def _drop_finalizers(client: Client, namespace: str) -> None:
    """Let the namespace go: nothing reconciles these objects any more."""
    for res in (MACHINE_POOLS, MACHINES, CLUSTERS, TEST_MACHINES):
        for obj in (await client.list(res, namespace)).items:
            if obj["metadata"].get("finalizers"):
                with contextlib.suppress(Exception):
                    await client.patch(
                        res, obj["metadata"]["name"], {"metadata": {"finalizers": None}}, namespace
                    )
