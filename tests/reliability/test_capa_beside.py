"""CAPA's AWSMachinePool under our core, beside upstream Cluster API, against moto.

One management cluster as the operator guide's beside-upstream install leaves it: upstream's
core CRDs, webhooks and core manager (its MachinePool gate off), our core with
``--beside-upstream``, our kubeadm bootstrap provider, and Cluster API Provider AWS's CRDs,
webhooks and manager (built from its module by ``bench/upstream/build.sh capa``; its
MachinePool gate on, every AWS service it calls pointed at moto, in server mode on loopback).
None of our AWS provider's CRDs is installed (tests/integration/aws/test_aws_beside_capa.py
installs both).

The Cluster's AWSCluster is externally managed (``cluster.x-k8s.io/managed-by``): the test
makes its VPC, subnet and security groups in moto and writes its status as its owner would,
so CAPA reconciles only the pool. No kubelet joins a moto instance: the test plays the
instances' kubelets and the cloud's node lifecycle controller (a Ready Node with the
instance's providerID for each InService instance of CAPA's Auto Scaling group, deleted
once its instance is gone).

- ``test_capa_pool_create_scale_delete[ours]``: an AWSMachinePool created at 3 is Running
  with three providerIDs, each a Node's; scaled to 5, to 0 and back to 3; refreshed by a
  change of its AMI (CAPA's instance refresh, played by ``tests/support/moto_asg.py``: every
  instance replaced); deleted, and CAPA's Auto Scaling group with it. CAPA's webhook entries
  (``awsmachinepool`` among them) are left to CAPA by our take-over of MachinePool admission.
- ``test_capa_pool_with_machinepool_machines[ours]``: CAPA restarted with its
  MachinePoolMachines gate on: an AWSMachine per instance, a Ready Machine on each (created at
  3, scaled to 5, 1, 0 and back to 3, refreshed, deleted, the Machines with it).
- ``test_capa_pool_rolled_by_our_core[ours]``: the gate on, CAPA's instance refresh off, the
  pool opted into rollouts by the core: an upgrade (version and AMI) replaces every instance
  within ``rollout-max-unavailable: 1``, each Node cordoned before its instance goes (moto's
  missing launch template answers played by ``tests/support/moto_asg.py``).
- ``test_capa_machine_remediated_by_our_core[ours]``: the gate on, a MachineHealthCheck marks
  the Machine whose Node went NotReady; our core deletes it, its Node is cordoned before
  CAPA terminates the instance, and the group's replacement joins.
- ``[upstream]``: the same steps under upstream's core alone (its MachinePool gate on, ours
  not running); each converged step is compared with ours' (``CONVERGED``) up to the
  differences docs/upstream-differences.md lists, as the conformance suite compares; the
  upgrade with CAPA's refresh off replaces nothing there (upstream's core has no rollout),
  and the marked Machine stays (no MachinePool remediation).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from tests.conformance.differential import allowed_differences, compare, normalise
from tests.reliability.harness import ControllerProcess
from tests.support import capa, eventually
from tests.support.builders import (
    CLUSTER,
    VERSION,
    health_check,
    healthy_node_conditions,
    kubeadm_config,
    machine_pool,
)
from tests.support.conditions import condition
from tests.support.resources import (
    KUBEADM_CONFIGS,
    MACHINE_HEALTH_CHECKS,
    MACHINE_POOLS,
    MACHINES,
)
from tests.support.upstream import UpstreamProcess, cluster_namespace, upstream_management

from machinepool.api import constants as c
from machinepool.api.meta import dig
from machinepool.controlplane import WorkloadCluster
from machinepool.controlplane.process import free_port
from machinepool.controlplane.register import cluster_object
from machinepool.runtime import (
    MUTATING_WEBHOOKS,
    NAMESPACES,
    NODES,
    VALIDATING_WEBHOOKS,
    Client,
    FuncHandler,
    Informer,
    NotFound,
    Obj,
    PatchType,
)

pytestmark = [pytest.mark.timeout(900), pytest.mark.capa]

UPSTREAM_CONFIGS = (
    (MUTATING_WEBHOOKS, "capi-mutating-webhook-configuration"),
    (VALIDATING_WEBHOOKS, "capi-validating-webhook-configuration"),
)
CAPA_CONFIGS = (
    (MUTATING_WEBHOOKS, "capa-mutating-webhook-configuration"),
    (VALIDATING_WEBHOOKS, "capa-validating-webhook-configuration"),
)
NEW_VERSION = "v1.34.1"
REFRESH = "refresh"
"""A step of ``_create_scale_delete``: a new AMI, so CAPA refreshes every instance."""
WAIT = 240.0
"""Upper bound of one step; CAPA reconciles on watch events and moto answers at once."""

CONVERGED: dict[tuple[str, str], list[dict[str, Any]]] = {}
"""The pool's objects at each converged step, by core and namespace: the ``upstream`` run
(the second) compares its steps with ours', as the conformance suite compares scenarios."""


