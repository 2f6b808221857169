"""ClusterClass pools: upstream's topology controller makes the MachinePool, our core runs it.

One management cluster as upstream's core provider leaves it (``upstream_management``), with
upstream's core manager at ``ClusterTopology=true`` and ``MachinePool=false`` (its ClusterClass
and topology controllers make and update the pool's objects; it reconciles no MachinePool),
and ours beside it: the core with ``--beside-upstream``, the bootstrap and Sim providers and
the node simulator. The ClusterClass names our KubeadmConfigTemplate and
SimMachinePoolTemplate for its machinePools class; its control plane and infra cluster are
schema-less ``Test*`` kinds whose status the test writes as their providers would (the
topology controller needs a control plane in every class, and waits for it to report its
version before it upgrades workers).

``test_a_clusterclass_pool_is_made_scaled_upgraded_and_rotated``, the commands of
docs/guide-clusterclass.md:

1. A Cluster with a topology of one MachinePool of 2 at v1.33.4: the pool, its KubeadmConfig
   and its SimMachinePool are made by upstream, Running under ours with 2 Ready Nodes.
2. The topology's replicas to 3: the pool scales.
3. The topology's version to v1.34.4: the control plane is upgraded first (the pool's version
   unchanged until the control plane reports the new one), then the pool rolls within its
   SimMachinePool's budgets (maxSurge 1, maxUnavailable 0).
4. The ClusterClass names a new SimMachinePoolTemplate (another instance type): upstream
   updates the pool's SimMachinePool in place (same name, the infra reference unchanged, its
   cloned-from annotation naming the new template) and the pool replaces every instance,
   again within its budgets.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from tests.reliability.harness import ControllerProcess, World
from tests.support import eventually
from tests.support.builders import CLUSTER
from tests.support.topology import (
    CLASS,
    CLONED_FROM,
    CLUSTER_CLASSES,
    MEDIUM,
    SMALL,
    TOPOLOGY_POOL,
    control_plane_asked,
    control_plane_at,
    create_class_and_cluster,
    machine_pools_class,
    patch_topology,
    provision_infra_cluster,
    topology_pools,
)
from tests.support.upstream import UpstreamProcess, upstream_management

from machinepool.api.meta import dig
from machinepool.controlplane import ControlPlane, WorkloadCluster
from machinepool.controlplane.process import free_port
from machinepool.runtime import NAMESPACES, Client, Obj, PatchType

pytestmark = pytest.mark.timeout(600)

NS = "topology"
OLD, NEW = "v1.33.4", "v1.34.4"
TOPOLOGY_POOL_LABEL = "topology.cluster.x-k8s.io/pool-name"


@dataclass
class Env:
    cp: ControlPlane
    workload: WorkloadCluster
    client: Client


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    """Upstream's core (topology on, MachinePools off) and ours beside it, as the operator
    guide's "Beside upstream" installs them."""
    workdir = tmp_path_factory.mktemp("topology-beside")
    async with upstream_management(workdir) as (cp, client, binary, webhook):
        workload = await asyncio.to_thread(cp.start_workload, CLUSTER)
        procs: list[ControllerProcess] = [
            UpstreamProcess(
                name="upstream",
                kubeconfig=cp.kubeconfig,
                components="",
                log=workdir / "upstream.log",
                binary=binary,
                webhook=webhook,
                cluster_topology=True,
            ),
            _ours(workdir, cp.kubeconfig, "providers", "bootstrap,sim"),
            _ours(workdir, cp.kubeconfig, "kubelet", "kubelet"),
            _ours(
                workdir,
                cp.kubeconfig,
                "core",
                "core",
                "--beside-upstream",
                "--register-webhooks",
                "--webhook-port",
                str(free_port()),
            ),
        ]
        try:
            for proc in procs:
                proc.start()
            await asyncio.gather(*(p.wait_ready(timeout=180) for p in procs))
            yield Env(cp, workload, client)
        finally:
            for proc in procs:
                proc.stop()


def _ours(
    workdir: Path, kubeconfig: Path, name: str, components: str, *extra: str
) -> ControllerProcess:
    return ControllerProcess(
        name=name,
        kubeconfig=kubeconfig,
        components=components,
        log=workdir / f"{name}.log",
        lease_name=f"machinepool-{name}",
        extra_args=extra,
    )


@dataclass
class Budget:
    """The most instances a pool had at once and the fewest of its Nodes Ready, sampled on
    every watched change while a rollout runs."""

    most_live: int = 0
    fewest_ready: int | None = None


