"""machinepool as it ships: our image and our Pods, installed by ``clusterctl init`` on a real node.

Every other tier runs the controllers as host processes; this one runs what a platform team
installs. One management cluster for the module, with a real node
(``ControlPlane(node=RealNode(routed_pods=True))``: kubelet, containerd, kube-proxy; the
apiserver reaches the Pods' webhooks through their Services), and one workload cluster its Pods
reach through the node. In the order a user meets it:

1. The image ``make image`` builds (from the cache) is loaded into the node's containerd;
   ``clusterctl init`` from the local repository ``deploy/generate.py clusterctl-repo`` writes
   installs our core, bootstrap and Sim providers, and every Pod of theirs turns Ready, in
   namespaces that enforce the Pod Security Standard "restricted" (the shipped Namespaces
   say so). The time from ``init`` to every Pod Ready is a figure of docs/as-shipped.md.
2. Through the webhooks the core's Pod serves: ``clusterctl generate cluster | kubectl apply``
   makes a pool that runs (defaulted and validated by them), a change they forbid is refused
   with their messages, v1beta1 reads go through the conversion webhook, the pool scales and
   rolls to a new version (every Node replaced), a MachineHealthCheck has the Machine whose
   kubelet stopped replaced, and deleting the pool leaves nothing behind in either
   cluster.
3. ``/metrics`` through the core's metrics Service, scraped by a Pod of ours as Prometheus
   would: 200 with its ServiceAccount's token (bound to ``machinepool-metrics-reader``), 401
   without a token, 403 with the token of a ServiceAccount not bound to it.
4. Two replicas of the core: the Lease holder's Pod deleted, another replica takes the Lease
   and the pool converges on a new size; then the new holder's container killed (SIGKILL
   through the node's containerd), the kubelet restarts it in the same Pod, the Lease is
   taken again and the pool converges once more.
5. Last, the user guide's uninstall: ``clusterctl delete --all --include-crd
   --include-namespace`` refused while our objects exist, then, the Cluster deleted, our
   namespaces, CRDs and webhook configurations gone and what it leaves (the RBAC) exactly
   what the guide says, cert-manager untouched; on that emptied cluster, the
   self-signed overlay (``deploy/generate.py self-signed``, ``kubectl apply -k``) runs the
   core, its webhooks answering with the overlay's CA.

cert-manager: real, as it ships (v1.20.3, built here into images and run as Pods on the same
node: ``tests/support/certmanager.install_cert_manager``), installed before ``clusterctl init``,
which finds it installed; the core's webhook certificate and every CA bundle come from its
controller and CA injector.

Markers ``realnode``, ``image``, ``clusterctl`` and ``certmanager``: left out, with a line
saying why, where any of them cannot be had. ``MACHINEPOOL_AS_SHIPPED_REPORT=docs/as-shipped.md``
writes the figures.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
import yaml
from tests.support import eventually, wait_for
from tests.support.resources import CLUSTER_ROLE_BINDINGS

from machinepool.api.constants import POOL_NAME_LABEL
from machinepool.controlplane import ControlPlane, RealNode, WorkloadCluster, images
from machinepool.runtime import (
    LEASES,
    NAMESPACES,
    PODS,
    SERVICE_ACCOUNTS,
    Client,
    Obj,
    Resource,
)
from machinepool.simworld.cloud import SimCloud

from .harness import (
    NAMESPACE,
    VERSION,
    build_clusterctl,
    kubectl,
    load_generator,
    reported,
    run,
)
from .shipped import (
    CLUSTER,
    INSTANCE_SELECTOR,
    NO_VERSION_CHECK,
    POOL,
    PROVIDER_NAMESPACES,
    READY,
    Installed,
    clusterctl_init,
    generate_pool,
    management_cluster,
    ready,
    wait_pool,
)

pytestmark = [
    pytest.mark.realnode,
    pytest.mark.image,
    pytest.mark.clusterctl,
    pytest.mark.certmanager,
]

NODE = RealNode(name="shipped-node", pod_subnet="10.244.61.0/24", routed_pods=True)
"""A pod subnet of its own: the host routes it to this node (other nodes keep the default)."""
SERVICES = Resource("", "v1", "services", "Service")
KINDS = ("machinepools", "machines", "kubeadmconfigs", "simmachinepools", "simmachines")
"""What a pool is made of in the management cluster."""
FIGURES: dict[str, str] = {}
ABOUT = (
    "Our image loaded into a real node's containerd and our providers installed by\n"
    "`clusterctl init`, as the user guide says."
)


@pytest.fixture(scope="module", autouse=True)
def report(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The module's figures, written at the end into its section of the as-shipped report
    when ``$MACHINEPOOL_AS_SHIPPED_REPORT`` names it (docs/as-shipped.md)."""
    yield from reported(request, ABOUT, FIGURES)


