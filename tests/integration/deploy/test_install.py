"""The shipped manifests against a real kube-apiserver, and the controller under their RBAC.

1. Every clusterctl components file (variables substituted) passes server-side dry-run, then
   is applied for real, except the CRDs and webhook configurations: the session's other tests
   rely on the CRDs as the ``crds`` fixture installed them, and a webhook configuration
   pointing at a Service with no running pod would reject every MachinePool write. The
   Deployments are accepted; their image cannot run here (no kubelet), which is fine.
2. The cluster templates pass server-side dry-run once substituted.
3. ``kubectl auth can-i --as=<ServiceAccount>`` shows least privilege.
4. ``python -m machinepool run`` for core, kubeadm bootstrap and Sim, each with its
   Deployment's own flags and authenticated as its own ServiceAccount (token from the
   TokenRequest API), takes its Lease and reconciles one pool (finalizers, MachinePool status,
   adoption of the provider objects), with no "forbidden" in any log.
5. The same under the namespaced overlay (``deploy/config/namespaced``): the cluster-wide
   bindings are gone, the rules are granted in one namespace only, and the managers run
   with ``--namespace``; a request outside it would be refused, and none is made.

cert-manager is not installed here: stand-in CRDs for ``cert-manager.io/v1`` Issuer and
Certificate (schema-less) let the apiserver accept those objects. The management
kube-controller-manager runs the ClusterRole aggregation controller, as a user's does, so the
install is applied twice, as an upgrade applies it again over what that controller wrote.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from tests.support import wait_for
from tests.support.builders import kubeadm_config, machine_pool, sim_machine_pool
from tests.support.rbac import wait_aggregated
from tests.support.resources import (
    CLUSTERS,
    KUBEADM_CONFIGS,
    MACHINE_POOLS,
    SIM_MACHINE_POOLS,
)
from tests.support.scripts import deploy_generator

from machinepool.api import constants as c
from machinepool.controlplane import ControlPlane
from machinepool.controlplane.binaries import optional_binary
from machinepool.runtime import LEASES, Client, NotFound, Obj, Resource

REPO = Path(__file__).resolve().parents[3]
WAIT = 90.0
FIELD_MANAGER = "machinepool-deploy-test"
AWS_CREDENTIALS = "[default]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = x\n"


gen = deploy_generator()


def kubectl(
    cp: ControlPlane, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    binary = optional_binary("kubectl")
    assert binary is not None, "kubectl is missing: run `make controlplane`"
    return subprocess.run(
        [str(binary), f"--kubeconfig={cp.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def apply(cp: ControlPlane, docs: list[Obj]) -> subprocess.CompletedProcess[str]:
    """``kubectl apply --server-side`` of ``docs`` as this test's field manager."""
    return kubectl(
        cp, "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", "-",
        stdin=as_yaml(docs),
    )  # fmt: skip


def component_docs(component: str) -> list[Obj]:
    comp = next(x for x in gen.COMPONENTS if x.name == component)
    text = (REPO / "deploy/release" / comp.release_file).read_text()
    values = {"AWS_B64ENCODED_CREDENTIALS": base64.b64encode(AWS_CREDENTIALS.encode()).decode()}
    return [d for d in yaml.safe_load_all(gen.substitute(text, values)) if d]


def as_yaml(docs: list[Obj]) -> str:
    return "".join("---\n" + yaml.safe_dump(d) for d in docs)


SHARED_KINDS = {
    "CustomResourceDefinition",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}


BESIDE_UPSTREAM = "beside-upstream"
"""The core for a cluster that runs upstream's: an alternative to "core" (the same Deployment
and roles), so it is only dry-run here, never applied beside it."""