@dataclass
class Env:
    core: str
    """Whose MachinePool controller runs: ``ours`` or ``upstream``."""
    client: Client
    workload: WorkloadCluster
    moto: capa.MotoServer
    network: capa.Network
    procs: dict[str, ControllerProcess] = field(default_factory=dict)

    def logs(self) -> str:
        return "\n".join(f"--- {name}:\n{p.tail(25)}" for name, p in self.procs.items())


@pytest_asyncio.fixture(scope="module", loop_scope="session", params=["ours", "upstream"])
async def env(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Env]:
    """The management cluster with the pool's core: ``ours`` beside upstream's (its gate
    off), or, for comparison, ``upstream``'s alone with its MachinePool gate on."""
    ours = request.param == "ours"
    workdir = tmp_path_factory.mktemp(f"capa-{request.param}")
    binary = await asyncio.to_thread(capa.build)
    groups = {c.BOOTSTRAP_GROUP}  # our kubeadm bootstrap provider's; no infra kind of ours
    async with upstream_management(workdir, our_groups=groups) as (cp, client, core, hook):
        capa_hook = await capa.install(client, workdir)
        moto = capa.MotoServer(workdir / "moto.log", script=capa.MOTO_ASG)
        moto.start()
        await moto.wait_ready()
        workload = await asyncio.to_thread(cp.start_workload, CLUSTER)
        network = await asyncio.to_thread(capa.Network.create, moto)
        e = Env(request.param, client, workload, moto, network)
        try:
            common: dict[str, Any] = {"kubeconfig": cp.kubeconfig, "components": ""}
            e.procs["upstream"] = UpstreamProcess(
                name="upstream",
                log=workdir / "upstream.log",
                binary=core,
                webhook=hook,
                machine_pool=not ours,
                **common,
            )
            e.procs["capa"] = capa.CAPAProcess(
                name="capa",
                log=workdir / "capa.log",
                binary=binary,
                webhook=capa_hook,
                endpoint=moto.url,
                gates={"MachinePool": True},
                # CAPA lists the group's instances before it resizes the group and does not
                # requeue after, so a scale's instances wait for its next event; when our
                # core's status write lands in that same reconcile there is none before the
                # sync period (10 minutes at CAPA's default): docs/guide-capa.md.
                extra_args=("--sync-period=30s",),
                **common,
            )
            beside = ("--beside-upstream", "--register-webhooks")
            for name, components, extra in (
                *([("core", "core", beside)] if ours else []),
                ("bootstrap", "bootstrap", ("--token-ttl-seconds", "86400")),
            ):
                e.procs[name] = ControllerProcess(
                    name=name,
                    kubeconfig=cp.kubeconfig,
                    components=components,
                    log=workdir / f"{name}.log",
                    lease_name=f"machinepool-{name}",
                    webhook_port=free_port() if name == "core" else None,
                    extra_args=extra,
                )
            for proc in e.procs.values():
                proc.start()
            for proc in e.procs.values():
                await proc.wait_ready(timeout=240)
            if ours:  # MachinePool admission is ours once the core took upstream's entries
                await eventually(lambda: _upstream_pool_hooks(client, False), within=180)
            yield e
        finally:
            for proc in e.procs.values():
                proc.stop()
            moto.stop()


async def _upstream_pool_hooks(client: Client, present: bool) -> bool:
    """Whether upstream's webhook configurations hold MachinePool entries, as ``present``."""
    found = False
    for res, name in UPSTREAM_CONFIGS:
        hooks = (await client.get(res, name))["webhooks"]
        found |= any("machinepool" in hook["name"] for hook in hooks)
    return found == present


