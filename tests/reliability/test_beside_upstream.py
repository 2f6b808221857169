"""Beside upstream Cluster API: one management cluster, upstream's real core manager and ours.

A control plane of its own holds upstream's core CRDs and webhook configurations exactly as
its release installs them (conversion and admission through its webhook server), upstream's
core manager (built from the pinned module by bench/upstream/build.sh), and our processes:
the bootstrap and Sim providers with the node simulator, and our core with
``--beside-upstream``. Each process talks through its own ``AuditProxy``, so who wrote what
is read from outside.

- ``test_pools_move_from_upstream_to_us_and_back_without_churn``: a pool run by upstream is
  handed to us (refused while upstream's gate is on), scaled by us, handed back and scaled by
  upstream: no instance replaced, no Node cordoned or deleted, readyReplicas never drops, and
  upstream's webhook configurations and MachinePool CRD end as they began.
- ``test_side_by_side_with_a_machine_deployment``: upstream reconciles the Cluster and a
  MachineDeployment while we create, scale, roll and delete a pool, each manager killed -9 once
  on the way; every object is written by the one manager that owns it, and nothing is lost.
- ``test_upstreams_health_check_marks_and_our_pool_remediates``: upstream's
  MachineHealthCheck marks a dead pool Machine and our MachinePool replaces it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families
from tests.reliability.harness import ControllerProcess, World
from tests.reliability.proxy import AuditProxy, Request
from tests.support import eventually
from tests.support.builders import CLUSTER, create_pool, health_check
from tests.support.pools import roll_pool
from tests.support.resources import (
    MACHINE_DEPLOYMENTS,
    MACHINE_HEALTH_CHECKS,
    MACHINE_POOLS,
    MACHINE_POOLS_V1BETA1,
)
from tests.support.upstream import (
    TEST_MACHINE_TEMPLATES,
    UpstreamProcess,
    cluster_namespace,
    upstream_management,
)

from machinepool.api.meta import dig
from machinepool.controlplane import ControlPlane, WorkloadCluster, upstream
from machinepool.controlplane.process import free_port
from machinepool.runtime import (
    CONFIGMAPS,
    CRDS,
    MUTATING_WEBHOOKS,
    VALIDATING_WEBHOOKS,
    Client,
    NotFound,
    Obj,
    Resource,
)
from machinepool.simworld import SimCloud
from machinepool.webhooks import beside

pytestmark = pytest.mark.timeout(900)

RECORD_NS = "kube-system"
"""Where our core (``--leader-election-namespace`` default) keeps the take-over record."""
UPSTREAM_CONFIGS = (
    (MUTATING_WEBHOOKS, "capi-mutating-webhook-configuration"),
    (VALIDATING_WEBHOOKS, "capi-validating-webhook-configuration"),
)
MP_CRD = "machinepools.cluster.x-k8s.io"
MACHINE_SETS = Resource("cluster.x-k8s.io", "v1beta2", "machinesets", "MachineSet")


@dataclass
class Beside:
    """The shared management cluster and the processes a test runs in it."""

    cp: ControlPlane
    workload: WorkloadCluster
    client: Client
    binary: Path
    webhook: upstream.UpstreamWebhook
    dir: Path
    audit: list[Request] = field(default_factory=list)
    procs: dict[str, ControllerProcess] = field(default_factory=dict)
    proxies: list[AuditProxy] = field(default_factory=list)

    async def kubeconfig(self, name: str) -> Path:
        proxy = AuditProxy(name, self.cp.url, self.cp.management.pki.ssl_context(), self.audit)
        await proxy.start()
        self.proxies.append(proxy)
        return proxy.write_kubeconfig(self.dir / f"{name}.kubeconfig")

    async def upstream(self, *, machine_pool: bool) -> UpstreamProcess:
        """(Re)start upstream's core manager with its MachinePool gate as given."""
        old = self.procs.pop("upstream", None)
        if old is not None:
            old.stop()
        proc = UpstreamProcess(
            name="upstream",
            kubeconfig=await self.kubeconfig("upstream"),
            components="",
            log=self.dir / "upstream.log",
            binary=self.binary,
            webhook=self.webhook,
            machine_pool=machine_pool,
        )
        proc.start()
        self.procs["upstream"] = proc
        await proc.wait_ready(timeout=180)
        return proc

    async def ours(self, name: str, components: str, *extra: str) -> ControllerProcess:
        proc = ControllerProcess(
            name=name,
            kubeconfig=await self.kubeconfig(name),
            components=components,
            log=self.dir / f"{name}.log",
            lease_name=f"machinepool-{name}",
            extra_args=extra,
        )
        proc.start()
        self.procs[name] = proc
        return proc

    async def our_core(self) -> ControllerProcess:
        return await self.ours(
            "ours-core",
            "core",
            "--beside-upstream",
            "--register-webhooks",
            "--webhook-port",
            str(free_port()),
        )

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            proc.stop()

    def writers(self, kind: str, namespace: str) -> dict[str, set[str]]:
        """Object name -> replicas that wrote it (POST, PUT, PATCH, DELETE) in ``namespace``."""
        prefix = f"/namespaces/{namespace}/{kind}"
        out: dict[str, set[str]] = {}
        for req in self.audit:
            if not req.is_write or prefix not in req.path:
                continue
            rest = req.path.split(prefix, 1)[1].strip("/").split("/")
            name = rest[0] if rest and rest[0] else _created_name(req)
            if name:
                out.setdefault(name, set()).add(req.replica)
        return out