@pytest.fixture(scope="module")
def components() -> dict[str, list[Obj]]:
    return {comp.name: component_docs(comp.name) for comp in gen.COMPONENTS}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def installed(
    control_plane: ControlPlane,
    client: Client,
    crds: list[str],
    components: dict[str, list[Obj]],
    cert_manager_api: Callable[[Client], Awaitable[None]],
) -> AsyncIterator[dict[str, list[Obj]]]:
    """Dry-run everything, then apply the standalone install but the shared kinds; removed
    afterwards."""
    await cert_manager_api(client)
    namespaces = [d for docs in components.values() for d in docs if d["kind"] == "Namespace"]
    result = apply(control_plane, namespaces)
    assert result.returncode == 0, result.stderr
    standalone = {k: v for k, v in components.items() if k != BESIDE_UPSTREAM}
    local = [d for docs in standalone.values() for d in docs if d["kind"] not in SHARED_KINDS]
    try:
        for name, docs in components.items():
            dry = kubectl(
                control_plane,
                "apply",
                "--server-side",
                "--force-conflicts",
                "--dry-run=server",
                f"--field-manager={FIELD_MANAGER}",
                "-f",
                "-",
                stdin=as_yaml(docs),
            )
            assert dry.returncode == 0, f"{name}: {dry.stderr}"
        real = apply(control_plane, local)
        assert real.returncode == 0, real.stderr
        aggregated = [
            d["metadata"]["name"]
            for d in local
            if d["kind"] == "ClusterRole" and d.get("aggregationRule")
        ]
        await wait_aggregated(client, aggregated)
        yield standalone
    finally:
        # Waits for the namespaces to be gone: a later file on this control plane may install
        # the same RBAC, and a terminating namespace refuses its ServiceAccounts.
        kubectl(
            control_plane,
            "delete",
            "--ignore-not-found",
            "--timeout=90s",
            "-f",
            "-",
            stdin=as_yaml(list(reversed(local))),
        )


async def test_everything_applied_is_served_back(
    installed: dict[str, list[Obj]], control_plane: ControlPlane
) -> None:
    for name, docs in installed.items():
        local = [d for d in docs if d["kind"] not in SHARED_KINDS]
        got = kubectl(control_plane, "get", "-o", "name", "-f", "-", stdin=as_yaml(local))
        assert got.returncode == 0, f"{name}: {got.stderr}"
        assert len(got.stdout.split()) == len(local)