async def _capa_hooks(client: Client) -> dict[str, list[tuple[str, str]]]:
    """CAPA's webhook configurations: each entry's name and URL."""
    out = {}
    for res, name in CAPA_CONFIGS:
        hooks = (await client.get(res, name))["webhooks"]
        out[name] = [(h["name"], h["clientConfig"]["url"]) for h in hooks]
    return out


def _aws_machine_pool(namespace: str, name: str, network: capa.Network) -> Obj:
    return {
        "apiVersion": capa.AWS_MACHINE_POOLS.api_version,
        "kind": "AWSMachinePool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "minSize": 0,
            "maxSize": 10,
            "subnets": [{"id": network.subnet}],
            "awsLaunchTemplate": {
                "instanceType": "t3.medium",
                "ami": {"id": network.ami},
                "sshKeyName": network.key,
            },
        },
    }


async def _pool(client: Client, ns: str, name: str) -> Obj:
    return await client.get(MACHINE_POOLS, name, ns)


def _running(mp: Obj, replicas: int) -> bool:
    status = mp.get("status") or {}
    return (
        status.get("phase") == "Running"
        and status.get("replicas", 0) == replicas
        and status.get("readyReplicas", 0) == replicas
        and len(dig(mp, "spec", "providerIDList", default=[]) or []) == replicas
    )


async def test_capa_pool_create_scale_delete(env: Env) -> None:
    capa_hooks = await _capa_hooks(env.client)
    assert any("awsmachinepool" in n for hooks in capa_hooks.values() for n, _ in hooks)
    await _create_scale_delete(env, "capa-pool", (3, 5, 0, 3, REFRESH))
    assert await _capa_hooks(env.client) == capa_hooks, "CAPA's admission is its own"


async def test_capa_pool_with_machinepool_machines(env: Env) -> None:
    """CAPA's MachinePoolMachines gate on: an AWSMachine per instance of the group, and so a
    Machine per instance, each on its Node and Ready; a scale-down takes the Machines of the
    instances the group gave up, a scale-up makes Machines for the new ones."""
    await _machinepool_machines_on(env)
    await _create_scale_delete(env, "capa-machines", (3, 5, 1, 0, 3, REFRESH), machines=True)


async def test_capa_pool_rolled_by_our_core(env: Env) -> None:
    """Rollouts by the core on CAPA's pool (MachinePoolMachines on, its instance refresh off):
    an upgrade (a new version and AMI) replaces every instance, one at a time within
    ``rollout-max-unavailable: 1``; each Node is cordoned, so drained, before its instance
    goes (CAPA terminates an instance when its AWSMachine is deleted, and the Auto Scaling
    group boots its replacement from the new launch template); Ready Machines never fall
    below replicas - 1. Under upstream's core (``[upstream]``) the same upgrade replaces
    nothing: once CAPA has written the new launch template version and the core has observed
    the new spec, every instance is the old one and no Machine is being deleted."""
    await _machinepool_machines_on(env)
    client, ns, pool, replicas = env.client, "capa-rollout", "pool", 3
    new_ami = _other_ami(env)
    versions = {env.network.ami: VERSION, new_ami: NEW_VERSION}
    annotations = {c.ROLLOUT_ANNOTATION: c.ROLLOUT_CORE, c.ROLLOUT_MAX_UNAVAILABLE_ANNOTATION: "1"}
    refresh_off = {"refreshPreferences": {"disable": True}}
    drains = _Drains()
    async with (
        _capa_pool(
            env,
            ns,
            replicas,
            versions=versions,
            on_departed=drains.on_departed,
            aws_spec=refresh_off,
            annotations=annotations,
            control_plane=True,
        ) as workload,
        drains.watching(workload),
    ):

        async def running(version: str) -> Obj | None:
            mp = await _pool(client, ns, pool)
            ready = await _ready_machines(client, ns)
            listed = (await workload.list(NODES)).items
            on = {dig(n, "status", "nodeInfo", "kubeletVersion") for n in listed}
            if not _running(mp, replicas) or len(ready) != replicas or on != {version}:
                return None
            return mp

        before = await eventually(lambda: running(VERSION), "pool Running", within=WAIT)
        old = set(before["spec"]["providerIDList"])
        template = dig(await client.get(capa.AWS_MACHINE_POOLS, pool, ns), "status") or {}
        fewest = replicas

        async def count_ready() -> None:
            nonlocal fewest
            while True:
                fewest = min(fewest, len(await _ready_machines(client, ns)))
                await asyncio.sleep(0.1)

        counter = asyncio.create_task(count_ready())
        try:
            upgrade = {"spec": {"template": {"spec": {"version": NEW_VERSION}}}}
            await client.patch(MACHINE_POOLS, pool, upgrade, ns)
            ami = {"spec": {"awsLaunchTemplate": {"ami": {"id": new_ami}}}}
            await client.patch(capa.AWS_MACHINE_POOLS, pool, ami, ns)
            if env.core == "upstream":
                await _upgrade_left_alone(client, ns, pool, template, old)
                await client.delete(MACHINE_POOLS, pool, ns)
                return
            try:
                after = await eventually(
                    lambda: running(NEW_VERSION), "every instance replaced", within=2 * WAIT
                )
            except TimeoutError as err:
                state = await _pool(client, ns, pool)
                raise AssertionError(f"{err}; {state.get('status')}\n{env.logs()}") from None
        finally:
            counter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await counter
        assert not old & set(after["spec"]["providerIDList"]), "every old instance replaced"
        gone = {pid.rsplit("/", 1)[-1] for pid in old}
        assert {i: drains.drained.get(i) for i in gone} == dict.fromkeys(gone, True), (
            "each old Node cordoned before its instance went"
        )
        assert fewest >= replicas - 1, f"Ready Machines fell to {fewest}"
        rolled_out = condition(after, c.ROLLING_OUT_CONDITION)
        assert rolled_out.get("status") == "False", rolled_out
        await client.delete(MACHINE_POOLS, pool, ns)