def _created_name(req: Request) -> str:
    import json

    try:
        return str(json.loads(req.body or b"{}").get("metadata", {}).get("name", ""))
    except ValueError:
        return ""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Beside]:
    """A management cluster as upstream's core provider leaves it, plus our providers' CRDs."""
    workdir = tmp_path_factory.mktemp("beside-upstream")
    async with upstream_management(workdir) as (cp, client, binary, webhook):
        workload = await asyncio.to_thread(cp.start_workload, CLUSTER)
        env = Beside(cp, workload, client, binary, webhook, workdir)
        try:
            yield env
        finally:
            for name in list(env.procs):
                env.stop(name)
            for proxy in env.proxies:
                await proxy.stop()


async def _upstream_state(client: Client) -> Obj:
    """What of upstream's install we may touch, and its CRDs: its webhook configurations'
    entries, the MachinePool CRD's conversion and CA injection annotation, every core CRD."""
    crd = await client.get(CRDS, MP_CRD)
    state: Obj = {
        "conversion": crd["spec"]["conversion"],
        # Upstream's own CRD migrator annotates the CRD too; only this annotation is ours to move.
        "ca-injection": (crd["metadata"].get("annotations") or {}).get(
            beside.CA_INJECTION_ANNOTATION
        ),
    }
    for res, name in UPSTREAM_CONFIGS:
        state[name] = (await client.get(res, name))["webhooks"]
    # Every CRD upstream's core installed, whole (its spec: versions, schemas, conversion).
    state["crds"] = {
        crd["metadata"]["name"]: crd["spec"]
        for crd in (await client.list(CRDS)).items
        if crd["spec"]["group"] == "cluster.x-k8s.io"
    }
    return state


async def _taken_over(client: Client, shared: Beside) -> Obj | None:
    """Upstream's state once our core (leading) took MachinePool admission and conversion
    over, else None. ``beside.take_over`` moves the webhook entries first and the CRD's
    conversion last, so both are waited for."""
    state = await _upstream_state(client)
    upstreams = shared.webhook.client_config("/convert")["url"]
    converter = dig(state, "conversion", "webhook", "clientConfig", "url")
    return None if _machinepool_entries(state) or converter == upstreams else state


def _machinepool_entries(state: Obj) -> list[str]:
    return [
        hook["name"]
        for _, name in UPSTREAM_CONFIGS
        for hook in state[name]
        if "machinepool" in hook["name"]
    ]


