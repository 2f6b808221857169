"""``clusterctl upgrade`` from the previous release to this build, while a pool of 5 runs.

The previous release is the commit deploy/releases.yaml names: its image is built from its own
source (``git archive`` of the commit) by the same builder as this build's, and its components
are the ones it shipped (its ``deploy/release``), laid out beside this build's in one local
clusterctl repository, as a provider's GitHub releases are. The user guide's upgrade, on a
management cluster with a real node and real cert-manager (as test_as_shipped.py):

1. ``clusterctl init`` at the previous version; a pool of 5 made from that version's cluster
   template, Running;
2. ``clusterctl upgrade plan`` offers this build for every provider, and ``clusterctl upgrade
   apply --contract v1beta2`` moves all three to it: each provider's Pod replaced by one
   running this build's image, the inventory at this version;
3. the new controllers reconcile the pool (its and its Sim pool's next generation observed)
   and then scale it, and across the whole upgrade, from before ``apply`` until the new
   controllers have observed the pool: no instance created or terminated, no Node cordoned,
   added or deleted, no Machine created or deleted, and every read of the MachinePools
   (v1beta2, the stored version, as ``kubectl get mp`` does) answered.

What a v1beta1 read meets meanwhile is a figure, not a check: it goes through the conversion
webhook, which is down between the old Pod's end and the new one's readiness (the CRD points at
the core's Service, as upstream's core does; its Pod is replaced, not rolled, by ``clusterctl
upgrade``, which deletes a provider's Deployment before it creates the new one).

``MACHINEPOOL_AS_SHIPPED_REPORT=docs/as-shipped.md`` writes the figures into its section.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio
from tests.support import wait_for
from tests.support.resources import (
    MACHINE_POOLS,
    MACHINE_POOLS_V1BETA1,
    MACHINES,
    SIM_MACHINE_POOLS,
)

from machinepool.controlplane import ControlPlane, RealNode, WorkloadCluster, images
from machinepool.runtime import LEASES, NODES, SECRETS, ApiError, Client, Obj, PatchType, Resource
from machinepool.simworld.records import records_in

from .harness import (
    NAMESPACE,
    NO_VERSION_CHECK,
    REPO,
    VERSION,
    Installed,
    NodeHistory,
    build_clusterctl,
    load_generator,
    reported,
    run,
)
from .shipped import (
    INSTANCE_SELECTOR,
    POOL,
    READY,
    SELECTORS,
    clusterctl_init,
    generate_pool,
    management_cluster,
    wait_pool,
)

pytestmark = [
    pytest.mark.realnode,
    pytest.mark.image,
    pytest.mark.previous_release,
    pytest.mark.clusterctl,
    pytest.mark.certmanager,
]

NODE = RealNode(name="upgrade-node", pod_subnet="10.244.62.0/24", routed_pods=True)
"""Its own pod subnet, so that it runs beside test_as_shipped.py's node."""
PREVIOUS_VERSION, PREVIOUS_COMMIT = images.previous_release(REPO)
PREVIOUS = f"v{PREVIOUS_VERSION}"
REPLICAS = 5
FIGURES: dict[str, str] = {}
ABOUT = (
    f"The previous release ({PREVIOUS}, commit {PREVIOUS_COMMIT[:12]}, deploy/releases.yaml)\n"
    "installed by `clusterctl init`, a pool of 5, then `clusterctl upgrade apply` to this build."
)