async def test_capa_machine_remediated_by_our_core(env: Env) -> None:
    """Remediation on CAPA's pool (MachinePoolMachines on): a MachineHealthCheck (upstream's
    controller, beside us) marks the Machine whose Node went NotReady; our core deletes it
    (upstream's MachinePool controller remediates nothing), so its Node is cordoned and
    drained before CAPA terminates the instance, and the group's replacement brings the pool
    back to 2 Ready Machines. Under upstream's core the marked Machine stays."""
    await _machinepool_machines_on(env)
    client, ns, pool, replicas = env.client, "capa-heal", "pool", 2
    drains = _Drains()
    async with (
        _capa_pool(
            env, ns, replicas, on_departed=drains.on_departed, control_plane=True
        ) as workload,
        drains.watching(workload),
    ):

        async def running() -> Obj | None:
            mp = await _pool(client, ns, pool)
            ready = await _ready_machines(client, ns)
            return mp if _running(mp, replicas) and len(ready) == replicas else None

        before = await _eventually_with_logs(env, ns, running, "pool Running")
        await client.create(MACHINE_HEALTH_CHECKS, health_check(ns, pool), ns)

        async def watched() -> bool:
            got = await client.get(MACHINE_HEALTH_CHECKS, pool, ns)
            return dig(got, "status", "currentHealthy") == replicas

        await eventually(watched, "the health check counting the pool healthy", within=WAIT)
        victim = sorted(before["spec"]["providerIDList"])[0]
        instance = victim.rsplit("/", 1)[-1]
        not_ready = [
            {**x, "status": "False", "reason": "KubeletNotReady"} if x["type"] == "Ready" else x
            for x in healthy_node_conditions()
        ]
        await workload.patch(
            NODES,
            instance,
            {"status": {"conditions": not_ready}},
            subresource="status",
            patch_type=PatchType.STRATEGIC,
        )
        if env.core == "upstream":

            async def marked() -> Obj | None:
                for m in (await client.list(MACHINES, ns)).items:
                    if dig(m, "spec", "providerID") == victim:
                        remediated = condition(m, c.OWNER_REMEDIATED_CONDITION)
                        return m if remediated.get("status") == "False" else None
                return None

            machine = await eventually(marked, "the health check marking the Machine", within=WAIT)
            mp = await _pool(client, ns, pool)
            assert victim in mp["spec"]["providerIDList"], "upstream's core remediated"
            assert not machine["metadata"].get("deletionTimestamp")
            await client.delete(MACHINE_POOLS, pool, ns)
            return

        async def healed() -> Obj | None:
            mp = await running()
            return mp if mp is not None and victim not in mp["spec"]["providerIDList"] else None

        await _eventually_with_logs(env, ns, healed, "the marked Machine replaced")
        assert drains.drained == {instance: True}, "the Node cordoned before its instance went"
        await client.delete(MACHINE_POOLS, pool, ns)


