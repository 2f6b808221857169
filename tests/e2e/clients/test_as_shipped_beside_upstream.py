"""Beside upstream Cluster API as it ships: upstream's providers and ours as Pods on a real node.

The operator guide's "Beside upstream Cluster API" install, run as a platform team runs it,
on a management cluster of its own (``RealNode`` "beside-node", pod subnet 10.244.63.0/24,
so it runs beside test_as_shipped.py under pytest-xdist), in the order of the guide:

1. Upstream's managers, built from the pinned module as ``bench/upstream/build.sh`` builds
   them, each in an image the way cert-manager's are built here (``upstream.manager_image``:
   the static binary alone, non-root, entrypoint ``/manager``), named as upstream's release
   names them (``registry.k8s.io/cluster-api/...:v1.14.2``). The components are not
   rewritten: the local mirror renders them as the release does (``upstream.as_released``:
   that image, ``imagePullPolicy: IfNotPresent``), so the kubelet finds the image loaded
   into the node's containerd and pulls nothing, which is what a user installing the
   release sees. Our image is ``make image``'s, as in test_as_shipped.py.
2. ``EXP_MACHINE_POOL=false clusterctl init`` of upstream's core (the guide's first command),
   then ``clusterctl init --bootstrap kubeadm`` of upstream's kubeadm bootstrap provider with
   its MachinePool gate on: the guide has pools bootstrapped by upstream's KubeadmConfig, and
   the same variable in one ``init`` would turn its gate off too, where it ignores every
   KubeadmConfig a MachinePool owns (``getConfigOwner`` in its ``reconcilers/kubeadmconfig``
   lists MachinePool owners only with the gate on), so the pool would never get bootstrap
   data. Their Pods Ready; their namespaces then labelled to enforce the Pod Security
   Standard "restricted", which the apiserver accepts without a warning only when the Pods
   running there meet it (upstream's manifests leave the label out, but their Pods meet it).
   Then ours as the guide says: ``deploy/generate.py clusterctl-repo --beside-upstream`` and
   ``clusterctl init --addon machinepool --infrastructure sim``; our Pods Ready, the
   inventory naming upstream's core and bootstrap beside our addon, and our core takes
   MachinePool admission and conversion over.
3. One Cluster with a MachineDeployment (reconciled by upstream's core Pod: MachineSet,
   Machines, Node refs) and a MachinePool (by ours, its KubeadmConfig by upstream's
   bootstrap Pod, its instances by our Sim Pod) side by side: both reach 2 ready replicas,
   each replica a Node in the workload cluster with the providerID its Machine has.

Stand-ins, each for what no provider here offers:

- The Sim provider has infrastructure for pools only (SimMachinePool; its SimMachines are a
  pool's), no machine template, so the MachineDeployment's infrastructure is the schema-less
  ``TestMachineTemplate`` of tests/support/upstream.py, and this module plays its provider
  (``provision``): each TestMachine upstream's MachineSet creates gets a providerID, its Node
  in the workload cluster (Ready, as a kubelet would register it) and ``provisioned``. Its
  bootstrap is a ``dataSecretName``: no bootstrap data is consumed by that stand-in.
- The Cluster's infrastructure is a provisioned ``TestCluster`` and its status is written as
  a control-plane provider would (``cluster_namespace``): the machinepool-sim flavor's
  Cluster, which names no infrastructure, is refused by upstream's Cluster webhook ("one of
  spec.controlPlaneRef, spec.infrastructureRef or spec.topology must be set"), so the pool's
  objects come from the flavor (``clusterctl generate cluster``) without its Cluster.
- Upstream's releases come from the local mirror (``clusterctl_mirror``), first in the
  guide's clusterctl.yaml, as in test_clusterctl_beside_upstream.py.

Markers those of test_as_shipped.py; upstream's managers are built from the Go module proxy
as clusterctl is, so ``clusterctl`` covers them (as for test_clusterctl_beside_upstream.py).
``MACHINEPOOL_AS_SHIPPED_REPORT=docs/as-shipped.md`` writes the figures into this module's
section of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio
import yaml
from tests.support import certmanager, eventually, wait_established, wait_for
from tests.support.builders import CLUSTER
from tests.support.resources import MACHINE_DEPLOYMENTS, MACHINE_POOLS, MACHINES
from tests.support.upstream import (
    TEST_CRDS,
    TEST_MACHINE_TEMPLATES,
    TEST_MACHINES,
    cluster_namespace,
    clusterctl_mirror,
)

from machinepool.api.meta import format_time
from machinepool.controlplane import ControlPlane, RealNode, WorkloadCluster, images, upstream
from machinepool.runtime import CRDS, NAMESPACES, NODES, AlreadyExists, Client, Obj, Resource
from machinepool.webhooks import beside

from .harness import (
    NAMESPACE,
    NO_VERSION_CHECK,
    VERSION,
    Installed,
    build_clusterctl,
    kubectl,
    load_generator,
    ready,
    reported,
    run,
)

pytestmark = [
    pytest.mark.realnode,
    pytest.mark.image,
    pytest.mark.clusterctl,
    pytest.mark.certmanager,
]

NODE = RealNode(name="beside-node", pod_subnet="10.244.63.0/24", routed_pods=True)
"""A pod subnet of its own (test_as_shipped.py's node has 10.244.61.0/24)."""
UPSTREAM_PODS = {
    "capi-system": "cluster.x-k8s.io/provider=cluster-api",
    "capi-kubeadm-bootstrap-system": "cluster.x-k8s.io/provider=bootstrap-kubeadm",
}
"""Upstream's providers' namespaces and their Pods' label, as its release names them."""
OUR_PODS = {
    "machinepool-system": "control-plane=machinepool-controller-manager",
    "machinepool-sim-system": "control-plane=machinepool-sim-controller-manager",
}
RESTRICTED = "pod-security.kubernetes.io/enforce=restricted"
CERT_MANAGER_TEST = "cert-manager-test"
POOL = f"{CLUSTER}-mp-0"
DEPLOYMENT = "md"
REPLICAS = 2
READY = 240.0
"""Seconds for Pods to turn Ready: first sandboxes and a 450 MiB image on two busy cores."""
FIGURES: dict[str, str] = {}
ABOUT = (
    "Upstream's core and kubeadm bootstrap managers built into images and installed first by\n"
    "`clusterctl init`, then ours added as the operator guide's addon; a MachineDeployment and\n"
    "a MachinePool side by side."
)


@pytest.fixture(scope="module", autouse=True)
def report(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The module's figures, written at the end into its section of the as-shipped report
    when ``$MACHINEPOOL_AS_SHIPPED_REPORT`` names it (docs/as-shipped.md)."""
    yield from reported(request, ABOUT, FIGURES)


# -- the management cluster, the images and the providers -----------------------------------


@pytest.fixture(scope="module")
def management(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane whose kube-apiserver reports its version (upstream's manager refuses
    an unversioned one), with a real node whose containerd holds our image and upstream's."""
    built = [images.build(images.named("machinepool"))]
    for target in ("manager", "bootstrap"):
        built.append(images.build(upstream.manager_image(target, upstream.build(target))))
    # A short folder name: containerd's socket path, under it, must stay within 104 bytes
    # (under pytest-xdist the base is /tmp/pytest-of-root/pytest-<n>/popen-gw<i>/).
    cp = ControlPlane(
        tmp_path_factory.mktemp("beside"),
        node=NODE,
        binaries=upstream.build("controlplane"),
    )
    cp.start()
    try:
        started = time.monotonic()
        for image in built:
            cp.node.load_image(image.archive)
        FIGURES["upstream's images"] = "; ".join(
            image.describe().split(";")[0].removeprefix("image ") for image in built[1:]
        )
        FIGURES["images loaded into the node's containerd"] = f"{time.monotonic() - started:.0f} s"
        yield cp
    finally:
        cp.stop()


def clusterctl(binary: Path, *args: str, env: dict[str, str] | None = None) -> str:
    result = run([str(binary), *args], env={**NO_VERSION_CHECK, **(env or {})})
    assert result.returncode == 0, f"clusterctl {' '.join(args)}:\n{result.stderr}"
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """clusterctl.yaml for upstream's own install (its mirror alone), and the operator
    guide's (``--beside-upstream``, the mirror first)."""
    workdir = tmp_path_factory.mktemp("clusterctl")
    mirror = clusterctl_mirror(workdir / "mirror", bootstrap=True)
    upstream_config = workdir / "upstream-clusterctl.yaml"
    upstream_config.write_text(
        yaml.safe_dump({"providers": mirror, "cert-manager": {"externallyProvisioned": "true"}})
    )
    config = load_generator().clusterctl_repository(
        workdir / "repo", external_cert_manager=True, beside_upstream=True
    )
    body = yaml.safe_load(config.read_text())
    body["providers"][:0] = mirror  # where clusterctl's built-in entries would be, online
    config.write_text(yaml.safe_dump(body))
    return upstream_config, config


async def cert_manager_check_done(client: Client) -> None:
    """Until the namespace of the last ``init``'s cert-manager check is deleted. Each ``init``
    creates an Issuer and a Certificate in ``cert-manager-test`` to see that cert-manager
    works, then deletes them with the namespace; a next ``init`` while it is still
    terminating has its Issuer refused (no new content in a terminating namespace) and
    retries until its timeout (once here, on a loaded machine, past our 300 s)."""
    await wait_for(
        client, NAMESPACES, None, CERT_MANAGER_TEST, lambda obj: obj is None, within=READY,
        what="clusterctl's cert-manager check's namespace deleted",
    )  # fmt: skip


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def installed(
    management: ControlPlane, configs: tuple[Path, Path]
) -> AsyncIterator[Installed]:
    """Upstream's providers by ``clusterctl init``, their Pods Ready under "restricted"; then
    ours as the operator guide adds them, our core holding MachinePool admission."""
    binary = await asyncio.to_thread(build_clusterctl)
    upstream_config, config = configs
    kubeconfig = f"--kubeconfig={management.kubeconfig}"
    uv = upstream.version()
    async with await Client.from_kubeconfig(management.kubeconfig) as client:
        await wait_for(client, NODES, None, NODE.name, ready, within=READY, what="Node Ready")
        await certmanager.install_cert_manager(management, client)
        started = time.monotonic()
        done = Installed(management, client, "")
        done.init_output += await asyncio.to_thread(
            clusterctl, binary, "init", kubeconfig, f"--config={upstream_config}",
            f"--core=cluster-api:{uv}", "--bootstrap=-", "--control-plane=-",
            env={"EXP_MACHINE_POOL": "false"},
        )  # fmt: skip
        await done.wait_pods(dict(list(UPSTREAM_PODS.items())[:1]), within=READY)
        await cert_manager_check_done(client)
        done.init_output += await asyncio.to_thread(
            clusterctl, binary, "init", kubeconfig, f"--config={upstream_config}",
            f"--bootstrap=kubeadm:{uv}",
        )  # fmt: skip
        await done.wait_pods(UPSTREAM_PODS, within=READY)
        FIGURES["upstream's `clusterctl init` to its Pods Ready"] = (
            f"{time.monotonic() - started:.1f} s"
        )
        for namespace in UPSTREAM_PODS:
            labelled = await asyncio.to_thread(
                kubectl, management.kubeconfig, "label", "namespace", namespace, RESTRICTED
            )
            assert labelled.returncode == 0, labelled.stderr
            assert "Warning" not in labelled.stderr, f"{namespace}: {labelled.stderr}"

        started = time.monotonic()
        await cert_manager_check_done(client)
        ours = await asyncio.to_thread(
            clusterctl, binary, "init", kubeconfig, f"--config={config}",
            f"--addon=machinepool:{VERSION}", f"--infrastructure=sim:{VERSION}",
        )  # fmt: skip
        done.init_output += ours
        await done.wait_pods(OUR_PODS, within=READY)

        async def taken_over() -> bool:
            crd = await client.get(CRDS, "machinepools.cluster.x-k8s.io")
            service = crd["spec"]["conversion"]["webhook"]["clientConfig"].get("service") or {}
            return service.get("name") == beside.WEBHOOK_SERVICE

        try:
            await eventually(taken_over, "MachinePool conversion through our Service", within=60)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{done.logs()}") from None
        FIGURES["our `clusterctl init --addon` to our Pods Ready and MachinePools taken over"] = (
            f"{time.monotonic() - started:.1f} s"
        )
        yield done


async def test_upstream_first_then_ours_as_the_operator_guide_says(installed: Installed) -> None:
    """The inventory is upstream's core and bootstrap beside our addon and Sim (no second
    core); every Pod runs its own image, the one loaded into the node, in a namespace that
    enforces "restricted"; upstream's core runs with its MachinePool gate off, its kubeadm
    bootstrap provider with it on."""
    assert "Skipping installing cert-manager" in installed.init_output
    providers = json.loads(
        installed.kubectl("get", "providers.clusterctl.cluster.x-k8s.io", "-A", "-o", "json")
    )
    kinds = {(p["type"], p["providerName"], p["version"]) for p in providers["items"]}
    uv = upstream.version()
    assert kinds == {
        ("CoreProvider", "cluster-api", uv),
        ("BootstrapProvider", "kubeadm", uv),
        ("AddonProvider", "machinepool", VERSION),
        ("InfrastructureProvider", "sim", VERSION),
    }
    released = {
        namespace: f"{upstream.RELEASE_REGISTRY}/{upstream.RELEASE_IMAGES[target]}:{uv}"
        for namespace, target in zip(UPSTREAM_PODS, ("manager", "bootstrap"), strict=True)
    }
    ours = f"docker.io/library/{images.named('machinepool').reference}"
    for namespace, pod in installed.pods.items():
        labels = json.loads(installed.kubectl("get", "namespace", namespace, "-o", "json"))
        assert labels["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        assert pod["spec"]["nodeName"] == NODE.name
        (container,) = pod["status"]["containerStatuses"]
        assert container["image"] == released.get(namespace, ours), "the image loaded, no other"
        assert container["restartCount"] == 0, installed.logs()
    gates = {
        namespace: next(
            arg for arg in installed.pods[namespace]["spec"]["containers"][0]["args"]
            if arg.startswith("--feature-gates=")
        )
        for namespace in UPSTREAM_PODS
    }  # fmt: skip
    assert "MachinePool=false" in gates["capi-system"]
    assert "MachinePool=true" in gates["capi-kubeadm-bootstrap-system"]


# -- a MachineDeployment and a MachinePool side by side --------------------------------------


@pytest.fixture(scope="module")
def workload(management: ControlPlane) -> Iterator[WorkloadCluster]:
    cluster = management.start_workload(f"w-{uuid.uuid4().hex[:8]}")
    try:
        yield cluster
    finally:
        management.stop_workload(cluster.name)


def node_ready() -> Obj:
    """A Node's status as a healthy kubelet posts it: Ready, and no pressure (upstream's
    Machine NodeHealthy is Unknown without the pressure conditions)."""
    now = format_time(datetime.now(UTC))
    conditions = [
        {"type": kind, "status": status, "reason": reason, "message": "",
         "lastHeartbeatTime": now, "lastTransitionTime": now}
        for kind, status, reason in (
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady"),
        )
    ]  # fmt: skip
    return {"status": {"conditions": conditions}}


async def provision(client: Client, workload: Client) -> None:
    """The MachineDeployment's infrastructure provider, played here (module docstring): each
    TestMachine gets a providerID, its Node registered Ready in the workload cluster as its
    kubelet would, then ``provisioned`` with a Ready condition, as a provider reports."""
    done: set[str] = set()
    while True:
        for machine in (await client.list(TEST_MACHINES, NAMESPACE)).items:
            name = machine["metadata"]["name"]
            if name in done:
                continue
            provider_id = f"test:///{DEPLOYMENT}/{name}"
            node = {"metadata": {"name": name}, "spec": {"providerID": provider_id}}
            with contextlib.suppress(AlreadyExists):
                await workload.create(NODES, node)
            await workload.patch(NODES, name, node_ready(), subresource="status")
            await client.patch(
                TEST_MACHINES, name, {"spec": {"providerID": provider_id}}, NAMESPACE
            )
            now = format_time(datetime.now(UTC))
            status = {
                "status": {
                    "initialization": {"provisioned": True},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Provisioned",
                                    "message": "", "lastTransitionTime": now}],
                }
            }  # fmt: skip
            await client.patch(TEST_MACHINES, name, status, NAMESPACE, subresource="status")
            done.add(name)
        await asyncio.sleep(0.5)


def machine_deployment() -> list[tuple[Resource, Obj]]:
    """The MachineDeployment of ``REPLICAS`` and its TestMachineTemplate."""
    template = {
        "apiVersion": TEST_MACHINE_TEMPLATES.api_version,
        "kind": "TestMachineTemplate",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": {"template": {"spec": {}}},
    }
    labels = {"deployment": DEPLOYMENT}
    deployment = {
        "apiVersion": MACHINE_DEPLOYMENTS.api_version,
        "kind": "MachineDeployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": {
            "clusterName": CLUSTER,
            "replicas": REPLICAS,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "clusterName": CLUSTER,
                    "version": "v1.34.4",
                    "bootstrap": {"dataSecretName": f"{DEPLOYMENT}-bootstrap"},
                    "infrastructureRef": {"apiGroup": TEST_MACHINE_TEMPLATES.group,
                                          "kind": "TestMachineTemplate", "name": DEPLOYMENT},
                },
            },
        },
    }  # fmt: skip
    return [(TEST_MACHINE_TEMPLATES, template), (MACHINE_DEPLOYMENTS, deployment)]