# -- the management cluster, the image and the providers ------------------------------------


@pytest.fixture(scope="module")
def image() -> images.BuiltImage:
    """The controller image ``make image`` builds (a no-op when it is cached, as in CI)."""
    return images.build(images.named("machinepool"))


@pytest.fixture(scope="module")
def management(
    tmp_path_factory: pytest.TempPathFactory, image: images.BuiltImage
) -> Iterator[ControlPlane]:
    """A control plane with a real node whose containerd holds our image."""
    with management_cluster(tmp_path_factory.mktemp("as-shipped"), NODE, [image], FIGURES) as cp:
        yield cp


@pytest.fixture(scope="module")
def clusterctl() -> Path:
    return build_clusterctl()


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local repository and clusterctl.yaml, as the user guide has the user write them."""
    config: Path = load_generator().clusterctl_repository(
        tmp_path_factory.mktemp("clusterctl-repo"), external_cert_manager=True
    )
    return config


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def installed(
    management: ControlPlane, clusterctl: Path, repository: Path
) -> AsyncIterator[Installed]:
    """``clusterctl init`` as the user guide has it, then every provider Pod Ready."""
    async with await Client.from_kubeconfig(management.kubeconfig) as client:
        yield await clusterctl_init(management, client, clusterctl, repository, FIGURES)


async def test_init_runs_our_pods_ready_under_restricted_pod_security(
    installed: Installed, image: images.BuiltImage
) -> None:
    assert "Skipping installing cert-manager as it is already installed" in installed.init_output
    providers = json.loads(
        installed.kubectl("get", "providers.clusterctl.cluster.x-k8s.io", "-A", "-o", "json")
    )
    kinds = {(p["type"], p["providerName"], p["version"]) for p in providers["items"]}
    assert kinds == {
        ("CoreProvider", "cluster-api", VERSION),
        ("BootstrapProvider", "kubeadm", VERSION),
        ("InfrastructureProvider", "sim", VERSION),
    }
    tag = f"docker.io/library/{image.spec.reference}"
    for namespace, pod in installed.pods.items():
        ns = await installed.client.get(NAMESPACES, namespace)
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        assert pod["spec"]["nodeName"] == NODE.name
        (container,) = pod["status"]["containerStatuses"]
        assert container["image"] == tag, "the image loaded into the node, not another"
        assert container["restartCount"] == 0, installed.logs()


# -- a pool through the webhooks the Pods serve ---------------------------------------------


@pytest.fixture(scope="module")
def workload(management: ControlPlane) -> Iterator[WorkloadCluster]:
    cluster = management.start_workload(f"w-{uuid.uuid4().hex[:8]}")
    try:
        yield cluster
    finally:
        management.stop_workload(cluster.name)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def pool(
    installed: Installed, workload: WorkloadCluster, clusterctl: Path, repository: Path
) -> Installed:
    """The user guide's pool of 2, through the webhooks the Pods serve."""
    await generate_pool(installed, workload, clusterctl, repository, 2)
    return installed


def node_ids(workload: WorkloadCluster) -> list[str]:
    nodes = json.loads(kubectl(workload.kubeconfig, "get", "nodes", "-o", "json").stdout)
    return sorted(n["spec"]["providerID"] for n in nodes["items"])