@dataclass
class _Drains:
    """Which instances left their group, and whether each one's Node was cordoned (a drain's
    first step): ``on_departed`` for ``capa.NodeAgent``, with the Nodes ``watching``.

    The Node watch (the workload apiserver) and the agent's polls of moto keep no common order,
    so a Node is judged by whether it was cordoned at all: the Machine controller cordons it
    before it deletes the AWSMachine whose deletion makes CAPA terminate the instance, and an
    instance CAPA or its group replaced on their own is never cordoned."""

    cordoned: set[str] = field(default_factory=set)
    departed: list[str] = field(default_factory=list)

    def on_node(self, node: Obj) -> None:
        if node["spec"].get("unschedulable"):
            self.cordoned.add(node["metadata"]["name"])

    def on_departed(self, instance: str) -> None:
        self.departed.append(instance)

    @property
    def drained(self) -> dict[str, bool]:
        """Each departed instance: whether its Node was seen cordoned."""
        return {i: i in self.cordoned for i in self.departed}

    @contextlib.asynccontextmanager
    async def watching(self, workload: Client) -> AsyncIterator[None]:
        nodes = Informer(workload, NODES)
        nodes.add_handler(FuncHandler(self.on_node, lambda _o, n: self.on_node(n)))
        await nodes.start()
        try:
            yield
        finally:
            await nodes.stop()


async def _upgrade_left_alone(
    client: Client, ns: str, pool: str, status: Obj, old: set[str]
) -> None:
    """Under upstream's core with CAPA's refresh off: once CAPA wrote the launch template's
    new version and the core observed the upgrade, the pool still runs its old instances."""

    async def settled() -> Obj | None:
        infra = await client.get(capa.AWS_MACHINE_POOLS, pool, ns)
        mp = await _pool(client, ns, pool)
        version = dig(infra, "status", "launchTemplateVersion")
        written = version != status.get("launchTemplateVersion")
        return mp if written and _observed(mp) else None

    mp = await eventually(settled, "CAPA's new launch template version", within=WAIT)
    assert set(mp["spec"]["providerIDList"]) == old, "upstream's core replaced an instance"
    machines = (await client.list(MACHINES, ns)).items
    assert not [m for m in machines if m["metadata"].get("deletionTimestamp")]
    assert not condition(mp, c.ROLLING_OUT_CONDITION), "RollingOut is ours"


async def _eventually_with_logs(
    env: Env, ns: str, check: Callable[[], Awaitable[Obj | None]], what: str
) -> Obj:
    """``eventually(check)`` within ``WAIT``; on a timeout, the pool's status and the
    processes' logs in the failure."""
    try:
        return await eventually(check, what, within=WAIT)
    except TimeoutError as err:
        state = await _pool(env.client, ns, "pool")
        raise AssertionError(f"{err}; {state.get('status')}\n{env.logs()}") from None


def _other_ami(env: Env) -> str:
    """One of moto's images other than the pool's first (``env.network.ami``)."""
    images = env.moto.client("ec2").describe_images(Owners=["amazon"])["Images"]
    return next(i["ImageId"] for i in images if i["ImageId"] != env.network.ami)


async def _machinepool_machines_on(env: Env) -> None:
    """CAPA restarted with its MachinePoolMachines gate on, unless it already is."""
    capa_process = env.procs["capa"]
    if capa_process.gates.get("MachinePoolMachines"):
        return
    capa_process.stop()
    capa_process.gates = {**capa_process.gates, "MachinePoolMachines": True}
    capa_process.start()
    await capa_process.wait_ready(timeout=240)