async def test_applying_again_over_the_running_install_is_an_upgrade_with_no_conflict(
    installed: dict[str, list[Obj]], control_plane: ControlPlane
) -> None:
    """``kubectl apply --server-side`` of the same release again, as an upgrade does: nothing
    the cluster's own controllers fill in (the aggregated roles' rules) conflicts with it."""
    local = [d for docs in installed.values() for d in docs if d["kind"] not in SHARED_KINDS]
    again = apply(control_plane, local)
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("flavor", ["sim", "aws"])
async def test_cluster_templates_pass_server_side_dry_run(
    control_plane: ControlPlane, crds: list[str], namespace: str, flavor: str
) -> None:
    text = (REPO / f"deploy/templates/cluster-template-machinepool-{flavor}.yaml").read_text()
    values = {
        "CLUSTER_NAME": "tpl",
        "NAMESPACE": namespace,
        "KUBERNETES_VERSION": "v1.34.4",
        "WORKER_MACHINE_COUNT": "2",
        "CONTROL_PLANE_ENDPOINT_HOST": "127.0.0.1",
    }
    result = kubectl(
        control_plane,
        "apply",
        "--server-side",
        "--dry-run=server",
        f"--field-manager={FIELD_MANAGER}",
        "-f",
        "-",
        stdin=gen.substitute(text, values),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("serverside-applied") == 4


# -- least privilege -----------------------------------------------------------------------------

SA = {
    "core": ("machinepool-system", "machinepool-manager"),
    "bootstrap": ("machinepool-kubeadm-bootstrap-system", "machinepool-kubeadm-bootstrap-manager"),
    "sim": ("machinepool-sim-system", "machinepool-sim-manager"),
    "aws": ("machinepool-aws-system", "machinepool-aws-manager"),
}

CAN_I = [
    # (component, verb, resource, scope, allowed)
    ("core", "delete", "secrets", "-A", False),
    ("core", "list", "secrets", "-A", False),
    ("core", "get", "secrets", "-A", True),
    ("core", "*", "*", "-A", False),
    ("core", "create", "pods", "-A", False),
    ("core", "delete", "nodes", "", False),
    ("core", "patch", "machinepools.cluster.x-k8s.io", "-A", True),
    ("core", "patch", "machinepools.cluster.x-k8s.io/status", "-A", True),
    ("core", "delete", "machinepools.cluster.x-k8s.io", "-A", False),
    ("core", "patch", "simmachinepools.infrastructure.cluster.x-k8s.io", "-A", True),
    ("core", "delete", "kubeadmconfigs.bootstrap.cluster.x-k8s.io", "-A", True),
    ("core", "update", "leases.coordination.k8s.io", "-n=machinepool-system", True),
    ("core", "update", "leases.coordination.k8s.io", "-n=kube-system", False),
    ("core", "create", "clusterrolebindings", "", False),
    ("bootstrap", "create", "secrets", "-A", True),
    ("bootstrap", "list", "secrets", "-A", False),
    ("bootstrap", "patch", "machinepools.cluster.x-k8s.io", "-A", False),
    ("bootstrap", "patch", "simmachinepools.infrastructure.cluster.x-k8s.io", "-A", False),
    ("sim", "create", "kubeadmconfigs.bootstrap.cluster.x-k8s.io", "-A", False),
    ("sim", "delete", "machines.cluster.x-k8s.io", "-A", True),
    ("sim", "create", "machines.cluster.x-k8s.io", "-A", False),
    ("sim", "update", "configmaps", "-A", False),
    ("aws", "create", "secrets", "-A", False),
    (
        "aws",
        "patch",
        "awsmachinepools.infrastructure.machinepool.cluster.x-k8s.io/status",
        "-A",
        True,
    ),
    ("aws", "*", "*", "-A", False),
]


@pytest.mark.parametrize(("component", "verb", "resource", "scope", "allowed"), CAN_I)
async def test_service_accounts_have_least_privilege(
    installed: dict[str, list[Obj]],
    control_plane: ControlPlane,
    component: str,
    verb: str,
    resource: str,
    scope: str,
    allowed: bool,
) -> None:
    ns, sa = SA[component]
    args = ["auth", "can-i", verb, resource, f"--as=system:serviceaccount:{ns}:{sa}"]
    result = kubectl(control_plane, *args, *([scope] if scope else []))
    assert result.stdout.strip() == ("yes" if allowed else "no"), result.stderr


# -- the controller under its own RBAC -------------------------------------------------------


async def service_account_kubeconfig(
    client: Client, control_plane: ControlPlane, namespace: str, name: str, path: Path
) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount with a TokenRequest token."""
    review = await client.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    admin = yaml.safe_load(Path(control_plane.kubeconfig).read_text())
    cluster = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "management", "cluster": cluster}],
        "users": [{"name": name, "user": {"token": review["status"]["token"]}}],
        "contexts": [{"name": name, "context": {"cluster": "management", "user": name}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def local_args(deployment: Obj, namespace: str) -> list[str]:
    """The Deployment's own flags, adapted to a process on this machine.

    Pod-only values change (the namespace the downward API would give, a free metrics port);
    the webhook flags go, since serving certificates come from cert-manager in a cluster and
    the webhooks have their own tests.
    """
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args: list[str] = []
    for arg in container["args"]:
        flag = arg.split("=", 1)[0]
        if flag.startswith("--webhook-"):
            continue
        if flag in ("--metrics-bind-address", "--diagnostics-address"):
            arg = f"{flag}=127.0.0.1:0"
        if flag == "--health-probe-bind-address":
            arg = f"{flag}=127.0.0.1:0"
        args.append(arg.replace("$(POD_NAMESPACE)", namespace))
    return args


@contextlib.asynccontextmanager
async def controller_process(
    args: list[str], log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "EXP_MACHINE_POOL")}
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "machinepool",
            "run",
            *args,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def until_or_exit(proc: asyncio.subprocess.Process, log: Path, awaitable: Any) -> Obj:
    """Await ``awaitable`` unless the process dies first or it takes too long; either way,
    fail with the process's log."""
    task = asyncio.ensure_future(awaitable)
    died = asyncio.ensure_future(proc.wait())
    done, _ = await asyncio.wait({task, died}, timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
    died.cancel()
    if task not in done:
        task.cancel()
        state = f"exited ({proc.returncode})" if died in done else f"still waiting after {WAIT}s"
        pytest.fail(f"controller {state}; its log:\n{log.read_text()[-4000:]}")
    result: Obj = task.result()
    return result


def pool_objects(namespace: str) -> list[tuple[Resource, Obj]]:
    name, cluster = "deploy-mp", "deploy-cluster"
    return [
        (
            CLUSTERS,
            {
                "apiVersion": CLUSTERS.api_version,
                "kind": CLUSTERS.kind,
                "metadata": {"name": cluster, "namespace": namespace},
                "spec": {},
            },
        ),
        (KUBEADM_CONFIGS, kubeadm_config(namespace, name, spec={})),
        (SIM_MACHINE_POOLS, sim_machine_pool(namespace, name, spec={})),
        (
            MACHINE_POOLS,
            machine_pool(
                namespace,
                name,
                cluster=cluster,
                version="v1.34.4",
                labels={c.CLUSTER_NAME_LABEL: cluster},
            ),
        ),
    ]


def owned(obj: Obj | None) -> bool:
    """Controller-owned by a MachinePool, as core makes the configs and infra pools it adopts."""
    refs = (obj["metadata"].get("ownerReferences") or []) if obj else []
    return any(r["kind"] == "MachinePool" and r.get("controller") for r in refs)


def has_finalizer(name: str) -> Callable[[Obj | None], bool]:
    return lambda o: o is not None and name in (o["metadata"].get("finalizers") or [])


def has_conditions(obj: Obj | None) -> bool:
    """A status with conditions: on a KubeadmConfig, only the bootstrap controller writes one
    (it has no finalizer, as upstream's has none)."""
    return bool(obj and (obj.get("status") or {}).get("conditions"))


def holds_lease(obj: Obj | None) -> bool:
    return bool(obj and (obj.get("spec") or {}).get("holderIdentity"))


NAMESPACE_TERMINATING = "because it is being terminated"
"""The apiserver's answer (403, from namespace lifecycle admission, not authorization) to a
write into a namespace being deleted: the control plane is shared, and our core, watching all
namespaces, may record an Event about another test's object while its namespace goes."""


def forbidden_lines(log: Path) -> list[str]:
    """Log lines of requests that authorization refused."""
    lines = log.read_text().splitlines()
    return [
        line
        for line in lines
        if ("forbidden" in line.lower() or " 403" in line) and NAMESPACE_TERMINATING not in line
    ]


async def start_component(
    stack: contextlib.AsyncExitStack,
    installed: dict[str, list[Obj]],
    control_plane: ControlPlane,
    client: Client,
    component: str,
    tmp_path: Path,
    deployment: Obj | None = None,
) -> tuple[asyncio.subprocess.Process, Path, str]:
    """Start ``component`` as its Deployment (the shipped one by default) would run it, as
    its ServiceAccount."""
    sa_namespace, sa = SA[component]
    kubeconfig = await service_account_kubeconfig(
        client, control_plane, sa_namespace, sa, tmp_path / f"{component}.kubeconfig"
    )
    if deployment is None:
        deployment = next(d for d in installed[component] if d["kind"] == "Deployment")
    args = local_args(deployment, sa_namespace)
    lease = next(a.split("=", 1)[1] for a in args if a.startswith("--name="))
    # A Lease left by an earlier run would otherwise have to expire first.
    with contextlib.suppress(NotFound):
        await client.delete(LEASES, lease, sa_namespace)
    log = tmp_path / f"{component}.log"
    proc = await stack.enter_async_context(
        controller_process([*args, f"--kubeconfig={kubeconfig}"], log)
    )
    await until_or_exit(
        proc, log, wait_for(client, LEASES, sa_namespace, lease, holds_lease, within=WAIT)
    )
    return proc, log, lease


async def test_controllers_run_under_their_service_accounts(
    installed: dict[str, list[Obj]],
    control_plane: ControlPlane,
    client: Client,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Core, kubeadm bootstrap and Sim, each with its own token, reconcile one pool together:
    each takes its Lease and writes what it owns (core and Sim their finalizers, bootstrap the
    config's status), core adopts the provider objects
    (through the aggregated rules), and no log mentions a forbidden request."""
    for res, body in pool_objects(namespace):
        await client.create(res, body, namespace)
    expectations = {
        "core": (MACHINE_POOLS, has_finalizer(c.MACHINE_POOL_FINALIZER)),
        "bootstrap": (KUBEADM_CONFIGS, has_conditions),
        "sim": (SIM_MACHINE_POOLS, has_finalizer("simmachinepool.infrastructure.cluster.x-k8s.io")),
    }
    logs: dict[str, Path] = {}
    async with contextlib.AsyncExitStack() as stack:
        for component, (res, predicate) in expectations.items():
            proc, log, _ = await start_component(
                stack, installed, control_plane, client, component, tmp_path
            )
            logs[component] = log
            await until_or_exit(
                proc, log, wait_for(client, res, namespace, "deploy-mp", predicate, within=WAIT)
            )
        # Core's status, and adoption of the provider objects (the aggregated rules).
        await settle(
            client, MACHINE_POOLS, namespace, lambda o: bool(o and o.get("status")), logs["core"]
        )
        for res in (KUBEADM_CONFIGS, SIM_MACHINE_POOLS):
            await settle(client, res, namespace, owned, logs["core"])
    for component, log in logs.items():
        forbidden = forbidden_lines(log)
        assert not forbidden, f"{component}:\n" + "\n".join(forbidden[:20])


async def settle(
    client: Client,
    res: Resource,
    namespace: str,
    predicate: Callable[[Obj | None], bool],
    log: Path,
) -> Obj | None:
    """Wait for ``predicate`` on the pool's ``res`` object; on timeout fail with ``log``."""
    try:
        return await wait_for(client, res, namespace, "deploy-mp", predicate, within=WAIT)
    except TimeoutError:
        pytest.fail(f"{res.kind} never got there; controller log:\n{log.read_text()[-4000:]}")


NAMESPACED_OVERLAY = REPO / "deploy/config/namespaced"
OVERLAY_NAMESPACE = "tenant-a"
RBAC_KINDS = {"RoleBinding", "ClusterRole", "ClusterRoleBinding"}


async def test_controllers_run_namespaced_under_the_overlay(
    installed: dict[str, list[Obj]],
    control_plane: ControlPlane,
    client: Client,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Core, kubeadm bootstrap and Sim, rendered from the namespaced overlay for this test's
    namespace, reconcile one pool there with no cluster-wide binding of their rules."""
    rendered = kubectl(control_plane, "kustomize", str(NAMESPACED_OVERLAY))
    assert rendered.returncode == 0, rendered.stderr
    docs = [
        d for d in yaml.safe_load_all(rendered.stdout.replace(OVERLAY_NAMESPACE, namespace)) if d
    ]
    shipped_bindings = [
        d for docs_ in installed.values() for d in docs_ if d["kind"] == "ClusterRoleBinding"
    ]
    overlay_rbac = [
        d
        for d in docs
        if (
            d["kind"] in RBAC_KINDS and d["metadata"]["name"] == "machinepool-namespaced-crd-reader"
        )
        or (d["kind"] == "RoleBinding" and d["metadata"].get("namespace") == namespace)
    ]
    metrics_auth = {
        "machinepool-metrics-auth-rolebinding",
        "machinepool-kubeadm-bootstrap-metrics-auth-rolebinding",
        "machinepool-sim-metrics-auth-rolebinding",
    }
    manager_bindings = [
        d
        for d in shipped_bindings
        if d["metadata"]["name"].endswith("-rolebinding")
        and d["metadata"]["name"] not in metrics_auth
    ]
    # Cluster-wide beyond the CRD reader: only the reviews behind secure /metrics, which
    # are cluster-scoped (create TokenReviews and SubjectAccessReviews, nothing to read).
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"} == {
        "machinepool-namespaced-crd-reader",
        *metrics_auth,
    }
    deployments = {
        comp: next(
            d
            for d in docs
            if d["kind"] == "Deployment" and d["metadata"]["namespace"] == SA[comp][0]
        )
        for comp in ("core", "bootstrap", "sim")
    }
    for deployment in deployments.values():
        assert (
            f"--namespace={namespace}"
            in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        )
    for res, body in pool_objects(namespace):
        await client.create(res, body, namespace)
    removed = kubectl(control_plane, "delete", "-f", "-", stdin=as_yaml(manager_bindings))
    assert removed.returncode == 0, removed.stderr
    logs: dict[str, Path] = {}
    try:
        applied = kubectl(control_plane, "apply", "-f", "-", stdin=as_yaml(overlay_rbac))
        assert applied.returncode == 0, applied.stderr
        expectations = {
            "core": (MACHINE_POOLS, has_finalizer(c.MACHINE_POOL_FINALIZER)),
            "bootstrap": (KUBEADM_CONFIGS, has_conditions),
            "sim": (
                SIM_MACHINE_POOLS,
                has_finalizer("simmachinepool.infrastructure.cluster.x-k8s.io"),
            ),
        }
        async with contextlib.AsyncExitStack() as stack:
            for component, (res, predicate) in expectations.items():
                proc, log, _ = await start_component(
                    stack,
                    installed,
                    control_plane,
                    client,
                    component,
                    tmp_path,
                    deployments[component],
                )
                logs[component] = log
                await until_or_exit(
                    proc, log, wait_for(client, res, namespace, "deploy-mp", predicate, within=WAIT)
                )
            await settle(
                client,
                MACHINE_POOLS,
                namespace,
                lambda o: bool(o and o.get("status")),
                logs["core"],
            )
            for res in (KUBEADM_CONFIGS, SIM_MACHINE_POOLS):
                await settle(client, res, namespace, owned, logs["core"])
    finally:
        kubectl(control_plane, "apply", "-f", "-", stdin=as_yaml(manager_bindings))
        kubectl(
            control_plane,
            "delete",
            "--ignore-not-found",
            "-f",
            "-",
            stdin=as_yaml([d for d in overlay_rbac if d["kind"] != "RoleBinding"]),
        )
    for component, log in logs.items():
        forbidden = forbidden_lines(log)
        assert not forbidden, f"{component}:\n" + "\n".join(forbidden[:20])