async def test_the_pool_runs_through_the_webhooks_the_pods_serve(
    pool: Installed, workload: WorkloadCluster
) -> None:
    (mp,) = pool.objects("machinepools")
    assert mp["status"]["phase"] == "Running"
    assert node_ids(workload) == sorted(mp["spec"]["providerIDList"])

    # The validating webhook (failurePolicy Fail, reached through the webhook Service) refuses
    # what it forbids, with its own messages (the CRD has no rules of its own; kubectl shows
    # the causes of the webhook's Invalid answer).
    patch = json.dumps({"spec": {"clusterName": "another"}})
    refused = kubectl(pool.kubeconfig, "patch", f"mp/{POOL}", "-n", NAMESPACE, "--type=merge",
                      "-p", patch)  # fmt: skip
    assert refused.returncode != 0
    assert f'The MachinePool "{POOL}" is invalid' in refused.stderr
    assert "spec.clusterName: Forbidden: field is immutable" in refused.stderr
    assert "spec.template.spec.clusterName must be set to the same value" in refused.stderr

    # v1beta1 is served by the conversion webhook (the CRD stores v1beta2).
    old = json.loads(pool.kubectl(
        "get", f"machinepools.v1beta1.cluster.x-k8s.io/{POOL}", "-n", NAMESPACE, "-o", "json"
    ))  # fmt: skip
    assert old["apiVersion"] == "cluster.x-k8s.io/v1beta1"
    assert old["spec"]["replicas"] == 2
    assert old["spec"]["clusterName"] == CLUSTER


async def test_the_pool_scales(pool: Installed, workload: WorkloadCluster) -> None:
    pool.kubectl("scale", f"mp/{POOL}", "-n", NAMESPACE, "--replicas=3")
    await asyncio.to_thread(wait_pool, pool, 3)
    (mp,) = pool.objects("machinepools")
    assert len(node_ids(workload)) == 3
    assert node_ids(workload) == sorted(mp["spec"]["providerIDList"])


async def test_the_pool_rolls_to_a_new_version(pool: Installed, workload: WorkloadCluster) -> None:
    before = set(node_ids(workload))
    version = {"spec": {"template": {"spec": {"version": "v1.34.5"}}}}
    pool.kubectl("patch", f"mp/{POOL}", "-n", NAMESPACE, "--type=merge", "-p", json.dumps(version))

    def rolled() -> bool:
        machines = pool.objects("machines")
        (mp,) = pool.objects("machinepools")
        nodes = set(node_ids(workload))
        return (
            len(machines) == 3
            and all(m["spec"]["version"] == "v1.34.5" for m in machines)
            and (mp.get("status") or {}).get("readyReplicas") == 3
            and len(nodes) == 3
            and not nodes & before
        )

    try:
        await eventually(lambda: asyncio.to_thread(rolled), "3 new Nodes at v1.34.5", within=180)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{pool.logs()}") from None


# -- metrics through the Service -------------------------------------------------------------

SCRAPE = """
import json, os, ssl, sys, urllib.error, urllib.request
ctx = ssl.create_default_context()
ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # as insecure_skip_verify
own = open("/var/run/secrets/kubernetes.io/serviceaccount/token").read()
def scrape(token):
    request = urllib.request.Request(sys.argv[1])
    if token:
        request.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""
(bound, body), (none, _), (other, _) = scrape(own), scrape(None), scrape(os.environ["OTHER"])
print(json.dumps({"bound": bound, "none": none, "other": other,
                  "reconciles": "controller_runtime_reconcile_total" in body}))
"""