async def _create_scale_delete(
    env: Env, ns: str, steps: tuple[int | str, ...], *, machines: bool = False
) -> None:
    """An AWSMachinePool ``pool`` in ``ns`` under a MachinePool, taken through ``steps`` (the
    first its creation at that size): a size scales it, ``REFRESH`` changes its AMI, which
    makes CAPA refresh every instance. Each step ends Running with a Node per providerID
    (and, with ``machines``, a Ready Machine on each), a refresh with none of the instances it
    replaced; then the pool is deleted with its Auto Scaling group."""
    client, pool = env.client, "pool"
    first = steps[0]
    assert isinstance(first, int)
    async with _capa_pool(env, ns, first) as workload:

        async def running(replicas: int, replaced: set[str]) -> Obj | None:
            mp = await _pool(client, ns, pool)
            if not _running(mp, replicas):
                return None
            if replaced & set(mp["spec"].get("providerIDList") or []):
                return None  # a refresh is done once none of its old instances is listed
            if not _observed(mp):
                return None  # the step is converged once its spec is observed
            if machines and len(await _ready_machines(client, ns)) != replicas:
                return None
            if machines:
                listed = (await client.list(MACHINES, ns)).items
                if len(listed) != replicas:
                    return None  # the Machines of the instances given up are gone too
                if any(not _observed(m) for m in listed):
                    return None  # each has observed its spec (the version the pool set)
                if any(dig(m, "status", "phase") != "Running" for m in listed):
                    return None  # and has been through its Machine controller since
            return mp

        replicas, ids = first, set[str]()
        for step in steps:
            replaced: set[str] = set()
            if step == REFRESH:
                replaced = ids
                ami = {"spec": {"awsLaunchTemplate": {"ami": {"id": _other_ami(env)}}}}
                await client.patch(capa.AWS_MACHINE_POOLS, pool, ami, ns)
            else:
                assert isinstance(step, int)
                replicas = step
                await client.patch(MACHINE_POOLS, pool, {"spec": {"replicas": replicas}}, ns)
            try:
                mp = await eventually(
                    lambda r=replicas, old=replaced: running(r, old),
                    f"pool Running at {replicas} after {step}",
                    within=WAIT,
                )
            except TimeoutError as err:
                state = await _pool(client, ns, pool)
                raise AssertionError(f"{err}; {state.get('status')}\n{env.logs()}") from None
            ids = set(mp["spec"].get("providerIDList") or [])
            nodes = {n["spec"]["providerID"] for n in (await workload.list(NODES)).items}
            assert ids == nodes, "each providerID is a Node's, and each Node in the pool"
            refs = {r["name"] for r in mp["status"].get("nodeRefs") or []}
            assert refs == {i.rsplit("/", 1)[-1] for i in ids}
            group = await asyncio.to_thread(capa.NodeAgent(env.moto, workload, pool).instances)
            assert {f"aws:///{z}/{i}" for i, z in group.items()} == ids
            if machines:
                on = {dig(m, "spec", "providerID") for m in await _ready_machines(client, ns)}
                assert on == ids, "a Ready Machine on each instance, none on another"
            await _record(env, ns, pool)

        await client.delete(MACHINE_POOLS, pool, ns)

        async def gone() -> bool:
            with contextlib.suppress(NotFound):
                await _pool(client, ns, pool)
                return False
            if (await client.list(MACHINES, ns)).items:
                return False
            return not await asyncio.to_thread(capa.NodeAgent(env.moto, workload, pool).instances)

        await eventually(gone, "pool deleted with its Auto Scaling group", within=WAIT)
        if env.core == "upstream" and ("ours", ns) in CONVERGED:
            _compare_with_ours(ns)