@dataclass
class Churn:
    """What must not happen to a running pool while it changes hands."""

    node_uids: dict[str, str] = field(default_factory=dict)
    cordoned: set[str] = field(default_factory=set)
    lowest_ready: int | None = None

    def watch(self, world: World, pool: str) -> Callable[[], None]:
        def sample() -> None:
            for node in world.nodes():
                name = node["metadata"]["name"]
                self.node_uids.setdefault(name, node["metadata"]["uid"])
                if (node.get("spec") or {}).get("unschedulable"):
                    self.cordoned.add(name)
            mp = world.get("machinepools", pool)
            if mp is not None:
                ready = int((mp.get("status") or {}).get("readyReplicas") or 0)
                self.lowest_ready = (
                    ready if self.lowest_ready is None else min(self.lowest_ready, ready)
                )

        return sample


def _state(world: World, pool: str) -> str:
    mp = world.get("machinepools", pool) or {}
    return (
        f"status={mp.get('status')}; nodes={len(world.nodes())} ready={len(world.ready_nodes())}"
        f" machines={len(world.objects('machines'))} live={len(world.live(pool))}"
    )


async def _sampled(
    world: World, churn: Churn, pool: str, check: Callable[[], bool], what: str
) -> None:
    sample = churn.watch(world, pool)

    def sampled() -> bool:
        sample()
        return check()

    try:
        await world.until(sampled, what)
    except AssertionError as err:
        raise AssertionError(f"{err}; {_state(world, pool)}") from None