async def service_account_token(client: Client, name: str, namespace: str) -> str:
    await client.create(SERVICE_ACCOUNTS, {"metadata": {"name": name}}, namespace)
    answer = await client.request(
        "POST",
        SERVICE_ACCOUNTS.path(namespace, name) + "/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(answer["status"]["token"])


async def test_metrics_through_the_service_need_a_token_bound_to_the_reader_role(
    installed: Installed, image: images.BuiltImage
) -> None:
    """A Pod of ours, as Prometheus would be, scrapes the core's metrics Service with its
    ServiceAccount's token (bound to machinepool-metrics-reader), with none, and with the
    token of a ServiceAccount not bound to it."""
    client, namespace = installed.client, "scrape"
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    await client.create(NAMESPACES, {"metadata": {"name": namespace, "labels": labels}})
    await client.create(SERVICE_ACCOUNTS, {"metadata": {"name": "scraper"}}, namespace)
    binding = {
        "metadata": {"name": "scraper-metrics"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "machinepool-metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": namespace}],
    }  # fmt: skip
    await client.create(CLUSTER_ROLE_BINDINGS, binding)
    other = await service_account_token(client, "stranger", namespace)
    service = await client.get(SERVICES, "machinepool-controller-metrics", "machinepool-system")
    url = f"https://{service['spec']['clusterIP']}:8443/metrics"
    container = installed.pods["machinepool-system"]["spec"]["containers"][0]
    pod = {
        "metadata": {"name": "scrape"},
        "spec": {
            "serviceAccountName": "scraper",
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "scrape",
                    "image": f"docker.io/library/{image.spec.reference}",
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", SCRAPE, url],
                    "env": [{"name": "OTHER", "value": other}],
                    "securityContext": container["securityContext"],
                }
            ],
        },
    }
    await client.create(PODS, pod, namespace)
    done = await wait_for(
        client, PODS, namespace, "scrape",
        lambda p: (p or {}).get("status", {}).get("phase") in ("Succeeded", "Failed"),
        within=READY, what="the scrape Pod done",
    )  # fmt: skip
    logs = kubectl(installed.kubeconfig, "logs", "-n", namespace, "scrape")
    assert done is not None
    assert done["status"]["phase"] == "Succeeded", logs.stdout + logs.stderr
    seen = json.loads(logs.stdout.strip().splitlines()[-1])
    assert seen == {"bound": 200, "none": 401, "other": 403, "reconciles": True}


# -- two replicas of the core, one leading -------------------------------------------------

CORE = "machinepool-system"
CORE_LEASE = "machinepool-core-controller"
"""The core's Lease (its ``--name``), in its namespace (``--leader-election-namespace``)."""


def taken_from(lease: Obj | None, pod: str) -> bool:
    """The Lease is held, by a process not of ``pod``."""
    holder = str((lease or {}).get("spec", {}).get("holderIdentity") or "")
    return bool(holder) and not holder.startswith(f"{pod}_")


async def test_the_leaders_pod_deleted_another_replica_leads_and_the_pool_converges(
    pool: Installed,
) -> None:
    client = pool.client
    deployment = PROVIDER_NAMESPACES[CORE]
    pool.kubectl("scale", f"deployment/{deployment}", "-n", CORE, "--replicas=2")
    selector = f"control-plane={deployment}"

    async def replicas() -> dict[str, Obj] | None:
        pods = (await client.list(PODS, CORE, label_selector=selector)).items
        live = {p["metadata"]["name"]: p for p in pods if "deletionTimestamp" not in p["metadata"]}
        return live if len(live) == 2 and all(map(ready, live.values())) else None

    both = await eventually(replicas, "two core replicas Ready", within=READY, interval=0.5)
    lease = await client.get(LEASES, CORE_LEASE, CORE)
    (leader,) = [n for n in both if lease["spec"]["holderIdentity"].startswith(f"{n}_")]

    # Another replica takes the Lease: the standby, or the Pod that replaces the deleted one
    # (it starts campaigning while the standby waits its retry period; either may win).
    pool.kubectl("delete", "pod", leader, "-n", CORE, "--wait=false")
    taken = await wait_for(
        client, LEASES, CORE, CORE_LEASE,
        lambda obj: taken_from(obj, leader),
        within=READY, what=f"the Lease taken from {leader}",
    )  # fmt: skip
    assert taken is not None
    # The new leader reconciles: the pool converges on a new size (its webhooks still answer).
    pool.kubectl("scale", f"mp/{POOL}", "-n", NAMESPACE, "--replicas=2")
    await asyncio.to_thread(wait_pool, pool, 2)