@contextlib.asynccontextmanager
async def _capa_pool(
    env: Env,
    ns: str,
    replicas: int,
    *,
    versions: dict[str, str] | None = None,
    on_departed: Callable[[str], None] | None = None,
    aws_spec: Obj | None = None,
    annotations: dict[str, str] | None = None,
    control_plane: bool = False,
) -> AsyncIterator[Client]:
    """Namespace ``ns`` with a Cluster on an externally managed AWSCluster, and a MachinePool
    ``pool`` of ``replicas`` on CAPA's AWSMachinePool ``pool`` (``aws_spec`` merged over its
    spec, ``annotations`` on the MachinePool); yields the workload cluster's client, with the
    stand-in kubelets (``capa.NodeAgent``: ``versions``, ``on_departed``) running until the
    block ends. ``control_plane``: the Cluster names an externally managed control plane, so
    a deleted pool Machine's Node is drained (upstream's rule: not without one)."""
    client, pool = env.client, "pool"
    await client.create(NAMESPACES, {"metadata": {"name": ns}})
    endpoint = cluster_object(CLUSTER, ns, env.workload)["spec"]["controlPlaneEndpoint"]
    await client.create(capa.AWS_CLUSTERS, capa.aws_cluster(ns, CLUSTER, env.network, endpoint), ns)
    await capa.provision_aws_cluster(client, ns, CLUSTER, env.network)
    infra_ref = {"apiGroup": capa.GROUP, "kind": "AWSCluster", "name": CLUSTER}
    await cluster_namespace(
        client, ns, env.workload, infrastructure_ref=infra_ref, control_plane=control_plane
    )

    async with await Client.from_kubeconfig(env.workload.kubeconfig) as workload:
        nodes = capa.NodeAgent(env.moto, workload, pool, versions, on_departed)
        agent = asyncio.create_task(nodes.run())
        try:
            await client.create(KUBEADM_CONFIGS, kubeadm_config(ns, pool), ns)
            aws_pool = _aws_machine_pool(ns, pool, env.network)
            aws_pool["spec"] |= aws_spec or {}
            await client.create(capa.AWS_MACHINE_POOLS, aws_pool, ns)
            mp = machine_pool(
                ns,
                pool,
                replicas=replicas,
                infrastructure_kind="AWSMachinePool",
                annotations=annotations,
            )
            await client.create(MACHINE_POOLS, mp, ns)
            yield workload
        finally:
            agent.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await agent


def _observed(obj: Obj) -> bool:
    """Whether ``obj``'s status has observed its current spec."""
    return dig(obj, "status", "observedGeneration") == obj["metadata"]["generation"]


async def _ready_machines(client: Client, ns: str) -> list[Obj]:
    """The namespace's live Machines whose Ready condition is True."""
    return [
        m
        for m in (await client.list(MACHINES, ns)).items
        if not m["metadata"].get("deletionTimestamp")
        and condition(m, "Ready").get("status") == "True"
    ]


async def _record(env: Env, ns: str, pool: str) -> None:
    """The MachinePool, the AWSMachinePool and the Machines as this step left them, with
    what differs by construction between the two runs said the same way: moto's instance,
    launch template and Auto Scaling IDs (numbered in providerID order), names, times, UIDs."""
    mp = await _pool(env.client, ns, pool)
    infra = await env.client.get(capa.AWS_MACHINE_POOLS, pool, ns)
    ids = dig(mp, "spec", "providerIDList", default=[]) or []
    machines = sorted(
        (await env.client.list(MACHINES, ns)).items,
        key=lambda m: ids.index(pid) if (pid := dig(m, "spec", "providerID")) in ids else len(ids),
    )
    for m in machines:
        # moto's private IPs, from CAPA's AWSMachine; the Machine controller that copies them
        # is upstream's in both runs (ours runs none beside upstream).
        m.get("status", {}).pop("addresses", None)
    replacements = {i.rsplit("/", 1)[-1]: f"instance-{n}" for n, i in enumerate(ids)}
    replacements |= {
        str(value): name
        for name, value in (
            ("launch-template", dig(infra, "status", "launchTemplateID")),
            ("auto-scaling-group", dig(infra, "spec", "providerID")),
            # moto's IDs for the network (the key pair's name is the test's own)
            *dataclasses.asdict(env.network).items(),
        )
        if isinstance(value, str) and value and name != "key"
    }
    for m in machines:  # Machines and AWSMachines are named by CAPA, at random
        name = dig(m, "metadata", "name")
        pid = str(dig(m, "spec", "providerID") or "")
        replacements[str(name)] = replacements.get(pid.rsplit("/", 1)[-1], "machine")
    objects = {"MachinePool": mp, "AWSMachinePool": infra, "Machines": machines}
    CONVERGED.setdefault((env.core, ns), []).append(normalise(objects, replacements))


def _compare_with_ours(ns: str) -> None:
    """Each converged step under upstream's core against the same step under ours, up to the
    differences docs/upstream-differences.md lists (rows for all pools, and ``capa: `` ones)."""
    ours, upstream = CONVERGED[("ours", ns)], CONVERGED[("upstream", ns)]
    assert len(ours) == len(upstream)
    problems = []
    for step, (up, our) in enumerate(zip(upstream, ours, strict=True)):
        found, _ = compare(up, our, allowed_differences(), "capa")
        problems += [f"step {step}: {line}" for line in found]
    assert not problems, (
        "differences from upstream not listed in docs/upstream-differences.md:\n"
        + "\n".join(problems)
    )