async def test_pools_move_from_upstream_to_us_and_back_without_churn(shared: Beside) -> None:
    client, ns, pool = shared.client, "migrate", "pool-a"
    before = await _upstream_state(client)
    assert _machinepool_entries(before), "upstream's install has MachinePool webhooks"

    # Upstream runs the pool (its gate on) with our bootstrap and Sim providers.
    await shared.upstream(machine_pool=True)
    await cluster_namespace(client, ns, shared.workload)
    providers = await shared.ours("providers", "bootstrap,sim")
    kubelet = await shared.ours("kubelet", "kubelet")
    await providers.wait_ready()
    await kubelet.wait_ready()
    async with await Client.from_kubeconfig(shared.workload.kubeconfig) as workload_client:
        world = await World.start(client, workload_client, ns)
        try:
            await create_pool(client, ns, pool, replicas=3)
            await _sampled(
                world, Churn(), pool, lambda: world.running(pool, 3), "upstream runs pool-a at 3"
            )
            instances = {r.id for r in world.live(pool)}

            # Ours refuses to start beside upstream while upstream's gate is on.
            refused = await shared.our_core()
            code = await asyncio.to_thread(refused.proc.wait, 120)  # type: ignore[union-attr]
            assert code == 2, refused.tail()
            assert "MachinePool=false" in refused.tail(), refused.tail()
            assert await _upstream_state(client) == before, "nothing changed by a refused start"
            with pytest.raises(NotFound):
                await client.get(CONFIGMAPS, beside.RECORD_NAME, RECORD_NS)

            # Hand over: upstream's gate off, then ours beside it.
            churn = Churn()
            await shared.upstream(machine_pool=False)
            core = await shared.our_core()
            await core.wait_ready()
            taken = await eventually(lambda: _taken_over(client, shared), within=180)
            assert not _machinepool_entries(taken), "upstream's MachinePool entries moved out"
            assert (
                taken["conversion"]["webhook"]["clientConfig"]["url"]
                != (before["conversion"]["webhook"]["clientConfig"]["url"])
            ), "MachinePool conversion goes to our webhook server"
            await client.patch(MACHINE_POOLS, pool, {"spec": {"replicas": 4}}, ns)
            await _sampled(
                world, churn, pool, lambda: world.running(pool, 4), "ours scales pool-a to 4"
            )
            v1beta1 = await client.get(MACHINE_POOLS_V1BETA1, pool, ns)
            assert v1beta1["apiVersion"] == "cluster.x-k8s.io/v1beta1"
            assert v1beta1["spec"]["replicas"] == 4

            # And back: hand-back, stop ours, upstream's gate on; upstream scales to 5.
            out = await asyncio.to_thread(
                subprocess.run,
                [
                    sys.executable,
                    "-m",
                    "machinepool",
                    "upstream",
                    "hand-back",
                    "--kubeconfig",
                    str(shared.cp.kubeconfig),
                    "-n",
                    RECORD_NS,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            assert out.returncode == 0, out.stdout + out.stderr
            assert "handed back 2 MachinePool webhook(s)" in out.stdout, out.stdout
            shared.stop("ours-core")
            await shared.upstream(machine_pool=True)
            await client.patch(MACHINE_POOLS, pool, {"spec": {"replicas": 5}}, ns)
            await _sampled(
                world, churn, pool, lambda: world.running(pool, 5), "upstream scales pool-a to 5"
            )

            assert instances <= {r.id for r in world.live(pool)}, "no instance replaced"
            assert not world.deleted_nodes, f"Nodes deleted: {world.deleted_nodes}"
            assert not churn.cordoned, f"Nodes cordoned: {churn.cordoned}"
            assert churn.lowest_ready is not None
            assert churn.lowest_ready >= 3, "readyReplicas never fell below the pool's size"
            after = await _upstream_state(client)
            assert after == before, "upstream's webhooks and CRD conversion as they were"
            with pytest.raises(NotFound):
                await client.get(CONFIGMAPS, beside.RECORD_NAME, RECORD_NS)
            ours_left = [
                c["metadata"]["name"]
                for res in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS)
                for c in (await client.list(res)).items
                if c["metadata"]["name"].startswith("machinepool-")
            ]
            assert not ours_left, ours_left
        finally:
            await world.stop()
            for name in ("providers", "kubelet", "ours-core"):
                shared.stop(name)


MD_REPLICAS = 2


async def _machine_deployment(client: Client, namespace: str) -> None:
    """A MachineDeployment of ``MD_REPLICAS`` on a template no provider serves: upstream's
    MachineSet controller creates its Machines and infra machines, which stay provisioning.
    Whatever happens to the pool beside it, these must stay exactly upstream's."""
    template = {
        "apiVersion": TEST_MACHINE_TEMPLATES.api_version,
        "kind": "TestMachineTemplate",
        "metadata": {"name": "md", "namespace": namespace},
        "spec": {"template": {"spec": {}}},
    }
    await client.create(TEST_MACHINE_TEMPLATES, template, namespace)
    labels = {"deployment": "md"}
    deployment = {
        "apiVersion": MACHINE_DEPLOYMENTS.api_version,
        "kind": "MachineDeployment",
        "metadata": {"name": "md", "namespace": namespace},
        "spec": {
            "clusterName": CLUSTER,
            "replicas": MD_REPLICAS,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "clusterName": CLUSTER,
                    "version": "v1.34.0",
                    "bootstrap": {"dataSecretName": "md-bootstrap"},
                    "infrastructureRef": {
                        "apiGroup": TEST_MACHINE_TEMPLATES.group,
                        "kind": "TestMachineTemplate",
                        "name": "md",
                    },
                },
            },
        },
    }
    await client.create(MACHINE_DEPLOYMENTS, deployment, namespace)


async def _reconcilers(proc: ControllerProcess) -> set[str]:
    """The controllers a process runs, from its reconcile counters (set at zero on start)."""
    url = f"http://127.0.0.1:{proc.port}/metrics"
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        text = await resp.text()
    return {
        sample.labels["controller"]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "controller_runtime_reconcile_total"
    }


def _pool_machines(world: World, pool: str) -> list[Obj]:
    return [
        m
        for m in world.objects("machines")
        if (m["metadata"].get("labels") or {}).get("cluster.x-k8s.io/pool-name") == pool
    ]


def _md_machines(world: World) -> dict[str, str]:
    """The MachineDeployment's Machines: name -> uid."""
    return {
        m["metadata"]["name"]: m["metadata"]["uid"]
        for m in world.objects("machines")
        if (m["metadata"].get("labels") or {}).get("deployment") == "md"
    }