async def test_the_leaders_container_killed_kubelet_restarts_it_and_the_pool_converges(
    pool: Installed,
) -> None:
    """The leader's process killed (SIGKILL to its container's task in the node's containerd,
    as the kernel's OOM killer or a crash would end it: no Lease released), not its Pod: the
    kubelet restarts the container in the same Pod, a replica takes the Lease once it expires,
    and the pool converges on a new size."""
    client = pool.client
    selector = f"control-plane={PROVIDER_NAMESPACES[CORE]}"
    lease = await client.get(LEASES, CORE_LEASE, CORE)
    holder = lease["spec"]["holderIdentity"]
    pods = (await client.list(PODS, CORE, label_selector=selector)).items
    (leader,) = [p for p in pods if holder.startswith(f"{p['metadata']['name']}_")]
    name = leader["metadata"]["name"]
    (status,) = leader["status"]["containerStatuses"]
    restarts = status["restartCount"]
    container_id = status["containerID"].removeprefix("containerd://")
    socket = str(pool.cp.node.socket)
    killed = await asyncio.to_thread(
        run, ["ctr", "--address", socket, "--namespace", "k8s.io",
              "tasks", "kill", "--signal", "SIGKILL", container_id],
    )  # fmt: skip
    assert killed.returncode == 0, killed.stderr
    started = time.monotonic()

    def restarted(pod: Obj | None) -> bool:
        (now,) = (pod or {}).get("status", {}).get("containerStatuses") or [{}]
        last = now.get("lastState", {}).get("terminated", {})
        return (
            now.get("restartCount") == restarts + 1
            and last.get("containerID") == status["containerID"]
            and last.get("exitCode") == 137  # 128 + SIGKILL
            and ready(pod)
        )

    try:
        await wait_for(client, PODS, CORE, name, restarted, within=READY,
                       what=f"{name}'s container restarted by the kubelet and Ready")  # fmt: skip
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{pool.logs()}") from None
    await wait_for(
        client, LEASES, CORE, CORE_LEASE,
        lambda obj: (obj or {}).get("spec", {}).get("holderIdentity") not in (None, "", holder),
        within=READY, what=f"the Lease taken from {holder}",
    )  # fmt: skip
    FIGURES["the leader's container killed to the Lease taken"] = (
        f"{time.monotonic() - started:.1f} s"
    )
    pool.kubectl("scale", f"mp/{POOL}", "-n", NAMESPACE, "--replicas=3")
    await asyncio.to_thread(wait_pool, pool, 3)


# -- a MachineHealthCheck remediates -------------------------------------------------------


async def test_a_health_check_remediates_a_node_whose_kubelet_stopped(
    pool: Installed, workload: WorkloadCluster
) -> None:
    """A MachineHealthCheck (admitted by the core's webhooks) marks the Machine whose Node
    turned Ready=Unknown (its kubelet stopped: the Sim cloud's fault, its instance still
    running), and the pool replaces it. The Sim Pod reports a silent Node Unknown after its
    node monitor grace period, 50 s as shipped."""
    check = {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineHealthCheck",
        "metadata": {"name": POOL, "namespace": NAMESPACE},
        "spec": {
            "clusterName": CLUSTER,
            "selector": {"matchLabels": {POOL_NAME_LABEL: POOL}},
            "checks": {
                "unhealthyNodeConditions": [
                    {"type": "Ready", "status": "Unknown", "timeoutSeconds": 1},
                    {"type": "Ready", "status": "False", "timeoutSeconds": 1},
                ]
            },
        },
    }
    pool.kubectl("apply", "-f", "-", stdin=json.dumps(check))
    machines = sorted(m["metadata"]["name"] for m in pool.objects("machines"))
    victim = machines[0]
    await SimCloud(pool.client).stop_kubelet(NAMESPACE, victim)

    def replaced() -> bool:
        names = {m["metadata"]["name"] for m in pool.objects("machines")}
        (mp,) = pool.objects("machinepools")
        return (
            victim not in names
            and len(names) == len(machines)
            and (mp.get("status") or {}).get("readyReplicas") == len(machines)
        )

    try:
        await eventually(
            lambda: asyncio.to_thread(replaced), f"{victim} replaced", within=180, interval=1
        )
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{pool.logs()}") from None
    assert len(node_ids(workload)) == len(machines)


# -- deletion --------------------------------------------------------------------------------


async def test_deleting_the_pool_leaves_nothing_behind(
    pool: Installed, workload: WorkloadCluster
) -> None:
    assert pool.objects("secrets", "-l", INSTANCE_SELECTOR)
    pool.kubectl("delete", f"mp/{POOL}", "-n", NAMESPACE, "--timeout=180s")

    def left() -> dict[str, list[str]]:
        """What of the pool is still there, by kind."""
        found = {kind: [o["metadata"]["name"] for o in pool.objects(kind)] for kind in KINDS}
        found["instance records"] = [
            o["metadata"]["name"] for o in pool.objects("secrets", "-l", INSTANCE_SELECTOR)
        ]
        found["workload Nodes"] = node_ids(workload)
        return {kind: names for kind, names in found.items() if names}

    try:
        await eventually(lambda: not left(), "nothing of the pool left", within=120, interval=1)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}: {left()}\n{pool.logs()}") from None