def pool_objects(installed: Installed, workload: WorkloadCluster, config: Path) -> str:
    """The machinepool-sim flavor's objects (``clusterctl generate cluster``) but its Cluster
    (module docstring), its endpoint the workload apiserver as the Pods reach it."""
    assert workload.pod_url is not None
    host, port = workload.pod_url.removeprefix("https://").split(":")
    generated = run(
        [str(build_clusterctl()), "generate", "cluster", CLUSTER,
         f"--kubeconfig={installed.kubeconfig}", f"--config={config}",
         f"--infrastructure=sim:{VERSION}", "--flavor=machinepool-sim",
         "--kubernetes-version=v1.34.4", f"--worker-machine-count={REPLICAS}",
         f"--target-namespace={NAMESPACE}"],
        env={**NO_VERSION_CHECK, "CONTROL_PLANE_ENDPOINT_HOST": host,
             "CONTROL_PLANE_ENDPOINT_PORT": port, "SIM_BOOT_DELAY_SECONDS": "1"},
    )  # fmt: skip
    assert generated.returncode == 0, generated.stderr
    docs = [d for d in yaml.safe_load_all(generated.stdout) if d and d["kind"] != "Cluster"]
    assert {d["kind"] for d in docs} == {"KubeadmConfig", "SimMachinePool", "MachinePool"}
    return yaml.safe_dump_all(docs)