def _pool_settled(world: World, pool: str, replicas: int, version: str | None) -> bool:
    """The pool runs ``replicas`` Ready Nodes (on ``version``), one Machine and one instance
    each, and nothing else; the MachineDeployment beside it keeps its own Machines."""
    mp = world.get("machinepools", pool)
    if mp is None:
        return False
    status = mp.get("status") or {}
    live = {r.provider_id for r in world.live(pool)}
    nodes = [n for n in world.nodes() if (n.get("spec") or {}).get("providerID") in live]
    ready = [n for n in world.ready_nodes(version) if n in nodes]
    return (
        status.get("phase") == "Running"
        and status.get("readyReplicas") == replicas
        and status.get("upToDateReplicas") == replicas
        and len(live) == replicas
        and len(ready) == replicas == len(world.nodes())
        and len(_pool_machines(world, pool)) == replicas
        and sorted(mp["spec"].get("providerIDList") or []) == sorted(live)
    )


def _pool_gone(world: World, pool: str) -> bool:
    return (
        world.get("machinepools", pool) is None
        and not _pool_machines(world, pool)
        and not world.live(pool)
        and not world.nodes()
    )


async def test_side_by_side_with_a_machine_deployment(shared: Beside) -> None:
    client, ns, pool = shared.client, "side", "pool-b"
    workload = await asyncio.to_thread(shared.cp.start_workload, "side")
    upstream_core = await shared.upstream(machine_pool=False)
    await cluster_namespace(client, ns, workload)
    await _machine_deployment(client, ns)
    providers = await shared.ours("side-providers", "bootstrap,sim")
    kubelet = await shared.ours("side-kubelet", "kubelet")
    core = await shared.our_core()
    for proc in (providers, kubelet, core):
        await proc.wait_ready()
    await eventually(lambda: _taken_over(client, shared), within=180)
    assert await _reconcilers(core) == {"machinepool"}, "upstream's Machine controller only"
    async with await Client.from_kubeconfig(workload.kubeconfig) as workload_client:
        world = await World.start(client, workload_client, ns)
        try:
            await world.until(
                lambda: len(_md_machines(world)) == MD_REPLICAS, "upstream creates md's Machines"
            )
            md_machines = _md_machines(world)

            await create_pool(client, ns, pool, replicas=2)
            await world.until(lambda: _pool_settled(world, pool, 2, None), f"ours runs {pool} at 2")
            # Scale up while our core is killed -9 once mid-way.
            await client.patch(MACHINE_POOLS, pool, {"spec": {"replicas": 4}}, ns)
            await world.until(lambda: len(world.live(pool)) > 2, "the scale-up starts")
            core.crash_and_restart()
            await world.until(lambda: _pool_settled(world, pool, 4, None), "scaled to 4")

            # Roll to a new version while upstream's core (it drains and deletes the old
            # pool Machines) is killed -9 once mid-way.
            await roll_pool(client, ns, pool, "v1.34.1")
            await world.until(lambda: bool(world.deleted_nodes), "the rollout deletes a Node")
            upstream_core.crash_and_restart()
            await upstream_core.wait_ready(timeout=180)
            await world.until(lambda: _pool_settled(world, pool, 4, "v1.34.1"), "rolled to v1.34.1")

            # Scale down (upstream's Machine controller drains), then delete the pool.
            await client.patch(MACHINE_POOLS, pool, {"spec": {"replicas": 1}}, ns)
            await world.until(lambda: _pool_settled(world, pool, 1, "v1.34.1"), "scaled down to 1")
            await client.delete(MACHINE_POOLS, pool, ns)
            await world.until(lambda: _pool_gone(world, pool), f"{pool} and its Nodes gone")

            assert _md_machines(world) == md_machines, "the MachineDeployment's Machines kept"
            md = await client.get(MACHINE_DEPLOYMENTS, "md", ns)
            assert md["spec"]["replicas"] == MD_REPLICAS
            seen_ids = {r.id for r in world.seen_records.values() if r.pool == pool}
            assert not [r for r in world.records() if r.pool == pool], "no instance left"
            assert {d.provider_id for d in world.deleted_nodes} <= {
                r.provider_id for r in world.seen_records.values() if r.id in seen_ids
            }
        finally:
            await world.stop()
            for name in ("side-providers", "side-kubelet", "ours-core"):
                shared.stop(name)
            await asyncio.to_thread(shared.cp.stop_workload, "side")

    # Every object was written by the one manager that owns it (requests seen by the proxies).
    ours = {"ours-core", "side-providers", "side-kubelet"}
    for kind in ("machinedeployments", "machinesets", "testmachines"):
        writers = shared.writers(kind, ns)
        assert writers, f"upstream wrote {kind}"
        assert all(w == {"upstream"} for w in writers.values()), (kind, writers)
    md_writers = {n: w for n, w in shared.writers("machines", ns).items() if n in md_machines}
    assert md_writers, "upstream wrote the MachineDeployment's Machines"
    assert all(w == {"upstream"} for w in md_writers.values()), md_writers
    pool_writers = shared.writers("machinepools", ns)
    assert set().union(*pool_writers.values()) <= ours, pool_writers
    # Upstream's Cluster controller writes the Cluster (its finalizer, its status); ours never.
    assert shared.writers("clusters", ns) == {CLUSTER: {"upstream"}}, shared.writers("clusters", ns)