# -- clusterctl delete, then the self-signed overlay -----------------------------------------

RELEASE = Path(__file__).resolve().parents[3] / "deploy" / "release"
COMPONENTS = ("core-components.yaml", "bootstrap-components.yaml",
              "infrastructure-components.yaml")  # fmt: skip
"""What ``clusterctl init`` installed here, as the release ships it."""
DELETED_CLUSTER_WIDE = {"Namespace", "CustomResourceDefinition", "MutatingWebhookConfiguration",
                        "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
                        "ValidatingAdmissionPolicyBinding"}  # fmt: skip
"""The cluster-wide kinds ``clusterctl delete`` removes (the namespaces and CRDs only with
``--include-namespace`` and ``--include-crd``; the admission policy, a kind its list of
cluster-wide ones lacks, as if namespaced); it leaves the RBAC (docs/user-guide.md)."""
CLUSTER_WIDE = (
    "namespaces,customresourcedefinitions,mutatingwebhookconfigurations,"
    "validatingwebhookconfigurations,clusterroles,clusterrolebindings,"
    "validatingadmissionpolicies,validatingadmissionpolicybindings"
)
OURS = "cluster.x-k8s.io/provider in (cluster-api,bootstrap-kubeadm,infrastructure-sim)"
"""The user guide's selector of what our three providers installed."""


def shipped_cluster_wide() -> set[tuple[str, str]]:
    """(kind, name) of every cluster-wide object in the release's components."""
    found = set()
    for name in COMPONENTS:
        for obj in yaml.safe_load_all((RELEASE / name).read_text()):
            if obj and "namespace" not in obj["metadata"]:
                found.add((obj["kind"], obj["metadata"]["name"]))
    return found


def installed_cluster_wide(installed: Installed) -> set[tuple[str, str]]:
    listed = json.loads(installed.kubectl("get", CLUSTER_WIDE, "-l", OURS, "-o", "json"))
    return {(o["kind"], o["metadata"]["name"]) for o in listed["items"]}


async def test_clusterctl_delete_removes_the_providers_and_leaves_what_the_docs_say(
    pool: Installed, clusterctl: Path
) -> None:
    """docs/user-guide.md's uninstall, in its order: ``clusterctl delete --include-crd
    --include-namespace`` refuses while objects of our kinds exist, deleting nothing; the
    Cluster (and the MachineHealthCheck) deleted, the Sim, bootstrap and core providers one
    at a time, each one's CRDs gone before the next: our namespaces (with the Pods, Services,
    Certificates and the inventory in them), CRDs, webhook configurations and admission
    policy go, the RBAC stays
    until the guide's ``kubectl delete``, and cert-manager is left as it was."""
    delete = [str(clusterctl), "delete", f"--kubeconfig={pool.kubeconfig}",
              "--include-crd", "--include-namespace"]  # fmt: skip
    refused = await asyncio.to_thread(run, [*delete, "--all"], env=NO_VERSION_CHECK)
    assert refused.returncode != 0
    assert "Please delete these objects first" in refused.stderr, refused.stderr
    assert installed_cluster_wide(pool) == shipped_cluster_wide(), "nothing deleted"

    pool.kubectl("delete", "clusters,machinehealthchecks", "--all", "-A", "--timeout=60s")
    started = time.monotonic()
    # One provider at a time, each one's CRDs gone before the next (docs/user-guide.md says why).
    for provider, label in (
        ("--infrastructure=sim", "infrastructure-sim"),
        ("--bootstrap=kubeadm", "bootstrap-kubeadm"),
        ("--core=cluster-api", "cluster-api"),
    ):
        deleted = await asyncio.to_thread(run, [*delete, provider], env=NO_VERSION_CHECK)
        assert deleted.returncode == 0, deleted.stderr
        await asyncio.to_thread(pool.kubectl, "wait", "--for=delete", "crd", "--timeout=120s",
                                "-l", f"cluster.x-k8s.io/provider={label}")  # fmt: skip
    left = {(kind, name) for kind, name in shipped_cluster_wide()
            if kind not in DELETED_CLUSTER_WIDE}  # fmt: skip
    assert {kind for kind, _ in left} == {"ClusterRole", "ClusterRoleBinding"}

    async def only_left() -> bool:
        return await asyncio.to_thread(installed_cluster_wide, pool) == left

    try:
        await eventually(
            only_left,
            "our namespaces, CRDs and admission policy gone, the RBAC left",
            within=READY, interval=0.5,
        )  # fmt: skip
    except TimeoutError as exc:
        raise AssertionError(f"{exc}: {installed_cluster_wide(pool) - left}") from None
    FIGURES["`clusterctl delete` to our namespaces and CRDs gone"] = (
        f"{time.monotonic() - started:.1f} s"
    )
    pods = json.loads(pool.kubectl("get", "pods", "-A", "-o", "json"))["items"]
    assert not [p for p in pods if p["metadata"]["namespace"] in PROVIDER_NAMESPACES]

    pool.kubectl("delete", "clusterroles,clusterrolebindings", "-l", OURS)
    assert installed_cluster_wide(pool) == set()
    # cert-manager is not clusterctl's to delete here (it found it installed).
    available = pool.kubectl("get", "deployments", "-n", "cert-manager",
                             "-o", "jsonpath={.items[*].status.availableReplicas}")  # fmt: skip
    assert available.split() == ["1", "1", "1"]
    pool.kubectl("get", "crd", "certificates.cert-manager.io", "issuers.cert-manager.io")