class Topology(World):
    """The world of one topology pool: its MachinePool and SimMachinePool found by the
    topology's label, whatever names upstream gave them."""

    def pool(self) -> Obj | None:
        pools = self.objects("machinepools")
        return pools[0] if len(pools) == 1 else None

    def infra_name(self) -> str:
        return str(dig(self.pool(), "spec", "template", "spec", "infrastructureRef", "name"))

    def serving(self, replicas: int, version: str, budget: Budget | None = None) -> bool:
        """The pool reports ``replicas`` Ready on ``version``, and the workload agrees."""
        mp = self.pool()
        if mp is None:
            return False
        live = self.live(self.infra_name())
        pids = {r.provider_id for r in live}
        ready = [n for n in self.ready_nodes(version) if n["spec"].get("providerID") in pids]
        if budget is not None:
            budget.most_live = max(budget.most_live, len(live))
            ready_now = len([n for n in self.ready_nodes() if n["spec"].get("providerID") in pids])
            budget.fewest_ready = (
                ready_now if budget.fewest_ready is None else min(budget.fewest_ready, ready_now)
            )
        status = mp.get("status") or {}
        return (
            dig(mp, "spec", "template", "spec", "version") == version
            and status.get("phase") == "Running"
            and status.get("readyReplicas") == replicas
            and status.get("replicas") == replicas
            and len(status.get("nodeRefs") or []) == replicas
            and len(live) == replicas
            and len(ready) == replicas
        )


async def test_a_clusterclass_pool_is_made_scaled_upgraded_and_rotated(env: Env) -> None:
    client = env.client
    async with await Client.from_kubeconfig(env.workload.kubeconfig) as workload_client:
        world = await Topology.start(client, workload_client, NS)
        assert isinstance(world, Topology)
        try:
            await client.create(NAMESPACES, {"metadata": {"name": NS}})
            await create_class_and_cluster(client, NS, env.workload, version=OLD, replicas=2)
            await provision_infra_cluster(client, NS)
            await control_plane_at(client, NS, OLD)

            # 1. Made by upstream's topology controller, run by ours.
            await world.until(
                lambda: world.serving(2, OLD), "the topology's pool runs 2 at v1.33.4"
            )
            mp = world.pool()
            assert mp is not None
            labels = mp["metadata"]["labels"]
            assert labels[TOPOLOGY_POOL_LABEL] == TOPOLOGY_POOL, labels
            assert "topology.cluster.x-k8s.io/owned" in labels, labels
            assert mp["spec"]["replicas"] == 2
            infra_name = world.infra_name()
            infra = world.get("simmachinepools", infra_name)
            assert infra is not None
            assert infra["metadata"]["annotations"][CLONED_FROM] == SMALL
            assert infra["spec"]["template"]["instanceType"] == "sim.small"
            controller = next(
                o for o in infra["metadata"]["ownerReferences"] if o.get("controller")
            )
            assert controller["kind"] == "MachinePool", "our core adopted the topology's infra pool"

            # 2. Replicas from the topology.
            await patch_topology(client, NS, {"workers": topology_pools(3)})
            await world.until(
                lambda: world.serving(3, OLD), "the pool scales to 3 from the topology"
            )

            # 3. A version bump: the control plane first, then the pool, within its budgets.
            before = {r.id for r in world.live(infra_name)}
            await patch_topology(client, NS, {"version": NEW})
            await eventually(
                lambda: control_plane_asked(client, NS, NEW), "the cp asked for v1.34.4"
            )
            assert dig(world.pool(), "spec", "template", "spec", "version") == OLD, (
                "the pool waits for the control plane"
            )
            budget = Budget()
            await control_plane_at(client, NS, NEW)
            await world.until(
                lambda: world.serving(3, NEW, budget), "the pool rolls to v1.34.4 from the topology"
            )
            assert not before & {r.id for r in world.live(infra_name)}, "every instance replaced"
            assert budget.most_live <= 4, f"maxSurge 1: at most 4 instances, saw {budget.most_live}"
            assert budget.fewest_ready == 3, f"maxUnavailable 0: saw {budget.fewest_ready} Ready"

            # 4. A new infra template in the ClusterClass: the SimMachinePool is updated in
            # place, as upstream's topology does for pools, and the pool rolls onto it.
            before = {r.id for r in world.live(infra_name)}
            await client.patch(
                CLUSTER_CLASSES,
                CLASS,
                {"spec": {"workers": {"machinePools": machine_pools_class(MEDIUM)}}},
                NS,
                patch_type=PatchType.MERGE,
            )
            budget = Budget()

            def rotated() -> bool:
                sim = world.get("simmachinepools", infra_name) or {}
                return (
                    dig(sim, "metadata", "annotations", CLONED_FROM) == MEDIUM
                    and dig(sim, "spec", "template", "instanceType") == "sim.medium"
                    and not before & {r.id for r in world.live(infra_name)}
                    and world.serving(3, NEW, budget)
                )

            await world.until(rotated, "the pool rolls onto the ClusterClass's new template")
            assert world.infra_name() == infra_name, "the infra reference keeps its name"
            assert budget.most_live <= 4, f"maxSurge 1: at most 4 instances, saw {budget.most_live}"
            assert budget.fewest_ready == 3, f"maxUnavailable 0: saw {budget.fewest_ready} Ready"
        finally:
            await world.stop()