async def test_upstreams_health_check_marks_and_our_pool_remediates(shared: Beside) -> None:
    """Upstream's MachineHealthCheck controller marks a dead pool Machine (as it marks any
    Machine, then waits for an owner that upstream's MachinePool never is); ours, which owns
    the pool, deletes the marked Machine, upstream's Machine controller drains it and the
    provider replaces the instance. Our core runs no MachineHealthCheck controller here."""
    client, ns, pool = shared.client, "heal", "pool-h"
    workload = await asyncio.to_thread(shared.cp.start_workload, "heal")
    await shared.upstream(machine_pool=False)
    await cluster_namespace(client, ns, workload)
    providers = await shared.ours("heal-providers", "bootstrap,sim")
    # A stopped kubelet's Node turns Unknown after 5 s, not the default 50 s.
    kubelet = await shared.ours("heal-kubelet", "kubelet", "--node-monitor-grace-seconds", "5")
    core = await shared.our_core()
    for proc in (providers, kubelet, core):
        await proc.wait_ready()
    await eventually(lambda: _taken_over(client, shared), within=180)
    assert await _reconcilers(core) == {"machinepool"}, "no MachineHealthCheck controller of ours"
    async with await Client.from_kubeconfig(workload.kubeconfig) as workload_client:
        world = await World.start(client, workload_client, ns)
        try:
            await create_pool(client, ns, pool, replicas=2)
            await world.until(lambda: _pool_settled(world, pool, 2, None), f"ours runs {pool}")
            check = health_check(ns, pool, unhealthy=("Unknown", "False"))
            await client.create(MACHINE_HEALTH_CHECKS, check, ns)

            async def healthy() -> bool:
                got = await client.get(MACHINE_HEALTH_CHECKS, pool, ns)
                return (got.get("status") or {}).get("currentHealthy") == 2

            await eventually(healthy, within=180)
            victim = sorted(m["metadata"]["name"] for m in _pool_machines(world, pool))[0]
            victim_node = world.node_of(victim)
            assert victim_node is not None
            await SimCloud(client).stop_kubelet(ns, victim)
            await world.until(
                lambda: (
                    victim not in {m["metadata"]["name"] for m in _pool_machines(world, pool)}
                    and _pool_settled(world, pool, 2, None)
                ),
                f"{victim} marked by upstream, remediated by us, replaced",
            )
            assert [d.name for d in world.deleted_nodes] == [victim_node["metadata"]["name"]]
        finally:
            await world.stop()
            for name in ("heal-providers", "heal-kubelet", "ours-core"):
                shared.stop(name)
            await asyncio.to_thread(shared.cp.stop_workload, "heal")
    # Our core deleted the marked Machine; upstream marked it and finalized its deletion.
    machine_writers = shared.writers("machines", ns).get(victim, set())
    assert {"upstream", "ours-core"} <= machine_writers, machine_writers