async def test_the_self_signed_overlay_serves_the_webhooks_without_cert_manager(
    pool: Installed, tmp_path: Path
) -> None:
    """The user guide's install without cert-manager, on the cluster ``clusterctl delete``
    emptied: ``deploy/generate.py self-signed`` and ``kubectl apply --server-side -k``; the
    core's Pod Ready, and its webhooks answer with the overlay's CA in every caBundle: a
    v1beta1 MachinePool created (dry run) is converted and defaulted, a bad one refused. No
    Certificate or Issuer of cert-manager's is involved (the overlay has none)."""
    overlay = tmp_path / "self-signed"
    generated = run([sys.executable, str(RELEASE.parent / "generate.py"), "self-signed",
                     "--dir", str(overlay)])  # fmt: skip
    assert generated.returncode == 0, generated.stderr
    built = pool.kubectl("kustomize", str(overlay))
    assert "cert-manager.io" not in built
    started = time.monotonic()
    pool.kubectl("apply", "--server-side", "-k", str(overlay))
    client = pool.client
    selector = f"control-plane={PROVIDER_NAMESPACES[CORE]}"

    async def one_ready() -> bool:
        pods = (await client.list(PODS, CORE, label_selector=selector)).items
        return len(pods) == 1 and ready(pods[0])

    try:
        await eventually(one_ready, "the core's Pod Ready", within=READY, interval=0.5)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{pool.logs()}") from None
    FIGURES["the self-signed overlay applied to its Pod Ready"] = (
        f"{time.monotonic() - started:.1f} s"
    )

    pool.kubectl("create", "namespace", "self-signed")
    machine_pool: Obj = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachinePool",
        "metadata": {"name": "mp", "namespace": "self-signed"},
        "spec": {
            "clusterName": "c",
            "template": {"spec": {
                "clusterName": "c",
                "bootstrap": {"dataSecretName": "data"},
                "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                                      "kind": "SimMachinePool", "name": "mp"},
            }},
        },
    }  # fmt: skip
    created = json.loads(pool.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                      stdin=json.dumps(machine_pool)))  # fmt: skip
    assert created["apiVersion"] == "cluster.x-k8s.io/v1beta1"  # through the conversion webhook
    assert created["spec"]["replicas"] == 1  # defaulted by the mutating webhook
    machine_pool["spec"]["template"]["spec"]["clusterName"] = "other"
    refused = kubectl(pool.kubeconfig, "create", "--dry-run=server", "-f", "-",
                      stdin=json.dumps(machine_pool))  # fmt: skip
    assert refused.returncode != 0
    assert "spec.template.spec.clusterName must be set to the same value" in refused.stderr