async def test_a_machine_deployment_and_a_machine_pool_side_by_side(
    installed: Installed, workload: WorkloadCluster, configs: tuple[Path, Path]
) -> None:
    """One Cluster, a MachineDeployment (upstream's core Pod) and a MachinePool (ours, its
    KubeadmConfig rendered by upstream's bootstrap Pod): each at 2 ready replicas, and the
    workload cluster's Nodes exactly theirs, by providerID."""
    client = installed.client
    for crd in TEST_CRDS:
        await client.apply(CRDS, crd, field_manager="as-shipped", force=True)
    for crd in TEST_CRDS:
        await wait_established(client, crd["metadata"]["name"])
    await cluster_namespace(client, NAMESPACE, workload, server=workload.pod_url, ca=True)
    manifest = await asyncio.to_thread(pool_objects, installed, workload, configs[1])
    started = time.monotonic()
    applied = await asyncio.to_thread(installed.kubectl, "apply", "-f", "-", stdin=manifest)
    assert f"machinepool.cluster.x-k8s.io/{POOL} created" in applied
    for resource, obj in machine_deployment():
        await client.create(resource, obj, NAMESPACE)

    async def both_ready() -> bool:
        pool = await client.get(MACHINE_POOLS, POOL, NAMESPACE)
        deployment = await client.get(MACHINE_DEPLOYMENTS, DEPLOYMENT, NAMESPACE)
        return all(
            (obj.get("status") or {}).get("readyReplicas") == REPLICAS for obj in (pool, deployment)
        )

    async with await Client.from_kubeconfig(workload.kubeconfig) as nodes:
        infra = asyncio.create_task(provision(client, nodes))
        try:
            await eventually(both_ready, "both at 2 ready replicas", within=180, interval=1)
        except TimeoutError as exc:
            state = installed.kubectl("get", "mp,md,ms,machines,kubeadmconfigs,testmachines",
                                      "-n", NAMESPACE, "-o", "wide")  # fmt: skip
            raise AssertionError(f"{exc}\n{state}\n{installed.logs()}") from None
        finally:
            infra.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await infra
        FIGURES["applied to the MachineDeployment and the MachinePool at 2 ready replicas"] = (
            f"{time.monotonic() - started:.1f} s"
        )
        listed = (await nodes.list(NODES)).items
    pool = await client.get(MACHINE_POOLS, POOL, NAMESPACE)
    assert pool["status"]["phase"] == "Running"
    machines = (await client.list(MACHINES, NAMESPACE, label_selector="deployment=md")).items
    assert len(machines) == REPLICAS
    assert all(m["status"]["nodeRef"]["name"] for m in machines), "Node refs by upstream's core"
    deployed = sorted(m["spec"]["providerID"] for m in machines)
    assert sorted(n["spec"]["providerID"] for n in listed) == sorted(
        [*pool["spec"]["providerIDList"], *deployed]
    )