@pytest.fixture(scope="module", autouse=True)
def report(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The module's figures, in its section of the as-shipped report (docs/as-shipped.md)."""
    yield from reported(request, ABOUT, FIGURES)


@pytest.fixture(scope="module")
def built() -> tuple[images.BuiltImage, images.BuiltImage]:
    """This build's image and the previous release's (no-ops when cached, as in CI)."""
    return images.build(images.named("machinepool")), images.build(
        images.named("machinepool-previous")
    )


@pytest.fixture(scope="module")
def management(
    tmp_path_factory: pytest.TempPathFactory, built: tuple[images.BuiltImage, ...]
) -> Iterator[ControlPlane]:
    with management_cluster(tmp_path_factory.mktemp("upgrade"), NODE, built, FIGURES) as cp:
        yield cp


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One local repository with both releases, each provider's versions side by side."""
    tree = images.release_tree(REPO, PREVIOUS_VERSION, PREVIOUS_COMMIT)
    config: Path = load_generator().clusterctl_repository(
        tmp_path_factory.mktemp("clusterctl-repo"),
        external_cert_manager=True,
        earlier={PREVIOUS: tree},
    )
    return config


@pytest.fixture(scope="module")
def workload(management: ControlPlane) -> Iterator[WorkloadCluster]:
    cluster = management.start_workload("w-upgrade")
    try:
        yield cluster
    finally:
        management.stop_workload(cluster.name)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def previous(
    management: ControlPlane, repository: Path, workload: WorkloadCluster
) -> AsyncIterator[Installed]:
    """The previous release installed by ``clusterctl init``, running a pool of 5."""
    clusterctl = build_clusterctl()
    async with await Client.from_kubeconfig(management.kubeconfig) as client:
        installed = await clusterctl_init(
            management, client, clusterctl, repository, {}, version=PREVIOUS
        )
        await generate_pool(installed, workload, clusterctl, repository, REPLICAS,
                            version=PREVIOUS)  # fmt: skip
        yield installed


def inventory(installed: Installed) -> set[tuple[str, str]]:
    """(provider, version) of clusterctl's inventory."""
    listed = json.loads(
        installed.kubectl("get", "providers.clusterctl.cluster.x-k8s.io", "-A", "-o", "json")
    )
    return {(p["providerName"], p["version"]) for p in listed["items"]}


@dataclass
class Disruptions:
    """What the upgrade must not do, as watches and reads see it while it runs."""

    instances: set[str] = field(default_factory=set)
    """Every instance id any instance record held."""
    machines_added: set[str] = field(default_factory=set)
    machines_deleted: set[str] = field(default_factory=set)
    reads: int = 0
    refused: list[str] = field(default_factory=list)
    """MachinePool reads (v1beta2) that got no answer, with why."""
    old_reads: int = 0
    old_refused: int = 0
    """v1beta1 reads, through the conversion webhook: a figure."""

    async def follow_instances(self, client: Client, resource_version: str) -> None:
        async for event in client.watch(SECRETS, NAMESPACE, resource_version=resource_version,
                                        label_selector=INSTANCE_SELECTOR):  # fmt: skip
            if event.type in ("ADDED", "MODIFIED", "DELETED"):
                self.instances |= {record.id for record in records_in(event.object)}

    async def follow_machines(self, client: Client, resource_version: str) -> None:
        async for event in client.watch(MACHINES, NAMESPACE, resource_version=resource_version):
            name = event.object.get("metadata", {}).get("name", "")
            if event.type == "ADDED":
                self.machines_added.add(name)
            elif event.type == "DELETED":
                self.machines_deleted.add(name)

    async def read_pools(self, client: Client) -> None:
        """List the MachinePools as a user's ``kubectl get`` would, four times a second."""
        while True:
            for res in (MACHINE_POOLS, MACHINE_POOLS_V1BETA1):
                try:
                    listed = await client.list(res, NAMESPACE)
                    answered = [p["metadata"]["name"] for p in listed.items] == [POOL]
                    error = "" if answered else f"listed {len(listed.items)} pools"
                except (ApiError, OSError, TimeoutError) as exc:
                    error = str(exc)
                if res is MACHINE_POOLS:
                    self.reads += 1
                    if error:
                        self.refused.append(error)
                else:
                    self.old_reads += 1
                    self.old_refused += bool(error)
            await asyncio.sleep(0.25)


def instance_ids(installed: Installed) -> set[str]:
    return {
        record.id
        for secret in installed.objects("secrets", "-l", INSTANCE_SELECTOR)
        for record in records_in(secret)
    }


async def observed(client: Client, res: Resource, name: str, patch: Obj, what: str) -> None:
    """Patch ``name`` to its next generation and wait until its controller observed it."""
    changed = await client.patch(res, name, patch, NAMESPACE, patch_type=PatchType.MERGE)
    generation = changed["metadata"]["generation"]
    await wait_for(
        client, res, NAMESPACE, name,
        lambda obj: ((obj or {}).get("status") or {}).get("observedGeneration") == generation,
        within=READY, what=f"generation {generation} observed by {what}",
    )  # fmt: skip


LEASES_BY_NAMESPACE = {
    "machinepool-system": "machinepool-core-controller",
    "machinepool-kubeadm-bootstrap-system": "machinepool-kubeadm-bootstrap-controller",
    "machinepool-sim-system": "machinepool-sim-controller",
}
"""Each provider's Lease (its Deployment's ``--name``), in its namespace."""


async def leases_held_by_new_pods(installed: Installed) -> None:
    """Each provider's Lease held by its one Pod of this build: its controllers run."""
    for namespace, lease in LEASES_BY_NAMESPACE.items():
        pod = installed.pods[namespace]["metadata"]["name"]

        def held(obj: Obj | None, pod: str = pod) -> bool:
            holder = str((obj or {}).get("spec", {}).get("holderIdentity") or "")
            return holder.startswith(f"{pod}_")

        await wait_for(installed.client, LEASES, namespace, lease, held, within=READY,
                       what=f"held by {pod}")  # fmt: skip


async def test_upgrade_from_the_previous_release_keeps_the_running_pool(
    previous: Installed,
    workload: WorkloadCluster,
    built: tuple[images.BuiltImage, ...],
    repository: Path,
) -> None:
    installed, client = previous, previous.client
    clusterctl = build_clusterctl()
    as_user = [f"--kubeconfig={installed.kubeconfig}", f"--config={repository}"]
    names = ("cluster-api", "kubeadm", "sim")
    assert inventory(installed) == {(name, PREVIOUS) for name in names}
    old_image = f"docker.io/library/{built[1].spec.reference}"
    assert {p["spec"]["containers"][0]["image"] for p in installed.pods.values()} == {old_image}

    instances = instance_ids(installed)
    assert len(instances) == REPLICAS
    machines = {m["metadata"]["name"]: m["metadata"]["uid"] for m in installed.objects("machines")}
    (pool,) = installed.objects("machinepools")
    provider_ids = sorted(pool["spec"]["providerIDList"])

    async with await Client.from_kubeconfig(workload.kubeconfig) as workload_client:
        listed_nodes = await workload_client.list(NODES)
        history, seen = NodeHistory(), Disruptions(instances=set(instances))
        nodes = {n["metadata"]["name"]: n["metadata"]["uid"] for n in listed_nodes.items}
        secrets = await client.list(SECRETS, NAMESPACE, label_selector=INSTANCE_SELECTOR)
        listed_machines = await client.list(MACHINES, NAMESPACE)
        watchers = [
            asyncio.create_task(history.follow(workload_client, listed_nodes.resource_version)),
            asyncio.create_task(seen.follow_instances(client, secrets.resource_version)),
            asyncio.create_task(seen.follow_machines(client, listed_machines.resource_version)),
            asyncio.create_task(seen.read_pools(client)),
        ]
        try:
            plan = await asyncio.to_thread(
                run, [str(clusterctl), "upgrade", "plan", *as_user], env=NO_VERSION_CHECK,
            )  # fmt: skip
            assert plan.returncode == 0, plan.stderr
            for name in names:
                assert any(name in line and PREVIOUS in line and VERSION in line
                           for line in plan.stdout.splitlines()), plan.stdout  # fmt: skip
            started = time.monotonic()
            applied = await asyncio.to_thread(
                run, [str(clusterctl), "upgrade", "apply", *as_user, "--contract=v1beta2"],
                env=NO_VERSION_CHECK,
            )  # fmt: skip
            assert applied.returncode == 0, applied.stderr
            FIGURES["`clusterctl upgrade apply`"] = f"{time.monotonic() - started:.1f} s"
            new_image = f"docker.io/library/{built[0].spec.reference}"
            await installed.wait_pods(SELECTORS, within=READY, image=new_image)
            FIGURES["`clusterctl upgrade apply` to every Pod of this build Ready"] = (
                f"{time.monotonic() - started:.1f} s"
            )
            assert inventory(installed) == {(name, VERSION) for name in names}
            await leases_held_by_new_pods(installed)
            # The new controllers act on the pool: each observes its object's next generation
            # (a change that touches no instance: how many seconds a Machine must be Ready to
            # count as available; the boot delay of instances the Sim cloud makes later).
            await observed(client, MACHINE_POOLS, POOL, {"spec": {"minReadySeconds": 1}},
                           "the core")  # fmt: skip
            boot_delay = {"spec": {"sim": {"bootDelaySeconds": 2}}}
            await observed(client, SIM_MACHINE_POOLS, POOL, boot_delay, "the Sim provider")
            FIGURES["`clusterctl upgrade apply` to the pool observed by this build"] = (
                f"{time.monotonic() - started:.1f} s"
            )
        finally:
            for task in watchers:
                task.cancel()
            for task in watchers:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        nodes_after = {n["metadata"]["name"]: n["metadata"]["uid"]
                       for n in (await workload_client.list(NODES)).items}  # fmt: skip

    FIGURES["MachinePool reads (v1beta2) answered during the upgrade"] = (
        f"{seen.reads - len(seen.refused)} of {seen.reads}"
    )
    FIGURES["v1beta1 reads (through the conversion webhook) answered"] = (
        f"{seen.old_reads - seen.old_refused} of {seen.old_reads}"
    )
    assert seen.refused == [], "every MachinePool read answered"
    assert seen.instances == instances, "no instance created or terminated"
    assert instance_ids(installed) == instances
    assert (seen.machines_added, seen.machines_deleted) == (set(), set())
    assert {m["metadata"]["name"]: m["metadata"]["uid"]
            for m in installed.objects("machines")} == machines  # fmt: skip
    assert (history.added, history.deleted, history.cordoned) == (set(), set(), set())
    assert nodes_after == nodes
    (pool,) = installed.objects("machinepools")
    assert sorted(pool["spec"]["providerIDList"]) == provider_ids
    assert pool["status"]["phase"] == "Running"

    # And this build drives it on.
    installed.kubectl("scale", f"mp/{POOL}", "-n", NAMESPACE, f"--replicas={REPLICAS + 1}")
    await asyncio.to_thread(wait_pool, installed, REPLICAS + 1)
